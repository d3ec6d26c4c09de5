/**
 * Whether a text is in a checked GBNF grammar's language: the module's own judge of what a
 * grammar-constrained generation produced (field report F18), independent of llama.cpp's.
 *
 * {@link matchGbnf} runs an Earley recogniser (Earley 1970, with Aycock and Horspool's handling
 * of rules that match the empty string) over the grammar's rule table as llama.cpp builds it
 * (`CheckedGrammar.table`: repetitions rewritten exactly as llama.cpp rewrites them), so it
 * judges the same language llama.cpp constrains generation with, over the generable characters
 * (U+0001…U+D7FF, U+E000…U+10FFFF: a text holding NUL is never in a language).
 *
 * **Bound.** Earley recognition is never exponential: at worst its work grows with the cube of
 * the text, for highly ambiguous grammars (`S ::= "a" S S |`). With Leo's optimisation for right
 * recursion (how llama.cpp writes every repetition) it is linear for the grammars used in
 * practice: JSON takes about 20 steps per character, a repetition or a right-recursive list a
 * handful. It is also capped: every item processed (its character test included), every
 * alternative predicted, every item a completion advances and every link of a Leo chain counts
 * one step, and after `maxSteps` steps (default {@link DEFAULT_MATCH_STEPS}) the verdict is
 * `undecided`, within one item's work of the cap. Memory is proportional to the items created, so bounded by the same cap. A grammar
 * accepted by `checkGbnf` has at most `MAX_ELEMENTS` elements, so one step costs a bounded
 * amount of work (a class test is a binary search over its ranges); reaching the cap took 30 to
 * 100 ms on the 2-core development machine.
 *
 * @module
 */

import type { CheckedGrammar, GbnfRuleTable } from "./gbnf.ts";
import { nullableRules } from "./_gbnf_analysis.ts";
import { type CharRanges, TERMINAL } from "./_gbnf_rules.ts";

/**
 * Default cap on the steps of one {@link matchGbnf}: 2 million. JSON takes about 20 steps per
 * character, so texts of about 100 000 characters are decided within it; only grammars
 * ambiguous enough to make Earley's work grow faster than linearly reach it on generation-sized
 * texts.
 */
export const DEFAULT_MATCH_STEPS = 2_000_000;

/**
 * The verdict of {@link matchGbnf}:
 *
 * - `accepted`: the text is in the language.
 * - `prefix`: it is not, but it is the start of a text that is.
 * - `rejected`: it is not even the start of one; `viable` says where it went wrong.
 * - `undecided`: the step cap was reached first.
 */
export type GbnfVerdict = "accepted" | "prefix" | "rejected" | "undecided";

/** What {@link matchGbnf} found. */
export interface GbnfMatch {
  verdict: GbnfVerdict;
  /**
   * True when some longer text (the text plus at least one character) is in the language:
   * always for `prefix`; for `accepted`, false means the grammar admits nothing more (llama.cpp
   * then allows only the end of generation). False for `rejected` and `undecided`.
   */
  extensible: boolean;
  /**
   * Code points of the longest start of the text that is the start of a text in the language:
   * the whole text unless `rejected` (for `undecided`, how far the matcher got).
   */
  viable: number;
  /** Steps taken (see the module doc). */
  steps: number;
}

/** Options of {@link matchGbnf}. */
export interface MatchGbnfOptions {
  /**
   * Most steps before the verdict is `undecided`.
   *
   * @default {DEFAULT_MATCH_STEPS}
   */
  maxSteps?: number;
}

/**
 * Decides whether `text` is in the language of a grammar that passed `checkGbnf`.
 *
 * @param grammar What `checkGbnf` returned.
 * @param text The text, well-formed (a lone surrogate is no character and is rejected).
 * @param options The step cap.
 * @returns The verdict, whether the language holds longer texts, how much of the text is viable.
 * @throws {RangeError} when `maxSteps` is not a positive integer.
 *
 * @example Sentences, prefixes and the rest
 * ```ts
 * import assert from "node:assert/strict";
 * import { checkGbnf } from "./gbnf.ts";
 * import { matchGbnf } from "./gbnf_match.ts";
 *
 * const g = checkGbnf('root ::= "yes" | "no" | "no!"');
 * assert.equal(matchGbnf(g, "yes").verdict, "accepted");
 * assert.equal(matchGbnf(g, "yes").extensible, false);
 * assert.equal(matchGbnf(g, "no").extensible, true);
 * assert.equal(matchGbnf(g, "ye").verdict, "prefix");
 * assert.deepEqual(
 *   { ...matchGbnf(g, "yet"), steps: 0 },
 *   { verdict: "rejected", extensible: false, viable: 2, steps: 0 },
 * );
 * ```
 */
export function matchGbnf(
  grammar: CheckedGrammar,
  text: string,
  options: MatchGbnfOptions = {},
): GbnfMatch {
  const maxSteps = options.maxSteps ?? DEFAULT_MATCH_STEPS;
  if (!Number.isSafeInteger(maxSteps) || maxSteps < 1) {
    throw new RangeError(
      `Cannot match grammar as 'maxSteps' must be a positive integer: ${maxSteps}`,
    );
  }
  return recognise(compiled(grammar.table), codePoints(text), maxSteps);
}

// ---------------------------------------------------------------------------------------------
// The table, flattened

/** Dotted positions: alternative `a` of length L owns positions `altStart[a]` … `altStart[a]+L`. */
interface Compiled {
  root: number;
  /** Alternatives of rule r: `ruleAlts[r]` … `ruleAlts[r+1]-1`. */
  ruleAlts: Int32Array;
  /** Position of the dot before the first symbol of each alternative. */
  altStart: Int32Array;
  /** Symbol after the dot: {@link END}, a rule id (≥ 0), or `-2 - classIndex` for a terminal. */
  next: Int32Array;
  /** Rule of the alternative each position belongs to. */
  ruleOf: Int32Array;
  classes: CharRanges[];
  nullable: Uint8Array;
  /** Steps the flattening took (counted into the first match). */
  steps: number;
}

const END = -1;

const cache = new WeakMap<GbnfRuleTable, Compiled>();

function compiled(table: GbnfRuleTable): Compiled {
  const hit = cache.get(table);
  if (hit !== undefined) return { ...hit, steps: 0 };
  const work = { steps: 0 };
  const rules = table.rules;
  let nAlts = 0;
  let nPos = 0;
  for (const rule of rules) {
    work.steps++;
    nAlts += rule.alts.length;
    for (const alt of rule.alts) nPos += alt.length + 1;
  }
  const ruleAlts = new Int32Array(rules.length + 1);
  const altStart = new Int32Array(nAlts);
  const next = new Int32Array(nPos);
  const ruleOf = new Int32Array(nPos);
  const classes: CharRanges[] = [];
  const classIds = new Map<CharRanges, number>();
  let a = 0;
  let p = 0;
  for (let r = 0; r < rules.length; r++) {
    ruleAlts[r] = a;
    for (const alt of rules[r]!.alts) {
      altStart[a++] = p;
      for (const sym of alt) {
        work.steps++;
        ruleOf[p] = r;
        if (sym.rule === TERMINAL) {
          let id = classIds.get(sym.chars!);
          if (id === undefined) {
            id = classes.length;
            classes.push(sym.chars!);
            classIds.set(sym.chars!, id);
          }
          next[p++] = -2 - id;
        } else {
          next[p++] = sym.rule;
        }
      }
      ruleOf[p] = r;
      next[p++] = END;
    }
  }
  ruleAlts[rules.length] = a;
  const nullable = nullableRules(rules, work);
  const c: Compiled = {
    root: table.root,
    ruleAlts,
    altStart,
    next,
    ruleOf,
    classes,
    nullable,
    steps: work.steps,
  };
  cache.set(table, c);
  return c;
}

function codePoints(text: string): Uint32Array {
  const out = new Uint32Array(text.length);
  let n = 0;
  for (let i = 0; i < text.length; i++) {
    const cp = text.codePointAt(i)!;
    if (cp > 0xffff) i++;
    out[n++] = cp;
  }
  return out.subarray(0, n);
}

/** True when `cp` lies in one of the sorted ranges (binary search). */
function inRanges(ranges: CharRanges, cp: number): boolean {
  let lo = 0;
  let hi = ranges.length / 2 - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >>> 1;
    if (cp < ranges[2 * mid]!) hi = mid - 1;
    else if (cp > ranges[2 * mid + 1]!) lo = mid + 1;
    else return true;
  }
  return false;
}

// ---------------------------------------------------------------------------------------------
// Earley

/** Leo's memo per set: rule → the topmost item of its deterministic completion chain, or none. */
type LeoMemo = Map<number, { p: number; o: number } | null>;

/**
 * The Earley sets, one per position in the text. An item is a dotted position and its origin
 * set; items are kept flat (`[pos, origin, pos, origin, …]`). Each set keeps, per rule, the items
 * waiting for that rule (their next symbol), which completions in later sets advance.
 *
 * Right recursion (every repetition, as llama.cpp rewrites it: `S* ` is `S' ::= S S' |`) would
 * make plain Earley walk back through every repetition matched so far at each character, which
 * is quadratic. Leo's optimisation (Leo 1991) removes that: when the only item of set j waiting
 * for rule A has A as its last symbol, completing A from j completes that item too, and so on up
 * a deterministic chain; the chain's topmost item is memoised per (set, rule) and added at once.
 * The chain stops at a completed `root` from set 0, so acceptance is never skipped over.
 */
function recognise(g: Compiled, text: Uint32Array, maxSteps: number): GbnfMatch {
  const n = text.length;
  let steps = g.steps;
  const width = n + 1;
  /** waiting[i]: rule → items of set i whose next symbol is that rule. */
  const waiting: Map<number, number[]>[] = [];
  const leo: LeoMemo[] = [];
  const predicted = new Int32Array(g.ruleAlts.length - 1).fill(-1);
  let items: number[] = [];
  let seen = new Set<number>();
  const add = (list: number[], set: Set<number>, p: number, o: number) => {
    const key = p * width + o;
    if (set.has(key)) return;
    set.add(key);
    list.push(p, o);
  };
  /** The topmost item of the deterministic chain completing rule A from set j, or null. */
  const leoTop = (j: number, rule: number): { p: number; o: number } | null => {
    const memo = leo[j]!;
    if (memo.has(rule)) return memo.get(rule)!;
    // Walk up the chain, then memoise every link on the way back down.
    const path: [number, number][] = [];
    let top: { p: number; o: number } | null = null;
    let set = j;
    let r = rule;
    for (;;) {
      steps++;
      const known = leo[set]!.get(r);
      if (known !== undefined) {
        top = known ?? top;
        break;
      }
      const list = waiting[set]!.get(r);
      if (list === undefined || list.length !== 2 || g.next[list[0]! + 1] !== END) break;
      path.push([set, r]);
      leo[set]!.set(r, null); // in progress: a cycle would end here
      top = { p: list[0]! + 1, o: list[1]! };
      r = g.ruleOf[top.p]!;
      set = top.o;
      if (r === g.root && set === 0) break;
    }
    for (const [s, rr] of path) leo[s]!.set(rr, top);
    if (!memo.has(rule)) memo.set(rule, top);
    return top;
  };
  predicted[g.root] = 0;
  for (let a = g.ruleAlts[g.root]!; a < g.ruleAlts[g.root + 1]!; a++) {
    add(items, seen, g.altStart[a]!, 0);
  }
  for (let i = 0;; i++) {
    if (items.length === 0) {
      return { verdict: "rejected", extensible: false, viable: i - 1, steps };
    }
    const waits = new Map<number, number[]>();
    waiting.push(waits);
    leo.push(new Map());
    const nextItems: number[] = [];
    const nextSeen = new Set<number>();
    const cp = i < n ? text[i]! : -1;
    let accepted = false;
    let extensible = false;
    for (let k = 0; k < items.length; k += 2) {
      if (++steps > maxSteps) return { verdict: "undecided", extensible: false, viable: i, steps };
      const p = items[k]!;
      const o = items[k + 1]!;
      const sym = g.next[p]!;
      if (sym === END) {
        const rule = g.ruleOf[p]!;
        if (o === i) continue; // an empty match: its waiting items were advanced when predicted
        if (rule === g.root && o === 0) accepted = true;
        const top = leoTop(o, rule);
        if (top !== null) {
          add(items, seen, top.p, top.o);
          continue;
        }
        const parents = waiting[o]!.get(rule);
        if (parents === undefined) continue;
        steps += parents.length / 2;
        for (let w = 0; w < parents.length; w += 2) {
          add(items, seen, parents[w]! + 1, parents[w + 1]!);
        }
      } else if (sym >= 0) {
        let list = waits.get(sym);
        if (list === undefined) waits.set(sym, list = []);
        list.push(p, o);
        if (predicted[sym] !== i) {
          predicted[sym] = i;
          const from = g.ruleAlts[sym]!;
          const to = g.ruleAlts[sym + 1]!;
          steps += to - from;
          for (let a = from; a < to; a++) add(items, seen, g.altStart[a]!, i);
        }
        if (g.nullable[sym] === 1) add(items, seen, p + 1, o);
      } else {
        extensible = true;
        if (cp >= 0 && inRanges(g.classes[-2 - sym]!, cp)) add(nextItems, nextSeen, p + 1, o);
      }
    }
    if (i === n) {
      // An empty root (`root ::=`, or one whose every symbol is nullable) completes at once.
      if (!accepted && n === 0) accepted = g.nullable[g.root] === 1;
      if (accepted) return { verdict: "accepted", extensible, viable: n, steps };
      return { verdict: "prefix", extensible, viable: n, steps };
    }
    items = nextItems;
    seen = nextSeen;
  }
}
