/**
 * registry.controlLanes(): control-class lanes over a model's own runtimes and schedulers, for
 * the probe (issue 18): the query lane on the interactive runtime, the batch lane on the bulk
 * runtime (loaded on demand), and their work picked before queued interactive work.
 */
import assert from "node:assert/strict";
import { SynapseError } from "../../lib/contract/errors.ts";
import { startSynapse } from "../_helpers.ts";

Deno.test("registry.controlLanes() gives control-class lanes over the model's two ORT runtimes", async () => {
  await using t = await startSynapse();
  const reg = t.syn.registry;
  const model = await reg.ready("synapse-tiny-embed");
  const { query, batch } = reg.controlLanes("synapse-tiny-embed");
  assert.equal(query.cls, "control");
  assert.equal(batch.cls, "control");
  assert.equal(query.name, "ort-interactive");
  assert.equal(batch.name, "ort-bulk");
  assert.equal(query.engine, model.interactive.engine);
  assert.equal(batch.engine, model.bulk.engine);
  const row = model.tokenizer.encode("hello world", { maxTokens: model.maxTokens });
  const q = await query.run({ kind: "embed", rows: [row] });
  // The bulk thread loads the model on this first call, as a job's first quantum would.
  const b = await batch.run({ kind: "embed", rows: [row, row] });
  assert.equal(q.rows[0]!.kind, "ok");
  assert.equal(b.rows.length, 2);
  const qv = q.rows[0]!.kind === "ok" ? q.rows[0]!.values : undefined;
  for (const r of b.rows) {
    assert.equal(r.kind, "ok");
    if (r.kind === "ok") assert.equal(r.values.length, model.dims);
    if (r.kind === "ok") assert.ok(Math.abs(r.values[0]! - qv![0]!) < 1e-5);
  }
  // The control class is counted on the same scheduler the interactive lane reports.
  assert.ok(model.interactive.stats().classes.control.dispatched >= 1);
});

Deno.test("registry.controlLanes() work is picked before queued interactive work", async () => {
  await using t = await startSynapse();
  const reg = t.syn.registry;
  const model = await reg.ready("synapse-tiny-embed");
  const { query } = reg.controlLanes("synapse-tiny-embed");
  const row = model.tokenizer.encode("hello world", { maxTokens: model.maxTokens });
  // Hold both interactive slots, queue interactive work, then control work; free one slot.
  const a = await model.interactive.reserve();
  const b = await model.interactive.reserve();
  const order: string[] = [];
  const interactive = model.interactive.run({ kind: "embed", rows: [row] }).then(() => {
    order.push("interactive");
  });
  const control = query.run({ kind: "embed", rows: [row] }).then(() => {
    order.push("control");
  });
  // Wait until both are queued.
  while (model.interactive.stats().depths.control < 1) {
    await new Promise((r) => setTimeout(r, 5));
  }
  a.release();
  await control;
  b.release();
  await interactive;
  assert.deepEqual(order, ["control", "interactive"]);
});

Deno.test("registry.controlLanes() refuses an unknown model with unknown_model", async () => {
  await using t = await startSynapse();
  assert.throws(
    () => t.syn.registry.controlLanes("nope"),
    (e) => e instanceof SynapseError && e.code === "unknown_model",
  );
});
