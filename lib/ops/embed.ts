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
import { ORT_MICRO_BATCH } from "../models/model_registry.ts";
import type { LoadedModel } from "../models/model_registry.ts";
import type { EncodedSequence } from "../tokenize/tokenizer.ts";
import type { AdmissionPermit, QueueClass } from "../sched/admission.ts";
import { checkText, utf8Length } from "./_text.ts";
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

interface Prepared {
  index: number;
  item: EmbedItem;
  seq: EncodedSequence;
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
  const err = res.item_errors?.[0];
  if (err) throw wireToError(err.error);
  return res;
}

/**
 * Inline `embed.batch {items | texts}` → an envelope with one vector per served item. Jobs (over
 * the inline limits) arrive with the scheduler; until then such a batch is refused with
 * `invalid_request` naming the limit.
 *
 * @throws {SynapseError} channel `invalid_request` for malformed params, an empty batch or a
 *   duplicate id; semantic refusals as {@link embedQuery}, per item in `item_errors`.
 */
export async function embedBatch(
  ctx: OpContext,
  rawParams: unknown,
  options: CallOptions = {},
): Promise<EmbedResult> {
  const p = parseParams("embed.batch", EmbedBatchParams, rawParams);
  if (p.items !== undefined && p.texts !== undefined) {
    throw new SynapseError(
      "invalid_request",
      "Cannot parse params of embed.batch: give 'items' or 'texts', not both",
      {
        channel: true,
        details: { field: "texts" },
      },
    );
  }
  const raw = p.items ?? p.texts;
  if (raw === undefined) {
    throw new SynapseError(
      "invalid_request",
      "Cannot parse params of embed.batch: field 'items' is required",
      {
        channel: true,
        details: { field: "items" },
      },
    );
  }
  const items: EmbedItem[] = raw.map((it, i) =>
    typeof it === "string" ? { id: String(i), text: it } : { id: String(it.id), text: it.text }
  );
  return await embedItems(ctx, p, items, "interactive", options);
}

/**
 * The shared embed path of every front door (embed.query, embed.batch, `/v1/embeddings`): one
 * admission policy whatever the request's shape (field report F5).
 *
 * @param ctx Module context.
 * @param p Validated common params.
 * @param items Items, ids unique.
 * @param queueClass Admission class.
 * @throws {SynapseError} request-level refusals; item-level ones land in `item_errors`.
 */
export async function embedItems(
  ctx: OpContext,
  p: CommonParams,
  items: EmbedItem[],
  queueClass: QueueClass,
  options: CallOptions = {},
): Promise<EmbedResult> {
  const limits = ctx.config.inline;
  if (items.length === 0) {
    throw new SynapseError(
      "invalid_request",
      "Cannot embed an empty batch: give at least one item",
      {
        channel: true,
        details: { field: "items", reason: "empty_batch" },
      },
    );
  }
  const seen = new Set<string>();
  for (const it of items) {
    if (seen.has(it.id)) {
      throw new SynapseError(
        "invalid_request",
        `Cannot embed batch: item id '${it.id}' appears more than once`,
        {
          channel: true,
          details: { field: "items", item_id: it.id, reason: "duplicate_id" },
        },
      );
    }
    seen.add(it.id);
  }
  if (items.length > limits.max_items) {
    throw new SynapseError(
      "invalid_request",
      `Cannot embed batch inline: ${items.length} items exceed inline.max_items ${limits.max_items}; durable jobs are not available in this build`,
      {
        details: { limit: "inline.max_items", items: items.length, max: limits.max_items },
      },
    );
  }
  const model = ctx.registry.resolve(requestedModel(p), "embed");
  checkFingerprint(model, p);
  let bytes = 0;
  for (const it of items) bytes += utf8Length(it.text);
  if (bytes > limits.byte_budget) {
    throw new SynapseError(
      "invalid_request",
      `Cannot embed batch inline: ${bytes} bytes exceed inline.byte_budget ${limits.byte_budget}`,
      {
        details: { limit: "inline.byte_budget", bytes, max: limits.byte_budget },
      },
    );
  }
  using permit = ctx.admission.admit({
    bytes,
    deadlineMs: p.deadline_ms ?? limits.deadline_ms,
    maxQueueMs: p.max_queue_ms ?? limits.max_queue_ms,
    queueClass,
  });
  return await runEmbed(ctx, model, items, p.truncate ?? false, permit, options);
}

async function runEmbed(
  ctx: OpContext,
  model: LoadedModel,
  items: EmbedItem[],
  truncate: boolean,
  permit: AdmissionPermit,
  options: CallOptions,
): Promise<EmbedResult> {
  const tokenizer = model.tokenizer!;
  const errors: (ItemError | undefined)[] = new Array(items.length);
  const prepared: Prepared[] = [];
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
      tokens += seq.effectiveTokens;
      prepared.push({ index: i, item, seq });
    } catch (err) {
      errors[i] = { id: item.id, index: i, error: toSynapseError(err, "invalid_request").toWire() };
    }
  }
  const maxTokens = ctx.config.inline.max_tokens;
  if (tokens > maxTokens) {
    throw new SynapseError(
      "invalid_request",
      `Cannot embed batch inline: ${tokens} tokens exceed inline.max_tokens ${maxTokens}; durable jobs are not available in this build`,
      {
        details: { limit: "inline.max_tokens", tokens, max: maxTokens },
      },
    );
  }
  const startedMs = ctx.now();
  const outputs = new Array<Float32Array | undefined>(items.length);
  let inferenceMs = 0;
  const plan = planMicroBatches(prepared.map((x) => x.seq.ids.length), {
    maxBatchTokens: ORT_MICRO_BATCH.maxMicroBatchTokens,
    maxSequences: ORT_MICRO_BATCH.maxSequences,
  });
  options.signal?.throwIfAborted();
  if (ctx.now() > permit.deadlineAtMs) {
    throw new SynapseError(
      "deadline_exceeded",
      "Cannot embed: the deadline passed before the engine started",
    );
  }
  // All micro-batches go to the lane at once: its worker runs them back to back.
  await Promise.all(plan.map(async (rowsIdx) => {
    const rows = rowsIdx.map((k) => prepared[k]!);
    const res = await ctx.registry.lane.run(model.modelId, rows.map((r) => r.seq));
    inferenceMs += res.runMs;
    for (let r = 0; r < rows.length; r++) {
      const x = rows[r]!;
      if (res.nonFinite[r] === 1) {
        errors[x.index] = {
          id: x.item.id,
          index: x.index,
          error: new SynapseError(
            "engine_output_invalid",
            `Cannot embed item '${x.item.id}': the model produced NaN or Infinity`,
            {
              details: { item_id: x.item.id, model_id: model.modelId },
            },
          ).toWire(),
        };
      } else {
        outputs[x.index] = res.data.subarray(r * res.dims, (r + 1) * res.dims);
      }
    }
  }));
  const vectors: EmbedVector[] = [];
  const counts: number[] = [];
  const disclosures: TruncationDisclosure[] = [];
  for (const x of prepared) {
    const out = outputs[x.index];
    if (!out) continue;
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
  }
  const result: EmbedResult = {
    ...buildEnvelope({
      fingerprint: model.fingerprint!,
      tableEpoch: ctx.tableEpoch(),
      dims: model.dims,
      engine: ORT_ENGINE,
      moduleGeneration: ctx.moduleGeneration,
      modelId: model.modelId,
      testModel: model.testModel,
    }),
    vectors,
    real_token_counts: counts,
    truncation_disclosures: disclosures,
    queue_time_ms: startedMs - permit.admittedAtMs,
    inference_time_ms: Math.round(inferenceMs * 1000) / 1000,
  };
  const errs = errors.filter((e): e is ItemError => e !== undefined);
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
