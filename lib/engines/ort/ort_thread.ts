/**
 * The ORT thread, main-thread side: a dedicated Deno Worker thread owns the onnxruntime-node
 * sessions (`session.run` blocks its thread for the whole run: docs/internals.md "§11 Engines and
 * lanes"), and this class sends it micro-batches as transferable buffers. The main thread only
 * packs ids and awaits replies, so `/health`, admission and refusals stay instant while the engine
 * is busy.
 *
 * Memory. An onnxruntime session holds its own copy of the weights, its own CPU arena and its own
 * intra-op threads, and onnxruntime-node can share none of them between sessions (no global thread
 * pools, no shared allocator, no prepacked-weights container) nor set spinning per run. So the CPU
 * arena and the memory pattern stay on (turning them off cost speed and saved nothing once traffic
 * varied), both work classes run on one session per model (ort_threads.ts: a bulk job adds no
 * session), and the thread holds further sessions only while they are used: the quiet session
 * (on the {@link OrtThreadOptions.quietThread}, or a twin in this worker) is created by the first
 * quiet run and released after {@link OrtThreadOptions.quietTwinIdleMs}; a thread with
 * {@link OrtThreadOptions.idleUnloadMs} unloads idle models and reloads them on the next run;
 * after each load and each release the worker calls glibc `malloc_trim`. The measurements behind
 * each choice, and what a configured model costs against a bare onnxruntime-node process, are in
 * bench/README.md "ORT sessions and memory".
 *
 * @module
 */
import { SynapseError } from "../../contract/errors.ts";
import type { ErrorCode } from "../../contract/errors.ts";
import type { OrtRequest, OrtResponse, OrtTask } from "./_protocol.ts";
import type { Pooling } from "./pooling.ts";
import { ORT_VERSION } from "./_version.ts";
import { type LogSink, stderrLog } from "../../log/log.ts";
import { markStage, spanStage } from "../../log/stage_marks.ts";

/** Load parameters of one ONNX model. */
export interface OrtLoadSpec {
  /** Thread-local handle (the model id). */
  modelRef: string;
  /** Path of model.onnx. */
  path: string;
  task: OrtTask;
  pooling: Pooling;
  normalize: boolean;
  /** `[rows, seq]` shapes run once at load to size the memory arena. @default [] */
  warmupShapes?: [number, number][];
}

/** One row to run: ids with specials, already truncated. */
export interface OrtRow {
  ids: Int32Array;
  typeIds: Int32Array;
}

/** Output of one micro-batch. */
export interface OrtRunResult {
  /** Row-major `[rows, dims]` vectors (embed) or `[rows]` raw scores (rerank). */
  data: Float32Array;
  dims: number;
  /** 1 where the row's output held NaN or ±Infinity. */
  nonFinite: Uint8Array;
  /** Engine time in ms (session.run + pooling), measured in the worker. */
  runMs: number;
}

/** Options of {@link OrtThread}. */
export interface OrtThreadOptions {
  /** onnxruntime intra-op threads. @default navigator.hardwareConcurrency */
  intraOpThreads?: number | undefined;
  /**
   * Let intra-op threads spin-wait between runs: best when this thread has the cores to itself,
   * wasteful when two threads share them. @default true
   */
  allowSpinning?: boolean | undefined;
  /**
   * Give every model a second session whose threads never spin, for runs made while another
   * thread is busy on the same cores (`run(..., {quiet: true})`): a spinning session is fastest
   * alone, a blocking one shares cores well. The first quiet run creates a model's twin (it
   * waits for that, a one-thread cold load); it costs a second copy of the weights plus the
   * arena its runs need, until {@link OrtThreadOptions.quietTwinIdleMs} releases it.
   * @default false
   */
  quietTwin?: boolean | undefined;
  /**
   * Run quiet runs on this other thread (one blocking intra-op thread, its own worker) instead of
   * on a twin in this thread's worker, so they run *beside* this thread's own work rather than
   * after it: what a session shared by queries and a bulk job needs (ort_threads.ts). The model
   * is registered there on the first quiet run, without warm-up shapes; this thread's
   * `quietTwin` is then ignored. Disposed with this thread.
   */
  quietThread?: OrtThread | undefined;
  /**
   * Milliseconds without a quiet run after which the thread releases its quiet twins (the next
   * quiet run creates them again). `Infinity` keeps them. @default 60_000
   */
  quietTwinIdleMs?: number | undefined;
  /**
   * Milliseconds without any request after which the thread unloads every model, keeping what it
   * needs to load them again: the next run of a model pays its cold load (session creation and
   * warm-up) first. For a thread whose work comes in bursts, such as durable jobs, so its sessions
   * hold memory only while work arrives. `Infinity` keeps models loaded. @default Infinity
   */
  idleUnloadMs?: number | undefined;
  /**
   * Nice value (0 … 19) for this thread's engine threads on Linux, so another thread's work runs
   * first when both share the cores. The worker thread lowers itself before it creates its
   * first session, and onnxruntime's intra-op threads, created by that thread, inherit the value
   * (needs only `--allow-ffi`). Where it cannot be set (not Linux, no FFI, the kernel refuses)
   * the model loads all the same, {@link OrtThread.load} reports the nice value actually in force,
   * and the thread logs a `warn` line once per worker thread. @default 0
   */
  niceness?: number | undefined;
  /** Module log (the priority warning above). @default stderrLog */
  log?: LogSink | undefined;
}

/** Options of {@link OrtThread.run}. */
export interface OrtRunOptions {
  /** Use the quiet twin session when the thread has one. @default false */
  quiet?: boolean;
}

/**
 * What an engine needs of the thread that runs it: an {@link OrtThread}, or the bulk view of one
 * (ort_threads.ts `OrtBulkView`, which runs on another thread's sessions).
 */
export interface OrtRunner extends Disposable {
  /** onnxruntime intra-op threads of the sessions that run this runner's work. */
  readonly intraOpThreads: number;
  /** Micro-batches this runner sent and has not had answered. */
  readonly inFlight: number;
  /** onnxruntime sessions this runner holds (0 for a view of another thread's). */
  readonly residentSessions: number;
  /** True once it accepts no more work. */
  readonly disposed: boolean;
  /** Loads a model (see {@link OrtThread.load}). */
  load(spec: OrtLoadSpec): Promise<{ dims: number; coldLoadMs: number; niceness: number }>;
  /** Records a model its first run loads (see {@link OrtThread.register}). */
  register(spec: OrtLoadSpec): void;
  /** Runs one micro-batch (see {@link OrtThread.run}). */
  run(modelRef: string, rows: readonly OrtRow[], options?: OrtRunOptions): Promise<OrtRunResult>;
  /** Unloads a model (see {@link OrtThread.unload}). */
  unload(modelRef: string): Promise<void>;
  /** Stops it. Idempotent. */
  dispose(): void;
}

interface Pending {
  resolve(v: OrtResponse): void;
  reject(e: unknown): void;
}

/** Engine identity of the ORT threads (docs/internals.md §4 `engine`). */
export const ORT_ENGINE = Object.freeze({
  engine: "ort",
  version: ORT_VERSION,
  build_flags: Object.freeze({ ep: "cpu" }) as Readonly<Record<string, string>>,
});

/**
 * One Worker thread running onnxruntime-node sessions. Requests run one at a time in arrival
 * order inside the worker; callers may keep several in flight so the worker never idles while
 * the main thread handles a reply. A dead worker rejects what was in flight with
 * `engine_crashed`; the next call starts a fresh worker and reloads the models lazily.
 */
export class OrtThread implements OrtRunner {
  #worker: Worker | undefined;
  #pending = new Map<number, Pending>();
  #nextId = 1;
  #specs = new Map<string, OrtLoadSpec>();
  #loadedInWorker = new Set<string>();
  #loading = new Map<string, Promise<void>>();
  #threads: number;
  #spin: boolean;
  #quietTwin: boolean;
  #quietThread: OrtThread | undefined;
  #niceness: number;
  #quietTwinIdleMs: number;
  #idleUnloadMs: number;
  #idleTimer: Timer | undefined;
  #quietTimer: Timer | undefined;
  #sessions = 0;
  #log: LogSink;
  #priorityWarned = false;
  #disposed = false;
  #inFlight = 0;

  /**
   * @throws {RangeError} when `quietTwinIdleMs` or `idleUnloadMs` is negative or NaN.
   */
  constructor(options: OrtThreadOptions = {}) {
    for (const key of ["quietTwinIdleMs", "idleUnloadMs"] as const) {
      const v = options[key];
      if (v !== undefined && !(v >= 0)) {
        throw new RangeError(`Cannot create the ORT lane: '${key}' must be >= 0: received ${v}`);
      }
    }
    this.#quietTwinIdleMs = options.quietTwinIdleMs ?? 60_000;
    this.#idleUnloadMs = options.idleUnloadMs ?? Infinity;
    this.#threads = Math.max(1, options.intraOpThreads ?? navigator.hardwareConcurrency ?? 1);
    this.#spin = options.allowSpinning ?? true;
    this.#quietThread = options.quietThread;
    this.#quietTwin = this.#quietThread === undefined && (options.quietTwin ?? false);
    this.#niceness = Math.max(0, Math.min(19, options.niceness ?? 0));
    this.#log = options.log ?? stderrLog;
  }

  /** onnxruntime intra-op threads of this Worker. */
  get intraOpThreads(): number {
    return this.#threads;
  }

  /** Micro-batches sent and not yet answered (its quiet thread's included). */
  get inFlight(): number {
    return this.#inFlight + (this.#quietThread?.inFlight ?? 0);
  }

  /**
   * onnxruntime sessions alive in the thread's worker (each loaded model's session, plus the quiet
   * twins that exist), as of the worker's latest reply; 0 before the worker starts.
   */
  get residentSessions(): number {
    return this.#sessions + (this.#quietThread?.residentSessions ?? 0);
  }

  /** True after {@link dispose}. */
  get disposed(): boolean {
    return this.#disposed;
  }

  /**
   * Loads a model into the thread's worker.
   *
   * @returns Output width (hidden size for embed, 1 for rerank), cold-load time in ms, and the
   *   nice value the thread's engine threads run at (below the thread's `niceness` when it could
   *   not be set; the thread has then logged why).
   * @throws {SynapseError} `artifact_invalid` when onnxruntime cannot open the file;
   *   `engine_crashed` when the worker dies.
   */
  async load(spec: OrtLoadSpec): Promise<{ dims: number; coldLoadMs: number; niceness: number }> {
    this.#ensureNotDisposed();
    this.#specs.set(spec.modelRef, spec);
    const res = await this.#send(
      {
        type: "load",
        reqId: 0,
        modelRef: spec.modelRef,
        path: spec.path,
        task: spec.task,
        pooling: spec.pooling,
        normalize: spec.normalize,
        intraOpThreads: this.#threads,
        allowSpinning: this.#spin,
        quietTwin: this.#quietTwin,
        niceness: this.#niceness,
        warmupShapes: spec.warmupShapes ?? [],
      },
      [],
      "artifact_invalid",
    );
    if (res.type !== "loaded") {
      throw new Error(`Unexpected ${res.type} reply to load. This is a bug`);
    }
    this.#loadedInWorker.add(spec.modelRef);
    // A model loaded again (another file under the same ref) must not keep an older quiet session.
    if (this.#quietThread?.knows(spec.modelRef)) await this.#quietThread.unload(spec.modelRef);
    if (res.priorityError !== undefined && !this.#priorityWarned) {
      this.#priorityWarned = true;
      this.#log(
        "warn",
        "ort",
        `Cannot lower the ORT lane's engine threads to nice ${this.#niceness}: ${res.priorityError}; they run at nice ${res.niceness}, so this lane competes with the others as an equal`,
        { niceness: this.#niceness, model: spec.modelRef },
      );
    }
    return { dims: res.dims, coldLoadMs: res.coldLoadMs, niceness: res.niceness };
  }

  /**
   * Runs one micro-batch.
   *
   * @param modelRef A loaded model.
   * @param rows Sequences (each ≥ 1 token).
   * @throws {SynapseError} `engine_crashed` (transient) when the worker fails or dies.
   */
  async run(
    modelRef: string,
    rows: readonly OrtRow[],
    options: OrtRunOptions = {},
  ): Promise<OrtRunResult> {
    this.#ensureNotDisposed();
    if (options.quiet === true && this.#quietThread !== undefined) {
      return await this.#runQuietThread(this.#quietThread, modelRef, rows);
    }
    await this.#ensureLoaded(modelRef);
    let total = 0;
    for (const r of rows) total += r.ids.length;
    const ids = new Int32Array(total);
    const typeIds = new Int32Array(total);
    const lengths = new Int32Array(rows.length);
    let o = 0;
    for (let i = 0; i < rows.length; i++) {
      const r = rows[i]!;
      ids.set(r.ids, o);
      typeIds.set(r.typeIds, o);
      lengths[i] = r.ids.length;
      o += r.ids.length;
    }
    const quiet = options.quiet ?? false;
    if (quiet) this.#quietTimer = clear(this.#quietTimer);
    markStage("pack");
    let res: OrtResponse;
    try {
      res = await this.#send(
        { type: "run", reqId: 0, modelRef, ids, typeIds, lengths, quiet },
        [ids.buffer, typeIds.buffer, lengths.buffer],
        "engine_crashed",
      );
    } finally {
      if (quiet && this.#quietTwin) this.#armQuietRelease();
    }
    if (res.type !== "result") {
      throw new Error(`Unexpected ${res.type} reply to run. This is a bug`);
    }
    markStage("reply");
    spanStage("worker.tensors", res.stagesMs[0]);
    spanStage("worker.session_run", res.stagesMs[1]);
    spanStage("worker.pool", res.stagesMs[2]);
    return { data: res.data, dims: res.dims, nonFinite: res.nonFinite, runMs: res.runMs };
  }

  /** A quiet run on the quiet thread: registers the model there first (no warm-up shapes). */
  #runQuietThread(q: OrtThread, modelRef: string, rows: readonly OrtRow[]): Promise<OrtRunResult> {
    const spec = this.#specs.get(modelRef);
    if (!spec) {
      throw new SynapseError("unknown_model", `Cannot run: model '${modelRef}' is not loaded`, {
        details: { model_id: modelRef },
      });
    }
    // Its arena grows to what quiet runs send, as a twin's did.
    if (!q.knows(modelRef)) q.register({ ...spec, warmupShapes: [] });
    return q.run(modelRef, rows);
  }

  /** True when the model is loaded or registered here. */
  knows(modelRef: string): boolean {
    return this.#specs.has(modelRef);
  }

  /**
   * Records a model without loading it: the first {@link run} for it loads it (a thread that
   * serves only durable jobs costs nothing until a job arrives).
   */
  register(spec: OrtLoadSpec): void {
    this.#ensureNotDisposed();
    this.#specs.set(spec.modelRef, spec);
  }

  /** Unloads a model (no-op when unknown). */
  async unload(modelRef: string): Promise<void> {
    this.#specs.delete(modelRef);
    await this.#quietThread?.unload(modelRef);
    if (!this.#loadedInWorker.delete(modelRef) || !this.#worker) return;
    await this.#send({ type: "unload", reqId: 0, modelRef }, [], "engine_crashed");
  }

  /** Stops the worker thread. Idempotent. */
  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    this.#quietTimer = clear(this.#quietTimer);
    this.#quietThread?.dispose();
    this.#killWorker(new SynapseError("disposed", "Cannot run: the ORT lane was disposed"));
  }

  [Symbol.dispose](): void {
    this.dispose();
  }

  async #ensureLoaded(modelRef: string): Promise<void> {
    if (this.#loadedInWorker.has(modelRef)) return;
    const spec = this.#specs.get(modelRef);
    if (!spec) {
      throw new SynapseError("unknown_model", `Cannot run: model '${modelRef}' is not loaded`, {
        details: { model_id: modelRef },
      });
    }
    // A restarted worker reloads lazily; concurrent callers share one load.
    let p = this.#loading.get(modelRef);
    if (!p) {
      p = this.load(spec).then(() => {}).finally(() => this.#loading.delete(modelRef));
      this.#loading.set(modelRef, p);
    }
    await p;
  }

  #spawn(): Worker {
    this.#priorityWarned = false;
    const w = new Worker(new URL("./_worker.ts", import.meta.url), { type: "module" });
    w.onmessage = (ev: MessageEvent<OrtResponse>) => {
      const msg = ev.data;
      const p = this.#pending.get(msg.reqId);
      if (!p) return;
      this.#pending.delete(msg.reqId);
      this.#inFlight--;
      if ("sessions" in msg) this.#sessions = msg.sessions;
      p.resolve(msg);
      if (this.#inFlight === 0) this.#armIdleUnload();
    };
    w.onerror = (ev: ErrorEvent) => {
      ev.preventDefault();
      this.#killWorker(
        new SynapseError("engine_crashed", `ORT lane worker failed: ${ev.message}`, {
          retryAfterMs: 250,
        }),
      );
    };
    w.onmessageerror = () => {
      this.#killWorker(
        new SynapseError("engine_crashed", "ORT lane worker sent an unreadable message", {
          retryAfterMs: 250,
        }),
      );
    };
    return w;
  }

  #killWorker(reason: unknown): void {
    const w = this.#worker;
    this.#worker = undefined;
    this.#loadedInWorker.clear();
    this.#sessions = 0;
    this.#idleTimer = clear(this.#idleTimer);
    w?.terminate();
    const pending = [...this.#pending.values()];
    this.#pending.clear();
    this.#inFlight = 0;
    for (const p of pending) p.reject(reason);
  }

  /** After the last reply: unload every model once the thread has been idle `idleUnloadMs`. */
  #armIdleUnload(): void {
    // Armed even while nothing is marked loaded: a load's reply arrives before load() records
    // the model, so the callback looks at what is loaded when it fires.
    if (this.#idleUnloadMs === Infinity || this.#disposed) return;
    this.#idleTimer = clear(this.#idleTimer);
    this.#idleTimer = unrefTimeout(() => {
      this.#idleTimer = undefined;
      if (this.#inFlight > 0 || this.#disposed || !this.#worker) return;
      if (this.#loadedInWorker.size === 0) return;
      const refs = [...this.#loadedInWorker];
      // Forgotten at once: a run arriving now reloads its model behind the unload (the worker
      // answers in order), exactly as after a worker restart.
      this.#loadedInWorker.clear();
      for (const modelRef of refs) {
        this.#send({ type: "unload", reqId: 0, modelRef }, [], "engine_crashed").catch(() => {});
      }
    }, this.#idleUnloadMs);
  }

  /** After a quiet run: release the twins once `quietTwinIdleMs` passes without another. */
  #armQuietRelease(): void {
    if (this.#quietTwinIdleMs === Infinity || this.#disposed) return;
    this.#quietTimer = clear(this.#quietTimer);
    this.#quietTimer = unrefTimeout(() => {
      this.#quietTimer = undefined;
      if (this.#disposed || !this.#worker) return;
      this.#send({ type: "releaseQuiet", reqId: 0 }, [], "engine_crashed").catch(() => {});
    }, this.#quietTwinIdleMs);
  }

  #send(req: OrtRequest, transfer: Transferable[], errCode: ErrorCode): Promise<OrtResponse> {
    this.#idleTimer = clear(this.#idleTimer);
    this.#worker ??= this.#spawn();
    const reqId = this.#nextId++;
    req.reqId = reqId;
    return new Promise<OrtResponse>((resolve, reject) => {
      this.#pending.set(reqId, {
        resolve: (res) => {
          if (res.type === "error") {
            const code = (res.code === "artifact_invalid" || res.code === "unknown_model")
              ? res.code
              : errCode;
            reject(new SynapseError(code, `ORT lane: ${res.message}`));
          } else resolve(res);
        },
        reject,
      });
      this.#inFlight++;
      this.#worker!.postMessage(req, transfer);
    });
  }

  #ensureNotDisposed(): void {
    if (this.#disposed) {
      throw new SynapseError("disposed", "Cannot use the ORT lane: it was disposed");
    }
  }
}

type Timer = ReturnType<typeof setTimeout>;

/** Clears a timer; returns undefined, for `this.#timer = clear(this.#timer)`. */
function clear(timer: Timer | undefined): undefined {
  if (timer !== undefined) clearTimeout(timer);
  return undefined;
}

/** A timeout that does not keep the process alive (finite delays above 2^31 − 1 ms clamped). */
function unrefTimeout(fn: () => void, ms: number): Timer {
  const id = setTimeout(fn, Math.min(ms, 2 ** 31 - 1));
  // Deno's setTimeout returns a number (the Node typings in scope call it a Timeout).
  Deno.unrefTimer(Number(id));
  return id;
}
