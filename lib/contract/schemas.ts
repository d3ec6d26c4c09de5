/**
 * Request schemas of the operations (docs/operations.md), strict: an unknown field or a wrong type
 * is `invalid_request` naming the field (field report F16).
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

/** The refusal of a string that is not well-formed Unicode (F17), after its field's name. */
export const ILL_FORMED = "has a lone UTF-16 surrogate, so it is not valid Unicode";

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
    .refine((s) => s.isWellFormed(), { message: ILL_FORMED }) as unknown as z.ZodString;

/** A string that must be well-formed Unicode (no lone UTF-16 surrogate, F17), of any length. */
export const wellFormedString = (): z.ZodString =>
  z.string().refine((s) => s.isWellFormed(), { message: ILL_FORMED }) as unknown as z.ZodString;

/**
 * A string → string record whose keys and values are well-formed Unicode (F17); a bad key is
 * named by the record's path ("a key"), never by itself.
 */
export const wellFormedRecord = () =>
  z.record(z.string(), z.string()).superRefine((rec, ctx) => {
    for (const [k, v] of Object.entries(rec)) {
      if (!k.isWellFormed()) {
        return ctx.addIssue({ code: "custom", message: `has a key that ${ILL_FORMED}` });
      }
      if (!v.isWellFormed()) {
        return ctx.addIssue({ code: "custom", message: ILL_FORMED, path: [k] });
      }
    }
  });

/**
 * A fingerprint as a caller writes it: 64 hex characters (a SHA-256; docs/operations.md
 * "Fingerprints"), of either case, read as its lowercase form (hex is case-blind, and every
 * answer writes fingerprints in lowercase, so `ABC…` and `abc…` name one space). Anything else
 * is a malformed param: channel `invalid_request` naming the field, never a routing miss.
 *
 * @param max Longest accepted length before the hex check (a longer value is refused by
 *   length first, never echoed). @default NAME_MAX_CHARS
 */
export const fingerprintName = (max: number = NAME_MAX_CHARS) =>
  wellFormedName(max)
    .refine((s) => readFingerprint(s) !== undefined, {
      message: "is not a fingerprint (64 hex characters)",
    })
    .transform((s) => s.toLowerCase());

/**
 * A fingerprint as written by a caller, read: 64 hex characters of either case, answered in
 * lowercase; `undefined` for anything else. The one rule of {@link fingerprintName} and the
 * routing headers (lib/doors/http/routing_headers.ts).
 */
export function readFingerprint(s: string): string | undefined {
  return /^[0-9A-Fa-f]{64}$/.test(s) ? s.toLowerCase() : undefined;
}

/**
 * The routing params (docs/operations.md "Routing by fingerprint"; lib/ops/_resolve_model.ts):
 * which model, by the fingerprint it serves, answers. Part of {@link COMMON_PARAMS}; `tokenize` and
 * `detokenize` take them alone.
 */
export const ROUTING_PARAMS = {
  /**
   * Route to a ready model serving this fingerprint (or, with `allow_equivalent`, one equivalent
   * to it); with `model`, that model must serve it (lib/ops/_resolve_model.ts).
   */
  target_fingerprint: fingerprintName().optional(),
  /** Refuse with `substitution_rejected` unless the model serves this fingerprint (or an allowed equivalent). */
  required_fingerprint: fingerprintName().optional(),
  /** A live probe-measured alias of the target / required fingerprint satisfies it. */
  allow_equivalent: z.boolean().optional(),
  /** Refuse with `substitution_rejected` unless this instance's `table_epoch` is at least this. */
  required_epoch: z.number().int().nonnegative().optional(),
  /** With `allow_equivalent`, declared-only alias rows count too. */
  accept_declared: z.boolean().optional(),
};

/**
 * Common params of embed / rerank / microllm (docs/operations.md "Common params"), without
 * `truncate`.
 */
export const COMMON_PARAMS = {
  /** Model id; `model_id` is an accepted alias. */
  model: wellFormedName().optional(),
  model_id: wellFormedName().optional(),
  /** Relative deadline in ms. @default 30000 (config `inline.deadline_ms`) */
  deadline_ms: z.number().int().positive().optional(),
  /** Longest acceptable queue wait in ms. @default 5000 (config `inline.max_queue_ms`) */
  max_queue_ms: z.number().int().nonnegative().optional(),
  ...ROUTING_PARAMS,
};

/**
 * `microllm.oneshot`'s `response_format` (OpenAI's shape): `text` leaves the output free,
 * `json_object` constrains it to one JSON object, `json_schema` to its `schema` (compiled to a
 * GBNF grammar, lib/grammar/json_schema_gbnf.ts). `name` and `description` label the
 * schema and change no token, as in OpenAI; the output always follows the schema, whatever
 * `strict` says.
 */
export const RESPONSE_FORMAT = z.discriminatedUnion("type", [
  z.strictObject({ type: z.literal("text") }),
  z.strictObject({ type: z.literal("json_object") }),
  z.strictObject({
    type: z.literal("json_schema"),
    json_schema: z.strictObject({
      name: wellFormedString().min(1).max(64),
      description: wellFormedString().optional(),
      schema: z.unknown().optional(),
      strict: z.boolean().nullable().optional(),
    }),
  }),
]);
/** A parsed {@link RESPONSE_FORMAT}. */
export type ResponseFormat = z.infer<typeof RESPONSE_FORMAT>;

/**
 * One message of `microllm.oneshot {messages}`: a role, its text (`null` is accepted on an
 * assistant message only, as empty content) and an optional speaker name.
 */
export const CHAT_MESSAGE = z.strictObject({
  role: z.enum(["system", "developer", "user", "assistant"]),
  content: z.string().nullable(),
  name: wellFormedName().optional(),
});
/** A parsed {@link CHAT_MESSAGE}. */
export type ChatMessageParam = z.infer<typeof CHAT_MESSAGE>;

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

/**
 * The prompt selector of the embed ops (docs/operations.md "Prompts (query / document)", F35;
 * lib/models/prompts.ts `selectPrompt`): `input_type` picks the model's prompt by role,
 * `prompt_name` names one; on a model without a prompt table nothing is applied, and the answer's
 * `prompt` says so.
 */
export const PROMPT_SELECTOR = {
  input_type: z.enum(["query", "document"]).optional(),
  prompt_name: wellFormedName(128).optional(),
};

/** `embed.query {text, id?, input_type?, prompt_name?}`. */
export const EmbedQueryParams = z.strictObject({
  ...common,
  text: z.string(),
  id: itemId.optional(),
  ...PROMPT_SELECTOR,
  /**
   * Vector width: the model's own, or one of its `matryoshka_dims` (a derived space with its own
   * fingerprint, lib/models/matryoshka.ts); anything else is refused naming `dimensions`.
   */
  dimensions: z.number().int().positive().optional(),
});
export type EmbedQueryParams = z.infer<typeof EmbedQueryParams>;

/** `embed.batch {items | texts, request_key?, input_type?, prompt_name?}`. */
/** A job's idempotency key: empty means none (inline); a job needs a non-empty one. */
const requestKey = z.string()
  .refine((s) => s.isWellFormed(), { message: ILL_FORMED, abort: true })
  .refine((s) => utf8.encode(s).byteLength <= REQUEST_KEY_MAX_BYTES, {
    message: `is longer than ${REQUEST_KEY_MAX_BYTES} UTF-8 bytes`,
  })
  .optional();

export const EmbedBatchParams = z.strictObject({
  ...common,
  items: z.array(item).optional(),
  texts: z.array(z.string()).optional(),
  request_key: requestKey,
  ...PROMPT_SELECTOR,
  /** Vector width, as `embed.query`'s `dimensions`; a job keeps it (it is in the request digest). */
  dimensions: z.number().int().positive().optional(),
});
export type EmbedBatchParams = z.infer<typeof EmbedBatchParams>;

/** `rerank.score {model?, query, candidates[]}`. */
export const RerankScoreParams = z.strictObject({
  ...common,
  query: z.string(),
  candidates: z.array(z.string()),
  /** Over `inline.max_items` candidates, a durable job (read with `embed.result`). */
  request_key: requestKey,
});
export type RerankScoreParams = z.infer<typeof RerankScoreParams>;

/** `embed.result {job_id, page?}`: `page` is a 0-based integer. */
export const EmbedResultParams = z.strictObject({
  job_id: wellFormedName(),
  page: z.number().int().nonnegative().optional(),
});
export type EmbedResultParams = z.infer<typeof EmbedResultParams>;

/** `job.resume {job_id}`: a durable job paused `paused_needs_reauth` (contract §1). */
export const JobResumeParams = z.strictObject({
  job_id: wellFormedName(),
});
export type JobResumeParams = z.infer<typeof JobResumeParams>;

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
  target_fingerprint?: string | undefined;
  required_fingerprint?: string | undefined;
  allow_equivalent?: boolean | undefined;
  required_epoch?: number | undefined;
  accept_declared?: boolean | undefined;
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
    if (keys.some((k) => !k.isWellFormed())) {
      // Never echoed (F17): named by the object that holds it.
      const at = path === "" ? "params" : path;
      throw invalidRequest(
        `Cannot parse params of ${method}: field '${at}': a key has a lone UTF-16 surrogate, so it is not valid Unicode`,
        { field: at, reason: "invalid_unicode" },
      );
    }
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
 * Validates a door's body as {@link parseParams} does, after refusing any string in it — a value
 * or an object key, at any depth, a field the door ignores included — that is not well-formed
 * Unicode (a lone UTF-16 surrogate, field report F17). The caller's texts (`except`) are left
 * to the operation, which refuses them with its own details (F14, `reason: "invalid_unicode"`).
 *
 * @param method The door's name in messages, e.g. `/v1/embeddings`.
 * @param schema The door's body schema.
 * @param body The parsed JSON body.
 * @param except Paths of the caller's text strings, dot-separated, `*` for any one step (an index
 *   or a key), e.g. `["input", "input.*", "messages.*.content"]`; keys are always checked.
 * @returns The parsed body.
 * @throws {SynapseError} channel `invalid_request` `{field, reason: "invalid_unicode"}`: the
 *   field's path (a bad key: the object's path, `params` at the top), never the bad string.
 */
export function parseDoorParams<S extends z.ZodType>(
  method: string,
  schema: S,
  body: unknown,
  except: readonly string[] = [],
): z.infer<S> {
  refuseIllFormed(method, body, except.map((e) => e.split(".")));
  return parseParams(method, schema, body);
}

/**
 * Refuses the first string (value or key) of a JSON value that is not well-formed Unicode.
 *
 * @param method The door or operation, for the message.
 * @param value The JSON value.
 * @param except Paths of strings left to the operation (segments; `*` matches any one step).
 * @throws {SynapseError} channel `invalid_request` `{field, reason: "invalid_unicode"}`.
 */
export function refuseIllFormed(
  method: string,
  value: unknown,
  except: readonly (readonly string[])[] = [],
): void {
  const bad = illFormedAt(value, except);
  if (bad === undefined) return;
  const field = bad.path.length === 0 ? "params" : bad.path.join(".");
  const what = bad.key ? `field '${field}': a key` : `field '${field}'`;
  throw invalidRequest(
    `Cannot parse params of ${method}: ${what} has a lone UTF-16 surrogate, so it is not valid Unicode`,
    { field, reason: "invalid_unicode" },
  );
}

/** The first ill-formed string or key, in document order; iterative, so any depth is fine. */
function illFormedAt(
  root: unknown,
  except: readonly (readonly string[])[],
): { path: string[]; key: boolean } | undefined {
  const stack: { value: unknown; path: string[] }[] = [{ value: root, path: [] }];
  while (stack.length > 0) {
    const { value, path } = stack.pop()!;
    if (typeof value === "string") {
      if (value.isWellFormed()) continue;
      const left = except.some((e) =>
        e.length === path.length && e.every((s, i) => s === "*" || s === path[i])
      );
      if (!left) return { path, key: false };
      continue;
    }
    if (typeof value !== "object" || value === null) continue;
    const entries: [string, unknown][] = Array.isArray(value)
      ? value.map((v, i) => [String(i), v])
      : Object.entries(value);
    if (!Array.isArray(value) && entries.some(([k]) => !k.isWellFormed())) {
      return { path, key: true };
    }
    for (let k = entries.length - 1; k >= 0; k--) {
      const [name, v] = entries[k]!;
      if (typeof v === "string" || (typeof v === "object" && v !== null)) {
        stack.push({ value: v, path: [...path, name] });
      }
    }
  }
  return undefined;
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

// ---- Model, catalog and cache operations (docs/operations.md) ----

/** `sha256:<64 lowercase hex>` (a bare 64-hex digest is accepted and prefixed). */
export const DigestParam = z.string()
  .transform((s) => s.trim().toLowerCase())
  .refine((s) => /^(sha256:)?[0-9a-f]{64}$/.test(s), {
    message: "must be a SHA-256 digest: 'sha256:' and 64 hex digits",
  })
  .transform((s) => (s.startsWith("sha256:") ? s : `sha256:${s}`) as `sha256:${string}`);

/** A file of `model.load`: a name (source `path`: inside the directory), or a pinned remote file. */
const LoadFile = z.union([
  wellFormedName(4096),
  z.strictObject({
    url: wellFormedName(4096).optional(),
    path: wellFormedName(4096).optional(),
    sha256: DigestParam,
    size: z.number().int().nonnegative().optional(),
  }),
]);

/** Engines `model.load` takes, with their aliases (docs/config.md "preload_models"). */
export const LoadEngine = z.enum(["ort", "onnx", "llama", "llama.cpp"]).transform((e) =>
  e === "onnx" ? "ort" : e === "llama.cpp" ? "llama" : e
);

/** `model.load` (strict): see docs/operations.md for how `source` picks the files. */
export const ModelLoadParams = z.strictObject({
  source: z.enum(["path", "url", "hf"]).optional(),
  path: wellFormedName(4096).optional(),
  url: wellFormedName(4096).optional(),
  repo: wellFormedName().optional(),
  revision: wellFormedName().optional(),
  files: z.strictObject({
    model: LoadFile.optional(),
    tokenizer: LoadFile.optional(),
    config: LoadFile.optional(),
    extra: z.array(LoadFile).max(16).optional(),
  }).optional(),
  expected_digest: DigestParam.optional(),
  engine: LoadEngine.optional(),
  task: z.enum(["embed", "rerank", "generate"]).optional(),
  pooling: z.enum(["mean", "cls", "last"]).optional(),
  normalize: z.boolean().optional(),
  max_tokens: z.number().int().min(2).max(1 << 20).optional(),
  model_id: wellFormedName(128).refine((s) => /^[A-Za-z0-9][A-Za-z0-9._:-]*$/.test(s), {
    message:
      "must start with a letter or digit and hold only letters, digits, '.', '_', ':' and '-'",
  }).optional(),
  pin: z.boolean().optional(),
  /**
   * Model id of the reference lane with the same weights: the probe checks this
   * model's parity against it. Never the loaded model's own id.
   */
  reference_model: wellFormedName(128).optional(),
  /**
   * Prompt table of an embed model (F35; docs/operations.md "Prompts (query / document)"): prompt
   * name → prefix; part of the numeric profile. Absent: a local model directory's
   * `config_sentence_transformers.json` `prompts`.
   */
  prompts: wellFormedRecord().optional(),
  /** The prompt applied when a request selects none; must name one of `prompts`. */
  default_prompt_name: wellFormedName(128).optional(),
  /**
   * Matryoshka widths the model was trained to be cut to (docs/operations.md "Matryoshka
   * dimensions"): strictly ascending positive integers, each at most the model's width (checked at
   * load; embed models only).
   */
  matryoshka_dims: z.array(z.number().int().positive()).min(1).max(64).optional(),
  request_key: wellFormedName().optional(),
  deadline_ms: z.number().int().positive().optional(),
});

/** `model.status {job_id} XOR {model_id}`. */
export const ModelStatusParams = z.strictObject({
  job_id: wellFormedName().optional(),
  model_id: wellFormedName().optional(),
}).refine((p) => (p.job_id === undefined) !== (p.model_id === undefined), {
  message: "give exactly one of job_id and model_id",
  path: ["job_id"],
});

/** `model.unload {model_id}`. */
export const ModelUnloadParams = z.strictObject({ model_id: wellFormedName() });

/** `models.catalog {query?, task?, runnable_here?, installed?}`. */
export const ModelsCatalogParams = z.strictObject({
  query: wellFormedString().max(NAME_MAX_CHARS).optional(),
  task: z.enum(["embed", "rerank", "generate"]).optional(),
  runnable_here: z.boolean().optional(),
  installed: z.boolean().optional(),
});

/** `models.download {catalog_id, request_key?}`. */
export const ModelsDownloadParams = z.strictObject({
  catalog_id: wellFormedName(),
  request_key: wellFormedName().optional(),
});

/** `models.download.cancel {job_id}`. */
export const ModelsDownloadCancelParams = z.strictObject({ job_id: wellFormedName() });

/** `models.remove {catalog_id}` (a catalog id, or a model `model.load` loaded). */
export const ModelsRemoveParams = z.strictObject({ catalog_id: wellFormedName() });

/** `cache.pin {digest? | source_url, expected_digest?, format?, tokenizer_path?, module_id?, unpin?}`. */
export const CachePinParams = z.strictObject({
  digest: DigestParam.optional(),
  source_url: wellFormedName(4096).optional(),
  expected_digest: DigestParam.optional(),
  format: z.enum(["onnx", "gguf", "tokenizer_json", "config_json", "other"]).optional(),
  tokenizer_path: wellFormedName(4096).optional(),
  /**
   * The module the pin is for (default `synapse`). An id with `:` is refused: `<module>:model:<id>`
   * and `<module>:catalog:<id>` are the pins of the models Synapse itself loaded, which only
   * `model.unload` / `models.remove` drop.
   */
  module_id: wellFormedName(128).refine((s) => !s.includes(":"), {
    message: "must not contain ':' (reserved for the pins of loaded models)",
  }).optional(),
  unpin: z.boolean().optional(),
}).refine((p) => (p.digest === undefined) !== (p.source_url === undefined), {
  message: "give exactly one of digest and source_url",
  path: ["digest"],
});

/**
 * `probe.start {models?, request_key?, deadline_ms?}`: a durable probe job.
 * `models` absent or empty: every loaded model whose lanes need a certificate. `deadline_ms`: the
 * whole job's budget from admission (ms); past it the job fails `deadline_exceeded`.
 */
export const ProbeStartParams = z.strictObject({
  models: z.array(wellFormedName()).max(256).optional(),
  request_key: wellFormedName(REQUEST_KEY_MAX_BYTES).refine(
    (s) => utf8.encode(s).byteLength <= REQUEST_KEY_MAX_BYTES,
    { message: `is longer than ${REQUEST_KEY_MAX_BYTES} UTF-8 bytes` },
  ).optional(),
  deadline_ms: z.number().int().positive().optional(),
});
export type ProbeStartParams = z.infer<typeof ProbeStartParams>;

/** `probe.status {job_id}`. */
export const ProbeStatusParams = z.strictObject({ job_id: wellFormedName() });

/** `probe.report {}`. */
export const ProbeReportParams = z.strictObject({});

/** `cache.gc {digest?, grace_ms?}`. */
export const CacheGcParams = z.strictObject({
  digest: DigestParam.optional(),
  grace_ms: z.number().int().nonnegative().optional(),
});
