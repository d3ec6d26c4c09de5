/**
 * The counters and histograms of one Synapse instance, behind `GET /metrics` (the Prometheus
 * text exposition format, rendered by lib/ops/metrics_exposition.ts). Each is recorded where its
 * fact is born — a call's outcome and duration in `Synapse.call` (the one path every door takes), a
 * worker's start or crash in its supervisor's hooks, a model load attempt in the registry — and
 * lives as long as the instance, so a counter never goes down between two scrapes, whatever
 * engine, lane or worker comes and goes. Gauges (queue depths, model states, memory) are read at
 * scrape time and are not kept here.
 *
 * Label values are bounded by construction: operation names of the dispatcher's table, stable
 * error codes, lane and model ids of loaded models, HTTP status codes; never a request id or text.
 *
 * @module
 */

/**
 * Upper bounds, seconds, of the request duration and queue-wait histograms: 1 ms (a query on a
 * warm encoder) to 3 min (a long generation, the GENERATE timeout).
 */
export const DURATION_BUCKETS_SECONDS: readonly number[] = Object.freeze([
  0.001,
  0.0025,
  0.005,
  0.01,
  0.025,
  0.05,
  0.1,
  0.25,
  0.5,
  1,
  2.5,
  5,
  10,
  30,
  60,
  180,
]);

/** Label values of one series, keyed by label name. */
export type Labels = Readonly<Record<string, string>>;

/** One series of a counter. */
export interface CounterSample {
  labels: Labels;
  value: number;
}

/** One series of a histogram: cumulative counts per upper bound, then the `+Inf` count. */
export interface HistogramSample {
  labels: Labels;
  /** Cumulative counts, one per {@link HistogramFamily.buckets} bound (`le`). */
  cumulative: number[];
  /** Observations (the `+Inf` bucket and `_count`). */
  count: number;
  /** Sum of the observed values. */
  sum: number;
}

/** A family of monotonic counters with fixed label names. */
export class CounterFamily {
  /** Label names, in the order series print them. */
  readonly labelNames: readonly string[];
  #series = new Map<string, CounterSample>();

  /** @param labelNames Label names, in print order. */
  constructor(labelNames: readonly string[]) {
    this.labelNames = labelNames;
  }

  /**
   * Adds `by` to the series of `labels` (created at 0).
   *
   * @param labels A value for every label name (a missing one reads as `""`).
   * @param by Amount, ≥ 0. @default 1
   * @throws {RangeError} for a negative or non-finite amount: a counter never goes down.
   */
  inc(labels: Labels, by = 1): void {
    if (!(by >= 0) || !Number.isFinite(by)) {
      throw new RangeError(`Cannot add ${by} to a counter: the amount must be finite and ≥ 0`);
    }
    seriesOf(this.#series, this.labelNames, labels, () => ({ value: 0 })).value += by;
  }

  /** Every series, in creation order. */
  samples(): readonly CounterSample[] {
    return [...this.#series.values()];
  }
}

/** A family of histograms with fixed label names and bucket bounds. */
export class HistogramFamily {
  /** Label names, in the order series print them (`le` is added when printed). */
  readonly labelNames: readonly string[];
  /** Upper bounds, ascending; `+Inf` is implied. */
  readonly buckets: readonly number[];
  #series = new Map<string, HistogramSample>();

  /**
   * @param labelNames Label names, in print order.
   * @param buckets Upper bounds, strictly ascending and finite.
   * @throws {RangeError} when the bounds are not strictly ascending finite numbers.
   */
  constructor(labelNames: readonly string[], buckets: readonly number[]) {
    for (let i = 0; i < buckets.length; i++) {
      if (!Number.isFinite(buckets[i]!) || (i > 0 && buckets[i]! <= buckets[i - 1]!)) {
        throw new RangeError("Cannot make a histogram: bucket bounds must ascend, finite");
      }
    }
    this.labelNames = labelNames;
    this.buckets = buckets;
  }

  /**
   * Records one observation.
   *
   * @param labels A value for every label name.
   * @param value The observed value (seconds, for `_seconds` families); a non-finite or negative
   *   value is ignored (a clock that went backwards says nothing about the request).
   */
  observe(labels: Labels, value: number): void {
    if (!Number.isFinite(value) || value < 0) return;
    const s = seriesOf(this.#series, this.labelNames, labels, () => ({
      cumulative: new Array<number>(this.buckets.length).fill(0),
      count: 0,
      sum: 0,
    }));
    for (let i = this.buckets.length - 1; i >= 0 && value <= this.buckets[i]!; i--) {
      s.cumulative[i]!++;
    }
    s.count++;
    s.sum += value;
  }

  /** Every series, in creation order (copies). */
  samples(): readonly HistogramSample[] {
    return [...this.#series.values()].map((s) => ({ ...s, cumulative: [...s.cumulative] }));
  }
}

function seriesOf<S extends { labels: Labels }>(
  map: Map<string, S>,
  names: readonly string[],
  labels: Labels,
  make: () => Omit<S, "labels">,
): S {
  const values = names.map((n) => labels[n] ?? "");
  const key = JSON.stringify(values);
  let s = map.get(key);
  if (s === undefined) {
    const own: Record<string, string> = {};
    names.forEach((n, i) => own[n] = values[i]!);
    s = { ...make(), labels: Object.freeze(own) } as S;
    map.set(key, s);
  }
  return s;
}

/** Which door a call came through (`door` label). */
export type CallDoor = "http" | "bus" | "cli" | "embedded";

/** One finished call through the dispatcher, as `Synapse.call` saw it. */
export interface CallRecord {
  /** Operation name of the dispatcher's table, or `unknown` for a method it does not serve. */
  op: string;
  door: CallDoor;
  /** `ok`, or the stable error code the call was answered with. */
  outcome: string;
  /** Wall time from the call to its outcome, seconds. */
  seconds: number;
  /** Lane that served it (`none` when it never reached one). */
  lane?: string | undefined;
  /** That lane's queue class. */
  cls?: string | undefined;
  /** Time from admission to the start on the engine, seconds, when the result says. */
  queueSeconds?: number | undefined;
  /** Tokens read and generated, when the result says. */
  tokens?: number | undefined;
  /** A loaded model's id (never an unknown id a caller sent). */
  model?: string | undefined;
}

/** Options of {@link Metrics}. */
export interface MetricsOptions {
  /** Monotonic clock, ms. @default performance.now */
  now?: () => number;
  /** ms between event-loop lag samples. @default 500 */
  lagIntervalMs?: number;
}

/** What a model load attempt ended in (`synapse_model_loads_total{outcome}`). */
export type LoadOutcome = "ok" | "retry" | "failed";

/** Samples of the event-loop lag window (×{@link MetricsOptions.lagIntervalMs}: 10 s). */
const LAG_WINDOW = 20;

/**
 * The counters and histograms of one instance (module doc). Owned by the Synapse instance;
 * disposed with it (stops the event-loop lag sampler).
 */
export class Metrics implements Disposable {
  /** `synapse_requests_total{op,door,outcome}`. */
  readonly requests: CounterFamily = new CounterFamily(["op", "door", "outcome"]);
  /** `synapse_request_duration_seconds{op,class,lane}`. */
  readonly requestDuration: HistogramFamily = new HistogramFamily(
    ["op", "class", "lane"],
    DURATION_BUCKETS_SECONDS,
  );
  /** `synapse_request_queue_seconds{op,class,lane}`: admission to the start on the engine. */
  readonly requestQueue: HistogramFamily = new HistogramFamily(
    ["op", "class", "lane"],
    DURATION_BUCKETS_SECONDS,
  );
  /** `synapse_tokens_total{op,model}`: tokens read and generated by served calls. */
  readonly tokens: CounterFamily = new CounterFamily(["op", "model"]);
  /** `synapse_model_loads_total{outcome}`. */
  readonly modelLoads: CounterFamily = new CounterFamily(["outcome"]);
  /** `synapse_worker_crashes_total{model}`. */
  readonly workerCrashes: CounterFamily = new CounterFamily(["model"]);
  /** `synapse_worker_restarts_total{model}`: worker starts after the first. */
  readonly workerRestarts: CounterFamily = new CounterFamily(["model"]);
  /** `synapse_http_responses_total{code}`: every HTTP answer, door refusals included. */
  readonly httpResponses: CounterFamily = new CounterFamily(["code"]);
  #now: () => number;
  #lagIntervalMs: number;
  #lag: number[] = [];
  #lagTimer: ReturnType<typeof setTimeout> | undefined;
  #disposed = false;

  /** @param options Clock and lag sampling interval. */
  constructor(options: MetricsOptions = {}) {
    this.#now = options.now ?? (() => performance.now());
    this.#lagIntervalMs = options.lagIntervalMs ?? 500;
    for (const outcome of ["ok", "retry", "failed"]) this.modelLoads.inc({ outcome }, 0);
  }

  /**
   * Records one call: its count by op, door and outcome, its duration (and queue wait) by op,
   * class and lane, and its tokens by op and model.
   */
  recordCall(r: CallRecord): void {
    this.requests.inc({ op: r.op, door: r.door, outcome: r.outcome });
    const where = { op: r.op, class: r.cls ?? "none", lane: r.lane ?? "none" };
    this.requestDuration.observe(where, r.seconds);
    if (r.queueSeconds !== undefined) this.requestQueue.observe(where, r.queueSeconds);
    if (r.tokens !== undefined && r.tokens > 0) {
      this.tokens.inc({ op: r.op, model: r.model ?? "none" }, r.tokens);
    }
  }

  /**
   * Records a worker event of a model: a crash, or a start (the first start of a worker is not a
   * restart; a later one is).
   *
   * @param generation The worker's start count after the event (1 after its first start).
   */
  workerEvent(model: string, kind: "start" | "crash", generation: number): void {
    if (kind === "crash") this.workerCrashes.inc({ model });
    else if (generation > 1) this.workerRestarts.inc({ model });
    else this.workerRestarts.inc({ model }, 0);
  }

  /** Records how a model load attempt ended. */
  modelLoad(outcome: LoadOutcome): void {
    this.modelLoads.inc({ outcome });
  }

  /**
   * The event loop's lag: the most a sampling timer fired late over the last ~10 s, seconds.
   * The sampler starts at the first call (an instance nobody scrapes runs no timer); until it
   * has a sample, one zero-delay timer is measured now.
   */
  async loopLagSeconds(): Promise<number> {
    if (this.#lagTimer === undefined && !this.#disposed) this.#scheduleLag();
    if (this.#lag.length === 0) {
      const t0 = this.#now();
      await new Promise<void>((r) => setTimeout(r, 0));
      return Math.max(0, this.#now() - t0) / 1000;
    }
    return Math.max(...this.#lag) / 1000;
  }

  /** Stops the lag sampler. Idempotent. */
  dispose(): void {
    this.#disposed = true;
    if (this.#lagTimer !== undefined) clearTimeout(this.#lagTimer);
    this.#lagTimer = undefined;
  }

  [Symbol.dispose](): void {
    this.dispose();
  }

  #scheduleLag(): void {
    const due = this.#now() + this.#lagIntervalMs;
    const timer = setTimeout(() => {
      if (this.#disposed) return;
      this.#lag.push(Math.max(0, this.#now() - due));
      if (this.#lag.length > LAG_WINDOW) this.#lag.shift();
      this.#scheduleLag();
    }, this.#lagIntervalMs);
    Deno.unrefTimer(timer as unknown as number);
    this.#lagTimer = timer;
  }
}
