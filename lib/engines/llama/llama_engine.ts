/**
 * The llama.cpp engine of one GGUF model, module side: a supervised worker process that loads
 * the model and answers EMBED_BATCH, RERANK_SEQUENCES or GENERATE with token ids in and vectors,
 * scores or token ids out. Two lanes speak the same protocol: `llama` (`workers/llama.ts`,
 * node-llama-cpp, one sequence per call) and `ffi` (`workers/ffi.ts`, the native llama shim of
 * `ffi/synapse_engine.h`: many sequences per call, rerankers, cancel inside a decode step). A crash costs one request (`engine_crashed`); the next call
 * starts a fresh worker and reloads the model lazily; beyond the crash budget the lane is
 * quarantined (`probe_required`, reason `worker_quarantined`).
 *
 * @module
 */
import { SynapseError } from "../../contract/errors.ts";
import type {
  Engine,
  EngineBatchOutput,
  EngineCallOptions,
  EngineHealth,
  EngineIdentity,
  EngineLimits,
  EngineRow,
  GenerateOutput,
  GenerateRequest,
  ModelTask,
} from "../engine.ts";
import { LLAMA_WORKER_ENGINE, LLAMA_WORKER_VERSION } from "./identity.ts";
import { FFI_LLAMA_ENGINE, FFI_LLAMA_VERSION } from "../ffi/identity.ts";
import { LineRateLimiter, type LogSink, stderrLog } from "../../log/log.ts";
import { type TextPartHandler, WORKER_TIMEOUTS, WorkerErrReply } from "../../workers/host.ts";
import type { WorkerEngineIdentity, WorkerLaunch } from "../../workers/spawn.ts";
import {
  type CrashBudget,
  SupervisedWorker,
  type SupervisorStatus,
} from "../../workers/supervisor.ts";
import {
  type LoadedMessage,
  type PongMessage,
  type ScoresMessage,
  type TextMessage,
  type TokensMessage,
  type VectorsMessage,
  type WorkerPooling,
} from "../../workers/messages.ts";
import { encodeI32LE } from "../../workers/codec.ts";

/** One GGUF model served by a llama worker. */
export interface LlamaModelSpec {
  /** The model id (names the worker). */
  modelId: string;
  /** Path of the `.gguf` file (digest and format already checked by the module). */
  ggufPath: string;
  /** `sha256:<hex>` of the file. */
  ggufDigest: string;
  /**
   * What the worker sets up: an embedding context, a scoring context (rerankers; ffi lane
   * only), or a generation context.
   */
  mode: "embed" | "score" | "generate";
  /** Which worker serves it: node-llama-cpp (`llama`, the default) or the native shim (`ffi`). */
  lane?: "llama" | "ffi";
  /** Sequences one call may hold (ffi lane; the llama lane runs one). @default 1 */
  sequences?: number;
  /** Score mode: the rank head or the yes/no logits (ffi lane). @default "rank" */
  readout?: "rank" | "yes_no";
  /** Context size in tokens. */
  contextSize: number;
  /** llama.cpp threads. */
  threads: number;
  /** Pooling the GGUF declares (EMBED_BATCH must match it). */
  pooling: WorkerPooling;
  /** L2-normalize vectors. */
  normalize: boolean;
}

/** Options of {@link LlamaEngine}. */
export interface LlamaEngineOptions {
  /** How to start the worker. */
  launch: WorkerLaunch;
  /** Socket directory (0700). */
  runtimeDir: string;
  /** Worker id (names the socket, `SYNAPSE_WORKER_ID`). @default `llama:<model id>` */
  workerId?: string;
  /**
   * The worker slot `workerId` was named from; disposed (given back) once the engine is disposed
   * and its worker closed, so the slot's socket path serves the next model. @default none
   */
  workerSlot?: Disposable;
  /**
   * ms the worker has to answer a request after its CANCEL before it is killed
   * (`worker.cancel_grace_ms`). @default 5000
   */
  cancelGraceMs?: number;
  /** LOAD timeout, ms (`worker.load_timeout_ms`). @default 180000 */
  loadTimeoutMs?: number;
  /** Timeout of other requests, ms. @default 30000 */
  requestTimeoutMs?: number;
  /** GENERATE timeout, ms. @default 180000 */
  generateTimeoutMs?: number;
  /** ms to wait for the worker to connect, and then for its HELLO. @default 60000 each (config `worker.start_timeout_ms`) */
  acceptTimeoutMs?: number;
  helloTimeoutMs?: number;
  /** @default 2 crashes per 60 s */
  crashBudget?: CrashBudget;
  /** Module log. @default stderrLog */
  log?: LogSink;
  /** Worker log lines forwarded per second (`log.worker_forward_lines_per_sec`). @default 50 */
  forwardLinesPerSec?: number;
  /**
   * Told of each worker start that succeeded and each crash (already counted), with the
   * supervision status after it (`generation`: starts so far); for the instance's metrics.
   * Must not throw (a throw is ignored).
   */
  onWorkerEvent?: (kind: "start" | "crash", status: SupervisorStatus) => void;
  /** Wall clock, ms. @default Date.now */
  now?: () => number;
}

/**
 * The engine of one GGUF model. Requests go to the worker one at a time; the lane's scheduler
 * decides their order.
 *
 * Limits: on the `llama` lane one sequence per engine call (node-llama-cpp evaluates each
 * sequence alone, so the profile certifies `max_sequences: 1`); on the `ffi` lane up to
 * `spec.sequences` per call, in as few decodes as the context holds; at most the context size in
 * tokens either way.
 */
export class LlamaEngine implements Engine {
  /** `llama` (node-llama-cpp worker) or `ffi` (native shim worker). */
  readonly kind: "llama" | "ffi";
  readonly spec: LlamaModelSpec;
  readonly worker: SupervisedWorker;
  readonly task: ModelTask;
  readonly limits: EngineLimits;
  #opts: LlamaEngineOptions;
  #disposed = false;
  #rssBytes: number | undefined;
  #rssPing: Promise<void> | undefined;
  #ref: string | undefined;
  #refGeneration = -1;
  #loading: Promise<string> | undefined;
  #nextReq = 1;
  #inFlight = 0;
  #busySince: number | undefined;
  #dims = 0;

  constructor(spec: LlamaModelSpec, options: LlamaEngineOptions) {
    this.spec = spec;
    this.#opts = options;
    this.kind = spec.lane ?? "llama";
    this.task = spec.mode === "generate" ? "generate" : spec.mode === "score" ? "rerank" : "embed";
    this.limits = {
      maxSequenceTokens: spec.contextSize,
      maxMicroBatchTokens: spec.contextSize,
      maxSequences: this.kind === "ffi" ? spec.sequences ?? 1 : 1,
    };
    const log = options.log ?? stderrLog;
    const limiter = new LineRateLimiter(options.forwardLinesPerSec ?? 50);
    const target = `worker.${this.kind}.${spec.modelId}`;
    this.worker = new SupervisedWorker({
      key: canonicalRuntimeConfig(spec),
      budget: options.crashBudget,
      now: options.now,
      start: {
        engine: this.kind === "ffi" ? FFI_LLAMA_ENGINE : LLAMA_WORKER_ENGINE,
        workerId: options.workerId ?? `llama:${spec.modelId}`,
        runtimeDir: options.runtimeDir,
        launch: options.launch,
        acceptTimeoutMs: options.acceptTimeoutMs,
        helloTimeoutMs: options.helloTimeoutMs,
        cancelGraceMs: options.cancelGraceMs,
        log,
        onLogLine: (line, stream) => {
          const dropped = limiter.admit();
          if (dropped === undefined) return;
          log(workerLineLevel(line), target, line, dropped > 0 ? { stream, dropped } : { stream });
        },
      },
      onStart: (status) => options.onWorkerEvent?.("start", status),
      onCrash: (err, status) => {
        try {
          options.onWorkerEvent?.("crash", status);
        } catch { /* observers must not break supervision */ }
        const d = err.details as Record<string, unknown>;
        log("error", target, `worker crashed: ${err.message}`, {
          reason: String(d.reason),
          recent_crashes: status.recent_crashes,
          quarantined: status.state === "quarantined",
          // Lines cut by the rate limit since the last forwarded one would otherwise go unsaid.
          ...(limiter.dropped > 0 ? { dropped: limiter.dropped } : {}),
        });
      },
    });
  }

  /** Requests sent and not answered. */
  get inFlight(): number {
    return this.#inFlight;
  }

  /**
   * How long the worker has been busy without a pause, ms (0 when idle): `/health` reports a
   * worker busy past the request timeout, which is how a hung worker looks before its GENERATE
   * timeout kills it.
   */
  get busyMs(): number {
    return this.#busySince === undefined ? 0 : performance.now() - this.#busySince;
  }

  /** Timeout of requests other than LOAD and GENERATE, ms (the `/health` busy threshold). */
  get requestTimeoutMs(): number {
    return this.#opts.requestTimeoutMs ?? WORKER_TIMEOUTS.requestMs;
  }

  /** Vector width from LOADED (embed mode); 1 for a reranker; 0 for a generation engine. */
  get dims(): number {
    return this.task === "embed" ? this.#dims : this.task === "rerank" ? 1 : 0;
  }

  /**
   * Engine identity the worker announced in its first HELLO (before any worker started: the
   * name and version this build's worker announces, without build flags).
   */
  get identity(): EngineIdentity {
    return this.worker.identity ??
      (this.kind === "ffi"
        ? { engine: FFI_LLAMA_ENGINE, version: FFI_LLAMA_VERSION }
        : { engine: LLAMA_WORKER_ENGINE, version: LLAMA_WORKER_VERSION });
  }

  /** Supervision state. */
  status(): SupervisorStatus {
    return this.worker.status();
  }

  health(): EngineHealth {
    const st = this.worker.status();
    return {
      state: this.#disposed ? "disposed" : st.state,
      inFlight: this.#inFlight,
      busyMs: this.busyMs,
      busyLimitMs: this.requestTimeoutMs,
      worker: {
        state: st.state,
        generation: st.generation,
        recent_crashes: st.recent_crashes,
        total_crashes: st.total_crashes,
        ...(st.pid === undefined ? {} : { pid: st.pid }),
        ...(st.last_crash ? { last_crash: st.last_crash } : {}),
      },
      ...(st.quarantine ? { quarantine: { ...st.quarantine } } : {}),
    };
  }

  /**
   * Starts the worker and loads the model (again after a restart).
   *
   * @returns LOADED's `dims` and `cold_load_ms`, and the worker's engine identity.
   * @throws {SynapseError} `artifact_invalid` when llama.cpp refuses the file; `engine_crashed`;
   *   `probe_required` when quarantined.
   */
  async load(): Promise<{ dims: number; coldLoadMs: number; identity: WorkerEngineIdentity }> {
    const t0 = performance.now();
    await this.#ensureLoaded();
    return {
      dims: this.#dims,
      coldLoadMs: Math.round((performance.now() - t0) * 1000) / 1000,
      identity: this.worker.identity!,
    };
  }

  /**
   * Embeds rows of token ids (specials included) in one EMBED_BATCH.
   *
   * @throws {SynapseError} `engine_crashed`, `probe_required`, or the mapped worker ERR.
   */
  async embed(
    rows: readonly Pick<EngineRow, "ids">[],
    options: EngineCallOptions = {},
  ): Promise<EngineBatchOutput> {
    this.#ensureNotDisposed();
    if (this.task !== "embed") throw this.#wrongTask("embed");
    options.signal?.throwIfAborted();
    const ref = await this.#ensureLoaded();
    const ids = flatIds(rows);
    const t0 = performance.now();
    const reply = await this.#call<VectorsMessage>(
      {
        type: "EMBED_BATCH",
        req_id: this.#nextReq++,
        model_ref: ref,
        pooling: this.spec.pooling,
        normalize: this.spec.normalize,
        items: rows.map((r, i) => ({ id: i, n_tokens: r.ids.length })),
      },
      encodeI32LE(ids),
      this.#opts.requestTimeoutMs ?? WORKER_TIMEOUTS.requestMs,
      options.signal,
    );
    const { dims, n } = reply.msg;
    if (n !== rows.length) {
      throw new SynapseError(
        "engine_output_invalid",
        `Engine worker answered ${n} vectors for ${rows.length} rows`,
        { details: { model_id: this.spec.modelId } },
      );
    }
    const data = reply.tensor!;
    const nonFinite = new Uint8Array(n);
    for (let r = 0; r < n; r++) {
      for (let d = r * dims; d < (r + 1) * dims; d++) {
        if (!Number.isFinite(data[d]!)) {
          nonFinite[r] = 1;
          break;
        }
      }
    }
    return { data, dims, nonFinite, runMs: performance.now() - t0 };
  }

  /**
   * Scores pair rows (a reranker on the ffi lane, loaded in score mode) in one RERANK_SEQUENCES:
   * one raw score per row (the rank head's output, or logit("yes") − logit("no")).
   *
   * @throws {SynapseError} `backend_unavailable` when the engine was not loaded to score;
   *   `engine_crashed`, `probe_required`, or the mapped worker ERR.
   */
  async score(
    rows: readonly Pick<EngineRow, "ids">[],
    options: EngineCallOptions = {},
  ): Promise<EngineBatchOutput> {
    this.#ensureNotDisposed();
    if (this.task !== "rerank") throw this.#wrongTask("rerank");
    options.signal?.throwIfAborted();
    const ref = await this.#ensureLoaded();
    const t0 = performance.now();
    const reply = await this.#call<ScoresMessage>(
      {
        type: "RERANK_SEQUENCES",
        req_id: this.#nextReq++,
        model_ref: ref,
        sequences: rows.map((r) => ({ n_tokens: r.ids.length })),
      },
      encodeI32LE(flatIds(rows)),
      this.#opts.requestTimeoutMs ?? WORKER_TIMEOUTS.requestMs,
      options.signal,
    );
    if (reply.msg.n !== rows.length) {
      throw new SynapseError(
        "engine_output_invalid",
        `Engine worker answered ${reply.msg.n} scores for ${rows.length} rows`,
        { details: { model_id: this.spec.modelId } },
      );
    }
    const data = reply.tensor!;
    const nonFinite = new Uint8Array(rows.length);
    for (let r = 0; r < rows.length; r++) nonFinite[r] = Number.isFinite(data[r]!) ? 0 : 1;
    return { data, dims: 1, nonFinite, runMs: performance.now() - t0 };
  }

  /**
   * Greedy generation from prompt ids. Aborting `options.signal` sends CANCEL: the worker stops
   * between tokens and the call resolves with `finishReason: "cancelled"`. With
   * `options.onTokens` the GENERATE asks for `stream: true` and each TEXT_PART's ids go to it
   * while the worker generates.
   *
   * @throws {SynapseError} `invalid_request` (`details.reason` `grammar_invalid`) when llama.cpp
   *   refuses the grammar; `engine_crashed`; `probe_required`.
   */
  async generate(
    request: GenerateRequest,
    options: EngineCallOptions = {},
  ): Promise<GenerateOutput> {
    this.#ensureNotDisposed();
    if (this.task !== "generate") throw this.#wrongTask("generate");
    if (request.logprobs !== undefined && this.kind === "ffi") {
      // The shim reports no probabilities: the caller's request is what cannot be served here
      // (as the llama lane refuses logprobs it cannot answer), not the backend.
      throw new SynapseError(
        "invalid_request",
        `Cannot return logprobs from model '${this.spec.modelId}': the ffi lane does not report them (the llama lane does, for greedy decoding)`,
        {
          details: {
            field: "logprobs",
            reason: "logprobs_not_supported",
            model_id: this.spec.modelId,
            lane: "ffi",
          },
        },
      );
    }
    options.signal?.throwIfAborted();
    const ref = await this.#ensureLoaded();
    const t0 = performance.now();
    const reqId = this.#nextReq++;
    const onTokens = options.onTokens;
    const reply = await this.#call<TextMessage>(
      {
        type: "GENERATE",
        req_id: reqId,
        model_ref: ref,
        max_tokens: request.maxTokens,
        ...(request.grammar === undefined ? {} : { grammar: request.grammar }),
        ...(onTokens === undefined ? {} : { stream: true as const }),
        ...(request.sampling === undefined ? {} : { sampling: request.sampling }),
        ...(request.logprobs === undefined ? {} : { logprobs: request.logprobs }),
        ...(request.logitBias === undefined ? {} : { logit_bias: request.logitBias }),
      },
      encodeI32LE(request.ids),
      this.#opts.generateTimeoutMs ?? WORKER_TIMEOUTS.generateMs,
      options.signal,
      onTokens === undefined ? undefined : (part) => onTokens(part.token_ids),
    );
    const m = reply.msg;
    return {
      finishReason: m.finish_reason,
      generatedIds: m.generated_token_ids ?? [],
      ...(m.logprobs === undefined ? {} : { logprobs: m.logprobs }),
      nPrompt: m.n_prompt,
      runMs: performance.now() - t0,
    };
  }

  /**
   * llama.cpp's own tokenization of texts (TOKENIZE): special-token strings parsed (or, with
   * `special: false`, read as text), no BOS or EOS added. For checking a tokenizer the module
   * built from the GGUF against llama.cpp's; serving never tokenizes in the worker.
   *
   * @param texts The texts.
   * @param options `special`: parse special-token strings (llama.cpp `parse_special`).
   *   @default {true}
   * @returns One id list per text, in order.
   * @throws {SynapseError} `engine_crashed`, `probe_required`, `engine_output_invalid` (a TOKENS
   *   with another number of lists), or the mapped worker ERR.
   */
  async tokenize(
    texts: readonly string[],
    options: { special?: boolean } = {},
  ): Promise<number[][]> {
    this.#ensureNotDisposed();
    const ref = await this.#ensureLoaded();
    const reply = await this.#call<TokensMessage>(
      {
        type: "TOKENIZE",
        req_id: this.#nextReq++,
        model_ref: ref,
        texts: [...texts],
        special: options.special ?? true,
      },
      undefined,
      this.#opts.requestTimeoutMs ?? WORKER_TIMEOUTS.requestMs,
    );
    if (reply.msg.ids.length !== texts.length) {
      throw new SynapseError(
        "engine_output_invalid",
        `Engine worker answered ${reply.msg.ids.length} token lists for ${texts.length} texts`,
        { details: { model_id: this.spec.modelId } },
      );
    }
    return reply.msg.ids;
  }

  /**
   * Resident memory of the worker process, from its PONG (the worker reads its own RSS: the
   * service may not read another process's /proc entries under its permissions). Never starts a
   * worker, and never asks a busy one: then the last value read. The PING has the worker's usual
   * request timeout (a slow answer must not count as a hung worker), but this waits at most
   * `waitMs` for it and answers the last value read meanwhile.
   *
   * @param waitMs How long to wait for the PONG. @default 1000
   * @returns Bytes, or undefined when never read.
   */
  async residentBytes(waitMs = 1000): Promise<number | undefined> {
    if (this.#disposed || this.worker.status().state !== "ready") return undefined;
    if (this.#inFlight > 0 || this.#rssPing !== undefined) {
      if (this.#rssPing === undefined) return this.#rssBytes;
    } else {
      this.#rssPing = this.worker.call<PongMessage>(
        { type: "PING", req_id: this.#nextReq++ },
        undefined,
        this.#opts.requestTimeoutMs ?? WORKER_TIMEOUTS.requestMs,
      ).then((reply) => {
        this.#rssBytes = reply.msg.rss_mb * 1048576;
      }, () => {}).finally(() => this.#rssPing = undefined);
    }
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      this.#rssPing,
      new Promise<void>((resolve) => timer = setTimeout(resolve, waitMs)),
    ]);
    clearTimeout(timer);
    return this.#rssBytes;
  }

  /** Shuts the worker down. Idempotent. */
  async dispose(): Promise<void> {
    this.#disposed = true;
    try {
      await this.worker.close();
    } finally {
      this.#opts.workerSlot?.[Symbol.dispose]();
    }
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.dispose();
  }

  #ensureNotDisposed(): void {
    if (this.#disposed) {
      throw new SynapseError(
        "disposed",
        `Cannot use model '${this.spec.modelId}': its engine was disposed`,
      );
    }
  }

  #wrongTask(what: ModelTask): SynapseError {
    return new SynapseError(
      "backend_unavailable",
      `Cannot ${what} with model '${this.spec.modelId}': its ${this.kind} worker was loaded for ${this.task}`,
      {
        details: {
          model_id: this.spec.modelId,
          task: this.task,
          backends: [{ backend: this.kind, reason: `loaded_for_${this.task}` }],
        },
      },
    );
  }

  async #ensureLoaded(): Promise<string> {
    // Refuses at once when quarantined; otherwise starts a worker if there is none.
    await this.worker.connection();
    if (this.#ref !== undefined && this.#refGeneration === this.worker.generation) return this.#ref;
    this.#loading ??= this.#load().finally(() => this.#loading = undefined);
    return await this.#loading;
  }

  async #load(): Promise<string> {
    const generation = this.worker.generation;
    const s = this.spec;
    const reply = await this.#call<LoadedMessage>(
      {
        type: "LOAD",
        req_id: this.#nextReq++,
        artifact_path: s.ggufPath,
        artifact_digest: s.ggufDigest,
        format: "gguf",
        runtime_config: runtimeConfig(s),
      },
      undefined,
      this.#opts.loadTimeoutMs ?? WORKER_TIMEOUTS.loadMs,
    );
    this.#ref = reply.msg.model_ref;
    this.#refGeneration = generation;
    this.#dims = reply.msg.dims;
    return this.#ref;
  }

  /**
   * One request to the worker. When `signal` aborts while the request is queued or running, the
   * worker is sent CANCEL for it: a GENERATE then answers `finish_reason: "cancelled"` within a
   * token, an EMBED_BATCH stops between items and the call rejects with `signal.reason`.
   */
  async #call<
    M extends LoadedMessage | VectorsMessage | ScoresMessage | TextMessage | TokensMessage,
  >(
    msg: Parameters<SupervisedWorker["call"]>[0],
    tensor: Uint8Array | undefined,
    timeoutMs: number,
    signal?: AbortSignal,
    onPart?: TextPartHandler,
  ) {
    if (this.#inFlight++ === 0) this.#busySince = performance.now();
    try {
      return await this.worker.call<M>(msg, tensor, timeoutMs, signal, onPart);
    } catch (err) {
      if (err instanceof WorkerErrReply && err.workerCode === "cancelled" && signal?.aborted) {
        throw signal.reason;
      }
      // Killed for not answering its CANCEL in time: the caller hears why it cancelled (its
      // deadline, or its hang-up), not a crash; the crash is counted and the next call restarts
      // the worker within the crash budget.
      if (
        signal?.aborted && err instanceof SynapseError &&
        (err.details as Record<string, unknown> | undefined)?.reason === "cancel_timeout"
      ) {
        throw signal.reason;
      }
      if (err instanceof WorkerErrReply) throw mapWorkerErr(err, this.spec.modelId, msg.type);
      // Name the model (the worker id is a slot); the details object is kept, not copied: the
      // host fills in the log tail once the dead worker's last lines are read.
      if (err instanceof SynapseError && err.details !== undefined) {
        (err.details as Record<string, unknown>).model_id ??= this.spec.modelId;
      }
      throw err;
    } finally {
      if (--this.#inFlight === 0) this.#busySince = undefined;
    }
  }
}

/** The runtime config sent in LOAD; its canonical JSON is the crash-budget key. */
export function runtimeConfig(s: LlamaModelSpec): Record<string, unknown> {
  const base = { mode: s.mode, context_size: s.contextSize, threads: s.threads };
  if (s.lane !== "ffi") return base;
  return {
    ...base,
    sequences: s.mode === "generate" ? 1 : s.sequences ?? 1,
    ...(s.mode === "score" ? { readout: s.readout ?? "rank" } : {}),
  };
}

/** Rows' ids back to back. */
function flatIds(rows: readonly Pick<EngineRow, "ids">[]): Int32Array {
  let total = 0;
  for (const r of rows) total += r.ids.length;
  const ids = new Int32Array(total);
  let o = 0;
  for (const r of rows) {
    ids.set(r.ids, o);
    o += r.ids.length;
  }
  return ids;
}

/** Canonical (sorted-key) JSON of a model's runtime config plus its digest: the crash-budget key. */
export function canonicalRuntimeConfig(s: LlamaModelSpec): string {
  const rc = { ...runtimeConfig(s), artifact_digest: s.ggufDigest };
  return JSON.stringify(Object.fromEntries(Object.entries(rc).sort(([a], [b]) => a < b ? -1 : 1)));
}

/**
 * Maps a worker `ERR` to a stable error: `artifact_invalid` stays; a refused grammar is
 * `invalid_request` (reason `grammar_invalid`); an ffi worker's unusable shim (`shim_missing`,
 * `shim_unloadable`, `shim_abi_mismatch`) is `backend_unavailable` with that `reason`; `oom` is
 * `backend_unavailable`; anything else is `backend_unavailable` naming the worker's code.
 */
export function mapWorkerErr(err: WorkerErrReply, modelId: string, request: string): SynapseError {
  const details = { model_id: modelId, worker_code: err.workerCode, request };
  switch (err.workerCode) {
    case "artifact_invalid":
      return new SynapseError(
        "artifact_invalid",
        `Cannot load model '${modelId}': ${err.message}`,
        {
          details,
        },
      );
    case "shim_missing":
    case "shim_unloadable":
    case "shim_abi_mismatch":
      // The ffi lane's native shim cannot be used here: the load is refused, naming why.
      return new SynapseError(
        "backend_unavailable",
        `Cannot load model '${modelId}' on the ffi lane: ${err.message}`,
        {
          details: {
            ...details,
            reason: err.workerCode,
            backends: [{ backend: "ffi", reason: err.workerCode }],
          },
        },
      );
    case "grammar_invalid":
      return new SynapseError("invalid_request", `Cannot use grammar: ${err.message}`, {
        details: { ...details, field: "grammar", reason: "grammar_invalid" },
      });
    default:
      return new SynapseError(
        "backend_unavailable",
        `Engine worker refused ${request} for model '${modelId}': ${err.workerCode}: ${err.message}`,
        { details },
      );
  }
}

/**
 * The log level a worker's output line is forwarded at: llama.cpp's own lines (the worker
 * prints them as `llama.cpp <level>: …`) at `debug`, except its errors at `warn` — its load-time
 * warnings (control tokens not marked as end-of-generation, a context over the training
 * length) come with every load of a model and are not the operator's to act on; everything
 * else the worker says at `info`.
 *
 * @param line One line of the worker's stdout or stderr.
 * @returns The level.
 */
export function workerLineLevel(line: string): "debug" | "info" | "warn" {
  const m = /^llama\.cpp (\w+): /.exec(line);
  if (m === null) return "info";
  return m[1] === "error" || m[1] === "fatal" ? "warn" : "debug";
}
