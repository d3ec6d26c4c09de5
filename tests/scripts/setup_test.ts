/**
 * scripts/setup in a scratch copy of the checkout (scripts, package files, and this checkout's
 * node_modules through a link): by default it says what each stage does and generates the test
 * models only, never the benchmark models; a setup with nothing to do prints nothing.
 */
import assert from "node:assert/strict";
import { ROOT } from "../_helpers.ts";

async function run(root: string, args: string[]): Promise<{ code: number; stderr: string }> {
  const out = await new Deno.Command(`${root}/scripts/setup`, {
    args,
    env: { PATH: Deno.env.get("PATH") ?? "/usr/bin:/bin", HOME: root },
    clearEnv: true,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(new TextDecoder().decode(out.stdout), "", "setup writes nothing on stdout");
  return { code: out.code, stderr: new TextDecoder().decode(out.stderr) };
}

Deno.test("scripts/setup says what it does, makes the test models and no bench models; a second run is silent", async () => {
  const root = await Deno.makeTempDir({ prefix: "synapse-setup-test-" });
  try {
    const cp = await new Deno.Command("cp", {
      args: [
        "-r",
        `${ROOT}/scripts`,
        // scripts/gen_models.ts quantizes the int8 fixtures with lib/quant/.
        `${ROOT}/lib`,
        `${ROOT}/package.json`,
        `${ROOT}/package-lock.json`,
        `${ROOT}/deno.json`,
        root,
      ],
    }).output();
    assert.ok(cp.success);
    await Deno.symlink(await Deno.realPath(`${ROOT}/node_modules`), `${root}/node_modules`);

    const first = await run(root, []);
    assert.equal(first.code, 0, first.stderr);
    const stages = first.stderr.split("\n").filter((l) => l.startsWith("setup: "));
    assert.equal(stages.length, 2, first.stderr);
    assert.match(stages[0]!, /^setup: generating the test models \(fixtures\/models: .*\) \.\.\.$/);
    assert.match(stages[1]!, /^setup: ready \(\d+ s\)$/);
    for (
      const m of [
        "synapse-tiny-embed",
        "synapse-tiny-rerank",
        "synapse-tiny-embed-nan",
        "synapse-tiny-embed-f16",
        "synapse-tiny-embed-f16-perturbed",
        "synapse-tiny-embed-int8",
        "synapse-tiny-embed-int8-badscale",
        "synapse-tiny-llama",
        "synapse-tiny-llama-bytes",
        "synapse-tiny-qwen",
      ]
    ) {
      assert.ok((await Deno.stat(`${root}/fixtures/models/${m}/.complete`)).isFile, m);
    }
    // The benchmark models (330 MB) come only with --tests / --bench.
    await assert.rejects(Deno.lstat(`${root}/fixtures/bench`), Deno.errors.NotFound);

    const second = await run(root, []);
    assert.deepEqual(second, { code: 0, stderr: "" });
    const bad = await run(root, ["--bogus"]);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /^setup: unknown flag --bogus/);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});
