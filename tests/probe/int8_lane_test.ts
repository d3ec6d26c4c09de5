/**
 * The int8 lane (issue 22), end to end with the generated fixtures, a real store, real
 * onnxruntime and the real probe job, in `certification: "require"`:
 *
 * - `synapse-tiny-embed-int8` (the quantizer applied to `synapse-tiny-embed`, `reference_model`
 *   the fp32 model) loads as `quant: "int8"`, `dtype: "f32"`, with a fingerprint of its own that
 *   two instances on the same store agree on; it refuses `not_certified {probe_required}`, then
 *   passes the probe (mean cosine against fp32 ≥ 0.999, printed) and serves certified; its
 *   vectors through the real lane are within cosine 0.999 of fp32's, and query ≡ batch holds to
 *   the probe's bar (cosine ≥ 0.99999: the query path against the batch path, and a text alone
 *   against the same text in a batch of 32 mixed lengths, F4);
 * - `synapse-tiny-embed-int8-badscale` (one weight's scales deliberately ×64) fails the probe
 *   naming `reference_parity_mean_cosine`, and keeps refusing with `certification_failed`, also
 *   after a restart.
 */
import assert from "node:assert/strict";
import { loadConfig } from "../../lib/config/loader.ts";
import { nullLog } from "../../lib/log/log.ts";
import { createSynapse, type Synapse } from "../../lib/synapse.ts";
import { cosine, MODELS, preload, resultOf, semanticError } from "../_helpers.ts";

const REF = "tiny";
const INT8 = "tiny-int8";
const BAD = "tiny-int8-badscale";
const PRELOADS = [
  preload(`${MODELS}/synapse-tiny-embed`, REF),
  preload(`${MODELS}/synapse-tiny-embed-int8`, INT8, { reference_model: REF, quant: "int8" }),
  preload(`${MODELS}/synapse-tiny-embed-int8-badscale`, BAD, { reference_model: REF }),
];
const TEXTS = [
  "the river is calm today",
  "what is a river",
  "a short one",
  "quantized weights keep the meaning of a sentence close to the float model",
];
const TERMINAL = new Set(["done", "failed_transient", "failed_permanent"]);

async function start(dir: string): Promise<Synapse> {
  const env = {
    XDG_DATA_HOME: `${dir}/data`,
    XDG_CONFIG_HOME: `${dir}/config`,
    HOME: dir,
    SYNAPSE_CONFIG_JSON: JSON.stringify({ certification: "require", preload_models: PRELOADS }),
  };
  const { config } = loadConfig({ env, cwd: dir });
  const syn = await createSynapse({ config, env, log: nullLog });
  for (const m of syn.registry.list()) {
    assert.equal(m.state, "ready", `${m.modelId}: ${m.error?.message}`);
  }
  return syn;
}

// deno-lint-ignore no-explicit-any
async function probe(syn: Synapse, models?: string[]): Promise<any> {
  const job = resultOf(await syn.call("probe.start", models === undefined ? {} : { models }));
  for (const hungAt = Date.now() + 600_000; Date.now() < hungAt;) {
    const s = resultOf(await syn.call("probe.status", { job_id: job.job_id }));
    if (TERMINAL.has(s.state)) return s;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`probe job ${job.job_id} did not end`);
}

// deno-lint-ignore no-explicit-any
async function row(syn: Synapse, model: string): Promise<any> {
  const models = resultOf(await syn.call("models.list", {})).models;
  return models.find((m: { model_id: string }) => m.model_id === model);
}

function refusal(o: Awaited<ReturnType<Synapse["call"]>>, model: string, reason: string): void {
  const e = semanticError(o);
  assert.equal(e.code, "not_certified", JSON.stringify(e));
  assert.equal(e.details.model_id, model);
  assert.equal(e.details.blocking_reason, reason, JSON.stringify(e.details));
}

/** The batch path: the texts as one batch on the model's bulk lane. */
async function batchPath(syn: Synapse, model: string): Promise<number[][]> {
  const m = syn.registry.resolve(model, "embed");
  const rows = TEXTS.map((t) => m.tokenizer.encode(t, { maxTokens: m.maxTokens }));
  const out = await m.bulk.run({ kind: "embed", rows });
  return out.rows.map((r) => Array.from((r as { values: Float32Array }).values));
}

Deno.test("the int8 lane: own fingerprint stable across restarts, certified against fp32 (cosine >= 0.999), query = batch; a bad scale is refused", async () => {
  const dir = await Deno.makeTempDir({ prefix: "synapse-int8-lane-" });
  try {
    let syn = await start(dir);
    let fingerprint: string;
    try {
      const refRow = await row(syn, REF);
      const int8Row = await row(syn, INT8);
      assert.equal(int8Row.quant, "int8");
      assert.equal(int8Row.dtype, "f32");
      assert.equal(refRow.quant, "f32");
      assert.notEqual(int8Row.fingerprints[0], refRow.fingerprints[0]);
      const m = syn.registry.resolve(INT8, "embed");
      assert.equal(m.profile.quant, "int8");
      assert.equal(m.profile.dtype, "f32");
      fingerprint = int8Row.fingerprints[0];
      assert.match(fingerprint, /^[0-9a-f]{64}$/);

      // Never the reference: a certificate first.
      assert.equal(
        resultOf(await syn.call("embed.query", { model: REF, text: "x" }))
          .provenance.certified,
        true,
      );
      refusal(await syn.call("embed.query", { model: INT8, text: "x" }), INT8, "probe_required");
      refusal(await syn.call("embed.query", { model: BAD, text: "x" }), BAD, "probe_required");

      const end = await probe(syn);
      assert.equal(end.state, "done", JSON.stringify(end));
      // deno-lint-ignore no-explicit-any
      const lane = (id: string) => end.lanes.find((l: any) => l.model_id === id);
      assert.deepEqual(
        end.lanes.map((l: { model_id: string }) => l.model_id).sort(),
        [BAD, INT8].sort(),
      );
      assert.equal(lane(INT8).status, "passed", JSON.stringify(lane(INT8)));
      assert.equal(lane(INT8).reference_model_id, REF);
      assert.equal(lane(INT8).query_path ?? "enabled", "enabled", JSON.stringify(lane(INT8)));
      const certRow = await row(syn, INT8);
      assert.equal(certRow.certification.status, "certified");
      const parity = certRow.certification.checks.find((c: { id: string }) =>
        c.id === "reference_parity_mean_cosine"
      );
      assert.ok(parity, JSON.stringify(certRow.certification.checks));
      console.log(`int8 lane: probe mean cosine vs fp32 ${parity.value}`);
      assert.equal(parity.passed, true);
      assert.ok(parity.value >= 0.999 && parity.value <= 1 + 1e-6, `${parity.value}`);
      assert.ok(parity.value < 1 - 1e-12, "the int8 lane computes other numbers than fp32");

      // The bad scale: fails naming its metric and value, then refuses.
      const bad = lane(BAD);
      assert.equal(bad.status, "failed", JSON.stringify(bad));
      const failed = bad.failed_checks.find((c: { id: string }) =>
        c.id === "reference_parity_mean_cosine"
      );
      assert.ok(failed, JSON.stringify(bad.failed_checks));
      assert.ok(failed.value < 0.99, `badscale mean cosine ${failed.value}`);
      refusal(
        await syn.call("embed.query", { model: BAD, text: "x" }),
        BAD,
        "certification_failed",
      );

      // Through the real lane: int8 vectors are fp32's within cosine 0.999, never identical.
      const batch = await batchPath(syn, INT8);
      for (const [i, text] of TEXTS.entries()) {
        const q = resultOf(await syn.call("embed.query", { model: INT8, text }));
        assert.equal(q.provenance.certified, true);
        const ref = resultOf(await syn.call("embed.query", { model: REF, text })).vectors[0]
          .vector;
        const c = cosine(q.vectors[0].vector, ref);
        assert.ok(c >= 0.999, `'${text}': int8 vs fp32 cosine ${c}`);
        assert.notDeepEqual(q.vectors[0].vector, ref);
        // query ≡ batch, to the probe's bar (docs/internals.md §12): activations are quantized
        // per call, so a row's last bits depend on its batch (docs/models.md "The int8 lane").
        const qb = cosine(q.vectors[0].vector, batch[i]!);
        assert.ok(qb >= 0.99999, `embed.query '${text}' vs its batch row: cosine ${qb}`);
      }
      const items = TEXTS.map((text, i) => ({ id: `t${i}`, text }));
      const b = resultOf(await syn.call("embed.batch", { model: INT8, items }));
      for (const [i, v] of b.vectors.entries()) {
        assert.ok(cosine(v.vector, batch[i]!) >= 0.99999, `embed.batch row ${i}`);
      }
      // F4 on the int8 lane: the same text alone and in a batch of 32 mixed lengths.
      const text = "the quick brown fox jumps over the lazy dog";
      const others = Array.from(
        { length: 31 },
        (_, i) => Array(1 + ((i * 53) % 300)).fill("data").join(" "),
      );
      const alone = resultOf(await syn.call("embed.query", { model: INT8, text })).vectors[0];
      const mixed = [...others.slice(0, 17), text, ...others.slice(17)].map((x, i) => ({
        id: `i${i}`,
        text: x,
      }));
      const big = resultOf(await syn.call("embed.batch", { model: INT8, items: mixed }));
      const inBatch = big.vectors.find((v: { id: string }) => v.id === "i17");
      const f4 = cosine(alone.vector, inBatch.vector);
      assert.ok(f4 >= 0.99999, `alone vs in a batch of 32: cosine ${f4}`);
    } finally {
      await syn.dispose();
    }

    // A restart on the same store: same fingerprint, still certified, bad still refused.
    syn = await start(dir);
    try {
      assert.equal((await row(syn, INT8)).fingerprints[0], fingerprint);
      const q = resultOf(await syn.call("embed.query", { model: INT8, text: TEXTS[0]! }));
      assert.equal(q.provenance.certified, true);
      assert.equal(q.fingerprint, fingerprint);
      refusal(
        await syn.call("embed.query", { model: BAD, text: "x" }),
        BAD,
        "certification_failed",
      );
    } finally {
      await syn.dispose();
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
