/**
 * What the API-shaped doors (Cohere/Jina and TEI rerank, TEI embed and info, Ollama embed, tags
 * and generation) share: the route they hand the server, what the server lends them for one
 * request, and the call through the dispatcher that records the request log's facts, with the
 * request's routing headers as the call's routing params. Each door is a mapping of params and
 * results around the one dispatcher, as lib/doors/http/openai.ts is; the server keeps the socket,
 * the Host/Origin checks, the method check and the body reader.
 *
 * @module
 */
import { SynapseError } from "../../contract/errors.ts";
import type { EmbedResult, ItemError } from "../../ops/embed.ts";
import type { PromptDisclosure, PromptSelector } from "../../models/prompts.ts";
import type { OpOutcome } from "../../ops/dispatcher.ts";
import type { DoorBackend, DoorCallOptions, RequestFacts } from "../../ops/door_backend.ts";
import type { RoutingParams } from "../../ops/op_types.ts";
import { HttpRefusal } from "../_request_body.ts";
import { httpStatusFor } from "./status_table.ts";

/** An answer of a door: status, body, the error it carries (for headers and logs). */
export interface AdapterAnswer {
  status: number;
  body: unknown;
  error?: SynapseError;
  /** The fingerprint of the result, for `x-synapse-fingerprint`. */
  fingerprint?: string | undefined;
  /** The embed answer's prompt disclosure, for `x-synapse-prompt` ({@link promptHeader}). */
  prompt?: PromptDisclosure | undefined;
  /**
   * A body the server sends as it comes (a generation streamed as NDJSON) instead of `body`,
   * with its content type; the request's log line waits for `settled` (the generation's end).
   */
  stream?: { body: ReadableStream<Uint8Array>; contentType: string; settled: Promise<void> };
}

/**
 * The `x-synapse-prompt` header of an embed answer's prompt disclosure (for doors whose body has
 * no room for it, e.g. TEI's array of vectors): `applied=<name>` when a prompt was applied (the
 * name URI-encoded), else `applied=none`, then `; reason=<reason>` when there is one, e.g.
 * `applied=none; reason=no_prompt_table`.
 */
export function promptHeader(d: PromptDisclosure): string {
  const applied = d.applied === null ? "none" : encodeURIComponent(d.applied);
  return `applied=${applied}${d.reason === undefined ? "" : `; reason=${d.reason}`}`;
}

/** What one request did, for its log line (the server's request record). */
export interface AdapterRecord {
  op?: string;
  params?: unknown;
  facts?: RequestFacts | undefined;
  /** Set for a response that streams past the handler: the log line waits for it. */
  settled?: Promise<void>;
}

/** What the server lends a door for one request. */
export interface AdapterIo {
  /**
   * The attached instance's backend (lib/ops/door_backend.ts).
   * @throws {SynapseError} `module_not_initialized` before one is attached.
   */
  backend(): DoorBackend;
  /** The request's JSON body, read under the door's size cap. @throws {SynapseError} */
  body(): Promise<unknown>;
  /** The request's signal (aborted when the client goes away). */
  signal: AbortSignal;
  /** The request log record; {@link callOp} fills it. */
  record: AdapterRecord;
  /**
   * The request's routing constraints (its `x-synapse-*` headers, lib/doors/http/routing_headers.ts),
   * added by {@link callOp} to the params of every model-serving call ({@link ROUTED_OPS}).
   * Empty on a route that serves no model. @default {}
   */
  routing?: RoutingParams;
}

/**
 * The operations whose model the routing constraints choose (they take the routing params). A
 * route of another operation (a model listing, the version) serves no model, and its routing
 * headers choose nothing.
 */
export const ROUTED_OPS: ReadonlySet<string> = new Set([
  "microllm.oneshot",
  "embed.batch",
  "rerank.score",
  "tokenize",
  "detokenize",
]);

/** A route of a door, found by path. */
export interface AdapterRoute {
  /** The operation it runs, for the request log (`embed.batch`, `rerank.score`, `models.list`). */
  op: string;
  /** The one HTTP method it takes; any other is 405. */
  method: "GET" | "POST";
  /** Serves the request; a thrown {@link SynapseError} is answered by {@link AdapterRoute.error}. */
  serve(io: AdapterIo): Promise<AdapterAnswer>;
  /** The door's body and status of an error (one table per door). */
  error(e: SynapseError): AdapterAnswer;
}

/**
 * Calls an operation through the dispatcher, recording its params and facts for the request log.
 * A model-serving call ({@link ROUTED_OPS}) gets the request's routing constraints
 * ({@link AdapterIo.routing}) as params.
 * A door that calls several times (rerank chunks) records the last params and the summed facts.
 *
 * @param io The request's io.
 * @param method The operation.
 * @param params Its params.
 * @param options Call options (the request's signal is added).
 * @returns The outcome; never throws for a refusal (that is `kind: "error"`).
 */
export async function callOp(
  io: AdapterIo,
  method: string,
  params: unknown,
  options: DoorCallOptions = {},
): Promise<OpOutcome> {
  const callOptions: DoorCallOptions = { ...options, signal: io.signal };
  const routing = io.routing ?? {};
  if (ROUTED_OPS.has(method) && Object.keys(routing).length > 0) {
    params = { ...(params as Record<string, unknown>), ...routing };
  }
  const { outcome, facts } = await io.backend().call(method, params, callOptions);
  const prev = io.record.facts;
  if (prev !== undefined && prev.outcome === "ok") {
    const sum = (a: number | undefined, b: number | undefined) =>
      a === undefined ? b : b === undefined ? a : a + b;
    const merged: RequestFacts = { ...facts };
    for (const k of ["items", "item_errors", "tokens", "queue_ms", "inference_ms"] as const) {
      const v = sum(prev[k], facts[k]);
      if (v !== undefined) merged[k] = v;
    }
    io.record.facts = merged;
  } else {
    io.record.facts = facts;
  }
  io.record.params = params;
  return outcome;
}

/**
 * The error an outcome carries, or the result's first refused item as the whole request's error
 * (the API-shaped doors are all or nothing, as their clients expect), its `field` set to
 * `fieldOf(index)` in the door's terms.
 *
 * @param outcome The dispatcher's outcome.
 * @param fieldOf The door's name of the input at an index (`inputs[3]`, `input[3]`).
 * @returns The error, or undefined when the outcome is a result with nothing refused.
 */
export function outcomeError(
  outcome: OpOutcome,
  fieldOf: (index: number) => string,
): SynapseError | undefined {
  if (outcome.kind !== "result") return outcome.error;
  const res = outcome.body.result as { item_errors?: ItemError[] };
  const refused = res.item_errors?.[0];
  if (refused === undefined) return undefined;
  const more = res.item_errors!.length - 1;
  const suffix = more > 0 ? ` (and ${more} more input${more > 1 ? "s" : ""} refused)` : "";
  return new SynapseError(refused.error.code, `${refused.error.message}${suffix}`, {
    details: { ...refused.error.details, field: fieldOf(refused.index) },
    ...(refused.error.retry_after_ms === undefined
      ? {}
      : { retryAfterMs: refused.error.retry_after_ms }),
  });
}

/**
 * A field path of an operation (`texts.3`, `candidates.3`, `items.3.text`, `model_id`) in a door's
 * terms: the list's name replaced by `list` and its index in brackets (`inputs[3]`), `model_id` as
 * `model`; other fields as they are.
 *
 * @param field The operation's field path.
 * @param list The door's name of the input list (`inputs`, `input`, `documents`, `texts`).
 * @param single The input was one string (then it is named `list`, not `list[0]`).
 */
export function doorField(field: string, list: string, single = false): string {
  const m = /^(texts|items|candidates|[a-z_]+)(?:\.(\d+))?(?:\..*)?$/.exec(field);
  if (m && (m[1] === list || ["texts", "items", "candidates"].includes(m[1]!))) {
    return m[2] === undefined || single ? list : `${list}[${m[2]}]`;
  }
  if (field === "model_id") return "model";
  return field;
}

/**
 * The message of an error as a door answers it: the operation's own, plus what to do where the
 * door's request can fix it (`sequence_too_long` of an embed or rerank input: send
 * `truncate: true`, which cuts the input to the model's limit and discloses the cut). A
 * generation's prompt (`details.field` `prompt` or `messages`) is never cut, so its refusal gets
 * no such hint.
 */
export function doorMessage(e: SynapseError): string {
  const field = e.details?.field;
  const generation = field === "prompt" || field === "messages";
  return e.code === "sequence_too_long" && !generation
    ? `${e.message}; send truncate: true to cut it to the model's limit (the cut is disclosed)`
    : e.message;
}

/** The door's field of an error: `details.field`, else the candidate or item named by `item_id`. */
export function errorField(e: SynapseError, list: string, single = false): string | undefined {
  const field = e.details?.field;
  if (typeof field === "string") return doorField(field, list, single);
  const item = e.details?.item_id;
  if (typeof item === "string" && /^\d+$/.test(item)) return single ? list : `${list}[${item}]`;
  return undefined;
}

/**
 * The HTTP status of an error on every door: the status a transport refusal carries (405, 413,
 * 403), else {@link httpStatusFor} of its code (the one status table).
 */
export function doorStatus(e: SynapseError): number {
  return e instanceof HttpRefusal ? e.status : httpStatusFor(e.code);
}

/** Most documents (candidates) one rerank call of an API-shaped door takes (Cohere's limit). */
export const RERANK_MAX_DOCUMENTS = 1000;

/**
 * Calls `rerank.score` for a door: up to {@link RERANK_MAX_DOCUMENTS} candidates, served in chunks
 * of `inline.max_items` (see `RerankCallOptions`).
 *
 * @param io The request's io.
 * @param params `rerank.score` params.
 * @returns The outcome.
 */
export function rerankCall(
  io: AdapterIo,
  params: { query: string; candidates: string[]; model?: string; truncate?: boolean },
): Promise<OpOutcome> {
  return callOp(io, "rerank.score", params, {
    rerank: { inlineChunksUpTo: RERANK_MAX_DOCUMENTS },
  });
}

/**
 * Candidate indices ordered by score, highest first; equal scores keep input order. Ordered by the
 * raw logits, so the order is the same whichever score a door shows (the logistic is monotonic,
 * but two large logits can round to the same sigmoid).
 *
 * @param scores Raw scores in input order.
 * @param topN Keep the first `topN` (all when absent or larger).
 */
export function rankOrder(scores: readonly number[], topN?: number): number[] {
  const order = scores.map((_, i) => i).sort((a, b) => scores[b]! - scores[a]! || a - b);
  return topN === undefined ? order : order.slice(0, topN);
}

/**
 * One all-or-nothing `embed.batch` of an embeddings door: up to `maxInputs` texts served as inline
 * chunks, `dimensions` (when given) served as the model's width or a Matryoshka width of it, the first refused input named
 * `<list>[i]`.
 *
 * @returns The result, or the error to answer in the door's shape.
 */
export async function embedAllOrNothing(
  io: AdapterIo,
  params: { texts: string[]; model?: string; truncate?: boolean },
  options: {
    maxInputs: number;
    dimensions?: number | null | undefined;
    list: string;
    /** The door's prompt selector (TEI `prompt_name`, Jina `task`, Cohere `input_type`). */
    prompt?: PromptSelector | undefined;
    /** A per-call token cap (Ollama `options.num_ctx`; `EmbedCallOptions.maxTokens`). */
    maxTokens?: number | undefined;
    /** No texts is a warm-up, not a refusal (`EmbedCallOptions.allowEmpty`). */
    allowEmpty?: boolean;
  },
): Promise<{ result: EmbedResult } | { error: SynapseError }> {
  const outcome = await callOp(io, "embed.batch", params, {
    embed: {
      inlineChunksUpTo: options.maxInputs,
      allOrNothing: true,
      prompt: options.prompt,
      requiredDims: options.dimensions ?? undefined,
      ...(options.maxTokens === undefined ? {} : { maxTokens: options.maxTokens }),
      ...(options.allowEmpty === true ? { allowEmpty: true } : {}),
    },
  });
  const err = outcomeError(outcome, (i) => `${options.list}.${i}`);
  if (err !== undefined || outcome.kind !== "result") return { error: err! };
  return { result: outcome.body.result as EmbedResult };
}
