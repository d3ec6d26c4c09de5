import assert from "node:assert/strict";
import { quantumTokensFor, takeQuantum } from "../../lib/sched/quantum.ts";

Deno.test("quantumTokensFor() targets ~200 ms of engine work within [256, 3072]", () => {
  assert.equal(quantumTokensFor(10_000), 2000);
  assert.equal(quantumTokensFor(19_700), 3072); // 3940 capped (docs/internals.md §6 default)
  assert.equal(quantumTokensFor(500), 256);
  assert.equal(quantumTokensFor(0), 256);
  assert.equal(quantumTokensFor(10_000, { targetMs: 100 }), 1000);
  assert.equal(quantumTokensFor(10_000, { minTokens: 64, maxTokens: 512 }), 512);
  assert.equal(quantumTokensFor(1234.5, { targetMs: 100, minTokens: 1 }), 123);
});

Deno.test("quantumTokensFor() throws for invalid arguments", () => {
  for (const tps of [-1, NaN, Infinity]) {
    assert.throws(() => quantumTokensFor(tps), RangeError);
  }
  for (const targetMs of [0, -1, NaN, Infinity]) {
    assert.throws(() => quantumTokensFor(1000, { targetMs }), RangeError);
  }
  for (const minTokens of [0, -1, 1.5, NaN]) {
    assert.throws(() => quantumTokensFor(1000, { minTokens }), RangeError);
  }
  assert.throws(() => quantumTokensFor(1000, { minTokens: 512, maxTokens: 256 }), RangeError);
  assert.throws(() => quantumTokensFor(1000, { maxTokens: 1.5 }), RangeError);
});

Deno.test("takeQuantum() takes the items that fit and at least one", () => {
  const lengths = [100, 100, 100, 500, 50, 50];
  assert.equal(takeQuantum(lengths, 0, 250), 2);
  assert.equal(takeQuantum(lengths, 0, 300), 3);
  assert.equal(takeQuantum(lengths, 2, 250), 3);
  assert.equal(takeQuantum(lengths, 3, 250), 4); // longer than the quantum: alone
  assert.equal(takeQuantum(lengths, 4, 250), 6);
  assert.equal(takeQuantum(lengths, 6, 250), 6); // nothing left
  assert.equal(takeQuantum(Int32Array.of(1, 1, 1), 0, 3072), 3);
});

Deno.test("takeQuantum() covers every item exactly once when looped", () => {
  const lengths = Array.from({ length: 200 }, (_, i) => (i * 37) % 700 + 1);
  let covered = 0;
  for (let start = 0; start < lengths.length;) {
    const end = takeQuantum(lengths, start, 1024);
    assert.ok(end > start);
    const sum = lengths.slice(start, end).reduce((a, b) => a + b, 0);
    assert.ok(end - start === 1 || sum <= 1024);
    covered += end - start;
    start = end;
  }
  assert.equal(covered, lengths.length);
});

Deno.test("takeQuantum() throws for invalid start and quantum", () => {
  for (const start of [-1, 4, 1.5, NaN]) {
    assert.throws(() => takeQuantum([1, 2, 3], start, 10), RangeError);
  }
  for (const q of [0, -1, 1.5, NaN, Infinity]) {
    assert.throws(() => takeQuantum([1, 2, 3], 0, q), RangeError);
  }
});
