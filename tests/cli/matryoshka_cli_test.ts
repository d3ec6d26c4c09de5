/**
 * `ck-synapse embed --dimensions N` (issue 19 item 5): a declared Matryoshka width is served under
 * its derived fingerprint, the model's own width is the plain space, another width is refused
 * naming the allowed widths, and a value that is not a positive integer is a usage error.
 */
import assert from "node:assert/strict";
import { cli } from "./_launcher.ts";
import { MODELS } from "../_helpers.ts";

const TINY = `${MODELS}/synapse-tiny-embed`;
const CONFIG = JSON.stringify({
  certification: "warn",
  preload_models: [{
    engine: "ort",
    model_id: "mrl",
    model_path: TINY,
    tokenizer_path: `${TINY}/tokenizer.json`,
    matryoshka_dims: [16],
  }],
});

Deno.test("ck-synapse embed --dimensions serves a declared width, refuses another, and checks the flag", async () => {
  const env = { SYNAPSE_CONFIG_JSON: CONFIG };
  const [cut, full, off, bad] = await Promise.all([
    cli(["embed", "hello world", "--dimensions", "16", "--json"], env),
    cli(["embed", "hello world", "--dimensions", "32", "--json"], env),
    cli(["embed", "a", "b", "--dimensions", "8", "--json"], env),
    cli(["embed", "hello", "--dimensions", "sixteen"], env),
  ]);
  assert.equal(cut.code, 0, cut.stderr);
  const c = JSON.parse(cut.stdout);
  assert.equal(c.dims, 16);
  assert.equal(c.vectors[0].vector.length, 16);
  assert.equal(full.code, 0, full.stderr);
  const f = JSON.parse(full.stdout);
  assert.equal(f.dims, 32);
  assert.notEqual(c.fingerprint, f.fingerprint);
  assert.equal(off.code, 1, off.stderr);
  const e = JSON.parse(off.stdout).error;
  assert.equal(e.code, "invalid_request");
  assert.equal(e.details.field, "dimensions");
  assert.deepEqual(e.details.allowed_dims, [16]);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /--dimensions must be a positive integer/);
});
