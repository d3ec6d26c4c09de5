/**
 * A request's signal (lib/sched/request_signal.ts): a `deadline_ms` or `max_queue_ms` longer than
 * a timer can hold (2^31 − 1 ms) waits, instead of firing after 1 ms as an overflowing timer does
 * (a caller sending a huge deadline to mean "none" had its request refused at once).
 */
import assert from "node:assert/strict";
import { requestSignal } from "../../lib/sched/request_signal.ts";

Deno.test("requestSignal: deadlines and queue limits past 2^31 - 1 ms do not fire at once", async () => {
  using req = requestSignal({ callerSignal: undefined, deadlineMs: 3e9, maxQueueMs: 5e9 });
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(req.signal.aborted, false);
  req.started();
});

Deno.test("requestSignal: a short deadline aborts with a TimeoutError; the queue limit with deadline_exceeded max_queue_ms", async () => {
  {
    using req = requestSignal({ callerSignal: undefined, deadlineMs: 5, maxQueueMs: 1e6 });
    req.started();
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(req.signal.aborted, true);
    assert.equal((req.signal.reason as DOMException).name, "TimeoutError");
  }
  {
    using req = requestSignal({ callerSignal: undefined, deadlineMs: 1e6, maxQueueMs: 5 });
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(req.signal.aborted, true);
    assert.equal(req.signal.reason.code, "deadline_exceeded");
    assert.equal(req.signal.reason.details.reason, "max_queue_ms");
  }
});
