/**
 * The day files (subc.md §6): one per UTC day named `synapse.<YYYY-MM-DD>.log`, reopened on the
 * day roll, 0600 in a 0700 directory, pruned by the date in the name (other names left alone),
 * one alarm past CK_LOG_ALARM_SEGMENT_MB, and two processes appending to one file never tear a
 * line.
 */
import assert from "node:assert/strict";
import { LogDayFile, pruneSegments, segmentDay, segmentName } from "../../lib/log/day_file.ts";
import { parseLogLine } from "../../lib/log/line.ts";
import { ROOT } from "../_helpers.ts";

async function tempDir(): Promise<AsyncDisposable & { path: string }> {
  const path = await Deno.makeTempDir({ prefix: "synapse-daylog-" });
  return {
    path,
    [Symbol.asyncDispose]: () => Deno.remove(path, { recursive: true }),
  };
}

function names(dir: string): string[] {
  return [...Deno.readDirSync(dir)].map((e) => e.name).sort();
}

function mode(path: string): number {
  return Deno.statSync(path).mode! & 0o777;
}

Deno.test("segmentName() and segmentDay() agree on the name; segmentDay() refuses every other name", () => {
  assert.equal(
    segmentName("synapse", Date.UTC(2026, 0, 2, 23, 59, 59, 999)),
    "synapse.2026-01-02.log",
  );
  assert.equal(segmentName("synapse", Date.UTC(2026, 0, 3)), "synapse.2026-01-03.log");
  assert.equal(segmentDay("synapse", "synapse.2026-01-02.log"), "2026-01-02");
  for (
    const n of [
      "synapse.log",
      "synapse.2026-02-30.log",
      "synapse.2026-1-02.log",
      "synapse.2026-01-02.log.1",
      "synapse.2026-01-02.log.bak",
      "engram.2026-01-02.log",
      "synapse-x.2026-01-02.log",
      "synapse.stderr.log",
    ]
  ) assert.equal(segmentDay("synapse", n), undefined, n);
});

Deno.test("LogDayFile reopens on the UTC day roll: two days, two files, each line whole", async () => {
  await using dir = await tempDir();
  let now = Date.UTC(2026, 0, 1, 23, 59, 59, 900);
  using f = new LogDayFile(`${dir.path}/logs`, "synapse", { now: () => now });
  assert.equal(f.path, undefined, "nothing is opened before the first line");
  f.write("line one");
  f.write("line two");
  const first = f.path;
  now += 100; // 2026-01-02T00:00:00.000Z
  f.write("line three");
  assert.deepEqual(names(`${dir.path}/logs`), ["synapse.2026-01-01.log", "synapse.2026-01-02.log"]);
  assert.equal(first, `${dir.path}/logs/synapse.2026-01-01.log`);
  assert.equal(f.path, `${dir.path}/logs/synapse.2026-01-02.log`);
  assert.equal(Deno.readTextFileSync(first!), "line one\nline two\n");
  assert.equal(Deno.readTextFileSync(f.path!), "line three\n");
  // A clock that steps back (NTP) reopens the earlier day's file, by name.
  now -= 1;
  f.write("late");
  assert.equal(Deno.readTextFileSync(first!), "line one\nline two\nlate\n");
});

Deno.test("LogDayFile creates the directory 0700 and the file 0600, and tightens looser ones", async () => {
  await using dir = await tempDir();
  const logs = `${dir.path}/data/cortexkit/synapse/logs`;
  const now = Date.UTC(2026, 0, 1, 12);
  {
    using f = new LogDayFile(logs, "synapse", { now: () => now });
    f.open();
    assert.equal(mode(logs), 0o700);
    assert.equal(mode(f.path!), 0o600);
  }
  // An existing directory and file with looser modes are made private at open.
  Deno.chmodSync(logs, 0o755);
  Deno.chmodSync(`${logs}/synapse.2026-01-01.log`, 0o644);
  using f = new LogDayFile(logs, "synapse", { now: () => now });
  f.write("x");
  assert.equal(mode(logs), 0o700);
  assert.equal(mode(f.path!), 0o600);
});

Deno.test("LogDayFile prunes by the date in the name at open and at each roll, leaving other names alone", async () => {
  await using dir = await tempDir();
  const logs = `${dir.path}/logs`;
  Deno.mkdirSync(`${logs}/synapse.2025-01-01.log`, { recursive: true }); // a directory: left alone
  const others = [
    "synapse.log",
    "synapse.2025-13-01.log",
    "synapse.2025-12-01.log.bak",
    "engram.2025-01-01.log",
    "notes.txt",
  ];
  const dated = [
    "synapse.2025-06-30.log",
    "synapse.2025-12-16.log",
    "synapse.2025-12-17.log",
    "synapse.2025-12-18.log",
    "synapse.2025-12-31.log",
  ];
  for (const n of [...others, ...dated]) Deno.writeTextFileSync(`${logs}/${n}`, "old\n");
  // The files' own times say nothing: only the name counts.
  for (const n of dated) Deno.utimeSync(`${logs}/${n}`, new Date(), new Date());
  let now = Date.UTC(2026, 0, 1, 8); // today 2026-01-01, 14 days: keep 2025-12-18 and later
  using f = new LogDayFile(logs, "synapse", { now: () => now, maxAgeDays: 14 });
  assert.deepEqual(f.open().sort(), [
    "synapse.2025-06-30.log",
    "synapse.2025-12-16.log",
    "synapse.2025-12-17.log",
  ]);
  const kept = ["synapse.2025-12-18.log", "synapse.2025-12-31.log", "synapse.2026-01-01.log"];
  assert.deepEqual(names(logs), [...others, "synapse.2025-01-01.log", ...kept].sort());
  assert.equal(f.open().length, 0, "open again the same day: no work");
  // The roll to 2026-01-02 moves the window by a day: 2025-12-18 goes.
  now = Date.UTC(2026, 0, 2, 0, 0, 1);
  f.write("new day");
  assert.deepEqual(
    names(logs),
    [
      ...others,
      "synapse.2025-01-01.log",
      "synapse.2025-12-31.log",
      "synapse.2026-01-01.log",
      "synapse.2026-01-02.log",
    ]
      .sort(),
  );
  // pruneSegments reports what it removed; 0 days keeps today's file only.
  assert.deepEqual(pruneSegments(logs, "synapse", now, 0).sort(), [
    "synapse.2025-12-31.log",
    "synapse.2026-01-01.log",
  ]);
  assert.deepEqual(
    names(logs),
    [...others, "synapse.2025-01-01.log", "synapse.2026-01-02.log"].sort(),
  );
});

Deno.test("LogDayFile alarms once past CK_LOG_ALARM_SEGMENT_MB, never truncates, and again for the next day's file", async () => {
  await using dir = await tempDir();
  let now = Date.UTC(2026, 0, 1, 8);
  const alarms: string[] = [];
  using f = new LogDayFile(`${dir.path}/logs`, "synapse", {
    now: () => now,
    alarmSegmentMb: 1,
    onAlarm: (m) => alarms.push(m),
  });
  const line = "x".repeat(999); // 1000 bytes with its newline
  for (let i = 0; i < 1048; i++) f.write(line); // 1,048,000 bytes: under 1 MiB (1,048,576)
  assert.equal(alarms.length, 0);
  f.write(line); // 1,049,000: past it
  assert.equal(alarms.length, 1);
  assert.match(
    alarms[0]!,
    /synapse\.2026-01-01\.log is 1049000 bytes, past CK_LOG_ALARM_SEGMENT_MB \(1 MiB\)/,
  );
  for (let i = 0; i < 100; i++) f.write(line);
  assert.equal(alarms.length, 1, "once per file");
  assert.equal(Deno.statSync(f.path!).size, 1_149_000, "nothing truncated");
  now += 86_400_000;
  f.write(line);
  assert.equal(alarms.length, 1, "a new day's file starts small");
  // A file already past the cap (another process wrote it) alarms at this process's first line.
  const g = new LogDayFile(`${dir.path}/logs`, "synapse", {
    now: () => now - 86_400_000,
    alarmSegmentMb: 1,
    onAlarm: (m) => alarms.push(m),
  });
  g.write("y");
  g.dispose();
  assert.equal(alarms.length, 2);
  assert.throws(() => g.write("after dispose"), /closed/);
});

Deno.test("two processes appending 2,000 lines each to one day file never interleave inside a line", async () => {
  await using dir = await tempDir();
  const logs = `${dir.path}/logs`;
  const at = Date.UTC(2026, 0, 1, 12);
  const writers = ["x", "y"].map((tag) =>
    new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "--no-check",
        `--allow-read=${ROOT},${logs}`,
        `--allow-write=${logs}`,
        `${ROOT}/tests/log/_append_lines.ts`,
        logs,
        tag,
        "2000",
        String(at),
      ],
      stdout: "piped",
      stderr: "piped",
    }).output()
  );
  for (const out of await Promise.all(writers)) {
    assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
  }
  assert.deepEqual(names(logs), ["synapse.2026-01-01.log"]);
  const text = Deno.readTextFileSync(`${logs}/synapse.2026-01-01.log`);
  const lines = text.split("\n");
  assert.equal(lines.pop(), "");
  assert.equal(lines.length, 4000);
  const next = { x: 0, y: 0 } as Record<string, number>;
  for (const l of lines) {
    const p = parseLogLine(l);
    const f = Object.fromEntries(p.fields);
    assert.equal(p.message, "append");
    assert.deepEqual(Object.keys(f), ["writer", "i", "len", "pad"], l.slice(0, 200));
    // Each writer's lines arrive whole and in its own order.
    assert.equal(Number(f.i), next[f.writer!]!++, l.slice(0, 200));
    assert.equal(f.pad!.length, Number(f.len));
    assert.equal(f.pad, f.writer!.repeat(Number(f.len)));
  }
  assert.deepEqual(next, { x: 2000, y: 2000 });
});
