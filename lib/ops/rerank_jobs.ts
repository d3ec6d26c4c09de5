/**
 * Durable rerank jobs: a `rerank.score` over `inline.max_items` candidates with a `request_key`
 * becomes a job in the store, like an over-limit `embed.batch` (docs/operations.md "Jobs";
 * the shared machinery: lib/ops/_durable_job.ts). It runs in
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
import type { EncodedSequence } from "../tokenize/tokenizer.ts";
import { disclosureOf, type ItemError } from "./_embedding.ts";
import type { OpContext } from "./context.ts";
import {
  admitDurableJob,
  endFailedJob,
  type JobAccepted,
  JobPages,
  runQuanta,
  TOKENIZE_SLICE,
} from "./_durable_job.ts";
import { addProvenance, type RerankJobPage } from "./jobs.ts";

export type { RerankJobPage, RerankJobScore } from "./jobs.ts";

/** Inputs of {@link submitRerankJob}. */
export interface RerankJobRequest {
  requestKey: string;
  model: ReadyModel;
  query: string;
  candidates: string[];
  truncate: boolean;
  bytes: number;
  /** The request's `allow_equivalent` (as an embed job's; part of the request digest). */
  allowEquivalent?: boolean;
}

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
      ...(req.allowEquivalent === true ? { allow_equivalent: true } : {}),
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
  const pages = new JobPages<RerankJobPage>(ctx, jobId, emptyPage, (p) => p.scores.length);
  const fail = (e: SynapseError, index: number): void =>
    pages.fail({ id: String(index), index, error: e.toWire() } as ItemError);
  try {
    ctx.jobs.store.markRunning(jobId);
    const seqs: { index: number; seq: EncodedSequence }[] = [];
    for (let a = 0; a < req.candidates.length; a += TOKENIZE_SLICE) {
      const chunk = req.candidates.slice(a, a + TOKENIZE_SLICE);
      const outcomes = await ctx.tokenizers.encodePairs(req.model.tokenizer, req.query, chunk, {
        maxTokens: req.model.maxTokens,
        truncate: req.truncate,
        itemIds: chunk.map((_, i) => String(a + i)),
      });
      outcomes.forEach((o, i) => {
        if (o.ok) return void seqs.push({ index: a + i, seq: o.seq });
        fail(toSynapseError(o.error, "invalid_request"), a + i);
      });
    }
    await runQuanta(
      ctx,
      jobId,
      req.model,
      "score",
      seqs,
      (slice, out, under) => {
        slice.forEach((s, k) => {
          const row = out.rows[k]!;
          if (row.kind === "non_finite") {
            return fail(
              new SynapseError(
                "engine_output_invalid",
                `Cannot rerank candidate ${s.index}: the model produced NaN or Infinity`,
                { details: { item_id: String(s.index), model_id: req.model.modelId } },
              ),
              s.index,
            );
          }
          if (row.kind === "error") {
            return fail(
              new SynapseError(
                row.error.code,
                `Cannot rerank candidate ${s.index}: ${row.error.message}`,
                {
                  details: { ...row.error.details, item_id: String(s.index) },
                },
              ),
              s.index,
            );
          }
          pages.add(96, s.seq.effectiveTokens, (p) => {
            p.scores.push({ index: s.index, score: row.values[0]! });
            p.real_token_counts.push(s.seq.effectiveTokens);
            p.truncation_disclosures.push(disclosureOf(s.seq));
            if (under !== undefined) addProvenance(p, req.model.fingerprint, under);
          });
        });
      },
      () => pages.commit(),
      { offload: true, equivalent: req.allowEquivalent === true },
    );
    pages.commit();
    ctx.jobs.store.finish(jobId, "done");
    ctx.log("info", "synapse.jobs", "job done", {
      job: jobId,
      op: "rerank.score",
      model: req.model.modelId,
      items: req.candidates.length,
      pages: pages.pageCount,
    });
  } catch (err) {
    endFailedJob(ctx, jobId, err, () => pages.commit(), {
      op: "rerank.score",
      model: req.model.modelId,
      items: req.candidates.length,
    });
  }
}

function emptyPage(): RerankJobPage {
  return { scores: [], real_token_counts: [], truncation_disclosures: [] };
}
