/**
 * The alias operations (docs/operations.md "Aliases and the table epoch"):
 * `alias.declare` and `alias.retract` change the alias table (mutate, owner, refused unless config
 * `alias_admin_enabled`), `aliases.check_index` tells an index built from several fingerprints
 * whether it is still one space (query). The table itself is lib/store/alias_store.ts; its rules
 * lib/identity/aliases.ts. Probe-measured rows are written by lib/ops/probe.ts
 * ({@link recordProbeAlias}).
 *
 * @module
 */
import { z } from "zod";
import { invalidRequest, SynapseError } from "../contract/errors.ts";
import { fingerprintName, parseParams } from "../contract/schemas.ts";
import {
  type DeclaredAliasEvidence,
  isFingerprint,
  orderPair,
  type ProbeAliasEvidence,
} from "../identity/aliases.ts";
import { matryoshkaVariants } from "../models/matryoshka.ts";
import type { ProbeLaneResult } from "../probe/types.ts";
import type { OpContext } from "./context.ts";

/** Longest `evidence` of `alias.declare` / `alias.retract`, in UTF-8 bytes of its JSON. */
export const ALIAS_EVIDENCE_MAX_BYTES = 4096;

/** Most fingerprints in `aliases.check_index`'s `provenance_set`. */
export const PROVENANCE_SET_MAX = 4096;

/**
 * The alias bar on the mean cosine between a probed lane's vectors and its reference's, over the
 * probe corpus: a probe-measured alias row is written only at or above it (and
 * {@link ALIAS_MIN_COSINE_THRESHOLD}). Stricter than certification's `probe.mean_cosine_threshold`
 * (0.999): certification says a lane's vectors are good enough to serve under its own
 * fingerprint; an alias says they may be mixed with the reference's in one index, without
 * re-embedding, so the two spaces must be indistinguishable, not just close (docs/models.md
 * "Aliases and the table epoch").
 */
export const ALIAS_MEAN_COSINE_THRESHOLD = 0.9999;

/**
 * The alias bar on the lowest cosine of any one probe item between a lane and its reference:
 * no single vector may be off by more than this for a probe-measured alias row (certification
 * records the minimum but does not bar on it).
 */
export const ALIAS_MIN_COSINE_THRESHOLD = 0.999;

/** A fingerprint param: the schema refuses anything but 64 hex and answers it lowercase. */
const fingerprintField = fingerprintName(64);
const EvidenceParam = z.record(z.string(), z.unknown());

/** `alias.declare` / `alias.retract` params: `left|fingerprint_a`, `right|fingerprint_b`, `evidence?`. */
export const AliasPairParams = z.strictObject({
  left: fingerprintField.optional(),
  fingerprint_a: fingerprintField.optional(),
  right: fingerprintField.optional(),
  fingerprint_b: fingerprintField.optional(),
  evidence: EvidenceParam.optional(),
});

/** `aliases.check_index {index_fingerprint, provenance_set[]}`. */
export const CheckIndexParams = z.strictObject({
  index_fingerprint: fingerprintField,
  provenance_set: z.array(fingerprintField).max(PROVENANCE_SET_MAX),
});

/** What `alias.declare` and `alias.retract` answer. */
export interface AliasChangeResult {
  module_generation: number;
  /** False when the table already said so: nothing written, epoch unchanged. */
  changed: boolean;
  /** The table epoch after the call. */
  table_epoch: number;
  /** The pair, in table order (a ≤ b). */
  fingerprint_a: string;
  fingerprint_b: string;
}

/** What `aliases.check_index` answers (lib/identity/aliases.ts `CheckIndexResult`). */
export interface CheckIndexOpResult {
  module_generation: number;
  /** The epoch of the table the answer was read from (one transaction). */
  table_epoch: number;
  status: "valid" | "migration_required";
  retracted_pair?: { fingerprint_a: string; fingerprint_b: string; valid_to_ms: number };
  /** Provenance fingerprints neither the index's nor live-equivalent to it (no retracted pair). */
  not_equivalent?: string[];
  rebuild_target?: string;
  rebuild_target_served?: boolean;
}

/**
 * `alias.declare {left|fingerprint_a, right|fingerprint_b, evidence?}`: the two fingerprints are
 * equivalent from now on (a row with `evidence: {source: "declared", …evidence}`). Declaring a
 * pair that is already active changes nothing (`changed: false`, epoch unchanged).
 *
 * @throws {SynapseError} `invalid_request` `{reason: "alias_admin_disabled"}` unless config
 * `alias_admin_enabled`; `invalid_request` naming the field for a missing or malformed
 * fingerprint, a fingerprint aliased with itself, or an evidence that is not a JSON object of at
 * most {@link ALIAS_EVIDENCE_MAX_BYTES} (or says `source` other than `declared`);
 * `store_failure`.
 */
export function aliasDeclare(ctx: OpContext, rawParams: unknown): AliasChangeResult {
  const p = pairParams("alias.declare", rawParams);
  requireAdmin(ctx, "alias.declare");
  const evidence: DeclaredAliasEvidence = { ...p.evidence, source: "declared" };
  const out = ctx.aliases.declare(p.a, p.b, evidence, ctx.now());
  logChange(ctx, "alias.declare", p, out.changed, out.table_epoch);
  return changeResult(ctx, p, out);
}

/**
 * `alias.retract {left|fingerprint_a, right|fingerprint_b, evidence?}`: the pair stops being
 * equivalent now (its active row gets `valid_to_ms`; rows are never deleted; `evidence`, when
 * given, is kept on the retracted row as `evidence.retraction`). A pair with no active row
 * changes nothing.
 *
 * @throws {SynapseError} as {@link aliasDeclare}.
 */
export function aliasRetract(ctx: OpContext, rawParams: unknown): AliasChangeResult {
  const p = pairParams("alias.retract", rawParams);
  requireAdmin(ctx, "alias.retract");
  const out = ctx.aliases.retract(p.a, p.b, ctx.now(), {
    ...(p.evidence === undefined ? {} : { retraction: p.evidence }),
  });
  logChange(ctx, "alias.retract", p, out.changed, out.table_epoch);
  return changeResult(ctx, p, out);
}

/**
 * `aliases.check_index {index_fingerprint, provenance_set[]}`: `valid`, or `migration_required`
 * naming the first retracted pair inside the index's fingerprints (`provenance_set` and
 * `index_fingerprint`), or else the provenance fingerprints not live-equivalent to the index's
 * (`not_equivalent`: another space mixed in), and the `rebuild_target`: the index fingerprint when a loaded model serves
 * it, else a served fingerprint still equivalent to it, else the index fingerprint
 * (`rebuild_target_served: false`: load a model that serves it). Rows and epoch are read in one
 * transaction.
 *
 * @throws {SynapseError} channel `invalid_request` naming the field (`provenance_set.3`) for a
 * value that is not a fingerprint; `store_failure`.
 */
export function aliasesCheckIndex(ctx: OpContext, rawParams: unknown): CheckIndexOpResult {
  const p = parseParams("aliases.check_index", CheckIndexParams, rawParams);
  // Every space a loaded model serves: its own and each Matryoshka width's.
  const served = new Set(
    ctx.registry.list().flatMap((m) =>
      m.ready === undefined
        ? []
        : [m.ready.fingerprint, ...matryoshkaVariants(m.ready).map((v) => v.fingerprint)]
    ),
  );
  const answer = ctx.aliases.checkIndex(p.index_fingerprint, p.provenance_set, ctx.now(), {
    served: (fp) => served.has(fp),
  });
  return { module_generation: ctx.moduleGeneration, ...answer };
}

/**
 * After a probed lane's result is recorded: writes (or keeps) the probe-measured alias row between
 * the lane's fingerprint and its reference's when the lane passed and its reference parity meets
 * the alias bar ({@link ALIAS_MEAN_COSINE_THRESHOLD}, {@link ALIAS_MIN_COSINE_THRESHOLD}), and
 * retracts that pair's probe row otherwise — a probe row is only as good as its latest probe
 * (an operator's declared row is left alone). Nothing happens without a reference, with a
 * reference of the same fingerprint, or on a lane without embedding parity (rerank, generation).
 *
 * @param ctx Module context.
 * @param result The lane's probe result.
 * @param reference The reference lane it was measured against.
 * @param probeJobId The probe job.
 * @returns What changed, or undefined when there was nothing to decide.
 * @throws {SynapseError} `store_failure`.
 */
export function recordProbeAlias(
  ctx: OpContext,
  result: ProbeLaneResult,
  reference: { modelId: string; laneId: string; fingerprint: string } | undefined,
  probeJobId: string | null,
): { declared: boolean; changed: boolean; table_epoch: number } | undefined {
  if (reference === undefined || result.reference_model_id === null) return undefined;
  if (reference.fingerprint === result.fingerprint) return undefined;
  if (!isFingerprint(reference.fingerprint) || !isFingerprint(result.fingerprint)) return undefined;
  const value = (id: string): number | undefined => {
    const v = result.checks.find((c) => c.id === id)?.value;
    return typeof v === "number" ? v : undefined;
  };
  const mean = value("reference_parity_mean_cosine");
  const min = value("reference_parity_min_cosine");
  if (mean === undefined || min === undefined) return undefined;
  const now = ctx.now();
  const meets = result.passed && mean >= ALIAS_MEAN_COSINE_THRESHOLD &&
    min >= ALIAS_MIN_COSINE_THRESHOLD;
  if (!meets) {
    const out = ctx.aliases.retract(result.fingerprint, reference.fingerprint, now, {
      onlySource: "probe",
    });
    if (out.changed) {
      ctx.log("warn", "synapse.alias", "probe alias retracted", {
        lane: result.lane_id,
        reference: reference.laneId,
        mean_cosine: mean,
        min_cosine: min,
        passed: result.passed,
        table_epoch: out.table_epoch,
      });
    }
    return { declared: false, ...out };
  }
  const evidence: ProbeAliasEvidence = {
    source: "probe",
    machine_profile_hash: ctx.machineProfileHash,
    lane_id: result.lane_id,
    model_id: result.model_id,
    reference_lane_id: reference.laneId,
    reference_model_id: reference.modelId,
    mean_cosine: mean,
    min_cosine: min,
    mean_cosine_threshold: ALIAS_MEAN_COSINE_THRESHOLD,
    min_cosine_threshold: ALIAS_MIN_COSINE_THRESHOLD,
    probe_job_id: probeJobId,
  };
  const out = ctx.aliases.declare(result.fingerprint, reference.fingerprint, evidence, now);
  if (out.changed) {
    ctx.log("info", "synapse.alias", "probe alias declared", {
      lane: result.lane_id,
      reference: reference.laneId,
      mean_cosine: mean,
      min_cosine: min,
      table_epoch: out.table_epoch,
    });
  }
  return { declared: true, ...out };
}

interface PairParams {
  a: string;
  b: string;
  /** Which names the caller used, for messages. */
  fieldA: string;
  fieldB: string;
  evidence?: Record<string, unknown>;
}

function pairParams(method: string, rawParams: unknown): PairParams {
  const p = parseParams(method, AliasPairParams, rawParams);
  const a = oneOf(method, p.left, p.fingerprint_a, "left", "fingerprint_a");
  const b = oneOf(method, p.right, p.fingerprint_b, "right", "fingerprint_b");
  if (a.value === b.value) {
    throw invalidRequest(
      `Cannot ${method}: '${b.field}' is the same fingerprint as '${a.field}' (an alias names two different fingerprints)`,
      { field: b.field },
    );
  }
  const out: PairParams = { a: a.value, b: b.value, fieldA: a.field, fieldB: b.field };
  if (p.evidence !== undefined) {
    const json = JSON.stringify(p.evidence);
    if (new TextEncoder().encode(json).byteLength > ALIAS_EVIDENCE_MAX_BYTES) {
      throw invalidRequest(
        `Cannot ${method}: field 'evidence' is longer than ${ALIAS_EVIDENCE_MAX_BYTES} bytes of JSON`,
        { field: "evidence" },
      );
    }
    if (p.evidence.source !== undefined && p.evidence.source !== "declared") {
      throw invalidRequest(
        `Cannot ${method}: field 'evidence.source' must be 'declared' (probe rows come from the probe only)`,
        { field: "evidence.source" },
      );
    }
    out.evidence = JSON.parse(json) as Record<string, unknown>;
  }
  return out;
}

function oneOf(
  method: string,
  x: string | undefined,
  y: string | undefined,
  nx: string,
  ny: string,
): { value: string; field: string } {
  if (x !== undefined && y !== undefined && x !== y) {
    throw invalidRequest(`Cannot ${method}: '${nx}' and '${ny}' name different fingerprints`, {
      field: ny,
    });
  }
  const value = x ?? y;
  if (value === undefined) {
    throw invalidRequest(`Cannot ${method}: field '${ny}' (or '${nx}') is required`, {
      field: ny,
    });
  }
  return { value, field: x !== undefined ? nx : ny };
}

function requireAdmin(ctx: OpContext, method: string): void {
  if (ctx.config.alias_admin_enabled) return;
  throw new SynapseError(
    "invalid_request",
    `Cannot ${method}: alias administration is off (config alias_admin_enabled is false). ` +
      `Set "alias_admin_enabled": true in the Synapse config (docs/config.md) and restart to ` +
      `declare or retract aliases; probe-measured aliases need no such setting`,
    { details: { reason: "alias_admin_disabled", config_key: "alias_admin_enabled" } },
  );
}

function changeResult(
  ctx: OpContext,
  p: PairParams,
  out: { changed: boolean; table_epoch: number },
): AliasChangeResult {
  const [a, b] = orderPair(p.a, p.b);
  return {
    module_generation: ctx.moduleGeneration,
    changed: out.changed,
    table_epoch: out.table_epoch,
    fingerprint_a: a,
    fingerprint_b: b,
  };
}

function logChange(
  ctx: OpContext,
  op: string,
  p: PairParams,
  changed: boolean,
  epoch: number,
): void {
  const [a, b] = orderPair(p.a, p.b);
  ctx.log("info", "synapse.alias", op, {
    fingerprint_a: a,
    fingerprint_b: b,
    changed,
    table_epoch: epoch,
  });
}
