/**
 * The launcher's worker permissions (newcomer replay of issue 9): Deno grants unix sockets and
 * programs by exact path, so a generation model whose entry names its own `worker_runtime_dir`
 * or `worker_bin` is refused at boot with the variable that fixes it (not a transient
 * `NotCapable` on every load), and the runtime dir and worker program given through
 * SYNAPSE_WORKER_RUNTIME_DIR / SYNAPSE_LLAMA_WORKER_BIN, or under another TMPDIR, work.
 */
import assert from "node:assert/strict";
import { MODELS, ROOT } from "../_helpers.ts";
import { cliIn, isolatedEnv } from "./_launcher.ts";

const GEN = `${MODELS}/synapse-tiny-llama`;

function genConfig(extra: Record<string, unknown> = {}): string {
  return JSON.stringify({
    certification: "warn",
    preload_models: [{
      engine: "llama",
      model_path: GEN,
      tokenizer_path: `${GEN}/tokenizer.json`,
      task: "generate",
      model_id: "gen",
      ...extra,
    }],
  });
}

const GENERATE = ["generate", "--model", "gen", "--max-tokens", "2", "--json", "Hello"];

Deno.test("launcher: an entry's own worker_runtime_dir is refused at boot, naming SYNAPSE_WORKER_RUNTIME_DIR, which works", async () => {
  const home = await isolatedEnv();
  try {
    const rt = `${home.dir}/rt`;
    home.env.SYNAPSE_CONFIG_JSON = genConfig({ worker_runtime_dir: rt });
    const refused = await cliIn(home, GENERATE);
    assert.equal(refused.code, 2, refused.stderr + refused.stdout);
    const out = refused.stdout + refused.stderr;
    assert.match(out, /may not listen on the worker socket/);
    assert.match(out, new RegExp(`SYNAPSE_WORKER_RUNTIME_DIR=${rt}`));
    assert.doesNotMatch(out, /NotCapable|Requires net access/);
    // --json carries the refusal's details.
    const body = JSON.parse(refused.stdout);
    assert.equal(body.code, "invalid_request");
    assert.deepEqual([body.details.field, body.details.reason], [
      "worker_runtime_dir",
      "not_permitted",
    ]);

    home.env.SYNAPSE_CONFIG_JSON = genConfig();
    home.env.SYNAPSE_WORKER_RUNTIME_DIR = rt;
    const ok = await cliIn(home, GENERATE);
    assert.equal(ok.code, 0, ok.stderr);
    assert.equal(JSON.parse(ok.stdout).n_gen, 2);
    assert.equal((await Deno.stat(rt)).mode! & 0o777, 0o700);
  } finally {
    await Deno.remove(home.dir, { recursive: true });
  }
});

Deno.test("launcher: an entry's own worker_bin is refused at boot, naming SYNAPSE_LLAMA_WORKER_BIN, which works", async () => {
  const home = await isolatedEnv();
  try {
    const bin = `${home.dir}/wbin`;
    await Deno.symlink(`${ROOT}/ck-synapse-worker-llama`, bin);
    home.env.SYNAPSE_CONFIG_JSON = genConfig({ worker_bin: bin });
    const refused = await cliIn(home, GENERATE);
    assert.equal(refused.code, 2, refused.stderr + refused.stdout);
    const out = refused.stdout + refused.stderr;
    assert.match(out, /may not run the worker program/);
    assert.match(out, new RegExp(`SYNAPSE_LLAMA_WORKER_BIN=${bin}`));

    home.env.SYNAPSE_CONFIG_JSON = genConfig();
    home.env.SYNAPSE_LLAMA_WORKER_BIN = bin;
    const ok = await cliIn(home, GENERATE);
    assert.equal(ok.code, 0, ok.stderr);
    assert.equal(JSON.parse(ok.stdout).n_gen, 2);
  } finally {
    await Deno.remove(home.dir, { recursive: true });
  }
});

Deno.test("launcher: a generation model works under another TMPDIR (no write to /tmp needed)", async () => {
  const home = await isolatedEnv();
  try {
    const tmp = `${home.dir}/tmp`;
    await Deno.mkdir(tmp, { mode: 0o700 });
    home.env.TMPDIR = tmp;
    home.env.SYNAPSE_CONFIG_JSON = genConfig();
    const ok = await cliIn(home, GENERATE);
    assert.equal(ok.code, 0, ok.stderr);
    assert.equal(JSON.parse(ok.stdout).n_gen, 2);
    assert.ok((await Deno.stat(`${tmp}/synapse-${Deno.uid()}/workers`)).isDirectory);
  } finally {
    await Deno.remove(home.dir, { recursive: true });
  }
});
