/**
 * Validation of llama.cpp GBNF grammars in the module process, before any worker sees them
 * (field report F11: an invalid grammar crashed whole servers, or silently produced unconstrained
 * output).
 *
 * {@link checkGbnf} is a recursive-descent parser that mirrors llama.cpp's own grammar parser
 * (`src/llama-grammar.cpp`, `llama_grammar_parser`) token for token — the same whitespace,
 * newline and comment rules, the same escapes, the same repetition rewrite — and adds the checks
 * llama.cpp lacks. A grammar it accepts is one llama.cpp parses *and* can initialise without
 * aborting; everything else is an `invalid_request` naming the reason, line and column.
 *
 * Grammar syntax (llama.cpp grammars/README.md):
 *
 * ```text
 * grammar     ::= rule*                       (one rule per line; '#' starts a comment)
 * rule        ::= name "::=" alternates       (name: [a-zA-Z0-9-]+)
 * alternates  ::= sequence ("|" sequence)*    (a newline may follow "::=", "|" and "(")
 * sequence    ::= (item repetition*)*
 * item        ::= "\"" char* "\""  |  "[" "^"? (char ("-" char)?)* "]"  |  "."  |  name
 *               | "(" alternates ")"          (newlines allowed anywhere inside a group)
 * repetition  ::= "*" | "+" | "?" | "{" int "}" | "{" int "," "}" | "{" int "," int "}"
 * char        ::= any character but '"' or '\' (or ']' in a class)
 *               | "\" ("n" | "r" | "t" | "\" | "\"" | "[" | "]" | "-")
 *               | "\x" hex{2} | "\u" hex{4} | "\U" hex{8}
 * ```
 *
 * What llama.cpp accepts but this module refuses, and why:
 *
 * - **Hidden left recursion** (`root ::= opt root "x"` with `opt ::= "a"?`): llama.cpp only
 *   treats a rule as nullable when one alternative is literally empty, so it misses this, and its
 *   grammar initialisation then grows parse stacks until the process dies (`std::bad_alloc`).
 * - **Undefined rules** that llama.cpp's check overlooks (a reference removed by `{0}`):
 *   `a ::= root{0}` makes llama.cpp index past its rule table (SIGSEGV).
 * - **`{m,n}` with n < m**: llama.cpp computes `n - m` unsigned and loops until memory runs out.
 * - **`{m,n}` with n above 2000**: llama.cpp silently drops the upper bound (`{0,5000}` becomes
 *   `*`); we refuse any bound above {@link MAX_REPEAT}.
 * - **A later rule with a name already defined**: llama.cpp silently keeps the last one.
 * - **A NUL character**: llama.cpp reads a C string and ignores everything after it; a `\x00` in a
 *   string literal can never be generated.
 * - **Escapes above U+10FFFF, reversed ranges `[z-a]`, empty classes `[]`**: never matchable.
 * - **Token references `<...>`, `<[id]>`, `!<...>`**: they depend on the model's vocabulary,
 *   which the module does not have.
 * - **Size**: sources over `maxBytes`, more than `maxRules` rules, nesting deeper than
 *   {@link MAX_DEPTH}, or a repetition rewrite of more than {@link MAX_ELEMENTS} grammar
 *   elements (`"<60 KB literal>"{1000}` would make llama.cpp allocate gigabytes).
 *
 * @module
 */

import { SynapseError } from "../../contract/errors.ts";

/**
 * Why {@link checkGbnf} refused a grammar; the stable `details.reason` of its error.
 *
 * - `syntax`: not GBNF; the message says what was expected and what was found.
 * - `bad_escape`: an unknown escape (`\q`), too few hex digits, a code point above U+10FFFF, or
 *   a surrogate code point (U+D800…U+DFFF).
 * - `bad_range`: a reversed class range such as `[z-a]`.
 * - `empty_class`: `[]` or `[^]` (llama.cpp reads it as "nothing", which is never what was meant).
 * - `bad_repetition`: `{m,n}` with n < m, a bound above {@link MAX_REPEAT}, or nested
 *   repetitions whose rewrite reaches llama.cpp's own limit (2000 rule copies).
 * - `undefined_rule`: a reference to a rule that is never defined (`details.rule` names it).
 * - `duplicate_rule`: a rule defined twice (llama.cpp would silently keep the last one).
 * - `missing_root`: no rule named `root`.
 * - `left_recursion`: a rule that can reach itself without consuming a character, directly,
 *   through other rules, through nullable prefixes, or by repeating an item that can match the
 *   empty string (`("a"?)*`).
 * - `empty_grammar`: no rules at all (empty, or only whitespace and comments).
 * - `too_large`: over `maxBytes`, over `maxRules`, or over {@link MAX_ELEMENTS} once repetitions
 *   are rewritten.
 * - `too_deep`: groups nested deeper than {@link MAX_DEPTH}.
 * - `invalid_utf8`: a lone UTF-16 surrogate, which has no UTF-8 encoding.
 * - `nul`: a NUL character anywhere in the source, or `\x00` (`\u0000`) in a string literal.
 * - `unsupported`: a token reference (`<...>`, `<[id]>`, `!<...>`).
 */
export type GbnfErrorReason =
  | "syntax"
  | "bad_escape"
  | "bad_range"
  | "empty_class"
  | "bad_repetition"
  | "undefined_rule"
  | "duplicate_rule"
  | "missing_root"
  | "left_recursion"
  | "empty_grammar"
  | "too_large"
  | "too_deep"
  | "invalid_utf8"
  | "nul"
  | "unsupported";

/** A grammar that passed validation: its source and facts. */
export interface CheckedGrammar {
  /** The source, unchanged: pass exactly this to the engine. */
  source: string;
  /** Names of the defined rules, in definition order. */
  rules: string[];
  /** The start rule. */
  root: "root";
}

/** Options of {@link checkGbnf}. */
export interface CheckGbnfOptions {
  /**
   * Largest accepted source, in UTF-8 bytes.
   *
   * @default {65536}
   */
  maxBytes?: number;
  /**
   * Most rules a grammar may define (rules written in the source; the groups and repetitions
   * llama.cpp synthesises rules for are bounded by {@link MAX_ELEMENTS} instead).
   *
   * @default {1024}
   */
  maxRules?: number;
}

/** Deepest nesting of groups `( ... )`; deeper is `too_deep`. */
export const MAX_DEPTH = 128;

/**
 * Largest bound in `{m}`, `{m,}` and `{m,n}`. llama.cpp refuses m > 2000 and silently turns
 * n > 2000 into "unbounded"; 1000 keeps well clear of both.
 */
export const MAX_REPEAT = 1000;

/**
 * Most grammar elements (characters, class members, rule references, alternative ends) that
 * llama.cpp's rule table may hold after it rewrites repetitions (`S{3}` becomes `S S S`): about
 * 800 KB of rule table. Beyond that is `too_large`.
 */
export const MAX_ELEMENTS = 100_000;

/**
 * llama.cpp's `MAX_REPETITION_THRESHOLD`: it refuses a repetition when the rules the repeated
 * item synthesised times the repetition count reach this. Mirrored so that a grammar accepted
 * here is never refused there.
 */
const LLAMA_REPETITION_THRESHOLD = 2000;

const DEFAULT_MAX_BYTES = 65536;
const DEFAULT_MAX_RULES = 1024;

/**
 * Checks a GBNF grammar (llama.cpp's grammar format) before any engine sees it.
 *
 * The check is synchronous, linear in the source size and never recurses deeper than
 * {@link MAX_DEPTH}; it throws nothing but {@link SynapseError}. Positions are 1-based; columns
 * count Unicode code points. Errors without a position in the source (`empty_grammar`,
 * `missing_root`, a source over `maxBytes`) report line 1 column 1.
 *
 * @param source The grammar text. The start rule is always `root`.
 * @param options Size limits.
 * @returns The source and the names of its rules.
 * @throws {SynapseError} code `invalid_request` (permanent, semantic) when the grammar is refused,
 *   with `details` `{field: "grammar", reason, line, column, rule?}`: `reason` is a
 *   {@link GbnfErrorReason}; `rule` names the rule the error is about (the undefined,
 *   duplicated or left-recursive rule, else the rule being parsed), when there is one.
 * @throws {RangeError} when `maxBytes` or `maxRules` is not a positive integer.
 *
 * @example Accept a grammar
 * ```ts
 * import assert from "node:assert";
 * import { checkGbnf } from "./gbnf.ts";
 *
 * const checked = checkGbnf('root ::= answer\nanswer ::= "yes" | "no"');
 * assert.deepStrictEqual(checked.rules, ["root", "answer"]);
 * ```
 *
 * @example Refuse an undefined rule
 * ```ts
 * import assert from "node:assert";
 * import { checkGbnf } from "./gbnf.ts";
 *
 * assert.throws(() => checkGbnf("root ::= answer"), {
 *   code: "invalid_request",
 *   message: "Cannot use grammar: rule 'answer' is not defined at line 1 column 10",
 * });
 * ```
 */
export function checkGbnf(source: string, options: CheckGbnfOptions = {}): CheckedGrammar {
  return checkGbnfCountingSteps(source, { steps: 0 }, options);
}

/**
 * {@link checkGbnf}, counting the checker's work into `work.steps`: one step per iteration of any
 * of its loops (a character scanned, a symbol copied or visited, a rule or alternative walked),
 * and per character a refusal's position is computed over. The count is deterministic, so tests
 * can bound the checker's cost (no blow-up on hostile grammars) without a clock.
 *
 * Internal: for tests; not part of Synapse's API, and what counts as a step may change.
 *
 * @param source The grammar text, as for {@link checkGbnf}.
 * @param work Receives the steps taken, added to `work.steps`, also when the grammar is refused.
 * @param options Size limits, as for {@link checkGbnf}.
 * @returns What {@link checkGbnf} returns.
 * @throws {SynapseError} What {@link checkGbnf} throws.
 * @throws {RangeError} What {@link checkGbnf} throws.
 */
export function checkGbnfCountingSteps(
  source: string,
  work: { steps: number },
  options: CheckGbnfOptions = {},
): CheckedGrammar {
  const maxBytes = options.maxBytes ?? DEFAULT_MAX_BYTES;
  const maxRules = options.maxRules ?? DEFAULT_MAX_RULES;
  if (!Number.isSafeInteger(maxBytes) || maxBytes < 1) {
    throw new RangeError(
      `Cannot check grammar as 'maxBytes' must be a positive integer: ${maxBytes}`,
    );
  }
  if (!Number.isSafeInteger(maxRules) || maxRules < 1) {
    throw new RangeError(
      `Cannot check grammar as 'maxRules' must be a positive integer: ${maxRules}`,
    );
  }
  if (typeof source !== "string") {
    throw refusal("", "syntax", "expected a string", 0, undefined, work);
  }
  checkEncoding(source, maxBytes, work);
  const parser = new GbnfParser(source, maxRules, work);
  const rules = parser.parse();
  return { source, rules, root: "root" };
}

// ---------------------------------------------------------------------------------------------
// Errors and positions

/** The refusal of `source` at UTF-16 index `at`; computing its position costs `at` steps. */
function refusal(
  source: string,
  reason: GbnfErrorReason,
  what: string,
  at: number,
  rule: string | undefined,
  work: { steps: number },
): SynapseError {
  work.steps += Math.min(at, source.length);
  const { line, column } = positionOf(source, at);
  const details: Record<string, unknown> = { field: "grammar", reason, line, column };
  if (rule !== undefined) details.rule = rule;
  return new SynapseError(
    "invalid_request",
    `Cannot use grammar: ${what} at line ${line} column ${column}`,
    { details },
  );
}

/** 1-based line and column (in code points) of UTF-16 index `at`; `\r\n`, `\r`, `\n` end lines. */
function positionOf(source: string, at: number): { line: number; column: number } {
  let line = 1;
  let column = 1;
  const end = Math.min(at, source.length);
  for (let i = 0; i < end; i++) {
    const c = source.charCodeAt(i);
    if (c === 0x0a || (c === 0x0d && source.charCodeAt(i + 1) !== 0x0a)) {
      line++;
      column = 1;
    } else if (c === 0x0d || (c >= 0xdc00 && c <= 0xdfff && isHighSurrogate(source, i - 1))) {
      // '\r' of "\r\n" (the '\n' ends the line), or the second half of a surrogate pair
    } else {
      column++;
    }
  }
  return { line, column };
}

function isHighSurrogate(source: string, i: number): boolean {
  const c = source.charCodeAt(i);
  return c >= 0xd800 && c <= 0xdbff;
}

/** Refuses oversize sources, lone surrogates and NUL before parsing. */
function checkEncoding(source: string, maxBytes: number, work: { steps: number }): void {
  // Every UTF-16 code unit is at least one UTF-8 byte: no need to measure a huge string.
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

function hex(cp: number): string {
  return `U+${cp.toString(16).toUpperCase().padStart(4, "0")}`;
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

/** One symbol of an alternative: a rule reference, or `rule: -1` for a terminal. */
interface Sym {
  rule: number;
  /** UTF-16 index in the source, for error positions. */
  at: number;
}

const TERMINAL = -1;

/** A rule: written in the source ("user"), or synthesised like llama.cpp does for `( )` and repetitions. */
interface Rule {
  /** The user rule it belongs to (its own name for user rules). */
  owner: string;
  kind: "user" | "group" | "repeat";
  alts: Sym[][];
  defined: boolean;
}

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

class GbnfParser {
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
  /** Steps taken (see {@link checkGbnfCountingSteps}): one per loop iteration. */
  readonly #work: { steps: number };

  constructor(source: string, maxRules: number, work: { steps: number }) {
    this.#src = source;
    this.#maxRules = maxRules;
    this.#work = work;
  }

  parse(): string[] {
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
    this.#checkLeftRecursion();
    return this.#defined;
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
      id = this.#newRule(name, "user");
      this.#ids.set(name, id);
      this.#symbolCount++;
    }
    return id;
  }

  #newRule(owner: string, kind: Rule["kind"]): number {
    this.#rules.push({ owner, kind, alts: [], defined: kind !== "user" });
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
        this.#item(seq, this.#literal(), at);
      } else if (c === "[") {
        this.#item(seq, this.#charClass(), at);
      } else if (c === "<" || c === "!") {
        if (c === "!" && this.#peek(1) !== "<") throw this.#syntax("'<' after '!'", at + 1);
        throw this.#fail("unsupported", "token references '<...>' are not supported", at);
      } else if (isWordChar(c)) {
        const name = this.#name();
        this.#refs.push({ name, at });
        this.#item(seq, 1, at, this.#idOf(name));
      } else if (c === "(") {
        this.#group(seq, nested);
        continue;
      } else if (c === ".") {
        this.#pos++;
        this.#item(seq, 1, at);
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

  /** Appends an item of `elems` llama.cpp elements: a terminal, or a reference to `rule`. */
  #item(seq: SequenceState, elems: number, at: number, rule = TERMINAL): void {
    seq.lastStart = seq.syms.length;
    seq.lastElems = elems;
    seq.nPrev = 1;
    if (elems > 0) seq.syms.push({ rule, at });
    this.#addElements(elems, at);
  }

  /** Parses `"..."`; returns its length in characters (0 for `""`, which adds nothing). */
  #literal(): number {
    const start = this.#pos++;
    let length = 0;
    for (;;) {
      this.#work.steps++;
      const c = this.#peek();
      if (c === "") throw this.#fail("syntax", "unterminated string literal", start);
      if (c === '"') break;
      const at = this.#pos;
      if (this.#char() === 0) {
        throw this.#fail("nul", "'\\x00' in a string literal can never be generated", at);
      }
      length++;
    }
    this.#pos++;
    return length;
  }

  /** Parses `[...]` or `[^...]`; returns its number of llama.cpp elements (members and range ends). */
  #charClass(): number {
    const start = this.#pos++;
    if (this.#peek() === "^") this.#pos++;
    let elems = 0;
    while (this.#peek() !== "]") {
      this.#work.steps++;
      if (this.#peek() === "") throw this.#fail("syntax", "unterminated character class", start);
      const loAt = this.#pos;
      const lo = this.#char();
      elems++;
      if (this.#peek() === "-" && this.#peek(1) !== "]") {
        this.#pos++;
        if (this.#peek() === "") throw this.#fail("syntax", "unterminated character class", start);
        const hi = this.#char();
        elems++;
        if (hi < lo) {
          throw this.#fail(
            "bad_range",
            `range '${this.#src.slice(loAt, this.#pos)}' is reversed (${hex(lo)} > ${hex(hi)})`,
            loAt,
          );
        }
      }
    }
    this.#pos++;
    if (elems === 0) {
      throw this.#fail(
        "empty_class",
        `empty character class '${this.#src.slice(start, this.#pos)}'`,
        start,
      );
    }
    return elems;
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
    const id = this.#newRule(this.#rule!, "group");
    this.#symbolCount++;
    this.#rules[id]!.alts = this.#parseAlternates(true);
    this.#depth--;
    if (this.#peek() !== ")") throw this.#syntax("')'");
    this.#pos++;
    this.#item(seq, 1, start, id);
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
   * an unbounded `S{m,}` becomes m copies and `S' ::= S S' |`. The IR keeps one copy and one rule
   * for the chain: that is enough for nullability and left recursion; the element count is exact.
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
    if (nOpt > 0) {
      const id = this.#newRule(this.#rule!, "repeat");
      const body = unbounded ? [...prev, { rule: id, at }] : prev;
      this.#rules[id]!.alts = [body, []];
      seq.syms.push({ rule: id, at });
    }
    seq.lastElems = (min === 0 ? 0 : s * min) + (nOpt > 0 ? 1 : 0);
    seq.nPrev *= total;
  }

  /**
   * Refuses left recursion: a rule that reaches itself through the leftmost symbols of its
   * alternatives, skipping symbols that can match the empty string. Nullability is a worklist
   * fixpoint and the cycle search an iterative DFS, so neither recurses.
   */
  #checkLeftRecursion(): void {
    const rules = this.#rules;
    const n = rules.length;
    const nullable = new Array<boolean>(n).fill(false);
    const pending: number[] = []; // per alternative: symbols not yet known nullable
    const altRule: number[] = [];
    const uses: number[][] = Array.from({ length: n }, () => []); // rule -> alternatives using it
    const queue: number[] = [];
    const work = this.#work;
    for (let r = 0; r < n; r++) {
      work.steps++;
      for (const alt of rules[r]!.alts) {
        work.steps += 1 + 2 * alt.length; // the terminal scan, then the uses
        if (alt.some((sym) => sym.rule === TERMINAL)) continue;
        const a = pending.length;
        pending.push(alt.length);
        altRule.push(r);
        for (const sym of alt) uses[sym.rule]!.push(a);
        if (alt.length === 0 && !nullable[r]) {
          nullable[r] = true;
          queue.push(r);
        }
      }
    }
    while (queue.length > 0) {
      work.steps++;
      for (const a of uses[queue.pop()!]!) {
        work.steps++;
        if (--pending[a]! === 0 && !nullable[altRule[a]!]) {
          nullable[altRule[a]!] = true;
          queue.push(altRule[a]!);
        }
      }
    }
    const edges: Sym[][] = rules.map((rule) => {
      work.steps++;
      const out: Sym[] = [];
      for (const alt of rule.alts) {
        work.steps++;
        for (const sym of alt) {
          work.steps++;
          if (sym.rule === TERMINAL) break;
          out.push(sym);
          if (!nullable[sym.rule]) break;
        }
      }
      return out;
    });
    const state = new Uint8Array(n); // 0 unvisited, 1 on the stack, 2 done
    for (let root = 0; root < n; root++) {
      work.steps++;
      if (state[root] !== 0) continue;
      const stack: { rule: number; next: number }[] = [{ rule: root, next: 0 }];
      state[root] = 1;
      while (stack.length > 0) {
        work.steps++;
        const top = stack[stack.length - 1]!;
        const edge = edges[top.rule]![top.next++];
        if (edge === undefined) {
          state[top.rule] = 2;
          stack.pop();
        } else if (state[edge.rule] === 1) {
          work.steps += stack.length;
          const from = stack.findIndex((frame) => frame.rule === edge.rule);
          this.#leftRecursion(stack.slice(from).map((frame) => frame.rule), edge);
        } else if (state[edge.rule] === 0) {
          state[edge.rule] = 1;
          stack.push({ rule: edge.rule, next: 0 });
        }
      }
    }
  }

  #leftRecursion(cycle: number[], closing: Sym): never {
    const target = this.#rules[closing.rule]!;
    if (target.kind === "repeat" && cycle.length === 1) {
      throw this.#fail(
        "left_recursion",
        `rule '${target.owner}' repeats an item that can match the empty string`,
        closing.at,
        target.owner,
      );
    }
    const names: string[] = [];
    this.#work.steps += cycle.length + 1;
    for (const r of [...cycle, closing.rule]) {
      const owner = this.#rules[r]!.owner;
      if (names[names.length - 1] !== owner) names.push(owner);
    }
    if (names.length === 1) names.push(names[0]!);
    if (names.length > 8) names.splice(4, names.length - 8, "...");
    throw this.#fail(
      "left_recursion",
      `rule '${target.owner}' is left-recursive (${names.join(" -> ")})`,
      closing.at,
      target.owner,
    );
  }
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
