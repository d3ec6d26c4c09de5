/**
 * The rule table a GBNF grammar compiles to, shared by the parser (`_gbnf_parser.ts`), the
 * analyses (`_gbnf_analysis.ts`) and the matcher (`gbnf_match.ts`); the limits and the refusal
 * helpers they all use. Internal: the public API is `gbnf.ts` and `gbnf_match.ts`.
 *
 * The table is llama.cpp's own (`llama_grammar_parser`): one rule per rule written in the source,
 * one per group `( ... )`, and the rules llama.cpp synthesises when it rewrites repetitions
 * (`S{2,4}` is `S S S'`, `S' ::= S S'' |`, `S'' ::= S |`), so a text matches the table exactly
 * when it matches the grammar llama.cpp constrains generation with.
 *
 * @module
 */

import { SynapseError } from "../contract/errors.ts";

/**
 * Why `checkGbnf` refused a grammar; the stable `details.reason` of its error.
 *
 * - `syntax`: not GBNF; the message says what was expected and what was found.
 * - `bad_escape`: an unknown escape (`\q`), too few hex digits, a code point above U+10FFFF, or
 *   a surrogate code point (U+D800…U+DFFF).
 * - `bad_range`: a reversed class range such as `[z-a]`.
 * - `empty_class`: a character class that matches no character: `[]` and `[^]` (llama.cpp reads
 *   them as "nothing", which is never what was meant), and classes whose members cover nothing
 *   that can be generated, such as `[^\x00-\U0010FFFF]` (every code point negated) or `[\x00]`
 *   (NUL is never generated).
 * - `bad_repetition`: `{m,n}` with n < m, a bound above {@link MAX_REPEAT}, or nested
 *   repetitions whose rewrite reaches llama.cpp's own limit (2000 rule copies).
 * - `undefined_rule`: a reference to a rule that is never defined (`details.rule` names it).
 * - `duplicate_rule`: a rule defined twice (llama.cpp would silently keep the last one).
 * - `missing_root`: no rule named `root`.
 * - `left_recursion`: a rule that can reach itself without consuming a character, directly,
 *   through other rules, through nullable prefixes, or by repeating an item that can match the
 *   empty string (`("a"?)*`).
 * - `unsatisfiable_rule`: a rule that matches no text at all, because every way through it
 *   needs itself again without end (`x ::= "a" x`, no alternative that stops), directly or
 *   through other rules; `details.rule` names the rule the recursion is in.
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
  | "unsatisfiable_rule"
  | "empty_grammar"
  | "too_large"
  | "too_deep"
  | "invalid_utf8"
  | "nul"
  | "unsupported";

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
export const LLAMA_REPETITION_THRESHOLD = 2000;

/** Work counter of the checker and the matcher: one step per iteration of any of their loops. */
export interface Work {
  steps: number;
}

/**
 * The characters a terminal matches: sorted, disjoint, non-adjacent inclusive code point ranges
 * `[lo0, hi0, lo1, hi1, …]`, never empty, inside {@link GENERABLE}.
 */
export type CharRanges = Uint32Array;

/**
 * The code points a generation can contain: U+0001…U+D7FF and U+E000…U+10FFFF. llama.cpp reads
 * token text as a C string, so it never generates NUL; surrogates and code points above
 * U+10FFFF are not characters (llama.cpp can be driven to emit their bytes, which are not UTF-8
 * and are in no grammar's language here).
 */
export const GENERABLE: readonly (readonly [number, number])[] = [[0x1, 0xd7ff], [
  0xe000,
  0x10ffff,
]];

/** One symbol of an alternative: a rule reference (`rule` ≥ 0), or a terminal (`chars`). */
export interface Sym {
  /** Rule id, or {@link TERMINAL}. */
  rule: number;
  /** UTF-16 index in the source, for error positions. */
  at: number;
  /** What a terminal matches; undefined for a rule reference. */
  chars?: CharRanges;
}

/** `Sym.rule` of a terminal. */
export const TERMINAL = -1;

/** A rule: written in the source ("user"), or synthesised like llama.cpp does for `( )` and repetitions. */
export interface Rule {
  /** The user rule it belongs to (its own name for user rules). */
  owner: string;
  kind: "user" | "group" | "repeat";
  alts: Sym[][];
  defined: boolean;
  /** UTF-16 index of the definition (a user rule's name, a group's '(', a repetition operator). */
  at: number;
}

/** A grammar's rule table. */
export interface RuleTable {
  /** Rules by id. */
  rules: Rule[];
  /** Id of `root`. */
  root: number;
}

/** The refusal of `source` at UTF-16 index `at`; computing its position costs `at` steps. */
export function refusal(
  source: string,
  reason: GbnfErrorReason,
  what: string,
  at: number,
  rule: string | undefined,
  work: Work,
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

/** `U+XXXX`. */
export function hex(cp: number): string {
  return `U+${cp.toString(16).toUpperCase().padStart(4, "0")}`;
}
