import assert from "node:assert/strict";
import { planMicroBatches } from "../../lib/sched/micro_batch.ts";

Deno.test("planMicroBatches() sorts by length and keeps every index once", () => {
  const lengths = [50, 3, 10, 3, 200, 11];
  const plan = planMicroBatches(lengths, { maxBatchTokens: 64, maxSequences: 8 });
  assert.deepEqual(plan.flat().sort((a, b) => a - b), [0, 1, 2, 3, 4, 5]);
  const flat = plan.flat().map((i) => lengths[i]!);
  assert.deepEqual(flat, [...flat].sort((a, b) => a - b));
  // Equal lengths keep input order.
  assert.deepEqual(plan[0]!.slice(0, 2), [1, 3]);
});

Deno.test("planMicroBatches() keeps padded tokens and rows within the budget", () => {
  const lengths = Array.from({ length: 100 }, (_, i) => 1 + ((i * 37) % 90));
  for (const [maxBatchTokens, maxSequences] of [[128, 4], [512, 64], [4096, 8]] as const) {
    const plan = planMicroBatches(lengths, { maxBatchTokens, maxSequences });
    for (const b of plan) {
      const longest = Math.max(...b.map((i) => lengths[i]!));
      assert.ok(b.length <= maxSequences);
      assert.ok(b.length === 1 || b.length * longest <= maxBatchTokens);
    }
  }
});

Deno.test("planMicroBatches() gives an over-budget sequence a batch of its own", () => {
  const plan = planMicroBatches([10, 1000, 12], { maxBatchTokens: 100, maxSequences: 8 });
  assert.deepEqual(plan, [[0, 2], [1]]);
});

Deno.test("planMicroBatches() throws RangeError for invalid limits", () => {
  for (const bad of [0, -1, 1.5, NaN, Infinity]) {
    assert.throws(
      () => planMicroBatches([1], { maxBatchTokens: bad, maxSequences: 1 }),
      RangeError,
    );
    assert.throws(
      () => planMicroBatches([1], { maxBatchTokens: 1, maxSequences: bad }),
      RangeError,
    );
  }
});

Deno.test("planMicroBatches() of nothing is nothing", () => {
  assert.deepEqual(planMicroBatches([], { maxBatchTokens: 1, maxSequences: 1 }), []);
});
