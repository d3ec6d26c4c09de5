/**
 * The probe operations (docs/operations.md "probe.start", "probe.status", "probe.report";
 * docs/internals.md §12): `probe.start` certifies lanes as a
 * durable job, `probe.status` follows it lane by lane, `probe.report` says what each loaded lane
 * needs, what it has and whether it serves.
 *
 * ## The job
 *
 * `probe.start {models?, request_key?, deadline_ms?}` is explicit only (nothing ever starts a
 * probe by itself). It names the models to probe (absent or empty: every loaded model whose lane
 * needs a certificate; a reference model named explicitly is probed too, its row recorded though
 * it needs none) and mints a job of kind `probe.start` in the {@link JobStore}, bound by the
 * request digest `sha256(JCS {op: "probe.start", models: <sorted ids>})`: the same key with the
 * same models attaches to the job, another set of models under a retained key is
 * `idempotency_conflict`.
 *
 * Without a `request_key` the key is `probe.start:<sorted ids joined by ','>:<machine profile
 * hash, 16 hex>:<facts, 16 hex>`, the facts being sha256 (JCS) of each model's numeric profile id
 * and fingerprint and the thread knob: the same probe of the same lanes on the same machine
 * attaches to the job that ran it (a retry never probes twice; its rows are in the store), and a
 * change that makes the rows stale (an OS or engine upgrade, `SYNAPSE_OS_BUILD_OVERRIDE`, another
 * model file, another knob) makes a new key, so a new job. A default-key job that failed (a
 * restart, its deadline, an engine crash) is never attached to: the next call mints a fresh job
 * (under `<key>:retry-<failed job id>`). An explicit key follows the plain job rules.
 *
 * The job runs its lanes one after the other, each with the model's control-class lanes
 * (`registry.controlLanes(id)`: the probe's work is queued under each model's own scheduler, in
 * the class picked first, never on a side channel), records each lane's result with
 * {@link CertificationStore.putProbeResult} (with this machine's profile hash, the lane's runtime
 * config digest, the OS build, the engine identities, the model digest, the module generation and
 * the job id), disables the hot path of a lane whose query path differed from its batch path
 * (`registry.setQueryPath(id, "disabled")`), and commits one page per lane (its status, failed
 * checks, checks it lacked, duration), which is what `probe.status` reads back in any later
 * process. A lane whose probe throws (an engine crash) is `failed` with its error and the job goes
 * on; the job ends `done` whether its lanes passed or failed their checks (that is a result), or
 * `failed_transient` `deadline_exceeded` past `deadline_ms`, or as any job does on a kill -9
 * (`module_restarted` at the next boot).
 *
 * @module
 */
import { sleep } from "../async.ts";
import { SynapseError } from "../contract/errors.ts";
import type { WireError } from "../contract/errors.ts";
import {
  parseParams,
  ProbeReportParams,
  ProbeStartParams,
  ProbeStatusParams,
  REQUEST_KEY_MAX_BYTES,
} from "../contract/schemas.ts";
import { jcsSha256 } from "../identity/jcs.ts";
import { sha256Hex } from "../identity/sha256.ts";
import type { ModelEntry, ReadyModel } from "../models/model.ts";
import type { JobState } from "../store/job_types.ts";
import type {
  BlockingReason,
  CertRow,
  ProbeCheck,
  ProbeLaneResult,
  ShapeClass,
} from "../probe/types.ts";
import { withRemoteAssurance } from "../models/load_remote.ts";
import type { StoredKnobAssignment, StoredPerfRow } from "../probe/certification_store.ts";
import type { JobsContext, OpContext } from "./context.ts";
import { endFailedJob } from "./_durable_job.ts";
import {
  certificationOf,
  laneCertificationClass,
  laneIdOf,
  probeAdvice,
  probeFactsOf,
} from "../probe/certification.ts";
import { probeLane } from "../probe/run_probe.ts";
import type { ProbeLaneInput } from "../probe/run_probe.ts";
import { recordProbeAlias } from "./aliases.ts";

/** A lane's place in a probe job. */
export type ProbeLaneState = "queued" | "running" | "passed" | "failed" | "skipped";

/** One failed check, as `probe.status` lists it. */
export interface FailedCheck {
  id: string;
  /** What was measured. */
  value: ProbeCheck["value"];
  /** The bar it was held to. */
  threshold: ProbeCheck["threshold"];
  /** How `value` is compared with `threshold`. */
  comparison: ProbeCheck["comparison"];
  detail?: string;
}

/** One lane of a probe job (`probe.status`, `probe.start`). */
export interface ProbeLaneStatus {
  model_id: string;
  lane_id: string;
  task: string;
  status: ProbeLaneState;
  /** Running: the step of the workload (e.g. `shape_invariance`). */
  step?: string;
  /** Running: inputs of the step done so far. */
  done?: number;
  /** Running: inputs of the step. */
  total?: number;
  /** Ended: the checks that failed, with value and threshold. */
  failed_checks?: FailedCheck[];
  /** Ended: the checks the lane could not run, and why (`reference_parity: no_reference_lane`). */
  checks_lacking?: { id: string; reason: string }[];
  /** Ended: `disabled` when the query path did not match the batch path (its hot path is off). */
  query_path?: "enabled" | "disabled";
  /** Ended: the lane's shape classes, when it is not shape-invariant (`ShapeClass`). */
  shape_classes?: ShapeClass[];
  /** Ended: the most rows per engine call the lane now serves with, when it was split. */
  shape_cap?: number;
  /** Ended: the reference the parity checks ran against. */
  reference_model_id?: string | null;
  /** Ended: how long the lane's probe took, ms. */
  duration_ms?: number;
  /** `failed` by an error rather than by its checks (an engine crash), or `skipped` and why. */
  error?: WireError;
}

/** `probe.start` answer: the job, fresh or attached. */
export interface ProbeJobAccepted {
  module_generation: number;
  job_id: string;
  state: JobState;
  request_key: string;
  /** True when the call attached to the job its key (and models) already named. */
  attached: boolean;
  lanes: ProbeLaneStatus[];
}

/** `probe.status` answer. */
export interface ProbeStatus {
  module_generation: number;
  job_id: string;
  state: JobState;
  request_key: string;
  lanes: ProbeLaneStatus[];
  /** When the job failed: why (`deadline_exceeded`, `module_restarted` …). */
  error?: WireError;
}

/** How a loaded lane stands with serving admission (`probe.report.lanes[]`). */
export interface ReportLane {
  model_id: string;
  lane_id: string;
  task: string;
  /** False for the reference lane (ORT f32 on the CPU, declaring no reference). */
  certification_required: boolean;
  /**
   * `reference`, `certified`, `probe_required`, `certification_stale`, `certification_failed`, or
   * `not_loaded` for a model that is loading or failed to load (no probe can run on it).
   */
  certification_status: string;
  /** `serving`, `refused` (config `certification: "require"`), `serving_uncertified` (`"warn"`). */
  serving_admission: "serving" | "refused" | "serving_uncertified";
  /** Why it serves uncertified, or why it is refused, in one line. */
  serving_admission_reason?: string;
  blocking_reason?: string;
  /** `ck-synapse probe run --model <id>`, when a probe would change its status. */
  probe_command?: string;
  /** The facts that changed since its rows were written (stale lanes). */
  stale_facts?: string[];
  /**
   * Remote lanes: `declared` (served only to requests with `accept_declared: true`) or `proven`
   * (a probe against its `reference_model` passed here; docs/remote.md "Identity").
   */
  remote_assurance?: "declared" | "proven";
}

/** `probe.report` answer. */
export interface ProbeReport {
  module_generation: number;
  machine_profile_hash: string;
  certification_mode: "require" | "warn";
  cert_rows: CertRow[];
  perf_rows: StoredPerfRow[];
  knob_assignments: StoredKnobAssignment[];
  lanes: ReportLane[];
}

/** The lanes a probe job was admitted for (its `params`). */
interface ProbeJobParams {
  lanes: { model_id: string; lane_id: string; task: string }[];
  deadline_ms: number | null;
}

/** One committed page: the end of one lane. */
interface LanePage {
  model_id: string;
  lane_id: string;
  status: "passed" | "failed" | "skipped";
  failed_checks: FailedCheck[];
  checks_lacking: { id: string; reason: string }[];
  query_path?: "enabled" | "disabled";
  shape_classes?: ShapeClass[];
  shape_cap?: number;
  reference_model_id?: string | null;
  duration_ms: number;
  error?: WireError;
}

/** Where a running lane is (in memory: only the process running the job knows). */
interface LiveLane {
  index: number;
  step?: string;
  done?: number;
  total?: number;
}

/** The running probe jobs of each module, by job id. */
const LIVE = new WeakMap<JobsContext, Map<string, LiveLane>>();

function liveOf(ctx: OpContext): Map<string, LiveLane> {
  let m = LIVE.get(ctx.jobs);
  if (m === undefined) LIVE.set(ctx.jobs, m = new Map());
  return m;
}

/** Tries of the default key past failed jobs before giving up (each failure adds one). */
const MAX_RETRY_KEYS = 64;

/**
 * `probe.start {models?, request_key?, deadline_ms?}`: mints (or attaches to) the durable probe
 * job of the models (see the module documentation) and starts it.
 *
 * @returns The job and its lanes (`queued` when fresh).
 * @throws {SynapseError} channel `invalid_request` for bad params; `unknown_model` for a model
 *   that is not loaded (details `{model_id, known}`); `model_loading` (transient) while one
 *   loads; the load error of a model that failed to load; `idempotency_conflict` for an explicit key bound to other models; `store_failure`.
 */
export function probeStart(ctx: OpContext, rawParams: unknown): ProbeJobAccepted {
  const p = parseParams("probe.start", ProbeStartParams, rawParams);
  const models = targetModels(ctx, p.models ?? []);
  const ids = models.map((m) => m.model.modelId);
  const lanes = models.map((m) => ({
    model_id: m.model.modelId,
    lane_id: laneIdOf(ctx, m.model.modelId),
    task: m.model.task,
  }));
  const digest = hex(jcsSha256({ op: "probe.start", models: ids }));
  const deadlineMs = p.deadline_ms ?? null;
  const params: ProbeJobParams = { lanes, deadline_ms: deadlineMs };
  const admit = (requestKey: string) =>
    ctx.jobs.store.admit({
      requestKey,
      requestDigest: digest,
      kind: "probe.start",
      moduleGeneration: ctx.moduleGeneration,
      params,
      itemsTotal: lanes.length,
      tokensTotal: 0,
      ttls: {
        executionMs: Math.min(ctx.config.jobs.execution_ttl_ms, deadlineMs ?? Infinity),
        retentionMs: ctx.config.jobs.result_retention_ttl_ms,
        resumeMs: ctx.config.jobs.resume_deadline_ms,
      },
      // probe.start is the owner's: naming the job that holds a key reveals nothing to others.
      revealConflictingJob: true,
    });
  let key = p.request_key ?? defaultKey(ctx, models.map((m) => m.model));
  let outcome = admit(key);
  if (p.request_key === undefined) {
    // A default-key job that failed is never the answer, nor one a later probe superseded (a
    // lane's certificate is now another job's): probe again under a derived key.
    for (
      let i = 0;
      outcome.attached && (failedState(outcome.job.state) || superseded(ctx, outcome.job));
      i++
    ) {
      if (i >= MAX_RETRY_KEYS) break;
      key = `${key.slice(0, REQUEST_KEY_MAX_BYTES - 42)}:retry-${outcome.job.jobId}`;
      outcome = admit(key);
    }
  }
  const { job, attached } = outcome;
  if (!attached) startJob(ctx, job.jobId, params, job.createdMs);
  return {
    module_generation: ctx.moduleGeneration,
    job_id: job.jobId,
    state: job.state,
    request_key: job.requestKey,
    attached,
    lanes: lanesOf(ctx, job.jobId, job.params as ProbeJobParams, job.state, job.pageCount),
  };
}

/**
 * `probe.status {job_id}`: a probe job's state and its lanes: `passed` / `failed` / `skipped`
 * (with failed checks, value against threshold, and duration) for those it finished, `running`
 * (with its step and how far it got) for the one it runs, `queued` for the rest; when the job
 * ended before them, `skipped` — except the lane in flight when the job failed (deadline,
 * restart): `failed`, with the job's error.
 *
 * @throws {SynapseError} `invalid_request` for an unknown job or a job that is not a probe.
 */
export function probeStatus(ctx: OpContext, rawParams: unknown): ProbeStatus {
  const p = parseParams("probe.status", ProbeStatusParams, rawParams);
  const job = ctx.jobs.store.get(p.job_id);
  if (job === undefined || job.kind !== "probe.start") {
    throw new SynapseError(
      "invalid_request",
      job === undefined
        ? `Cannot read probe job '${p.job_id}': unknown job (never admitted, or past its retention)`
        : `Cannot read probe job '${p.job_id}': it is a ${job.kind} job (read it with embed.result or model.status)`,
      { details: { field: "job_id", job_id: p.job_id } },
    );
  }
  const out: ProbeStatus = {
    module_generation: ctx.moduleGeneration,
    job_id: job.jobId,
    state: job.state,
    request_key: job.requestKey,
    lanes: lanesOf(
      ctx,
      job.jobId,
      job.params as ProbeJobParams,
      job.state,
      job.pageCount,
      job.error ?? undefined,
    ),
  };
  if (job.error) out.error = job.error;
  return out;
}

/**
 * `probe.report {}`: this machine's certification rows, performance rows and knob assignments,
 * and per loaded lane whether it needs a certificate, its status, and whether it serves.
 *
 * @throws {SynapseError} channel `invalid_request` for params; `store_failure`.
 */
export function probeReport(ctx: OpContext, rawParams: unknown): ProbeReport {
  parseParams("probe.report", ProbeReportParams, rawParams);
  const mode = ctx.config.certification;
  const certs = ctx.certifications;
  const lanes: ReportLane[] = [];
  for (const entry of ctx.registry.list()) {
    const ready = entry.ready;
    const laneId = laneIdOf(ctx, entry.modelId);
    const required = laneCertificationClass(entry) === "certification_required";
    const base = {
      model_id: entry.modelId,
      lane_id: laneId,
      task: entry.task,
      certification_required: required,
    };
    if (ready === undefined) {
      // Not loaded (loading, failed): no probe can run on it, so no probe is named; the reason
      // says what to look at instead.
      lanes.push({
        ...base,
        certification_status: "not_loaded",
        serving_admission: "refused",
        serving_admission_reason: `the model is ${entry.state}${
          entry.error === undefined ? "" : ` (${entry.error.code}: ${entry.error.message})`
        }`,
      });
      continue;
    }
    const c = certificationOf(ctx, ready);
    const row: ReportLane = {
      ...base,
      certification_status: c.status,
      serving_admission: "serving",
      ...(ready.remote === undefined ? {} : { remote_assurance: ready.remote.assurance }),
    };
    const halted = ready.remote === undefined
      ? undefined
      : ready.interactive.engine.admissionRefusal?.();
    if (halted !== undefined) {
      // A remote lane refusing every request now (breaker open, canary halt), whatever it is
      // certified for.
      row.blocking_reason = halted.code;
      row.serving_admission = "refused";
      row.serving_admission_reason = `remote lane refusing every request: ${halted.message}`;
      lanes.push(row);
      continue;
    }
    if (ready.remote !== undefined && ready.remote.assurance === "declared") {
      // A declared remote lane serves only requests that accept its provider's word, whatever
      // the certification mode (docs/remote.md "Identity").
      row.certification_status = c.status === "certified" ? "probe_required" : c.status;
      row.blocking_reason = row.certification_status as BlockingReason;
      row.probe_command = probeAdvice(entry.modelId).probe_command;
      row.serving_admission = "refused";
      row.serving_admission_reason = entry.source.referenceModel === undefined
        ? "remote lane, declared by its provider: serves only requests that send accept_declared: true; give its entry a reference_model and probe it to prove it"
        : `remote lane, declared by its provider: serves only requests that send accept_declared: true until a probe against '${entry.source.referenceModel}' passes`;
      lanes.push(row);
      continue;
    }
    if (c.status === "reference" || c.status === "certified") {
      row.serving_admission_reason = c.status === "reference"
        ? "reference lane (ORT f32 on the CPU): needs no certificate"
        : ready.remote !== undefined
        ? `remote lane proven against '${entry.source.referenceModel}' on this machine profile`
        : "certified on this machine profile";
    } else {
      row.blocking_reason = c.status;
      row.probe_command = probeAdvice(entry.modelId).probe_command;
      if (c.stale_facts !== undefined && c.stale_facts.length > 0) row.stale_facts = c.stale_facts;
      if (mode === "warn") {
        row.serving_admission = "serving_uncertified";
        row.serving_admission_reason =
          `certification is "warn": it serves, and every answer says provenance.certified: false`;
      } else {
        row.serving_admission = "refused";
        row.serving_admission_reason =
          `certification is "require": it refuses not_certified (${c.status}) until a probe passes`;
      }
    }
    lanes.push(row);
  }
  const hash = ctx.machineProfileHash;
  return {
    module_generation: ctx.moduleGeneration,
    machine_profile_hash: hash,
    certification_mode: mode,
    cert_rows: certs.allCertRows().filter((r) => r.machine_profile_hash === hash),
    perf_rows: certs.perfRows().filter((r) => r.machine_profile_hash === hash),
    knob_assignments: certs.allKnobAssignments().filter((r) => r.machine_profile_hash === hash),
    lanes,
  };
}

/** A model to probe, ready, with its registry entry. */
interface Target {
  entry: ModelEntry;
  model: ReadyModel;
}

/** The models of a `probe.start`, sorted by id; unknown ids refused. */
function targetModels(ctx: OpContext, asked: string[]): Target[] {
  const entries = ctx.registry.list();
  const known = entries.map((e) => e.modelId);
  if (asked.length === 0) {
    const out: Target[] = [];
    for (const entry of entries) {
      if (entry.ready === undefined) continue;
      // A remote lane is probed only against its reference (without one nothing can be proven).
      if (entry.ready.remote !== undefined && entry.source.referenceModel === undefined) continue;
      if (laneCertificationClass(entry) !== "certification_required") continue;
      out.push({ entry, model: entry.ready });
    }
    return out.sort((a, b) => compare(a.model.modelId, b.model.modelId));
  }
  const ids = [...new Set(asked)].sort(compare);
  for (const id of ids) {
    if (!known.includes(id)) {
      throw new SynapseError(
        "unknown_model",
        `Cannot probe '${id}': unknown model; 'ck-synapse models list' lists the loaded models`,
        { details: { model_id: id, known } },
      );
    }
  }
  const out: Target[] = [];
  for (const id of ids) {
    const entry = entries.find((e) => e.modelId === id)!;
    if (entry.engine === "remote" && entry.source.referenceModel === undefined) {
      throw new SynapseError(
        "invalid_request",
        `Cannot probe '${id}': it is a remote lane, and a remote lane is proven only against a local lane of the same model; name that model in its entry's reference_model`,
        {
          details: {
            model_id: id,
            field: "preload_models.reference_model",
            reason: "remote_lane_without_reference",
          },
        },
      );
    }
    // `model_loading` while it loads (retry), its load error when it failed.
    out.push({ entry, model: ctx.registry.resolve(id, entry.task) });
  }
  return out;
}

/**
 * True when a finished probe job no longer says what the store holds: a lane it probed has a
 * certificate (for the keys it serves under now) written by another probe job. Attaching to it
 * would print its old verdict — `passed` for a lane a later probe failed (a remote lane demoted
 * back to declared has the same default key as when it was first proven).
 */
function superseded(
  ctx: OpContext,
  job: { jobId: string; state: JobState; params: unknown },
): boolean {
  if (job.state !== "done") return false;
  for (const lane of (job.params as ProbeJobParams).lanes) {
    const model = ctx.registry.list().find((e) => e.modelId === lane.model_id)?.ready;
    if (model === undefined) continue;
    const probedBy = certificationOf(ctx, model).row?.evidence.probe_job_id;
    if (probedBy !== undefined && probedBy !== null && probedBy !== job.jobId) return true;
  }
  return false;
}

/** The hex of a `sha256:<hex>` digest. */
function hex(digest: string): string {
  return digest.replace(/^sha256:/, "");
}

function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function failedState(state: JobState): boolean {
  return state === "failed_transient" || state === "failed_permanent";
}

/** The default key (module documentation). */
function defaultKey(ctx: OpContext, models: ReadyModel[]): string {
  const facts = hex(jcsSha256({
    knob: ctx.config.knob,
    models: models.map((m) => ({
      model_id: m.modelId,
      numeric_profile_id: m.numericProfileId,
      fingerprint: m.fingerprint,
    })),
  })).slice(0, 16);
  const tail = `:${ctx.machineProfileHash.slice(0, 16)}:${facts}`;
  let ids = models.map((m) => m.modelId).join(",");
  // Room for the tail and a `:retry-<job id>` suffix; else the ids' digest stands for them.
  if (new TextEncoder().encode(`probe.start:${ids}${tail}`).byteLength > 180) {
    ids = `sha256-${sha256Hex(ids).slice(0, 16)}`;
  }
  return `probe.start:${ids}${tail}`;
}

/**
 * The lanes of a job: pages for those that ended, the live lane, then queued or skipped. When
 * the job failed (its deadline, a restart), the lane it was running is `failed` with the job's
 * error, and only the lanes after it are `skipped` (never reached).
 */
function lanesOf(
  ctx: OpContext,
  jobId: string,
  params: ProbeJobParams,
  state: JobState,
  pageCount: number,
  jobError?: WireError,
): ProbeLaneStatus[] {
  const live = liveOf(ctx).get(jobId);
  const ended = state === "done" || failedState(state);
  return params.lanes.map((lane, i): ProbeLaneStatus => {
    if (i < pageCount) {
      const stored = ctx.jobs.store.readPage(jobId, i);
      if (stored !== undefined) {
        const page = JSON.parse(stored.pageJson) as LanePage;
        const out: ProbeLaneStatus = { ...lane, status: page.status };
        if (page.failed_checks.length > 0) out.failed_checks = page.failed_checks;
        if (page.checks_lacking.length > 0) out.checks_lacking = page.checks_lacking;
        if (page.query_path !== undefined) out.query_path = page.query_path;
        if (page.shape_classes !== undefined) out.shape_classes = page.shape_classes;
        if (page.shape_cap !== undefined) out.shape_cap = page.shape_cap;
        if (page.reference_model_id !== undefined) {
          out.reference_model_id = page.reference_model_id;
        }
        out.duration_ms = page.duration_ms;
        if (page.error !== undefined) out.error = page.error;
        return out;
      }
    }
    if (live !== undefined && live.index === i && !ended) {
      const out: ProbeLaneStatus = { ...lane, status: "running" };
      if (live.step !== undefined) out.step = live.step;
      if (live.done !== undefined) out.done = live.done;
      if (live.total !== undefined) out.total = live.total;
      return out;
    }
    if (ended && failedState(state) && i === pageCount) {
      // The lane in flight when the job failed: it was reached, and failed with the job.
      const out: ProbeLaneStatus = { ...lane, status: "failed" };
      if (jobError !== undefined) out.error = jobError;
      return out;
    }
    return { ...lane, status: ended ? "skipped" : "queued" };
  });
}

/** Starts a fresh job's run, tracked in `ctx.jobs.running` like every durable job. */
function startJob(ctx: OpContext, jobId: string, params: ProbeJobParams, createdMs: number): void {
  const live = liveOf(ctx);
  const running = runProbeJob(ctx, jobId, params, createdMs).finally(() => live.delete(jobId));
  ctx.jobs.running.set(jobId, running);
  running.finally(() => ctx.jobs.running.delete(jobId));
}

async function runProbeJob(
  ctx: OpContext,
  jobId: string,
  params: ProbeJobParams,
  createdMs: number,
): Promise<void> {
  const store = ctx.jobs.store;
  const live = liveOf(ctx);
  const deadlineAt = params.deadline_ms === null ? undefined : createdMs + params.deadline_ms;
  const stop = new AbortController();
  const timer = deadlineAt === undefined
    ? undefined
    : setTimeout(() => stop.abort(), Math.max(0, deadlineAt - ctx.now()));
  const pastDeadline = (): SynapseError =>
    new SynapseError(
      "deadline_exceeded",
      `Probe job ${jobId} ran past its deadline_ms (${params.deadline_ms} ms) before it finished`,
      { details: { job_id: jobId, deadline_ms: params.deadline_ms } },
    );
  try {
    // Let the caller's answer go first: the job starts on the next turn.
    await sleep(0);
    store.markRunning(jobId);
    for (let i = 0; i < params.lanes.length; i++) {
      const lane = params.lanes[i]!;
      if (stop.signal.aborted || (deadlineAt !== undefined && ctx.now() > deadlineAt)) {
        throw pastDeadline();
      }
      live.set(jobId, { index: i });
      const page = await probeOne(ctx, jobId, lane, stop.signal, (p) => {
        live.set(jobId, { index: i, ...p });
      });
      store.commitPage(jobId, i, 1, JSON.stringify(page), { itemsDone: i + 1, tokensDone: 0 });
    }
    store.finish(jobId, "done");
    ctx.log("info", "synapse.probe", "probe job done", { job: jobId, lanes: params.lanes.length });
  } catch (err) {
    // What a lane's probe threw once the deadline stopped it is the deadline (a shutdown is not).
    const disposed = err instanceof SynapseError && err.code === "disposed";
    const why = stop.signal.aborted && !disposed ? pastDeadline() : err;
    endFailedJob(ctx, jobId, why, () => {}, { op: "probe.start", lanes: params.lanes.length });
  } finally {
    if (timer !== undefined) clearTimeout(timer);
  }
}

/**
 * The reference lane of a model: the loaded model its source names as `reference_model` (the same
 * weights), with its control lanes; undefined when it names none, or names one that is not
 * loaded (the probe then lists `reference_parity` among the checks it lacked).
 */
async function referenceOf(
  ctx: OpContext,
  entry: ModelEntry,
): Promise<ProbeLaneInput["reference"]> {
  const id = (entry.source as { referenceModel?: string }).referenceModel;
  if (id === undefined || id === entry.modelId) return undefined;
  if (!ctx.registry.list().some((e) => e.modelId === id)) return undefined;
  const model = await ctx.registry.ready(id);
  return { model, lanes: ctx.registry.controlLanes(id) };
}

/** Progress of one lane's probe. */
interface StepProgress {
  step?: string;
  done?: number;
  total?: number;
}

/** Probes one lane and records its result; its page. */
async function probeOne(
  ctx: OpContext,
  jobId: string,
  lane: ProbeJobParams["lanes"][number],
  signal: AbortSignal,
  onProgress: (p: StepProgress) => void,
): Promise<LanePage> {
  const started = ctx.now();
  const entry = ctx.registry.list().find((e) => e.modelId === lane.model_id);
  if (entry === undefined || entry.ready === undefined) {
    return {
      ...lane,
      status: "skipped",
      failed_checks: [],
      checks_lacking: [],
      duration_ms: 0,
      error: new SynapseError(
        "unknown_model",
        `Cannot probe '${lane.model_id}': it is no longer loaded (${entry?.state ?? "unloaded"})`,
        { details: { model_id: lane.model_id } },
      ).toWire(),
    };
  }
  let result: ProbeLaneResult;
  let referenceFacts: { modelId: string; laneId: string; fingerprint: string } | undefined;
  try {
    const model = entry.ready;
    const input: ProbeLaneInput = {
      model,
      laneId: lane.lane_id,
      lanes: ctx.registry.controlLanes(lane.model_id),
      // The two bars the config sets; the rest are fixed (docs/internals.md §12), by the lane's
      // dtype.
      thresholds: {
        mean_cosine: ctx.config.probe.mean_cosine_threshold,
        worst_decile_overlap: ctx.config.probe.worst_decile_rank_overlap_threshold,
      },
      knob: ctx.config.knob,
      tokenizers: ctx.tokenizers,
      signal,
      onProgress: (step, done, total) => onProgress({ step, done, total }),
    };
    const reference = await referenceOf(ctx, entry);
    if (entry.engine === "remote" && reference === undefined) {
      // Without its reference a remote lane's probe would prove nothing about what it serves.
      throw new SynapseError(
        "invalid_request",
        `Cannot probe remote lane '${lane.model_id}': its reference_model '${entry.source.referenceModel}' is not loaded here; load it, then probe again`,
        {
          details: {
            model_id: lane.model_id,
            reference_model: entry.source.referenceModel ?? null,
            reason: "reference_not_loaded",
          },
        },
      );
    }
    if (reference !== undefined) {
      input.reference = reference;
      referenceFacts = {
        modelId: reference.model.modelId,
        laneId: laneIdOf(ctx, reference.model.modelId),
        fingerprint: reference.model.fingerprint,
      };
    }
    if (entry.source.referenceModel !== undefined) {
      input.declaredReference = entry.source.referenceModel;
    }
    result = await probeLane(input);
  } catch (err) {
    const e = err instanceof SynapseError ? err : undefined;
    if (e?.code === "disposed") throw err;
    if (signal.aborted) throw err;
    return {
      ...lane,
      status: "failed",
      failed_checks: [],
      checks_lacking: [],
      duration_ms: ctx.now() - started,
      error: (e ?? new SynapseError("internal_error", String(err))).toWire(),
    };
  }
  // A remote lane is certified under its proven identity: the fingerprint it serves under once
  // this probe passed (docs/remote.md "Identity"), which the alias row below also names.
  const certified = withRemoteAssurance(entry.ready, "proven");
  if (certified !== entry.ready) {
    result = {
      ...result,
      numeric_profile_id: certified.numericProfileId,
      fingerprint: certified.fingerprint,
    };
  }
  ctx.certifications.putProbeResult(
    result,
    probeFactsOf(ctx, certified, { probe_job_id: jobId, now_ms: ctx.now() }),
  );
  // A lane within the alias bar of its reference: a probe-measured alias row (retracted when a
  // later probe of the lane no longer meets it).
  recordProbeAlias(ctx, result, referenceFacts, jobId);
  if (entry.ready.remote !== undefined) {
    const registry = ctx.registry as {
      setRemoteAssurance?: (id: string, assurance: "declared" | "proven") => boolean;
    };
    registry.setRemoteAssurance?.(lane.model_id, result.passed ? "proven" : "declared");
    if (!result.passed) {
      // Its numbers are not the reference's: if they also moved since the canary's baseline (the
      // provider swapped what it serves), the lane halts now rather than at the next interval.
      const engine = entry.ready.interactive.engine as { checkCanary?: () => Promise<unknown> };
      await engine.checkCanary?.().catch(() => undefined);
    }
  }
  if (result.query_path === "disabled") {
    const registry = ctx.registry as { setQueryPath?: (id: string, path: "disabled") => void };
    registry.setQueryPath?.(lane.model_id, "disabled");
  }
  // A lane split by shape class serves only the calls up to its cap; a lane found
  // shape-invariant (again) is uncapped.
  (ctx.registry as { setShapeCap?: (id: string, cap: number | undefined) => void })
    .setShapeCap?.(lane.model_id, result.shape_cap);
  ctx.log(result.passed ? "info" : "warn", "synapse.probe", "lane probed", {
    job: jobId,
    model: lane.model_id,
    lane: lane.lane_id,
    passed: result.passed,
    duration_ms: result.duration_ms,
  });
  return {
    ...lane,
    status: result.passed ? "passed" : "failed",
    failed_checks: result.checks.filter((c) => !c.passed).map((c) => {
      const f: FailedCheck = {
        id: c.id,
        value: c.value,
        threshold: c.threshold,
        comparison: c.comparison,
      };
      if (c.detail !== undefined) f.detail = c.detail;
      return f;
    }),
    checks_lacking: result.checks_lacking,
    query_path: result.query_path,
    ...(result.shape_classes === undefined ? {} : { shape_classes: result.shape_classes }),
    ...(result.shape_cap === undefined ? {} : { shape_cap: result.shape_cap }),
    reference_model_id: result.reference_model_id,
    duration_ms: result.duration_ms,
  };
}
