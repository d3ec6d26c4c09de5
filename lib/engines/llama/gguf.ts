/**
 * What the module checks in a GGUF file before a worker ever sees its path: its SHA-256 digest
 * (streamed, never the whole file in memory), its format (magic, version, parseable metadata)
 * and the facts that enter the numeric profile (quantization, pooling, context length) and the
 * vocabulary check (the tokens must be the tokenizer.json's); and, for a GGUF served without a
 * tokenizer.json, its `tokenizer.*` metadata read byte-exact ({@link readGgufMetadata}).
 *
 * @module
 */
import { sha256FileHex } from "../../identity/sha256.ts";
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
  /** `tokenizer.chat_template`: the model's Jinja chat template, when the file has one. */
  chatTemplate?: string;
  /**
   * `tokenizer.chat_template.rerank`: a reranker's prompt template with `{query}` and
   * `{document}` slots (llama.cpp's converter writes Qwen3-Reranker's), when the file has one.
   */
  rerankTemplate?: string;
  /** `<arch>.classifier.output_labels`: a classification head's labels, when the file names them. */
  classifierLabels?: string[];
  /** The piece of `tokenizer.ggml.bos_token_id`, when set (a chat template's `bos_token`). */
  bosToken?: string;
  /** The piece of `tokenizer.ggml.eos_token_id`, when set (a chat template's `eos_token`). */
  eosToken?: string;
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
 * The quantization name of a GGUF `general.file_type` (llama.cpp's `llama_ftype`).
 *
 * @param fileType The metadata value.
 * @returns `f32`, `f16`, `q8_0`, …; `ftype_<n>` for a number without a name; `unknown` for none.
 */
export function ggufQuant(fileType: unknown): string {
  return typeof fileType === "number" ? FILE_TYPES[fileType] ?? `ftype_${fileType}` : "unknown";
}

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
    return "sha256:" + await sha256FileHex(file);
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
  const quant = ggufQuant(meta["general.file_type"]);
  const dtype = quant === "f32" ? "f32" : quant === "bf16" ? "bf16" : "f16";
  const facts: GgufFacts = {
    architecture: arch,
    contextLength,
    embeddingLength,
    pooling,
    quant,
    dtype,
    tokens,
  };
  const template = meta["tokenizer.chat_template"];
  if (typeof template === "string" && template !== "") facts.chatTemplate = template;
  const rerankTemplate = meta["tokenizer.chat_template.rerank"];
  if (typeof rerankTemplate === "string" && rerankTemplate !== "") {
    facts.rerankTemplate = rerankTemplate;
  }
  const labels = meta[`${arch}.classifier.output_labels`];
  if (Array.isArray(labels) && labels.every((l) => typeof l === "string")) {
    facts.classifierLabels = labels as string[];
  }
  const piece = (key: string): string | undefined => {
    const id = meta[key];
    return typeof id === "number" || typeof id === "bigint" ? tokens[Number(id)] : undefined;
  };
  const bos = piece("tokenizer.ggml.bos_token_id");
  const eos = piece("tokenizer.ggml.eos_token_id");
  if (bos !== undefined) facts.bosToken = bos;
  if (eos !== undefined) facts.eosToken = eos;
  return facts;
}

/** Options of {@link readGgufMetadata}. */
export interface ReadGgufMetadataOptions {
  /**
   * Keep only the keys that start with one of these (every value is still parsed, to skip it).
   *
   * @default {["general.", "tokenizer."]}
   */
  prefixes?: readonly string[];
}

/**
 * Reads a GGUF file's metadata key/value pairs (versions 2 and 3) with strings decoded exactly:
 * a leading U+FEFF is kept (a default `TextDecoder`, as `@huggingface/gguf` uses, drops it, and
 * llama2's token 31759 is that one character), invalid UTF-8 becomes U+FFFD. Arrays of numbers
 * are `number[]`, of strings `string[]`; 64-bit integers are numbers when safe, else bigints.
 * The header is read in 1 MiB chunks; tensor data is never read.
 *
 * @param path The `.gguf` file.
 * @param modelId Named in errors.
 * @param options Which keys to keep.
 * @returns The kept keys and values.
 * @throws {SynapseError} `artifact_invalid` with `details.reason` `unreadable` or `not_gguf`
 *   (bad magic or version, truncated header, unknown value type).
 */
export async function readGgufMetadata(
  path: string,
  modelId: string,
  options: ReadGgufMetadataOptions = {},
): Promise<Record<string, unknown>> {
  const prefixes = options.prefixes ?? ["general.", "tokenizer."];
  const bad = (reason: string, message: string) =>
    new SynapseError("artifact_invalid", `Cannot load model '${modelId}': ${message}`, {
      details: { model_id: modelId, file: path, reason },
    });
  let file: Deno.FsFile;
  try {
    file = await Deno.open(path, { read: true });
  } catch (err) {
    throw bad("unreadable", `cannot read ${path}: ${(err as Error).message}`);
  }
  try {
    const r = new HeaderReader(file, () => bad("not_gguf", `${path} ends inside its GGUF header`));
    const magic = await r.u32();
    const version = await r.u32();
    if (magic !== 0x46554747) throw bad("not_gguf", `${path} is not a GGUF file`);
    if (version < 2 || version > 3) {
      throw bad("not_gguf", `${path} is GGUF version ${version}; versions 2 and 3 are supported`);
    }
    await r.u64(); // tensor count
    const kvCount = await r.u64();
    const out: Record<string, unknown> = {};
    for (let i = 0; i < kvCount; i++) {
      const key = await r.string();
      const type = await r.u32();
      const keep = prefixes.some((p) => key.startsWith(p));
      const value = await readValue(
        r,
        type,
        keep,
        () => bad("not_gguf", `${path} has GGUF metadata '${key}' of unknown type ${type}`),
      );
      if (keep) out[key] = value;
    }
    return out;
  } finally {
    file.close();
  }
}

/** GGUF value types (ggml's `gguf_type`). */
const GT = {
  u8: 0,
  i8: 1,
  u16: 2,
  i16: 3,
  u32: 4,
  i32: 5,
  f32: 6,
  bool: 7,
  string: 8,
  array: 9,
  u64: 10,
  i64: 11,
  f64: 12,
} as const;

async function readValue(
  r: HeaderReader,
  type: number,
  keep: boolean,
  unknown: () => Error,
): Promise<unknown> {
  switch (type) {
    case GT.u8:
      return (await r.bytes(1))[0];
    case GT.i8:
      return new Int8Array((await r.bytes(1)).slice().buffer)[0];
    case GT.u16:
      return (await r.view(2)).getUint16(0, true);
    case GT.i16:
      return (await r.view(2)).getInt16(0, true);
    case GT.u32:
      return await r.u32();
    case GT.i32:
      return (await r.view(4)).getInt32(0, true);
    case GT.f32:
      return (await r.view(4)).getFloat32(0, true);
    case GT.bool:
      return (await r.bytes(1))[0] !== 0;
    case GT.string:
      return keep ? await r.string() : await r.skipString();
    case GT.u64:
      return safe((await r.view(8)).getBigUint64(0, true));
    case GT.i64:
      return safe((await r.view(8)).getBigInt64(0, true));
    case GT.f64:
      return (await r.view(8)).getFloat64(0, true);
    case GT.array: {
      const itemType = await r.u32();
      const n = await r.u64();
      if (itemType === GT.array) throw unknown();
      const items: unknown[] = [];
      for (let i = 0; i < n; i++) {
        const v = await readValue(r, itemType, keep, unknown);
        if (keep) items.push(v);
      }
      return keep ? items : undefined;
    }
    default:
      throw unknown();
  }
}

function safe(v: bigint): number | bigint {
  return v <= BigInt(Number.MAX_SAFE_INTEGER) && v >= BigInt(Number.MIN_SAFE_INTEGER)
    ? Number(v)
    : v;
}

/** Sequential little-endian reads of a file's head through a 1 MiB buffer. */
class HeaderReader {
  static #utf8 = new TextDecoder("utf-8", { ignoreBOM: true });
  #file: Deno.FsFile;
  #buf = new Uint8Array(0);
  #pos = 0;
  #eof = false;
  #truncated: () => Error;

  constructor(file: Deno.FsFile, truncated: () => Error) {
    this.#file = file;
    this.#truncated = truncated;
  }

  /** Ensures `n` unread bytes are buffered. */
  async #fill(n: number): Promise<void> {
    while (this.#buf.length - this.#pos < n) {
      if (this.#eof) throw this.#truncated();
      const chunk = new Uint8Array(Math.max(1 << 20, n));
      const got = await this.#file.read(chunk);
      if (got === null) {
        this.#eof = true;
        continue;
      }
      const rest = this.#buf.subarray(this.#pos);
      const next = new Uint8Array(rest.length + got);
      next.set(rest);
      next.set(chunk.subarray(0, got), rest.length);
      this.#buf = next;
      this.#pos = 0;
    }
  }

  async bytes(n: number): Promise<Uint8Array> {
    await this.#fill(n);
    const out = this.#buf.subarray(this.#pos, this.#pos + n);
    this.#pos += n;
    return out;
  }

  async view(n: number): Promise<DataView> {
    const b = await this.bytes(n);
    return new DataView(b.buffer, b.byteOffset, n);
  }

  async u32(): Promise<number> {
    return (await this.view(4)).getUint32(0, true);
  }

  async u64(): Promise<number> {
    const v = (await this.view(8)).getBigUint64(0, true);
    if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw this.#truncated();
    return Number(v);
  }

  async string(): Promise<string> {
    return HeaderReader.#utf8.decode(await this.bytes(await this.u64()));
  }

  async skipString(): Promise<undefined> {
    await this.bytes(await this.u64());
    return undefined;
  }
}
