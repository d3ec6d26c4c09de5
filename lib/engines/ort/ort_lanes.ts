/**
 * The pair of ORT lanes a Synapse process runs on one machine's cores: an interactive lane for
 * queries and inline work, and a bulk lane for durable jobs and large reranks, each its own
 * Worker thread (so a query never waits for a bulk micro-batch), with the policy that lets them
 * share the cores and the memory.
 *
 * @module
 */
import { OrtLane } from "./ort_lane.ts";
import type { LogSink } from "../../log/log.ts";

/** Nice value of the bulk lane's engine threads: below the interactive lane's 0. */
export const ORT_BULK_NICENESS = 10;

/** Options of {@link createOrtLanes}. */
export interface OrtLanesOptions {
  /** onnxruntime intra-op threads of each lane. @default navigator.hardwareConcurrency */
  intraOpThreads?: number;
  /** Milliseconds without a quiet run before the interactive lane drops its quiet twins. @default 60_000 */
  quietTwinIdleMs?: number;
  /** Milliseconds without work before the bulk lane unloads its models. @default 60_000 */
  bulkIdleUnloadMs?: number;
  /** Module log. @default stderrLog */
  log?: LogSink;
}

/** The two lanes; dispose both when done. */
export interface OrtLanes {
  /** Queries, inline batches, small reranks: spinning threads, quiet twins, nice 0. */
  readonly interactive: OrtLane;
  /** Durable jobs, large reranks: blocking threads at nice 10, models loaded while in use. */
  readonly bulk: OrtLane;
}

/**
 * Creates the interactive and the bulk ORT lane. onnxruntime's spinning threads are fastest
 * when a lane runs alone but burn a sharing lane's CPU (measured on 2 cores: bulk kept 41% of
 * its solo rate beside spinning queries, 91% beside blocking ones). So the bulk lane never spins
 * and runs at nice 10, and the interactive lane spins when alone and runs quiet (`run(…,
 * {quiet: true})`) on a one-thread twin while a bulk job runs.
 *
 * Memory (ort_lane.ts, "Memory"): sessions cannot share weights, arenas or thread pools through
 * onnxruntime-node, so the lanes hold the extra sessions only while they are used. A model
 * costs one session while only queries come, a twin more while queries meet a bulk job, and a
 * bulk session more while jobs run; each is released after its idle time.
 *
 * @returns Both lanes; their workers start with the first load or run.
 * @throws {RangeError} when an idle time is negative or NaN.
 *
 * @example Serve a model on both lanes
 * ```ts ignore
 * import { createOrtLanes } from "./ort_lanes.ts";
 * const { interactive, bulk } = createOrtLanes({ intraOpThreads: 2 });
 * const spec = { modelRef: "m", path: "model.onnx", task: "embed", pooling: "mean", normalize: true } as const;
 * await interactive.load(spec);
 * bulk.register(spec); // loads on the first job
 * ```
 */
export function createOrtLanes(options: OrtLanesOptions = {}): OrtLanes {
  const common = {
    ...(options.intraOpThreads === undefined ? {} : { intraOpThreads: options.intraOpThreads }),
    ...(options.log === undefined ? {} : { log: options.log }),
  };
  const interactive = new OrtLane({
    ...common,
    allowSpinning: true,
    quietTwin: true,
    quietTwinIdleMs: options.quietTwinIdleMs ?? 60_000,
  });
  const bulk = new OrtLane({
    ...common,
    allowSpinning: false,
    niceness: ORT_BULK_NICENESS,
    idleUnloadMs: options.bulkIdleUnloadMs ?? 60_000,
  });
  return { interactive, bulk };
}
