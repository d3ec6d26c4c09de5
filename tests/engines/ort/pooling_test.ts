import assert from "node:assert/strict";
import { poolHiddenStates } from "../../../lib/engines/ort/pooling.ts";

// Two rows, seq 3, dims 2. Row 0 has 2 real tokens, row 1 has 3.
const hidden = Float32Array.of(
  1,
  2,
  3,
  4,
  100,
  100, // row 0 (last position is padding)
  5,
  6,
  7,
  8,
  9,
  10, // row 1
);

Deno.test("poolHiddenStates() mean ignores padding", () => {
  const { data, nonFinite } = poolHiddenStates(hidden, [2, 3], 3, 2, "mean", false);
  assert.deepEqual(Array.from(data), [2, 3, 7, 8]);
  assert.deepEqual(Array.from(nonFinite), [0, 0]);
});

Deno.test("poolHiddenStates() cls takes position 0 and last_token the last real token", () => {
  assert.deepEqual(Array.from(poolHiddenStates(hidden, [2, 3], 3, 2, "cls", false).data), [
    1,
    2,
    5,
    6,
  ]);
  assert.deepEqual(
    Array.from(poolHiddenStates(hidden, [2, 3], 3, 2, "last_token", false).data),
    [3, 4, 9, 10],
  );
});

Deno.test("poolHiddenStates() L2-normalises each row", () => {
  const { data } = poolHiddenStates(Float32Array.of(3, 4), [1], 1, 2, "cls", true);
  assert.ok(Math.abs(data[0]! - 0.6) < 1e-7 && Math.abs(data[1]! - 0.8) < 1e-7);
  const zero = poolHiddenStates(Float32Array.of(0, 0), [1], 1, 2, "cls", true);
  assert.deepEqual(Array.from(zero.data), [0, 0]);
});

Deno.test("poolHiddenStates() flags rows with NaN or Infinity (F6)", () => {
  const h = Float32Array.of(1, NaN, 1, 1, Infinity, 0);
  const { nonFinite } = poolHiddenStates(h, [1, 1, 1], 1, 2, "cls", true);
  assert.deepEqual(Array.from(nonFinite), [1, 0, 1]);
});
