/**
 * Loading an ONNX model on the ORT engine: reads and hashes the file, loads the sanitized
 * tokenizer and config.json, checks the sequence limit against the model's positions, loads the
 * session on the interactive thread (the bulk thread loads it on its first job) and computes the
 * numeric profile and fingerprint (docs/internals.md §4); then {@link ortReadyModel} serves it on
 * the registry's two shared ORT lanes.
 *
 * @module
 */
import { sha256FileHex } from "../identity/sha256.ts";
import { SynapseError } from "../contract/errors.ts";
import { onnxWeightDtype } from "../cache/validate.ts";
import { fingerprint, numericProfileId } from "../identity/numeric_profile.ts";
import { checkMatryoshkaDims } from "./matryoshka.ts";
import type { NumericProfile, ThreadPolicy } from "../identity/numeric_profile.ts";
import { ORT_ENGINE } from "../engines/ort/ort_thread.ts";
import type { OrtRunner, OrtThread } from "../engines/ort/ort_thread.ts";
import { ORT_MICRO_BATCH, OrtEngine, warmupShapes } from "../engines/ort/ort_engine.ts";
import { Lane } from "../lanes/lane.ts";
import type { Admission } from "../sched/admission.ts";
import type { LaneScheduler } from "../sched/lane_scheduler.ts";
import { SanitizedTokenizer } from "../tokenize/tokenizer.ts";
import type { ModelEntry, ModelSource, ReadyModel } from "./model.ts";
import { loadPromptTable, promptProfileField } from "./prompts.ts";
import type { PromptTable } from "./prompts.ts";

/** Prompt-template identity of the cross-encoder pair layout (part of rerank profiles). */
export const RERANK_PAIR_TEMPLATE = "synapse-rerank-cls-query-sep-doc-sep-v1";

/** What {@link loadOrtModel} needs from the registry. */
export interface OrtLoadContext {
  /** Thread of interactive work; the model loads here now. */
  interactive: OrtThread;
  /**
   * Runner of bulk work: the model is registered and loads on first use (a view of `interactive`
   * when both classes share one session: ort_threads.ts).
   */
  bulk: OrtRunner;
  threadPolicy: ThreadPolicy;
  /** `inline.max_tokens`: the certified batch-token budget. */
  maxBatchTokens: number;
}

/** A loaded ORT model, before its lanes exist. */
export interface OrtLoaded {
  tokenizer: SanitizedTokenizer;
  profile: NumericProfile;
  maxTokens: number;
  testModel: boolean;
  coldLoadMs: number;
  interactive: OrtEngine;
  bulk: OrtEngine;
  /** The model's prompt table (embed models that declare one). */
  prompts?: PromptTable;
  /** The source's `matryoshka_dims`, checked against the model's width. */
  matryoshkaDims?: readonly number[];
}

/**
 * Loads an ORT model.
 *
 * @throws {SynapseError} `artifact_invalid` naming the file that cannot be read or the limit that
 *   does not fit (`max_tokens` outside [specials + 1, max_position_embeddings]); `invalid_request`
 *   for a generation task.
 */
export async function loadOrtModel(src: ModelSource, ctx: OrtLoadContext): Promise<OrtLoaded> {
  const modelId = src.modelId;
  if (src.task === "generate") {
    throw new SynapseError(
      "invalid_request",
      `Cannot load model '${modelId}': generation needs the llama engine (a GGUF model)`,
      { details: { model_id: modelId, task: src.task, engine: "ort" } },
    );
  }
  // A model-cache blob is verified against its recorded digest (once per boot) before the
  // engine reads it; a file from the config is hashed here.
  const modelDigest = src.verify !== undefined
    ? await src.verify()
    : await hashModelFile(src.modelPath, modelId);
  if (src.tokenizerPath === undefined) {
    throw new SynapseError(
      "invalid_request",
      `Cannot load model '${modelId}': an ONNX model needs its tokenizer.json (tokenizer_path)`,
      { details: { model_id: modelId, field: "tokenizer_path", engine: "ort" } },
    );
  }
  // The weights' storage dtype (FLOAT16 initializers → f16) and quantization (integer MatMuls
  // over INT8 weights → int8; docs/models.md "The int8 lane") are part of the profile. A file the
  // walk cannot read is left to onnxruntime, whose own words then refuse it.
  let weights: Awaited<ReturnType<typeof onnxWeightDtype>> | SynapseError;
  try {
    weights = await onnxWeightDtype(src.modelPath, "model.onnx");
  } catch (err) {
    if (!(err instanceof SynapseError)) throw err;
    weights = err;
  }
  if (!(weights instanceof SynapseError)) {
    checkDeclaredDtype(src, weights.dtype, "ort");
    checkDeclaredQuant(src, weights.quant, "ort");
  }
  const tokenizer = await SanitizedTokenizer.fromFile(src.tokenizerPath);
  const config = await readConfig(src);
  checkDeclaredFamily(
    src,
    typeof config.model_type === "string" ? config.model_type : undefined,
    "config.json model_type",
  );
  const prompts = await loadPromptTable(src);
  const maxPos = typeof config.max_position_embeddings === "number"
    ? config.max_position_embeddings
    : 512;
  const modelMax = typeof config.synapse_max_tokens === "number"
    ? config.synapse_max_tokens
    : maxPos;
  const maxTokens = src.maxTokens ?? Math.min(src.maxTokensDefault ?? Infinity, modelMax);
  if (maxTokens > maxPos || maxTokens < tokenizer.singleSpecialTokens + 1) {
    throw new SynapseError(
      "artifact_invalid",
      `Cannot load model '${modelId}': max_tokens ${maxTokens} must be between ${
        tokenizer.singleSpecialTokens + 1
      } (special tokens plus one) and the model's ${maxPos} positions (max_position_embeddings)`,
      { details: { model_id: modelId, max_tokens: maxTokens, max_positions: maxPos } },
    );
  }
  const task = src.task;
  const spec = {
    load: {
      modelRef: modelId,
      path: src.modelPath,
      task,
      pooling: src.pooling,
      normalize: src.normalize,
      warmupShapes: warmupShapes(maxTokens),
    },
    maxSequenceTokens: maxTokens,
  };
  let loaded: Awaited<ReturnType<typeof OrtEngine.load>>;
  try {
    loaded = await OrtEngine.load(ctx.interactive, spec);
  } catch (err) {
    // onnxruntime's own words ("Protobuf parsing failed"), under the same lead and details as
    // every other load refusal.
    if (err instanceof SynapseError && err.code === "artifact_invalid") {
      throw new SynapseError(
        "artifact_invalid",
        `Cannot load model '${modelId}': onnxruntime cannot open '${src.modelPath}': ${
          err.message.replace(/^ORT lane: /, "")
        }`,
        { details: { model_id: modelId, file: src.modelPath, reason: "onnx_load_failed" } },
      );
    }
    throw err;
  }
  const { engine: interactive, coldLoadMs } = loaded;
  if (weights instanceof SynapseError) {
    // onnxruntime took a file the walk could not read: its dtype is unknown, so refuse it.
    await ctx.interactive.unload(modelId).catch(() => {});
    throw weights;
  }
  try {
    checkMatryoshkaDims(src, interactive.dims);
  } catch (err) {
    await ctx.interactive.unload(modelId).catch(() => {});
    throw err;
  }
  const dtype = weights.dtype;
  // An int8 model computes its non-quantized tensors (and the MatMuls' outputs) in fp32: its
  // dtype stays f32, and `quant` says int8 (so the lane is never the fp32 reference).
  const quant = weights.quant;
  const bulk = OrtEngine.lazy(ctx.bulk, spec, interactive.dims);
  const profile: NumericProfile = {
    model_digest: modelDigest,
    quant,
    engine: {
      engine: ORT_ENGINE.engine,
      version: ORT_ENGINE.version,
      build_flags: { ...ORT_ENGINE.build_flags },
    },
    sanitized_tokenizer_digest: tokenizer.digest,
    pooling: task === "rerank" ? "cls" : src.pooling,
    normalization: task === "embed" && src.normalize ? "l2" : "none",
    dtype,
    flash_attention: "disabled",
    certified_shape: {
      max_context_tokens: maxTokens,
      max_batch_tokens: ctx.maxBatchTokens,
      max_micro_batch_tokens: ORT_MICRO_BATCH.maxMicroBatchTokens,
      max_sequences: ORT_MICRO_BATCH.maxSequences,
    },
    ...(task === "rerank" ? { prompt_template: RERANK_PAIR_TEMPLATE } : {}),
    ...promptProfileField(prompts),
    thread_policy: ctx.threadPolicy,
    operation: task,
  };
  return {
    tokenizer,
    profile,
    maxTokens,
    testModel: src.testModel === true || config.synapse_test_model === true,
    coldLoadMs,
    interactive,
    bulk,
    ...(prompts === undefined ? {} : { prompts }),
    ...(src.matryoshkaDims === undefined ? {} : { matryoshkaDims: [...src.matryoshkaDims] }),
  };
}

/**
 * Refuses a load whose declared dtype (`ModelSource.dtype`, the preload `dtype`) is not the
 * weights' own: the engine runs the weights as stored and cannot honour another.
 *
 * @param src The source.
 * @param weights The weights' dtype as read from the file (`f32`, `f16`, `bf16`).
 * @param engine Engine name for the message.
 * @throws {SynapseError} `invalid_request {model_id, field: "dtype", dtype, weights_dtype}`.
 */
export function checkDeclaredDtype(src: ModelSource, weights: string, engine: string): void {
  if (src.dtype === undefined || src.dtype === weights) return;
  throw new SynapseError(
    "invalid_request",
    `Cannot load model '${src.modelId}': it declares dtype '${src.dtype}', but its weights are ${weights} and engine '${engine}' runs them as stored; drop dtype or set it to '${weights}'`,
    {
      details: {
        model_id: src.modelId,
        field: "dtype",
        dtype: src.dtype,
        weights_dtype: weights,
        engine,
      },
    },
  );
}

/**
 * Refuses a load whose declared `quant` (preload `quant`) is not the quantization the lane
 * serves: the fingerprint's `quant` (docs/internals.md §4): for an ONNX model the weights' dtype
 * (`f32`, `f16`, `bf16`), or `int8` for a dynamically quantized one (integer MatMuls over INT8
 * weights: `ck-synapse quantize`, `pull --quant int8`), and `general.file_type` for a GGUF (`f16`,
 * `q8_0`, `q4_k_m`, …). The engine runs the weights as stored and quantizes nothing at load, so
 * a declaration is a check.
 * Compared case-insensitively (`Q8_0` is `q8_0`).
 *
 * @param src The source.
 * @param served The quantization the lane serves (lower case).
 * @param engine Engine name for the message.
 * @throws {SynapseError} `invalid_request {model_id, field: "quant", quant, served_quant, engine}`.
 */
export function checkDeclaredQuant(src: ModelSource, served: string, engine: string): void {
  if (src.quant === undefined || src.quant.toLowerCase() === served) return;
  throw new SynapseError(
    "invalid_request",
    `Cannot load model '${src.modelId}': it declares quant '${src.quant}', but the file is ${served} and engine '${engine}' runs it as stored (it quantizes nothing at load); drop quant or set it to '${served}'${
      src.quant.toLowerCase() === "int8" && engine === "ort"
        ? " (make an int8 file with 'ck-synapse quantize' or 'ck-synapse pull --quant int8')"
        : ""
    }`,
    {
      details: {
        model_id: src.modelId,
        field: "quant",
        quant: src.quant,
        served_quant: served,
        engine,
      },
    },
  );
}

/**
 * Refuses a load whose declared `family` (preload `family`) is not the model's architecture as
 * its own files name it: `model_type` of an ONNX model's `config.json`, `general.architecture`
 * of a GGUF. A model whose files name none cannot be checked, so the declaration is refused too.
 * Compared case-insensitively.
 *
 * @param src The source.
 * @param actual The architecture the files name, or `undefined` when they name none.
 * @param where Where the architecture was read, for the message (`config.json model_type`).
 * @throws {SynapseError} `invalid_request {model_id, field: "family", family, model_family}`
 *   (`model_family` null when the files name none).
 */
export function checkDeclaredFamily(
  src: ModelSource,
  actual: string | undefined,
  where: string,
): void {
  if (src.family === undefined) return;
  if (actual !== undefined && src.family.toLowerCase() === actual.toLowerCase()) return;
  throw new SynapseError(
    "invalid_request",
    actual === undefined
      ? `Cannot load model '${src.modelId}': it declares family '${src.family}', but its files name no architecture (${where}) to check it against; drop family`
      : `Cannot load model '${src.modelId}': it declares family '${src.family}', but its ${where} is '${actual}'; drop family or set it to '${actual}'`,
    {
      details: {
        model_id: src.modelId,
        field: "family",
        family: src.family,
        model_family: actual ?? null,
      },
    },
  );
}

/** The schedulers and policy the lanes of an ORT model share (all owned by the registry). */
export interface OrtLaneContext {
  /** Scheduler of the interactive ORT thread. */
  interactiveScheduler: LaneScheduler;
  /** Scheduler of the bulk ORT thread. */
  bulkScheduler: LaneScheduler;
  /** The module's admission. */
  admission: Admission;
  /**
   * True while other engine work shares the cores: interactive runs then use the quiet session.
   * Asked at each run.
   */
  quiet: () => boolean;
  /** Wall clock in ms. */
  now: () => number;
}

/**
 * The ready model of a loaded ORT model: `interactive` on the lane `ort-interactive`, `bulk` on
 * `ort-bulk` (the two threads every ORT model shares).
 *
 * @param entry The registry's entry of the model (its id and task).
 * @param o What {@link loadOrtModel} returned.
 * @param ctx Schedulers, admission, quiet policy and clock of the lanes.
 * @returns The model as operations see it.
 */
export function ortReadyModel(
  entry: Pick<ModelEntry, "modelId" | "task">,
  o: OrtLoaded,
  ctx: OrtLaneContext,
): ReadyModel {
  return {
    modelId: entry.modelId,
    task: entry.task,
    engineKind: "ort",
    tokenizer: o.tokenizer,
    profile: o.profile,
    ...identityOf(o.profile),
    dims: o.interactive.dims,
    ...(o.matryoshkaDims === undefined ? {} : { matryoshkaDims: o.matryoshkaDims }),
    maxTokens: o.maxTokens,
    testModel: o.testModel,
    identity: o.interactive.identity,
    interactive: ortLane("ort-interactive", o.interactive, "interactive", ctx),
    bulk: ortLane("ort-bulk", o.bulk, "bulk", ctx),
    ...(o.prompts === undefined ? {} : { prompts: o.prompts }),
  };
}

function ortLane(
  name: string,
  engine: OrtEngine,
  cls: "interactive" | "bulk",
  ctx: OrtLaneContext,
): Lane {
  return new Lane({
    name,
    engine,
    cls,
    scheduler: cls === "interactive" ? ctx.interactiveScheduler : ctx.bulkScheduler,
    admission: ctx.admission,
    // While other engine work shares the cores, interactive runs use the quiet session.
    ...(cls === "interactive" ? { quiet: ctx.quiet } : {}),
    now: ctx.now,
  });
}

/** `sha256:<hex>` of a model file, streamed (each read yields, so /health is never stalled). */
async function hashModelFile(path: string, modelId: string): Promise<string> {
  try {
    return "sha256:" + await sha256FileHex(path);
  } catch (err) {
    throw new SynapseError(
      "artifact_invalid",
      `Cannot load model '${modelId}': cannot read ${path}: ${(err as Error).message}`,
      { cause: err, details: { model_id: modelId, file: path } },
    );
  }
}

/** Profile id and fingerprint of a profile. */
export function identityOf(profile: NumericProfile): {
  numericProfileId: string;
  fingerprint: string;
} {
  return { numericProfileId: numericProfileId(profile), fingerprint: fingerprint(profile) };
}

async function readConfig(src: ModelSource): Promise<Record<string, unknown>> {
  if (src.configPath === undefined) return {};
  try {
    return JSON.parse(await Deno.readTextFile(src.configPath));
  } catch (err) {
    if (src.configOptional && err instanceof Deno.errors.NotFound) return {};
    throw new SynapseError(
      "artifact_invalid",
      `Cannot load model '${src.modelId}': cannot read ${src.configPath}: ${
        (err as Error).message
      }`,
      { cause: err, details: { model_id: src.modelId, file: src.configPath } },
    );
  }
}
