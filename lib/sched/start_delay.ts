/**
 * Admission's start-delay estimate for a lane (docs/internals.md §6 check 2): how long a task of a
 * class would wait, from the lane's queue depths, running tasks and the pick policy's weights.
 * Pure: the scheduler passes its state in.
 *
 * @module
 */
import type { PickWeights, WorkClass } from "./pick_next.ts";
import type { LaneDepths } from "./lane_stats.ts";

/** A running task, as the estimate sees it. */
export interface Running {
  /** Its class. */
  cls: WorkClass;
  /** Its start on the scheduler's clock, in ms. */
  startedAt: number;
}

/** What {@link predictStartDelayMs} reads of a lane. */
export interface StartDelayState {
  /** Queued tasks per class. */
  depths: LaneDepths;
  /** Engine slots. */
  permits: number;
  /** Tasks running now. */
  running: ReadonlySet<Running>;
  /** Fair-cycle weights (pick_next.ts). */
  weights: PickWeights;
  /** Mean run time of a class in ms (its default before any run). */
  meanRunMs: (cls: WorkClass) => number;
  /** Now, on the scheduler's clock, in ms. */
  now: number;
}

/**
 * Estimates how long a task of class `cls` submitted now would wait before it starts, for
 * admission (docs/internals.md §6 check 2).
 *
 * 0 when a slot would be free for it. Otherwise the time until the first running task should
 * end (its class's mean run time minus its elapsed time; 0 while a slot is free), plus the
 * mean run time of every task the policy would start first, divided over the slots. Tasks
 * ahead: control — queued control; interactive — queued control and interactive, and the bulk
 * turns the fair cycle interleaves (one per `weights.interactive` queued interactive tasks while
 * bulk is queued); bulk — queued control and bulk, and up to `weights.interactive` interactive
 * turns per bulk turn, bounded by the interactive queue. Bulk aging is not modelled.
 *
 * @param cls The class of the would-be task.
 * @param state The lane's queues, slots, running tasks, weights, run-time means and clock.
 * @returns Estimated start delay in ms (≥ 0).
 */
export function predictStartDelayMs(cls: WorkClass, state: StartDelayState): number {
  const d = state.depths;
  const run = state.meanRunMs;
  let ahead: number;
  let workMs: number;
  switch (cls) {
    case "control":
      ahead = d.control;
      workMs = d.control * run("control");
      break;
    case "interactive": {
      const bulkTurns = d.bulk > 0
        ? Math.floor(d.interactive * state.weights.bulk / state.weights.interactive)
        : 0;
      ahead = d.control + d.interactive + bulkTurns;
      workMs = d.control * run("control") + d.interactive * run("interactive") +
        bulkTurns * run("bulk");
      break;
    }
    case "bulk": {
      const interactiveTurns = Math.min(
        d.interactive,
        Math.ceil((d.bulk + 1) * state.weights.interactive / state.weights.bulk),
      );
      ahead = d.control + d.bulk + interactiveTurns;
      workMs = d.control * run("control") + d.bulk * run("bulk") +
        interactiveTurns * run("interactive");
      break;
    }
    case "decode":
      // Decode runs after queued control, interactive and bulk work (aging aside) and after
      // the decode tasks ahead of it.
      ahead = d.control + d.interactive + d.bulk + d.decode;
      workMs = d.control * run("control") + d.interactive * run("interactive") +
        d.bulk * run("bulk") + d.decode * run("decode");
      break;
    default:
      throw new TypeError(`Cannot predict start delay for class ${String(cls satisfies never)}`);
  }
  const free = state.permits - state.running.size;
  if (ahead < free) return 0;
  let residual = 0;
  if (free <= 0) {
    const now = state.now;
    residual = Infinity;
    for (const r of state.running) {
      residual = Math.min(residual, Math.max(0, run(r.cls) - (now - r.startedAt)));
    }
  }
  return residual + workMs / state.permits;
}
