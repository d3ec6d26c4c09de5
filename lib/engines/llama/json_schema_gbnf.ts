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
 * | `additionalProperties` | `false` or `true` (no undeclared property is ever generated: both validate); a schema is refused |
 * | `items`, `minItems`, `maxItems` | one item schema for every element; the bounds as repetition counts (at most {@link MAX_BOUND}) |
 * | `minLength`, `maxLength` | bounds on a string's characters (an escape counts as one; at most {@link MAX_BOUND}) |
 * | `enum`, `const` | exactly those JSON values, compact |
 * | `anyOf` | one of the branches |
 * | `$ref` | `#/$defs/NAME` or `#/definitions/NAME` (recursion allowed) |
 * | `title`, `description`, `$schema`, `$id`, `$comment`, `default`, `examples`, `deprecated`, `readOnly`, `writeOnly`, `$defs`, `definitions` | ignored (annotations) |
 *
 * Everything else is refused with `invalid_request`, `details {field, keyword, reason:
 * "unsupported_schema"}`: `oneOf` (exactly-one cannot be ensured by a grammar: use `anyOf`),
 * `allOf`, `not`, `if`/`then`/`else`, `pattern`, `format`, `minimum`/`maximum` and the other
 * numeric bounds, `multipleOf`, `uniqueItems: true`, `prefixItems`, `contains`,
 * `patternProperties`, `propertyNames`, `minProperties`/`maxProperties`, `dependent*`,
 * `unevaluated*`, remote or JSON-pointer `$ref`s other than the two forms above, and any keyword
 * not listed.
 *
 * ## Bounded output
 *
 * The JSON is compact: no whitespace between tokens at all, so a model cannot pad the output
 * with blanks up to the token limit. Numbers are bounded too: at most 16 integer digits, 16
 * fraction digits and 3 exponent digits. Strings are bounded only by `maxLength` (and the
 * request's `max_tokens`).
 *
 * @module
 */
import { SynapseError } from "../../contract/errors.ts";

/** Largest `minItems` / `maxItems` / `minLength` / `maxLength` the grammar spells out. */
export const MAX_BOUND = 1000;

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
]);

/** Why some well-known keywords are refused (the rest: "not in the supported subset"). */
const REFUSED_WHY: Record<string, string> = {
  oneOf: "a grammar cannot ensure that exactly one branch matches; use anyOf",
  allOf: "intersections are not compiled; merge the branches into one schema",
  pattern: "regular expressions are not compiled to grammars here; use enum or drop the pattern",
  format: "formats are not enforced; drop format or use enum",
  minimum: "numeric bounds are not enforced by the grammar",
  maximum: "numeric bounds are not enforced by the grammar",
  exclusiveMinimum: "numeric bounds are not enforced by the grammar",
  exclusiveMaximum: "numeric bounds are not enforced by the grammar",
  multipleOf: "numeric constraints are not enforced by the grammar",
  uniqueItems: "a grammar cannot ensure distinct items",
  prefixItems: "tuples are not compiled; use items",
};

/** The JSON primitive rules every grammar may use (compact JSON, bounded numbers). */
const PRIMITIVES: Record<string, string> = {
  "json-char": `[^"\\\\\\x7F\\x00-\\x1F] | "\\\\" (["\\\\/bfnrt] | "u" [0-9a-fA-F]{4})`,
  "json-string": `"\\"" json-char* "\\""`,
  "json-int": `"-"? ("0" | [1-9] [0-9]{0,15})`,
  "json-number": `json-int ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?`,
  "json-boolean": `"true" | "false"`,
  "json-null": `"null"`,
  "json-value": `json-object | json-array | json-string | json-number | json-boolean | json-null`,
  "json-object": `"{" (json-string ":" json-value ("," json-string ":" json-value)*)? "}"`,
  "json-array": `"[" (json-value ("," json-value)*)? "]"`,
};

/** What a primitive rule depends on (to emit only what is used). */
const PRIMITIVE_DEPS: Record<string, string[]> = {
  "json-string": ["json-char"],
  "json-number": ["json-int"],
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
  return new Compiler(schema, field).compile();
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
  #counter = 0;

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
    return { gbnf: lines.join("\n") + "\n" };
  }

  /** A rule expression for `schema` at `path`. */
  #schema(schema: unknown, path: string): string {
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
      case "number":
        only([]);
        return this.#prim("json-number");
      case "integer":
        only([]);
        return this.#prim("json-int");
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
        only(["properties", "required", "additionalProperties"]);
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
    if (ap !== undefined && typeof ap !== "boolean") {
      throw this.#unsupported(
        `${path}.additionalProperties`,
        "additionalProperties",
        "only true or false is supported",
      );
    }
    const entries = Object.entries((props ?? {}) as Record<string, unknown>);
    for (const r of required as string[]) {
      if (!entries.some(([k]) => k === r)) {
        throw this.#invalid(
          `${path}.required`,
          "required",
          `required property '${r}' is not in properties`,
        );
      }
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
    const id = this.#counter++;
    const name = (i: number, first: boolean): string => `obj${id}-${i}${first ? "f" : "c"}`;
    const made = new Set<string>();
    const rest = (i: number, first: boolean): string => {
      if (i === entries.length) return "";
      const n = name(i, first);
      if (made.has(n)) return n;
      made.add(n);
      const comma = first ? "" : `"," `;
      const take = `${comma}${kv[i]} ${rest(i + 1, false)}`.trim();
      const body = req.has(entries[i]![0]) ? take : `${take} | ${rest(i + 1, first) || `""`}`;
      this.#rules.set(n, body);
      return n;
    };
    return `"{" ${rest(0, true)} "}"`;
  }

  #ref(ref: unknown, path: string): string {
    if (typeof ref !== "string") throw this.#invalid(path, "$ref", "$ref is a string");
    const m = /^#\/(\$defs|definitions)\/([^/]+)$/.exec(ref);
    if (!m) {
      throw this.#unsupported(
        path,
        "$ref",
        `only '#/$defs/NAME' and '#/definitions/NAME' are supported, not '${ref}'`,
      );
    }
    const known = this.#refs.get(ref);
    if (known !== undefined) return known;
    const defs = (this.#root as Record<string, unknown>)?.[m[1]!];
    const name = m[2]!.replace(/~1/g, "/").replace(/~0/g, "~");
    const target = typeof defs === "object" && defs !== null
      ? (defs as Record<string, unknown>)[name]
      : undefined;
    if (target === undefined) {
      throw this.#invalid(path, "$ref", `'${ref}' names no definition in the schema`);
    }
    const rule = `ref${this.#counter++}`;
    this.#refs.set(ref, rule);
    this.#rules.set(rule, "");
    this.#rules.set(rule, this.#schema(target, `${this.#field}.${m[1]}.${name}`));
    return rule;
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
      `Cannot constrain the output to the schema: '${keyword}' at '${field}' is not supported (${reason}); remove it, or see the README's JSON Schema subset`,
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

/** The type-specific keywords, per type (for multi-type lists). */
const KEYWORDS_OF_TYPE: readonly string[][] = [
  ["minLength", "maxLength"],
  ["items", "minItems", "maxItems"],
  ["properties", "required", "additionalProperties"],
];
