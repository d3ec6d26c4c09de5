import assert from "node:assert/strict";
import { sleep } from "../lib/async.ts";

Deno.test("sleep() resolves after its wait, with or without a signal", async () => {
  const t0 = performance.now();
  await sleep(20);
  assert.ok(performance.now() - t0 >= 15, "it waited");
  await sleep(0, new AbortController().signal);
});

Deno.test("sleep() rejects with signal.reason when the signal aborts, by default", async () => {
  const ac = new AbortController();
  const reason = new Error("stop");
  const p = sleep(60_000, ac.signal);
  ac.abort(reason);
  await assert.rejects(p, (err) => err === reason);
});

Deno.test("sleep() rejects at once when the signal is already aborted", async () => {
  const reason = { why: "already" };
  await assert.rejects(sleep(60_000, AbortSignal.abort(reason)), (err) => err === reason);
  await assert.rejects(sleep(60_000, AbortSignal.abort(reason), "reject"), (e) => e === reason);
});

Deno.test("sleep() with onAbort 'resolve' resolves early instead of rejecting", async () => {
  const ac = new AbortController();
  const p = sleep(60_000, ac.signal, "resolve");
  ac.abort(new Error("stop"));
  assert.equal(await p, undefined);
  assert.equal(await sleep(60_000, AbortSignal.abort(), "resolve"), undefined);
});

Deno.test("sleep() leaves no listener behind once it settles", async () => {
  const ac = new AbortController();
  let added = 0;
  let removed = 0;
  const signal = ac.signal;
  const add = signal.addEventListener.bind(signal);
  const remove = signal.removeEventListener.bind(signal);
  signal.addEventListener = ((...a: Parameters<typeof add>) => {
    added++;
    add(...a);
  }) as typeof signal.addEventListener;
  signal.removeEventListener = ((...a: Parameters<typeof remove>) => {
    removed++;
    remove(...a);
  }) as typeof signal.removeEventListener;
  await sleep(1, signal);
  assert.deepEqual([added, removed], [1, 1]);
  // An abort after it settled changes nothing.
  ac.abort();
});
