/**
 * The ORT threads a Synapse process runs on one machine's cores, and the policy that lets
 * interactive work (queries, inline batches, small reranks) and bulk work (durable jobs, large
 * reranks) share the cores and the memory.
 *
 * Since issue 22 both classes run on **one session per model** by default (`bulkSession:
 * "shared"`): the bulk side is an {@link OrtBulkView} of the interactive thread, so a job adds no
 * session, no weight copy and no arena beside the one queries use. A query that comes while a job
 * runs is quiet (lib/models/model_registry.ts `otherEnginesBusy`) and runs on the interactive
 * thread's quiet thread — a one-thread, non-spinning session in a worker of its own, created by
 * the first quiet run and unloaded after `quietTwinIdleMs` — beside the job's quantum rather than
 * after it. The shared session runs at nice 0, as every interactive session has: at nice 10 (the
 * `shared_low_priority` layout) the quiet query got more of the cores beside a job (loaded p95 /
 * idle p50 2.02–2.22× against 2.79× on 2 cores), but every query outside a job then yielded to
 * any other program on the machine (a nice-10 thread gets about a tenth of the CPU a nice-0 one
 * gets; bench:embed's interleaved rows, call for call beside a spinning nice-0 onnxruntime session:
 * p50 overhead 9.6 ms at nice 10, 4.9 ms at nice 0). The former layout, a bulk thread with its own session at
 * nice 10 and a twin in the interactive worker (`bulkSession: "separate"`), stays for comparison
 * in bench:memory and bench:mixed; bench/README.md "ORT sessions and memory" has the numbers.
 *
 * @module
 */
import { OrtThread } from "./ort_thread.ts";
import type { OrtLoadSpec, OrtRow, OrtRunner, OrtRunOptions, OrtRunResult } from "./ort_thread.ts";
import { SynapseError } from "../../contract/errors.ts";
import type { LogSink } from "../../log/log.ts";

/** Nice value of a separate bulk thread's engine threads: below the interactive thread's 0. */
export const ORT_BULK_NICENESS = 10;

/**
 * How bulk work gets its sessions: `shared` runs it on the interactive thread's sessions
 * ({@link OrtBulkView}) at nice 0; `shared_low_priority` the same with those sessions at nice 10
 * (for the benchmarks: queries outside a job then yield to every other program); `separate` on a
 * thread of its own (its own session per model, nice 10, unloaded when idle).
 */
export type OrtBulkSession = "shared" | "shared_low_priority" | "separate";

/** Options of {@link createOrtThreads}. */
export interface OrtThreadsOptions {
  /** onnxruntime intra-op threads of each thread. @default navigator.hardwareConcurrency */
  intraOpThreads?: number | undefined;
  /** Where bulk work runs. @default "shared" */
  bulkSession?: OrtBulkSession | undefined;
  /** Milliseconds without a quiet run before the interactive thread drops its quiet twins. @default 60_000 */
  quietTwinIdleMs?: number | undefined;
  /** `separate` only: milliseconds without work before the bulk thread unloads its models. @default 60_000 */
  bulkIdleUnloadMs?: number | undefined;
  /** Module log. @default stderrLog */
  log?: LogSink | undefined;
}

/** The threads; dispose both when done (disposing a shared bulk view leaves the thread alone). */
export interface OrtThreads {
  /** Queries, inline batches, small reranks: spinning threads, quiet twins, nice 0. */
  readonly interactive: OrtThread;
  /**
   * Durable jobs, large reranks: a view of `interactive` (`shared`, the default), or a thread of
   * its own with blocking threads at nice 10 and models loaded while in use (`separate`).
   */
  readonly bulk: OrtRunner;
  /** Where bulk work runs. */
  readonly bulkSession: OrtBulkSession;
}

/**
 * Creates the interactive ORT thread and the bulk side.
 *
 * `shared` (default): one session per model serves both classes, at nice 0, spinning (fastest
 * alone); quiet runs go to a one-thread blocking session on a quiet thread of its own (nice 0),
 * so a query beside a job waits for no quantum and shares the cores with the job's threads.
 * Memory: the session queries use, plus the quiet session's weights and small arena while quiet
 * runs come. `shared_low_priority` runs the shared session at nice 10, so the quiet query gets a
 * core of its own beside a job, but interactive work outside a job then also runs at nice 10 and
 * yields to every other program on the machine; it exists for bench:mixed to compare.
 *
 * `separate`: onnxruntime's spinning threads are fastest when a thread runs alone but burn a
 * sharing thread's CPU (measured on 2 cores: bulk kept 41% of its solo rate beside spinning
 * queries, 91% beside blocking ones), so the bulk thread never spins and runs at nice 10, and the
 * interactive thread (nice 0) runs quiet (`run(…, {quiet: true})`) on a one-thread twin while a
 * bulk job runs: three sessions while a job meets queries, about 2× a bare onnxruntime-node
 * process.
 *
 * @returns The threads; workers start with the first load or run.
 * @throws {RangeError} when an idle time is negative or NaN.
 *
 * @example Serve a model to both classes from one session
 * ```ts ignore
 * import { createOrtThreads } from "./ort_threads.ts";
 * const { interactive, bulk } = createOrtThreads({ intraOpThreads: 2 });
 * const spec = { modelRef: "m", path: "model.onnx", task: "embed", pooling: "mean", normalize: true } as const;
 * await interactive.load(spec);
 * bulk.register(spec); // runs on interactive's session
 * ```
 */
export function createOrtThreads(options: OrtThreadsOptions = {}): OrtThreads {
  const common = { intraOpThreads: options.intraOpThreads, log: options.log };
  const bulkSession = options.bulkSession ?? "shared";
  const quietTwinIdleMs = options.quietTwinIdleMs ?? 60_000;
  if (bulkSession !== "separate") {
    // Quiet runs beside a job (which runs on this thread's session) need their own worker.
    const quietThread = new OrtThread({
      intraOpThreads: 1,
      allowSpinning: false,
      idleUnloadMs: quietTwinIdleMs,
      log: options.log,
    });
    const interactive = new OrtThread({
      ...common,
      allowSpinning: true,
      niceness: bulkSession === "shared_low_priority" ? ORT_BULK_NICENESS : 0,
      quietThread,
    });
    return { interactive, bulk: new OrtBulkView(interactive), bulkSession };
  }
  const interactive = new OrtThread({
    ...common,
    allowSpinning: true,
    quietTwin: true,
    quietTwinIdleMs,
  });
  const bulk = new OrtThread({
    ...common,
    allowSpinning: false,
    niceness: ORT_BULK_NICENESS,
    idleUnloadMs: options.bulkIdleUnloadMs ?? 60_000,
  });
  return { interactive, bulk, bulkSession };
}

/**
 * The bulk side of a shared session: runs on another {@link OrtThread}'s sessions (the
 * interactive thread's) and holds none of its own. It unloads nothing (the owner's engine does),
 * never runs quiet (its work is what makes the owner's queries quiet), and counts only its own
 * runs in flight.
 */
export class OrtBulkView implements OrtRunner {
  #owner: OrtThread;
  #registered = new Set<string>();
  #inFlight = 0;
  #disposed = false;

  /** @param owner The thread whose sessions run this view's work. */
  constructor(owner: OrtThread) {
    this.#owner = owner;
  }

  /** The owner's intra-op threads. */
  get intraOpThreads(): number {
    return this.#owner.intraOpThreads;
  }

  /** Runs of this view sent to the owner and not yet answered. */
  get inFlight(): number {
    return this.#inFlight;
  }

  /** Always 0: the sessions are the owner's. */
  get residentSessions(): number {
    return 0;
  }

  /** True after {@link dispose}, or once the owner is disposed. */
  get disposed(): boolean {
    return this.#disposed || this.#owner.disposed;
  }

  /**
   * Loads the model on the owner (a no-op there when it is loaded already) and registers it here.
   *
   * @returns What {@link OrtThread.load} returns.
   * @throws what {@link OrtThread.load} throws; `disposed` after {@link dispose}.
   */
  async load(spec: OrtLoadSpec): Promise<{ dims: number; coldLoadMs: number; niceness: number }> {
    this.#ensureNotDisposed();
    this.#registered.add(spec.modelRef);
    return await this.#owner.load(spec);
  }

  /** Registers a model the owner serves (loaded there, or registered for a lazy load). */
  register(spec: OrtLoadSpec): void {
    this.#ensureNotDisposed();
    this.#registered.add(spec.modelRef);
  }

  /**
   * Runs one micro-batch on the owner's session, in turn with the owner's own runs (never on its
   * quiet thread: `options.quiet` is ignored).
   *
   * @throws {SynapseError} `unknown_model` when the model was never registered here; what
   *   {@link OrtThread.run} throws; `disposed`.
   */
  async run(
    modelRef: string,
    rows: readonly OrtRow[],
    _options?: OrtRunOptions,
  ): Promise<OrtRunResult> {
    this.#ensureNotDisposed();
    if (!this.#registered.has(modelRef)) {
      throw new SynapseError("unknown_model", `Cannot run: model '${modelRef}' is not loaded`, {
        details: { model_id: modelRef },
      });
    }
    this.#inFlight++;
    try {
      return await this.#owner.run(modelRef, rows, { quiet: false });
    } finally {
      this.#inFlight--;
    }
  }

  /** Forgets the model here; the owner keeps its session (its own engine unloads it). */
  unload(modelRef: string): Promise<void> {
    this.#registered.delete(modelRef);
    return Promise.resolve();
  }

  /** Stops accepting work; the owner is left running. Idempotent. */
  dispose(): void {
    this.#disposed = true;
  }

  [Symbol.dispose](): void {
    this.dispose();
  }

  #ensureNotDisposed(): void {
    if (this.disposed) {
      throw new SynapseError("disposed", "Cannot use the ORT lane: it was disposed");
    }
  }
}
