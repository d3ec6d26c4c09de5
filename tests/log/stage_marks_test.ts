import assert from "node:assert/strict";
import { markStage, setStageSink, spanStage, stageMarksOn } from "../../lib/log/stage_marks.ts";
import { MODELS, preload, resultOf, startSynapse } from "../_helpers.ts";

Deno.test("markStage() and spanStage() record nothing without a sink", () => {
  assert.equal(stageMarksOn(), false);
  markStage("params");
  spanStage("worker.session_run", 1);
  const seen: string[] = [];
  setStageSink({ mark: (s) => void seen.push(s), span: (s) => void seen.push(s) });
  try {
    assert.equal(stageMarksOn(), true);
  } finally {
    setStageSink(undefined);
  }
  markStage("after");
  assert.deepEqual(seen, []);
});

Deno.test("one embed.query marks every stage of the per-stage breakdown, in call order", async () => {
  await using t = await startSynapse({
    preload_models: [preload(`${MODELS}/synapse-tiny-embed`, "embed")],
  });
  resultOf(await t.syn.call("embed.query", { text: "warm up" }));
  const marks: [string, number][] = [];
  const spans: [string, number][] = [];
  setStageSink({
    mark: (stage, at) => void marks.push([stage, at]),
    span: (stage, ms) => void spans.push([stage, ms]),
  });
  let start: number;
  try {
    start = performance.now();
    resultOf(await t.syn.call("embed.query", { text: "where does the time go" }));
  } finally {
    setStageSink(undefined);
  }
  // bench/query_stages.ts reads these names; a stage lost or moved breaks its table.
  assert.deepEqual(marks.map(([s]) => s), [
    "params",
    "resolve",
    "admit",
    "tokenize",
    "schedule",
    "plan",
    "pack",
    "reply",
    "collect",
    "settle",
    "envelope",
    "dispatch",
    "metrics",
  ]);
  let prev = start;
  for (const [stage, at] of marks) {
    assert.ok(at >= prev, `${stage} marked before the stage ahead of it`);
    prev = at;
  }
  assert.deepEqual(spans.map(([s]) => s), [
    "worker.tensors",
    "worker.session_run",
    "worker.pool",
  ]);
  for (const [stage, ms] of spans) assert.ok(ms >= 0 && Number.isFinite(ms), `${stage}: ${ms}`);
});
