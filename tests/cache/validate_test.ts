/**
 * `onnxWeightDtype` (lib/cache/validate.ts): the storage dtype of an ONNX model's float weights,
 * read from its initializers with a protobuf walk, on the generated fixtures (fp32, and the fp16
 * variants `scripts/gen_models.ts` writes) and on files that are not ONNX.
 */
import assert from "node:assert/strict";
import { onnxWeightDtype } from "../../lib/cache/validate.ts";
import { SynapseError } from "../../lib/contract/errors.ts";
import { MODELS } from "../_helpers.ts";

Deno.test("onnxWeightDtype: the fp32 fixtures are f32, the fp16 variants f16 with the same element count", async () => {
  const base = await onnxWeightDtype(`${MODELS}/synapse-tiny-embed/model.onnx`, "model.onnx");
  assert.equal(base.dtype, "f32");
  assert.equal(base.counts.f16, 0);
  assert.equal(base.counts.bf16, 0);
  // model.onnx holds its float weights and little else: 4 bytes each.
  const size = (await Deno.stat(`${MODELS}/synapse-tiny-embed/model.onnx`)).size;
  assert.ok(base.counts.f32 * 4 <= size && base.counts.f32 * 4 > size * 0.95, `${base.counts.f32}`);
  assert.equal(
    (await onnxWeightDtype(`${MODELS}/synapse-tiny-rerank/model.onnx`, "model.onnx")).dtype,
    "f32",
  );
  for (const name of ["synapse-tiny-embed-f16", "synapse-tiny-embed-f16-perturbed"]) {
    const half = await onnxWeightDtype(`${MODELS}/${name}/model.onnx`, "model.onnx");
    assert.equal(half.dtype, "f16", name);
    assert.deepEqual(
      half.counts,
      { f32: 0, f16: base.counts.f32, bf16: 0, int8: 0, uint8: 0, integer_matmuls: 0 },
      name,
    );
    assert.equal(half.quant, "f16", name);
  }
  assert.equal(base.quant, "f32");
  assert.equal(base.counts.integer_matmuls, 0);
});

Deno.test("onnxWeightDtype: the int8 fixtures are quant int8 (integer MatMuls over INT8 weights), dtype f32", async () => {
  const base = await onnxWeightDtype(`${MODELS}/synapse-tiny-embed/model.onnx`, "model.onnx");
  for (const name of ["synapse-tiny-embed-int8", "synapse-tiny-embed-int8-badscale"]) {
    const q = await onnxWeightDtype(`${MODELS}/${name}/model.onnx`, "model.onnx");
    assert.equal(q.quant, "int8", name);
    assert.equal(q.dtype, "f32", name);
    // 2 layers × 6 dense MatMuls, each one DynamicQuantizeMatMul.
    assert.equal(q.counts.integer_matmuls, 12, name);
    // 2 layers × (4 × 32·32 + 2 × 32·64) weights, plus one int8 zero point per column.
    const weights = 2 * (4 * 32 * 32 + 2 * 32 * 64);
    const zeroPoints = 2 * (4 * 32 + 64 + 32);
    assert.equal(q.counts.int8, weights + zeroPoints, name);
    // The fp32 weights left: everything but the quantized MatMuls, plus one scale per column.
    assert.equal(q.counts.f32, base.counts.f32 - weights + zeroPoints, name);
  }
});

Deno.test("onnxWeightDtype refuses what is not ONNX, and a file it cannot read", async () => {
  const dir = await Deno.makeTempDir({ prefix: "synapse-validate-" });
  try {
    await Deno.writeTextFile(`${dir}/junk.onnx`, "\u0008\u0001 this is not a model");
    await assert.rejects(
      onnxWeightDtype(`${dir}/junk.onnx`, "model.onnx"),
      (e: unknown) =>
        e instanceof SynapseError && e.code === "artifact_invalid" &&
        e.details?.reason === "not_onnx" && e.details?.file === "model.onnx",
    );
    await assert.rejects(
      onnxWeightDtype(`${dir}/missing.onnx`, "model.onnx"),
      (e: unknown) =>
        e instanceof SynapseError && e.code === "artifact_invalid" &&
        e.details?.reason === "unreadable",
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
