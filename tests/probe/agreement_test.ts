/** The probe's metrics against hand-computed values. */
import assert from "node:assert/strict";
import {
  allFinite,
  compareTokens,
  cosine,
  cosineStats,
  maxAbsDelta,
  norm,
  pearson,
  quantile,
  topK,
  topKOverlap,
  worstDecile,
} from "../../lib/probe/agreement.ts";

function close(actual: number, expected: number, tol = 1e-12): void {
  assert.ok(Math.abs(actual - expected) <= tol, `${actual} is not ${expected} ± ${tol}`);
}

Deno.test("cosine() and norm() give the hand-computed values", () => {
  close(cosine([1, 0], [0, 1]), 0);
  close(cosine([1, 2, 3], [2, 4, 6]), 1);
  close(cosine([1, 0], [-1, 0]), -1);
  // 32 / sqrt(14 · 77)
  close(cosine([1, 2, 3], [4, 5, 6]), 32 / Math.sqrt(1078));
  close(cosine(Float32Array.of(1, 2, 3), [4, 5, 6]), 0.9746318461970762, 1e-7);
  close(cosine([0, 0], [0, 0]), 1);
  close(cosine([0, 0], [1, 0]), 0);
  close(norm([3, 4]), 5);
  close(norm([]), 0);
  assert.throws(() => cosine([1], [1, 2]), RangeError);
});

Deno.test("cosineStats() gives the mean, the min and where the min is", () => {
  const s = cosineStats([[1, 0], [1, 0], [1, 2, 3]], [[1, 0], [0, 1], [4, 5, 6]]);
  close(s.values[0]!, 1);
  close(s.values[1]!, 0);
  close(s.mean, (1 + 0 + 32 / Math.sqrt(1078)) / 3);
  close(s.min, 0);
  assert.equal(s.minIndex, 1);
  const empty = cosineStats([], []);
  assert.ok(Number.isNaN(empty.mean));
  assert.equal(empty.minIndex, -1);
  assert.throws(() => cosineStats([[1]], []), RangeError);
});

Deno.test("topK() ranks by cosine, skips the query and breaks ties by index", () => {
  const v = [[1, 0], [0.9, 0.1], [0, 1], [0.1, 0.9]];
  assert.deepEqual(topK(v, 0, 1), [1]);
  // cos(v0, v3) = 0.1/|v3| > cos(v0, v2) = 0
  assert.deepEqual(topK(v, 0, 3), [1, 3, 2]);
  // v1 and v2 tie against v0 (both cosine 1): lower index first.
  assert.deepEqual(topK([[1, 0], [2, 0], [3, 0], [0, 1]], 0, 2), [1, 2]);
  assert.throws(() => topK(v, 0, 0), RangeError);
  assert.throws(() => topK(v, 4, 1), RangeError);
});

Deno.test("topKOverlap() gives each query's share of agreed neighbours", () => {
  const lane = [[1, 0], [0.9, 0.1], [0, 1], [0.1, 0.9]];
  // Reference nearest neighbours (hand-computed cosines):
  // r0→r1 (.9939 > .832), r1→r0 (.9939 > .888), r2→r3 (.643 > .2195), r3→r1 (.888 > .832 > .643).
  const ref = [[1, 0], [0.9, 0.1], [0.1, 0.9], [0.6, 0.4]];
  assert.deepEqual(topKOverlap(lane, ref, 1), [1, 1, 1, 0]);
  assert.deepEqual(topKOverlap(lane, lane, 2), [1, 1, 1, 1]);
  // k is cut to n - 1.
  assert.deepEqual(topKOverlap(lane, ref, 10), [1, 1, 1, 1]);
  assert.deepEqual(topKOverlap([[1]], [[1]], 3), []);
  assert.throws(() => topKOverlap(lane, ref.slice(1), 1), RangeError);
});

Deno.test("quantile() interpolates like numpy; worstDecile() is the 10th percentile", () => {
  const ten = [10, 9, 8, 7, 6, 5, 4, 3, 2, 1];
  close(quantile(ten, 0), 1);
  close(quantile(ten, 1), 10);
  close(quantile(ten, 0.5), 5.5);
  // position 0.1 · 9 = 0.9 between 1 and 2
  close(quantile(ten, 0.1), 1.9);
  close(worstDecile([1, 1, 1, 1, 1, 1, 1, 1, 1, 0.5]), 0.95);
  close(worstDecile([0.7]), 0.7);
  assert.ok(Number.isNaN(worstDecile([])));
  assert.throws(() => quantile(ten, 1.5), RangeError);
});

Deno.test("pearson() gives the hand-computed correlations", () => {
  close(pearson([1, 2, 3, 4], [2, 4, 6, 8]), 1);
  close(pearson([1, 2, 3], [3, 2, 1]), -1);
  // deviations (-1.5, -.5, .5, 1.5) and (-1.5, .5, -.5, 1.5): 4 / sqrt(5 · 5)
  close(pearson([1, 2, 3, 4], [1, 3, 2, 4]), 0.8);
  close(pearson([2, 2], [2, 2]), 1);
  close(pearson([2, 2], [1, 3]), 0);
  assert.ok(Number.isNaN(pearson([1], [1])));
  assert.throws(() => pearson([1, 2], [1]), RangeError);
});

Deno.test("maxAbsDelta() and allFinite()", () => {
  close(maxAbsDelta([1, 2, 3], [1.5, 2, 2]), 1);
  close(maxAbsDelta([], []), 0);
  assert.equal(maxAbsDelta([1, NaN], [1, 0]), Infinity);
  assert.equal(maxAbsDelta([Infinity], [Infinity]), 0);
  assert.equal(allFinite(Float32Array.of(1, 2)), true);
  assert.equal(allFinite([1, NaN]), false);
  assert.equal(allFinite([-Infinity]), false);
});

Deno.test("compareTokens() names the first sequence and position that differ", () => {
  assert.deepEqual(compareTokens([[1, 2, 3], [4, 5]], [[1, 2, 3], [4, 5]]), {
    equal: true,
    matching: 2,
  });
  assert.deepEqual(compareTokens([[1, 2, 3], [4, 5], [7]], [[1, 2, 3], [4, 6], [8]]), {
    equal: false,
    matching: 1,
    firstMismatch: { index: 1, position: 1 },
  });
  // A prefix differs at the shorter length.
  assert.deepEqual(compareTokens([[1, 2]], [[1, 2, 3]]), {
    equal: false,
    matching: 0,
    firstMismatch: { index: 0, position: 2 },
  });
  assert.throws(() => compareTokens([[1]], []), RangeError);
});
