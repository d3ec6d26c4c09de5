/**
 * What the registry knows of a model: where its files are ({@link ModelSource}), its lifecycle
 * ({@link ModelEntry}), and, once loaded, the {@link ReadyModel} every operation serves from —
 * tokenizer, profile, fingerprint and lanes, always present.
 *
 * @module
 */
import type { SynapseError } from "../contract/errors.ts";
import type { EngineIdentity, ModelTask } from "../engines/engine.ts";
import type { GgufFacts } from "../engines/llama/gguf.ts";
import type { Pooling } from "../engines/ort/pooling.ts";
import type { NumericProfile } from "../identity/numeric_profile.ts";
import type { Lane } from "../lanes/lane.ts";
import type { PromptTable } from "./prompts.ts";
import type { SanitizedTokenizer } from "../tokenize/tokenizer.ts";

export type { EngineIdentity, ModelTask };

/** Engine kind of a model. */
export type ModelEngine = "ort" | "llama" | "remote";

/** Where a model's tokenizer came from. */
export type TokenizerSource = "tokenizer.json" | "gguf";

/** Lifecycle of a model. */
export type ModelState = "loading" | "ready" | "failed";

/** Where a model's files are and how to serve it. */
export interface ModelSource {
  modelId: string;
  task: ModelTask;
  /** Engine. @default "ort" */
  engine?: ModelEngine;
  /** model.onnx, or the .gguf file for the llama engine */
  modelPath: string;
  /**
   * tokenizer.json. Required for ORT; optional for llama, where a GGUF without one gets a
   * tokenizer built from its own vocabulary metadata, checked against llama.cpp at load time.
   */
  tokenizerPath?: string;
  /** config.json, when there is one. */
  configPath?: string;
  /** A missing `configPath` is not an error (defaults apply). @default false */
  configOptional?: boolean;
  pooling: Pooling;
  normalize: boolean;
  /**
   * Largest sequence in tokens, specials included. ORT: default from config.json's
   * max_position_embeddings. llama: default the usable context; a value above it fails the load.
   */
  maxTokens?: number;
  /**
   * Used when `maxTokens` is absent, capped at the model's own limit (its positions, or a GGUF
   * lane's context): the preload default, which must never fail a load.
   */
  maxTokensDefault?: number;
  /** Labelled as a test model everywhere it appears. */
  testModel?: boolean;
  /**
   * llama: context size in tokens. @default min(GGUF `<arch>.context_length`,
   * {@link LLAMA_CONTEXT_CAP})
   */
  contextSize?: number;
  /**
   * llama engine: which worker serves the GGUF — node-llama-cpp (`llama`) or the native llama
   * shim (`ffi`, config `"engine": "ffi", "shim": "llama"`). @default "llama"
   */
  llamaLane?: "llama" | "ffi";
  /** ffi lane: the shim named in the config (`cuda` has no build here; see loadLlamaModel). */
  shim?: "llama" | "cuda";
  /**
   * ffi lane, rerank: how a score is read — the GGUF's classification head through rank pooling
   * (`rank`, a cross-encoder) or logit("yes") − logit("no") at the last token (`yes_no`, a
   * causal-LM reranker such as Qwen3-Reranker). @default "rank"
   */
  readout?: "rank" | "yes_no";
  /**
   * ffi lane, rerank: the prompt template pairs are scored in (config `rerank_template`),
   * overriding the GGUF's `tokenizer.chat_template.rerank`.
   */
  rerankTemplate?: string;
  /** Expected `sha256:<hex>` of the artifact; a different file is refused. */
  artifactDigest?: string;
  /**
   * Checks the files against their recorded digests before the engine reads them (a model from
   * the model cache: verified once per boot, healed from its recorded source when damaged) and
   * resolves to the model file's verified `sha256:<hex>`, which the loader then uses instead of
   * hashing the file again.
   *
   * @throws {SynapseError} `artifact_invalid {reason: "blob_digest_mismatch"}` for a damaged
   *   blob no source heals; a heal's transient failure (retried by the registry).
   */
  verify?: () => Promise<string>;
  /**
   * Never the default model of its task while another model of the task serves (a pull whose
   * task was inferred against mixed signals does not take over an existing default; F36).
   */
  notDefault?: boolean;
  /**
   * Declared storage dtype of the weights (preload `dtype`), e.g. `f16`. The loader reads the
   * weights' own dtype (ONNX initializers, GGUF tensors) and refuses a load whose declaration
   * differs (`invalid_request`, `details.field: "dtype"`); absent: the weights' dtype.
   */
  dtype?: string;
  /**
   * Declared quantization (preload `quant`), e.g. `q8_0`: checked at load against the
   * quantization the lane serves (the fingerprint's `quant`); another refuses the load
   * (`invalid_request`, `details.field: "quant"`).
   */
  quant?: string;
  /**
   * Declared model family (preload `family`), e.g. `bert`: checked at load against the
   * architecture the files name (`config.json` `model_type`, GGUF `general.architecture`);
   * another, or files naming none, refuses the load (`details.field: "family"`).
   */
  family?: string;
  /**
   * Model id of the reference lane with the same weights (preload `reference_model`, the
   * `model.load` param `reference_model`): the probe checks this model's parity against that
   * model's lanes, and a lane that declares one needs a certificate (docs/internals.md §12). Never
   * the model's own id; the model it names need not be loaded (the probe then lacks
   * `reference_parity`, reason `reference_not_loaded`).
   */
  referenceModel?: string;
  /**
   * The model's prompt table (preload `prompts` / `default_prompt_name`, `model.load` params, a
   * catalog entry), checked (lib/models/prompts.ts). Absent: the loader reads
   * {@link promptsConfigPath} when set. Embed models only.
   */
  prompts?: PromptTable;
  /**
   * The model directory's `config_sentence_transformers.json`, read at load for its `prompts` and
   * `default_prompt_name` when {@link prompts} is absent; a missing file is no table.
   */
  promptsConfigPath?: string;
  /**
   * Matryoshka widths the model was trained to be cut to (preload `matryoshka_dims`, the
   * `model.load` param, a catalog entry): ascending positive integers, each at most the model's
   * width, checked at load (lib/models/matryoshka.ts `checkMatryoshkaDims`). A request's
   * `dimensions` may name one; it is served under a derived fingerprint. Embed models only.
   */
  matryoshkaDims?: readonly number[];
  /**
   * Engine `remote` (config `"engine": "remote"`): the provider of `remote_providers` that serves
   * the model, the model's name there, and its declared width (checked against the provider's
   * answers at load).
   */
  remote?: {
    provider: string;
    model: string;
    dims?: number;
    /** The entry's `revision` label: enters the model digest (a new vector space). */
    revision?: string;
    /** The entry's canary settings (lib/engines/remote/canary.ts defaults when absent). */
    canary?: { interval_ms?: number | undefined; min_cosine?: number | undefined };
  };
  /** llama: worker program override (`worker_bin`). */
  workerBin?: string;
  /** llama: socket directory (`worker_runtime_dir`). */
  workerRuntimeDir?: string;
}

/**
 * `provenance.remote` of a remote lane's answers (contract §3): the provider, what it deploys
 * under the model's name, and the assurance of that identity: `declared` until a probe of the
 * lane against its `reference_model` (a local lane of the same model) passes on this machine, then
 * `proven` (docs/remote.md "Identity").
 */
export interface RemoteProvenance {
  provider: string;
  deployment: string;
  assurance: "declared" | "proven";
}

/** Largest context a llama lane sets up when the source names none: 8192 tokens. */
export const LLAMA_CONTEXT_CAP = 8192;

/**
 * A loaded model: everything an operation needs, always present. A model has two lanes on the
 * same engine runtime or on two threads of it: `interactive` (queries, inline batches, small
 * reranks; a generation model's interactive lane runs in the `decode` class) and `bulk`
 * (durable jobs, large reranks).
 */
export interface ReadyModel {
  readonly modelId: string;
  readonly task: ModelTask;
  readonly engineKind: ModelEngine;
  readonly tokenizer: SanitizedTokenizer;
  /**
   * Where the tokenizer came from: the model's `tokenizer.json`, or (llama, none given) the GGUF's
   * own vocabulary metadata; the profile's `sanitized_tokenizer_digest` is the digest of that
   * tokenizer.json, given or built. @default "tokenizer.json"
   */
  readonly tokenizerSource?: TokenizerSource;
  readonly profile: NumericProfile;
  readonly numericProfileId: string;
  /** 64 hex chars (docs/internals.md §4). */
  readonly fingerprint: string;
  /** Vector width (embed), 1 (rerank), 0 (generate). */
  readonly dims: number;
  /**
   * The source's checked `matryoshka_dims` (embed models that declare them): the widths a request
   * may ask for by `dimensions`, each served under its derived profile (lib/models/matryoshka.ts).
   */
  readonly matryoshkaDims?: readonly number[];
  /** Longest sequence in tokens, specials included (the profile's `max_context_tokens` for ORT). */
  readonly maxTokens: number;
  readonly testModel: boolean;
  /** Identity of the engine that serves it. */
  readonly identity: EngineIdentity;
  readonly interactive: Lane;
  readonly bulk: Lane;
  /** GGUF facts (llama models). */
  readonly gguf?: GgufFacts;
  /** Remote lanes: the provider, deployment and assurance (`provenance.remote`). */
  readonly remote?: RemoteProvenance;
  /**
   * The model's prompt table (embed models that declare one); its identity is the profile's
   * `prompt_template`.
   */
  readonly prompts?: PromptTable;
}

/** A model known to the registry, in any state. */
export interface ModelEntry {
  readonly source: ModelSource;
  readonly modelId: string;
  readonly task: ModelTask;
  readonly engine: ModelEngine;
  state: ModelState;
  /** Set when state is `ready`. */
  ready?: ReadyModel;
  /** Set when state is `failed`. */
  error?: SynapseError;
  /** Labelled as a test model (known from the source, or from config.json once loaded). */
  testModel: boolean;
  /** ms since the epoch when the first load started. */
  loadStartedMs: number;
  /** Load attempts so far. */
  loadAttempts: number;
  /** ms since the epoch of the last failed attempt. */
  failedAtMs?: number;
  /** ms since the epoch when the next background attempt is due (a transient failure). */
  retryAtMs?: number;
  /** Cold-load time of the successful attempt, ms. */
  coldLoadMs?: number;
  /**
   * `disabled` once `ModelRegistry.setQueryPath` turned the model's hot path off (its interactive
   * work then runs on its bulk runtime, so queries get the batch path's numbers).
   * @default "enabled"
   */
  queryPath?: QueryPath;
  /**
   * The probe's shape cap (`ModelRegistry.setShapeCap`): the most rows one engine call of the
   * model's lanes holds, so its calls stay in the shape class of a row alone. Undefined: the
   * engine's own limit.
   */
  shapeCap?: number;
}

/** Whether a model's interactive work runs on its interactive runtime (`enabled`) or its bulk one. */
export type QueryPath = "enabled" | "disabled";
