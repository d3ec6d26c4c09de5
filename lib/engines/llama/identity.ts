/**
 * Engine identity of the llama.cpp lane (docs/internals.md §3 `provenance.engine`, §4 `engine`):
 * the worker announces it in HELLO and it enters every GGUF model's numeric profile, so a vector or
 * a generation from a CUDA or Metal build never shares a fingerprint with a CPU one.
 *
 * @module
 */

/** Engine name of the llama worker (docs/internals.md §7's list). */
export const LLAMA_WORKER_ENGINE = "llama.cpp-worker";

/** The node-llama-cpp release the worker runs (package.json pins it exactly). */
export const LLAMA_WORKER_VERSION = "3.21.1";

/**
 * Build flags of a llama worker: which GPU backend node-llama-cpp loaded (`cpu` when none) and
 * the llama.cpp release inside the binding.
 *
 * @param gpu node-llama-cpp's `llama.gpu` (`false`, `"cuda"`, `"metal"`, `"vulkan"`).
 * @param llamaCppRelease node-llama-cpp's `llama.llamaCppRelease.release`.
 * @returns `{backend, llama_cpp}`.
 *
 * @example
 * ```ts
 * import assert from "node:assert";
 * import { llamaBuildFlags } from "./identity.ts";
 *
 * assert.deepStrictEqual(llamaBuildFlags(false, "b6000"), { backend: "cpu", llama_cpp: "b6000" });
 * ```
 */
export function llamaBuildFlags(
  gpu: string | false,
  llamaCppRelease: string,
): Record<string, string> {
  return { backend: gpu === false ? "cpu" : String(gpu), llama_cpp: llamaCppRelease };
}
