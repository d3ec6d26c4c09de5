/**
 * `embed.query` and inline `embed.batch` (docs/operations.md "embed.query", "embed.batch"):
 * validate, admit, tokenize with per-item truncation facts, run length-sorted micro-batches on the
 * model's lane, and answer the envelope with per-item hashes, token counts and disclosures. An item
 * that cannot be embedded (empty text, too long, non-finite output) is reported in `item_errors` by
 * id; the rest of the batch is served (field reports F1, F2, F6).
 *
 * @module
 */
import { SynapseError } from "../contract/errors.ts";
import { buildEnvelope } from "../contract/envelope.ts";
import { servedCertified } from "../probe/certification.ts";
import type { Envelope } from "../contract/envelope.ts";
import {
  EmbedBatchParams,
  EmbedQueryParams,
  parseParams,
  requestedModel,
} from "../contract/schemas.ts";
import type { CommonParams } from "../contract/schemas.ts";
import type { ReadyModel } from "../models/model.ts";
import {
  type PromptChoice,
  type PromptDisclosure,
  type PromptSelector,
  selectPrompt,
} from "../models/prompts.ts";
import type { LaneBatchResult, LanePermit } from "../lanes/lane.ts";
import { requestSignal } from "../sched/request_signal.ts";
import { submitEmbedJob } from "./jobs.ts";
import type { EmbedJobRequest, JobAccepted } from "./jobs.ts";
import {
  checkItemTexts,
  type EmbedItem,
  type EmbedVector,
  type ItemError,
  type PreparedItem,
  prepareItems,
  rowError,
  type TruncationDisclosure,
  vectorLine,
  wireToError,
} from "./_embedding.ts";
import { utf8Length } from "./_text.ts";
import { markStage } from "../log/stage_marks.ts";
import type { CallOptions, EmbedCallOptions, OpContext } from "./context.ts";
import { requireSpace, resolveModel, routingOf } from "./_resolve_model.ts";
import {
  matryoshkaWidthOf,
  type ServedSpace,
  servedValues,
  servedVariant,
} from "../models/matryoshka.ts";

export type { EmbedItem, EmbedVector, ItemError, TruncationDisclosure };

/** Embed payload, flattened into the envelope. */
export interface EmbedResult extends Envelope {
  /** Served items, in request order; `real_token_counts` and `truncation_disclosures` align. */
  vectors: EmbedVector[];
  real_token_counts: number[];
  truncation_disclosures: TruncationDisclosure[];
  /** Items refused, by id; absent when every item was served. */
  item_errors?: ItemError[];
  /**
   * The prompt of the request (docs/operations.md "Prompts (query / document)", F35): what was
   * requested, the prompt name applied to every item (or null) and why; present when the request
   * selected a prompt or the model has a prompt table. Each item's `truncation_disclosures` entry
   * says whether its prefix was applied or already there.
   */
  prompt?: PromptDisclosure;
  /** Milliseconds from admission to the first engine call. */
  queue_time_ms: number;
  /** Milliseconds of engine work. */
  inference_time_ms: number;
  /**
   * Remote lanes only (contract §3): the provider's id of the (first) request that served this
   * answer, at most 128 bytes.
   */
  provider_request_id?: string;
}

/** The prompt selector of a request's `input_type` / `prompt_name`. */
function selectorOf(
  p: { input_type?: string | undefined; prompt_name?: string | undefined },
): PromptSelector {
  return {
    ...(p.input_type === undefined ? {} : { input_type: p.input_type }),
    ...(p.prompt_name === undefined ? {} : { prompt_name: p.prompt_name }),
  };
}

/** `options` with the request's prompt selector set. */
function withSelector(options: CallOptions, selector: PromptSelector): CallOptions {
  if (selector.input_type === undefined && selector.prompt_name === undefined) return options;
  return { ...options, embed: { ...options.embed, prompt: selector } };
}

/**
 * `embed.query {text, id?, input_type?, prompt_name?, dimensions?}` → an envelope with one vector.
 * `dimensions` names the model's width or one of its `matryoshka_dims`: the vector is then the
 * first `dimensions` values (L2-normalised again when the model normalises) and the envelope's
 * `fingerprint` and `dims` are the derived space's (lib/models/matryoshka.ts).
 *
 * @throws {SynapseError} channel `invalid_request` for malformed params; semantic errors
 *   (`invalid_request` for empty text, `invalid_request {field: "dimensions", allowed_dims,
 *   model_id}` for a width the model does not serve, `sequence_too_long`, `engine_output_invalid`,
 *   `unknown_model`, `model_loading`, `queue_full`, `deadline_exceeded`) for refusals.
 */
export async function embedQuery(
  ctx: OpContext,
  rawParams: unknown,
  options: CallOptions = {},
): Promise<EmbedResult> {
  const p = parseParams("embed.query", EmbedQueryParams, rawParams);
  markStage("params");
  const item = { id: p.id ?? "0", text: p.text };
  const res = await embedItems(ctx, p, [item], withSelector(options, selectorOf(p)));
  if (!("vectors" in res)) throw new Error("A single item became a job. This is a bug");
  const err = res.item_errors?.[0];
  if (err) throw wireToError(err.error);
  return res;
}

/**
 * `embed.batch {items | texts, request_key?, input_type?, dimensions?}` → an envelope with one
 * vector per served item (`dimensions` as in {@link embedQuery}; a job keeps it), or,
 * over the inline limits (`inline.max_items`, `inline.max_tokens`, `inline.byte_budget`) and with
 * a `request_key`, a durable job `{module_generation, job_id, state, request_key,
 * pages_available}` whose pages `embed.result` reads.
 *
 * `input_type` / `prompt_name` select the model's prompt (lib/models/prompts.ts; F35): applied
 * before tokenizing, disclosed in `prompt` and per item.
 *
 * @throws {SynapseError} channel `invalid_request` for malformed params, an empty batch or a
 *   duplicate id; semantic `invalid_request` naming `prompt_name` for a name the model's table
 *   lacks (`details.known`) or both selectors given; semantic `invalid_request` naming the limit for an over-limit batch without a
 *   `request_key`; `idempotency_conflict` for a key reused with another request; refusals as
 *   {@link embedQuery}, per item in `item_errors`.
 */
export async function embedBatch(
  ctx: OpContext,
  rawParams: unknown,
  options: CallOptions = {},
): Promise<EmbedResult | JobAccepted> {
  const p = parseParams("embed.batch", EmbedBatchParams, rawParams);
  if (p.items !== undefined && p.texts !== undefined) {
    throw new SynapseError(
      "invalid_request",
      "Cannot parse params of embed.batch: give 'items' or 'texts', not both",
      { channel: true, details: { field: "texts" } },
    );
  }
  const raw = p.items ?? p.texts;
  if (raw === undefined) {
    throw new SynapseError(
      "invalid_request",
      "Cannot parse params of embed.batch: field 'items' is required",
      { channel: true, details: { field: "items" } },
    );
  }
  const items: EmbedItem[] = raw.map((it, i) =>
    typeof it === "string" ? { id: String(i), text: it } : { id: it.id, text: it.text }
  );
  return await embedItems(ctx, p, items, withSelector(options, selectorOf(p)), p.request_key);
}

/**
 * The shared embed path of every front door (embed.query, embed.batch, `/v1/embeddings`): one
 * admission policy whatever the request's shape (field report F5).
 *
 * Order (docs/internals.md §6, STYLE 11): validate → admit on the byte count (a refusal never waits
 * for tokenization) → tokenize → run on the model's interactive lane.
 *
 * @param ctx Module context.
 * @param p Validated common params.
 * @param items Items, ids unique.
 * @param options The caller's signal; a door's `embed` options (inline chunks, required dims).
 * @param requestKey Turns an over-limit batch into a durable job.
 * @throws {SynapseError} request-level refusals; item-level ones land in `item_errors`.
 */
export async function embedItems(
  ctx: OpContext,
  p: CommonParams & { dimensions?: number | undefined; target_fingerprint?: string | undefined },
  items: EmbedItem[],
  options: CallOptions = {},
  requestKey?: string,
): Promise<EmbedResult | JobAccepted> {
  const limits = ctx.config.inline;
  // A door's warm-up (Ollama `{model}` without input) resolves the model as a call would and
  // answers no vectors.
  if (items.length > 0 || options.embed?.allowEmpty !== true) checkItems(items);
  const routing = routingOf(p);
  const requested = requestedModel(p);
  const model = resolveModel(ctx, requested, "embed", routing);
  const maxTokens = tokenCapOf(model, options.embed?.maxTokens);
  // The space served: the model's own, or a Matryoshka width of it (its own fingerprint) asked
  // by `dimensions`, or named by its fingerprint.
  const space = servedVariant(
    model,
    p.dimensions ?? options.embed?.requiredDims ?? widthNamedBy(model, p),
  );
  requireSpace(ctx, model, space.fingerprint, routing);
  const { choice: prompt, disclosure } = selectPrompt(
    model.prompts,
    options.embed?.prompt ?? {},
    model.modelId,
  );
  if (items.length === 0) {
    // A warm-up (allowEmpty): the model serves, and there is nothing to embed.
    const res = buildResult(ctx, model, space, newServed(), [], 0, 0, requested);
    return disclosure === undefined ? res : { ...res, prompt: disclosure };
  }
  const chunksUpTo = requestKey === undefined ? options.embed?.inlineChunksUpTo : undefined;
  if (chunksUpTo !== undefined) {
    const res = await embedInChunks(ctx, model, space, p, items, chunksUpTo, options, prompt);
    return disclosure === undefined ? res : { ...res, prompt: disclosure };
  }
  const truncate = p.truncate ?? false;
  let bytes = 0;
  for (const it of items) bytes += utf8Length(it.text);
  // Over the item limit: a job, tokenized by the job in chunks (never here, where a large
  // batch would hold the event loop).
  if (items.length > limits.max_items || bytes > limits.byte_budget) {
    const limit = items.length > limits.max_items
      ? { limit: "inline.max_items", items: items.length, max: limits.max_items }
      : { limit: "inline.byte_budget", bytes, max: limits.byte_budget };
    refuseCapInJob(maxTokens, requestKey);
    return submitJob(ctx, requestKey, limit, {
      model,
      space,
      items,
      truncate,
      bytes,
      ...promptOfJob(options.embed?.prompt, prompt, disclosure),
      ...(routing.allow_equivalent === true ? { allowEquivalent: true } : {}),
    });
  }
  const checked = checkItemTexts(items);
  const lane = model.interactive;
  markStage("resolve");
  using permit = lane.admit({
    bytes,
    deadlineMs: p.deadline_ms ?? limits.deadline_ms,
    maxQueueMs: p.max_queue_ms ?? limits.max_queue_ms,
  });
  markStage("admit");
  const { prepared, errors, tokens } = await underDeadline(
    permit,
    options.signal,
    (signal) =>
      prepareItems(ctx.tokenizers, model, items, { truncate, checked, signal, prompt, maxTokens }),
  );
  markStage("tokenize");
  if (tokens > limits.max_tokens) {
    permit.release();
    const limit = { limit: "inline.max_tokens", tokens, max: limits.max_tokens };
    refuseCapInJob(maxTokens, requestKey);
    return submitJob(ctx, requestKey, limit, {
      model,
      space,
      items,
      truncate,
      bytes,
      prepared,
      itemErrors: errors.filter((e): e is ItemError => e !== undefined),
      ...promptOfJob(options.embed?.prompt, prompt, disclosure),
      ...(routing.allow_equivalent === true ? { allowEquivalent: true } : {}),
    });
  }
  const out = await lane.run(
    { kind: "embed", rows: prepared.map((x) => x.seq) },
    { permit, signal: options.signal, label: "embed" },
  );
  const res = assemble(ctx, model, space, prepared, errors, out, requested);
  markStage("envelope");
  return disclosure === undefined ? res : { ...res, prompt: disclosure };
}

/**
 * The per-call token cap of {@link EmbedCallOptions.maxTokens}: `cap` when it is below the
 * model's `max_tokens`, else none (the model's own limit holds).
 */
function tokenCapOf(model: ReadyModel, cap: number | undefined): number | undefined {
  if (cap === undefined || cap >= model.maxTokens) return undefined;
  if (!Number.isInteger(cap) || cap < 1) {
    throw new RangeError(
      `Cannot cap tokens as 'maxTokens' must be a positive integer: received ${cap}`,
    );
  }
  return cap;
}

/** The prompt fields of a job request: the selector (bound by the request digest), choice, disclosure. */
function promptOfJob(
  selector: PromptSelector | undefined,
  prompt: PromptChoice | undefined,
  disclosure: PromptDisclosure | undefined,
): Pick<EmbedJobRequest, "promptSelector" | "prompt" | "promptDisclosure"> {
  return {
    ...(selector === undefined ? {} : { promptSelector: selector }),
    ...(prompt === undefined ? {} : { prompt }),
    ...(disclosure === undefined ? {} : { promptDisclosure: disclosure }),
  };
}

/**
 * The Matryoshka width a request names by fingerprint when it gives no `dimensions`: its
 * `required_fingerprint`, else its `target_fingerprint`, when that is one of the model's derived
 * spaces (lib/models/matryoshka.ts `matryoshkaWidthOf`); otherwise none (the full width).
 */
function widthNamedBy(
  model: ReadyModel,
  p: CommonParams & { target_fingerprint?: string | undefined },
): number | undefined {
  for (const fp of [p.required_fingerprint, p.target_fingerprint]) {
    if (fp === undefined || fp === model.fingerprint) continue;
    const n = matryoshkaWidthOf(model, fp);
    if (n !== undefined) return n;
  }
  return undefined;
}

function checkItems(items: EmbedItem[]): void {
  if (items.length === 0) {
    throw new SynapseError(
      "invalid_request",
      "Cannot embed an empty batch: give at least one item",
      { channel: true, details: { field: "items", reason: "empty_batch" } },
    );
  }
  const seen = new Set<string>();
  for (const it of items) {
    if (seen.has(it.id)) {
      throw new SynapseError(
        "invalid_request",
        `Cannot embed batch: item id '${it.id}' appears more than once`,
        { channel: true, details: { field: "items", item_id: it.id, reason: "duplicate_id" } },
      );
    }
    seen.add(it.id);
  }
}

/**
 * A per-call token cap ({@link EmbedCallOptions.maxTokens}) is not kept by a durable job: a call
 * with one that would become a job is refused rather than served without it.
 *
 * @throws {SynapseError} `invalid_request` `{field: "request_key", reason: "token_cap_in_job"}`.
 */
function refuseCapInJob(maxTokens: number | undefined, requestKey: string | undefined): void {
  if (maxTokens === undefined || requestKey === undefined || requestKey === "") return;
  throw new SynapseError(
    "invalid_request",
    `Cannot run this batch as a durable job: its per-call token cap of ${maxTokens} is not kept by a job; send fewer items inline, or leave the cap out`,
    { details: { field: "request_key", reason: "token_cap_in_job", max_tokens: maxTokens } },
  );
}

function submitJob(
  ctx: OpContext,
  requestKey: string | undefined,
  limit: Record<string, unknown>,
  req: Omit<EmbedJobRequest, "requestKey">,
): JobAccepted {
  if (requestKey === undefined || requestKey === "") {
    const what = limit.limit === "inline.max_items"
      ? `${limit.items} items exceed inline.max_items ${limit.max}`
      : limit.limit === "inline.max_tokens"
      ? `${limit.tokens} tokens exceed inline.max_tokens ${limit.max}`
      : `${limit.bytes} bytes exceed inline.byte_budget ${limit.max}`;
    throw new SynapseError(
      "invalid_request",
      `Cannot embed batch inline: ${what}; give a non-empty request_key to run it as a durable job`,
      { details: { ...limit, field: "request_key" } },
    );
  }
  return submitEmbedJob(ctx, { ...req, requestKey });
}

function assemble(
  ctx: OpContext,
  model: ReadyModel,
  space: ServedSpace,
  prepared: PreparedItem[],
  errors: (ItemError | undefined)[],
  out: LaneBatchResult,
  requested: string | undefined,
): EmbedResult {
  const served = newServed();
  collectRows(model, space, prepared, out, served, (e) => errors[e.index] = e);
  return buildResult(
    ctx,
    model,
    space,
    served,
    errors.filter((e): e is ItemError => e !== undefined),
    out.queueTimeMs,
    out.inferenceMs,
    requested,
  );
}

/** Served items, in request order. */
interface Served {
  vectors: EmbedVector[];
  counts: number[];
  disclosures: TruncationDisclosure[];
  /** Remote lanes: the provider request ids, in order. */
  providerRequestIds: string[];
}

function newServed(): Served {
  return { vectors: [], counts: [], disclosures: [], providerRequestIds: [] };
}

/** Adds a lane run's rows to `served`; a row the lane could not serve goes to `onError`. */
function collectRows(
  model: ReadyModel,
  space: ServedSpace,
  prepared: readonly PreparedItem[],
  out: LaneBatchResult,
  served: Served,
  onError: (e: ItemError) => void,
): void {
  if (out.providerRequestIds !== undefined) {
    served.providerRequestIds.push(...out.providerRequestIds);
  }
  prepared.forEach((x, k) => {
    const row = out.rows[k]!;
    if (row.kind !== "ok") {
      onError(rowError(model, x, row));
      return;
    }
    const line = vectorLine(model, x, servedValues(model, space, row.values));
    served.vectors.push(line.vector);
    served.counts.push(line.count);
    served.disclosures.push(line.disclosure);
  });
}

function buildResult(
  ctx: OpContext,
  model: ReadyModel,
  space: ServedSpace,
  served: Served,
  errors: ItemError[],
  queueTimeMs: number,
  inferenceMs: number,
  requested: string | undefined,
): EmbedResult {
  const result: EmbedResult = {
    ...buildEnvelope({
      fingerprint: space.fingerprint,
      tableEpoch: ctx.tableEpoch(),
      equivalentTo: ctx.equivalentTo(space.fingerprint),
      dims: space.dims,
      engine: model.identity,
      moduleGeneration: ctx.moduleGeneration,
      modelId: model.modelId,
      requestedModel: requested,
      testModel: model.testModel,
      certified: servedCertified(ctx, model),
      remote: model.remote,
    }),
    vectors: served.vectors,
    real_token_counts: served.counts,
    truncation_disclosures: served.disclosures,
    queue_time_ms: queueTimeMs,
    inference_time_ms: Math.round(inferenceMs * 1000) / 1000,
  };
  const errs = [...errors].sort((a, b) => a.index - b.index);
  if (errs.length > 0) result.item_errors = errs;
  if (served.providerRequestIds.length > 0) {
    result.provider_request_id = served.providerRequestIds[0]!;
  }
  return result;
}

/**
 * A batch served as inline chunks ({@link EmbedCallOptions.inlineChunksUpTo}): cut into chunks
 * within `inline.max_items` and `inline.byte_budget`; each chunk is admitted on the interactive
 * lane like an inline request, tokenized, and run in groups within `inline.max_tokens`. Chunks
 * run one after another, so other requests take their turn between them; no job is made.
 *
 * @throws {SynapseError} semantic `invalid_request` `{field: "items", reason: "too_many_items"}`
 *   over `upTo` items; the first chunk refusal (`queue_full`, `deadline_exceeded` …) for the whole
 *   batch.
 */
async function embedInChunks(
  ctx: OpContext,
  model: ReadyModel,
  space: ServedSpace,
  p: CommonParams,
  items: EmbedItem[],
  upTo: number,
  options: CallOptions,
  prompt: PromptChoice | undefined,
): Promise<EmbedResult> {
  if (items.length > upTo) {
    throw new SynapseError(
      "invalid_request",
      `Cannot embed ${items.length} items in one call: at most ${upTo} are served inline in chunks; split them over several calls, or run them as one durable job (embed.batch with a request_key)`,
      { details: { field: "items", reason: "too_many_items", items: items.length, max: upTo } },
    );
  }
  const limits = ctx.config.inline;
  const embed: EmbedCallOptions = options.embed ?? {};
  const signal = options.signal;
  const truncate = p.truncate ?? false;
  const checked = checkItemTexts(items);
  const errors: ItemError[] = checked.filter((e): e is ItemError => e !== undefined);
  const served = newServed();
  let queueMs = 0;
  let inferenceMs = 0;
  const requested = requestedModel(p);
  const maxTokens = tokenCapOf(model, embed.maxTokens);
  const done = () =>
    buildResult(ctx, model, space, served, errors, queueMs, inferenceMs, requested);
  if (embed.allOrNothing && errors.length > 0) return done();
  for (const [a, b, bytes] of inlineChunks(items, limits.max_items, limits.byte_budget)) {
    signal?.throwIfAborted();
    using permit = model.interactive.admit({
      bytes,
      deadlineMs: p.deadline_ms ?? limits.deadline_ms,
      maxQueueMs: p.max_queue_ms ?? limits.max_queue_ms,
    });
    const chunk = await underDeadline(
      permit,
      signal,
      (tokenizing) =>
        prepareItems(ctx.tokenizers, model, items.slice(a, b), {
          truncate,
          offset: a,
          checked: checked.slice(a, b),
          signal: tokenizing,
          prompt,
          maxTokens,
        }),
    );
    for (let i = 0; i < b - a; i++) {
      const e = chunk.errors[i];
      if (e !== undefined && checked[a + i] === undefined) errors.push(e);
    }
    if (embed.allOrNothing && errors.length > 0) return done();
    const groups = tokenGroups(chunk.prepared, limits.max_tokens);
    ctx.log("debug", "synapse.ops", "embed chunk", {
      model: model.modelId,
      from: a,
      items: b - a,
      bytes,
      tokens: chunk.tokens,
      groups: groups.length,
    });
    for (const group of groups) {
      const out = await model.interactive.run(
        { kind: "embed", rows: group.map((x) => x.seq) },
        { permit, signal, label: "embed" },
      );
      queueMs += out.queueTimeMs;
      inferenceMs += out.inferenceMs;
      collectRows(model, space, group, out, served, (e) => errors.push(e));
      if (embed.allOrNothing && errors.length > 0) return done();
    }
  }
  return done();
}

/**
 * Cuts items into consecutive chunks of at most `maxItems` items and `byteBudget` UTF-8 bytes (an
 * item over the budget alone is a chunk of its own; admission decides it).
 *
 * @returns `[from, to, bytes]` per chunk, `to` exclusive.
 */
export function inlineChunks(
  items: readonly EmbedItem[],
  maxItems: number,
  byteBudget: number,
): [number, number, number][] {
  const chunks: [number, number, number][] = [];
  let from = 0;
  let bytes = 0;
  for (let i = 0; i < items.length; i++) {
    const n = utf8Length(items[i]!.text);
    if (i > from && (i - from >= maxItems || bytes + n > byteBudget)) {
      chunks.push([from, i, bytes]);
      from = i;
      bytes = 0;
    }
    bytes += n;
  }
  if (items.length > from) chunks.push([from, items.length, bytes]);
  return chunks;
}

/**
 * Groups prepared items in order so each group's effective tokens stay within `maxTokens` (an
 * item over it alone is a group of its own).
 */
export function tokenGroups(
  prepared: readonly PreparedItem[],
  maxTokens: number,
): PreparedItem[][] {
  const groups: PreparedItem[][] = [];
  let group: PreparedItem[] = [];
  let tokens = 0;
  for (const x of prepared) {
    const n = x.seq.effectiveTokens;
    if (group.length > 0 && tokens + n > maxTokens) {
      groups.push(group);
      group = [];
      tokens = 0;
    }
    group.push(x);
    tokens += n;
  }
  if (group.length > 0) groups.push(group);
  return groups;
}

/**
 * Runs a request's tokenizing, right after its admission, under its deadline as well as the
 * caller's signal: a text the pool
 * is still tokenizing when `deadline_ms` passes ends the request `deadline_exceeded` then (its
 * worker is replaced), not whenever tokenizing ends (field report F21: a 50 MiB text to truncate
 * on a tokenizer without a proven cut answered 47 s past its deadline).
 *
 * @throws the caller's abort reason; a `TimeoutError` (→ `deadline_exceeded`, reason `deadline`).
 */
async function underDeadline<T>(
  permit: LanePermit,
  caller: AbortSignal | undefined,
  tokenize: (signal: AbortSignal) => Promise<T>,
): Promise<T> {
  // Measured on the permit's own clock (the lane's, which tests may set): admitted just now.
  using req = requestSignal({
    callerSignal: caller,
    deadlineMs: permit.deadlineAtMs - permit.admittedAtMs,
    maxQueueMs: 0,
  });
  req.started();
  return await tokenize(req.signal);
}
