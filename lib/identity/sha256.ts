/**
 * SHA-256 as every identity in Synapse spells it (docs/internals.md §4): lowercase hex, no prefix.
 *
 * @module
 */

import { createHash, type Hash } from "node:crypto";

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

/** How {@link sha256FileHash} and {@link sha256FileHex} read a file. */
export interface HashFileOptions {
  /** Hash only the first `upTo` bytes (all of the file when undefined, or when it is shorter). */
  upTo?: number | undefined;
  /** Bytes per read (default 8 MiB): the most held in memory at once. */
  chunkBytes?: number | undefined;
  /** Checked before each read: an abort rejects with `signal.reason`. */
  signal?: AbortSignal | undefined;
  /**
   * Called with each chunk after it is hashed and before the next read (awaited): a copy that
   * hashes as it goes writes it here. `chunk` is reused by the next read; `bytesSoFar` counts it.
   */
  onChunk?: ((chunk: Uint8Array, bytesSoFar: number) => void | Promise<void>) | undefined;
}

/**
 * Streams a file through SHA-256 and returns the running hash, so a caller may go on updating it
 * (a resumed download hashes what it already has, then the rest as it arrives).
 *
 * `file` is a path (opened for reading and closed here) or an already open file (read from its
 * current position, left open). Each read yields to the event loop, so hashing a large model
 * does not stall other work for longer than one chunk.
 *
 * @param file The path, or an open file.
 * @param options {@link HashFileOptions}: a byte limit, the chunk size, a signal, a chunk callback.
 * @returns The `node:crypto` Hash over the bytes read, not yet digested.
 * @throws {Deno.errors.NotFound} (and the other `Deno.open`/`read` errors) unwrapped: each caller
 *   words its own refusal; `signal.reason` when `signal` aborts; whatever `onChunk` throws.
 */
export async function sha256FileHash(
  file: string | Deno.FsFile,
  options: HashFileOptions = {},
): Promise<Hash> {
  const { upTo, chunkBytes = 8 * 1024 * 1024, signal, onChunk } = options;
  const hash = createHash("sha256");
  using opened = typeof file === "string" ? await Deno.open(file, { read: true }) : undefined;
  const src = opened ?? (file as Deno.FsFile);
  const buf = new Uint8Array(chunkBytes);
  let left = upTo ?? Infinity;
  let done = 0;
  while (left > 0) {
    signal?.throwIfAborted();
    const n = await src.read(buf.subarray(0, Math.min(buf.length, left)));
    if (n === null) break;
    const chunk = buf.subarray(0, n);
    hash.update(chunk);
    left -= n;
    done += n;
    await onChunk?.(chunk, done);
  }
  return hash;
}

/**
 * {@link sha256FileHash}, digested: the 64-character lowercase hex SHA-256 of a file (or of its
 * first `options.upTo` bytes).
 *
 * @throws {Deno.errors.NotFound} and the errors of {@link sha256FileHash}, unwrapped.
 */
export async function sha256FileHex(
  file: string | Deno.FsFile,
  options: HashFileOptions = {},
): Promise<string> {
  return (await sha256FileHash(file, options)).digest("hex");
}
