/**
 * The JSON Schema → GBNF compiler: its grammars pass the module's GBNF check, accept compact JSON
 * that validates against the schema and nothing else (no free whitespace, bounded numbers), and
 * every keyword outside the subset is refused naming its path.
 */
import assert from "node:assert/strict";
import { checkGbnf } from "../../lib/grammar/gbnf.ts";
import { matchGbnf } from "../../lib/grammar/gbnf_match.ts";
import {
  compileJsonSchema,
  gbnfLiteral,
  jsonObjectGrammar,
  MAX_SCHEMA_DEPTH,
} from "../../lib/grammar/json_schema_gbnf.ts";
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
    [{ allOf: [] }, "schema.allOf", "allOf", "invalid_schema"],
    [
      { allOf: [{ type: "string" }, { maxLength: 2 }] },
      "schema.allOf",
      "allOf",
      "unsupported_schema",
    ],
    [
      { type: "object", properties: { a: { type: "integer", multipleOf: 2 } } },
      "schema.properties.a.multipleOf",
      "multipleOf",
      "unsupported_schema",
    ],
    [
      { type: "number", minimum: 0.2, maximum: 0.8 },
      "schema.maximum",
      "maximum",
      "unsupported_schema",
    ],
    [{ type: "integer", minimum: 5, maximum: 4 }, "schema.maximum", "maximum", "invalid_schema"],
    [{ type: "integer", minimum: 1e300 }, "schema.minimum", "minimum", "unsupported_schema"],
    [
      { type: "integer", exclusiveMinimum: true },
      "schema.exclusiveMinimum",
      "exclusiveMinimum",
      "invalid_schema",
    ],
    [
      { type: "object", propertyNames: { maxLength: 3 } },
      "schema.propertyNames",
      "propertyNames",
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
      { type: "object", properties: { a: {} }, additionalProperties: { type: "string" } },
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
    [{ nullable: "yes", type: "string" }, "schema.nullable", "nullable", "invalid_schema"],
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

Deno.test("compileJsonSchema() numbers are finite in IEEE double (F33)", () => {
  for (const schema of [{ type: "number" }, true, { type: "object" }]) {
    const g = checkGbnf(compileJsonSchema(schema, "schema").gbnf);
    const wrap = (t: string) =>
      schema === true || (schema as { type: string }).type === "number" ? t : `{"a":${t}}`;
    for (
      const t of ["-1e656", "1e309", "2e308", "1.8e308", "99e307", "9999999999999999e999", "1E+400"]
    ) {
      assert.equal(matchGbnf(g, wrap(t)).verdict, "rejected", t);
      assert.ok(!Number.isFinite(Number(t)), `${t} is not finite`);
    }
    for (
      const t of [
        "1e308",
        "-1e308",
        "1.5e308",
        "9.99e307",
        "1E+99",
        "12345e99",
        "-0.5",
        "0",
        "1e-999",
        "3.25",
      ]
    ) {
      assert.equal(matchGbnf(g, wrap(t)).verdict, "accepted", t);
      assert.ok(Number.isFinite(Number(t)), t);
    }
  }
});

Deno.test("compileJsonSchema() honours integer bounds exactly (F34)", () => {
  const cases: [Record<string, unknown>, number, number][] = [
    [{ minimum: 0, maximum: 150 }, 0, 150],
    [{ minimum: -17, maximum: 3 }, -17, 3],
    [{ exclusiveMinimum: -5, exclusiveMaximum: 100 }, -4, 99],
    [{ minimum: 1.5, maximum: 9.5 }, 2, 9],
    [{ minimum: 10, exclusiveMinimum: true, maximum: 20, exclusiveMaximum: true }, 11, 19],
    [{ minimum: 7, maximum: 7 }, 7, 7],
    [{ maximum: -1 }, -Number.MAX_SAFE_INTEGER, -1],
  ];
  for (const [bounds, lo, hi] of cases) {
    const g = checkGbnf(compileJsonSchema({ type: "integer", ...bounds }, "schema").gbnf);
    const probes = [lo - 1, lo, lo + 1, hi - 1, hi, hi + 1, 0, -1, 1, 99, 100, 101, 1000];
    for (const p of probes) {
      const want = p >= lo && p <= hi;
      const verdict = matchGbnf(g, String(p)).verdict;
      assert.equal(verdict === "accepted", want, `${JSON.stringify(bounds)} ${p}: ${verdict}`);
    }
    assert.equal(matchGbnf(g, "-0").verdict, "rejected");
    assert.equal(matchGbnf(g, "007").verdict, "rejected");
  }
});

Deno.test("compileJsonSchema() reads bounds at or beyond ±(2^53 − 1) as no bound, and says so", () => {
  const safe = Number.MAX_SAFE_INTEGER;
  const c = compileJsonSchema(
    {
      type: "object",
      properties: { n: { type: "integer", minimum: -safe, maximum: safe } },
      required: ["n"],
    },
    "schema",
  );
  assert.deepEqual(c.notes.map((n) => [n.field, n.keyword, n.reason]), [
    ["schema.properties.n.minimum", "minimum", "beyond_safe_integer"],
    ["schema.properties.n.maximum", "maximum", "beyond_safe_integer"],
  ]);
  const g = checkGbnf(c.gbnf);
  for (const n of [String(safe), String(-safe), "0", "42"]) {
    assert.equal(matchGbnf(g, `{"n":${n}}`).verdict, "accepted", n);
  }
  // Every generated integer stays a safe one, bounded or not.
  for (const n of [String(safe + 1), "9999999999999999", String(-safe - 1)]) {
    assert.equal(matchGbnf(g, `{"n":${n}}`).verdict, "rejected", n);
  }
  const plain = checkGbnf(compileJsonSchema({ type: "integer" }, "schema").gbnf);
  assert.equal(matchGbnf(plain, String(safe)).verdict, "accepted");
  assert.equal(matchGbnf(plain, String(safe + 1)).verdict, "rejected");
  assert.deepEqual(compileJsonSchema({ type: "integer", maximum: 1e300 }, "s").notes.length, 1);
});

Deno.test("compileJsonSchema() number bounds with integer ends: a subset inside them", () => {
  const cases: [Record<string, unknown>, (x: number) => boolean][] = [
    [{ minimum: 0, maximum: 1 }, (x) => x >= 0 && x <= 1],
    [{ exclusiveMinimum: 0 }, (x) => x > 0],
    [{ minimum: 0, exclusiveMinimum: true }, (x) => x > 0],
    [{ minimum: -2, exclusiveMaximum: 3 }, (x) => x >= -2 && x < 3],
    [{ minimum: 0.5, maximum: 2.5 }, (x) => x >= 0.5 && x <= 2.5],
  ];
  const texts = [
    "0",
    "1",
    "0.5",
    "0.000",
    "0.001",
    "-0.5",
    "2.99",
    "3",
    "-2",
    "-2.5",
    "-1.5",
    "1.0",
    "2",
    "1e2",
    "2.5",
  ];
  for (const [bounds, inside] of cases) {
    const g = checkGbnf(compileJsonSchema({ type: "number", ...bounds }, "schema").gbnf);
    let some = 0;
    for (const t of texts) {
      if (matchGbnf(g, t).verdict !== "accepted") continue;
      some++;
      assert.ok(inside(Number(t)), `${JSON.stringify(bounds)} admits ${t}`);
    }
    assert.ok(some >= 2, JSON.stringify(bounds));
  }
  const unit = checkGbnf(compileJsonSchema({ type: "number", minimum: 0, maximum: 1 }, "s").gbnf);
  for (const t of ["0", "1", "0.5", "0.25"]) {
    assert.equal(matchGbnf(unit, t).verdict, "accepted", t);
  }
});

Deno.test("compileJsonSchema() refuses a schema deeper than its limit naming the path, never overflowing the stack", () => {
  for (const depth of [200, 3000, 100_000]) {
    let props: unknown = { type: "string" };
    for (let i = 0; i < depth; i++) {
      props = { type: "object", properties: { a: props }, required: ["a"] };
    }
    let any: unknown = { type: "string" };
    for (let i = 0; i < depth; i++) any = { anyOf: [any] };
    let constant: unknown = 1;
    for (let i = 0; i < depth; i++) constant = [constant];
    for (const schema of [props, any, { const: constant }]) {
      assert.throws(() => compileJsonSchema(schema, "schema"), (e: unknown) => {
        assert.ok(e instanceof SynapseError, String(e));
        assert.equal(e.code, "invalid_request");
        assert.equal(e.details?.reason, "schema_too_deep");
        assert.equal(e.details?.limit, MAX_SCHEMA_DEPTH);
        assert.match(String(e.details?.path), /^schema\.(properties\.a|anyOf\.0|const\.0)/);
        assert.equal(e.details?.field, e.details?.path);
        return true;
      });
    }
  }
  // A chain of references is as deep as its longest path.
  const defs: Record<string, unknown> = {};
  for (let i = 0; i < 5000; i++) defs[`d${i}`] = { $ref: `#/$defs/d${i + 1}` };
  defs["d5000"] = { type: "string" };
  assert.throws(
    () => compileJsonSchema({ $ref: "#/$defs/d0", $defs: defs }, "schema"),
    (e: unknown) => {
      assert.ok(e instanceof SynapseError, String(e));
      assert.equal(e.details?.reason, "schema_too_deep");
      return true;
    },
  );
  // Within the limit it compiles; many properties need no recursion.
  let ok: unknown = { type: "string" };
  for (let i = 0; i < 30; i++) ok = { type: "object", properties: { a: ok }, required: ["a"] };
  checkGbnf(compileJsonSchema(ok, "schema").gbnf);
  const wide: Record<string, unknown> = {};
  for (let i = 0; i < 20_000; i++) wide[`p${i}`] = { type: "boolean" };
  assert.ok(compileJsonSchema({ type: "object", properties: wide }, "schema").gbnf.length > 0);
});

Deno.test("compileJsonSchema() compiles what schema libraries write: $schema, nullable forms, records, local refs", () => {
  const schemas: [unknown, string, string][] = [
    // zod 4 (draft 2020-12): record with propertyNames, recursion through "#".
    [
      {
        $schema: "https://json-schema.org/draft/2020-12/schema",
        type: "object",
        properties: {
          v: { type: "integer", minimum: -9007199254740991, maximum: 9007199254740991 },
          kids: { maxItems: 2, type: "array", items: { $ref: "#" } },
          rec: {
            type: "object",
            propertyNames: { type: "string" },
            additionalProperties: { type: "boolean" },
          },
        },
        required: ["v", "kids"],
        additionalProperties: false,
      },
      '{"v":1,"kids":[{"v":2,"kids":[]}],"rec":{"a":true}}',
      '{"v":1,"kids":[{"v":2}]}',
    ],
    // OpenAPI 3.0: nullable, boolean exclusiveMinimum.
    [
      {
        type: "object",
        properties: {
          n: { type: "string", maxLength: 3, nullable: true },
          p: { type: "number", minimum: 0, exclusiveMinimum: true },
        },
        required: ["n", "p"],
      },
      '{"n":null,"p":0.5}',
      '{"n":null,"p":0}',
    ],
    // pydantic v1: allOf around a $ref with a description; definitions; title and default.
    [
      {
        title: "M",
        type: "object",
        properties: {
          a: { title: "A", description: "x", allOf: [{ $ref: "#/definitions/E" }] },
          b: { anyOf: [{ type: "integer", minimum: 1 }, { type: "null" }], default: null },
        },
        required: ["a"],
        definitions: { E: { title: "E", enum: ["x", "y"], type: "string" } },
      },
      '{"a":"x","b":3}',
      '{"a":"x","b":0}',
    ],
    // A JSON-pointer reference into properties (zod-to-json-schema's default).
    [
      {
        type: "object",
        properties: { a: { type: "boolean" }, b: { $ref: "#/properties/a" } },
        required: ["a", "b"],
      },
      '{"a":true,"b":false}',
      '{"a":true,"b":1}',
    ],
  ];
  for (const [schema, good, bad] of schemas) {
    const g = checkGbnf(compileJsonSchema(schema, "schema").gbnf);
    assert.equal(matchGbnf(g, good).verdict, "accepted", good);
    assert.equal(matchGbnf(g, bad).verdict, "rejected", bad);
  }
});
