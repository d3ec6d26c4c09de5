/**
 * What the module checks in a GGUF file before a worker ever sees its path: its SHA-256 digest
 * (streamed, never the whole file in memory), its format (magic, version, parseable metadata)
 * and the facts that enter the numeric profile (quantization, pooling, context length) and the
 * vocabulary check (the tokens must be the tokenizer.json's).
 *
 * @module
 */
import { createHash } from "node:crypto";
import { gguf } from "@huggingface/gguf";
import { SynapseError } from "../../contract/errors.ts";
import type { WorkerPooling } from "../../workers/messages.ts";

/** Facts of a GGUF file. */
export interface GgufFacts {
  /** `general.architecture`, e.g. `llama`. */
  architecture: string;
  /** `<arch>.context_length`: trained context, tokens. */
  contextLength: number;
  /** `<arch>.embedding_length`: hidden size. */
  embeddingLength: number;
  /** `<arch>.pooling_type` as the worker wire spells it; no pooling type means the last token. */
  pooling: WorkerPooling;
  /** Weight quantization from `general.file_type` (`f32`, `f16`, `q8_0`, …). */
  quant: string;
  /** Float type of the unquantized parts: `f32` for an all-f32 file, `bf16`, else `f16`. */
  dtype: "f32" | "f16" | "bf16";
  /** `tokenizer.ggml.tokens`: the piece of every token id. */
  tokens: string[];
}

/** llama.cpp `llama_ftype` names (general.file_type). */
const FILE_TYPES: Record<number, string> = {
  0: "f32",
  1: "f16",
  2: "q4_0",
  3: "q4_1",
  7: "q8_0",
  8: "q5_0",
  9: "q5_1",
  10: "q2_k",
  11: "q3_k_s",
  12: "q3_k_m",
  13: "q3_k_l",
  14: "q4_k_s",
  15: "q4_k_m",
  16: "q5_k_s",
  17: "q5_k_m",
  18: "q6_k",
  32: "bf16",
};

/**
 * SHA-256 of a file, streamed in 8 MiB reads (yielding between them).
 *
 * @returns `sha256:<hex>`.
 * @throws {SynapseError} `artifact_invalid` when the file cannot be read.
 */
export async function sha256File(path: string, modelId: string): Promise<string> {
  let file: Deno.FsFile;
  try {
    file = await Deno.open(path, { read: true });
  } catch (err) {
    throw new SynapseError(
      "artifact_invalid",
      `Cannot load model '${modelId}': cannot read ${path}: ${(err as Error).message}`,
      { cause: err, details: { model_id: modelId, file: path } },
    );
  }
  try {
    const hash = createHash("sha256");
    const buf = new Uint8Array(8 * 1024 * 1024);
    while (true) {
      const n = await file.read(buf);
      if (n === null) break;
      hash.update(buf.subarray(0, n));
    }
    return "sha256:" + hash.digest("hex");
  } finally {
    file.close();
  }
}

/**
 * Reads and checks a GGUF file's header and metadata.
 *
 * @throws {SynapseError} `artifact_invalid` with `details.reason` `not_gguf` (bad magic or
 *   unreadable metadata) or `missing_metadata` (naming the key).
 */
export async function readGgufFacts(path: string, modelId: string): Promise<GgufFacts> {
  const bad = (reason: string, message: string, extra: Record<string, unknown> = {}) =>
    new SynapseError("artifact_invalid", `Cannot load model '${modelId}': ${message}`, {
      details: { model_id: modelId, file: path, reason, ...extra },
    });
  const head = new Uint8Array(8);
  try {
    using f = await Deno.open(path, { read: true });
    let got = 0;
    while (got < 8) {
      const n = await f.read(head.subarray(got));
      if (n === null) break;
      got += n;
    }
    if (got < 8) throw bad("not_gguf", `${path} is too short to be a GGUF file`);
  } catch (err) {
    if (err instanceof SynapseError) throw err;
    throw bad("unreadable", `cannot read ${path}: ${(err as Error).message}`);
  }
  const magic = new TextDecoder().decode(head.subarray(0, 4));
  const version = new DataView(head.buffer).getUint32(4, true);
  if (magic !== "GGUF") throw bad("not_gguf", `${path} is not a GGUF file (magic '${magic}')`);
  if (version < 2 || version > 3) {
    throw bad("not_gguf", `${path} is GGUF version ${version}; versions 2 and 3 are supported`);
  }
  let meta: Record<string, unknown>;
  try {
    meta = (await gguf(path, { allowLocalFile: true })).metadata as Record<string, unknown>;
  } catch (err) {
    throw bad("not_gguf", `cannot parse the GGUF metadata of ${path}: ${(err as Error).message}`);
  }
  const need = <T>(key: string, check: (v: unknown) => v is T): T => {
    const v = meta[key];
    if (!check(v)) throw bad("missing_metadata", `GGUF metadata '${key}' is missing`, { key });
    return v;
  };
  const isString = (v: unknown): v is string => typeof v === "string";
  const isNumber = (v: unknown): v is number => typeof v === "number" || typeof v === "bigint";
  const arch = need("general.architecture", isString);
  const contextLength = Number(need(`${arch}.context_length`, isNumber));
  const embeddingLength = Number(need(`${arch}.embedding_length`, isNumber));
  const tokens = need(
    "tokenizer.ggml.tokens",
    (v): v is string[] => Array.isArray(v) && v.every((t) => typeof t === "string"),
  );
  const poolingType = meta[`${arch}.pooling_type`];
  const pooling: WorkerPooling = poolingType === 1 ? "mean" : poolingType === 2 ? "cls" : "last";
  const ft = meta["general.file_type"];
  const quant = typeof ft === "number" ? FILE_TYPES[ft] ?? `ftype_${ft}` : "unknown";
  const dtype = quant === "f32" ? "f32" : quant === "bf16" ? "bf16" : "f16";
  return { architecture: arch, contextLength, embeddingLength, pooling, quant, dtype, tokens };
}
