/**
 * The per-lane probe (docs/internals.md §12): runs the probe workload ({@link ./workload.ts})
 * through a model's control-class lanes (`registry.controlLanes(id)`: work queued under the
 * model's own schedulers, picked first, one micro-batch per run, never a side channel) and
 * records every check with what it measured and the bar it was held to.
 *
 * Checks (ids as in `ProbeCheck.id`, lib/probe/types.ts):
 *
 * - embed and rerank lanes: `query_path_equals_batch_path` (each text alone on the query lane vs
 *   batched on the batch lane), `shape_invariance` (each row in batches of 1…64 rows and at the
 *   micro-batch token edges vs that text alone on the batch lane; the batch sizes that differed
 *   are named), `determinism` (the batch path twice), `finite`, `dims`, `norm` (profiles that
 *   L2-normalise), `max_context` (a text of exactly the lane's max tokens is served),
 *   `over_max_context_refused` (max+1 is refused with `sequence_too_long` by the ops' own
 *   length check: the tokenizer pool, else the tokenizer);
 * - with a reference lane: embed `reference_parity_mean_cosine`, `reference_parity_min_cosine`
 *   (recorded, never failing), `reference_parity_worst_decile_overlap` (top-k neighbours of each
 *   vector among the workload's vectors, lane vs reference; the 10th percentile of the
 *   per-query overlaps); rerank `rerank_pearson`, `rerank_max_abs_delta`; without one the result
 *   lists `checks_lacking: [{id: "reference_parity", reason: "no_reference_lane"}]` (or
 *   `reference_not_loaded` when the source declares a `reference_model` that is not loaded);
 * - generation lanes: `greedy_serial_vs_concurrent` (20 prompts × 64 greedy tokens one after
 *   another, then all submitted at once: token-exact) and `greedy_determinism` (two runs
 *   token-exact: the concurrent run is the second when it matched; when it did not, the first
 *   {@link GREEDY_REPEAT_PROMPTS} prompts run once more, serially). Decode time bounds a
 *   generation probe (2 × 1280 generated tokens).
 *
 * A lane that is not shape-invariant (and serves every row) is split by shape class
 * ({@link ShapeClass}: `rows_alone` and the runs of call sizes that differed) and capped:
 * `shape_cap` is the largest call size with every measured size up to it matching the rows
 * alone, and the registry caps the lane's calls there, so it serves only `rows_alone` and every
 * vector under its fingerprint is the row-alone vector (field report F4). The parity checks run
 * on what it serves (the core rows in calls up to the cap); `shape_class_parity` records each
 * class against the reference (else against `rows_alone`) and never fails; `shape_invariance`
 * stays failed in the record without failing the lane; the query path is compared with the batch
 * path at one row per call.
 *
 * `query_path_equals_batch_path` failing does not fail the lane: the result says
 * `query_path: "disabled"` (the caller then disables the model's hot path, so the space never
 * forks) and `passed` is decided by the other checks.
 *
 * Performance: one {@link PerfRow} per batch size the batch lane ran (tokens/s of engine time,
 * start-delay p50 and call p50 from the lane timings `queueTimeMs` / `inferenceMs`), and a
 * {@link KnobAssignment}: the measured best throughput within the lane's limits.
 *
 * @module
 */
import { SynapseError } from "../contract/errors.ts";
import type { EngineRow, GenerateRequest } from "../engines/engine.ts";
import type { Dtype } from "../identity/numeric_profile.ts";
import type { Lane, LaneBatchResult } from "../lanes/lane.ts";
import type { ReadyModel } from "../models/model.ts";
import { planMicroBatches } from "../sched/micro_batch.ts";
import type { EncodeOutcome } from "../tokenize/tokenizer.ts";
import type { TokenizerPool } from "../tokenize/tokenizer_pool.ts";
import {
  allFinite,
  compareTokens,
  cosineStats,
  maxAbsDelta,
  norm,
  pearson,
  topKOverlap,
  worstDecile,
} from "./agreement.ts";
import type {
  CertClass,
  KnobAssignment,
  PerfRow,
  ProbeCheck,
  ProbeLaneResult,
  ShapeClass,
} from "./types.ts";
import {
  embedWorkload,
  generationWorkload,
  PROBE_WORKLOAD_REVISION,
  rerankWorkload,
  type WorkloadLimits,
} from "./workload.ts";

/** The bars a lane is held to (docs/internals.md §12; `probe.*` config keys for the first two). */
export interface ProbeThresholds {
  /** Least mean cosine against the reference (`probe.mean_cosine_threshold`, 0.999). */
  mean_cosine: number;
  /** Least worst-decile top-k overlap (`probe.worst_decile_rank_overlap_threshold`, 0.9). */
  worst_decile_overlap: number;
  /** Largest |norm − 1| of a vector of an L2-normalising profile (1e-3). */
  norm_tolerance: number;
  /** Least Pearson of rerank scores against the reference (0.999). */
  rerank_pearson: number;
  /** Largest |Δscore| against the reference (0.005 for an f32 lane, 0.02 otherwise). */
  rerank_max_abs_delta: number;
  /**
   * Least cosine of a text's query-path vector against its batch-path vector (0.99999: the two
   * paths must give the same vector, up to float rounding of padded batches).
   */
  query_batch_cosine: number;
  /** Least cosine of a row in a batch against the same text alone (0.99999). */
  shape_cosine: number;
  /** Least cosine between two runs of the same batch (0.999999). */
  determinism: number;
  /** Largest |Δscore| between a rerank lane's own paths, shapes and runs (1e-4). */
  score_self_delta: number;
}

/**
 * The probe's thresholds: the defaults of docs/internals.md §12, the two `probe.*` config keys, and
 * the rerank |Δ| bar of the lane's dtype and quantization (0.005 for an unquantized f32 lane, 0.02
 * otherwise: f16, bf16, an int8 lane whose dtype stays f32).
 *
 * @param probe `config.probe` (`mean_cosine_threshold`, `worst_decile_rank_overlap_threshold`).
 * @param dtype The lane's compute dtype (`profile.dtype`).
 * @param quant The lane's quantization (`profile.quant`); absent: the dtype.
 */
export function probeThresholds(
  probe: { mean_cosine_threshold?: number; worst_decile_rank_overlap_threshold?: number } = {},
  dtype: Dtype = "f32",
  quant?: string,
): ProbeThresholds {
  return {
    mean_cosine: probe.mean_cosine_threshold ?? 0.999,
    worst_decile_overlap: probe.worst_decile_rank_overlap_threshold ?? 0.9,
    norm_tolerance: 1e-3,
    rerank_pearson: 0.999,
    rerank_max_abs_delta: dtype === "f32" && (quant ?? "f32") === "f32" ? 0.005 : 0.02,
    query_batch_cosine: 0.99999,
    shape_cosine: 0.99999,
    determinism: 0.999999,
    score_self_delta: 1e-4,
  };
}

/** The lanes of one model the probe runs on (`registry.controlLanes(id)`). */
export interface ProbeLanes {
  /** Control-class lane on the model's interactive runtime: the query path. */
  query: Lane;
  /** Control-class lane on the model's bulk runtime: the batch path. */
  batch: Lane;
}

/** What {@link probeLane} probes. */
export interface ProbeLaneInput {
  model: ReadyModel;
  /** `<catalog_id>-<backend>` for catalog models, else the model id. */
  laneId: string;
  lanes: ProbeLanes;
  /** The reference lane (same weights, ORT fp32 CPU) for the parity checks. */
  reference?: { model: ReadyModel; lanes: ProbeLanes };
  /**
   * The model id the lane's source declares as its reference (`reference_model`), when any:
   * without {@link reference} the parity checks are then lacking with reason
   * `reference_not_loaded` (the model it names is not loaded) instead of `no_reference_lane`.
   */
  declaredReference?: string;
  /** The bars; missing ones from {@link probeThresholds}`({}, model.profile.dtype)`. */
  thresholds?: Partial<ProbeThresholds>;
  /** Knob (thread policy) the lane runs under, for the perf rows. */
  knob: string;
  /** The module's tokenizer pool: the max+1 refusal goes through it as the ops' does. */
  tokenizers?: TokenizerPool;
  /** Stops the probe between runs (and the run in flight at its next micro-batch). */
  signal?: AbortSignal;
  /** Progress: the step running, engine runs done and the total planned. A throw is ignored. */
  onProgress?: (step: string, done: number, total: number) => void;
  /**
   * Generation lanes: how many of the workload's 20 prompts to run (each for 64 greedy tokens,
   * serially and concurrently). Fewer only where a test must bound its time. @default 20
   */
  generationPrompts?: number;
  /** Top-k of the neighbour overlap. @default 10 */
  topK?: number;
  /** Wall clock, ms. @default performance.now */
  now?: () => number;
}

/**
 * Probes one lane.
 *
 * @returns The checks, what is lacking, the query-path verdict, perf rows and knob assignment.
 * @throws the signal's reason when it aborts.
 * @throws {SynapseError} what a lane throws for a whole run (`engine_crashed`, `probe_required`,
 *   `disposed`); `invalid_request` when the reference serves another task or other dims.
 */
export async function probeLane(input: ProbeLaneInput): Promise<ProbeLaneResult> {
  const now = input.now ?? (() => performance.now());
  const started = now();
  const model = input.model;
  const thresholds = {
    ...probeThresholds({}, model.profile.dtype, model.profile.quant),
    ...input.thresholds,
  };
  if (input.reference !== undefined) checkReference(model, input.reference.model);
  const ctx = new ProbeContext(input, thresholds);
  if (model.task === "generate") await probeGeneration(ctx);
  else await probeRows(ctx);
  const queryPathOk = ctx.checks.find((c) => c.id === QUERY_PATH)?.passed ?? true;
  // A lane split by shape class passes shape invariance through its classes' parity.
  const split = ctx.checks.some((c) => c.id === "shape_class_parity");
  const passed = ctx.checks.every((c) =>
    c.passed || c.id === QUERY_PATH || (split && c.id === "shape_invariance")
  );
  const perf = ctx.perfRows();
  return {
    model_id: model.modelId,
    lane_id: input.laneId,
    task: model.task,
    cert_class: CERT_CLASS[model.task],
    numeric_profile_id: model.numericProfileId,
    fingerprint: model.fingerprint,
    reference_model_id: input.reference?.model.modelId ?? null,
    passed,
    checks: ctx.checks,
    checks_lacking: ctx.lacking,
    query_path: queryPathOk ? "enabled" : "disabled",
    ...(ctx.shapeCap === undefined ? {} : { shape_cap: ctx.shapeCap }),
    ...(ctx.shapeClasses === undefined ? {} : {
      shape_classes: ctx.shapeClasses.map((k): ShapeClass => ({
        id: k.id,
        shapes: shapesOf(k),
        rows: k.measured.length,
        served: k.id === "rows_alone",
        ...(k.parity === undefined ? {} : { parity: k.parity }),
      })),
    }),
    perf,
    knob_assignment: knobAssignment(input.knob, perf, ctx.bestCall),
    duration_ms: Math.round(now() - started),
    workload_revision: PROBE_WORKLOAD_REVISION,
  };
}

const QUERY_PATH = "query_path_equals_batch_path";

const CERT_CLASS: Record<ReadyModel["task"], CertClass> = {
  embed: "embedding",
  rerank: "rerank",
  generate: "generation",
};

/** Shape sizes of the sweep, before the lane's `maxSequences` bounds them. */
export const SHAPE_BATCH_SIZES: readonly number[] = Object.freeze([
  1,
  2,
  3,
  7,
  8,
  9,
  16,
  31,
  32,
  33,
  64,
]);

function checkReference(model: ReadyModel, ref: ReadyModel): void {
  if (ref.task !== model.task || ref.dims !== model.dims) {
    throw new SynapseError(
      "invalid_request",
      `Cannot probe model '${model.modelId}' against '${ref.modelId}': the reference serves ${ref.task} with ${ref.dims} dims, the lane ${model.task} with ${model.dims}`,
      {
        details: {
          model_id: model.modelId,
          reference_model_id: ref.modelId,
          task: model.task,
          reference_task: ref.task,
        },
      },
    );
  }
}

/** One engine run the probe timed. */
interface Timed {
  rows: number;
  tokens: number;
  queueMs: number;
  inferenceMs: number;
}

/** State of one probe: checks, progress and timings. */
class ProbeContext {
  readonly input: ProbeLaneInput;
  readonly t: ProbeThresholds;
  readonly checks: ProbeCheck[] = [];
  readonly lacking: { id: string; reason: string }[] = [];
  /** Batch-lane runs, for the perf rows. */
  readonly timed: Timed[] = [];
  bestCall: Timed | undefined;
  #done = 0;
  total = 0;
  #step = "";

  constructor(input: ProbeLaneInput, t: ProbeThresholds) {
    this.input = input;
    this.t = t;
  }

  get model(): ReadyModel {
    return this.input.model;
  }

  step(name: string): void {
    this.#step = name;
    this.#progress();
  }

  ran(): void {
    this.#done++;
    this.#progress();
  }

  check(c: ProbeCheck): void {
    this.checks.push(c);
  }

  /** The lane's shape classes, when it is not shape-invariant ({@link shapeClassesOf}). */
  shapeClasses: ShapeClassRun[] | undefined;
  /** The shape cap, when the lane is not shape-invariant ({@link shapeClassesOf}). */
  shapeCap: number | undefined;

  #progress(): void {
    this.input.signal?.throwIfAborted();
    try {
      this.input.onProgress?.(this.#step, this.#done, Math.max(this.total, this.#done));
    } catch { /* observers must not break the probe */ }
  }

  /** Perf rows: batch-lane runs grouped by rows per run. */
  perfRows(): PerfRow[] {
    const groups = new Map<number, Timed[]>();
    for (const r of this.timed) {
      const g = groups.get(r.rows) ?? [];
      g.push(r);
      groups.set(r.rows, g);
    }
    const rows: PerfRow[] = [];
    let best: { tps: number; call: Timed } | undefined;
    for (const [n, g] of [...groups].sort((a, b) => a[0] - b[0])) {
      const tokens = g.reduce((a, r) => a + r.tokens, 0);
      const ms = g.reduce((a, r) => a + r.inferenceMs, 0);
      const tps = ms > 0 ? (tokens * 1000) / ms : 0;
      const callMs = median(g.map((r) => r.inferenceMs));
      rows.push({
        knob: this.input.knob,
        batch_rows: n,
        tokens_per_second: round3(tps),
        start_delay_p50_ms: round3(median(g.map((r) => r.queueMs))),
        call_ms_p50: round3(callMs),
      });
      if (best === undefined || tps > best.tps) {
        // The call that stands for the group: its median-token run.
        const sorted = [...g].sort((a, b) => a.tokens - b.tokens);
        const mid = sorted[Math.floor((sorted.length - 1) / 2)]!;
        best = { tps, call: { ...mid, inferenceMs: callMs } };
      }
    }
    this.bestCall = best?.call;
    return rows;
  }
}

function knobAssignment(knob: string, perf: PerfRow[], best: Timed | undefined): KnobAssignment {
  const row = perf.reduce<PerfRow | undefined>(
    (a, r) => a === undefined || r.tokens_per_second > a.tokens_per_second ? r : a,
    undefined,
  );
  return {
    knob,
    recommended_batch: { rows: best?.rows ?? 1, token_budget: best?.tokens ?? 0 },
    estimated_execution_ms: round3(best?.inferenceMs ?? 0),
    tokens_per_second: row?.tokens_per_second ?? 0,
  };
}

// ---------------------------------------------------------------------------------------------
// Embed and rerank lanes

/** One workload item: its text (or pair), its rows on the lane and on the reference. */
interface Item {
  label: string;
  row: EngineRow;
  /** The text (or pair) the row encodes, for the reference's tokenizer. */
  source: { query?: string; text: string };
}

/** What a lane gave for each row: the values, or why there are none. */
type Out =
  & ({ ok: true; values: Float32Array } | { ok: false; why: string })
  & {
    /** Rows of the engine call that gave it (its shape). */
    callRows: number;
  };

/** Runs rows on a lane one micro-batch per run (the lane's own plan); outputs by row. */
async function runRows(
  ctx: ProbeContext,
  lane: Lane,
  rows: readonly EngineRow[],
  timed: boolean,
  maxCallRows = Infinity,
): Promise<Out[]> {
  const kind = ctx.model.task === "rerank" ? "score" : "embed";
  const limits = lane.engine.limits;
  const out = new Array<Out>(rows.length);
  const plan = planMicroBatches(rows.map((r) => r.ids.length), {
    maxBatchTokens: limits.maxMicroBatchTokens,
    maxSequences: Math.min(limits.maxSequences, maxCallRows),
  });
  for (const idx of plan) {
    const callRows = idx.map((i) => rows[i]!);
    const res: LaneBatchResult = await lane.run(
      { kind, rows: callRows },
      { signal: ctx.input.signal, label: "probe" },
    );
    if (timed) {
      ctx.timed.push({
        rows: callRows.length,
        tokens: callRows.reduce((a, r) => a + r.ids.length, 0),
        queueMs: res.queueTimeMs,
        inferenceMs: res.inferenceMs,
      });
    }
    idx.forEach((i, k) => {
      const r = res.rows[k]!;
      out[i] = r.kind === "ok"
        ? { ok: true, values: Float32Array.from(r.values), callRows: callRows.length }
        : {
          ok: false,
          why: r.kind === "error" ? r.error.code : "non_finite",
          callRows: callRows.length,
        };
    });
    ctx.ran();
  }
  return out;
}

/** Engine runs {@link runRows} makes for `rows` on `lane`. */
function runsOf(lane: Lane, lengths: readonly number[]): number {
  const limits = lane.engine.limits;
  return planMicroBatches(lengths, {
    maxBatchTokens: limits.maxMicroBatchTokens,
    maxSequences: limits.maxSequences,
  }).length;
}

/** Compares two aligned output lists; embed by cosine (≥), rerank by |Δscore| (≤). */
interface Comparison {
  /** Worst value over the items both served. */
  value: number;
  /** Items that missed the bar. */
  bad: number[];
  /** Items one side did not serve. */
  missing: number[];
}

function compareOuts(ctx: ProbeContext, a: Out[], b: Out[], bar: number): Comparison {
  const score = ctx.model.task === "rerank";
  let value = score ? 0 : 1;
  const bad: number[] = [];
  const missing: number[] = [];
  a.forEach((x, i) => {
    const y = b[i]!;
    if (!x.ok || !y.ok) return void missing.push(i);
    if (score) {
      const d = maxAbsDelta(x.values, y.values);
      value = Math.max(value, d);
      if (!(d <= bar)) bad.push(i);
    } else {
      const c = cosineStats([x.values], [y.values]).min;
      value = Math.min(value, c);
      if (!(c >= bar)) bad.push(i);
    }
  });
  return { value, bad, missing };
}

function selfCheck(
  ctx: ProbeContext,
  id: string,
  cmp: Comparison,
  bar: number,
  what: string,
  detail?: string,
): ProbeCheck {
  const score = ctx.model.task === "rerank";
  const passed = cmp.bad.length === 0 && cmp.missing.length === 0;
  const notes: string[] = [];
  if (cmp.bad.length > 0) notes.push(`${cmp.bad.length} ${what} missed the bar`);
  if (cmp.missing.length > 0) notes.push(`${cmp.missing.length} ${what} not served`);
  if (detail !== undefined && !passed) notes.push(detail);
  return {
    id,
    passed,
    value: round9(cmp.value),
    threshold: bar,
    comparison: score ? "<=" : ">=",
    ...(notes.length > 0 ? { detail: notes.join("; ") } : {}),
  };
}

/** One shape of the sweep as it ran: its rows and what each gave (with its call's rows). */
interface ShapeCaseRun {
  name: string;
  rows: EngineRow[];
  outs: Out[];
}

/** A shape class: the call sizes in it and every (row, output) measured at those sizes. */
interface ShapeClassRun {
  id: string;
  /** Rows per engine call, ascending. */
  callRows: number[];
  measured: { row: EngineRow; out: Out }[];
  parity?: ShapeClass["parity"];
}

/** `9 rows` / `1 row`. */
function rowsName(n: number): string {
  return `${n} ${n === 1 ? "row" : "rows"}`;
}

/**
 * Groups what a lane that is not shape-invariant gave by the shape of the engine call (rows per
 * call) into shape classes: `rows_alone` holds the call sizes whose every output matched the
 * row alone (within `bar`; one row per call is in it by definition); the call sizes that
 * differed form `class_1`, `class_2` …, each a run of consecutive measured sizes broken by a
 * size that matched, or by two neighbours that disagree on the rows they share.
 *
 * @returns The classes, `rows_alone` first.
 */
function shapeClassesOf(
  ctx: ProbeContext,
  ran: readonly ShapeCaseRun[],
  aloneOf: ReadonlyMap<EngineRow, Out>,
  bar: number,
): ShapeClassRun[] {
  const bySize = new Map<number, { measured: { row: EngineRow; out: Out }[]; matches: boolean }>();
  for (const c of ran) {
    c.rows.forEach((row, i) => {
      const out = c.outs[i]!;
      const g = bySize.get(out.callRows) ?? { measured: [], matches: true };
      g.measured.push({ row, out });
      const cmp = compareOuts(ctx, [out], [aloneOf.get(row)!], bar);
      if (cmp.bad.length > 0 || cmp.missing.length > 0) g.matches = false;
      bySize.set(out.callRows, g);
    });
  }
  const base: ShapeClassRun = {
    id: "rows_alone",
    callRows: [1],
    measured: [...aloneOf].map(([row, out]) => ({ row, out })),
  };
  const split: ShapeClassRun[] = [];
  let open: ShapeClassRun | undefined;
  // The cap: the largest call size with every measured size up to it matching the rows alone.
  let cap = 1;
  let capOpen = true;
  for (const n of [...bySize.keys()].sort((x, y) => x - y)) {
    const g = bySize.get(n)!;
    if (capOpen && (n === 1 || g.matches)) cap = n;
    else capOpen = false;
    if (n === 1 || g.matches) {
      if (n !== 1) base.callRows.push(n);
      base.measured.push(...g.measured);
      open = undefined;
      continue;
    }
    if (open !== undefined && agrees(ctx, open.measured, g.measured, bar)) {
      open.callRows.push(n);
      open.measured.push(...g.measured);
      continue;
    }
    open = { id: `class_${split.length + 1}`, callRows: [n], measured: [...g.measured] };
    split.push(open);
  }
  ctx.shapeClasses = [base, ...split];
  ctx.shapeCap = cap;
  return ctx.shapeClasses;
}

/** The outputs two groups gave for the rows they share agree within `bar` (none shared: yes). */
function agrees(
  ctx: ProbeContext,
  a: readonly { row: EngineRow; out: Out }[],
  b: readonly { row: EngineRow; out: Out }[],
  bar: number,
): boolean {
  const first = new Map<EngineRow, Out>();
  for (const x of a) if (!first.has(x.row)) first.set(x.row, x.out);
  const mine: Out[] = [], theirs: Out[] = [];
  for (const x of b) {
    const y = first.get(x.row);
    if (y === undefined) continue;
    mine.push(x.out);
    theirs.push(y);
  }
  const cmp = compareOuts(ctx, mine, theirs, bar);
  return cmp.bad.length === 0 && cmp.missing.length === 0;
}

/** A class's shapes as names: `calls of 9 rows` … */
function shapesOf(k: ShapeClassRun): string[] {
  return k.callRows.map((n) => `calls of ${rowsName(n)}`);
}

/**
 * Measures every shape class against the parity bar and records `shape_class_parity` (recorded,
 * never failing: the lane serves only the calls up to its shape cap, whose parity the
 * `reference_parity_*` checks hold it to): embed classes by mean cosine
 * (`probe.mean_cosine_threshold`), rerank classes by max |Δscore| (the dtype's bar), against the
 * reference's outputs for the same rows when there is one, else against `rows_alone` (which then
 * has no parity of its own).
 */
function shapeClassParity(
  ctx: ProbeContext,
  classes: ShapeClassRun[],
  aloneOf: ReadonlyMap<EngineRow, Out>,
  refOf: ReadonlyMap<EngineRow, Out> | undefined,
): void {
  const t = ctx.t;
  const score = ctx.model.task === "rerank";
  const threshold = score ? t.rerank_max_abs_delta : t.mean_cosine;
  const comparison = score ? "<=" : ">=";
  const against = refOf === undefined ? "rows_alone" : "reference";
  const failed: string[] = [];
  let worst = score ? 0 : 1;
  for (const k of classes) {
    const other = refOf ?? (k.id === "rows_alone" ? undefined : aloneOf);
    if (other === undefined) continue;
    const lv: Float32Array[] = [], rv: Float32Array[] = [];
    for (const { row: r, out: o } of k.measured) {
      const y = other.get(r);
      if (o.ok && y !== undefined && y.ok) {
        lv.push(o.values);
        rv.push(y.values);
      }
    }
    const value = lv.length === 0
      ? Number.NaN
      : score
      ? maxAbsDelta(lv.map((v) => v[0]!), rv.map((v) => v[0]!))
      : cosineStats(lv, rv).mean;
    const passed = score ? value <= threshold : value >= threshold;
    k.parity = {
      against,
      metric: score ? "max_abs_delta" : "mean_cosine",
      value: round9(value),
      threshold,
      comparison,
      passed,
    };
    if (Number.isFinite(value)) worst = score ? Math.max(worst, value) : Math.min(worst, value);
    else worst = value;
    if (!passed) {
      failed.push(
        `${k.id} (${shapesOf(k).join(", ")}): ${score ? "max |Δscore|" : "mean cosine"} ${
          round9(value)
        } against ${against === "reference" ? "the reference" : "the rows alone"}`,
      );
    }
  }
  const names = classes.map((k) => `${k.id} (${shapesOf(k).join(", ")})`).join("; ");
  const cap = ctx.shapeCap ?? 1;
  ctx.check({
    id: "shape_class_parity",
    // Recorded: the classes past the cap are never served.
    passed: true,
    value: round9(worst),
    threshold,
    comparison,
    detail: `${classes.length} shape classes: ${names}; calls are capped at ${
      rowsName(cap)
    } (rows_alone): the other classes are not served${
      failed.length === 0
        ? ""
        : `; off the bar against ${against === "reference" ? "the reference" : "the rows alone"}: ${
          failed.join("; ")
        }`
    }`,
  });
}

/** The embed or rerank workload as items on a model's tokenizer. */
interface RowWorkload {
  /** The main set: query ≡ batch, determinism, parity. */
  core: Item[];
  /** The rows of the batch-size sweep (the short and batched texts; no long ones). */
  sweep: Item[];
  /** Text (or pair) builders for the reference's tokenizer, aligned with `core`. */
  coreTexts: { query?: string; text: string }[];
  boundary: { edge: string; rows: number; items: Item[] }[];
  maxContext: Item;
  overMax: { query?: string; text: string };
  overMaxIds: EngineRow;
}

function rowOf(ids: Int32Array, typeIds: Int32Array): EngineRow {
  return { ids, typeIds };
}

function encodeFor(
  model: ReadyModel,
  t: { query?: string; text: string },
  maxTokens = model.maxTokens,
): EngineRow {
  const seq = t.query === undefined
    ? model.tokenizer.encode(t.text, { maxTokens })
    : model.tokenizer.encodePair(t.query, t.text, { maxTokens });
  return rowOf(seq.ids, seq.typeIds);
}

function rowWorkload(model: ReadyModel, lanes: ProbeLanes): RowWorkload {
  const limits: WorkloadLimits = {
    maxTokens: Math.min(model.maxTokens, lanes.batch.engine.limits.maxSequenceTokens),
    maxMicroBatchTokens: lanes.batch.engine.limits.maxMicroBatchTokens,
    maxSequences: lanes.batch.engine.limits.maxSequences,
  };
  const item = (t: { query?: string; text: string }, label: string): Item => ({
    label,
    row: encodeFor(model, t),
    source: t,
  });
  const huge = 1 << 30;
  if (model.task === "rerank") {
    const w = rerankWorkload(model.tokenizer, limits);
    const coreTexts = w.groups.flatMap((g) =>
      g.candidates.map((text) => ({ query: g.query, text }))
    );
    const core = coreTexts.map((t, i) => item(t, `pair ${i}`));
    return {
      core,
      sweep: core,
      coreTexts,
      // Rerank rows are pairs of varied length; the shape sweep covers the micro-batch edges.
      boundary: [],
      maxContext: item({ query: w.maxContext.query, text: w.maxContext.candidate }, "max pair"),
      overMax: { query: w.overMax.query, text: w.overMax.candidate },
      overMaxIds: encodeFor(model, { query: w.overMax.query, text: w.overMax.candidate }, huge),
    };
  }
  const w = embedWorkload(model.tokenizer, limits);
  const coreTexts = [...w.batched, ...w.long].map((text) => ({ text }));
  const core = coreTexts.map((t, i) => item(t, `text ${i}`));
  return {
    core,
    sweep: core.slice(0, w.batched.length),
    coreTexts,
    boundary: w.boundary.map((b) => ({
      edge: `${b.edge} (${b.tokens} tokens × ${b.rows} rows)`,
      rows: b.rows,
      items: b.texts.map((text, i) => item({ text }, `${b.edge} text ${i}`)),
    })),
    maxContext: item({ text: w.maxContext }, "max-context text"),
    overMax: { text: w.overMax },
    overMaxIds: encodeFor(model, { text: w.overMax }, huge),
  };
}

/** `rows` rows cycling through `items`. */
function cycle<T>(items: readonly T[], rows: number): T[] {
  return Array.from({ length: rows }, (_, i) => items[i % items.length]!);
}

async function probeRows(ctx: ProbeContext): Promise<void> {
  const { model, lanes } = ctx.input;
  const t = ctx.t;
  const w = rowWorkload(model, lanes);
  const coreRows = w.core.map((x) => x.row);
  const coreLengths = coreRows.map((r) => r.ids.length);
  const maxSeq = lanes.batch.engine.limits.maxSequences;
  // A lane whose calls hold one row still runs multi-row requests (pipelined calls).
  const sizes = maxSeq > 1
    ? SHAPE_BATCH_SIZES.filter((n) => n <= maxSeq)
    : SHAPE_BATCH_SIZES.filter((n) => n <= 3);
  const sweepBase = w.sweep.map((x) => x.row);
  // One engine behind both lanes (a llama worker): the query path's rows alone are the batch
  // lane's batch-1 rows, so they are not run again.
  const sameEngine = lanes.query.engine === lanes.batch.engine;
  const sweepRows = sizes.map((n) => cycle(sweepBase, n));
  const boundaryBatches = w.boundary.map((b) => cycle(b.items.map((x) => x.row), b.rows));
  const ref = ctx.input.reference;
  const refRows = ref === undefined ? [] : w.coreTexts.map((x) => encodeFor(ref.model, x));
  ctx.total = coreRows.length + // query path
    2 * runsOf(lanes.batch, coreLengths) + // batch path, twice
    (sameEngine ? 0 : sweepBase.length) + // batch-1 baselines
    sweepRows.reduce((a, r) => a + runsOf(lanes.batch, r.map((x) => x.ids.length)), 0) +
    w.boundary.reduce((a, b) => a + b.items.length, 0) +
    boundaryBatches.reduce((a, r) => a + runsOf(lanes.batch, r.map((x) => x.ids.length)), 0) +
    2 + // max context, max+1 on the lane
    (ref === undefined ? 0 : runsOf(ref.lanes.batch, refRows.map((r) => r.ids.length)));

  // Query path: each text alone on the interactive runtime.
  ctx.step("query_path");
  const query: Out[] = [];
  for (const row of coreRows) query.push(...await runRows(ctx, lanes.query, [row], false));
  // Batch path: batched on the bulk runtime, twice.
  ctx.step("batch_path");
  const batch = await runRows(ctx, lanes.batch, coreRows, true);
  ctx.step("determinism");
  const again = await runRows(ctx, lanes.batch, coreRows, true);
  const score = model.task === "rerank";
  const selfBar = (cos: number) => score ? t.score_self_delta : cos;

  // Shape invariance: every row of every batch size and edge against the text alone.
  ctx.step("shape_invariance");
  const alone: Out[] = [];
  if (sameEngine) alone.push(...query.slice(0, sweepBase.length));
  else for (const row of sweepBase) alone.push(...await runRows(ctx, lanes.batch, [row], true));
  const aloneOf = new Map<EngineRow, Out>(sweepBase.map((r, i) => [r, alone[i]!]));
  const sourceOf = new Map<EngineRow, { query?: string; text: string }>(
    w.sweep.map((x) => [x.row, x.source]),
  );
  for (const b of w.boundary) {
    for (const x of b.items) {
      aloneOf.set(x.row, (await runRows(ctx, lanes.batch, [x.row], true))[0]!);
      sourceOf.set(x.row, x.source);
    }
  }
  const shapeBar = selfBar(t.shape_cosine);
  let shapeWorst = score ? 0 : 1;
  let shapeMissing = 0;
  const differed: string[] = [];
  const cases = [
    ...sizes.map((n, i) => ({ name: rowsName(n), rows: sweepRows[i]! })),
    ...w.boundary.map((b, i) => ({ name: b.edge, rows: boundaryBatches[i]! })),
  ];
  const ran: ShapeCaseRun[] = [];
  for (const c of cases) {
    const outs = await runRows(ctx, lanes.batch, c.rows, true);
    const cmp = compareOuts(ctx, outs, c.rows.map((r) => aloneOf.get(r)!), shapeBar);
    shapeWorst = score ? Math.max(shapeWorst, cmp.value) : Math.min(shapeWorst, cmp.value);
    shapeMissing += cmp.missing.length;
    if (cmp.bad.length > 0 || cmp.missing.length > 0) {
      differed.push(`${c.name}: ${cmp.bad.length + cmp.missing.length}/${c.rows.length} rows`);
    }
    ran.push({ name: c.name, rows: c.rows, outs });
  }
  // A lane whose rows differ with the shape (and serves them all) splits by shape class; one
  // that leaves rows unserved fails the check outright.
  const classes = differed.length > 0 && shapeMissing === 0
    ? shapeClassesOf(ctx, ran, aloneOf, shapeBar)
    : undefined;
  ctx.check({
    id: "shape_invariance",
    passed: differed.length === 0,
    value: round9(shapeWorst),
    threshold: shapeBar,
    comparison: score ? "<=" : ">=",
    ...(differed.length === 0 ? {} : {
      detail: `batch sizes that differed from the rows alone: ${differed.join(", ")}${
        shapeMissing > 0 ? ` (${shapeMissing} rows not served)` : ""
      }${
        classes === undefined
          ? ""
          : `; split into ${classes.length} shape classes: calls capped at ${
            rowsName(ctx.shapeCap ?? 1)
          }, the shapes that match the rows alone`
      }`,
    }),
  });

  // Query path ≡ batch path. A lane split by shape class compares them at the same shape (one
  // row per call): the shape's own effect is what the classes measure.
  const queryVs = classes === undefined ? batch : alone;
  ctx.check(
    selfCheck(
      ctx,
      QUERY_PATH,
      compareOuts(ctx, query.slice(0, queryVs.length), queryVs, selfBar(t.query_batch_cosine)),
      selfBar(t.query_batch_cosine),
      "items",
      "the query path is disabled: embed.query is served by the batch path",
    ),
  );
  ctx.check(
    selfCheck(
      ctx,
      "determinism",
      compareOuts(ctx, batch, again, selfBar(t.determinism)),
      selfBar(t.determinism),
      "items",
    ),
  );

  // Output facts over everything the batch path gave.
  const all = [...batch, ...again, ...(sameEngine ? [] : alone)];
  const bad = all.filter((o) => !o.ok) as { ok: false; why: string }[];
  const values = all.filter((o) => o.ok).map((o) => (o as { values: Float32Array }).values);
  const nonFinite = values.filter((v) => !allFinite(v)).length +
    bad.filter((b) => b.why === "non_finite").length;
  ctx.check({
    id: "finite",
    passed: nonFinite === 0 && bad.length === 0,
    value: nonFinite === 0 && bad.length === 0,
    threshold: null,
    comparison: "==",
    ...(nonFinite + bad.length === 0 ? {} : {
      detail: `${nonFinite} outputs not finite; ${bad.length} rows not served (${
        [...new Set(bad.map((b) => b.why))].join(", ")
      })`,
    }),
  });
  const wrongDims = values.filter((v) => v.length !== model.dims).length;
  ctx.check({
    id: "dims",
    passed: wrongDims === 0,
    value: values[0]?.length ?? null,
    threshold: model.dims,
    comparison: "==",
    ...(wrongDims === 0 ? {} : { detail: `${wrongDims} outputs are not ${model.dims} wide` }),
  });
  if (model.profile.normalization === "l2") {
    const worst = values.reduce((a, v) => Math.max(a, Math.abs(norm(v) - 1)), 0);
    ctx.check({
      id: "norm",
      passed: worst <= t.norm_tolerance,
      value: round9(worst),
      threshold: t.norm_tolerance,
      comparison: "<=",
      ...(worst <= t.norm_tolerance ? {} : { detail: `largest |norm − 1| is ${worst}` }),
    });
  }

  // Max context served, max+1 refused by the ops' own length check.
  ctx.step("max_context");
  const [maxOut] = await runRows(ctx, lanes.batch, [w.maxContext.row], false);
  ctx.check({
    id: "max_context",
    passed: maxOut!.ok && allFinite(maxOut!.values),
    value: maxOut!.ok ? `served:${w.maxContext.row.ids.length}` : `refused:${maxOut!.why}`,
    threshold: `served:${w.maxContext.row.ids.length}`,
    comparison: "==",
  });
  const refusal = await opLengthCheck(ctx, w.overMax);
  const [laneOver] = await runRows(ctx, lanes.batch, [w.overMaxIds], false);
  ctx.check({
    id: "over_max_context_refused",
    passed: refusal === "sequence_too_long",
    value: `refused:${refusal}`,
    threshold: "refused:sequence_too_long",
    comparison: "==",
    detail: `${w.overMaxIds.ids.length} tokens; the lane itself ${
      laneOver!.ok ? "served the row" : `refused the row: ${laneOver!.why}`
    }`,
  });

  // Parity with the reference lane.
  if (ref === undefined) {
    ctx.lacking.push({
      id: "reference_parity",
      reason: ctx.input.declaredReference === undefined
        ? "no_reference_lane"
        : "reference_not_loaded",
    });
    if (classes !== undefined) shapeClassParity(ctx, classes, aloneOf, undefined);
    return;
  }
  ctx.step("reference_parity");
  const refOut = await runRows(ctx, ref.lanes.batch, refRows, false);
  if (classes !== undefined) {
    // The reference's output for every row a class was measured on: the sweep rows are the
    // first core rows; the boundary rows run on the reference here.
    const refOf = new Map<EngineRow, Out>(sweepBase.map((r, i) => [r, refOut[i]!]));
    const extra = [...aloneOf.keys()].filter((r) => !refOf.has(r));
    const extraOut = await runRows(
      ctx,
      ref.lanes.batch,
      extra.map((r) => encodeFor(ref.model, sourceOf.get(r)!)),
      false,
    );
    extra.forEach((r, i) => refOf.set(r, extraOut[i]!));
    shapeClassParity(ctx, classes, aloneOf, refOf);
  }
  // What the lane serves: a lane split by shape class serves only calls up to its cap.
  const served = classes === undefined
    ? batch
    : await runRows(ctx, lanes.batch, coreRows, false, ctx.shapeCap ?? 1);
  const pairs: [Float32Array, Float32Array][] = [];
  served.forEach((o, i) => {
    const y = refOut[i]!;
    if (o.ok && y.ok) pairs.push([o.values, y.values]);
  });
  const missing = served.length - pairs.length;
  const missingNote = missing > 0 ? `; ${missing} items not served by one side` : "";
  if (score) {
    const a = pairs.map(([x]) => x[0]!), b = pairs.map(([, y]) => y[0]!);
    const r = pearson(a, b);
    const d = maxAbsDelta(a, b);
    ctx.check({
      id: "rerank_pearson",
      passed: r >= t.rerank_pearson && missing === 0,
      value: round9(r),
      threshold: t.rerank_pearson,
      comparison: ">=",
      ...(r >= t.rerank_pearson && missing === 0 ? {} : {
        detail: `Pearson of ${pairs.length} scores against the reference is ${r}${missingNote}`,
      }),
    });
    ctx.check({
      id: "rerank_max_abs_delta",
      passed: d <= t.rerank_max_abs_delta && missing === 0,
      value: round9(d),
      threshold: t.rerank_max_abs_delta,
      comparison: "<=",
      ...(d <= t.rerank_max_abs_delta && missing === 0
        ? {}
        : { detail: `largest |Δscore| against the reference is ${d}${missingNote}` }),
    });
    return;
  }
  const lv = pairs.map(([x]) => x), rv = pairs.map(([, y]) => y);
  const cs = cosineStats(lv, rv);
  const k = ctx.input.topK ?? 10;
  const overlap = worstDecile(topKOverlap(lv, rv, k));
  ctx.check({
    id: "reference_parity_mean_cosine",
    passed: cs.mean >= t.mean_cosine && missing === 0,
    value: round9(cs.mean),
    threshold: t.mean_cosine,
    comparison: ">=",
    ...(cs.mean >= t.mean_cosine && missing === 0
      ? {}
      : { detail: `mean cosine against the reference is ${cs.mean}${missingNote}` }),
  });
  ctx.check({
    id: "reference_parity_min_cosine",
    // Recorded, never failing: the mean and the overlap are the bars.
    passed: true,
    value: round9(cs.min),
    threshold: null,
    comparison: ">=",
    ...(cs.minIndex < 0 ? {} : { detail: `least at ${w.core[cs.minIndex]?.label}` }),
  });
  ctx.check({
    id: "reference_parity_worst_decile_overlap",
    passed: overlap >= t.worst_decile_overlap,
    value: round9(overlap),
    threshold: t.worst_decile_overlap,
    comparison: ">=",
    detail: `worst-decile top-${
      Math.min(k, Math.max(1, lv.length - 1))
    } overlap against the reference is ${overlap} (10th percentile over ${lv.length} query vectors)`,
  });
}

/**
 * The ops' own length check on a text (a pair's document) of max+1 tokens: the tokenizer pool,
 * as embed and rerank tokenize, else the tokenizer.
 *
 * @returns The refusal's code, or `served` when it was not refused.
 */
async function opLengthCheck(
  ctx: ProbeContext,
  t: { query?: string; text: string },
): Promise<string> {
  const model = ctx.model;
  const pool = ctx.input.tokenizers;
  let outcome: EncodeOutcome;
  if (pool !== undefined) {
    const opts = {
      maxTokens: model.maxTokens,
      truncate: false,
      signal: ctx.input.signal,
    };
    [outcome] = t.query === undefined
      ? await pool.encodeItems(model.tokenizer, [t.text], opts) as [EncodeOutcome]
      : await pool.encodePairs(model.tokenizer, t.query, [t.text], opts) as [EncodeOutcome];
  } else {
    try {
      encodeFor(model, t);
      return "served";
    } catch (err) {
      return err instanceof SynapseError ? err.code : String(err);
    }
  }
  if (outcome.ok) return "served";
  return outcome.error instanceof SynapseError ? outcome.error.code : outcome.error.message;
}

// ---------------------------------------------------------------------------------------------
// Generation lanes

/**
 * Prompts of the generation workload run a third time, serially (`greedy_determinism`), when the
 * serial and the concurrent run differed: the re-run tells nondeterminism from a concurrency
 * effect. When they matched, the concurrent run is the second run and nothing more is decoded.
 */
export const GREEDY_REPEAT_PROMPTS = 5;

async function probeGeneration(ctx: ProbeContext): Promise<void> {
  const { model, lanes } = ctx.input;
  const w = generationWorkload();
  const context = model.profile.certified_shape.max_context_tokens;
  const prompts = w.prompts.slice(0, Math.max(1, ctx.input.generationPrompts ?? w.prompts.length));
  const requests: GenerateRequest[] = prompts.map((prompt) => {
    // As microllm.oneshot: the prompt is plain text, no truncation.
    const seq = model.tokenizer.encode(prompt, { maxTokens: model.maxTokens });
    return { ids: seq.ids, maxTokens: Math.min(w.maxTokens, context - seq.ids.length) };
  });
  const repeat = requests.slice(0, GREEDY_REPEAT_PROMPTS);
  ctx.total = 2 * requests.length;
  const signal = ctx.input.signal;
  const serial = async (requests: GenerateRequest[]): Promise<number[][]> => {
    const out: number[][] = [];
    for (const request of requests) {
      const r = await lanes.query.run({ kind: "generate", request }, { signal, label: "probe" });
      ctx.timed.push({
        rows: 1,
        tokens: r.output.generatedIds.length,
        queueMs: r.queueTimeMs,
        inferenceMs: r.inferenceMs,
      });
      out.push(r.output.generatedIds);
      ctx.ran();
    }
    return out;
  };
  ctx.step("greedy_serial");
  const first = await serial(requests);
  ctx.step("greedy_concurrent");
  const concurrent = await Promise.all(requests.map(async (request) => {
    const r = await lanes.batch.run({ kind: "generate", request }, { signal, label: "probe" });
    ctx.ran();
    return r.output.generatedIds;
  }));
  const conc = compareTokens(first, concurrent);
  const mismatch = (c: ReturnType<typeof compareTokens>, n: number, what: string) =>
    c.firstMismatch === undefined ? {} : {
      detail: `${
        n - c.matching
      }/${n} prompts differ ${what}; first: prompt ${c.firstMismatch.index} at token ${c.firstMismatch.position}`,
    };
  ctx.check({
    id: "greedy_serial_vs_concurrent",
    passed: conc.equal,
    value: conc.matching / requests.length,
    threshold: 1,
    comparison: "==",
    ...mismatch(conc, requests.length, "between the serial and the concurrent run"),
  });
  if (conc.equal) {
    // The concurrent run is a second run of every prompt, token-exact: determinism across two
    // runs is shown on all of them, and a third run would only spend decode time.
    ctx.check({
      id: "greedy_determinism",
      passed: true,
      value: 1,
      threshold: 1,
      comparison: "==",
      detail:
        `${requests.length} prompts token-exact across two runs (the serial and the concurrent run)`,
    });
  } else {
    // They differed: a serial re-run of the first prompts tells nondeterminism from a
    // concurrency effect.
    ctx.step("greedy_determinism");
    ctx.total += repeat.length;
    const second = await serial(repeat);
    const det = compareTokens(first.slice(0, repeat.length), second);
    ctx.check({
      id: "greedy_determinism",
      passed: det.equal,
      value: det.matching / repeat.length,
      threshold: 1,
      comparison: "==",
      ...mismatch(det, repeat.length, "between two serial runs"),
    });
  }
  ctx.lacking.push({ id: "reference_parity", reason: "no_reference_lane" });
}

function median(xs: readonly number[]): number {
  if (xs.length === 0) return 0;
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

function round3(x: number): number {
  return Math.round(x * 1000) / 1000;
}

function round9(x: number): number {
  return Number.isFinite(x) ? Math.round(x * 1e9) / 1e9 : x;
}
