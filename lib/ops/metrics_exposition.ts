/**
 * The instance's metrics in the Prometheus text exposition format (version 0.0.4), which the HTTP
 * door serves at `GET /metrics` (a door gets the text from its `DoorBackend.metricsText()`,
 * lib/ops/door_backend.ts). Counters and histograms come from the instance's
 * {@link Metrics} (recorded where their facts are born, so they never go down between scrapes) and
 * from its admission and job store, which live as long as it does; gauges are read at scrape time
 * from cached state — the lanes' schedulers, the models' status ({@link modelStatus}, the one
 * status function), the process. Nothing here starts or waits on an engine, except that an idle,
 * running llama worker is asked for its resident memory (a PONG), for at most a second.
 *
 * Names follow Prometheus conventions: a `synapse_` prefix (the standard `process_*` names
 * aside), base units in the name (`_seconds`, `_bytes`), `_total` on counters, labels of bounded
 * cardinality only (op, door, outcome, class, lane, model, task, engine, state, reason, code).
 *
 * @module
 */
import process from "node:process";
import type { Metrics } from "../log/metrics.ts";
import type { ModelRegistry } from "../models/model_registry.ts";
import { SYNAPSE_VERSION } from "../version.ts";
import { modelStatus } from "./status.ts";
import { certificationOf, isCertified, laneIdOf } from "../probe/certification.ts";
import type { ModelServingState } from "./status.ts";
import type { OpContext } from "./context.ts";

/** `Content-Type` of the text exposition format. */
export const METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

/** What {@link renderMetrics} reads from an instance (a `Synapse` is one). */
export interface MetricsSource {
  /** Its counters and histograms. */
  readonly metrics: Metrics;
  /** Its models and lanes: `list()`, `laneStatus()`, `engineCallsInFlight`. */
  readonly registry: Pick<ModelRegistry, "list" | "laneStatus" | "engineCallsInFlight">;
  /** Its ops context: admission, jobs, the clock, certification. */
  readonly context: OpContext;
  /** Its boot count (`synapse_module_generation`). */
  readonly moduleGeneration: number;
}

/** Every state {@link modelStatus} can give, one `synapse_model_state` series each. */
const MODEL_STATES: readonly ModelServingState[] = [
  "loading",
  "ready",
  "failed",
  "quarantined",
  "unresponsive",
  "not_certified",
  "remote_refusing",
];

/** Queue classes of a lane's scheduler. */
const CLASSES = ["control", "interactive", "bulk", "decode"] as const;

/** How long a scrape waits for a worker's PONG, ms (the worker itself gets longer). */
const WORKER_RSS_WAIT_MS = 1000;

/**
 * Renders every metric of an instance (module doc; the list: docs/observability.md "Metrics").
 *
 * @param source The instance.
 * @returns The exposition text, `\n`-terminated lines, each family's HELP and TYPE once.
 */
export async function renderMetrics(source: MetricsSource): Promise<string> {
  const m: Metrics = source.metrics;
  const ctx = source.context;
  const out = new Exposition();
  const entries = source.registry.list();

  // The build and the process.
  out.family("synapse_build_info", "gauge", "Build of this Synapse: version and Deno runtime.");
  out.sample("synapse_build_info", { version: SYNAPSE_VERSION, deno: Deno.version.deno }, 1);
  out.family(
    "synapse_module_generation",
    "gauge",
    "Boot count of this data home's store (module_generation); it goes up at every start.",
  );
  out.sample("synapse_module_generation", {}, source.moduleGeneration);
  out.family(
    "process_start_time_seconds",
    "gauge",
    "Start time of the process since unix epoch in seconds.",
  );
  out.sample("process_start_time_seconds", {}, Math.round(performance.timeOrigin) / 1000);
  const mem = Deno.memoryUsage();
  out.family("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
  out.sample("process_resident_memory_bytes", {}, mem.rss);
  const cpu = cpuSeconds();
  if (cpu !== undefined) {
    out.family(
      "process_cpu_seconds_total",
      "counter",
      "Total user and system CPU time in seconds.",
    );
    out.sample("process_cpu_seconds_total", {}, cpu);
  }
  out.family("synapse_heap_used_bytes", "gauge", "JavaScript heap in use, bytes.");
  out.sample("synapse_heap_used_bytes", {}, mem.heapUsed);
  out.family("synapse_heap_total_bytes", "gauge", "JavaScript heap reserved, bytes.");
  out.sample("synapse_heap_total_bytes", {}, mem.heapTotal);
  out.family(
    "synapse_event_loop_lag_seconds",
    "gauge",
    "Most a 500 ms sampling timer fired late over the last 10 s: how long the event loop was busy.",
  );
  out.sample("synapse_event_loop_lag_seconds", {}, await m.loopLagSeconds());

  // Calls through the dispatcher (every door).
  out.counter(
    "synapse_requests_total",
    "Calls through the ops dispatcher, by operation, door and outcome (ok or the stable error code).",
    m.requests,
  );
  out.histogram(
    "synapse_request_duration_seconds",
    "Time from a call to its outcome, seconds, by operation, queue class and lane (none: it reached no lane).",
    m.requestDuration,
  );
  out.histogram(
    "synapse_request_queue_seconds",
    "Time from admission to the start on the engine (queue_time_ms), seconds, by operation, class and lane.",
    m.requestQueue,
  );
  out.counter(
    "synapse_tokens_total",
    "Tokens read and generated by served calls (real_token_counts plus n_gen), by operation and model.",
    m.tokens,
  );
  out.counter(
    "synapse_http_responses_total",
    "Answers of the HTTP door by status code, its own refusals (bad JSON, wrong method) included.",
    m.httpResponses,
  );

  // Admission (docs/operations.md, "Admission and deadlines").
  const a = ctx.admission;
  out.family(
    "synapse_admission_refusals_total",
    "counter",
    "Requests refused at admission, by reason (queue_full: byte budget; deadline_exceeded).",
  );
  for (const reason of new Set(["queue_full", "deadline_exceeded", ...a.refusals.keys()])) {
    out.sample("synapse_admission_refusals_total", { reason }, a.refusals.get(reason)?.count ?? 0);
  }
  out.family("synapse_admission_in_flight", "gauge", "Admitted requests running, by queue class.");
  for (const [cls, n] of Object.entries(a.inFlight)) {
    out.sample("synapse_admission_in_flight", { class: cls }, n);
  }
  out.family(
    "synapse_admission_in_flight_bytes",
    "gauge",
    "Request text admitted and not yet released, bytes.",
  );
  out.sample("synapse_admission_in_flight_bytes", {}, a.bytesInFlight);
  out.family(
    "synapse_admission_byte_budget_bytes",
    "gauge",
    "Byte budget of queued and in-flight request text (inline.byte_budget), bytes.",
  );
  out.sample("synapse_admission_byte_budget_bytes", {}, a.limits.byteBudget);

  // Lanes (one scheduler each).
  const lanes = source.registry.laneStatus();
  out.family("synapse_lane_queue_depth", "gauge", "Tasks queued on a lane, by queue class.");
  for (const l of lanes) {
    for (const cls of CLASSES) {
      out.sample("synapse_lane_queue_depth", { lane: l.lane, class: cls }, l.depths[cls] ?? 0);
    }
  }
  out.family("synapse_lane_in_flight", "gauge", "Tasks running on a lane's engine slots.");
  for (const l of lanes) out.sample("synapse_lane_in_flight", { lane: l.lane }, l.in_flight);
  out.family("synapse_lane_permits", "gauge", "Engine slots of a lane.");
  for (const l of lanes) out.sample("synapse_lane_permits", { lane: l.lane }, l.permits);
  out.family(
    "synapse_lane_tokens_per_second",
    "gauge",
    "Tokens per second of run time per slot over a lane's recent runs, by class (0 before any).",
  );
  for (const l of lanes) {
    for (const [cls, v] of Object.entries(l.tokens_per_second)) {
      out.sample("synapse_lane_tokens_per_second", { lane: l.lane, class: cls }, v);
    }
  }
  out.family("synapse_engine_calls_in_flight", "gauge", "Engine calls sent and not answered.");
  out.sample("synapse_engine_calls_in_flight", {}, source.registry.engineCallsInFlight);

  // Durable jobs (counted since this instance started).
  const jobs = ctx.jobs.store.counters();
  out.family(
    "synapse_jobs_total",
    "counter",
    "Durable jobs by state change: minted, completed, failed (expiry and inheritance included), inherited.",
  );
  out.sample("synapse_jobs_total", { state: "minted" }, jobs.minted);
  out.sample("synapse_jobs_total", { state: "completed" }, jobs.completed);
  out.sample("synapse_jobs_total", { state: "failed" }, jobs.failed);
  out.sample("synapse_jobs_total", { state: "inherited" }, jobs.inherited);
  out.family("synapse_jobs_open", "gauge", "Durable jobs queued or running (not yet finished).");
  out.sample("synapse_jobs_open", {}, jobs.open);
  out.family("synapse_jobs_running", "gauge", "Durable job runs in flight in this process.");
  out.sample("synapse_jobs_running", {}, ctx.jobs.running.size);

  // Models and their workers.
  const now = ctx.now();
  out.family(
    "synapse_model_state",
    "gauge",
    "1 for the state a request for the model gets now (loading, ready, failed, quarantined, unresponsive), 0 for the others.",
  );
  for (const e of entries) {
    const state = modelStatus(e, now, ctx).state;
    for (const s of MODEL_STATES) {
      out.sample(
        "synapse_model_state",
        { model: e.modelId, task: e.task, engine: e.engine, state: s },
        s === state ? 1 : 0,
      );
    }
  }
  out.family(
    "synapse_lane_certified",
    "gauge",
    "1 while a ready model's lane serves certified (a reference lane, or a passing certificate for this machine profile), 0 while it lacks one.",
  );
  for (const e of entries) {
    if (e.ready === undefined) continue;
    let certified: boolean;
    try {
      certified = isCertified(certificationOf(ctx, e.ready).status);
    } catch {
      continue; // the store cannot be read now: no sample rather than a wrong one
    }
    out.sample(
      "synapse_lane_certified",
      { model: e.modelId, lane_id: laneIdOf(ctx, e.modelId) },
      certified ? 1 : 0,
    );
  }
  out.counter(
    "synapse_model_loads_total",
    "Model load attempts by outcome: ok, retry (failed transiently, retried in the background), failed.",
    m.modelLoads,
  );
  const workers = entries.filter((e) => e.ready?.interactive.engine.health().worker !== undefined);
  for (const e of workers) {
    m.workerCrashes.inc({ model: e.modelId }, 0);
    m.workerRestarts.inc({ model: e.modelId }, 0);
  }
  out.counter(
    "synapse_worker_crashes_total",
    "Crashes of a model's worker process (exits, timeouts, failed starts).",
    m.workerCrashes,
  );
  out.counter(
    "synapse_worker_restarts_total",
    "Starts of a model's worker process after its first.",
    m.workerRestarts,
  );
  out.family(
    "synapse_worker_quarantined",
    "gauge",
    "1 while a model's worker is quarantined (past its crash budget; refusing with probe_required).",
  );
  for (const e of workers) {
    const q = e.ready!.interactive.engine.health().quarantine !== undefined;
    out.sample("synapse_worker_quarantined", { model: e.modelId }, q ? 1 : 0);
  }
  const rss = await Promise.all(workers.map((e) => workerRss(e.ready!.interactive.engine)));
  out.family(
    "synapse_worker_resident_memory_bytes",
    "gauge",
    "Resident memory of a model's worker process, bytes (idle running workers that answered within 1 s).",
  );
  workers.forEach((e, i) => {
    const v = rss[i];
    if (v !== undefined) {
      out.sample("synapse_worker_resident_memory_bytes", { model: e.modelId }, v);
    }
  });
  return out.text();
}

/**
 * A running worker's RSS from its PONG, or undefined (never read, absent). The engine asks only
 * an idle worker, with its usual request timeout, and answers within `WORKER_RSS_WAIT_MS` with
 * the last value read.
 */
async function workerRss(
  engine: { residentBytes?(waitMs?: number): Promise<number | undefined> },
): Promise<number | undefined> {
  return await engine.residentBytes?.(WORKER_RSS_WAIT_MS);
}

/** User plus system CPU time of the process, seconds; undefined where it cannot be read. */
function cpuSeconds(): number | undefined {
  try {
    const u = process.cpuUsage();
    return (u.user + u.system) / 1e6;
  } catch {
    return undefined;
  }
}

/** Writes the text exposition format: each family's HELP and TYPE once, then its samples. */
class Exposition {
  #lines: string[] = [];
  #families = new Set<string>();

  /**
   * Starts a family.
   *
   * @throws {Error} "… This is a bug" for a name written twice or not a valid metric name.
   */
  family(name: string, type: "counter" | "gauge" | "histogram", help: string): void {
    if (this.#families.has(name) || !/^[a-zA-Z_:][a-zA-Z0-9_:]*$/.test(name)) {
      throw new Error(`Cannot write metric family '${name}' twice or by that name. This is a bug`);
    }
    this.#families.add(name);
    this.#lines.push(`# HELP ${name} ${help.replaceAll("\\", "\\\\").replaceAll("\n", "\\n")}`);
    this.#lines.push(`# TYPE ${name} ${type}`);
  }

  /** One sample line. */
  sample(name: string, labels: Readonly<Record<string, string>>, value: number): void {
    const pairs = Object.entries(labels).map(([k, v]) => `${k}="${escapeLabel(v)}"`);
    this.#lines.push(
      `${name}${pairs.length > 0 ? `{${pairs.join(",")}}` : ""} ${formatValue(value)}`,
    );
  }

  /** A counter family: its HELP and TYPE, then one sample per label set of `c`. */
  counter(
    name: string,
    help: string,
    c: { samples(): readonly { labels: Readonly<Record<string, string>>; value: number }[] },
  ): void {
    this.family(name, "counter", help);
    for (const s of c.samples()) this.sample(name, s.labels, s.value);
  }

  /** A histogram family: `_bucket` lines (cumulative, ending `le="+Inf"`), `_sum`, `_count`. */
  histogram(
    name: string,
    help: string,
    h: { buckets: readonly number[]; samples(): readonly HistogramLike[] },
  ): void {
    this.family(name, "histogram", help);
    for (const s of h.samples()) {
      h.buckets.forEach((le, i) => {
        this.sample(`${name}_bucket`, { ...s.labels, le: formatValue(le) }, s.cumulative[i]!);
      });
      this.sample(`${name}_bucket`, { ...s.labels, le: "+Inf" }, s.count);
      this.sample(`${name}_sum`, s.labels, s.sum);
      this.sample(`${name}_count`, s.labels, s.count);
    }
  }

  /** The text, one line each, ending with a newline. */
  text(): string {
    return this.#lines.join("\n") + "\n";
  }
}

interface HistogramLike {
  labels: Readonly<Record<string, string>>;
  cumulative: readonly number[];
  count: number;
  sum: number;
}

function escapeLabel(v: string): string {
  return v.replaceAll("\\", "\\\\").replaceAll('"', '\\"').replaceAll("\n", "\\n");
}

function formatValue(v: number): string {
  if (Number.isNaN(v)) return "NaN";
  if (v === Infinity) return "+Inf";
  if (v === -Infinity) return "-Inf";
  return String(v);
}
