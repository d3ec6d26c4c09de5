/**
 * The int8 quantizer (lib/quant/quantize_onnx.ts): deterministic to the byte, the fixtures are
 * what it writes, its rounding rule, what it refuses, and every format runs in onnxruntime with
 * vectors close to fp32's.
 */
import assert from "node:assert/strict";
import * as ort from "onnxruntime-node";
import {
  QuantizeError,
  quantizeOnnx,
  QUANTIZER_REVISION,
  quantizeWeights,
} from "../../lib/quant/quantize_onnx.ts";
import { sha256Hex } from "../../lib/identity/sha256.ts";
import { Writer } from "../../lib/quant/_proto.ts";
import { BADSCALE_FAULT } from "../../scripts/gen_models.ts";
import { cosine, MODELS } from "../_helpers.ts";

const FP32 = `${MODELS}/synapse-tiny-embed/model.onnx`;

Deno.test("quantizeOnnx is deterministic: the same input gives the same bytes, twice", async () => {
  const input = await Deno.readFile(FP32);
  const a = quantizeOnnx(input);
  const b = quantizeOnnx(input.slice());
  assert.equal(a.digest, b.digest);
  assert.deepEqual(a.bytes, b.bytes);
  assert.equal(a.sourceDigest, "sha256:" + sha256Hex(input));
  assert.equal(a.digest, "sha256:" + sha256Hex(a.bytes));
  assert.ok(a.descriptor.startsWith(`${QUANTIZER_REVISION};format=dqmm;per_channel=true`));
  // 2 layers × (query, key, value, attention output, intermediate, output), biases folded.
  assert.equal(a.quantized.length, 12);
  assert.ok(a.quantized.every((q) => q.biasFolded));
  // The attention's activation × activation MatMuls (Q·Kᵀ, P·V) stay fp32.
  assert.equal(a.skipped.length, 4);
  assert.ok(a.skipped.every((s) => s.reason === "weight is not a constant initializer"));
  // Another option is other bytes.
  assert.notEqual(quantizeOnnx(input, { perChannel: false }).digest, a.digest);
});

Deno.test("the int8 fixtures are exactly what the quantizer writes from the fp32 fixture", async () => {
  const input = await Deno.readFile(FP32);
  const good = await Deno.readFile(`${MODELS}/synapse-tiny-embed-int8/model.onnx`);
  assert.equal(quantizeOnnx(input).digest, "sha256:" + sha256Hex(good));
  const bad = await Deno.readFile(`${MODELS}/synapse-tiny-embed-int8-badscale/model.onnx`);
  assert.equal(
    quantizeOnnx(input, { scaleFault: BADSCALE_FAULT }).digest,
    "sha256:" + sha256Hex(bad),
  );
  assert.notDeepEqual(good, bad);
});

Deno.test("quantizeWeights: per-column symmetric scales, ties to even, ±127 (±63 reduced)", () => {
  // W [2, 3]: columns max|w| 2.54, 0 (all zero), 1.27.
  const w = Float32Array.of(2.54, 0, -1.27, -1.27, 0, 0.635);
  const { q, scale } = quantizeWeights(w, 2, 3, { perChannel: true, reduceRange: false });
  assert.deepEqual(Array.from(scale), [Math.fround(2.54 / 127), 1, Math.fround(1.27 / 127)]);
  assert.deepEqual(Array.from(q), [127, 0, -127, -64, 0, 64]);
  // Ties to even: 0.5 → 0, 1.5 → 2, 2.5 → 2, -2.5 → -2 (scale 1 from a 127 max).
  const ties = quantizeWeights(Float32Array.of(127, 0.5, 1.5, 2.5, -2.5), 5, 1, {
    perChannel: true,
    reduceRange: false,
  });
  assert.deepEqual(Array.from(ties.q), [127, 0, 2, 2, -2]);
  const reduced = quantizeWeights(w, 2, 3, { perChannel: true, reduceRange: true });
  // -1.27 / fround(2.54 / 63) is just under 31.5 in magnitude: no tie, so ±31.
  assert.deepEqual(Array.from(reduced.q), [63, 0, -63, -31, 0, 31]);
  const tensor = quantizeWeights(w, 2, 3, { perChannel: false, reduceRange: false });
  assert.deepEqual(Array.from(tensor.scale), [Math.fround(2.54 / 127)]);
  assert.deepEqual(Array.from(tensor.q), [127, 0, -64, -64, 0, 32]);
});

Deno.test("quantizeOnnx refuses what it cannot quantize, by reason", async () => {
  const refuses = (bytes: Uint8Array, reason: string) =>
    assert.throws(
      () => quantizeOnnx(bytes),
      (e: unknown) => e instanceof QuantizeError && e.reason === reason,
      reason,
    );
  refuses(new TextEncoder().encode("\u0008\u0001 not a model at all"), "not_onnx");
  refuses(await Deno.readFile(`${MODELS}/synapse-tiny-embed-int8/model.onnx`), "already_quantized");
  // A ModelProto whose graph has no MatMul: field 7 (graph) holding only a name.
  const name = new TextEncoder().encode("empty");
  refuses(Uint8Array.of(0x3a, name.length + 2, 0x12, name.length, ...name), "nothing_to_quantize");
});

Deno.test("every format runs in onnxruntime, each within cosine 0.9999 of fp32 on the tiny model", async () => {
  const input = await Deno.readFile(FP32);
  const ids = BigInt64Array.from({ length: 2 * 12 }, (_, i) => BigInt(5 + ((i * 37) % 2000)));
  const feeds = {
    input_ids: new ort.Tensor("int64", ids, [2, 12]),
    attention_mask: new ort.Tensor("int64", new BigInt64Array(24).fill(1n), [2, 12]),
    token_type_ids: new ort.Tensor("int64", new BigInt64Array(24), [2, 12]),
  };
  const run = async (bytes: Uint8Array) => {
    const s = await ort.InferenceSession.create(bytes, { graphOptimizationLevel: "all" });
    try {
      return Array.from((await s.run(feeds)).last_hidden_state!.data as Float32Array);
    } finally {
      await s.release();
    }
  };
  const ref = await run(input);
  for (
    const opts of [
      {},
      { format: "matmulinteger" as const },
      { format: "rowwise" as const },
      { perChannel: false },
      { reduceRange: true },
      { foldBias: false },
    ]
  ) {
    const out = await run(quantizeOnnx(input, opts).bytes);
    const c = cosine(out, ref);
    assert.ok(c >= 0.9999 && c < 1, `${JSON.stringify(opts)}: cosine ${c}`);
  }
  // The deliberately bad scale is far off.
  const bad = cosine(await run(quantizeOnnx(input, { scaleFault: BADSCALE_FAULT }).bytes), ref);
  assert.ok(bad < 0.99, `badscale cosine ${bad}`);
});

/** A one-node model y = Gemm(x [2, 8], W, C [4]) (W [8, 4], or [4, 8] with transB). */
function gemmModel(transB: boolean, alpha = 1): Uint8Array {
  const t = (name: string, dims: number[], data: Float32Array) =>
    new Writer().packed(1, dims).varint(2, 1).text(8, name)
      .bytes(9, new Uint8Array(data.buffer));
  const w = Float32Array.from({ length: 32 }, (_, i) => Math.sin(i * 1.7) * 0.5);
  const c = Float32Array.from({ length: 4 }, (_, i) => i * 0.25 - 0.3);
  const info = (name: string, dims: number[]) =>
    new Writer().text(1, name).message(
      2,
      new Writer().message(
        1,
        new Writer().varint(1, 1).message(
          2,
          dims.reduce((s, d) => s.message(1, new Writer().varint(1, d)), new Writer()),
        ),
      ),
    );
  const node = new Writer().text(1, "x").text(1, "W").text(1, "C").text(2, "y").text(3, "gemm")
    .text(4, "Gemm")
    .message(5, new Writer().text(1, "transB").varint(3, transB ? 1 : 0).varint(20, 2))
    .message(5, new Writer().text(1, "alpha").float(2, alpha).varint(20, 1));
  const graph = new Writer().message(1, node).text(2, "g")
    .message(5, t("W", transB ? [4, 8] : [8, 4], w)).message(5, t("C", [4], c))
    .message(11, info("x", [2, 8])).message(12, info("y", [2, 4]));
  return new Writer().varint(1, 8).message(7, graph)
    .message(8, new Writer().text(1, "").varint(2, 17)).finish();
}

Deno.test("quantizeOnnx: a Gemm (transB or not) with its bias C becomes one DynamicQuantizeMatMul; alpha != 1 stays fp32", async () => {
  const x = new ort.Tensor("float32", Float32Array.from({ length: 16 }, (_, i) => i / 8 - 1), [
    2,
    8,
  ]);
  const run = async (bytes: Uint8Array) => {
    const s = await ort.InferenceSession.create(bytes);
    try {
      return Array.from((await s.run({ x })).y!.data as Float32Array);
    } finally {
      await s.release();
    }
  };
  for (const transB of [false, true]) {
    const fp32 = gemmModel(transB);
    const q = quantizeOnnx(fp32);
    assert.deepEqual(q.quantized.map((w) => [w.weight, w.k, w.n]), [["W", 8, 4]]);
    const ref = await run(fp32);
    const out = await run(q.bytes);
    for (const [i, v] of out.entries()) {
      assert.ok(Math.abs(v - ref[i]!) < 0.02, `transB ${transB}: y[${i}] ${v} vs ${ref[i]}`);
    }
    assert.notDeepEqual(out, ref);
  }
  assert.throws(
    () => quantizeOnnx(gemmModel(false, 2)),
    (e: unknown) => e instanceof QuantizeError && e.reason === "nothing_to_quantize",
  );
});
