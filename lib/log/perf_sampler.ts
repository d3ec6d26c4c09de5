/**
 * The perf sampler (config `log.perf_interval_secs`): every N seconds one `synapse.perf` line at
 * `info` with the process's memory, the event loop's lag, and whatever facts the caller adds
 * (Synapse adds its lanes' queue depths and in-flight counts):
 *
 * ```
 * 2026-11-30T09:48:23.739Z INFO  synapse.perf: perf rss_mb=182.4 heap_used_mb=41.2 loop_lag_ms=0.3 queued=0 in_flight=1 lanes=ort-interactive:0/1,ort-bulk:0/0
 * ```
 *
 * `loop_lag_ms` is how late the sampler's own timer fired: the time the event loop was busy
 * with other work when it was due. The facts come from a callback so that this bottom layer
 * never imports the models or the operations.
 *
 * @module
 */
import type { LogFields, LogSink } from "./log.ts";

/** Timers the sampler runs on (tests pass fake ones). */
export interface SamplerTimers {
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(id: unknown): void;
}

/** Options of {@link PerfSampler}. */
export interface PerfSamplerOptions {
  /** Seconds between lines; 0 (or less) means the sampler never starts. */
  intervalSecs: number;
  /** Where the lines go. */
  log: LogSink;
  /** Facts appended to each line (`queued`, `in_flight`, `lanes`); a throw is logged as `facts_error`. */
  facts?: () => LogFields;
  /** Monotonic clock, ms. @default performance.now */
  now?: () => number;
  /** Timers. @default the global ones, unref'd (a sampler never keeps the process alive) */
  timers?: SamplerTimers;
  /** Memory figures, bytes. @default Deno.memoryUsage */
  memory?: () => { rss: number; heapUsed: number };
}

const realTimers: SamplerTimers = {
  setTimeout(fn, ms) {
    const id = setTimeout(fn, ms);
    Deno.unrefTimer(id);
    return id;
  },
  clearTimeout(id) {
    clearTimeout(id as number);
  },
};

/**
 * Logs one perf line every `intervalSecs` (module doc) until disposed.
 *
 * @example
 * ```ts ignore
 * using sampler = new PerfSampler({ intervalSecs: 60, log: stderrLog, facts: () => ({ queued: 0 }) });
 * sampler.start();
 * ```
 */
export class PerfSampler implements Disposable {
  #opts: PerfSamplerOptions;
  #intervalMs: number;
  #now: () => number;
  #timers: SamplerTimers;
  #timer: unknown;
  #dueAt = 0;
  #disposed = false;

  /** @param options Interval, sink, facts, clock and timers. */
  constructor(options: PerfSamplerOptions) {
    this.#opts = options;
    this.#intervalMs = Math.max(0, options.intervalSecs) * 1000;
    this.#now = options.now ?? (() => performance.now());
    this.#timers = options.timers ?? realTimers;
  }

  /** True while a next line is scheduled. */
  get running(): boolean {
    return this.#timer !== undefined;
  }

  /** Schedules the first line an interval from now; a no-op when the interval is 0 or it runs. */
  start(): void {
    if (this.#disposed || this.#timer !== undefined || this.#intervalMs <= 0) return;
    this.#schedule();
  }

  /**
   * Writes one line now.
   *
   * @param loopLagMs The event loop's lag to report, ms.
   */
  sample(loopLagMs: number): void {
    const mem = (this.#opts.memory ?? (() => Deno.memoryUsage()))();
    let facts: LogFields;
    try {
      facts = this.#opts.facts?.() ?? {};
    } catch (err) {
      facts = { facts_error: (err as Error)?.message ?? String(err) };
    }
    this.#opts.log("info", "synapse.perf", "perf", {
      rss_mb: mib(mem.rss),
      heap_used_mb: mib(mem.heapUsed),
      loop_lag_ms: Math.round(Math.max(0, loopLagMs) * 10) / 10,
      ...facts,
    });
  }

  /** Stops the sampler. Idempotent. */
  dispose(): void {
    this.#disposed = true;
    if (this.#timer !== undefined) this.#timers.clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  [Symbol.dispose](): void {
    this.dispose();
  }

  #schedule(): void {
    this.#dueAt = this.#now() + this.#intervalMs;
    this.#timer = this.#timers.setTimeout(() => this.#tick(), this.#intervalMs);
  }

  #tick(): void {
    this.#timer = undefined;
    if (this.#disposed) return;
    try {
      this.sample(this.#now() - this.#dueAt);
    } finally {
      if (!this.#disposed) this.#schedule();
    }
  }
}

function mib(bytes: number): number {
  return Math.round(bytes / 1024 / 1024 * 10) / 10;
}
