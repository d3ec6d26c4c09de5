/**
 * The machinery every durable job shares (`embed.batch` and `rerank.score` over the inline
 * limits with a `request_key`; docs/operations.md "Jobs"): minting or attaching under one
 * bulk-lane admission ({@link admitDurableJob}), the quantum loop on the model's bulk lane
 * ({@link runQuanta}: rows length-sorted, one quantum per lane run so interactive work preempts
 * between quanta), the page in hand committed at `jobs.result_page_bytes` ({@link JobPages}), and
 * the end of a job that threw ({@link endFailedJob}). The operations (lib/ops/jobs.ts,
 * lib/ops/rerank_jobs.ts) only tokenize and turn engine rows into page lines.
 *
 * @module
 */
import { SynapseError, toSynapseError } from "../contract/errors.ts";
import {
  CANARY_DEFAULT_MIN_COSINE,
  CANARY_QUERY,
  CANARY_TEXTS,
  compareCanary,
} from "../engines/remote/canary.ts";
import type { EngineIdentity } from "../identity/numeric_profile.ts";
import type { LaneBatchResult } from "../lanes/lane.ts";
import type { ReadyModel } from "../models/model.ts";
import type { ServedSpace } from "../models/matryoshka.ts";
import type { PromptDisclosure } from "../models/prompts.ts";
import { quantumTokensFor, takeQuantum } from "../sched/quantum.ts";
import type { JobState } from "../store/job_types.ts";
import type { EncodedSequence } from "../tokenize/tokenizer.ts";
import type { ItemError } from "./_embedding.ts";
import type { OpContext } from "./context.ts";
import { asOperationError } from "./_errors.ts";

/** Items tokenized per slice before a job yields the event loop. */
export const TOKENIZE_SLICE = 256;

/** Response of a request that became (or attached to) a durable job. */
export interface JobAccepted {
  module_generation: number;
  job_id: string;
  state: JobState;
  request_key: string;
  pages_available: number;
  /** True when the request attached to an existing job with the same key and digest. */
  attached: boolean;
  items_total: number;
  model_id: string;
  fingerprint: string;
}

/** What {@link admitDurableJob} mints a job from. */
export interface DurableJobInput {
  requestKey: string;
  /** The request digest the key is bound to. */
  requestDigest: string;
  /** The op that makes the job (`embed.batch`, `rerank.score`). */
  kind: string;
  model: ReadyModel;
  /** A Matryoshka width served (its fingerprint and dims are the job's); absent: the model's. */
  space?: ServedSpace;
  truncate: boolean;
  itemsTotal: number;
  /** Request bytes, held against the byte budget until the job ends. */
  bytes: number;
  /** The answer-level prompt disclosure (embed jobs), stored with the job's params. */
  prompt?: PromptDisclosure;
}

/**
 * The params a durable job keeps in the store, read back by `embed.result` in any later process
 * (the model may be unloaded by then): the model, the space served, the engine that computed the
 * pages, and what the request asked.
 */
export interface StoredJobParams {
  model_id: string;
  fingerprint: string;
  /** The Matryoshka width served, when one was asked. */
  dims?: number;
  /** The engine of the model's lanes (jobs written before this field carry none). */
  engine?: EngineIdentity;
  truncate: boolean;
  items_total: number;
  prompt?: PromptDisclosure;
}

/**
 * Mints (or attaches to) a durable job and, when fresh, starts `run` under one bulk-lane admission
 * for the whole job (its bytes count against the budget until it ends; an attach, a retry, is
 * never counted twice). A refused admission ends the fresh job `failed_transient`, so the same
 * key mints a new job next time instead of attaching to one that never runs.
 *
 * @throws {SynapseError} `idempotency_conflict`; `invalid_request` for a bad key; `queue_full`.
 */
export function admitDurableJob(
  ctx: OpContext,
  input: DurableJobInput,
  run: (jobId: string) => Promise<void>,
): JobAccepted {
  const jobs = ctx.jobs;
  const ttl = ctx.config.jobs;
  const identity = input.model.identity;
  const params: StoredJobParams = {
    model_id: input.model.modelId,
    fingerprint: input.space?.fingerprint ?? input.model.fingerprint,
    ...(input.space === undefined ? {} : { dims: input.space.dims }),
    engine: {
      engine: identity.engine,
      version: identity.version,
      ...(identity.build_flags === undefined ? {} : { build_flags: { ...identity.build_flags } }),
    },
    truncate: input.truncate,
    items_total: input.itemsTotal,
    ...(input.prompt === undefined ? {} : { prompt: input.prompt }),
  };
  const { job, attached } = jobs.store.admit({
    requestKey: input.requestKey,
    requestDigest: input.requestDigest,
    kind: input.kind,
    moduleGeneration: ctx.moduleGeneration,
    params: params as unknown as Record<string, unknown>,
    itemsTotal: input.itemsTotal,
    tokensTotal: 0,
    ttls: {
      executionMs: ttl.execution_ttl_ms,
      retentionMs: ttl.result_retention_ttl_ms,
      resumeMs: ttl.resume_deadline_ms,
    },
  });
  if (!attached) {
    let permit;
    try {
      permit = input.model.bulk.admit({
        bytes: input.bytes,
        deadlineMs: ttl.execution_ttl_ms,
        maxQueueMs: Number.MAX_SAFE_INTEGER,
      });
    } catch (err) {
      const e = toSynapseError(err, "queue_full");
      jobs.store.finish(job.jobId, "failed_transient", e.toWire());
      throw e;
    }
    const running = run(job.jobId).finally(() => permit.release());
    jobs.running.set(job.jobId, running);
    running.finally(() => jobs.running.delete(job.jobId));
  }
  return {
    module_generation: ctx.moduleGeneration,
    job_id: job.jobId,
    state: job.state,
    request_key: job.requestKey,
    pages_available: job.pageCount,
    attached,
    items_total: job.itemsTotal ?? input.itemsTotal,
    model_id: input.model.modelId,
    fingerprint: input.space?.fingerprint ?? input.model.fingerprint,
  };
}

/** A page of a durable job: its lines and the items that could not be computed. */
export interface JobPage {
  item_errors?: ItemError[];
}

/**
 * The page a running job fills: lines are added with their size in bytes, and the page is
 * committed to the store (readable at once by `embed.result`) before a line would take it past
 * `jobs.result_page_bytes`, and at the end. Progress stored with a page counts only the items
 * and tokens of committed pages.
 */
export class JobPages<P extends JobPage> {
  readonly #ctx: OpContext;
  readonly #jobId: string;
  readonly #empty: () => P;
  readonly #linesOf: (page: P) => number;
  #page: P;
  #size = 0;
  #tokens = 0;
  #pageNo = 0;
  #items = 0;
  #committedTokens = 0;

  /**
   * @param ctx Module context (the job store, `jobs.result_page_bytes`).
   * @param jobId The job.
   * @param empty A new empty page.
   * @param linesOf How many computed lines a page holds (vectors, scores), errors aside.
   */
  constructor(ctx: OpContext, jobId: string, empty: () => P, linesOf: (page: P) => number) {
    this.#ctx = ctx;
    this.#jobId = jobId;
    this.#empty = empty;
    this.#linesOf = linesOf;
    this.#page = empty();
  }

  /** Pages committed so far. */
  get pageCount(): number {
    return this.#pageNo;
  }

  /**
   * Adds a line of `size` bytes and `tokens` tokens: commits the page in hand first when the line
   * would take a non-empty page past `jobs.result_page_bytes`.
   *
   * @param put Writes the line into the page.
   */
  add(size: number, tokens: number, put: (page: P) => void): void {
    if (this.#size > 0 && this.#size + size > this.#ctx.config.jobs.result_page_bytes) {
      this.commit();
    }
    put(this.#page);
    this.#size += size;
    this.#tokens += tokens;
  }

  /** Adds an item error of the job (a row the engine could not compute), `size` bytes. */
  fail(error: ItemError, size = 64 + JSON.stringify(error).length): void {
    this.add(size, 0, (page) => void (page.item_errors ??= []).push(error));
  }

  /**
   * Commits the page in hand when it holds anything (lines or errors).
   *
   * @throws {SynapseError} `store_failure` when the store refuses the write.
   */
  commit(): void {
    const count = this.#linesOf(this.#page) + (this.#page.item_errors?.length ?? 0);
    if (count === 0) return;
    this.#items += count;
    this.#committedTokens += this.#tokens;
    this.#ctx.jobs.store.commitPage(
      this.#jobId,
      this.#pageNo++,
      count,
      JSON.stringify(this.#page),
      {
        itemsDone: this.#items,
        tokensDone: this.#committedTokens,
      },
    );
    this.#page = this.#empty();
    this.#size = 0;
    this.#tokens = 0;
  }
}

/**
 * Runs a job's rows through the model's bulk lane, one quantum at a time: rows are sorted by
 * length (so each quantum's micro-batches pad little), a quantum is as many tokens as the lane
 * computes in the target quantum time (`quantumTokensFor`, capped at `jobs.bulk_quantum_tokens`,
 * at least 256 tokens or the cap when it is smaller; before the lane has measured a rate,
 * min(1024, the cap)), and each quantum is one lane run, so
 * it joins the back of the bulk queue and interactive work runs between quanta.
 *
 * @param ctx Module context.
 * @param jobId The job (labels each run).
 * @param model The job's model (its bulk lane runs the quanta).
 * @param kind The engine request kind: `embed` or `score` (rerank).
 * @param rows The rows, each with its encoded sequence; sorted here, in place.
 * A quantum a remote provider refuses for its credentials (`needs_reauth`, or
 * `credential_config_invalid` when its key cannot be read) does not fail the job: the page in
 * hand is committed, the job is paused `paused_needs_reauth` ({@link pauseForReauth}), and the
 * same quantum is sent again after `job.resume` (contract §1).
 *
 * @param onQuantum Turns one quantum's engine rows into page lines (`out.rows[k]` is `slice[k]`'s).
 * @param commitInHand Commits the page in hand (before a pause, so what was computed is readable).
 * @throws {SynapseError} what the lane throws (a crash, `disposed`); `needs_reauth_expired` when a
 *   pause was not resumed by its deadline.
 */
export async function runQuanta<T extends { seq: EncodedSequence }>(
  ctx: OpContext,
  jobId: string,
  model: ReadyModel,
  kind: "embed" | "score",
  rows: T[],
  onQuantum: (slice: T[], out: LaneBatchResult, computedUnder?: string) => void,
  commitInHand: () => void,
  options: { offload?: boolean; equivalent?: boolean } = {},
): Promise<void> {
  rows.sort((a, b) => a.seq.ids.length - b.seq.ids.length);
  const lengths = rows.map((r) => r.seq.ids.length);
  const cut = (start: number): number => {
    const tps = model.bulk.tokensPerSecond;
    const cap = ctx.config.jobs.bulk_quantum_tokens;
    // A cap under the usual 256-token floor is honoured as it is (it was refused with a RangeError
    // that failed the job internal_error).
    const quantum = tps > 0
      ? quantumTokensFor(tps, { maxTokens: cap, minTokens: Math.min(256, cap) })
      : Math.min(1024, cap);
    return takeQuantum(lengths, start, quantum);
  };
  // Only a local model's job is spread (a remote model's job pauses on its provider's refusal,
  // which pages committed by helpers meanwhile would break).
  const helpers = options.offload === true && rows.length > 0 && model.remote === undefined
    ? await offloadLanes(ctx, jobId, model, kind, options.equivalent === true)
    : [];
  const runLocal = async (start: number, end: number): Promise<LaneBatchResult> => {
    for (;;) {
      try {
        return await model.bulk.run({ kind, rows: rows.slice(start, end).map((r) => r.seq) }, {
          label: `${jobId}@${start}`,
        });
      } catch (err) {
        if (!(err instanceof SynapseError) || !PAUSE_CODES.has(err.code)) throw err;
        commitInHand();
        await pauseForReauth(ctx, jobId, err);
      }
    }
  };
  const logQuantum = (start: number, end: number, out: LaneBatchResult, lane: string): void =>
    ctx.log("debug", "synapse.jobs", "job quantum", {
      job: jobId,
      from: start,
      rows: end - start,
      tokens: lengths.slice(start, end).reduce((a, b) => a + b, 0),
      lane,
      queue_ms: out.queueTimeMs,
      inference_ms: Math.round(out.inferenceMs * 1000) / 1000,
    });
  if (helpers.length === 0) {
    for (let start = 0; start < rows.length;) {
      const end = cut(start);
      const out = await runLocal(start, end);
      logQuantum(start, end, out, model.bulk.name);
      onQuantum(rows.slice(start, end), out);
      start = end;
    }
    return;
  }
  await spreadQuanta(ctx, jobId, model, kind, rows, helpers, cut, runLocal, (q, out, lane) => {
    logQuantum(q.start, q.end, out, lane.bulk.name);
    // A lane proven equivalent computes under its own fingerprint: the page says so.
    const under = lane.fingerprint === model.fingerprint ? undefined : lane.fingerprint;
    onQuantum(rows.slice(q.start, q.end), out, under);
  });
}

/** Concurrent requests one offload lane is given (its provider's own slots bound it too). */
export const OFFLOAD_LOOPS_PER_LANE = 2;

/** A quantum of a spread job: rows `[start, end)` of the sorted rows, committed as number `no`. */
interface Quantum {
  no: number;
  start: number;
  end: number;
  /** A helper answered it with a row error: it runs on the job's own lane. */
  localOnly: boolean;
}

/**
 * Spreads a job's quanta over its model's bulk lane and the offload lanes
 * ({@link offloadLanes}): each lane takes the next quantum when it is free (so each gets work in
 * proportion to its throughput), and quanta are handed to `commit` in order, whoever computed
 * them, so pages commit in order. A helper that fails a quantum is dropped for the rest of the
 * job and its quantum runs elsewhere; one that answers a row with an error (a row a remote lane
 * cannot send) has that quantum run on the job's own lane. An error of the job's own lane ends
 * the job as before.
 */
async function spreadQuanta<T extends { seq: EncodedSequence }>(
  ctx: OpContext,
  jobId: string,
  model: ReadyModel,
  kind: "embed" | "score",
  rows: T[],
  helpers: ReadyModel[],
  cut: (start: number) => number,
  runLocal: (start: number, end: number) => Promise<LaneBatchResult>,
  commit: (q: Quantum, out: LaneBatchResult, lane: ReadyModel) => void,
): Promise<void> {
  let next = 0;
  let numbered = 0;
  let committed = 0;
  let helpersBusy = 0;
  let failed: unknown;
  const requeued: Quantum[] = [];
  const results = new Map<number, { q: Quantum; out: LaneBatchResult; lane: ReadyModel }>();
  let wake: () => void = () => {};
  let changed = new Promise<void>((r) => (wake = r));
  const notify = (): void => {
    wake();
    changed = new Promise<void>((r) => (wake = r));
  };
  const take = (local: boolean): Quantum | undefined => {
    const i = requeued.findIndex((q) => local || !q.localOnly);
    if (i >= 0) return requeued.splice(i, 1)[0];
    if (next >= rows.length) return undefined;
    const end = cut(next);
    const q = { no: numbered++, start: next, end, localOnly: false };
    next = end;
    return q;
  };
  const finish = (q: Quantum, out: LaneBatchResult, lane: ReadyModel): void => {
    results.set(q.no, { q, out, lane });
    for (let r = results.get(committed); r !== undefined; r = results.get(committed)) {
      results.delete(committed++);
      commit(r.q, r.out, r.lane);
    }
  };
  const dropped = new Set<ReadyModel>();
  const helper = async (m: ReadyModel): Promise<void> => {
    for (
      let q = take(false);
      q !== undefined && failed === undefined;
      q = dropped.has(m) ? undefined : take(false)
    ) {
      helpersBusy++;
      let out: LaneBatchResult;
      try {
        out = await m.bulk.run({ kind, rows: rows.slice(q.start, q.end).map((r) => r.seq) }, {
          label: `${jobId}@${q.start}`,
        });
      } catch (err) {
        helpersBusy--;
        requeued.push(q);
        notify();
        if (dropped.has(m)) return;
        dropped.add(m);
        ctx.log("warn", "synapse.jobs", "offload lane dropped from the job", {
          job: jobId,
          lane: m.bulk.name,
          outcome: err instanceof SynapseError ? err.code : "error",
        });
        return;
      }
      try {
        if (out.rows.some((r) => r.kind !== "ok")) requeued.push({ ...q, localOnly: true });
        else finish(q, out, m);
      } catch (err) {
        // Committing a page failed (the store): the job's own loop ends the job with it.
        failed ??= err;
      } finally {
        helpersBusy--;
        notify();
      }
    }
  };
  const helping = helpers.flatMap((m) =>
    Array.from({ length: OFFLOAD_LOOPS_PER_LANE }, () => helper(m))
  );
  try {
    for (;;) {
      if (failed !== undefined) throw failed;
      const q = take(true);
      if (q === undefined) {
        if (helpersBusy === 0 && requeued.length === 0) break;
        await changed;
        continue;
      }
      finish(q, await runLocal(q.start, q.end), model);
    }
  } catch (err) {
    failed ??= err;
    throw err;
  } finally {
    await Promise.allSettled(helping);
  }
  if (committed !== numbered) {
    throw new Error(`Job ${jobId} committed ${committed} of ${numbered} quanta. This is a bug`);
  }
}

/**
 * The lanes that may compute a job's quanta beside its model's own bulk lane, with the same
 * task, width and tokenizer: remote lanes whose provider (a Synapse) reports this model's own
 * fingerprint as its deployment; and, when the job allows equivalents (`allow_equivalent`),
 * remote lanes proven against a reference (assurance `proven`) whose fingerprint a live
 * probe-measured alias makes equivalent to this model's. Each must answer the canary inputs as
 * this model does now (each cosine ≥ {@link CANARY_DEFAULT_MIN_COSINE}; rerank scores within the
 * canary's tolerance): measured at the job's start, not only declared (docs/remote.md
 * "Spreading a job").
 */
async function offloadLanes(
  ctx: OpContext,
  jobId: string,
  model: ReadyModel,
  kind: "embed" | "score",
  equivalent: boolean,
): Promise<ReadyModel[]> {
  const aliased = equivalent
    ? new Set(
      ctx.aliases.equivalentsOf(model.fingerprint, ctx.now())
        .filter((e) => e.source === "probe").map((e) => e.fingerprint),
    )
    : new Set<string>();
  const candidates = ctx.registry.list().flatMap((e) => {
    const m = e.ready;
    const same = m?.remote?.deployment === model.fingerprint ||
      (m?.remote?.assurance === "proven" && aliased.has(m.fingerprint));
    return m !== undefined && m !== model && same &&
        m.task === model.task && m.dims === model.dims &&
        m.profile.sanitized_tokenizer_digest === model.profile.sanitized_tokenizer_digest &&
        m.maxTokens >= model.maxTokens
      ? [m]
      : [];
  });
  if (candidates.length === 0) return [];
  const opts = { maxTokens: model.maxTokens, truncate: true };
  const canary = CANARY_TEXTS.map((t) =>
    kind === "score"
      ? model.tokenizer.encodePair(CANARY_QUERY, t, opts)
      : model.tokenizer.encode(t, opts)
  );
  const valuesOf = (out: LaneBatchResult): number[] | undefined =>
    out.rows.every((r) => r.kind === "ok")
      ? out.rows.flatMap((r) => Array.from((r as { values: Float32Array }).values))
      : undefined;
  let own: number[] | undefined;
  try {
    own = valuesOf(await model.bulk.run({ kind, rows: canary }, { label: `${jobId}@canary` }));
  } catch {
    return [];
  }
  if (own === undefined) return [];
  const width = own.length / canary.length;
  const verified: ReadyModel[] = [];
  for (const m of candidates) {
    let theirs: number[] | undefined;
    try {
      theirs = valuesOf(await m.bulk.run({ kind, rows: canary }, { label: `${jobId}@canary` }));
    } catch { /* unreachable, refused, halted: it does not help this job */ }
    const verdict = theirs === undefined ? undefined : compareCanary(
      kind === "score" ? "rerank" : "embed",
      { dims: width, values: own, recordedAtMs: 0 },
      theirs,
      CANARY_DEFAULT_MIN_COSINE,
    );
    ctx.log(verdict?.ok ? "info" : "warn", "synapse.jobs", "offload lane", {
      job: jobId,
      lane: m.bulk.name,
      outcome: verdict === undefined ? "unavailable" : verdict.ok ? "verified" : "numbers_differ",
      ...(verdict === undefined ? {} : { measured: verdict.measured }),
    });
    if (verdict?.ok) verified.push(m);
  }
  return verified;
}
/** Refusals of a remote provider's credentials: they pause a durable job (contract §1 job.resume). */
const PAUSE_CODES: ReadonlySet<string> = new Set(["needs_reauth", "credential_config_invalid"]);

/**
 * Pauses a running job for re-authentication and waits: the store row becomes
 * `paused_needs_reauth` with its resume deadline (`jobs.resume_deadline_ms` after now) and `err`
 * as its error; the run resolves when `job.resume` wakes it (the store row is `running` again by
 * then), and rejects with `needs_reauth_expired` at the deadline, or with what
 * {@link PausedJob.abandon} is given (`disposed` at shutdown). The job keeps its bulk-lane
 * admission and its inputs in memory while paused.
 *
 * @throws {SynapseError} `needs_reauth_expired`; `disposed`; what the store throws.
 */
async function pauseForReauth(ctx: OpContext, jobId: string, err: SynapseError): Promise<void> {
  const row = ctx.jobs.store.pause(jobId, err.toWire());
  ctx.log("warn", "synapse.jobs", "job paused: the provider refused its credentials", {
    job: jobId,
    outcome: err.code,
    ...(typeof err.details?.provider === "string" ? { provider: err.details.provider } : {}),
    resume_deadline_ms: row.resumeDeadlineMs ?? 0,
  });
  const { promise, resolve, reject } = Promise.withResolvers<void>();
  const waitMs = Math.max(0, (row.resumeDeadlineMs ?? Date.now()) - Date.now());
  const timer = setTimeout(() => {
    reject(
      new SynapseError(
        "needs_reauth_expired",
        `Job ${jobId} was not resumed before its resume deadline; submit the request again with a new request_key`,
        { details: { job_id: jobId } },
      ),
    );
  }, Math.min(waitMs, 2 ** 31 - 1));
  Deno.unrefTimer(timer);
  ctx.jobs.paused.set(jobId, { resume: () => resolve(), abandon: (e) => reject(e) });
  try {
    await promise;
  } finally {
    clearTimeout(timer);
    ctx.jobs.paused.delete(jobId);
  }
  ctx.log("info", "synapse.jobs", "job resumed", { job: jobId });
}

/**
 * Ends a durable job whose run threw: commits the page in hand (what was computed stays
 * readable), then fails the job `failed_transient` or `failed_permanent` by the error's class —
 * except on `disposed` (the instance is shutting down: a stop, or the subc daemon going away),
 * where the job is not failed (a permanent `disposed` would tell its caller never to retry): it
 * stays running in the store, and the next boot fails it `module_restarted`, transient and safe
 * to resubmit with the same key.
 *
 * @param commit Commits the page in hand (may throw when the store is gone).
 * @param facts Log fields of the job (model, items, op).
 */
export function endFailedJob(
  ctx: OpContext,
  jobId: string,
  err: unknown,
  commit: () => void,
  facts: Record<string, string | number>,
): void {
  const e = asOperationError(err, ctx, `job ${jobId}`);
  try {
    commit();
  } catch { /* the store is gone, or refused: the pages committed before stay */ }
  if (e.code === "disposed") {
    ctx.log("info", "synapse.jobs", "job interrupted by shutdown", { job: jobId });
    return;
  }
  ctx.log(e.errorClass === "transient" ? "warn" : "error", "synapse.jobs", "job failed", {
    job: jobId,
    ...facts,
    outcome: e.code,
  });
  try {
    ctx.jobs.store.finish(
      jobId,
      e.errorClass === "transient" ? "failed_transient" : "failed_permanent",
      e.toWire(),
    );
  } catch { /* the store is gone (disposed): the next boot inherits the job */ }
}
