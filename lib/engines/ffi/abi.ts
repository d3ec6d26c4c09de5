/**
 * The C engine ABI (`ffi/synapse_engine.h`, version 1) for Deno: the symbols `Deno.dlopen` binds,
 * the struct layouts the header documents field by field, and {@link openShim}, a thin typed
 * wrapper over one shim library. `tests/engines/ffi_abi_test.ts` holds {@link SYN_BATCH} and
 * {@link SYN_SAMPLING} to the layout the shim reports (`syn_abi_layout`), so a header change
 * that moves a field fails there, not in a vector.
 *
 * Calls that compute (embed, score, generate, state) are bound `nonblocking`: they run on a
 * thread of their own while the caller's event loop goes on reading the socket, so a CANCEL can
 * set the engine's cancel flag and the shim's abort callback stops the decode step in flight.
 *
 * @module
 */

import { fileURLToPath } from "node:url";

/** Where scripts/setup builds the llama shim (scripts/build_shim), relative to the repository root. */
export const DEFAULT_LLAMA_SHIM = "node_modules/.synapse/libsynapse_llama.so";

/** The llama shim's path in this checkout (or unpacked executable). */
export function defaultLlamaShimPath(): string {
  return fileURLToPath(new URL(`../../../${DEFAULT_LLAMA_SHIM}`, import.meta.url));
}

/** The ABI version this module speaks (`SYN_ABI_VERSION`). */
export const SYN_ABI_VERSION = 1;

/** Status codes of the ABI (`enum syn_status`), by name. */
export const SYN_STATUS = {
  0: "ok",
  1: "invalid_argument",
  2: "load_failed",
  3: "unsupported",
  4: "cancelled",
  5: "out_of_memory",
  6: "engine",
  7: "context_full",
  8: "grammar_invalid",
} as const;

/** A status's name (`unknown_<n>` for one the ABI does not define). */
export type SynStatusName = (typeof SYN_STATUS)[keyof typeof SYN_STATUS] | `unknown_${number}`;

/** Field offsets and size of `struct syn_batch` on LP64 (bytes). */
export const SYN_BATCH = {
  size: 40,
  ids: 0,
  seq_lens: 8,
  n_seqs: 16,
  n_ids: 20,
  out: 24,
  seq_status: 32,
} as const;

/** Field offsets and size of `struct syn_sampling` on LP64 (bytes). */
export const SYN_SAMPLING = {
  size: 56,
  temperature: 0,
  top_k: 4,
  top_p: 8,
  min_p: 12,
  seed: 16,
  repeat_penalty: 20,
  repeat_last_n: 24,
  frequency_penalty: 28,
  presence_penalty: 32,
  n_logit_bias: 36,
  bias_ids: 40,
  bias_values: 48,
} as const;

/** The symbols of a shim, as `Deno.dlopen` binds them. */
export const SHIM_SYMBOLS = {
  syn_abi_version: { parameters: [], result: "u32" },
  syn_abi_layout: { parameters: [], result: "pointer" },
  syn_last_error_code: { parameters: [], result: "i32" },
  syn_last_error_message: { parameters: [], result: "pointer" },
  syn_engine_load: { parameters: ["buffer", "buffer"], result: "pointer", nonblocking: true },
  syn_engine_identity: { parameters: ["pointer"], result: "pointer" },
  syn_engine_limits: { parameters: ["pointer"], result: "pointer" },
  syn_engine_set_cancel_flag: { parameters: ["pointer", "buffer"], result: "void" },
  syn_embed: { parameters: ["pointer", "buffer"], result: "i32", nonblocking: true },
  syn_score: { parameters: ["pointer", "buffer"], result: "i32", nonblocking: true },
  syn_generate_begin: {
    parameters: ["pointer", "buffer", "u32", "buffer", "buffer"],
    result: "i32",
    nonblocking: true,
  },
  syn_generate_next: {
    parameters: ["pointer", "buffer", "u32", "buffer", "buffer"],
    result: "i32",
    nonblocking: true,
  },
  syn_generate_end: { parameters: ["pointer"], result: "void" },
  syn_state_size: { parameters: ["pointer"], result: "usize" },
  syn_state_save: { parameters: ["pointer", "buffer", "usize", "buffer"], result: "i32" },
  syn_state_restore: { parameters: ["pointer", "buffer", "usize"], result: "i32" },
  syn_state_eval: {
    parameters: ["pointer", "buffer", "u32", "buffer"],
    result: "i32",
    nonblocking: true,
  },
  syn_tokenize: {
    parameters: ["pointer", "buffer", "i32", "i32", "buffer", "i32"],
    result: "i32",
  },
  syn_engine_free: { parameters: ["pointer"], result: "void" },
  syn_test_abort: { parameters: [], result: "void" },
} as const satisfies Deno.ForeignLibraryInterface;

/** A shim library opened with {@link openShim}. */
export type ShimLibrary = Deno.DynamicLibrary<typeof SHIM_SYMBOLS>;

/** A failed shim call: the ABI status and the shim's message. */
export class ShimError extends Error {
  /** The status name (`cancelled`, `grammar_invalid`, …). */
  readonly status: SynStatusName;
  /** The numeric status. */
  readonly code: number;
  constructor(code: number, message: string) {
    super(message);
    this.name = "ShimError";
    this.code = code;
    this.status = statusName(code);
  }
}

/** The name of an ABI status code. */
export function statusName(code: number): SynStatusName {
  return (SYN_STATUS as Record<number, SynStatusName>)[code] ?? `unknown_${code}`;
}

/** Why a shim cannot be used (a load-time refusal): the file is missing or speaks another ABI. */
export class ShimRefused extends Error {
  /** `shim_missing`, `shim_unloadable`, `shim_abi_mismatch`. */
  readonly reason: "shim_missing" | "shim_unloadable" | "shim_abi_mismatch";
  constructor(reason: ShimRefused["reason"], message: string) {
    super(message);
    this.name = "ShimRefused";
    this.reason = reason;
  }
}

/**
 * Opens a shim and checks its ABI version.
 *
 * @param path The shared library's path.
 * @returns The bound library.
 * @throws {ShimRefused} `shim_missing` (no file), `shim_unloadable` (dlopen failed or a symbol is
 *   missing), `shim_abi_mismatch` (its `syn_abi_version()` is not {@link SYN_ABI_VERSION}).
 */
export function openShim(path: string): ShimLibrary {
  try {
    Deno.statSync(path);
  } catch {
    throw new ShimRefused(
      "shim_missing",
      `no shim library at ${path} (build it with the machine's C compiler: ./scripts/build_shim)`,
    );
  }
  let lib: ShimLibrary;
  try {
    lib = Deno.dlopen(path, SHIM_SYMBOLS);
  } catch (err) {
    throw new ShimRefused("shim_unloadable", `cannot open ${path}: ${(err as Error).message}`);
  }
  const v = lib.symbols.syn_abi_version();
  if (v !== SYN_ABI_VERSION) {
    lib.close();
    throw new ShimRefused(
      "shim_abi_mismatch",
      `${path} speaks engine ABI ${v}, this program speaks ${SYN_ABI_VERSION}`,
    );
  }
  return lib;
}

/** A NUL-terminated UTF-8 copy of a string, for a `buffer` parameter. */
export function cString(s: string): Uint8Array<ArrayBuffer> {
  const bytes = new TextEncoder().encode(s);
  const out = new Uint8Array(bytes.length + 1);
  out.set(bytes);
  return out;
}

/** Reads a NUL-terminated string the shim owns. */
export function readCString(p: Deno.PointerValue): string {
  return p === null ? "" : Deno.UnsafePointerView.getCString(p);
}

/** The shim's last error as a {@link ShimError} (the status a call returned, else its own). */
export function lastError(lib: ShimLibrary, code?: number): ShimError {
  const c = code ?? lib.symbols.syn_last_error_code();
  return new ShimError(c, readCString(lib.symbols.syn_last_error_message()) || statusName(c));
}

/** Writes a `syn_batch` for sequences of `ids` (back to back) into a fresh struct buffer. */
export function encodeBatch(
  ids: Int32Array<ArrayBuffer>,
  seqLens: Int32Array<ArrayBuffer>,
  out: Float32Array<ArrayBuffer>,
  seqStatus: Int32Array<ArrayBuffer>,
): Uint8Array<ArrayBuffer> {
  const buf = new Uint8Array(SYN_BATCH.size);
  const v = new DataView(buf.buffer);
  v.setBigUint64(SYN_BATCH.ids, pointerBits(ids), true);
  v.setBigUint64(SYN_BATCH.seq_lens, pointerBits(seqLens), true);
  v.setUint32(SYN_BATCH.n_seqs, seqLens.length, true);
  v.setUint32(SYN_BATCH.n_ids, ids.length, true);
  v.setBigUint64(SYN_BATCH.out, pointerBits(out), true);
  v.setBigUint64(SYN_BATCH.seq_status, pointerBits(seqStatus), true);
  return buf;
}

/** How a generation picks tokens, as `syn_sampling` takes it (lib/engines/engine.ts's names). */
export interface ShimSampling {
  temperature: number;
  top_k: number;
  top_p: number;
  min_p: number;
  seed: number;
  repeat_penalty: number;
  repeat_last_n: number;
  frequency_penalty: number;
  presence_penalty: number;
}

/**
 * Writes a `syn_sampling`. The bias arrays must stay referenced by the caller until the call
 * that reads the struct has returned.
 */
export function encodeSampling(
  s: ShimSampling,
  biasIds: Int32Array<ArrayBuffer>,
  biasValues: Float32Array<ArrayBuffer>,
): Uint8Array<ArrayBuffer> {
  const buf = new Uint8Array(SYN_SAMPLING.size);
  const v = new DataView(buf.buffer);
  v.setFloat32(SYN_SAMPLING.temperature, s.temperature, true);
  v.setInt32(SYN_SAMPLING.top_k, s.top_k, true);
  v.setFloat32(SYN_SAMPLING.top_p, s.top_p, true);
  v.setFloat32(SYN_SAMPLING.min_p, s.min_p, true);
  v.setUint32(SYN_SAMPLING.seed, s.seed, true);
  v.setFloat32(SYN_SAMPLING.repeat_penalty, s.repeat_penalty, true);
  v.setInt32(SYN_SAMPLING.repeat_last_n, s.repeat_last_n, true);
  v.setFloat32(SYN_SAMPLING.frequency_penalty, s.frequency_penalty, true);
  v.setFloat32(SYN_SAMPLING.presence_penalty, s.presence_penalty, true);
  v.setUint32(SYN_SAMPLING.n_logit_bias, biasIds.length, true);
  v.setBigUint64(SYN_SAMPLING.bias_ids, biasIds.length === 0 ? 0n : pointerBits(biasIds), true);
  v.setBigUint64(
    SYN_SAMPLING.bias_values,
    biasValues.length === 0 ? 0n : pointerBits(biasValues),
    true,
  );
  return buf;
}

function pointerBits(a: ArrayBufferView<ArrayBuffer>): bigint {
  return BigInt(Deno.UnsafePointer.value(Deno.UnsafePointer.of(a)));
}
