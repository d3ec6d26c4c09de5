/**
 * The pair of ORT threads a Synapse process runs on one machine's cores: an interactive thread for
 * queries and inline work, and a bulk thread for durable jobs and large reranks, each its own
 * Worker thread (so a query never waits for a bulk micro-batch), with the policy that lets them
 * share the cores and the memory.
 *
 * @module
 */
import { OrtThread } from "./ort_thread.ts";
import type { LogSink } from "../../log/log.ts";

/** Nice value of the bulk thread's engine threads: below the interactive thread's 0. */
export const ORT_BULK_NICENESS = 10;

/** Options of {@link createOrtThreads}. */
export interface OrtThreadsOptions {
  /** onnxruntime intra-op threads of each thread. @default navigator.hardwareConcurrency */
  intraOpThreads?: number | undefined;
  /** Milliseconds without a quiet run before the interactive thread drops its quiet twins. @default 60_000 */
  quietTwinIdleMs?: number | undefined;
  /** Milliseconds without work before the bulk thread unloads its models. @default 60_000 */
  bulkIdleUnloadMs?: number | undefined;
  /** Module log. @default stderrLog */
  log?: LogSink | undefined;
}

/** The two threads; dispose both when done. */
export interface OrtThreads {
  /** Queries, inline batches, small reranks: spinning threads, quiet twins, nice 0. */
  readonly interactive: OrtThread;
  /** Durable jobs, large reranks: blocking threads at nice 10, models loaded while in use. */
  readonly bulk: OrtThread;
}

/**
 * Creates the interactive and the bulk ORT thread. onnxruntime's spinning threads are fastest
 * when a thread runs alone but burn a sharing thread's CPU (measured on 2 cores: bulk kept 41% of
 * its solo rate beside spinning queries, 91% beside blocking ones). So the bulk thread never spins
 * and runs at nice 10, and the interactive thread spins when alone and runs quiet (`run(…,
 * {quiet: true})`) on a one-thread twin while a bulk job runs.
 *
 * Memory (ort_thread.ts, "Memory"): sessions cannot share weights, arenas or thread pools through
 * onnxruntime-node, so the threads hold the extra sessions only while they are used. A model
 * costs one session while only queries come, a twin more while queries meet a bulk job, and a
 * bulk session more while jobs run; each is released after its idle time.
 *
 * @returns Both threads; their workers start with the first load or run.
 * @throws {RangeError} when an idle time is negative or NaN.
 *
 * @example Serve a model on both threads
 * ```ts ignore
 * import { createOrtThreads } from "./ort_threads.ts";
 * const { interactive, bulk } = createOrtThreads({ intraOpThreads: 2 });
 * const spec = { modelRef: "m", path: "model.onnx", task: "embed", pooling: "mean", normalize: true } as const;
 * await interactive.load(spec);
 * bulk.register(spec); // loads on the first job
 * ```
 */
export function createOrtThreads(options: OrtThreadsOptions = {}): OrtThreads {
  const common = { intraOpThreads: options.intraOpThreads, log: options.log };
  const interactive = new OrtThread({
    ...common,
    allowSpinning: true,
    quietTwin: true,
    quietTwinIdleMs: options.quietTwinIdleMs ?? 60_000,
  });
  const bulk = new OrtThread({
    ...common,
    allowSpinning: false,
    niceness: ORT_BULK_NICENESS,
    idleUnloadMs: options.bulkIdleUnloadMs ?? 60_000,
  });
  return { interactive, bulk };
}
