/**
 * Durable rerank jobs: a `rerank.score` over `inline.max_items` candidates with a `request_key`
 * becomes a job in the store, like an over-limit `embed.batch` (docs/operations.md
 * "Inline or durable job", docs/internals.md §8.2). It runs in
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
import type { OpContext } from "./context.ts";
import { admitDurableJob, endFailedJob, type JobAccepted } from "./jobs.ts";

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
  return admitDurableJob(ctx, {
    requestKey: req.requestKey,
    requestDigest: digest,
    kind: "rerank.score",
    model: req.model,
    truncate: req.truncate,
    itemsTotal: req.candidates.length,
    bytes: req.bytes,
  }, (jobId) => runRerankJob(ctx, jobId, req));
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
    endFailedJob(ctx, jobId, err, commit, {
      op: "rerank.score",
      model: req.model.modelId,
      items: req.candidates.length,
    });
  }
}

function emptyPage(): RerankJobPage {
  return { scores: [], real_token_counts: [], truncation_disclosures: [] };
}
