/**
 * Analyses of a parsed GBNF rule table (`_gbnf_rules.ts`): which rules match the empty string,
 * left recursion, and satisfiability (rules that match no text at all). Each is a worklist
 * fixpoint or an iterative graph walk, linear in the table and never recursive, counting its
 * work into the checker's step counter.
 *
 * Internal: the public API is `gbnf.ts`.
 *
 * @module
 */

import type { SynapseError } from "../contract/errors.ts";
import { type GbnfErrorReason, type Rule, type Sym, TERMINAL, type Work } from "./_gbnf_rules.ts";

/** Builds the refusal of a finished parse (the parser's `#fail`). */
export type Fail = (
  reason: GbnfErrorReason,
  what: string,
  at: number,
  rule?: string,
) => SynapseError;

/**
 * Which rules can match the empty string: a worklist fixpoint over the alternatives that hold
 * no terminal. Linear in the table.
 *
 * @returns `nullable[r]` for every rule id.
 */
export function nullableRules(rules: readonly Rule[], work: Work): Uint8Array {
  const n = rules.length;
  const nullable = new Uint8Array(n);
  const pending: number[] = []; // per alternative: symbols not yet known nullable
  const altRule: number[] = [];
  const uses: number[][] = Array.from({ length: n }, () => []); // rule -> alternatives using it
  const queue: number[] = [];
  for (let r = 0; r < n; r++) {
    work.steps++;
    for (const alt of rules[r]!.alts) {
      work.steps += 1 + 2 * alt.length; // the terminal scan, then the uses
      if (alt.some((sym) => sym.rule === TERMINAL)) continue;
      const a = pending.length;
      pending.push(alt.length);
      altRule.push(r);
      for (const sym of alt) uses[sym.rule]!.push(a);
      if (alt.length === 0 && nullable[r] === 0) {
        nullable[r] = 1;
        queue.push(r);
      }
    }
  }
  while (queue.length > 0) {
    work.steps++;
    for (const a of uses[queue.pop()!]!) {
      work.steps++;
      if (--pending[a]! === 0 && nullable[altRule[a]!] === 0) {
        nullable[altRule[a]!] = 1;
        queue.push(altRule[a]!);
      }
    }
  }
  return nullable;
}

/**
 * Refuses left recursion: a rule that reaches itself through the leftmost symbols of its
 * alternatives, skipping symbols that can match the empty string. The cycle search is an
 * iterative DFS.
 *
 * @throws {SynapseError} `left_recursion`, at the reference that closes the cycle.
 */
export function checkLeftRecursion(rules: readonly Rule[], fail: Fail, work: Work): void {
  const n = rules.length;
  const nullable = nullableRules(rules, work);
  const edges: Sym[][] = rules.map((rule) => {
    work.steps++;
    const out: Sym[] = [];
    for (const alt of rule.alts) {
      work.steps++;
      for (const sym of alt) {
        work.steps++;
        if (sym.rule === TERMINAL) break;
        out.push(sym);
        if (nullable[sym.rule] === 0) break;
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
        throw leftRecursion(rules, stack.slice(from).map((frame) => frame.rule), edge, fail, work);
      } else if (state[edge.rule] === 0) {
        state[edge.rule] = 1;
        stack.push({ rule: edge.rule, next: 0 });
      }
    }
  }
}

function leftRecursion(
  rules: readonly Rule[],
  cycle: number[],
  closing: Sym,
  fail: Fail,
  work: Work,
): SynapseError {
  const target = rules[closing.rule]!;
  if (target.kind === "repeat" && cycle.length === 1) {
    return fail(
      "left_recursion",
      `rule '${target.owner}' repeats an item that can match the empty string`,
      closing.at,
      target.owner,
    );
  }
  const names: string[] = [];
  work.steps += cycle.length + 1;
  for (const r of [...cycle, closing.rule]) {
    const owner = rules[r]!.owner;
    if (names[names.length - 1] !== owner) names.push(owner);
  }
  if (names.length === 1) names.push(names[0]!);
  if (names.length > 8) names.splice(4, names.length - 8, "...");
  return fail(
    "left_recursion",
    `rule '${target.owner}' is left-recursive (${names.join(" -> ")})`,
    closing.at,
    target.owner,
  );
}

/**
 * Refuses rules that match no text at all ("unproductive" rules): a rule is productive when one
 * of its alternatives holds only terminals (every class matches some character: the parser
 * refused those that match none) and productive rules; the fixpoint of that is computed with a
 * worklist. Every rule is checked, referenced from `root` or not: like an undefined reference
 * or left recursion anywhere, a rule that can never match is always a mistake in the grammar,
 * and checking all of them makes the verdict independent of which rules `root` happens to use.
 *
 * The refusal names the cause rather than every rule that depends on it: among the rules that
 * match nothing, it takes a strongly connected component with no edge to another such
 * component (every alternative of its rules needs a rule of the same component: a recursion
 * without an end, which always exists), found by Tarjan's algorithm from `root`, or from the
 * earliest rule defined when `root` itself is fine. It reports the user rule of that component
 * defined first, at its definition.
 *
 * @throws {SynapseError} `unsatisfiable_rule` naming the rule, at its definition.
 */
export function checkSatisfiable(rules: readonly Rule[], fail: Fail, work: Work): void {
  const n = rules.length;
  const productive = new Uint8Array(n);
  const pending: number[] = []; // per alternative: references to rules not yet productive
  const altRule: number[] = [];
  const uses: number[][] = Array.from({ length: n }, () => []); // rule -> alternatives using it
  const queue: number[] = [];
  for (let r = 0; r < n; r++) {
    work.steps++;
    for (const alt of rules[r]!.alts) {
      work.steps += 1 + alt.length;
      const a = pending.length;
      let refs = 0;
      for (const sym of alt) {
        if (sym.rule === TERMINAL) continue;
        refs++;
        uses[sym.rule]!.push(a);
      }
      pending.push(refs);
      altRule.push(r);
      if (refs === 0 && productive[r] === 0) {
        productive[r] = 1;
        queue.push(r);
      }
    }
  }
  while (queue.length > 0) {
    work.steps++;
    for (const a of uses[queue.pop()!]!) {
      work.steps++;
      if (--pending[a]! === 0 && productive[altRule[a]!] === 0) {
        productive[altRule[a]!] = 1;
        queue.push(altRule[a]!);
      }
    }
  }
  let start = -1;
  for (let r = 0; r < n; r++) {
    work.steps++;
    if (productive[r] === 1) continue;
    const isRoot = rules[r]!.kind === "user" && rules[r]!.owner === "root";
    if (isRoot || start === -1 || rules[r]!.at < rules[start]!.at) start = r;
    if (isRoot) break;
  }
  if (start === -1) return;
  const component = sinkComponent(rules, productive, start, work);
  const defined = new Map<string, number>(); // user rule -> its definition
  for (const rule of rules) {
    work.steps++;
    if (rule.kind === "user") defined.set(rule.owner, rule.at);
  }
  const owners = new Map<string, number>();
  for (const r of component) {
    work.steps++;
    const owner = rules[r]!.owner;
    owners.set(owner, defined.get(owner)!);
  }
  const names = [...owners.keys()].sort((a, b) => owners.get(a)! - owners.get(b)!);
  const first = names[0]!;
  const needs = names.length === 1
    ? `'${first}' again`
    : `one of ${names.slice(0, 8).map((name) => `'${name}'`).join(", ")}${
      names.length > 8 ? ", ..." : ""
    } again`;
  throw fail(
    "unsatisfiable_rule",
    `rule '${first}' can match no text: every alternative needs ${needs}, so it never ends`,
    owners.get(first)!,
    first,
  );
}

/**
 * The first strongly connected component Tarjan's algorithm completes, walking from `start`
 * along references between unproductive rules: a component no edge leaves.
 */
function sinkComponent(
  rules: readonly Rule[],
  productive: Uint8Array,
  start: number,
  work: Work,
): number[] {
  const n = rules.length;
  const index = new Int32Array(n).fill(-1);
  const low = new Int32Array(n);
  const onStack = new Uint8Array(n);
  const stack: number[] = [];
  let counter = 0;
  /** DFS frames: the rule, its alternative and symbol cursor. */
  const frames: { rule: number; alt: number; sym: number }[] = [];
  const enter = (r: number) => {
    index[r] = low[r] = counter++;
    stack.push(r);
    onStack[r] = 1;
    frames.push({ rule: r, alt: 0, sym: 0 });
  };
  enter(start);
  while (frames.length > 0) {
    work.steps++;
    const top = frames[frames.length - 1]!;
    const alts = rules[top.rule]!.alts;
    let next = -1;
    while (top.alt < alts.length) {
      work.steps++;
      const alt = alts[top.alt]!;
      if (top.sym >= alt.length) {
        top.alt++;
        top.sym = 0;
        continue;
      }
      const sym = alt[top.sym++]!;
      if (sym.rule === TERMINAL || productive[sym.rule] === 1) continue;
      if (index[sym.rule] === -1) {
        next = sym.rule;
        break;
      }
      if (onStack[sym.rule] === 1) low[top.rule] = Math.min(low[top.rule]!, index[sym.rule]!);
    }
    if (next !== -1) {
      enter(next);
      continue;
    }
    frames.pop();
    const parent = frames[frames.length - 1];
    if (low[top.rule] === index[top.rule]) {
      const component: number[] = [];
      for (;;) {
        work.steps++;
        const r = stack.pop()!;
        onStack[r] = 0;
        component.push(r);
        if (r === top.rule) return component;
      }
    }
    if (parent !== undefined) low[parent.rule] = Math.min(low[parent.rule]!, low[top.rule]!);
  }
  throw new Error("unreachable: Tarjan's walk ended without a component");
}
