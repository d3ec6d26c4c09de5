import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import {
  checkGbnf,
  checkGbnfCountingSteps,
  type GbnfErrorReason,
  MAX_ELEMENTS,
} from "../../lib/grammar/gbnf.ts";
import { SynapseError } from "../../lib/contract/errors.ts";
import { JSON_GBNF } from "./_json_gbnf.ts";

/** Repo root: the llama.cpp probe runs there so that `node-llama-cpp` resolves. */
const ROOT = fileURLToPath(new URL("../..", import.meta.url));

// llama.cpp grammars/arithmetic.gbnf, verbatim.
const ARITHMETIC_GBNF = String.raw`root  ::= (expr "=" ws term "\n")+
expr  ::= term ([-+*/] term)*
term  ::= ident | num | "(" ws expr ")" ws
ident ::= [a-z] [a-z0-9_]* ws
num   ::= [0-9]+ ws
ws    ::= [ \t\n]*
`;

// llama.cpp grammars/list.gbnf, verbatim.
const LIST_GBNF = String.raw`root ::= item+

# Excludes various line break characters
item ::= "- " [^\r\n\x0b\x0c\x85\u2028\u2029]+ "\n"
`;

/** Grammars checkGbnf() accepts, with the rules it reports. */
const VALID: { name: string; source: string; rules: string[] }[] = [
  { name: "yes/no", source: 'root ::= "yes" | "no"', rules: ["root"] },
  {
    name: "json.gbnf",
    source: JSON_GBNF,
    rules: ["root", "value", "object", "array", "string", "number", "ws"],
  },
  {
    name: "arithmetic.gbnf",
    source: ARITHMETIC_GBNF,
    rules: ["root", "expr", "term", "ident", "num", "ws"],
  },
  { name: "list.gbnf", source: LIST_GBNF, rules: ["root", "item"] },
  {
    name: "classes with escapes",
    source: String
      .raw`root ::= [^"\\\x7F\x00-\x1F] [\[\]\-] [a-zA-Z0-9_-]+ [\t\r\n ] [-a] [a-] [\u00e9-\U0001F600]`,
    rules: ["root"],
  },
  {
    name: "unicode literals",
    source: 'root ::= "héllo 😀 日本" [À-ÿ]+ [\\u3040-\\u309F] "\\u00e9\\U0001F600"',
    rules: ["root"],
  },
  {
    name: "repetition forms",
    source:
      'root ::= "a"{3} "b"{2,} "c"{0,5} [0-9]{1,3} ("x" | "y"){2,4} "z"{ 1 , 2 } "w"{0} "v"{1000}',
    rules: ["root"],
  },
  {
    name: "stacked repetitions",
    source: 'root ::= "a"+? ("b"{2})* ("c" "d"?)+ .{1,8}',
    rules: ["root"],
  },
  {
    name: "comments",
    source: '# leading\nroot ::= item # trailing\n\n# between\nitem ::= "a" # end',
    rules: ["root", "item"],
  },
  {
    name: "multi-line rules",
    source: 'root ::=\n  "a" |\n  "b" (\n    "c"\n    | "d"\n  ) "e"\n',
    rules: ["root"],
  },
  {
    name: "CRLF line ends",
    source: 'root ::= a |\r\n  b\r\na ::= "a"\r\nb ::= (\r\n "b"\r\n)\r\n',
    rules: ["root", "a", "b"],
  },
  {
    name: "forward references, digits and dashes in names",
    source: 'root ::= item-1 item-2 2x\nitem-1 ::= "1"\nitem-2 ::= [2]\n2x ::= "x" |',
    rules: ["root", "item-1", "item-2", "2x"],
  },
  {
    name: "right recursion and empty alternatives",
    source: 'root ::= | "(" root ")" root\nws ::= "" | " " ws',
    rules: ["root", "ws"],
  },
  {
    name: "nullable prefix before a terminal",
    source: 'root ::= ws "x" root | "y"\nws ::= [ ]*',
    rules: ["root", "ws"],
  },
  { name: "empty root", source: "root ::=", rules: ["root"] },
];

/** What llama.cpp's own parser (node-llama-cpp 3.21.1) does with a grammar checkGbnf() refuses. */
type LlamaVerdict =
  | "refuses" // llama.cpp throws: "Failed to parse grammar"
  | "accepts" // llama.cpp accepts it: checkGbnf() is stricter on purpose
  | "dies"; // llama.cpp kills the process (SIGSEGV, SIGABRT) or exhausts memory: never run here

interface Refusal {
  name: string;
  source: string;
  reason: GbnfErrorReason;
  line: number;
  column: number;
  rule?: string;
  /** A fragment of the message. */
  says: string;
  llama: LlamaVerdict;
  options?: { maxBytes?: number; maxRules?: number };
}

const INVALID: Refusal[] = [
  // syntax
  r("missing ::=", 'root = "a"', "syntax", 1, 6, "root", "expected '::=', found '='", "refuses"),
  r(
    "'|' at the start of a line",
    'root ::= "a"\n  | "b"',
    "syntax",
    2,
    3,
    undefined,
    "expected a rule name, found '|'",
    "refuses",
  ),
  r(
    "unterminated literal",
    'root ::= "abc',
    "syntax",
    1,
    10,
    "root",
    "unterminated string literal",
    "refuses",
  ),
  r(
    "unterminated class",
    "root ::= [a-z",
    "syntax",
    1,
    10,
    "root",
    "unterminated character class",
    "refuses",
  ),
  r("unclosed group", 'root ::= ("a" "b"', "syntax", 1, 18, "root", "expected ')'", "refuses"),
  r(
    "stray ')'",
    'root ::= "a" )',
    "syntax",
    1,
    14,
    "root",
    "expected a newline or end of input, found ')'",
    "refuses",
  ),
  r(
    "repetition without item",
    'root ::= *"a"',
    "syntax",
    1,
    10,
    "root",
    "expected an item before '*'",
    "refuses",
  ),
  r(
    "repetition of an empty literal",
    'root ::= ""+',
    "syntax",
    1,
    12,
    "root",
    "expected an item before '+'",
    "refuses",
  ),
  r("{,n}", 'root ::= "a"{,3}', "syntax", 1, 14, "root", "expected an integer", "refuses"),
  r(
    "unclosed braces",
    'root ::= "a"{2,3',
    "syntax",
    1,
    17,
    "root",
    "expected '}', found end of input",
    "refuses",
  ),
  r("'!' without token", 'root ::= !"a"', "syntax", 1, 11, "root", "expected '<'", "refuses"),
  r(
    "stray ']' after CRLF",
    'root ::= "a"\r\nb ::= "b" "c" ]',
    "syntax",
    2,
    15,
    "b",
    "found ']'",
    "refuses",
  ),
  // rules
  r(
    "undefined rule",
    'root ::= answer\nanswer ::= yes | "no"',
    "undefined_rule",
    2,
    12,
    "yes",
    "rule 'yes' is not defined",
    "refuses",
  ),
  r(
    "undefined rule under {0}",
    "a ::= root{0}",
    "undefined_rule",
    1,
    7,
    "root",
    "rule 'root' is not defined",
    "dies", // SIGSEGV: llama.cpp misses it and indexes past its rule table
  ),
  r(
    "missing root",
    'answer ::= "yes"',
    "missing_root",
    1,
    1,
    "root",
    "no rule named 'root'",
    "refuses",
  ),
  r("empty source", "", "empty_grammar", 1, 1, undefined, "it defines no rules", "refuses"),
  r(
    "only comments",
    "  # only a comment\n\n",
    "empty_grammar",
    1,
    1,
    undefined,
    "it defines no rules",
    "refuses",
  ),
  r(
    "duplicate rule",
    'root ::= a\na ::= "x"\na ::= "y"',
    "duplicate_rule",
    3,
    1,
    "a",
    "rule 'a' is defined twice",
    "accepts", // the last definition silently wins
  ),
  // left recursion
  r(
    "direct left recursion",
    'root ::= root "a" | "b"',
    "left_recursion",
    1,
    10,
    "root",
    "rule 'root' is left-recursive (root -> root)",
    "refuses",
  ),
  r(
    "indirect left recursion",
    'root ::= a\na ::= b "x" | "y"\nb ::= a "z"',
    "left_recursion",
    3,
    7,
    "a",
    "rule 'a' is left-recursive (a -> b -> a)",
    "refuses",
  ),
  r(
    "left recursion through an empty alternative",
    'root ::= ws root "x" | "y"\nws ::= | " "',
    "left_recursion",
    1,
    13,
    "root",
    "(root -> root)",
    "refuses",
  ),
  r(
    "left recursion through a nullable prefix",
    'root ::= opt root "x" | "y"\nopt ::= "a"?',
    "left_recursion",
    1,
    14,
    "root",
    "(root -> root)",
    "dies", // std::bad_alloc: llama.cpp misses it and grows its parse stacks forever
  ),
  r(
    "repeated empty group",
    "root ::= ()*",
    "left_recursion",
    1,
    12,
    "root",
    "rule 'root' repeats an item that can match the empty string",
    "refuses",
  ),
  r(
    "repeated nullable group",
    'root ::= ("a"?)*',
    "left_recursion",
    1,
    16,
    "root",
    "repeats an item that can match the empty string",
    "accepts",
  ),
  // characters
  r(
    "unknown escape",
    'root ::= "\\q"',
    "bad_escape",
    1,
    11,
    "root",
    "unknown escape '\\q'",
    "refuses",
  ),
  r(
    "short hex escape",
    'root ::= "\\x4"',
    "bad_escape",
    1,
    11,
    "root",
    "expected 2 hex digits after '\\x'",
    "refuses",
  ),
  r(
    "escape beyond U+10FFFF",
    "root ::= [\\U00110000]",
    "bad_escape",
    1,
    11,
    "root",
    "beyond U+10FFFF",
    "accepts",
  ),
  r(
    "surrogate escape in a literal",
    'root ::= "\\ud800"',
    "bad_escape",
    1,
    11,
    "root",
    "surrogate",
    "accepts",
  ),
  r(
    "surrogate range in a class",
    "root ::= [\\ud800-\\udfff]",
    "bad_escape",
    1,
    11,
    "root",
    "surrogate",
    "accepts",
  ),
  r(
    "reversed range",
    "root ::= [z-a]",
    "bad_range",
    1,
    11,
    "root",
    "range 'z-a' is reversed",
    "accepts",
  ),
  r(
    "empty class",
    'root ::= "a" []',
    "empty_class",
    1,
    14,
    "root",
    "empty character class '[]'",
    "accepts",
  ),
  r(
    "empty negated class",
    "root ::=\n  [^]",
    "empty_class",
    2,
    3,
    "root",
    "empty character class '[^]'",
    "accepts",
  ),
  // classes that match no character (F18)
  r(
    "every code point negated",
    "root ::= [^\\x00-\\U0010FFFF]",
    "empty_class",
    1,
    10,
    "root",
    "character class '[^\\x00-\\U0010FFFF]' matches no character",
    "accepts", // and then lets the model emit bytes that are not UTF-8
  ),
  r(
    "every generable code point negated",
    "root ::= [^\\x01-\\U0010FFFF]",
    "empty_class",
    1,
    10,
    "root",
    "matches no character",
    "accepts",
  ),
  r(
    "negation leaving only NUL and the surrogates",
    'root ::= "a" [^\\x01-\\uD7FF\\uE000-\\U0010FFFF]',
    "empty_class",
    1,
    14,
    "root",
    "matches no character",
    "accepts",
  ),
  r(
    "negation of overlapping ranges that cover everything",
    "root ::= [^\\U00010000-\\U0010FFFF\\x00-\\uFFFF a-z]",
    "empty_class",
    1,
    10,
    "root",
    "matches no character",
    "accepts",
  ),
  r(
    "only NUL",
    'root ::= "a" |\n  [\\x00]',
    "empty_class",
    2,
    3,
    "root",
    "character class '[\\x00]' matches no character",
    "accepts",
  ),
  r(
    "a long empty class is shortened in the message",
    `root ::= [^\\x00-\\U0010FFFF${"a".repeat(50)}]`,
    "empty_class",
    1,
    10,
    "root",
    `'[^\\x00-\\U0010FFFF${"a".repeat(19)}...]' matches no character`,
    "accepts",
  ),
  r(
    "an empty class in a rule root does not use",
    'root ::= "a"\nunused ::= "b" [^\\x00-\\U0010FFFF]',
    "empty_class",
    2,
    16,
    "unused",
    "matches no character",
    "accepts",
  ),
  // rules that match no text
  r(
    "root that never ends",
    'root ::= "a" root',
    "unsatisfiable_rule",
    1,
    1,
    "root",
    "rule 'root' can match no text: every alternative needs 'root' again, so it never ends",
    "accepts",
  ),
  r(
    "a rule root needs that never ends",
    'root ::= "<" x ">"\nx ::= "(" x ")" | "[" x "]"',
    "unsatisfiable_rule",
    2,
    1,
    "x",
    "rule 'x' can match no text: every alternative needs 'x' again",
    "accepts",
  ),
  r(
    "the cause, not the rules that depend on it",
    'root ::= x\nx ::= y y\ny ::= z "!"\nz ::= "(" y ")"',
    "unsatisfiable_rule",
    3,
    1,
    "y",
    "rule 'y' can match no text: every alternative needs one of 'y', 'z' again",
    "accepts",
  ),
  r(
    "mutual recursion without an end",
    'root ::= a\na ::= "x" b\nb ::= "y" a | "z" b',
    "unsatisfiable_rule",
    2,
    1,
    "a",
    "needs one of 'a', 'b' again",
    "accepts",
  ),
  r(
    "recursion through a group and a repetition",
    'root ::= ("a" root)+',
    "unsatisfiable_rule",
    1,
    1,
    "root",
    "rule 'root' can match no text",
    "accepts",
  ),
  r(
    "a rule root does not use",
    'root ::= "a"\n\n  loop ::= "b" loop',
    "unsatisfiable_rule",
    3,
    3,
    "loop",
    "rule 'loop' can match no text",
    "accepts",
  ),
  r(
    "a rule whose only reference {0} removes",
    'root ::= "a" x{0}\nx ::= "b" x',
    "unsatisfiable_rule",
    2,
    1,
    "x",
    "rule 'x' can match no text",
    "accepts",
  ),
  r(
    "left recursion without a base case is reported as left recursion",
    'root ::= root "a"',
    "left_recursion",
    1,
    10,
    "root",
    "rule 'root' is left-recursive (root -> root)",
    "refuses",
  ),
  // repetition
  r(
    "{m,n} with n < m",
    'root ::= "a"{3,1}',
    "bad_repetition",
    1,
    13,
    "root",
    "repetition {3,1} has max below min",
    "dies", // unsigned n - m: llama.cpp allocates until memory runs out
  ),
  r(
    "bound over the limit",
    'root ::= "a"{1001}',
    "bad_repetition",
    1,
    13,
    "root",
    "repetition {1001} exceeds max 1000",
    "accepts",
  ),
  r(
    "upper bound llama.cpp would drop",
    'root ::= "a"{0,5000}',
    "bad_repetition",
    1,
    13,
    "root",
    "exceeds max 1000",
    "accepts", // silently becomes "a"*
  ),
  r(
    "huge number",
    'root ::= "a"{99999999999999999999999}',
    "bad_repetition",
    1,
    13,
    "root",
    "exceeds max 1000",
    "refuses",
  ),
  r(
    "nested repetitions",
    'root ::= "x" |\n  (("a"){0,50}){40}',
    "bad_repetition",
    2,
    16,
    "root",
    "makes 2080 rule copies, max 1999",
    "refuses",
  ),
  // size, depth, encoding
  r(
    "source over maxBytes",
    `root ::= "${"a".repeat(70_000)}"`,
    "too_large",
    1,
    1,
    undefined,
    "more than 65536 bytes",
    "accepts",
  ),
  {
    ...r(
      "multi-byte source over maxBytes",
      'root ::= "ééé"',
      "too_large",
      1,
      1,
      undefined,
      "17 bytes exceed max 15",
      "accepts",
    ),
    options: { maxBytes: 15 },
  },
  {
    ...r(
      "more rules than maxRules",
      'root ::= a\na ::= b\nb ::= "b"',
      "too_large",
      3,
      1,
      "b",
      "more than 2 rules",
      "accepts",
    ),
    options: { maxRules: 2 },
  },
  r(
    "repetition expanding past the element limit",
    `root ::= "${"a".repeat(200)}"{600}`,
    "too_large",
    1,
    212,
    "root",
    "more than 100000 grammar elements",
    "accepts",
  ),
  r(
    "nesting over the depth limit",
    `root ::= ${"(".repeat(200)}"a"${")".repeat(200)}`,
    "too_deep",
    1,
    138,
    "root",
    "groups nest deeper than 128",
    "accepts", // 20000 levels abort the process
  ),
  r(
    "lone surrogate",
    'root ::= "\uD800"',
    "invalid_utf8",
    1,
    11,
    undefined,
    "lone surrogate U+D800",
    "accepts",
  ),
  r(
    "NUL in the source",
    'root ::= "a"\0 junk',
    "nul",
    1,
    13,
    undefined,
    "NUL character",
    "accepts", // llama.cpp stops reading at the NUL
  ),
  r(
    "NUL in a literal",
    'root ::= "é\\x00"',
    "nul",
    1,
    12,
    "root",
    "'\\x00' in a string literal",
    "accepts",
  ),
  r(
    "token id",
    "root ::= <[12]>",
    "unsupported",
    1,
    10,
    "root",
    "token references '<...>' are not supported",
    "accepts",
  ),
  r("token text", "root ::= <think>", "unsupported", 1, 10, "root", "token references", "refuses"),
];

function r(
  name: string,
  source: string,
  reason: GbnfErrorReason,
  line: number,
  column: number,
  rule: string | undefined,
  says: string,
  llama: LlamaVerdict,
): Refusal {
  return rule === undefined
    ? { name, source, reason, line, column, says, llama }
    : { name, source, reason, line, column, rule, says, llama };
}

const REASONS: ReadonlySet<string> = new Set<GbnfErrorReason>([
  "syntax",
  "bad_escape",
  "bad_range",
  "empty_class",
  "bad_repetition",
  "undefined_rule",
  "duplicate_rule",
  "missing_root",
  "left_recursion",
  "unsatisfiable_rule",
  "empty_grammar",
  "too_large",
  "too_deep",
  "invalid_utf8",
  "nul",
  "unsupported",
]);

/** The refusal checkGbnf() throws for `source`, or undefined when it accepts. */
function refusalOf(
  source: string,
  options?: { maxBytes?: number; maxRules?: number },
): SynapseError | undefined {
  try {
    checkGbnf(source, options);
    return undefined;
  } catch (err) {
    if (err instanceof SynapseError) return err;
    throw err;
  }
}

Deno.test("checkGbnf() accepts valid grammars and lists their rules", () => {
  for (const { name, source, rules } of VALID) {
    const checked = checkGbnf(source);
    const { table, ...facts } = checked;
    assert.deepEqual(facts, { source, rules, root: "root" }, name);
    assert.ok(table.rules.length >= rules.length, name);
  }
});

Deno.test("checkGbnf() refuses invalid grammars with reason, line and column", () => {
  for (const c of INVALID) {
    const err = refusalOf(c.source, c.options);
    assert.ok(err, `${c.name}: accepted`);
    assert.equal(err.code, "invalid_request", c.name);
    assert.equal(err.errorClass, "permanent", c.name);
    const details: Record<string, unknown> = {
      field: "grammar",
      reason: c.reason,
      line: c.line,
      column: c.column,
    };
    if (c.rule !== undefined) details.rule = c.rule;
    assert.deepEqual(err.details, details, `${c.name}: ${err.message}`);
    assert.match(err.message, /^Cannot use grammar: .+ at line \d+ column \d+$/, c.name);
    assert.ok(err.message.endsWith(` at line ${c.line} column ${c.column}`), err.message);
    assert.ok(err.message.includes(c.says), `${c.name}: ${err.message}`);
  }
});

Deno.test("checkGbnf() throws RangeError for invalid limits", () => {
  for (const bad of [0, -1, 1.5, NaN, Infinity]) {
    assert.throws(() => checkGbnf('root ::= "a"', { maxBytes: bad }), RangeError);
    assert.throws(() => checkGbnf('root ::= "a"', { maxRules: bad }), RangeError);
  }
});

Deno.test("checkGbnf() abbreviates long left-recursive cycles", () => {
  const chain = Array.from({ length: 50 }, (_, i) => `r${i} ::= r${i + 1} "x"`).join("\n");
  const err = refusalOf(`root ::= r0\n${chain}\nr50 ::= r0 | "y"`);
  assert.equal(err?.details?.reason, "left_recursion");
  assert.match(
    err.message,
    /rule 'r0' is left-recursive \(r0 -> r1 -> r2 -> r3 -> \.\.\. -> r48 -> r49 -> r50 -> r0\) at line 52 column 9$/,
  );
});

// ---------------------------------------------------------------------------------------------
// Differential checks against llama.cpp's own parser

/**
 * Runs llama.cpp's grammar parser (node-llama-cpp `createGrammar`, which calls
 * `llama_grammar_init_impl` without a model: parse, root check, left-recursion check, initial
 * stacks) on each grammar, in a child process: llama.cpp prints every refused grammar to stderr,
 * and a grammar that kills llama.cpp must not take the test runner with it. The child's data
 * segment is capped (1 GB) so that a runaway allocation fails fast instead of taking the machine;
 * a probe that outlives its timeout is killed and reported as signal "timeout".
 *
 * @returns true for each grammar llama.cpp accepted.
 */
async function llamaAccepts(grammars: string[]): Promise<boolean[]> {
  const input = await Deno.makeTempFile({ prefix: "gbnf-probe-", suffix: ".json" });
  try {
    await Deno.writeTextFile(input, JSON.stringify(grammars));
    const out = await llamaProbe(input, 120_000);
    const verdicts = out.stdout.split("\n").filter((line) => line === "1" || line === "0");
    assert.ok(
      out.success && verdicts.length === grammars.length,
      `llama.cpp probe died (code ${out.code}, signal ${out.signal}) on grammar #${verdicts.length}: ${
        JSON.stringify(grammars[verdicts.length]?.slice(0, 300))
      }\n${out.stderrTail}`,
    );
    return verdicts.map((v) => v === "1");
  } finally {
    await Deno.remove(input);
  }
}

const PROBE = `
import { getLlama, LlamaLogLevel } from "node-llama-cpp";
const grammars = JSON.parse(await Deno.readTextFile(Deno.env.get("GBNF_PROBE_INPUT")));
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.disabled });
console.log("ready");
for (const grammar of grammars) {
  let accepted = true;
  try {
    await llama.createGrammar({ grammar });
  } catch {
    accepted = false;
  }
  console.log(accepted ? "1" : "0");
}
Deno.exit(0);
`;

async function llamaProbe(
  input: string,
  timeoutMs: number,
): Promise<
  { success: boolean; code: number; signal: string | null; stdout: string; stderrTail: string }
> {
  const signal = AbortSignal.timeout(timeoutMs);
  let out: Deno.CommandOutput;
  try {
    out = await new Deno.Command("bash", {
      args: ["-c", 'ulimit -d 1000000 && exec "$0" eval --no-check "$1"', Deno.execPath(), PROBE],
      cwd: ROOT,
      env: { GBNF_PROBE_INPUT: input, DENO_NO_UPDATE_CHECK: "1" },
      stdout: "piped",
      stderr: "piped",
      signal,
    }).output();
  } catch (err) {
    if (!signal.aborted) throw err;
    return { success: false, code: -1, signal: "timeout", stdout: "", stderrTail: "" };
  }
  return {
    success: out.success,
    code: out.code,
    signal: out.signal,
    stdout: new TextDecoder().decode(out.stdout),
    stderrTail: new TextDecoder().decode(out.stderr.slice(-2000)),
  };
}

const NATIVE = { sanitizeOps: false, sanitizeResources: false };

Deno.test({
  name: "checkGbnf() agrees with llama.cpp on every grammar llama.cpp survives",
  ...NATIVE,
  fn: async () => {
    const safe = INVALID.filter((c) => c.llama !== "dies");
    const verdicts = await llamaAccepts([
      ...VALID.map((c) => c.source),
      ...safe.map((c) => c.source),
    ]);
    VALID.forEach((c, i) => assert.equal(verdicts[i], true, `llama.cpp refused valid ${c.name}`));
    safe.forEach((c, i) => {
      const accepted = verdicts[VALID.length + i];
      assert.equal(accepted, c.llama === "accepts", `llama.cpp on ${c.name}: ${accepted}`);
    });
    // The classes that mean "not a grammar" are refused by llama.cpp too.
    for (const reason of ["syntax", "undefined_rule", "missing_root", "empty_grammar"]) {
      for (const c of INVALID.filter((c) => c.reason === reason && c.llama !== "dies")) {
        assert.equal(c.llama, "refuses", c.name);
      }
    }
  },
});

Deno.test({
  name: "checkGbnf() refuses hidden left recursion that kills llama.cpp",
  ...NATIVE,
  fn: async () => {
    const grammar = INVALID.find((c) => c.name === "left recursion through a nullable prefix")!;
    assert.equal(refusalOf(grammar.source)?.details?.reason, "left_recursion");
    // llama.cpp's own check only sees a rule as nullable when an alternative is literally empty,
    // so it lets this through, and initialising the grammar grows its parse stacks until the
    // allocator fails (std::bad_alloc, SIGABRT). This is why Synapse checks first.
    const input = await Deno.makeTempFile({ prefix: "gbnf-probe-", suffix: ".json" });
    try {
      await Deno.writeTextFile(input, JSON.stringify([grammar.source]));
      const out = await llamaProbe(input, 60_000);
      assert.ok(out.signal === "timeout" || out.stdout.includes("ready"), "llama.cpp did not load");
      assert.equal(out.success, false, `llama.cpp survived: ${out.stdout}`);
      assert.ok(!/^[01]$/m.test(out.stdout), `llama.cpp answered: ${out.stdout}`);
    } finally {
      await Deno.remove(input);
    }
  },
});

// ---------------------------------------------------------------------------------------------
// Fuzzing

/** mulberry32: a small seeded PRNG in [0, 1). */
function prng(seed: number): () => number {
  return function next() {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const PIECES = [
  '"',
  "[",
  "]",
  "[^",
  "(",
  ")",
  "|",
  "*",
  "+",
  "?",
  "{",
  "}",
  ",",
  ".",
  "-",
  "\\",
  "::=",
  "#",
  "\n",
  "\r\n",
  "\r",
  " ",
  "\t",
  "root",
  "a",
  "x",
  "0",
  "9",
  "{2,1}",
  "{0,3}",
  "{1000}",
  "{0,}",
  "\\x",
  "\\x00",
  "\\u00",
  "\\U0011",
  "\\n",
  "<",
  "!",
  "\0",
  "\uD800",
  "é",
  "😀",
  "()",
  "[]",
  '""',
  '"a"',
  "[a-z]",
  "root ::= ",
  "\nroot ::= ",
  "\nx ::= ",
  "\na ::= ",
];

/** 5000 grammar strings: mutations of valid grammars, random text, random rules, hostile shapes. */
function fuzzCorpus(seed: number): string[] {
  const rnd = prng(seed);
  const int = (n: number) => Math.floor(rnd() * n);
  const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)]!;
  const bases = VALID.map((c) => c.source);
  const corpus: string[] = [];

  // 3000 mutations of valid grammars.
  for (let i = 0; i < 3000; i++) {
    let s = pick(bases);
    for (let m = 1 + int(3); m > 0; m--) {
      const at = int(s.length + 1);
      const op = int(5);
      if (op === 0) s = s.slice(0, at) + s.slice(at + 1 + int(3));
      else if (op === 1) s = s.slice(0, at) + pick(PIECES) + s.slice(at);
      else if (op === 2) s = s.slice(0, at) + pick(PIECES) + s.slice(at + 1);
      else if (op === 3) {
        s = s.slice(0, at) + s.slice(int(s.length), int(s.length) + 8) + s.slice(at);
      } else s = s.slice(0, at) + String.fromCharCode(int(0x80)) + s.slice(at + 1);
    }
    corpus.push(s);
  }

  // 800 random strings: GBNF pieces and arbitrary UTF-16 code units (NUL, lone surrogates ...).
  for (let i = 0; i < 800; i++) {
    let s = "";
    for (let n = int(120); n > 0; n--) {
      s += rnd() < 0.6 ? pick(PIECES) : String.fromCharCode(int(0x10000));
    }
    corpus.push(s);
  }

  // 900 random rule sets: many valid, others left-recursive, undefined, repeating nullables.
  const names = ["root", "a", "b", "c", "ws"];
  const item = (depth: number): string => {
    const base = pick([
      () => pick(['"a"', '"bc"', '""', '"\\n"', '"\\u00e9"', '"{"']),
      () => pick(["[a-z]", "[^\\n]", "[0-9A-F]", "[ \\t]", "[\\x00-\\x1F]"]),
      () => pick([...names, "undefined-x"]),
      () => ".",
      () => (depth < 3 ? `(${alternates(depth + 1)})` : '"g"'),
    ])();
    return base + pick(["", "", "", "*", "+", "?", "{2}", "{0,3}", "{1,}", "{0}", " "]);
  };
  const alternates = (depth: number): string =>
    Array.from(
      { length: 1 + int(3) },
      () => Array.from({ length: int(4) }, () => item(depth)).join(" "),
    )
      .join(pick([" | ", " |\n  "]));
  for (let i = 0; i < 900; i++) {
    const count = 1 + int(names.length);
    corpus.push(names.slice(0, count).map((n) => `${n} ::= ${alternates(0)}`).join("\n"));
  }

  // 300 hostile shapes.
  const hostile: (() => string)[] = [
    () => "(".repeat(10_000),
    () => `root ::= ${"(".repeat(100 + int(20_000))}"a"`,
    () => `root ::= ${"(".repeat(120 + int(16))}"a"${")".repeat(120 + int(16))}`,
    () => `root ::= ${"[".repeat(1 + int(10_000))}`,
    () => `root ::= "a"${"?".repeat(1 + int(3000))}`,
    () => `root ::= "a"${"{1,2}".repeat(1 + int(20))}`,
    () => `root ::= ("a"{0,${int(60)}}){0,${int(60)}}`,
    () => `root ::= "${"x".repeat(1 + int(400))}"{${int(1000)}}`,
    () => `root ::= "a"{${"9".repeat(1 + int(40))}}`,
    () => `root ::= ${"n".repeat(1 + int(60_000))}`,
    () => `root ::= "${"a".repeat(60_000 + int(10_000))}"`,
    () => `root ::= ${Array.from({ length: 1 + int(8000) }, () => '"a"').join(" | ")}`,
    () => {
      const n = 500 + int(1000);
      return `root ::= r0\n${
        Array.from({ length: n }, (_, i) => `r${i} ::= r${i + 1}`).join("\n")
      }\nr${n} ::= ${pick(["r0", '"z"'])}`;
    },
    () => `root ::= x\n${"# comment\n".repeat(int(5000))}x ::= "x"`,
    () => `root ::= ${"\\u".repeat(1 + int(100))}`,
  ];
  for (let i = 0; i < 300; i++) corpus.push(pick(hostile)());

  return corpus;
}

const FUZZ = fuzzCorpus(0x5eed);

/**
 * Work budget of one check, in checkGbnfCountingSteps() steps: linear in the source, plus a
 * fixed allowance for the repetition rewrite, whose copies are bounded by MAX_ELEMENTS rather
 * than by the source (`"a"+++…` copies a growing suffix at each `+`). Measured on FUZZ: at most
 * 17 steps per character (`"a"???…`), and about 6 per element (`"a"` and 440 `+`, 594k steps:
 * the rewrite copies, then nullability, left recursion and satisfiability each walk the table).
 * A blow-up (a rescan, a revisit, a quadratic walk) over a 64 KB source or 1024 rules exceeds it.
 */
function stepBudget(source: string): number {
  return 24 * (source.length + 1) + 8 * MAX_ELEMENTS;
}

Deno.test("checkGbnf() throws only invalid_request on 5000 fuzzed grammars, each within a linear step budget", () => {
  assert.equal(FUZZ.length, 5000);
  const seen = new Map<string, number>();
  for (const source of FUZZ) {
    const work = { steps: 0 };
    let reason = "accepted";
    try {
      const checked = checkGbnfCountingSteps(source, work);
      assert.equal(checked.source, source);
      assert.ok(checked.rules.includes("root"));
    } catch (err) {
      if (!(err instanceof SynapseError)) {
        throw new Error(`non-SynapseError on ${JSON.stringify(source.slice(0, 200))}`, {
          cause: err,
        });
      }
      assert.equal(err.code, "invalid_request");
      const d = err.details ?? {};
      assert.equal(d.field, "grammar");
      reason = String(d.reason);
      assert.ok(REASONS.has(reason), reason);
      assert.ok(Number.isInteger(d.line) && (d.line as number) >= 1);
      assert.ok(Number.isInteger(d.column) && (d.column as number) >= 1);
      assert.ok(err.message.endsWith(` at line ${d.line} column ${d.column}`), err.message);
    }
    assert.ok(
      work.steps <= stepBudget(source),
      `${work.steps} steps (budget ${stepBudget(source)}) on ${
        JSON.stringify(source.slice(0, 200))
      }`,
    );
    seen.set(reason, (seen.get(reason) ?? 0) + 1);
  }
  // The corpus has teeth: plenty accepted, most reasons exercised.
  assert.ok((seen.get("accepted") ?? 0) >= 500, JSON.stringify([...seen]));
  assert.ok(seen.size >= 14, JSON.stringify([...seen]));
});

Deno.test("checkGbnfCountingSteps() counts work that grows with the grammar", () => {
  const steps = (source: string): number => {
    const work = { steps: 0 };
    try {
      checkGbnfCountingSteps(source, work);
    } catch (err) {
      if (!(err instanceof SynapseError)) throw err;
    }
    return work.steps;
  };
  // Linear in the source: ten times the literal, about ten times the steps.
  const short = steps(`root ::= "${"a".repeat(1000)}"`);
  const long = steps(`root ::= "${"a".repeat(10_000)}"`);
  assert.ok(long > 9 * short && long < 11 * short, `${short} -> ${long}`);
  // The repetition rewrite's copies count too, and stay within the budget's allowance.
  const plus = `root ::= "a"${"+".repeat(440)}`;
  assert.ok(steps(plus) > 100 * plus.length, `${steps(plus)}`);
  assert.ok(steps(plus) <= stepBudget(plus));
  // Refusals count the work done before them, positions included.
  const late = `root ::= "${"a".repeat(10_000)}" \\q`;
  assert.ok(steps(late) > 2 * 10_000, `${steps(late)}`);
});

Deno.test({
  name: "checkGbnf() accepts only fuzzed grammars llama.cpp accepts",
  ...NATIVE,
  fn: async () => {
    // Only grammars llama.cpp can safely see: those checkGbnf() accepts, and those it refuses as
    // syntax, missing_root or empty_grammar (llama.cpp stops parsing before any of its crashes).
    const probe: { source: string; accepted: boolean }[] = [];
    for (const source of FUZZ) {
      const reason = refusalOf(source)?.details?.reason;
      if (reason === undefined) probe.push({ source, accepted: true });
      else if (reason === "syntax" || reason === "missing_root" || reason === "empty_grammar") {
        probe.push({ source, accepted: false });
      }
    }
    const verdicts = await llamaAccepts(probe.map((p) => p.source));
    probe.forEach((p, i) => {
      assert.equal(
        verdicts[i],
        p.accepted,
        `checkGbnf() ${p.accepted ? "accepts" : "refuses"} but llama.cpp ${
          verdicts[i] ? "accepts" : "refuses"
        }: ${JSON.stringify(p.source.slice(0, 300))}`,
      );
    });
  },
});
