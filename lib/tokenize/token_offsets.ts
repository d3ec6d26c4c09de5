/**
 * Where each content token of a text lies in the caller's own text (`tokenize`, docs/operations.md:
 * chunkers cut with exactly the served tokenizer). The tokenizer library Synapse runs has no offset
 * mapping, so offsets are found by tokenizing prefixes, the same rule `kept_chars` follows (F26):
 *
 * **A token ends where the shortest prefix of its run whose tokenization starts with the run's
 * tokens up to it ends.** A run is a stretch of the text that tokenizes on its own to exactly its
 * share of the whole text's tokens: the text is split before each whitespace run (and long
 * stretches further, at changes of character class), each piece is tokenized alone, and a piece
 * whose tokens are not exactly the next tokens of the whole is merged with its neighbours until
 * they are. A piece after a space may also be tokenized without that space, for tokenizers that
 * prepend a word marker to every text (SentencePiece's `Prepend("▁")`): then the space belongs to
 * the piece's first token. The whole text's tokens are what is returned; only their spans come
 * from the runs, so ids and counts never depend on this search.
 *
 * A token starts where the previous one ends, leaving out whitespace its piece does not stand
 * for (a WordPiece `world` after a space starts at `w`; a byte-level `Ġworld` or a SentencePiece
 * `▁world` starts at the space). Tokens that end at the same place (the bytes of one emoji under
 * byte fallback) share one span. A token's end also takes in the combining marks right after it
 * when they add no token of their own (an uncased model strips them).
 *
 * Cost: a run up to 64 code units is tokenized at every prefix length (the rule exactly; longer
 * runs by bisection), one run at a time, so a text of words costs a few short tokenizations per
 * token — linear in the text (on the fixtures, about 0.1 ms per token for WordPiece and 1 ms for
 * SentencePiece BPE, whose library tokenizer is slow); the `tokenize` operation runs it on the
 * tokenizer pool's workers.
 *
 * @module
 */

/** Tokenizes a text as plain text (content tokens, no special tokens). */
export type TokenizeFn = (text: string) => string[];

/** Spans of content tokens, in UTF-16 code units. */
export interface TokenSpans {
  /** Start of each token (UTF-16 code units). */
  starts: number[];
  /** End (exclusive) of each token (UTF-16 code units). */
  ends: number[];
}

/** Options of {@link tokenSpans}. */
export interface TokenSpansOptions {
  /** Only the first this many tokens need spans (the rest get none). @default all */
  limit?: number;
}

/** A piece of the text tokenized on its own. */
interface Run {
  /** Where the run starts in the text. */
  start: number;
  /** Where it ends. */
  end: number;
  /** The run is tokenized from `start + 1` (the space at `start` is the prepended marker). */
  dropSpace: boolean;
}

/** Pieces longer than this many code units are split further at changes of character class. */
const LONG_PIECE = 48;

/** Runs up to this many code units are scanned at every prefix length (the rule exactly). */
const SCAN_RUN = 64;

/** A run joins at most this many pieces; past it the rest is placed by prefixes of the text. */
const MAX_PIECES_PER_RUN = 32;

/**
 * The span of each of `tokens` (the whole text's content tokens, as `tokenize(text)` gives them)
 * in `text`, by the rule of the module doc.
 *
 * @param tokenize The tokenizer's plain-text tokenization.
 * @param text The caller's text.
 * @param tokens `tokenize(text)`.
 * @param options How many tokens need spans.
 * @returns Starts and ends (UTF-16 code units), one per token up to `limit`.
 */
export function tokenSpans(
  tokenize: TokenizeFn,
  text: string,
  tokens: readonly string[],
  options: TokenSpansOptions = {},
): TokenSpans {
  const limit = Math.min(tokens.length, options.limit ?? tokens.length);
  const ends: number[] = [];
  const cuts = candidateCuts(text);
  let pos = 0; // tokens placed
  let c = 0; // index into cuts of the next run's start
  let minD = 1; // the next run ends at cuts[minD] or later
  const placed: { c: number; tokens: number }[] = [];
  // With a limit, one run past it is placed too: a run that fails there may merge the last one
  // (backtracking), and the spans must be those of a pass without a limit.
  let beyond = 0;
  while ((pos < limit || (limit < tokens.length && beyond < 1)) && c < cuts.length - 1) {
    if (pos >= limit) beyond++;
    // Grow a run from cuts[c] until its tokens are exactly the next tokens of the whole.
    let found: { run: Run; toks: string[]; next: number } | undefined;
    for (let d = minD; d < Math.min(cuts.length, c + 1 + MAX_PIECES_PER_RUN); d++) {
      const start = cuts[c]!;
      const end = cuts[d]!;
      const last = d === cuts.length - 1;
      const drops = start > 0 && text.charCodeAt(start) === 0x20 ? [false, true] : [false];
      for (const dropSpace of drops) {
        const run = { start, end, dropSpace };
        const toks = tokenize(runText(text, run, end));
        if (matches(tokens, pos, toks, last)) {
          found = { run, toks, next: d };
          break;
        }
      }
      if (found !== undefined) break;
    }
    if (found === undefined) {
      const prev = placed.pop();
      if (prev !== undefined && c - prev.c < MAX_PIECES_PER_RUN) {
        // No run starts here: the previous run grows past this cut instead.
        pos -= prev.tokens;
        ends.length = pos;
        minD = c + 1;
        c = prev.c;
        continue;
      }
      // No run reproduces the whole text's tokens: the rest by prefixes of the whole text
      // (the same rule, slower).
      const all = endsInRun(tokenize, text, { start: 0, end: text.length, dropSpace: false }, [
        ...tokens.slice(0, limit),
      ]);
      for (let i = pos; i < limit; i++) ends.push(all[i]!);
      break;
    }
    for (const e of endsInRun(tokenize, text, found.run, found.toks)) ends.push(e);
    placed.push({ c, tokens: found.toks.length });
    pos += found.toks.length;
    c = found.next;
    minD = c + 1;
  }
  // Tokens the runs did not place (a tokenizer that emits tokens for nothing): at the text's end.
  while (ends.length < limit) ends.push(ends.at(-1) ?? 0);
  ends.length = limit;
  const starts = startsOf(text, tokens, ends);
  return { starts, ends };
}

/** The text a run tokenizes, up to `upTo` (an offset into the whole text). */
function runText(text: string, run: Run, upTo: number): string {
  return text.slice(run.dropSpace ? run.start + 1 : run.start, upTo);
}

/**
 * Whether `toks` are the next tokens of the whole at `pos` (and, for the text's last run, all of
 * the rest of them).
 */
function matches(tokens: readonly string[], pos: number, toks: string[], last: boolean): boolean {
  if (pos + toks.length > tokens.length) return false;
  if (last && pos + toks.length !== tokens.length) return false;
  if (toks.length === 0 && !last) return false;
  for (let i = 0; i < toks.length; i++) if (tokens[pos + i] !== toks[i]) return false;
  return true;
}

/**
 * Positions a run may start or end at: 0, the text's length, the start of every whitespace run
 * after a non-space, and in long stretches every change of character class (letter, digit,
 * other), never inside a surrogate pair.
 */
function candidateCuts(text: string): number[] {
  const out: number[] = [0];
  let last = 0;
  let prevSpace = true;
  let prevClass = -1;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c >= 0xdc00 && c <= 0xdfff) continue;
    const cp = text.codePointAt(i)!;
    const space = isSpace(cp);
    const cls = classOf(cp);
    if (i > 0) {
      if (space && !prevSpace) {
        out.push(i);
        last = i;
      } else if (i - last >= LONG_PIECE && cls !== prevClass && !space) {
        out.push(i);
        last = i;
      } else if (i - last >= LONG_PIECE && !space && !isMark(cp)) {
        out.push(i);
        last = i;
      }
    }
    prevSpace = space;
    prevClass = cls;
  }
  if (text.length > 0) out.push(text.length);
  return out;
}

/**
 * The end of each token of a run: the shortest prefix of the run whose tokenization starts with
 * the run's tokens up to it (bisection, one prefix tokenization answering every token), widened
 * over combining marks that add no token, never inside a surrogate pair.
 */
function endsInRun(tokenize: TokenizeFn, text: string, run: Run, toks: string[]): number[] {
  const n = toks.length;
  const ends = new Array<number>(n);
  if (n === 0) return ends;
  const base = run.dropSpace ? run.start + 1 : run.start;
  const memo = new Map<number, number>();
  /** How many of the run's tokens `text.slice(base, at)` starts with. */
  const common = (at: number): number => {
    let m = memo.get(at);
    if (m === undefined) {
      const t = tokenize(text.slice(base, at));
      m = 0;
      while (m < t.length && m < n && t[m] === toks[m]) m++;
      memo.set(at, m);
    }
    return m;
  };
  if (run.end - base <= SCAN_RUN) {
    // The rule exactly: the first prefix length at which each token is in place.
    let placed = 0;
    for (let at = base + 1; at <= run.end && placed < n; at++) {
      if (at < run.end && isHigh(text.charCodeAt(at - 1)) && isLow(text.charCodeAt(at))) continue;
      const m = common(at);
      while (placed < m) ends[placed++] = at;
    }
    while (placed < n) ends[placed++] = run.end;
  } else {
    // Tokens lo..hi-1 end in (a, b]: bisection (a prefix tokenization answers every token).
    const solve = (a: number, b: number, lo: number, hi: number): void => {
      if (lo >= hi) return;
      if (b - a <= 1) {
        for (let i = lo; i < hi; i++) ends[i] = b;
        return;
      }
      const mid = (a + b) >>> 1;
      const m = Math.min(hi, Math.max(lo, common(mid)));
      solve(a, mid, lo, m);
      solve(mid, b, m, hi);
    };
    solve(base, run.end, 0, n);
  }
  for (let i = 0; i < n; i++) {
    let e = ends[i]!;
    if (i > 0 && e < ends[i - 1]!) e = ends[i - 1]!;
    const lowAt = text.charCodeAt(e);
    if (e < run.end && lowAt >= 0xdc00 && lowAt <= 0xdfff) e++;
    // Characters right after the token that add no token of their own (a combining mark an
    // uncased model strips, the rest of a word one [UNK] stands for) belong to it.
    while (e < run.end && (i === n - 1 || ends[i + 1]! > e)) {
      const cp = text.codePointAt(e)!;
      if (isSpace(cp)) break;
      const w = cp > 0xffff ? 2 : 1;
      if (common(e + w) !== i + 1 || tokenize(text.slice(base, e + w)).length !== i + 1) break;
      e += w;
    }
    ends[i] = e;
  }
  return ends;
}

/** Starts: the previous token's end, less whitespace the piece does not stand for. */
function startsOf(text: string, tokens: readonly string[], ends: readonly number[]): number[] {
  const starts = new Array<number>(ends.length);
  for (let i = 0; i < ends.length; i++) {
    const end = ends[i]!;
    if (i > 0 && end === ends[i - 1]!) {
      starts[i] = starts[i - 1]!;
      continue;
    }
    let s = i === 0 ? 0 : ends[i - 1]!;
    if (!standsForSpace(tokens[i]!)) {
      while (s < end && isSpace(text.codePointAt(s)!)) s++;
    }
    starts[i] = s;
  }
  return starts;
}

/**
 * Whether a token piece begins with whitespace or a whitespace marker: SentencePiece's `▁`,
 * byte-level BPE's `Ġ` `Ċ` `ĉ` `č` (space, newline, tab, carriage return) or a byte-fallback
 * whitespace byte.
 */
function standsForSpace(piece: string): boolean {
  const c = piece.codePointAt(0);
  if (c === undefined) return false;
  if (isSpace(c) || c === 0x2581 || c === 0x120 || c === 0x10a || c === 0x109 || c === 0x10d) {
    return true;
  }
  return /^<0x(09|0A|0D|20)>$/i.test(piece);
}

function isSpace(cp: number): boolean {
  return cp === 0x20 || cp === 0x09 || cp === 0x0a || cp === 0x0d || cp === 0x0b ||
    cp === 0x0c || cp === 0xa0 || cp === 0x3000 || (cp >= 0x2000 && cp <= 0x200a) ||
    cp === 0x85 || cp === 0x2028 || cp === 0x2029 || cp === 0x1680 || cp === 0x202f ||
    cp === 0x205f;
}

const MARK = /\p{M}/u;
const LETTER = /\p{L}/u;
const DIGIT = /\p{N}/u;

function isMark(cp: number): boolean {
  return MARK.test(String.fromCodePoint(cp));
}

function classOf(cp: number): number {
  const s = String.fromCodePoint(cp);
  return LETTER.test(s) || MARK.test(s) ? 0 : DIGIT.test(s) ? 1 : 2;
}

/**
 * UTF-16 offsets as Unicode code point offsets.
 *
 * @param text The text the offsets index.
 * @param offsets UTF-16 offsets (at most `text.length`).
 * @returns The same positions in code points.
 */
export function toCodePointOffsets(text: string, offsets: readonly number[]): number[] {
  return mapOffsets(text, offsets, (i) => {
    const c = text.charCodeAt(i);
    return isLow(c) && i > 0 && isHigh(text.charCodeAt(i - 1)) ? 0 : 1;
  });
}

/**
 * UTF-16 offsets as UTF-8 byte offsets (TEI's `start`/`stop` are byte offsets).
 *
 * @param text The text the offsets index.
 * @param offsets UTF-16 offsets (at most `text.length`).
 * @returns The same positions in UTF-8 bytes.
 */
export function toUtf8Offsets(text: string, offsets: readonly number[]): number[] {
  return mapOffsets(text, offsets, (i) => {
    const c = text.charCodeAt(i);
    if (c < 0x80) return 1;
    if (c < 0x800) return 2;
    if (isHigh(c) && isLow(text.charCodeAt(i + 1))) return 2;
    if (isLow(c) && i > 0 && isHigh(text.charCodeAt(i - 1))) return 2;
    return 3;
  });
}

function mapOffsets(
  text: string,
  offsets: readonly number[],
  width: (i: number) => number,
): number[] {
  if (offsets.length === 0) return [];
  const max = Math.min(text.length, Math.max(...offsets));
  const at = new Float64Array(max + 1);
  for (let i = 0; i < max; i++) at[i + 1] = at[i]! + width(i);
  return offsets.map((o) => at[Math.min(o, max)]!);
}

function isHigh(c: number): boolean {
  return c >= 0xd800 && c <= 0xdbff;
}

function isLow(c: number): boolean {
  return c >= 0xdc00 && c <= 0xdfff;
}
