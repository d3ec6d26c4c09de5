/**
 * The catalog self-check (docs/internals.md §10): when a catalog model is installed
 * (`models.download` → loaded), and again at boot for an installed catalog model whose key has
 * no row, the model's lanes run {@link SELF_CHECK_INPUTS} — eight fixed, shipped texts — and
 * their outputs are held to what the catalog says of the model:
 *
 * | lane | checks, per input in order |
 * |---|---|
 * | embed | values per row = the catalog's `dims`; every value finite; \|norm − 1\| ≤ {@link NORM_TOLERANCE} when the lane normalizes; query ≡ batch: each input alone vs all eight in one batch, cosine ≥ {@link QUERY_BATCH_MIN_COSINE}; the pinned expected values, where the catalog has them |
 * | rerank | one finite score per (query, input) pair; scored alone and batched, the scores agree in input order (\|Δ\| ≤ {@link SCORE_TOLERANCE} × max(1, \|score\|)); pinned expected scores |
 * | generate | a short greedy generation ({@link SELF_CHECK_GENERATE_TOKENS} tokens) of input 0 is non-empty, and the same twice |
 *
 * The whole check has a ceiling of {@link SELF_CHECK_CEILING_MS} ms of engine work: the engine's
 * own time of each call, from when it starts on the engine (waits in the lane's queue and a
 * worker's cold start do not count, so a busy machine does not fail a good model); a check past
 * it fails with reason `timeout` — after a second try, as the cores may have been busy; a row that
 * failed `timeout` is not reused (the next load runs the check again).
 *
 * A check is keyed by `check_id` = JCS-SHA256 of {catalog_id, manifest_digest, backend,
 * fingerprint, engine (identity), os_build, fixture_revision} ({@link selfCheckId}); its row in
 * `catalog_self_checks` is reused while the key holds (a restart runs nothing), and another OS
 * build, engine build, file set or fixture revision is a new key, so the check runs again.
 *
 * The work goes through the model's own lanes, under their schedulers (the registry's control
 * lanes when it has them, else the interactive lane), never a side channel. While it runs,
 * `models.remove` and `model.unload` list a holder of kind `self_check`; the model serves
 * meanwhile (`self_check.state: "pending"`). A failed check is permanent for its key: the model
 * refuses inference with `self_check_failed {model_id, backend, check_id, reason}` naming the
 * failing input ({@link refuseFailedSelfCheck}), and `/health` shows it failed with that reason.
 *
 * @module
 */
import { SynapseError } from "../contract/errors.ts";
import { jcsSha256, type JsonValue } from "../identity/jcs.ts";
import type { EngineIdentity } from "../identity/numeric_profile.ts";
import type { Lane, LaneResult, LaneWork, RowOutput } from "../lanes/lane.ts";
import { type LogSink, nullLog } from "../log/log.ts";
import type { EngineRow } from "../engines/engine.ts";
import {
  type CatalogBackend,
  catalogLaneId,
  type CatalogModel,
  type SelfCheckExpected,
} from "../models/catalog.ts";
import type { ModelEntry, ReadyModel } from "../models/model.ts";
import type { CatalogSelfCheck, SelfCheckView } from "../models/model_loads.ts";
import type { SelfCheckStore } from "./self_check_store.ts";
import type { SelfCheckRow } from "./types.ts";

export type { SelfCheckView };

/**
 * Revision of the shipped inputs ({@link SELF_CHECK_INPUTS}, {@link SELF_CHECK_RERANK_QUERY})
 * and of how they are run: part of every `check_id`, so changing either runs every check again.
 */
export const SELF_CHECK_FIXTURE_REVISION = 1;

/** Ceiling of one whole self-check, ms of work on the engine. */
export const SELF_CHECK_CEILING_MS = 2000;

/** Least cosine between an input embedded alone and the same input in the batch of eight. */
export const QUERY_BATCH_MIN_COSINE = 0.99999;

/** Largest \|norm − 1\| of a vector from a lane that L2-normalizes. */
export const NORM_TOLERANCE = 1e-3;

/** Largest \|Δ\| between a score alone and batched, relative to max(1, \|score\|). */
export const SCORE_TOLERANCE = 1e-4;

/** Tokens of the greedy generation a generation lane's check runs (twice). */
export const SELF_CHECK_GENERATE_TOKENS = 8;

/**
 * Work that has not started on the engine this long after the check began is given up: the
 * check is not recorded (the model stays `pending`, and the next boot runs it again).
 */
export const SELF_CHECK_ABANDON_MS = 120_000;

/**
 * The eight inputs (fixture revision {@link SELF_CHECK_FIXTURE_REVISION}): short and long,
 * punctuation, digits, accents and CJK, an emoji, a question. Input 5 holds the word "poison",
 * the token the generated `synapse-tiny-embed-nan` model turns into +Infinity (its check fails
 * `non_finite` there, as a real model with broken weights would).
 */
export const SELF_CHECK_INPUTS: readonly string[] = Object.freeze([
  "The quick brown fox jumps over the lazy dog.",
  "Synapse turns text into vectors on this machine, and never mixes two vector spaces.",
  "How do plants turn sunlight into chemical energy?",
  "A short one.",
  "Numbers and symbols: 3.14159, 2.71828, 1.41421, 42 % and #7.",
  "Is this mushroom poison, or is it safe to eat?",
  "Accents and scripts: café, naïve, Straße, 東京, Москва 🙂",
  "A longer paragraph, so the batch has rows of different lengths: the river rose after three " +
  "days of rain, the old bridge held, and by morning the town had counted its boats, dried its " +
  "books and opened the market again as if nothing had happened at all.",
]);

/** The query of a rerank lane's (query, input) pairs. */
export const SELF_CHECK_RERANK_QUERY = "Which of these texts is about plants and energy?";

/** The facts a self-check is keyed by (`check_id`, docs/internals.md §10). */
export interface SelfCheckKeyFacts {
  catalog_id: string;
  /** The installed manifest (lib/models/catalog.ts `manifestDigest`). */
  manifest_digest: string;
  backend: string;
  /** The loaded lane's fingerprint (64 hex). */
  fingerprint: string;
  /** The identity of the engine serving it. */
  engine: EngineIdentity;
  /** The machine profile's `os_build` (`SYNAPSE_OS_BUILD_OVERRIDE` replaces it). */
  os_build: string;
  /** @default SELF_CHECK_FIXTURE_REVISION */
  fixture_revision?: number;
}

/**
 * `check_id` of a self-check: JCS-SHA256 of its key facts.
 *
 * @returns `sha256:<hex>`.
 */
export function selfCheckId(facts: SelfCheckKeyFacts): string {
  return jcsSha256({
    catalog_id: facts.catalog_id,
    manifest_digest: facts.manifest_digest,
    backend: facts.backend,
    fingerprint: facts.fingerprint,
    engine: facts.engine as unknown as JsonValue,
    os_build: facts.os_build,
    fixture_revision: facts.fixture_revision ?? SELF_CHECK_FIXTURE_REVISION,
  });
}

/** The two lanes a check runs on: one row at a time (`query`) and the batch of eight (`batch`). */
export interface SelfCheckLanes {
  query: Lane;
  batch: Lane;
}

/** What one check runs on and holds the outputs to. */
export interface SelfCheckTarget {
  /** The loaded model: tokenizer, task, limits. */
  ready: ReadyModel;
  lanes: SelfCheckLanes;
  /** The catalog's `dims` (vector width; 1 for rerank; 0 for generate). */
  dims: number;
  /** The lane L2-normalizes (the catalog backend's `normalize`). */
  normalize: boolean;
  /** Pinned values (the catalog backend's `self_check_expected`). */
  expected?: SelfCheckExpected;
}

/** Options of {@link runSelfCheck}. */
export interface RunSelfCheckOptions {
  /** Ceiling of the whole check, ms of engine work. Tests only. @default SELF_CHECK_CEILING_MS */
  ceilingMs?: number;
  /** Stops the check (its work is refused or cancelled on the lane). */
  signal?: AbortSignal;
}

/** How a check ended. */
export interface SelfCheckOutcome {
  passed: boolean;
  /** The first input that failed, and why (absent when passed). */
  failed_input?: { index: number; reason: string; detail?: string };
  /** ms of engine work the check took (what the ceiling is held against). */
  duration_ms: number;
}

/** One failed input: ends the check. */
class InputFailure extends Error {
  constructor(readonly index: number, readonly reason: string, readonly detail: string) {
    super(`input ${index}: ${reason} (${detail})`);
  }
}

/**
 * Runs the self-check of one loaded lane (see the module doc for the checks).
 *
 * @returns Passed, or the first input that failed with its reason; the engine time taken.
 * @throws what a lane throws for the whole work (`engine_crashed`, `disposed`, the signal's
 *   reason): the check did not end, so nothing is to be recorded.
 */
export async function runSelfCheck(
  target: SelfCheckTarget,
  options: RunSelfCheckOptions = {},
): Promise<SelfCheckOutcome> {
  const ceiling = options.ceilingMs ?? SELF_CHECK_CEILING_MS;
  let engineMs = 0;
  const run: Run = async (lane, work, index) => {
    const res = await lane.run(work, { label: "self_check", signal: options.signal });
    // The engine's own measure of its calls, from when each started on the engine: neither the
    // lane's queue wait nor a worker's cold start is the model's time.
    engineMs += res.inferenceMs;
    if (engineMs > ceiling) {
      throw new InputFailure(
        index,
        "timeout",
        `the check took ${Math.round(engineMs)} ms of engine work, past its ${ceiling} ms ceiling`,
      );
    }
    return res;
  };
  try {
    const { ready } = target;
    if (ready.dims !== target.dims) {
      throw new InputFailure(
        0,
        "dims_mismatch",
        `the lane gives ${ready.dims} values per row, the catalog says ${target.dims}`,
      );
    }
    if (ready.task === "generate") await checkGenerate(target, run);
    else await checkRows(target, run);
    return { passed: true, duration_ms: engineMs };
  } catch (err) {
    if (!(err instanceof InputFailure)) throw err;
    return {
      passed: false,
      failed_input: { index: err.index, reason: err.reason, detail: err.detail },
      duration_ms: engineMs,
    };
  }
}

/** Runs one piece of a check's work on a lane, counting its engine time. */
type Run = <W extends LaneWork>(lane: Lane, work: W, index: number) => Promise<LaneResult<W>>;

/** Embed and rerank lanes: each input alone, then all eight in one batch. */
async function checkRows(
  target: SelfCheckTarget,
  run: Run,
): Promise<void> {
  const { ready } = target;
  const kind = ready.task === "rerank" ? "score" : "embed";
  const opts = { maxTokens: ready.maxTokens, truncate: true };
  const rows: EngineRow[] = SELF_CHECK_INPUTS.map((text) => {
    const seq = kind === "score"
      ? ready.tokenizer.encodePair(SELF_CHECK_RERANK_QUERY, text, opts)
      : ready.tokenizer.encode(text, opts);
    return { ids: seq.ids, typeIds: seq.typeIds };
  });
  const alone: Float32Array[] = [];
  for (let i = 0; i < rows.length; i++) {
    const res = await run(target.lanes.query, { kind, rows: [rows[i]!] }, i);
    const values = rowValues(res.rows[0], i, target.dims);
    if (kind === "embed" && target.normalize) {
      const norm = Math.sqrt(values.reduce((a, v) => a + v * v, 0));
      if (!(Math.abs(norm - 1) <= NORM_TOLERANCE)) {
        throw new InputFailure(
          i,
          "norm_out_of_range",
          `norm ${norm}, more than ${NORM_TOLERANCE} from 1`,
        );
      }
    }
    alone.push(values.slice());
  }
  const batch = await run(target.lanes.batch, { kind, rows }, 0);
  for (let i = 0; i < rows.length; i++) {
    const values = rowValues(batch.rows[i], i, target.dims);
    const a = alone[i]!;
    if (kind === "embed") {
      const c = cosine(a, values);
      if (!(c >= QUERY_BATCH_MIN_COSINE)) {
        throw new InputFailure(
          i,
          "query_batch_mismatch",
          `cosine ${c} between the input alone and in the batch of ${rows.length}, below ${QUERY_BATCH_MIN_COSINE}`,
        );
      }
    } else {
      const d = Math.abs(a[0]! - values[0]!);
      if (!(d <= SCORE_TOLERANCE * Math.max(1, Math.abs(a[0]!)))) {
        throw new InputFailure(
          i,
          "score_order_mismatch",
          `score ${a[0]} alone but ${values[0]} at position ${i} of the batch`,
        );
      }
    }
  }
  checkExpected(target.expected, alone);
}

/** The values of one row's output, or the failure it is. */
function rowValues(out: RowOutput | undefined, index: number, dims: number): Float32Array {
  if (out === undefined) {
    throw new InputFailure(index, "missing_output", "the lane gave no output for the row");
  }
  if (out.kind === "non_finite") {
    throw new InputFailure(index, "non_finite", "the output holds NaN or ±Infinity");
  }
  if (out.kind === "error") {
    throw new InputFailure(index, out.error.code, out.error.message);
  }
  if (out.values.length !== dims) {
    throw new InputFailure(
      index,
      "dims_mismatch",
      `${out.values.length} values, the catalog says ${dims}`,
    );
  }
  for (const v of out.values) {
    if (!Number.isFinite(v)) {
      throw new InputFailure(index, "non_finite", "the output holds NaN or ±Infinity");
    }
  }
  return out.values;
}

/** Pinned expected values: the first values of the listed inputs' outputs, within a tolerance. */
function checkExpected(expected: SelfCheckExpected | undefined, outputs: Float32Array[]): void {
  if (expected === undefined) return;
  if (expected.fixture_revision !== SELF_CHECK_FIXTURE_REVISION) {
    throw new InputFailure(
      expected.inputs[0]?.index ?? 0,
      "expected_values_stale",
      `the catalog's values were measured on fixture revision ${expected.fixture_revision}, this build runs revision ${SELF_CHECK_FIXTURE_REVISION}`,
    );
  }
  for (const e of expected.inputs) {
    const got = outputs[e.index];
    if (got === undefined || e.first_values.length > got.length) {
      throw new InputFailure(
        e.index,
        "expected_values_mismatch",
        `the catalog pins ${e.first_values.length} values of input ${e.index}, the lane gave ${
          got?.length ?? 0
        }`,
      );
    }
    for (let k = 0; k < e.first_values.length; k++) {
      const d = Math.abs(got[k]! - e.first_values[k]!);
      if (!(d <= expected.tolerance)) {
        throw new InputFailure(
          e.index,
          "expected_values_mismatch",
          `value ${k} is ${got[k]}, the catalog pins ${
            e.first_values[k]
          } (tolerance ${expected.tolerance})`,
        );
      }
    }
  }
}

/** Generation lanes: input 0, greedy, twice: non-empty and the same. */
async function checkGenerate(
  target: SelfCheckTarget,
  run: Run,
): Promise<void> {
  const { ready } = target;
  const seq = ready.tokenizer.encode(SELF_CHECK_INPUTS[0]!, {
    maxTokens: Math.max(1, ready.maxTokens - SELF_CHECK_GENERATE_TOKENS),
    truncate: true,
  });
  const request = { ids: seq.ids, maxTokens: SELF_CHECK_GENERATE_TOKENS };
  const ids: number[][] = [];
  for (const lane of [target.lanes.query, target.lanes.batch]) {
    const res = await run(lane, { kind: "generate" as const, request }, 0);
    ids.push(res.output.generatedIds);
  }
  if (ids[0]!.length === 0) {
    throw new InputFailure(0, "empty_generation", "the greedy generation gave no token");
  }
  if (ids[0]!.join(",") !== ids[1]!.join(",")) {
    throw new InputFailure(
      0,
      "generation_nondeterministic",
      `two greedy generations differ: [${ids[0]}] then [${ids[1]}]`,
    );
  }
}

function cosine(a: Float32Array, b: Float32Array): number {
  let ab = 0, aa = 0, bb = 0;
  for (let i = 0; i < a.length; i++) {
    ab += a[i]! * b[i]!;
    aa += a[i]! * a[i]!;
    bb += b[i]! * b[i]!;
  }
  return aa === 0 || bb === 0 ? (aa === bb ? 1 : 0) : ab / Math.sqrt(aa * bb);
}

// ---------------------------------------------------------------------------------------------
// Failed checks: what a model refuses with.

const FAILED = new WeakMap<ReadyModel, SynapseError>();

/**
 * The refusal of a model whose self-check failed, or undefined (passed, pending, not a catalog
 * model). Read from cached state.
 */
export function selfCheckRefusal(ready: ReadyModel | undefined): SynapseError | undefined {
  return ready === undefined ? undefined : FAILED.get(ready);
}

/**
 * Passes a ready model through, or refuses it when its self-check failed. Every inference op
 * resolves its model through lib/ops/_resolve_model.ts, which calls this.
 *
 * @returns `ready`.
 * @throws {SynapseError} `self_check_failed {model_id, backend, check_id, reason, failed_input}`
 *   (permanent).
 */
export function refuseFailedSelfCheck(ready: ReadyModel): ReadyModel {
  const refusal = FAILED.get(ready);
  if (refusal !== undefined) throw refusal;
  return ready;
}

function refusalOf(modelId: string, row: SelfCheckRow): SynapseError {
  const f = row.failed_input ?? { index: 0, reason: "failed" };
  return new SynapseError(
    "self_check_failed",
    `Cannot serve '${modelId}': its ${row.backend} lane failed the catalog self-check on input ${f.index} (${f.reason}${
      f.detail === undefined ? "" : `: ${f.detail}`
    }); its numbers cannot be trusted with this engine on this OS build, so it serves nothing (the check runs again under another engine or OS build); report it, or use another catalog model`,
    {
      details: {
        model_id: modelId,
        backend: row.backend,
        check_id: row.check_id,
        reason: f.reason,
        failed_input: { ...f },
      },
    },
  );
}

// ---------------------------------------------------------------------------------------------
// The instance's self-checks.

/** Options of {@link SelfChecks}. */
export interface SelfChecksOptions {
  /** Where rows live; without one a check runs at every load and nothing is kept. */
  store?: SelfCheckStore;
  /** The machine profile's `os_build`. */
  osBuild: string;
  /**
   * The lanes of a model a check runs on: the registry's control lanes when it has them
   * (`registry.controlLanes(id)`), else the interactive lane for both.
   */
  registry?: unknown;
  /** Ceiling of one check, ms of engine work. Tests only. @default SELF_CHECK_CEILING_MS */
  ceilingMs?: number;
  /** @default Date.now */
  now?: () => number;
  /** @default nullLog */
  log?: LogSink;
}

/** The lanes a check runs on: the registry's control lanes, else the interactive lane. */
export function selfCheckLanes(registry: unknown, ready: ReadyModel): SelfCheckLanes {
  const r = registry as { controlLanes?: (id: string) => SelfCheckLanes } | undefined;
  if (typeof r?.controlLanes === "function") return r.controlLanes(ready.modelId);
  return { query: ready.interactive, batch: ready.interactive };
}

interface Current {
  check_id: string;
  row?: SelfCheckRow;
}

/**
 * The self-checks of one instance: runs or reuses a check per loaded catalog lane, keeps the
 * current state per lane for `models.catalog` and `models.list`, and marks the ready model of a
 * failed one so it refuses ({@link refuseFailedSelfCheck}).
 */
export class SelfChecks implements CatalogSelfCheck {
  #store: SelfCheckStore | undefined;
  #osBuild: string;
  #registry: unknown;
  #ceilingMs: number;
  #now: () => number;
  #log: LogSink;
  /** By lane id (`<catalog_id>-<backend>`). */
  #current = new Map<string, Current>();
  /** By model id: its catalog lane id. */
  #laneOf = new Map<string, string>();
  /** By model id: the check running now. */
  #running = new Map<string, { check_id: string; done: Promise<SelfCheckView> }>();

  constructor(options: SelfChecksOptions) {
    this.#store = options.store;
    this.#osBuild = options.osBuild;
    this.#registry = options.registry;
    this.#ceilingMs = options.ceilingMs ?? SELF_CHECK_CEILING_MS;
    this.#now = options.now ?? Date.now;
    this.#log = options.log ?? nullLog;
  }

  /**
   * Runs the self-check of a ready catalog model, or reuses the row of its key. A second call
   * while one runs waits for it. A model that is not ready is left `pending`.
   *
   * @returns The lane's state once the check has ended (or was reused). Never rejects: a check
   *   that could not end (the engine crashed, the instance stopped) is logged and stays
   *   `pending`, to run again at the next load.
   */
  ensure(
    entry: ModelEntry,
    model: CatalogModel,
    backend: CatalogBackend,
    manifestDigest: string,
  ): Promise<SelfCheckView> {
    const ready = entry.ready;
    const laneId = catalogLaneId(model, backend.backend);
    if (entry.state !== "ready" || ready === undefined) return Promise.resolve(this.view(laneId));
    this.#laneOf.set(entry.modelId, laneId);
    const running = this.#running.get(entry.modelId);
    if (running !== undefined) return running.done;
    const checkId = selfCheckId({
      catalog_id: model.id,
      manifest_digest: manifestDigest,
      backend: backend.backend,
      fingerprint: ready.fingerprint,
      engine: ready.identity,
      os_build: this.#osBuild,
    });
    let row: SelfCheckRow | undefined;
    try {
      row = this.#store?.get(checkId);
    } catch (err) {
      this.#log("warn", "synapse.probe", `cannot read the self-check of '${laneId}'; running it`, {
        model_id: entry.modelId,
        message: (err as Error).message,
      });
    }
    // A check that ran out of time is run again at the next load (a busy machine is no fault of
    // the model's numbers); every other row holds for its key.
    if (row !== undefined && !(row.state === "failed" && row.failed_input?.reason === "timeout")) {
      this.#apply(laneId, ready, row);
      return Promise.resolve(this.view(laneId));
    }
    this.#current.set(laneId, { check_id: checkId });
    const done = this.#run(entry.modelId, laneId, ready, model, backend, manifestDigest, checkId)
      .finally(() => this.#running.delete(entry.modelId));
    this.#running.set(entry.modelId, { check_id: checkId, done });
    return done;
  }

  /** `model_in_use` holders of a model while its check runs. */
  holders(modelId: string): { kind: "self_check"; check_id: string }[] {
    const r = this.#running.get(modelId);
    return r === undefined ? [] : [{ kind: "self_check", check_id: r.check_id }];
  }

  /**
   * Forgets the state of an unloaded model's lane (`pending` until it loads again, when the row
   * of its key is read again); a running check is left to end.
   */
  forget(modelId: string): void {
    const laneId = this.#laneOf.get(modelId);
    if (laneId === undefined || this.#running.has(modelId)) return;
    this.#laneOf.delete(modelId);
    this.#current.delete(laneId);
  }

  /** True while a check of the model runs. */
  running(modelId: string): boolean {
    return this.#running.has(modelId);
  }

  /**
   * The state of a catalog lane in this instance (`models.catalog` `backends[].self_check`,
   * `models.list` rows): `pending` until a check of its current key has ended (and when the lane
   * is not loaded), then `passed` or `failed` with the failing input.
   */
  view(laneId: string): SelfCheckView {
    const c = this.#current.get(laneId);
    if (c === undefined) return { state: "pending" };
    if (c.row === undefined) return { state: "pending", check_id: c.check_id };
    return {
      state: c.row.state,
      check_id: c.row.check_id,
      checked_at_ms: c.row.checked_at_ms,
      duration_ms: c.row.duration_ms,
      ...(c.row.failed_input === undefined ? {} : { failed_input: { ...c.row.failed_input } }),
    };
  }

  async #run(
    modelId: string,
    laneId: string,
    ready: ReadyModel,
    model: CatalogModel,
    backend: CatalogBackend,
    manifestDigest: string,
    checkId: string,
  ): Promise<SelfCheckView> {
    let outcome: SelfCheckOutcome;
    const signal = AbortSignal.timeout(SELF_CHECK_ABANDON_MS);
    try {
      const target: SelfCheckTarget = {
        ready,
        // Asked here, inside the try: a model unloaded meanwhile leaves the check pending.
        lanes: selfCheckLanes(this.#registry, ready),
        dims: model.dims,
        normalize: backend.normalize,
        ...(backend.self_check_expected === undefined
          ? {}
          : { expected: backend.self_check_expected }),
      };
      outcome = await runSelfCheck(target, { ceilingMs: this.#ceilingMs, signal });
      if (outcome.failed_input?.reason === "timeout") {
        // Once more before it counts: the cores may have been busy with other work.
        this.#log(
          "info",
          "synapse.probe",
          `the self-check of '${laneId}' ran out of time; once more`,
          {
            model_id: modelId,
            check_id: checkId,
            duration_ms: Math.round(outcome.duration_ms),
          },
        );
        outcome = await runSelfCheck(target, { ceilingMs: this.#ceilingMs, signal });
      }
    } catch (err) {
      this.#log(
        "warn",
        "synapse.probe",
        `the self-check of '${laneId}' did not end; it stays pending`,
        {
          model_id: modelId,
          check_id: checkId,
          message: err instanceof Error ? err.message : String(err),
        },
      );
      return this.view(laneId);
    }
    const row: SelfCheckRow = {
      check_id: checkId,
      catalog_id: model.id,
      backend: backend.backend,
      manifest_digest: manifestDigest,
      fingerprint: ready.fingerprint,
      state: outcome.passed ? "passed" : "failed",
      ...(outcome.failed_input === undefined ? {} : { failed_input: outcome.failed_input }),
      checked_at_ms: this.#now(),
      duration_ms: Math.round(outcome.duration_ms),
    };
    try {
      this.#store?.put(row);
    } catch (err) {
      this.#log("warn", "synapse.probe", `cannot record the self-check of '${laneId}'`, {
        model_id: modelId,
        check_id: checkId,
        message: (err as Error).message,
      });
    }
    this.#apply(laneId, ready, row);
    this.#log(
      outcome.passed ? "info" : "error",
      "synapse.probe",
      outcome.passed
        ? `self-check of '${laneId}' passed`
        : `self-check of '${laneId}' failed on input ${row.failed_input?.index} (${row.failed_input?.reason})`,
      {
        model_id: modelId,
        check_id: checkId,
        duration_ms: row.duration_ms,
        ...(row.failed_input === undefined ? {} : {
          failed_index: row.failed_input.index,
          reason: row.failed_input.reason,
          ...(row.failed_input.detail === undefined ? {} : { detail: row.failed_input.detail }),
        }),
      },
    );
    return this.view(laneId);
  }

  #apply(laneId: string, ready: ReadyModel, row: SelfCheckRow): void {
    this.#current.set(laneId, { check_id: row.check_id, row });
    if (row.state === "failed") FAILED.set(ready, refusalOf(ready.modelId, row));
    else FAILED.delete(ready);
  }
}
