/**
 * The int8 quantizer: dynamic quantization of an fp32 ONNX model, deterministic to the byte.
 *
 * **The scheme** (`quant: "int8"`, {@link QUANTIZER_REVISION}): every `MatMul` (and `Gemm` with
 * `transA = 0`, `alpha = beta = 1`) of the main graph whose weight input (input 1; B of Gemm) is
 * a constant 2-D FLOAT initializer `W [K, N]` (not a graph input) gets symmetric int8 weights per
 * output column: `scale[n] = fround(max_k |W[k, n]| / 127)` (1 for an all-zero column),
 * `q[k, n] = clamp(roundTiesToEven(W[k, n] / scale[n]), -127, 127)` computed in IEEE double,
 * zero point 0. Activations are quantized per call to uint8 (asymmetric, per tensor) by
 * onnxruntime: U8S8. Embedding tables (`Gather`), LayerNorm, attention's activation × activation
 * MatMuls and everything else stay fp32.
 *
 * **The graph** (format `dqmm`, the default): each quantized MatMul becomes one
 * `com.microsoft` `DynamicQuantizeMatMul(A, W_q, scale, zero_point[, bias])`; a following `Add`
 * of a constant 1-D FLOAT bias of length N (the MatMul's only consumer) folds into its `bias`.
 * Format `matmulinteger` writes ONNX's standard pattern instead (`DynamicQuantizeLinear` →
 * `MatMulInteger` → `Cast` → `Mul` by `A_scale · scale`), which onnxruntime fuses at
 * optimization level `all`. `perChannel: false` uses one scale per tensor; `reduceRange: true`
 * uses 7-bit weights (±63: no saturation of u8×s8 pair sums on AVX2 without VNNI).
 *
 * **Bytes**: fields the quantizer does not touch keep their bytes; nodes keep their order (a
 * replaced node's nodes take its place), new initializers follow the kept ones in node order,
 * and the model gains the `com.microsoft` opset (dqmm) and two `metadata_props`:
 * `synapse.quantizer` (the revision and options) and `synapse.quant_source` (`sha256:` of the
 * fp32 input). No Map iteration order, clock or float formatting reaches the output: the same
 * input bytes and options give the same output bytes.
 *
 * @module
 */
import { sha256Hex } from "../identity/sha256.ts";
import { type Field, readFields, textOf, varintsOf, Writer } from "./_proto.ts";

/** Revision of the quantizer's scheme and output bytes; part of every cache key. */
export const QUANTIZER_REVISION = "synapse-int8-dynamic-v1";

/** The graph pattern a quantized MatMul becomes (see the module doc). */
export type QuantFormat = "dqmm" | "matmulinteger" | "rowwise";

/** Options of {@link quantizeOnnx}; the defaults are the shipped scheme. */
export interface QuantizeOptions {
  /** Graph pattern; default `dqmm`. */
  format?: QuantFormat;
  /** One scale per output column (default true), else one per tensor. */
  perChannel?: boolean;
  /** 7-bit weights (±63); default false (±127). */
  reduceRange?: boolean;
  /** Fold a following constant bias `Add` into `DynamicQuantizeMatMul` (dqmm only); default true. */
  foldBias?: boolean;
  /**
   * Test fixtures only: multiplies the stored scale of the weight initializer named `weight` by
   * `factor` after quantizing, so the model's numbers are deliberately wrong (a lane that must
   * fail certification).
   */
  scaleFault?: { weight: string; factor: number };
}

/** One weight the quantizer replaced. */
export interface QuantizedWeight {
  /** The node's name (or its first output when unnamed). */
  node: string;
  /** The fp32 initializer. */
  weight: string;
  /** Rows (input features) and columns (output features). */
  k: number;
  n: number;
  /** True when a bias `Add` was folded in. */
  biasFolded: boolean;
}

/** What {@link quantizeOnnx} returns. */
export interface QuantizeResult {
  /** The quantized ModelProto. */
  bytes: Uint8Array;
  /** `sha256:<hex>` of the input. */
  sourceDigest: string;
  /** `sha256:<hex>` of {@link QuantizeResult.bytes}. */
  digest: string;
  /** The weights quantized, in node order. */
  quantized: QuantizedWeight[];
  /** MatMul/Gemm nodes left fp32, with why. */
  skipped: { node: string; reason: string }[];
  /** The revision and options, as written to `synapse.quantizer`. */
  descriptor: string;
}

/** A model the quantizer cannot work on (not ONNX, external data, nothing to quantize). */
export class QuantizeError extends Error {
  /** Why: `not_onnx`, `external_data`, `already_quantized`, `nothing_to_quantize`. */
  readonly reason: string;
  constructor(reason: string, message: string) {
    super(message);
    this.name = "QuantizeError";
    this.reason = reason;
  }
}

// ONNX field numbers (onnx/onnx.proto3).
const MODEL_GRAPH = 7, MODEL_OPSET = 8, MODEL_METADATA = 14;
const GRAPH_NODE = 1, GRAPH_INITIALIZER = 5, GRAPH_INPUT = 11, GRAPH_OUTPUT = 12;
const NODE_INPUT = 1, NODE_OUTPUT = 2, NODE_NAME = 3, NODE_OP = 4, NODE_ATTR = 5, NODE_DOMAIN = 7;
const ATTR_NAME = 1, ATTR_F = 2, ATTR_I = 3, ATTR_INTS = 8, ATTR_TYPE = 20;
const T_DIMS = 1, T_TYPE = 2, T_FLOAT_DATA = 4, T_NAME = 8, T_RAW = 9, T_LOCATION = 14;
const VI_NAME = 1;
const FLOAT = 1, UINT8 = 2, INT8 = 3;
const ATTR_INT = 2, ATTR_INTS_TYPE = 7;
const MS_DOMAIN = "com.microsoft";
const INTEGER_MATMULS = new Set([
  "MatMulInteger",
  "DynamicQuantizeMatMul",
  "MatMulIntegerToFloat",
  "QLinearMatMul",
  "QGemm",
]);

interface Node {
  raw: Uint8Array;
  inputs: string[];
  outputs: string[];
  name: string;
  op: string;
  domain: string;
  ints: Map<string, number>;
  floats: Map<string, number>;
}

interface Init {
  name: string;
  dims: number[];
  type: number;
  fields: Field[];
  raw: Uint8Array;
}

function parseNode(raw: Uint8Array, value: Uint8Array): Node {
  const n: Node = {
    raw,
    inputs: [],
    outputs: [],
    name: "",
    op: "",
    domain: "",
    ints: new Map(),
    floats: new Map(),
  };
  for (const f of readFields(value)) {
    if (f.no === NODE_INPUT) n.inputs.push(textOf(f));
    else if (f.no === NODE_OUTPUT) n.outputs.push(textOf(f));
    else if (f.no === NODE_NAME) n.name = textOf(f);
    else if (f.no === NODE_OP) n.op = textOf(f);
    else if (f.no === NODE_DOMAIN) n.domain = textOf(f);
    else if (f.no === NODE_ATTR) {
      let name = "";
      let i: number | undefined;
      let fl: number | undefined;
      for (const a of readFields(f.value)) {
        if (a.no === ATTR_NAME) name = textOf(a);
        else if (a.no === ATTR_I) i = a.varint;
        else if (a.no === ATTR_F) {
          fl = new DataView(a.value.buffer, a.value.byteOffset, 4).getFloat32(0, true);
        }
      }
      if (i !== undefined) n.ints.set(name, i);
      if (fl !== undefined) n.floats.set(name, fl);
    }
  }
  return n;
}

function parseInit(raw: Uint8Array, value: Uint8Array): Init {
  const fields = readFields(value);
  const t: Init = { name: "", dims: [], type: 0, fields, raw };
  for (const f of fields) {
    if (f.no === T_NAME) t.name = textOf(f);
    else if (f.no === T_DIMS) t.dims.push(...varintsOf(f));
    else if (f.no === T_TYPE) t.type = f.varint;
    else if (f.no === T_LOCATION && f.varint === 1) {
      throw new QuantizeError(
        "external_data",
        `Cannot quantize: initializer '${
          t.name || "?"
        }' keeps its data in an external file; only self-contained models (data inside the .onnx) are supported`,
      );
    }
  }
  return t;
}

/** The float32 values of a FLOAT initializer (raw_data or float_data), little-endian. */
function floatsOf(t: Init): Float32Array {
  const count = t.dims.reduce((a, b) => a * b, 1);
  const out = new Float32Array(count);
  const raw = t.fields.find((f) => f.no === T_RAW);
  const packed = t.fields.filter((f) => f.no === T_FLOAT_DATA);
  let src: Uint8Array | undefined;
  if (raw !== undefined) src = raw.value;
  else if (packed.length > 0) {
    const w = new Writer();
    for (const f of packed) w.raw(f.value); // packed (wire 2) payloads, or single wire-5 floats
    src = w.finish();
  }
  if (src === undefined || src.length !== count * 4) {
    throw new QuantizeError(
      "not_onnx",
      `Cannot quantize: initializer '${t.name}' holds ${
        src?.length ?? 0
      } bytes for ${count} floats`,
    );
  }
  const dv = new DataView(src.buffer, src.byteOffset, src.length);
  for (let i = 0; i < count; i++) out[i] = dv.getFloat32(i * 4, true);
  return out;
}

function tensor(name: string, type: number, dims: readonly number[], data: Uint8Array): Writer {
  const w = new Writer();
  if (dims.length > 0) w.packed(T_DIMS, dims);
  w.varint(T_TYPE, type).text(T_NAME, name).bytes(T_RAW, data);
  return w;
}

function f32Bytes(a: Float32Array): Uint8Array {
  const out = new Uint8Array(a.length * 4);
  const dv = new DataView(out.buffer);
  for (let i = 0; i < a.length; i++) dv.setFloat32(i * 4, a[i]!, true);
  return out;
}

function node(
  op: string,
  name: string,
  inputs: readonly string[],
  outputs: readonly string[],
  domain = "",
  ints: Record<string, number> = {},
): Writer {
  const w = new Writer();
  for (const i of inputs) w.text(NODE_INPUT, i);
  for (const o of outputs) w.text(NODE_OUTPUT, o);
  w.text(NODE_NAME, name).text(NODE_OP, op);
  for (const [k, v] of Object.entries(ints)) {
    w.message(
      NODE_ATTR,
      new Writer().text(ATTR_NAME, k).varint(ATTR_I, v).varint(ATTR_TYPE, ATTR_INT),
    );
  }
  if (domain !== "") w.text(NODE_DOMAIN, domain);
  return w;
}

/** A node with INT and INTS attributes. */
function nodeInts(
  op: string,
  name: string,
  inputs: readonly string[],
  outputs: readonly string[],
  ints: Record<string, number>,
  intLists: Record<string, number[]>,
): Writer {
  const w = node(op, name, inputs, outputs, "", ints);
  for (const [k, v] of Object.entries(intLists)) {
    const a = new Writer().text(ATTR_NAME, k);
    for (const x of v) a.varint(ATTR_INTS, x);
    w.message(NODE_ATTR, a.varint(ATTR_TYPE, ATTR_INTS_TYPE));
  }
  return w;
}

function i64Bytes(v: number): Uint8Array {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigInt64(0, BigInt(v), true);
  return out;
}

/** Round half to even, as IEEE 754 roundTiesToEven. */
function roundEven(x: number): number {
  const r = Math.round(x);
  return Math.abs(x % 1) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/**
 * Symmetric int8 quantization of `W [K, N]` (row-major): per column (or per tensor), the rule of
 * the module doc.
 *
 * @returns `q` (K·N int8, row-major like W) and `scale` (N floats, or 1 per tensor).
 */
export function quantizeWeights(
  w: Float32Array,
  k: number,
  n: number,
  opts: { perChannel: boolean; reduceRange: boolean },
): { q: Int8Array; scale: Float32Array } {
  const qmax = opts.reduceRange ? 63 : 127;
  const groups = opts.perChannel ? n : 1;
  const maxAbs = new Float64Array(groups);
  for (let r = 0; r < k; r++) {
    for (let c = 0; c < n; c++) {
      const g = opts.perChannel ? c : 0;
      const a = Math.abs(w[r * n + c]!);
      if (a > maxAbs[g]!) maxAbs[g] = a;
    }
  }
  const scale = new Float32Array(groups);
  for (let g = 0; g < groups; g++) {
    scale[g] = maxAbs[g]! > 0 ? Math.fround(maxAbs[g]! / qmax) : 1;
  }
  const q = new Int8Array(k * n);
  for (let r = 0; r < k; r++) {
    for (let c = 0; c < n; c++) {
      const s = scale[opts.perChannel ? c : 0]!;
      const v = roundEven(w[r * n + c]! / s);
      q[r * n + c] = v > qmax ? qmax : v < -qmax ? -qmax : v;
    }
  }
  return { q, scale };
}

/**
 * The revision and options of a quantization, as `synapse.quantizer` records them and cache keys
 * use: `synapse-int8-dynamic-v1;format=dqmm;per_channel=true;reduce_range=false;fold_bias=true`
 * (plus `;scale_fault=W*F` for a test fixture's fault).
 *
 * @param options The options (defaults filled in).
 */
export function quantizeDescriptor(options: QuantizeOptions = {}): string {
  const format = options.format ?? "dqmm";
  const foldBias = format === "dqmm" && (options.foldBias ?? true);
  return `${QUANTIZER_REVISION};format=${format};per_channel=${options.perChannel ?? true};` +
    `reduce_range=${options.reduceRange ?? false};fold_bias=${foldBias}` +
    (options.scaleFault === undefined
      ? ""
      : `;scale_fault=${options.scaleFault.weight}*${options.scaleFault.factor}`);
}

/**
 * Quantizes an fp32 ONNX model (the scheme of the module doc).
 *
 * @param input The fp32 ModelProto bytes (data inside the file).
 * @param options Format and scheme; the defaults are the shipped scheme.
 * @returns The quantized model, its digest and what was quantized.
 * @throws {QuantizeError} `not_onnx` (not a well-formed ModelProto), `external_data`,
 *   `already_quantized` (the graph already holds integer MatMuls), `nothing_to_quantize` (no
 *   MatMul or Gemm with a constant 2-D fp32 weight).
 */
export function quantizeOnnx(input: Uint8Array, options: QuantizeOptions = {}): QuantizeResult {
  const format = options.format ?? "dqmm";
  const perChannel = options.perChannel ?? true;
  const reduceRange = options.reduceRange ?? false;
  const foldBias = format === "dqmm" && (options.foldBias ?? true);
  const descriptor = quantizeDescriptor(options);
  let modelFields: Field[];
  let graphFields: Field[];
  try {
    modelFields = readFields(input);
    const g = modelFields.find((f) => f.no === MODEL_GRAPH && f.wire === 2);
    if (g === undefined) throw new RangeError("no graph (ModelProto field 7)");
    graphFields = readFields(g.value);
  } catch (err) {
    if (err instanceof QuantizeError) throw err;
    throw new QuantizeError(
      "not_onnx",
      `Cannot quantize: not an ONNX model: ${(err as Error).message}`,
    );
  }
  const nodes: Node[] = [];
  const nodeOf = new Map<Field, Node>();
  const inits = new Map<string, Init>();
  const graphInputs = new Set<string>();
  const graphOutputs = new Set<string>();
  try {
    for (const f of graphFields) {
      if (f.no === GRAPH_NODE) {
        const n = parseNode(f.raw, f.value);
        nodes.push(n);
        nodeOf.set(f, n);
      } else if (f.no === GRAPH_INITIALIZER) {
        const t = parseInit(f.raw, f.value);
        inits.set(t.name, t);
      } else if (f.no === GRAPH_INPUT || f.no === GRAPH_OUTPUT) {
        const name = readFields(f.value).find((v) => v.no === VI_NAME);
        if (name !== undefined) {
          (f.no === GRAPH_INPUT ? graphInputs : graphOutputs).add(textOf(name));
        }
      }
    }
  } catch (err) {
    if (err instanceof QuantizeError) throw err;
    throw new QuantizeError(
      "not_onnx",
      `Cannot quantize: not an ONNX model: ${(err as Error).message}`,
    );
  }
  if (nodes.some((n) => INTEGER_MATMULS.has(n.op))) {
    throw new QuantizeError(
      "already_quantized",
      "Cannot quantize: the model already holds integer MatMuls (it is quantized)",
    );
  }
  // Consumers of each value, to fold a bias Add and to keep a weight another node still reads.
  const consumers = new Map<string, Node[]>();
  for (const n of nodes) {
    for (const i of n.inputs) {
      const list = consumers.get(i);
      if (list === undefined) consumers.set(i, [n]);
      else list.push(n);
    }
  }
  const quantized: QuantizedWeight[] = [];
  const skipped: { node: string; reason: string }[] = [];
  const replaced = new Map<Node, Writer[]>();
  const dropped = new Set<Node>();
  const newInits: Writer[] = [];
  let rowConsts:
    | { eps: string; qmax: string; shift: string; zp: string; axes?: string }
    | undefined;
  let opset = 0;
  for (const f of modelFields) {
    if (f.no !== MODEL_OPSET) continue;
    const parts = readFields(f.value);
    const d = parts.find((v) => v.no === 1);
    if (d === undefined || textOf(d) === "" || textOf(d) === "ai.onnx") {
      opset = parts.find((v) => v.no === 2)?.varint ?? opset;
    }
  }
  const consumedWeights = new Set<string>();
  const usedNames = new Set<string>([...inits.keys(), ...nodes.flatMap((n) => n.outputs)]);
  const fresh = (base: string): string => {
    let name = base;
    for (let i = 1; usedNames.has(name); i++) name = `${base}_${i}`;
    usedNames.add(name);
    return name;
  };
  for (const n of nodes) {
    if (n.domain !== "" && n.domain !== "ai.onnx") continue;
    if (n.op !== "MatMul" && n.op !== "Gemm") continue;
    const label = n.name || n.outputs[0] || n.op;
    const wName = n.inputs[1] ?? "";
    const w = inits.get(wName);
    if (w === undefined || graphInputs.has(wName)) {
      skipped.push({ node: label, reason: "weight is not a constant initializer" });
      continue;
    }
    if (w.type !== FLOAT || w.dims.length !== 2) {
      skipped.push({ node: label, reason: "weight is not a 2-D float32 tensor" });
      continue;
    }
    let transB = false;
    let gemmBias: string | undefined;
    if (n.op === "Gemm") {
      if ((n.ints.get("transA") ?? 0) !== 0) {
        skipped.push({ node: label, reason: "Gemm with transA" });
        continue;
      }
      if ((n.floats.get("alpha") ?? 1) !== 1 || (n.floats.get("beta") ?? 1) !== 1) {
        skipped.push({ node: label, reason: "Gemm with alpha or beta other than 1" });
        continue;
      }
      transB = (n.ints.get("transB") ?? 0) !== 0;
      gemmBias = n.inputs[2] === "" ? undefined : n.inputs[2];
    }
    const [d0, d1] = w.dims as [number, number];
    const k = transB ? d1 : d0;
    const cols = transB ? d0 : d1;
    let values = floatsOf(w);
    if (transB) {
      const t = new Float32Array(k * cols);
      for (let r = 0; r < cols; r++) {
        for (let c = 0; c < k; c++) t[c * cols + r] = values[r * k + c]!;
      }
      values = t;
    }
    // A bias to fold: Gemm's C, or the only consumer being Add(Y, const [N]) / Add(const, Y).
    let bias: string | undefined;
    let biasAdd: Node | undefined;
    let out = n.outputs[0]!;
    if (gemmBias !== undefined) {
      const b = inits.get(gemmBias);
      if (
        format !== "dqmm" || b === undefined || b.type !== FLOAT || b.dims.join() !== String(cols)
      ) {
        skipped.push({ node: label, reason: "Gemm bias is not a constant [N] float32 vector" });
        continue;
      }
      bias = gemmBias;
    } else if (foldBias) {
      const after = consumers.get(out) ?? [];
      const add = after[0];
      if (
        after.length === 1 && add !== undefined && add.op === "Add" && add.domain === "" &&
        add.inputs.length === 2 && !graphOutputs.has(out)
      ) {
        const other = add.inputs[0] === out ? add.inputs[1]! : add.inputs[0]!;
        const b = inits.get(other);
        if (
          b !== undefined && !graphInputs.has(other) && b.type === FLOAT &&
          b.dims.length === 1 && b.dims[0] === cols && other !== out
        ) {
          bias = other;
          biasAdd = add;
          out = add.outputs[0]!;
        }
      }
    }
    const { q, scale } = quantizeWeights(values, k, cols, { perChannel, reduceRange });
    if (options.scaleFault?.weight === wName) {
      for (let i = 0; i < scale.length; i++) {
        scale[i] = Math.fround(scale[i]! * options.scaleFault.factor);
      }
    }
    const qName = fresh(`${wName}_quantized`);
    const sName = fresh(`${wName}_scale`);
    const zName = fresh(`${wName}_zero_point`);
    const scaleDims = perChannel ? [cols] : [];
    newInits.push(tensor(qName, INT8, [k, cols], new Uint8Array(q.buffer)));
    newInits.push(tensor(sName, FLOAT, scaleDims, f32Bytes(scale)));
    if (format !== "rowwise") {
      newInits.push(tensor(zName, INT8, scaleDims, new Uint8Array(scale.length)));
    }
    const a = n.inputs[0]!;
    const base = fresh(`${label}_quant`);
    if (format === "dqmm") {
      replaced.set(n, [
        node("DynamicQuantizeMatMul", base, [a, qName, sName, zName, ...(bias ? [bias] : [])], [
          out,
        ], MS_DOMAIN),
      ]);
      if (biasAdd !== undefined) dropped.add(biasAdd);
    } else if (format === "rowwise") {
      // Per-row symmetric int8 activations: every row (token) is quantized on its own, so a
      // row's numbers never depend on the other rows of its batch.
      const ab = fresh(`${base}_abs`);
      const mx = fresh(`${base}_rowmax`);
      const mxc = fresh(`${base}_rowmax_clamped`);
      const as = fresh(`${base}_rowscale`);
      const ad = fresh(`${base}_scaled`);
      const ar = fresh(`${base}_rounded`);
      const ash = fresh(`${base}_shifted`);
      const aq = fresh(`${base}_a_uint8`);
      const yi = fresh(`${base}_int32`);
      const yf = fresh(`${base}_float`);
      const ya = fresh(`${base}_row_scaled`);
      if (rowConsts === undefined) {
        rowConsts = {
          eps: fresh("synapse_quant_eps"),
          qmax: fresh("synapse_quant_qmax"),
          shift: fresh("synapse_quant_shift"),
          zp: fresh("synapse_quant_zero_point"),
        };
        newInits.push(tensor(rowConsts.shift, FLOAT, [], f32Bytes(Float32Array.of(128))));
        newInits.push(tensor(rowConsts.zp, UINT8, [], Uint8Array.of(128)));
        newInits.push(tensor(rowConsts.eps, FLOAT, [], f32Bytes(Float32Array.of(1e-30))));
        newInits.push(tensor(rowConsts.qmax, FLOAT, [], f32Bytes(Float32Array.of(127))));
        if (opset >= 18) {
          rowConsts.axes = fresh("synapse_quant_axes");
          newInits.push(tensor(rowConsts.axes, 7, [1], i64Bytes(-1)));
        }
      }
      const reduce = opset >= 18
        ? node("ReduceMax", `${base}_rowmax`, [ab, rowConsts.axes!], [mx], "", { keepdims: 1 })
        : nodeInts("ReduceMax", `${base}_rowmax`, [ab], [mx], { keepdims: 1 }, { axes: [-1] });
      replaced.set(n, [
        node("Abs", `${base}_abs`, [a], [ab]),
        reduce,
        node("Max", `${base}_clamp`, [mx, rowConsts.eps], [mxc]),
        node("Div", `${base}_scale`, [mxc, rowConsts.qmax], [as]),
        node("Div", `${base}_div`, [a, as], [ad]),
        node("Round", `${base}_round`, [ad], [ar]),
        node("Add", `${base}_shift`, [ar, rowConsts.shift], [ash]),
        node("Cast", `${base}_cast_uint8`, [ash], [aq], "", { to: UINT8 }),
        node("MatMulInteger", `${base}_mmi`, [aq, qName, rowConsts.zp], [yi]),
        node("Cast", `${base}_cast`, [yi], [yf], "", { to: FLOAT }),
        node("Mul", `${base}_row_mul`, [yf, as], [ya]),
        node("Mul", `${base}_col_mul`, [ya, sName], [out]),
      ]);
    } else {
      const aq = fresh(`${a}_quantized_${base}`);
      const as = fresh(`${a}_scale_${base}`);
      const az = fresh(`${a}_zero_point_${base}`);
      const yi = fresh(`${base}_int32`);
      const yf = fresh(`${base}_float`);
      const ys = fresh(`${base}_scale`);
      replaced.set(n, [
        node("DynamicQuantizeLinear", `${base}_dql`, [a], [aq, as, az]),
        node("MatMulInteger", `${base}_mmi`, [aq, qName, az, zName], [yi]),
        node("Cast", `${base}_cast`, [yi], [yf], "", { to: FLOAT }),
        node("Mul", `${base}_scale_mul`, [as, sName], [ys]),
        node("Mul", `${base}_out_mul`, [yf, ys], [out]),
      ]);
    }
    consumedWeights.add(wName);
    quantized.push({ node: label, weight: wName, k, n: cols, biasFolded: biasAdd !== undefined });
  }
  if (quantized.length === 0) {
    throw new QuantizeError(
      "nothing_to_quantize",
      "Cannot quantize: the model has no MatMul or Gemm with a constant 2-D float32 weight",
    );
  }
  // A weight another (kept) node still reads stays.
  const stillRead = new Set<string>();
  for (const n of nodes) {
    if (replaced.has(n) || dropped.has(n)) continue;
    for (const i of n.inputs) stillRead.add(i);
  }
  for (const o of graphOutputs) stillRead.add(o);
  const graph = new Writer();
  let initsWritten = false;
  const writeInits = () => {
    if (initsWritten) return;
    initsWritten = true;
    for (const t of inits.values()) {
      if (consumedWeights.has(t.name) && !stillRead.has(t.name)) continue;
      graph.raw(t.raw);
    }
    for (const t of newInits) graph.message(GRAPH_INITIALIZER, t);
  };
  for (const f of graphFields) {
    if (f.no === GRAPH_NODE) {
      const n = nodeOf.get(f)!;
      if (dropped.has(n)) continue;
      const r = replaced.get(n);
      if (r === undefined) graph.raw(f.raw);
      else for (const w of r) graph.message(GRAPH_NODE, w);
    } else if (f.no === GRAPH_INITIALIZER) {
      writeInits();
    } else {
      graph.raw(f.raw);
    }
  }
  writeInits();
  const sourceDigest = "sha256:" + sha256Hex(input);
  const model = new Writer();
  let hasMs = false;
  for (const f of modelFields) {
    if (f.no !== MODEL_OPSET) continue;
    const d = readFields(f.value).find((v) => v.no === 1);
    if (d !== undefined && textOf(d) === MS_DOMAIN) hasMs = true;
  }
  let opsetDone = false;
  for (const f of modelFields) {
    if (f.no === MODEL_GRAPH) model.message(MODEL_GRAPH, graph);
    else if (f.no === MODEL_METADATA) {
      const key = readFields(f.value).find((v) => v.no === 1);
      const k = key === undefined ? "" : textOf(key);
      if (k === "synapse.quantizer" || k === "synapse.quant_source") continue;
      model.raw(f.raw);
    } else model.raw(f.raw);
    if (f.no === MODEL_OPSET && !opsetDone && !hasMs && format === "dqmm") {
      opsetDone = true;
      model.message(MODEL_OPSET, new Writer().text(1, MS_DOMAIN).varint(2, 1));
    }
  }
  if (!opsetDone && !hasMs && format === "dqmm") {
    model.message(MODEL_OPSET, new Writer().text(1, MS_DOMAIN).varint(2, 1));
  }
  model.message(MODEL_METADATA, new Writer().text(1, "synapse.quantizer").text(2, descriptor));
  model.message(MODEL_METADATA, new Writer().text(1, "synapse.quant_source").text(2, sourceDigest));
  const bytes = model.finish();
  return {
    bytes,
    sourceDigest,
    digest: "sha256:" + sha256Hex(bytes),
    quantized,
    skipped,
    descriptor,
  };
}

/** Op types of a graph that multiply integer tensors (the mark of a quantized ONNX model). */
export const INTEGER_MATMUL_OPS: ReadonlySet<string> = INTEGER_MATMULS;

/** UINT8 (activation) and INT8 (weight) TensorProto data types, for readers of the output. */
export const ONNX_UINT8 = UINT8;
export const ONNX_INT8 = INT8;
