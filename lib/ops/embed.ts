/**
 * `embed.query` and inline `embed.batch` (contract.md §1, §3): validate, admit, tokenize with
 * per-item truncation facts, run length-sorted micro-batches on the model's lane, and answer
 * the envelope with per-item hashes, token counts and disclosures. An item that cannot be
 * embedded (empty text, too long, non-finite output) is reported in `item_errors` by id; the
 * rest of the batch is served (field reports F1, F2, F6).
 *
 * @module
 */
import { SynapseError, toSynapseError } from "../contract/errors.ts";
import type { WireError } from "../contract/errors.ts";
import { buildEnvelope } from "../contract/envelope.ts";
import type { Envelope } from "../contract/envelope.ts";
import {
  EmbedBatchParams,
  EmbedQueryParams,
  parseParams,
  requestedModel,
} from "../contract/schemas.ts";
import type { CommonParams } from "../contract/schemas.ts";
import { sha256Hex } from "../identity/sha256.ts";
import { planMicroBatches } from "../engines/ort/micro_batch.ts";
import { ORT_ENGINE } from "../engines/ort/ort_lane.ts";
import { runPipelined } from "../sched/pipeline.ts";
import { requestSignal } from "../sched/request_signal.ts";
import { ORT_MICRO_BATCH } from "../models/model_registry.ts";
import type { EmbedRunner, LoadedModel } from "../models/model_registry.ts";
import type { QueueClass } from "../sched/admission.ts";
import { submitEmbedJob } from "./jobs.ts";
import type { EmbedJobRequest, JobAccepted, PreparedItem } from "./jobs.ts";
import { checkContentTokens, checkText, utf8Length } from "./_text.ts";
import type { CallOptions, OpContext } from "./context.ts";

/** One embedded item (contract.md §3). */
export interface EmbedVector {
  id: string;
  vector: number[];
  /** SHA-256 hex of the kept content: equals `submitted_sha256` unless the item was truncated. */
  content_sha256: string;
  /** SHA-256 hex of the submitted UTF-8 text. */
  submitted_sha256: string;
}

/** Per-item truncation disclosure (contract.md §3). */
export interface TruncationDisclosure {
  submitted_tokens: number;
  effective_tokens: number;
  truncated: boolean;
}

/** An item the operation could not serve; the rest of the batch was. */
export interface ItemError {
  id: string;
  /** Position in the request. */
  index: number;
  error: WireError;
}

/** Embed payload, flattened into the envelope. */
export interface EmbedResult extends Envelope {
  /** Served items, in request order; `real_token_counts` and `truncation_disclosures` align. */
  vectors: EmbedVector[];
  real_token_counts: number[];
  truncation_disclosures: TruncationDisclosure[];
  /** Items refused, by id; absent when every item was served. */
  item_errors?: ItemError[];
  /** Milliseconds from admission to the first engine call. */
  queue_time_ms: number;
  /** Milliseconds of engine work. */
  inference_time_ms: number;
}

/** One text to embed. */
export interface EmbedItem {
  id: string;
  text: string;
}

/**
 * `embed.query {text, id?}` → an envelope with one vector.
 *
 * @throws {SynapseError} channel `invalid_request` for malformed params; semantic errors
 *   (`invalid_request` for empty text, `sequence_too_long`, `engine_output_invalid`,
 *   `unknown_model`, `model_loading`, `queue_full`, `deadline_exceeded`) for refusals.
 */
export async function embedQuery(
  ctx: OpContext,
  rawParams: unknown,
  options: CallOptions = {},
): Promise<EmbedResult> {
  const p = parseParams("embed.query", EmbedQueryParams, rawParams);
  const item = { id: p.id === undefined ? "0" : String(p.id), text: p.text };
  const res = await embedItems(ctx, p, [item], "interactive", options);
  if (!("vectors" in res)) throw new Error("A single item became a job. This is a bug");
  const err = res.item_errors?.[0];
  if (err) throw wireToError(err.error);
  return res;
}

/**
 * `embed.batch {items | texts, request_key?}` → an envelope with one vector per served item, or,
 * over the inline limits (`inline.max_items`, `inline.max_tokens`, `inline.byte_budget`) and with
 * a `request_key`, a durable job `{module_generation, job_id, state, request_key,
 * pages_available}` whose pages `embed.result` reads.
 *
 * @throws {SynapseError} channel `invalid_request` for malformed params, an empty batch or a
 *   duplicate id; semantic `invalid_request` naming the limit for an over-limit batch without a
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
    typeof it === "string" ? { id: String(i), text: it } : { id: String(it.id), text: it.text }
  );
  return await embedItems(ctx, p, items, "interactive", options, p.request_key);
}

/**
 * The shared embed path of every front door (embed.query, embed.batch, `/v1/embeddings`): one
 * admission policy whatever the request's shape (field report F5).
 *
 * @param ctx Module context.
 * @param p Validated common params.
 * @param items Items, ids unique.
 * @param queueClass Admission class of an inline run.
 * @param requestKey Turns an over-limit batch into a durable job.
 * @throws {SynapseError} request-level refusals; item-level ones land in `item_errors`.
 */
export async function embedItems(
  ctx: OpContext,
  p: CommonParams,
  items: EmbedItem[],
  queueClass: QueueClass,
  options: CallOptions = {},
  requestKey?: string,
): Promise<EmbedResult | JobAccepted> {
  const limits = ctx.config.inline;
  checkItems(items);
  const model = ctx.registry.resolve(requestedModel(p), "embed");
  checkFingerprint(model, p);
  const truncate = p.truncate ?? false;
  let bytes = 0;
  for (const it of items) bytes += utf8Length(it.text);
  // Over the item limit: a job, tokenized by its runner in chunks (never here, where a large
  // batch would hold the event loop).
  if (items.length > limits.max_items || bytes > limits.byte_budget) {
    const limit = items.length > limits.max_items
      ? { limit: "inline.max_items", items: items.length, max: limits.max_items }
      : { limit: "inline.byte_budget", bytes, max: limits.byte_budget };
    return submitJob(ctx, requestKey, limit, { model, items, truncate, bytes });
  }
  const { prepared, errors, tokens } = prepareItems(model, items, truncate);
  if (tokens > limits.max_tokens) {
    const limit = { limit: "inline.max_tokens", tokens, max: limits.max_tokens };
    return submitJob(ctx, requestKey, limit, {
      model,
      items,
      truncate,
      bytes,
      prepared,
      itemErrors: errors.filter((e): e is ItemError => e !== undefined),
    });
  }
  const maxQueueMs = p.max_queue_ms ?? limits.max_queue_ms;
  const cls = queueClass === "bulk" ? "bulk" : "interactive";
  using permit = ctx.admission.admit({
    bytes,
    deadlineMs: p.deadline_ms ?? limits.deadline_ms,
    maxQueueMs,
    queueClass,
    predictedDelayMs: (model.own?.scheduler ?? ctx.interactive).predictedStartDelayMs(cls),
  });
  using req = requestSignal({
    ...(options.signal === undefined ? {} : { callerSignal: options.signal }),
    deadlineMs: permit.deadlineAtMs - ctx.now(),
    maxQueueMs,
  });
  let startedMs = 0;
  // A GGUF model has a lane (worker and scheduler) of its own; ORT models share the registry's.
  const sched = model.own?.scheduler ?? ctx.interactive;
  const runner: EmbedRunner = model.own?.runner ?? ctx.registry.lane;
  const { outputs, inferenceMs } = await sched.submit({
    cls,
    tokens,
    maxQueueMs,
    signal: req.signal,
    label: "embed",
    run: (grant) => {
      req.started();
      startedMs = ctx.now();
      // While bulk work runs on the other lane, use the session whose threads do not spin.
      return runMicroBatches(
        runner,
        model,
        prepared,
        errors,
        grant.signal,
        () => bulkBusy(ctx),
      );
    },
  });
  return assemble(ctx, model, prepared, errors, outputs, {
    queueTimeMs: startedMs - permit.admittedAtMs,
    inferenceMs,
  });
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

/**
 * Tokenizes items; an item that cannot be embedded (empty, invalid Unicode, too long) becomes an
 * item error instead.
 *
 * @returns Prepared items, errors by input index, and the total of effective tokens.
 */
export function prepareItems(
  model: LoadedModel,
  items: EmbedItem[],
  truncate: boolean,
  offset = 0,
): { prepared: PreparedItem[]; errors: (ItemError | undefined)[]; tokens: number } {
  const tokenizer = model.tokenizer!;
  const errors: (ItemError | undefined)[] = new Array(items.length);
  const prepared: PreparedItem[] = [];
  let tokens = 0;
  for (let i = 0; i < items.length; i++) {
    const item = items[i]!;
    try {
      checkText(item.text, `item '${item.id}'`, { item_id: item.id });
      const seq = tokenizer.encode(item.text, {
        maxTokens: model.maxTokens,
        truncate,
        itemId: item.id,
      });
      checkContentTokens(seq.keptContentIds.length, `item '${item.id}'`, { item_id: item.id });
      tokens += seq.effectiveTokens;
      prepared.push({ index: offset + i, item, seq });
    } catch (err) {
      errors[i] = {
        id: item.id,
        index: offset + i,
        error: toSynapseError(err, "invalid_request").toWire(),
      };
    }
  }
  return { prepared, errors, tokens };
}

/**
 * Runs prepared items as length-sorted micro-batches on a lane, two calls in flight, stopping at
 * the next micro-batch boundary when `signal` aborts.
 *
 * `quiet()` is asked before each call: true runs it on the lane's quiet twin session.
 *
 * @returns Per prepared item its vector (a view into the engine's output) or undefined when the
 *   output was non-finite (then `errors[index]` is set), and the engine time in ms.
 */
export async function runMicroBatches(
  lane: EmbedRunner,
  model: LoadedModel,
  prepared: PreparedItem[],
  errors: (ItemError | undefined)[],
  signal?: AbortSignal,
  quiet: () => boolean = () => false,
): Promise<{ outputs: (Float32Array | undefined)[]; inferenceMs: number }> {
  const outputs = new Array<Float32Array | undefined>(prepared.length);
  let inferenceMs = 0;
  const plan = planMicroBatches(prepared.map((x) => x.seq.ids.length), {
    maxBatchTokens: ORT_MICRO_BATCH.maxMicroBatchTokens,
    maxSequences: ORT_MICRO_BATCH.maxSequences,
  });
  await runPipelined(plan, async (rowsIdx) => {
    const res = await lane.run(model.modelId, rowsIdx.map((k) => prepared[k]!.seq), {
      quiet: quiet(),
    });
    inferenceMs += res.runMs;
    rowsIdx.forEach((k, r) => {
      const x = prepared[k]!;
      if (res.nonFinite[r] === 1) errors[x.index] = nonFiniteError(model, x);
      else outputs[k] = res.data.subarray(r * res.dims, (r + 1) * res.dims);
    });
  }, signal === undefined ? {} : { signal });
  return { outputs, inferenceMs };
}

/**
 * True while other engine work shares the cores: the bulk lane has work (a job running, a bulk
 * task queued or on the engine) or a llama worker is busy (generation, GGUF embeddings). The
 * interactive lane then runs on its quiet twin session so the lanes share cores well.
 */
export function bulkBusy(ctx: OpContext): boolean {
  return ctx.registry.bulkLane.inFlight > 0 || ctx.jobs.running.size > 0 ||
    ctx.jobs.scheduler.waiters > 0 || ctx.jobs.scheduler.inFlight > 0 ||
    ctx.registry.list().some((m) => m.own !== undefined && m.own.llama.inFlight > 0);
}

/** The item error of a non-finite output (field report F6). */
export function nonFiniteError(model: LoadedModel, x: PreparedItem): ItemError {
  return {
    id: x.item.id,
    index: x.index,
    error: new SynapseError(
      "engine_output_invalid",
      `Cannot embed item '${x.item.id}': the model produced NaN or Infinity`,
      { details: { item_id: x.item.id, model_id: model.modelId } },
    ).toWire(),
  };
}

function assemble(
  ctx: OpContext,
  model: LoadedModel,
  prepared: PreparedItem[],
  errors: (ItemError | undefined)[],
  outputs: (Float32Array | undefined)[],
  timing: { queueTimeMs: number; inferenceMs: number },
): EmbedResult {
  const tokenizer = model.tokenizer!;
  const vectors: EmbedVector[] = [];
  const counts: number[] = [];
  const disclosures: TruncationDisclosure[] = [];
  prepared.forEach((x, k) => {
    const out = outputs[k];
    if (!out) return;
    const submitted = sha256Hex(x.item.text);
    const content = x.seq.truncated ? sha256Hex(tokenizer.decode(x.seq.keptContentIds)) : submitted;
    vectors.push({
      id: x.item.id,
      vector: Array.from(out),
      content_sha256: content,
      submitted_sha256: submitted,
    });
    counts.push(x.seq.effectiveTokens);
    disclosures.push({
      submitted_tokens: x.seq.submittedTokens,
      effective_tokens: x.seq.effectiveTokens,
      truncated: x.seq.truncated,
    });
  });
  const result: EmbedResult = {
    ...buildEnvelope({
      fingerprint: model.fingerprint!,
      tableEpoch: ctx.tableEpoch(),
      dims: model.dims,
      engine: model.engineIdentity ?? ORT_ENGINE,
      moduleGeneration: ctx.moduleGeneration,
      modelId: model.modelId,
      testModel: model.testModel,
    }),
    vectors,
    real_token_counts: counts,
    truncation_disclosures: disclosures,
    queue_time_ms: timing.queueTimeMs,
    inference_time_ms: Math.round(timing.inferenceMs * 1000) / 1000,
  };
  const errs = errors.filter((e): e is ItemError => e !== undefined).sort((a, b) =>
    a.index - b.index
  );
  if (errs.length > 0) result.item_errors = errs;
  return result;
}

/**
 * Refuses a request whose `required_fingerprint` differs from the model's: Synapse never
 * serves vectors of another numeric profile in its place.
 *
 * @throws {SynapseError} `substitution_rejected`.
 */
export function checkFingerprint(model: LoadedModel, p: CommonParams): void {
  if (p.required_fingerprint !== undefined && p.required_fingerprint !== model.fingerprint) {
    throw new SynapseError(
      "substitution_rejected",
      `Cannot serve model '${model.modelId}': its fingerprint ${model.fingerprint} is not the required ${p.required_fingerprint}`,
      {
        details: {
          model_id: model.modelId,
          fingerprint: model.fingerprint,
          required_fingerprint: p.required_fingerprint,
        },
      },
    );
  }
}

/** Rebuilds a SynapseError from its wire form (single-item operations rethrow item errors). */
export function wireToError(w: WireError): SynapseError {
  return new SynapseError(w.code, w.message, {
    ...(w.details === undefined ? {} : { details: w.details }),
    ...(w.retry_after_ms === undefined ? {} : { retryAfterMs: w.retry_after_ms }),
  });
}
