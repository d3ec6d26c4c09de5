/**
 * `models.list` (contract.md §1): every model with its state, fingerprint and limits.
 *
 * @module
 */
import { AdmissionStatusParams, ModelsListParams, parseParams } from "../contract/schemas.ts";
import type { LoadedModel } from "../models/model_registry.ts";
import { ORT_MICRO_BATCH } from "../models/model_registry.ts";
import type { OpContext } from "./context.ts";
import type { InlineConfig } from "../config/config.ts";

/** One row of `models.list`. */
export interface ModelRow {
  model_id: string;
  state: "loading" | "ready" | "failed";
  task: "embed" | "rerank" | "generate";
  engine: string;
  fingerprints: string[];
  numeric_profile_id?: string;
  recommended_batch: { rows: number; token_budget: number };
  max_tokens: number;
  max_tokens_source: "runtime_bucket";
  dims?: number;
  dtype: string;
  device_class: "cpu" | "cuda" | "metal" | "vulkan";
  certified: false;
  /** `quarantined` when the model's worker broke its crash budget. */
  serving_admission?: "serving" | "quarantined";
  /** Why it is quarantined: `{reason, message, since_ms, crashes}`. */
  serving_admission_reason?: Record<string, unknown>;
  /** Worker supervision of a worker-backed model. */
  worker?: Record<string, unknown>;
  pooling?: string;
  normalize?: boolean;
  /** Present and true for generated test fixtures. */
  test_model?: true;
  warm_load_cost_hint_ms?: number;
  /** The load failure, when state is `failed`. */
  error?: { code: string; message: string };
}

/** `models.list` payload. */
export interface ModelsListResult {
  module_generation: number;
  table_epoch: number;
  models: ModelRow[];
  alias_rows: unknown[];
}

/** Builds one row. */
export function modelRow(m: LoadedModel): ModelRow {
  const row: ModelRow = {
    model_id: m.modelId,
    state: m.state,
    task: m.task,
    engine: m.engine,
    fingerprints: m.fingerprint ? [m.fingerprint] : [],
    recommended_batch: m.own
      ? { rows: 1, token_budget: m.maxTokens }
      : { rows: ORT_MICRO_BATCH.maxSequences, token_budget: ORT_MICRO_BATCH.maxMicroBatchTokens },
    max_tokens: m.maxTokens,
    max_tokens_source: "runtime_bucket",
    dtype: typeof m.profile?.dtype === "string" ? m.profile.dtype : "f32",
    device_class: deviceClass(m),
    certified: false,
  };
  if (m.own) {
    const st = m.own.llama.status();
    row.worker = {
      state: st.state,
      generation: st.generation,
      recent_crashes: st.recent_crashes,
      total_crashes: st.total_crashes,
      ...(st.pid === undefined ? {} : { pid: st.pid }),
      ...(st.last_crash ? { last_crash: st.last_crash } : {}),
    };
    row.serving_admission = st.quarantine ? "quarantined" : "serving";
    if (st.quarantine) row.serving_admission_reason = { ...st.quarantine };
  }
  if (m.numericProfileId) row.numeric_profile_id = m.numericProfileId;
  if (m.state === "ready") row.dims = m.dims;
  if (m.task === "embed") {
    // The profile's pooling is what the engine does (a GGUF pools as its metadata says).
    const p = m.profile?.pooling;
    row.pooling = typeof p === "string" ? p : m.source.pooling;
    row.normalize = m.profile ? m.profile.normalization === "l2" : m.source.normalize;
  }
  if (m.testModel) row.test_model = true;
  if (m.coldLoadMs !== undefined) row.warm_load_cost_hint_ms = Math.round(m.coldLoadMs);
  if (m.error) row.error = { code: m.error.code, message: m.error.message };
  return row;
}

function deviceClass(m: LoadedModel): ModelRow["device_class"] {
  const backend = m.engineIdentity?.build_flags?.backend;
  return backend === "cuda" || backend === "metal" || backend === "vulkan" ? backend : "cpu";
}

/** `models.list {}`. @throws {SynapseError} channel `invalid_request` for any param. */
export function modelsList(ctx: OpContext, rawParams: unknown): ModelsListResult {
  parseParams("models.list", ModelsListParams, rawParams);
  return {
    module_generation: ctx.moduleGeneration,
    table_epoch: ctx.tableEpoch(),
    models: ctx.registry.list().map(modelRow),
    alias_rows: [],
  };
}

/** `admission.status` payload (what exists so far; all from cached state, no engine call). */
export interface AdmissionStatusResult {
  module_generation: number;
  machine_profile_hash: string;
  knob: string;
  queue_depths: { interactive: number; bulk: number; control: number };
  execution: {
    waiters: number;
    in_flight: number;
    engine_calls_in_flight: number;
    wait_p50_ms: number;
    wait_p95_ms: number;
  };
  bytes_in_flight: number;
  refusals: Record<string, { count: number; last_at_ms: number }>;
  inline: InlineConfig;
  jobs_minted: number;
  jobs_completed: number;
  jobs_failed: number;
  jobs_inherited: number;
  jobs_open: number;
  jobs: Record<string, number>;
  lanes: Record<string, unknown>[];
}

/** `admission.status {}`. @throws {SynapseError} channel `invalid_request` for any param. */
export function admissionStatus(ctx: OpContext, rawParams: unknown): AdmissionStatusResult {
  parseParams("admission.status", AdmissionStatusParams, rawParams);
  const a = ctx.admission;
  const inFlight = a.inFlight;
  const lane = ctx.registry.lane;
  const inter = ctx.interactive.stats();
  const bulk = ctx.jobs.scheduler.stats();
  const counters = ctx.jobs.store.counters();
  const laneRow = (name: string, s: typeof inter, threads: number) => ({
    lane: name,
    engine: "ort",
    intra_op_threads: threads,
    permits: s.permits,
    in_flight: s.inFlight,
    waiters: s.waiters,
    depths: s.depths,
    meeting_deadlines: {
      interactive: s.classes.interactive.meetingDeadlines,
      bulk: s.classes.bulk.meetingDeadlines,
    },
    start_delay_p50_ms: {
      interactive: s.classes.interactive.startDelayP50Ms,
      bulk: s.classes.bulk.startDelayP50Ms,
    },
    tokens_per_second: {
      interactive: s.classes.interactive.tokensPerSecond,
      bulk: s.classes.bulk.tokensPerSecond,
    },
    models: ctx.registry.list().filter((m) => m.engine === "ort").map((m) => m.modelId),
  });
  const ownLanes = ctx.registry.list().filter((m) => m.own !== undefined).map((m) => {
    const s = m.own!.scheduler.stats();
    const w = m.own!.llama.status();
    return {
      lane: `llama-${m.modelId}`,
      engine: "llama",
      task: m.task,
      permits: s.permits,
      in_flight: s.inFlight,
      waiters: s.waiters,
      depths: s.depths,
      start_delay_p50_ms: {
        interactive: s.classes.interactive.startDelayP50Ms,
        bulk: s.classes.bulk.startDelayP50Ms,
        decode: s.classes.decode.startDelayP50Ms,
      },
      worker: w,
      serving_admission: w.quarantine ? "quarantined" : "serving",
      ...(w.quarantine ? { serving_admission_reason: w.quarantine } : {}),
      models: [m.modelId],
    };
  });
  return {
    module_generation: ctx.moduleGeneration,
    machine_profile_hash: ctx.machineProfileHash,
    knob: ctx.config.knob,
    queue_depths: {
      interactive: inter.depths.interactive + bulk.depths.interactive,
      bulk: inter.depths.bulk + bulk.depths.bulk,
      control: inter.depths.control + bulk.depths.control,
    },
    execution: {
      waiters: inter.waiters + bulk.waiters,
      in_flight: inFlight.interactive + inFlight.bulk + inFlight.control + inFlight.decode,
      engine_calls_in_flight: lane.inFlight + ctx.registry.bulkLane.inFlight,
      wait_p50_ms: inter.classes.interactive.startDelayP50Ms,
      wait_p95_ms: inter.classes.interactive.startDelayP95Ms,
    },
    bytes_in_flight: a.bytesInFlight,
    refusals: Object.fromEntries(a.refusals),
    inline: { ...ctx.config.inline },
    jobs_minted: counters.minted,
    jobs_completed: counters.completed,
    jobs_failed: counters.failed,
    jobs_inherited: counters.inherited,
    jobs_open: counters.open,
    jobs: { ...ctx.config.jobs },
    lanes: [
      laneRow("ort-interactive", inter, lane.intraOpThreads),
      laneRow("ort-bulk", bulk, ctx.registry.bulkLane.intraOpThreads),
      ...ownLanes,
    ],
  };
}
