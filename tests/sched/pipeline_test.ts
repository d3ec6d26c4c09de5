import assert from "node:assert/strict";
import { runPipelined } from "../../lib/sched/pipeline.ts";

Deno.test("runPipelined() keeps at most depth calls in flight and returns results in order", async () => {
  let inFlight = 0, peak = 0;
  const out = await runPipelined([5, 1, 4, 2, 3], async (x) => {
    peak = Math.max(peak, ++inFlight);
    await new Promise((r) => setTimeout(r, x));
    inFlight--;
    return x * 10;
  }, { depth: 2 });
  assert.deepEqual(out, [50, 10, 40, 20, 30]);
  assert.equal(peak, 2);
});

Deno.test("runPipelined() starts no call after the signal aborts and throws its reason", async () => {
  const ac = new AbortController();
  const started: number[] = [];
  await assert.rejects(
    runPipelined([0, 1, 2, 3, 4, 5], async (x) => {
      started.push(x);
      if (x === 1) ac.abort(new Error("gone"));
      await new Promise((r) => setTimeout(r, 1));
    }, { depth: 2, signal: ac.signal }),
    /gone/,
  );
  assert.deepEqual(started, [0, 1]);
});

Deno.test("runPipelined() stops at the first failing call", async () => {
  const started: number[] = [];
  await assert.rejects(
    runPipelined([0, 1, 2, 3], (x) => {
      started.push(x);
      return x === 0 ? Promise.reject(new Error("boom")) : new Promise((r) => setTimeout(r, 5));
    }, { depth: 1 }),
    /boom/,
  );
  assert.deepEqual(started, [0]);
});
