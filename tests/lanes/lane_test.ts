/**
 * The Lane (lib/lanes/lane.ts) over the in-memory FakeEngine (tests/engines/_fake_engine.ts) and
 * the real scheduler and admission (lib/sched): admission order, permits, cancellation, per-row
 * errors, micro-batching, and the `queue_full` / `deadline_exceeded` refusals. Time is the
 * scheduler's, admission's and the lane's injected clock, and engine work ends when a test opens
 * its gate: no assertion depends on how fast anything runs. The only real timers are the request
 * signal's own (`max_queue_ms`, deadline), which the tests let fire while the engine is held.
 */
import assert from "node:assert/strict";
import { Lane } from "../../lib/lanes/lane.ts";
import type { LaneResult, LaneRunOptions, LaneWork } from "../../lib/lanes/lane.ts";
import { LaneScheduler } from "../../lib/sched/lane_scheduler.ts";
import type { LaneSchedulerOptions } from "../../lib/sched/lane_scheduler.ts";
import { Admission } from "../../lib/sched/admission.ts";
import type { AdmissionLimits } from "../../lib/sched/admission.ts";
import type { WorkClass } from "../../lib/sched/pick_next.ts";
import { SynapseError } from "../../lib/contract/errors.ts";
import type { EngineRow } from "../../lib/engines/engine.ts";
import { FakeEngine, fakeRow, fakeScore, fakeVector } from "../engines/_fake_engine.ts";
import type { FakeEngineOptions } from "../engines/_fake_engine.ts";

/** Lets every queued microtask and due 0 ms timer run (a macrotask turn, not a wait). */
async function flush(): Promise<void> {
  for (let i = 0; i < 3; i++) await new Promise((r) => setTimeout(r, 0));
}

/** Hang guard only: rejects if `p` has not settled after 20 s (never an assertion of speed). */
async function guard<T>(p: Promise<T>): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const hang = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error("hang guard: the promise never settled")), 20_000);
  });
  try {
    return await Promise.race([p, hang]);
  } finally {
    clearTimeout(timer);
  }
}

/** What a promise settled with, without throwing. */
function outcome<T>(p: Promise<T>): Promise<{ ok: T } | { err: unknown }> {
  return p.then((ok) => ({ ok }), (err) => ({ err }));
}

/** Tracks whether a promise has settled yet. */
function track<T>(p: Promise<T>): { settled: () => boolean; result: Promise<T> } {
  let done = false;
  const result = p.finally(() => (done = true));
  result.catch(() => {});
  return { settled: () => done, result };
}

interface RigOptions {
  engine?: FakeEngineOptions;
  scheduler?: LaneSchedulerOptions;
  admission?: Partial<AdmissionLimits>;
  pipelineDepth?: number;
  quiet?: () => boolean;
}

/** One fake engine, one scheduler, one admission, and a lane per class on them, on one clock. */
class Rig implements Disposable {
  /** The clock every part reads, ms. Tests move it; nothing else does. */
  t = 1_000_000;
  readonly now = (): number => this.t;
  readonly engine: FakeEngine;
  readonly scheduler: LaneScheduler;
  readonly admission: Admission;
  readonly #options: RigOptions;
  readonly #lanes = new Map<WorkClass, Lane>();

  constructor(options: RigOptions = {}) {
    this.#options = options;
    this.engine = new FakeEngine(options.engine);
    this.scheduler = new LaneScheduler({ now: this.now, ...options.scheduler });
    this.admission = new Admission({
      byteBudget: 1_000,
      maxQueueMs: 5_000,
      estimatedExecutionMs: 0,
      maxConcurrentWorkers: this.scheduler.permits,
      ...options.admission,
    }, { now: this.now });
  }

  /** The lane of class `cls` (one per class, all on the same engine and scheduler). */
  lane(cls: WorkClass = "interactive"): Lane {
    let lane = this.#lanes.get(cls);
    if (lane === undefined) {
      lane = new Lane({
        name: `fake-${cls}`,
        engine: this.engine,
        scheduler: this.scheduler,
        cls,
        admission: this.admission,
        now: this.now,
        ...(this.#options.pipelineDepth === undefined
          ? {}
          : { pipelineDepth: this.#options.pipelineDepth }),
        ...(this.#options.quiet === undefined ? {} : { quiet: this.#options.quiet }),
      });
      this.#lanes.set(cls, lane);
    }
    return lane;
  }

  /**
   * {@link Lane.run} on the lane of `cls`; the promise is marked handled, so a test that fails
   * early reports its assertion rather than the runs its scheduler's disposal rejects.
   */
  run<W extends LaneWork>(
    work: W,
    options: LaneRunOptions & { cls?: WorkClass } = {},
  ): Promise<LaneResult<W>> {
    const p = this.lane(options.cls).run(work, options);
    p.catch(() => {});
    return p;
  }

  /** An admitted request as an operation makes one: admit, run, release the permit at the end. */
  request<W extends LaneWork>(
    work: W,
    options: Omit<LaneRunOptions, "permit"> & {
      cls?: WorkClass;
      bytes?: number;
      deadlineMs?: number;
      maxQueueMs?: number;
    } = {},
  ): Promise<LaneResult<W>> {
    const lane = this.lane(options.cls);
    const p = (async () => {
      using permit = lane.admit({
        bytes: options.bytes ?? 10,
        deadlineMs: options.deadlineMs ?? 60_000,
        maxQueueMs: options.maxQueueMs ?? 5_000,
      });
      return await lane.run(work, { ...options, permit });
    })();
    p.catch(() => {});
    return p;
  }

  /** Ids of the first row of every engine call, in call order (rows are tagged by their base). */
  firstIds(): number[] {
    return this.engine.calls.map((c) => c.rows[0]![0]!);
  }

  [Symbol.dispose](): void {
    this.scheduler.dispose();
  }
}

const embed = (...rows: EngineRow[]): { kind: "embed"; rows: EngineRow[] } => ({
  kind: "embed",
  rows,
});

function assertOk(
  row: { kind: string; values?: Float32Array },
  expected: Float32Array | number[],
  msg = "row",
): void {
  assert.equal(row.kind, "ok", msg);
  assert.deepEqual(Array.from(row.values!), Array.from(expected), msg);
}

Deno.test("admission order: interactive before bulk by the fair cycle [I, I, I, B], FIFO within a class", async () => {
  using rig = new Rig({ scheduler: { permits: 1 } });
  const slot = await rig.lane("interactive").reserve();
  const runs: Promise<unknown>[] = [];
  // Bulk first, so a FIFO across classes would start them first.
  for (const base of [900, 901]) runs.push(rig.run(embed(fakeRow(2, base)), { cls: "bulk" }));
  for (const base of [100, 101, 102, 103, 104]) {
    runs.push(rig.run(embed(fakeRow(2, base))));
  }
  await flush();
  assert.equal(rig.engine.calls.length, 0, "the held slot lets nothing start");
  slot.release();
  await guard(Promise.all(runs));
  assert.deepEqual(rig.firstIds(), [100, 101, 102, 900, 103, 104, 901]);
});

Deno.test("admission order: a bulk head older than bulkAgingMs (on the scheduler's clock) goes first", async () => {
  using rig = new Rig({ scheduler: { permits: 1, bulkAgingMs: 250 } });
  const slot = await rig.lane("interactive").reserve();
  const runs = [
    rig.run(embed(fakeRow(2, 900)), { cls: "bulk" }),
    rig.run(embed(fakeRow(2, 100))),
    rig.run(embed(fakeRow(2, 101))),
  ];
  await flush();
  rig.t += 251;
  slot.release();
  await guard(Promise.all(runs));
  assert.deepEqual(rig.firstIds(), [900, 100, 101]);
});

Deno.test("permits: at most `permits` engine calls in flight; a released permit starts the next, in order", async () => {
  using rig = new Rig({ scheduler: { permits: 2 }, engine: {} });
  rig.engine.hold = true;
  const runs = [100, 101, 102, 103].map((base) =>
    rig.request(embed(fakeRow(3, base)), { bytes: 10 })
  );
  await rig.engine.whenCalls(2);
  await flush();
  assert.deepEqual(rig.firstIds(), [100, 101]);
  assert.equal(rig.scheduler.inFlight, 2);
  assert.equal(rig.scheduler.waiters, 2);
  assert.equal(rig.lane().busy, true);
  rig.engine.calls[1]!.proceed();
  await rig.engine.whenCalls(3);
  await flush();
  assert.deepEqual(rig.firstIds(), [100, 101, 102], "the freed permit started the next in line");
  assert.equal(rig.engine.inFlight, 2);
  rig.engine.hold = false;
  rig.engine.proceedAll();
  const results = await guard(Promise.all(runs));
  assert.equal(rig.engine.maxInFlight, 2);
  results.forEach((r, k) => assertOk(r.rows[0]!, fakeVector(fakeRow(3, 100 + k).ids)));
  assert.equal(rig.lane().activeRequests, 0);
  assert.equal(rig.admission.bytesInFlight, 0, "every permit gave its bytes back");
  assert.equal(rig.lane().busy, false);
});

Deno.test("pipelining: one run keeps at most pipelineDepth engine calls in flight", async () => {
  using rig = new Rig({ engine: { limits: { maxSequences: 1 } }, pipelineDepth: 2 });
  rig.engine.hold = true;
  const rows = [0, 1, 2, 3, 4].map((k) => fakeRow(4, 100 * (k + 1)));
  const run = rig.run({ kind: "embed", rows });
  await rig.engine.whenCalls(2);
  await flush();
  assert.equal(rig.engine.calls.length, 2);
  rig.engine.calls[0]!.proceed();
  await rig.engine.whenCalls(3);
  await flush();
  assert.equal(rig.engine.calls.length, 3);
  assert.equal(rig.engine.inFlight, 2);
  rig.engine.hold = false;
  rig.engine.proceedAll();
  const out = await guard(run);
  assert.equal(rig.engine.maxInFlight, 2);
  out.rows.forEach((r, i) => assertOk(r, fakeVector(rows[i]!.ids), `row ${i}`));
});

Deno.test("micro-batching: rows are length-sorted into calls within the engine's limits, outputs in input order", async () => {
  using rig = new Rig({ engine: { limits: { maxSequences: 3, maxMicroBatchTokens: 40 } } });
  const lengths = [10, 2, 7, 3, 12, 2, 5];
  const rows = lengths.map((len, i) => fakeRow(len, 100 * (i + 1)));
  const out = await guard(rig.run({ kind: "embed", rows }));
  assert.deepEqual(
    rig.engine.calls.map((c) => c.rows.map((r) => r.length)),
    [[2, 2, 3], [5, 7, 10], [12]],
  );
  for (const c of rig.engine.calls) {
    assert.ok(c.rows.length <= 3);
    assert.ok(c.rows.length * Math.max(...c.rows.map((r) => r.length)) <= 40);
  }
  assert.equal(out.rows.length, rows.length);
  out.rows.forEach((r, i) => assertOk(r, fakeVector(rows[i]!.ids), `row ${i}`));
});

Deno.test("micro-batching: maxCallRows caps rows per call below the engine's limit; scores come back in order", async () => {
  using rig = new Rig({ engine: { task: "rerank" } });
  const lane = rig.lane();
  lane.maxCallRows = 2;
  const rows = [5, 1, 4, 2, 3].map((len, i) => fakeRow(len, 10 * (i + 1)));
  const out = await guard(lane.run({ kind: "score", rows }));
  assert.deepEqual(rig.engine.calls.map((c) => c.rows.length), [2, 2, 1]);
  out.rows.forEach((r, i) => assertOk(r, [fakeScore(rows[i]!.ids)], `row ${i}`));
  assert.throws(() => (lane.maxCallRows = 0), RangeError);
});

Deno.test("micro-batching: each engine call asks `quiet` of the lane", async () => {
  let quiet = false;
  using rig = new Rig({
    engine: { limits: { maxSequences: 1 } },
    pipelineDepth: 1,
    quiet: () => quiet,
  });
  rig.engine.hold = true;
  const run = rig.run(embed(fakeRow(2, 1), fakeRow(3, 2)));
  await rig.engine.whenCalls(1);
  quiet = true;
  rig.engine.hold = false;
  rig.engine.proceedAll();
  await guard(run);
  assert.deepEqual(rig.engine.calls.map((c) => c.quiet), [false, true]);
});

Deno.test("per-row errors: a row the engine refuses alone becomes that row's error, the rest are served", async () => {
  using rig = new Rig({ engine: { limits: { maxSequences: 1 } } });
  const refusal = new SynapseError("invalid_request", "the fake refuses row 200");
  rig.engine.failRow = (row) => row.ids[0] === 200 ? refusal : undefined;
  const rows = [fakeRow(3, 100), fakeRow(3, 200), fakeRow(3, 300)];
  const out = await guard(rig.run({ kind: "embed", rows }));
  assertOk(out.rows[0]!, fakeVector(rows[0]!.ids));
  assert.deepEqual(out.rows[1], { kind: "error", error: refusal });
  assertOk(out.rows[2]!, fakeVector(rows[2]!.ids));
});

Deno.test("per-row errors: a row over the engine's maxSequenceTokens is sequence_too_long and never reaches it", async () => {
  using rig = new Rig({ engine: { limits: { maxSequenceTokens: 8 } } });
  const rows = [fakeRow(3, 100), fakeRow(9, 200), fakeRow(8, 300)];
  const out = await guard(rig.run({ kind: "embed", rows }));
  const bad = out.rows[1]!;
  assert.equal(bad.kind, "error");
  assert.ok(bad.kind === "error" && bad.error instanceof SynapseError);
  assert.equal(bad.error.code, "sequence_too_long");
  assert.deepEqual(bad.error.details, { tokens: 9, max_tokens: 8 });
  assertOk(out.rows[0]!, fakeVector(rows[0]!.ids));
  assertOk(out.rows[2]!, fakeVector(rows[2]!.ids));
  assert.ok(rig.engine.calls.every((c) => c.rows.every((r) => r[0] !== 200)));
});

Deno.test("per-row errors: a NaN row is non_finite, the others keep their values", async () => {
  using rig = new Rig();
  rig.engine.nanRow = (row) => row.ids[0] === 200;
  const rows = [fakeRow(3, 100), fakeRow(3, 200), fakeRow(3, 300)];
  const out = await guard(rig.run({ kind: "embed", rows }));
  assert.equal(rig.engine.calls.length, 1, "one micro-batch");
  assertOk(out.rows[0]!, fakeVector(rows[0]!.ids));
  assert.deepEqual(out.rows[1], { kind: "non_finite" });
  assertOk(out.rows[2]!, fakeVector(rows[2]!.ids));
});

Deno.test("per-row errors: a refusal of a multi-row call, a transient error, probe_required or disposed fail the whole work", async () => {
  // The Lane's JSDoc: only a single-row call refused with a permanent error is a row's error.
  const refusal = new SynapseError("invalid_request", "the fake refuses row 200");
  {
    using rig = new Rig();
    rig.engine.failRow = (row) => row.ids[0] === 200 ? refusal : undefined;
    const got = await guard(outcome(rig.run(embed(fakeRow(3, 100), fakeRow(3, 200)))));
    assert.deepEqual(got, { err: refusal }, "two rows in one call: the whole work fails");
  }
  for (const code of ["probe_required", "disposed", "engine_crashed"] as const) {
    using rig = new Rig({ engine: { limits: { maxSequences: 1 } } });
    const err = new SynapseError(code, `the fake says ${code}`);
    rig.engine.failRow = (row) => row.ids[0] === 200 ? err : undefined;
    const got = await guard(outcome(rig.run(embed(fakeRow(3, 100), fakeRow(3, 200)))));
    assert.deepEqual(got, { err }, code);
  }
});

Deno.test("crash: engine_crashed rejects the run, and no later micro-batch starts", async () => {
  using rig = new Rig({ engine: { limits: { maxSequences: 1 } }, pipelineDepth: 1 });
  rig.engine.crash = true;
  const got = await guard(
    outcome(rig.run(embed(fakeRow(2, 1), fakeRow(3, 2), fakeRow(4, 3)))),
  );
  assert.ok("err" in got && got.err instanceof SynapseError);
  assert.equal(got.err.code, "engine_crashed");
  assert.equal(got.err.errorClass, "transient");
  assert.equal(rig.engine.calls.length, 1);
  assert.equal(rig.scheduler.inFlight, 0, "the slot is free again");
  rig.engine.crash = false;
  const again = await guard(rig.run(embed(fakeRow(2, 7))));
  assertOk(again.rows[0]!, fakeVector(fakeRow(2, 7).ids));
});

Deno.test("cancellation: a request aborted while queued never reaches the engine, and its permit is released", async () => {
  using rig = new Rig({ scheduler: { permits: 1 } });
  const slot = await rig.lane().reserve();
  const ac = new AbortController();
  const reason = new DOMException("client went away", "AbortError");
  const gone = outcome(rig.request(embed(fakeRow(3, 100)), { signal: ac.signal, bytes: 400 }));
  const next = rig.request(embed(fakeRow(3, 200)), { bytes: 300 });
  await flush();
  assert.equal(rig.admission.bytesInFlight, 700);
  assert.equal(rig.scheduler.waiters, 2);
  ac.abort(reason);
  assert.deepEqual(await guard(gone), { err: reason });
  assert.equal(rig.scheduler.waiters, 1, "removed from the queue");
  assert.equal(rig.admission.bytesInFlight, 300, "its bytes are back in the budget");
  slot.release();
  const out = await guard(next);
  assertOk(out.rows[0]!, fakeVector(fakeRow(3, 200).ids));
  assert.deepEqual(rig.firstIds(), [200], "the aborted request never reached the engine");
  assert.equal(rig.admission.bytesInFlight, 0);
  assert.equal(rig.lane().activeRequests, 0);
});

Deno.test("cancellation: a signal aborted before run rejects with its reason and runs nothing", async () => {
  using rig = new Rig();
  const ac = new AbortController();
  ac.abort(new DOMException("already gone", "AbortError"));
  const got = await guard(outcome(rig.request(embed(fakeRow(3, 1)), { signal: ac.signal })));
  assert.deepEqual(got, { err: ac.signal.reason });
  assert.equal(rig.engine.calls.length, 0);
  assert.equal(rig.admission.bytesInFlight, 0);
});

Deno.test("cancellation: an embed aborted while running stops at the next micro-batch, answered once its calls end", async () => {
  using rig = new Rig({ engine: { limits: { maxSequences: 1 } }, pipelineDepth: 2 });
  rig.engine.hold = true;
  rig.engine.abortEndsHeld = false; // the engine stops only at its next boundary
  const ac = new AbortController();
  const reason = new DOMException("bus Cancel", "AbortError");
  const rows = [1, 2, 3, 4].map((k) => fakeRow(3, 100 * k));
  const run = track(rig.request({ kind: "embed", rows }, { signal: ac.signal }));
  await rig.engine.whenCalls(2);
  ac.abort(reason);
  await flush();
  assert.ok(rig.engine.calls.every((c) => c.signal?.aborted), "each call carries the signal");
  assert.equal(run.settled(), false, "an embed is answered when its calls in flight end");
  rig.engine.proceedAll();
  assert.deepEqual(await guard(outcome(run.result)), { err: reason });
  assert.equal(rig.engine.calls.length, 2, "no micro-batch started after the abort");
  assert.equal(rig.scheduler.inFlight, 0);
  assert.equal(rig.admission.bytesInFlight, 0);
});

Deno.test("cancellation: a generation is answered as soon as it aborts; the slot frees when the engine stops", async () => {
  using rig = new Rig({ engine: { task: "generate" }, scheduler: { permits: 1 } });
  rig.engine.hold = true;
  rig.engine.abortEndsHeld = false;
  const ac = new AbortController();
  const reason = new DOMException("client went away", "AbortError");
  const first = track(
    rig.request({ kind: "generate", request: { ids: fakeRow(3, 10).ids, maxTokens: 5 } }, {
      cls: "decode",
      signal: ac.signal,
    }),
  );
  const second = rig.request({
    kind: "generate",
    request: { ids: fakeRow(2, 50).ids, maxTokens: 1 },
  }, {
    cls: "decode",
  });
  await rig.engine.whenCalls(1);
  ac.abort(reason);
  assert.deepEqual(await guard(outcome(first.result)), { err: reason });
  await flush();
  assert.equal(rig.engine.calls.length, 1, "the engine still holds the slot");
  assert.equal(rig.scheduler.inFlight, 1);
  assert.equal(rig.engine.calls[0]!.signal?.aborted, true, "the engine was told to stop");
  rig.engine.hold = false;
  rig.engine.calls[0]!.proceed();
  const out = await guard(second);
  assert.deepEqual(out.output.generatedIds, [52]);
  assert.equal(out.output.finishReason, "max_tokens");
});

Deno.test("generation: `stop` ends it early as a success (cancelled) and onTokens sees the ids", async () => {
  using rig = new Rig({ engine: { task: "generate" } });
  rig.engine.hold = true;
  const stop = new AbortController();
  const seen: number[][] = [];
  const run = rig.run(
    { kind: "generate", request: { ids: fakeRow(3, 10).ids, maxTokens: 5 } },
    { cls: "decode", stop: stop.signal, onTokens: (ids) => seen.push(ids) },
  );
  await rig.engine.whenCalls(1);
  stop.abort();
  const out = await guard(run);
  assert.equal(out.output.finishReason, "cancelled");
  rig.engine.hold = false;
  const full = await guard(
    rig.run(
      { kind: "generate", request: { ids: fakeRow(3, 10).ids, maxTokens: 5 } },
      { cls: "decode", onTokens: (ids) => seen.push(ids) },
    ),
  );
  assert.deepEqual(full.output.generatedIds, [13, 14, 15]);
  assert.equal(full.output.finishReason, "stop_token");
  assert.deepEqual(seen, [[13, 14, 15]]);
});

Deno.test("refusals: over the byte budget is queue_full with a retry hint; a released permit frees the budget", () => {
  using rig = new Rig({ admission: { byteBudget: 1_000 } });
  const lane = rig.lane();
  const a = lane.admit({ bytes: 600, deadlineMs: 60_000, maxQueueMs: 5_000 });
  assert.equal(lane.activeRequests, 1);
  const err = (() => {
    try {
      lane.admit({ bytes: 600, deadlineMs: 60_000, maxQueueMs: 5_000 });
    } catch (e) {
      return e;
    }
  })();
  assert.ok(err instanceof SynapseError);
  assert.equal(err.code, "queue_full");
  assert.equal(err.errorClass, "transient");
  assert.equal(err.retryAfterMs, 100);
  assert.deepEqual(err.details, { bytes_in_flight: 600, request_bytes: 600, byte_budget: 1_000 });
  assert.equal(lane.activeRequests, 1, "a refusal holds nothing");
  a.release();
  a.release();
  assert.equal(lane.activeRequests, 0, "a permit released twice counts once");
  using b = lane.admit({ bytes: 600, deadlineMs: 60_000, maxQueueMs: 5_000 });
  assert.equal(b.maxQueueMs, 5_000);
  assert.equal(rig.admission.refusals.get("queue_full")?.count, 1);
});

Deno.test("refusals: a predicted start delay over max_queue_ms, or a finish past the deadline, is deadline_exceeded", async () => {
  using rig = new Rig({ scheduler: { permits: 1, defaultRunMs: 25 } });
  const lane = rig.lane();
  using _slot = await lane.reserve();
  // The slot is busy and no run was measured: the scheduler predicts 25 ms.
  const refuse = (req: { deadlineMs: number; maxQueueMs: number }): SynapseError => {
    try {
      lane.admit({ bytes: 1, ...req });
    } catch (e) {
      assert.ok(e instanceof SynapseError);
      return e;
    }
    assert.fail("admitted");
  };
  const queue = refuse({ deadlineMs: 60_000, maxQueueMs: 10 });
  assert.equal(queue.code, "deadline_exceeded");
  assert.equal(queue.retryAfterMs, 100);
  assert.deepEqual(queue.details, { predicted_delay_ms: 25, max_queue_ms: 10 });
  const late = refuse({ deadlineMs: 20, maxQueueMs: 5_000 });
  assert.equal(late.code, "deadline_exceeded");
  assert.deepEqual(late.details, { predicted_finish_ms: 25, deadline_ms: 20 });
  assert.equal(lane.activeRequests, 0);
  using ok = lane.admit({ bytes: 1, deadlineMs: 60_000, maxQueueMs: 25 });
  assert.equal(ok.deadlineAtMs, rig.t + 60_000);
});

Deno.test("max_queue_ms: a run not started in time is deadline_exceeded (retry hint) and never reaches the engine", async () => {
  using rig = new Rig({ scheduler: { permits: 1 } });
  const lane = rig.lane();
  const permit = lane.admit({ bytes: 10, deadlineMs: 60_000, maxQueueMs: 0 });
  const slot = await lane.reserve();
  const got = await guard(outcome(lane.run(embed(fakeRow(3, 100)), { permit })));
  permit.release();
  assert.ok("err" in got && got.err instanceof SynapseError, String("err" in got && got.err));
  assert.equal(got.err.code, "deadline_exceeded");
  assert.equal(got.err.retryAfterMs, 100);
  assert.deepEqual(got.err.details, { reason: "max_queue_ms", max_queue_ms: 0 });
  assert.equal(rig.scheduler.waiters, 0);
  slot.release();
  await flush();
  assert.equal(rig.engine.calls.length, 0);
});

Deno.test("max_queue_ms: once started, a run is no longer bound by it", async () => {
  using rig = new Rig();
  rig.engine.hold = true;
  const run = track(rig.request(embed(fakeRow(3, 100)), { maxQueueMs: 0 }));
  await rig.engine.whenCalls(1);
  await new Promise((r) => setTimeout(r, 20)); // past the 0 ms timer, had it not been stopped
  assert.equal(rig.engine.calls[0]!.signal?.aborted, false);
  assert.equal(run.settled(), false);
  rig.engine.proceedAll();
  const out = await guard(run.result);
  assertOk(out.rows[0]!, fakeVector(fakeRow(3, 100).ids));
});

Deno.test("deadline: a run past its deadline rejects with TimeoutError, queued or running", async () => {
  using rig = new Rig({ scheduler: { permits: 1 } });
  const lane = rig.lane();
  rig.engine.hold = true;
  // Running: the engine holds the call when the deadline passes.
  {
    const permit = lane.admit({ bytes: 10, deadlineMs: 50, maxQueueMs: 5_000 });
    rig.t += 1_000; // the lane's clock says the deadline has passed
    const got = await guard(outcome(lane.run(embed(fakeRow(3, 100)), { permit })));
    permit.release();
    assert.ok("err" in got && got.err instanceof DOMException);
    assert.equal(got.err.name, "TimeoutError");
    assert.equal(rig.engine.calls.length, 1);
    assert.equal(rig.engine.calls[0]!.signal?.aborted, true);
  }
  // Queued: it never reaches the engine.
  {
    const slot = await lane.reserve();
    const permit = lane.admit({ bytes: 10, deadlineMs: 50, maxQueueMs: 5_000 });
    rig.t += 1_000;
    const got = await guard(outcome(lane.run(embed(fakeRow(3, 200)), { permit })));
    permit.release();
    assert.ok("err" in got && got.err instanceof DOMException);
    assert.equal(got.err.name, "TimeoutError");
    slot.release();
    await flush();
    assert.equal(rig.engine.calls.length, 1, "the queued run never reached the engine");
  }
});

Deno.test("activeRequests: an admitted request holds the lane until released; a run without a permit while it runs", async () => {
  using rig = new Rig();
  const lane = rig.lane();
  const permit = lane.admit({ bytes: 1, deadlineMs: 60_000, maxQueueMs: 5_000 });
  assert.equal(lane.activeRequests, 1);
  permit.release();
  assert.equal(lane.activeRequests, 0);
  rig.engine.hold = true;
  const run = rig.run(embed(fakeRow(3, 1)));
  await rig.engine.whenCalls(1);
  assert.equal(lane.activeRequests, 1);
  assert.equal(lane.busy, true);
  rig.engine.proceedAll();
  await guard(run);
  assert.equal(lane.activeRequests, 0);
  assert.equal(lane.busy, false);
  assert.equal(rig.lane("bulk").activeRequests, 0, "per lane, not per scheduler");
});

Deno.test("activeRequests: a request running under its own permit counts once (model_in_use holders)", async () => {
  using rig = new Rig();
  const lane = rig.lane();
  rig.engine.hold = true;
  const req = rig.request(embed(fakeRow(3, 1)), { bytes: 1 });
  await rig.engine.whenCalls(1);
  assert.equal(lane.activeRequests, 1, "admitted and running is one request, not two");
  rig.engine.proceedAll();
  await guard(req);
  assert.equal(lane.activeRequests, 0);
});

Deno.test("timing: queueTimeMs is admission to start on the lane's clock", async () => {
  using rig = new Rig({ scheduler: { permits: 1 } });
  const lane = rig.lane();
  const slot = await lane.reserve();
  using permit = lane.admit({ bytes: 10, deadlineMs: 60_000, maxQueueMs: 5_000 });
  const run = lane.run(embed(fakeRow(3, 100)), { permit });
  await flush();
  rig.t += 40;
  slot.release();
  const out = await guard(run);
  assert.equal(out.queueTimeMs, 40);
  assert.equal(out.inferenceMs, 0);
  assert.equal(lane.lastUsedMs, rig.t);
});

Deno.test("disposal: a run queued when the scheduler is disposed rejects with disposed", async () => {
  using rig = new Rig({ scheduler: { permits: 1 } });
  const slot = await rig.lane().reserve();
  const run = outcome(rig.run(embed(fakeRow(3, 100))));
  await flush();
  rig.scheduler.dispose();
  const got = await guard(run);
  assert.ok("err" in got && got.err instanceof SynapseError);
  assert.equal(got.err.code, "disposed");
  slot.release();
  assert.equal(rig.engine.calls.length, 0);
});
