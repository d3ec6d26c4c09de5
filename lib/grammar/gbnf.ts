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
 * - **Classes that match no character** (field report F18): `[^\x00-\U0010FFFF]` negates every
 *   code point, `[\x00]` holds only NUL, which llama.cpp never generates. llama.cpp accepts them
 *   and then lets the model emit bytes that are not UTF-8 (a lead byte above F4, whose "code
 *   point" lies beyond U+10FFFF, satisfies the negation), and ends the generation as if the
 *   grammar had completed. Refused wherever they occur, like `[]`.
 * - **Rules that match no text** (`x ::= "a" x` with no alternative that ends): llama.cpp
 *   accepts them; when `root` needs one, generation can never complete. Refused in every rule,
 *   used by `root` or not, as undefined references and left recursion are (see
 *   `unsatisfiable_rule`). A grammar that passes therefore always matches some text: its
 *   language is not empty.
 * - **Token references `<...>`, `<[id]>`, `!<...>`**: they depend on the model's vocabulary,
 *   which the module does not have.
 * - **Size**: sources over `maxBytes`, more than `maxRules` rules, nesting deeper than
 *   {@link MAX_DEPTH}, or a repetition rewrite of more than {@link MAX_ELEMENTS} grammar
 *   elements (`"<60 KB literal>"{1000}` would make llama.cpp allocate gigabytes).
 *
 * @module
 */

import { checkEncoding, GbnfParser } from "./_gbnf_parser.ts";
import { refusal, type RuleTable, type Work } from "./_gbnf_rules.ts";

export { type GbnfErrorReason, MAX_DEPTH, MAX_ELEMENTS, MAX_REPEAT } from "./_gbnf_rules.ts";

/** A grammar that passed validation: its source and facts. */
export interface CheckedGrammar {
  /** The source, unchanged: pass exactly this to the engine. */
  source: string;
  /** Names of the defined rules, in definition order. */
  rules: string[];
  /** The start rule. */
  root: "root";
  /**
   * The rule table llama.cpp builds from the source (repetitions rewritten), for
   * `matchGbnf` (`gbnf_match.ts`). Opaque: its shape is internal.
   */
  table: GbnfRuleTable;
}

/** A checked grammar's rule table (opaque; see {@link CheckedGrammar.table}). */
export type GbnfRuleTable = Readonly<RuleTable>;

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

const DEFAULT_MAX_BYTES = 65536;
const DEFAULT_MAX_RULES = 1024;

/**
 * Checks a GBNF grammar (llama.cpp's grammar format) before any engine sees it.
 *
 * The check is synchronous and never recurses deeper than {@link MAX_DEPTH}; its work is linear
 * in the source size (n·log n for the members of a character class, which are sorted) plus the
 * repetition rewrite, bounded by {@link MAX_ELEMENTS}. It throws nothing but
 * {@link SynapseError}. Positions are 1-based; columns
 * count Unicode code points. Errors without a position in the source (`empty_grammar`,
 * `missing_root`, a source over `maxBytes`) report line 1 column 1.
 *
 * @param source The grammar text. The start rule is always `root`.
 * @param options Size limits.
 * @returns The source and the names of its rules.
 * @throws {SynapseError} code `invalid_request` (permanent, semantic) when the grammar is refused,
 *   with `details` `{field: "grammar", reason, line, column, rule?}`: `reason` is a
 *   {@link GbnfErrorReason}; `rule` names the rule the error is about (the undefined,
 *   duplicated, left-recursive or unsatisfiable rule, else the rule being parsed), when there
 *   is one.
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
 *
 * @example Refuse a class that matches nothing
 * ```ts
 * import assert from "node:assert";
 * import { checkGbnf } from "./gbnf.ts";
 *
 * assert.throws(() => checkGbnf("root ::= [^\\x00-\\U0010FFFF]"), {
 *   code: "invalid_request",
 *   details: { field: "grammar", reason: "empty_class", line: 1, column: 10, rule: "root" },
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
  work: Work,
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
  const { table, rules } = new GbnfParser(source, maxRules, work).parse();
  return { source, rules, root: "root", table };
}
