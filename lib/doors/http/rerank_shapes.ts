/**
 * Rerank in the shape Cohere's and Jina's clients send: `POST /v1/rerank`, `POST /v2/rerank`, and
 * `POST /rerank` with `documents` (`POST /rerank` with `texts` is TEI's shape, lib/doors/http/tei.ts).
 * (`/rerank`: a body with `documents` is Cohere/Jina's, any other TEI's.)
 * A mapping around `rerank.score` through the dispatcher, nothing more: the same model
 * resolution, text checks, admission and error codes as `POST /v1/ops/rerank.score`.
 *
 * Scores: `relevance_score` is the logistic `1 / (1 + e^-logit)` of the model's raw logit (what
 * Cohere's and Jina's clients expect: a number in [0, 1]; `rerank.score`'s `sigmoid_scores`), and
 * `raw_logit` is the raw logit itself (`rerank.score`'s `scores`), on every result. Results are
 * sorted by score, highest first (equal scores in input order).
 *
 * Errors are `{message, code, field?, retry_after_ms?}` (Cohere answers `{message}`) with the
 * status of the one status table.
 *
 * @module
 */
import { z } from "zod";
import { SynapseError } from "../../contract/errors.ts";
import { parseDoorParams, wellFormedName } from "../../contract/schemas.ts";
import type { RerankResult } from "../../ops/rerank.ts";
import {
  type AdapterAnswer,
  type AdapterIo,
  type AdapterRoute,
  doorStatus,
  errorField,
  outcomeError,
  rankOrder,
  RERANK_MAX_DOCUMENTS,
  rerankCall,
} from "./_adapter.ts";
import { teiError, teiRerank } from "./tei.ts";

/**
 * A Cohere/Jina rerank request; unknown fields are refused naming them (Cohere's `rank_fields`,
 * `max_chunks_per_doc` and `max_tokens_per_doc` change what is scored, so they are refused, never
 * ignored). `priority` (Cohere v2's scheduling hint) is accepted and has no effect. `truncate` is
 * Synapse's: cut an over-long (query, document) pair and disclose it, instead of refusing it.
 */
const CohereRerankRequest = z.strictObject({
  model: wellFormedName().optional(),
  query: z.string(),
  documents: z.array(z.union([z.string(), z.strictObject({ text: z.string() })])),
  top_n: z.number().int().positive().optional(),
  return_documents: z.boolean().optional(),
  priority: z.number().int().nonnegative().optional(),
  truncate: z.boolean().optional(),
});

/**
 * The route of a Cohere/Jina rerank path, or undefined.
 *
 * @param path The request path.
 * @returns The route of `/v1/rerank`, `/v2/rerank` (Cohere/Jina shape) or `/rerank` (the shape
 *   its body has: with `documents` Cohere/Jina's, otherwise TEI's, whose answer names `texts`).
 */
export function rerankShapesRoute(path: string): AdapterRoute | undefined {
  if (path === "/v1/rerank" || path === "/v2/rerank") {
    return { op: "rerank.score", method: "POST", serve: cohereRerank, error: cohereError };
  }
  if (path === "/rerank") {
    return {
      op: "rerank.score",
      method: "POST",
      async serve(io: AdapterIo): Promise<AdapterAnswer> {
        const body = await io.body();
        const isObject = typeof body === "object" && body !== null && !Array.isArray(body);
        // `documents` is Cohere's and Jina's shape; anything else is TEI's (this is TEI's path).
        if (!isObject || !("documents" in body)) return await teiRerank(io, body);
        try {
          return await cohereRerank(io, body);
        } catch (err) {
          if (err instanceof SynapseError) return cohereError(err);
          throw err;
        }
      },
      // Before the body says which shape it is: TEI's (this is TEI's path).
      error: teiError,
    };
  }
  return undefined;
}

/**
 * Serves a Cohere/Jina rerank request.
 *
 * @param io The request's io.
 * @param preread The body, when the caller has read it.
 * @returns `{id, model, results: [{index, relevance_score, raw_logit, document?}], usage:
 *   {total_tokens}, synapse}`, or the error answer.
 */
async function cohereRerank(io: AdapterIo, preread?: unknown): Promise<AdapterAnswer> {
  const body = preread === undefined ? await io.body() : preread;
  const p = parseDoorParams("rerank", CohereRerankRequest, body, [
    "query",
    "documents.*",
    "documents.*.text",
  ]);
  if (p.documents.length > RERANK_MAX_DOCUMENTS) {
    throw new SynapseError(
      "invalid_request",
      `Cannot rerank ${p.documents.length} documents in one call: at most ${RERANK_MAX_DOCUMENTS}; split them over several calls`,
      {
        channel: true,
        details: {
          field: "documents",
          reason: "too_many_items",
          items: p.documents.length,
          max: RERANK_MAX_DOCUMENTS,
        },
      },
    );
  }
  const candidates = p.documents.map((d) => typeof d === "string" ? d : d.text);
  const outcome = await rerankCall(io, {
    query: p.query,
    candidates,
    ...(p.model === undefined ? {} : { model: p.model }),
    ...(p.truncate === undefined ? {} : { truncate: p.truncate }),
  });
  const err = outcomeError(outcome, (i) => `documents.${i}`);
  if (err !== undefined || outcome.kind !== "result") return cohereError(err!);
  const res = outcome.body.result as RerankResult;
  const tokens = res.real_token_counts.reduce((a, b) => a + b, 0);
  const synapse: Record<string, unknown> = {
    model_id: res.model_id,
    fingerprint: res.fingerprint,
    score_kind: "raw_logit",
    relevance_score: "sigmoid",
    provenance: res.provenance,
    module_generation: res.module_generation,
    real_token_counts: res.real_token_counts,
    truncation_disclosures: res.truncation_disclosures,
    queue_time_ms: res.queue_time_ms,
    inference_time_ms: res.inference_time_ms,
  };
  if (res.test_model) synapse.test_model = true;
  // Cohere v2's scheduling hint: accepted, of no effect here, named.
  if (p.priority !== undefined) synapse.ignored_fields = ["priority"];
  return {
    status: 200,
    fingerprint: res.fingerprint,
    body: {
      id: crypto.randomUUID(),
      model: res.requested_model ?? res.model_id,
      results: rankOrder(res.scores, p.top_n).map((i) => ({
        index: i,
        relevance_score: res.sigmoid_scores[i]!,
        raw_logit: res.scores[i]!,
        ...(p.return_documents ? { document: { text: candidates[i]! } } : {}),
      })),
      usage: { total_tokens: tokens },
      synapse,
    },
  };
}

/**
 * The Cohere/Jina error body `{message, code, field?, retry_after_ms?}` (`field` in the door's
 * terms: `documents[3]`, `query`, `model`) with the status of the one status table.
 *
 * @param e The error.
 */
export function cohereError(e: SynapseError): AdapterAnswer {
  const field = errorField(e, "documents");
  return {
    status: doorStatus(e),
    error: e,
    body: {
      message: e.message,
      code: e.code,
      ...(field === undefined ? {} : { field }),
      ...(e.retryAfterMs === undefined ? {} : { retry_after_ms: e.retryAfterMs }),
    },
  };
}
