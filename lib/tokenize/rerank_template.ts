/**
 * A reranker's prompt template (Qwen3-Reranker's `tokenizer.chat_template.rerank`, or a model
 * entry's `rerank_template`): the text a causal-LM reranker scores a (query, document) pair in,
 * with `{query}` and `{document}` where the pair goes.
 *
 * llama.cpp's server substitutes the pair into the template and tokenizes the whole string with
 * `parse_special = true` (tools/server `format_prompt_rerank`), so a document holding
 * `<|im_end|>` closes the turn, and a query holding `{document}` is replaced by the document.
 * Synapse tokenizes the template's literal pieces (special tokens parsed) and the caller's texts
 * (never parsed as special, field report F25) separately and joins the tokens. Separately
 * tokenized pieces could split differently from the whole string where they meet: a
 * byte-level BPE pre-tokenizer (the GPT-2 / Qwen2 split) binds a space to the word after it
 * (`": what"` is `":"`, `" what"`) and newlines to the punctuation before them (`"?\n"` is one
 * piece). So each slot borrows the template's whitespace beside it — the spaces and tabs before
 * it and the newlines after it — and the slot's text is `before + text + after`; the tokens then
 * equal the whole string's for any text without special-token strings. {@link parseRerankTemplate}
 * decides the borrowing; the tokenizer that applies it checks the equality on probe pairs at load
 * (`SanitizedTokenizer.withRerankTemplate`).
 *
 * @module
 */

/** A template split at its slots, with the whitespace each slot borrows. */
export interface RerankTemplate {
  /** The template as given. */
  source: string;
  /** The literal pieces: before the query, between query and document, after the document. */
  literals: readonly [string, string, string];
  /** What the query's slot wraps its text in: `[before, after]`. */
  query: readonly [string, string];
  /** What the document's slot wraps its text in: `[before, after]`. */
  document: readonly [string, string];
}

/** Probe pairs the load-time check tokenizes both ways (no special-token strings in them). */
export const RERANK_TEMPLATE_PROBES: readonly (readonly [string, string])[] = Object.freeze([
  ["what is a panda?", "The giant panda is a bear native to China."],
  ["", ""],
  ["  two leading spaces", "trailing spaces   "],
  ["ends with a newline\n", "\nstarts with a newline"],
  ["¿Qué es?", "日本語のテキスト。"],
  ["x:y", "1234 5678"],
  ["tab\there", "emoji 👍🏽 ok!\n\n"],
]);

/**
 * Splits a rerank template at `{query}` and `{document}` and decides the whitespace each slot
 * borrows (see the module doc).
 *
 * @param template The template: `{query}` once, then `{document}` once.
 * @returns The split template.
 * @throws {RangeError} when a placeholder is missing, repeated, or the document comes first.
 */
export function parseRerankTemplate(template: string): RerankTemplate {
  const q = template.indexOf("{query}");
  const d = template.indexOf("{document}");
  if (q < 0 || d < 0) {
    throw new RangeError("a rerank template needs both {query} and {document}");
  }
  if (template.indexOf("{query}", q + 1) >= 0 || template.indexOf("{document}", d + 1) >= 0) {
    throw new RangeError("a rerank template holds {query} and {document} once each");
  }
  if (d < q) throw new RangeError("a rerank template has {query} before {document}");
  let l0 = template.slice(0, q);
  let l1 = template.slice(q + "{query}".length, d);
  let l2 = template.slice(d + "{document}".length);
  const qBefore = matched(l0, /[ \t]*$/);
  l0 = l0.slice(0, l0.length - qBefore.length);
  const qAfter = matched(l1, /^[\r\n]*/);
  l1 = l1.slice(qAfter.length);
  const dBefore = matched(l1, /[ \t]*$/);
  l1 = l1.slice(0, l1.length - dBefore.length);
  const dAfter = matched(l2, /^[\r\n]*/);
  l2 = l2.slice(dAfter.length);
  return {
    source: template,
    literals: [l0, l1, l2],
    query: [qBefore, qAfter],
    document: [dBefore, dAfter],
  };
}

/** The template with the pair substituted as one string (what llama.cpp's server tokenizes). */
export function substituteRerankTemplate(t: RerankTemplate, query: string, doc: string): string {
  const [l0, l1, l2] = t.literals;
  return l0 + t.query[0] + query + t.query[1] + l1 + t.document[0] + doc + t.document[1] + l2;
}

function matched(s: string, re: RegExp): string {
  return re.exec(s)?.[0] ?? "";
}
