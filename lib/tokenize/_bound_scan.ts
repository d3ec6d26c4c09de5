/**
 * The scanners behind {@link TokenBound}: one pass over the caller's UTF-16 text, no allocation
 * proportional to it, that counts what a proof needs (pre-tokens, or code points and bytes) and
 * finds prefix cuts. The proofs are in `token_bound.ts`; this file only counts.
 *
 * @module
 */

/** A lower bound and whether the scan stopped at its limit before the end of the text. */
export interface LowerBound {
  /** Content tokens (special tokens excluded) the text needs at least. */
  tokens: number;
  /**
   * True when the scan limit stopped the count early: `tokens` is still a lower bound, but a
   * longer scan could prove more.
   */
  exhausted: boolean;
}

/**
 * Where a text may be cut so that tokenizing the prefix alone gives the first tokens of the
 * whole text: `cut` at UTF-16 index `at`; `none` when the text ends before the prefix can prove
 * enough tokens (tokenize it all); `exhausted` when the scan limit came first.
 */
export type SafeCut = { kind: "cut"; at: number } | { kind: "none" } | { kind: "exhausted" };

/** What a bound counts over a text. */
export interface BoundScanner {
  lowerBound(text: string, stopAbove: number, scanLimit: number): LowerBound;
  safeCut(text: string, minTokens: number, scanLimit: number): SafeCut;
}

/** How often (in code units) the unit scanner re-checks its stop condition. */
const CHECK_EVERY = 4096;

/**
 * Mirrors the library's `DictionarySplitter` over the unnormalized added tokens: at each position
 * the longest added-token content starting there, matched code unit by code unit.
 */
export class AddedTokenMatcher {
  #root: TrieNode = new Map();
  #firstUnits = new Uint8Array(65536);
  #allUnits = new Uint8Array(65536);

  constructor(contents: readonly string[]) {
    for (const word of contents) {
      let node = this.#root;
      for (let i = 0; i < word.length; i++) {
        const u = word.charCodeAt(i);
        this.#allUnits[u] = 1;
        if (i === 0) this.#firstUnits[u] = 1;
        let next = node.get(u);
        if (next === undefined) {
          next = new Map();
          node.set(u, next);
        }
        node = next;
      }
      node.set(END, new Map());
    }
  }

  /** Length of the longest added token starting at `i`, or 0. */
  matchAt(text: string, i: number): number {
    if (this.#firstUnits[text.charCodeAt(i)] === 0) return 0;
    let node: TrieNode | undefined = this.#root;
    let best = 0;
    for (let j = i; j < text.length; j++) {
      node = node.get(text.charCodeAt(j));
      if (node === undefined) break;
      if (node.has(END)) best = j + 1 - i;
    }
    return best;
  }

  /** True when the code unit occurs anywhere in an added token's content. */
  inContent(unit: number): boolean {
    return this.#allUnits[unit] === 1;
  }
}

type TrieNode = Map<number, TrieNode>;
const END = -1;

/**
 * Counts pre-tokens (for WordPiece behind `BertPreTokenizer`): each code point's normalized
 * image is run through the pre-tokenizer's word/punctuation/space machine, whose only state is
 * "inside a word". Per code point the effect from each state is cached in blocks of 256.
 */
export class PreTokenScanner implements BoundScanner {
  #effect: (cp: number) => number;
  #blocks: (Uint32Array | undefined)[] = new Array(0x1100);
  #added: AddedTokenMatcher | undefined;

  /**
   * @param effectOf Packed effect of one code point (see {@link packEffect}).
   * @param added Unnormalized added tokens, each one token and a section boundary.
   */
  constructor(effectOf: (cp: number) => number, added: AddedTokenMatcher | undefined) {
    this.#effect = effectOf;
    this.#added = added;
    this.#block(0);
  }

  /** The packed effect of one code point. */
  effect(cp: number): number {
    return this.#lookup(cp);
  }

  /**
   * Replaces every word longer than `maxWordChars` normalized code points by `placeholder`
   * (itself such a word): WordPiece turns any such word into one `[UNK]`, so the tokens stay the
   * same while a multi-megabyte word costs nothing to tokenize. Only words made of code points
   * whose images are all word characters (or empty), between separators, added tokens or the
   * ends of the text, are replaced.
   *
   * @returns The compacted text, or `text` itself when no word was replaced.
   */
  compact(text: string, maxWordChars: number, placeholder: string): string {
    const n = text.length;
    const added = this.#added;
    const parts: string[] = [];
    let flushed = 0;
    let runStart = -1; // start of the current pure word, -1 outside one
    let runLen = 0;
    let tainted = false; // a code point with a mixed image: no run until the next separator
    const endRun = (at: number): void => {
      if (runStart >= 0 && runLen > maxWordChars) {
        parts.push(text.slice(flushed, runStart), placeholder);
        flushed = at;
      }
      runStart = -1;
      runLen = 0;
    };
    let i = 0;
    while (i < n) {
      const m = added === undefined ? 0 : added.matchAt(text, i);
      if (m > 0) {
        endRun(i);
        tainted = false;
        i += m;
        continue;
      }
      // A surrogate pair is one code point (two units); a lone surrogate stands for itself.
      const cp = text.codePointAt(i)!;
      const w = cp > 0xffff ? 2 : 1;
      const e = this.#lookup(cp);
      const kind = e & KIND_MASK;
      if (kind === KIND_WORD) {
        if (!tainted) {
          if (runStart < 0) runStart = i;
          runLen += e >>> WORD_LEN_SHIFT;
        }
      } else if (kind === KIND_SEPARATOR) {
        endRun(i);
        tainted = false;
      } else if (kind !== KIND_EMPTY) {
        runStart = -1;
        runLen = 0;
        tainted = true;
      }
      i += w;
    }
    endRun(n);
    if (parts.length === 0) return text;
    parts.push(text.slice(flushed));
    return parts.join("");
  }

  lowerBound(text: string, stopAbove: number, scanLimit: number): LowerBound {
    const r = this.#scan(text, stopAbove, Infinity, scanLimit);
    return { tokens: r.count, exhausted: r.stop === "exhausted" };
  }

  safeCut(text: string, minTokens: number, scanLimit: number): SafeCut {
    const r = this.#scan(text, Infinity, minTokens, scanLimit);
    if (r.stop === "cut") return { kind: "cut", at: r.at };
    return r.stop === "exhausted" ? { kind: "exhausted" } : { kind: "none" };
  }

  #scan(
    text: string,
    stopAbove: number,
    cutAfter: number,
    scanLimit: number,
  ): { count: number; stop: "end" | "above" | "cut" | "exhausted"; at: number } {
    const n = text.length;
    const added = this.#added;
    let count = 0;
    let inWord = false;
    let i = 0;
    while (i < n) {
      if (i >= scanLimit) return { count, stop: "exhausted", at: i };
      const m = added === undefined ? 0 : added.matchAt(text, i);
      if (m > 0) {
        count++;
        inWord = false;
        i += m;
        if (count > stopAbove) return { count, stop: "above", at: i };
        continue;
      }
      // A surrogate pair is one code point (two units); a lone surrogate stands for itself.
      const cp = text.codePointAt(i)!;
      const w = cp > 0xffff ? 2 : 1;
      const e = this.#lookup(cp);
      if (
        count >= cutAfter && i > 0 && (e & BOUNDARY) !== 0 &&
        (added === undefined || !added.inContent(text.charCodeAt(i)))
      ) {
        return { count, stop: "cut", at: i };
      }
      if (inWord) {
        count += (e >>> D1_SHIFT) & 0xff;
        inWord = (e & OUT1) !== 0;
      } else {
        count += (e >>> D0_SHIFT) & 0xff;
        inWord = (e & OUT0) !== 0;
      }
      i += w;
      if (count > stopAbove) return { count, stop: "above", at: i };
    }
    return { count, stop: "end", at: n };
  }

  #lookup(cp: number): number {
    const block = this.#blocks[cp >>> 8] ?? this.#block(cp >>> 8);
    return block[cp & 0xff]!;
  }

  #block(index: number): Uint32Array {
    const block = new Uint32Array(256);
    for (let k = 0; k < 256; k++) block[k] = this.#effect((index << 8) | k);
    this.#blocks[index] = block;
    return block;
  }
}

const OUT0 = 1;
const OUT1 = 2;
const BOUNDARY = 4;
const D0_SHIFT = 8;
const D1_SHIFT = 16;
/** What the image is: empty, all word characters, a self-contained separator, or mixed. */
const KIND_MASK = 0x30;
const KIND_MIXED = 0x00;
const KIND_EMPTY = 0x10;
const KIND_WORD = 0x20;
const KIND_SEPARATOR = 0x30;
const WORD_LEN_SHIFT = 24;

/**
 * Packs one code point's effect on the pre-token machine.
 *
 * @param d0 Pre-tokens its image starts when entered outside a word.
 * @param out0 Whether that leaves the machine inside a word.
 * @param d1 Pre-tokens started when entered inside a word.
 * @param out1 Whether that leaves the machine inside a word.
 * @param boundary Its image is non-empty and starts with whitespace or punctuation, so a
 *   pre-token always ends before it.
 */
export function packEffect(
  d0: number,
  out0: boolean,
  d1: number,
  out1: boolean,
  boundary: boolean,
  wordLength = 0,
): number {
  // Empty image: no count, and a word around it continues. All word characters: starts a word
  // from outside, continues one from inside. Separator: starts with whitespace or punctuation
  // and ends outside a word, so words on either side are untouched by it.
  const kind = d0 === 0 && !out0 && d1 === 0 && out1 && !boundary
    ? KIND_EMPTY
    : d0 === 1 && out0 && d1 === 0 && out1 && !boundary && wordLength > 0
    ? KIND_WORD
    : boundary && !out0 && !out1
    ? KIND_SEPARATOR
    : KIND_MIXED;
  // Clamping a count or a length down keeps it a lower bound.
  return ((Math.min(d0, 255) << D0_SHIFT) | (Math.min(d1, 255) << D1_SHIFT) |
    (out0 ? OUT0 : 0) | (out1 ? OUT1 : 0) | (boundary ? BOUNDARY : 0) | kind |
    (kind === KIND_WORD ? Math.min(wordLength, 255) << WORD_LEN_SHIFT : 0)) >>> 0;
}

/** True when the packed effect is a one-code-point word of its own (see {@link packEffect}). */
export function isSingleWordChar(effect: number): boolean {
  return (effect & KIND_MASK) === KIND_WORD && effect >>> WORD_LEN_SHIFT === 1;
}

/** Code points, ASCII code points and UTF-8 bytes of a text (or lower bounds of them). */
export interface Counts {
  cp: number;
  ascii: number;
  bytes: number;
}

/** Options of {@link UnitScanner}. */
export interface UnitScannerOptions {
  /** Measure in UTF-8 bytes (byte-level BPE) rather than code points. */
  byteUnits: boolean;
  /** Most units one token can cover. */
  maxUnitsPerToken: number;
  /** Lower bounds of the counts after normalization, from the raw counts. */
  normalize: (raw: Counts) => Counts;
  /**
   * Characters before which a cut is safe (they normalize to the boundary symbol no merge
   * crosses), when the tokenizer allows cuts at all.
   */
  cutBefore?: ReadonlySet<number> | undefined;
}

/**
 * Counts code points, ASCII and UTF-8 bytes (for BPE): tokens ≥ ⌈units after normalization /
 * most units per token⌉.
 */
export class UnitScanner implements BoundScanner {
  #o: UnitScannerOptions;

  constructor(options: UnitScannerOptions) {
    this.#o = options;
  }

  /** The token bound of raw counts. */
  tokensFor(raw: Counts): number {
    const c = this.#o.normalize(raw);
    const units = this.#o.byteUnits ? Math.max(c.bytes, c.cp, c.ascii) : Math.max(c.cp, c.ascii);
    return Math.ceil(Math.ceil(units - 1e-9) / this.#o.maxUnitsPerToken);
  }

  lowerBound(text: string, stopAbove: number, scanLimit: number): LowerBound {
    const n = text.length;
    // Without a scan: a string of n code units has at least ⌈n/2⌉ code points and n UTF-8 bytes.
    const quick = this.tokensFor({ cp: Math.ceil(n / 2), ascii: 0, bytes: n });
    if (quick > stopAbove) return { tokens: quick, exhausted: false };
    let cp = 0, ascii = 0, bytes = 0;
    let next = CHECK_EVERY;
    for (let i = 0; i < n; i++) {
      if (i >= next) {
        const t = this.tokensFor({ cp, ascii, bytes });
        if (t > stopAbove) return { tokens: t, exhausted: false };
        if (i >= scanLimit) return { tokens: t, exhausted: true };
        next += CHECK_EVERY;
      }
      const u = text.charCodeAt(i);
      cp++;
      if (u < 0x80) {
        ascii++;
        bytes += 1;
      } else if (u < 0x800) bytes += 2;
      else if (u >= 0xd800 && u <= 0xdbff && i + 1 < n) {
        const lo = text.charCodeAt(i + 1);
        if (lo >= 0xdc00 && lo <= 0xdfff) {
          bytes += 4;
          i++;
        } else bytes += 3;
      } else bytes += 3;
    }
    return { tokens: this.tokensFor({ cp, ascii, bytes }), exhausted: false };
  }

  safeCut(text: string, minTokens: number, scanLimit: number): SafeCut {
    const cutBefore = this.#o.cutBefore;
    if (cutBefore === undefined) return { kind: "none" };
    const n = text.length;
    let cp = 0, ascii = 0, bytes = 0;
    let prevCut = true;
    for (let i = 0; i < n; i++) {
      if (i >= scanLimit) return { kind: "exhausted" };
      const u = text.charCodeAt(i);
      const here = cutBefore.has(u);
      if (here && !prevCut && this.tokensFor({ cp, ascii, bytes }) >= minTokens) {
        return { kind: "cut", at: i };
      }
      prevCut = here;
      cp++;
      if (u < 0x80) {
        ascii++;
        bytes += 1;
      } else if (u < 0x800) bytes += 2;
      else if (u >= 0xd800 && u <= 0xdbff && i + 1 < n) {
        const lo = text.charCodeAt(i + 1);
        if (lo >= 0xdc00 && lo <= 0xdfff) {
          bytes += 4;
          i++;
        } else bytes += 3;
      } else bytes += 3;
    }
    return { kind: "none" };
  }
}
