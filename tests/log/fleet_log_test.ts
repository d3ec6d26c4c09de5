/**
 * The serving process's log: every event filtered by CK_LOG, redacted, and written as the same r2
 * line to the day file and stderr; a malformed CK_LOG* refused or (under the bus) one warning;
 * a file it cannot write reported once, the lines still on stderr.
 */
import assert from "node:assert/strict";
import { createFleetLog, FILE_RETRY_MS } from "../../lib/log/fleet_log.ts";
import { LogEnvError } from "../../lib/log/log.ts";
import { parseLogLine } from "../../lib/log/line.ts";

async function tempDir(): Promise<AsyncDisposable & { path: string }> {
  const path = await Deno.makeTempDir({ prefix: "synapse-fleetlog-" });
  return { path, [Symbol.asyncDispose]: () => Deno.remove(path, { recursive: true }) };
}

const AT = Date.UTC(2026, 10, 30, 9, 48, 23, 739);

Deno.test("createFleetLog() writes each line to the day file and to stderr, filtered by CK_LOG", async () => {
  await using dir = await tempDir();
  const stderr: string[] = [];
  using log = createFleetLog({
    env: { XDG_DATA_HOME: `${dir.path}/data`, CK_LOG: "warn,synapse.http=info,synapse.perf=debug" },
    now: () => AT,
    writeStderr: (l) => stderr.push(l),
  });
  assert.equal(log.dayFile?.dir, `${dir.path}/data/cortexkit/synapse/logs`);
  log.log("info", "synapse.http", "request", { method: "POST", status: 200 });
  log.log("debug", "synapse.http", "request start"); // below synapse.http=info
  log.log("info", "synapse.models", "loaded"); // below the default warn
  log.log("debug", "synapse.perf", "perf", { rss_mb: 1.5 });
  log.log("warn", "synapse.worker", "crashed", { api_key: "k" }, { session: "cli:1" });
  const want = [
    "2026-11-30T09:48:23.739Z INFO  synapse.http: request method=POST status=200",
    "2026-11-30T09:48:23.739Z DEBUG synapse.perf: perf rss_mb=1.5",
    '2026-11-30T09:48:23.739Z WARN  synapse.worker: [session=cli:1] crashed api_key="[REDACTED]"',
  ];
  assert.deepEqual(stderr, want);
  const path = `${dir.path}/data/cortexkit/synapse/logs/synapse.2026-11-30.log`;
  assert.equal(log.dayFile?.path, path);
  assert.equal(Deno.readTextFileSync(path), want.join("\n") + "\n");
  assert.equal(log.swallowedWrites, 0);
  assert.equal(log.disposed, false);
  log.dispose();
  log.dispose(); // idempotent
  assert.equal(log.disposed, true);
  // After dispose, lines still reach stderr; the file is closed.
  log.log("error", "synapse", "late");
  assert.equal(stderr.length, 4);
  assert.equal(Deno.readTextFileSync(path), want.join("\n") + "\n");
});

Deno.test("createFleetLog() opens nothing until the first line or open(); stderr: false writes the file only", async () => {
  await using dir = await tempDir();
  const stderr: string[] = [];
  using log = createFleetLog({
    env: { XDG_DATA_HOME: `${dir.path}/data` },
    logsDir: `${dir.path}/logs`,
    stderr: false,
    now: () => AT,
    writeStderr: (l) => stderr.push(l),
  });
  assert.throws(() => Deno.statSync(`${dir.path}/logs`), Deno.errors.NotFound);
  log.open();
  assert.equal(Deno.statSync(`${dir.path}/logs/synapse.2026-11-30.log`).size, 0);
  log.log("info", "synapse", "serving");
  assert.deepEqual(stderr, []);
  assert.equal(
    Deno.readTextFileSync(`${dir.path}/logs/synapse.2026-11-30.log`),
    "2026-11-30T09:48:23.739Z INFO  synapse: serving\n",
  );
});

Deno.test("createFleetLog() refuses a malformed CK_LOG by default, and under onInvalid 'warn' logs at info after one warning", async () => {
  await using dir = await tempDir();
  const env = { XDG_DATA_HOME: `${dir.path}/data`, CK_LOG: "verbose" };
  assert.throws(() => createFleetLog({ env }), (e: unknown) => {
    assert.ok(e instanceof LogEnvError);
    assert.equal(e.variable, "CK_LOG");
    return true;
  });
  const stderr: string[] = [];
  using log = createFleetLog({
    env: { ...env, CK_LOG_MAX_AGE_DAYS: "two weeks" },
    onInvalid: "warn",
    now: () => AT,
    writeStderr: (l) => stderr.push(l),
  });
  assert.equal(log.settings.maxAgeDays, 14);
  assert.deepEqual(stderr, [
    "2026-11-30T09:48:23.739Z WARN  synapse.log: Cannot use CK_LOG 'verbose': 'verbose' is not a level; use off, error, warn, info or debug, optionally per logger (e.g. info,synapse.http=debug); logging at info",
    "2026-11-30T09:48:23.739Z WARN  synapse.log: Cannot use CK_LOG_MAX_AGE_DAYS 'two weeks': not a whole number of days from 0 to 36500; unset it for the default (14); using 14",
  ]);
  log.log("debug", "synapse.http", "hidden");
  log.log("info", "synapse.http", "shown");
  log.log("info", "synapse.http", "shown again");
  assert.equal(stderr.length, 4, "one warning each, not one per line");
  assert.match(stderr[2]!, / INFO {2}synapse\.http: shown$/);
});

Deno.test("createFleetLog() reports a file it cannot write once, keeps stderr, and retries a minute later", async () => {
  await using dir = await tempDir();
  Deno.writeTextFileSync(`${dir.path}/not-a-dir`, "");
  const stderr: string[] = [];
  let now = AT;
  using log = createFleetLog({
    env: {},
    logsDir: `${dir.path}/not-a-dir/logs`,
    now: () => now,
    writeStderr: (l) => stderr.push(l),
  });
  log.open(); // fails: reported, no line lost yet
  assert.equal(log.swallowedWrites, 0);
  now += FILE_RETRY_MS;
  log.log("info", "synapse", "one");
  log.log("info", "synapse", "two");
  assert.equal(stderr.length, 3, stderr.join("\n"));
  const report = parseLogLine(stderr[0]!);
  assert.equal(report.level, "error");
  assert.equal(report.logger, "synapse.log");
  assert.match(
    report.message,
    /^Cannot write the log file in .*not-a-dir\/logs: .*; logging to stderr only/,
  );
  assert.match(stderr[1]!, / synapse: one$/);
  assert.match(stderr[2]!, / synapse: two$/);
  assert.equal(log.swallowedWrites, 2);
  // Fixed (the obstacle removed) and a minute later, the file takes lines again.
  Deno.removeSync(`${dir.path}/not-a-dir`);
  now += FILE_RETRY_MS;
  log.log("info", "synapse", "three");
  assert.equal(log.swallowedWrites, 2);
  assert.equal(
    Deno.readTextFileSync(`${dir.path}/not-a-dir/logs/synapse.2026-11-30.log`),
    "2026-11-30T09:50:23.739Z INFO  synapse: three\n",
  );
  assert.equal(stderr.length, 4, "no second report");
});

Deno.test("createFleetLog() puts the segment alarm on stderr as a synapse.log warning", async () => {
  await using dir = await tempDir();
  const stderr: string[] = [];
  using log = createFleetLog({
    env: { CK_LOG_ALARM_SEGMENT_MB: "0" },
    logsDir: `${dir.path}/logs`,
    stderr: false,
    now: () => AT,
    writeStderr: (l) => stderr.push(l),
  });
  log.log("info", "synapse", "first");
  log.log("info", "synapse", "second");
  assert.equal(stderr.length, 1);
  assert.match(
    stderr[0]!,
    /^2026-11-30T09:48:23\.739Z WARN {2}synapse\.log: log file .*synapse\.2026-11-30\.log is 46 bytes, past CK_LOG_ALARM_SEGMENT_MB \(0 MiB\)/,
  );
});
