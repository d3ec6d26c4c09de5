/**
 * Where a model's files are: the generated test models served when none is configured, and the
 * `preload_models[]` entries of the config (docs/config.md) turned into {@link ModelSource}s.
 *
 * @module
 */
import { fileURLToPath } from "node:url";
import type { SynapseConfig } from "../config/types.ts";
import { SynapseError } from "../contract/errors.ts";
import type { Pooling } from "../engines/ort/pooling.ts";
import type { ModelSource, ModelTask } from "./model.ts";
import { parsePromptTable, ST_CONFIG_FILE } from "./prompts.ts";
import { parseRerankTemplate } from "../tokenize/rerank_template.ts";

/** Directory of the generated test models (scripts/gen_models.ts). */
export const FIXTURE_MODELS_DIR: string = fileURLToPath(
  new URL("../../fixtures/models", import.meta.url),
);

/**
 * The models served when none is configured: the two generated test models, labelled as such.
 */
export function defaultModelSources(dir: string = FIXTURE_MODELS_DIR): ModelSource[] {
  return [
    {
      modelId: "synapse-tiny-embed",
      task: "embed",
      modelPath: `${dir}/synapse-tiny-embed/model.onnx`,
      tokenizerPath: `${dir}/synapse-tiny-embed/tokenizer.json`,
      configPath: `${dir}/synapse-tiny-embed/config.json`,
      pooling: "mean",
      normalize: true,
      testModel: true,
    },
    {
      modelId: "synapse-tiny-rerank",
      task: "rerank",
      modelPath: `${dir}/synapse-tiny-rerank/model.onnx`,
      tokenizerPath: `${dir}/synapse-tiny-rerank/tokenizer.json`,
      configPath: `${dir}/synapse-tiny-rerank/config.json`,
      pooling: "cls",
      normalize: false,
      testModel: true,
    },
  ];
}

/**
 * Whether a model's files label it a generated test model (`"synapse_test_model": true` in its
 * `config.json`: the source's `configPath`, else the `config.json` beside the model file), read
 * when its load starts, so the default model of a task (lib/models/model_registry.ts
 * `defaultCandidatesOf`) never depends on which load finishes first. Both engines read the same
 * label (lib/models/load_ort.ts, lib/models/load_llama.ts).
 *
 * @param src The model source.
 * @returns True for a labelled test model; false when no `config.json` is readable.
 */
export function labelledTestModel(src: Pick<ModelSource, "modelPath" | "configPath">): boolean {
  const beside = `${
    src.modelPath.slice(0, Math.max(0, src.modelPath.lastIndexOf("/"))) || "."
  }/config.json`;
  for (const path of src.configPath === undefined ? [beside] : [src.configPath, beside]) {
    try {
      const cfg = JSON.parse(Deno.readTextFileSync(path));
      if (cfg?.synapse_test_model === true) return true;
    } catch { /* no config.json there: nothing to label */ }
  }
  return false;
}

/**
 * Turns a `preload_models[]` entry into a model source. `model_path` may name model.onnx or
 * the model directory (model.onnx, tokenizer.json, config.json inside).
 *
 * @throws {SynapseError} `invalid_request` for an engine this build does not serve.
 */
export function sourceFromPreload(entry: SynapseConfig["preload_models"][number]): ModelSource {
  if (entry.engine === "remote") return remoteSourceFromPreload(entry);
  if (entry.engine === "ffi") return llamaSourceFromPreload(entry, "ffi");
  const ffiOnly = (["shim", "readout", "rerank_template"] as const).find((k) =>
    entry[k] !== undefined
  );
  if (ffiOnly !== undefined) {
    throw new SynapseError(
      "invalid_request",
      `Cannot preload '${
        entry.model_id ?? entry.model_path
      }': 'shim', 'readout' and 'rerank_template' are settings of engine 'ffi'`,
      { details: { field: `preload_models.${ffiOnly}`, engine: entry.engine } },
    );
  }
  if (entry.engine === "llama") return llamaSourceFromPreload(entry, "llama");
  if (entry.engine !== "ort") {
    throw new SynapseError(
      "invalid_request",
      `Cannot preload '${
        entry.model_id ?? entry.model_path
      }': engine '${entry.engine}' is not available in this build (ort, llama and ffi)`,
      {
        details: { field: "preload_models.engine", engine: entry.engine },
      },
    );
  }
  if (entry.task === "generate") {
    throw new SynapseError(
      "invalid_request",
      `Cannot preload '${
        entry.model_id ?? entry.model_path
      }': task 'generate' needs engine 'llama'`,
      { details: { field: "preload_models.task", engine: entry.engine, task: entry.task } },
    );
  }
  let modelPath = entry.model_path!;
  let dir: string;
  // The schema lets tokenizer_path out for every engine; the layer refuses it missing for ort.
  let isDir = !modelPath.endsWith(".onnx");
  try {
    isDir = Deno.statSync(modelPath).isDirectory;
  } catch { /* missing: the load reports it, naming the file */ }
  if (!isDir) {
    dir = modelPath.slice(0, Math.max(0, modelPath.lastIndexOf("/"))) || ".";
  } else {
    dir = modelPath.replace(/\/+$/, "");
    modelPath = `${dir}/model.onnx`;
  }
  const name = dir.split("/").filter(Boolean).pop() ?? "model";
  const task: ModelTask = entry.task === "rerank" ? "rerank" : "embed";
  const source: ModelSource = {
    modelId: entry.model_id ?? name,
    task,
    modelPath,
    tokenizerPath: entry.tokenizer_path ?? `${dir}/tokenizer.json`,
    configPath: entry.config_path ?? `${dir}/config.json`,
    // config.json beside the model is optional unless named explicitly.
    configOptional: entry.config_path === undefined,
    pooling: (entry.pooling ?? "mean") as Pooling,
    normalize: entry.normalize ?? true,
  };
  if (entry.max_tokens !== undefined) source.maxTokens = entry.max_tokens;
  else source.maxTokensDefault = preloadMaxTokensDefault(entry);
  return withDeclarations(source, entry, dir);
}

/**
 * A `preload_models[]` entry of engine `remote` (checked by the config layer: `provider`,
 * `model` and `tokenizer_path` present, no setting of a local lane): the model is served by the
 * provider under `model`, tokenized here with `tokenizer_path` (lib/models/load_remote.ts).
 * `model_id` defaults to `model`.
 */
function remoteSourceFromPreload(entry: SynapseConfig["preload_models"][number]): ModelSource {
  const model = entry.model!;
  const modelId = entry.model_id ?? model;
  const source: ModelSource = {
    modelId,
    task: entry.task ?? "embed",
    engine: "remote",
    modelPath: `remote://${entry.provider}/${model}`,
    tokenizerPath: entry.tokenizer_path!,
    // Declared by the provider, not chosen here (the config refuses `pooling` on remote entries).
    pooling: "mean" as Pooling,
    normalize: entry.normalize ?? true,
    remote: {
      provider: entry.provider!,
      model,
      ...(entry.dims === undefined ? {} : { dims: entry.dims }),
      ...(entry.revision === undefined ? {} : { revision: entry.revision }),
      ...(entry.canary === undefined ? {} : { canary: entry.canary }),
    },
  };
  if (entry.max_tokens !== undefined) source.maxTokens = entry.max_tokens;
  if (entry.reference_model !== undefined) {
    // The local lane the probe certifies this remote lane against (docs/remote.md "Identity").
    checkReferenceModel(source.modelId, entry.reference_model, "preload_models.reference_model");
    source.referenceModel = entry.reference_model;
  }
  return source;
}

/**
 * The declarations every engine honours: `format`, `revision` and `execution`
 * ({@link checkPreloadPlacement}), `dtype`, `quant` and `family` (checked against the files at
 * load, lib/models/load_ort.ts),
 * `reference_model` (the probe's reference; never the model itself), the prompt table
 * (`prompts`, `default_prompt_name`; else the model directory's
 * `config_sentence_transformers.json`, read at load) and `matryoshka_dims` (checked against the
 * model's width at load, lib/models/matryoshka.ts).
 *
 * @param dir The model directory.
 * @throws {SynapseError} `invalid_request {field: "preload_models.reference_model"}` for a
 *   reference naming the model itself; `invalid_request` naming `preload_models.prompts` or
 *   `preload_models.default_prompt_name` for a bad prompt table (lib/models/prompts.ts); the
 *   refusals of {@link checkPreloadPlacement}.
 */
function withDeclarations(
  source: ModelSource,
  entry: SynapseConfig["preload_models"][number],
  dir: string,
): ModelSource {
  const prompts = parsePromptTable(
    entry.prompts,
    entry.default_prompt_name,
    "preload_models.prompts",
    source.modelId,
  );
  if (prompts !== undefined) source.prompts = prompts;
  else if (entry.prompts === undefined) source.promptsConfigPath = `${dir}/${ST_CONFIG_FILE}`;
  checkPreloadPlacement(source, entry);
  if (entry.dtype !== undefined) source.dtype = entry.dtype;
  if (entry.quant !== undefined) source.quant = entry.quant;
  if (entry.family !== undefined) source.family = entry.family;
  if (entry.reference_model !== undefined) {
    checkReferenceModel(source.modelId, entry.reference_model, "preload_models.reference_model");
    source.referenceModel = entry.reference_model;
  }
  if (entry.matryoshka_dims !== undefined) source.matryoshkaDims = [...entry.matryoshka_dims];
  return source;
}

/** The only `execution` a preload entry may declare: every lane of this build runs on the CPU. */
export const PRELOAD_EXECUTION = "cpu";

/**
 * Checks the declarations of a preload entry that say where and from what it runs, before any
 * file is read (none is accepted and ignored; docs/config.md "preload_models"):
 * - `format` must be the engine's file format (`onnx` for `ort`, `gguf` for `llama`; case
 *   ignored): the loader reads only that format.
 * - `revision` is refused: a preloaded model is the files at `model_path`, which have no upstream
 *   revision to pin; a download is pinned by `model.load {source: "hf", repo, revision}`.
 * - `execution` must be `cpu` (case ignored): every lane of this build runs on the CPU (the
 *   ONNX Runtime CPU provider, a CPU build of llama.cpp); a GPU provider is not in this build.
 *
 * @param source The source built so far (its `modelId` names the entry).
 * @param entry The preload entry.
 * @throws {SynapseError} `invalid_request {model_id, field: "preload_models.format" |
 *   "preload_models.revision" | "preload_models.execution", value, ...}`.
 */
export function checkPreloadPlacement(
  source: ModelSource,
  entry: SynapseConfig["preload_models"][number],
): void {
  const id = source.modelId;
  const want = (source.engine ?? "ort") === "llama" ? "gguf" : "onnx";
  if (entry.format !== undefined && entry.format.toLowerCase() !== want) {
    throw new SynapseError(
      "invalid_request",
      `Cannot preload '${id}': format '${entry.format}' is not what engine '${
        source.engine ?? "ort"
      }' reads ('${want}'); drop format or set it to '${want}'`,
      {
        details: {
          model_id: id,
          field: "preload_models.format",
          value: entry.format,
          format: want,
        },
      },
    );
  }
  if (entry.revision !== undefined) {
    throw new SynapseError(
      "invalid_request",
      `Cannot preload '${id}': revision '${entry.revision}' pins an upstream download, but a preloaded model is the files at model_path and has no revision to check; drop revision, or load a pinned download with model.load {source: "hf", repo, revision} (ck-synapse pull)`,
      { details: { model_id: id, field: "preload_models.revision", value: entry.revision } },
    );
  }
  if (entry.execution !== undefined && entry.execution.toLowerCase() !== PRELOAD_EXECUTION) {
    throw new SynapseError(
      "invalid_request",
      `Cannot preload '${id}': execution '${entry.execution}' is not available: every lane of this build runs on the CPU (the ONNX Runtime CPU provider, a CPU build of llama.cpp); drop execution or set it to 'cpu'`,
      {
        details: {
          model_id: id,
          field: "preload_models.execution",
          value: entry.execution,
          accepted: [PRELOAD_EXECUTION],
        },
      },
    );
  }
}

/**
 * Refuses a `reference_model` that names the model itself (a model is not its own reference).
 *
 * @param modelId The model's id.
 * @param reference The declared reference model id.
 * @param field The field named in the refusal (`preload_models.reference_model`,
 *   `reference_model`).
 * @throws {SynapseError} `invalid_request {model_id, field, reference_model, reason:
 *   "self_reference"}`.
 */
export function checkReferenceModel(modelId: string, reference: string, field: string): void {
  if (reference !== modelId) return;
  throw new SynapseError(
    "invalid_request",
    `Cannot load model '${modelId}': reference_model names the model itself; name the model id of the reference lane with the same weights (an ORT fp32 model), or drop it`,
    { details: { model_id: modelId, field, reference_model: reference, reason: "self_reference" } },
  );
}

/**
 * A `preload_models[]` entry with `engine: "llama"` or `engine: "ffi"` (the llama shim):
 * `model_path` names the `.gguf` file or a directory holding `model.gguf`; `tokenizer_path`
 * defaults to `tokenizer.json` beside it when that file exists, else to none (the tokenizer is
 * then built from the GGUF's vocabulary). Only the ffi lane serves rerank (`readout`).
 */
function llamaSourceFromPreload(
  entry: SynapseConfig["preload_models"][number],
  lane: "llama" | "ffi",
): ModelSource {
  let modelPath = entry.model_path!;
  let isDir = !modelPath.endsWith(".gguf");
  try {
    isDir = Deno.statSync(modelPath).isDirectory;
  } catch { /* missing: the load reports it, naming the file */ }
  const dir = isDir
    ? modelPath.replace(/\/+$/, "")
    : modelPath.slice(0, Math.max(0, modelPath.lastIndexOf("/"))) || ".";
  if (isDir) modelPath = `${dir}/model.gguf`;
  const name = dir.split("/").filter(Boolean).pop() ?? "model";
  if (entry.task === "rerank" && lane === "llama") {
    throw new SynapseError(
      "invalid_request",
      `Cannot preload '${
        entry.model_id ?? name
      }': engine 'llama' serves embed and generate, not rerank (engine 'ffi' serves GGUF rerankers)`,
      { details: { field: "preload_models.task", engine: "llama", task: entry.task } },
    );
  }
  const rerankOnly = (["readout", "rerank_template"] as const).find((k) => entry[k] !== undefined);
  if (rerankOnly !== undefined && entry.task !== "rerank") {
    throw new SynapseError(
      "invalid_request",
      `Cannot preload '${entry.model_id ?? name}': '${rerankOnly}' is a setting of task 'rerank'`,
      {
        details: {
          field: `preload_models.${rerankOnly}`,
          engine: "ffi",
          task: entry.task ?? "embed",
        },
      },
    );
  }
  if (entry.rerank_template !== undefined) {
    try {
      parseRerankTemplate(entry.rerank_template);
    } catch (err) {
      throw new SynapseError(
        "invalid_request",
        `Cannot preload '${entry.model_id ?? name}': rerank_template: ${(err as Error).message}`,
        { details: { field: "preload_models.rerank_template", engine: "ffi" } },
      );
    }
  }
  const source: ModelSource = {
    modelId: entry.model_id ?? name,
    task: entry.task === "generate" ? "generate" : entry.task === "rerank" ? "rerank" : "embed",
    engine: "llama",
    ...(lane === "ffi" ? { llamaLane: "ffi" as const } : {}),
    ...(entry.shim === undefined ? {} : { shim: entry.shim }),
    ...(entry.readout === undefined ? {} : { readout: entry.readout }),
    ...(entry.rerank_template === undefined ? {} : { rerankTemplate: entry.rerank_template }),
    modelPath,
    pooling: (entry.pooling ?? "mean") as Pooling,
    normalize: entry.normalize ?? true,
  };
  const tokenizerPath = entry.tokenizer_path ?? besideGguf(`${dir}/tokenizer.json`);
  if (tokenizerPath !== undefined) source.tokenizerPath = tokenizerPath;
  if (entry.max_tokens !== undefined) source.maxTokens = entry.max_tokens;
  else source.maxTokensDefault = preloadMaxTokensDefault(entry);
  if (entry.artifact_digest !== undefined) source.artifactDigest = entry.artifact_digest;
  if (entry.worker_bin !== undefined) source.workerBin = entry.worker_bin;
  if (entry.worker_runtime_dir !== undefined) source.workerRuntimeDir = entry.worker_runtime_dir;
  return withDeclarations(source, entry, dir);
}

/** `path` when a file is there (a broken link or a directory is not a tokenizer.json). */
function besideGguf(path: string): string | undefined {
  try {
    return Deno.statSync(path).isFile ? path : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The preload default of `max_tokens` (512, or 8192 with a `profile`; docs/config.md
 * "preload_models"), which the load caps at the model's own limit.
 */
function preloadMaxTokensDefault(entry: SynapseConfig["preload_models"][number]): number {
  return entry.profile === undefined ? 512 : 8192;
}
