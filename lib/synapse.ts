/**
 * One Synapse instance: config, store, lanes, models, admission and the ops dispatcher. Every
 * front door (CLI in-process, HTTP, later the subc bus) holds one of these and calls
 * {@link Synapse.call}.
 *
 * @module
 */
import type { OrtBulkSession } from "./engines/ort/ort_threads.ts";
import { loadConfig } from "./config/loader.ts";
import type { SynapseConfig } from "./config/types.ts";
import { RemoteCanaryStore } from "./models/remote_canary_store.ts";
import { SynapseError } from "./contract/errors.ts";
import { ORT_ENGINE } from "./engines/ort/ort_thread.ts";
import {
  acquireLease,
  leaseFileName,
  recordServerAddress,
  removeServerAddress,
  SINGLETON_LEASE_NAME,
  singletonLeaseDir,
} from "./lease/lease.ts";
import type { FileLock } from "../ffi/flock.ts";
import { ModelRegistry } from "./models/model_registry.ts";
import { withRemoteAssurance } from "./models/load_remote.ts";
import { RemoteProvider } from "./engines/remote/provider.ts";
import type { ModelEntry, ModelSource, ReadyModel } from "./models/model.ts";
import type { CertRow } from "./probe/types.ts";
import type { RegistryTestHooks } from "./models/_test_hooks.ts";
import { defaultModelSources, sourceFromPreload } from "./models/sources.ts";
import { checkModelAliases } from "./models/model_aliases.ts";
import { dispatch, OPERATIONS } from "./ops/dispatcher.ts";
import { factsOptions, requestFacts } from "./ops/request_facts.ts";
import type { OpOutcome } from "./ops/dispatcher.ts";
import type { CallOptions, OpContext } from "./ops/context.ts";
import { type DoorBackend, doorBackend } from "./ops/door_backend.ts";
import { Admission } from "./sched/admission.ts";
import { JobStore } from "./store/job_store.ts";
import { CertificationStore } from "./probe/certification_store.ts";
import { AliasStore } from "./store/alias_store.ts";
import {
  knobAssignmentKey,
  readStartupKnobAssignments,
  readStartupSingleRowCalls,
  runtimeConfigDigestOf,
} from "./probe/certification.ts";
import { ModelCache, modelCacheRoot } from "./cache/model_cache.ts";
import { ModelLoads } from "./models/model_loads.ts";
import { CATALOG, type CatalogModel } from "./models/catalog.ts";
import { Store } from "./store/store.ts";
import { SelfChecks } from "./probe/self_check.ts";
import { SelfCheckStore } from "./probe/self_check_store.ts";
import { storePath } from "./paths.ts";
import { machineProfileHash, probeMachineProfile } from "./identity/machine_profile.ts";
import type { MachineProfile } from "./identity/machine_profile.ts";
import { envLookup, type EnvSource } from "./paths.ts";
import { LlamaEngine } from "./engines/llama/llama_engine.ts";
import { TokenizerPool } from "./tokenize/tokenizer_pool.ts";
import {
  checkLlamaWorkerPermitted,
  defaultWorkerRuntimeDir,
  resolveLlamaWorkerLaunch,
} from "./engines/llama/launch.ts";
import {
  type InvalidLogEnv,
  LogEnvError,
  type LogFields,
  type LogSink,
  readLogSettings,
  retarget,
  stderrLog,
} from "./log/log.ts";
import { createFleetLog, type FleetLog, type FleetLogOptions } from "./log/fleet_log.ts";
import { PerfSampler } from "./log/perf_sampler.ts";
import { type CallDoor, Metrics } from "./log/metrics.ts";
import { type CallScope, runInCallScope } from "./log/call_scope.ts";
import { markStage } from "./log/stage_marks.ts";
import { prepareRuntimeDir } from "./workers/runtime_dir.ts";
import { WorkerSlots } from "./workers/worker_slots.ts";

export { SYNAPSE_VERSION } from "./version.ts";

export { defaultModelSources, FIXTURE_MODELS_DIR, sourceFromPreload } from "./models/sources.ts";

/** Options of {@link createSynapse}. */
export interface SynapseOptions {
  /** A config to use as is; otherwise it is loaded from the layered files (docs/config.md). */
  config?: SynapseConfig;
  /** Environment for config and data-home resolution. @default Deno.env */
  env?: EnvSource;
  /** Working directory for the project config. @default Deno.cwd() */
  cwd?: string;
  /** SQLite store path. @default `<data_home>/cortexkit/synapse/store.db` */
  storePath?: string;
  /** Wait for preloaded models before resolving. @default true */
  waitForModels?: boolean;
  /** Wall clock in ms. @default Date.now */
  now?: () => number;
  /** The machine profile; probed at boot (docs/internals.md §5) when absent. */
  machineProfile?: MachineProfile;
  /**
   * Directory of the singleton lease. @default the store's directory when `storePath` is given,
   * else `$CORTEXKIT_LEASE_ROOT` or `<data_home>/cortexkit/leases`
   */
  leaseRoot?: string;
  /**
   * A singleton lease the caller already holds (`serve --subc` takes it before connecting to the
   * daemon, subc §4, and opens the store only after HELLO_ACK). The instance owns it from then
   * on: it is released at {@link Synapse.dispose}, or when `createSynapse` fails.
   * @default the lease is taken here, in {@link SynapseOptions.leaseRoot}'s directory
   */
  singletonLease?: FileLock;
  /** Module log. @default stderr, filtered by `CK_LOG` */
  log?: LogSink;
  /**
   * What a malformed `CK_LOG`, `CK_LOG_MAX_AGE_DAYS` or `CK_LOG_ALARM_SEGMENT_MB` does at boot:
   * `refuse` (`serve --http` and the CLI: `invalid_request`) or `warn` (under the subc bus,
   * docs/subc.md "Serving as the `synapse` module": the default value and one stderr warning,
   * from the log that reads them).
   *
   * @default {"refuse"}
   */
  invalidLogEnv?: InvalidLogEnv;
  /**
   * Extra arguments for every llama worker (tests: the hidden `--test-…` hooks of
   * `workers/llama.ts`). @default []
   */
  llamaWorkerArgs?: string[];
  /**
   * Extra arguments for every ffi worker (tests: `--test-shim-abort-after`, `--shim PATH`, the
   * hooks of `workers/_serve.ts`). @default []
   */
  ffiWorkerArgs?: string[];
  /** Accept and HELLO timeouts of workers, ms (tests shorten them). @default config `worker.start_timeout_ms` */
  workerHandshakeTimeoutMs?: number;
  /** Timeout of worker requests other than LOAD and GENERATE, ms. @default 30000 */
  workerRequestTimeoutMs?: number;
  /** GENERATE timeout, ms. @default 180000 */
  workerGenerateTimeoutMs?: number;
  /** First background-retry delay after a transient model load failure, ms (doubles). @default 1000 */
  loadRetryBaseMs?: number;
  /**
   * Where bulk ORT work runs (lib/engines/ort/ort_threads.ts): on the sessions queries use, or on
   * a bulk thread of its own (three sessions while a job meets queries; kept for bench:mixed and
   * bench:memory to compare). @default "shared"
   */
  ortBulkSession?: OrtBulkSession;
  /**
   * Root of the model cache. @default `$CORTEXKIT_MODEL_CACHE`, else `$SYNAPSE_MODEL_CACHE_DIR`,
   * else `<data_home>/cortexkit/models` (docs/internals.md §8.5)
   */
  modelCacheRoot?: string;
  /** The catalog served by `models.catalog` and `models.download` (tests). @default CATALOG */
  catalog?: readonly CatalogModel[];
  /** Idle-body timeout of downloads, ms (tests shorten it). @default 60000 */
  downloadIdleTimeoutMs?: number;
  /**
   * Ceiling of one catalog self-check, ms of engine work (lib/probe/self_check.ts). Tests only.
   * @default SELF_CHECK_CEILING_MS (2000)
   */
  selfCheckCeilingMs?: number;
  /**
   * Load models at all: the config's preloads (or the test models) and the models earlier boots
   * loaded at run time. `false` is a store-only instance — jobs, the cache and its pins, nothing
   * loaded and no engine or worker started — for CLI commands that only read or tidy the store
   * (`job status`, `job pages`, `cache gc`, `cache pin`), which otherwise waited for every
   * recorded model (F32: 6 s and 14–21 s after one GGUF pull). @default true
   */
  loadModels?: boolean;
  /**
   * **Test hooks** of the model registry (`RegistryTestHooks`: e.g. `skewQueryPath`, model ids
   * whose query path is made to differ from their batch path). For tests only: no config key,
   * environment variable or op reaches them. @default none
   */
  testHooks?: RegistryTestHooks;
}

/** The llama worker slots of this process (shared by every instance in it: one socket namespace). */
const LLAMA_WORKER_SLOTS = new WorkerSlots();

/**
 * The llama worker id of a slot, `llama-<slot>@<pid>`: the pid keeps two Synapse processes (or a
 * server and a test run) from sharing a socket path in the common runtime dir. The launcher grants
 * exactly these paths (slots 0–15 of its own pid, which `exec` keeps), because Deno's unix-socket
 * permission names exact paths; slots are taken lowest free first and given back when the engine
 * is disposed (lib/workers/worker_slots.ts), so loads and unloads never run past slot 15 while at
 * most 16 llama models are loaded at once.
 */
export function llamaWorkerId(slot: number): string {
  return `llama-${slot}@${Deno.pid}`;
}

/** Nice value of generation workers (interactive lanes run at 0, the bulk ORT lane at 10). */
export const DECODE_WORKER_NICE = 5;

/** Worker options of a {@link Synapse} (from {@link SynapseOptions}). */
export interface SynapseWorkerOptions {
  log?: LogSink | undefined;
  llamaWorkerArgs?: string[] | undefined;
  ffiWorkerArgs?: string[] | undefined;
  workerHandshakeTimeoutMs?: number | undefined;
  workerRequestTimeoutMs?: number | undefined;
  workerGenerateTimeoutMs?: number | undefined;
  loadRetryBaseMs?: number | undefined;
  ortBulkSession?: OrtBulkSession | undefined;
  /** Model cache root, catalog and download idle timeout ({@link SynapseOptions}). */
  modelCacheRoot?: string | undefined;
  env?: EnvSource | undefined;
  catalog?: readonly CatalogModel[] | undefined;
  downloadIdleTimeoutMs?: number | undefined;
  /** {@link SynapseOptions.selfCheckCeilingMs}. */
  selfCheckCeilingMs?: number | undefined;
  /** {@link SynapseOptions.loadModels}. */
  loadModels?: boolean | undefined;
  /** {@link SynapseOptions.testHooks}. */
  testHooks?: RegistryTestHooks | undefined;
}

/** A running Synapse instance. */
export class Synapse implements AsyncDisposable {
  readonly config: SynapseConfig;
  readonly store: Store;
  /** The content-addressed model cache (docs/internals.md §8.5). */
  readonly cache: ModelCache;
  /** Run-time loads and catalog downloads. */
  readonly loads: ModelLoads;
  /** Models and the lanes they run on (the registry owns and disposes every engine). */
  readonly registry: ModelRegistry;
  /** The configured remote providers by id (config `remote_providers`; docs/remote.md). */
  readonly remoteProviders: ReadonlyMap<string, RemoteProvider>;
  readonly admission: Admission;
  readonly context: OpContext;
  /** Durable jobs (docs/internals.md §8.2). */
  readonly jobStore: JobStore;
  /** Tokenizer worker threads (config `tokenize`): operations tokenize here, off the event loop. */
  readonly tokenizers: TokenizerPool;
  /** Jobs of earlier generations failed with `module_restarted` at this boot. */
  readonly inheritedJobs: number;
  /** Resolves when every preloaded model is ready or failed (background retries aside). */
  readonly modelsSettled: Promise<ModelEntry[]>;
  /** The machine this instance runs on (docs/internals.md §5). */
  readonly machineProfile: MachineProfile;
  /**
   * Counters and histograms of this instance (`GET /metrics`): calls by op, door and outcome,
   * their durations by op, class and lane, tokens, model loads, worker crashes and restarts.
   * They live as long as the instance, so they never go down between scrapes.
   */
  readonly metrics: Metrics = new Metrics();
  /** `sha256` of the machine profile; keys certification rows. */
  readonly machineProfileHash: string;
  /** Certification, performance and knob-assignment rows (docs/internals.md §12). */
  readonly certifications: CertificationStore;
  /** The alias table and its epoch (lib/store/alias_store.ts). */
  readonly aliases: AliasStore;
  #sweeper: ReturnType<typeof setInterval> | undefined;
  #perf: PerfSampler | undefined;
  #log: LogSink;
  #leases: FileLock[];
  #disposed = false;

  /** @internal Use {@link createSynapse}. */
  constructor(
    config: SynapseConfig,
    store: Store,
    sources: ModelSource[],
    now: () => number,
    machine: MachineProfile,
    leases: FileLock[] = [],
    workerOptions: SynapseWorkerOptions = {},
  ) {
    this.#leases = leases;
    this.config = config;
    this.machineProfile = machine;
    this.machineProfileHash = machineProfileHash(machine);
    this.store = store;
    const log = workerOptions.log ?? stderrLog;
    this.#log = log;
    this.admission = new Admission({
      byteBudget: config.inline.byte_budget,
      maxQueueMs: config.inline.max_queue_ms,
      estimatedExecutionMs: config.inline.estimated_execution_ms,
      maxConcurrentWorkers: config.inline.max_concurrent_workers,
    }, { now });
    this.jobStore = new JobStore(store, { clock: now });
    this.certifications = new CertificationStore(store);
    this.aliases = new AliasStore(store);
    // Knob assignments apply from startup: a row the probe writes later applies after a restart.
    const knobs = readStartupKnobAssignments(this.certifications, this.machineProfileHash);
    const singleRowCalls = readStartupSingleRowCalls(this.certifications, this.machineProfileHash);
    /** The lane's row with the current keys, else its newest (for what a probe found). */
    const recordedRow = (ready: ReadyModel): CertRow | undefined => {
      const rows = this.certifications.rowsForLane(
        this.loads?.spec(ready.modelId)?.lane_id ?? ready.modelId,
      );
      const digest = runtimeConfigDigestOf({ config, registry: this.registry }, ready);
      return rows.find((r) =>
        r.machine_profile_hash === this.machineProfileHash &&
        r.numeric_profile_id === ready.numericProfileId && r.runtime_config_digest === digest
      ) ?? rows[0];
    };
    // Jobs of an earlier generation that were queued or running died with that process.
    this.inheritedJobs = this.jobStore.inheritEarlierGenerations(store.moduleGeneration);
    const running = new Map<string, Promise<void>>();
    this.tokenizers = new TokenizerPool({
      ...(config.tokenize.workers > 0 ? { size: config.tokenize.workers } : {}),
      inlineMaxChars: config.tokenize.inline_max_chars,
    });
    this.remoteProviders = new Map(
      config.remote_providers.map((p) => [p.id, new RemoteProvider(p, now)]),
    );
    this.registry = new ModelRegistry({
      admission: this.admission,
      remoteProviders: this.remoteProviders,
      remoteCanaries: new RemoteCanaryStore(store),
      threadPolicy: config.knob,
      maxBatchTokens: config.inline.max_tokens,
      interactivePermits: config.inline.max_concurrent_workers,
      estimatedExecutionMs: config.inline.estimated_execution_ms,
      // A job between quanta (tokenizing its next slice) still shares the cores.
      externalBusy: () => running.size > 0,
      ...(workerOptions.loadRetryBaseMs === undefined
        ? {}
        : { loadRetryBaseMs: workerOptions.loadRetryBaseMs }),
      ...(workerOptions.ortBulkSession === undefined
        ? {}
        : { ortBulkSession: workerOptions.ortBulkSession }),
      log,
      now,
      onLoadAttempt: (_model, outcome) => this.metrics.modelLoad(outcome),
      ...(workerOptions.testHooks === undefined ? {} : { testHooks: workerOptions.testHooks }),
      initialRunMs: (_model, npid) => {
        const batchMs = knobs.get(knobAssignmentKey(npid, config.knob))?.estimated_execution_ms;
        const singleRowMs = singleRowCalls.get(knobAssignmentKey(npid, config.knob));
        return batchMs === undefined && singleRowMs === undefined ? undefined : {
          ...(batchMs === undefined ? {} : { batchMs }),
          ...(singleRowMs === undefined ? {} : { singleRowMs }),
        };
      },
      // The probe's query-path finding holds across restarts: the lane's row with the current
      // keys, else its newest (a stale row's "the query path forks" is still the best knowledge).
      recordedQueryPath: (ready) => recordedRow(ready)?.evidence.query_path,
      // The shape cap likewise: what the probe found about the lane's shapes.
      recordedShapeCap: (ready) => recordedRow(ready)?.evidence.shape_cap,
      // A remote lane with a passing certificate of its proven identity on this machine serves as
      // proven (docs/remote.md "Identity").
      remoteAssurance: (ready) => {
        const proven = withRemoteAssurance(ready, "proven");
        const digest = runtimeConfigDigestOf({ config, registry: this.registry }, proven);
        const row = this.certifications.row(
          this.machineProfileHash,
          proven.numericProfileId,
          digest,
        );
        return row?.status === "certified" ? "proven" : "declared";
      },
      llama: (spec, source) => {
        const workerSlot = LLAMA_WORKER_SLOTS.take();
        try {
          return new LlamaEngine(spec, {
            launch: resolveLlamaWorkerLaunch({
              ...(source.workerBin === undefined ? {} : { workerBin: source.workerBin }),
              kind: spec.lane ?? "llama",
              // Generation runs below the interactive lanes (decode class; nice 5, between the
              // interactive lane's 0 and the bulk lane's 10).
              extraArgs: [
                ...(spec.mode === "generate" ? ["--nice", String(DECODE_WORKER_NICE)] : []),
                ...((spec.lane === "ffi"
                  ? workerOptions.ffiWorkerArgs
                  : workerOptions.llamaWorkerArgs) ?? []),
              ],
            }),
            runtimeDir: source.workerRuntimeDir ?? defaultWorkerRuntimeDir(),
            workerId: llamaWorkerId(workerSlot.slot),
            // Given back once the engine is disposed (unload, failed load, stop).
            workerSlot,
            loadTimeoutMs: config.worker.load_timeout_ms,
            cancelGraceMs: config.worker.cancel_grace_ms,
            // A worker may take long to start on a busy machine (F20): worker.start_timeout_ms.
            acceptTimeoutMs: workerOptions.workerHandshakeTimeoutMs ??
              config.worker.start_timeout_ms,
            helloTimeoutMs: workerOptions.workerHandshakeTimeoutMs ??
              config.worker.start_timeout_ms,
            ...(workerOptions.workerRequestTimeoutMs === undefined
              ? {}
              : { requestTimeoutMs: workerOptions.workerRequestTimeoutMs }),
            ...(workerOptions.workerGenerateTimeoutMs === undefined
              ? {}
              : { generateTimeoutMs: workerOptions.workerGenerateTimeoutMs }),
            // The worker's own lines and its crashes, whatever target the engine uses.
            log: retarget(log, "synapse.worker", {
              engine: spec.lane ?? "llama",
              model: spec.modelId,
            }),
            forwardLinesPerSec: config.log.worker_forward_lines_per_sec,
            onWorkerEvent: (kind, status) =>
              this.metrics.workerEvent(spec.modelId, kind, status.generation),
          });
        } catch (err) {
          workerSlot.release();
          throw err;
        }
      },
    });
    this.cache = new ModelCache({
      root: workerOptions.modelCacheRoot ?? modelCacheRoot(workerOptions.env),
      maxBytes: config.cache_max_bytes,
      moduleId: "synapse",
      log,
      ...(workerOptions.downloadIdleTimeoutMs === undefined
        ? {}
        : { idleTimeoutMs: workerOptions.downloadIdleTimeoutMs }),
    });
    this.loads = new ModelLoads({
      cache: this.cache,
      registry: this.registry,
      store,
      moduleId: "synapse",
      ...(config.hf_endpoint === undefined ? {} : { hfEndpoint: config.hf_endpoint }),
      ...(workerOptions.catalog === undefined ? {} : { catalog: workerOptions.catalog }),
      // The catalog self-check of each catalog model loaded (docs/internals.md §10), keyed by this
      // machine's OS build, its rows in the store.
      selfCheck: new SelfChecks({
        store: new SelfCheckStore(store),
        osBuild: machine.os_build,
        registry: this.registry,
        ...(workerOptions.selfCheckCeilingMs === undefined
          ? {}
          : { ceilingMs: workerOptions.selfCheckCeilingMs }),
        now,
        log,
      }),
      now,
      log,
    });
    this.context = {
      config,
      registry: this.registry,
      loads: this.loads,
      admission: this.admission,
      jobs: { store: this.jobStore, running, paused: new Map() },
      moduleGeneration: store.moduleGeneration,
      tableEpoch: () => this.aliases.tableEpoch(),
      aliases: this.aliases,
      equivalentTo: (fp) => this.aliases.equivalentsOf(fp, now()).map((e) => e.fingerprint),
      now,
      machineProfileHash: this.machineProfileHash,
      machineProfile: machine,
      certifications: this.certifications,
      startupKnobAssignments: knobs,
      log,
      tokenizers: this.tokenizers,
    };
    const preloads = sources.map((s) => this.registry.load(s));
    // Models loaded at run time by an earlier boot (model.load, models.download), except ids the
    // config serves: loaded again from the cache.
    const restored = workerOptions.loadModels === false ? [] : this.loads.restore();
    this.modelsSettled = Promise.all([...preloads, ...restored]).then((ms) => {
      for (const m of ms) {
        if (this.loads.spec(m.modelId) !== undefined) continue;
        if (m.ready) {
          // The pool's workers load the tokenizer now, not on the first big request.
          void this.tokenizers.warm(m.ready.tokenizer).catch(() => {});
          try {
            store.upsertModel({
              model_id: m.modelId,
              engine: m.engine,
              task: m.task,
              fingerprint: m.ready.fingerprint,
              config_json: JSON.stringify({ source: m.source, profile: m.ready.profile }),
            });
          } catch { /* the store is advisory for models; serving goes on */ }
        }
      }
      return ms;
    });
  }

  /**
   * Deletes jobs and pages past their retention (and fails jobs past their execution TTL) now
   * and then every `intervalMs`. Called by `serve`; an embedded instance sweeps only when asked.
   */
  startSweeper(intervalMs = 60_000): void {
    if (this.#sweeper !== undefined || this.#disposed) return;
    const sweep = (): void => {
      try {
        this.jobStore.sweepExpired();
      } catch { /* the next sweep retries */ }
    };
    sweep();
    const timer = setInterval(sweep, intervalMs);
    Deno.unrefTimer(timer as unknown as number);
    this.#sweeper = timer;
  }

  /**
   * Starts the perf sampler when config `log.perf_interval_secs` is above 0: one `synapse.perf`
   * line every that many seconds with RSS, heap, event-loop lag and {@link perfFacts}. Called by
   * `serve`; an embedded instance samples only when asked. Idempotent; stopped by dispose.
   */
  startPerfSampler(): void {
    if (this.#perf !== undefined || this.#disposed) return;
    this.#perf = new PerfSampler({
      intervalSecs: this.config.log.perf_interval_secs,
      log: this.#log,
      facts: () => this.perfFacts(),
    });
    this.#perf.start();
  }

  /**
   * The lane facts of a perf line: `queued` (tasks waiting on every lane), `in_flight` (running),
   * `lanes` (`<lane>:<queued>/<in flight>` per lane, comma-separated), `admission_bytes` (request
   * bytes admitted and not released), `jobs_running`.
   */
  perfFacts(): LogFields {
    let queued = 0;
    let inFlight = 0;
    const lanes: string[] = [];
    for (const row of this.registry.laneStatus()) {
      queued += row.waiters;
      inFlight += row.in_flight;
      lanes.push(`${row.lane}:${row.waiters}/${row.in_flight}`);
    }
    return {
      queued,
      in_flight: inFlight,
      lanes: lanes.join(","),
      admission_bytes: this.admission.bytesInFlight,
      jobs_running: this.context.jobs.running.size,
    };
  }

  /** Module generation of this boot. */
  get moduleGeneration(): number {
    return this.store.moduleGeneration;
  }

  /**
   * Calls an operation. Every door (HTTP, the bus, the in-process CLI) calls through here, so
   * this is where each call is counted and timed for {@link metrics}: by op, door
   * (`options.door`) and outcome, with the lane and class that served it, its queue wait and its
   * tokens. The outcome is what happened (lib/ops/request_facts.ts): a result a door answers all
   * or nothing (`embed.allOrNothing`) with a refused item counts as that item's code with no
   * tokens; a call whose caller went away (`options.signal` aborted) counts as `cancelled`.
   *
   * @param method Contract method, e.g. `"embed.query"`.
   * @param params Its params.
   * @returns The outcome in its wire shape (never throws).
   */
  async call(method: string, params: unknown, options: CallOptions = {}): Promise<OpOutcome> {
    const started = performance.now();
    const scope: CallScope = {};
    let outcome: OpOutcome;
    if (this.#disposed) {
      const e = new SynapseError(
        "module_not_initialized",
        "Cannot call: this Synapse instance was disposed",
      );
      outcome = { kind: "channel", body: e.toChannel(), error: e };
    } else {
      outcome = await runInCallScope(
        scope,
        () => dispatch(this.context, method, params, options),
      );
    }
    markStage("dispatch");
    this.#recordCall(method, params, options, outcome, started, scope);
    markStage("metrics");
    return outcome;
  }

  #recordCall(
    method: string,
    params: unknown,
    options: CallOptions,
    outcome: OpOutcome,
    started: number,
    scope: CallScope,
  ): void {
    try {
      const facts = requestFacts(params, outcome, factsOptions(options));
      // Labels stay bounded: a method the dispatcher does not serve is `unknown`, a model id
      // only when it is loaded (a caller may send any string).
      const op = Object.hasOwn(OPERATIONS, method) ? method : "unknown";
      const model = facts.model !== undefined &&
          this.registry.list().some((m) => m.modelId === facts.model)
        ? facts.model
        : undefined;
      this.metrics.recordCall({
        op,
        door: options.door ?? "embedded",
        outcome: facts.outcome,
        seconds: (performance.now() - started) / 1000,
        lane: scope.lane,
        cls: scope.cls,
        queueSeconds: facts.queue_ms === undefined ? undefined : facts.queue_ms / 1000,
        tokens: facts.tokens,
        model,
      });
      // The door's request log takes the same facts: worked out once per call.
      options.onFacts?.(facts);
    } catch (err) {
      this.#log("error", "synapse.ops", "recording a call's metrics failed. This is a bug", {
        message: (err as Error)?.message ?? String(err),
      });
    }
  }

  /**
   * This instance as one door sees it (lib/ops/door_backend.ts): its calls, counted under `name`
   * and answered with their request facts, the service status, and the few facts a door's answers
   * need. A door makes it once, when the instance is attached to it.
   *
   * @param name The door (`http`, `bus`): the `door` label of `synapse_requests_total`.
   * @returns The door's backend; it reads this instance live and holds nothing of its own.
   */
  door(name: CallDoor): DoorBackend {
    return doorBackend(this, name);
  }

  /** True after {@link dispose}. */
  get disposed(): boolean {
    return this.#disposed;
  }

  /**
   * Records the HTTP address this instance serves beside its singleton lease (mode 0600), so
   * CLI commands in the same data home talk to it instead of failing on the lease; the record
   * goes at {@link dispose}. `ck-synapse serve` calls it once bound.
   *
   * @param url The HTTP base URL, e.g. `http://127.0.0.1:8080` (or `unix:PATH`).
   * @param keyFile The owner key file its HTTP door checks, for the CLI (`key_file`).
   * @throws {Error} when the record cannot be written (file-system errors).
   */
  async recordServerAddress(url: string, keyFile?: string): Promise<void> {
    const lease = this.#leases[0];
    if (lease === undefined || this.#disposed) return;
    await recordServerAddress(lease, url, keyFile);
  }

  /**
   * Removes the address record of {@link recordServerAddress} (if this process wrote it), so CLI
   * commands stop coming here; `serve` calls it when it starts shutting down, and
   * {@link dispose} does. Never throws; idempotent.
   */
  removeServerAddress(): void {
    if (this.#leases[0] !== undefined) removeServerAddress(this.#leases[0]);
  }

  /** Stops the lanes and workers (through the registry), closes the store, frees the leases. Idempotent. */
  async dispose(): Promise<void> {
    if (this.#disposed) return;
    this.#disposed = true;
    // First of all: CLI commands must stop being sent here.
    this.removeServerAddress();
    if (this.#sweeper !== undefined) clearInterval(this.#sweeper);
    this.#perf?.dispose();
    this.metrics.dispose();
    // A job paused for re-authentication stays so in the store; the next boot fails it
    // module_restarted (its inputs end with this process).
    for (const paused of this.context.jobs.paused.values()) {
      paused.abandon(new SynapseError("disposed", "Job paused when the instance stopped"));
    }
    try {
      await this.registry.dispose();
      for (const p of this.remoteProviders.values()) p.close();
      await this.tokenizers.dispose();
    } finally {
      this.store.dispose();
      for (const l of this.#leases) l.release();
    }
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.dispose();
  }
}

/**
 * The boot refusal of a malformed `CK_LOG*` variable: `invalid_request` (a channel error) with
 * `details.field` naming the variable.
 *
 * @param err What reading the settings threw; anything but a {@link LogEnvError} is returned as
 *   it is.
 */
function logEnvRefusal(err: unknown): unknown {
  if (!(err instanceof LogEnvError)) return err;
  return new SynapseError("invalid_request", err.message, {
    channel: true,
    cause: err,
    details: {
      field: err.variable,
      reason: err.variable === "CK_LOG" ? "invalid_log_filter" : "invalid_log_setting",
    },
  });
}

/**
 * The log of a serving process (lib/log/fleet_log.ts): r2 lines to
 * `<data_home>/cortexkit/synapse/logs/synapse.<YYYY-MM-DD>.log` and to stderr, filtered by
 * `CK_LOG`. The file opens at the first line or `open()`. Dispose it after the instance.
 *
 * @param options Environment, directory, sinks, clock; `onInvalid` as
 *   {@link SynapseOptions.invalidLogEnv}.
 * @returns The log; pass `log.log` as {@link SynapseOptions.log}.
 * @throws {SynapseError} `invalid_request` (`details.field`: the variable) for a malformed
 *   `CK_LOG`, `CK_LOG_MAX_AGE_DAYS` or `CK_LOG_ALARM_SEGMENT_MB`, unless `onInvalid` is `"warn"`.
 */
export function createModuleLog(options: FleetLogOptions = {}): FleetLog {
  try {
    return createFleetLog(options);
  } catch (err) {
    throw logEnvRefusal(err);
  }
}

/**
 * Starts a Synapse instance: loads config, opens the store (bumping `module_generation`), and
 * loads the preloaded models (or the two test models when none is configured).
 *
 * @throws {SynapseError} `invalid_request` for a bad config (naming key and file; a
 *   `model_aliases` name that is a model id, or whose target is no configured or catalog model,
 *   naming `model_aliases.<name>`: lib/models/model_aliases.ts) or an invalid
 *   `CK_LOG`, `CK_LOG_MAX_AGE_DAYS` or `CK_LOG_ALARM_SEGMENT_MB` (naming it),
 * `module_not_initialized` when a machine-profile probe fails (docs/internals.md §5: no
 * placeholders), `store_failure` when the store cannot open.
 */
export async function createSynapse(options: SynapseOptions = {}): Promise<Synapse> {
  try {
    return await openSynapse(options);
  } catch (err) {
    // A lease handed in is this instance's: a failed start frees it too.
    options.singletonLease?.release();
    throw err;
  }
}

async function openSynapse(options: SynapseOptions): Promise<Synapse> {
  // An invalid CK_LOG* is refused before anything starts, not silently read as the default
  // (under the bus, `invalidLogEnv: "warn"`: the log that reads them warns).
  if ((options.invalidLogEnv ?? "refuse") === "refuse") {
    try {
      readLogSettings({ get: envLookup(options.env) });
    } catch (err) {
      throw logEnvRefusal(err);
    }
  }
  const cwd = options.cwd ?? Deno.cwd();
  let machine = options.machineProfile;
  if (machine === undefined) {
    try {
      machine = await probeMachineProfile({
        ...(options.env === undefined ? {} : { env: options.env }),
        engineIdentities: [ORT_ENGINE],
      });
    } catch (err) {
      throw new SynapseError(
        "module_not_initialized",
        `Cannot start: machine profile probe failed: ${(err as Error).message}`,
        { cause: err },
      );
    }
  }
  const config = options.config ??
    (await loadConfig({ ...(options.env === undefined ? {} : { env: options.env }), cwd })).config;
  const sources = options.loadModels === false
    ? []
    : config.preload_models.length > 0
    ? config.preload_models.map(sourceFromPreload)
    : defaultModelSources();
  // A remote model names a configured provider (the providers come from the user file).
  const providerIds = new Set(config.remote_providers.map((p) => p.id));
  for (const source of sources) {
    if (source.remote !== undefined && !providerIds.has(source.remote.provider)) {
      throw new SynapseError(
        "invalid_request",
        `Cannot start: model '${source.modelId}' names remote provider '${source.remote.provider}', which remote_providers does not list (${
          providerIds.size === 0 ? "none configured" : [...providerIds].join(", ")
        }); providers come from the user config file`,
        { details: { field: "preload_models.provider", provider: source.remote.provider } },
      );
    }
  }
  // Config model_aliases name served models only, and never shadow one (lib/models/model_aliases.ts).
  if (Object.keys(config.model_aliases).length > 0) {
    const configured = options.loadModels === false
      ? (config.preload_models.length > 0
        ? config.preload_models.map(sourceFromPreload)
        : defaultModelSources())
      : sources;
    checkModelAliases(config.model_aliases, {
      configured: configured.map((s) => s.modelId),
      catalog: (options.catalog ?? CATALOG).map((m) => m.id),
    });
  }
  // Before any lease or store, each llama model's worker plan: a runtime dir another user could
  // reach, or a socket or program this process may not use, refuses boot (docs/internals.md §7
  // "Process and handshake"). The n-th llama model is checked against slot n: slots are taken
  // lowest free first, so the preloads use slots 0…n−1.
  let llamaSlot = 0;
  for (const source of sources) {
    if (source.engine !== "llama") continue;
    const runtimeDir = source.workerRuntimeDir ?? defaultWorkerRuntimeDir();
    const plan = {
      modelId: source.modelId,
      workerId: llamaWorkerId(llamaSlot++),
      runtimeDir,
      launch: resolveLlamaWorkerLaunch({
        ...(source.workerBin === undefined ? {} : { workerBin: source.workerBin }),
        kind: source.llamaLane ?? "llama",
      }),
      runtimeDirFromEntry: source.workerRuntimeDir !== undefined,
      workerBinFromEntry: source.workerBin !== undefined,
      kind: source.llamaLane ?? "llama",
    };
    prepareRuntimeDir(runtimeDir);
    checkLlamaWorkerPermitted(plan);
  }
  const path = options.storePath ?? storePath(options.env);
  const storeDir = path.slice(0, Math.max(0, path.lastIndexOf("/"))) || ".";
  // A second instance refuses to start (docs/internals.md §8.3): the singleton lease, then the
  // store's own lease in its directory, taken before the store opens.
  const leases: FileLock[] = options.singletonLease === undefined ? [] : [options.singletonLease];
  try {
    if (options.singletonLease === undefined) {
      leases.push(
        await acquireLease(singletonLeaseDir(options), SINGLETON_LEASE_NAME, "singleton"),
      );
    }
    leases.push(
      await acquireLease(storeDir, leaseFileName("synapse", "sqlite", "default"), "store"),
    );
  } catch (err) {
    for (const l of leases) l.release();
    throw err;
  }
  let store: Store;
  try {
    store = Store.open(path);
  } catch (err) {
    for (const l of leases) l.release();
    throw err;
  }
  let syn: Synapse;
  try {
    syn = new Synapse(config, store, sources, options.now ?? Date.now, machine, leases, {
      log: options.log,
      llamaWorkerArgs: options.llamaWorkerArgs,
      ffiWorkerArgs: options.ffiWorkerArgs,
      workerHandshakeTimeoutMs: options.workerHandshakeTimeoutMs,
      workerRequestTimeoutMs: options.workerRequestTimeoutMs,
      workerGenerateTimeoutMs: options.workerGenerateTimeoutMs,
      loadRetryBaseMs: options.loadRetryBaseMs,
      ortBulkSession: options.ortBulkSession,
      modelCacheRoot: options.modelCacheRoot,
      env: options.env,
      catalog: options.catalog,
      downloadIdleTimeoutMs: options.downloadIdleTimeoutMs,
      loadModels: options.loadModels,
      selfCheckCeilingMs: options.selfCheckCeilingMs,
      testHooks: options.testHooks,
    });
  } catch (err) {
    // Nothing may leak from a failed start: the store and both leases go with it.
    store.dispose();
    for (const l of leases) l.release();
    throw err;
  }
  if (options.waitForModels ?? true) await syn.modelsSettled;
  return syn;
}
