/**
 * Request schemas of the operations (contract.md §1), strict: an unknown field or a wrong type is
 * `invalid_request` naming the field (field report F16).
 *
 * @module
 */
import { z } from "zod";
import { invalidRequest } from "./errors.ts";

/**
 * Caller strings, one rule per kind, applied by every door (the dispatcher parses every request
 * with these schemas, whichever door it came through):
 *
 * - A **name** (item id, model, fingerprint, job id, request_key) is a JSON string — never a
 *   number or a boolean, so `7` cannot become `"7"` and clash with a real `"7"` — of well-formed
 *   Unicode (a lone UTF-16 surrogate, half of a cut emoji, is refused, never echoed back and never
 *   turned into U+FFFD, which would let two different keys share a job: field report F17), at
 *   most {@link NAME_MAX_CHARS} UTF-16 code units (a request_key: at most
 *   {@link REQUEST_KEY_MAX_BYTES} UTF-8 bytes, the job store's own limit, so a key the door takes
 *   is never refused later when its batch becomes a job).
 * - A **text** the model reads (a batch item's text, a query, a candidate, a prompt) is a JSON
 *   string; its content (empty, whitespace-only, lone surrogates) is checked by the operation,
 *   so one bad item of a batch is an `item_errors` entry and the rest is served.
 * - A **grammar** is a JSON string of at most {@link GRAMMAR_MAX_CHARS} code units; the GBNF
 *   validator checks its content like a text's (a lone surrogate is `reason: "invalid_utf8"`).
 *
 * A refusal is a permanent channel `invalid_request` naming the field path (`items.3.id`).
 */
export const NAME_MAX_CHARS = 256;
const utf8 = new TextEncoder();

/** Longest `request_key`, in UTF-8 bytes (the job store keys jobs by it). */
export const REQUEST_KEY_MAX_BYTES = 256;
/** Longest GBNF grammar, in UTF-16 code units (64 Ki). */
export const GRAMMAR_MAX_CHARS = 65_536;

/**
 * A caller string that names something: a string of well-formed Unicode, `min` to `max` UTF-16
 * code units (see above).
 *
 * @param max Longest accepted length. @default NAME_MAX_CHARS
 * @param min Shortest accepted length. @default 1
 */
export const wellFormedName = (max: number = NAME_MAX_CHARS, min = 1): z.ZodString =>
  z.string()
    .min(min, { message: min === 1 ? "must not be empty" : `must be at least ${min} characters` })
    .max(max, { message: `is longer than ${max} UTF-16 code units` })
    .refine((s) => s.isWellFormed(), {
      message: "has a lone UTF-16 surrogate, so it is not valid Unicode",
    }) as unknown as z.ZodString;

/** Common params of embed / rerank / microllm (contract.md §1), without `truncate`. */
export const COMMON_PARAMS = {
  /** Model id; `model_id` is an accepted alias. */
  model: wellFormedName().optional(),
  model_id: wellFormedName().optional(),
  /** Relative deadline in ms. @default 30000 (config `inline.deadline_ms`) */
  deadline_ms: z.number().int().positive().optional(),
  /** Longest acceptable queue wait in ms. @default 5000 (config `inline.max_queue_ms`) */
  max_queue_ms: z.number().int().nonnegative().optional(),
  target_fingerprint: wellFormedName().optional(),
  /** Refuse with `substitution_rejected` unless the model's fingerprint is this one. */
  required_fingerprint: wellFormedName().optional(),
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

/** An item id: a name (a string: a number is refused, see {@link NAME_MAX_CHARS}). */
const itemId = wellFormedName();

/** A batch item: a bare string, or `{id, text}`. */
const item = z.union([
  z.string(),
  z.strictObject({ id: itemId, text: z.string() }),
]);

/** `embed.query {text, id?}`. */
export const EmbedQueryParams = z.strictObject({
  ...common,
  text: z.string(),
  id: itemId.optional(),
});
export type EmbedQueryParams = z.infer<typeof EmbedQueryParams>;

/** `embed.batch {items | texts, request_key?, input_type?}`. */
export const EmbedBatchParams = z.strictObject({
  ...common,
  items: z.array(item).optional(),
  texts: z.array(z.string()).optional(),
  /** Empty means none (an inline batch); a job needs a non-empty one (contract.md §1). */
  request_key: z.string()
    .refine((s) => s.isWellFormed(), {
      message: "has a lone UTF-16 surrogate, so it is not valid Unicode",
      abort: true,
    })
    .refine((s) => utf8.encode(s).byteLength <= REQUEST_KEY_MAX_BYTES, {
      message: `is longer than ${REQUEST_KEY_MAX_BYTES} UTF-8 bytes`,
    })
    .optional(),
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
  job_id: wellFormedName(),
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
  const issue = innermost(
    res.error.issues.find((i) => i.code === "unrecognized_keys") ?? res.error.issues[0]!,
  );
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

/**
 * The issue to report: for a failed union (a batch item that is neither a string nor a valid
 * `{id, text}`), the issue of the branch whose type the value had, at its own path — so
 * `items.0.txt` is named as an unknown field rather than `items.0` as "invalid input".
 */
function innermost(issue: z.core.$ZodIssue): z.core.$ZodIssue {
  if (issue.code !== "invalid_union") return issue;
  const branches = (issue as { errors?: z.core.$ZodIssue[][] }).errors ?? [];
  // A branch whose first issue is not a type mismatch at the union's own path matched the type.
  const matched = branches.find((b) =>
    b.length > 0 && !(b[0]!.code === "invalid_type" && b[0]!.path.length === 0)
  );
  if (matched === undefined) return issue;
  const inner = matched.find((i) => i.code === "unrecognized_keys") ?? matched[0]!;
  return innermost({ ...inner, path: [...issue.path, ...inner.path] } as z.core.$ZodIssue);
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
