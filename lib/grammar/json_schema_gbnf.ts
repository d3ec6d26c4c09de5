/**
 * A JSON Schema → GBNF compiler for constrained generation (`response_format` of the
 * completions doors): a schema becomes a llama.cpp grammar whose language is compact JSON texts
 * that validate against the schema. What the compiler cannot enforce it refuses, naming the
 * keyword's path, before anything is generated (never unconstrained output presented as
 * constrained).
 *
 * ## The supported subset
 *
 * | keyword | supported as |
 * |---|---|
 * | `type` | `object`, `array`, `string`, `number`, `integer`, `boolean`, `null`, or a list of them (any of) |
 * | `properties`, `required` | properties in their declared order; a required one is always generated, an optional one may be left out; a `required` name not in `properties` is refused |
 * | `additionalProperties` | `false` or `true` (no undeclared property is ever generated: both validate); a schema only without declared properties (a map) |
 * | `propertyNames` | `{type: "string"}`; with `minLength`/`maxLength` only for a map |
 * | `items`, `minItems`, `maxItems` | one item schema for every element; the bounds as repetition counts (at most {@link MAX_BOUND}) |
 * | `minLength`, `maxLength` | bounds on a string's characters (an escape counts as one; at most {@link MAX_BOUND}) |
 * | `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum` | integers: exactly; numbers: integers and decimals without exponent inside the bounds, non-integer ends moved inwards; a bound at or beyond ±(2^53 − 1) is no bound and is noted ({@link SchemaNote}) |
 * | `enum`, `const` | exactly those JSON values, compact |
 * | `anyOf`; `allOf` of one schema | one of the branches; that schema |
 * | `nullable` | OpenAPI 3.0: `true` adds `null` |
 * | `$ref` | any reference inside the schema (`#`, `#/$defs/NAME`, `#/definitions/NAME`, `#/properties/…`; recursion allowed) |
 * | `title`, `description`, `$schema`, `$id`, `$anchor`, `$comment`, `default`, `examples`, `deprecated`, `readOnly`, `writeOnly`, `$defs`, `definitions` | ignored (annotations) |
 *
 * Everything else is refused with `invalid_request`, `details {field, keyword, reason:
 * "unsupported_schema"}`: `oneOf` (exactly-one cannot be ensured by a grammar: use `anyOf`),
 * `allOf` of several schemas, `not`, `if`/`then`/`else`, `pattern`, `format`, `multipleOf`,
 * `uniqueItems: true`, `prefixItems`, `contains`, `patternProperties`, other `propertyNames`,
 * `minProperties`/`maxProperties`, `dependent*`, `unevaluated*`, remote `$ref`s, and any keyword
 * not listed. A schema nested deeper than {@link MAX_SCHEMA_DEPTH} is refused with `reason:
 * "schema_too_deep"` naming the path (`details.field`, `details.path`): the compiler never
 * recurses deeper.
 *
 * ## Bounded output
 *
 * The JSON is compact: no whitespace between tokens at all, so a model cannot pad the output
 * with blanks up to the token limit. Numbers are finite in IEEE double (see `json-number`: no
 * text the grammar admits parses as ±Infinity), integers are safe integers (within ±(2^53 − 1)).
 * Strings are bounded only by `maxLength` (and the request's `max_tokens`).
 *
 * @module
 */
import { SynapseError } from "../contract/errors.ts";
import { decimalRange, integerRange, SAFE_INTEGER } from "./_gbnf_ranges.ts";

/** Largest `minItems` / `maxItems` / `minLength` / `maxLength` the grammar spells out. */
export const MAX_BOUND = 1000;

/**
 * Deepest nesting of JSON objects and arrays in a schema (the schema value itself counts 1):
 * deeper schemas are refused naming the path where the limit is passed, before any recursion.
 */
export const MAX_SCHEMA_DEPTH = 128;

/** A fact about how the grammar reads a schema, said in the answer (`synapse.schema_notes`). */
export interface SchemaNote {
  /** The keyword's path, e.g. `response_format.json_schema.schema.properties.n.maximum`. */
  field: string;
  keyword: string;
  /** Why: `beyond_safe_integer` (a bound at or beyond ±(2^53 − 1), read as no bound). */
  reason: "beyond_safe_integer";
  message: string;
}

/** Keywords that carry no constraint. */
const ANNOTATIONS = new Set([
  "title",
  "description",
  "$schema",
  "$id",
  "$comment",
  "default",
  "examples",
  "deprecated",
  "readOnly",
  "writeOnly",
  "$defs",
  "definitions",
  "$anchor",
]);

/** Keywords the compiler enforces (per type; checked against the schema's own keys). */
const SUPPORTED = new Set([
  "type",
  "properties",
  "required",
  "additionalProperties",
  "items",
  "minItems",
  "maxItems",
  "minLength",
  "maxLength",
  "enum",
  "const",
  "anyOf",
  "$ref",
  "minimum",
  "maximum",
  "exclusiveMinimum",
  "exclusiveMaximum",
  "nullable",
  "propertyNames",
  "allOf",
]);

/** Why some well-known keywords are refused (the rest: "not in the supported subset"). */
const REFUSED_WHY: Record<string, string> = {
  oneOf: "a grammar cannot ensure that exactly one branch matches; use anyOf",
  allOf:
    "intersections of more than one schema are not compiled; merge the branches into one schema",
  pattern: "regular expressions are not compiled to grammars here; use enum or drop the pattern",
  format: "formats are not enforced; drop format or use enum",
  multipleOf: "numeric constraints are not enforced by the grammar",
  uniqueItems: "a grammar cannot ensure distinct items",
  prefixItems: "tuples are not compiled; use items",
};

/** The JSON primitive rules every grammar may use (compact JSON, bounded numbers). */
const PRIMITIVES: Record<string, string> = {
  "json-char": `[^"\\\\\\x7F\\x00-\\x1F] | "\\\\" (["\\\\/bfnrt] | "u" [0-9a-fA-F]{4})`,
  "json-string": `"\\"" json-char* "\\""`,
  "json-int": `"-"? ("0" | [1-9] [0-9]{0,15})`,
  // Finite in IEEE double: up to 16 integer digits with a 1–2 digit exponent (< 1e116), one
  // integer digit with exponent 100–307 (< 1e308), or 1.0…–1.6… with exponent 308; negative
  // exponents up to 3 digits (the smallest underflow to 0, still finite).
  "json-number": `"-"? json-unsigned`,
  "json-unsigned":
    `("0" | [1-9] [0-9]{0,15}) json-frac? ([eE] ("-" [0-9]{1,3} | "+"? [0-9]{1,2}))? | ` +
    `[1-9] json-frac? [eE] "+"? ([1-2] [0-9] [0-9] | "30" [0-7]) | ` +
    `"1" ("." [0-6] [0-9]{0,15})? [eE] "+"? "308"`,
  "json-frac": `"." [0-9]{1,16}`,
  "json-safe-int": integerRange(-SAFE_INTEGER, SAFE_INTEGER),
  "json-boolean": `"true" | "false"`,
  "json-null": `"null"`,
  "json-value": `json-object | json-array | json-string | json-number | json-boolean | json-null`,
  "json-object": `"{" (json-string ":" json-value ("," json-string ":" json-value)*)? "}"`,
  "json-array": `"[" (json-value ("," json-value)*)? "]"`,
};

/** What a primitive rule depends on (to emit only what is used). */
const PRIMITIVE_DEPS: Record<string, string[]> = {
  "json-string": ["json-char"],
  "json-number": ["json-unsigned"],
  "json-unsigned": ["json-frac"],
  "json-value": [
    "json-object",
    "json-array",
    "json-string",
    "json-number",
    "json-boolean",
    "json-null",
  ],
  "json-object": ["json-string", "json-value"],
  "json-array": ["json-value"],
};

/** A compiled schema. */
export interface CompiledSchema {
  /** The GBNF source; `root` is the top rule. */
  gbnf: string;
  /** How some keywords were read (empty when nothing needs saying). */
  notes: SchemaNote[];
}

/**
 * Compiles a JSON Schema (the supported subset, see the module doc) to a GBNF grammar of compact
 * JSON texts that validate against it.
 *
 * @param schema The schema (a JSON object, or `true` for any JSON value).
 * @param field The path of the schema in the request, e.g.
 *   `response_format.json_schema.schema`; refusals name paths under it.
 * @returns The grammar.
 * @throws {SynapseError} `invalid_request` (channel) `{field, keyword?, reason:
 *   "unsupported_schema" | "invalid_schema"}` for a keyword outside the subset, a malformed
 *   value, an unresolvable `$ref`, or bounds above {@link MAX_BOUND}.
 */
export function compileJsonSchema(schema: unknown, field: string): CompiledSchema {
  checkDepth(schema, field);
  return new Compiler(schema, field).compile();
}

/**
 * Refuses a schema whose JSON nests deeper than {@link MAX_SCHEMA_DEPTH}, walking it without
 * recursion (the compiler recurses once per level, so it only ever sees bounded depths).
 *
 * @throws {SynapseError} `invalid_request` (channel) `{field, path, reason: "schema_too_deep",
 *   limit}`, `field` and `path` the path of the first value past the limit.
 */
export function checkDepth(schema: unknown, field: string): void {
  const stack: [unknown, number, string][] = [[schema, 1, field]];
  while (stack.length > 0) {
    const [v, depth, path] = stack.pop()!;
    if (typeof v !== "object" || v === null) continue;
    if (depth > MAX_SCHEMA_DEPTH) {
      throw new SynapseError(
        "invalid_request",
        `Cannot constrain the output to the schema: it nests deeper than ${MAX_SCHEMA_DEPTH} levels at '${path}'; flatten it, or use $ref for recursive types`,
        {
          channel: true,
          details: { field: path, path, reason: "schema_too_deep", limit: MAX_SCHEMA_DEPTH },
        },
      );
    }
    const entries = Array.isArray(v) ? v.map((x, i) => [String(i), x] as const) : Object.entries(v);
    for (let i = entries.length - 1; i >= 0; i--) {
      const [k, x] = entries[i]!;
      if (typeof x === "object" && x !== null) stack.push([x, depth + 1, `${path}.${k}`]);
    }
  }
}

/**
 * The grammar of `response_format: {type: "json_object"}`: one compact JSON object, any content.
 *
 * @returns The grammar.
 */
export function jsonObjectGrammar(): CompiledSchema {
  const c = new Compiler({ type: "object" }, "response_format");
  return c.compile();
}

/** A GBNF string literal of `text` (quotes, backslashes and control characters escaped). */
export function gbnfLiteral(text: string): string {
  let out = '"';
  for (const ch of text) {
    const cp = ch.codePointAt(0)!;
    if (ch === '"') out += '\\"';
    else if (ch === "\\") out += "\\\\";
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch === "\t") out += "\\t";
    else if (cp < 0x20 || cp === 0x7f) out += `\\x${cp.toString(16).padStart(2, "0")}`;
    else out += ch;
  }
  return out + '"';
}

class Compiler {
  readonly #root: unknown;
  readonly #field: string;
  readonly #rules = new Map<string, string>();
  readonly #primitives = new Set<string>();
  /** `$ref` target → rule name (assigned before the target is compiled: recursion). */
  readonly #refs = new Map<string, string>();
  readonly #notes: SchemaNote[] = [];
  #counter = 0;
  #depth = 0;

  constructor(root: unknown, field: string) {
    this.#root = root;
    this.#field = field;
  }

  compile(): CompiledSchema {
    const top = this.#schema(this.#root, this.#field);
    const lines = [`root ::= ${top}`];
    for (const [name, body] of this.#rules) lines.push(`${name} ::= ${body}`);
    const prims = new Set<string>();
    const add = (p: string): void => {
      if (prims.has(p)) return;
      prims.add(p);
      for (const d of PRIMITIVE_DEPS[p] ?? []) add(d);
    };
    for (const p of this.#primitives) add(p);
    for (const p of Object.keys(PRIMITIVES)) {
      if (prims.has(p)) lines.push(`${p} ::= ${PRIMITIVES[p]}`);
    }
    return { gbnf: lines.join("\n") + "\n", notes: this.#notes };
  }

  /**
   * A rule expression for `schema` at `path`. Each nested schema (and each `$ref` followed the
   * first time) is one level of recursion here, bounded by {@link MAX_SCHEMA_DEPTH}: a chain of
   * references is refused like a deep schema.
   */
  #schema(schema: unknown, path: string): string {
    if (this.#depth >= MAX_SCHEMA_DEPTH) {
      throw new SynapseError(
        "invalid_request",
        `Cannot constrain the output to the schema: its schemas and references nest deeper than ${MAX_SCHEMA_DEPTH} levels at '${path}'; flatten it`,
        {
          channel: true,
          details: { field: path, path, reason: "schema_too_deep", limit: MAX_SCHEMA_DEPTH },
        },
      );
    }
    this.#depth++;
    try {
      return this.#schemaAt(schema, path);
    } finally {
      this.#depth--;
    }
  }

  #schemaAt(schema: unknown, path: string): string {
    if (schema === true) return this.#prim("json-value");
    if (schema === false) {
      throw this.#invalid(path, undefined, "false matches no value, so nothing can be generated");
    }
    if (typeof schema !== "object" || schema === null || Array.isArray(schema)) {
      throw this.#invalid(path, undefined, "a schema is a JSON object (or true)");
    }
    const s = schema as Record<string, unknown>;
    for (const key of Object.keys(s)) {
      if (ANNOTATIONS.has(key) || SUPPORTED.has(key)) continue;
      throw this.#unsupported(path, key);
    }
    if (s.nullable !== undefined) {
      // OpenAPI 3.0's `nullable: true`: the schema, or null.
      if (typeof s.nullable !== "boolean") {
        throw this.#invalid(`${path}.nullable`, "nullable", "nullable is true or false");
      }
      const { nullable, ...rest } = s;
      const inner = this.#schemaAt(rest, path);
      return nullable ? this.#group([inner, this.#prim("json-null")]) : inner;
    }
    if (s.allOf !== undefined) {
      // One branch (what some generators write around a $ref with a description) is that branch.
      if (!Array.isArray(s.allOf) || s.allOf.length === 0) {
        throw this.#invalid(`${path}.allOf`, "allOf", "allOf is a non-empty array of schemas");
      }
      if (s.allOf.length > 1) throw this.#unsupported(`${path}.allOf`, "allOf");
      const siblings = Object.keys(s).filter((k) => k !== "allOf" && !ANNOTATIONS.has(k));
      if (siblings.length > 0) {
        throw this.#unsupported(path, siblings[0]!, "keywords beside allOf are not compiled");
      }
      return this.#schema(s.allOf[0], `${path}.allOf.0`);
    }
    if (s.$ref !== undefined) {
      const others = Object.keys(s).filter((k) => k !== "$ref" && !ANNOTATIONS.has(k));
      if (others.length > 0) {
        throw this.#unsupported(path, others[0]!, "keywords beside $ref are not compiled");
      }
      return this.#ref(s.$ref, `${path}.$ref`);
    }
    if (s.const !== undefined) return this.#literal(s.const);
    if (s.enum !== undefined) {
      if (!Array.isArray(s.enum) || s.enum.length === 0) {
        throw this.#invalid(`${path}.enum`, "enum", "enum is a non-empty array of values");
      }
      return this.#group(s.enum.map((v) => this.#literal(v)));
    }
    if (s.anyOf !== undefined) {
      if (!Array.isArray(s.anyOf) || s.anyOf.length === 0) {
        throw this.#invalid(`${path}.anyOf`, "anyOf", "anyOf is a non-empty array of schemas");
      }
      const siblings = Object.keys(s).filter((k) => k !== "anyOf" && !ANNOTATIONS.has(k));
      if (siblings.length > 0) {
        throw this.#unsupported(path, siblings[0]!, "keywords beside anyOf are not compiled");
      }
      return this.#group(s.anyOf.map((b, i) => this.#schema(b, `${path}.anyOf.${i}`)));
    }
    const type = s.type;
    if (type === undefined) {
      // No type: only annotations (any value), or type-specific keywords without a type.
      const constraining = Object.keys(s).filter((k) => !ANNOTATIONS.has(k));
      if (constraining.length > 0) {
        throw this.#invalid(
          path,
          constraining[0],
          `'${constraining[0]}' needs a 'type' here; add "type"`,
        );
      }
      return this.#prim("json-value");
    }
    if (Array.isArray(type)) {
      if (type.length === 0) throw this.#invalid(`${path}.type`, "type", "type list is empty");
      return this.#group(type.map((t, i) => this.#typed(s, t, path, `${path}.type.${i}`)));
    }
    return this.#typed(s, type, path, `${path}.type`);
  }

  /** The expression of `schema` read as type `t`. */
  #typed(s: Record<string, unknown>, t: unknown, path: string, typePath: string): string {
    const only = (allowed: string[]): void => {
      for (const k of Object.keys(s)) {
        if (k === "type" || ANNOTATIONS.has(k) || allowed.includes(k)) continue;
        // A keyword of another type in the same list (["string", "null"] with maxLength) is fine.
        if (Array.isArray(s.type) && KEYWORDS_OF_TYPE.some((kw) => kw.includes(k))) continue;
        throw this.#unsupported(path, k, `'${k}' does not apply to type '${String(t)}'`);
      }
    };
    switch (t) {
      case "string": {
        only(["minLength", "maxLength"]);
        const min = this.#bound(s.minLength, `${path}.minLength`, 0);
        const max = this.#bound(s.maxLength, `${path}.maxLength`, undefined);
        if (max !== undefined && max < min) {
          throw this.#invalid(`${path}.maxLength`, "maxLength", "maxLength is below minLength");
        }
        if (min === 0 && max === undefined) return this.#prim("json-string");
        this.#prim("json-char");
        const rep = max === undefined ? `{${min},}` : min === max ? `{${min}}` : `{${min},${max}}`;
        return `"\\"" json-char${rep} "\\""`;
      }
      case "number": {
        only(NUMERIC_KEYWORDS);
        const b = this.#numericBounds(s, path, false);
        if (b === undefined) return this.#prim("json-number");
        const expr = decimalRange(b.lo, b.loOpen, b.hi, b.hiOpen);
        if (expr === undefined) {
          throw this.#unsupported(
            `${path}.${b.keyword}`,
            b.keyword,
            "these bounds hold no integer and no decimal that starts at an integer inside them; the grammar spells number bounds exactly only through integer ends",
          );
        }
        return this.#rule(expr);
      }
      case "integer": {
        only(NUMERIC_KEYWORDS);
        const b = this.#numericBounds(s, path, true);
        if (b === undefined) return this.#prim("json-safe-int");
        if (b.lo > b.hi) {
          throw this.#invalid(
            `${path}.${b.keyword}`,
            b.keyword,
            `no integer lies between the bounds (${b.lo} to ${b.hi})`,
          );
        }
        return this.#rule(integerRange(b.lo, b.hi));
      }
      case "boolean":
        only([]);
        return this.#prim("json-boolean");
      case "null":
        only([]);
        return this.#prim("json-null");
      case "array":
        only(["items", "minItems", "maxItems"]);
        return this.#array(s, path);
      case "object":
        only(["properties", "required", "additionalProperties", "propertyNames"]);
        return this.#object(s, path);
      default:
        throw this.#invalid(
          typePath,
          "type",
          `type ${
            JSON.stringify(t)
          } is not one of object, array, string, number, integer, boolean, null`,
        );
    }
  }

  #array(s: Record<string, unknown>, path: string): string {
    const item = s.items === undefined
      ? this.#prim("json-value")
      : this.#rule(this.#schema(s.items, `${path}.items`));
    const min = this.#bound(s.minItems, `${path}.minItems`, 0);
    const max = this.#bound(s.maxItems, `${path}.maxItems`, undefined);
    if (max !== undefined && max < min) {
      throw this.#invalid(`${path}.maxItems`, "maxItems", "maxItems is below minItems");
    }
    if (max === 0) return `"[]"`;
    const restMin = Math.max(0, min - 1);
    const rest = max === undefined
      ? `("," ${item}){${restMin},}`
      : `("," ${item}){${restMin},${max - 1}}`;
    const some = `${item} ${rest}`;
    return min === 0 ? `"[" (${some})? "]"` : `"[" ${some} "]"`;
  }

  #object(s: Record<string, unknown>, path: string): string {
    const props = s.properties;
    if (
      props !== undefined && (typeof props !== "object" || props === null || Array.isArray(props))
    ) {
      throw this.#invalid(`${path}.properties`, "properties", "properties is an object of schemas");
    }
    const required = s.required ?? [];
    if (!Array.isArray(required) || !required.every((r) => typeof r === "string")) {
      throw this.#invalid(`${path}.required`, "required", "required is an array of names");
    }
    const ap = s.additionalProperties;
    const entries = Object.entries((props ?? {}) as Record<string, unknown>);
    const pn = s.propertyNames;
    // propertyNames: every JSON key is a string; length bounds only for maps (no declared names).
    const boundedNames = pn !== undefined && pn !== true && !isStringSchema(pn);
    if (boundedNames && (!isStringSchema(pn, true) || entries.length > 0)) {
      throw this.#unsupported(
        `${path}.propertyNames`,
        "propertyNames",
        'only {"type": "string"} is supported, with minLength/maxLength when no property is declared',
      );
    }
    for (const r of required as string[]) {
      if (!entries.some(([k]) => k === r)) {
        throw this.#invalid(
          `${path}.required`,
          "required",
          `required property '${r}' is not in properties`,
        );
      }
    }
    if ((ap !== undefined && typeof ap !== "boolean") || (boundedNames && ap !== false)) {
      // A map (`record`): any keys (of propertyNames' lengths), every value of one schema; only
      // without declared properties.
      if (entries.length > 0) {
        throw this.#unsupported(
          `${path}.additionalProperties`,
          "additionalProperties",
          "a schema for undeclared properties is compiled only when no property is declared",
        );
      }
      const v = typeof ap === "object"
        ? this.#rule(this.#schema(ap, `${path}.additionalProperties`))
        : this.#prim("json-value");
      const k = boundedNames
        ? this.#rule(this.#schema(pn, `${path}.propertyNames`))
        : this.#prim("json-string");
      return `"{" (${k} ":" ${v} ("," ${k} ":" ${v})*)? "}"`;
    }
    if (entries.length === 0) {
      // No declared property: `{}` when nothing else is allowed, else any object.
      return ap === false ? `"{}"` : this.#prim("json-object");
    }
    const req = new Set(required as string[]);
    const kv = entries.map(([k, v]) =>
      `${this.#literal(k)} ":" ${this.#rule(this.#schema(v, `${path}.properties.${k}`))}`
    );
    // rest(i, first): the properties from i on; `first` when nothing was written yet (no comma).
    // Built from the last property back, without recursion (a schema may declare many).
    const id = this.#counter++;
    const n = entries.length;
    const name = (i: number, first: boolean): string =>
      i === n ? "" : `obj${id}-${i}${first ? "f" : "c"}`;
    const optional = (i: number): boolean => !req.has(entries[i]![0]);
    const firstUsed: boolean[] = [];
    for (let i = 0; i < n; i++) firstUsed[i] = i === 0 || (firstUsed[i - 1]! && optional(i - 1));
    for (let i = n - 1; i >= 0; i--) {
      for (const first of [false, true]) {
        if (first ? !firstUsed[i] : i === 0) continue;
        const comma = first ? "" : `"," `;
        const take = `${comma}${kv[i]} ${name(i + 1, false)}`.trim();
        const body = optional(i) ? `${take} | ${name(i + 1, first) || `""`}` : take;
        this.#rules.set(name(i, first), body);
      }
    }
    return `"{" ${name(0, true)} "}"`;
  }

  #ref(ref: unknown, path: string): string {
    if (typeof ref !== "string") throw this.#invalid(path, "$ref", "$ref is a string");
    if (ref !== "#" && !ref.startsWith("#/")) {
      throw this.#unsupported(
        path,
        "$ref",
        `only references inside the schema ('#' or '#/…', e.g. '#/$defs/NAME') are supported, not '${ref}'`,
      );
    }
    const known = this.#refs.get(ref);
    if (known !== undefined) return known;
    const segments = ref === "#"
      ? []
      : ref.slice(2).split("/").map((p) => p.replace(/~1/g, "/").replace(/~0/g, "~"));
    let target: unknown = this.#root;
    for (const seg of segments) {
      if (typeof target !== "object" || target === null || !Object.hasOwn(target, seg)) {
        target = undefined;
        break;
      }
      target = (target as Record<string, unknown>)[seg];
    }
    if (target === undefined) {
      throw this.#invalid(path, "$ref", `'${ref}' names nothing in the schema`);
    }
    const rule = `ref${this.#counter++}`;
    this.#refs.set(ref, rule);
    this.#rules.set(rule, "");
    this.#rules.set(
      rule,
      this.#schema(target, this.#field + segments.map((p) => `.${p}`).join("")),
    );
    return rule;
  }

  /**
   * The bounds of a number or integer schema, integer ends (`undefined`: no bound keyword). A
   * bound at or beyond ±(2^53 − 1) is read as no bound and noted: the integers the grammar
   * generates stay within ±(2^53 − 1) anyway. An integer schema's ends are its least and
   * greatest allowed integer; a number schema's non-integer end is moved inwards to an integer
   * (the grammar then spells a subset of the allowed numbers).
   */
  #numericBounds(
    s: Record<string, unknown>,
    path: string,
    integer: boolean,
  ): { lo: bigint; loOpen: boolean; hi: bigint; hiOpen: boolean; keyword: string } | undefined {
    const present = NUMERIC_KEYWORDS.filter((k) => s[k] !== undefined);
    if (present.length === 0) return undefined;
    const b = {
      lo: -SAFE_INTEGER,
      loOpen: false,
      hi: SAFE_INTEGER,
      hiOpen: false,
      keyword: present[0]!,
    };
    const value = (k: string): number => {
      const v = s[k];
      if (typeof v !== "number" || !Number.isFinite(v)) {
        throw this.#invalid(`${path}.${k}`, k, `${k} is a finite number`);
      }
      return v;
    };
    const flag = (k: string): boolean => {
      const v = s[k];
      if (typeof v !== "boolean") return false;
      // Draft 4's boolean form: it makes minimum (maximum) exclusive.
      const base = k === "exclusiveMinimum" ? "minimum" : "maximum";
      if (v && s[base] === undefined) {
        throw this.#invalid(`${path}.${k}`, k, `${k}: true needs '${base}'`);
      }
      return v;
    };
    const SAFE = Number.MAX_SAFE_INTEGER;
    const bound = (k: string, v: number, open: boolean, lower: boolean): void => {
      const field = `${path}.${k}`;
      if (lower ? v <= -SAFE : v >= SAFE) {
        this.#notes.push({
          field,
          keyword: k,
          reason: "beyond_safe_integer",
          message:
            `${k} ${v} is at or beyond ±(2^53 - 1): read as no bound (generated integers stay within ±(2^53 - 1))`,
        });
        return;
      }
      if (lower ? v > SAFE - 1 : v < -(SAFE - 1)) {
        throw this.#unsupported(
          field,
          k,
          "a bound this far out leaves nothing within ±(2^53 - 1) to generate",
        );
      }
      let end: bigint;
      let endOpen = false;
      if (integer) {
        end = BigInt(
          lower
            ? (open ? Math.floor(v) + 1 : Math.ceil(v))
            : (open ? Math.ceil(v) - 1 : Math.floor(v)),
        );
      } else if (Number.isInteger(v)) {
        end = BigInt(v);
        endOpen = open;
      } else end = BigInt(lower ? Math.ceil(v) : Math.floor(v));
      if (lower) {
        if (end > b.lo || (end === b.lo && endOpen)) {
          [b.lo, b.loOpen, b.keyword] = [end, endOpen, k];
        }
      } else if (end < b.hi || (end === b.hi && endOpen)) {
        [b.hi, b.hiOpen, b.keyword] = [end, endOpen, k];
      }
    };
    flag("exclusiveMinimum");
    flag("exclusiveMaximum");
    if (s.minimum !== undefined) bound("minimum", value("minimum"), flag("exclusiveMinimum"), true);
    if (s.maximum !== undefined) {
      bound("maximum", value("maximum"), flag("exclusiveMaximum"), false);
    }
    if (s.exclusiveMinimum !== undefined && typeof s.exclusiveMinimum !== "boolean") {
      bound("exclusiveMinimum", value("exclusiveMinimum"), true, true);
    }
    if (s.exclusiveMaximum !== undefined && typeof s.exclusiveMaximum !== "boolean") {
      bound("exclusiveMaximum", value("exclusiveMaximum"), true, false);
    }
    return b;
  }

  /** The literal of a JSON value, compact. */
  #literal(value: unknown): string {
    return gbnfLiteral(JSON.stringify(value));
  }

  /** A primitive rule, marked used. */
  #prim(name: string): string {
    this.#primitives.add(name);
    return name;
  }

  /** An expression as one item: a name as it is, anything else in a named rule. */
  #rule(expr: string): string {
    if (/^[a-zA-Z0-9-]+$/.test(expr)) return expr;
    const name = `r${this.#counter++}`;
    this.#rules.set(name, expr);
    return name;
  }

  /** Alternatives as one parenthesised item. */
  #group(alts: string[]): string {
    return alts.length === 1 ? alts[0]! : `(${alts.join(" | ")})`;
  }

  #bound(v: unknown, path: string, dflt: number): number;
  #bound(v: unknown, path: string, dflt: undefined): number | undefined;
  #bound(v: unknown, path: string, dflt: number | undefined): number | undefined {
    if (v === undefined) return dflt;
    const keyword = path.slice(path.lastIndexOf(".") + 1);
    if (typeof v !== "number" || !Number.isInteger(v) || v < 0) {
      throw this.#invalid(path, keyword, `${keyword} is a non-negative integer`);
    }
    if (v > MAX_BOUND) {
      throw this.#unsupported(path, keyword, `bounds above ${MAX_BOUND} are not compiled`);
    }
    return v;
  }

  #unsupported(path: string, keyword: string, why?: string): SynapseError {
    const field = path.endsWith(`.${keyword}`) ? path : `${path}.${keyword}`;
    const reason = why ?? REFUSED_WHY[keyword] ?? "it is not in the supported JSON Schema subset";
    return new SynapseError(
      "invalid_request",
      `Cannot constrain the output to the schema: '${keyword}' at '${field}' is not supported (${reason}); remove it, or see the JSON Schema subset in docs/generation.md`,
      { channel: true, details: { field, keyword, reason: "unsupported_schema" } },
    );
  }

  #invalid(path: string, keyword: string | undefined, why: string): SynapseError {
    return new SynapseError(
      "invalid_request",
      `Cannot constrain the output to the schema: at '${path}', ${why}`,
      {
        channel: true,
        details: { field: path, ...(keyword ? { keyword } : {}), reason: "invalid_schema" },
      },
    );
  }
}

/** The bound keywords of number and integer schemas. */
const NUMERIC_KEYWORDS = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"];

/** The type-specific keywords, per type (for multi-type lists). */
const KEYWORDS_OF_TYPE: readonly string[][] = [
  ["minLength", "maxLength"],
  ["items", "minItems", "maxItems"],
  ["properties", "required", "additionalProperties", "propertyNames"],
  NUMERIC_KEYWORDS,
];

/**
 * True for `{"type": "string"}` with nothing else but annotations (and, with `lengths`,
 * `minLength` / `maxLength`).
 */
function isStringSchema(v: unknown, lengths = false): boolean {
  if (typeof v !== "object" || v === null || Array.isArray(v)) return false;
  const o = v as Record<string, unknown>;
  return o.type === "string" &&
    Object.keys(o).every((k) =>
      k === "type" || ANNOTATIONS.has(k) || (lengths && (k === "minLength" || k === "maxLength"))
    );
}
