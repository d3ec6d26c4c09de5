/**
 * The perf sampler (`log.perf_interval_secs`): one `synapse.perf` line per interval with memory,
 * event-loop lag (how late its timer fired) and the caller's facts; off at 0; stopped by
 * dispose. A fake clock and fake timers drive it; a real Synapse shows its lane facts.
 */
import assert from "node:assert/strict";
import { PerfSampler, type SamplerTimers } from "../../lib/log/perf_sampler.ts";
import type { LogFields, LogLevel, LogSink } from "../../lib/log/log.ts";
import { startSynapse } from "../_helpers.ts";

/** Timers that fire only when the test says, on a clock the test sets. */
class FakeTimers implements SamplerTimers {
  now = 0;
  #next = 1;
  pending = new Map<number, { at: number; fn: () => void }>();

  setTimeout(fn: () => void, ms: number): unknown {
    const id = this.#next++;
    this.pending.set(id, { at: this.now + ms, fn });
    return id;
  }

  clearTimeout(id: unknown): void {
    this.pending.delete(id as number);
  }

  /** Moves the clock to `t` and fires every timer due by `due` (default: `t`). */
  fireAt(t: number, due = t): void {
    this.now = t;
    for (const [id, p] of [...this.pending]) {
      if (p.at <= due) {
        this.pending.delete(id);
        p.fn();
      }
    }
  }
}

interface Seen {
  level: LogLevel;
  target: string;
  message: string;
  fields: LogFields;
}

function capture(): { log: LogSink; lines: Seen[] } {
  const lines: Seen[] = [];
  return {
    lines,
    log: (level, target, message, fields) =>
      lines.push({ level, target, message, fields: fields ?? {} }),
  };
}

const MIB = 1024 * 1024;

Deno.test("PerfSampler logs one synapse.perf line per interval with memory, loop lag and the caller's facts", () => {
  const timers = new FakeTimers();
  const cap = capture();
  let queued = 3;
  using sampler = new PerfSampler({
    intervalSecs: 5,
    log: cap.log,
    now: () => timers.now,
    timers,
    memory: () => ({ rss: 182.44 * MIB, heapUsed: 41.25 * MIB }),
    facts: () => ({ queued, in_flight: 1, lanes: "ort-interactive:3/1,ort-bulk:0/0" }),
  });
  sampler.start();
  sampler.start(); // idempotent: still one timer
  assert.equal(timers.pending.size, 1);
  assert.equal(cap.lines.length, 0, "nothing before the first interval");
  timers.fireAt(4_999);
  assert.equal(cap.lines.length, 0);
  timers.fireAt(5_000);
  assert.deepEqual(cap.lines, [{
    level: "info",
    target: "synapse.perf",
    message: "perf",
    fields: {
      rss_mb: 182.4,
      heap_used_mb: 41.3,
      loop_lag_ms: 0,
      queued: 3,
      in_flight: 1,
      lanes: "ort-interactive:3/1,ort-bulk:0/0",
    },
  }]);
  // The next one is due at 10 000; the loop was busy and it fires 37.25 ms late.
  queued = 0;
  timers.fireAt(10_037.25, 10_000);
  assert.equal(cap.lines.length, 2);
  assert.equal(cap.lines[1]!.fields.loop_lag_ms, 37.3);
  assert.equal(cap.lines[1]!.fields.queued, 0);
  // Due again an interval after it fired.
  timers.fireAt(15_037.25);
  assert.equal(cap.lines.length, 3);
  assert.equal(cap.lines[2]!.fields.loop_lag_ms, 0);
  sampler.dispose();
  assert.equal(timers.pending.size, 0, "dispose clears the timer");
  assert.equal(sampler.running, false);
  sampler.start();
  assert.equal(timers.pending.size, 0, "a disposed sampler does not restart");
});

Deno.test("PerfSampler at interval 0 never starts; a facts callback that throws is logged, and sampling goes on", () => {
  const timers = new FakeTimers();
  const cap = capture();
  using off = new PerfSampler({ intervalSecs: 0, log: cap.log, timers, now: () => timers.now });
  off.start();
  assert.equal(timers.pending.size, 0);
  assert.equal(off.running, false);

  using bad = new PerfSampler({
    intervalSecs: 1,
    log: cap.log,
    timers,
    now: () => timers.now,
    memory: () => ({ rss: MIB, heapUsed: MIB }),
    facts: () => {
      throw new Error("registry disposed");
    },
  });
  bad.start();
  timers.fireAt(1_000);
  timers.fireAt(2_000);
  assert.equal(cap.lines.length, 2);
  assert.deepEqual(cap.lines[0]!.fields, {
    rss_mb: 1,
    heap_used_mb: 1,
    loop_lag_ms: 0,
    facts_error: "registry disposed",
  });
});

Deno.test("Synapse.startPerfSampler() logs the lanes' queue depths and in-flight counts (log.perf_interval_secs = 1)", async () => {
  const { promise: first, resolve } = Promise.withResolvers<LogFields>();
  await using t = await startSynapse({ log: { perf_interval_secs: 1 } }, {
    log: (_level, target, _message, fields) => {
      if (target === "synapse.perf") resolve(fields ?? {});
    },
  });
  t.syn.startPerfSampler();
  let guard: ReturnType<typeof setTimeout> | undefined;
  const fields = await Promise.race([
    first,
    // A hang guard, not a speed limit.
    new Promise<never>((_, reject) => {
      guard = setTimeout(() => reject(new Error("no perf line within 120 s")), 120_000);
    }),
  ]).finally(() => clearTimeout(guard));
  assert.ok(typeof fields.rss_mb === "number" && fields.rss_mb > 0, JSON.stringify(fields));
  assert.ok(typeof fields.loop_lag_ms === "number" && fields.loop_lag_ms >= 0);
  assert.equal(fields.queued, 0);
  assert.equal(fields.in_flight, 0);
  assert.equal(fields.jobs_running, 0);
  assert.equal(fields.admission_bytes, 0);
  assert.equal(fields.lanes, "ort-interactive:0/0,ort-bulk:0/0");
  assert.deepEqual(Object.keys(fields), [
    "rss_mb",
    "heap_used_mb",
    "loop_lag_ms",
    "queued",
    "in_flight",
    "lanes",
    "admission_bytes",
    "jobs_running",
  ]);
});
