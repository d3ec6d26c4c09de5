/**
 * Durable rerank jobs: a `rerank.score` over `inline.max_items` candidates with a `request_key`
 * becomes a job in the store, like an over-limit `embed.batch` (contract.md §1, §8). It runs in
 * bulk quanta on the model's bulk lane (interactive work preempts between quanta) and commits
 * its scores in pages of at most `jobs.result_page_bytes`; `embed.result {job_id, page}` reads any
 * committed page in any state (the reader of every durable job: a rerank job's page carries
 * `scores` instead of `vectors`).
 *
 * A page holds `scores: [{index, score}]` (raw logits, `index` into `candidates`; pages follow
 * the job's length-sorted order, not input order), `real_token_counts` and
 * `truncation_disclosures` aligned with `scores`, and `item_errors` for candidates that could not
 * be scored (the job goes on; unlike an inline rerank, which refuses as a whole).
 *
 * @module
 */
import { SynapseError, toSynapseError } from "../contract/errors.ts";
import { requestDigest } from "../identity/request_digest.ts";
import { sha256Hex } from "../identity/sha256.ts";
import type { ReadyModel } from "../models/model.ts";
import { quantumTokensFor, takeQuantum } from "../sched/quantum.ts";
import type { EncodedSequence } from "../tokenize/tokenizer.ts";
import { disclosureOf, type ItemError, type TruncationDisclosure } from "./_embedding.ts";
import { asOperationError } from "./_errors.ts";
import type { OpContext } from "./context.ts";
import type { JobAccepted } from "./jobs.ts";

/** One scored candidate of a rerank job page. */
export interface RerankJobScore {
  /** Index into the request's `candidates`. */
  index: number;
  /** Raw logit (`score_kind: "raw_logit"`). */
  score: number;
}

/** A stored page of a rerank job. */
export interface RerankJobPage {
  scores: RerankJobScore[];
  real_token_counts: number[];
  truncation_disclosures: TruncationDisclosure[];
  item_errors?: ItemError[];
}

/** Inputs of {@link submitRerankJob}. */
export interface RerankJobRequest {
  requestKey: string;
  model: ReadyModel;
  query: string;
  candidates: string[];
  truncate: boolean;
  bytes: number;
}

/** Candidates tokenized per slice before the job yields the event loop. */
const TOKENIZE_SLICE = 256;

/**
 * Mints (or attaches to) the durable job of an over-limit `rerank.score`, and starts it.
 *
 * @throws {SynapseError} `idempotency_conflict` for a key reused with another request;
 *   `queue_full` over the byte budget.
 */
export function submitRerankJob(ctx: OpContext, req: RerankJobRequest): JobAccepted {
  const jobs = ctx.jobs;
  const digest = requestDigest({
    op: "rerank.score",
    modelId: req.model.modelId,
    constraints: {
      truncate: req.truncate,
      fingerprint: req.model.fingerprint,
      query_sha256: sha256Hex(req.query),
    },
    items: req.candidates.map((c, i) => ({ id: String(i), contentSha256: sha256Hex(c) })),
  });
  const ttl = ctx.config.jobs;
  const { job, attached } = jobs.store.admit({
    requestKey: req.requestKey,
    requestDigest: digest,
    kind: "rerank.score",
    moduleGeneration: ctx.moduleGeneration,
    params: {
      model_id: req.model.modelId,
      fingerprint: req.model.fingerprint,
      truncate: req.truncate,
      items_total: req.candidates.length,
    },
    itemsTotal: req.candidates.length,
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
      permit = req.model.bulk.admit({
        bytes: req.bytes,
        deadlineMs: ttl.execution_ttl_ms,
        maxQueueMs: Number.MAX_SAFE_INTEGER,
      });
    } catch (err) {
      const e = toSynapseError(err, "queue_full");
      jobs.store.finish(job.jobId, "failed_transient", e.toWire());
      throw e;
    }
    const run = runRerankJob(ctx, job.jobId, req).finally(() => permit.release());
    jobs.running.set(job.jobId, run);
    run.finally(() => jobs.running.delete(job.jobId));
  }
  return {
    module_generation: ctx.moduleGeneration,
    job_id: job.jobId,
    state: job.state,
    request_key: job.requestKey,
    pages_available: job.pageCount,
    attached,
    items_total: job.itemsTotal ?? req.candidates.length,
    model_id: req.model.modelId,
    fingerprint: req.model.fingerprint,
  };
}

async function runRerankJob(ctx: OpContext, jobId: string, req: RerankJobRequest): Promise<void> {
  const store = ctx.jobs.store;
  const pageBytes = ctx.config.jobs.result_page_bytes;
  const lane = req.model.bulk;
  let pageNo = 0;
  let committedItems = 0;
  let committedTokens = 0;
  let pageTokens = 0;
  let page: RerankJobPage = emptyPage();
  let pageSize = 0;
  const commit = (): void => {
    const itemCount = page.scores.length + (page.item_errors?.length ?? 0);
    if (itemCount === 0) return;
    committedItems += itemCount;
    committedTokens += pageTokens;
    pageTokens = 0;
    store.commitPage(jobId, pageNo++, itemCount, JSON.stringify(page), {
      itemsDone: committedItems,
      tokensDone: committedTokens,
    });
    page = emptyPage();
    pageSize = 0;
  };
  const fail = (e: ItemError): void => {
    const size = 64 + JSON.stringify(e).length;
    if (pageSize > 0 && pageSize + size > pageBytes) commit();
    (page.item_errors ??= []).push(e);
    pageSize += size;
  };
  try {
    store.markRunning(jobId);
    const seqs: { index: number; seq: EncodedSequence }[] = [];
    for (let a = 0; a < req.candidates.length; a += TOKENIZE_SLICE) {
      const chunk = req.candidates.slice(a, a + TOKENIZE_SLICE);
      const outcomes = await ctx.tokenizers.encodePairs(req.model.tokenizer, req.query, chunk, {
        maxTokens: req.model.maxTokens,
        truncate: req.truncate,
        itemIds: chunk.map((_, i) => String(a + i)),
      });
      outcomes.forEach((o, i) => {
        const index = a + i;
        if (o.ok) return void seqs.push({ index, seq: o.seq });
        const e = toSynapseError(o.error, "invalid_request");
        fail({ id: String(index), index, error: e.toWire() } as ItemError);
      });
    }
    // Globally length-sorted, so each quantum's micro-batches pad little.
    seqs.sort((x, y) => x.seq.ids.length - y.seq.ids.length);
    const lengths = seqs.map((s) => s.seq.ids.length);
    let start = 0;
    while (start < seqs.length) {
      const tps = lane.tokensPerSecond;
      const quantum = tps > 0
        ? quantumTokensFor(tps, { maxTokens: ctx.config.jobs.bulk_quantum_tokens })
        : Math.min(1024, ctx.config.jobs.bulk_quantum_tokens);
      const end = takeQuantum(lengths, start, quantum);
      const slice = seqs.slice(start, end);
      const out = await lane.run(
        { kind: "score", rows: slice.map((s) => s.seq) },
        { label: `${jobId}@${start}` },
      );
      slice.forEach((s, k) => {
        const row = out.rows[k]!;
        if (row.kind !== "ok") {
          const e = row.kind === "non_finite"
            ? new SynapseError(
              "engine_output_invalid",
              `Cannot rerank candidate ${s.index}: the model produced NaN or Infinity`,
              { details: { item_id: String(s.index), model_id: req.model.modelId } },
            )
            : new SynapseError(
              row.error.code,
              `Cannot rerank candidate ${s.index}: ${row.error.message}`,
              {
                details: { ...row.error.details, item_id: String(s.index) },
              },
            );
          return fail({ id: String(s.index), index: s.index, error: e.toWire() } as ItemError);
        }
        const size = 96;
        if (pageSize > 0 && pageSize + size > pageBytes) commit();
        page.scores.push({ index: s.index, score: row.values[0]! });
        page.real_token_counts.push(s.seq.effectiveTokens);
        page.truncation_disclosures.push(disclosureOf(s.seq));
        pageTokens += s.seq.effectiveTokens;
        pageSize += size;
      });
      start = end;
    }
    commit();
    store.finish(jobId, "done");
    ctx.log("info", "synapse.jobs", "job done", {
      job: jobId,
      op: "rerank.score",
      model: req.model.modelId,
      items: req.candidates.length,
      pages: pageNo,
    });
  } catch (err) {
    const e = asOperationError(err, ctx, `job ${jobId}`);
    try {
      commit();
    } catch { /* keep the pages already committed */ }
    if (e.code === "disposed") {
      // Shutting down: the next boot fails it module_restarted (transient, safe to resubmit).
      ctx.log("info", "synapse.jobs", "job interrupted by shutdown", { job: jobId });
      return;
    }
    ctx.log(e.errorClass === "transient" ? "warn" : "error", "synapse.jobs", "job failed", {
      job: jobId,
      op: "rerank.score",
      model: req.model.modelId,
      outcome: e.code,
    });
    try {
      store.finish(
        jobId,
        e.errorClass === "transient" ? "failed_transient" : "failed_permanent",
        e.toWire(),
      );
    } catch { /* the store is gone: the next boot inherits the job */ }
  }
}

function emptyPage(): RerankJobPage {
  return { scores: [], real_token_counts: [], truncation_disclosures: [] };
}
