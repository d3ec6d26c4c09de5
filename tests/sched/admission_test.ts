import assert from "node:assert/strict";
import { Admission } from "../../lib/sched/admission.ts";
import { SynapseError } from "../../lib/contract/errors.ts";

const limits = {
  byteBudget: 100,
  maxQueueMs: 5000,
  estimatedExecutionMs: 25,
  maxConcurrentWorkers: 1,
};
const req = { bytes: 60, deadlineMs: 30000, maxQueueMs: 5000, queueClass: "interactive" as const };

Deno.test("Admission.admit() refuses over the byte budget with queue_full and a retry hint", () => {
  let now = 1000;
  const a = new Admission(limits, { now: () => now });
  const p = a.admit(req);
  assert.equal(a.bytesInFlight, 60);
  assert.throws(() => a.admit(req), (e: unknown) => {
    assert.ok(e instanceof SynapseError);
    assert.equal(e.code, "queue_full");
    assert.equal(e.toWire().retry_after_ms, 100);
    return true;
  });
  now = 2000;
  p.release();
  p.release(); // idempotent
  assert.equal(a.bytesInFlight, 0);
  a.admit(req).release();
  assert.deepEqual(a.refusals.get("queue_full"), { count: 1, last_at_ms: 1000 });
});

Deno.test("Admission.admit() refuses a start delay over max_queue_ms and a finish past the deadline", () => {
  const a = new Admission({ ...limits, byteBudget: 1e9 });
  using _p = a.admit(req);
  // One permit busy: predicted delay 25 ms.
  assert.throws(() => a.admit({ ...req, maxQueueMs: 10 }), { code: "deadline_exceeded" });
  assert.throws(() => a.admit({ ...req, deadlineMs: 40 }), { code: "deadline_exceeded" });
  a.admit({ ...req, deadlineMs: 60 }).release();
});

Deno.test("Admission permits release through using", () => {
  const a = new Admission(limits);
  {
    using _p = a.admit(req);
    assert.equal(a.inFlight.interactive, 1);
  }
  assert.equal(a.inFlight.interactive, 0);
  assert.equal(a.bytesInFlight, 0);
});
