/**
 * The JSON Schema → GBNF compiler: its grammars pass the module's GBNF check, accept compact JSON
 * that validates against the schema and nothing else (no free whitespace, bounded numbers), and
 * every keyword outside the subset is refused naming its path.
 */
import assert from "node:assert/strict";
import { checkGbnf } from "../../lib/engines/llama/gbnf.ts";
import { matchGbnf } from "../../lib/engines/llama/gbnf_match.ts";
import {
  compileJsonSchema,
  gbnfLiteral,
  jsonObjectGrammar,
} from "../../lib/engines/llama/json_schema_gbnf.ts";
import { SynapseError } from "../../lib/contract/errors.ts";

function verdicts(schema: unknown, texts: string[]): string[] {
  const g = checkGbnf(compileJsonSchema(schema, "schema").gbnf);
  return texts.map((t) => matchGbnf(g, t).verdict);
}

Deno.test("compileJsonSchema() accepts exactly the compact JSON the schema allows", () => {
  const person = {
    type: "object",
    properties: {
      name: { type: "string", minLength: 1, maxLength: 4 },
      age: { type: "integer" },
      score: { type: ["number", "null"] },
      tags: { type: "array", items: { enum: ["a", "b"] }, minItems: 1, maxItems: 2 },
      kind: { const: "p" },
    },
    required: ["name", "age"],
    additionalProperties: false,
  };
  const cases: [string, string][] = [
    ['{"name":"ab","age":3}', "accepted"],
    ['{"name":"ab","age":-30,"score":1.5e10}', "accepted"],
    ['{"name":"ab","age":0,"score":null,"tags":["a","b"],"kind":"p"}', "accepted"],
    ['{"name":"a\\"c","age":1,"kind":"p"}', "accepted"],
    // Whitespace is never free: a model cannot pad with blanks.
    ['{"name":"ab", "age":3}', "rejected"],
    ['{ "name":"ab","age":3}', "rejected"],
    // Required, order, bounds, enums, types.
    ['{"age":3}', "rejected"],
    ['{"age":3,"name":"ab"}', "rejected"],
    ['{"name":"","age":3}', "rejected"],
    ['{"name":"abcde","age":3}', "rejected"],
    ['{"name":"ab","age":3.5}', "rejected"],
    ['{"name":"ab","age":03}', "rejected"],
    ['{"name":"ab","age":3,"tags":[]}', "rejected"],
    ['{"name":"ab","age":3,"tags":["a","b","a"]}', "rejected"],
    ['{"name":"ab","age":3,"tags":["c"]}', "rejected"],
    ['{"name":"ab","age":3,"kind":"q"}', "rejected"],
    ['{"name":"ab","age":3,"extra":1}', "rejected"],
    // Numbers are bounded: 16 integer digits at most.
    ['{"name":"ab","age":12345678901234567}', "rejected"],
  ];
  assert.deepEqual(verdicts(person, cases.map((c) => c[0])), cases.map((c) => c[1]));
  // Prefixes of a valid text are "prefix", not accepted: a cut output is not complete.
  assert.equal(verdicts(person, [`{"name":"ab"`])[0], "prefix");
});

Deno.test("compileJsonSchema() compiles anyOf, $ref (recursive) and nested arrays", () => {
  const tree = {
    $defs: {
      node: {
        type: "object",
        properties: {
          v: { type: "integer" },
          kids: { type: "array", items: { $ref: "#/$defs/node" } },
        },
        required: ["v"],
      },
    },
    $ref: "#/$defs/node",
  };
  assert.deepEqual(
    verdicts(tree, ['{"v":1,"kids":[{"v":2,"kids":[]},{"v":3}]}', '{"v":1,"kids":[{}]}']),
    ["accepted", "rejected"],
  );
  const either = { anyOf: [{ type: "string", maxLength: 2 }, { type: "boolean" }] };
  assert.deepEqual(verdicts(either, ['"ab"', "true", '"abc"', "1"]), [
    "accepted",
    "accepted",
    "rejected",
    "rejected",
  ]);
  // An empty schema and `true` take any JSON value; an object without properties any object.
  assert.deepEqual(verdicts({}, ['[1,{"a":null}]', "x"]), ["accepted", "rejected"]);
  assert.deepEqual(verdicts({ type: "object" }, ['{"a":[1]}', "[]"]), ["accepted", "rejected"]);
  assert.deepEqual(
    verdicts({ type: "object", additionalProperties: false }, ["{}", '{"a":1}']),
    ["accepted", "rejected"],
  );
});

Deno.test("jsonObjectGrammar() is one JSON object, compact", () => {
  const g = checkGbnf(jsonObjectGrammar().gbnf);
  assert.equal(matchGbnf(g, '{"a":[1,2.5,"x",{"b":null}],"c":true}').verdict, "accepted");
  assert.equal(matchGbnf(g, "[1]").verdict, "rejected");
  assert.equal(matchGbnf(g, '{"a": 1}').verdict, "rejected");
});

Deno.test("compileJsonSchema() refuses what it cannot enforce, naming the keyword's path", () => {
  const cases: [unknown, string, string, string][] = [
    [{ type: "string", pattern: "^a" }, "schema.pattern", "pattern", "unsupported_schema"],
    [{ oneOf: [{ type: "string" }] }, "schema.oneOf", "oneOf", "unsupported_schema"],
    [{ allOf: [] }, "schema.allOf", "allOf", "unsupported_schema"],
    [
      { type: "object", properties: { a: { type: "integer", minimum: 0 } } },
      "schema.properties.a.minimum",
      "minimum",
      "unsupported_schema",
    ],
    [{ type: "string", format: "email" }, "schema.format", "format", "unsupported_schema"],
    [
      { type: "array", uniqueItems: true },
      "schema.uniqueItems",
      "uniqueItems",
      "unsupported_schema",
    ],
    [
      { type: "object", additionalProperties: { type: "string" } },
      "schema.additionalProperties",
      "additionalProperties",
      "unsupported_schema",
    ],
    [{ $ref: "https://x/s.json" }, "schema.$ref", "$ref", "unsupported_schema"],
    [{ type: "string", maxLength: 5000 }, "schema.maxLength", "maxLength", "unsupported_schema"],
    [{ type: "object", required: ["x"] }, "schema.required", "required", "invalid_schema"],
    [{ type: "strnig" }, "schema.type", "type", "invalid_schema"],
    [{ $ref: "#/$defs/missing" }, "schema.$ref", "$ref", "invalid_schema"],
    [{ type: "integer", maxLength: 3 }, "schema.maxLength", "maxLength", "unsupported_schema"],
    [{ nullable: true, type: "string" }, "schema.nullable", "nullable", "unsupported_schema"],
  ];
  for (const [schema, field, keyword, reason] of cases) {
    assert.throws(() => compileJsonSchema(schema, "schema"), (e: unknown) => {
      assert.ok(e instanceof SynapseError);
      assert.equal(e.code, "invalid_request");
      assert.equal(e.details?.field, field, JSON.stringify(schema));
      assert.equal(e.details?.keyword, keyword, JSON.stringify(schema));
      assert.equal(e.details?.reason, reason, JSON.stringify(schema));
      assert.match(e.message, /^Cannot constrain the output to the schema/);
      return true;
    });
  }
});

Deno.test("gbnfLiteral() escapes quotes, backslashes and control characters", () => {
  const g = checkGbnf(`root ::= ${gbnfLiteral('a"b\\c\n\t\u0001é')}`);
  assert.equal(matchGbnf(g, 'a"b\\c\n\t\u0001é').verdict, "accepted");
});
