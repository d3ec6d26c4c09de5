/**
 * `rerank.score {model?, query, candidates[]}` (docs/operations.md "rerank.score"): raw
 * cross-encoder logits in input order (field report F15 — never min-max normalised; the logistic of
 * each raw score is a separate, named field). Scores align with `candidates`, so a candidate that
 * cannot be scored refuses the whole request, naming its index.
 *
 * @module
 */
import { SynapseError } from "../contract/errors.ts";
import { buildEnvelope } from "../contract/envelope.ts";
import { servedCertified } from "../probe/certification.ts";
import type { Envelope } from "../contract/envelope.ts";
import { parseParams, requestedModel, RerankScoreParams } from "../contract/schemas.ts";
import type { EncodedSequence } from "../tokenize/tokenizer.ts";
import { checkContentTokens, checkText, utf8Length } from "./_text.ts";
import { disclosureOf, type TruncationDisclosure } from "./_embedding.ts";
import type { CallOptions, OpContext } from "./context.ts";
import { resolveModel, routingOf } from "./_resolve_model.ts";
import type { JobAccepted } from "./jobs.ts";
import { submitRerankJob } from "./rerank_jobs.ts";

/** Longest query (UTF-16 code units) checked for readable tokens on the event loop. */
const QUERY_TOKEN_CHECK_MAX_CHARS = 4096;

/** Most candidates a rerank may have and still run as interactive work (docs/internals.md §6). */
export const INTERACTIVE_RERANK_CANDIDATES = 20;

/** Over the inline limit with a `request_key`: checks the texts, then mints or attaches to a job. */
function rerankJob(ctx: OpContext, p: ReturnType<typeof RerankScoreParams.parse>): JobAccepted {
  p.candidates.forEach((c, i) =>
    checkText(c, `candidate ${i}`, { item_id: String(i), field: `candidates.${i}` })
  );
  const model = resolveModel(ctx, requestedModel(p), "rerank", routingOf(p));
  const queryBytes = utf8Length(p.query);
  let bytes = 0;
  for (const c of p.candidates) bytes += queryBytes + utf8Length(c);
  return submitRerankJob(ctx, {
    requestKey: p.request_key!,
    model,
    query: p.query,
    candidates: p.candidates,
    truncate: p.truncate ?? false,
    bytes,
    ...(p.allow_equivalent === true ? { allowEquivalent: true } : {}),
  });
}

/** Rerank payload, flattened into the envelope. */
export interface RerankResult extends Envelope {
  /** Raw logits, one per candidate, in input order. */
  scores: number[];
  /** What `scores` holds: always `"raw_logit"`. */
  score_kind: "raw_logit";
  /** `1 / (1 + e^-score)` of each raw score, in input order: a separate, named normalisation. */
  sigmoid_scores: number[];
  /** Tokens of each (query, candidate) pair, specials included. */
  real_token_counts: number[];
  truncation_disclosures: TruncationDisclosure[];
  queue_time_ms: number;
  inference_time_ms: number;
  /** Remote lanes only (contract §3): the provider's id of the (first) request that scored it. */
  provider_request_id?: string;
}

/**
 * Scores candidates against a query. Up to `inline.max_items` candidates run as one request;
 * when a door sets {@link CallOptions.rerank} `inlineChunksUpTo`, up to that many run as
 * consecutive chunks of `inline.max_items`, each admitted on its own (indices in errors are those
 * of the whole request).
 *
 * @throws {SynapseError} channel `invalid_request` for malformed params; semantic
 *   `invalid_request` for an empty query, no candidates or an empty candidate (named by index),
 *   `sequence_too_long`, `engine_output_invalid`, `unknown_model`, `model_loading`, admission
 *   refusals; `invalid_request` naming `inline.max_items` over it (or `reason: "too_many_items"`
 *   over the door's chunk limit).
 */
export async function rerankScore(
  ctx: OpContext,
  rawParams: unknown,
  options: CallOptions = {},
): Promise<RerankResult | JobAccepted> {
  const p = parseParams("rerank.score", RerankScoreParams, rawParams);
  const limits = ctx.config.inline;
  checkText(p.query, "query", { field: "query" });
  if (p.candidates.length === 0) {
    throw new SynapseError("invalid_request", "Cannot rerank: 'candidates' is empty", {
      details: { field: "candidates", reason: "empty_batch" },
    });
  }
  const upTo = options.rerank?.inlineChunksUpTo;
  if (p.candidates.length > (upTo ?? limits.max_items)) {
    if (upTo !== undefined) {
      throw new SynapseError(
        "invalid_request",
        `Cannot rerank ${p.candidates.length} candidates in one call: at most ${upTo} are served; split them over several calls`,
        {
          details: {
            field: "candidates",
            reason: "too_many_items",
            items: p.candidates.length,
            max: upTo,
          },
        },
      );
    }
    if (p.request_key === undefined || p.request_key === "") {
      throw new SynapseError(
        "invalid_request",
        `Cannot rerank inline: ${p.candidates.length} candidates exceed inline.max_items ${limits.max_items}; give a non-empty request_key to run it as a durable job`,
        {
          details: {
            limit: "inline.max_items",
            items: p.candidates.length,
            max: limits.max_items,
            field: "request_key",
          },
        },
      );
    }
    return rerankJob(ctx, p);
  }
  p.candidates.forEach((c, i) =>
    checkText(c, `candidate ${i}`, { item_id: String(i), field: `candidates.${i}` })
  );
  const model = resolveModel(ctx, requestedModel(p), "rerank", routingOf(p));
  // Up to 20 candidates is interactive work; more runs in the bulk class on the bulk lane, so a
  // large rerank never delays queries.
  const lane = p.candidates.length > INTERACTIVE_RERANK_CANDIDATES ? model.bulk : model.interactive;
  const tokenizer = model.tokenizer;
  const queryBytes = utf8Length(p.query);
  const scores: number[] = [];
  const seqs: EncodedSequence[] = [];
  let queueMs = 0;
  let inferenceMs = 0;
  let providerRequestId: string | undefined;
  // One chunk unless a door asked for chunks (then at most inline.max_items candidates each,
  // each admitted on its own, so other requests take their turn between chunks).
  for (let a = 0; a < p.candidates.length; a += limits.max_items) {
    options.signal?.throwIfAborted();
    const chunk = p.candidates.slice(a, a + limits.max_items);
    let bytes = queryBytes * chunk.length;
    for (const c of chunk) bytes += utf8Length(c);
    using permit = lane.admit({
      bytes,
      deadlineMs: p.deadline_ms ?? limits.deadline_ms,
      maxQueueMs: p.max_queue_ms ?? limits.max_queue_ms,
    });
    // A query with no readable tokens (only control or zero-width characters) is refused; a long
    // one is not tokenized here on the event loop (checkText already refused whitespace).
    if (a === 0 && p.query.length <= QUERY_TOKEN_CHECK_MAX_CHARS) {
      checkContentTokens(tokenizer.tokenize(p.query).length, "query", { field: "query" });
    }
    // Pairs are tokenized on the tokenizer pool, the query once per batch.
    const outcomes = await ctx.tokenizers.encodePairs(tokenizer, p.query, chunk, {
      maxTokens: model.maxTokens,
      truncate: p.truncate ?? false,
      itemIds: chunk.map((_, i) => String(a + i)),
      signal: options.signal,
    });
    const chunkSeqs: EncodedSequence[] = outcomes.map((o, i) => {
      if (!o.ok) throw o.error;
      checkContentTokens(o.seq.keptContentIds.length, `candidate ${a + i}`, {
        item_id: String(a + i),
        field: `candidates.${a + i}`,
      });
      return o.seq;
    });
    const out = await lane.run(
      { kind: "score", rows: chunkSeqs },
      {
        permit,
        signal: options.signal,
        label: "rerank",
      },
    );
    // Scores align with candidates: a candidate that cannot be scored refuses the request.
    out.rows.forEach((row, i) => {
      const k = a + i;
      if (row.kind === "ok") return void scores.push(row.values[0]!);
      if (row.kind === "non_finite") {
        throw new SynapseError(
          "engine_output_invalid",
          `Cannot rerank candidate ${k}: the model produced NaN or Infinity`,
          { details: { item_id: String(k), model_id: model.modelId } },
        );
      }
      throw new SynapseError(row.error.code, `Cannot rerank candidate ${k}: ${row.error.message}`, {
        details: { ...row.error.details, item_id: String(k), model_id: model.modelId },
      });
    });
    seqs.push(...chunkSeqs);
    providerRequestId ??= out.providerRequestIds?.[0];
    queueMs += out.queueTimeMs;
    inferenceMs += out.inferenceMs;
  }
  return {
    ...buildEnvelope({
      fingerprint: model.fingerprint,
      tableEpoch: ctx.tableEpoch(),
      equivalentTo: ctx.equivalentTo(model.fingerprint),
      dims: 1,
      engine: model.identity,
      moduleGeneration: ctx.moduleGeneration,
      modelId: model.modelId,
      requestedModel: requestedModel(p),
      testModel: model.testModel,
      certified: servedCertified(ctx, model),
      remote: model.remote,
    }),
    scores,
    score_kind: "raw_logit",
    sigmoid_scores: scores.map((s) => 1 / (1 + Math.exp(-s))),
    real_token_counts: seqs.map((s) => s.effectiveTokens),
    truncation_disclosures: seqs.map(disclosureOf),
    queue_time_ms: queueMs,
    inference_time_ms: Math.round(inferenceMs * 1000) / 1000,
    ...(providerRequestId === undefined ? {} : { provider_request_id: providerRequestId }),
  };
}
