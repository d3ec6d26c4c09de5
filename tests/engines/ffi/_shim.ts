/**
 * Helpers the ffi lane's tests share: a shim engine loaded to score, and a byte search for
 * patching a GGUF's metadata in place.
 *
 * @module
 */
import type { ShimLibrary } from "../../../lib/engines/ffi/abi.ts";
import { ShimEngine } from "../../../lib/engines/ffi/shim_engine.ts";

/** Loads `path` in score mode (512-token context, 4 sequences per call, 1 thread). */
export function scoreEngine(
  lib: ShimLibrary,
  path: string,
  readout: "rank" | "yes_no",
): Promise<ShimEngine> {
  return ShimEngine.load(lib, path, {
    mode: "score",
    n_ctx: 512,
    n_seq_max: 4,
    n_threads: 1,
    readout,
  });
}

/** First index of `needle` in `hay` at or after `from`, or −1. */
export function indexOfBytes(hay: Uint8Array, needle: Uint8Array, from = 0): number {
  outer: for (let i = from; i + needle.length <= hay.length; i++) {
    for (let j = 0; j < needle.length; j++) if (hay[i + j] !== needle[j]) continue outer;
    return i;
  }
  return -1;
}
