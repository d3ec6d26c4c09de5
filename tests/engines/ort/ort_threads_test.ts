import assert from "node:assert/strict";
import {
  createOrtThreads,
  ORT_BULK_NICENESS,
  OrtBulkView,
} from "../../../lib/engines/ort/ort_threads.ts";
import type { OrtRow } from "../../../lib/engines/ort/ort_thread.ts";
import { SynapseError } from "../../../lib/contract/errors.ts";
import { MODELS } from "../../_helpers.ts";

const spec = {
  modelRef: "m",
  path: `${MODELS}/synapse-tiny-embed/model.onnx`,
  task: "embed" as const,
  pooling: "mean" as const,
  normalize: true,
};
const row = { ids: Int32Array.of(2, 7, 7, 3), typeIds: new Int32Array(4) };
const linux = Deno.build.os === "linux";

/** Rows of varied lengths (2 … 40 tokens), ids inside the tiny model's vocabulary. */
function variedRows(): OrtRow[] {
  return [2, 5, 9, 17, 40, 3].map((len, r) => ({
    ids: Int32Array.from(
      { length: len },
      (_, t) => t === 0 ? 2 : t === len - 1 ? 3 : 5 + (r * 37 + t * 11) % 1900,
    ),
    typeIds: new Int32Array(len),
  }));
}

Deno.test("createOrtThreads({bulkSession: 'separate'}) lowers only the bulk lane, and gives only the interactive lane twins", async () => {
  const { interactive, bulk, bulkSession } = createOrtThreads({
    intraOpThreads: 1,
    bulkSession: "separate",
  });
  assert.equal(bulkSession, "separate");
  using _i = interactive;
  using _b = bulk;
  assert.equal((await interactive.load(spec)).niceness, 0);
  bulk.register(spec);
  await bulk.run("m", [row], { quiet: true });
  assert.equal(bulk.residentSessions, 1, "the bulk lane has no quiet twin");
  assert.equal((await bulk.load(spec)).niceness, linux ? ORT_BULK_NICENESS : 0);
  await interactive.run("m", [row], { quiet: true });
  assert.equal(interactive.residentSessions, 2, "the interactive lane made a twin");
});

Deno.test("createOrtThreads() shares one session between both classes: a job adds no session, a quiet run one on the quiet thread", async () => {
  const { interactive, bulk, bulkSession } = createOrtThreads({ intraOpThreads: 1 });
  assert.equal(bulkSession, "shared");
  assert.ok(bulk instanceof OrtBulkView);
  using _i = interactive;
  using _b = bulk;
  // The shared session runs at nice 0, as interactive sessions do: at the bulk nice value every
  // query outside a job would yield to the machine's other programs.
  assert.equal((await interactive.load(spec)).niceness, 0);
  bulk.register(spec);
  await bulk.run("m", [row], { quiet: true });
  assert.equal(bulk.residentSessions, 0, "the bulk view holds no session");
  assert.equal(interactive.residentSessions, 1, "the job ran on the interactive session");
  await interactive.run("m", [row], { quiet: true });
  assert.equal(interactive.residentSessions, 2, "the quiet run made the quiet thread's session");
  assert.equal(interactive.inFlight, 0);
});

Deno.test("createOrtThreads({bulkSession: 'shared_low_priority'}) runs the shared session at the bulk nice value, the quiet thread at 0", async () => {
  const { interactive, bulk, bulkSession } = createOrtThreads({
    intraOpThreads: 1,
    bulkSession: "shared_low_priority",
  });
  assert.equal(bulkSession, "shared_low_priority");
  assert.ok(bulk instanceof OrtBulkView);
  using _i = interactive;
  using _b = bulk;
  assert.equal((await interactive.load(spec)).niceness, linux ? ORT_BULK_NICENESS : 0);
  bulk.register(spec);
  await bulk.run("m", [row]);
  assert.equal(bulk.residentSessions, 0, "the bulk view holds no session");
  await interactive.run("m", [row], { quiet: true });
  assert.equal(interactive.residentSessions, 2, "the quiet run made the quiet thread's session");
});

Deno.test("a shared bulk view refuses a model never registered (unknown_model) and refuses work once disposed", async () => {
  const { interactive, bulk } = createOrtThreads({ intraOpThreads: 1 });
  using _i = interactive;
  await interactive.load(spec);
  await assert.rejects(
    () => bulk.run("m", [row]),
    (e: unknown) => e instanceof SynapseError && e.code === "unknown_model",
  );
  bulk.register(spec);
  await bulk.unload("m");
  // Unloading the view leaves the owner's session serving.
  assert.equal((await interactive.run("m", [row])).dims, 32);
  bulk.dispose();
  assert.equal(bulk.disposed, true);
  assert.throws(
    () => bulk.register(spec),
    (e: unknown) => e instanceof SynapseError && e.code === "disposed",
  );
  assert.equal((await interactive.run("m", [row])).dims, 32, "disposing the view leaves the owner");
});

Deno.test("memory sharing keeps vectors bit-identical: shared bulk, quiet and query runs equal the separate layout's, byte for byte", async () => {
  const rows = variedRows();
  const bytes = (data: Float32Array) =>
    new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  const run = async (bulkSession: "shared" | "separate") => {
    const t = createOrtThreads({ intraOpThreads: 2, bulkSession });
    using _i = t.interactive;
    using _b = t.bulk;
    await t.interactive.load(spec);
    t.bulk.register(spec);
    const batch = await t.bulk.run("m", rows);
    const query = await t.interactive.run("m", [rows[3]!]);
    const quiet = await t.interactive.run("m", [rows[3]!], { quiet: true });
    return {
      batch: bytes(batch.data),
      query: bytes(query.data),
      quiet: bytes(quiet.data),
      dims: batch.dims,
    };
  };
  const shared = await run("shared");
  const separate = await run("separate");
  assert.deepEqual(shared.batch, separate.batch, "bulk vectors");
  assert.deepEqual(shared.query, separate.query, "query vectors");
  assert.deepEqual(shared.quiet, separate.quiet, "quiet-session vectors");
  // Query ≡ batch on the shared session: the row alone equals its row inside the batch.
  const d = shared.dims * 4;
  assert.deepEqual(shared.query, shared.batch.slice(3 * d, 4 * d));
  assert.deepEqual(shared.quiet, shared.query);
});

Deno.test("loading a model again drops its quiet session, so a quiet run never serves the older file", async () => {
  const { interactive, bulk } = createOrtThreads({ intraOpThreads: 1 });
  using _i = interactive;
  using _b = bulk;
  await interactive.load(spec);
  await interactive.run("m", [row], { quiet: true });
  assert.equal(interactive.residentSessions, 2);
  const rerank = {
    ...spec,
    path: `${MODELS}/synapse-tiny-rerank/model.onnx`,
    task: "rerank" as const,
  };
  await interactive.load(rerank);
  assert.equal(interactive.residentSessions, 1, "the old quiet session was unloaded");
  const quiet = await interactive.run("m", [row], { quiet: true });
  assert.equal(quiet.dims, 1, "the quiet session now serves the file loaded last");
  assert.equal(interactive.residentSessions, 2);
});
