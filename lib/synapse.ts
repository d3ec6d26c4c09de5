/**
 * One Synapse instance: config, store, lanes, models, admission and the ops dispatcher. Every
 * front door (CLI in-process, HTTP, later the subc bus) holds one of these and calls
 * {@link Synapse.call}.
 *
 * @module
 */
import { fileURLToPath } from "node:url";
import { loadConfig } from "./config/config.ts";
import type { SynapseConfig } from "./config/config.ts";
import { SynapseError } from "./contract/errors.ts";
import { ORT_ENGINE, OrtLane } from "./engines/ort/ort_lane.ts";
import { acquireLease, leaseFileName, leaseRoot } from "./lease/lease.ts";
import type { FileLock } from "../ffi/flock.ts";
import { ModelRegistry, threadsForKnob } from "./models/model_registry.ts";
import type { LoadedModel, ModelSource, ModelTask } from "./models/model_registry.ts";
import type { Pooling } from "./engines/ort/pooling.ts";
import { dispatch } from "./ops/dispatcher.ts";
import type { OpOutcome } from "./ops/dispatcher.ts";
import type { CallOptions, OpContext } from "./ops/context.ts";
import { Admission } from "./sched/admission.ts";
import { LaneScheduler } from "./sched/lane_scheduler.ts";
import { JobStore } from "./store/job_store.ts";
import { Store } from "./store/store.ts";
import { storePath } from "./paths.ts";
import { machineProfileHash, probeMachineProfile } from "./identity/machine_profile.ts";
import type { MachineProfile } from "./identity/machine_profile.ts";
import type { EnvSource } from "./paths.ts";
import { LlamaLane } from "./engines/llama/llama_lane.ts";
import { defaultWorkerRuntimeDir, resolveLlamaWorkerLaunch } from "./engines/llama/launch.ts";
import { type LogSink, stderrLog } from "./log/log.ts";

/** Version of this build, printed by `ck-synapse version`. */
export const SYNAPSE_VERSION = "0.1.0";

/** Directory of the generated test models (scripts/gen_models.ts). */
export const FIXTURE_MODELS_DIR: string = fileURLToPath(
  new URL("../fixtures/models", import.meta.url),
);

/** Options of {@link createSynapse}. */
export interface SynapseOptions {
  /** A config to use as is; otherwise it is loaded from the layered files (contract.md §9). */
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
  /** The machine profile; probed at boot (contract.md §5) when absent. */
  machineProfile?: MachineProfile;
  /**
   * Directory of the singleton lease. @default the store's directory when `storePath` is given,
   * else `$CORTEXKIT_LEASE_ROOT` or `<data_home>/cortexkit/leases`
   */
  leaseRoot?: string;
  /** Module log. @default stderr, filtered by `CK_LOG` */
  log?: LogSink;
  /**
   * Extra arguments for every llama worker (tests: the hidden `--test-…` hooks of
   * `workers/llama.ts`). @default []
   */
  llamaWorkerArgs?: string[];
  /** Accept and HELLO timeouts of workers, ms (tests shorten them). @default 5000 */
  workerHandshakeTimeoutMs?: number;
  /** Timeout of worker requests other than LOAD and GENERATE, ms. @default 30000 */
  workerRequestTimeoutMs?: number;
  /** GENERATE timeout, ms. @default 180000 */
  workerGenerateTimeoutMs?: number;
}

/**
 * The models served when none is configured: the two generated test models, labelled as such.
 */
export function defaultModelSources(dir: string = FIXTURE_MODELS_DIR): ModelSource[] {
  return [
    {
      modelId: "synapse-tiny-embed",
      task: "embed",
      modelPath: `${dir}/synapse-tiny-embed/model.onnx`,
      tokenizerPath: `${dir}/synapse-tiny-embed/tokenizer.json`,
      configPath: `${dir}/synapse-tiny-embed/config.json`,
      pooling: "mean",
      normalize: true,
      testModel: true,
    },
    {
      modelId: "synapse-tiny-rerank",
      task: "rerank",
      modelPath: `${dir}/synapse-tiny-rerank/model.onnx`,
      tokenizerPath: `${dir}/synapse-tiny-rerank/tokenizer.json`,
      configPath: `${dir}/synapse-tiny-rerank/config.json`,
      pooling: "cls",
      normalize: false,
      testModel: true,
    },
  ];
}

/**
 * Turns a `preload_models[]` entry into a model source. `model_path` may name model.onnx or
 * the model directory (model.onnx, tokenizer.json, config.json inside).
 *
 * @throws {SynapseError} `invalid_request` for an engine this build does not serve.
 */
export function sourceFromPreload(entry: SynapseConfig["preload_models"][number]): ModelSource {
  if (entry.engine === "llama") return llamaSourceFromPreload(entry);
  if (entry.engine !== "ort") {
    throw new SynapseError(
      "invalid_request",
      `Cannot preload '${
        entry.model_id ?? entry.model_path
      }': engine '${entry.engine}' is not available in this build (ort and llama)`,
      {
        details: { field: "preload_models.engine", engine: entry.engine },
      },
    );
  }
  if (entry.task === "generate") {
    throw new SynapseError(
      "invalid_request",
      `Cannot preload '${
        entry.model_id ?? entry.model_path
      }': task 'generate' needs engine 'llama'`,
      { details: { field: "preload_models.task", engine: entry.engine, task: entry.task } },
    );
  }
  let modelPath = entry.model_path;
  let dir: string;
  let isDir = !modelPath.endsWith(".onnx");
  try {
    isDir = Deno.statSync(modelPath).isDirectory;
  } catch { /* missing: the load reports it, naming the file */ }
  if (!isDir) {
    dir = modelPath.slice(0, Math.max(0, modelPath.lastIndexOf("/"))) || ".";
  } else {
    dir = modelPath.replace(/\/+$/, "");
    modelPath = `${dir}/model.onnx`;
  }
  const name = dir.split("/").filter(Boolean).pop() ?? "model";
  const task: ModelTask = entry.task === "rerank" ? "rerank" : "embed";
  const source: ModelSource = {
    modelId: entry.model_id ?? name,
    task,
    modelPath,
    tokenizerPath: entry.tokenizer_path ?? `${dir}/tokenizer.json`,
    configPath: entry.config_path ?? `${dir}/config.json`,
    // config.json beside the model is optional unless named explicitly.
    configOptional: entry.config_path === undefined,
    pooling: (entry.pooling ?? "mean") as Pooling,
    normalize: entry.normalize ?? true,
  };
  if (entry.max_tokens !== undefined) source.maxTokens = entry.max_tokens;
  return source;
}

/**
 * A `preload_models[]` entry with `engine: "llama"`: `model_path` names the `.gguf` file or a
 * directory holding `model.gguf`; `tokenizer_path` defaults to `tokenizer.json` beside it.
 */
function llamaSourceFromPreload(entry: SynapseConfig["preload_models"][number]): ModelSource {
  let modelPath = entry.model_path;
  let isDir = !modelPath.endsWith(".gguf");
  try {
    isDir = Deno.statSync(modelPath).isDirectory;
  } catch { /* missing: the load reports it, naming the file */ }
  const dir = isDir
    ? modelPath.replace(/\/+$/, "")
    : modelPath.slice(0, Math.max(0, modelPath.lastIndexOf("/"))) || ".";
  if (isDir) modelPath = `${dir}/model.gguf`;
  const name = dir.split("/").filter(Boolean).pop() ?? "model";
  if (entry.task === "rerank") {
    throw new SynapseError(
      "invalid_request",
      `Cannot preload '${
        entry.model_id ?? name
      }': engine 'llama' serves embed and generate, not rerank`,
      { details: { field: "preload_models.task", engine: "llama", task: entry.task } },
    );
  }
  const source: ModelSource = {
    modelId: entry.model_id ?? name,
    task: entry.task === "generate" ? "generate" : "embed",
    engine: "llama",
    modelPath,
    tokenizerPath: entry.tokenizer_path ?? `${dir}/tokenizer.json`,
    pooling: (entry.pooling ?? "mean") as Pooling,
    normalize: entry.normalize ?? true,
  };
  if (entry.max_tokens !== undefined) source.maxTokens = entry.max_tokens;
  if (entry.artifact_digest !== undefined) source.artifactDigest = entry.artifact_digest;
  if (entry.worker_bin !== undefined) source.workerBin = entry.worker_bin;
  if (entry.worker_runtime_dir !== undefined) source.workerRuntimeDir = entry.worker_runtime_dir;
  return source;
}

let llamaSlot = 0;

/**
 * The next llama worker id, `llama-<slot>@<pid>`: slots count up per process and the pid keeps
 * two Synapse processes (or a server and a test run) from sharing a socket path in the common
 * runtime dir. The launcher grants exactly these paths (slots 0–15 of its own pid, which `exec`
 * keeps), because Deno's unix-socket permission names exact paths.
 */
export function nextLlamaWorkerId(): string {
  return `llama-${llamaSlot++}@${Deno.pid}`;
}

/** Nice value of generation workers (interactive lanes run at 0, the bulk ORT lane at 10). */
export const DECODE_WORKER_NICE = 5;

/** Worker options of a {@link Synapse} (from {@link SynapseOptions}). */
export interface SynapseWorkerOptions {
  log?: LogSink;
  llamaWorkerArgs?: string[];
  workerHandshakeTimeoutMs?: number;
  workerRequestTimeoutMs?: number;
  workerGenerateTimeoutMs?: number;
}

/** A running Synapse instance. */
export class Synapse implements AsyncDisposable {
  readonly config: SynapseConfig;
  readonly store: Store;
  readonly registry: ModelRegistry;
  readonly admission: Admission;
  readonly context: OpContext;
  /** Durable jobs (contract.md §8). */
  readonly jobStore: JobStore;
  /** Jobs of earlier generations failed with `module_restarted` at this boot. */
  readonly inheritedJobs: number;
  /** Scheduler of the interactive lane. */
  readonly interactive: LaneScheduler;
  /** Scheduler of the bulk lane. */
  readonly bulk: LaneScheduler;
  #sweeper: ReturnType<typeof setInterval> | undefined;
  #leases: FileLock[];
  /** Resolves when every preloaded model is ready or failed. */
  readonly modelsSettled: Promise<LoadedModel[]>;
  #disposed = false;

  /** @internal Use {@link createSynapse}. */
  /** The machine this instance runs on (contract.md §5). */
  readonly machineProfile: MachineProfile;
  /** `sha256` of the machine profile; keys certification rows. */
  readonly machineProfileHash: string;

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
    const threads = threadsForKnob(config.knob);
    // The two lanes share the machine's cores. onnxruntime's spinning threads are fastest when a
    // lane runs alone but burn a sharing lane's CPU (measured on 2 cores: bulk kept 41% of its
    // solo rate beside spinning queries, 91% beside blocking ones). So the bulk lane never spins,
    // and the interactive lane has a spinning session for when it is alone and a quiet twin for
    // while a bulk job runs.
    const lane = new OrtLane({ intraOpThreads: threads, allowSpinning: true, quietTwin: true });
    const bulkLane = new OrtLane({ intraOpThreads: threads, allowSpinning: false, niceness: 10 });
    const log = workerOptions.log ?? stderrLog;

    this.registry = new ModelRegistry(lane, bulkLane, {
      threadPolicy: config.knob,
      maxBatchTokens: config.inline.max_tokens,
      now,
      llama: (spec, source) =>
        new LlamaLane(spec, {
          launch: resolveLlamaWorkerLaunch({
            ...(source.workerBin === undefined ? {} : { workerBin: source.workerBin }),
            // Generation runs below the interactive lanes (decode class; nice 5, between the
            // interactive lane's 0 and the bulk lane's 10).
            extraArgs: [
              ...(spec.mode === "generate" ? ["--nice", String(DECODE_WORKER_NICE)] : []),
              ...(workerOptions.llamaWorkerArgs ?? []),
            ],
          }),
          runtimeDir: source.workerRuntimeDir ?? defaultWorkerRuntimeDir(),
          workerId: nextLlamaWorkerId(),
          loadTimeoutMs: config.worker.load_timeout_ms,
          ...(workerOptions.workerHandshakeTimeoutMs === undefined ? {} : {
            acceptTimeoutMs: workerOptions.workerHandshakeTimeoutMs,
            helloTimeoutMs: workerOptions.workerHandshakeTimeoutMs,
          }),
          ...(workerOptions.workerRequestTimeoutMs === undefined
            ? {}
            : { requestTimeoutMs: workerOptions.workerRequestTimeoutMs }),
          ...(workerOptions.workerGenerateTimeoutMs === undefined
            ? {}
            : { generateTimeoutMs: workerOptions.workerGenerateTimeoutMs }),
          log,
          forwardLinesPerSec: config.log.worker_forward_lines_per_sec,
        }),
    });
    this.admission = new Admission({
      byteBudget: config.inline.byte_budget,
      maxQueueMs: config.inline.max_queue_ms,
      estimatedExecutionMs: config.inline.estimated_execution_ms,
      maxConcurrentWorkers: config.inline.max_concurrent_workers,
    }, { now });
    const storeRef = store;
    this.jobStore = new JobStore(store, { clock: now });
    // Jobs of an earlier generation that were queued or running died with that process.
    this.inheritedJobs = this.jobStore.inheritEarlierGenerations(store.moduleGeneration);
    const permits = Math.max(1, config.inline.max_concurrent_workers);
    this.interactive = new LaneScheduler({
      permits,
      defaultRunMs: config.inline.estimated_execution_ms,
    });
    this.bulk = new LaneScheduler({ permits: 1 });
    this.context = {
      config,
      registry: this.registry,
      admission: this.admission,
      interactive: this.interactive,
      jobs: { store: this.jobStore, scheduler: this.bulk, running: new Map() },
      moduleGeneration: store.moduleGeneration,
      tableEpoch: () => storeRef.tableEpoch,
      now,
      machineProfileHash: this.machineProfileHash,
    };
    this.modelsSettled = Promise.all(sources.map((s) => this.registry.load(s))).then((ms) => {
      for (const m of ms) {
        if (m.state === "ready") {
          try {
            store.upsertModel({
              model_id: m.modelId,
              engine: m.engine,
              task: m.task,
              fingerprint: m.fingerprint!,
              config_json: JSON.stringify({ source: m.source, profile: m.profile }),
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

  /** Module generation of this boot. */
  get moduleGeneration(): number {
    return this.store.moduleGeneration;
  }

  /**
   * Calls an operation.
   *
   * @param method Contract method, e.g. `"embed.query"`.
   * @param params Its params.
   * @returns The outcome in its wire shape (never throws).
   */
  call(method: string, params: unknown, options: CallOptions = {}): Promise<OpOutcome> {
    if (this.#disposed) {
      const e = new SynapseError(
        "module_not_initialized",
        "Cannot call: this Synapse instance was disposed",
      );
      return Promise.resolve({ kind: "channel", body: e.toChannel(), error: e });
    }
    return dispatch(this.context, method, params, options);
  }

  /** True after {@link dispose}. */
  get disposed(): boolean {
    return this.#disposed;
  }

  /** Stops the lanes and workers and closes the store. Idempotent. */
  async dispose(): Promise<void> {
    if (this.#disposed) return;
    this.#disposed = true;
    if (this.#sweeper !== undefined) clearInterval(this.#sweeper);
    this.interactive.dispose();
    this.bulk.dispose();
    this.registry.lane.dispose();
    this.registry.bulkLane.dispose();
    await this.registry.closeOwnLanes();
    this.store.dispose();
    for (const l of this.#leases) l.release();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.dispose();
  }
}

/**
 * Starts a Synapse instance: loads config, opens the store (bumping `module_generation`), and
 * loads the preloaded models (or the two test models when none is configured).
 *
 * @throws {SynapseError} `invalid_request` for a bad config (naming key and file),
 *   `module_not_initialized` when a machine-profile probe fails (contract.md §5: no
 *   placeholders), `store_failure` when the store cannot open.
 */
export async function createSynapse(options: SynapseOptions = {}): Promise<Synapse> {
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
  const path = options.storePath ?? storePath(options.env);
  const storeDir = path.slice(0, Math.max(0, path.lastIndexOf("/"))) || ".";
  // A second instance refuses to start (contract.md §8): the singleton lease, then the store's
  // own lease in its directory, taken before the store opens (subc.md §5).
  const leases: FileLock[] = [];
  try {
    leases.push(
      await acquireLease(
        options.leaseRoot ?? (options.storePath ? storeDir : leaseRoot(options.env)),
        leaseFileName("synapse", "file", "singleton"),
        "singleton",
      ),
    );
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
  const sources = config.preload_models.length > 0
    ? config.preload_models.map(sourceFromPreload)
    : defaultModelSources();
  const syn = new Synapse(config, store, sources, options.now ?? Date.now, machine, leases, {
    ...(options.log === undefined ? {} : { log: options.log }),
    ...(options.llamaWorkerArgs === undefined ? {} : { llamaWorkerArgs: options.llamaWorkerArgs }),
    ...(options.workerHandshakeTimeoutMs === undefined
      ? {}
      : { workerHandshakeTimeoutMs: options.workerHandshakeTimeoutMs }),
    ...(options.workerRequestTimeoutMs === undefined
      ? {}
      : { workerRequestTimeoutMs: options.workerRequestTimeoutMs }),
    ...(options.workerGenerateTimeoutMs === undefined
      ? {}
      : { workerGenerateTimeoutMs: options.workerGenerateTimeoutMs }),
  });
  if (options.waitForModels ?? true) await syn.modelsSettled;
  return syn;
}
