/**
 * JSON Canonicalization Scheme (RFC 8785) for the plain JSON values Synapse hashes: objects with
 * keys sorted by UTF-16 code units, no whitespace, strings as `JSON.stringify` writes them (the
 * RFC's escaping), numbers as ECMAScript writes them (the RFC's rule). Used for the catalog's
 * `manifest_digest` and the default `models.download` key binding (docs/internals.md §10).
 *
 * @module
 */
import { sha256Hex } from "./sha256.ts";

/** A JSON value. */
export type JsonValue = null | boolean | number | string | JsonValue[] | {
  [key: string]: JsonValue | undefined;
};

/**
 * Canonical JSON text of a value (RFC 8785). `undefined` object members are left out.
 *
 * @throws {TypeError} for a non-finite number, or a value JSON cannot hold.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { canonicalJson } from "./jcs.ts";
 * assert.equal(canonicalJson({ b: [1, "x"], a: null }), '{"a":null,"b":[1,"x"]}');
 * ```
 */
export function canonicalJson(value: JsonValue): string {
  if (value === null || typeof value === "boolean" || typeof value === "string") {
    return JSON.stringify(value);
  }
  if (typeof value === "number") {
    if (!Number.isFinite(value)) throw new TypeError(`Cannot canonicalize ${value}`);
    return JSON.stringify(value);
  }
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (typeof value === "object") {
    const keys = Object.keys(value).filter((k) => value[k] !== undefined).sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(value[k]!)}`).join(",")}}`;
  }
  throw new TypeError(`Cannot canonicalize a ${typeof value}`);
}

/** `sha256:<hex>` of the canonical JSON of a value ("JCS-SHA256"). */
export function jcsSha256(value: JsonValue): string {
  return "sha256:" + sha256Hex(canonicalJson(value));
}
