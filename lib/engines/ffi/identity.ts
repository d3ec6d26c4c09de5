/**
 * Engine identity of the ffi lane's llama shim (docs/internals.md §3 `provenance.engine`, §4
 * `engine`): what `syn_engine_identity()` of `ffi/llama/synapse_llama.c` announces and the FFI
 * worker repeats in HELLO. Its build flags name the ABI, the backend and the llama.cpp release,
 * so a vector from the shim never shares a fingerprint with one from the node-llama-cpp lane.
 *
 * @module
 */

/** Engine name of the llama shim (in docs/internals.md §7's list of worker engines). */
export const FFI_LLAMA_ENGINE = "synapse-llama-shim";

/** The shim's `SYN_SHIM_VERSION`: bumped when it computes anything differently. */
export const FFI_LLAMA_VERSION = "2";
