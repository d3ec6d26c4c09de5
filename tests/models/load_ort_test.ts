/**
 * The ORT loader's weight dtype (lib/models/load_ort.ts): an ONNX model with FLOAT16 initializers
 * is an `f16` lane (profile `dtype` and `quant`, so its own numeric profile and fingerprint); an
 * fp32 model keeps `f32` and its pinned fingerprint; a declared `dtype` (preload) is honoured
 * when it is the weights' own and refused by name otherwise. Real onnxruntime on the fixtures.
 */
import assert from "node:assert/strict";
import { cosine, MODELS, preload, resultOf, startSynapse } from "../_helpers.ts";
import type { Synapse } from "../../lib/synapse.ts";

const EMBED = `${MODELS}/synapse-tiny-embed`;
const F16 = `${MODELS}/synapse-tiny-embed-f16`;

// deno-lint-ignore no-explicit-any
async function rows(syn: Synapse): Promise<Record<string, any>> {
  const list = resultOf(await syn.call("models.list", {})).models;
  return Object.fromEntries(list.map((m: { model_id: string }) => [m.model_id, m]));
}

/** One vector straight from a model's bulk lane (no serving admission in the way). */
async function vector(syn: Synapse, model: string, text: string): Promise<Float32Array> {
  const m = syn.registry.resolve(model, "embed");
  const out = await m.bulk.run({
    kind: "embed",
    rows: [m.tokenizer.encode(text, { maxTokens: m.maxTokens })],
  });
  return (out.rows[0] as { values: Float32Array }).values;
}

Deno.test("an ONNX model with fp16 weights loads as an f16 lane with its own profile; the fp32 model stays f32", async () => {
  await using t = await startSynapse({
    preload_models: [preload(EMBED, "base"), preload(F16, "half")],
  });
  const r = await rows(t.syn);
  assert.equal(r.base.state, "ready");
  assert.equal(r.half.state, "ready");
  assert.equal(r.base.dtype, "f32");
  assert.equal(r.half.dtype, "f16");
  const base = t.syn.registry.resolve("base", "embed");
  const half = t.syn.registry.resolve("half", "embed");
  assert.equal(base.profile.dtype, "f32");
  assert.equal(base.profile.quant, "f32");
  assert.equal(half.profile.dtype, "f16");
  assert.equal(half.profile.quant, "f16");
  assert.notEqual(half.numericProfileId, base.numericProfileId);
  assert.notEqual(half.fingerprint, base.fingerprint);
  // The same weights, rounded to fp16, computed in fp32: the same vectors to 1e-4.
  for (const text of ["the river is calm today", "hello world"]) {
    const c = cosine(await vector(t.syn, "base", text), await vector(t.syn, "half", text));
    assert.ok(c > 0.9999, `cosine ${c}`);
  }
});

Deno.test("a declared dtype is honoured when it is the weights' own and refused by name otherwise", async () => {
  await using t = await startSynapse({
    preload_models: [
      preload(EMBED, "base-f32", { dtype: "f32" }),
      preload(F16, "half-f16", { dtype: "f16" }),
      preload(F16, "half-as-f32", { dtype: "f32" }),
      preload(EMBED, "base-as-f16", { dtype: "f16" }),
      preload(EMBED, "base-as-int8", { dtype: "int8" }),
    ],
  });
  const r = await rows(t.syn);
  assert.equal(r["base-f32"].state, "ready");
  assert.equal(r["base-f32"].dtype, "f32");
  assert.equal(r["half-f16"].state, "ready");
  assert.equal(r["half-f16"].dtype, "f16");
  const refused: [string, string, string][] = [
    ["half-as-f32", "f32", "f16"],
    ["base-as-f16", "f16", "f32"],
    ["base-as-int8", "int8", "f32"],
  ];
  for (const [id, declared, weights] of refused) {
    assert.equal(r[id].state, "failed", id);
    assert.equal(r[id].error.code, "invalid_request", id);
    assert.deepEqual(r[id].error.details, {
      model_id: id,
      field: "dtype",
      dtype: declared,
      weights_dtype: weights,
      engine: "ort",
    });
    assert.match(r[id].error.message, new RegExp(`declares dtype '${declared}'`));
  }
});
