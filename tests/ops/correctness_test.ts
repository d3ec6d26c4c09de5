/**
 * Vectors from every door agree with an independent path on the same files: a plain
 * onnxruntime-node session with the pooling written out here, and transformers.js's
 * feature-extraction pipeline (cosine ≥ 0.99999, identical token counts).
 */
import assert from "node:assert/strict";
import * as ort from "onnxruntime-node";
import { Tokenizer } from "@huggingface/tokenizers";
import { cosine, MINILM, MODELS, preload, resultOf, startSynapse } from "../_helpers.ts";
import { serveHttp } from "../../lib/doors/http/server.ts";

const TEXTS = [
  "hello world",
  "Synapse serves embeddings, rerank scores and small-model generation to programs on the machine.",
  'Licensed under the Apache License, Version 2.0 (the "License"); you may not use this file ' +
  "except in compliance with the License. You may obtain a copy of the License at",
  Array(40).fill("permission is hereby granted").join(" "),
  "x",
];

async function reference(
  dir: string,
  texts: string[],
): Promise<{ vectors: number[][]; counts: number[] }> {
  const json = JSON.parse(await Deno.readTextFile(`${dir}/tokenizer.json`));
  const cfg = JSON.parse(await Deno.readTextFile(`${dir}/tokenizer_config.json`));
  const tok = new Tokenizer(json, cfg);
  const session = await ort.InferenceSession.create(`${dir}/model.onnx`);
  const vectors: number[][] = [];
  const counts: number[] = [];
  try {
    for (const text of texts) {
      const ids = tok.encode(text).ids; // with [CLS] ... [SEP]
      counts.push(ids.length);
      const n = ids.length;
      const big = (xs: number[]) =>
        new ort.Tensor("int64", BigInt64Array.from(xs.map(BigInt)), [1, n]);
      const out = await session.run({
        input_ids: big(ids),
        attention_mask: big(ids.map(() => 1)),
        token_type_ids: big(ids.map(() => 0)),
      });
      const h = out.last_hidden_state!.data as Float32Array;
      const dims = h.length / n;
      const mean = new Array<number>(dims).fill(0);
      for (let t = 0; t < n; t++) for (let d = 0; d < dims; d++) mean[d]! += h[t * dims + d]! / n;
      const norm = Math.hypot(...mean);
      vectors.push(mean.map((v) => v / norm));
    }
  } finally {
    await session.release();
  }
  return { vectors, counts };
}

const MODEL_DIRS: [string, string][] = [
  ["synapse-tiny-embed", `${MODELS}/synapse-tiny-embed`],
  ["minilm-shaped", MINILM],
];
for (const [name, dir] of MODEL_DIRS) {
  Deno.test(`embed.query, embed.batch and /v1/embeddings on ${name} agree with a plain onnxruntime session`, async () => {
    const ref = await reference(dir, TEXTS);
    await using t = await startSynapse({ preload_models: [preload(dir, name)] });
    await using http = serveHttp(t.syn, { port: 0 });
    const batch = resultOf(await t.syn.call("embed.batch", { texts: TEXTS }));
    assert.deepEqual(batch.real_token_counts, ref.counts);
    const res = await fetch(`http://127.0.0.1:${http.port}/v1/embeddings`, {
      method: "POST",
      body: JSON.stringify({ input: TEXTS }),
    });
    const oa = await res.json();
    assert.equal(res.status, 200);
    assert.equal(oa.synapse.fingerprint, batch.fingerprint);
    assert.equal(res.headers.get("x-synapse-fingerprint"), batch.fingerprint);
    assert.deepEqual(oa.synapse.real_token_counts, ref.counts);
    oa.data.forEach((d: { index: number; embedding: number[] }) => {
      const c = cosine(d.embedding, ref.vectors[d.index]!);
      assert.ok(c >= 0.99999, `${name} /v1/embeddings text ${d.index}: cosine ${c}`);
    });
    const ops = await (await fetch(`http://127.0.0.1:${http.port}/v1/ops/embed.query`, {
      method: "POST",
      body: JSON.stringify({ text: TEXTS[1] }),
    })).json();
    assert.equal(ops.result.fingerprint, batch.fingerprint);
    assert.ok(cosine(ops.result.vectors[0].vector, ref.vectors[1]!) >= 0.99999);
    for (let i = 0; i < TEXTS.length; i++) {
      const q = resultOf(await t.syn.call("embed.query", { text: TEXTS[i] }));
      assert.deepEqual(q.real_token_counts, [ref.counts[i]]);
      assert.equal(q.fingerprint, batch.fingerprint);
      const c1 = cosine(q.vectors[0].vector, ref.vectors[i]!);
      const c2 = cosine(batch.vectors[i].vector, ref.vectors[i]!);
      assert.ok(c1 >= 0.99999 && c2 >= 0.99999, `${name} text ${i}: cosine ${c1} / ${c2}`);
    }
  });
}

Deno.test("embed.batch agrees with transformers.js's feature-extraction pipeline", async () => {
  const { env, pipeline } = await import("@huggingface/transformers");
  env.allowRemoteModels = false;
  env.localModelPath = `${MODELS}/`;
  const extractor = await pipeline("feature-extraction", "synapse-tiny-embed", { dtype: "fp32" });
  const out = await extractor(TEXTS, { pooling: "mean", normalize: true });
  const dims = out.dims[1]!;
  const data = out.data as Float32Array;
  await using t = await startSynapse();
  const r = resultOf(await t.syn.call("embed.batch", { texts: TEXTS }));
  for (let i = 0; i < TEXTS.length; i++) {
    const c = cosine(r.vectors[i].vector, data.subarray(i * dims, (i + 1) * dims));
    assert.ok(c >= 0.99999, `text ${i}: cosine ${c}`);
  }
  await extractor.dispose();
});

Deno.test("rerank.score agrees with a plain onnxruntime session on raw logits", async () => {
  const dir = `${MODELS}/synapse-tiny-rerank`;
  const tok = new Tokenizer(
    JSON.parse(await Deno.readTextFile(`${dir}/tokenizer.json`)),
    JSON.parse(await Deno.readTextFile(`${dir}/tokenizer_config.json`)),
  );
  const session = await ort.InferenceSession.create(`${dir}/model.onnx`);
  const query = "what does synapse serve";
  const docs = TEXTS.slice(0, 4);
  const expected: number[] = [];
  for (const d of docs) {
    const enc = tok.encode(query, { text_pair: d, return_token_type_ids: true });
    const n = enc.ids.length;
    const big = (xs: number[]) =>
      new ort.Tensor("int64", BigInt64Array.from(xs.map(BigInt)), [1, n]);
    const out = await session.run({
      input_ids: big(enc.ids),
      attention_mask: big(enc.ids.map(() => 1)),
      token_type_ids: big(enc.token_type_ids),
    });
    expected.push((out.logits!.data as Float32Array)[0]!);
  }
  await session.release();
  await using t = await startSynapse();
  const r = resultOf(await t.syn.call("rerank.score", { query, candidates: docs }));
  r.scores.forEach((s: number, i: number) =>
    assert.ok(Math.abs(s - expected[i]!) < 1e-4, `${s} vs ${expected[i]}`)
  );
});
