/**
 * F27 through the real door: a `model.load` job from a loopback server that injects download
 * faults. An empty 200 body, a body cut short and a connection reset are retried inside the job
 * (the policy's waits, 0.5 and 1 s here) and the model serves; a body with the wrong digest twice
 * fails the job `artifact_invalid` naming both digests; a cancelled job ends `cancelled`. After
 * each job the cache's `tmp/` holds nothing.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { loadConfig } from "../../lib/config/loader.ts";
import { createSynapse, type Synapse } from "../../lib/synapse.ts";
import { TestServer } from "../cache/_server.ts";
import { MODELS, resultOf } from "../_helpers.ts";

const EMBED_DIR = `${MODELS}/synapse-tiny-embed`;
const ONNX = Deno.readFileSync(`${EMBED_DIR}/model.onnx`);
const TOKENIZER = Deno.readFileSync(`${EMBED_DIR}/tokenizer.json`);
const hex = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");

async function withSynapse(fn: (syn: Synapse, tmp: () => string[]) => Promise<void>) {
  const dir = await Deno.makeTempDir({ prefix: "synapse-dlfaults-" });
  const env = { XDG_DATA_HOME: `${dir}/data`, XDG_CONFIG_HOME: `${dir}/config`, HOME: dir };
  const { config } = loadConfig({ env: { ...env, SYNAPSE_CONFIG_JSON: "{}" }, cwd: dir });
  const syn = await createSynapse({ config, env });
  const tmp = () => {
    try {
      return [...Deno.readDirSync(`${dir}/data/cortexkit/models/tmp`)].map((e) => e.name);
    } catch (err) {
      if (err instanceof Deno.errors.NotFound) return [];
      throw err;
    }
  };
  try {
    await fn(syn, tmp);
  } finally {
    await syn.dispose();
    await Deno.remove(dir, { recursive: true });
  }
}

function loadParams(base: string, modelId: string, modelPath = "/m/model.onnx") {
  return {
    url: `${base}${modelPath}`,
    expected_digest: hex(ONNX),
    files: { tokenizer: { url: `${base}/m/tokenizer.json`, sha256: hex(TOKENIZER) } },
    model_id: modelId,
  };
}

Deno.test("F27: empty, short and reset downloads are retried inside the model.load job, which then serves; tmp/ is clean", async () => {
  await using srv = new TestServer();
  srv.routes.set("/m/tokenizer.json", { kind: "file", bytes: TOKENIZER });
  srv.routes.set("/m/model.onnx", {
    kind: "seq",
    answers: [
      { kind: "file", bytes: ONNX, empty: true },
      { kind: "file", bytes: ONNX, truncateAt: ONNX.length >> 2 },
      { kind: "file", bytes: ONNX, reset: true },
      { kind: "file", bytes: ONNX },
    ],
  });
  await withSynapse(async (syn, tmp) => {
    const job = resultOf(await syn.call("model.load", loadParams(srv.base, "flaky")));
    const done = await syn.loads.settled(job.job_id);
    assert.equal(done.state, "ready", JSON.stringify(done));
    assert.deepEqual(srv.requestsFor("/m/model.onnx").map((r) => r.range), [
      undefined,
      undefined,
      `bytes=${ONNX.length >> 2}-`,
      `bytes=${ONNX.length >> 2}-`,
    ]);
    resultOf(await syn.call("embed.query", { text: "served", model: "flaky" }));
    assert.deepEqual(tmp(), []);
  });
});

Deno.test("F27: the wrong digest twice fails the job artifact_invalid naming both digests; a cancelled job ends cancelled; tmp/ is clean after each", async () => {
  await using srv = new TestServer();
  const wrong = ONNX.slice();
  wrong[100]! ^= 1;
  srv.routes.set("/m/tokenizer.json", { kind: "file", bytes: TOKENIZER });
  srv.routes.set("/m/wrong.onnx", { kind: "file", bytes: wrong });
  let open!: () => void;
  srv.routes.set("/m/slow.onnx", {
    kind: "file",
    bytes: ONNX,
    gate: { at: 4096, open: new Promise((r) => (open = r)) },
  });
  await withSynapse(async (syn, tmp) => {
    const bad = resultOf(
      await syn.call("model.load", loadParams(srv.base, "wrong", "/m/wrong.onnx")),
    );
    const failed = await syn.loads.settled(bad.job_id);
    assert.equal(failed.state, "failed");
    assert.equal(failed.error?.code, "artifact_invalid");
    assert.equal(failed.error?.class, "permanent");
    assert.equal(failed.error?.details?.reason, "digest_mismatch");
    assert.equal(failed.error?.details?.expected, `sha256:${hex(ONNX)}`);
    assert.equal(failed.error?.details?.digest, `sha256:${hex(wrong)}`);
    assert.ok(
      failed.error!.message.includes(hex(ONNX)) && failed.error!.message.includes(hex(wrong)),
    );
    assert.equal(srv.requestsFor("/m/wrong.onnx").length, 2, "retried once");
    assert.deepEqual(tmp(), []);

    const slow = resultOf(
      await syn.call("model.load", loadParams(srv.base, "slow", "/m/slow.onnx")),
    );
    // Wait until bytes arrived, then cancel.
    for (let i = 0; i < 600 && syn.loads.job(slow.job_id).bytes_done === 0; i++) {
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.ok(syn.loads.job(slow.job_id).bytes_done > 0, "the transfer started");
    resultOf(await syn.call("models.download.cancel", { job_id: slow.job_id }));
    const cancelled = await syn.loads.settled(slow.job_id);
    open();
    assert.equal(cancelled.state, "cancelled", JSON.stringify(cancelled));
    assert.deepEqual(tmp(), [], "a cancelled job keeps no partial");
  });
});
