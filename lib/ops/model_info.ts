/**
 * `model.info {model_id, task?, verbose?}` (docs/operations.md, `model.info`): what one model is,
 * read from its files and its loaded state — never touching an engine. The doors that describe a
 * model in another API's shape map it (Ollama's `POST /api/show`, its warm-up call).
 *
 * - Without `task` the model is the registry's entry of that id, in any state (`state` says which).
 * - With `task` it is resolved exactly as a serving operation of that task resolves it (the same
 *   refusals: `unknown_model`, `model_loading` while it loads, its load error, `invalid_request`
 *   for a model of another task, the certification gate), so a caller learns whether a request of
 *   that task would be served by it before sending one.
 * - A GGUF model answers its file's metadata key/value pairs (`metadata`: every key but
 *   `tokenizer.chat_template`, which is `chat_template`; an array of more than
 *   {@link INFO_MAX_ARRAY} items is `[]` unless `verbose`), its parameter count (the sum of its
 *   tensors' element counts) and, with `verbose`, its tensors. An ONNX model answers what its
 *   config.json and its load tell: `architecture` (`model_type`), `max_tokens`, `dims`.
 *
 * @module
 */
import { z } from "zod";
import { GGMLQuantizationType, gguf } from "@huggingface/gguf";
import { ggufQuant } from "../engines/llama/gguf.ts";
import { SynapseError } from "../contract/errors.ts";
import { parseParams, wellFormedName } from "../contract/schemas.ts";
import type { ModelEntry } from "../models/model.ts";
import type { OpContext } from "./context.ts";
import { modelRow } from "./models.ts";
import type { ModelServingState } from "./status.ts";
import { modelNamed, resolveModel } from "./_resolve_model.ts";

/** Longest metadata array answered whole without `verbose` (Ollama's `/api/show` cut). */
export const INFO_MAX_ARRAY = 5;

/** `model.info` params. */
export const ModelInfoParams = z.strictObject({
  model_id: wellFormedName(),
  task: z.enum(["embed", "rerank", "generate"]).optional(),
  verbose: z.boolean().optional(),
});

/** One tensor of a GGUF file (`model.info {verbose: true}`). */
export interface TensorInfo {
  name: string;
  /** ggml's type name (`F32`, `Q8_0`, …). */
  type: string;
  shape: number[];
}

/** `model.info` result. */
export interface ModelInfoResult {
  module_generation: number;
  model_id: string;
  task: "embed" | "rerank" | "generate";
  /** The engine (`ort`, `llama`). */
  engine: string;
  /** The artifact's format: `gguf` (llama) or `onnx` (ort). */
  format: "gguf" | "onnx";
  state: ModelServingState;
  /** The fingerprint it serves under; null until it is loaded. */
  fingerprint: string | null;
  /** Bytes of the model file, when it can be read. */
  artifact_bytes?: number;
  /** ms since the epoch when its load started. */
  loaded_at_ms: number;
  /** Longest sequence (a prompt, an input), tokens, as `models.list` says it. */
  max_tokens: number;
  /** A loaded GGUF model's context, tokens: what a generation's prompt and max_tokens share. */
  context_tokens?: number;
  /** Vector width (embed), 1 (rerank), 0 (generate); once loaded. */
  dims?: number;
  /** Storage dtype of the weights. */
  dtype: string;
  /** Weight quantization: the loaded lane's, else its GGUF's `general.file_type` (`f16`, …). */
  quant?: string;
  /** GGUF `general.architecture`, or an ONNX config.json's `model_type`. */
  architecture?: string;
  /** Number of weights: the sum of the GGUF tensors' element counts. */
  parameter_count?: number;
  /** The model's own chat template (GGUF `tokenizer.chat_template`), when it has one. */
  chat_template?: string;
  /** GGUF metadata key/value pairs (module doc); `{}` for ONNX. */
  metadata: Record<string, unknown>;
  /** With `verbose`: the GGUF file's tensors. */
  tensors?: TensorInfo[];
  test_model?: true;
}

/**
 * Runs `model.info`.
 *
 * @param ctx The module context.
 * @param rawParams `{model_id, task?, verbose?}`.
 * @returns The model's facts (module doc).
 * @throws {SynapseError} channel `invalid_request` for malformed params; `unknown_model {model_id,
 *   known}`; with `task`, every refusal of resolving a model for that task (`model_loading`, the
 *   load error, `invalid_request` for another task, `not_certified`); `artifact_invalid` for a
 *   GGUF file that can no longer be read.
 */
export async function modelInfo(ctx: OpContext, rawParams: unknown): Promise<ModelInfoResult> {
  const p = parseParams("model.info", ModelInfoParams, rawParams);
  let entry: ModelEntry | undefined;
  if (p.task !== undefined) {
    const ready = resolveModel(ctx, p.model_id, p.task);
    entry = ctx.registry.list().find((m) => m.modelId === ready.modelId);
  } else {
    // A config model_aliases name stands for its model, as on every serving op.
    const id = modelNamed(ctx, p.model_id).modelId;
    entry = ctx.registry.list().find((m) => m.modelId === id);
  }
  if (entry === undefined) {
    throw new SynapseError("unknown_model", `Cannot find model '${p.model_id}'`, {
      details: { model_id: p.model_id, known: ctx.registry.list().map((m) => m.modelId) },
    });
  }
  const spec = ctx.loads?.spec(entry.modelId);
  const row = modelRow(entry, ctx.now(), spec?.origin ?? "config", ctx);
  const r = entry.ready;
  const out: ModelInfoResult = {
    module_generation: ctx.moduleGeneration,
    model_id: entry.modelId,
    task: entry.task,
    engine: entry.engine,
    format: entry.engine === "llama" ? "gguf" : "onnx",
    state: row.state,
    fingerprint: r?.fingerprint ?? null,
    loaded_at_ms: row.loaded_at_ms,
    max_tokens: row.max_tokens,
    dtype: row.dtype,
    metadata: {},
  };
  if (row.artifact_bytes !== undefined) out.artifact_bytes = row.artifact_bytes;
  if (row.dims !== undefined) out.dims = row.dims;
  if (r !== undefined && entry.engine === "llama") {
    out.context_tokens = r.profile.certified_shape.max_context_tokens;
  }
  if (r !== undefined && typeof r.profile.quant === "string") out.quant = r.profile.quant;
  if (entry.testModel) out.test_model = true;
  if (entry.engine === "llama") {
    await addGgufFacts(out, entry, p.verbose === true);
  } else {
    const arch = await onnxModelType(entry);
    if (arch !== undefined) out.architecture = arch;
  }
  return out;
}

/** What one read of a GGUF file gives `model.info`. */
interface GgufInfo {
  metadata: Record<string, unknown>;
  chatTemplate?: string;
  architecture?: string;
  parameterCount: number;
  tensors?: TensorInfo[];
}

/**
 * The non-verbose facts of each loaded GGUF model, read once: a real model's vocabulary makes its
 * header megabytes long, and the facts cannot change while the model is loaded.
 */
const CACHED = new WeakMap<object, Promise<GgufInfo>>();

/** The GGUF file's metadata, parameter count and (verbose) tensors, added to `out`. */
async function addGgufFacts(
  out: ModelInfoResult,
  entry: ModelEntry,
  verbose: boolean,
): Promise<void> {
  let info: GgufInfo;
  if (verbose || entry.ready === undefined) {
    info = await readGgufInfo(entry, verbose);
  } else {
    let cached = CACHED.get(entry.ready);
    if (cached === undefined) {
      cached = readGgufInfo(entry, false);
      CACHED.set(entry.ready, cached);
      cached.catch(() => CACHED.delete(entry.ready!));
    }
    info = await cached;
  }
  out.metadata = { ...info.metadata };
  if (info.chatTemplate !== undefined) out.chat_template = info.chatTemplate;
  if (info.architecture !== undefined) out.architecture = info.architecture;
  out.parameter_count = info.parameterCount;
  // Not loaded yet: the quantization its file declares.
  out.quant ??= ggufQuant(info.metadata["general.file_type"]);
  if (info.tensors !== undefined) out.tensors = info.tensors;
}

/**
 * Reads a GGUF file's header.
 *
 * @throws {SynapseError} `artifact_invalid` when it cannot be read or parsed.
 */
async function readGgufInfo(entry: ModelEntry, verbose: boolean): Promise<GgufInfo> {
  const path = entry.source.modelPath;
  let parsed: Awaited<ReturnType<typeof gguf>>;
  try {
    parsed = await gguf(path, { allowLocalFile: true });
  } catch (err) {
    throw new SynapseError(
      "artifact_invalid",
      `Cannot describe model '${entry.modelId}': cannot read the GGUF metadata of ${path}: ${
        (err as Error).message
      }`,
      { details: { model_id: entry.modelId, file: path, reason: "not_gguf" } },
    );
  }
  const meta = parsed.metadata as Record<string, unknown>;
  const info: GgufInfo = { metadata: {}, parameterCount: 0 };
  for (const [key, value] of Object.entries(meta)) {
    // The library's own bookkeeping, not the file's keys.
    if (key === "version" || key === "tensor_count" || key === "kv_count") continue;
    if (key === "tokenizer.chat_template") {
      if (typeof value === "string" && value !== "") info.chatTemplate = value;
      continue;
    }
    info.metadata[key] = jsonValue(value, verbose);
  }
  const arch = meta["general.architecture"];
  if (typeof arch === "string") info.architecture = arch;
  let count = 0n;
  for (const t of parsed.tensorInfos) count += t.shape.reduce((a, b) => a * BigInt(b), 1n);
  info.parameterCount = Number(count);
  if (verbose) {
    info.tensors = parsed.tensorInfos.map((t) => ({
      name: t.name,
      type: GGMLQuantizationType[t.dtype] ?? String(t.dtype),
      shape: t.shape.map(Number),
    }));
  }
  return info;
}

/** A metadata value as JSON: bigints as numbers, long arrays cut to `[]` unless verbose. */
function jsonValue(v: unknown, verbose: boolean): unknown {
  if (typeof v === "bigint") return Number(v);
  if (Array.isArray(v)) {
    if (!verbose && v.length > INFO_MAX_ARRAY) return [];
    return v.map((x) => jsonValue(x, verbose));
  }
  return v;
}

/** An ONNX model's config.json `model_type`, when it has one. */
async function onnxModelType(entry: ModelEntry): Promise<string | undefined> {
  const path = entry.source.configPath;
  if (path === undefined) return undefined;
  try {
    const config = JSON.parse(await Deno.readTextFile(path)) as Record<string, unknown>;
    return typeof config.model_type === "string" ? config.model_type : undefined;
  } catch {
    return undefined;
  }
}
