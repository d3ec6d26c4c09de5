/**
 * Request schemas of the operations (contract.md §1), strict: an unknown field or a wrong type is
 * `invalid_request` naming the field (field report F16).
 *
 * @module
 */
import { z } from "zod";
import { invalidRequest } from "./errors.ts";

/** Common params of embed / rerank / microllm (contract.md §1), without `truncate`. */
export const COMMON_PARAMS = {
  /** Model id; `model_id` is an accepted alias. */
  model: z.string().min(1).optional(),
  model_id: z.string().min(1).optional(),
  /** Relative deadline in ms. @default 30000 (config `inline.deadline_ms`) */
  deadline_ms: z.number().int().positive().optional(),
  /** Longest acceptable queue wait in ms. @default 5000 (config `inline.max_queue_ms`) */
  max_queue_ms: z.number().int().nonnegative().optional(),
  target_fingerprint: z.string().optional(),
  /** Refuse with `substitution_rejected` unless the model's fingerprint is this one. */
  required_fingerprint: z.string().optional(),
  allow_equivalent: z.boolean().optional(),
  required_epoch: z.number().int().nonnegative().optional(),
  accept_declared: z.boolean().optional(),
};

/** The common params plus `truncate` (embed and rerank). */
const common = {
  ...COMMON_PARAMS,
  /**
   * Cut over-long inputs to the model's max_tokens and disclose it, instead of refusing with
   * `sequence_too_long` (field report F2). @default false
   */
  truncate: z.boolean().optional(),
};

const item = z.union([
  z.string(),
  z.strictObject({ id: z.union([z.string(), z.number().int()]), text: z.string() }),
]);

/** `embed.query {text, id?}`. */
export const EmbedQueryParams = z.strictObject({
  ...common,
  text: z.string(),
  id: z.union([z.string(), z.number().int()]).optional(),
});
export type EmbedQueryParams = z.infer<typeof EmbedQueryParams>;

/** `embed.batch {items | texts, request_key?, input_type?}`. */
export const EmbedBatchParams = z.strictObject({
  ...common,
  items: z.array(item).optional(),
  texts: z.array(z.string()).optional(),
  request_key: z.string().optional(),
  input_type: z.enum(["query", "document"]).optional(),
});
export type EmbedBatchParams = z.infer<typeof EmbedBatchParams>;

/** `rerank.score {model?, query, candidates[]}`. */
export const RerankScoreParams = z.strictObject({
  ...common,
  query: z.string(),
  candidates: z.array(z.string()),
});
export type RerankScoreParams = z.infer<typeof RerankScoreParams>;

/** `embed.result {job_id, page?}` (design.md: `page` is a 0-based integer). */
export const EmbedResultParams = z.strictObject({
  job_id: z.string().min(1),
  page: z.number().int().nonnegative().optional(),
});
export type EmbedResultParams = z.infer<typeof EmbedResultParams>;

/** `models.list {}`. */
export const ModelsListParams = z.strictObject({});

/** `admission.status {}`. */
export const AdmissionStatusParams = z.strictObject({});

/** Common fields after alias resolution. */
export type CommonParams = {
  model?: string | undefined;
  model_id?: string | undefined;
  deadline_ms?: number | undefined;
  max_queue_ms?: number | undefined;
  required_fingerprint?: string | undefined;
  truncate?: boolean | undefined;
};

/**
 * Validates params against a schema.
 *
 * @returns The parsed params.
 * @throws {SynapseError} channel `invalid_request` naming the first offending field, e.g.
 *   "Cannot parse params of embed.query: unknown field 'txt'".
 */
export function parseParams<S extends z.ZodType>(
  method: string,
  schema: S,
  params: unknown,
): z.infer<S> {
  if (params === undefined || params === null) params = {};
  if (typeof params !== "object" || Array.isArray(params)) {
    throw invalidRequest(`Cannot parse params of ${method}: params must be a JSON object`, {
      field: "params",
    });
  }
  const res = schema.safeParse(params);
  if (res.success) return res.data;
  // A misspelt field also makes its intended field "missing": name the unknown one first.
  const issue = res.error.issues.find((i) => i.code === "unrecognized_keys") ??
    res.error.issues[0]!;
  const path = issue.path.map(String).join(".");
  if (issue.code === "unrecognized_keys") {
    const keys = (issue as { keys: string[] }).keys;
    const field = [path, keys[0]].filter((s) => s !== "").join(".");
    throw invalidRequest(`Cannot parse params of ${method}: unknown field '${field}'`, {
      field,
      unknown_fields: keys.map((k) => [path, k].filter((s) => s !== "").join(".")),
    });
  }
  const field = path === "" ? "params" : path;
  throw invalidRequest(`Cannot parse params of ${method}: field '${field}': ${issue.message}`, {
    field,
    issue: issue.code,
  });
}

/** Resolves `model` / `model_id`; refuses both with different values. */
export function requestedModel(p: CommonParams): string | undefined {
  if (p.model !== undefined && p.model_id !== undefined && p.model !== p.model_id) {
    throw invalidRequest("Cannot resolve model: 'model' and 'model_id' name different models", {
      field: "model_id",
    });
  }
  return p.model ?? p.model_id;
}
