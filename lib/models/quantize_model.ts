/**
 * Quantizing a model on disk, through the model cache: the int8 file (lib/quant/quantize_onnx.ts)
 * is stored as a cache blob named by its SHA-256 like every artifact, and an index entry
 * `<cache root>/quantized/<fp32 hex>.<descriptor key>.json` maps the fp32 model's digest and the
 * quantizer's revision and options to it, so quantizing the same file again is a cache hit (the
 * fp32 file is hashed, nothing is quantized). A blob `cache gc` collected is quantized again.
 *
 * @module
 */
import { dirname } from "node:path";
import { SynapseError } from "../contract/errors.ts";
import { sha256FileHex, sha256Hex } from "../identity/sha256.ts";
import type { ModelCache } from "../cache/model_cache.ts";
import {
  quantizeDescriptor,
  QuantizeError,
  quantizeOnnx,
  type QuantizeOptions,
  type QuantizeResult,
} from "../quant/quantize_onnx.ts";

/** The quantizations `pull --quant` and `quantize` accept. */
export const QUANTS = ["int8"] as const;

/** Files copied beside a quantized model (when the source has them). */
export const COMPANION_FILES = [
  "tokenizer.json",
  "tokenizer_config.json",
  "config.json",
  "special_tokens_map.json",
  "prompts.json",
] as const;

/** What {@link quantizeModelFile} did. */
export interface QuantizedModel {
  /** `sha256:` of the fp32 input. */
  sourceDigest: string;
  /** `sha256:` of the int8 file. */
  digest: string;
  /** The int8 file: its cache blob. */
  path: string;
  /** Bytes of the input and the output. */
  sourceBytes: number;
  bytes: number;
  /** True when the index and blob were there: nothing was quantized. */
  cacheHit: boolean;
  /** The quantizer's revision and options. */
  descriptor: string;
  /** MatMuls quantized and left fp32 (absent on a cache hit). */
  quantized?: QuantizeResult["quantized"];
  skipped?: QuantizeResult["skipped"];
}

/** A model directory (or file) resolved to its ONNX file and companions. */
export interface ModelFiles {
  model: string;
  /** The directory the companions are read from. */
  dir: string;
  companions: string[];
}

/**
 * The ONNX file of a path: the file itself, or `model.onnx` / `onnx/model.onnx` of a directory;
 * companions ({@link COMPANION_FILES}) from the model's directory, else the directory above
 * (the `onnx/` layout).
 *
 * @throws {SynapseError} `invalid_request {path, reason: "not_found" | "no_onnx"}`.
 */
export async function resolveModelFiles(path: string): Promise<ModelFiles> {
  let stat: Deno.FileInfo;
  try {
    stat = await Deno.stat(path);
  } catch {
    throw new SynapseError(
      "invalid_request",
      `Cannot quantize ${path}: no such file or directory`,
      {
        details: { path, reason: "not_found" },
      },
    );
  }
  let model: string | undefined;
  if (stat.isFile) model = path;
  else {
    for (const c of ["model.onnx", "onnx/model.onnx"]) {
      if (await isFile(`${path}/${c}`)) {
        model = `${path}/${c}`;
        break;
      }
    }
  }
  if (model === undefined || !model.endsWith(".onnx")) {
    throw new SynapseError(
      "invalid_request",
      `Cannot quantize ${path}: give an .onnx file or a directory holding model.onnx or onnx/model.onnx (only ONNX models are quantized; a GGUF carries its own quantization)`,
      { details: { path, reason: "no_onnx" } },
    );
  }
  const here = dirname(model);
  const candidates = [here, dirname(here)];
  for (const dir of candidates) {
    const companions: string[] = [];
    for (const f of COMPANION_FILES) if (await isFile(`${dir}/${f}`)) companions.push(f);
    if (companions.length > 0 || dir === candidates[candidates.length - 1]) {
      return { model, dir, companions };
    }
  }
  return { model, dir: here, companions: [] };
}

async function isFile(p: string): Promise<boolean> {
  try {
    return (await Deno.stat(p)).isFile;
  } catch {
    return false;
  }
}

/**
 * Quantizes an fp32 ONNX file to int8 into the model cache, or finds it there.
 *
 * @param modelPath The fp32 `.onnx` file.
 * @param cache The model cache.
 * @param options Quantizer options (the default scheme when absent).
 * @throws {SynapseError} `artifact_invalid {file, reason}` when the file cannot be quantized
 *   (`not_onnx`, `external_data`, `already_quantized`, `nothing_to_quantize`) or read;
 *   `download_failed {reason: "storage_full"}` from the cache.
 */
export async function quantizeModelFile(
  modelPath: string,
  cache: ModelCache,
  options: QuantizeOptions = {},
): Promise<QuantizedModel> {
  let sourceHex: string;
  let sourceBytes: number;
  try {
    sourceBytes = (await Deno.stat(modelPath)).size;
    sourceHex = await sha256FileHex(modelPath);
  } catch (err) {
    throw new SynapseError(
      "artifact_invalid",
      `Cannot quantize ${modelPath}: ${(err as Error).message}`,
      {
        cause: err,
        details: { file: modelPath, reason: "unreadable" },
      },
    );
  }
  const descriptor = quantizeDescriptor(options);
  const indexDir = `${cache.root}/quantized`;
  const indexPath = `${indexDir}/${sourceHex}.${sha256Hex(descriptor).slice(0, 16)}.json`;
  try {
    const index = JSON.parse(await Deno.readTextFile(indexPath)) as {
      digest: string;
      bytes: number;
    };
    const meta = await cache.meta(index.digest);
    if (meta !== undefined) {
      return {
        sourceDigest: `sha256:${sourceHex}`,
        digest: index.digest,
        path: cache.blobPath(index.digest),
        sourceBytes,
        bytes: index.bytes,
        cacheHit: true,
        descriptor,
      };
    }
  } catch {
    // No index (or a collected blob): quantize.
  }
  let result: QuantizeResult;
  try {
    result = quantizeOnnx(await Deno.readFile(modelPath), options);
  } catch (err) {
    if (err instanceof QuantizeError) {
      throw new SynapseError("artifact_invalid", `${err.message} (${modelPath})`, {
        details: { file: modelPath, reason: err.reason },
      });
    }
    throw err;
  }
  if (result.descriptor !== descriptor) {
    throw new Error(`quantizer descriptor drift: ${result.descriptor} vs ${descriptor}`);
  }
  await Deno.mkdir(indexDir, { recursive: true, mode: 0o700 });
  const tmp = `${indexDir}/.${sourceHex}.${Deno.pid}.${crypto.randomUUID()}.onnx`;
  try {
    await Deno.writeFile(tmp, result.bytes, { mode: 0o600 });
    await cache.importFile(tmp, { expectedDigest: result.digest, file: "model.onnx" });
  } finally {
    await Deno.remove(tmp).catch(() => {});
  }
  const entry = JSON.stringify({
    source_digest: result.sourceDigest,
    descriptor,
    digest: result.digest,
    bytes: result.bytes.length,
  });
  const tmpIndex = `${indexPath}.${Deno.pid}.tmp`;
  await Deno.writeTextFile(tmpIndex, entry + "\n", { mode: 0o600 });
  await Deno.rename(tmpIndex, indexPath);
  return {
    sourceDigest: result.sourceDigest,
    digest: result.digest,
    path: cache.blobPath(result.digest),
    sourceBytes,
    bytes: result.bytes.length,
    cacheHit: false,
    descriptor,
    quantized: result.quantized,
    skipped: result.skipped,
  };
}

/**
 * Writes a quantized model directory: `model.onnx` (a copy of the int8 blob) and the source's
 * companions.
 *
 * @param out The directory (created; existing files of the same names are replaced).
 * @param q The quantized model.
 * @param files The source's files.
 * @returns The files written, `model.onnx` first.
 */
export async function writeQuantizedDir(
  out: string,
  q: QuantizedModel,
  files: ModelFiles,
): Promise<string[]> {
  await Deno.mkdir(out, { recursive: true });
  await Deno.copyFile(q.path, `${out}/model.onnx`);
  await Deno.chmod(`${out}/model.onnx`, 0o644);
  for (const f of files.companions) await Deno.copyFile(`${files.dir}/${f}`, `${out}/${f}`);
  return ["model.onnx", ...files.companions];
}
