/**
 * Format sniffing and validation of a cached artifact before any engine or worker touches it
 * (docs/internals.md §8.5): an ONNX model must be a well-formed `ModelProto` with a graph, a GGUF
 * must have the magic, version 2 or 3 and parseable metadata, a tokenizer.json must load as a
 * {@link SanitizedTokenizer} (whose digest is recorded), a config.json must be a JSON object.
 *
 * The ONNX check walks the protobuf wire format with seeks (field tags and lengths only, never
 * the tensors), so a multi-gigabyte model is checked without reading it into memory.
 *
 * @module
 */
import { gguf } from "@huggingface/gguf";
import { SynapseError } from "../contract/errors.ts";
import { readGgufFacts } from "../engines/llama/gguf.ts";
import { SanitizedTokenizer } from "../tokenize/tokenizer.ts";
import type { ArtifactFormat } from "./types.ts";

/** What {@link validateArtifact} learned. */
export interface ArtifactFacts {
  /** `sha256:<hex>` of the sanitized tokenizer (tokenizer_json only). */
  sanitizedTokenizerDigest?: string;
}

/** JSON files larger than this are not read whole to sniff them (bytes). */
const SNIFF_JSON_MAX_BYTES = 256 * 1024 * 1024;

/**
 * Guesses an artifact's format from its content: `GGUF` magic → `gguf`; a JSON object with a
 * `model` object (the tokenizers library's layout) → `tokenizer_json`, any other JSON object →
 * `config_json`; a protobuf whose first field is ONNX's `ir_version` (tag 0x08) → `onnx`; else
 * `other`. Sniffing never throws for bad content; {@link validateArtifact} judges it.
 *
 * @param path The file.
 * @returns The format.
 * @throws {SynapseError} `artifact_invalid` `{reason: "unreadable", file}` when the file cannot
 *   be read.
 */
export async function sniffFormat(path: string): Promise<ArtifactFormat> {
  let head: Uint8Array;
  let size: number;
  try {
    using f = await Deno.open(path, { read: true });
    size = (await f.stat()).size;
    head = await readAt(f, 0, 16);
  } catch (err) {
    throw unreadable(path, path, err);
  }
  if (head.length >= 4 && new TextDecoder().decode(head.subarray(0, 4)) === "GGUF") return "gguf";
  const first = head.find((b) => b !== 0x20 && b !== 0x0a && b !== 0x0d && b !== 0x09);
  if (first === 0x7b /* { */ && size <= SNIFF_JSON_MAX_BYTES) {
    const json = await parseJsonObject(path);
    if (json === undefined) return "other";
    const model = json["model"];
    return typeof model === "object" && model !== null && !Array.isArray(model)
      ? "tokenizer_json"
      : "config_json";
  }
  if (head[0] === 0x08) return "onnx";
  return "other";
}

/**
 * Validates an artifact as `format`. `other` is accepted as is.
 *
 * - `onnx`: the file is a sequence of well-formed protobuf fields ending exactly at its end,
 *   with `ir_version` (field 1), an `opset_import` (field 8) and a `graph` (field 7) that is
 *   itself well-formed;
 * - `gguf`: magic, version 2 or 3, parseable metadata with the keys the llama engine needs
 *   (`readGgufFacts`);
 * - `tokenizer_json`: JSON that loads as a {@link SanitizedTokenizer};
 * - `config_json`: a JSON object.
 *
 * @param path The file.
 * @param format What it must be.
 * @param label The logical name used in messages and `details.file` (e.g. `model.onnx`).
 * @returns The facts learned (the sanitized tokenizer digest of a tokenizer.json).
 * @throws {SynapseError} `artifact_invalid` (permanent) with `details.reason` `not_onnx`,
 *   `not_gguf`, `missing_metadata` (GGUF, naming `key`), `bad_tokenizer`, `bad_config` or
 *   `unreadable`, and `details.file` = `label`.
 */
export async function validateArtifact(
  path: string,
  format: ArtifactFormat,
  label: string,
): Promise<ArtifactFacts> {
  switch (format) {
    case "onnx":
      await checkOnnx(path, label);
      return {};
    case "gguf":
      await checkGgufExtent(path, label);
      try {
        await readGgufFacts(path, label);
      } catch (err) {
        if (!(err instanceof SynapseError)) throw err;
        throw new SynapseError("artifact_invalid", err.message, {
          cause: err,
          details: { ...err.details, file: label, format },
        });
      }
      return {};
    case "tokenizer_json": {
      const json = await parseJsonObject(path, { label, format, reason: "bad_tokenizer" });
      if (json === undefined) {
        throw invalid(label, format, "bad_tokenizer", "it is not a JSON object");
      }
      try {
        const tok = SanitizedTokenizer.fromJson(json, {}, label);
        return { sanitizedTokenizerDigest: tok.digest };
      } catch (err) {
        throw invalid(label, format, "bad_tokenizer", (err as Error).message, err);
      }
    }
    case "config_json": {
      const json = await parseJsonObject(path, { label, format, reason: "bad_config" });
      if (json === undefined) throw invalid(label, format, "bad_config", "it is not a JSON object");
      return {};
    }
    case "other":
      return {};
    default:
      throw new Error(`unknown artifact format ${format satisfies never}. This is a bug`);
  }
}

/** How a JSON parse failure is reported: as `artifact_invalid` with this reason. */
interface JsonRefusal {
  label: string;
  format: ArtifactFormat;
  reason: string;
}

/**
 * Reads a JSON file; `undefined` when it is valid JSON but not an object. A parse failure throws
 * `artifact_invalid` as `refuse` says, or gives `undefined` without one (sniffing).
 */
async function parseJsonObject(
  path: string,
  refuse?: JsonRefusal,
): Promise<Record<string, unknown> | undefined> {
  let text: string;
  try {
    text = await Deno.readTextFile(path);
  } catch (err) {
    throw unreadable(path, refuse?.label ?? path, err);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    if (refuse === undefined) return undefined;
    const why = `it does not parse as JSON: ${(err as Error).message}`;
    throw invalid(refuse.label, refuse.format, refuse.reason, why, err);
  }
  return typeof json === "object" && json !== null && !Array.isArray(json)
    ? json as Record<string, unknown>
    : undefined;
}

/** `[block size (elements), block bytes]` of ggml tensor types by type id (ggml.h). */
const GGML_BLOCKS: Record<number, readonly [number, number]> = {
  0: [1, 4], // f32
  1: [1, 2], // f16
  2: [32, 18], // q4_0
  3: [32, 20], // q4_1
  6: [32, 22], // q5_0
  7: [32, 24], // q5_1
  8: [32, 34], // q8_0
  9: [32, 40], // q8_1
  10: [256, 84], // q2_K
  11: [256, 110], // q3_K
  12: [256, 144], // q4_K
  13: [256, 176], // q5_K
  14: [256, 210], // q6_K
  15: [256, 292], // q8_K
  24: [1, 1], // i8
  25: [1, 2], // i16
  26: [1, 4], // i32
  27: [1, 8], // i64
  28: [1, 8], // f64
  30: [1, 2], // bf16
};

/**
 * Refuses a GGUF cut off before the end of its tensor data: the data section must hold every
 * tensor (a tensor of a type missing from {@link GGML_BLOCKS} counts as starting there, at
 * least). A file the parser cannot read at all is left to `readGgufFacts`, whose message names
 * the fault.
 */
async function checkGgufExtent(path: string, label: string): Promise<void> {
  let size: number;
  let parsed: Awaited<ReturnType<typeof gguf>>;
  try {
    size = (await Deno.stat(path)).size;
    parsed = await gguf(path, { allowLocalFile: true });
  } catch {
    return;
  }
  let end = parsed.tensorDataOffset;
  for (const t of parsed.tensorInfos) {
    const elements = t.shape.reduce((a, b) => a * b, 1n);
    const block = GGML_BLOCKS[t.dtype];
    const bytes = block === undefined
      ? 0n
      : (elements + BigInt(block[0]) - 1n) / BigInt(block[0]) * BigInt(block[1]);
    const tensorEnd = parsed.tensorDataOffset + t.offset + bytes;
    if (tensorEnd > end) end = tensorEnd;
  }
  if (end > BigInt(size)) {
    throw invalid(
      label,
      "gguf",
      "not_gguf",
      `it is cut off: its header and tensors need ${end} bytes, the file has ${size}`,
    );
  }
}

/** ONNX `ModelProto` field numbers the check requires. */
const ONNX_IR_VERSION = 1;
const ONNX_GRAPH = 7;
const ONNX_OPSET_IMPORT = 8;

async function checkOnnx(path: string, label: string): Promise<void> {
  let f: Deno.FsFile;
  try {
    f = await Deno.open(path, { read: true });
  } catch (err) {
    throw unreadable(path, label, err);
  }
  try {
    const size = (await f.stat()).size;
    const seen = new Map<number, { start: number; end: number }>();
    await walkFields(f, 0, size, label, (field, wire, start, end) => {
      if (field === ONNX_IR_VERSION && wire !== 0) return "ir_version is not a varint";
      if ((field === ONNX_GRAPH || field === ONNX_OPSET_IMPORT) && wire !== 2) {
        return `field ${field} is not length-delimited`;
      }
      if (!seen.has(field)) seen.set(field, { start, end });
      return undefined;
    });
    for (
      const [field, name] of [[ONNX_IR_VERSION, "ir_version"], [ONNX_GRAPH, "graph"], [
        ONNX_OPSET_IMPORT,
        "opset_import",
      ]] as const
    ) {
      if (!seen.has(field)) throw notOnnx(label, `it has no ${name} (ModelProto field ${field})`);
    }
    const graph = seen.get(ONNX_GRAPH)!;
    await walkFields(f, graph.start, graph.end, label, () => undefined);
  } finally {
    f.close();
  }
}

/** GraphProto `node` (repeated NodeProto) and `initializer` (repeated TensorProto). */
const ONNX_GRAPH_NODE = 1;
const ONNX_GRAPH_INITIALIZER = 5;
/** NodeProto `op_type` (string). */
const ONNX_NODE_OP_TYPE = 4;
/**
 * Op types that multiply integer tensors: a graph holding one is a quantized model
 * (onnxruntime's dynamic and static quantization, and Synapse's own quantizer, lib/quant/).
 */
export const ONNX_INTEGER_MATMUL_OPS: ReadonlySet<string> = new Set([
  "MatMulInteger",
  "DynamicQuantizeMatMul",
  "MatMulIntegerToFloat",
  "QLinearMatMul",
  "QGemm",
  "QAttention",
]);
/**
 * Op types of quantized graphs that are not integer MatMuls: the QDQ format of static
 * quantization (`DequantizeLinear` before a float MatMul, which onnxruntime fuses into an integer
 * one at load) and per-call activation quantization. Counted with the integer MatMuls.
 */
export const ONNX_QUANTIZE_OPS: ReadonlySet<string> = new Set([
  "QuantizeLinear",
  "DequantizeLinear",
  "DynamicQuantizeLinear",
]);
/** Op types of block-quantized (4-bit) weights: `com.microsoft` `MatMulNBits`. */
export const ONNX_NBITS_MATMUL_OPS: ReadonlySet<string> = new Set(["MatMulNBits"]);
/** TensorProto `dims` (repeated int64, packed or not) and `data_type` (int32). */
const ONNX_TENSOR_DIMS = 1;
const ONNX_TENSOR_DATA_TYPE = 2;
/** TensorProto.DataType values of the float types. */
const ONNX_FLOAT = 1;
const ONNX_FLOAT16 = 10;
const ONNX_DOUBLE = 11;
const ONNX_BFLOAT16 = 16;
/** TensorProto.DataType values of the 8-bit integer types. */
const ONNX_UINT8 = 2;
const ONNX_INT8 = 3;

/** Float weight elements of an ONNX model's initializers, by storage type. */
export interface OnnxWeightCounts {
  /** FLOAT (and DOUBLE) elements. */
  f32: number;
  /** FLOAT16 elements. */
  f16: number;
  /** BFLOAT16 elements. */
  bf16: number;
  /** INT8 initializer elements (quantized weights). */
  int8: number;
  /** UINT8 initializer elements. */
  uint8: number;
  /** Nodes whose op type is in {@link ONNX_INTEGER_MATMUL_OPS} or {@link ONNX_QUANTIZE_OPS}. */
  integer_matmuls: number;
  /** Nodes whose op type is in {@link ONNX_NBITS_MATMUL_OPS}. */
  nbits_matmuls: number;
}

/**
 * The storage dtype of an ONNX model's float weights: the float type holding most initializer
 * elements (`f16` for FLOAT16, `bf16` for BFLOAT16, else `f32`, also for a model with no float
 * initializers). Walks the protobuf wire format (ModelProto.graph → GraphProto.initializer →
 * TensorProto dims and data_type, GraphProto.node → NodeProto op_type) with seeks, never reading
 * the tensors.
 *
 * `quant` is `int8` for a quantized model: its graph holds an integer MatMul
 * ({@link ONNX_INTEGER_MATMUL_OPS}) and its INT8 initializer elements are at least its UINT8
 * ones (U8S8: int8 weights, activations quantized per call; `uint8` otherwise, U8U8). Else it
 * is the float dtype.
 *
 * @param path The model file.
 * @param label The logical name used in messages and `details.file`.
 * @returns The dtype and the element counts it was chosen from.
 * @throws {SynapseError} `artifact_invalid` `{reason: "not_onnx" | "unreadable", file: label}`
 *   when the file is not a well-formed ONNX protobuf or cannot be read.
 */
export async function onnxWeightDtype(
  path: string,
  label: string,
): Promise<
  { dtype: "f32" | "f16" | "bf16"; quant: string; counts: OnnxWeightCounts }
> {
  let f: Deno.FsFile;
  try {
    f = await Deno.open(path, { read: true });
  } catch (err) {
    throw unreadable(path, label, err);
  }
  const counts: OnnxWeightCounts = {
    f32: 0,
    f16: 0,
    bf16: 0,
    int8: 0,
    uint8: 0,
    integer_matmuls: 0,
    nbits_matmuls: 0,
  };
  try {
    const size = (await f.stat()).size;
    let graph: { start: number; end: number } | undefined;
    await walkFields(f, 0, size, label, (field, wire, start, end) => {
      if (field === ONNX_GRAPH && wire === 2 && graph === undefined) graph = { start, end };
      return undefined;
    });
    if (graph === undefined) throw notOnnx(label, `it has no graph (ModelProto field 7)`);
    const tensors: { start: number; end: number }[] = [];
    const nodes: { start: number; end: number }[] = [];
    await walkFields(f, graph.start, graph.end, label, (field, wire, start, end) => {
      if (field === ONNX_GRAPH_INITIALIZER && wire === 2) tensors.push({ start, end });
      if (field === ONNX_GRAPH_NODE && wire === 2) nodes.push({ start, end });
      return undefined;
    });
    for (const n of nodes) {
      const ops: { start: number; end: number }[] = [];
      await walkFields(f, n.start, n.end, label, (field, wire, start, end) => {
        if (field === ONNX_NODE_OP_TYPE && wire === 2) ops.push({ start, end });
        return undefined;
      });
      for (const o of ops) {
        const name = new TextDecoder().decode(await readAt(f, o.start, o.end - o.start));
        if (ONNX_INTEGER_MATMUL_OPS.has(name) || ONNX_QUANTIZE_OPS.has(name)) {
          counts.integer_matmuls++;
        } else if (ONNX_NBITS_MATMUL_OPS.has(name)) counts.nbits_matmuls++;
      }
    }
    for (const t of tensors) {
      let dataType = 0;
      let elements = 1;
      const dims: { wire: number; start: number; end: number }[] = [];
      const types: { start: number; end: number }[] = [];
      await walkFields(f, t.start, t.end, label, (field, wire, start, end) => {
        if (field === ONNX_TENSOR_DIMS && (wire === 0 || wire === 2)) {
          dims.push({ wire, start, end });
        }
        if (field === ONNX_TENSOR_DATA_TYPE && wire === 0) types.push({ start, end });
        return undefined;
      });
      for (const d of types) {
        dataType = readVarint(await readAt(f, d.start, d.end - d.start), 0)?.value ?? 0;
      }
      if (
        dataType !== ONNX_FLOAT && dataType !== ONNX_DOUBLE && dataType !== ONNX_FLOAT16 &&
        dataType !== ONNX_BFLOAT16 && dataType !== ONNX_INT8 && dataType !== ONNX_UINT8
      ) continue;
      for (const d of dims) {
        const buf = await readAt(f, d.start, d.end - d.start);
        for (let at = 0; at < buf.length;) {
          const v = readVarint(buf, at);
          if (v === undefined) {
            throw notOnnx(label, `a tensor dimension at byte ${d.start} is cut off`);
          }
          elements *= v.value;
          at += v.length;
        }
      }
      if (dataType === ONNX_FLOAT16) counts.f16 += elements;
      else if (dataType === ONNX_BFLOAT16) counts.bf16 += elements;
      else if (dataType === ONNX_INT8) counts.int8 += elements;
      else if (dataType === ONNX_UINT8) counts.uint8 += elements;
      else counts.f32 += elements;
    }
  } finally {
    f.close();
  }
  const dtype = counts.f16 > counts.f32 && counts.f16 >= counts.bf16
    ? "f16"
    : counts.bf16 > counts.f32
    ? "bf16"
    : "f32";
  return { dtype, quant: onnxQuant(counts, dtype), counts };
}

/**
 * The quantization an ONNX graph serves, from {@link onnxWeightDtype}'s counts: `int4` when it
 * holds a block-quantized MatMul (`MatMulNBits`); `int8` (or `uint8`, U8U8) when it holds an
 * integer MatMul or a quantize/dequantize op (dynamic quantization, the QDQ format of static
 * quantization) over 8-bit initializers, int8 when INT8 elements are at least the UINT8 ones;
 * else the float dtype. A quantized graph is never the fp32 reference (lib/probe/certification.ts),
 * so a model this cannot tell apart errs towards needing a certificate.
 *
 * @param counts What the walk counted.
 * @param dtype The float weights' dtype.
 * @returns `int4`, `int8`, `uint8` or `dtype`.
 */
export function onnxQuant(counts: OnnxWeightCounts, dtype: string): string {
  if (counts.nbits_matmuls > 0) return "int4";
  if (counts.integer_matmuls > 0 && counts.int8 + counts.uint8 > 0) {
    return counts.int8 >= counts.uint8 ? "int8" : "uint8";
  }
  return dtype;
}

/**
 * Walks the protobuf fields in `[start, end)`, calling `visit(field, wireType, valueStart,
 * valueEnd)`; `visit` returns a complaint to refuse the file. Groups (wire types 3, 4) and
 * unknown wire types are refused: ONNX uses neither.
 */
async function walkFields(
  f: Deno.FsFile,
  start: number,
  end: number,
  label: string,
  visit: (field: number, wire: number, valueStart: number, valueEnd: number) => string | undefined,
): Promise<void> {
  let pos = start;
  while (pos < end) {
    const head = await readAt(f, pos, Math.min(20, end - pos));
    const tag = readVarint(head, 0);
    if (tag === undefined) throw notOnnx(label, `a field tag at byte ${pos} is cut off`);
    const field = Math.floor(tag.value / 8);
    const wire = tag.value % 8;
    if (field < 1) throw notOnnx(label, `field number 0 at byte ${pos}`);
    let valueStart = pos + tag.length;
    let valueEnd: number;
    if (wire === 0) {
      const v = readVarint(head, tag.length);
      if (v === undefined) throw notOnnx(label, `a varint at byte ${valueStart} is cut off`);
      valueEnd = valueStart + v.length;
    } else if (wire === 1) {
      valueEnd = valueStart + 8;
    } else if (wire === 5) {
      valueEnd = valueStart + 4;
    } else if (wire === 2) {
      const len = readVarint(head, tag.length);
      if (len === undefined) throw notOnnx(label, `a length at byte ${valueStart} is cut off`);
      valueStart += len.length;
      valueEnd = valueStart + len.value;
    } else {
      throw notOnnx(label, `wire type ${wire} of field ${field} at byte ${pos} is not ONNX's`);
    }
    if (valueEnd > end) {
      throw notOnnx(label, `field ${field} at byte ${pos} runs past its end (byte ${end})`);
    }
    const complaint = visit(field, wire, valueStart, valueEnd);
    if (complaint !== undefined) throw notOnnx(label, complaint);
    pos = valueEnd;
  }
}

/** A varint of `buf` at `at` (up to 2^53), or undefined when it is cut off or too long. */
function readVarint(buf: Uint8Array, at: number): { value: number; length: number } | undefined {
  let value = 0;
  let scale = 1;
  for (let i = at; i < buf.length && i - at < 10; i++) {
    const b = buf[i]!;
    value += (b & 0x7f) * scale;
    scale *= 128;
    if ((b & 0x80) === 0) {
      return value > Number.MAX_SAFE_INTEGER ? undefined : { value, length: i - at + 1 };
    }
  }
  return undefined;
}

/** Reads up to `n` bytes at `pos` (fewer only at the end of the file). */
async function readAt(f: Deno.FsFile, pos: number, n: number): Promise<Uint8Array> {
  await f.seek(pos, Deno.SeekMode.Start);
  const buf = new Uint8Array(n);
  let got = 0;
  while (got < n) {
    const r = await f.read(buf.subarray(got));
    if (r === null) break;
    got += r;
  }
  return buf.subarray(0, got);
}

function notOnnx(label: string, why: string): SynapseError {
  return invalid(label, "onnx", "not_onnx", `it is not an ONNX model: ${why}`);
}

function invalid(
  label: string,
  format: ArtifactFormat,
  reason: string,
  why: string,
  cause?: unknown,
): SynapseError {
  return new SynapseError(
    "artifact_invalid",
    `Cannot use ${label} as ${format}: ${why}; fetch the right file or fix its source`,
    { ...(cause === undefined ? {} : { cause }), details: { file: label, format, reason } },
  );
}

function unreadable(path: string, label: string, err: unknown): SynapseError {
  return new SynapseError(
    "artifact_invalid",
    `Cannot read ${label} (${path}): ${(err as Error).message}; check the path and its permissions`,
    { cause: err, details: { file: label, reason: "unreadable" } },
  );
}
