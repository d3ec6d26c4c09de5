/**
 * Checks on caller text shared by every operation that takes text.
 *
 * @module
 */
import { SynapseError } from "../contract/errors.ts";

/**
 * Refuses text Synapse cannot embed: empty or whitespace-only (field report F1), or not
 * well-formed UTF-16 — a lone surrogate cannot be encoded as UTF-8 (F14).
 *
 * @param text The caller's text.
 * @param what How the text is named in the message, e.g. "item 'a'" or "query".
 * @param details Extra details, e.g. `{item_id: "a"}`.
 * @throws {SynapseError} semantic `invalid_request`.
 */
export function checkText(text: string, what: string, details: Record<string, unknown>): void {
  if (text.trim() === "") {
    throw new SynapseError(
      "invalid_request",
      `Cannot accept ${what}: text is empty or only whitespace`,
      {
        details: { ...details, reason: "empty_text" },
      },
    );
  }
  if (!text.isWellFormed()) {
    const at = firstLoneSurrogate(text);
    throw new SynapseError(
      "invalid_request",
      `Cannot accept ${what}: text has a lone surrogate at UTF-16 index ${at}, so it is not valid Unicode`,
      {
        details: { ...details, reason: "invalid_unicode", utf16_index: at },
      },
    );
  }
}

function firstLoneSurrogate(text: string): number {
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff) {
      const n = text.charCodeAt(i + 1);
      if (n >= 0xdc00 && n <= 0xdfff) {
        i++;
        continue;
      }
      return i;
    }
    if (c >= 0xdc00 && c <= 0xdfff) return i;
  }
  return -1;
}

/**
 * Refuses text that tokenizes to nothing but the special tokens — zero-width, control or
 * replacement characters the tokenizer's normalizer drops (the rest of field report F1's kind:
 * such a vector encodes only `[CLS] [SEP]`, the same for every such input).
 *
 * @param contentTokens Tokens of the text itself, specials excluded.
 * @throws {SynapseError} semantic `invalid_request`.
 */
export function checkContentTokens(
  contentTokens: number,
  what: string,
  details: Record<string, unknown>,
): void {
  if (contentTokens === 0) {
    throw new SynapseError(
      "invalid_request",
      `Cannot accept ${what}: the text has no tokens the model reads (only whitespace, control, zero-width or replacement characters)`,
      { details: { ...details, reason: "no_tokens" } },
    );
  }
}

const encoder = new TextEncoder();

/** UTF-8 byte length of a well-formed string, without allocating. */
export function utf8Length(text: string): number {
  let n = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x80) n += 1;
    else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c <= 0xdbff) {
      n += 4;
      i++;
    } else n += 3;
  }
  return n;
}

/** UTF-8 bytes of a string. */
export function utf8(text: string): Uint8Array {
  return encoder.encode(text);
}
