/**
 * scripts/build_shim's flags: an unknown one is refused with the list (never ignored); with the
 * shim up to date, a second run does nothing and leaves the prebuilt build's identity as it was.
 */
import assert from "node:assert/strict";
import { ROOT } from "../_helpers.ts";

async function buildShim(...args: string[]): Promise<Deno.CommandOutput> {
  return await new Deno.Command(`${ROOT}/scripts/build_shim`, {
    args,
    stdout: "piped",
    stderr: "piped",
  })
    .output();
}

Deno.test("scripts/build_shim refuses an unknown flag by name and lists its flags", async () => {
  const out = await buildShim("--natve");
  assert.equal(out.code, 2);
  assert.match(
    new TextDecoder().decode(out.stderr),
    /unknown flag --natve \(flags: --force, --native, --prebuilt\)/,
  );
});

Deno.test("scripts/build_shim with the shim up to date does nothing", async () => {
  const shim = `${ROOT}/node_modules/.synapse/libsynapse_llama.so`;
  const first = await buildShim();
  assert.equal(first.code, 0, new TextDecoder().decode(first.stderr));
  const before = (await Deno.stat(shim)).mtime?.getTime();
  const again = await buildShim();
  assert.equal(again.code, 0);
  assert.equal(new TextDecoder().decode(again.stderr), "");
  assert.equal((await Deno.stat(shim)).mtime?.getTime(), before);
});
