/**
 * Alias rows: which fingerprints serve vectors of one space, and since when (docs/operations.md
 * "Aliases and the table epoch"). The pure rules; `lib/store/alias_store.ts` keeps the rows in the
 * store.
 *
 * An alias row says that two fingerprints give vectors a consumer may mix in one index: it holds
 * the pair in order (`fingerprint_a ≤ fingerprint_b`, by code point), the interval it is active
 * in (`valid_from_ms ≤ t < valid_to_ms`, `valid_to_ms` null while it has not been retracted) and
 * its evidence: `declared` (an operator said so through `alias.declare`) or `probe` (the probe
 * measured the two lanes on one machine profile and they agreed at the alias bar, see
 * `ALIAS_MEAN_COSINE_THRESHOLD` in lib/ops/probe.ts). Rows are never deleted: a retraction sets
 * `valid_to_ms`, and declaring the pair again adds a new row. Equivalence is **not transitive**:
 * A~B and B~C do not make A~C (each bar is measured between two lanes, and errors add up).
 * An alias never changes a fingerprint; it only says which fingerprints are interchangeable.
 *
 * @module
 */

import { compareCodePoints } from "./_compare.ts";

/** Evidence of an alias an operator declared (`alias.declare`); any further JSON fields are the caller's. */
export interface DeclaredAliasEvidence {
  /** Who made the row. */
  source: "declared";
  /** What the caller said, as given in `alias.declare`'s `evidence` (JSON values). */
  [field: string]: unknown;
}

/**
 * Evidence of an alias the probe measured: the two lanes, on one machine profile, agreed on the
 * probe's corpus at the alias bar.
 */
export interface ProbeAliasEvidence {
  /** Who made the row. */
  source: "probe";
  /** Hash of the machine profile (docs/internals.md §5) both lanes were measured on. */
  machine_profile_hash: string;
  /** The probed lane (its fingerprint is one side of the pair). */
  lane_id: string;
  /** The probed lane's model id. */
  model_id: string;
  /** The reference lane (its fingerprint is the other side). */
  reference_lane_id: string;
  /** The reference lane's model id. */
  reference_model_id: string;
  /** Mean cosine between the two lanes' vectors over the probe corpus. */
  mean_cosine: number;
  /** Lowest cosine of one item between the two lanes' vectors. */
  min_cosine: number;
  /** The bar `mean_cosine` met (≥). */
  mean_cosine_threshold: number;
  /** The bar `min_cosine` met (≥). */
  min_cosine_threshold: number;
  /** Durable probe job that measured it; null when the probe ran outside a job. */
  probe_job_id: string | null;
}

/** Why two fingerprints are equivalent. */
export type AliasEvidence = DeclaredAliasEvidence | ProbeAliasEvidence;

/** Where an equivalence comes from: `declared` by an operator, or measured by the `probe`. */
export type AliasSource = AliasEvidence["source"];

/** One row of the alias table (docs/internals.md §8.1 `alias_rows`). */
export interface AliasRow {
  /** The smaller fingerprint of the pair (code-point order), 64 lowercase hex. */
  fingerprint_a: string;
  /** The larger fingerprint of the pair, 64 lowercase hex; never equal to `fingerprint_a`. */
  fingerprint_b: string;
  /** Unix ms from which the row is active (inclusive). */
  valid_from_ms: number;
  /** Unix ms at which it stopped being active (exclusive); null while not retracted. */
  valid_to_ms: number | null;
  /** Why the pair is equivalent. */
  evidence: AliasEvidence;
}

/** A fingerprint equivalent to another, and where the equivalence comes from. */
export interface AliasEquivalent {
  /** The equivalent fingerprint. */
  fingerprint: string;
  /**
   * `probe` when a probe-measured row makes it equivalent, `declared` when only an operator's
   * declaration does (routing's `accept_declared` admits those).
   */
  source: AliasSource;
}

/** A pair whose every row is retracted, as {@link checkIndex} names it. */
export interface RetractedPair {
  fingerprint_a: string;
  fingerprint_b: string;
  /** Unix ms the pair's last row was retracted at. */
  valid_to_ms: number;
}

/** What {@link checkIndex} found. */
export interface CheckIndexResult {
  /**
   * `valid`: every fingerprint the index holds vectors of is its own or live-equivalent to it,
   * and no pair of them has been retracted. `migration_required`: the index mixes vectors of a
   * pair that is no longer equivalent (`retracted_pair`), or of a fingerprint that was never
   * equivalent to the index's (`not_equivalent`), and must be rebuilt.
   */
  status: "valid" | "migration_required";
  /** The first retracted pair (in `(a, b)` order) contained in the index's fingerprints. */
  retracted_pair?: RetractedPair;
  /**
   * With no retracted pair: the provenance fingerprints that are neither the index's nor
   * equivalent to it by a live row (sorted) — vectors of another space mixed into the index.
   */
  not_equivalent?: string[];
  /**
   * The fingerprint to rebuild the index under: the index fingerprint when something here
   * serves it; otherwise a served fingerprint still equivalent to it (probe-measured first, then
   * declared, each in code-point order); otherwise the index fingerprint (load a model serving
   * it, then rebuild). Present with `migration_required` only.
   */
  rebuild_target?: string;
  /** Whether a loaded model serves `rebuild_target` now. Present with `rebuild_target` only. */
  rebuild_target_served?: boolean;
}

const FINGERPRINT_RE = /^[0-9a-f]{64}$/;

/**
 * Whether `s` is a fingerprint: 64 lowercase hex characters (docs/internals.md §4).
 *
 * @param s Anything.
 * @returns True for a well-formed fingerprint.
 */
export function isFingerprint(s: unknown): s is string {
  return typeof s === "string" && FINGERPRINT_RE.test(s);
}

/**
 * Orders a pair the way the table stores it: smaller first, by code point (which for lowercase
 * hex is byte order).
 *
 * @param a One fingerprint.
 * @param b The other.
 * @returns `[min, max]`.
 */
export function orderPair(a: string, b: string): [string, string] {
  return compareCodePoints(a, b) <= 0 ? [a, b] : [b, a];
}

/**
 * Whether a row is active at `t`: `valid_from_ms ≤ t < valid_to_ms` (no upper bound while
 * `valid_to_ms` is null).
 *
 * @param row The row.
 * @param t Unix ms.
 */
export function isActive(row: AliasRow, t: number): boolean {
  return row.valid_from_ms <= t && (row.valid_to_ms === null || t < row.valid_to_ms);
}

/**
 * The fingerprints equivalent to `fp` at `t`: the other side of every row active at `t` that
 * names `fp` (not transitive), each once, `source: "probe"` when a probe row makes it equivalent,
 * ordered by fingerprint.
 *
 * @param rows The alias table (any order).
 * @param fp A fingerprint.
 * @param t Unix ms.
 * @returns The equivalents; empty when `fp` has none (or is not a fingerprint).
 */
export function equivalentsOf(
  rows: readonly AliasRow[],
  fp: string,
  t: number,
): AliasEquivalent[] {
  const found = new Map<string, AliasSource>();
  for (const row of rows) {
    if (!isActive(row, t)) continue;
    const other = row.fingerprint_a === fp
      ? row.fingerprint_b
      : row.fingerprint_b === fp
      ? row.fingerprint_a
      : undefined;
    if (other === undefined || other === fp) continue;
    if (found.get(other) !== "probe") found.set(other, row.evidence.source);
  }
  return [...found.entries()]
    .sort(([x], [y]) => compareCodePoints(x, y))
    .map(([fingerprint, source]) => ({ fingerprint, source }));
}

/**
 * The row of a pair active at `t`, if any (the latest by `valid_from_ms` when several are).
 *
 * @param rows The alias table.
 * @param a One fingerprint of the pair (either order).
 * @param b The other.
 * @param t Unix ms.
 */
export function activeRowOf(
  rows: readonly AliasRow[],
  a: string,
  b: string,
  t: number,
): AliasRow | undefined {
  const [x, y] = orderPair(a, b);
  let best: AliasRow | undefined;
  for (const row of rows) {
    if (row.fingerprint_a !== x || row.fingerprint_b !== y || !isActive(row, t)) continue;
    if (best === undefined || row.valid_from_ms > best.valid_from_ms) best = row;
  }
  return best;
}

/** Options of {@link checkIndex}. */
export interface CheckIndexOptions {
  /** Whether a loaded model serves a fingerprint now (picks `rebuild_target`). @default none is */
  served?: (fingerprint: string) => boolean;
}

/**
 * Checks an index built from vectors of several fingerprints against the alias table at `t`
 * (docs/operations.md "aliases.check_index"). `migration_required` when either
 * - a **retracted pair** — a pair with a row retracted at or before `t` and no row active at
 *   `t` — lies wholly inside the index's fingerprints, which are `provenance_set` together with
 *   `index_fingerprint` (its queries are embedded under that one, so it is part of what the index
 *   mixes); a pair declared again after its retraction is equivalent again, and no longer counts
 *   as retracted; or
 * - a provenance fingerprint is neither the index fingerprint nor equivalent to it by a live row
 *   (equivalence is pairwise, never transitive): vectors of a space that was never the index's
 *   (`not_equivalent`).
 *
 * @param rows The alias table.
 * @param indexFingerprint The fingerprint the index is kept under.
 * @param provenanceSet The fingerprints of the vectors in it.
 * @param t Unix ms.
 * @param options Which fingerprints are served (for `rebuild_target`).
 * @returns `valid`, or `migration_required` naming the first retracted pair (or the fingerprints
 *   not equivalent) and a rebuild target.
 */
export function checkIndex(
  rows: readonly AliasRow[],
  indexFingerprint: string,
  provenanceSet: readonly string[],
  t: number,
  options: CheckIndexOptions = {},
): CheckIndexResult {
  const members = new Set<string>([indexFingerprint, ...provenanceSet]);
  let retracted: RetractedPair | undefined;
  const pairs = new Map<string, { a: string; b: string; active: boolean; to: number | null }>();
  for (const row of rows) {
    if (!members.has(row.fingerprint_a) || !members.has(row.fingerprint_b)) continue;
    const key = `${row.fingerprint_a}:${row.fingerprint_b}`;
    const p = pairs.get(key) ??
      { a: row.fingerprint_a, b: row.fingerprint_b, active: false, to: null };
    if (isActive(row, t)) p.active = true;
    else if (row.valid_to_ms !== null && row.valid_to_ms <= t) {
      p.to = Math.max(p.to ?? row.valid_to_ms, row.valid_to_ms);
    }
    pairs.set(key, p);
  }
  for (const p of pairs.values()) {
    if (p.active || p.to === null) continue;
    const candidate: RetractedPair = { fingerprint_a: p.a, fingerprint_b: p.b, valid_to_ms: p.to };
    if (
      retracted === undefined ||
      compareCodePoints(p.a, retracted.fingerprint_a) < 0 ||
      (p.a === retracted.fingerprint_a && compareCodePoints(p.b, retracted.fingerprint_b) < 0)
    ) retracted = candidate;
  }
  let notEquivalent: string[] | undefined;
  if (retracted === undefined) {
    const live = new Set(equivalentsOf(rows, indexFingerprint, t).map((e) => e.fingerprint));
    const outside = [...new Set(provenanceSet)].filter((f) =>
      f !== indexFingerprint && !live.has(f)
    );
    if (outside.length === 0) return { status: "valid" };
    notEquivalent = outside.sort(compareCodePoints);
  }
  const served = options.served ?? (() => false);
  let target = indexFingerprint;
  if (!served(indexFingerprint)) {
    const eq = equivalentsOf(rows, indexFingerprint, t);
    const pick = eq.find((e) => e.source === "probe" && served(e.fingerprint)) ??
      eq.find((e) => served(e.fingerprint));
    if (pick !== undefined) target = pick.fingerprint;
  }
  return {
    status: "migration_required",
    ...(retracted === undefined ? {} : { retracted_pair: retracted }),
    ...(notEquivalent === undefined ? {} : { not_equivalent: notEquivalent }),
    rebuild_target: target,
    rebuild_target_served: served(target),
  };
}
