/**
 * The machine-wide lane scheduler (docs/internals.md §6): one per engine lane,
 * it owns three FIFO queues (control, interactive, bulk) and `permits` concurrent engine slots,
 * and decides with {@link pickNext} which queued task a free slot runs next.
 *
 * All state is owned by the scheduler and changed only in synchronous sections (STYLE 12): a
 * submit enqueues, an abort removes, a settled run frees its slot, and a dispatch pass (queued as
 * a microtask, never a timer) fills free slots. The stats are kept as the scheduler goes, so
 * reading them never touches an engine.
 *
 * @module
 */
import { SynapseError } from "../contract/errors.ts";
import {
  DEFAULT_BULK_AGING_MS,
  DEFAULT_PICK_WEIGHTS,
  pickNext,
  WORK_CLASSES,
} from "./pick_next.ts";
import type { PickWeights, WorkClass } from "./pick_next.ts";
import { Fifo } from "./_fifo.ts";
import { ClassRecord } from "./lane_stats.ts";
import type { LaneClassStats, LaneDepths, LaneStats } from "./lane_stats.ts";
import { predictStartDelayMs } from "./start_delay.ts";
import type { Running } from "./start_delay.ts";

export type { LaneClassStats, LaneDepths, LaneStats } from "./lane_stats.ts";

/** What a task's `run` receives when its slot is granted. */
export interface LaneGrant {
  /** The task's class. */
  readonly cls: WorkClass;
  /** The task's label, for logs. */
  readonly label: string | undefined;
  /** The task's token count. */
  readonly tokens: number;
  /** Time from submit to start, in ms. */
  readonly startDelayMs: number;
  /** Start time on the scheduler's clock, in ms. */
  readonly startedAtMs: number;
  /**
   * The task's signal. Aborting it while the task runs does not free the slot: the slot is held
   * until `run` settles, so `run` should stop at its next engine boundary.
   */
  readonly signal: AbortSignal | undefined;
}

/** One unit of engine work for {@link LaneScheduler.submit}. */
export interface LaneTask<T> {
  /** Queue class. */
  cls: WorkClass;
  /** Tokens of work (≥ 0), for throughput and cost estimates. */
  tokens: number;
  /** Does the engine work; its promise settles the submit promise. Called at most once. */
  run: (grant: LaneGrant) => Promise<T>;
  /** Aborting while queued removes the task; it never runs and rejects with `signal.reason`. */
  signal?: AbortSignal | undefined;
  /** Free-form label for logs. */
  label?: string | undefined;
  /**
   * Longest acceptable start delay in ms, for the `meetingDeadlines` statistic only: the
   * scheduler never drops a task for it (pass a timeout `signal` for that).
   */
  maxQueueMs?: number | undefined;
}

/** Options of {@link LaneScheduler}. */
export interface LaneSchedulerOptions {
  /** Concurrent engine slots (docs/internals.md §6 `max_concurrent_workers`). @default 1 */
  permits?: number;
  /** Fair-cycle weights. @default {interactive: 3, bulk: 1} */
  weights?: PickWeights;
  /** A bulk head older than this many ms goes before interactive work. @default 250 */
  bulkAgingMs?: number;
  /** Dispatches (per class) the rolling statistics cover. @default 256 */
  statsWindow?: number;
  /**
   * Run time in ms assumed for a class before any of its runs were measured (docs/internals.md §6
   * execution estimate).
   *
   * @default 25
   */
  defaultRunMs?: number;
  /** Monotonic clock in ms. @default () => performance.now() */
  now?: () => number;
}

interface Entry {
  task: LaneTask<unknown>;
  enqueuedAt: number;
  resolve: (value: unknown) => void;
  reject: (reason: unknown) => void;
  onAbort: (() => void) | undefined;
}

/**
 * Fair scheduling of engine work on one lane (docs/internals.md §6).
 *
 * Pick order when a slot frees: control first; then a bulk head older than `bulkAgingMs`; then
 * the only non-empty class; otherwise the fair cycle `[I, I, I, B]` (see {@link pickNext}).
 * Within a class, tasks run in submission order.
 *
 * **Bulk quanta.** A running task is never preempted, so bulk work must be submitted one quantum
 * at a time: the owner cuts a quantum of at most the lane's quantum tokens (`takeQuantum`,
 * `quantumTokensFor`), submits it with `cls: "bulk"`, and only after that submit settles submits
 * the next quantum, which therefore joins the back of the bulk queue. Interactive work that
 * arrives while a quantum runs waits at most that quantum's engine time, and starts before any
 * other queued bulk quantum.
 *
 * **Cancellation** (field report F10). A task whose signal is aborted before submit, while
 * queued, or by the time it is dispatched never runs: it is removed and its submit rejects with
 * `signal.reason`. A running task keeps its slot until `run` settles; `run` sees the signal in its
 * {@link LaneGrant} and should stop at its next boundary.
 *
 * @example Run two tasks on one slot
 * ```ts
 * import assert from "node:assert/strict";
 * import { LaneScheduler } from "./lane_scheduler.ts";
 *
 * const lane = new LaneScheduler();
 * const order: string[] = [];
 * const run = (name: string) => () => Promise.resolve(order.push(name));
 * await Promise.all([
 *   lane.submit({ cls: "bulk", tokens: 3072, run: run("bulk") }),
 *   lane.submit({ cls: "control", tokens: 0, run: run("control") }),
 * ]);
 * assert.deepEqual(order, ["control", "bulk"]);
 * ```
 */
export class LaneScheduler implements Disposable {
  #permits: number;
  #weights: PickWeights;
  #bulkAgingMs: number;
  #defaultRunMs: number;
  #now: () => number;
  #queues: Record<WorkClass, Fifo<Entry>> = {
    control: new Fifo(),
    interactive: new Fifo(),
    bulk: new Fifo(),
    decode: new Fifo(),
  };
  #stats: Record<WorkClass, ClassRecord>;
  #running = new Set<Running>();
  #cycle = 0;
  #pumpQueued = false;
  #disposed = false;

  /**
   * @param options Slots, weights, aging, statistics window and clock.
   * @throws {RangeError} when `permits` or `statsWindow` is not a positive integer, a weight is
   *   not a positive integer, or `bulkAgingMs` / `defaultRunMs` is negative or NaN.
   */
  constructor(options: LaneSchedulerOptions = {}) {
    const {
      permits = 1,
      weights = DEFAULT_PICK_WEIGHTS,
      bulkAgingMs = DEFAULT_BULK_AGING_MS,
      statsWindow = 256,
      defaultRunMs = 25,
      now = () => performance.now(),
    } = options;
    positiveInt("permits", permits);
    positiveInt("statsWindow", statsWindow);
    positiveInt("weights.interactive", weights.interactive);
    positiveInt("weights.bulk", weights.bulk);
    nonNegative("bulkAgingMs", bulkAgingMs);
    nonNegative("defaultRunMs", defaultRunMs);
    this.#permits = permits;
    this.#weights = { interactive: weights.interactive, bulk: weights.bulk };
    this.#bulkAgingMs = bulkAgingMs;
    this.#defaultRunMs = defaultRunMs;
    this.#now = now;
    this.#stats = {
      control: new ClassRecord(statsWindow),
      interactive: new ClassRecord(statsWindow),
      bulk: new ClassRecord(statsWindow),
      decode: new ClassRecord(statsWindow),
    };
  }

  /** Concurrent engine slots. */
  get permits(): number {
    return this.#permits;
  }

  /** Tasks running now. */
  get inFlight(): number {
    return this.#running.size;
  }

  /** Tasks queued now, all classes. */
  get waiters(): number {
    return this.#queues.control.length + this.#queues.interactive.length +
      this.#queues.bulk.length + this.#queues.decode.length;
  }

  /** True after {@link dispose}. */
  get disposed(): boolean {
    return this.#disposed;
  }

  /**
   * Per-slot throughput over the recent runs of all classes, in tokens per second; 0 before any
   * run. Feed it to `quantumTokensFor` to size bulk quanta.
   */
  get tokensPerSecond(): number {
    let tokens = 0;
    let ms = 0;
    for (const cls of WORK_CLASSES) {
      tokens += this.#stats[cls].tokens.sum;
      ms += this.#stats[cls].runs.sum;
    }
    return ms > 0 ? tokens / ms * 1000 : 0;
  }

  /**
   * Queues a task and settles with its run.
   *
   * @typeParam T What `run` resolves to.
   * @param task The work, its class and its signal.
   * @returns A promise of `run`'s result; it rejects with what `run` rejects with, with
   *   `signal.reason` when the task is aborted before it starts, or with a {@link SynapseError}
   *   `disposed` when the scheduler is disposed while the task is queued.
   * @throws {TypeError} synchronously when `cls` is not a {@link WorkClass} or `run` is not a
   *   function.
   * @throws {RangeError} synchronously when `tokens` or `maxQueueMs` is negative or not finite.
   * @throws {SynapseError} synchronously, code `disposed`, after {@link dispose}.
   */
  submit<T>(task: LaneTask<T>): Promise<T> {
    if (!WORK_CLASSES.includes(task.cls)) {
      throw new TypeError(
        `Cannot submit task as cls must be one of ${WORK_CLASSES.join(", ")}: received ${
          String(task.cls)
        }`,
      );
    }
    if (typeof task.run !== "function") {
      throw new TypeError("Cannot submit task as run must be a function");
    }
    if (!Number.isFinite(task.tokens) || task.tokens < 0) {
      throw new RangeError(
        `Cannot submit task as tokens must be a non-negative finite number: received ${task.tokens}`,
      );
    }
    if (
      task.maxQueueMs !== undefined && (!Number.isFinite(task.maxQueueMs) || task.maxQueueMs < 0)
    ) {
      throw new RangeError(
        `Cannot submit task as maxQueueMs must be a non-negative finite number: received ${task.maxQueueMs}`,
      );
    }
    this.#ensureNotDisposed();
    const { signal } = task;
    if (signal?.aborted) {
      this.#stats[task.cls].cancelled++;
      return Promise.reject(signal.reason);
    }
    const { promise, resolve, reject } = Promise.withResolvers<T>();
    const entry: Entry = {
      task: task as LaneTask<unknown>,
      enqueuedAt: this.#now(),
      resolve: resolve as (value: unknown) => void,
      reject,
      onAbort: undefined,
    };
    if (signal) {
      entry.onAbort = () => this.#abortQueued(entry);
      signal.addEventListener("abort", entry.onAbort, { once: true });
    }
    this.#queues[task.cls].push(entry);
    this.#queuePump();
    return promise;
  }

  /** Tasks queued now, per class (a fresh object). */
  depths(): LaneDepths {
    return {
      control: this.#queues.control.length,
      interactive: this.#queues.interactive.length,
      bulk: this.#queues.bulk.length,
      decode: this.#queues.decode.length,
    };
  }

  /**
   * Rolling statistics of one class (percentiles cached between dispatches).
   *
   * @param cls The class.
   * @returns A fresh object; see {@link LaneClassStats} for units.
   */
  classStats(cls: WorkClass): LaneClassStats {
    return this.#stats[cls].snapshot(this.#defaultRunMs);
  }

  /**
   * Sets the execution estimate assumed for a class before any of its runs has been measured
   * (the `defaultRunMs` option): the registry seeds it from the probe's knob assignments
   * (docs/internals.md §12). Measured runs replace it as they come, as before.
   *
   * @param ms Estimate, ms (≥ 0).
   * @throws {RangeError} when `ms` is negative or NaN.
   */
  setDefaultRunMs(ms: number): void {
    nonNegative("defaultRunMs", ms);
    this.#defaultRunMs = ms;
  }

  /** The execution estimate used before a class has measured a run, ms. */
  get defaultRunMs(): number {
    return this.#defaultRunMs;
  }

  /** Snapshot of depths, slots and per-class statistics, for status endpoints. */
  stats(): LaneStats {
    return {
      permits: this.#permits,
      inFlight: this.inFlight,
      waiters: this.waiters,
      depths: this.depths(),
      classes: {
        control: this.classStats("control"),
        interactive: this.classStats("interactive"),
        bulk: this.classStats("bulk"),
        decode: this.classStats("decode"),
      },
    };
  }

  /**
   * Estimates how long a task of class `cls` submitted now would wait before it starts, for
   * admission (docs/internals.md §6 check 2); the model is {@link predictStartDelayMs}'s.
   *
   * @param cls The class of the would-be task.
   * @returns Estimated start delay in ms (≥ 0).
   */
  predictedStartDelayMs(cls: WorkClass): number {
    return predictStartDelayMs(cls, {
      depths: this.depths(),
      permits: this.#permits,
      running: this.#running,
      weights: this.#weights,
      meanRunMs: (c) => this.#meanRunMs(c),
      now: this.#now(),
    });
  }

  /**
   * Rejects every queued task with a {@link SynapseError} `disposed` and refuses new submits.
   * Running tasks finish normally. Idempotent.
   */
  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    const reason = new SynapseError("disposed", "Cannot run task: the lane scheduler was disposed");
    for (const cls of WORK_CLASSES) {
      const queue = this.#queues[cls];
      for (let entry = queue.shift(); entry; entry = queue.shift()) {
        this.#detach(entry);
        this.#stats[cls].cancelled++;
        entry.reject(reason);
      }
    }
  }

  /** Same as {@link dispose}. */
  [Symbol.dispose](): void {
    this.dispose();
  }

  #ensureNotDisposed(): void {
    if (this.#disposed) {
      throw new SynapseError("disposed", "Cannot submit task: the lane scheduler was disposed");
    }
  }

  #meanRunMs(cls: WorkClass): number {
    return this.#stats[cls].meanRunMs(this.#defaultRunMs);
  }

  #queuePump(): void {
    if (this.#pumpQueued) return;
    this.#pumpQueued = true;
    queueMicrotask(() => {
      this.#pumpQueued = false;
      this.#pump();
    });
  }

  /** Fills free slots. Synchronous: no state changes hands across an await. */
  #pump(): void {
    while (this.#running.size < this.#permits) {
      const now = this.#now();
      const q = this.#queues;
      const pick = pickNext(
        {
          heads: {
            control: q.control.peek()?.enqueuedAt,
            interactive: q.interactive.peek()?.enqueuedAt,
            bulk: q.bulk.peek()?.enqueuedAt,
            decode: q.decode.peek()?.enqueuedAt,
          },
          cycle: this.#cycle,
        },
        now,
        { weights: this.#weights, bulkAgingMs: this.#bulkAgingMs },
      );
      if (!pick) return;
      const entry = q[pick.cls].shift();
      if (!entry) throw new Error("Picked an empty queue. This is a bug");
      if (entry.task.signal?.aborted) {
        // Normally removed by its abort listener already; the turn is not consumed.
        this.#cancelled(entry, now);
        continue;
      }
      this.#cycle = pick.state.cycle;
      this.#start(entry, now);
    }
  }

  #start(entry: Entry, now: number): void {
    this.#detach(entry);
    const { task } = entry;
    const delay = Math.max(0, now - entry.enqueuedAt);
    const rec = this.#stats[task.cls];
    rec.dispatched++;
    rec.pushDelay(delay);
    rec.met.push(task.maxQueueMs === undefined || delay <= task.maxQueueMs ? 1 : 0);
    const running: Running = { cls: task.cls, startedAt: now };
    this.#running.add(running);
    const grant: LaneGrant = Object.freeze({
      cls: task.cls,
      label: task.label,
      tokens: task.tokens,
      startDelayMs: delay,
      startedAtMs: now,
      signal: task.signal,
    });
    let result: Promise<unknown>;
    try {
      result = Promise.resolve(task.run(grant));
    } catch (e) {
      result = Promise.reject(e);
    }
    result.then(
      (value) => {
        this.#finish(running, task.tokens);
        entry.resolve(value);
      },
      (reason) => {
        this.#finish(running, task.tokens);
        entry.reject(reason);
      },
    );
  }

  #finish(running: Running, tokens: number): void {
    if (!this.#running.delete(running)) {
      throw new Error("A task finished twice. This is a bug");
    }
    const rec = this.#stats[running.cls];
    rec.runs.push(Math.max(0, this.#now() - running.startedAt));
    rec.tokens.push(tokens);
    this.#queuePump();
  }

  #abortQueued(entry: Entry): void {
    if (!this.#queues[entry.task.cls].remove(entry)) return;
    this.#cancelled(entry, this.#now());
  }

  /** Settles a task removed from its queue because its signal aborted. */
  #cancelled(entry: Entry, now: number): void {
    this.#detach(entry);
    const { task } = entry;
    const rec = this.#stats[task.cls];
    rec.cancelled++;
    if (task.maxQueueMs !== undefined && now - entry.enqueuedAt > task.maxQueueMs) {
      rec.met.push(0);
    }
    entry.reject(task.signal?.reason);
  }

  #detach(entry: Entry): void {
    if (entry.onAbort) {
      entry.task.signal?.removeEventListener("abort", entry.onAbort);
      entry.onAbort = undefined;
    }
  }
}

function positiveInt(name: string, value: number): void {
  if (!Number.isInteger(value) || value < 1) {
    throw new RangeError(
      `Cannot create lane scheduler as ${name} must be a positive integer: received ${value}`,
    );
  }
}

function nonNegative(name: string, value: number): void {
  if (Number.isNaN(value) || value < 0) {
    throw new RangeError(
      `Cannot create lane scheduler as ${name} must be non-negative: received ${value}`,
    );
  }
}
