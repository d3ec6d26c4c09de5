/**
 * Provable lower bounds on the tokens a text needs, and provably safe prefix cuts, read off a
 * tokenizer.json without tokenizing (docs/internals.md §3, field report F21). A 50 MiB text that
 * cannot fit is refused from its length alone, and a text to truncate is tokenized only as far as
 * the kept tokens reach.
 *
 * Every bound is about the tokenizer library Synapse runs (`@huggingface/tokenizers`), whose
 * pipeline per text is: split out added tokens (each one token), normalize each other section,
 * pre-tokenize it, run the model on each pre-token. Two shapes have a proof; any other tokenizer
 * gets {@link TokenBound.kind} `"none"` with the reason, and callers tokenize in full.
 *
 * **`pre_tokens` — WordPiece behind `BertPreTokenizer`** (BERT-style), normalizer per code point
 * (`BertNormalizer`, `Lowercase`, `StripAccents`, `NFD`, `NFKD` or a `Sequence` of them), no
 * normalized added tokens, `fuse_unk` off. Proof: the normalizer maps each code point on its own
 * (cleaning drops control characters and maps whitespace to a space; CJK gets spaces around it;
 * lowercasing and accent stripping act per character), so the normalized text is the
 * concatenation of per-code-point images; `BertPreTokenizer` splits that into maximal runs of
 * word characters and single punctuation characters, a machine whose only state is "inside a
 * word", so the pre-token count is the sum of each image's effect from that state, computed by
 * running the library's own normalizer and pre-tokenizer on each code point. WordPiece turns
 * every pre-token into at least one token (its pieces, or one `[UNK]` for a word it cannot split
 * or longer than `max_input_chars_per_word`), and every added token is one token, so
 * **tokens ≥ pre-tokens + added tokens**. Cut: just before a code point whose image starts with
 * whitespace or punctuation (and is not part of any added token's text), every pre-token ends on
 * one side, so the prefix tokenizes to exactly the first tokens of the whole.
 *
 * **`units` — BPE** with a lossless pre-tokenizer (none, `ByteLevel`, `Split` that keeps the
 * text, `Metaspace`, `Punctuation`, `Digits`, `FixedLength`, or a `Sequence` of them). Every
 * token the model emits is a vocabulary piece, a merge result, or one byte of a byte-fallback
 * character, and covers at most M units of the normalized pre-token (M: the longest vocabulary
 * piece, merge result or added token, in code points; byte-level pieces count one code point
 * per byte), so **tokens ≥ ⌈normalized units / M⌉**, units being UTF-8 bytes behind `ByteLevel`
 * and code points otherwise. Normalizers only lower this by proven factors:
 * `Prepend` only adds; `Replace` of a string p by c keeps ≥ min(1, |c|/|p|) of the units;
 * `Lowercase` keeps code points and ASCII, ≥ 1/3 of the bytes; `NFD`/`NFKD` keep code points
 * and ASCII, ≥ 1/3 resp. 1/4 of the bytes; `NFC`/`NFKC` keep ≥ max(1/4 of the code points,
 * the ASCII count) and ≥ 1/9 resp. 1/12 of the bytes ({@link UNICODE_RATIOS}, checked over all
 * of Unicode by the tests). No bound when an unknown piece can become `unk` and `fuse_unk`
 * merges runs of them (one token for any length), or when unknown pieces are dropped.
 * Cut, only without a pre-tokenizer (SentencePiece-style BPE, e.g. llama): the normalizer is
 * `Prepend` plus `Replace(" " → R)` and no merge joins a piece ending in a non-R character with
 * one starting with R; then before a space (or R) that follows another character no merge ever
 * crosses, the BPE of the whole is the BPE of the prefix followed by the BPE of the rest (each
 * side's merges happen in the same order: by rank, then by position), so the prefix gives the
 * first tokens of the whole.
 *
 * @module
 */
import {
  AddedTokenMatcher,
  type BoundScanner,
  type Counts,
  isSingleWordChar,
  type LowerBound,
  packEffect,
  PreTokenScanner,
  type SafeCut,
  UnitScanner,
} from "./_bound_scan.ts";

export type { LowerBound, SafeCut } from "./_bound_scan.ts";

/**
 * Worst cases of Unicode normalization and lowercasing over every code point, the factors the
 * `units` bound uses. The tests recompute them from the runtime's Unicode data.
 */
export const UNICODE_RATIOS: Readonly<{
  /** Most code points in one code point's canonical decomposition. */
  nfdMaxCodePoints: number;
  /** Most UTF-8 bytes a code point's canonical decomposition has per byte of the code point. */
  nfdMaxByteGrowth: number;
  /** Fewest UTF-8 bytes a code point's canonical decomposition keeps per byte. */
  nfdMinByteRatio: number;
  /** Fewest UTF-8 bytes a code point's compatibility decomposition keeps per byte. */
  nfkdMinByteRatio: number;
  /** Fewest UTF-8 bytes a code point keeps per byte when lowercased. */
  lowercaseMinByteRatio: number;
}> = Object.freeze({
  nfdMaxCodePoints: 4,
  nfdMaxByteGrowth: 3,
  nfdMinByteRatio: 1 / 3,
  nfkdMinByteRatio: 1 / 4,
  lowercaseMinByteRatio: 1 / 3,
});

/** Which proof a tokenizer gets; see the module documentation. */
export type TokenBoundKind = "pre_tokens" | "units" | "none";

/** Options of {@link TokenBound.lowerBound}. */
export interface LowerBoundOptions {
  /**
   * Stop counting once the bound exceeds this many tokens; the answer is then a lower bound just
   * past it, not the best one. The answer depends only on the text and this value.
   *
   * @default {Infinity}
   */
  stopAbove?: number;
  /**
   * Scan at most about this many UTF-16 code units; past it the answer is marked `exhausted`.
   *
   * @default {Infinity}
   */
  scanLimit?: number;
}

/** Options of {@link TokenBound.safeCut}. */
export interface SafeCutOptions {
  /**
   * Scan at most this many UTF-16 code units; past it the answer is `exhausted`.
   *
   * @default {Infinity}
   */
  scanLimit?: number;
}

/** The library normalizer and pre-tokenizer, as the loaded tokenizer holds them. */
export interface TokenizerParts {
  /** The normalizer applied to each section of text, or null. */
  normalizer: ((text: string) => string) | null;
  /** The pre-tokenizer: text → pre-tokens, or null. */
  preTokenizer: ((text: string) => string[]) | null;
}

/**
 * The bound of one tokenizer: {@link lowerBound} tokens of a text, and {@link safeCut} prefixes.
 * Counts are of content tokens: the special tokens a post-processor adds are not included.
 */
export class TokenBound {
  /** Which proof applies, or `"none"`. */
  readonly kind: TokenBoundKind;
  /** One line: the proof used, or why there is none. */
  readonly reason: string;
  /** True when {@link safeCut} can ever find a cut. */
  readonly canCut: boolean;
  #scanner: BoundScanner | undefined;
  #compact: ((text: string) => string) | undefined;

  private constructor(
    kind: TokenBoundKind,
    reason: string,
    scanner: BoundScanner | undefined,
    canCut: boolean,
    compact?: (text: string) => string,
  ) {
    this.kind = kind;
    this.reason = reason;
    this.#scanner = scanner;
    this.canCut = canCut;
    this.#compact = compact;
  }

  /**
   * Analyses a (sanitized) tokenizer.json.
   *
   * @param json The tokenizer.json object.
   * @param config The tokenizer_config.json object (`remove_space`,
   *   `do_lowercase_and_remove_accent`).
   * @param parts The library's normalizer and pre-tokenizer built from `json` (the pre-token
   *   bound runs them on single code points).
   * @returns The bound; its `kind` is `"none"` when no proof applies.
   */
  static analyze(
    json: Record<string, unknown>,
    config: Record<string, unknown>,
    parts: TokenizerParts,
  ): TokenBound {
    try {
      return analyze(json, config, parts);
    } catch (err) {
      return TokenBound.none(
        `tokenizer.json could not be analysed: ${err instanceof Error ? err.message : err}`,
      );
    }
  }

  /** A bound that proves nothing (every text must be tokenized). */
  static none(reason: string): TokenBound {
    return new TokenBound("none", reason, undefined, false);
  }

  /** @internal */
  static _of(
    kind: TokenBoundKind,
    reason: string,
    scanner: BoundScanner,
    canCut: boolean,
    compact?: (text: string) => string,
  ): TokenBound {
    return new TokenBound(kind, reason, scanner, canCut, compact);
  }

  /**
   * A text that tokenizes exactly like `text` but may be much shorter: for WordPiece, every word
   * longer than `max_input_chars_per_word` becomes one `[UNK]` whatever it holds, so such a word
   * is replaced by a short one that is also too long. The same text for other tokenizers.
   *
   * @param text The text.
   * @returns The compacted text (`text` itself when nothing was replaced).
   */
  compact(text: string): string {
    return this.#compact === undefined ? text : this.#compact(text);
  }

  /**
   * A lower bound on the content tokens of `text` (special tokens excluded), without tokenizing.
   * Never more than the tokens the tokenizer produces. For kind `"none"` it is 0.
   *
   * @param text The text, as the caller sent it.
   * @param options Early stop and scan limit.
   * @returns The bound, and whether the scan limit cut it short.
   */
  lowerBound(text: string, options: LowerBoundOptions = {}): LowerBound {
    if (this.#scanner === undefined) return { tokens: 0, exhausted: false };
    return this.#scanner.lowerBound(
      text,
      options.stopAbove ?? Infinity,
      options.scanLimit ?? Infinity,
    );
  }

  /**
   * The shortest prefix `text.slice(0, at)` that provably tokenizes to at least `minTokens`
   * content tokens which are exactly the first tokens of the whole text.
   *
   * @param text The text.
   * @param minTokens Content tokens the prefix must provably have.
   * @param options Scan limit.
   * @returns A cut, `none` (no such prefix: tokenize the whole text) or `exhausted`.
   */
  safeCut(text: string, minTokens: number, options: SafeCutOptions = {}): SafeCut {
    if (this.#scanner === undefined || !this.canCut) return { kind: "none" };
    return this.#scanner.safeCut(text, minTokens, options.scanLimit ?? Infinity);
  }
}

// ---------------------------------------------------------------------------------------------
// Analysis

type Json = Record<string, unknown>;

interface AddedToken {
  content: string;
  normalized: boolean;
}

function analyze(json: Json, config: Json, parts: TokenizerParts): TokenBound {
  const model = obj(json.model);
  if (model === undefined) return TokenBound.none("tokenizer.json has no model");
  const type = modelType(model);
  const added = addedTokens(json);
  if (added.some((t) => t.content === "" || !t.content.isWellFormed())) {
    return TokenBound.none("an added token's content is empty or not well-formed UTF-16");
  }
  if (type === "WordPiece") return analyzeWordPiece(json, config, parts, model, added);
  if (type === "BPE") return analyzeBpe(json, config, parts, model, added);
  return TokenBound.none(`no bound is proven for ${type} models`);
}

function modelType(model: Json): string {
  if (typeof model.type === "string") return model.type;
  // The library infers the model when the type is absent; mirror it.
  if (Array.isArray(model.vocab)) return "Unigram";
  if (Object.hasOwn(model, "continuing_subword_prefix") && Object.hasOwn(model, "unk_token")) {
    return Object.hasOwn(model, "merges") ? "BPE" : "WordPiece";
  }
  return "unknown";
}

function addedTokens(json: Json): AddedToken[] {
  const list = Array.isArray(json.added_tokens) ? json.added_tokens : [];
  return list.map((raw) => {
    const t = obj(raw) ?? {};
    const special = t.special === true;
    return {
      content: typeof t.content === "string" ? t.content : "",
      normalized: typeof t.normalized === "boolean" ? t.normalized : !special,
    };
  });
}

// --- WordPiece ---------------------------------------------------------------------------------

/** Normalizers that map each code point on its own (no composition, no context). */
const PER_CODE_POINT_NORMALIZERS = new Set([
  "BertNormalizer",
  "Lowercase",
  "StripAccents",
  "NFD",
  "NFKD",
]);

function analyzeWordPiece(
  json: Json,
  config: Json,
  parts: TokenizerParts,
  model: Json,
  added: AddedToken[],
): TokenBound {
  if (model.fuse_unk === true) {
    return TokenBound.none("WordPiece with fuse_unk can merge unknown words into one token");
  }
  const pre = obj(json.pre_tokenizer);
  if (pre?.type !== "BertPreTokenizer" || parts.preTokenizer === null) {
    return TokenBound.none("WordPiece bound needs BertPreTokenizer");
  }
  const bad = perCodePointProblem(json.normalizer);
  if (bad !== undefined) return TokenBound.none(bad);
  const normalizer = parts.normalizer;
  if (normalizer !== null && added.some((t) => t.normalized)) {
    return TokenBound.none("normalized added tokens may span several pre-tokens");
  }
  const lowerRemove = config.do_lowercase_and_remove_accent === true;
  const preTokenize = parts.preTokenizer;
  const image = (s: string): string => {
    let t = lowerRemove ? s.toLowerCase().replace(/\p{M}/gu, "") : s;
    if (normalizer !== null) t = normalizer(t);
    return t;
  };
  const count = (s: string): number => preTokenize(s).length;
  const effectOf = (cp: number): number => {
    const s = image(String.fromCodePoint(cp));
    if (s === "") return packEffect(0, false, 0, true, false);
    // Outside a word: after a space. Inside: after the word character "a".
    const d0 = count(" " + s);
    const out0 = count(" " + s + "a") === d0;
    const withA = count("a" + s);
    const d1 = withA - 1;
    const out1 = count("a" + s + "a") === withA;
    const boundary = preTokenize("a" + s)[0] === "a";
    return packEffect(d0, out0, d1, out1, boundary, [...s].length);
  };
  const unnormalized = added.filter((t) => !t.normalized || normalizer === null);
  const matcher = unnormalized.length === 0
    ? undefined
    : new AddedTokenMatcher(unnormalized.map((t) => t.content));
  const scanner = new PreTokenScanner(effectOf, matcher);
  // Words longer than this become one [UNK] (the library's default is 100).
  const maxWordChars = typeof model.max_input_chars_per_word === "number"
    ? model.max_input_chars_per_word
    : 100;
  const filler = ["a", "x", "0", "z"].find((c) =>
    isSingleWordChar(scanner.effect(c.codePointAt(0)!)) &&
    !added.some((t) => t.content.includes(c))
  );
  const compact = filler === undefined || !(maxWordChars >= 0 && maxWordChars < 1e6)
    ? undefined
    : (text: string) =>
      scanner.compact(text, maxWordChars, filler.repeat(Math.floor(maxWordChars) + 1));
  return TokenBound._of(
    "pre_tokens",
    "WordPiece behind BertPreTokenizer: tokens ≥ pre-tokens (each word gives ≥ 1 piece or " +
      "[UNK]) + added tokens; cuts before whitespace or punctuation",
    scanner,
    true,
    compact,
  );
}

function perCodePointProblem(normalizer: unknown): string | undefined {
  if (normalizer === null || normalizer === undefined) return undefined;
  const n = obj(normalizer);
  if (n === undefined) return "normalizer is not an object";
  if (n.type === "Sequence") {
    const list = Array.isArray(n.normalizers) ? n.normalizers : [];
    for (const child of list) {
      const p = perCodePointProblem(child);
      if (p !== undefined) return p;
    }
    return undefined;
  }
  return PER_CODE_POINT_NORMALIZERS.has(String(n.type))
    ? undefined
    : `normalizer ${String(n.type)} does not act per code point`;
}

// --- BPE ---------------------------------------------------------------------------------------

type Transform = (c: Counts) => Counts;

function analyzeBpe(
  json: Json,
  config: Json,
  parts: TokenizerParts,
  model: Json,
  added: AddedToken[],
): TokenBound {
  if (config.remove_space === true || config.do_lowercase_and_remove_accent === true) {
    return TokenBound.none("remove_space / do_lowercase_and_remove_accent drop characters");
  }
  const norm = normalizerTransform(json.normalizer);
  if (typeof norm === "string") return TokenBound.none(norm);
  const pre = preTokenizerUnits(json.pre_tokenizer);
  if (typeof pre === "string") return TokenBound.none(pre);
  const byteUnits = pre.byteLevel;
  const vocab = obj(model.vocab);
  if (vocab === undefined) return TokenBound.none("BPE model has no vocab object");
  const merges = mergePairs(model.merges);
  if (merges === undefined) return TokenBound.none("BPE model has unreadable merges");
  const byteFallback = model.byte_fallback === true;
  const fuseUnk = model.fuse_unk === true;
  const unkToken = typeof model.unk_token === "string" ? model.unk_token : null;
  const allBytes = byteFallback && allByteTokens(vocab);
  const unkPossible = !allBytes && !(byteUnits && closedByteLevel(vocab, merges));
  if (unkPossible && fuseUnk) {
    return TokenBound.none("fuse_unk merges any run of unknown pieces into one token");
  }
  if (unkPossible && unkToken === null) {
    return TokenBound.none("unknown pieces are dropped (no unk_token, no byte fallback)");
  }
  // Most units a token covers: a vocabulary piece, a merge result (unknown ones become `unk`),
  // an added token (raw, or normalized when it matches normalized text).
  let maxUnits = 1;
  for (const piece of Object.keys(vocab)) maxUnits = Math.max(maxUnits, codePoints(piece));
  for (const [l, r] of merges) maxUnits = Math.max(maxUnits, codePoints(l) + codePoints(r));
  const units = (s: string): number => byteUnits ? utf8Bytes(s) : codePoints(s);
  for (const t of added) {
    maxUnits = Math.max(maxUnits, units(t.content));
    if (t.normalized && parts.normalizer !== null) {
      maxUnits = Math.max(maxUnits, units(parts.normalizer(t.content)));
    }
  }
  const cutBefore = bpeCutChars(json, model, merges, added, unkPossible && fuseUnk);
  const scanner = new UnitScanner({
    byteUnits,
    maxUnitsPerToken: maxUnits,
    normalize: norm,
    cutBefore,
  });
  return TokenBound._of(
    "units",
    `BPE: tokens ≥ ⌈normalized ${
      byteUnits ? "UTF-8 bytes" : "code points"
    } / ${maxUnits}⌉ (longest piece)` +
      (cutBefore === undefined ? "; no provable cut" : "; cuts before a space"),
    scanner,
    cutBefore !== undefined,
  );
}

function normalizerTransform(normalizer: unknown): Transform | string {
  if (normalizer === null || normalizer === undefined) return (c) => c;
  const n = obj(normalizer);
  if (n === undefined) return "normalizer is not an object";
  const r = UNICODE_RATIOS;
  const nfcCp = (c: Counts): number => Math.max(c.cp / r.nfdMaxCodePoints, c.ascii);
  switch (n.type) {
    case "Sequence": {
      const list = Array.isArray(n.normalizers) ? n.normalizers : [];
      const stages: Transform[] = [];
      for (const child of list) {
        const t = normalizerTransform(child);
        if (typeof t === "string") return t;
        stages.push(t);
      }
      return (c) => stages.reduce((acc, t) => t(acc), c);
    }
    case "Prepend":
      return (c) => c;
    case "Replace": {
      const pattern = obj(n.pattern);
      const p = pattern?.String;
      const content = typeof n.content === "string" ? n.content : "";
      if (typeof p !== "string" || p === "") {
        return "Replace with a regex pattern can remove any amount of text";
      }
      const cpRatio = Math.min(1, codePoints(content) / codePoints(p));
      const byteRatio = Math.min(1, utf8Bytes(content) / utf8Bytes(p));
      // deno-lint-ignore no-control-regex
      const asciiKept = !/[\u0000-\u007f]/.test(p);
      return (c) => ({
        cp: c.cp * cpRatio,
        ascii: asciiKept ? c.ascii : 0,
        bytes: c.bytes * byteRatio,
      });
    }
    case "Lowercase":
      return (c) => ({ cp: c.cp, ascii: c.ascii, bytes: c.bytes * r.lowercaseMinByteRatio });
    case "NFD":
      return (c) => ({ cp: c.cp, ascii: c.ascii, bytes: c.bytes * r.nfdMinByteRatio });
    case "NFKD":
      return (c) => ({ cp: c.cp, ascii: c.ascii, bytes: c.bytes * r.nfkdMinByteRatio });
    case "NFC":
      return (c) => {
        const cp = nfcCp(c);
        return {
          cp,
          ascii: 0,
          bytes: Math.max(c.bytes * r.nfdMinByteRatio / r.nfdMaxByteGrowth, cp),
        };
      };
    case "NFKC":
      return (c) => {
        const cp = nfcCp(c);
        return {
          cp,
          ascii: 0,
          bytes: Math.max(c.bytes * r.nfkdMinByteRatio / r.nfdMaxByteGrowth, cp),
        };
      };
    default:
      return `normalizer ${String(n.type)} can remove characters`;
  }
}

function preTokenizerUnits(pre: unknown): { byteLevel: boolean } | string {
  if (pre === null || pre === undefined) return { byteLevel: false };
  const p = obj(pre);
  if (p === undefined) return "pre_tokenizer is not an object";
  switch (p.type) {
    case "Sequence": {
      const list = Array.isArray(p.pretokenizers) ? p.pretokenizers : [];
      let byteLevel = false;
      for (const child of list) {
        const u = preTokenizerUnits(child);
        if (typeof u === "string") return u;
        byteLevel ||= u.byteLevel;
      }
      return { byteLevel };
    }
    case "ByteLevel":
      // Its regex matches every character, and each byte becomes one character.
      return { byteLevel: true };
    case "Split": {
      // The library keeps the whole text unless `invert` (matches only) or `removed`, or the
      // pattern is unreadable (then it returns no pre-tokens at all).
      const pattern = obj(p.pattern);
      if (typeof pattern?.Regex !== "string" && typeof pattern?.String !== "string") {
        return "Split without a String or Regex pattern drops the text";
      }
      if (p.invert === true) return "Split with invert keeps only the matches";
      if (String(p.behavior ?? "").toLowerCase() === "removed") {
        return "Split with behavior Removed drops the delimiters";
      }
      return { byteLevel: false };
    }
    case "Metaspace": {
      const rep = typeof p.str_rep === "string" && p.str_rep !== ""
        ? p.str_rep
        : typeof p.replacement === "string"
        ? p.replacement
        : "\u2581";
      return rep === "" ? "Metaspace with an empty replacement drops spaces" : { byteLevel: false };
    }
    case "Punctuation":
    case "Digits":
    case "FixedLength":
      return { byteLevel: false };
    default:
      return `pre_tokenizer ${String(p.type)} can drop characters`;
  }
}

/**
 * The raw characters before which a llama-style BPE may be cut, or undefined when no cut is
 * provable (see the module documentation).
 */
function bpeCutChars(
  json: Json,
  model: Json,
  merges: [string, string][],
  added: AddedToken[],
  fusingUnk: boolean,
): ReadonlySet<number> | undefined {
  if (json.pre_tokenizer !== null && json.pre_tokenizer !== undefined) return undefined;
  if (fusingUnk || model.ignore_merges === true) return undefined;
  if (typeof model.end_of_word_suffix === "string" && model.end_of_word_suffix !== "") {
    return undefined;
  }
  if (
    typeof model.continuing_subword_suffix === "string" && model.continuing_subword_suffix !== ""
  ) return undefined;
  const stages = normalizerStages(json.normalizer);
  if (stages === undefined) return undefined;
  const replaces = stages.filter((s) => s.type === "Replace");
  if (replaces.length !== 1 || stages.some((s) => s.type !== "Replace" && s.type !== "Prepend")) {
    return undefined;
  }
  const rep = replaces[0]!;
  const from = obj(rep.pattern)?.String;
  const to = rep.content;
  if (from !== " " || typeof to !== "string" || codePoints(to) !== 1 || to.length !== 1) {
    return undefined;
  }
  // No merge may join a piece ending in another character to one starting with the boundary.
  for (const [l, r] of merges) {
    if (r.startsWith(to) && !l.endsWith(to)) return undefined;
  }
  if (added.some((t) => t.content.includes(" ") || t.content.includes(to))) return undefined;
  return new Set([0x20, to.charCodeAt(0)]);
}

function normalizerStages(normalizer: unknown): Json[] | undefined {
  if (normalizer === null || normalizer === undefined) return [];
  const n = obj(normalizer);
  if (n === undefined) return undefined;
  if (n.type !== "Sequence") return [n];
  const out: Json[] = [];
  for (const child of Array.isArray(n.normalizers) ? n.normalizers : []) {
    const s = normalizerStages(child);
    if (s === undefined) return undefined;
    out.push(...s);
  }
  return out;
}

function mergePairs(raw: unknown): [string, string][] | undefined {
  if (!Array.isArray(raw)) return undefined;
  const out: [string, string][] = [];
  for (const m of raw) {
    if (Array.isArray(m) && typeof m[0] === "string" && typeof m[1] === "string") {
      out.push([m[0], m[1]]);
    } else if (typeof m === "string") {
      // The library splits "a b" on the first space: split(" ", 2).
      const parts = m.split(" ", 2);
      out.push([parts[0] ?? "", parts[1] ?? ""]);
    } else return undefined;
  }
  return out;
}

function allByteTokens(vocab: Json): boolean {
  for (let b = 0; b < 256; b++) {
    const piece = `<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`;
    if (!Object.hasOwn(vocab, piece)) return false;
  }
  return true;
}

/**
 * True when a byte-level BPE can never meet an unknown piece: all 256 byte characters and every
 * merge result are in the vocabulary.
 */
function closedByteLevel(vocab: Json, merges: [string, string][]): boolean {
  for (let b = 0; b < 256; b++) {
    if (!Object.hasOwn(vocab, BYTE_CHARS[b]!)) return false;
  }
  return merges.every(([l, r]) => Object.hasOwn(vocab, l + r));
}

/** GPT-2's byte → character table, as the library's ByteLevel pre-tokenizer uses it. */
const BYTE_CHARS: readonly string[] = (() => {
  const bs: number[] = [];
  for (let b = 0x21; b <= 0x7e; b++) bs.push(b);
  for (let b = 0xa1; b <= 0xac; b++) bs.push(b);
  for (let b = 0xae; b <= 0xff; b++) bs.push(b);
  const out = new Array<string>(256);
  for (const b of bs) out[b] = String.fromCharCode(b);
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (out[b] === undefined) out[b] = String.fromCharCode(256 + n++);
  }
  return out;
})();

function obj(v: unknown): Json | undefined {
  return typeof v === "object" && v !== null && !Array.isArray(v) ? v as Json : undefined;
}

function codePoints(s: string): number {
  let n = 0;
  for (let i = 0; i < s.length; i++) {
    const u = s.charCodeAt(i);
    if (u >= 0xd800 && u <= 0xdbff && i + 1 < s.length) {
      const lo = s.charCodeAt(i + 1);
      if (lo >= 0xdc00 && lo <= 0xdfff) i++;
    }
    n++;
  }
  return n;
}

const encoder = new TextEncoder();

function utf8Bytes(s: string): number {
  return encoder.encode(s).length;
}
