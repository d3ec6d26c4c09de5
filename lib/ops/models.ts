/**
 * `models.list` (contract.md §1): every model with its state, fingerprint and limits. A row's
 * `state`, `state_reason` and `serving_admission` come from {@link modelStatus}, the one status
 * function `/health` prints too.
 *
 * @module
 */
import { AdmissionStatusParams, ModelsListParams, parseParams } from "../contract/schemas.ts";
import type { ModelEntry } from "../models/model.ts";
import type { LaneStatusRow } from "../models/lane_status.ts";
import type { OpContext } from "./context.ts";
import { servedByTask } from "./_resolve_model.ts";
import type { InlineConfig } from "../config/types.ts";
import { modelStatus } from "./status.ts";
import type { ModelServingState, StateReason } from "./status.ts";

/** One row of `models.list`. */
export interface ModelRow {
  model_id: string;
  /** What a request for the model gets now ({@link modelStatus}). */
  state: ModelServingState;
  /** Why the model is not `ready`: `{reason, code?, message, details?}`. */
  state_reason?: StateReason;
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
  /**
   * `quarantined` when the model's worker broke its crash budget, `unresponsive` when it is busy
   * past its request timeout; `serving` otherwise (worker-backed models).
   */
  serving_admission?: "serving" | "quarantined" | "unresponsive";
  /** Why: `{reason: "worker_quarantined", message, since_ms, crashes}` or `{reason: "worker_busy", busy_ms, threshold_ms}`. */
  serving_admission_reason?: Record<string, unknown>;
  /** Worker supervision of a worker-backed model. */
  worker?: Record<string, unknown>;
  pooling?: string;
  normalize?: boolean;
  /** Present and true for generated test fixtures. */
  test_model?: true;
  /** The model id its source declares as its reference lane (`reference_model`), when any. */
  reference_model?: string;
  /**
   * `disabled` when the probe found the query path differs from the batch path: the model's
   * interactive work then runs on its bulk runtime (the batch path's numbers).
   */
  query_path: "enabled" | "disabled";
  warm_load_cost_hint_ms?: number;
  /** Lanes serving the model (`<scheduler>:<class>`), e.g. `ort-interactive`, `llama-<id>`. */
  lanes: string[];
  /** When a request last ended on the model, ms since the epoch; null before any. */
  last_used_ms: number | null;
  /** When the model's load started, ms since the epoch. */
  loaded_at_ms: number;
  /** Where the model comes from: `config` (preload_models or the test models), `runtime` (model.load), `catalog` (models.download). */
  origin: "config" | "runtime" | "catalog";
  /** Catalog models: the catalog id and the lane (`<catalog_id>-<backend>`, contract §1). */
  catalog_id?: string;
  lane_id?: string;
  /** Bytes of the model file on disk (what `ck-synapse ps` prints as SIZE). */
  artifact_bytes?: number;
  /** Resident memory of the model's worker process, bytes (worker-backed models, Linux). */
  worker_rss_bytes?: number;
  /** The load failure, when state is `failed` (or waiting for a background retry). */
  error?: { code: string; message: string; details?: Record<string, unknown> };
}

/** `models.list` payload. */
export interface ModelsListResult {
  module_generation: number;
  table_epoch: number;
  models: ModelRow[];
  alias_rows: unknown[];
  /** The model that serves each task when a request names none; null when none does. */
  served_by: Record<"embed" | "rerank" | "generate", string | null>;
  /**
   * True while `preload_models` lists no model, so the two generated test models serve; false
   * when the config lists models (the test models are then off, whatever tasks are left bare).
   */
  default_test_models: boolean;
}

/**
 * Builds one row.
 *
 * @param origin Where the model comes from (the ops layer knows run-time loads). @default "config"
 */
export function modelRow(
  m: ModelEntry,
  now: number = Date.now(),
  origin: ModelRow["origin"] = "config",
): ModelRow {
  const r = m.ready;
  const status = modelStatus(m, now);
  const used = [r?.interactive.lastUsedMs, r?.bulk.lastUsedMs].filter((t) => t !== undefined);
  const row: ModelRow = {
    model_id: m.modelId,
    state: status.state,
    ...(status.state_reason === undefined ? {} : { state_reason: status.state_reason }),
    task: m.task,
    engine: m.engine,
    fingerprints: r ? [r.fingerprint] : [],
    // What one engine call of this model holds (the lane cuts micro-batches to it).
    recommended_batch: r
      ? {
        rows: r.interactive.engine.limits.maxSequences,
        token_budget: r.interactive.engine.limits.maxMicroBatchTokens,
      }
      : { rows: 1, token_budget: m.source.maxTokens ?? 512 },
    max_tokens: r?.maxTokens ?? m.source.maxTokens ?? 512,
    max_tokens_source: "runtime_bucket",
    dtype: typeof r?.profile.dtype === "string" ? r.profile.dtype : "f32",
    device_class: deviceClass(m),
    certified: false,
    lanes: r ? [...new Set([r.interactive.name, r.bulk.name])] : [],
    last_used_ms: used.length > 0 ? Math.max(...used) : null,
    loaded_at_ms: m.loadStartedMs,
    origin,
    query_path: m.queryPath ?? "enabled",
  };
  if (m.source.referenceModel !== undefined) row.reference_model = m.source.referenceModel;
  try {
    row.artifact_bytes = Deno.statSync(m.source.modelPath).size;
  } catch { /* not readable: no size */ }

  const health = r?.interactive.engine.health();
  if (health?.worker !== undefined) row.worker = { ...health.worker };
  if (status.serving_admission !== undefined) row.serving_admission = status.serving_admission;
  if (status.serving_admission_reason !== undefined) {
    row.serving_admission_reason = status.serving_admission_reason;
  }
  if (r) row.numeric_profile_id = r.numericProfileId;
  if (r) row.dims = r.dims;
  if (m.task === "embed") {
    // The profile's pooling is what the engine does (a GGUF pools as its metadata says).
    const p = r?.profile.pooling;
    row.pooling = typeof p === "string" ? p : m.source.pooling;
    row.normalize = r ? r.profile.normalization === "l2" : m.source.normalize;
  }
  if (m.testModel) row.test_model = true;
  if (m.coldLoadMs !== undefined) row.warm_load_cost_hint_ms = Math.round(m.coldLoadMs);
  if (m.error) {
    row.error = {
      code: m.error.code,
      message: m.error.message,
      ...(m.error.details === undefined ? {} : { details: { ...m.error.details } }),
    };
  }
  return row;
}

function deviceClass(m: ModelEntry): ModelRow["device_class"] {
  const backend = m.ready?.identity.build_flags?.backend;
  return backend === "cuda" || backend === "metal" || backend === "vulkan" ? backend : "cpu";
}

/**
 * `models.list {}`: waits at most a second for each worker's PONG (its RSS).
 *
 * @throws {SynapseError} channel `invalid_request` for any param. */
export async function modelsList(
  ctx: OpContext,
  rawParams: unknown,
): Promise<ModelsListResult> {
  parseParams("models.list", ModelsListParams, rawParams);
  const entries = ctx.registry.list();
  // Worker processes report their own RSS (a PONG); a busy or absent worker simply has none.
  const rss = await Promise.all(
    entries.map((m) => m.ready?.interactive.engine.residentBytes?.() ?? undefined),
  );
  return {
    module_generation: ctx.moduleGeneration,
    table_epoch: ctx.tableEpoch(),
    models: entries.map((m, i) => {
      const spec = ctx.loads?.spec(m.modelId);
      const row = modelRow(m, ctx.now(), spec?.origin ?? "config");
      if (spec?.catalog_id !== undefined) row.catalog_id = spec.catalog_id;
      if (spec?.lane_id !== undefined) row.lane_id = spec.lane_id;
      if (rss[i] !== undefined) row.worker_rss_bytes = rss[i];
      return row;
    }),
    alias_rows: [],
    served_by: servedByTask(ctx),
    default_test_models: ctx.config.preload_models.length === 0,
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
  const lanes = ctx.registry.laneStatus();
  // A worker lane's admission is its model's, from the one status function (as /health and
  // models.list print it), never worked out a second time here.
  const entries = new Map(ctx.registry.list().map((m) => [m.modelId, m]));
  for (const row of lanes) {
    if (row.worker === undefined || row.models.length !== 1) continue;
    const entry = entries.get(row.models[0]!);
    if (entry === undefined) continue;
    const status = modelStatus(entry);
    if (status.serving_admission !== undefined) row.serving_admission = status.serving_admission;
    if (status.serving_admission_reason !== undefined) {
      row.serving_admission_reason = status.serving_admission_reason;
    }
  }
  const counters = ctx.jobs.store.counters();
  const depth = (cls: "interactive" | "bulk" | "control"): number =>
    lanes.reduce((n, l) => n + l.depths[cls], 0);
  const inter: LaneStatusRow | undefined = lanes.find((l) => l.lane === "ort-interactive");
  return {
    module_generation: ctx.moduleGeneration,
    machine_profile_hash: ctx.machineProfileHash,
    knob: ctx.config.knob,
    queue_depths: {
      interactive: depth("interactive"),
      bulk: depth("bulk"),
      control: depth("control"),
    },
    execution: {
      waiters: lanes.reduce((n, l) => n + l.waiters, 0),
      in_flight: inFlight.interactive + inFlight.bulk + inFlight.control + inFlight.decode,
      engine_calls_in_flight: ctx.registry.engineCallsInFlight,
      wait_p50_ms: inter?.start_delay_p50_ms.interactive ?? 0,
      wait_p95_ms: inter?.start_delay_p95_ms.interactive ?? 0,
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
    lanes: lanes.map((l) => ({ ...l })),
  };
}
