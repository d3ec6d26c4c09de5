/**
 * The r2 fleet line (subc.md §6), byte for byte: the columns, the level padding, the bound
 * bracket, value quoting and escaping, message escaping, no ANSI, one line per event — and the
 * reader agrees with the writer.
 */
import assert from "node:assert/strict";
import {
  formatLogLine,
  formatLogValue,
  loggerFor,
  loggerName,
  parseLogLine,
  stripAnsi,
} from "../../lib/log/line.ts";
import { renderLogEvent } from "../../lib/log/log.ts";

const AT = Date.UTC(2026, 10, 30, 9, 48, 23, 739); // 2026-11-30T09:48:23.739Z

Deno.test("formatLogLine() golden lines: columns, level padded to 5, logger colon, bracket only when bound", () => {
  const cases: [Parameters<typeof formatLogLine>[0], string][] = [
    [
      {
        at: AT,
        level: "info",
        logger: "synapse.http",
        message: "request",
        fields: { method: "POST", path: "/v1/embeddings", items: 2, ok: true, total_ms: 16.427 },
      },
      "2026-11-30T09:48:23.739Z INFO  synapse.http: request method=POST path=/v1/embeddings items=2 ok=true total_ms=16.427",
    ],
    [
      {
        at: new Date(AT),
        level: "warn",
        logger: "synapse.worker",
        message: "worker crashed",
        bound: { session: "claude:abc-1", root: "/home/me/my project" },
        fields: { reason: "exit", code: 134 },
      },
      '2026-11-30T09:48:23.739Z WARN  synapse.worker: [session=claude:abc-1 root="/home/me/my project"] worker crashed reason=exit code=134',
    ],
    [
      { at: AT, level: "error", logger: "synapse", message: "", fields: { a: "" } },
      '2026-11-30T09:48:23.739Z ERROR synapse: a=""',
    ],
    [
      { at: AT, level: "debug", logger: "synapse.perf", message: "perf", bound: {}, fields: {} },
      "2026-11-30T09:48:23.739Z DEBUG synapse.perf: perf",
    ],
    [
      { at: 0, level: "info", logger: "synapse", message: "" },
      "1970-01-01T00:00:00.000Z INFO  synapse:",
    ],
    [
      // The bracket comes before the message even when there is no message.
      {
        at: AT,
        level: "info",
        logger: "synapse",
        message: "",
        bound: { agent: "a1" },
        fields: { n: 1 },
      },
      "2026-11-30T09:48:23.739Z INFO  synapse: [agent=a1] n=1",
    ],
  ];
  for (const [record, want] of cases) assert.equal(formatLogLine(record), want);
});

Deno.test('formatLogLine() quotes a value with a space, a quote, ] or a line break, and escapes \\ " \\n \\r inside', () => {
  const line = formatLogLine({
    at: AT,
    level: "info",
    logger: "synapse",
    message: "m",
    fields: {
      plain: "abc",
      sp: "two words",
      q: 'say "hi"',
      br: "a]b",
      open: "[x",
      lf: "a\nb",
      cr: "a\rb",
      bs: "C:\\dir",
      bsq: "C:\\my dir",
      eq: "k=v",
      tab: "a\tb",
      empty: "",
      num: -1.5,
      no: false,
    },
  });
  assert.equal(
    line,
    '2026-11-30T09:48:23.739Z INFO  synapse: m plain=abc sp="two words" q="say \\"hi\\"" br="a]b" open=[x lf="a\\nb" cr="a\\rb" bs=C:\\dir bsq="C:\\\\my dir" eq=k=v tab="a\\u0009b" empty="" num=-1.5 no=false',
  );
  assert.equal(line.includes("\n") || line.includes("\r"), false);
  assert.equal(formatLogValue("x y"), '"x y"');
  assert.equal(formatLogValue(3), "3");
});

Deno.test("formatLogLine() escapes \\, CR and LF in the message (unquoted) and strips ANSI everywhere", () => {
  const line = formatLogLine({
    at: AT,
    level: "warn",
    logger: "synapse.worker",
    message: "\x1b[31mred\x1b[0m line1\nline2\r\\n C:\\dir \x9b1mc1",
    fields: { v: "\x1b[1mbold\x1b[0m", "bad key\x1b[0m": "x" },
  });
  assert.equal(
    line,
    "2026-11-30T09:48:23.739Z WARN  synapse.worker: red line1\\nline2\\r\\\\n C:\\\\dir c1 v=bold bad_key=x",
  );
  assert.equal(/[\r\n]/.test(line) || line.includes("\x1b") || line.includes("\x9b"), false);
  assert.equal(stripAnsi("a\x1b]0;title\x07b\x1b[2Kc\x1bMd"), "abcd");
  assert.equal(stripAnsi("plain"), "plain");
});

Deno.test("loggerName() roots every target at the module; an unusable target becomes the bare module", () => {
  assert.equal(loggerName("synapse", "synapse"), "synapse");
  assert.equal(loggerName("synapse", "synapse.http"), "synapse.http");
  assert.equal(loggerName("synapse", "perf"), "synapse.perf");
  assert.equal(loggerName("synapse", "worker.llama.tiny-gen"), "synapse.worker.llama.tiny-gen");
  assert.deepEqual(loggerFor("synapse", "worker.llama.Qwen_2"), {
    logger: "synapse",
    lost: "worker.llama.Qwen_2",
  });
  assert.deepEqual(loggerFor("synapse", ""), { logger: "synapse" });
  assert.deepEqual(loggerFor("synapse", "synapse::engine"), {
    logger: "synapse",
    lost: "synapse::engine",
  });
  // renderLogEvent keeps the lost target as the first field.
  assert.equal(
    renderLogEvent("info", "Some Target", "m", { a: 1 }, undefined, AT),
    '2026-11-30T09:48:23.739Z INFO  synapse: m target="Some Target" a=1',
  );
});

Deno.test("parseLogLine() reads back what formatLogLine() wrote, quoted values and bracket included", () => {
  const fields = {
    method: "POST",
    sp: "two words",
    q: 'say "hi"',
    br: "a]b",
    lf: "a\nb\r",
    bs: "C:\\dir",
    bsq: "C:\\my dir",
    empty: "",
    n: 3,
  };
  const bound = { session: "claude:abc", root: "/a b]c" };
  const line = formatLogLine({
    at: AT,
    level: "warn",
    logger: "synapse.http",
    message: "a message\nwith \\ and [brackets]",
    fields,
    bound,
  });
  const p = parseLogLine(line);
  assert.equal(p.at.getTime(), AT);
  assert.equal(p.level, "warn");
  assert.equal(p.logger, "synapse.http");
  assert.equal(p.moduleId, "synapse");
  assert.deepEqual(p.bound, Object.entries(bound));
  assert.equal(p.message, "a message\nwith \\ and [brackets]");
  assert.deepEqual(p.fields, Object.entries(fields).map(([k, v]) => [k, String(v)]));
  // No bracket, no message.
  const bare = parseLogLine("2026-11-30T09:48:23.739Z ERROR synapse: a=1");
  assert.equal(bare.bound, undefined);
  assert.equal(bare.message, "");
  assert.deepEqual(bare.fields, [["a", "1"]]);
});

Deno.test("parseLogLine() refuses lines that break the format, naming the rule", () => {
  for (
    const [line, reason] of [
      ["2026-11-30T09:48:23.739Z INFO synapse: m", "level_column_width"],
      ["2026-11-30T09:48:23.739Z NOTE  synapse: m", "level_invalid"],
      ["2026-11-30T09:48:23+00:00 INFO  synapse: m", "timestamp_not_utc_z"],
      ["2026-11-30T09:48:23Z INFO  synapse: m", "timestamp_precision"],
      ["2026-11-30T09:48:23.739Z INFO  synapse m", "logger_not_terminated"],
      ["2026-11-30T09:48:23.739Z INFO  Synapse.HTTP: m", "logger_segment_grammar"],
      ["2026-11-30T09:48:23.739Z INFO  synapse: [] m", "empty_bound_bracket"],
      ["2026-11-30T09:48:23.739Z INFO  synapse: [a=1 m", "bound_unterminated"],
      ["2026-11-30T09:48:23.739Z INFO  synapse: \x1b[31mm", "ansi_forbidden"],
      ["2026-11-30T09:48:23.739Z INFO  synapse: a\nb", "line_break"],
      ['2026-11-30T09:48:23.739Z INFO  synapse: m a="open', "value_unterminated"],
    ]
  ) {
    assert.throws(() => parseLogLine(line!), (e: unknown) => {
      assert.ok(e instanceof SyntaxError);
      assert.ok(e.message.includes(`: ${reason}: `), `${reason}: ${e.message}`);
      return true;
    });
  }
});
