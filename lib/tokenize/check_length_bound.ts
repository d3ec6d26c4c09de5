/**
 * The calling thread's cheap length check: refuse, before admission and without tokenizing, a
 * text whose length alone proves it cannot fit (field report F21).
 *
 * @module
 */
import type { SanitizedTokenizer } from "./tokenizer.ts";

/**
 * UTF-16 code units {@link checkLengthBound} scans per text by default: about 2–5 ms of the
 * calling thread in the worst case (a text that is one long word), nothing for ordinary text,
 * which proves itself over the limit within its first `max_tokens` words.
 */
export const MAIN_THREAD_SCAN_CHARS: number = 1 << 20;

/** Options of {@link checkLengthBound}. */
export interface CheckLengthBoundOptions {
  /** Largest sequence the model accepts, special tokens included. */
  maxTokens: number;
  /** Truncation asked for: then only a query that leaves no room is refused. @default false */
  truncate?: boolean | undefined;
  /** Item id named in the refusal. */
  itemId?: string | undefined;
  /** The query of a (query, document) pair: `text` is then the document. */
  pairQuery?: string | undefined;
  /** As `EncodeOptions.fullTokenizeMaxChars`. @default {max(65536, 32 × maxTokens)} */
  fullTokenizeMaxChars?: number | undefined;
  /**
   * Code units scanned per text; a text not decided within it passes (the encoder decides).
   * For a batch, share one budget: `MAIN_THREAD_SCAN_CHARS / items` (as the pool does).
   *
   * @default {MAIN_THREAD_SCAN_CHARS}
   */
  scanLimit?: number | undefined;
}

/**
 * Refuses a text that provably needs more than `maxTokens` tokens, without tokenizing it. It
 * throws exactly when `tokenizer.encode` (or `encodePair` with `pairQuery`) would refuse the
 * text from its bound, with the same error; it never refuses a text that fits. Texts up to
 * `fullTokenizeMaxChars` always pass (the encoder counts them exactly), as do texts the scan
 * limit leaves undecided and texts of tokenizers without a bound.
 *
 * @param tokenizer The model's tokenizer.
 * @param text The text (a pair's document).
 * @param options Limit, truncation, item id, pair query.
 * @throws {SynapseError} `sequence_too_long` `{tokens, max_tokens, item_id?,
 *   tokens_is_lower_bound: true}`, `tokens` a proven lower bound above `max_tokens`.
 * @throws {RangeError} when `maxTokens` is not a positive integer.
 *
 * @example Refuse a 50 MiB text in milliseconds
 * ```ts ignore
 * checkText(text, "item 'a'", { item_id: "a" }); // empty text, lone surrogates (lib/ops/_text.ts)
 * checkLengthBound(model.tokenizer, text, { maxTokens: model.maxTokens, itemId: "a" });
 * ```
 */
export function checkLengthBound(
  tokenizer: SanitizedTokenizer,
  text: string,
  options: CheckLengthBoundOptions,
): void {
  tokenizer.planEncode(text, {
    ...options,
    scanLimit: options.scanLimit ?? MAIN_THREAD_SCAN_CHARS,
  });
}
