/**
 * probeLane() on real engines: the tiny ORT embed and rerank models against themselves pass
 * every check; a reference whose outputs are perturbed fails parity naming the metric and its
 * value; a query path that differs disables the hot path without failing the lane; a lane that
 * is not shape-invariant is split by shape class, each class held to the parity bar; the tiny llama GGUF's generation
 * lane is token-exact; a llama embed lane with no reference lists what it lacked. The
 * MiniLM-shaped encoder's probe wall time is printed.
 */
import assert from "node:assert/strict";
import { loadConfig } from "../../lib/config/loader.ts";
import type {
  Engine,
  EngineBatchOutput,
  EngineCallOptions,
  EngineRow,
} from "../../lib/engines/engine.ts";
import { Lane } from "../../lib/lanes/lane.ts";
import { nullLog } from "../../lib/log/log.ts";
import type { ReadyModel } from "../../lib/models/model.ts";
import { probeLane, type ProbeLanes, probeThresholds } from "../../lib/probe/run_probe.ts";
import type { ProbeCheck, ProbeLaneResult } from "../../lib/probe/types.ts";
import { PROBE_WORKLOAD_REVISION } from "../../lib/probe/workload.ts";
import { LaneScheduler } from "../../lib/sched/lane_scheduler.ts";
import { createSynapse, type Synapse } from "../../lib/synapse.ts";
import { MINILM, MODELS, preload, startSynapse, type TestSynapse } from "../_helpers.ts";

const EMBED = "synapse-tiny-embed";
const RERANK = "synapse-tiny-rerank";
const GEN = `${MODELS}/synapse-tiny-llama`;

const EMBED_CHECKS = [
  "query_path_equals_batch_path",
  "determinism",
  "shape_invariance",
  "finite",
  "dims",
  "norm",
  "max_context",
  "over_max_context_refused",
];

function check(r: ProbeLaneResult, id: string): ProbeCheck {
  const c = r.checks.find((x) => x.id === id);
  assert.ok(c, `no check '${id}' in ${r.checks.map((x) => x.id).join(", ")}`);
  return c;
}

function assertAllPassed(r: ProbeLaneResult): void {
  const failed = r.checks.filter((c) => !c.passed);
  assert.deepEqual(failed, [], JSON.stringify(failed));
  assert.equal(r.passed, true);
}

/**
 * An engine over another whose embed/score outputs pass through `change` (the rows of the
 * call, the output); the inner engine is not disposed with it.
 */
class SkewedEngine implements Engine {
  #inner: Engine;
  #change: (rows: readonly EngineRow[], out: EngineBatchOutput) => void;

  constructor(inner: Engine, change: (rows: readonly EngineRow[], out: EngineBatchOutput) => void) {
    this.#inner = inner;
    this.#change = change;
  }
  get kind() {
    return this.#inner.kind;
  }
  get task() {
    return this.#inner.task;
  }
  get identity() {
    return this.#inner.identity;
  }
  get limits() {
    return this.#inner.limits;
  }
  get dims() {
    return this.#inner.dims;
  }
  get inFlight() {
    return this.#inner.inFlight;
  }
  health() {
    return this.#inner.health();
  }
  async embed(rows: readonly EngineRow[], options?: EngineCallOptions) {
    const out = await this.#inner.embed(rows, options);
    const copy = { ...out, data: Float32Array.from(out.data) };
    this.#change(rows, copy);
    return copy;
  }
  async score(rows: readonly EngineRow[], options?: EngineCallOptions) {
    const out = await this.#inner.score(rows, options);
    const copy = { ...out, data: Float32Array.from(out.data) };
    this.#change(rows, copy);
    return copy;
  }
  generate(...args: Parameters<Engine["generate"]>) {
    return this.#inner.generate(...args);
  }
  dispose(): Promise<void> {
    return Promise.resolve();
  }
  [Symbol.asyncDispose](): Promise<void> {
    return this.dispose();
  }
}

/** A control lane over a skewed engine, on a scheduler of its own (disposed with the stack). */
function skewedLane(
  syn: Synapse,
  lane: Lane,
  change: (rows: readonly EngineRow[], out: EngineBatchOutput) => void,
  stack: DisposableStack,
): Lane {
  const scheduler = stack.use(new LaneScheduler({ permits: 1 }));
  return new Lane({
    name: `${lane.name}-skewed`,
    engine: new SkewedEngine(lane.engine, change),
    scheduler,
    cls: "control",
    admission: syn.admission,
  });
}

/** Adds `amount` × a fixed direction to every vector and renormalises it. */
function tilt(amount: number) {
  return (_rows: readonly EngineRow[], out: EngineBatchOutput): void => {
    for (let r = 0; r < out.data.length / out.dims; r++) {
      const v = out.data.subarray(r * out.dims, (r + 1) * out.dims);
      // A direction that differs per row (so neighbours move too), fixed across runs.
      for (let i = 0; i < v.length; i++) {
        v[i] = v[i]! + amount * Math.sin(7 * i + 3 * (v[0]! > 0 ? 1 : 2));
      }
      let n = 0;
      for (const x of v) n += x * x;
      n = Math.sqrt(n);
      for (let i = 0; i < v.length; i++) v[i] = v[i]! / n;
    }
  };
}

async function probeSelf(t: TestSynapse, id: string, extra = {}): Promise<ProbeLaneResult> {
  const model = await t.syn.registry.ready(id);
  const lanes = t.syn.registry.controlLanes(id);
  return await probeLane({
    model,
    laneId: id,
    lanes,
    reference: { model, lanes },
    knob: t.syn.config.knob,
    tokenizers: t.syn.tokenizers,
    ...extra,
  });
}

Deno.test("probeThresholds() takes the probe.* config keys and the rerank bar of the dtype", () => {
  const f32 = probeThresholds({ mean_cosine_threshold: 0.98 }, "f32");
  assert.equal(f32.mean_cosine, 0.98);
  assert.equal(f32.worst_decile_overlap, 0.9);
  assert.equal(f32.rerank_max_abs_delta, 0.005);
  assert.equal(f32.norm_tolerance, 1e-3);
  assert.equal(f32.rerank_pearson, 0.999);
  // An int8 lane computes in f32 but gets the quantized lanes' rerank bar.
  assert.equal(probeThresholds({}, "f32", "int8").rerank_max_abs_delta, 0.02);
  assert.equal(probeThresholds({}, "f32", "f32").rerank_max_abs_delta, 0.005);
  const f16 = probeThresholds({ worst_decile_rank_overlap_threshold: 0.8 }, "f16");
  assert.equal(f16.rerank_max_abs_delta, 0.02);
  assert.equal(f16.worst_decile_overlap, 0.8);
  assert.equal(f16.mean_cosine, 0.999);
});

Deno.test("probeLane() stops with the signal's reason when aborted", async () => {
  await using t = await startSynapse();
  const model = await t.syn.registry.ready(EMBED);
  const lanes = t.syn.registry.controlLanes(EMBED);
  const ac = new AbortController();
  const reason = new Error("stop the probe");
  let runs = 0;
  await assert.rejects(
    probeLane({
      model,
      laneId: EMBED,
      lanes,
      knob: "balanced",
      signal: ac.signal,
      onProgress: (_s, done) => {
        runs = done;
        if (done === 3) ac.abort(reason);
      },
    }),
    (e) => e === reason,
  );
  assert.equal(runs, 3);
});

Deno.test("probeLane() passes every check of the tiny ORT embed model against itself", async () => {
  await using t = await startSynapse();
  const progress: [string, number, number][] = [];
  const r = await probeSelf(t, EMBED, {
    onProgress: (step: string, done: number, total: number) => progress.push([step, done, total]),
  });
  assertAllPassed(r);
  for (const id of EMBED_CHECKS) check(r, id);
  for (
    const id of [
      "reference_parity_mean_cosine",
      "reference_parity_min_cosine",
      "reference_parity_worst_decile_overlap",
    ]
  ) assert.equal(check(r, id).value, 1);
  assert.deepEqual(r.checks_lacking, []);
  assert.equal(r.query_path, "enabled");
  assert.equal(r.task, "embed");
  assert.equal(r.cert_class, "embedding");
  assert.equal(r.reference_model_id, EMBED);
  assert.equal(r.workload_revision, PROBE_WORKLOAD_REVISION);
  const model = await t.syn.registry.ready(EMBED);
  assert.equal(r.fingerprint, model.fingerprint);
  assert.equal(r.numeric_profile_id, model.numericProfileId);
  assert.equal(check(r, "over_max_context_refused").value, "refused:sequence_too_long");
  assert.equal(check(r, "max_context").value, `served:${model.maxTokens}`);
  assert.equal(check(r, "dims").value, 32);
  // Perf rows per batch size, the best throughput assigned.
  assert.ok(r.perf.length >= 5);
  for (const p of r.perf) {
    assert.equal(p.knob, t.syn.config.knob);
    assert.ok(p.tokens_per_second > 0, JSON.stringify(p));
    assert.ok(p.batch_rows >= 1 && p.batch_rows <= 64);
  }
  const best = Math.max(...r.perf.map((p) => p.tokens_per_second));
  assert.equal(r.knob_assignment.tokens_per_second, best);
  assert.equal(
    r.knob_assignment.recommended_batch.rows,
    r.perf.find((p) => p.tokens_per_second === best)!.batch_rows,
  );
  assert.ok(r.knob_assignment.recommended_batch.token_budget > 0);
  assert.ok(r.knob_assignment.recommended_batch.token_budget <= 4096);
  assert.ok(r.knob_assignment.estimated_execution_ms > 0);
  // Progress reached its total; the work ran in the control class of the model's schedulers.
  const last = progress.at(-1)!;
  assert.equal(last[1], last[2]);
  assert.ok(progress.some(([s]) => s === "shape_invariance"));
  assert.ok(model.interactive.stats().classes.control.dispatched >= 34);
  assert.ok(model.bulk.stats().classes.control.dispatched >= 20);
  assert.equal(model.interactive.stats().classes.interactive.dispatched, 0);
});

Deno.test("probeLane() passes every check of the tiny rerank model against itself", async () => {
  await using t = await startSynapse();
  const r = await probeSelf(t, RERANK);
  assertAllPassed(r);
  for (const id of EMBED_CHECKS.filter((x) => x !== "norm")) check(r, id);
  assert.equal(check(r, "rerank_pearson").value, 1);
  assert.equal(check(r, "rerank_max_abs_delta").value, 0);
  assert.equal(check(r, "rerank_max_abs_delta").threshold, 0.005);
  assert.equal(r.cert_class, "rerank");
  assert.equal(r.query_path, "enabled");
  assert.ok(!r.checks.some((c) => c.id === "norm"));
});

Deno.test("probeLane() fails parity against a reference with other outputs, naming the metric and value", async () => {
  await using t = await startSynapse();
  using stack = new DisposableStack();
  const model = await t.syn.registry.ready(EMBED);
  const lanes = t.syn.registry.controlLanes(EMBED);
  const wrong: ProbeLanes = {
    query: lanes.query,
    batch: skewedLane(t.syn, lanes.batch, tilt(0.5), stack),
  };
  const r = await probeLane({
    model,
    laneId: EMBED,
    lanes,
    reference: { model, lanes: wrong },
    knob: "balanced",
    tokenizers: t.syn.tokenizers,
  });
  assert.equal(r.passed, false);
  const mean = check(r, "reference_parity_mean_cosine");
  assert.equal(mean.passed, false);
  assert.equal(typeof mean.value, "number");
  assert.ok((mean.value as number) < 0.999, `${mean.value}`);
  assert.equal(mean.threshold, 0.999);
  assert.equal(mean.comparison, ">=");
  assert.match(mean.detail!, /mean cosine against the reference is 0\.\d+/);
  // The lane's own checks still pass: only parity failed.
  for (const id of EMBED_CHECKS) assert.equal(check(r, id).passed, true, id);
  assert.ok((check(r, "reference_parity_min_cosine").value as number) < 0.999);

  // Rerank: scores shifted by 0.05 on every other row.
  const rm = await t.syn.registry.ready(RERANK);
  const rl = t.syn.registry.controlLanes(RERANK);
  const shifted = skewedLane(t.syn, rl.batch, (_rows, out) => {
    for (let i = 0; i < out.data.length; i += 2) out.data[i] = out.data[i]! + 0.05;
  }, stack);
  const rr = await probeLane({
    model: rm,
    laneId: RERANK,
    lanes: rl,
    reference: { model: rm, lanes: { query: rl.query, batch: shifted } },
    knob: "balanced",
  });
  assert.equal(rr.passed, false);
  const delta = check(rr, "rerank_max_abs_delta");
  assert.equal(delta.passed, false);
  assert.ok(Math.abs((delta.value as number) - 0.05) < 1e-4, `${delta.value}`);
  assert.match(delta.detail!, /largest \|Δscore\| against the reference is 0\.0[45]/);
});

Deno.test("probeLane() says query_path disabled when the query path differs, without failing the lane", async () => {
  await using t = await startSynapse();
  using stack = new DisposableStack();
  const model = await t.syn.registry.ready(EMBED);
  const lanes = t.syn.registry.controlLanes(EMBED);
  const r = await probeLane({
    model,
    laneId: EMBED,
    lanes: { query: skewedLane(t.syn, lanes.query, tilt(0.01), stack), batch: lanes.batch },
    reference: { model, lanes },
    knob: "balanced",
  });
  assert.equal(r.query_path, "disabled");
  const q = check(r, "query_path_equals_batch_path");
  assert.equal(q.passed, false);
  assert.ok((q.value as number) < 0.99999);
  assert.match(q.detail!, /query path is disabled/);
  assert.equal(r.passed, true);
  for (const c of r.checks) if (c.id !== q.id) assert.equal(c.passed, true, c.id);
});

/** A batch lane whose calls of 9 rows or more come out tilted by `amount`. */
function shapeSkewedBatch(t: TestSynapse, lane: Lane, amount: number, stack: DisposableStack) {
  const skew = tilt(amount);
  return skewedLane(t.syn, lane, (rows, out) => {
    if (rows.length >= 9) skew(rows, out);
  }, stack);
}

Deno.test("probeLane() splits a lane that is not shape-invariant by shape class, naming the sizes, and caps its calls at the shapes that match the rows alone", async () => {
  await using t = await startSynapse();
  using stack = new DisposableStack();
  const model = await t.syn.registry.ready(EMBED);
  const lanes = t.syn.registry.controlLanes(EMBED);
  const r = await probeLane({
    model,
    laneId: EMBED,
    lanes: { query: lanes.query, batch: shapeSkewedBatch(t, lanes.batch, 0.05, stack) },
    knob: "balanced",
  });
  const s = check(r, "shape_invariance");
  assert.equal(s.passed, false);
  assert.ok((s.value as number) < 0.99999);
  assert.match(s.detail!, /9 rows: 9\/9 rows/);
  assert.match(s.detail!, /64 rows: \d+\/64 rows/);
  const differed = s.detail!.split(";")[0]!;
  assert.doesNotMatch(differed, /(^|\s)8 rows/);
  assert.match(s.detail!, /split into 2 shape classes: calls capped at 8 rows/);
  // Calls of 1…8 rows match the rows alone; 9 and up do not: capped at 8.
  assert.equal(r.shape_cap, 8);
  const classes = r.shape_classes!;
  assert.deepEqual(classes.map((k) => [k.id, k.served]), [["rows_alone", true], [
    "class_1",
    false,
  ]]);
  const sizes = (k: { shapes: string[] }) => k.shapes.map((x) => Number(x.split(" ")[2]));
  assert.deepEqual(classes[0]!.shapes.slice(0, 2), ["calls of 1 row", "calls of 2 rows"]);
  assert.ok(sizes(classes[0]!).every((n) => n < 9), classes[0]!.shapes.join());
  assert.ok(sizes(classes[0]!).includes(8));
  assert.equal(classes[0]!.parity, undefined);
  assert.ok(sizes(classes[1]!).every((n) => n >= 9), classes[1]!.shapes.join());
  assert.equal(sizes(classes[1]!)[0], 9);
  assert.ok(sizes(classes[1]!).includes(64));
  // No reference: the tilted class is measured against the rows alone, and is off the bar.
  const p = classes[1]!.parity!;
  assert.equal(p.against, "rows_alone");
  assert.equal(p.metric, "mean_cosine");
  assert.equal(p.passed, false);
  assert.ok(p.value < 0.999, `${p.value}`);
  // Recorded: the class is not served, so it does not fail the lane.
  const cp = check(r, "shape_class_parity");
  assert.equal(cp.passed, true);
  assert.equal(cp.value, p.value);
  assert.match(
    cp.detail!,
    /calls are capped at 8 rows \(rows_alone\): the other classes are not served/,
  );
  assert.match(
    cp.detail!,
    /class_1 \(calls of 9 rows, .*\): mean cosine 0\.\d+ against the rows alone/,
  );
  assert.equal(r.passed, true);
  // Compared at the same shape, the query path still matches the batch path.
  assert.equal(r.query_path, "enabled");
  assert.deepEqual(r.checks_lacking, [{ id: "reference_parity", reason: "no_reference_lane" }]);
});

Deno.test("probeLane() holds a split lane's parity to what it serves: the calls up to its cap, against the reference", async () => {
  await using t = await startSynapse();
  using stack = new DisposableStack();
  const model = await t.syn.registry.ready(EMBED);
  const lanes = t.syn.registry.controlLanes(EMBED);
  const r = await probeLane({
    model,
    laneId: EMBED,
    // Far off in calls of 9 rows or more (cosine about 0.98): never served once capped.
    lanes: { query: lanes.query, batch: shapeSkewedBatch(t, lanes.batch, 0.05, stack) },
    reference: { model, lanes },
    knob: "balanced",
  });
  assert.equal(r.shape_cap, 8);
  const [alone, tilted] = r.shape_classes!;
  assert.equal(alone!.parity!.against, "reference");
  assert.equal(alone!.parity!.passed, true);
  assert.equal(tilted!.parity!.passed, false);
  // The core rows in calls of at most 8: the reference's own numbers.
  const mean = check(r, "reference_parity_mean_cosine");
  assert.equal(mean.passed, true);
  assert.ok((mean.value as number) > 0.999999, `${mean.value}`);
  assert.equal(r.passed, true);
  assert.deepEqual(r.checks.filter((c) => !c.passed).map((c) => c.id), ["shape_invariance"]);

  // A reference whose every output is off: the served class misses parity, so the lane fails.
  const off = await probeLane({
    model,
    laneId: EMBED,
    lanes: { query: lanes.query, batch: shapeSkewedBatch(t, lanes.batch, 0.05, stack) },
    reference: {
      model,
      lanes: { ...lanes, batch: skewedLane(t.syn, lanes.batch, tilt(0.05), stack) },
    },
    knob: "balanced",
  });
  assert.equal(off.shape_cap, 8);
  assert.equal(check(off, "reference_parity_mean_cosine").passed, false);
  assert.equal(off.passed, false);
});

Deno.test({
  name: "probeLane() prints the probe wall time of the MiniLM-shaped encoder",
  async fn() {
    await using t = await startSynapse({ preload_models: [preload(MINILM, "minilm-shaped")] });
    const model = await t.syn.registry.ready("minilm-shaped");
    const lanes = t.syn.registry.controlLanes("minilm-shaped");
    const t0 = performance.now();
    const r = await probeLane({
      model,
      laneId: "minilm-shaped",
      lanes,
      reference: { model, lanes },
      knob: t.syn.config.knob,
      tokenizers: t.syn.tokenizers,
    });
    const wall = performance.now() - t0;
    console.log(
      `probe wall time, MiniLM-shaped encoder (${navigator.hardwareConcurrency} cores): ${
        Math.round(wall)
      } ms; best ${r.knob_assignment.tokens_per_second} tokens/s at ${r.knob_assignment.recommended_batch.rows} rows`,
    );
    assertAllPassed(r);
  },
});

function llamaEntry(modelId: string, task: "generate" | "embed") {
  return {
    engine: "llama",
    model_path: GEN,
    tokenizer_path: `${GEN}/tokenizer.json`,
    task,
    model_id: modelId,
    pooling: "mean",
    normalize: true,
    max_tokens: 512,
  };
}

/** A Synapse serving the tiny llama GGUF, worker logs dropped. */
async function startLlama(): Promise<TestSynapse> {
  const dir = await Deno.makeTempDir({ prefix: "synapse-probe-" });
  const env = {
    XDG_DATA_HOME: `${dir}/data`,
    XDG_CONFIG_HOME: `${dir}/config`,
    HOME: dir,
    SYNAPSE_CONFIG_JSON: JSON.stringify({
      preload_models: [llamaEntry("gen", "generate"), llamaEntry("gguf-embed", "embed")],
    }),
  };
  const { config } = loadConfig({ env, cwd: dir });
  const syn = await createSynapse({ config, env, log: nullLog });
  return {
    syn,
    dir,
    async [Symbol.asyncDispose]() {
      await syn.dispose();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

Deno.test("probeLane() on llama lanes: greedy generation is token-exact; the embed lane without a reference lists checks_lacking", async () => {
  await using t = await startLlama();
  const gen: ReadyModel = await t.syn.registry.ready("gen");
  const g = await probeLane({
    model: gen,
    laneId: "gen",
    // 6 of the 20 prompts (64 tokens each, serially and concurrently): a
    // loaded 2-core machine runs the tiny model's worker slowly; the full set is the default
    // (tests/probe/workload_test.ts).
    generationPrompts: 6,
    lanes: t.syn.registry.controlLanes("gen"),
    knob: t.syn.config.knob,
    tokenizers: t.syn.tokenizers,
  });
  assertAllPassed(g);
  assert.equal(g.task, "generate");
  assert.equal(g.cert_class, "generation");
  assert.deepEqual(g.checks.map((c) => c.id), [
    "greedy_serial_vs_concurrent",
    "greedy_determinism",
  ]);
  for (const c of g.checks) assert.equal(c.value, 1);
  // The concurrent run matched, so it is the second run: no third run is decoded.
  assert.match(check(g, "greedy_determinism").detail!, /6 prompts token-exact across two runs/);
  assert.deepEqual(g.checks_lacking, [{ id: "reference_parity", reason: "no_reference_lane" }]);
  assert.equal(g.perf.length, 1);
  assert.equal(g.perf[0]!.batch_rows, 1);
  assert.ok(g.perf[0]!.tokens_per_second > 0);
  assert.ok(g.knob_assignment.estimated_execution_ms > 0);

  const emb = await t.syn.registry.ready("gguf-embed");
  const e = await probeLane({
    model: emb,
    laneId: "gguf-embed",
    lanes: t.syn.registry.controlLanes("gguf-embed"),
    knob: t.syn.config.knob,
    tokenizers: t.syn.tokenizers,
  });
  assert.deepEqual(e.checks_lacking, [{ id: "reference_parity", reason: "no_reference_lane" }]);
  assert.equal(e.reference_model_id, null);
  assert.ok(!e.checks.some((c) => c.id.startsWith("reference_parity")));
  assertAllPassed(e);
  for (const id of EMBED_CHECKS) check(e, id);
  assert.equal(check(e, "over_max_context_refused").value, "refused:sequence_too_long");
});

/** A lane over `lane`'s engine whose generations pass through `change` (call number, ids). */
function alteredGenerationLane(
  syn: Synapse,
  lane: Lane,
  change: (call: number, ids: number[]) => number[],
  stack: DisposableStack,
): Lane {
  let calls = 0;
  const inner = lane.engine;
  const engine = new SkewedEngine(inner, () => {});
  engine.generate = async (...args: Parameters<Engine["generate"]>) => {
    const out = await inner.generate(...args);
    return { ...out, generatedIds: change(++calls, out.generatedIds) };
  };
  const scheduler = stack.use(new LaneScheduler({ permits: 1 }));
  return new Lane({
    name: `${lane.name}-altered`,
    engine,
    scheduler,
    cls: "control",
    admission: syn.admission,
  });
}

Deno.test("probeLane() on a generation lane whose concurrent run differs re-runs prompts serially: a concurrency effect passes greedy_determinism, nondeterminism fails it", async () => {
  await using t = await startLlama();
  using stack = new DisposableStack();
  const gen = await t.syn.registry.ready("gen");
  const lanes = t.syn.registry.controlLanes("gen");
  const flipLast = (ids: number[]) => [...ids.slice(0, -1), (ids.at(-1)! + 1) % 100];
  let queryCalls = 0;
  const countQuery = alteredGenerationLane(t.syn, lanes.query, (_n, ids) => {
    queryCalls++;
    return ids;
  }, stack);
  // Only the concurrent run (the batch lane) comes out different.
  const concurrency = await probeLane({
    model: gen,
    laneId: "gen",
    generationPrompts: 6,
    lanes: {
      query: countQuery,
      batch: alteredGenerationLane(t.syn, lanes.batch, (_n, ids) => flipLast(ids), stack),
    },
    knob: t.syn.config.knob,
  });
  const svc = check(concurrency, "greedy_serial_vs_concurrent");
  assert.equal(svc.passed, false);
  assert.equal(svc.value, 0);
  assert.match(svc.detail!, /^6\/6 prompts differ between the serial and the concurrent run/);
  const det = check(concurrency, "greedy_determinism");
  assert.equal(det.passed, true, JSON.stringify(det));
  assert.equal(det.value, 1);
  assert.equal(queryCalls, 6 + 5, "the serial run, then the first 5 prompts again");
  assert.equal(concurrency.passed, false);

  // Every run after the first 6 calls differs: the re-run shows it is not deterministic.
  const drifting = alteredGenerationLane(
    t.syn,
    lanes.query,
    (n, ids) => n > 6 ? flipLast(ids) : ids,
    stack,
  );
  const nondeterministic = await probeLane({
    model: gen,
    laneId: "gen",
    generationPrompts: 6,
    lanes: { query: drifting, batch: drifting },
    knob: t.syn.config.knob,
  });
  const d = check(nondeterministic, "greedy_determinism");
  assert.equal(d.passed, false);
  assert.equal(d.value, 0);
  assert.match(
    d.detail!,
    /^5\/5 prompts differ between two serial runs; first: prompt 0 at token \d+/,
  );
  assert.equal(check(nondeterministic, "greedy_serial_vs_concurrent").passed, false);
});
