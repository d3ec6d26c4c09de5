/**
 * Serving admission by certification (docs/internals.md §12).
 *
 * - **Who needs a certificate** ({@link laneCertificationClass}): a lane is `reference` when its
 *   engine is `ort`, its profile dtype is `f32` and its `quant` too (an int8 lane computes in
 *   f32 but is not the reference), it runs on the CPU and its source declares no reference
 *   model; every other lane is `certification_required`.
 * - **Lane id** ({@link laneIdOf}): the catalog lane id `<catalog_id>-<backend>` for catalog
 *   models, else the model id.
 * - **Keys and staleness** ({@link certificationOf}): a row of `cert_rows` is keyed by
 *   (machine_profile_hash, numeric_profile_id, runtime_config_digest). A matching row gives
 *   `certified` (or `certification_failed` when it is `uncertified`); no matching row but rows
 *   for the same lane give `certification_stale`, naming the facts that changed (`os_build`,
 *   `machine_profile`, `numeric_profile`, `runtime_config`); no row at all gives
 *   `probe_required`.
 * - **The gate** ({@link admitCertified}): in config `certification: "require"` (the default) a
 *   lane that needs a certificate and has none refuses `not_certified` (permanent) naming the
 *   probe to run; in `warn` it serves and every answer says `provenance.certified: false`.
 * - **Knob assignments** ({@link startupKnobAssignment}): read once when the instance starts; a
 *   row written later applies after a restart.
 *
 * The status of a model is cached per loaded model and recomputed only when the
 * {@link CertificationStore}'s change counter moves (a probe recorded a row), so a request pays
 * no SQL.
 *
 * @module
 */

import { SynapseError } from "../contract/errors.ts";
import { jcsSha256 } from "../identity/jcs.ts";
import type { MachineProfile } from "../identity/machine_profile.ts";
import type { ModelEngine, ModelEntry, ModelSource, ReadyModel } from "../models/model.ts";
import { threadsForKnob } from "../models/model_registry.ts";
import { withRemoteAssurance } from "../models/load_remote.ts";
import type { CertificationStore, ProbeFacts } from "./certification_store.ts";
import type {
  BlockingReason,
  CertificationStatus,
  CertRow,
  KnobAssignment,
  LaneCertificationClass,
} from "./types.ts";

/** A fact whose change makes a lane's certification stale. */
export type StaleFact = "os_build" | "machine_profile" | "numeric_profile" | "runtime_config";

/** What the certification functions read from the module context (a slice of `OpContext`). */
export interface CertificationContext {
  readonly config: { readonly knob: string; readonly certification: "require" | "warn" };
  readonly registry: { list(): ModelEntry[]; isQueryPathSkewed?(modelId: string): boolean };
  readonly loads?: { spec(modelId: string): { lane_id?: string } | undefined };
  /** The certification, performance and knob-assignment rows of the store. */
  readonly certifications: CertificationStore;
  /** The machine this instance runs on (docs/internals.md §5). */
  readonly machineProfile: MachineProfile;
  /** sha256 of {@link CertificationContext.machineProfile}. */
  readonly machineProfileHash: string;
  /**
   * This machine profile's knob assignments as the store held them when the instance started,
   * keyed by {@link knobAssignmentKey}.
   */
  readonly startupKnobAssignments: ReadonlyMap<string, KnobAssignment>;
  readonly moduleGeneration: number;
}

/** A lane's certification, as serving admission and every status door print it. */
export interface CertificationView {
  status: CertificationStatus;
  /** The matching row (certified / certification_failed), or the newest row of the lane (stale). */
  row?: CertRow;
  /** `certification_stale`: which facts differ from the newest row of the lane. */
  stale_facts?: StaleFact[];
}

/** Anything that says what a model is: a registry entry, or a ready model with its source. */
export type CertifiableModel =
  | Pick<ModelEntry, "engine" | "source" | "ready">
  | (Pick<ReadyModel, "engineKind" | "profile"> & { source?: Pick<ModelSource, "referenceModel"> });

/**
 * `reference` for an ORT lane computing in `f32` on the CPU, not quantized (`quant` equal to its
 * dtype), whose source declares no reference model (`source.referenceModel`); `certification_required` for every other lane.
 *
 * @param model A registry entry (its ready model's profile is read when loaded), or a ready model
 *   with an optional source.
 * @returns The lane's class. An entry not yet loaded is judged by its engine only (an ORT model's
 *   dtype is known once loaded; until then it counts as `reference` when it declares no
 *   reference model).
 */
export function laneCertificationClass(model: CertifiableModel): LaneCertificationClass {
  const engine: ModelEngine = "engineKind" in model ? model.engineKind : model.engine;
  const profile = "engineKind" in model ? model.profile : model.ready?.profile;
  if (engine !== "ort") return "certification_required";
  if (model.source?.referenceModel !== undefined) return "certification_required";
  if (profile !== undefined && profile.dtype !== "f32") return "certification_required";
  // A quantized lane (`quant: "int8"`) keeps dtype f32 for its float tensors: still not the reference.
  if (profile !== undefined && profile.quant !== profile.dtype) return "certification_required";
  // ORT runs on the CPU here; a GPU build would say so in its build flags.
  const backend = profile?.engine.build_flags?.backend;
  if (backend !== undefined && backend !== "cpu") return "certification_required";
  return "reference";
}

/**
 * The lane id of a model: the catalog lane id (`<catalog_id>-<backend>`) of a
 * catalog model, else the model id.
 *
 * @param ctx Module context (`loads`, when there is one).
 * @param modelId The model id.
 * @returns The lane id.
 */
export function laneIdOf(ctx: Pick<CertificationContext, "loads">, modelId: string): string {
  return ctx.loads?.spec(modelId)?.lane_id ?? modelId;
}

/**
 * sha256 (JCS) of the settings outside the numeric profile that can shape a
 * lane's numbers: its engine, the intra-op threads of that engine and the knob.
 *
 * @param facts `engine` (`ort`, `llama`), `intra_op_threads` (≥ 1), `knob`.
 * @returns 64 hex chars.
 */
export function runtimeConfigDigest(
  facts: {
    engine: string;
    intra_op_threads: number;
    knob: string;
    reference_model?: string;
    query_path_skew?: boolean;
    batch_shape_skew?: string;
  },
): string {
  return jcsSha256({
    engine: facts.engine,
    intra_op_threads: facts.intra_op_threads,
    knob: facts.knob,
    // What a certificate proves depends on what it was measured against: two models with the
    // same files (one numeric profile) but different declared references keep separate rows.
    ...(facts.reference_model === undefined ? {} : { reference_model: facts.reference_model }),
    // The tests-only skew hook changes the query path's numbers (lib/models/_test_hooks.ts).
    ...(facts.query_path_skew === true ? { query_path_skew: true } : {}),
    ...(facts.batch_shape_skew === undefined ? {} : { batch_shape_skew: facts.batch_shape_skew }),
  });
}

/**
 * The runtime config digest of a loaded model in this instance: its engine, the threads the
 * registry gives that engine for the config knob, the knob, the reference its source declares
 * (`reference_model`) and whether the tests-only query-path skew hook wraps it.
 *
 * @param ctx Module context (`config.knob`; the registry, when given, for the model's source
 *   and test hooks).
 * @param model The ready model.
 * @returns 64 hex chars.
 */
export function runtimeConfigDigestOf(
  ctx: {
    readonly config: { readonly knob: string };
    readonly registry?: {
      list(): readonly { modelId: string; source: Pick<ModelSource, "referenceModel"> }[];
      isQueryPathSkewed?(modelId: string): boolean;
      batchShapeSkew?(modelId: string): string | undefined;
    };
  },
  model: Pick<ReadyModel, "engineKind" | "modelId">,
): string {
  const source = ctx.registry?.list().find((e) => e.modelId === model.modelId)?.source;
  const skewed = ctx.registry?.isQueryPathSkewed?.(model.modelId) ?? false;
  const shapeSkew = ctx.registry?.batchShapeSkew?.(model.modelId);
  return runtimeConfigDigest({
    engine: model.engineKind,
    intra_op_threads: threadsForKnob(ctx.config.knob),
    knob: ctx.config.knob,
    ...(source?.referenceModel === undefined ? {} : { reference_model: source.referenceModel }),
    ...(skewed ? { query_path_skew: true } : {}),
    ...(shapeSkew === undefined ? {} : { batch_shape_skew: shapeSkew }),
  });
}

/**
 * The facts a probe result of `model` is recorded under ({@link CertificationStore.putProbeResult}):
 * the same keys {@link certificationOf} looks up, so writer and reader cannot disagree.
 *
 * @param ctx Module context.
 * @param model The ready model probed.
 * @param job `probe_job_id` (null outside a job) and `now_ms` (unix ms).
 * @returns The facts.
 */
export function probeFactsOf(
  ctx:
    & Parameters<typeof runtimeConfigDigestOf>[0]
    & Pick<CertificationContext, "machineProfile" | "machineProfileHash" | "moduleGeneration">,
  model: Pick<ReadyModel, "engineKind" | "modelId" | "identity" | "profile">,
  job: { probe_job_id: string | null; now_ms: number },
): ProbeFacts {
  return {
    machine_profile_hash: ctx.machineProfileHash,
    runtime_config_digest: runtimeConfigDigestOf(ctx, model),
    os_build: ctx.machineProfile.os_build,
    engine_identities: [structuredClone(model.identity)],
    model_digest: model.profile.model_digest,
    module_generation: ctx.moduleGeneration,
    probe_job_id: job.probe_job_id,
    now_ms: job.now_ms,
  };
}

interface Cached {
  store: CertificationStore;
  changes: number;
  machineHash: string;
  view: CertificationView;
}

const CACHE = new WeakMap<ReadyModel, Cached>();

/**
 * The certification of a ready model on this machine profile and runtime config.
 * Cached per ready model until the store's change counter moves.
 *
 * @param ctx Module context.
 * @param model The ready model.
 * @returns `{status, row?, stale_facts?}`.
 * @throws {SynapseError} `store_failure` or `internal_error` `{reason: "store_corrupt"}` when the
 *   rows cannot be read.
 */
export function certificationOf(ctx: CertificationContext, model: ReadyModel): CertificationView {
  const store = ctx.certifications;
  const hit = CACHE.get(model);
  if (
    hit !== undefined && hit.store === store && hit.changes === store.changeCount &&
    hit.machineHash === ctx.machineProfileHash
  ) {
    return hit.view;
  }
  const changes = store.changeCount;
  const view = computeCertification(ctx, model);
  CACHE.set(model, { store, changes, machineHash: ctx.machineProfileHash, view });
  return view;
}

function computeCertification(ctx: CertificationContext, model: ReadyModel): CertificationView {
  // A remote lane's certificate is that of its proven identity (the one it serves under once the
  // probe against its reference passed), whichever it serves under now.
  if (model.remote !== undefined) model = withRemoteAssurance(model, "proven");
  const entry = ctx.registry.list().find((e) => e.ready === model || e.modelId === model.modelId);
  const cls = laneCertificationClass({ ...model, source: entry?.source ?? {} });
  const store = ctx.certifications;
  const digest = runtimeConfigDigestOf(ctx, model);
  const row = store.row(ctx.machineProfileHash, model.numericProfileId, digest);
  if (cls === "reference") {
    return row === undefined ? { status: "reference" } : { status: "reference", row };
  }
  if (row !== undefined) {
    return { status: row.status === "certified" ? "certified" : "certification_failed", row };
  }
  const rows = store.rowsForLane(laneIdOf(ctx, model.modelId));
  if (rows.length === 0) return { status: "probe_required" };
  // The stale facts are those of the nearest row (fewest facts changed; the newest of those):
  // a lane probed on this machine and on another names only what changed here.
  const changedOf = (r: CertRow): StaleFact[] => {
    const stale: StaleFact[] = [];
    if (r.os_build !== ctx.machineProfile.os_build) stale.push("os_build");
    if (r.machine_profile_hash !== ctx.machineProfileHash) stale.push("machine_profile");
    if (r.numeric_profile_id !== model.numericProfileId) stale.push("numeric_profile");
    if (r.runtime_config_digest !== digest) stale.push("runtime_config");
    return stale;
  };
  let nearest = rows[0]!;
  let stale = changedOf(nearest);
  for (const r of rows.slice(1)) {
    const c = changedOf(r);
    if (c.length < stale.length) [nearest, stale] = [r, c];
  }
  return { status: "certification_stale", row: nearest, stale_facts: stale };
}

/** True for a status that serves with `provenance.certified: true`. */
export function isCertified(status: CertificationStatus): boolean {
  return status === "reference" || status === "certified";
}

/**
 * What `ck-synapse probe run` and `probe.start` need to certify `modelId`.
 *
 * @param modelId The model id.
 * @returns `{probe_command, probe_op}`.
 */
export function probeAdvice(modelId: string): {
  probe_command: string;
  probe_op: { method: "probe.start"; params: { models: string[] } };
} {
  return {
    probe_command: `ck-synapse probe run --model ${modelId}`,
    probe_op: { method: "probe.start", params: { models: [modelId] } },
  };
}

/**
 * Why a model refuses in `require` mode, or undefined when it serves (reference, certified).
 * Whatever the mode: `warn` serves with the same view, so callers decide.
 *
 * @param view The model's certification.
 * @returns The blocking reason, or undefined.
 */
export function blockingReasonOf(view: CertificationView): BlockingReason | undefined {
  switch (view.status) {
    case "probe_required":
    case "certification_stale":
    case "certification_failed":
      return view.status;
    default:
      return undefined;
  }
}

/**
 * The `not_certified` refusal of a model (docs/internals.md §12).
 *
 * @param ctx Module context (lane id).
 * @param modelId The model id.
 * @param view Its certification (not reference, not certified).
 * @returns `not_certified` (permanent) `{model_id, lane_id, blocking_reason, probe_command,
 *   probe_op, stale_facts?}`.
 */
export function notCertifiedError(
  ctx: Pick<CertificationContext, "loads">,
  modelId: string,
  view: CertificationView,
): SynapseError {
  const laneId = laneIdOf(ctx, modelId);
  const reason = blockingReasonOf(view) ?? "probe_required";
  const advice = probeAdvice(modelId);
  const why = reason === "probe_required"
    ? "it has never been probed"
    : reason === "certification_failed"
    ? `its probe on this machine failed (${
      (view.row?.evidence.checks ?? []).filter((c) => !c.passed).map((c) => c.id).join(", ") ||
      "a check"
    })`
    : `its certificate is stale (changed: ${(view.stale_facts ?? []).join(", ") || "unknown"})`;
  return new SynapseError(
    "not_certified",
    `Cannot serve model '${modelId}' (lane '${laneId}'): it needs a certificate for this machine and ${why}; ` +
      `run '${advice.probe_command}' (seconds for a small embed model on a quiet machine, a minute or more for a generation model; a busy machine takes longer), or set config certification: "warn" to serve it uncertified`,
    {
      details: {
        model_id: modelId,
        lane_id: laneId,
        blocking_reason: reason,
        ...advice,
        ...(view.stale_facts === undefined ? {} : { stale_facts: [...view.stale_facts] }),
      },
    },
  );
}

/**
 * The serving gate (docs/internals.md §12), called where every inference request resolves its model
 * (lib/ops/_resolve_model.ts).
 *
 * @param ctx Module context.
 * @param model The ready model of the request.
 * @returns `{certified}`: true for reference and certified lanes; false for a lane served
 *   uncertified in `warn` mode.
 * @param acceptDeclared The request's `accept_declared`: a remote lane without a certificate
 *   serves only with it (`provenance.certified: false`, `provenance.remote.assurance: "declared"`).
 * @throws {SynapseError} `not_certified` (see {@link notCertifiedError}) in `require` mode for a
 *   lane that needs a certificate and has none for this machine; `declared_identity_not_accepted`
 *   for an uncertified remote lane without `acceptDeclared`; `store_failure` when the rows
 *   cannot be read.
 */
export function admitCertified(
  ctx: CertificationContext,
  model: ReadyModel,
  acceptDeclared = false,
): { certified: boolean } {
  if (model.remote !== undefined) {
    // A proven remote lane serves like a certified local one; a declared one (its provider says
    // what it runs, nothing here measured it) only to a caller who accepts that, whatever the
    // certification mode (docs/remote.md "Identity").
    if (model.remote.assurance === "proven" && isCertified(certificationOf(ctx, model).status)) {
      return { certified: true };
    }
    if (acceptDeclared) return { certified: false };
    const entry = ctx.registry.list().find((e) => e.modelId === model.modelId);
    const reference = entry?.source.referenceModel;
    const prove = reference === undefined
      ? `, or give its entry a reference_model (a local lane of the same model) and run '${
        probeAdvice(model.modelId).probe_command
      }' to prove it`
      : `, or run '${probeAdvice(model.modelId).probe_command}' to prove it against '${reference}'`;
    throw new SynapseError(
      "declared_identity_not_accepted",
      `Cannot serve model '${model.modelId}': it runs on remote provider '${model.remote.provider}', whose identity (${model.remote.deployment}) is declared by the provider, not proven here; send accept_declared: true (ck-synapse --accept-declared, HTTP header x-synapse-accept-declared: true) to accept it${prove}`,
      {
        details: {
          model_id: model.modelId,
          provider: model.remote.provider,
          deployment: model.remote.deployment,
          assurance: model.remote.assurance,
          ...probeAdvice(model.modelId),
        },
      },
    );
  }
  const view = certificationOf(ctx, model);
  if (isCertified(view.status)) return { certified: true };
  if (ctx.config.certification === "warn") return { certified: false };
  throw notCertifiedError(ctx, model.modelId, view);
}

/**
 * Key of {@link CertificationContext.startupKnobAssignments}.
 *
 * @param numericProfileId Numeric profile id.
 * @param knob Config knob.
 * @returns The key.
 */
export function knobAssignmentKey(numericProfileId: string, knob: string): string {
  return `${numericProfileId}\u0000${knob}`;
}

/**
 * This machine profile's knob assignments as the store holds them now (read once at startup).
 *
 * @param store The certification store.
 * @param machineProfileHash This machine's profile hash.
 * @returns Assignments keyed by {@link knobAssignmentKey}.
 * @throws {SynapseError} `store_failure`, `internal_error` `{reason: "store_corrupt"}`.
 */
export function readStartupKnobAssignments(
  store: CertificationStore,
  machineProfileHash: string,
): Map<string, KnobAssignment> {
  const out = new Map<string, KnobAssignment>();
  for (const a of store.allKnobAssignments()) {
    if (a.machine_profile_hash !== machineProfileHash) continue;
    out.set(knobAssignmentKey(a.numeric_profile_id, a.knob), a.assignment);
  }
  return out;
}

/**
 * Engine time of a one-row call per (numeric profile, knob) on this machine profile, from the
 * probe's perf rows (`batch_rows: 1`, `call_ms_p50`), read once at startup: the query path's
 * execution estimate before it has measured a run.
 *
 * @param store The certification store.
 * @param machineProfileHash This instance's machine profile hash.
 * @returns `knobAssignmentKey(numeric_profile_id, knob)` → ms.
 * @throws {SynapseError} `disposed`, `store_failure`.
 */
export function readStartupSingleRowCalls(
  store: CertificationStore,
  machineProfileHash: string,
): Map<string, number> {
  const out = new Map<string, number>();
  for (const r of store.perfRows()) {
    if (r.machine_profile_hash !== machineProfileHash || r.batch_rows !== 1) continue;
    out.set(knobAssignmentKey(r.numeric_profile_id, r.knob), r.call_ms_p50);
  }
  return out;
}

/**
 * The knob assignment a model started with: this machine profile's row for its
 * numeric profile and the config knob, as read at startup; undefined when there was none.
 *
 * @param ctx Module context.
 * @param model The ready model (its numeric profile id).
 * @returns The assignment, or undefined.
 */
export function startupKnobAssignment(
  ctx:
    & Pick<CertificationContext, "startupKnobAssignments">
    & { readonly config: { readonly knob: string } },
  model: Pick<ReadyModel, "numericProfileId">,
): KnobAssignment | undefined {
  return ctx.startupKnobAssignments.get(knobAssignmentKey(model.numericProfileId, ctx.config.knob));
}

/**
 * `provenance.certified` of an answer served by `model`: true for reference and certified lanes.
 *
 * @param ctx Module context.
 * @param model The model that served, or undefined when it is not loaded here (false).
 * @returns Whether the answer is certified.
 * @throws {SynapseError} `store_failure` when the rows cannot be read.
 */
export function servedCertified(ctx: CertificationContext, model: ReadyModel | undefined): boolean {
  return model !== undefined && isCertified(certificationOf(ctx, model).status);
}
