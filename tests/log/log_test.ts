import assert from "node:assert/strict";
import { formatLogLine, parseLogFilter, readLogFilter } from "../../lib/log/log.ts";
import type { LogLevel } from "../../lib/log/log.ts";
import { SynapseError } from "../../lib/contract/errors.ts";
import { createSynapse } from "../../lib/synapse.ts";

const LEVELS: LogLevel[] = ["error", "warn", "info", "debug"];

function shown(spec: string | undefined, target = "synapse.http"): LogLevel[] {
  const f = parseLogFilter(spec);
  return LEVELS.filter((l) => f.enabled(l, target));
}

Deno.test("parseLogFilter() makes each level real: debug shows debug lines, off shows none", () => {
  assert.deepEqual(shown(undefined), ["error", "warn", "info"]);
  assert.deepEqual(shown(""), ["error", "warn", "info"]);
  assert.deepEqual(shown("debug"), ["error", "warn", "info", "debug"]);
  assert.deepEqual(shown("DEBUG"), ["error", "warn", "info", "debug"]);
  assert.deepEqual(shown("trace"), ["error", "warn", "info", "debug"]);
  assert.deepEqual(shown("info"), ["error", "warn", "info"]);
  assert.deepEqual(shown("warn"), ["error", "warn"]);
  assert.deepEqual(shown("error"), ["error"]);
  assert.deepEqual(shown("off"), []);
});

Deno.test("parseLogFilter() reads per-target directives; the most specific target wins", () => {
  const spec = "warn,synapse.http=debug,synapse.http.body=off";
  assert.deepEqual(shown(spec, "synapse.http"), ["error", "warn", "info", "debug"]);
  assert.deepEqual(shown(spec, "synapse.http.routes"), ["error", "warn", "info", "debug"]);
  assert.deepEqual(shown(spec, "synapse.http.body"), []);
  assert.deepEqual(shown(spec, "synapse.ops"), ["error", "warn"]);
  // A prefix is a whole segment: synapse.httpx is not under synapse.http.
  assert.deepEqual(shown(spec, "synapse.httpx"), ["error", "warn"]);
  // Order does not matter, and blank directives are skipped.
  assert.deepEqual(shown("synapse.http=debug, ,warn,", "synapse.ops"), ["error", "warn"]);
});

Deno.test("parseLogFilter() refuses an invalid level or target, naming it", () => {
  for (
    const [spec, named] of [
      ["verbose", "'verbose' is not a level"],
      ["info,synapse.http=loud", "'synapse.http=loud' is not a level"],
      ["info,Synapse HTTP=debug", "'Synapse HTTP' is not a log target"],
      ["=debug", "'' is not a log target"],
      ["2", "'2' is not a level"],
    ]
  ) {
    assert.throws(() => parseLogFilter(spec), (e: unknown) => {
      assert.ok(e instanceof SyntaxError);
      assert.ok(e.message.startsWith(`Cannot use CK_LOG '${spec}': `), e.message);
      assert.ok(e.message.includes(named!), e.message);
      assert.match(e.message, /use off, error, warn, info or debug|dot-separated/);
      return true;
    }, spec);
  }
  assert.throws(() => readLogFilter({ get: () => "chatty" }), SyntaxError);
  assert.equal(readLogFilter({ get: () => undefined }).defaultLevel, "info");
});

Deno.test("createSynapse() refuses an invalid CK_LOG at boot, before anything starts", async () => {
  const dir = await Deno.makeTempDir({ prefix: "synapse-log-" });
  try {
    const err = await createSynapse({
      env: { HOME: dir, XDG_DATA_HOME: `${dir}/data`, CK_LOG: "verbose" },
      cwd: dir,
    }).then(() => assert.fail("an invalid CK_LOG must refuse boot"), (e) => e);
    assert.ok(err instanceof SynapseError);
    assert.equal(err.code, "invalid_request");
    assert.equal(err.channel, true);
    assert.equal(err.details?.field, "CK_LOG");
    assert.match(err.message, /^Cannot use CK_LOG 'verbose': 'verbose' is not a level/);
    // Nothing was created in the data home.
    assert.equal(await exists(`${dir}/data`), false);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("formatLogLine() keeps one line: control bytes, quotes and line breaks in values are escaped", () => {
  const at = new Date("2025-01-02T03:04:05.678Z");
  assert.equal(
    formatLogLine("info", "synapse.http", "request", { method: "POST", items: 3, ok: true }, at),
    "2025-01-02T03:04:05.678Z INFO synapse.http request method=POST items=3 ok=true",
  );
  const line = formatLogLine("warn", "t", "m", {
    path: "/v1/ops/a\nb",
    nul: "a\x00b",
    sp: "two words",
    eq: "k=v",
    q: 'say "hi"',
    empty: "",
    lone: "x\ud800",
  }, at);
  assert.equal(line.includes("\n"), false);
  assert.equal(line.includes("\x00"), false);
  assert.equal(
    line,
    '2025-01-02T03:04:05.678Z WARN t m path="/v1/ops/a\\nb" nul="a\\u0000b" sp="two words" eq="k=v" q="say \\"hi\\"" empty="" lone="x\\ud800"',
  );
});

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.stat(path);
    return true;
  } catch {
    return false;
  }
}
