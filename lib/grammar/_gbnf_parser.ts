/**
 * The GBNF parser behind `checkGbnf` (`gbnf.ts`): a recursive-descent parser that mirrors
 * llama.cpp's own grammar parser (`src/llama-grammar.cpp`, `llama_grammar_parser`) token for
 * token and builds the same rule table ({@link RuleTable}), repetitions rewritten as llama.cpp
 * rewrites them. The analyses of the finished table are in `_gbnf_analysis.ts`.
 *
 * Internal: the public API is `gbnf.ts`.
 *
 * @module
 */

import type { SynapseError } from "../contract/errors.ts";
import { checkLeftRecursion, checkSatisfiable } from "./_gbnf_analysis.ts";
import {
  type CharRanges,
  type GbnfErrorReason,
  GENERABLE,
  hex,
  LLAMA_REPETITION_THRESHOLD,
  MAX_DEPTH,
  MAX_ELEMENTS,
  MAX_REPEAT,
  refusal,
  type Rule,
  type RuleTable,
  type Sym,
  TERMINAL,
  type Work,
} from "./_gbnf_rules.ts";

/** Refuses oversize sources, lone surrogates and NUL before parsing. */
export function checkEncoding(source: string, maxBytes: number, work: Work): void {
  if (source.length > maxBytes) {
    throw refusal(source, "too_large", `more than ${maxBytes} bytes`, 0, undefined, work);
  }
  let bytes = 0;
  for (let i = 0; i < source.length; i++) {
    work.steps += 1;
    const c = source.charCodeAt(i);
    if (c === 0) throw refusal(source, "nul", "NUL character", i, undefined, work);
    if (c >= 0xd800 && c <= 0xdbff) {
      const d = source.charCodeAt(i + 1);
      if (!(d >= 0xdc00 && d <= 0xdfff)) {
        throw refusal(source, "invalid_utf8", `lone surrogate ${hex(c)}`, i, undefined, work);
      }
      bytes += 4;
      i++;
    } else if (c >= 0xdc00 && c <= 0xdfff) {
      throw refusal(source, "invalid_utf8", `lone surrogate ${hex(c)}`, i, undefined, work);
    } else {
      bytes += c < 0x80 ? 1 : c < 0x800 ? 2 : 3;
    }
  }
  if (bytes > maxBytes) {
    throw refusal(source, "too_large", `${bytes} bytes exceed max ${maxBytes}`, 0, undefined, work);
  }
}

/** How a character is named in "found ..." messages. */
function describe(source: string, at: number): string {
  if (at >= source.length) return "end of input";
  const c = source.codePointAt(at) ?? 0;
  if (c === 0x0a || c === 0x0d) return "a newline";
  if (c < 0x20 || c === 0x7f) return hex(c);
  return `'${String.fromCodePoint(c)}'`;
}

// ---------------------------------------------------------------------------------------------
// Parser

/** State of the sequence being parsed (llama.cpp's `last_sym_start` and `n_prev_rules`). */
interface SequenceState {
  syms: Sym[];
  /** Index in `syms` where the last item starts. */
  lastStart: number;
  /** llama.cpp elements the last item occupies (0: no item to repeat). */
  lastElems: number;
  /** Rules the last item synthesised, times the repetitions applied to it. */
  nPrev: number;
}

/** Parses a grammar into its rule table and runs the analyses; throws its refusal. */
export class GbnfParser {
  readonly #src: string;
  readonly #maxRules: number;
  #pos = 0;
  #depth = 0;
  /** Rule id by user rule name; ids are given in first-seen order, like llama.cpp's. */
  readonly #ids = new Map<string, number>();
  readonly #rules: Rule[] = [];
  /** Defined user rules, in definition order. */
  readonly #defined: string[] = [];
  /** Every rule reference, for the undefined-rule check. */
  readonly #refs: { name: string; at: number }[] = [];
  /** llama.cpp's `symbol_ids.size()`: names seen plus rules synthesised. */
  #symbolCount = 0;
  /** Elements llama.cpp's rule table would hold. */
  #elements = 0;
  /** User rule being parsed. */
  #rule: string | undefined;
  /** Steps taken (see `checkGbnfCountingSteps`): one per loop iteration. */
  readonly #work: Work;

  constructor(source: string, maxRules: number, work: Work) {
    this.#src = source;
    this.#maxRules = maxRules;
    this.#work = work;
  }

  /**
   * Parses the whole source and checks the table: undefined rules, `root`, left recursion,
   * satisfiability, in that order.
   *
   * @returns The table, and the names of the user rules in definition order.
   * @throws {SynapseError} `invalid_request`: the first refusal.
   */
  parse(): { table: RuleTable; rules: string[] } {
    this.#space(true);
    if (this.#pos >= this.#src.length) {
      throw this.#fail("empty_grammar", "it defines no rules", 0);
    }
    while (this.#pos < this.#src.length) this.#parseRule();
    this.#rule = undefined;
    this.#work.steps += this.#refs.length;
    for (const ref of this.#refs) {
      if (!this.#rules[this.#ids.get(ref.name)!]!.defined) {
        throw this.#fail("undefined_rule", `rule '${ref.name}' is not defined`, ref.at, ref.name);
      }
    }
    if (!this.#ids.has("root")) {
      throw this.#fail("missing_root", "no rule named 'root'", 0, "root");
    }
    const fail = (reason: GbnfErrorReason, what: string, at: number, rule?: string) =>
      this.#fail(reason, what, at, rule);
    checkLeftRecursion(this.#rules, fail, this.#work);
    checkSatisfiable(this.#rules, fail, this.#work);
    return { table: { rules: this.#rules, root: this.#ids.get("root")! }, rules: this.#defined };
  }

  #fail(reason: GbnfErrorReason, what: string, at: number, rule = this.#rule): SynapseError {
    return refusal(this.#src, reason, what, at, rule, this.#work);
  }

  #syntax(expected: string, at = this.#pos): SynapseError {
    return this.#fail("syntax", `expected ${expected}, found ${describe(this.#src, at)}`, at);
  }

  #peek(offset = 0): string {
    return this.#src[this.#pos + offset] ?? "";
  }

  /** llama.cpp's `parse_space`: blanks and `#` comments, newlines too when `newlines`. */
  #space(newlines: boolean): void {
    const s = this.#src;
    for (;;) {
      this.#work.steps++;
      const c = s[this.#pos];
      if (c === " " || c === "\t" || (newlines && (c === "\r" || c === "\n"))) {
        this.#pos++;
      } else if (c === "#") {
        while (this.#pos < s.length && s[this.#pos] !== "\r" && s[this.#pos] !== "\n") {
          this.#work.steps++;
          this.#pos++;
        }
      } else {
        return;
      }
    }
  }

  #name(): string {
    const start = this.#pos;
    while (isWordChar(this.#peek())) this.#pos++;
    this.#work.steps += this.#pos - start;
    return this.#src.slice(start, this.#pos);
  }

  /** The rule id of a user rule name, registering it on first sight (llama.cpp's `get_symbol_id`). */
  #idOf(name: string): number {
    let id = this.#ids.get(name);
    if (id === undefined) {
      id = this.#newRule(name, "user", -1);
      this.#ids.set(name, id);
      this.#symbolCount++;
    }
    return id;
  }

  #newRule(owner: string, kind: Rule["kind"], at: number): number {
    this.#rules.push({ owner, kind, alts: [], defined: kind !== "user", at });
    return this.#rules.length - 1;
  }

  #addElements(n: number, at: number): void {
    this.#elements += n;
    if (this.#elements > MAX_ELEMENTS) {
      throw this.#fail(
        "too_large",
        `it expands to more than ${MAX_ELEMENTS} grammar elements`,
        at,
      );
    }
  }

  #parseRule(): void {
    this.#rule = undefined;
    const start = this.#pos;
    const name = this.#name();
    if (name === "") throw this.#syntax("a rule name");
    this.#rule = name;
    this.#space(false);
    if (this.#src.startsWith("::=", this.#pos)) {
      this.#pos += 3;
    } else {
      throw this.#syntax("'::='");
    }
    this.#space(true);
    const id = this.#idOf(name);
    const rule = this.#rules[id]!;
    if (rule.defined) throw this.#fail("duplicate_rule", `rule '${name}' is defined twice`, start);
    if (this.#defined.length >= this.#maxRules) {
      throw this.#fail("too_large", `more than ${this.#maxRules} rules`, start);
    }
    rule.defined = true;
    rule.at = start;
    this.#defined.push(name);
    rule.alts = this.#parseAlternates(false);
    const c = this.#peek();
    if (c === "\r") {
      this.#pos += this.#peek(1) === "\n" ? 2 : 1;
    } else if (c === "\n") {
      this.#pos++;
    } else if (c !== "") {
      throw this.#syntax("a newline or end of input");
    }
    this.#space(true);
  }

  #parseAlternates(nested: boolean): Sym[][] {
    const alts = [this.#parseSequence(nested)];
    while (this.#peek() === "|") {
      this.#work.steps++;
      this.#pos++;
      this.#space(true);
      alts.push(this.#parseSequence(nested));
    }
    this.#addElements(alts.length, this.#pos); // one ALT between alternatives, one END
    return alts;
  }

  #parseSequence(nested: boolean): Sym[] {
    const seq: SequenceState = { syms: [], lastStart: 0, lastElems: 0, nPrev: 1 };
    for (;;) {
      this.#work.steps++;
      const c = this.#peek();
      const at = this.#pos;
      if (c === '"') {
        const syms = this.#literal();
        this.#item(seq, syms.length, at, syms);
      } else if (c === "[") {
        const { elems, chars } = this.#charClass();
        this.#item(seq, elems, at, [{ rule: TERMINAL, at, chars }]);
      } else if (c === "<" || c === "!") {
        if (c === "!" && this.#peek(1) !== "<") throw this.#syntax("'<' after '!'", at + 1);
        throw this.#fail("unsupported", "token references '<...>' are not supported", at);
      } else if (isWordChar(c)) {
        const name = this.#name();
        this.#refs.push({ name, at });
        this.#item(seq, 1, at, [{ rule: this.#idOf(name), at }]);
      } else if (c === "(") {
        this.#group(seq, nested);
        continue;
      } else if (c === ".") {
        this.#pos++;
        this.#item(seq, 1, at, [{ rule: TERMINAL, at, chars: ANY_CHAR }]);
      } else if (c === "*" || c === "+" || c === "?") {
        this.#pos++;
        this.#space(nested);
        this.#repeat(seq, c === "+" ? 1 : 0, c === "?" ? 1 : Infinity, at, c);
        continue;
      } else if (c === "{") {
        this.#braces(seq, nested);
        continue;
      } else {
        return seq.syms;
      }
      this.#space(nested);
    }
  }

  /**
   * Appends an item of `elems` llama.cpp elements: the characters of a literal (none for `""`),
   * a character class, `.`, a rule reference, or a group's rule.
   */
  #item(seq: SequenceState, elems: number, at: number, syms: Sym[]): void {
    seq.lastStart = seq.syms.length;
    seq.lastElems = elems;
    seq.nPrev = 1;
    this.#addElements(elems, at);
    for (const sym of syms) seq.syms.push(sym);
  }

  /** Parses `"..."`; returns one terminal per character (none for `""`, which adds nothing). */
  #literal(): Sym[] {
    const start = this.#pos++;
    const syms: Sym[] = [];
    for (;;) {
      this.#work.steps++;
      const c = this.#peek();
      if (c === "") throw this.#fail("syntax", "unterminated string literal", start);
      if (c === '"') break;
      const at = this.#pos;
      const cp = this.#char();
      if (cp === 0) {
        throw this.#fail("nul", "'\\x00' in a string literal can never be generated", at);
      }
      syms.push({ rule: TERMINAL, at, chars: Uint32Array.of(cp, cp) });
    }
    this.#pos++;
    return syms;
  }

  /**
   * Parses `[...]` or `[^...]`; returns its number of llama.cpp elements (members and range ends)
   * and the characters it matches, refusing a class that matches none.
   */
  #charClass(): { elems: number; chars: CharRanges } {
    const start = this.#pos++;
    const negated = this.#peek() === "^";
    if (negated) this.#pos++;
    let elems = 0;
    const members: [number, number][] = [];
    while (this.#peek() !== "]") {
      this.#work.steps++;
      if (this.#peek() === "") throw this.#fail("syntax", "unterminated character class", start);
      const loAt = this.#pos;
      const lo = this.#char();
      let hi = lo;
      elems++;
      if (this.#peek() === "-" && this.#peek(1) !== "]") {
        this.#pos++;
        if (this.#peek() === "") throw this.#fail("syntax", "unterminated character class", start);
        hi = this.#char();
        elems++;
        if (hi < lo) {
          throw this.#fail(
            "bad_range",
            `range '${this.#src.slice(loAt, this.#pos)}' is reversed (${hex(lo)} > ${hex(hi)})`,
            loAt,
          );
        }
      }
      members.push([lo, hi]);
    }
    this.#pos++;
    if (elems === 0) {
      throw this.#fail(
        "empty_class",
        `empty character class '${this.#src.slice(start, this.#pos)}'`,
        start,
      );
    }
    const chars = classRanges(members, negated, this.#work);
    if (chars.length === 0) {
      const text = this.#src.slice(start, this.#pos);
      const shown = text.length > 40 ? `${text.slice(0, 36)}...]` : text;
      throw this.#fail(
        "empty_class",
        `character class '${shown}' matches no character (NUL, surrogates and code points ` +
          `above U+10FFFF are never generated)`,
        start,
      );
    }
    return { elems, chars };
  }

  /** llama.cpp's `parse_char`: one character or escape; returns its code point. */
  #char(): number {
    const s = this.#src;
    const at = this.#pos;
    if (s[at] !== "\\") {
      const cp = s.codePointAt(at)!;
      this.#pos += cp > 0xffff ? 2 : 1;
      return cp;
    }
    const e = s[at + 1] ?? "";
    this.#pos += 2;
    switch (e) {
      case "x":
        return this.#hex(2, at);
      case "u":
        return this.#hex(4, at);
      case "U":
        return this.#hex(8, at);
      case "t":
        return 0x09;
      case "r":
        return 0x0d;
      case "n":
        return 0x0a;
      case "\\":
      case '"':
      case "[":
      case "]":
      case "-":
        return e.charCodeAt(0);
      case "":
        throw this.#fail("syntax", "unterminated escape", at);
      default:
        throw this.#fail(
          "bad_escape",
          `unknown escape '\\${String.fromCodePoint(s.codePointAt(at + 1)!)}'`,
          at,
        );
    }
  }

  #hex(digits: number, at: number): number {
    this.#work.steps += digits;
    const text = this.#src.slice(this.#pos, this.#pos + digits);
    if (text.length !== digits || ![...text].every(isHexDigit)) {
      throw this.#fail(
        "bad_escape",
        `expected ${digits} hex digits after '${this.#src.slice(at, at + 2)}'`,
        at,
      );
    }
    this.#pos += digits;
    const cp = parseInt(text, 16);
    if (cp > 0x10ffff) {
      throw this.#fail("bad_escape", `code point 0x${text} is beyond U+10FFFF`, at);
    }
    if (cp >= 0xd800 && cp <= 0xdfff) {
      // A surrogate is no character: llama.cpp would force its 3-byte encoding (ED A0 80 …) out
      // of the model, which is not UTF-8.
      throw this.#fail("bad_escape", `code point 0x${text} is a surrogate, not a character`, at);
    }
    return cp;
  }

  #group(seq: SequenceState, nested: boolean): void {
    const start = this.#pos++;
    if (++this.#depth > MAX_DEPTH) {
      throw this.#fail("too_deep", `groups nest deeper than ${MAX_DEPTH}`, start);
    }
    this.#space(true);
    const before = this.#symbolCount;
    const id = this.#newRule(this.#rule!, "group", start);
    this.#symbolCount++;
    this.#rules[id]!.alts = this.#parseAlternates(true);
    this.#depth--;
    if (this.#peek() !== ")") throw this.#syntax("')'");
    this.#pos++;
    this.#item(seq, 1, start, [{ rule: id, at: start }]);
    seq.nPrev = Math.max(1, this.#symbolCount - before);
    this.#space(nested);
  }

  /** Parses `{m}`, `{m,}` or `{m,n}` (blanks allowed inside, as in llama.cpp). */
  #braces(seq: SequenceState, nested: boolean): void {
    const start = this.#pos++;
    this.#space(nested);
    const min = this.#int();
    this.#space(nested);
    let max = min;
    if (this.#peek() === ",") {
      this.#pos++;
      this.#space(nested);
      max = isDigit(this.#peek()) ? this.#int() : Infinity;
      this.#space(nested);
      if (this.#peek() !== "}") throw this.#syntax("'}'");
    } else if (this.#peek() !== "}") {
      throw this.#syntax("',' or '}'");
    }
    this.#pos++;
    this.#space(nested);
    const text = this.#src.slice(start, this.#pos).trimEnd();
    if (min > MAX_REPEAT || (max !== Infinity && max > MAX_REPEAT)) {
      throw this.#fail("bad_repetition", `repetition ${text} exceeds max ${MAX_REPEAT}`, start);
    }
    if (max < min) {
      throw this.#fail("bad_repetition", `repetition ${text} has max below min`, start);
    }
    this.#repeat(seq, min, max, start, text);
  }

  /** A decimal integer; anything over 7 digits reads as MAX_SAFE_INTEGER (over every limit anyway). */
  #int(): number {
    if (!isDigit(this.#peek())) throw this.#syntax("an integer");
    const start = this.#pos;
    while (isDigit(this.#peek())) this.#pos++;
    this.#work.steps += this.#pos - start;
    return this.#pos - start > 7
      ? Number.MAX_SAFE_INTEGER
      : Number(this.#src.slice(start, this.#pos));
  }

  /**
   * Applies `{min,max}` to the last item, as llama.cpp's `handle_repetitions` does:
   * `S{m,n}` becomes m copies of S followed by a chain of n-m optional rules `S' ::= S S'' |`;
   * an unbounded `S{m,}` becomes m copies and `S' ::= S S' |`. The table holds exactly those
   * copies and rules (the matcher needs them); the element count is checked before any copy is
   * made, so the copies are bounded by {@link MAX_ELEMENTS}.
   */
  #repeat(seq: SequenceState, min: number, max: number, at: number, op: string): void {
    if (seq.lastElems === 0) throw this.#fail("syntax", `expected an item before '${op}'`, at);
    const unbounded = max === Infinity;
    const total = !unbounded && max > 0 ? max : min > 0 ? min : 1;
    if (seq.nPrev * total >= LLAMA_REPETITION_THRESHOLD) {
      throw this.#fail(
        "bad_repetition",
        `nested repetition '${op}' makes ${seq.nPrev * total} rule copies, max ${
          LLAMA_REPETITION_THRESHOLD - 1
        }`,
        at,
      );
    }
    const s = seq.lastElems;
    const nOpt = unbounded ? 1 : max - min;
    const refs = nOpt === 0 ? 0 : unbounded ? 2 : nOpt; // recursive refs in the chain + the ref to it
    this.#addElements((min === 0 ? -s : (min - 1) * s) + nOpt * (s + 2) + refs, at);
    this.#symbolCount += nOpt;
    const prev = seq.syms.slice(seq.lastStart);
    this.#work.steps += prev.length;
    if (min === 0) seq.syms.length = seq.lastStart;
    for (let i = 1; i < min; i++) {
      this.#work.steps += 1 + prev.length;
      for (const sym of prev) seq.syms.push(sym);
    }
    // The chain, innermost rule first, as llama.cpp numbers them.
    let last = -1;
    for (let i = 0; i < nOpt; i++) {
      this.#work.steps += 1 + prev.length;
      const id = this.#newRule(this.#rule!, "repeat", at);
      const body = [...prev];
      if (unbounded) body.push({ rule: id, at });
      else if (i > 0) body.push({ rule: last, at });
      this.#rules[id]!.alts = [body, []];
      last = id;
    }
    if (nOpt > 0) seq.syms.push({ rule: last, at });
    seq.lastElems = (min === 0 ? 0 : s * min) + (nOpt > 0 ? 1 : 0);
    seq.nPrev *= total;
  }
}

/** The characters of `.`: every generable character. */
const ANY_CHAR: CharRanges = Uint32Array.from(GENERABLE.flat());

/**
 * The generable characters (see {@link GENERABLE}) a class matches: its members sorted and
 * merged, then intersected with the generable ranges, or taken from them when `negated`.
 * Sorting costs about m·log2(m) steps for m members.
 */
function classRanges(members: [number, number][], negated: boolean, work: Work): CharRanges {
  members.sort((a, b) => {
    work.steps++;
    return a[0] - b[0];
  });
  const merged: [number, number][] = [];
  for (const [lo, hi] of members) {
    work.steps++;
    const last = merged[merged.length - 1];
    if (last !== undefined && lo <= last[1] + 1) last[1] = Math.max(last[1], hi);
    else merged.push([lo, hi]);
  }
  // The complement of a negated class, within the code point space.
  let positive: [number, number][] = merged;
  if (negated) {
    positive = [];
    let next = 0;
    for (const [lo, hi] of merged) {
      work.steps++;
      if (lo > next) positive.push([next, lo - 1]);
      next = hi + 1;
    }
    if (next <= 0x10ffff) positive.push([next, 0x10ffff]);
  }
  const out: number[] = [];
  for (const [lo, hi] of positive) {
    for (const [glo, ghi] of GENERABLE) {
      work.steps++;
      const a = Math.max(lo, glo);
      const b = Math.min(hi, ghi);
      if (a > b) continue;
      if (out.length > 0 && out[out.length - 1] === a - 1) out[out.length - 1] = b;
      else out.push(a, b);
    }
  }
  return Uint32Array.from(out);
}

function isWordChar(c: string): boolean {
  return (c >= "a" && c <= "z") || (c >= "A" && c <= "Z") || (c >= "0" && c <= "9") || c === "-";
}

function isHexDigit(c: string): boolean {
  return isDigit(c) || (c >= "a" && c <= "f") || (c >= "A" && c <= "F");
}

function isDigit(c: string): boolean {
  return c >= "0" && c <= "9";
}
