import assert from "node:assert/strict";
import { createOrtThreads, ORT_BULK_NICENESS } from "../../../lib/engines/ort/ort_threads.ts";
import { MODELS } from "../../_helpers.ts";

const spec = {
  modelRef: "m",
  path: `${MODELS}/synapse-tiny-embed/model.onnx`,
  task: "embed" as const,
  pooling: "mean" as const,
  normalize: true,
};
const row = { ids: Int32Array.of(2, 7, 7, 3), typeIds: new Int32Array(4) };

Deno.test("createOrtThreads() lowers only the bulk lane, and gives only the interactive lane twins", async () => {
  const { interactive, bulk } = createOrtThreads({ intraOpThreads: 1 });
  using _i = interactive;
  using _b = bulk;
  assert.equal((await interactive.load(spec)).niceness, 0);
  bulk.register(spec);
  await bulk.run("m", [row], { quiet: true });
  assert.equal(bulk.residentSessions, 1, "the bulk lane has no quiet twin");
  const linux = Deno.build.os === "linux";
  assert.equal((await bulk.load(spec)).niceness, linux ? ORT_BULK_NICENESS : 0);
  await interactive.run("m", [row], { quiet: true });
  assert.equal(interactive.residentSessions, 2, "the interactive lane made a twin");
});
