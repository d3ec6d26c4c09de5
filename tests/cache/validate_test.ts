/**
 * `onnxWeightDtype` (lib/cache/validate.ts): the storage dtype of an ONNX model's float weights,
 * read from its initializers with a protobuf walk, on the generated fixtures (fp32, and the fp16
 * variants `scripts/gen_models.ts` writes) and on files that are not ONNX.
 */
import assert from "node:assert/strict";
import onnxProto from "onnx-proto";
import { onnxQuant, onnxWeightDtype } from "../../lib/cache/validate.ts";
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
      {
        f32: 0,
        f16: base.counts.f32,
        bf16: 0,
        int8: 0,
        uint8: 0,
        integer_matmuls: 0,
        nbits_matmuls: 0,
      },
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

Deno.test("onnxQuant: a QDQ (static) or 4-bit graph is quantized, never the f32 reference; an f32 graph with no 8-bit weights stays f32", () => {
  const none = {
    f32: 1000,
    f16: 0,
    bf16: 0,
    int8: 0,
    uint8: 0,
    integer_matmuls: 0,
    nbits_matmuls: 0,
  };
  assert.equal(onnxQuant(none, "f32"), "f32");
  // QDQ: DequantizeLinear nodes (counted with the integer MatMuls) over INT8 weights.
  assert.equal(onnxQuant({ ...none, int8: 900, integer_matmuls: 24 }, "f32"), "int8");
  // U8U8 weights.
  assert.equal(onnxQuant({ ...none, uint8: 900, int8: 10, integer_matmuls: 6 }, "f32"), "uint8");
  // MatMulNBits: 4-bit blocks stored as UINT8.
  assert.equal(onnxQuant({ ...none, uint8: 500, nbits_matmuls: 6 }, "f32"), "int4");
  // A quantize op with no 8-bit initializers quantizes no weight.
  assert.equal(onnxQuant({ ...none, integer_matmuls: 1 }, "f16"), "f16");
});

Deno.test("onnxWeightDtype: a QDQ-format graph (DequantizeLinear over INT8 weights before a float MatMul) is quant int8", async () => {
  const onnx = onnxProto.onnx;
  const T = onnx.TensorProto.DataType;
  const model = onnx.ModelProto.encode({
    irVersion: 8,
    opsetImport: [{ domain: "", version: 17 }],
    graph: {
      name: "qdq",
      node: [
        { opType: "DequantizeLinear", input: ["w_q", "w_scale", "w_zp"], output: ["w"] },
        { opType: "MatMul", input: ["x", "w"], output: ["y"] },
      ],
      initializer: [
        { name: "w_q", dataType: T.INT8, dims: [4, 4], rawData: new Uint8Array(16) },
        { name: "w_scale", dataType: T.FLOAT, dims: [], floatData: [0.1] },
        { name: "w_zp", dataType: T.INT8, dims: [], rawData: new Uint8Array(1) },
      ],
    },
  }).finish();
  const dir = await Deno.makeTempDir({ prefix: "synapse-qdq-" });
  try {
    await Deno.writeFile(`${dir}/model.onnx`, model);
    const r = await onnxWeightDtype(`${dir}/model.onnx`, "model.onnx");
    assert.equal(r.counts.integer_matmuls, 1);
    assert.equal(r.counts.int8, 17);
    assert.equal(r.dtype, "f32");
    assert.equal(r.quant, "int8");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
