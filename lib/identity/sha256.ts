/**
 * SHA-256 as every identity in Synapse spells it (docs/internals.md §4): lowercase hex, no prefix.
 *
 * @module
 */

import { createHash } from "node:crypto";

/**
 * Hashes `data` with SHA-256.
 *
 * A string is hashed as its UTF-8 bytes; a `Uint8Array` is hashed as-is.
 *
 * @param data The text (UTF-8 encoded before hashing) or raw bytes to hash.
 * @returns The 64-character lowercase hex digest, without a `sha256:` prefix.
 *
 * @example Hash a string
 * ```ts
 * import { sha256Hex } from "./sha256.ts";
 * import assert from "node:assert";
 *
 * assert.strictEqual(
 *   sha256Hex("abc"),
 *   "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
 * );
 * ```
 */
export function sha256Hex(data: string | Uint8Array): string {
  const hash = createHash("sha256");
  if (typeof data === "string") hash.update(data, "utf8");
  else hash.update(data);
  return hash.digest("hex");
}
