/**
 * embed.query's vectors are bit-identical to a plain onnxruntime-node session run one text at a
 * time with the same session options, int64 tensors built with `BigInt()` per token, and
 * Synapse's pooling arithmetic written out here (Float64 sums, Float32 results, L2 by
 * `1 / sqrt`). The latency work (tensor building, the lone-query dispatch, cached envelope
 * parts) must not move a single bit; a cosine tolerance would hide that.
 */
import assert from "node:assert/strict";
import * as ort from "onnxruntime-node";
import { MINILM, MODELS, preload, resultOf, startSynapse } from "../_helpers.ts";
import { OrtEngine } from "../../lib/engines/ort/ort_engine.ts";

const TEXTS = [
  "hello world",
  "x",
  "Synapse serves embeddings, rerank scores and small-model generation to programs on the machine.",
  Array(60).fill("permission is hereby granted").join(" "),
  "naïve café — “quotes” and émoji 🙂 in one line",
];

/** The reference: one row per run, pooled as lib/engines/ort/pooling.ts pools `mean` + L2. */
async function reference(
  path: string,
  threads: number,
  rows: number[][],
): Promise<Float32Array[]> {
  const session = await ort.InferenceSession.create(path, {
    executionProviders: ["cpu"],
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    graphOptimizationLevel: "all",
    executionMode: "sequential",
  });
  try {
    const out: Float32Array[] = [];
    for (const ids of rows) {
      const n = ids.length;
      const t = (xs: number[]) => new ort.Tensor("int64", BigInt64Array.from(xs, BigInt), [1, n]);
      const feeds: Record<string, ort.Tensor> = { input_ids: t(ids) };
      if (session.inputNames.includes("attention_mask")) feeds.attention_mask = t(ids.map(() => 1));
      if (session.inputNames.includes("token_type_ids")) feeds.token_type_ids = t(ids.map(() => 0));
      const res = await session.run(feeds);
      const h = res.last_hidden_state!.data as Float32Array;
      const dims = h.length / n;
      const acc = new Float64Array(dims);
      for (let p = 0; p < n; p++) for (let d = 0; d < dims; d++) acc[d]! += h[p * dims + d]!;
      const v = new Float32Array(dims);
      for (let d = 0; d < dims; d++) v[d] = acc[d]! / n;
      let sq = 0;
      for (let d = 0; d < dims; d++) sq += v[d]! * v[d]!;
      const inv = 1 / Math.sqrt(sq);
      for (let d = 0; d < dims; d++) v[d]! *= inv;
      out.push(v);
    }
    return out;
  } finally {
    await session.release();
  }
}

for (
  const [name, dir] of [["synapse-tiny-embed", `${MODELS}/synapse-tiny-embed`], [
    "minilm-shaped",
    MINILM,
  ]] as const
) {
  Deno.test(`embed.query on ${name} is bit-identical to a plain onnxruntime session, call after call`, async () => {
    await using t = await startSynapse({
      preload_models: [preload(dir, name, { pooling: "mean", normalize: true })],
    });
    const model = t.syn.registry.list().find((m) => m.modelId === name)!.ready!;
    const engine = model.interactive.engine;
    assert.ok(engine instanceof OrtEngine);
    const ids = TEXTS.map((text) =>
      Array.from(model.tokenizer.encode(text, { maxTokens: model.maxTokens, truncate: true }).ids)
    );
    const got: number[][] = [];
    // Twice over: the second round runs on warm paths (reused buffers, cached envelope parts).
    for (let round = 0; round < 2; round++) {
      for (const [i, text] of TEXTS.entries()) {
        const r = resultOf(await t.syn.call("embed.query", { text, truncate: true }));
        assert.deepEqual(r.real_token_counts, [ids[i]!.length]);
        got.push(r.vectors[0].vector);
      }
    }
    const want = await reference(`${dir}/model.onnx`, engine.intraOpThreads, ids);
    got.forEach((v, i) => {
      const w = Array.from(want[i % TEXTS.length]!);
      assert.equal(v.length, w.length);
      // Exact: every float32 bit the same.
      assert.deepEqual(
        v,
        w,
        `${name} text ${i % TEXTS.length} (round ${Math.floor(i / TEXTS.length)})`,
      );
    });
  });
}
