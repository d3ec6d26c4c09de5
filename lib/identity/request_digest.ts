/**
 * The request digest of a job (docs/internals.md §4 "Request digest"): the identity a `request_key`
 * is bound to. Same key + same digest attaches to the existing job; same key + another digest is an
 * `idempotency_conflict`.
 *
 * The digest is internal to one module's store, so it need not match the reference byte for byte;
 * it must be unambiguous — two different requests never share an encoding — and stay stable across
 * releases, because stored jobs are matched against it. The encoding is pinned by
 * `tests/vectors/request_digest.json` (inputs, the exact bytes hashed, and the digests).
 *
 * ## Encoding (ABNF-like; `%xNN` is one byte)
 *
 * ```
 * digest   = lowercase-hex( SHA-256( message ) )              ; 64 characters
 * message  = str("synapse-request-digest-v1") str(op) str(model_id)
 *            opt(remote_profile_hash) opt(logical_handle)
 *            value(constraints)
 *            u64(item_count) item_count*( str(item.id) str(item.content_sha256) )
 *
 * opt(x)   = %x00                       ; absent (undefined)
 *          / %x01 str(x)                ; present; the empty string is present
 *
 * value    = %x00                       ; null
 *          / %x01 ( %x00 / %x01 )       ; false / true
 *          / %x02 str(decimal)          ; number
 *          / %x03 str(s)                ; string
 *          / %x04 u64(n) n*value        ; array, elements in order
 *          / %x05 u64(n) n*( str(key) value )
 *                                       ; object, members sorted by key, ascending in UTF-16
 *                                       ; code unit order (what `Array.prototype.sort` and
 *                                       ; RFC 8785 JCS use), not UTF-8 byte order
 *
 * str(s)   = u64(byte length of utf8(s)) utf8(s)
 * u64(n)   = n as 8 bytes, unsigned, big-endian (lengths and counts alike)
 * decimal  = ECMAScript Number::toString of the number, i.e. JS `String(n)`: the shortest
 *            string that round-trips, e.g. "1", "-1.5", "0.1", "1e+21", "5e-7"; -0 gives "0"
 * ```
 *
 * Rules beyond the grammar:
 *
 * - A number must be finite: NaN and ±Infinity throw RangeError (JSON cannot carry them).
 * - Strings (op, model id, optional fields, ids, hashes, keys, string values) must be well-formed
 *   UTF-16: a lone surrogate throws TypeError, since UTF-8 would replace it with U+FFFD and two
 *   different strings would share one encoding.
 * - An object member whose value is `undefined` is omitted before counting, exactly as in JSON
 *   text, which cannot carry it; `undefined` anywhere else (the constraints themselves, an array
 *   element) throws TypeError.
 * - Objects must be plain (prototype `Object.prototype` or `null`); only own enumerable string
 *   keys count. Anything else that is not JSON (functions, bigint, symbols, Dates, Maps, cycles)
 *   throws TypeError.
 *
 * The message is streamed into SHA-256 through a 64 KiB scratch buffer, so hashing a 5000-item
 * batch never builds the whole message in memory.
 *
 * @module
 */

import { createHash } from "node:crypto";
import type { Hash } from "node:crypto";

/** A JSON value, as the constraints of a request are. */
export type JsonValue =
  | null
  | boolean
  | number
  | string
  | JsonValue[]
  | { [key: string]: JsonValue | undefined };

/** Domain-separation string, the first field of every request digest message. */
export const REQUEST_DIGEST_DOMAIN = "synapse-request-digest-v1";

/** One item of a request, as the digest sees it. */
export interface RequestDigestItem {
  /** Item id as submitted (for embed.batch: the item's `id`). */
  id: string;
  /** Lowercase hex SHA-256 of the item's content (for embed.batch: of the raw text). */
  contentSha256: string;
}

/** Input of {@link requestDigest}. */
export interface RequestDigestInput {
  /** Operation, e.g. `"embed.batch"`. */
  op: string;
  /** Model id the request resolved to. */
  modelId: string;
  /** Hash of the remote profile, for remote lanes; absent for local ones. */
  remoteProfileHash?: string;
  /** Logical handle of the request, when it has one. */
  logicalHandle?: string;
  /**
   * Every request parameter that changes the result, other than the items (e.g.
   * `{input_type, normalize}`). Use `{}` when there are none.
   */
  constraints: JsonValue;
  /** The items, in request order. */
  items: readonly RequestDigestItem[];
}

/**
 * Computes the request digest of a job (encoding in the module documentation).
 *
 * @param input The request: op, model id, optional remote profile hash and logical handle,
 * constraints and items.
 * @returns The digest: 64 lowercase hex characters, no prefix.
 * @throws {RangeError} when a number in the constraints is NaN or ±Infinity.
 * @throws {TypeError} when a field is not a string, a string has a lone surrogate, or the
 * constraints hold something JSON cannot (undefined outside an object member, a function, a
 * bigint, a non-plain object, a cycle).
 *
 * @example Digest of an embed.batch job
 * ```ts
 * import { requestDigest } from "./request_digest.ts";
 * import assert from "node:assert";
 *
 * const digest = requestDigest({
 *   op: "embed.batch",
 *   modelId: "synapse-tiny-embed",
 *   constraints: { input_type: "document" },
 *   items: [{ id: "a", contentSha256: "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb" }],
 * });
 * assert.match(digest, /^[0-9a-f]{64}$/);
 * ```
 */
export function requestDigest(input: RequestDigestInput): string {
  const w = new DigestWriter();
  w.string(REQUEST_DIGEST_DOMAIN, "domain");
  w.string(input.op, "op");
  w.string(input.modelId, "modelId");
  writeOptional(w, input.remoteProfileHash, "remoteProfileHash");
  writeOptional(w, input.logicalHandle, "logicalHandle");
  writeValue(w, input.constraints, "constraints", new Set());
  const items = input.items;
  if (!Array.isArray(items)) {
    throw new TypeError(`Cannot compute request digest: 'items' must be an array`);
  }
  w.u64(items.length);
  for (let i = 0; i < items.length; i++) {
    const item = items[i];
    if (typeof item !== "object" || item === null) {
      throw new TypeError(`Cannot compute request digest: items[${i}] must be an object`);
    }
    w.string(item.id, `items[${i}].id`);
    w.string(item.contentSha256, `items[${i}].contentSha256`);
  }
  return w.digest();
}

const TAG_NULL = 0;
const TAG_BOOL = 1;
const TAG_NUMBER = 2;
const TAG_STRING = 3;
const TAG_ARRAY = 4;
const TAG_OBJECT = 5;

function writeOptional(w: DigestWriter, value: string | undefined, field: string): void {
  if (value === undefined) {
    w.byte(0);
  } else {
    w.byte(1);
    w.string(value, field);
  }
}

function writeValue(w: DigestWriter, value: unknown, path: string, ancestors: Set<object>): void {
  if (value === null) {
    w.byte(TAG_NULL);
    return;
  }
  switch (typeof value) {
    case "boolean":
      w.byte(TAG_BOOL);
      w.byte(value ? 1 : 0);
      return;
    case "number":
      if (!Number.isFinite(value)) {
        throw new RangeError(
          `Cannot compute request digest: ${path} must be a finite number: received ${value}`,
        );
      }
      w.byte(TAG_NUMBER);
      w.string(String(value), path);
      return;
    case "string":
      w.byte(TAG_STRING);
      w.string(value, path);
      return;
    case "object":
      break;
    default:
      throw new TypeError(
        `Cannot compute request digest: ${path} is not a JSON value: received ${typeof value}`,
      );
  }
  const obj = value as object;
  if (ancestors.has(obj)) {
    throw new TypeError(`Cannot compute request digest: ${path} is a cycle`);
  }
  ancestors.add(obj);
  if (Array.isArray(obj)) {
    w.byte(TAG_ARRAY);
    w.u64(obj.length);
    for (let i = 0; i < obj.length; i++) writeValue(w, obj[i], `${path}[${i}]`, ancestors);
  } else {
    const proto = Object.getPrototypeOf(obj);
    if (proto !== Object.prototype && proto !== null) {
      throw new TypeError(`Cannot compute request digest: ${path} is not a plain object`);
    }
    const record = obj as Record<string, unknown>;
    // Default sort compares UTF-16 code units, the documented key order.
    const keys = Object.keys(record).filter((k) => record[k] !== undefined).sort();
    w.byte(TAG_OBJECT);
    w.u64(keys.length);
    for (const key of keys) {
      w.string(key, `${path} key`);
      writeValue(w, record[key], `${path}.${key}`, ancestors);
    }
  }
  ancestors.delete(obj);
}

/** Scratch buffer size; strings whose UTF-8 may not fit are hashed from their own encoding. */
const CHUNK_BYTES = 64 * 1024;
const TWO_POW_32 = 2 ** 32;

/** Streams the digest message into SHA-256 through a fixed scratch buffer. */
class DigestWriter {
  #hash: Hash = createHash("sha256");
  #buf = new Uint8Array(CHUNK_BYTES);
  #view = new DataView(this.#buf.buffer);
  #pos = 0;
  #encoder = new TextEncoder();

  byte(b: number): void {
    this.#reserve(1);
    this.#buf[this.#pos++] = b;
  }

  u64(n: number): void {
    this.#reserve(8);
    this.#putU64(this.#pos, n);
    this.#pos += 8;
  }

  string(s: unknown, field: string): void {
    if (typeof s !== "string") {
      throw new TypeError(
        `Cannot compute request digest: ${field} must be a string: received ${typeof s}`,
      );
    }
    if (!s.isWellFormed()) {
      throw new TypeError(`Cannot compute request digest: ${field} has a lone surrogate`);
    }
    // UTF-8 needs at most 3 bytes per UTF-16 code unit.
    const worst = 8 + s.length * 3;
    if (worst <= CHUNK_BYTES) {
      this.#reserve(worst);
      const { written } = this.#encoder.encodeInto(s, this.#buf.subarray(this.#pos + 8));
      this.#putU64(this.#pos, written);
      this.#pos += 8 + written;
    } else {
      const bytes = this.#encoder.encode(s);
      this.u64(bytes.length);
      this.#flush();
      this.#hash.update(bytes);
    }
  }

  digest(): string {
    this.#flush();
    return this.#hash.digest("hex");
  }

  #putU64(at: number, n: number): void {
    this.#view.setUint32(at, Math.floor(n / TWO_POW_32), false);
    this.#view.setUint32(at + 4, n >>> 0, false);
  }

  #reserve(n: number): void {
    if (this.#pos + n > CHUNK_BYTES) this.#flush();
  }

  #flush(): void {
    if (this.#pos === 0) return;
    this.#hash.update(this.#buf.subarray(0, this.#pos));
    this.#pos = 0;
  }
}
