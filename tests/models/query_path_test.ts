/**
 * The hot-path switch (`ModelRegistry.setQueryPath`, step 10 "query path ≡ batch path") and the
 * `skewQueryPath` test hook: a skewed model's `embed.query` differs from its batch path (the bulk
 * runtime) until its query path is disabled; then `embed.query` and inline `embed.batch` give
 * exactly the bulk runtime's numbers, `models.list` says `query_path: "disabled"`, and the probe
 * can still measure the hot lane. Real onnxruntime on the generated tiny encoder.
 */
import assert from "node:assert/strict";
import { loadConfig } from "../../lib/config/loader.ts";
import { createSynapse, type Synapse } from "../../lib/synapse.ts";
import { SynapseError } from "../../lib/contract/errors.ts";
import { SkewedEngine } from "../../lib/models/_test_hooks.ts";
import { probeFactsOf } from "../../lib/probe/certification.ts";
import type { ProbeLaneResult } from "../../lib/probe/types.ts";
import { cosine, MODELS, preload, resultOf } from "../_helpers.ts";

const EMBED = `${MODELS}/synapse-tiny-embed`;
const TEXTS = ["the river is calm today", "a short one"];

async function start(
  dir: string,
  hooks: { skewQueryPath?: string[] },
  waitForModels = true,
): Promise<Synapse> {
  const env = {
    XDG_DATA_HOME: `${dir}/data`,
    XDG_CONFIG_HOME: `${dir}/config`,
    HOME: dir,
    SYNAPSE_CONFIG_JSON: JSON.stringify({
      preload_models: [preload(EMBED, "plain"), preload(EMBED, "skewed")],
    }),
  };
  const { config } = loadConfig({ env, cwd: dir });
  return await createSynapse({ config, env, testHooks: hooks, waitForModels });
}

async function query(syn: Synapse, model: string, text: string): Promise<number[]> {
  return resultOf(await syn.call("embed.query", { model, text })).vectors[0].vector;
}

async function inlineBatch(syn: Synapse, model: string): Promise<number[][]> {
  const items = TEXTS.map((text, i) => ({ id: `i${i}`, text }));
  const r = resultOf(await syn.call("embed.batch", { model, items }));
  return r.vectors.map((v: { vector: number[] }) => v.vector);
}

/** The batch path: the texts as one batch on the model's bulk lane. */
async function bulkVectors(syn: Synapse, model: string): Promise<number[][]> {
  const m = syn.registry.resolve(model, "embed");
  const rows = TEXTS.map((t) => m.tokenizer.encode(t, { maxTokens: m.maxTokens }));
  const out = await m.bulk.run({ kind: "embed", rows });
  return out.rows.map((r) => {
    assert.equal(r.kind, "ok");
    return Array.from((r as { values: Float32Array }).values);
  });
}

function row(syn: Synapse, model: string): Promise<Record<string, unknown>> {
  return syn.call("models.list", {}).then((o) =>
    resultOf(o).models.find((m: { model_id: string }) => m.model_id === model)
  );
}

Deno.test("skewQueryPath makes the query path differ; setQueryPath('disabled') serves the batch path's numbers exactly; 'enabled' puts it back", async () => {
  const dir = await Deno.makeTempDir({ prefix: "synapse-query-path-" });
  const syn = await start(dir, { skewQueryPath: ["skewed"] });
  try {
    const batch = await bulkVectors(syn, "skewed");
    assert.deepEqual(await bulkVectors(syn, "plain"), batch, "the hook leaves the bulk runtime");
    const plain = await query(syn, "plain", TEXTS[0]!);
    const skewed = await query(syn, "skewed", TEXTS[0]!);
    // The plain query path agrees with the batch path; the skewed one clearly does not.
    assert.ok(cosine(plain, batch[0]!) > 0.99999, `plain ${cosine(plain, batch[0]!)}`);
    const c = cosine(skewed, batch[0]!);
    assert.ok(c < 0.999 && c > 0.95, `skewed query vs batch cosine ${c}`);
    assert.ok(Math.abs(Math.hypot(...skewed) - 1) < 1e-5, "renormalised");
    assert.ok(cosine((await inlineBatch(syn, "skewed"))[1]!, batch[1]!) < 0.999);
    assert.equal((await row(syn, "skewed")).query_path, "enabled");
    assert.deepEqual((await row(syn, "skewed")).lanes, ["ort-interactive", "ort-bulk"]);

    syn.registry.setQueryPath("skewed", "disabled");
    assert.equal(syn.registry.queryPath("skewed"), "disabled");
    const r = await row(syn, "skewed");
    assert.equal(r.query_path, "disabled");
    assert.deepEqual(r.lanes, ["ort-bulk"]);
    assert.equal((await row(syn, "plain")).query_path, "enabled");
    // Interactive work now runs on the bulk runtime: exactly the batch path's numbers.
    assert.deepEqual(await query(syn, "skewed", TEXTS[0]!), batch[0]);
    assert.deepEqual(await query(syn, "skewed", TEXTS[1]!), batch[1]);
    assert.deepEqual(await inlineBatch(syn, "skewed"), batch);
    // The hot lane (what the probe measures the query path on) is still the skewed runtime.
    const hot = syn.registry.hotLane("skewed");
    assert.ok(hot.engine instanceof SkewedEngine);
    assert.equal(hot.name, "ort-interactive");
    const m = syn.registry.resolve("skewed", "embed");
    const seq = m.tokenizer.encode(TEXTS[0]!, { maxTokens: m.maxTokens });
    const viaHot = await hot.run({ kind: "embed", rows: [seq] });
    const hotValues = Array.from((viaHot.rows[0] as { values: Float32Array }).values);
    assert.ok(cosine(hotValues, skewed) > 0.99999);
    assert.ok(!(syn.registry.hotLane("plain").engine instanceof SkewedEngine));

    syn.registry.setQueryPath("skewed", "enabled");
    assert.equal((await row(syn, "skewed")).query_path, "enabled");
    assert.ok(cosine(await query(syn, "skewed", TEXTS[0]!), batch[0]!) < 0.999);
    assert.equal(
      syn.registry.hotLane("skewed").engine,
      syn.registry.resolve("skewed", "embed").interactive.engine,
    );

    assert.throws(
      () => syn.registry.setQueryPath("nope", "disabled"),
      (e: unknown) => e instanceof SynapseError && e.code === "unknown_model",
    );
    assert.throws(
      () => syn.registry.setQueryPath("skewed", "off" as "disabled"),
      (e: unknown) =>
        e instanceof SynapseError && e.code === "invalid_request" &&
        e.details?.field === "query_path",
    );
  } finally {
    await syn.dispose();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("setQueryPath before a model is ready applies when it becomes ready", async () => {
  const dir = await Deno.makeTempDir({ prefix: "synapse-query-path-" });
  const syn = await start(dir, { skewQueryPath: ["skewed"] }, false);
  try {
    syn.registry.setQueryPath("skewed", "disabled");
    await syn.registry.ready("skewed");
    assert.equal((await row(syn, "skewed")).query_path, "disabled");
    const batch = await bulkVectors(syn, "skewed");
    assert.deepEqual(await query(syn, "skewed", TEXTS[0]!), batch[0]);
  } finally {
    await syn.dispose();
    await Deno.remove(dir, { recursive: true });
  }
});

/** A probe result of `model` whose query path forked (`query_path: "disabled"`). */
function forkedQueryPath(syn: Synapse, model: string): ProbeLaneResult {
  const m = syn.registry.resolve(model, "embed");
  return {
    model_id: model,
    lane_id: model,
    task: "embed",
    cert_class: "embedding",
    numeric_profile_id: m.numericProfileId,
    fingerprint: m.fingerprint,
    reference_model_id: null,
    passed: true,
    checks: [{
      id: "query_path_equals_batch_path",
      passed: false,
      value: 0.995,
      threshold: 0.9999,
      comparison: ">=",
    }],
    checks_lacking: [{ id: "reference_parity", reason: "no_reference_lane" }],
    query_path: "disabled",
    perf: [],
    knob_assignment: {
      knob: "balanced",
      recommended_batch: { rows: 8, token_budget: 1536 },
      estimated_execution_ms: 20,
      tokens_per_second: 1000,
    },
    duration_ms: 10,
  };
}

Deno.test("a recorded query_path 'disabled' is applied again at startup, before the model serves", async () => {
  const dir = await Deno.makeTempDir({ prefix: "synapse-query-path-" });
  try {
    {
      const syn = await start(dir, { skewQueryPath: ["skewed"] });
      try {
        const m = syn.registry.resolve("skewed", "embed");
        syn.certifications.putProbeResult(
          forkedQueryPath(syn, "skewed"),
          probeFactsOf(syn.context, m, { probe_job_id: null, now_ms: Date.now() }),
        );
        // Recorded, not applied: the probe op applies it to the running instance.
        assert.equal((await row(syn, "skewed")).query_path, "enabled");
      } finally {
        await syn.dispose();
      }
    }
    const syn = await start(dir, { skewQueryPath: ["skewed"] });
    try {
      assert.equal((await row(syn, "skewed")).query_path, "disabled");
      assert.equal((await row(syn, "plain")).query_path, "enabled");
      const batch = await bulkVectors(syn, "skewed");
      assert.deepEqual(await query(syn, "skewed", TEXTS[0]!), batch[0]);
    } finally {
      await syn.dispose();
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
