/**
 * Loading a GGUF model on the llama engine: the module checks the artifact before any worker
 * sees its path (streamed SHA-256 against the optional expected digest, GGUF magic and metadata,
 * the GGUF vocabulary equal to the tokenizer.json's id by id — or, with no tokenizer.json, a
 * tokenizer built from the GGUF's own vocabulary metadata, which once the worker has loaded must
 * tokenize a fixed text set exactly as llama.cpp does), sets the lane's limits from the
 * model (context from `<arch>.context_length` up to a cap; a configured `max_tokens` the lane
 * cannot run is refused, never clamped — field report F22), starts the worker, loads, and
 * computes the profile with the identity the worker announced (so a CUDA or Metal build has its
 * own fingerprint). {@link llamaReadyModel} then serves it on lanes over its own scheduler.
 *
 * @module
 */
import { SynapseError } from "../contract/errors.ts";
import type { NumericProfile, ThreadPolicy } from "../identity/numeric_profile.ts";
import {
  type GgufFacts,
  readGgufFacts,
  readGgufMetadata,
  sha256File,
} from "../engines/llama/gguf.ts";
import type { LlamaEngine, LlamaModelSpec } from "../engines/llama/llama_engine.ts";
import type { EngineIdentity } from "../engines/engine.ts";
import { Lane } from "../lanes/lane.ts";
import type { Admission } from "../sched/admission.ts";
import type { LaneScheduler } from "../sched/lane_scheduler.ts";
import { SanitizedTokenizer } from "../tokenize/tokenizer.ts";
import { parseRerankTemplate } from "../tokenize/rerank_template.ts";
import {
  type GgufTokenizer,
  ggufTokenizer,
  tokenizerCheckTexts,
} from "../tokenize/gguf_tokenizer.ts";
import {
  checkDeclaredDtype,
  checkDeclaredFamily,
  checkDeclaredQuant,
  identityOf,
} from "./load_ort.ts";
import { checkMatryoshkaDims } from "./matryoshka.ts";
import {
  LLAMA_CONTEXT_CAP,
  type ModelEntry,
  type ModelSource,
  type ReadyModel,
  type TokenizerSource,
} from "./model.ts";
import { labelledTestModel } from "./sources.ts";
import { loadPromptTable, promptProfileField } from "./prompts.ts";
import type { PromptTable } from "./prompts.ts";

/**
 * Sequences one call of the ffi lane may hold (embed and score): llama.cpp's server runs 8 slots
 * in one ubatch of 2048 tokens; the lane's micro-batch is also capped by the context in tokens.
 */
export const FFI_SEQUENCES = 32;

/** Makes the engine of a GGUF model (the registry owns it from then on). */
export type LlamaEngineFactory = (spec: LlamaModelSpec, source: ModelSource) => LlamaEngine;

/** What {@link loadLlamaModel} needs from the registry. */
export interface LlamaLoadContext {
  /** Makes the engine; without it a llama model fails with `backend_unavailable`. */
  factory: LlamaEngineFactory | undefined;
  /** llama.cpp threads of the worker. */
  threads: number;
  threadPolicy: ThreadPolicy;
  /** `inline.max_tokens`: the certified batch-token budget. */
  maxBatchTokens: number;
}

/** A loaded GGUF model, before its lanes exist. */
export interface LlamaLoaded {
  tokenizer: SanitizedTokenizer;
  /** The model's tokenizer.json, or one built from the GGUF's vocabulary. */
  tokenizerSource: TokenizerSource;
  profile: NumericProfile;
  identity: EngineIdentity;
  maxTokens: number;
  testModel: boolean;
  coldLoadMs: number;
  dims: number;
  gguf: GgufFacts;
  engine: LlamaEngine;
  /** The model's prompt table (embed models that declare one). */
  prompts?: PromptTable;
  /** The source's `matryoshka_dims`, checked against the model's width. */
  matryoshkaDims?: readonly number[];
}

/**
 * Loads a GGUF model on its own llama worker.
 *
 * @throws {SynapseError} `artifact_invalid` (unreadable file, digest mismatch, not a GGUF,
 *   `tokenizer_mismatch` — a tokenizer.json whose vocabulary is not the GGUF's, or a tokenizer
 *   built from the GGUF that llama.cpp contradicts `{text_index, ours, llama_cpp}` —,
 *   `bad_vocabulary` / `unsupported_tokenizer` when no tokenizer.json is given and the GGUF's
 *   vocabulary metadata is inconsistent or of a kind not built here, a context size or
 *   `max_tokens` the model cannot run — `details.reason` `context_over_model` /
 *   `max_tokens_over_context`); `invalid_request` for
 *   rerank off the ffi lane; a reranker's prompt template refused as `rerankTokenizer` says;
 *   `backend_unavailable` without a llama engine, or on shim `cuda` (`no_cuda_device` without an NVIDIA device, else `shim_missing`);
 *   `engine_crashed` / `probe_required` from the worker.
 */
export async function loadLlamaModel(
  src: ModelSource,
  ctx: LlamaLoadContext,
): Promise<LlamaLoaded> {
  const modelId = src.modelId;
  if (ctx.factory === undefined) {
    throw new SynapseError(
      "backend_unavailable",
      `Cannot load model '${modelId}': the llama engine is not available in this instance`,
      { details: { model_id: modelId, backends: [{ backend: "llama", reason: "no_worker" }] } },
    );
  }
  if (src.shim === "cuda") {
    // No CUDA shim is built here (none was written without a GPU to test it on): the lane says
    // which of the two is missing, the device or the shim, and never falls back to the CPU.
    const reason = cudaDevicePresent() ? "shim_missing" : "no_cuda_device";
    throw new SynapseError(
      "backend_unavailable",
      `Cannot load model '${modelId}' on the ffi lane's cuda shim: ${
        reason === "no_cuda_device"
          ? "this machine has no NVIDIA device"
          : "this build has no CUDA shim"
      }`,
      {
        details: { model_id: modelId, reason, backends: [{ backend: "ffi-cuda", reason }] },
      },
    );
  }
  if (src.task === "rerank" && src.llamaLane !== "ffi") {
    throw new SynapseError(
      "invalid_request",
      `Cannot load model '${modelId}': the llama engine serves embed and generate, not rerank (engine 'ffi' serves GGUF rerankers)`,
      { details: { model_id: modelId, task: src.task, engine: "llama" } },
    );
  }
  // A model-cache blob is verified against its recorded digest (once per boot) before the
  // worker reads it; a file from the config is hashed here.
  const digest = src.verify !== undefined
    ? await src.verify()
    : await sha256File(src.modelPath, modelId);
  if (src.artifactDigest !== undefined && src.artifactDigest !== digest) {
    throw new SynapseError(
      "artifact_invalid",
      `Cannot load model '${modelId}': ${src.modelPath} has digest ${digest}, expected ${src.artifactDigest}`,
      {
        details: { model_id: modelId, file: src.modelPath, expected: src.artifactDigest, digest },
      },
    );
  }
  const facts = await readGgufFacts(src.modelPath, modelId);
  checkDeclaredDtype(src, facts.dtype, src.llamaLane ?? "llama");
  checkDeclaredQuant(src, facts.quant, src.llamaLane ?? "llama");
  checkDeclaredFamily(src, facts.architecture, "GGUF general.architecture");
  // Its config.json (the source's, as a run-time load brings it, or beside the GGUF) may label a
  // generated test model (scripts/gen_gguf.ts), as for ONNX.
  const testModel = src.testModel === true || labelledTestModel(src);
  let tokenizer: SanitizedTokenizer;
  let built: GgufTokenizer | undefined;
  if (src.tokenizerPath !== undefined) {
    tokenizer = await SanitizedTokenizer.fromFile(src.tokenizerPath);
    checkVocabulary(modelId, facts, tokenizer);
  } else {
    built = ggufTokenizer(await readGgufMetadata(src.modelPath, modelId), {
      modelId,
      rerankPairs: src.task === "rerank",
    });
    tokenizer = SanitizedTokenizer.fromJson(
      built.json,
      built.config,
      `${src.modelPath} (tokenizer built from its GGUF vocabulary)`,
    );
  }
  if (src.task === "rerank") tokenizer = rerankTokenizer(modelId, src, facts, tokenizer);
  const { contextSize, maxTokens } = llamaLimits(modelId, src, facts);
  const prompts = await loadPromptTable(src);
  const mode = src.task === "generate" ? "generate" : src.task === "rerank" ? "score" : "embed";
  const lane = src.llamaLane ?? "llama";
  const spec: LlamaModelSpec = {
    modelId,
    ggufPath: src.modelPath,
    ggufDigest: digest,
    mode,
    contextSize,
    threads: ctx.threads,
    pooling: facts.pooling,
    normalize: mode === "embed" && src.normalize,
    ...(lane === "ffi"
      ? {
        lane,
        sequences: mode === "generate" ? 1 : FFI_SEQUENCES,
        ...(mode === "score" ? { readout: src.readout ?? "rank" } : {}),
      }
      : {}),
  };
  const engine = ctx.factory(spec, src);
  let loaded: Awaited<ReturnType<LlamaEngine["load"]>>;
  try {
    loaded = await engine.load();
  } catch (err) {
    // A failed model stays failed: its worker must not linger (nor show as serving).
    await engine.dispose().catch(() => {});
    throw err;
  }
  if (built !== undefined) {
    try {
      await checkAgainstLlamaCpp(modelId, tokenizer, built, engine);
    } catch (err) {
      await engine.dispose().catch(() => {});
      throw err;
    }
  }
  const { dims, coldLoadMs, identity } = loaded;
  try {
    checkMatryoshkaDims(src, mode === "embed" ? dims : 0);
  } catch (err) {
    await engine.dispose().catch(() => {});
    throw err;
  }
  const engineId: EngineIdentity = {
    engine: identity.engine,
    version: identity.version,
    ...(identity.build_flags === undefined ? {} : { build_flags: { ...identity.build_flags } }),
  };
  const profile: NumericProfile = {
    model_digest: digest,
    quant: facts.quant,
    engine: { ...engineId, build_flags: { ...(engineId.build_flags ?? {}) } },
    sanitized_tokenizer_digest: tokenizer.digest,
    // A reranker's readout: the classification head over the pooled sequence (`cls`, as an
    // ORT cross-encoder's), or the last token's logits (`yes_no`).
    pooling: mode === "embed"
      ? (facts.pooling === "last" ? "last_token" : facts.pooling)
      : mode === "score" && spec.readout !== "yes_no"
      ? "cls"
      : "last_token",
    normalization: spec.normalize ? "l2" : "none",
    dtype: facts.dtype,
    flash_attention: "disabled",
    certified_shape: {
      max_context_tokens: contextSize,
      max_batch_tokens: ctx.maxBatchTokens,
      max_micro_batch_tokens: engine.limits.maxMicroBatchTokens,
      max_sequences: engine.limits.maxSequences,
    },
    ...promptProfileField(prompts),
    thread_policy: ctx.threadPolicy,
    operation: src.task,
  };
  return {
    tokenizer,
    tokenizerSource: built === undefined ? "tokenizer.json" : "gguf",
    profile,
    identity: engineId,
    maxTokens,
    testModel,
    coldLoadMs,
    // A reranker answers one score per pair (as an ORT cross-encoder lists dims 1).
    dims: mode === "embed" ? dims : mode === "score" ? 1 : 0,
    gguf: facts,
    engine,
    ...(prompts === undefined ? {} : { prompts }),
    ...(src.matryoshkaDims === undefined ? {} : { matryoshkaDims: [...src.matryoshkaDims] }),
  };
}

/** The scheduler and policy of a llama model's lanes. */
export interface LlamaLaneContext {
  /** The model's own scheduler (one worker: its interactive, bulk and decode work share it). */
  scheduler: LaneScheduler;
  /** The module's admission. */
  admission: Admission;
  /** Wall clock in ms. */
  now: () => number;
}

/**
 * The ready model of a loaded GGUF model: two lanes named `llama-<model id>` (`ffi-<model id>` on the ffi lane) on its own
 * scheduler, `interactive` in the `decode` class for a generation model, and `bulk`.
 *
 * @param entry The registry's entry of the model (its id and task).
 * @param l What {@link loadLlamaModel} returned.
 * @param ctx Scheduler, admission and clock of the lanes.
 * @returns The model as operations see it.
 */
export function llamaReadyModel(
  entry: Pick<ModelEntry, "modelId" | "task">,
  l: LlamaLoaded,
  ctx: LlamaLaneContext,
): ReadyModel {
  const name = `${l.engine.kind}-${entry.modelId}`;
  const base = { name, engine: l.engine, scheduler: ctx.scheduler, admission: ctx.admission };
  return {
    modelId: entry.modelId,
    task: entry.task,
    engineKind: "llama",
    tokenizer: l.tokenizer,
    tokenizerSource: l.tokenizerSource,
    profile: l.profile,
    ...identityOf(l.profile),
    dims: l.dims,
    ...(l.matryoshkaDims === undefined ? {} : { matryoshkaDims: l.matryoshkaDims }),
    maxTokens: l.maxTokens,
    testModel: l.testModel,
    identity: l.identity,
    ...(l.prompts === undefined ? {} : { prompts: l.prompts }),
    interactive: new Lane({
      ...base,
      cls: entry.task === "generate" ? "decode" : "interactive",
      now: ctx.now,
    }),
    bulk: new Lane({ ...base, cls: "bulk", now: ctx.now }),
    gguf: l.gguf,
  };
}

/**
 * The lane limits of a GGUF model: the context is the source's `contextSize`, else the GGUF's
 * `<arch>.context_length` up to {@link LLAMA_CONTEXT_CAP}; `max_tokens` is the source's, else
 * its default (`maxTokensDefault`) capped at the context, else the context. Nothing is clamped: a limit the model cannot run refuses the load.
 *
 * @throws {SynapseError} `artifact_invalid` with `details.reason` `context_over_model` (a context
 *   size outside [16, context_length]) or `max_tokens_over_context`.
 */
export function llamaLimits(
  modelId: string,
  src: Pick<ModelSource, "contextSize" | "maxTokens" | "maxTokensDefault">,
  facts: Pick<GgufFacts, "contextLength">,
): { contextSize: number; maxTokens: number } {
  const contextSize = src.contextSize ?? Math.min(facts.contextLength, LLAMA_CONTEXT_CAP);
  if (contextSize > facts.contextLength || contextSize < 16) {
    throw new SynapseError(
      "artifact_invalid",
      `Cannot load model '${modelId}': context size ${contextSize} must be between 16 and the model's ${facts.contextLength} (context_length)`,
      {
        details: {
          model_id: modelId,
          reason: "context_over_model",
          context_size: contextSize,
          context_length: facts.contextLength,
        },
      },
    );
  }
  const maxTokens = src.maxTokens ?? Math.min(src.maxTokensDefault ?? Infinity, contextSize);
  if (maxTokens > contextSize || maxTokens < 2) {
    throw new SynapseError(
      "artifact_invalid",
      `Cannot load model '${modelId}': max_tokens ${maxTokens} must be between 2 and the lane's context of ${contextSize} tokens (the GGUF's context_length ${facts.contextLength}, capped at ${LLAMA_CONTEXT_CAP})`,
      {
        details: {
          model_id: modelId,
          reason: "max_tokens_over_context",
          field: "max_tokens",
          max_tokens: maxTokens,
          context_size: contextSize,
          context_length: facts.contextLength,
        },
      },
    );
  }
  return { contextSize, maxTokens };
}

/**
 * Refuses a GGUF whose vocabulary differs from the tokenizer's: same size, same piece at every id.
 *
 * @throws {SynapseError} `artifact_invalid` with `details.reason` `tokenizer_mismatch`.
 */
/**
 * A reranker's tokenizer: pairs in the model's prompt template (the entry's `rerank_template`,
 * else the GGUF's `tokenizer.chat_template.rerank`), or plain pairs for a cross-encoder.
 *
 * @throws {SynapseError} `artifact_invalid` `{reason: "prompt_template_invalid"}` for a GGUF
 *   template without its `{query}` and `{document}` slots, `{reason: "prompt_template_missing"}`
 *   for a causal-LM reranker (readout `yes_no`, or a head labelled yes, no) with no template:
 *   plain pairs would give numbers that look like scores and are not; `backend_unavailable`
 *   `{reason: "prompt_template_unsupported"}` when the template's pieces tokenize differently
 *   from the whole prompt (`SanitizedTokenizer.withRerankTemplate`).
 */
function rerankTokenizer(
  modelId: string,
  src: ModelSource,
  facts: GgufFacts,
  tokenizer: SanitizedTokenizer,
): SanitizedTokenizer {
  const template = src.rerankTemplate ?? facts.rerankTemplate;
  const field = src.rerankTemplate !== undefined
    ? "preload_models.rerank_template"
    : "tokenizer.chat_template.rerank";
  if (template === undefined) {
    const labels = facts.classifierLabels?.map((l) => l.toLowerCase()).join(",");
    if (src.readout === "yes_no" || labels === "yes,no") {
      throw new SynapseError(
        "artifact_invalid",
        `Cannot load model '${modelId}': a yes/no reranker scores (query, document) only inside its prompt template, and its GGUF has none (tokenizer.chat_template.rerank); set the model entry's rerank_template`,
        { details: { model_id: modelId, reason: "prompt_template_missing" } },
      );
    }
    return tokenizer;
  }
  try {
    parseRerankTemplate(template);
  } catch (err) {
    throw new SynapseError(
      "artifact_invalid",
      `Cannot load model '${modelId}': its rerank prompt template (${field}) is unusable: ${
        (err as Error).message
      }`,
      { details: { model_id: modelId, reason: "prompt_template_invalid", field } },
    );
  }
  try {
    return tokenizer.withRerankTemplate(template);
  } catch (err) {
    if (!(err instanceof RangeError)) throw err;
    throw new SynapseError(
      "backend_unavailable",
      `Cannot load model '${modelId}': ${err.message}, so this build cannot apply it faithfully`,
      {
        details: {
          model_id: modelId,
          reason: "prompt_template_unsupported",
          field,
          backends: [{ backend: "ffi", reason: "prompt_template_unsupported" }],
        },
      },
    );
  }
}

function checkVocabulary(modelId: string, facts: GgufFacts, tokenizer: SanitizedTokenizer): void {
  const vocab = tokenizer.idToToken();
  const tokens = facts.tokens;
  let bad = tokens.length === vocab.length ? -1 : Math.min(tokens.length, vocab.length);
  if (bad < 0) {
    for (let i = 0; i < tokens.length; i++) {
      // The GGUF reader decodes strings with a default TextDecoder, which drops a leading BOM
      // (llama2's token 31759 is U+FEFF): compare without it.
      if (tokens[i] !== vocab[i] && tokens[i] !== vocab[i]?.replace(/^\uFEFF/, "")) {
        bad = i;
        break;
      }
    }
  }
  if (bad >= 0) {
    throw new SynapseError(
      "artifact_invalid",
      `Cannot load model '${modelId}': the GGUF vocabulary (${tokens.length} tokens) is not the tokenizer's (${vocab.length}); first difference at id ${bad}`,
      {
        details: {
          model_id: modelId,
          reason: "tokenizer_mismatch",
          gguf_tokens: tokens.length,
          tokenizer_tokens: vocab.length,
          first_mismatch_id: bad,
          gguf_piece: tokens[bad] ?? null,
          tokenizer_piece: vocab[bad] ?? null,
        },
      },
    );
  }
}

/**
 * Checks a tokenizer built from the GGUF against llama.cpp on the fixed text set
 * ({@link tokenizerCheckTexts}), both ways a text is tokenized (F25): as plain text (a caller's
 * text: llama.cpp with `parse_special` off) and with its special-token strings as special tokens
 * (a chat template's scaffolding: `findSpecialTokens` spans, llama.cpp with `parse_special`
 * on). For every text our ids must be llama.cpp's with BOS before and EOS after exactly when the
 * GGUF asks llama.cpp to add them.
 *
 * @throws {SynapseError} `artifact_invalid` `{reason: "tokenizer_mismatch", text_index, text,
 *   ours, llama_cpp}` at the first text that differs (ids in full, BOS/EOS included);
 *   `engine_crashed` and worker errors from the TOKENIZE.
 */
async function checkAgainstLlamaCpp(
  modelId: string,
  tokenizer: SanitizedTokenizer,
  built: GgufTokenizer,
  engine: Pick<LlamaEngine, "tokenize">,
): Promise<void> {
  const texts = tokenizerCheckTexts(built);
  for (const special of [false, true]) {
    const theirs = await engine.tokenize(texts, { special });
    for (let i = 0; i < texts.length; i++) {
      const text = texts[i]!;
      const ours = Array.from(
        tokenizer.encode(text, {
          maxTokens: 1 << 30,
          ...(special ? { specialSpans: tokenizer.findSpecialTokens(text) } : {}),
        }).ids,
      );
      const llamaCpp = [
        ...(built.addBos ? [built.bosId!] : []),
        ...theirs[i]!,
        ...(built.addEos ? [built.eosId!] : []),
      ];
      if (ours.length !== llamaCpp.length || ours.some((id, k) => id !== llamaCpp[k])) {
        throw new SynapseError(
          "artifact_invalid",
          `Cannot load model '${modelId}': the tokenizer built from its GGUF vocabulary splits check text ${i} (${
            special ? "special tokens parsed" : "as plain text"
          }) unlike llama.cpp; give the model's tokenizer.json (tokenizer_path)`,
          {
            details: {
              model_id: modelId,
              reason: "tokenizer_mismatch",
              text_index: i,
              text,
              special_tokens: special,
              ours,
              llama_cpp: llamaCpp,
            },
          },
        );
      }
    }
  }
}

/** Whether an NVIDIA device is visible (its driver's device node or proc entry). */
function cudaDevicePresent(): boolean {
  for (const path of ["/dev/nvidia0", "/proc/driver/nvidia/version"]) {
    try {
      Deno.statSync(path);
      return true;
    } catch { /* absent, or not ours to read: no device for this process */ }
  }
  return false;
}
