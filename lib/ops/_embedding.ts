/**
 * The embedding core every embedding-shaped operation shares (embed.query, embed.batch, jobs,
 * rerank, microllm): item checks and tokenization with per-item truncation facts, the
 * per-item results of a lane run, the vector line with its hashes (docs/internals.md §3). The
 * fingerprint constraints are checked where the model is resolved (lib/ops/_resolve_model.ts). Operations import this module; it imports no operation.
 *
 * @module
 */
import { SynapseError, toSynapseError } from "../contract/errors.ts";
import type { WireError } from "../contract/errors.ts";
import { sha256Hex } from "../identity/sha256.ts";
import type { RowOutput } from "../lanes/lane.ts";
import type { ReadyModel } from "../models/model.ts";
import {
  type AppliedPrompt,
  applyPrompt,
  type PrefixOutcome,
  type PromptChoice,
} from "../models/prompts.ts";
import type { EncodedSequence, EncodeOutcome } from "../tokenize/tokenizer.ts";
import type { TokenizerPool } from "../tokenize/tokenizer_pool.ts";
import { checkContentTokens, checkText } from "./_text.ts";

/** One embedded item (docs/internals.md §3). */
export interface EmbedVector {
  id: string;
  vector: number[];
  /**
   * SHA-256 hex of the caller's own text up to the end of the last kept token (F26: its first
   * `kept_chars` characters): equals `submitted_sha256` unless the item was truncated.
   */
  content_sha256: string;
  /** SHA-256 hex of the submitted UTF-8 text. */
  submitted_sha256: string;
}

/** Per-item truncation disclosure (docs/internals.md §3). */
export interface TruncationDisclosure {
  submitted_tokens: number;
  effective_tokens: number;
  truncated: boolean;
  /**
   * Present and true when `submitted_tokens` is a proven lower bound, not an exact count: a
   * text far over the limit, truncated from a proven prefix without tokenizing it whole.
   */
  submitted_tokens_is_lower_bound?: true;
  /**
   * How many characters (Unicode code points, the unit of `tokenize` offsets) of the caller's
   * text the kept tokens cover — `content_sha256` is the SHA-256 of exactly that prefix (F26):
   * the text's whole length for an uncut vector item. Rerank documents carry it when cut.
   */
  kept_chars?: number;
  /**
   * The prompt applied to the item (docs/operations.md "Prompts (query / document)", F35), when one
   * was: its name. Token counts and truncation include its prefix; `content_sha256`,
   * `submitted_sha256` and `kept_chars` are of the caller's own text.
   */
  prompt_name?: string;
  /**
   * With `prompt_name`: `applied` (the prefix was put before the text), `already_present` (the
   * text already started with it, so it was not put twice), `empty` (the prompt's prefix is "").
   */
  prompt_prefix?: PrefixOutcome;
}

/** An item the operation could not serve; the rest of the batch was. */
export interface ItemError {
  id: string;
  /** Position in the request. */
  index: number;
  error: WireError;
}

/** One text to embed. */
export interface EmbedItem {
  id: string;
  text: string;
}

/** A tokenized item ready to run. */
export interface PreparedItem {
  /** Position in the request. */
  index: number;
  item: EmbedItem;
  seq: EncodedSequence;
  /** Hex SHA-256 of the item's UTF-8 text, when computed where it was tokenized. */
  submittedSha256?: string;
  /** The prompt applied before tokenizing (`seq` is of the prefixed text; offsets are the caller's). */
  prompt?: { name: string; prefix: PrefixOutcome };
}

/** Result of {@link prepareItems}. */
export interface PreparedItems {
  prepared: PreparedItem[];
  /** Errors by position in `items` (sparse). */
  errors: (ItemError | undefined)[];
  /** Effective tokens of the prepared items. */
  tokens: number;
}

/**
 * The cheap checks of item texts, before admission: an empty or whitespace-only text (F1) or a
 * lone surrogate (F14) is an item error.
 *
 * @param offset Position of `items[0]` in the request.
 * @returns Errors by position in `items` (sparse).
 */
export function checkItemTexts(
  items: readonly EmbedItem[],
  offset = 0,
): (ItemError | undefined)[] {
  const errors: (ItemError | undefined)[] = new Array(items.length);
  for (let i = 0; i < items.length; i++) {
    const item = items[i]!;
    try {
      checkText(item.text, `item '${item.id}'`, { item_id: item.id });
    } catch (err) {
      errors[i] = {
        id: item.id,
        index: offset + i,
        error: toSynapseError(err, "invalid_request").toWire(),
      };
    }
  }
  return errors;
}

/** Options of {@link prepareItems}. */
export interface PrepareOptions {
  /** Cut over-long items to the model's limit instead of refusing them. */
  truncate: boolean;
  /** Position of `items[0]` in the request. @default 0 */
  offset?: number | undefined;
  /** Errors of {@link checkItemTexts} already run on `items`; those items are skipped. */
  checked?: (ItemError | undefined)[] | undefined;
  /** Stops the tokenizing (the request was cancelled or timed out). */
  signal?: AbortSignal | undefined;
  /**
   * The prompt to put before each text (lib/models/prompts.ts `selectPrompt`): tokenized with
   * the text, so counts and truncation include it; truncation cuts the text, never the prefix.
   */
  prompt?: PromptChoice | undefined;
  /**
   * Most tokens per item for this call, below the model's `max_tokens` (a door's per-call
   * context, e.g. Ollama `options.num_ctx`): items are cut to it with `truncate`, else refused
   * `sequence_too_long` naming it. @default the model's `max_tokens`
   */
  maxTokens?: number | undefined;
}

/**
 * Checks and tokenizes items off the event loop (field report F21): a text whose length alone
 * proves it over the limit is refused without tokenizing it, a truncated text is tokenized from
 * a proven prefix only, and anything sizeable is tokenized on the pool's Worker threads, which
 * also hash each text. An item that cannot be embedded (empty, invalid Unicode, too long without
 * truncation, no readable tokens) becomes an item error instead (F1, F2, F14).
 *
 * @throws the signal's reason when it aborts; `disposed` when the pool is gone.
 */
export async function prepareItems(
  pool: TokenizerPool,
  model: ReadyModel,
  items: readonly EmbedItem[],
  options: PrepareOptions,
): Promise<PreparedItems> {
  const offset = options.offset ?? 0;
  const errors = options.checked ?? checkItemTexts(items, offset);
  const todo: number[] = [];
  for (let i = 0; i < items.length; i++) if (errors[i] === undefined) todo.push(i);
  const prompt = options.prompt;
  const applied = todo.map((i) =>
    prompt === undefined ? undefined : applyPrompt(items[i]!.text, prompt.prefix)
  );
  const texts = todo.map((i, k) => applied[k]?.text ?? items[i]!.text);
  const outcomes = await pool.encodeItems(model.tokenizer, texts, {
    maxTokens: Math.min(options.maxTokens ?? model.maxTokens, model.maxTokens),
    truncate: options.truncate,
    itemIds: todo.map((i) => items[i]!.id),
    submittedSha256: true,
    signal: options.signal,
  });
  const prepared: PreparedItem[] = [];
  let tokens = 0;
  todo.forEach((i, k) => {
    const item = items[i]!;
    const a = applied[k];
    const x = a === undefined
      ? preparedOf(item, offset + i, outcomes[k]!)
      : promptedOf(item, offset + i, outcomes[k]!, prompt!.name, a);
    if ("error" in x) errors[i] = x.error;
    else {
      tokens += x.seq.effectiveTokens;
      prepared.push(x);
    }
  });
  return { prepared, errors, tokens };
}

/** A text of only whitespace, control, format (zero-width) or replacement characters. */
const UNREADABLE = /^[\s\p{Cc}\p{Cf}\u{FFFD}]*$/u;

/**
 * {@link preparedOf} of a text tokenized with a prompt prefix in front: the truncation facts are
 * moved back onto the caller's own text (`keptTextEnd`, `keptChars` minus the prefix), the
 * tokenizer's hash of the prefixed text is dropped (the caller's is hashed instead), and an item
 * whose kept tokens do not reach past the prefix is refused (truncation never cuts the prefix).
 */
function promptedOf(
  item: EmbedItem,
  index: number,
  outcome: EncodeOutcome,
  name: string,
  applied: AppliedPrompt,
): PreparedItem | { error: ItemError } {
  const { prefix, prefixChars, prefixCodePoints } = applied;
  const x = preparedOf(item, index, outcome);
  if ("error" in x) return x;
  // The prefix's tokens must not pass off a text the model cannot read (only whitespace, control,
  // zero-width or replacement characters) as served: refused as it is without a prompt.
  if (prefixChars > 0 && UNREADABLE.test(item.text)) {
    try {
      checkContentTokens(0, `item '${item.id}'`, { item_id: item.id });
    } catch (err) {
      return {
        error: { id: item.id, index, error: toSynapseError(err, "invalid_request").toWire() },
      };
    }
  }
  const out: PreparedItem = {
    index: x.index,
    item: x.item,
    seq: x.seq,
    prompt: { name, prefix },
    // The tokenizer hashed the prefixed text; `vectorLine` hashes the caller's instead.
    ...(prefixChars === 0 && x.submittedSha256 !== undefined
      ? { submittedSha256: x.submittedSha256 }
      : {}),
  };
  const seq = x.seq;
  if (prefixChars > 0 && seq.truncated && seq.keptTextEnd !== undefined) {
    if (seq.keptTextEnd <= prefixChars) {
      const error = new SynapseError(
        "sequence_too_long",
        `Cannot embed item '${item.id}': the prompt '${name}' alone fills the model's token limit, so none of the text would be kept; shorten the prompt or raise max_tokens`,
        { details: { item_id: item.id, prompt_name: name, reason: "prompt_fills_max_tokens" } },
      );
      return { error: { id: item.id, index, error: error.toWire() } };
    }
    out.seq = {
      ...seq,
      keptTextEnd: seq.keptTextEnd - prefixChars,
      ...(seq.keptChars === undefined ? {} : { keptChars: seq.keptChars - prefixCodePoints }),
    };
  }
  return out;
}

/** One item's tokenizer outcome as a prepared item or its item error. */
function preparedOf(
  item: EmbedItem,
  index: number,
  outcome: EncodeOutcome,
): PreparedItem | { error: ItemError } {
  try {
    if (!outcome.ok) throw outcome.error;
    checkContentTokens(outcome.seq.keptContentIds.length, `item '${item.id}'`, {
      item_id: item.id,
    });
    return {
      index,
      item,
      seq: outcome.seq,
      ...(outcome.submittedSha256 === undefined
        ? {}
        : { submittedSha256: outcome.submittedSha256 }),
    };
  } catch (err) {
    return {
      error: { id: item.id, index, error: toSynapseError(err, "invalid_request").toWire() },
    };
  }
}

/**
 * The item error of a row the lane could not serve: a non-finite output (F6) is
 * `engine_output_invalid`; an engine refusal keeps its code and names the item.
 */
export function rowError(model: ReadyModel, x: PreparedItem, out: RowOutput): ItemError {
  const error = out.kind === "error"
    ? new SynapseError(out.error.code, `Cannot embed item '${x.item.id}': ${out.error.message}`, {
      details: { ...out.error.details, item_id: x.item.id, model_id: model.modelId },
      ...(out.error.retryAfterMs === undefined ? {} : { retryAfterMs: out.error.retryAfterMs }),
    })
    : new SynapseError(
      "engine_output_invalid",
      `Cannot embed item '${x.item.id}': the model produced NaN or Infinity`,
      { details: { item_id: x.item.id, model_id: model.modelId } },
    );
  return { id: x.item.id, index: x.index, error: error.toWire() };
}

/**
 * The vector line of one served item, with its hashes.
 *
 * @param submittedSha256 The text's hash when already known (jobs hash each text once; the
 *   tokenizer pool hashes the texts it tokenizes).
 */
export function vectorLine(
  model: ReadyModel,
  x: PreparedItem,
  values: Float32Array,
  submittedSha256: string = x.submittedSha256 ?? sha256Hex(x.item.text),
): { vector: EmbedVector; count: number; disclosure: TruncationDisclosure } {
  // F26: the caller's own text up to the end of the last kept token, for every tokenizer family
  // (never the decoded tokens: an uncased model's decoding is lower-cased, accents stripped).
  const content = !x.seq.truncated
    ? submittedSha256
    : x.seq.keptTextEnd !== undefined
    ? sha256Hex(x.item.text.slice(0, x.seq.keptTextEnd))
    : sha256Hex(model.tokenizer.decode(x.seq.keptContentIds));
  return {
    vector: {
      id: x.item.id,
      vector: numbersOf(values),
      content_sha256: content,
      submitted_sha256: submittedSha256,
    },
    count: x.seq.effectiveTokens,
    // F26: an uncut item's kept_chars is its whole length (content_sha256 = submitted_sha256);
    // with a prompt, counts are of the prefixed text and the hashes of the caller's own.
    disclosure: {
      ...disclosureOf(x.seq),
      ...(x.seq.truncated ? {} : { kept_chars: codePoints(x.item.text) }),
      ...(x.prompt === undefined
        ? {}
        : { prompt_name: x.prompt.name, prompt_prefix: x.prompt.prefix }),
    },
  };
}

/**
 * The values as a plain array of numbers (the wire's `vector`), the same numbers as
 * `Array.from(values)`. Sized up front and filled by index, so V8 keeps it as unboxed doubles
 * (8 bytes a value: 3.1 KiB for 384 values, 0.3 µs); `Array.from` boxed every value in a heap
 * number of its own (29 KiB of garbage, 10 µs), which made embed.query's main-thread scavenges
 * (1.5–3.7 ms each: its p99 tail) come every ~100 calls (bench/README.md "Per-stage query
 * breakdown").
 */
function numbersOf(values: Float32Array): number[] {
  const out = new Array<number>(values.length);
  for (let i = 0; i < values.length; i++) out[i] = values[i]!;
  return out;
}

/** Unicode code points of a text (the unit of `kept_chars` and of tokenize offsets). */
function codePoints(text: string): number {
  let n = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0xdc00 || c > 0xdfff) n++;
  }
  return n;
}

/** The truncation disclosure of a sequence. */
export function disclosureOf(seq: EncodedSequence): TruncationDisclosure {
  return {
    submitted_tokens: seq.submittedTokens,
    effective_tokens: seq.effectiveTokens,
    truncated: seq.truncated,
    ...(seq.submittedTokensIsLowerBound ? { submitted_tokens_is_lower_bound: true as const } : {}),
    ...(seq.truncated && seq.keptChars !== undefined ? { kept_chars: seq.keptChars } : {}),
  };
}

/** Rebuilds a SynapseError from its wire form (single-item operations rethrow item errors). */
export function wireToError(w: WireError): SynapseError {
  return new SynapseError(w.code, w.message, {
    ...(w.details === undefined ? {} : { details: w.details }),
    ...(w.retry_after_ms === undefined ? {} : { retryAfterMs: w.retry_after_ms }),
  });
}
