/**
 * The interactive ORT thread's sessions spin inside a run and stop when it returns
 * (`session.force_spinning_stop`, docs/internals.md §6 "Sharing the cores"). Before, every query
 * left an intra-op thread spinning through onnxruntime's spin window: 35–40 ms of CPU in the
 * 100 ms after a run on the 2-core development VM, against 0.3–1.5 ms now. Process CPU time, not
 * wall time, so the check holds on a slow or loaded machine (a loaded one gives a spinner less).
 */
import assert from "node:assert/strict";
import process from "node:process";
import { OrtThread } from "../../../lib/engines/ort/ort_thread.ts";
import { MINILM } from "../../_helpers.ts";

Deno.test("a spinning OrtThread leaves no thread spinning after a run returns", async () => {
  using thread = new OrtThread({ intraOpThreads: 2, allowSpinning: true });
  await thread.load({
    modelRef: "m",
    path: `${MINILM}/model.onnx`,
    task: "embed",
    pooling: "mean",
    normalize: true,
  });
  const row = {
    ids: Int32Array.from({ length: 16 }, (_, i) => 1000 + i),
    typeIds: new Int32Array(16),
  };
  // The least CPU over three runs: a stray timer or GC in one window cannot fail the check, and a
  // spinner burns in every window.
  let least = Infinity;
  for (let k = 0; k < 3; k++) {
    const r = await thread.run("m", [row]);
    assert.equal(r.dims, 384);
    const before = process.cpuUsage();
    await new Promise((resolve) => setTimeout(resolve, 100));
    const used = process.cpuUsage(before);
    least = Math.min(least, (used.user + used.system) / 1000);
  }
  assert.ok(least < 10, `${least.toFixed(1)} ms of CPU in the 100 ms after a run: a thread spun`);
});
