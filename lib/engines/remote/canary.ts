/**
 * The canary of a remote lane (docs/remote.md "Canary"): a few fixed inputs whose answers are
 * recorded the first time the lane's fingerprint is served (the baseline, kept in the store, so
 * a restart compares against the same numbers) and asked again when the lane loads and every
 * `canary.interval_ms` after. Answers that moved past the bar mean the provider serves other
 * numbers under the same name and deployment: the lane refuses with `remote_identity_drift`
 * until the operator either restores the provider or gives the entry a new `revision` (a new
 * fingerprint, a new vector space, a new baseline). A deployment the provider now reports
 * differently is `remote_deployment_changed`.
 *
 * Bars: embeddings, the cosine of each input's vector with its baseline ≥ `canary.min_cosine`
 * (default {@link CANARY_DEFAULT_MIN_COSINE}: an fp32 model re-served in int8 lands near 0.9998,
 * another model far lower); rerank scores, |Δ| ≤ {@link CANARY_SCORE_TOLERANCE} × max(1, |score|).
 * The inputs go as one request each time, in the same order, so a provider that batches
 * deterministically answers them bit for bit.
 *
 * @module
 */
import { SynapseError } from "../../contract/errors.ts";

/** The canary's inputs (embed: the texts; rerank: each text scored against {@link CANARY_QUERY}). */
export const CANARY_TEXTS: readonly string[] = [
  "The committee approved the budget after a long debate.",
  "Photosynthesis converts light energy into chemical energy.",
  "How do I reset my password?",
  "A quiet harbour town at dawn, fishing boats returning.",
];

/** The query the rerank canary scores {@link CANARY_TEXTS} against. */
export const CANARY_QUERY = "What does photosynthesis do?";

/**
 * Revision of {@link CANARY_TEXTS} / {@link CANARY_QUERY} and of how they are sent: part of the
 * baseline's key, so changing them records a new baseline instead of reporting drift.
 */
export const CANARY_REVISION = 1;

/** Default bar of an embedding canary: cosine with the baseline, per input. */
export const CANARY_DEFAULT_MIN_COSINE = 0.9999;

/** Default interval between canary checks, ms (0 turns the periodic check off). */
export const CANARY_DEFAULT_INTERVAL_MS = 300_000;

/** Bar of a rerank canary: |Δscore| ≤ this × max(1, |baseline score|). */
export const CANARY_SCORE_TOLERANCE = 1e-3;

/** A recorded baseline: the canary's answers, row-major. */
export interface CanaryBaseline {
  /** Values per input (the lane's dims; 1 for rerank). */
  dims: number;
  /** `inputs × dims` values. */
  values: number[];
  /** When it was recorded, ms since the epoch. */
  recordedAtMs: number;
}

/** What one comparison found. */
export interface CanaryVerdict {
  ok: boolean;
  /** The worst input's index. */
  worstInput: number;
  /** Embeddings: the lowest cosine; rerank: the largest |Δ| over its allowed tolerance. */
  measured: number;
  /** The bar `measured` was held to. */
  bar: number;
  /** `cosine` (embed) or `score_delta` (rerank). */
  metric: "cosine" | "score_delta";
}

/**
 * Compares the canary's answers now with the baseline.
 *
 * @param task `embed` or `rerank`.
 * @param baseline The recorded answers.
 * @param now The answers now, row-major, as many values as the baseline.
 * @param minCosine The embedding bar.
 * @returns The verdict; a length mismatch or a value that is not finite is never ok
 *   (`measured` NaN).
 */
export function compareCanary(
  task: "embed" | "rerank",
  baseline: CanaryBaseline,
  now: ArrayLike<number>,
  minCosine: number,
): CanaryVerdict {
  const dims = baseline.dims;
  const rows = baseline.values.length / dims;
  if (now.length !== baseline.values.length) {
    return {
      ok: false,
      worstInput: 0,
      measured: NaN,
      bar: task === "embed" ? minCosine : 1,
      metric: task === "embed" ? "cosine" : "score_delta",
    };
  }
  if (task === "rerank") {
    let worst = 0;
    let worstInput = 0;
    for (let i = 0; i < rows; i++) {
      const b = baseline.values[i]!;
      const ratio = Math.abs(now[i]! - b) / (CANARY_SCORE_TOLERANCE * Math.max(1, Math.abs(b)));
      if (Number.isNaN(ratio)) {
        return { ok: false, worstInput: i, measured: NaN, bar: 1, metric: "score_delta" };
      }
      if (ratio > worst) {
        worst = ratio;
        worstInput = i;
      }
    }
    return { ok: worst <= 1, worstInput, measured: worst, bar: 1, metric: "score_delta" };
  }
  let lowest = Infinity;
  let worstInput = 0;
  for (let i = 0; i < rows; i++) {
    let dot = 0;
    let na = 0;
    let nb = 0;
    for (let d = 0; d < dims; d++) {
      const a = baseline.values[i * dims + d]!;
      const b = now[i * dims + d]!;
      dot += a * b;
      na += a * a;
      nb += b * b;
    }
    const cos = dot / Math.sqrt(na * nb);
    if (Number.isNaN(cos)) {
      return { ok: false, worstInput: i, measured: NaN, bar: minCosine, metric: "cosine" };
    }
    if (cos < lowest) {
      lowest = cos;
      worstInput = i;
    }
  }
  return {
    ok: lowest >= minCosine,
    worstInput,
    measured: lowest,
    bar: minCosine,
    metric: "cosine",
  };
}

/**
 * The refusal of a lane whose canary moved: `remote_identity_drift`, naming the provider, the
 * deployment, the worst input and what it measured against the bar.
 */
export function canaryDriftError(
  provider: string,
  model: string,
  deployment: string,
  verdict: CanaryVerdict,
  recordedAtMs: number,
): SynapseError {
  const measured = Number.isNaN(verdict.measured)
    ? "an answer not finite, or of another shape"
    : verdict.metric === "cosine"
    ? `cosine ${verdict.measured.toFixed(6)} < ${verdict.bar}`
    : `a score ${verdict.measured.toFixed(2)}× past its tolerance`;
  return new SynapseError(
    "remote_identity_drift",
    `Remote provider '${provider}' answers model '${model}' (${deployment}) with other numbers than recorded on ${
      new Date(recordedAtMs).toISOString()
    }: canary input ${verdict.worstInput} moved (${measured}); its vectors are no longer this fingerprint's space. The lane refuses until the server restarts: restore the provider's model first, or give the entry a new "revision" to serve it as a new vector space`,
    {
      details: {
        provider,
        deployment,
        input: verdict.worstInput,
        metric: verdict.metric,
        measured: Number.isNaN(verdict.measured) ? null : verdict.measured,
        bar: verdict.bar,
        baseline_recorded_at_ms: recordedAtMs,
      },
    },
  );
}
