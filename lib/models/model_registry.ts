/**
 * The models this process serves, and the lanes they run on. The registry owns every engine
 * runtime (the two ORT threads, each llama worker), their schedulers and the lanes over them,
 * and disposes them all.
 *
 * A model is `loading` until its engine is up; requests meanwhile get `model_loading` with a
 * retry hint (field report F9), never an implicit wait. A load that fails transiently (a worker
 * that could not start on a busy machine) is retried in the background with backoff, at most
 * {@link LOAD_RETRIES} times and within the worker's crash budget; then the failure is permanent
 * (`probe_required`, reason `load_failed_repeatedly`). Field report F20. A remote lane whose
 * provider is unreachable (or answers 5xx, or is still loading) is retried without a limit, the
 * delay doubling up to {@link REMOTE_LOAD_RETRY_MAX_MS}: a provider down when this process starts
 * is served once it is back, without a restart.
 *
 * @module
 */
import { SynapseError, toSynapseError } from "../contract/errors.ts";
import { numericProfileId, type ThreadPolicy } from "../identity/numeric_profile.ts";
import type { OrtRunner, OrtThread } from "../engines/ort/ort_thread.ts";
import { createOrtThreads } from "../engines/ort/ort_threads.ts";
import type { OrtBulkSession } from "../engines/ort/ort_threads.ts";
import type { Engine } from "../engines/engine.ts";
import type { Admission } from "../sched/admission.ts";
import { LaneScheduler } from "../sched/lane_scheduler.ts";
import { type LogSink, nullLog, retarget, stderrLog } from "../log/log.ts";
import { type LaneStatusRow, laneStatusRow } from "./lane_status.ts";
import { loadOrtModel, ortReadyModel } from "./load_ort.ts";
import { type LlamaEngineFactory, llamaReadyModel, loadLlamaModel } from "./load_llama.ts";
import { loadRemoteModel, type RemoteLoadContext, withRemoteAssurance } from "./load_remote.ts";
import type { RemoteProvider } from "../engines/remote/provider.ts";
import type {
  ModelEntry,
  ModelSource,
  ModelTask,
  QueryPath,
  ReadyModel,
  RemoteProvenance,
} from "./model.ts";
import { Lane } from "../lanes/lane.ts";
import { type RegistryTestHooks, SkewedEngine } from "./_test_hooks.ts";
import { labelledTestModel } from "./sources.ts";

/** Background retries of a load that failed transiently; after them the failure is permanent. */
export const LOAD_RETRIES = 2;

/** Longest wait between two load attempts of a remote lane whose provider fails transiently, ms. */
export const REMOTE_LOAD_RETRY_MAX_MS = 30_000;

/** Options of {@link ModelRegistry}. */
export interface ModelRegistryOptions {
  /** The module's admission (byte budget, refusal counters), shared by every lane. */
  admission: Admission;
  /** Thread policy (the config knob), part of every profile. @default "balanced" */
  threadPolicy?: ThreadPolicy;
  /** Aggregate token budget of one inline request (`inline.max_tokens`). @default 8192 */
  maxBatchTokens?: number;
  /** Engine slots of the interactive ORT thread (`inline.max_concurrent_workers`). @default 2 */
  interactivePermits?: number;
  /** Run time assumed before any run was measured, ms (`inline.estimated_execution_ms`). @default 25 */
  estimatedExecutionMs?: number;
  /** onnxruntime intra-op threads per ORT thread. @default threadsForKnob(threadPolicy) */
  ortThreads?: number;
  /**
   * Where bulk ORT work runs (lib/engines/ort/ort_threads.ts): on the interactive thread's
   * sessions, or on a bulk thread of its own. @default "shared"
   */
  ortBulkSession?: OrtBulkSession;
  /** Makes llama engines; without it a llama model fails to load with `backend_unavailable`. */
  llama?: LlamaEngineFactory;
  /** The configured remote providers by id (config `remote_providers`). @default none */
  remoteProviders?: ReadonlyMap<string, RemoteProvider>;
  /** Where remote lanes' canary baselines are kept (lib/models/remote_canary_store.ts). */
  remoteCanaries?: RemoteLoadContext["canaries"];
  /** Threads of a llama worker. @default threadsForKnob(threadPolicy) */
  llamaThreads?: number;
  /**
   * Work sharing the cores that the registry does not see (a durable job between quanta): the
   * interactive ORT lane then runs its quiet session. @default never
   */
  externalBusy?: () => boolean;
  /** First background-retry delay after a transient load failure, ms (doubles). @default 1000 */
  loadRetryBaseMs?: number;
  /** Module log. @default nullLog */
  log?: LogSink;
  /** Wall clock in ms. @default Date.now */
  now?: () => number;
  /**
   * Told how each load attempt ended: `ok`, `retry` (failed transiently; a background retry is
   * due) or `failed` (for good); for the instance's metrics. A throw is ignored.
   */
  onLoadAttempt?: (modelId: string, outcome: "ok" | "retry" | "failed") => void;
  /**
   * **Test hooks** ({@link RegistryTestHooks}): make a lane misbehave on purpose so the probe's
   * gate can be seen to fail. Never set from the config or the wire. @default none
   */
  testHooks?: RegistryTestHooks;
  /**
   * The execution estimates a model's lanes start from before they have measured a run, from
   * the probe's rows for (this machine, the model's numeric profile, the knob), read at startup:
   * `batchMs` the knob assignment's call of its recommended batch, `singleRowMs` the perf row of
   * one row per call. A llama model's own scheduler starts from `batchMs`; the shared ORT
   * schedulers from the mean over the loaded ORT models that have one (bulk: `batchMs`,
   * interactive: `singleRowMs`). Undefined: `estimatedExecutionMs` (ORT interactive, llama) or
   * 25 ms (ORT bulk).
   */
  initialRunMs?: (modelId: string, numericProfileId: string) => InitialRunEstimate | undefined;
  /**
   * The query path the store recorded for a model that just loaded (the probe's finding,
   * applied again at startup), asked once per successful load attempt of a model
   * whose query path {@link ModelRegistry.setQueryPath} has not set; `disabled` disables its hot
   * path before it serves a request. A throw counts as undefined. @default none
   */
  recordedQueryPath?: (ready: ReadyModel) => QueryPath | undefined;
  /**
   * The shape cap the store recorded for a model that just loaded (the probe's finding, applied
   * again at startup), asked once per successful load attempt of a model whose cap
   * {@link ModelRegistry.setShapeCap} has not set. A throw counts as undefined. @default none
   */
  recordedShapeCap?: (ready: ReadyModel) => number | undefined;
  /**
   * The assurance a remote lane that just loaded serves under: `proven` when this machine holds a
   * passing certificate of its proven identity (a probe against its `reference_model`;
   * lib/probe/certification.ts), else `declared`. A throw counts as `declared`. @default declared
   */
  remoteAssurance?: (ready: ReadyModel) => RemoteProvenance["assurance"];
}

/** What {@link ModelRegistryOptions.initialRunMs} gives for a model, ms each. */
export interface InitialRunEstimate {
  /** Engine time of one call of the probe's recommended batch. */
  batchMs?: number;
  /** Engine time of a call of one row (the query path's shape). */
  singleRowMs?: number;
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

interface OwnRuntime {
  engine: Engine;
  scheduler: LaneScheduler;
}

/**
 * The models this process serves. ORT models share two Worker threads — interactive (loaded at
 * boot) and bulk (loaded on a model's first job), so an interactive request never waits for a
 * bulk quantum — each with one scheduler. A GGUF model has a llama worker and a scheduler of its
 * own, which its interactive, bulk and decode work share.
 */
export class ModelRegistry implements AsyncDisposable {
  #entries = new Map<string, ModelEntry>();
  #waiters = new Map<string, (() => void)[]>();
  #timers = new Set<ReturnType<typeof setTimeout>>();
  #own = new Map<string, OwnRuntime>();
  #ortInteractive: OrtThread;
  #ortBulk: OrtRunner;
  /** True when bulk ORT work runs on the interactive thread's sessions (ort_threads.ts). */
  #ortShared: boolean;
  #ortInteractiveSched: LaneScheduler;
  #ortBulkSched: LaneScheduler;
  #admission: Admission;
  #threadPolicy: ThreadPolicy;
  #maxBatchTokens: number;
  #llama: LlamaEngineFactory | undefined;
  #remoteProviders: ReadonlyMap<string, RemoteProvider>;
  #remoteCanaries: RemoteLoadContext["canaries"];
  #llamaThreads: number;
  #externalBusy: () => boolean;
  #retryBaseMs: number;
  #log: LogSink;
  #now: () => number;
  #onLoadAttempt: ModelRegistryOptions["onLoadAttempt"];
  #skewQueryPath: ReadonlySet<string>;
  #skewBatchShapes: ReadonlyMap<string, { minRows: number; epsilon: number }>;
  /**
   * Models whose query path is disabled: their interactive-runtime lane (`hot`) and the lane
   * over the bulk runtime that serves their interactive work instead (`bulkPath`).
   */
  #hotLanes = new Map<string, { hot: Lane; bulkPath: Lane }>();
  #initialRunMs: ModelRegistryOptions["initialRunMs"];
  /** The seeds of the loaded ORT models (the shared ORT schedulers start from their mean). */
  #ortSeeds = new Map<string, InitialRunEstimate>();
  #ortDefaults: { interactive: number; bulk: number };
  #recordedQueryPath: ModelRegistryOptions["recordedQueryPath"];
  #recordedShapeCap: ModelRegistryOptions["recordedShapeCap"];
  #remoteAssurance: ModelRegistryOptions["remoteAssurance"];
  #disposed = false;

  constructor(options: ModelRegistryOptions) {
    const policy = options.threadPolicy ?? "balanced";
    const knob = typeof policy === "string" ? policy : "balanced";
    const threads = options.ortThreads ?? threadsForKnob(knob);
    // The two threads share the machine's cores and memory: the policy (spinning, quiet twins,
    // nice 10 for bulk, idle release) lives in createOrtThreads.
    const lanes = createOrtThreads({
      intraOpThreads: threads,
      bulkSession: options.ortBulkSession ?? "shared",
      // Engine lines (the lanes' priority warning) go under synapse.worker.
      log: retarget(options.log ?? stderrLog, "synapse.worker", { engine: "ort" }),
    });
    this.#ortInteractive = lanes.interactive;
    this.#ortBulk = lanes.bulk;
    this.#ortShared = lanes.bulkSession !== "separate";
    this.#ortInteractiveSched = new LaneScheduler({
      permits: Math.max(1, options.interactivePermits ?? 2),
      defaultRunMs: options.estimatedExecutionMs ?? 25,
    });
    this.#ortBulkSched = new LaneScheduler({ permits: 1 });
    this.#ortDefaults = {
      interactive: this.#ortInteractiveSched.defaultRunMs,
      bulk: this.#ortBulkSched.defaultRunMs,
    };
    this.#admission = options.admission;
    this.#threadPolicy = policy;
    this.#maxBatchTokens = options.maxBatchTokens ?? 8192;
    this.#llama = options.llama;
    this.#remoteProviders = options.remoteProviders ?? new Map();
    this.#remoteCanaries = options.remoteCanaries;
    this.#llamaThreads = options.llamaThreads ?? threadsForKnob(knob);
    this.#externalBusy = options.externalBusy ?? (() => false);
    this.#retryBaseMs = options.loadRetryBaseMs ?? 1000;
    this.#log = options.log ?? nullLog;
    this.#now = options.now ?? Date.now;
    this.#onLoadAttempt = options.onLoadAttempt;
    this.#skewQueryPath = new Set(options.testHooks?.skewQueryPath ?? []);
    this.#skewBatchShapes = new Map(
      (options.testHooks?.skewBatchShapes ?? []).map((s) => [s.modelId, {
        minRows: s.minRows,
        epsilon: s.epsilon,
      }]),
    );
    this.#initialRunMs = options.initialRunMs;
    this.#recordedQueryPath = options.recordedQueryPath;
    this.#recordedShapeCap = options.recordedShapeCap;
    this.#remoteAssurance = options.remoteAssurance;
  }

  /** All models, in load order. */
  list(): ModelEntry[] {
    return [...this.#entries.values()];
  }

  /** Engine calls in flight on every runtime. */
  get engineCallsInFlight(): number {
    // A shared bulk view's runs are the interactive thread's: counted there once.
    let n = this.#ortInteractive.inFlight + (this.#ortShared ? 0 : this.#ortBulk.inFlight);
    for (const own of this.#own.values()) n += own.engine.inFlight;
    return n;
  }

  /**
   * True while engine work other than interactive ORT queries shares the cores: bulk ORT work
   * (on the shared session or a bulk thread of its own), a llama worker is busy, or
   * {@link ModelRegistryOptions.externalBusy} says so. The interactive ORT lane then runs quiet:
   * on its quiet thread's one-thread session, beside the shared session's bulk quantum rather
   * than after it (lib/engines/ort/ort_threads.ts).
   */
  otherEnginesBusy(): boolean {
    if (this.#ortBulk.inFlight > 0 || this.#ortBulkSched.waiters > 0) return true;
    if (this.#ortBulkSched.inFlight > 0 || this.#externalBusy()) return true;
    // A remote lane's work runs on its provider, not on these cores.
    for (const own of this.#own.values()) {
      if (own.engine.kind !== "remote" && own.engine.inFlight > 0) return true;
    }
    return false;
  }

  /**
   * Starts loading a model; resolves when it is ready or failed (never rejects). A transient
   * failure schedules a background retry; {@link ready} waits for the end of those.
   *
   * @throws {SynapseError} `invalid_request` when the id is already taken; `disposed`.
   */
  load(source: ModelSource): Promise<ModelEntry> {
    this.#ensureNotDisposed();
    if (this.#entries.has(source.modelId)) {
      throw new SynapseError(
        "invalid_request",
        `Cannot load model '${source.modelId}': the id is already loaded`,
        { details: { model_id: source.modelId } },
      );
    }
    const entry: ModelEntry = {
      source,
      modelId: source.modelId,
      task: source.task,
      engine: source.engine ?? "ort",
      state: "loading",
      testModel: source.testModel ?? labelledTestModel(source),
      loadStartedMs: this.#now(),
      loadAttempts: 0,
    };
    this.#entries.set(source.modelId, entry);
    return this.#attempt(entry);
  }

  /**
   * Resolves once the model is ready, or rejects with its final load error (after any
   * background retries). For tests and operators; requests never wait (they get
   * `model_loading`).
   *
   * @throws {SynapseError} `unknown_model`; the load error.
   */
  async ready(modelId: string): Promise<ReadyModel> {
    const entry = this.#entries.get(modelId);
    if (entry === undefined) throw unknownModel(modelId, undefined, [...this.#entries.keys()]);
    while (entry.state === "loading" || entry.retryAtMs !== undefined) {
      await new Promise<void>((resolve) => {
        const list = this.#waiters.get(modelId) ?? [];
        list.push(resolve);
        this.#waiters.set(modelId, list);
      });
    }
    if (entry.ready) return entry.ready;
    throw entry.error!;
  }

  /**
   * The ready model for a request.
   *
   * @param modelId Requested id; the first ready-or-loading model of the task when undefined.
   * @throws {SynapseError} `unknown_model {model_id}`; `invalid_request` when the model serves
   *   another task; `model_loading` (transient, retry hint) while loading or waiting for a
   *   background retry; the load error when loading failed for good.
   */
  resolve(modelId: string | undefined, task: ModelTask): ReadyModel {
    let m: ModelEntry | undefined;
    if (modelId === undefined) {
      m = defaultModelOf(this.list(), task);
      if (!m) throw unknownModel(null, task);
    } else {
      m = this.#entries.get(modelId);
      if (!m) throw unknownModel(modelId, task, [...this.#entries.keys()]);
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
        { retryAfterMs: 250, details: { model_id: m.modelId, attempt: m.loadAttempts } },
      );
    }
    if (m.state === "failed") {
      if (m.retryAtMs !== undefined) {
        throw new SynapseError(
          "model_loading",
          `Cannot serve ${task}: model '${m.modelId}' failed to load (${m.error?.message}); loading again in the background`,
          {
            retryAfterMs: Math.max(1, m.retryAtMs - this.#now()),
            details: {
              model_id: m.modelId,
              attempt: m.loadAttempts,
              reason: "retrying_after_failure",
              last_error: m.error?.toWire(),
            },
          },
        );
      }
      throw m.error!;
    }
    return m.ready!;
  }

  /**
   * What holds a model now: requests in flight or admitted on its lanes, and any holder the
   * caller adds (durable jobs, which the registry does not see).
   *
   * @returns One row per kind with a count, empty when nothing holds it.
   */
  holders(modelId: string): { kind: "request" | "loading"; count: number }[] {
    const entry = this.#entries.get(modelId);
    if (entry === undefined) return [];
    if (entry.state === "loading") return [{ kind: "loading", count: 1 }];
    const r = entry.ready;
    const hot = this.#hotLanes.get(modelId)?.hot.activeRequests ?? 0;
    const n = r === undefined ? 0 : r.interactive.activeRequests + r.bulk.activeRequests + hot;
    return n > 0 ? [{ kind: "request", count: n }] : [];
  }

  /**
   * Unloads a model: its llama worker shuts down, or its sessions leave the ORT threads, and its
   * id is free again. Refused while anything holds it.
   *
   * @param extraHolders Holders the registry does not see (durable jobs), as `model_in_use`
   *   `holders[]` rows.
   * @returns The entry as it was (state as before the unload).
   * @throws {SynapseError} `unknown_model`; `model_loading` (retry 250 ms) while it loads;
   *   `model_in_use {model_id, holders[]}` while requests or jobs hold it.
   */
  async unload(
    modelId: string,
    extraHolders: { kind: string; count?: number; job_id?: string }[] = [],
  ): Promise<ModelEntry> {
    this.#ensureNotDisposed();
    const entry = this.#entries.get(modelId);
    if (entry === undefined) throw unknownModel(modelId, undefined, [...this.#entries.keys()]);
    if (entry.state === "loading" || entry.retryAtMs !== undefined) {
      throw new SynapseError(
        "model_loading",
        `Cannot unload model '${modelId}': it is loading; retry when it is ready or failed`,
        { retryAfterMs: 250, details: { model_id: modelId } },
      );
    }
    const holders = [...this.holders(modelId), ...extraHolders];
    if (holders.length > 0) {
      throw new SynapseError(
        "model_in_use",
        `Cannot unload model '${modelId}': it is in use (${
          holders.map((h) => h.kind).join(", ")
        }); retry once they finish, or cancel them`,
        { details: { model_id: modelId, catalog_id: modelId, holders } },
      );
    }
    this.#entries.delete(modelId);
    this.#hotLanes.delete(modelId);
    const own = this.#own.get(modelId);
    if (own !== undefined) {
      this.#own.delete(modelId);
      own.scheduler.dispose();
      await own.engine.dispose().catch(() => {});
    } else if (entry.engine === "ort") {
      this.#seedOrt(modelId, undefined);
      await Promise.all([
        this.#ortInteractive.unload(modelId).catch(() => {}),
        this.#ortBulk.unload(modelId).catch(() => {}),
      ]);
    }
    this.#log("info", "synapse.models", `model '${modelId}' unloaded`, {});
    return entry;
  }

  /**
   * Records (or, undefined, forgets) an ORT model's seeds and sets the shared ORT schedulers'
   * pre-measurement estimates to their mean over the models that have one (else the defaults
   * they were built with). Values that are not finite non-negative numbers are ignored.
   */
  #seedOrt(modelId: string, seed: InitialRunEstimate | undefined): void {
    if (seed === undefined) this.#ortSeeds.delete(modelId);
    else this.#ortSeeds.set(modelId, seed);
    const mean = (pick: (s: InitialRunEstimate) => number | undefined, fallback: number) => {
      const xs = [...this.#ortSeeds.values()].map(pick).filter((x): x is number =>
        typeof x === "number" && Number.isFinite(x) && x >= 0
      );
      return xs.length === 0 ? fallback : xs.reduce((a, b) => a + b, 0) / xs.length;
    };
    this.#ortInteractiveSched.setDefaultRunMs(
      mean((s) => s.singleRowMs, this.#ortDefaults.interactive),
    );
    this.#ortBulkSched.setDefaultRunMs(mean((s) => s.batchMs, this.#ortDefaults.bulk));
  }

  /**
   * Turns a model's hot path on or off (the probe's `query_path_equals_batch_path`). `disabled`:
   * its interactive lane runs on its bulk runtime (the batch path: for ORT the bulk thread and its
   * scheduler, still in the interactive class), so `embed.query` and inline `embed.batch` get
   * exactly the batch path's numbers; `enabled` puts it back on the interactive runtime. Applies
   * at once to a ready model and to every later load attempt of it (a model still loading takes
   * it when it becomes ready); requests already admitted finish where they started.
   * `models.list` shows it as `query_path`.
   *
   * @param modelId A registered model.
   * @param path `enabled` or `disabled`.
   * @throws {SynapseError} `unknown_model`; `invalid_request` for another value.
   */
  setQueryPath(modelId: string, path: QueryPath): void {
    const entry = this.#entries.get(modelId);
    if (entry === undefined) throw unknownModel(modelId, undefined, [...this.#entries.keys()]);
    if (path !== "enabled" && path !== "disabled") {
      throw new SynapseError(
        "invalid_request",
        `Cannot set the query path of '${modelId}' to '${path}': it is 'enabled' or 'disabled'`,
        { details: { model_id: modelId, field: "query_path", value: path } },
      );
    }
    entry.queryPath = path;
    if (entry.ready !== undefined) {
      entry.ready = this.#withQueryPath(entry, entry.ready);
      this.#applyShapeCap(entry, entry.ready);
    }
  }

  /**
   * Serves a loaded remote lane under another assurance (docs/remote.md "Identity"): `proven` once
   * a probe against its reference passed, `declared` again when a later probe failed. Its ready
   * model is replaced by {@link withRemoteAssurance}'s (another fingerprint); requests already
   * admitted finish under the identity they started with. Nothing happens to a model that is not
   * a ready remote lane.
   *
   * @param modelId A registered model.
   * @param assurance `declared` or `proven`.
   * @returns Whether the served identity changed.
   * @throws {SynapseError} `unknown_model`.
   */
  setRemoteAssurance(modelId: string, assurance: RemoteProvenance["assurance"]): boolean {
    const entry = this.#entries.get(modelId);
    if (entry === undefined) throw unknownModel(modelId, undefined, [...this.#entries.keys()]);
    const ready = entry.ready;
    if (ready?.remote === undefined || ready.remote.assurance === assurance) return false;
    entry.ready = withRemoteAssurance(ready, assurance);
    this.#log("info", "synapse.models", `remote lane '${modelId}' serves as ${assurance}`, {
      fingerprint: entry.ready.fingerprint,
    });
    return true;
  }

  /**
   * Sets (or, undefined, clears) a model's **shape cap** (the probe's shape classes,
   * lib/probe/types.ts `ShapeClass`): the most rows one engine call of its lanes holds — the
   * largest call size whose outputs the probe found equal to the rows alone — so a lane that is not
   * shape-invariant serves only the row-alone shape class and its fingerprint keeps F4's promise.
   * Applies at once to the ready model (its interactive, bulk and hot lanes) and to every later
   * load attempt. `models.list` shows it as `shape_cap`. The probe's own control lanes are never
   * capped: it measures every shape.
   *
   * @param modelId A registered model.
   * @param cap A positive integer, or undefined.
   * @throws {SynapseError} `unknown_model`; `invalid_request` for another value.
   */
  setShapeCap(modelId: string, cap: number | undefined): void {
    const entry = this.#entries.get(modelId);
    if (entry === undefined) throw unknownModel(modelId, undefined, [...this.#entries.keys()]);
    if (cap !== undefined && !(Number.isInteger(cap) && cap >= 1)) {
      throw new SynapseError(
        "invalid_request",
        `Cannot set the shape cap of '${modelId}' to ${cap}: it is a positive whole number of rows`,
        { details: { model_id: modelId, field: "shape_cap", value: cap } },
      );
    }
    if (cap === undefined) delete entry.shapeCap;
    else entry.shapeCap = cap;
    if (entry.ready !== undefined) this.#applyShapeCap(entry, entry.ready);
  }

  /** Puts the entry's shape cap on every serving lane of `ready` (and the hot lane). */
  #applyShapeCap(entry: ModelEntry, ready: ReadyModel): void {
    const lanes = [ready.interactive, ready.bulk, this.#hotLanes.get(entry.modelId)?.hot];
    for (const lane of lanes) if (lane !== undefined) lane.maxCallRows = entry.shapeCap;
  }

  /** A model's query path (`enabled` unless {@link setQueryPath} disabled it). */
  queryPath(modelId: string): QueryPath {
    return this.#entries.get(modelId)?.queryPath ?? "enabled";
  }

  /**
   * The model's lane on its interactive runtime (the query path), also while its hot path is
   * disabled and requests run on the bulk runtime: what the probe measures the query path on.
   *
   * @throws {SynapseError} `unknown_model`; as {@link resolve} when it is not ready.
   */
  hotLane(modelId: string): Lane {
    const entry = this.#entries.get(modelId);
    if (entry === undefined) throw unknownModel(modelId, undefined, [...this.#entries.keys()]);
    return this.#hotLanes.get(modelId)?.hot ?? this.resolve(modelId, entry.task).interactive;
  }

  /**
   * Control-class lanes over a ready model's own engines and schedulers, for the probe (issue
   * 18): `query` runs on the model's interactive runtime (ORT: the interactive thread, with the
   * interactive lane's quiet policy; llama: its worker), `batch` on its bulk runtime (ORT: the
   * bulk thread, which loads the model on first use as a job would; llama: the same worker).
   * Work on them is queued under the runtime's scheduler in the `control` class (picked first),
   * beside the model's other work, never beside the scheduler.
   *
   * @returns Fresh lanes (cheap; nothing to dispose).
   * @throws {SynapseError} `unknown_model`; `model_loading` while it loads; its load error when
   *   it failed; `disposed`.
   */
  controlLanes(modelId: string): { query: Lane; batch: Lane } {
    this.#ensureNotDisposed();
    const entry = this.#entries.get(modelId);
    if (entry === undefined) throw unknownModel(modelId, undefined, [...this.#entries.keys()]);
    const ready = this.resolve(modelId, entry.task);
    // The query path is the interactive runtime even while the hot path is disabled.
    const hot = this.hotLane(modelId);
    const own = this.#own.get(modelId);
    const common = { cls: "control" as const, admission: this.#admission, now: this.#now };
    if (own !== undefined) {
      const name = `${own.engine.kind === "remote" ? "remote" : "llama"}-${modelId}`;
      return {
        query: new Lane({ ...common, name, engine: hot.engine, scheduler: own.scheduler }),
        batch: new Lane({ ...common, name, engine: own.engine, scheduler: own.scheduler }),
      };
    }
    return {
      query: new Lane({
        ...common,
        name: "ort-interactive",
        engine: hot.engine,
        scheduler: this.#ortInteractiveSched,
        quiet: () => this.otherEnginesBusy(),
      }),
      batch: new Lane({
        ...common,
        name: "ort-bulk",
        engine: ready.bulk.engine,
        scheduler: this.#ortBulkSched,
      }),
    };
  }

  /** Status rows of every scheduler and the models on it (`admission.status.lanes`). */
  laneStatus(): LaneStatusRow[] {
    const ortModels = this.list().filter((m) => m.engine === "ort").map((m) => m.modelId);
    const rows: LaneStatusRow[] = [
      laneStatusRow("ort-interactive", "ort", this.#ortInteractiveSched.stats(), ortModels),
      laneStatusRow("ort-bulk", "ort", this.#ortBulkSched.stats(), ortModels),
    ];
    rows[0]!.intra_op_threads = this.#ortInteractive.intraOpThreads;
    rows[1]!.intra_op_threads = this.#ortBulk.intraOpThreads;
    for (const [modelId, own] of this.#own) {
      const row = laneStatusRow(
        `${own.engine.kind === "remote" ? "remote" : "llama"}-${modelId}`,
        own.engine.kind,
        own.scheduler.stats(),
        [modelId],
      );
      const h = own.engine.health();
      row.task = own.engine.task;
      if (h.worker !== undefined) row.worker = { ...h.worker };
      rows.push(row);
    }
    return rows;
  }

  /** True after {@link dispose}. */
  get disposed(): boolean {
    return this.#disposed;
  }

  /**
   * Stops every lane: queued work is refused (`disposed`), the ORT threads stop and llama
   * workers shut down (SHUTDOWN, then kill after a grace period). Idempotent.
   */
  async dispose(): Promise<void> {
    if (this.#disposed) return;
    this.#disposed = true;
    for (const t of this.#timers) clearTimeout(t);
    this.#timers.clear();
    this.#ortInteractiveSched.dispose();
    this.#ortBulkSched.dispose();
    for (const own of this.#own.values()) own.scheduler.dispose();
    this.#ortInteractive.dispose();
    this.#ortBulk.dispose();
    await Promise.all([...this.#own.values()].map((own) => own.engine.dispose().catch(() => {})));
    this.#own.clear();
    for (const list of this.#waiters.values()) for (const w of list) w();
    this.#waiters.clear();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.dispose();
  }

  /** One load attempt; resolves with the entry, ready or failed. */
  async #attempt(entry: ModelEntry): Promise<ModelEntry> {
    entry.loadAttempts++;
    entry.state = "loading";
    delete entry.retryAtMs;
    delete entry.error;
    try {
      const ready = await this.#load(entry);
      if (entry.queryPath === undefined) {
        try {
          const recorded = this.#recordedQueryPath?.(ready);
          if (recorded === "disabled") entry.queryPath = recorded;
        } catch { /* no record: the hot path stays on */ }
      }
      if (entry.shapeCap === undefined) {
        try {
          const cap = this.#recordedShapeCap?.(ready);
          if (cap !== undefined && Number.isInteger(cap) && cap >= 1) entry.shapeCap = cap;
        } catch { /* no record: the engine's own limit */ }
      }
      entry.ready = this.#withQueryPath(entry, ready);
      this.#applyShapeCap(entry, entry.ready);
      entry.state = "ready";
      if (entry.loadAttempts > 1) {
        this.#log("info", "synapse.models", `model '${entry.modelId}' loaded`, {
          attempt: entry.loadAttempts,
        });
      }
    } catch (err) {
      this.#failed(entry, err);
    }
    try {
      this.#onLoadAttempt?.(
        entry.modelId,
        entry.state === "ready" ? "ok" : entry.retryAtMs !== undefined ? "retry" : "failed",
      );
    } catch { /* observers must not break loading */ }
    this.#wake(entry.modelId);
    return entry;
  }

  #failed(entry: ModelEntry, err: unknown): void {
    const e = toSynapseError(err, "artifact_invalid");
    entry.state = "failed";
    entry.failedAtMs = this.#now();
    const transient = e.errorClass === "transient";
    // A remote provider that is down now may be back later: its lane keeps trying.
    const remote = entry.engine === "remote";
    if (transient && (remote || entry.loadAttempts <= LOAD_RETRIES) && !this.#disposed) {
      const backoff = this.#retryBaseMs * 2 ** Math.min(entry.loadAttempts - 1, 20);
      const delay = Math.max(
        e.retryAfterMs ?? 0,
        remote ? Math.min(backoff, REMOTE_LOAD_RETRY_MAX_MS) : backoff,
      );
      entry.error = e;
      entry.retryAtMs = entry.failedAtMs + delay;
      this.#log("warn", "synapse.models", `model '${entry.modelId}' failed to load; retrying`, {
        code: e.code,
        message: e.message,
        attempt: entry.loadAttempts,
        retry_in_ms: delay,
      });
      const timer = setTimeout(() => {
        this.#timers.delete(timer);
        if (!this.#disposed) void this.#attempt(entry);
      }, delay);
      // Not unref'd: a pending retry is work in progress ({@link ready} may be waiting on it);
      // dispose clears it.
      this.#timers.add(timer);
      return;
    }
    entry.error = transient
      ? new SynapseError(
        "probe_required",
        `Cannot serve model '${entry.modelId}': loading failed ${entry.loadAttempts} times; last: ${e.message}`,
        {
          cause: e,
          details: {
            model_id: entry.modelId,
            reason: "load_failed_repeatedly",
            attempts: entry.loadAttempts,
            last_error: e.toWire(),
          },
        },
      )
      : e;
    this.#log("error", "synapse.models", `model '${entry.modelId}' failed to load`, {
      code: entry.error.code,
      message: entry.error.message,
      attempts: entry.loadAttempts,
    });
  }

  #wake(modelId: string): void {
    const list = this.#waiters.get(modelId);
    this.#waiters.delete(modelId);
    for (const w of list ?? []) w();
  }

  async #load(entry: ModelEntry): Promise<ReadyModel> {
    const src = entry.source;
    if (entry.engine === "remote") {
      const r = await loadRemoteModel(src, {
        providers: this.#remoteProviders,
        threadPolicy: this.#threadPolicy,
        maxBatchTokens: this.#maxBatchTokens,
        admission: this.#admission,
        now: this.#now,
        ...(this.#remoteCanaries === undefined ? {} : { canaries: this.#remoteCanaries }),
        log: this.#log,
      });
      if (this.#disposed) {
        await r.engine.dispose();
        throw new SynapseError("disposed", "Cannot load model: the registry was disposed");
      }
      this.#own.set(entry.modelId, { engine: r.engine, scheduler: r.scheduler });
      entry.testModel ||= r.ready.testModel;
      let assurance: RemoteProvenance["assurance"] = "declared";
      try {
        assurance = this.#remoteAssurance?.(r.ready) ?? "declared";
      } catch { /* no record: declared */ }
      return withRemoteAssurance(r.ready, assurance);
    }
    if (entry.engine === "llama") {
      const l = await loadLlamaModel(src, {
        factory: this.#llama,
        threads: this.#llamaThreads,
        threadPolicy: this.#threadPolicy,
        maxBatchTokens: this.#maxBatchTokens,
      });
      if (this.#disposed) {
        await l.engine.dispose();
        throw new SynapseError("disposed", "Cannot load model: the registry was disposed");
      }
      const runMs = this.#initialRunMs?.(entry.modelId, numericProfileId(l.profile))?.batchMs;
      const scheduler = new LaneScheduler({
        permits: 1,
        ...(runMs === undefined || !(runMs >= 0) ? {} : { defaultRunMs: runMs }),
      });
      this.#own.set(entry.modelId, { engine: l.engine, scheduler });
      entry.testModel ||= l.testModel;
      entry.coldLoadMs = l.coldLoadMs;
      return this.#skewed(
        llamaReadyModel(entry, l, { scheduler, admission: this.#admission, now: this.#now }),
        scheduler,
      );
    }
    const o = await loadOrtModel(src, {
      interactive: this.#ortInteractive,
      bulk: this.#ortBulk,
      threadPolicy: this.#threadPolicy,
      maxBatchTokens: this.#maxBatchTokens,
    });
    entry.testModel ||= o.testModel;
    entry.coldLoadMs = o.coldLoadMs;
    this.#seedOrt(entry.modelId, this.#initialRunMs?.(entry.modelId, numericProfileId(o.profile)));
    return this.#skewed(
      ortReadyModel(entry, o, {
        interactiveScheduler: this.#ortInteractiveSched,
        bulkScheduler: this.#ortBulkSched,
        admission: this.#admission,
        quiet: () => this.otherEnginesBusy(),
        now: this.#now,
      }),
      this.#ortInteractiveSched,
      () => this.otherEnginesBusy(),
      this.#ortBulkSched,
    );
  }

  /**
   * True when the tests-only hook `skewQueryPath` wraps the model's query path (its certificate
   * is then keyed apart: lib/probe/certification.ts `runtimeConfigDigestOf`).
   */
  isQueryPathSkewed(modelId: string): boolean {
    return this.#skewQueryPath.has(modelId);
  }

  /**
   * The tests-only hook `skewBatchShapes` of the model, as `<minRows>:<epsilon>`, when it wraps
   * the model's batch path (its certificate is then keyed apart, as for `skewQueryPath`).
   */
  batchShapeSkew(modelId: string): string | undefined {
    const s = this.#skewBatchShapes.get(modelId);
    return s === undefined ? undefined : `${s.minRows}:${s.epsilon}`;
  }

  /**
   * The test hooks: `skewQueryPath` puts the model's interactive lane over a
   * {@link SkewedEngine}; `skewBatchShapes` its bulk lane over one nudging calls of many rows.
   */
  #skewed(
    ready: ReadyModel,
    scheduler: LaneScheduler,
    quiet?: () => boolean,
    bulkScheduler: LaneScheduler = scheduler,
  ): ReadyModel {
    const shapes = this.#skewBatchShapes.get(ready.modelId);
    if (shapes !== undefined) {
      // The engine's own property: its calls of many rows differ, on both runtimes.
      const { bulk, interactive } = ready;
      ready = {
        ...ready,
        bulk: new Lane({
          name: bulk.name,
          engine: new SkewedEngine(bulk.engine, shapes),
          cls: bulk.cls,
          scheduler: bulkScheduler,
          admission: this.#admission,
          now: this.#now,
        }),
        interactive: new Lane({
          name: interactive.name,
          engine: new SkewedEngine(interactive.engine, shapes),
          cls: interactive.cls,
          scheduler,
          admission: this.#admission,
          quiet,
          now: this.#now,
        }),
      };
    }
    if (!this.#skewQueryPath.has(ready.modelId)) return ready;
    const hot = ready.interactive;
    return {
      ...ready,
      interactive: new Lane({
        name: hot.name,
        engine: new SkewedEngine(hot.engine),
        cls: hot.cls,
        scheduler,
        admission: this.#admission,
        quiet,
        now: this.#now,
      }),
    };
  }

  /**
   * `ready` with its interactive lane as the entry's query path says: `disabled` → a lane over
   * the bulk runtime's engine and scheduler in the interactive class (the hot lane is kept for
   * {@link hotLane}); `enabled` → the hot lane back. A fresh load attempt gets a fresh swap.
   */
  #withQueryPath(entry: ModelEntry, ready: ReadyModel): ReadyModel {
    const swapped = this.#hotLanes.get(entry.modelId);
    const isSwapped = swapped !== undefined && ready.interactive === swapped.bulkPath;
    if ((entry.queryPath ?? "enabled") === "enabled") {
      this.#hotLanes.delete(entry.modelId);
      return isSwapped ? { ...ready, interactive: swapped.hot } : ready;
    }
    if (isSwapped) return ready;
    const scheduler = entry.engine === "ort"
      ? this.#ortBulkSched
      : this.#own.get(entry.modelId)?.scheduler;
    if (scheduler === undefined) return ready;
    const bulkPath = new Lane({
      name: ready.bulk.name,
      engine: ready.bulk.engine,
      cls: ready.interactive.cls,
      scheduler,
      admission: this.#admission,
      now: this.#now,
    });
    this.#hotLanes.set(entry.modelId, { hot: ready.interactive, bulkPath });
    return { ...ready, interactive: bulkPath };
  }

  #ensureNotDisposed(): void {
    if (this.#disposed) {
      throw new SynapseError("disposed", "Cannot use the model registry: it was disposed");
    }
  }
}

/**
 * The models of a task in the order a request that names none tries them: first those that are
 * not generated test models, then the test models, then those whose source says `notDefault`;
 * within each group in load order (`preload_models` order, then models restored from an earlier
 * run in the order they were loaded, then models loaded at run time in the order their loads
 * started). Whether a model is a test model is known when its load starts (the source's label or
 * its `config.json`), so the order never depends on which load finishes first.
 */
export function defaultCandidatesOf(
  list: readonly ModelEntry[],
  task: ModelTask,
): ModelEntry[] {
  const mine = list.filter((x) => x.task === task);
  const eligible = mine.filter((x) => !x.source.notDefault);
  return [
    ...eligible.filter((x) => !x.testModel),
    ...eligible.filter((x) => x.testModel),
    ...mine.filter((x) => x.source.notDefault),
  ];
}

/**
 * The model that serves a task when a request names none, as far as the registry knows: the
 * first of {@link defaultCandidatesOf} that has not failed; else the first. So a model pulled at
 * run time takes over from the test models. (lib/ops/_resolve_model.ts also passes over a model
 * the certification gate or a failed self-check refuses, when a later candidate can serve.)
 */
export function defaultModelOf(
  list: readonly ModelEntry[],
  task: ModelTask,
): ModelEntry | undefined {
  const candidates = defaultCandidatesOf(list, task);
  return candidates.find((x) => x.state !== "failed") ?? candidates[0];
}

function unknownModel(
  modelId: string | null,
  task: ModelTask | undefined,
  known?: string[],
): SynapseError {
  return new SynapseError(
    "unknown_model",
    modelId === null
      ? `Cannot serve ${task}: no ${task} model is loaded; load one with 'ck-synapse pull ID' (see 'ck-synapse models catalog${
        task === undefined ? "" : ` --task ${task}`
      }') or 'ck-synapse pull PATH|URL --sha256 H', or name one in preload_models`
      : `Cannot serve ${
        task ?? "requests"
      }: unknown model '${modelId}'; 'ck-synapse models list' (models.list, GET /v1/models) lists the loaded models, 'ck-synapse models catalog' the ones to pull`,
    { details: { model_id: modelId, ...(task ? { task } : {}), ...(known ? { known } : {}) } },
  );
}
