/**
 * A config key `__proto__` is a key like any other: refused as unknown by its path, never
 * dropped unseen (jsonc-parser's `parse` and the schema library would each make it vanish:
 * assigning it sets an object's prototype).
 */
import assert from "node:assert/strict";
import { parseJsoncText, parseLayer } from "../../lib/config/_layer.ts";
import { SynapseError } from "../../lib/contract/errors.ts";

const OPTIONS = { userOnlyAllowed: true };

function refusedKey(text: string): string {
  try {
    parseLayer(text, "synapse.jsonc", OPTIONS);
  } catch (err) {
    assert.ok(err instanceof SynapseError, String(err));
    assert.equal(err.code, "invalid_request");
    assert.equal(err.details?.file, "synapse.jsonc");
    return String(err.details?.key);
  }
  assert.fail(`loaded: ${text}`);
}

Deno.test("parseJsoncText() keeps a key __proto__ as an own key and the prototype as it was", () => {
  const v = parseJsoncText(
    '{"a": 1, /* c */ "__proto__": {"x": 2}, "b": [1, {"c": null},], "a": 3,}',
    "t",
  ) as Record<string, unknown>;
  assert.deepEqual(Object.keys(v), ["a", "__proto__", "b"]);
  assert.equal(Object.getPrototypeOf(v), Object.prototype);
  assert.equal(JSON.stringify(v), '{"a":3,"__proto__":{"x":2},"b":[1,{"c":null}]}');
});

Deno.test("a config key __proto__ anywhere is refused by its path", () => {
  assert.equal(refusedKey('{"__proto__": {"knob": "fast"}}'), "__proto__");
  assert.equal(
    refusedKey('{"model_aliases": {"__proto__": "tiny-embed"}}'),
    "model_aliases.__proto__",
  );
  assert.equal(refusedKey('{"http": {"__proto__": {}}}'), "http.__proto__");
  assert.equal(
    refusedKey('{"preload_models": [{"engine": "ort", "__proto__": {}}]}'),
    "preload_models[0].__proto__",
  );
  // The same text through JSON.parse (SYNAPSE_CONFIG_JSON's path) has the own key too.
  const v = JSON.parse('{"model_aliases": {"__proto__": "x"}}');
  assert.deepEqual(Object.keys(v.model_aliases), ["__proto__"]);
});
