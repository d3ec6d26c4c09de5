/**
 * Config `model_aliases` (docs/config.md "Model aliases"): a table of client model names onto
 * served model ids, parsed strictly — every malformed entry refused at load naming its key, never
 * echoing a name that is not valid Unicode.
 */
import assert from "node:assert/strict";
import { DEFAULT_CONFIG } from "../../lib/config/defaults.ts";
import { loadConfig } from "../../lib/config/loader.ts";
import { SynapseError } from "../../lib/contract/errors.ts";

function load(layer: unknown, extra: Record<string, string> = {}) {
  return loadConfig({
    env: { SYNAPSE_CONFIG_JSON: JSON.stringify(layer), ...extra },
    cwd: "/nowhere",
    readFile: () => undefined,
  }).config;
}

function refusedWith(layer: unknown): SynapseError {
  try {
    load(layer);
  } catch (err) {
    assert.ok(err instanceof SynapseError, `expected a SynapseError, got ${err}`);
    assert.equal(err.code, "invalid_request");
    assert.equal(err.details?.file, "env:SYNAPSE_CONFIG_JSON");
    return err;
  }
  assert.fail(`expected ${JSON.stringify(layer)} to be refused`);
}

Deno.test("model_aliases defaults to an empty table and parses a table of names", () => {
  assert.deepEqual(DEFAULT_CONFIG.model_aliases, {});
  assert.deepEqual(load({}).model_aliases, {});
  const table = {
    "text-embedding-3-small": "synapse-tiny-embed",
    "text-embedding-ada-002": "synapse-tiny-embed",
    "rerank-english-v3.0": "synapse-tiny-rerank",
  };
  const config = load({ model_aliases: table });
  assert.deepEqual(config.model_aliases, table);
  // A copy: the resolved config shares nothing with the layer.
  assert.notEqual(config.model_aliases, table);
});

Deno.test("model_aliases refuses a name mapped to itself and a chain, naming the key", () => {
  const self = refusedWith({ model_aliases: { a: "a" } });
  assert.equal(self.details?.key, "model_aliases.a");
  assert.match(self.message, /'model_aliases\.a'.*maps the name to itself/);
  const chain = refusedWith({ model_aliases: { a: "b", b: "synapse-tiny-embed" } });
  assert.equal(chain.details?.key, "model_aliases.a");
  assert.match(chain.message, /target 'b' is itself a model alias, and aliases do not chain/);
});

Deno.test("model_aliases refuses malformed names and targets: empty, too long, lone surrogate, not a string", () => {
  const empty = refusedWith({ model_aliases: { "": "synapse-tiny-embed" } });
  assert.equal(empty.details?.key, "model_aliases");
  assert.match(empty.message, /has a name that is empty/);
  const long = "m".repeat(257);
  const tooLong = refusedWith({ model_aliases: { [long]: "synapse-tiny-embed" } });
  assert.equal(tooLong.details?.key, "model_aliases");
  assert.match(tooLong.message, /longer than 256 UTF-16 code units/);
  // The 256-unit name, the longest a request's `model` may be, is accepted.
  assert.ok(
    Object.hasOwn(
      load({ model_aliases: { ["m".repeat(256)]: "x" } }).model_aliases,
      "m".repeat(256),
    ),
  );
  // A lone surrogate is named by the table and never echoed.
  const lone = refusedWith({ model_aliases: { "emb\ud800": "synapse-tiny-embed" } });
  assert.equal(lone.details?.key, "model_aliases");
  assert.match(lone.message, /has a name that has a lone UTF-16 surrogate/);
  assert.ok(!lone.message.includes("\ud800"));
  const target = refusedWith({ model_aliases: { emb: "tiny\udc00" } });
  assert.equal(target.details?.key, "model_aliases.emb");
  assert.match(target.message, /its target has a lone UTF-16 surrogate/);
  assert.ok(!target.message.includes("\udc00"));
  const emptyTarget = refusedWith({ model_aliases: { emb: "" } });
  assert.equal(emptyTarget.details?.key, "model_aliases.emb");
  assert.match(emptyTarget.message, /its target is empty/);
  const notString = refusedWith({ model_aliases: { emb: 3 } });
  assert.equal(notString.details?.key, "model_aliases.emb");
  const notObject = refusedWith({ model_aliases: ["a"] });
  assert.equal(notObject.details?.key, "model_aliases");
});

Deno.test("model_aliases of a later layer replaces the table below it, as preload_models does", async () => {
  const dir = await Deno.makeTempDir({ prefix: "synapse_model_aliases_" });
  try {
    const file = `${dir}/synapse.jsonc`;
    await Deno.writeTextFile(file, `{"model_aliases": {"a": "x", "b": "y"}}`);
    const config = loadConfig({
      env: {
        SYNAPSE_CONFIG_PATH: file,
        SYNAPSE_CONFIG_JSON: JSON.stringify({ model_aliases: { c: "z" } }),
      },
      cwd: dir,
    }).config;
    assert.deepEqual(config.model_aliases, { c: "z" });
    const kept = loadConfig({
      env: { SYNAPSE_CONFIG_PATH: file, SYNAPSE_CONFIG_JSON: JSON.stringify({ knob: "quiet" }) },
      cwd: dir,
    }).config;
    assert.deepEqual(kept.model_aliases, { a: "x", b: "y" });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
