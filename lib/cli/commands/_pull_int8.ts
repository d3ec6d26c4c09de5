/**
 * `ck-synapse pull --quant int8 PATH|ID`: what to load for an int8 lane.
 *
 * - A local PATH is quantized here (lib/models/quantize_model.ts, into this process's model
 *   cache; a second pull of the same file finds it there), written to a staging directory with
 *   the source's tokenizer and config files, and loaded from there with `model.load {path,
 *   quant: "int8"}` under `NAME-int8` (the load copies the files into the server's cache; the
 *   staging directory is removed when the pull ends). `--sha256` checks the fp32 file.
 * - A catalog ID with an upstream int8 file ({@link CATALOG_INT8_FILES}) is `model.load {url,
 *   expected_digest, files}` of that file with the `ort` backend's tokenizer and config, under
 *   `ID-int8`, `reference_model: ID`. Without one, the fp32 model is pulled first
 *   (`models.download`), then its model file is quantized from the model cache like a PATH.
 * - A URL is refused (quantize a local copy).
 *
 * @module
 */
import { basename, dirname, resolve } from "node:path";
import { SynapseError } from "../../contract/errors.ts";
import { ModelCache } from "../../cache/model_cache.ts";
import { CATALOG_INT8_FILES, catalogModel, fileUrl } from "../../models/catalog.ts";
import {
  quantizeModelFile,
  resolveModelFiles,
  writeQuantizedDir,
} from "../../models/quantize_model.ts";
import type { QuantizedModel } from "../../models/quantize_model.ts";
import { cliExitFor } from "../exit_codes.ts";
import { UsageError } from "../_command.ts";
import type { CliIO } from "../_command.ts";
import { formatBytes } from "../_progress.ts";
import { planPull } from "./pull.ts";
import type { PullFlags, PullPlan } from "./pull.ts";

/** What `pull --quant int8` calls, and the staging directory to remove once it ends. */
export interface Int8PullPlan {
  plan: PullPlan;
  staging?: string;
  /**
   * A catalog model without an upstream int8 file: pull the fp32 model with this plan first,
   * then call {@link stageCatalogInt8} for the int8 load.
   */
  fp32First?: PullPlan;
}

/**
 * Works out the int8 pull of `target` (see the module doc).
 *
 * @returns The plan, or an exit code after printing why the file cannot be quantized.
 * @throws {UsageError} for a URL, or what {@link planPull} refuses.
 */
export async function planInt8Pull(
  target: string,
  flags: PullFlags,
  cwd: string,
  io: CliIO,
  json: boolean,
): Promise<Int8PullPlan | number> {
  const { sha256, ...rest } = flags;
  if (/^https?:\/\//i.test(target)) {
    throw new UsageError(
      `Cannot pull ${target} with --quant int8: a URL is not quantized on the way; pull it, or download it and run 'ck-synapse pull --quant int8 ./DIR' (or 'ck-synapse quantize FILE --out DIR')`,
    );
  }
  const base = planPull(target, rest, cwd);
  if (base.kind === "catalog") {
    const model = catalogModel(target);
    const ort = model?.backends.find((b) => b.backend === "ort");
    if (model === undefined || ort === undefined) {
      // Unknown ids and models without an ONNX backend: the server's own refusal names them.
      if (model !== undefined) {
        throw new UsageError(
          `Cannot pull ${target} with --quant int8: it has no ONNX (ort) backend to quantize (a GGUF carries its own quantization)`,
        );
      }
      return { plan: base };
    }
    const pinned = CATALOG_INT8_FILES[target];
    if (pinned !== undefined && pinned.sha256 !== null) {
      const files: Record<string, unknown> = {};
      if (ort.files.tokenizer?.sha256) {
        files.tokenizer = { url: fileUrl(ort.files.tokenizer), sha256: ort.files.tokenizer.sha256 };
      }
      if (ort.files.config?.sha256) {
        files.config = { url: fileUrl(ort.files.config), sha256: ort.files.config.sha256 };
      }
      return {
        plan: {
          kind: "url",
          method: "model.load",
          params: {
            url: fileUrl(pinned),
            expected_digest: pinned.sha256,
            files,
            engine: "ort",
            task: model.task,
            model_id: `${target}-int8`,
            pooling: ort.pooling,
            normalize: ort.normalize,
            max_tokens: ort.max_tokens,
            reference_model: target,
          },
        },
      };
    }
    return { plan: base, fp32First: base };
  }
  const path = base.params.path as string;
  let q: QuantizedModel;
  let files: Awaited<ReturnType<typeof resolveModelFiles>>;
  try {
    files = await resolveModelFiles(path);
    q = await quantizeModelFile(files.model, new ModelCache());
  } catch (err) {
    return refuse(err, io, json);
  }
  if (sha256 !== undefined) {
    const want = sha256.toLowerCase().replace(/^sha256:/, "");
    if (`sha256:${want}` !== q.sourceDigest) {
      return refuse(
        new SynapseError(
          "artifact_invalid",
          `Cannot pull ${target}: its model file's SHA-256 is ${q.sourceDigest}, not the --sha256 sha256:${want}`,
          { details: { file: files.model, reason: "digest_mismatch", expected: want } },
        ),
        io,
        json,
      );
    }
  }
  if (!json) io.err(quantizedLine(q));
  const staging = await Deno.makeTempDir({ prefix: "ck-synapse-int8-" });
  await writeQuantizedDir(staging, q, files);
  const name = defaultName(files.model);
  const params: Record<string, unknown> = {
    ...base.params,
    path: staging,
    expected_digest: q.digest,
  };
  params.model_id ??= `${name}-int8`;
  return { plan: { kind: "path", method: "model.load", params }, staging };
}

/**
 * The int8 load of a catalog model without an upstream int8 file, once its fp32 pull is done:
 * its model file is quantized from the model cache (the blob the pull verified) and loaded from a
 * staging directory with its tokenizer and config blobs, under `ID-int8`, `reference_model: ID`.
 *
 * @returns The plan, or an exit code after printing why not (the blobs are not in this
 *   process's model cache: a server with another cache).
 */
export async function stageCatalogInt8(
  id: string,
  io: CliIO,
  json: boolean,
): Promise<Int8PullPlan | number> {
  const model = catalogModel(id)!;
  const ort = model.backends.find((b) => b.backend === "ort")!;
  const cache = new ModelCache();
  const blob = (sha: string | null | undefined) =>
    sha === null || sha === undefined ? undefined : cache.blobPath(sha);
  const modelBlob = blob(ort.files.model.sha256);
  try {
    if (modelBlob === undefined) throw new Error("its model file has no pinned digest");
    await Deno.stat(modelBlob);
  } catch {
    return refuse(
      new SynapseError(
        "artifact_invalid",
        `Cannot quantize ${id}: its model file is not in this process's model cache (${cache.root}); run 'ck-synapse pull --quant int8' with the server's CORTEXKIT_MODEL_CACHE, or quantize a local copy with 'ck-synapse quantize'`,
        { details: { catalog_id: id, reason: "not_in_cache" } },
      ),
      io,
      json,
    );
  }
  let q: QuantizedModel;
  try {
    q = await quantizeModelFile(modelBlob!, cache);
  } catch (err) {
    return refuse(err, io, json);
  }
  if (!json) io.err(quantizedLine(q));
  const staging = await Deno.makeTempDir({ prefix: "ck-synapse-int8-" });
  await Deno.copyFile(q.path, `${staging}/model.onnx`);
  for (const role of ["tokenizer", "config"] as const) {
    const p = blob(ort.files[role]?.sha256);
    if (p !== undefined) await Deno.copyFile(p, `${staging}/${role}.json`);
  }
  return {
    plan: {
      kind: "path",
      method: "model.load",
      params: {
        path: staging,
        expected_digest: q.digest,
        engine: "ort",
        task: model.task,
        model_id: `${id}-int8`,
        pooling: ort.pooling,
        normalize: ort.normalize,
        max_tokens: ort.max_tokens,
        reference_model: id,
      },
    },
    staging,
  };
}

function quantizedLine(q: QuantizedModel): string {
  return q.cacheHit
    ? `quantized: ${q.digest} (${formatBytes(q.bytes)}), found in the model cache`
    : `quantized: ${q.sourceDigest} (${formatBytes(q.sourceBytes)}) -> ${q.digest} (${
      formatBytes(q.bytes)
    }), ${q.quantized!.length} MatMuls int8`;
}

/** `NAME` of `NAME-int8`: the file's stem, or its directory's name for `model.onnx`. */
function defaultName(model: string): string {
  const file = basename(model).replace(/\.onnx$/i, "");
  if (file !== "model") return file;
  const dir = dirname(model);
  return basename(basename(dir) === "onnx" ? dirname(dir) : resolve(dir)) || "model";
}

function refuse(err: unknown, io: CliIO, json: boolean): number {
  if (!(err instanceof SynapseError)) throw err;
  if (json) io.out(JSON.stringify({ ...err.toChannel(), details: err.details }, null, 2));
  else io.err(`error: ${err.code}: ${err.message}`);
  return cliExitFor("semantic");
}
