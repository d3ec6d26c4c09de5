/**
 * Loaded models: their files, tokenizer, numeric profile, fingerprint and lane. A model is
 * `loading` until its engine session is up; requests for it meanwhile get `model_loading` with a
 * retry hint (field report F9), never an implicit wait.
 *
 * @module
 */
import { SynapseError, toSynapseError } from "../contract/errors.ts";
import { fingerprint, numericProfileId } from "../identity/numeric_profile.ts";
import type { NumericProfile, ThreadPolicy } from "../identity/numeric_profile.ts";
import { SanitizedTokenizer } from "../tokenize/tokenizer.ts";
import { ORT_ENGINE, OrtLane } from "../engines/ort/ort_lane.ts";
import type { OrtRow, OrtRunResult } from "../engines/ort/ort_lane.ts";
import type { Pooling } from "../engines/ort/pooling.ts";
import type { LlamaLane, LlamaModelSpec } from "../engines/llama/llama_lane.ts";
import { type GgufFacts, readGgufFacts, sha256File } from "../engines/llama/gguf.ts";
import { LaneScheduler } from "../sched/lane_scheduler.ts";

/** What a model computes. */
export type ModelTask = "embed" | "rerank" | "generate";

/** Engine lane kind of a model. */
export type ModelEngine = "ort" | "llama";

/** Engine identity as it appears in envelopes and profiles (contract.md §3). */
export interface EngineIdentity {
  engine: string;
  version: string;
  build_flags?: Readonly<Record<string, string>>;
}

/**
 * Runs micro-batches of one model: the ORT lanes, or an adapter over a llama worker. Rows carry
 * ids with specials (type ids are ignored by engines that have none).
 */
export interface EmbedRunner {
  run(
    modelRef: string,
    rows: readonly OrtRow[],
    options?: { quiet?: boolean },
  ): Promise<OrtRunResult>;
}

/** Makes the lane of a GGUF model (the registry owns it from then on). */
export type LlamaLaneFactory = (spec: LlamaModelSpec, source: ModelSource) => LlamaLane;

/** Lifecycle of a loaded model. */
export type ModelState = "loading" | "ready" | "failed";

/** Where a model's files are and how to serve it. */
export interface ModelSource {
  modelId: string;
  task: ModelTask;
  /** Engine lane. @default "ort" */
  engine?: ModelEngine;
  /** model.onnx, or the .gguf file for the llama engine */
  modelPath: string;
  /** tokenizer.json */
  tokenizerPath: string;
  /** config.json, when there is one. */
  configPath?: string;
  /** A missing `configPath` is not an error (defaults apply). @default false */
  configOptional?: boolean;
  pooling: Pooling;
  normalize: boolean;
  /** Largest sequence, specials included; default from config.json's max_position_embeddings. */
  maxTokens?: number;
  /** Labelled as a test model everywhere it appears. */
  testModel?: boolean;
  /** llama: context size in tokens. @default min(GGUF context_length, 2048) */
  contextSize?: number;
  /** Expected `sha256:<hex>` of the artifact; a different file is refused. */
  artifactDigest?: string;
  /** llama: worker program override (`worker_bin`). */
  workerBin?: string;
  /** llama: socket directory (`worker_runtime_dir`). */
  workerRuntimeDir?: string;
}

/** Micro-batch shape the ORT lane certifies (part of every ORT profile). */
export const ORT_MICRO_BATCH = Object.freeze({
  /** Padded tokens per engine call. */
  maxMicroBatchTokens: 4096,
  /** Rows per engine call. */
  maxSequences: 64,
});

/** Prompt-template identity of the cross-encoder pair layout (part of rerank profiles). */
export const RERANK_PAIR_TEMPLATE = "synapse-rerank-cls-query-sep-doc-sep-v1";

/** A model known to the registry. */
export interface LoadedModel {
  readonly source: ModelSource;
  readonly modelId: string;
  readonly task: ModelTask;
  readonly engine: ModelEngine;
  /** Identity of the engine that serves it (set when ready). */
  engineIdentity?: EngineIdentity;
  /**
   * A lane of its own (llama models): its scheduler and runner serve both interactive and bulk
   * work of this model; ORT models share the registry's lanes.
   */
  own?: { scheduler: LaneScheduler; runner: EmbedRunner; llama: LlamaLane };
  /** GGUF facts (llama models). */
  gguf?: GgufFacts;
  state: ModelState;
  /** Set when state is `failed`. */
  error?: SynapseError;
  tokenizer?: SanitizedTokenizer;
  profile?: NumericProfile;
  numericProfileId?: string;
  fingerprint?: string;
  /** Vector width (embed) or 1 (rerank). */
  dims: number;
  maxTokens: number;
  testModel: boolean;
  coldLoadMs?: number;
  /** Milliseconds since the epoch when loading started. */
  loadStartedMs: number;
  /** Load attempts so far (a transient failure is retried lazily). */
  loadAttempts?: number;
  /** Milliseconds since the epoch of the last failed attempt. */
  failedAtMs?: number;
}

/** Lazy retries of a load that failed transiently; after them the failure is permanent. */
export const LOAD_RETRIES = 2;

/** Options of {@link ModelRegistry}. */
export interface ModelRegistryOptions {
  /** Thread policy (the config knob), part of every profile. @default "balanced" */
  threadPolicy?: ThreadPolicy;
  /** Aggregate token budget of one inline request (`inline.max_tokens`). @default 8192 */
  maxBatchTokens?: number;
  /** Wall clock in ms. @default Date.now */
  now?: () => number;
  /** Makes llama lanes; without it a llama model fails to load with `backend_unavailable`. */
  llama?: LlamaLaneFactory;
  /** Threads of a llama worker. @default threadsForKnob(threadPolicy) */
  llamaThreads?: number;
}

/**
 * Intra-op thread count for a knob: `performance` all cores, `balanced` all but a quarter
 * (at least 1; 2 on a 2-core machine), `quiet` one.
 */
export function threadsForKnob(knob: string, cores = navigator.hardwareConcurrency ?? 1): number {
  switch (knob) {
    case "performance":
      return Math.max(1, cores);
    case "quiet":
      return 1;
    default:
      return Math.max(1, cores - Math.floor(cores / 4));
  }
}

/**
 * Shapes a session runs once at load: the micro-batch budget at the longest sequence and at
 * many short rows, which sizes onnxruntime's memory arena for what requests will send.
 */
export function warmupShapes(maxTokens: number): [number, number][] {
  const { maxMicroBatchTokens, maxSequences } = ORT_MICRO_BATCH;
  const long = Math.min(maxTokens, maxMicroBatchTokens);
  const shortLen = Math.max(1, Math.floor(maxMicroBatchTokens / maxSequences));
  return [[Math.max(1, Math.floor(maxMicroBatchTokens / long)), long], [maxSequences, shortLen]];
}

/**
 * The models this process serves. Each model has a session on the interactive lane (loaded at
 * boot) and one on the bulk lane (loaded on the first job), each lane its own Worker thread, so
 * an interactive request never waits for a bulk quantum to finish.
 */
export class ModelRegistry {
  /** Lane of interactive and control work (embed.query, inline batches, small reranks). */
  readonly lane: OrtLane;
  /** Lane of bulk work (durable jobs, large reranks); models load on first use. */
  readonly bulkLane: OrtLane;
  #models = new Map<string, LoadedModel>();
  #threadPolicy: ThreadPolicy;
  #maxBatchTokens: number;
  #now: () => number;
  #llama: LlamaLaneFactory | undefined;
  #llamaThreads: number;

  constructor(lane: OrtLane, bulkLane: OrtLane, options: ModelRegistryOptions = {}) {
    this.lane = lane;
    this.bulkLane = bulkLane;
    this.#llama = options.llama;
    this.#threadPolicy = options.threadPolicy ?? "balanced";
    this.#llamaThreads = options.llamaThreads ??
      threadsForKnob(typeof this.#threadPolicy === "string" ? this.#threadPolicy : "balanced");
    this.#maxBatchTokens = options.maxBatchTokens ?? 8192;
    this.#now = options.now ?? Date.now;
  }

  /** All models, in load order. */
  list(): LoadedModel[] {
    return [...this.#models.values()];
  }

  /**
   * Starts loading a model; resolves when it is ready or failed (never rejects).
   *
   * @throws {SynapseError} `invalid_request` when the id is already taken.
   */
  load(source: ModelSource): Promise<LoadedModel> {
    if (this.#models.has(source.modelId)) {
      throw new SynapseError(
        "invalid_request",
        `Cannot load model '${source.modelId}': the id is already loaded`,
        {
          details: { model_id: source.modelId },
        },
      );
    }
    const m: LoadedModel = {
      source,
      modelId: source.modelId,
      task: source.task,
      engine: source.engine ?? "ort",
      state: "loading",
      dims: 0,
      maxTokens: source.maxTokens ?? 512,
      testModel: source.testModel ?? false,
      loadStartedMs: this.#now(),
    };
    this.#models.set(source.modelId, m);
    return this.#attempt(m);
  }

  /** One load attempt; a transient failure may be retried by {@link resolve}. */
  #attempt(m: LoadedModel): Promise<LoadedModel> {
    m.loadAttempts = (m.loadAttempts ?? 0) + 1;
    return this.#load(m).then(() => m, (err) => {
      const e = toSynapseError(err, "artifact_invalid");
      m.state = "failed";
      m.failedAtMs = this.#now();
      m.error = e.errorClass === "transient" && m.loadAttempts! > LOAD_RETRIES
        ? new SynapseError(
          "probe_required",
          `Cannot serve model '${m.modelId}': loading failed ${m.loadAttempts} times; last: ${e.message}`,
          {
            cause: e,
            details: {
              model_id: m.modelId,
              reason: "load_failed_repeatedly",
              attempts: m.loadAttempts,
              last_error: e.toWire(),
            },
          },
        )
        : e;
      return m;
    });
  }

  /**
   * The ready model for a request.
   *
   * @param modelId Requested id; the first ready-or-loading model of the task when undefined.
   * @throws {SynapseError} `unknown_model {model_id}`; `invalid_request` when the model serves
   *   another task; `model_loading` (transient, retry hint) while loading; the load error when
   *   loading failed.
   */
  resolve(modelId: string | undefined, task: ModelTask): LoadedModel {
    let m: LoadedModel | undefined;
    if (modelId === undefined) {
      m = this.list().find((x) => x.task === task && x.state !== "failed") ??
        this.list().find((x) => x.task === task);
      if (!m) {
        throw new SynapseError(
          "unknown_model",
          `Cannot serve ${task}: no ${task} model is loaded`,
          {
            details: { model_id: null, task },
          },
        );
      }
    } else {
      m = this.#models.get(modelId);
      if (!m) {
        throw new SynapseError(
          "unknown_model",
          `Cannot serve ${task}: unknown model '${modelId}'`,
          {
            details: { model_id: modelId, known: [...this.#models.keys()] },
          },
        );
      }
    }
    if (m.task !== task) {
      throw new SynapseError(
        "invalid_request",
        `Cannot serve ${task} with model '${m.modelId}': it serves ${m.task}`,
        { details: { model_id: m.modelId, task: m.task } },
      );
    }
    if (m.state === "loading") {
      throw new SynapseError(
        "model_loading",
        `Cannot serve ${task}: model '${m.modelId}' is loading`,
        {
          retryAfterMs: 250,
          details: { model_id: m.modelId },
        },
      );
    }
    if (m.state === "failed") {
      // A transient load failure (a worker that crashed while starting) is retried lazily, at
      // most LOAD_RETRIES times, once its retry hint has passed; then the error is permanent.
      const e = m.error!;
      if (
        e.errorClass === "transient" && (m.loadAttempts ?? 1) <= LOAD_RETRIES &&
        this.#now() - (m.failedAtMs ?? 0) >= (e.retryAfterMs ?? 0)
      ) {
        m.state = "loading";
        delete m.error;
        void this.#attempt(m);
        throw new SynapseError(
          "model_loading",
          `Cannot serve ${task}: model '${m.modelId}' is loading again after a transient failure`,
          { retryAfterMs: 250, details: { model_id: m.modelId, attempt: m.loadAttempts } },
        );
      }
      throw e;
    }
    return m;
  }

  /** Stops the llama workers of every model. */
  async closeOwnLanes(): Promise<void> {
    await Promise.all(
      this.list().map(async (m) => {
        m.own?.scheduler.dispose();
        await m.own?.llama.close().catch(() => {});
      }),
    );
  }

  async #load(m: LoadedModel): Promise<void> {
    if (m.engine === "llama") return await this.#loadLlama(m);
    if (m.task === "generate") {
      throw new SynapseError(
        "invalid_request",
        `Cannot load model '${m.modelId}': generation needs the llama engine (a GGUF model)`,
        { details: { model_id: m.modelId, task: m.task, engine: m.engine } },
      );
    }
    const src = m.source;
    let modelBytes: Uint8Array;
    try {
      modelBytes = await Deno.readFile(src.modelPath);
    } catch (err) {
      throw new SynapseError(
        "artifact_invalid",
        `Cannot load model '${m.modelId}': cannot read ${src.modelPath}: ${(err as Error).message}`,
        {
          cause: err,
          details: { model_id: m.modelId, file: src.modelPath },
        },
      );
    }
    // WebCrypto hashes off the main thread: a 90 MB model must not stall /health or refusals.
    const modelDigest = "sha256:" +
      toHex(await crypto.subtle.digest("SHA-256", modelBytes as Uint8Array<ArrayBuffer>));
    modelBytes = new Uint8Array(0);
    const tokenizer = await SanitizedTokenizer.fromFile(src.tokenizerPath);
    let config: Record<string, unknown> = {};
    if (src.configPath !== undefined) {
      try {
        config = JSON.parse(await Deno.readTextFile(src.configPath));
      } catch (err) {
        if (!(src.configOptional && err instanceof Deno.errors.NotFound)) {
          throw new SynapseError(
            "artifact_invalid",
            `Cannot load model '${m.modelId}': cannot read ${src.configPath}: ${
              (err as Error).message
            }`,
            {
              cause: err,
              details: { model_id: m.modelId, file: src.configPath },
            },
          );
        }
      }
    }
    const maxPos = typeof config.max_position_embeddings === "number"
      ? config.max_position_embeddings
      : 512;
    m.maxTokens = src.maxTokens ??
      (typeof config.synapse_max_tokens === "number" ? config.synapse_max_tokens : maxPos);
    if (m.maxTokens > maxPos || m.maxTokens < tokenizer.singleSpecialTokens + 1) {
      throw new SynapseError(
        "artifact_invalid",
        `Cannot load model '${m.modelId}': max_tokens ${m.maxTokens} must be between ${
          tokenizer.singleSpecialTokens + 1
        } (special tokens plus one) and the model's ${maxPos} positions (max_position_embeddings)`,
        { details: { model_id: m.modelId, max_tokens: m.maxTokens, max_positions: maxPos } },
      );
    }
    if (config.synapse_test_model === true) m.testModel = true;
    const spec = {
      modelRef: m.modelId,
      path: src.modelPath,
      task: m.task as "embed" | "rerank",
      pooling: src.pooling,
      normalize: src.normalize,
      warmupShapes: warmupShapes(m.maxTokens),
    };
    const { dims, coldLoadMs } = await this.lane.load(spec);
    this.bulkLane.register(spec);
    const profile: NumericProfile = {
      model_digest: modelDigest,
      quant: "f32",
      engine: {
        engine: ORT_ENGINE.engine,
        version: ORT_ENGINE.version,
        build_flags: { ...ORT_ENGINE.build_flags },
      },
      sanitized_tokenizer_digest: tokenizer.digest,
      pooling: m.task === "rerank" ? "cls" : src.pooling,
      normalization: m.task === "embed" && src.normalize ? "l2" : "none",
      dtype: "f32",
      flash_attention: "disabled",
      certified_shape: {
        max_context_tokens: m.maxTokens,
        max_batch_tokens: this.#maxBatchTokens,
        max_micro_batch_tokens: ORT_MICRO_BATCH.maxMicroBatchTokens,
        max_sequences: ORT_MICRO_BATCH.maxSequences,
      },
      ...(m.task === "rerank" ? { prompt_template: RERANK_PAIR_TEMPLATE } : {}),
      thread_policy: this.#threadPolicy,
      operation: m.task,
    };
    m.engineIdentity = ORT_ENGINE;
    m.tokenizer = tokenizer;
    m.profile = profile;
    m.numericProfileId = numericProfileId(profile);
    m.fingerprint = fingerprint(profile);
    m.dims = dims;
    m.coldLoadMs = coldLoadMs;
    m.state = "ready";
  }
  /**
   * Loads a GGUF model on its own llama worker: checks digest, format and that the GGUF's
   * vocabulary is the tokenizer.json's (the module tokenizes; another vocabulary would feed the
   * engine wrong ids), starts the worker, loads, and computes the profile with the identity the
   * worker announced (so a CUDA or Metal build has its own fingerprint).
   */
  async #loadLlama(m: LoadedModel): Promise<void> {
    const src = m.source;
    if (this.#llama === undefined) {
      throw new SynapseError(
        "backend_unavailable",
        `Cannot load model '${m.modelId}': the llama engine is not available in this instance`,
        { details: { model_id: m.modelId, backends: [{ backend: "llama", reason: "no_worker" }] } },
      );
    }
    if (m.task === "rerank") {
      throw new SynapseError(
        "invalid_request",
        `Cannot load model '${m.modelId}': the llama engine serves embed and generate, not rerank`,
        { details: { model_id: m.modelId, task: m.task, engine: m.engine } },
      );
    }
    const digest = await sha256File(src.modelPath, m.modelId);
    if (src.artifactDigest !== undefined && src.artifactDigest !== digest) {
      throw new SynapseError(
        "artifact_invalid",
        `Cannot load model '${m.modelId}': ${src.modelPath} has digest ${digest}, expected ${src.artifactDigest}`,
        {
          details: {
            model_id: m.modelId,
            file: src.modelPath,
            expected: src.artifactDigest,
            digest,
          },
        },
      );
    }
    const facts = await readGgufFacts(src.modelPath, m.modelId);
    // A config.json beside the GGUF may label a generated test model (scripts/gen_gguf.ts).
    try {
      const dir = src.modelPath.slice(0, Math.max(0, src.modelPath.lastIndexOf("/"))) || ".";
      const cfg = JSON.parse(await Deno.readTextFile(`${dir}/config.json`));
      if (cfg?.synapse_test_model === true) m.testModel = true;
    } catch { /* no config.json: nothing to label */ }
    const tokenizer = await SanitizedTokenizer.fromFile(src.tokenizerPath);
    checkVocabulary(m.modelId, facts, tokenizer);
    const contextSize = src.contextSize ?? Math.min(facts.contextLength, 2048);
    if (contextSize > facts.contextLength || contextSize < 16) {
      throw new SynapseError(
        "artifact_invalid",
        `Cannot load model '${m.modelId}': context size ${contextSize} must be between 16 and the model's ${facts.contextLength}`,
        {
          details: {
            model_id: m.modelId,
            context_size: contextSize,
            context_length: facts.contextLength,
          },
        },
      );
    }
    const mode = m.task === "generate" ? "generate" : "embed";
    m.maxTokens = Math.min(src.maxTokens ?? contextSize, contextSize);
    const spec: LlamaModelSpec = {
      modelId: m.modelId,
      ggufPath: src.modelPath,
      ggufDigest: digest,
      mode,
      contextSize,
      threads: this.#llamaThreads,
      pooling: facts.pooling,
      normalize: mode === "embed" && src.normalize,
    };
    const lane = this.#llama(spec, src);
    const scheduler = new LaneScheduler({ permits: 1 });
    m.own = {
      llama: lane,
      scheduler,
      runner: { run: (_ref, rows) => lane.embed(rows) },
    };
    let loaded: Awaited<ReturnType<LlamaLane["load"]>>;
    try {
      loaded = await lane.load();
    } catch (err) {
      // A failed model stays failed: its worker must not linger (nor show as serving).
      delete m.own;
      scheduler.dispose();
      await lane.close().catch(() => {});
      throw err;
    }
    const { dims, coldLoadMs, identity } = loaded;
    const engine: EngineIdentity = {
      engine: identity.engine,
      version: identity.version,
      ...(identity.build_flags === undefined ? {} : { build_flags: { ...identity.build_flags } }),
    };
    const profile: NumericProfile = {
      model_digest: digest,
      quant: facts.quant,
      engine: { ...engine, build_flags: { ...(engine.build_flags ?? {}) } },
      sanitized_tokenizer_digest: tokenizer.digest,
      pooling: mode === "embed"
        ? (facts.pooling === "last" ? "last_token" : facts.pooling)
        : "last_token",
      normalization: spec.normalize ? "l2" : "none",
      dtype: facts.dtype,
      flash_attention: "disabled",
      certified_shape: {
        max_context_tokens: contextSize,
        max_batch_tokens: this.#maxBatchTokens,
        max_micro_batch_tokens: contextSize,
        max_sequences: 1,
      },
      thread_policy: this.#threadPolicy,
      operation: m.task,
    };
    m.engineIdentity = engine;
    m.gguf = facts;
    m.tokenizer = tokenizer;
    m.profile = profile;
    m.numericProfileId = numericProfileId(profile);
    m.fingerprint = fingerprint(profile);
    m.dims = mode === "embed" ? dims : 0;
    m.coldLoadMs = coldLoadMs;
    m.state = "ready";
  }
}

/**
 * Refuses a GGUF whose vocabulary differs from the tokenizer's: same size, same piece at every id.
 *
 * @throws {SynapseError} `artifact_invalid` with `details.reason` `tokenizer_mismatch`.
 */
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

function toHex(buf: ArrayBuffer): string {
  return Array.from(new Uint8Array(buf), (b) => b.toString(16).padStart(2, "0")).join("");
}
