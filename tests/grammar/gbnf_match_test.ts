/**
 * matchGbnf(): golden verdicts, exact repetition counts, the generable characters, the step
 * cap, and a differential check against llama.cpp's own grammar sampler (node-llama-cpp 3.21.1,
 * fed the text byte by byte through the fixture model's byte tokens) on fuzzed grammars and
 * texts (field report F18).
 */
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { checkGbnf } from "../../lib/grammar/gbnf.ts";
import { DEFAULT_MATCH_STEPS, type GbnfMatch, matchGbnf } from "../../lib/grammar/gbnf_match.ts";
import { type Rule, TERMINAL } from "../../lib/grammar/_gbnf_rules.ts";
import { SynapseError } from "../../lib/contract/errors.ts";
import { JSON_GBNF } from "./_json_gbnf.ts";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const GGUF = `${ROOT}fixtures/models/synapse-tiny-llama/model.gguf`;

/** [grammar, text, verdict, extensible, viable code points]. */
type Golden = [string, string, GbnfMatch["verdict"], boolean, number];

const GOLDEN: Golden[] = [
  ['root ::= "yes" | "no"', "yes", "accepted", false, 3],
  ['root ::= "yes" | "no"', "", "prefix", true, 0],
  ['root ::= "yes" | "no"', "ye", "prefix", true, 2],
  ['root ::= "yes" | "no"', "yes ", "rejected", false, 3],
  ['root ::= "yes" | "no"', "nope", "rejected", false, 2],
  ['root ::= "yes" | "no"', "x", "rejected", false, 0],
  ["root ::=", "", "accepted", false, 0],
  ["root ::=", "a", "rejected", false, 0],
  ['root ::= "a"?', "", "accepted", true, 0],
  ['root ::= "a"?', "a", "accepted", false, 1],
  ['root ::= a b\na ::= "x"*\nb ::= "y"*', "", "accepted", true, 0],
  ['root ::= a b\na ::= "x"*\nb ::= "y"*', "xxyy", "accepted", true, 4],
  ['root ::= a b\na ::= "x"*\nb ::= "y"*', "xyx", "rejected", false, 2],
  // Right recursion, nesting, empty alternatives.
  ['root ::= | "(" root ")" root', "(()())()", "accepted", true, 8],
  ['root ::= | "(" root ")" root', "(()", "prefix", true, 3],
  ['root ::= | "(" root ")" root', "())", "rejected", false, 2],
  // A nullable prefix before a terminal.
  ['root ::= ws "x" root | "y"\nws ::= [ ]*', "  x xy", "accepted", false, 6],
  ['root ::= ws "x" root | "y"\nws ::= [ ]*', "  x x y", "rejected", false, 6],
  // JSON.
  [JSON_GBNF, '{"a": [1, -2.5e3, true, null, "x\\u00e9"]}', "accepted", true, 41],
  [JSON_GBNF, '{"a": [1, 2', "prefix", true, 11],
  [JSON_GBNF, '{"a": 01}', "rejected", false, 7],
  [JSON_GBNF, '{"é😀": "日本"}\n  ', "accepted", true, 15],
  [JSON_GBNF, '{"a": "\u0001"}', "rejected", false, 7],
];

Deno.test("matchGbnf() decides sentences, prefixes and rejections", () => {
  for (const [grammar, text, verdict, extensible, viable] of GOLDEN) {
    const m = matchGbnf(checkGbnf(grammar), text);
    assert.deepEqual(
      { verdict: m.verdict, extensible: m.extensible, viable: m.viable },
      { verdict, extensible, viable },
      `${JSON.stringify(grammar.slice(0, 40))} on ${JSON.stringify(text)}`,
    );
    assert.ok(m.steps > 0);
  }
});

Deno.test("matchGbnf() counts repetitions exactly as llama.cpp rewrites them", () => {
  const cases: [string, number, number][] = [
    // [repetition, fewest, most (Infinity: unbounded)]
    ['"a"{3}', 3, 3],
    ['"a"{2,4}', 2, 4],
    ['"a"{0,2}', 0, 2],
    ['"a"{2,}', 2, Infinity],
    ['"a"{0}', 0, 0],
    ['"a"+', 1, Infinity],
    ['"a"*', 0, Infinity],
    ['"a"?', 0, 1],
    ['("a"{2}){2}', 4, 4],
    ['"a"{1,2}{2}', 2, 4],
    ["[a]{1000}", 1000, 1000],
  ];
  for (const [rep, min, max] of cases) {
    const g = checkGbnf(`root ::= "<" ${rep} ">"`);
    for (let k = 0; k <= Math.min(max, 1000) + 2; k++) {
      if (k > 8 && k < min - 2) continue;
      const m = matchGbnf(g, `<${"a".repeat(k)}>`);
      const want = k >= min && k <= max ? "accepted" : "rejected";
      assert.equal(m.verdict, want, `${rep} with ${k}`);
      // Without the closing '>', a count that may still grow (or close) is a prefix.
      const open = matchGbnf(g, `<${"a".repeat(k)}`);
      assert.equal(open.verdict, k <= max ? "prefix" : "rejected", `${rep} open with ${k}`);
    }
  }
  // Sequences repeat as a whole: "ab"{2} is "abab".
  const ab = checkGbnf('root ::= "ab"{2} "c"');
  assert.equal(matchGbnf(ab, "ababc").verdict, "accepted");
  assert.equal(matchGbnf(ab, "abbc").verdict, "rejected");
  assert.equal(matchGbnf(ab, "abc").viable, 2);
});

Deno.test("matchGbnf() matches only characters a generation can hold", () => {
  const any = checkGbnf("root ::= .");
  for (const c of ["a", "\u00e9", "\u{1F600}", "\uD7FF", "\uE000", "\u{10FFFF}", "\u0001"]) {
    assert.equal(matchGbnf(any, c).verdict, "accepted", JSON.stringify(c));
  }
  // NUL is never generated; a lone surrogate is no character.
  for (const c of ["\0", "\uD800", "\uDFFF"]) {
    assert.equal(matchGbnf(any, c).verdict, "rejected", JSON.stringify(c));
  }
  const notA = checkGbnf("root ::= [^a]");
  assert.equal(matchGbnf(notA, "b").verdict, "accepted");
  assert.equal(matchGbnf(notA, "\u{1F600}").verdict, "accepted");
  assert.equal(matchGbnf(notA, "a").verdict, "rejected");
  assert.equal(matchGbnf(notA, "\0").verdict, "rejected");
  // A class that keeps NUL keeps only the rest.
  const control = checkGbnf("root ::= [\\x00-\\x1F]+");
  assert.equal(matchGbnf(control, "\t\n\u001f").verdict, "accepted");
  assert.equal(matchGbnf(control, "\t\0").verdict, "rejected");
  // Astral code points are one character each.
  const two = checkGbnf("root ::= [\\U0001F600-\\U0001F64F]{2}");
  assert.equal(matchGbnf(two, "\u{1F600}\u{1F64F}").verdict, "accepted");
  assert.equal(matchGbnf(two, "\u{1F600}").verdict, "prefix");
  assert.equal(matchGbnf(two, "\u{1F600}\u{1F650}").viable, 1);
});

Deno.test("matchGbnf() throws RangeError for an invalid maxSteps", () => {
  const g = checkGbnf('root ::= "a"');
  for (const bad of [0, -1, 1.5, NaN, Infinity]) {
    assert.throws(() => matchGbnf(g, "a", { maxSteps: bad }), RangeError);
  }
});

Deno.test("matchGbnf() is bounded: linear on JSON, capped on ambiguous grammars", () => {
  // JSON costs a few tens of steps per character, however long the text.
  const json = checkGbnf(JSON_GBNF);
  const doc = JSON.stringify({
    items: Array.from({ length: 200 }, (_, i) => ({ id: i, name: `n${i}`, ok: i % 2 === 0 })),
  });
  const m = matchGbnf(json, doc);
  assert.equal(m.verdict, "accepted");
  assert.ok(doc.length > 5000, `${doc.length}`);
  assert.ok(m.steps < 60 * doc.length, `${m.steps} steps for ${doc.length} characters`);
  const half = matchGbnf(json, doc.slice(0, doc.length / 2));
  assert.ok(half.steps < m.steps * 0.6, `${half.steps} vs ${m.steps}`);

  // Right recursion (written, or a repetition as llama.cpp rewrites it) is linear too: twice
  // the text, about twice the steps (Leo's optimisation), not four times.
  const linear: [string, (k: number) => string][] = [
    ['root ::= ws "."\nws ::= | " " ws', (k) => " ".repeat(k) + "."],
    ['root ::= items\nitems ::= "x" ("," items)?', (k) => "x,".repeat(k) + "x"],
    ["root ::= [a-z]*", (k) => "q".repeat(k)],
    ["root ::= [a-z]{0,1000}", (k) => "q".repeat(k / 4)],
    ['root ::= ("a" | "b" "c")+ "."', (k) => "abc".repeat(k / 3) + "."],
  ];
  for (const [source, text] of linear) {
    const g = checkGbnf(source);
    matchGbnf(g, ""); // the first match also counts flattening the table
    const one = matchGbnf(g, text(2000));
    const two = matchGbnf(g, text(4000));
    assert.equal(one.verdict, "accepted", source);
    assert.equal(two.verdict, "accepted", source);
    const growth = two.steps / one.steps;
    assert.ok(growth > 1.5 && growth < 2.5, `${source}: x2 text, x${growth.toFixed(2)} steps`);
    assert.ok(two.steps < 20 * text(4000).length, `${source}: ${two.steps} steps`);
  }

  // S ::= "a" S S | ε has Catalan-many parses of "aaa…": Earley's cost grows with the cube of
  // the text, never exponentially, and the cap ends it.
  const ambiguous = checkGbnf('root ::= "a" root root |');
  const small = matchGbnf(ambiguous, "a".repeat(40));
  assert.equal(small.verdict, "accepted");
  const bigger = matchGbnf(ambiguous, "a".repeat(80));
  assert.equal(bigger.verdict, "accepted");
  const growth = bigger.steps / small.steps;
  assert.ok(growth > 3 && growth < 9, `x2 text: x${growth.toFixed(2)} steps`);
  const huge = matchGbnf(ambiguous, "a".repeat(5000));
  assert.equal(huge.verdict, "undecided");
  assert.equal(huge.extensible, false);
  // The cap holds to within one item's work (a completion walks one waiting list).
  assert.ok(huge.steps > DEFAULT_MATCH_STEPS, `${huge.steps}`);
  assert.ok(huge.steps <= DEFAULT_MATCH_STEPS + 5000, `${huge.steps}`);
  assert.ok(huge.viable > 0 && huge.viable < 5000, `${huge.viable}`);
  const capped = matchGbnf(ambiguous, "a".repeat(80), { maxSteps: 1000 });
  assert.equal(capped.verdict, "undecided");
  assert.ok(capped.steps <= 1000 + 80, `${capped.steps}`);
  // With room, the same text is decided.
  assert.equal(
    matchGbnf(ambiguous, "a".repeat(80), { maxSteps: bigger.steps }).verdict,
    "accepted",
  );
});

// ---------------------------------------------------------------------------------------------
// Fuzzing, and llama.cpp as the oracle

/** mulberry32: a small seeded PRNG in [0, 1). */
function prng(seed: number): () => number {
  return function next() {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Characters texts are made of: those the fuzzed grammars use, and a few they do not. */
const ALPHABET = ["a", "b", "c", "x", "0", "7", " ", "\n", "{", "é", "日", "😀", "-", "q"];

/** Random rule sets that checkGbnf() accepts, each with sentences sampled from its table. */
function fuzzGrammars(seed: number, count: number): { source: string; texts: string[] }[] {
  const rnd = prng(seed);
  const int = (n: number) => Math.floor(rnd() * n);
  const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)]!;
  const names = ["root", "a", "b", "c"];
  // Kept small and not too ambiguous: llama.cpp's grammar sampler keeps one parse stack per
  // way of reading the text so far, and nested ambiguous repetitions make those multiply.
  const item = (depth: number): string => {
    if (depth === 0 && rnd() < 0.2) {
      return `(${alternates(depth + 1)})` + pick(["", "", "?", "*", "{0,2}"]);
    }
    const base = pick([
      () => pick(['"a"', '"bc"', '"x"', '"\\u00e9"', '"{"', '"日😀"', '" "']),
      () => pick(["[a-c]", "[^a]", "[0-9]", "[ \\n]", "[x-z0-9é]", "[^\\x01-\\x7F]"]),
      () => pick(names),
      () => ".",
    ])();
    return base + pick(["", "", "", "*", "+", "?", "{2}", "{0,3}", "{1,}", "{0}", "{1,2}"]);
  };
  const alternates = (depth: number): string =>
    Array.from(
      { length: 1 + int(3) },
      () => Array.from({ length: int(4) }, () => item(depth)).join(" "),
    ).join(" | ");
  const out: { source: string; texts: string[] }[] = [];
  while (out.length < count) {
    const n = 1 + int(names.length);
    const source = names.slice(0, n).map((name) => `${name} ::= ${alternates(0)}`).join("\n");
    let checked;
    try {
      checked = checkGbnf(source);
    } catch (err) {
      if (err instanceof SynapseError) continue;
      throw err;
    }
    const texts: string[] = [];
    for (let k = 0; k < 6; k++) {
      const s = sample(checked.table.rules, checked.table.root, rnd);
      if (s === undefined || [...s].length > 16) continue;
      texts.push(s);
      if (s.length > 0) {
        const cps = [...s];
        const cut = int(cps.length);
        texts.push(cps.slice(0, cut).join("")); // a prefix
        cps[cut] = pick(ALPHABET); // one character changed
        texts.push(cps.join(""));
        texts.push(s + pick(ALPHABET)); // one character more
      }
    }
    for (let k = 0; k < 4; k++) {
      texts.push(Array.from({ length: int(6) }, () => pick(ALPHABET)).join(""));
    }
    out.push({ source, texts });
  }
  return out;
}

/**
 * A random sentence of the table's language: alternatives picked at random while the text is
 * short, then the cheapest ones (fewest characters to finish); undefined when it grows too long.
 */
function sample(rules: readonly Rule[], root: number, rnd: () => number): string | undefined {
  // Cheapest length of each rule, a Bellman-Ford style fixpoint.
  const cost = new Array<number>(rules.length).fill(Infinity);
  const altCost = (alt: Rule["alts"][number]) =>
    alt.reduce((sum, sym) => sum + (sym.rule === TERMINAL ? 1 : cost[sym.rule]!), 0);
  for (let changed = true; changed;) {
    changed = false;
    rules.forEach((rule, r) => {
      const best = Math.min(...rule.alts.map(altCost));
      if (best < cost[r]!) {
        cost[r] = best;
        changed = true;
      }
    });
  }
  let out = "";
  let budget = 400;
  const todo: (number | { chars: Uint32Array })[] = [root];
  while (todo.length > 0) {
    if (--budget < 0) return undefined;
    const top = todo.pop()!;
    if (typeof top === "number") {
      const alts = rules[top]!.alts;
      const alt = out.length < 12 && rnd() < 0.7
        ? alts[Math.floor(rnd() * alts.length)]!
        : alts.reduce((a, b) => (altCost(b) < altCost(a) ? b : a));
      for (let i = alt.length - 1; i >= 0; i--) {
        const sym = alt[i]!;
        todo.push(sym.rule === TERMINAL ? { chars: sym.chars! } : sym.rule);
      }
    } else {
      const ranges = top.chars;
      const r = Math.floor(rnd() * (ranges.length / 2));
      const lo = ranges[2 * r]!;
      const hi = Math.min(ranges[2 * r + 1]!, lo + 40);
      out += String.fromCodePoint(lo + Math.floor(rnd() * (hi - lo + 1)));
    }
  }
  return out;
}

const FUZZ = fuzzGrammars(0xf18, 160);

Deno.test("matchGbnf() on fuzzed grammars: sampled sentences are accepted and verdicts agree with each other", () => {
  let accepted = 0, prefixes = 0, rejected = 0;
  for (const { source, texts } of FUZZ) {
    const g = checkGbnf(source);
    for (const text of texts) {
      const m = matchGbnf(g, text);
      const n = [...text].length;
      assert.notEqual(m.verdict, "undecided", source);
      if (m.verdict === "rejected") {
        rejected++;
        assert.ok(m.viable < n, `${source} on ${JSON.stringify(text)}`);
        assert.equal(m.extensible, false);
        // Its viable start is viable.
        const start = [...text].slice(0, m.viable).join("");
        assert.notEqual(matchGbnf(g, start).verdict, "rejected");
      } else {
        assert.equal(m.viable, n);
        if (m.verdict === "prefix") {
          prefixes++;
          assert.equal(m.extensible, true, `${source} on ${JSON.stringify(text)}`);
        } else accepted++;
        // Every start of a viable text is viable.
        for (let k = 0; k < n; k++) {
          const start = [...text].slice(0, k).join("");
          assert.notEqual(matchGbnf(g, start).verdict, "rejected", `${source}: ${start}`);
        }
      }
    }
  }
  assert.ok(
    accepted > 300 && prefixes > 100 && rejected > 300,
    `${accepted} ${prefixes} ${rejected}`,
  );
});

const PROBE = `
import { getLlama, LlamaGrammarEvaluationState, LlamaLogLevel } from "node-llama-cpp";
const cases = JSON.parse(await Deno.readTextFile(Deno.env.get("GBNF_PROBE_INPUT")));
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.disabled });
const model = await llama.loadModel({ modelPath: Deno.env.get("GBNF_PROBE_MODEL"), vocabOnly: true });
const sampler = llama._bindings.AddonSampler;
// The fixture's byte-fallback tokens: ids 3..258 are <0x00>..<0xFF>.
if (model.detokenize([3 + 0x41]) !== "A") throw new Error("unexpected byte token layout");
const can = (state, token) => sampler.canBeNextTokenForGrammarEvaluationState(state._state, token);
for (const { source, texts } of cases) {
  const grammar = await llama.createGrammar({ grammar: source });
  for (const text of texts) {
    const state = new LlamaGrammarEvaluationState({ model, grammar });
    let viable = 0;
    let rejected = false;
    for (const ch of text) {
      for (const byte of new TextEncoder().encode(ch)) {
        if (!can(state, 3 + byte)) {
          rejected = true;
          break;
        }
        sampler.acceptGrammarEvaluationStateToken(state._state, 3 + byte);
      }
      if (rejected) break;
      viable++;
    }
    let extensible = false;
    for (let t = 3; t < 259 && !rejected; t++) if (can(state, t)) extensible = true;
    const verdict = rejected ? "rejected" : can(state, model.tokens.eos) ? "accepted" : "prefix";
    console.log(JSON.stringify({ verdict, extensible, viable }));
  }
}
Deno.exit(0);
`;

Deno.test({
  name: "matchGbnf() agrees with llama.cpp's grammar sampler on fuzzed grammars and texts",
  sanitizeOps: false,
  sanitizeResources: false,
  fn: async () => {
    const input = await Deno.makeTempFile({ prefix: "gbnf-match-", suffix: ".json" });
    try {
      await Deno.writeTextFile(input, JSON.stringify(FUZZ));
      const out = await new Deno.Command("bash", {
        args: ["-c", 'ulimit -d 2000000 && exec "$0" eval --no-check "$1"', Deno.execPath(), PROBE],
        cwd: ROOT,
        env: { GBNF_PROBE_INPUT: input, GBNF_PROBE_MODEL: GGUF, DENO_NO_UPDATE_CHECK: "1" },
        stdout: "piped",
        stderr: "piped",
        signal: AbortSignal.timeout(300_000),
      }).output();
      const lines = new TextDecoder().decode(out.stdout).split("\n").filter((l) => l !== "");
      const total = FUZZ.reduce((n, c) => n + c.texts.length, 0);
      assert.ok(
        out.success && lines.length === total,
        `llama.cpp probe failed (code ${out.code}, ${lines.length} of ${total} answers): ${
          new TextDecoder().decode(out.stderr.slice(-2000))
        }`,
      );
      let i = 0;
      const seen = new Set<string>();
      for (const { source, texts } of FUZZ) {
        const g = checkGbnf(source);
        for (const text of texts) {
          const m = matchGbnf(g, text);
          const llama = JSON.parse(lines[i++]!);
          seen.add(llama.verdict);
          assert.deepEqual(
            { verdict: m.verdict, extensible: m.extensible, viable: m.viable },
            llama,
            `${JSON.stringify(source)} on ${JSON.stringify(text)}`,
          );
        }
      }
      assert.deepEqual([...seen].sort(), ["accepted", "prefix", "rejected"]);
    } finally {
      await Deno.remove(input);
    }
  },
});
