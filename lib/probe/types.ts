/**
 * The shapes of the probe and certification (docs/internals.md §12): probe results, certification
 * rows, performance rows, knob assignments and catalog self-checks, shared by the probe runner
 * (lib/probe/run_probe.ts), the certification store (lib/probe/certification_store.ts), serving
 * admission (lib/probe/certification.ts) and the probe operations (lib/ops/probe.ts).
 *
 * See also docs/operations.md "probe.start" … "probe.report", and docs/internals.md §4 (numeric
 * profile), §5 (machine profile: certification rows are keyed by its hash), §8.1 (tables
 * `cert_rows`, `perf_rows`, `knob_assignments`, `catalog_self_checks`), §10 (self-check).
 *
 * @module
 */
import type { EngineIdentity } from "../identity/numeric_profile.ts";

/**
 * Config `certification`: what a lane that needs a certificate and has no passing one for this
 * machine profile does. `require` (default): it refuses `not_certified`. `warn`: it serves, and
 * every answer says `provenance.certified: false`.
 */
export type CertificationMode = "require" | "warn";

/**
 * What a lane needs to serve: `reference` (ORT fp32 on the CPU declaring no reference: its
 * numbers are the reference, no certificate), `certification_required` (every other lane kind:
 * llama, ORT at another dtype, a lane that declares a `reference_model`, later int8, FFI shims,
 * remote providers, GPUs).
 */
export type LaneCertificationClass = "reference" | "certification_required";

/**
 * A lane's certification status for the current machine profile and runtime config:
 * `reference` (needs none), `certified` (a passing row matches), `probe_required` (no row for
 * this lane at all), `certification_stale` (rows exist for this lane, none for the current
 * machine profile / numeric profile / runtime config), `certification_failed` (the matching row
 * failed a check).
 */
export type CertificationStatus =
  | "reference"
  | "certified"
  | "probe_required"
  | "certification_stale"
  | "certification_failed";

/** Why a lane refuses (`not_certified.details.blocking_reason`). */
export type BlockingReason = "probe_required" | "certification_stale" | "certification_failed";

/** Row class of `cert_rows` (docs/internals.md §8.1). */
export type CertClass = "embedding" | "rerank" | "generation";

/**
 * One check of a probe, recorded with what was measured and the bar it was held to. A check the
 * lane could not run (no reference lane: parity) is listed in `checks_lacking` instead.
 */
export interface ProbeCheck {
  /**
   * Stable id: `query_path_equals_batch_path`, `shape_invariance`, `shape_class_parity`,
   * `determinism`,
   * `reference_parity_mean_cosine`, `reference_parity_min_cosine`,
   * `reference_parity_worst_decile_overlap`, `norm`, `finite`, `dims`, `max_context`,
   * `over_max_context_refused`, `rerank_pearson`, `rerank_max_abs_delta`,
   * `greedy_determinism`, `greedy_serial_vs_concurrent`.
   */
  id: string;
  passed: boolean;
  /** What was measured (a number, or a short string such as `refused:sequence_too_long`). */
  value: number | string | boolean | null;
  /** The bar (a number, or a short string); null where the check is exact. */
  threshold: number | string | null;
  /** How `value` is compared with `threshold`: `>=`, `<=`, `==`. */
  comparison: ">=" | "<=" | "==";
  /** One line for people when it failed (which input, which batch size …). */
  detail?: string;
}

/** One performance row of a lane (docs/internals.md §8.1 `perf_rows`). */
export interface PerfRow {
  /** Knob (thread policy) the lane ran under. */
  knob: string;
  /** Rows per engine call measured. */
  batch_rows: number;
  /** Throughput, tokens per second (prompt tokens for embed/rerank, generated for generate). */
  tokens_per_second: number;
  /** Start delay p50 of the probe's requests on the lane, ms. */
  start_delay_p50_ms: number;
  /** Engine time per call p50, ms. */
  call_ms_p50: number;
}

/**
 * What the probe measured for a lane and what the lane then uses (read at startup; a change
 * takes effect after a restart): the batch shape clients should send (`models.list`
 * `recommended_batch`) and the execution estimate admission starts from. Neither changes a
 * number a lane computes, so neither is part of the numeric profile.
 */
export interface KnobAssignment {
  knob: string;
  recommended_batch: { rows: number; token_budget: number };
  /** Engine time of one call of `recommended_batch`, ms. */
  estimated_execution_ms: number;
  tokens_per_second: number;
}

/**
 * One shape class of a lane that is not shape-invariant (such a lane "splits its profile by
 * shape class"). The probe groups what the lane gave by the shape of the engine
 * call (rows per call): `rows_alone` holds one row per call and every call size whose outputs
 * matched it (within the `shape_invariance` bar); `class_1`, `class_2` … hold the call sizes
 * that differed, a run of consecutive sizes each. Every class is held to the parity bar on its
 * own: against the reference lane when there is one, else (self-consistency) against
 * `rows_alone`.
 */
export interface ShapeClass {
  /** `rows_alone`, `class_1`, `class_2` … */
  id: string;
  /** The shapes in the class: the engine calls of so many rows, `calls of 1 row`, `calls of 9 rows`. */
  shapes: string[];
  /** Rows whose output the class was measured on. */
  rows: number;
  /**
   * Whether the lane serves this class: only `rows_alone` is (its calls are capped at
   * `shape_cap`), so every vector served under the fingerprint is a row-alone vector.
   */
  served: boolean;
  /**
   * The class held to the parity bar: `against` what (`reference`, or `rows_alone` where the
   * lane has no reference), `metric` (`mean_cosine` for embed, `max_abs_delta` for rerank),
   * its value, the bar and whether it met it. Absent for `rows_alone` when there is no
   * reference (nothing to hold it against but itself).
   */
  parity?: {
    against: "reference" | "rows_alone";
    metric: "mean_cosine" | "max_abs_delta";
    value: number;
    threshold: number;
    comparison: ">=" | "<=";
    passed: boolean;
  };
}

/** What the probe found for one lane. */
export interface ProbeLaneResult {
  model_id: string;
  /** `<catalog_id>-<backend>` for catalog models, else the model id. */
  lane_id: string;
  task: "embed" | "rerank" | "generate";
  cert_class: CertClass;
  numeric_profile_id: string;
  fingerprint: string;
  /** The reference lane the parity checks ran against; null when there was none. */
  reference_model_id: string | null;
  /** Every check passed. */
  passed: boolean;
  checks: ProbeCheck[];
  /** Checks that could not run on this lane and why, e.g. `reference_parity: no_reference_lane`. */
  checks_lacking: { id: string; reason: string }[];
  /**
   * `disabled` when the query path (one row on the interactive lane) did not match the batch
   * path: embed.query is then served by the batch path, so the space never forks.
   */
  query_path: "enabled" | "disabled";
  /**
   * Present when the lane is not shape-invariant: its shape classes, each held to the parity
   * bar on its own (check `shape_class_parity`). The lane then passes only if every class did;
   * its fingerprint stays one, since every class it serves is within the bar that makes any
   * lane the reference's space.
   */
  shape_classes?: ShapeClass[];
  /**
   * Present when the lane is not shape-invariant: the most rows one engine call may hold so every
   * call stays in `rows_alone` (the largest measured call size with every size up to it matching
   * the rows alone). The registry caps the lane's calls to it (`setShapeCap`), so every vector it
   * serves under its fingerprint is the row-alone vector (field report F4).
   */
  shape_cap?: number;
  perf: PerfRow[];
  knob_assignment: KnobAssignment;
  duration_ms: number;
  /** `PROBE_WORKLOAD_REVISION` of the workload the probe ran (lib/probe/workload.ts). */
  workload_revision?: string;
}

/** A row of `cert_rows`, keyed by (machine_profile_hash, numeric_profile_id, runtime_config_digest). */
export interface CertRow {
  machine_profile_hash: string;
  numeric_profile_id: string;
  /** sha256 (JCS) of the runtime settings outside the numeric profile that shape numbers. */
  runtime_config_digest: string;
  fingerprint: string;
  model_id: string;
  lane_id: string;
  cert_class: CertClass;
  status: "certified" | "uncertified";
  os_build: string;
  engine_identities: EngineIdentity[];
  model_digest: string;
  module_generation: number;
  probed_at_ms: number;
  /** The probe's findings: checks, checks_lacking, reference_model_id, query_path, shape_classes. */
  evidence: {
    checks: ProbeCheck[];
    checks_lacking: { id: string; reason: string }[];
    reference_model_id: string | null;
    query_path: "enabled" | "disabled";
    /** As {@link ProbeLaneResult.shape_classes}: present when the lane is not shape-invariant. */
    shape_classes?: ShapeClass[];
    /** As {@link ProbeLaneResult.shape_cap}. */
    shape_cap?: number;
    probe_job_id: string | null;
    duration_ms: number;
  };
}

/** A row of `catalog_self_checks` (docs/internals.md §8.1, §10). */
export interface SelfCheckRow {
  /** sha256 (JCS) of {catalog_id, manifest_digest, backend, fingerprint, engine, os_build, fixture_revision}. */
  check_id: string;
  catalog_id: string;
  backend: string;
  manifest_digest: string;
  fingerprint: string;
  state: "passed" | "failed";
  /**
   * The input that failed and why, when failed: `index` into the fixture's inputs, `reason` a
   * stable word (`dims_mismatch`, `non_finite`, `norm_out_of_range`, `query_batch_mismatch`,
   * `score_order_mismatch`, `expected_values_mismatch`, `empty_generation`,
   * `generation_nondeterministic`, `timeout`, or a row's error code), `detail` one line for people.
   */
  failed_input?: { index: number; reason: string; detail?: string };
  checked_at_ms: number;
  duration_ms: number;
}
