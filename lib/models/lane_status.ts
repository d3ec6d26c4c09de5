/**
 * Rows of `admission.status.lanes`: one per scheduler (the two shared ORT threads, each llama
 * model's own), with its statistics and the models on it.
 *
 * @module
 */
import type { LaneStats } from "../sched/lane_scheduler.ts";
import type { ModelTask } from "./model.ts";

/** One row of `admission.status.lanes` (a scheduler and the models on it). */
export interface LaneStatusRow {
  lane: string;
  engine: string;
  task?: ModelTask;
  intra_op_threads?: number;
  permits: number;
  in_flight: number;
  waiters: number;
  depths: LaneStats["depths"];
  meeting_deadlines: Record<string, number>;
  start_delay_p50_ms: Record<string, number>;
  start_delay_p95_ms: Record<string, number>;
  tokens_per_second: Record<string, number>;
  worker?: Record<string, unknown>;
  /** The model's worker admission, from the one status function (lib/ops/status.ts). */
  serving_admission?: "serving" | "quarantined" | "unresponsive" | "not_certified";
  serving_admission_reason?: Record<string, unknown>;
  models: string[];
}

/**
 * The row of one scheduler, from its statistics; the per-class figures are keyed `interactive`,
 * `bulk` and `decode`. Engine-specific fields (`task`, `intra_op_threads`, `worker`,
 * `serving_admission`) are left for the caller; `admission.status` takes `serving_admission`
 * from the model's status (lib/ops/status.ts), the same as `/health` and `models.list`.
 *
 * @param lane Lane name (`ort-interactive`, `ort-bulk`, `llama-<model id>`).
 * @param engine Engine kind.
 * @param s The scheduler's statistics.
 * @param models Ids of the models on it.
 */
export function laneStatusRow(
  lane: string,
  engine: string,
  s: LaneStats,
  models: string[],
): LaneStatusRow {
  return {
    lane,
    engine,
    permits: s.permits,
    in_flight: s.inFlight,
    waiters: s.waiters,
    depths: s.depths,
    meeting_deadlines: perClass(s, (c) => c.meetingDeadlines),
    start_delay_p50_ms: perClass(s, (c) => c.startDelayP50Ms),
    start_delay_p95_ms: perClass(s, (c) => c.startDelayP95Ms),
    tokens_per_second: perClass(s, (c) => c.tokensPerSecond),
    models,
  };
}

/** One statistic of the interactive, bulk and decode classes. */
function perClass(
  s: LaneStats,
  pick: (c: LaneStats["classes"]["interactive"]) => number,
): Record<string, number> {
  return {
    interactive: pick(s.classes.interactive),
    bulk: pick(s.classes.bulk),
    decode: pick(s.classes.decode),
  };
}
