/**
 * What a run-time load resolves to ({@link LoadSpec}: the blobs of a model in the cache and how to
 * serve them, recorded in the store), and the rules on it: the registry source it becomes, when
 * two loads are the same, and which file formats an engine takes.
 *
 * @module
 */
import { SynapseError } from "../contract/errors.ts";
import { canonicalJson, type JsonValue } from "../identity/jcs.ts";
import type { ArtifactFormat, Digest } from "../cache/types.ts";
import type { Pooling } from "../engines/ort/pooling.ts";
import type { ModelEngine, ModelSource, ModelTask } from "./model.ts";
import type { PromptTable } from "./prompts.ts";

/** A file of a loaded model, in the cache. */
export interface ResolvedFile {
  digest: Digest;
  /** Where it came from (URL or `file://` path). */
  source: string;
  format: ArtifactFormat;
  size: number;
}

/** Everything needed to serve a model from the cache again (recorded in the store). */
export interface LoadSpec {
  model_id: string;
  engine: ModelEngine;
  task: ModelTask;
  pooling?: Pooling;
  normalize?: boolean;
  max_tokens?: number;
  files: { model: ResolvedFile; tokenizer?: ResolvedFile; config?: ResolvedFile };
  /** `runtime` (model.load) or `catalog` (models.download). */
  origin: "runtime" | "catalog";
  catalog_id?: string;
  lane_id?: string;
  manifest_digest?: string;
  /** Pin owner of its blobs, when pinned. */
  pin_owner?: string;
  /** Never the default of its task while another model serves it (F36; see `ModelSource.notDefault`). */
  not_default?: boolean;
  /**
   * Model id of the reference lane with the same weights (`model.load` `reference_model`; see
   * `ModelSource.referenceModel`): recorded with the load, so it holds after a restart.
   */
  reference_model?: string;
  /**
   * The model's prompt table (`model.load` `prompts` / `default_prompt_name`, a local model
   * directory's `config_sentence_transformers.json`, a catalog backend's): recorded with the
   * load, so the same table (and fingerprint) holds after a restart.
   */
  prompts?: PromptTable;
  /**
   * Matryoshka widths (`model.load` `matryoshka_dims`, a catalog entry's; see
   * `ModelSource.matryoshkaDims`): recorded with the load, so they hold after a restart.
   */
  matryoshka_dims?: number[];
}

/**
 * The registry source of a spec: the blobs' paths in the cache. Defaults: rerank pools CLS and
 * does not normalise, embed pools mean and normalises; `max_tokens` absent is the preload default
 * 8192, capped at the model's own limit.
 *
 * @param blobPath The cache's path of a digest.
 */
export function sourceFromSpec(spec: LoadSpec, blobPath: (d: Digest) => string): ModelSource {
  const isRerank = spec.task === "rerank";
  const source: ModelSource = {
    modelId: spec.model_id,
    task: spec.task,
    engine: spec.engine,
    modelPath: blobPath(spec.files.model.digest),
    ...(spec.files.tokenizer === undefined
      ? {}
      : { tokenizerPath: blobPath(spec.files.tokenizer.digest) }),
    ...(spec.files.config === undefined
      ? { configOptional: true }
      : { configPath: blobPath(spec.files.config.digest) }),
    pooling: spec.pooling ?? (isRerank ? "cls" : "mean"),
    normalize: spec.normalize ?? !isRerank,
    artifactDigest: spec.files.model.digest,
    ...(spec.not_default ? { notDefault: true } : {}),
    ...(spec.reference_model === undefined ? {} : { referenceModel: spec.reference_model }),
    ...(spec.prompts === undefined ? {} : { prompts: spec.prompts }),
    ...(spec.matryoshka_dims === undefined ? {} : { matryoshkaDims: [...spec.matryoshka_dims] }),
    ...(spec.max_tokens === undefined
      ? { maxTokensDefault: 8192 }
      : { maxTokens: spec.max_tokens }),
  };
  return source;
}

/** Whether a loaded spec and a new one serve the same files the same way. */
export function sameLoad(a: LoadSpec, b: LoadSpec): boolean {
  const d = (s: LoadSpec) =>
    JSON.stringify([
      s.engine,
      s.task,
      s.pooling ?? null,
      s.normalize ?? null,
      s.max_tokens ?? null,
      s.files.model.digest,
      s.files.tokenizer?.digest ?? null,
      s.files.config?.digest ?? null,
      s.reference_model ?? null,
      s.prompts === undefined ? null : canonicalJson(s.prompts as unknown as JsonValue),
      s.matryoshka_dims ?? null,
    ]);
  return d(a) === d(b);
}

/**
 * Refuses a model file an engine cannot take.
 *
 * @throws {SynapseError} `artifact_invalid` (`not_a_model`) for neither ONNX nor GGUF;
 *   `invalid_request` for the other engine's format.
 */
export function checkFormat(engine: ModelEngine, format: ArtifactFormat): void {
  if (format !== "onnx" && format !== "gguf") {
    throw new SynapseError(
      "artifact_invalid",
      `Cannot load: the model file is neither ONNX nor GGUF (it reads as ${format}); check the file or URL`,
      { details: { file: "model", reason: "not_a_model", format } },
    );
  }
  const want = engine === "llama" ? "gguf" : "onnx";
  if (format !== want) {
    throw new SynapseError(
      "invalid_request",
      `Cannot load: engine '${engine}' needs a ${want.toUpperCase()} model file, and this one is ${format}`,
      { details: { field: "engine", engine, format } },
    );
  }
}
