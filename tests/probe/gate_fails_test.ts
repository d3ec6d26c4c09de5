/**
 * The gate must be able to fail (issue 18): end to end, with the generated fixtures, a real
 * store, real onnxruntime and the real probe job (`probe.start`), in `certification: "require"`:
 *
 * - `synapse-tiny-embed-f16` (the reference's weights stored as fp16, `reference_model` the fp32
 *   model) refuses `not_certified {blocking_reason: probe_required}`, then passes the probe and
 *   serves with `provenance.certified: true`, its parity values recorded;
 * - `synapse-tiny-embed-f16-perturbed` (perturbed weights) fails the probe naming
 *   `reference_parity_mean_cosine` and the value it measured, and keeps refusing with
 *   `certification_failed`;
 * - a lane whose query path the `skewQueryPath` test hook makes differ from its batch path ends
 *   `query_path: "disabled"`, certified, and its `embed.query` vector is its batch path's
 *   (also after a restart on the same store);
 * - a lane whose batch path the `skewBatchShapes` hook makes differ for calls of 9 rows or more
 *   is split into shape classes and capped at 8 rows per call: certified, its classes and cap in
 *   `models.list`, and a batch of 12 gives exactly the texts alone (also after a restart);
 * - `SYNAPSE_OS_BUILD_OVERRIDE` (another machine profile on the same store) makes the rows stale
 *   (`certification_stale`); a new probe makes the lane serve again; a restart on the same
 *   profile keeps serving.
 */
import assert from "node:assert/strict";
import { loadConfig } from "../../lib/config/loader.ts";
import { nullLog } from "../../lib/log/log.ts";
import { type RegistryTestHooks, SkewedEngine } from "../../lib/models/_test_hooks.ts";
import { createSynapse, type Synapse } from "../../lib/synapse.ts";
import { cosine, MODELS, preload, resultOf, semanticError } from "../_helpers.ts";

const REF = "tiny";
const F16 = "tiny-f16";
const BAD = "tiny-f16-perturbed";
const SKEW = "tiny-skewed";
const ORPHAN = "tiny-f16-orphan";
const PRELOADS = [
  preload(`${MODELS}/synapse-tiny-embed`, REF),
  preload(`${MODELS}/synapse-tiny-embed-f16`, F16, { reference_model: REF }),
  preload(`${MODELS}/synapse-tiny-embed-f16-perturbed`, BAD, { reference_model: REF }),
  // The reference's own files under another id, declaring it as reference: parity passes, and
  // the test hook makes its query path fork.
  preload(`${MODELS}/synapse-tiny-embed`, SKEW, { reference_model: REF }),
  // A reference that is not loaded: allowed; the probe says the parity checks are lacking.
  // (Another max_tokens gives it a numeric profile of its own: cert rows are keyed by the numeric
  // profile, not the model id, so the same files with the same settings would share F16's row.)
  preload(`${MODELS}/synapse-tiny-embed-f16`, ORPHAN, {
    reference_model: "not-loaded",
    max_tokens: 256,
  }),
];
const TEXTS = ["the river is calm today", "what is a river", "a short one"];
const TERMINAL = new Set(["done", "failed_transient", "failed_permanent"]);

/** One instance over the data home `dir` (a restart is another call with the same dir). */
async function start(
  dir: string,
  extraEnv: Record<string, string> = {},
  setup: { preloads?: unknown[]; testHooks?: RegistryTestHooks } = {},
): Promise<Synapse> {
  const env = {
    XDG_DATA_HOME: `${dir}/data`,
    XDG_CONFIG_HOME: `${dir}/config`,
    HOME: dir,
    SYNAPSE_CONFIG_JSON: JSON.stringify({
      certification: "require",
      preload_models: setup.preloads ?? PRELOADS,
    }),
    ...extraEnv,
  };
  const { config } = loadConfig({ env, cwd: dir });
  const syn = await createSynapse({
    config,
    env,
    log: nullLog,
    testHooks: setup.testHooks ?? { skewQueryPath: [SKEW] },
  });
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
function laneOf(status: any, model: string): any {
  // deno-lint-ignore no-explicit-any
  const lane = status.lanes.find((l: any) => l.model_id === model);
  assert.ok(lane, `${model} is not in the probe job: ${JSON.stringify(status.lanes)}`);
  return lane;
}

// deno-lint-ignore no-explicit-any
async function row(syn: Synapse, model: string): Promise<any> {
  const models = resultOf(await syn.call("models.list", {})).models;
  return models.find((m: { model_id: string }) => m.model_id === model);
}

// deno-lint-ignore no-explicit-any
async function query(syn: Synapse, model: string, text = TEXTS[0]!): Promise<any> {
  return await syn.call("embed.query", { model, text });
}

function refusal(o: Awaited<ReturnType<Synapse["call"]>>, model: string, reason: string): void {
  const e = semanticError(o);
  assert.equal(e.code, "not_certified", JSON.stringify(e));
  assert.equal(e.details.model_id, model);
  assert.equal(e.details.lane_id, model);
  assert.equal(e.details.blocking_reason, reason, JSON.stringify(e.details));
  assert.equal(e.details.probe_command, `ck-synapse probe run --model ${model}`);
  assert.deepEqual(e.details.probe_op, { method: "probe.start", params: { models: [model] } });
}

/** The batch path: the texts as one batch on the model's bulk lane. */
async function batchPath(syn: Synapse, model: string): Promise<number[][]> {
  const m = syn.registry.resolve(model, "embed");
  const rows = TEXTS.map((t) => m.tokenizer.encode(t, { maxTokens: m.maxTokens }));
  const out = await m.bulk.run({ kind: "embed", rows });
  return out.rows.map((r) => Array.from((r as { values: Float32Array }).values));
}

/** The skewed lane serves its batch path's numbers: embed.query and inline embed.batch. */
async function assertServesBatchPath(syn: Synapse): Promise<void> {
  const batch = await batchPath(syn, SKEW);
  for (const [i, text] of TEXTS.entries()) {
    const r = resultOf(await query(syn, SKEW, text));
    assert.equal(r.provenance.certified, true);
    assert.deepEqual(r.vectors[0].vector, batch[i], `embed.query '${text}'`);
  }
  const items = TEXTS.map((text, i) => ({ id: `t${i}`, text }));
  const b = resultOf(await syn.call("embed.batch", { model: SKEW, items }));
  assert.deepEqual(b.vectors.map((v: { vector: number[] }) => v.vector), batch);
  // The hook is still live on the hot lane: only the switch keeps the space whole.
  const hot = syn.registry.hotLane(SKEW);
  assert.ok(hot.engine instanceof SkewedEngine);
  const m = syn.registry.resolve(SKEW, "embed");
  const viaHot = await hot.run({
    kind: "embed",
    rows: [m.tokenizer.encode(TEXTS[0]!, { maxTokens: m.maxTokens })],
  });
  const skewed = Array.from((viaHot.rows[0] as { values: Float32Array }).values);
  assert.ok(cosine(skewed, batch[0]!) < 0.999, `hot lane ${cosine(skewed, batch[0]!)}`);
}

Deno.test("the gate fails: fp16 passes, perturbed fails naming its metric, a forked query path is disabled, another OS build goes stale until re-probed", async () => {
  const dir = await Deno.makeTempDir({ prefix: "synapse-gate-fails-" });
  try {
    // --- First instance: nothing probed yet.
    let syn = await start(dir);
    try {
      const served = resultOf(await query(syn, REF));
      assert.equal(served.provenance.certified, true, "ORT fp32 on the CPU is the reference");
      for (const id of [F16, BAD, SKEW]) refusal(await query(syn, id), id, "probe_required");
      assert.equal((await row(syn, F16)).dtype, "f16");
      assert.equal((await row(syn, F16)).reference_model, REF);

      const end = await probe(syn);
      assert.equal(end.state, "done", JSON.stringify(end));
      // Absent models: every lane that needs a certificate, never the reference.
      assert.deepEqual(
        end.lanes.map((l: { model_id: string }) => l.model_id).sort(),
        [BAD, F16, ORPHAN, SKEW].sort(),
      );
      const orphan = laneOf(end, ORPHAN);
      assert.equal(orphan.reference_model_id, null);
      assert.deepEqual(orphan.checks_lacking, [
        { id: "reference_parity", reason: "reference_not_loaded" },
      ]);
      assert.equal(orphan.status, "passed", "certified by the self-consistency checks");

      // fp16: passes, with the reference named and the parity values recorded.
      const f16 = laneOf(end, F16);
      assert.equal(f16.status, "passed", JSON.stringify(f16));
      assert.equal(f16.reference_model_id, REF);
      assert.deepEqual(f16.failed_checks ?? [], []);
      assert.deepEqual(f16.checks_lacking ?? [], []);
      assert.equal(f16.query_path ?? "enabled", "enabled");
      const f16Answer = resultOf(await query(syn, F16));
      assert.equal(f16Answer.provenance.certified, true);
      const f16Row = await row(syn, F16);
      assert.equal(f16Row.certified, true);
      assert.equal(f16Row.certification.status, "certified");
      const parity = f16Row.certification.checks.find((c: { id: string }) =>
        c.id === "reference_parity_mean_cosine"
      );
      assert.ok(parity, JSON.stringify(f16Row.certification.checks));
      assert.equal(parity.passed, true);
      assert.ok(parity.value > 0.9999 && parity.value <= 1 + 1e-6, `f16 cosine ${parity.value}`);
      assert.equal(parity.threshold, 0.999);
      // Its vectors are the reference's, to the fp16 rounding.
      const refVector = resultOf(await query(syn, REF)).vectors[0].vector;
      assert.ok(cosine(f16Answer.vectors[0].vector, refVector) > 0.9999);

      // Perturbed: fails, naming the metric and what it measured; still refuses.
      const bad = laneOf(end, BAD);
      assert.equal(bad.status, "failed", JSON.stringify(bad));
      const failed = bad.failed_checks.find((c: { id: string }) =>
        c.id === "reference_parity_mean_cosine"
      );
      assert.ok(failed, JSON.stringify(bad.failed_checks));
      assert.equal(typeof failed.value, "number");
      assert.ok(failed.value < 0.99, `perturbed mean cosine ${failed.value}`);
      assert.equal(failed.threshold, 0.999);
      refusal(await query(syn, BAD), BAD, "certification_failed");
      const badRow = await row(syn, BAD);
      assert.equal(badRow.certified, false);
      assert.equal(badRow.certification.status, "certification_failed");

      // Skewed: its query path forked, so its hot path is off; certified; batch path's numbers.
      const skew = laneOf(end, SKEW);
      assert.equal(skew.status, "passed", JSON.stringify(skew));
      assert.equal(skew.query_path, "disabled");
      const skewRow = await row(syn, SKEW);
      assert.equal(skewRow.query_path, "disabled");
      assert.equal(skewRow.certification.status, "certified");
      assert.equal(skewRow.certification.query_path, "disabled");
      const qp = skewRow.certification.checks.find((c: { id: string }) =>
        c.id === "query_path_equals_batch_path"
      );
      assert.equal(qp?.passed, false, JSON.stringify(skewRow.certification.checks));
      assert.equal((await row(syn, F16)).query_path, "enabled");
      await assertServesBatchPath(syn);
    } finally {
      await syn.dispose();
    }

    // --- A restart on the same machine profile keeps everything.
    syn = await start(dir);
    try {
      assert.equal(resultOf(await query(syn, F16)).provenance.certified, true);
      refusal(await query(syn, BAD), BAD, "certification_failed");
      assert.equal((await row(syn, SKEW)).query_path, "disabled");
      await assertServesBatchPath(syn);
    } finally {
      await syn.dispose();
    }

    // --- Another OS build (another machine profile) on the same store: stale until re-probed.
    const other = { SYNAPSE_OS_BUILD_OVERRIDE: "synapse-gate-test-os-2" };
    syn = await start(dir, other);
    try {
      refusal(await query(syn, F16), F16, "certification_stale");
      const stale = await row(syn, F16);
      assert.equal(stale.certification.status, "certification_stale");
      assert.ok(stale.certification.stale_facts.includes("os_build"), stale.certification);
      // The reference needs no certificate on any machine.
      assert.equal(resultOf(await query(syn, REF)).provenance.certified, true);

      const end = await probe(syn, [F16]);
      assert.equal(end.state, "done", JSON.stringify(end));
      assert.equal(laneOf(end, F16).status, "passed", JSON.stringify(end.lanes));
      assert.equal(resultOf(await query(syn, F16)).provenance.certified, true);
      // Only what was probed serves: the perturbed lane is stale, not certified.
      refusal(await query(syn, BAD), BAD, "certification_stale");
    } finally {
      await syn.dispose();
    }

    // --- And a restart on that profile keeps serving.
    syn = await start(dir, other);
    try {
      assert.equal(resultOf(await query(syn, F16)).provenance.certified, true);
    } finally {
      await syn.dispose();
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("the gate splits a lane that is not shape-invariant by shape class and caps its calls: it serves certified, every vector the row-alone vector, also after a restart", async () => {
  const dir = await Deno.makeTempDir({ prefix: "synapse-gate-shapes-" });
  const SLIGHT = "tiny-shapes-slight", FAR = "tiny-shapes-far";
  const setup = {
    preloads: [
      preload(`${MODELS}/synapse-tiny-embed`, REF),
      preload(`${MODELS}/synapse-tiny-embed`, SLIGHT, { reference_model: REF }),
      preload(`${MODELS}/synapse-tiny-embed`, FAR, { reference_model: REF }),
    ],
    testHooks: {
      skewBatchShapes: [
        // Cosine ≈ 1 − ε²/2: 0.99995 misses the shape bar (0.99999); 0.995 misses parity too.
        { modelId: SLIGHT, minRows: 9, epsilon: 0.01 },
        { modelId: FAR, minRows: 9, epsilon: 0.1 },
      ],
    },
  };
  const items = Array.from({ length: 12 }, (_, i) => ({ id: `t${i}`, text: `${TEXTS[0]} ${i}` }));
  /** The 12 texts as one embed.batch, and each alone (embed.query: one row per call). */
  const batchAndAlone = async (syn: Synapse, model: string) => {
    const b = resultOf(await syn.call("embed.batch", { model, items }));
    const alone: number[][] = [];
    for (const it of items) {
      alone.push(resultOf(await query(syn, model, it.text)).vectors[0].vector);
    }
    return { b, alone };
  };
  let syn = await start(dir, {}, setup);
  try {
    // Before the probe (warn would serve; require refuses): the uncapped lane is what is probed.
    refusal(await query(syn, FAR), FAR, "probe_required");
    const end = await probe(syn, [SLIGHT, FAR]);
    assert.equal(end.state, "done", JSON.stringify(end));
    for (const id of [SLIGHT, FAR]) {
      const lane = laneOf(end, id);
      assert.equal(lane.status, "passed", JSON.stringify(lane));
      assert.equal(lane.shape_cap, 8);
      assert.deepEqual(
        lane.shape_classes.map((k: { id: string; served: boolean }) => [k.id, k.served]),
        [["rows_alone", true], ["class_1", false]],
      );
      assert.equal(lane.shape_classes[1].shapes[0], "calls of 9 rows");
      const listed = await row(syn, id);
      assert.equal(listed.certification.status, "certified");
      assert.equal(listed.shape_cap, 8);
      assert.deepEqual(listed.certification.shape_classes, lane.shape_classes);
    }
    // The far class is measured off the reference, and recorded as not served.
    assert.equal(laneOf(end, FAR).shape_classes[1].parity.passed, false);
    assert.equal(laneOf(end, SLIGHT).shape_classes[1].parity.passed, true);
    // Capped at 8 rows per call, a batch of 12 is the texts alone, bit for bit.
    for (const id of [SLIGHT, FAR]) {
      const { b, alone } = await batchAndAlone(syn, id);
      assert.equal(b.provenance.certified, true);
      assert.deepEqual(b.vectors.map((v: { vector: number[] }) => v.vector), alone, id);
    }
  } finally {
    await syn.dispose();
  }
  // A restart applies the recorded cap before the first request.
  syn = await start(dir, {}, setup);
  try {
    assert.equal((await row(syn, FAR)).shape_cap, 8);
    const { b, alone } = await batchAndAlone(syn, FAR);
    assert.deepEqual(b.vectors.map((v: { vector: number[] }) => v.vector), alone);
    // Uncapped, the same batch would differ: the hook is still there on calls of 9 rows.
    syn.registry.setShapeCap(FAR, undefined);
    const uncapped = resultOf(await syn.call("embed.batch", { model: FAR, items }));
    assert.ok(cosine(uncapped.vectors[0].vector, alone[0]!) < 0.999);
  } finally {
    await syn.dispose();
    await Deno.remove(dir, { recursive: true });
  }
});
