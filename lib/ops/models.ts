/**
 * `models.list` (docs/operations.md "models.list"): every model with its state, fingerprint and
 * limits. A row's `state`, `state_reason` and `serving_admission` come from {@link modelStatus},
 * the one status function `/health` prints too.
 *
 * @module
 */
import { AdmissionStatusParams, ModelsListParams, parseParams } from "../contract/schemas.ts";
import type { ModelEntry } from "../models/model.ts";
import type { PromptTable } from "../models/prompts.ts";
import type { LaneStatusRow } from "../models/lane_status.ts";
import type { SelfCheckView } from "../models/model_loads.ts";
import type { OpContext } from "./context.ts";
import type { AliasRow } from "../identity/aliases.ts";
import { matryoshkaVariants } from "../models/matryoshka.ts";
import { servedByTask } from "./_resolve_model.ts";
import type { InlineConfig } from "../config/types.ts";
import { modelStatus } from "./status.ts";
import {
  blockingReasonOf,
  type CertificationContext,
  certificationOf,
  type CertificationView,
  isCertified,
  laneCertificationClass,
  laneIdOf,
  startupKnobAssignment,
} from "../probe/certification.ts";
import type {
  BlockingReason,
  CertificationStatus,
  ProbeCheck,
  ShapeClass,
} from "../probe/types.ts";

/** `models.list` row `certification`: what serving admission says of the model's lane. */
export interface ModelCertification {
  /** `reference`, `certified`, `probe_required`, `certification_stale`, `certification_failed`. */
  status: CertificationStatus;
  /** The lane needs a certificate to serve in `certification: "require"` mode. */
  required: boolean;
  /** The machine profile the status is judged for (this instance's). */
  machine_profile_hash: string;
  /** When the row the status rests on was probed, unix ms; null without one. */
  probed_at_ms: number | null;
  /** The checks of that row. */
  checks: ProbeCheck[];
  /** Checks the probe could not run, and why (e.g. `reference_parity: no_reference_lane`). */
  checks_lacking: { id: string; reason: string }[];
  /** `disabled` when the probe found the query path off the batch path. */
  query_path: "enabled" | "disabled";
  /**
   * Present when the probe found the lane not shape-invariant: its shape classes, each held to
   * the parity bar on its own (`ShapeClass`, lib/probe/types.ts).
   */
  shape_classes?: ShapeClass[];
  /** Why the lane refuses (or would, in `require` mode); absent when it serves certified. */
  blocking_reason?: BlockingReason;
  /** `certification_stale`: which facts changed. */
  stale_facts?: string[];
}
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
  /**
   * The model's fingerprint, then those of its Matryoshka widths (`matryoshka`), narrowest
   * first: every space a request can be served in.
   */
  fingerprints: string[];
  /**
   * Embed models that declare `matryoshka_dims`: each width below the full one with the
   * fingerprint and numeric profile id of its derived space (ask for it with `dimensions`).
   */
  matryoshka?: { dims: number; fingerprint: string; numeric_profile_id: string }[];
  /** The declared `matryoshka_dims` (as the source gives them), when any. */
  matryoshka_dims?: number[];
  numeric_profile_id?: string;
  recommended_batch: { rows: number; token_budget: number };
  max_tokens: number;
  max_tokens_source: "runtime_bucket";
  dims?: number;
  dtype: string;
  /**
   * The quantization the lane serves (its profile's `quant`): the dtype for a float lane, `int8`
   * for a dynamically quantized ONNX model, `general.file_type` of a GGUF (`q8_0`, …); absent
   * while not loaded.
   */
  quant?: string;
  device_class: "cpu" | "cuda" | "metal" | "vulkan";
  /** Answers are `provenance.certified: true` (reference or certified lane); false while not loaded. */
  certified: boolean;
  /** Serving admission of the lane (ready models). */
  certification?: ModelCertification;
  /**
   * `quarantined` when the model's worker broke its crash budget, `unresponsive` when it is busy
   * past its request timeout; `serving` otherwise (worker-backed models).
   */
  serving_admission?: "serving" | "quarantined" | "unresponsive" | "not_certified";
  /** Why: `{reason: "worker_quarantined", message, since_ms, crashes}` or `{reason: "worker_busy", busy_ms, threshold_ms}`. */
  serving_admission_reason?: Record<string, unknown>;
  /** Worker supervision of a worker-backed model. */
  worker?: Record<string, unknown>;
  pooling?: string;
  normalize?: boolean;
  /**
   * A ready embed model's prompt table (`{prompts, default_prompt_name?}`; lib/models/prompts.ts):
   * the names `input_type` / `prompt_name` select from. Absent: no table.
   */
  prompts?: PromptTable;
  /** Present and true for generated test fixtures. */
  test_model?: true;
  /** The model id its source declares as its reference lane (`reference_model`), when any. */
  reference_model?: string;
  /**
   * `disabled` when the probe found the query path differs from the batch path: the model's
   * interactive work then runs on its bulk runtime (the batch path's numbers).
   */
  query_path: "enabled" | "disabled";
  /**
   * Present when the probe found the model's lane not shape-invariant: the most rows one engine
   * call holds (its calls stay in the shape class of a row alone; `certification.shape_classes`).
   */
  shape_cap?: number;
  warm_load_cost_hint_ms?: number;
  /** Lanes serving the model (`<scheduler>:<class>`), e.g. `ort-interactive`, `llama-<id>`. */
  lanes: string[];
  /** When a request last ended on the model, ms since the epoch; null before any. */
  last_used_ms: number | null;
  /** When the model's load started, ms since the epoch. */
  loaded_at_ms: number;
  /** Where the model comes from: `config` (preload_models or the test models), `runtime` (model.load), `catalog` (models.download). */
  origin: "config" | "runtime" | "catalog";
  /** Catalog models: the catalog id and the lane (`<catalog_id>-<backend>`). */
  catalog_id?: string;
  lane_id?: string;
  /** Catalog models: the lane's catalog self-check (docs/internals.md §10). */
  self_check?: SelfCheckView;
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
  /** The alias-table epoch `alias_rows` were read at. */
  table_epoch: number;
  models: ModelRow[];
  /**
   * Every alias row, retracted ones included (`valid_to_ms` set), ordered by
   * `(fingerprint_a, fingerprint_b, valid_from_ms)` (lib/identity/aliases.ts).
   */
  alias_rows: AliasRow[];
  /**
   * Config `model_aliases` (docs/config.md "Model aliases"): each name a request may send for
   * a model, with the model id it resolves to and that model's task (null while no model has
   * that id: a catalog model not pulled yet). A name a model now has as its own id (a real id
   * wins) is left out. In the table's order.
   */
  model_aliases: ModelAliasRow[];
  /** The model that serves each task when a request names none; null when none does. */
  served_by: Record<"embed" | "rerank" | "generate", string | null>;
  /**
   * True while `preload_models` lists no model, so the two generated test models serve; false
   * when the config lists models (the test models are then off, whatever tasks are left bare).
   */
  default_test_models: boolean;
}

/** One `models.list` `model_aliases` row. */
export interface ModelAliasRow {
  /** The name a request may send (`model` / `model_id`). */
  model_alias: string;
  /** The model it resolves to. */
  model_id: string;
  /** That model's task; null while no model has the id. */
  task: "embed" | "rerank" | "generate" | null;
}

/**
 * Builds one row.
 *
 * `recommended_batch` is the probe's knob assignment for this machine, numeric profile and knob
 * when the store held one at startup, else what one engine call of the model holds.
 *
 * @param origin Where the model comes from (the ops layer knows run-time loads). @default "config"
 * @param certification Module context of serving admission: fills `certified`,
 *   `certification` and the knob assignment's `recommended_batch`.
 */
export function modelRow(
  m: ModelEntry,
  now: number = Date.now(),
  origin: ModelRow["origin"] = "config",
  certification?: CertificationContext,
): ModelRow {
  const r = m.ready;
  const status = modelStatus(m, now, certification);
  const used = [r?.interactive.lastUsedMs, r?.bulk.lastUsedMs].filter((t) => t !== undefined);
  const row: ModelRow = {
    model_id: m.modelId,
    state: status.state,
    ...(status.state_reason === undefined ? {} : { state_reason: status.state_reason }),
    task: m.task,
    // The ffi lane serves a GGUF like the llama engine, through the native shim: named apart.
    engine: m.source.llamaLane === "ffi" ? "ffi" : m.engine,
    fingerprints: r ? [r.fingerprint, ...matryoshkaVariants(r).map((v) => v.fingerprint)] : [],
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
    ...(typeof r?.profile.quant === "string" ? { quant: r.profile.quant } : {}),
    device_class: deviceClass(m),
    certified: false,
    lanes: r ? [...new Set([r.interactive.name, r.bulk.name])] : [],
    last_used_ms: used.length > 0 ? Math.max(...used) : null,
    loaded_at_ms: m.loadStartedMs,
    origin,
    query_path: m.queryPath ?? "enabled",
    ...(m.shapeCap === undefined ? {} : { shape_cap: m.shapeCap }),
  };
  if (m.source.referenceModel !== undefined) row.reference_model = m.source.referenceModel;
  if (m.source.matryoshkaDims !== undefined) row.matryoshka_dims = [...m.source.matryoshkaDims];
  if (r?.matryoshkaDims !== undefined) {
    row.matryoshka = matryoshkaVariants(r).map((v) => ({
      dims: v.dims,
      fingerprint: v.fingerprint,
      numeric_profile_id: v.numericProfileId,
    }));
  }
  try {
    row.artifact_bytes = Deno.statSync(m.source.modelPath).size;
  } catch { /* not readable: no size */ }

  const health = r?.interactive.engine.health();
  if (health?.worker !== undefined) row.worker = { ...health.worker };
  if (status.serving_admission !== undefined) row.serving_admission = status.serving_admission;
  if (status.serving_admission_reason !== undefined) {
    row.serving_admission_reason = status.serving_admission_reason;
  }
  if (r && certification !== undefined) {
    const view = certificationOf(certification, r);
    row.certified = isCertified(view.status);
    row.certification = certificationRow(certification, m, view);
    const knob = startupKnobAssignment(certification, r);
    if (knob !== undefined) row.recommended_batch = { ...knob.recommended_batch };
  }
  if (r) row.numeric_profile_id = r.numericProfileId;
  if (r) row.dims = r.dims;
  if (m.task === "embed") {
    // The profile's pooling is what the engine does (a GGUF pools as its metadata says).
    const p = r?.profile.pooling;
    row.pooling = typeof p === "string" ? p : m.source.pooling;
    row.normalize = r ? r.profile.normalization === "l2" : m.source.normalize;
    if (r?.prompts !== undefined) row.prompts = r.prompts;
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

function certificationRow(
  ctx: CertificationContext,
  m: ModelEntry,
  view: CertificationView,
): ModelCertification {
  const ev = view.row?.evidence;
  const out: ModelCertification = {
    status: view.status,
    required: laneCertificationClass(m) === "certification_required",
    machine_profile_hash: ctx.machineProfileHash,
    probed_at_ms: view.row?.probed_at_ms ?? null,
    checks: ev?.checks.map((c) => ({ ...c })) ?? [],
    checks_lacking: ev?.checks_lacking.map((c) => ({ ...c })) ?? [],
    query_path: ev?.query_path ?? "enabled",
  };
  if (ev?.shape_classes !== undefined) {
    out.shape_classes = ev.shape_classes.map((k) => ({
      ...k,
      shapes: [...k.shapes],
      ...(k.parity === undefined ? {} : { parity: { ...k.parity } }),
    }));
  }
  const blocking = blockingReasonOf(view);
  if (blocking !== undefined) out.blocking_reason = blocking;
  if (view.stale_facts !== undefined) out.stale_facts = [...view.stale_facts];
  return out;
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
  const aliases = ctx.aliases.snapshot();
  return {
    module_generation: ctx.moduleGeneration,
    table_epoch: aliases.table_epoch,
    models: entries.map((m, i) => {
      const spec = ctx.loads?.spec(m.modelId);
      const row = modelRow(m, ctx.now(), spec?.origin ?? "config", ctx);
      if (spec?.catalog_id !== undefined) row.catalog_id = spec.catalog_id;
      if (spec?.lane_id !== undefined) row.lane_id = spec.lane_id;
      if (spec?.lane_id !== undefined && ctx.loads?.selfCheck !== undefined) {
        row.self_check = ctx.loads.selfCheck.view(spec.lane_id);
      }
      if (rss[i] !== undefined) row.worker_rss_bytes = rss[i];
      return row;
    }),
    alias_rows: aliases.rows,
    model_aliases: Object.entries(ctx.config.model_aliases)
      .filter(([name]) => !entries.some((m) => m.modelId === name))
      .map(([name, target]) => ({
        model_alias: name,
        model_id: target,
        task: entries.find((m) => m.modelId === target)?.task ?? null,
      })),
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
  /** Lane ids (`<catalog_id>-<backend>`, else the model id) of every ready model. */
  catalog_lanes: string[];
  /** Of those, the lanes that serve certified (reference lanes and lanes holding a passing row). */
  certified_lanes: string[];
  /** Lanes that need a certificate whose rows are for another machine, numeric profile or runtime config. */
  certification_stale: string[];
  /**
   * Lanes whose knob assignment (recommended batch, execution estimate) for this machine
   * profile, numeric profile and knob is missing: lanes that need a certificate, and reference
   * lanes probed on another machine.
   */
  performance_stale: string[];
  /**
   * Scheduler rows; each has `certification[]` `{model_id, lane_id, status, certified, required,
   * blocking_reason?}` for its ready models, and a row serving one model also `lane_id`,
   * `certification_status` and `certified`.
   */
  lanes: Record<string, unknown>[];
}

/** One model's certification in `admission.status` `lanes[].certification[]`. */
interface LaneCertification {
  model_id: string;
  lane_id: string;
  status: CertificationStatus;
  certified: boolean;
  required: boolean;
  blocking_reason?: BlockingReason;
}

function laneCertifications(ctx: OpContext): Map<string, LaneCertification> {
  const out = new Map<string, LaneCertification>();
  for (const m of ctx.registry.list()) {
    if (m.ready === undefined) continue;
    let view: CertificationView;
    try {
      view = certificationOf(ctx, m.ready);
    } catch {
      continue; // unreadable rows: the store's own error answers the requests
    }
    const blocking = blockingReasonOf(view);
    out.set(m.modelId, {
      model_id: m.modelId,
      lane_id: laneIdOf(ctx, m.modelId),
      status: view.status,
      certified: isCertified(view.status),
      required: laneCertificationClass(m) === "certification_required",
      ...(blocking === undefined ? {} : { blocking_reason: blocking }),
    });
  }
  return out;
}

function performanceStale(ctx: OpContext, certs: Map<string, LaneCertification>): string[] {
  const out: string[] = [];
  for (const m of ctx.registry.list()) {
    const c = certs.get(m.modelId);
    if (m.ready === undefined || c === undefined) continue;
    if (startupKnobAssignment(ctx, m.ready) !== undefined) continue;
    let probed = c.required;
    if (!probed) {
      try {
        probed = ctx.certifications.rowsForLane(c.lane_id).length > 0;
      } catch { /* unreadable: not judged */ }
    }
    if (probed) out.push(c.lane_id);
  }
  return out;
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
  const certs = laneCertifications(ctx);
  for (const row of lanes as (LaneStatusRow & Record<string, unknown>)[]) {
    const mine = row.models.map((id) => certs.get(id)).filter((c) => c !== undefined);
    row.certification = mine;
    if (row.models.length === 1 && mine.length === 1) {
      row.lane_id = mine[0]!.lane_id;
      row.certification_status = mine[0]!.status;
      row.certified = mine[0]!.certified;
    }
  }
  const all = [...certs.values()];
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
    catalog_lanes: all.map((c) => c.lane_id),
    certified_lanes: all.filter((c) => c.certified).map((c) => c.lane_id),
    certification_stale: all.filter((c) => c.status === "certification_stale").map((c) =>
      c.lane_id
    ),
    performance_stale: performanceStale(ctx, certs),
    lanes: lanes.map((l) => ({ ...l })),
  };
}
