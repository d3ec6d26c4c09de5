/**
 * lib/models/model_aliases.ts: the boot check of config `model_aliases` against the configured
 * and catalog model ids, and the lookup of a requested name (a real model id always wins).
 */
import assert from "node:assert/strict";
import { checkModelAliases, modelAliasTarget } from "../../lib/models/model_aliases.ts";
import { SynapseError } from "../../lib/contract/errors.ts";

const IDS = { configured: ["minilm", "qwen"], catalog: ["gte-modernbert-base"] };

function refusal(fn: () => void): SynapseError {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof SynapseError, `expected a SynapseError, got ${err}`);
    assert.equal(err.code, "invalid_request");
    return err;
  }
  assert.fail("expected a refusal");
}

Deno.test("checkModelAliases() accepts targets that are configured or catalog ids", () => {
  checkModelAliases({}, IDS);
  checkModelAliases(
    { "text-embedding-3-small": "minilm", "gpt-4o-mini": "qwen", "gte": "gte-modernbert-base" },
    IDS,
  );
});

Deno.test("checkModelAliases() refuses a name that is a configured or catalog model id", () => {
  const configured = refusal(() => checkModelAliases({ minilm: "qwen" }, IDS));
  assert.deepEqual(configured.details, {
    key: "model_aliases.minilm",
    model_alias: "minilm",
    model_id: "minilm",
    reason: "shadows_model_id",
  });
  assert.match(configured.message, /names the configured model 'minilm'/);
  const catalog = refusal(() => checkModelAliases({ "gte-modernbert-base": "minilm" }, IDS));
  assert.equal(catalog.details?.reason, "shadows_model_id");
  assert.match(catalog.message, /names the catalog model 'gte-modernbert-base'/);
});

Deno.test("checkModelAliases() refuses a target no configured or catalog model has, listing the served ids", () => {
  const e = refusal(() => checkModelAliases({ a: "minilm", b: "bge" }, IDS));
  assert.deepEqual(e.details, {
    key: "model_aliases.b",
    model_alias: "b",
    model_id: "bge",
    reason: "unknown_target",
    served: ["minilm", "qwen"],
  });
  assert.match(e.message, /maps to 'bge', which is no configured model \(serving: minilm, qwen\)/);
  const none = refusal(() => checkModelAliases({ a: "x" }, { configured: [], catalog: [] }));
  assert.match(none.message, /serving: none/);
});

Deno.test("modelAliasTarget() maps an alias to its target unless a model has the name as its id", () => {
  const table = { "text-embedding-3-small": "minilm" };
  const none = () => false;
  assert.deepEqual(modelAliasTarget(table, "text-embedding-3-small", none), {
    modelId: "minilm",
    alias: "text-embedding-3-small",
  });
  assert.deepEqual(modelAliasTarget(table, "minilm", none), { modelId: "minilm" });
  assert.deepEqual(modelAliasTarget(table, "other", none), { modelId: "other" });
  // A model loaded later under the alias's name is served as itself.
  assert.deepEqual(
    modelAliasTarget(table, "text-embedding-3-small", (id) => id === "text-embedding-3-small"),
    { modelId: "text-embedding-3-small" },
  );
  // Only the table's own names: nothing inherited from Object.prototype.
  assert.deepEqual(modelAliasTarget(table, "toString", none), { modelId: "toString" });
  assert.deepEqual(modelAliasTarget(table, "constructor", none), { modelId: "constructor" });
});
