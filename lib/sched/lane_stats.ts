/**
 * The lane scheduler's statistics (docs/internals.md §6 admission needs a run-time estimate; status
 * endpoints show start delays): the snapshot types, and the rolling windows the scheduler fills
 * as it dispatches, so reading them never touches an engine.
 *
 * @module
 */
import type { WorkClass } from "./pick_next.ts";

/** Queued tasks per class. */
export type LaneDepths = Record<WorkClass, number>;

/** Rolling statistics of one class. */
export interface LaneClassStats {
  /** Tasks started since the scheduler was created. */
  dispatched: number;
  /** Tasks removed from the queue without running (aborted, or the scheduler disposed). */
  cancelled: number;
  /** Dispatches the start-delay percentiles cover (at most `statsWindow`). */
  samples: number;
  /** Median start delay over the window, in ms; 0 when nothing was dispatched. */
  startDelayP50Ms: number;
  /** 95th-percentile start delay over the window, in ms; 0 when nothing was dispatched. */
  startDelayP95Ms: number;
  /**
   * Fraction in [0, 1] of the last `statsWindow` tasks that started within their `maxQueueMs`.
   * A task without `maxQueueMs` counts as met; a task aborted in the queue after waiting past its
   * `maxQueueMs` counts as missed. 1 when there are no samples.
   */
  meetingDeadlines: number;
  /** Mean run time of the last `statsWindow` runs, in ms; `defaultRunMs` before any. */
  meanRunMs: number;
  /** Tokens per second of run time over the window (per slot); 0 before any run. */
  tokensPerSecond: number;
}

/** Snapshot of a scheduler, for status endpoints. */
export interface LaneStats {
  /** Engine slots. */
  permits: number;
  /** Tasks running. */
  inFlight: number;
  /** Tasks queued, all classes. */
  waiters: number;
  /** Tasks queued per class. */
  depths: LaneDepths;
  /** Rolling statistics per class. */
  classes: Record<WorkClass, LaneClassStats>;
}

/** Fixed-size window of the last `capacity` numbers with a running sum. */
export class Ring {
  #values: number[] = [];
  #next = 0;
  #capacity: number;
  sum = 0;

  constructor(capacity: number) {
    this.#capacity = capacity;
  }

  get length(): number {
    return this.#values.length;
  }

  get values(): readonly number[] {
    return this.#values;
  }

  push(value: number): void {
    if (this.#values.length < this.#capacity) {
      this.#values.push(value);
    } else {
      this.sum -= this.#values[this.#next]!;
      this.#values[this.#next] = value;
      this.#next = (this.#next + 1) % this.#capacity;
    }
    this.sum += value;
    // Recompute once per lap so floating-point drift of the running sum stays bounded.
    if (this.#next === 0 && this.#values.length === this.#capacity) {
      this.sum = this.#values.reduce((a, b) => a + b, 0);
    }
  }
}

/** Counters and rolling windows of one class. */
export class ClassRecord {
  dispatched = 0;
  cancelled = 0;
  delays: Ring;
  met: Ring;
  runs: Ring;
  tokens: Ring;
  #sorted: number[] | undefined;

  constructor(window: number) {
    this.delays = new Ring(window);
    this.met = new Ring(window);
    this.runs = new Ring(window);
    this.tokens = new Ring(window);
  }

  pushDelay(ms: number): void {
    this.delays.push(ms);
    this.#sorted = undefined;
  }

  /** Mean run time over the window in ms; `defaultRunMs` before any run. */
  meanRunMs(defaultRunMs: number): number {
    return this.runs.length > 0 ? this.runs.sum / this.runs.length : defaultRunMs;
  }

  /**
   * The class's statistics now (percentiles cached between dispatches).
   *
   * @param defaultRunMs Run time assumed before any run was measured.
   */
  snapshot(defaultRunMs: number): LaneClassStats {
    return {
      dispatched: this.dispatched,
      cancelled: this.cancelled,
      samples: this.delays.length,
      startDelayP50Ms: this.percentile(0.5),
      startDelayP95Ms: this.percentile(0.95),
      meetingDeadlines: this.met.length > 0 ? this.met.sum / this.met.length : 1,
      meanRunMs: this.meanRunMs(defaultRunMs),
      tokensPerSecond: this.runs.sum > 0 ? this.tokens.sum / this.runs.sum * 1000 : 0,
    };
  }

  /** Nearest-rank percentile of the delay window (0 when empty). */
  percentile(p: number): number {
    const n = this.delays.length;
    if (n === 0) return 0;
    this.#sorted ??= [...this.delays.values].sort((a, b) => a - b);
    return this.#sorted[Math.min(n - 1, Math.max(0, Math.ceil(p * n) - 1))]!;
  }
}
