import { mulberry32 } from "../../scripts/gen_models.ts";
import assert from "node:assert/strict";
import { LaneScheduler } from "../../lib/sched/lane_scheduler.ts";
import type { LaneGrant, LaneSchedulerOptions, LaneTask } from "../../lib/sched/lane_scheduler.ts";
import type { WorkClass } from "../../lib/sched/pick_next.ts";
import { SynapseError } from "../../lib/contract/errors.ts";

/** Lets every queued microtask (dispatch passes, settle callbacks, owner loops) run. */
async function flush(): Promise<void> {
  for (let i = 0; i < 20; i++) await Promise.resolve();
}

interface Started {
  grant: LaneGrant;
  resolve: (value: string) => void;
  reject: (reason: unknown) => void;
}

/** A scheduler on a fake clock with tasks that finish only when the test says so. */
class Harness {
  t = 0;
  lane: LaneScheduler;
  /** Names in start order. */
  order: string[] = [];
  running = new Map<string, Started>();

  constructor(options: LaneSchedulerOptions = {}) {
    this.lane = new LaneScheduler({ now: () => this.t, ...options });
  }

  submit(
    name: string,
    cls: WorkClass,
    extra: Partial<LaneTask<string>> = {},
  ): Promise<string> {
    return this.lane.submit<string>({
      cls,
      tokens: 100,
      label: name,
      run: (grant) => {
        assert.ok(!this.running.has(name), `${name} ran twice`);
        this.order.push(name);
        const { promise, resolve, reject } = Promise.withResolvers<string>();
        this.running.set(name, { grant, resolve, reject });
        return promise;
      },
      ...extra,
    });
  }

  /** Resolves a running task with its name, at time `at` (ms) if given. */
  async finish(name: string, at?: number): Promise<void> {
    if (at !== undefined) this.t = at;
    const s = this.running.get(name);
    assert.ok(s, `${name} is not running (running: ${[...this.running.keys()].join(",")})`);
    this.running.delete(name);
    s.resolve(name);
    await flush();
  }

  /** Finishes whatever single task runs, until nothing is left. */
  async drain(): Promise<void> {
    while (this.running.size > 0) {
      await this.finish(this.running.keys().next().value!);
    }
  }
}

Deno.test("LaneScheduler shares 3:1 between busy interactive and bulk queues", async () => {
  const h = new Harness();
  const all: Promise<string>[] = [];
  for (let i = 1; i <= 8; i++) all.push(h.submit(`I${i}`, "interactive"));
  for (let i = 1; i <= 4; i++) all.push(h.submit(`B${i}`, "bulk"));
  await flush();
  assert.deepEqual(h.order, ["I1"]);
  await h.drain();
  assert.deepEqual(
    await Promise.all(all),
    ["I1", "I2", "I3", "I4", "I5", "I6", "I7", "I8", "B1", "B2", "B3", "B4"],
  );
  assert.deepEqual(h.order, [
    "I1",
    "I2",
    "I3",
    "B1",
    "I4",
    "I5",
    "I6",
    "B2",
    "I7",
    "I8",
    "B3",
    "B4",
  ]);
});

Deno.test("LaneScheduler runs control before queued interactive and bulk work", async () => {
  const h = new Harness();
  h.submit("B1", "bulk");
  await flush();
  h.submit("B2", "bulk");
  h.submit("I1", "interactive");
  h.submit("C1", "control");
  await flush();
  assert.deepEqual(h.order, ["B1"]); // a running task is never preempted
  await h.drain();
  assert.deepEqual(h.order, ["B1", "C1", "I1", "B2"]);
});

Deno.test("LaneScheduler runs control first among tasks submitted in one tick", async () => {
  const h = new Harness();
  h.submit("B1", "bulk");
  h.submit("I1", "interactive");
  h.submit("C1", "control");
  await flush();
  await h.drain();
  assert.deepEqual(h.order, ["C1", "I1", "B1"]);
});

Deno.test("LaneScheduler serves a bulk head older than 250 ms before interactive work", async () => {
  const h = new Harness();
  h.submit("I0", "interactive");
  await flush();
  for (let i = 1; i <= 5; i++) h.submit(`I${i}`, "interactive");
  h.submit("B1", "bulk"); // enqueued at t=0
  await flush();
  await h.finish("I0", 100); // B1 100 ms old: fair turn 0 → I1
  await h.finish("I1", 200); // 200 ms: turn 1 → I2
  await h.finish("I2", 260); // 260 ms > 250: B1 by aging (the fair cycle would say I3)
  await h.drain();
  assert.deepEqual(h.order, ["I0", "I1", "I2", "B1", "I3", "I4", "I5"]);
});

Deno.test("LaneScheduler starts interactive work right after the running bulk quantum", async () => {
  const h = new Harness();
  // Two bulk jobs, three quanta each; each owner submits its next quantum after the last one.
  async function bulkJob(name: string): Promise<void> {
    for (let q = 0; q < 3; q++) await h.submit(`${name}${q}`, "bulk");
  }
  // Three fair interactive turns first, so A0 then starts at the bulk end of the cycle.
  const early = ["I1", "I2", "I3"].map((name) => h.submit(name, "interactive"));
  const jobs = [bulkJob("A"), bulkJob("B")];
  await flush();
  await h.finish("I1", 10);
  await h.finish("I2", 20);
  await h.finish("I3", 30);
  assert.deepEqual(h.order, ["I1", "I2", "I3", "A0"]);
  const i4 = h.submit("I4", "interactive");
  await flush();
  await h.finish("A0", 180);
  assert.deepEqual(h.order.slice(4), ["I4"]); // before B0, which has waited longer
  assert.deepEqual(h.lane.depths(), { control: 0, interactive: 0, bulk: 2, decode: 0 }); // B0, then A1
  await h.drain();
  await Promise.all([...early, ...jobs, i4]);
  assert.deepEqual(h.order, ["I1", "I2", "I3", "A0", "I4", "B0", "A1", "B1", "A2", "B2"]);
});

Deno.test("LaneScheduler removes a task aborted while queued; it never runs", async () => {
  const h = new Harness();
  h.submit("I0", "interactive");
  await flush();
  const ctl = new AbortController();
  const p = h.submit("I1", "interactive", { signal: ctl.signal });
  h.submit("I2", "interactive");
  await flush();
  assert.equal(h.lane.waiters, 2);
  const reason = new Error("client went away");
  ctl.abort(reason);
  await assert.rejects(p, (e) => e === reason);
  assert.deepEqual(h.lane.depths(), { control: 0, interactive: 1, bulk: 0, decode: 0 });
  await h.drain();
  assert.deepEqual(h.order, ["I0", "I2"]);
  assert.equal(h.lane.classStats("interactive").cancelled, 1);
});

Deno.test("LaneScheduler rejects a task whose signal is already aborted", async () => {
  const h = new Harness();
  const p = h.submit("I1", "interactive", { signal: AbortSignal.abort("stop") });
  await assert.rejects(p, (e) => e === "stop");
  await flush();
  assert.deepEqual(h.order, []);
  assert.equal(h.lane.waiters, 0);
});

Deno.test("LaneScheduler skips a task found aborted at dispatch without using a turn", async () => {
  const h = new Harness();
  // A signal that reports aborted without firing its event (the dispatch-time check).
  const fake = {
    aborted: false,
    reason: "late",
    addEventListener() {},
    removeEventListener() {},
  };
  h.submit("B0", "bulk");
  await flush();
  const p1 = h.submit("I1", "interactive", { signal: fake as unknown as AbortSignal });
  h.submit("I2", "interactive");
  h.submit("I3", "interactive");
  h.submit("I4", "interactive");
  h.submit("B1", "bulk");
  await flush();
  fake.aborted = true;
  await h.drain();
  await assert.rejects(p1, (e) => e === "late");
  // I1 skipped; I2, I3, I4 still get the three interactive turns before B1.
  assert.deepEqual(h.order, ["B0", "I2", "I3", "I4", "B1"]);
});

Deno.test("LaneScheduler settles with the run's rejection and frees the slot", async () => {
  const h = new Harness();
  const boom = new Error("engine failed");
  const p1 = h.lane.submit({ cls: "interactive", tokens: 1, run: () => Promise.reject(boom) });
  const p2 = h.lane.submit({
    cls: "interactive",
    tokens: 1,
    run: () => {
      throw new TypeError("sync throw");
    },
  });
  const p3 = h.submit("I3", "interactive");
  await assert.rejects(p1, (e) => e === boom);
  await assert.rejects(p2, TypeError);
  await flush();
  assert.deepEqual(h.order, ["I3"]);
  await h.drain();
  assert.equal(await p3, "I3");
  assert.equal(h.lane.inFlight, 0);
});

Deno.test("LaneScheduler runs up to `permits` tasks at once", async () => {
  const h = new Harness({ permits: 2 });
  for (let i = 1; i <= 4; i++) h.submit(`I${i}`, "interactive");
  await flush();
  assert.deepEqual(h.order, ["I1", "I2"]);
  assert.equal(h.lane.inFlight, 2);
  assert.equal(h.lane.waiters, 2);
  await h.finish("I2");
  assert.deepEqual(h.order, ["I1", "I2", "I3"]);
  await h.drain();
  assert.equal(h.lane.inFlight, 0);
});

Deno.test("LaneScheduler passes the grant to run", async () => {
  const h = new Harness();
  const ctl = new AbortController();
  h.t = 5;
  h.submit("I1", "interactive", { signal: ctl.signal, tokens: 42 });
  h.t = 12;
  await flush();
  const s = h.running.get("I1");
  assert.ok(s);
  assert.deepEqual({ ...s.grant }, {
    cls: "interactive",
    label: "I1",
    tokens: 42,
    startDelayMs: 7,
    startedAtMs: 12,
    signal: ctl.signal,
  });
  // Aborting a running task does not free its slot.
  ctl.abort();
  await flush();
  assert.equal(h.lane.inFlight, 1);
  await h.drain();
});

Deno.test("LaneScheduler stats: percentiles, deadlines, run time and predicted delay", async () => {
  const h = new Harness();
  const idle = h.lane.stats();
  assert.deepEqual(idle.classes.bulk, {
    dispatched: 0,
    cancelled: 0,
    samples: 0,
    startDelayP50Ms: 0,
    startDelayP95Ms: 0,
    meetingDeadlines: 1,
    meanRunMs: 25,
    tokensPerSecond: 0,
  });
  for (const cls of ["control", "interactive", "bulk"] as const) {
    assert.equal(h.lane.predictedStartDelayMs(cls), 0);
  }
  h.submit("I1", "interactive", { maxQueueMs: 5 });
  h.submit("I2", "interactive", { maxQueueMs: 5 });
  h.submit("I3", "interactive");
  await flush();
  await h.finish("I1", 10); // I2 starts after 10 ms: missed its 5 ms
  await h.finish("I2", 30); // I3 starts after 30 ms: no maxQueueMs, met
  await h.finish("I3", 60);
  assert.deepEqual(h.lane.classStats("interactive"), {
    dispatched: 3,
    cancelled: 0,
    samples: 3,
    startDelayP50Ms: 10,
    startDelayP95Ms: 30,
    meetingDeadlines: 2 / 3,
    meanRunMs: 20,
    tokensPerSecond: 5000, // 300 tokens in 60 ms of run time
  });
  assert.equal(h.lane.tokensPerSecond, 5000);
  assert.equal(h.lane.predictedStartDelayMs("interactive"), 0);

  h.submit("I4", "interactive"); // starts at 60
  await flush();
  h.t = 65;
  // Slot busy: I4 should end in 20 - 5 = 15 ms.
  assert.equal(h.lane.predictedStartDelayMs("interactive"), 15);
  h.submit("I5", "interactive");
  h.submit("I6", "interactive");
  h.submit("B1", "bulk");
  await flush();
  assert.deepEqual(h.lane.depths(), { control: 0, interactive: 2, bulk: 1, decode: 0 });
  assert.equal(h.lane.inFlight, 1);
  assert.equal(h.lane.waiters, 3);
  assert.equal(h.lane.predictedStartDelayMs("control"), 15);
  assert.equal(h.lane.predictedStartDelayMs("interactive"), 15 + 2 * 20);
  // Bulk: B1 (25 ms default) plus the two queued interactive turns.
  assert.equal(h.lane.predictedStartDelayMs("bulk"), 15 + 25 + 2 * 20);
  const snap = h.lane.stats();
  assert.equal(snap.permits, 1);
  assert.equal(snap.inFlight, 1);
  assert.equal(snap.waiters, 3);
  assert.deepEqual(snap.depths, { control: 0, interactive: 2, bulk: 1, decode: 0 });
  assert.equal(snap.classes.interactive.dispatched, 4);
  await h.drain();
});

Deno.test("LaneScheduler counts a task aborted after its maxQueueMs as a missed deadline", async () => {
  const h = new Harness();
  h.submit("I0", "interactive");
  await flush();
  const ctl = new AbortController();
  const p = h.submit("I1", "interactive", { signal: ctl.signal, maxQueueMs: 50 });
  h.t = 80;
  ctl.abort("deadline");
  await assert.rejects(p);
  await h.drain();
  const s = h.lane.classStats("interactive");
  assert.equal(s.meetingDeadlines, 0.5);
  assert.equal(s.cancelled, 1);
  assert.equal(s.samples, 1);
});

Deno.test("LaneScheduler keeps a rolling window of the last N dispatches", async () => {
  const h = new Harness({ statsWindow: 4 });
  for (let i = 0; i < 10; i++) h.submit(`I${i}`, "interactive");
  await flush();
  for (let i = 0; i < 10; i++) await h.finish(`I${i}`, (i + 1) * 10);
  const s = h.lane.classStats("interactive");
  assert.equal(s.dispatched, 10);
  assert.equal(s.samples, 4);
  assert.equal(s.startDelayP50Ms, 70); // delays 60, 70, 80, 90
  assert.equal(s.startDelayP95Ms, 90);
  assert.equal(s.meanRunMs, 10);
});

Deno.test("LaneScheduler.dispose() rejects queued tasks and refuses new ones", async () => {
  const h = new Harness();
  const p0 = h.submit("I0", "interactive");
  await flush();
  const p1 = h.submit("I1", "interactive");
  const p2 = h.submit("B1", "bulk");
  h.lane.dispose();
  h.lane.dispose(); // idempotent
  assert.ok(h.lane.disposed);
  for (const p of [p1, p2]) {
    await assert.rejects(p, (e) => e instanceof SynapseError && e.code === "disposed");
  }
  assert.throws(
    () => h.submit("I2", "interactive"),
    (e) => e instanceof SynapseError && e.code === "disposed",
  );
  await h.finish("I0"); // running work finishes normally
  assert.equal(await p0, "I0");
  assert.deepEqual(h.order, ["I0"]);
});

Deno.test("LaneScheduler throws for invalid options and tasks", () => {
  for (const permits of [0, -1, 1.5, NaN, Infinity]) {
    assert.throws(() => new LaneScheduler({ permits }), RangeError);
  }
  assert.throws(() => new LaneScheduler({ statsWindow: 0 }), RangeError);
  assert.throws(() => new LaneScheduler({ weights: { interactive: 0, bulk: 1 } }), RangeError);
  assert.throws(() => new LaneScheduler({ bulkAgingMs: -1 }), RangeError);
  assert.throws(() => new LaneScheduler({ defaultRunMs: NaN }), RangeError);
  const lane = new LaneScheduler();
  const run = (): Promise<void> => Promise.resolve();
  assert.throws(
    () => lane.submit({ cls: "urgent" as WorkClass, tokens: 1, run }),
    TypeError,
  );
  for (const tokens of [-1, NaN, Infinity]) {
    assert.throws(() => lane.submit({ cls: "bulk", tokens, run }), RangeError);
  }
  assert.throws(() => lane.submit({ cls: "bulk", tokens: 1, run, maxQueueMs: -1 }), RangeError);
  assert.equal(lane.waiters, 0);
});

const prng = mulberry32;

interface Tracked {
  id: number;
  cls: WorkClass;
  runs: number;
  settles: number;
  outcome: "ok" | "err" | undefined;
  value: unknown;
  ctl: AbortController | undefined;
  abortedBeforeRun: boolean;
  finish?: { resolve: (v: number) => void; reject: (e: unknown) => void };
}

Deno.test("LaneScheduler never loses or double-runs a task over 1000 random sequences", async () => {
  const classes: WorkClass[] = ["control", "interactive", "bulk"];
  for (let seed = 1; seed <= 1000; seed++) {
    const rand = prng(seed);
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
    let t = 0;
    const permits = 1 + Math.floor(rand() * 3);
    const lane = new LaneScheduler({ permits, now: () => t });
    const tasks: Tracked[] = [];
    const running = new Set<Tracked>();
    const startOrder: Tracked[] = [];
    const ctx = `seed ${seed}`;

    const submit = (): void => {
      const cls = pick(classes);
      const r = rand();
      const ctl = r < 0.3 ? new AbortController() : undefined;
      if (ctl && r < 0.05) ctl.abort(`pre-${tasks.length}`);
      const tr: Tracked = {
        id: tasks.length,
        cls,
        runs: 0,
        settles: 0,
        outcome: undefined,
        value: undefined,
        ctl,
        abortedBeforeRun: ctl?.signal.aborted ?? false,
      };
      tasks.push(tr);
      lane.submit<number>({
        cls,
        tokens: Math.floor(rand() * 3072),
        ...(ctl ? { signal: ctl.signal } : {}),
        run: () => {
          tr.runs++;
          running.add(tr);
          startOrder.push(tr);
          const { promise, resolve, reject } = Promise.withResolvers<number>();
          tr.finish = { resolve, reject };
          return promise;
        },
      }).then(
        (v) => {
          tr.settles++;
          tr.outcome = "ok";
          tr.value = v;
        },
        (e) => {
          tr.settles++;
          tr.outcome = "err";
          tr.value = e;
        },
      );
    };
    const finishOne = (ok: boolean): void => {
      if (running.size === 0) return;
      const tr = pick([...running]);
      running.delete(tr);
      if (ok) tr.finish!.resolve(tr.id);
      else tr.finish!.reject(`fail-${tr.id}`);
    };
    const check = (): void => {
      const d = lane.depths();
      assert.equal(lane.waiters, d.control + d.interactive + d.bulk + d.decode, ctx);
      assert.equal(lane.inFlight, running.size, ctx);
      assert.ok(lane.inFlight <= permits, ctx);
      // Work-conserving: no free slot while work waits.
      if (lane.waiters > 0) assert.equal(lane.inFlight, permits, ctx);
      for (const tr of tasks) assert.ok(tr.runs <= 1 && tr.settles <= 1, ctx);
    };

    const steps = 20 + Math.floor(rand() * 60);
    for (let s = 0; s < steps; s++) {
      const r = rand();
      if (r < 0.45) submit();
      else if (r < 0.7) finishOne(true);
      else if (r < 0.75) finishOne(false);
      else if (r < 0.9) {
        const open = tasks.filter((x) => x.ctl && !x.ctl.signal.aborted);
        if (open.length > 0) {
          const tr = pick(open);
          if (tr.runs === 0) tr.abortedBeforeRun = true;
          tr.ctl!.abort(`abort-${tr.id}`);
        }
      } else t += Math.floor(rand() * 300);
      await flush();
      check();
    }
    while (running.size > 0 || lane.waiters > 0) {
      finishOne(true);
      await flush();
      check();
    }
    await flush();
    for (const tr of tasks) {
      assert.equal(tr.settles, 1, `${ctx}: task ${tr.id} settled ${tr.settles} times`);
      if (tr.abortedBeforeRun) {
        assert.equal(tr.runs, 0, `${ctx}: aborted task ${tr.id} ran`);
        assert.equal(tr.outcome, "err", ctx);
        assert.equal(tr.value, tr.ctl!.signal.reason, ctx);
      } else {
        assert.equal(tr.runs, 1, `${ctx}: task ${tr.id} ran ${tr.runs} times`);
        if (tr.outcome === "ok") assert.equal(tr.value, tr.id, ctx);
        else assert.equal(tr.value, `fail-${tr.id}`, ctx);
      }
    }
    // Within a class, tasks start in submission order.
    for (const cls of classes) {
      const ids = startOrder.filter((x) => x.cls === cls).map((x) => x.id);
      assert.deepEqual(ids, [...ids].sort((a, b) => a - b), ctx);
    }
    assert.equal(lane.inFlight, 0, ctx);
  }
});
