/**
 * Layered `synapse.jsonc` configuration (contract.md §9).
 *
 * Resolution, lowest precedence first:
 *
 * 1. one file: `SYNAPSE_CONFIG_PATH` (or the legacy `SYNAPSE_CONFIG` when that is unset), else the
 *    project file `<cwd>/.cortexkit/synapse.jsonc`, else the user file
 *    `<config_home>/cortexkit/synapse.jsonc`. When both the project and the user file exist, the
 *    project file wins, except that `remote_providers` and `decode_chain_k` come from the user
 *    file. `decode_chain_k` is user-only: a project file that sets it refuses boot;
 * 2. `SYNAPSE_CONFIG_JSON` (legacy): an inline JSON object layered on top (sections merge
 *    key by key; arrays and scalars replace);
 * 3. `SYNAPSE_PRELOAD_MODELS` (legacy): a JSON array that replaces `preload_models`.
 *
 * Every layer is validated strictly: a JSONC syntax error, an unknown key or a mistyped value
 * refuses boot with `invalid_request` naming the source and the key path.
 *
 * Key names stay snake_case as in the file: they leave TypeScript (units live in the names).
 *
 * @module
 */

import { z } from "zod";
import { parse as parseJsonc, type ParseError, printParseErrorCode } from "jsonc-parser";
import { join, resolve } from "node:path";
import { SynapseError } from "../contract/errors.ts";
import { configHome, envLookup, type EnvSource } from "../paths.ts";

/** Scheduler knob: how much of the machine Synapse may use. */
export type Knob = "performance" | "balanced" | "quiet";

/** Task of a preloaded model. */
export type PreloadTask = "embed" | "rerank" | "generate";

/** Pooling of a preloaded embedding model. */
export type PreloadPooling = "mean" | "cls" | "last_token";

/** One `preload_models[]` entry, with defaults applied and the engine name normalized. */
export interface PreloadModelConfig {
  /** Engine, normalized through {@link ENGINE_ALIASES} (`onnx` → `ort`, …). */
  engine: string;
  /** Path of the model artifact, as written in the config. */
  model_path: string;
  /** Path of the `tokenizer.json`, as written in the config. */
  tokenizer_path: string;
  /** Model id; catalog ids are reserved and refused. */
  model_id?: string;
  /** Named profile of the model. */
  profile?: string;
  /** Task. */
  task?: PreloadTask;
  /** Expected artifact digest (`sha256:<hex>`). */
  artifact_digest?: string;
  /** Artifact format, e.g. `onnx`, `gguf`. */
  format?: string;
  /** Path of the model's `config.json`. */
  config_path?: string;
  /** Upstream revision of the artifact. */
  revision?: string;
  /**
   * Pooling.
   *
   * @default {"mean"}
   */
  pooling: PreloadPooling;
  /**
   * L2-normalize vectors.
   *
   * @default {true}
   */
  normalize: boolean;
  /**
   * Most tokens per input.
   *
   * @default {512, or 8192 when `profile` is set}
   */
  max_tokens: number;
  /** Quantization, e.g. `q8_0`, `f16`. */
  quant?: string;
  /** Model family, e.g. `bert`. */
  family?: string;
  /** Compute dtype, e.g. `f16`. */
  dtype?: string;
  /** Execution provider or placement hint. */
  execution?: string;
  /** Worker binary override. */
  worker_bin?: string;
  /** Runtime directory of the worker's socket. */
  worker_runtime_dir?: string;
}

/** `worker` section. */
export interface WorkerConfig {
  /**
   * Worker model-load timeout, in milliseconds.
   *
   * @default {900000}
   */
  load_timeout_ms: number;
  /**
   * Worker start timeout, in milliseconds: how long a spawned worker may take to connect to its
   * socket, and then again to send HELLO. A loaded machine can need tens of seconds (F20; the
   * contract's 5 s failed workers at boot on a busy 2-core machine).
   *
   * @default {60000}
   */
  start_timeout_ms: number;
}

/** `log` section. */
export interface LogConfig {
  /**
   * Interval of perf log lines, in seconds; 0 disables them.
   *
   * @default {0}
   */
  perf_interval_secs: number;
  /**
   * Most worker log lines forwarded per second.
   *
   * @default {50}
   */
  worker_forward_lines_per_sec: number;
}

/** `inline` section: limits of inline (non-job) requests and their admission. */
export interface InlineConfig {
  /**
   * Most items served inline; larger batches become jobs.
   *
   * @default {64}
   */
  max_items: number;
  /**
   * Most aggregate tokens served inline.
   *
   * @default {8192}
   */
  max_tokens: number;
  /**
   * Admission byte budget (queued + in flight + request), in bytes.
   *
   * @default {67108864}
   */
  byte_budget: number;
  /**
   * Default longest predicted queue wait, in milliseconds.
   *
   * @default {5000}
   */
  max_queue_ms: number;
  /**
   * Default relative deadline, in milliseconds.
   *
   * @default {30000}
   */
  deadline_ms: number;
  /**
   * Estimated execution time used by admission, in milliseconds.
   *
   * @default {25}
   */
  estimated_execution_ms: number;
  /**
   * Execution permits (semaphore size).
   *
   * @default {2}
   */
  max_concurrent_workers: number;
}

/** `http` section: the HTTP front door (`ck-synapse serve --http`). */
export interface HttpConfig {
  /**
   * Largest request body the HTTP door reads, in bytes, counted while it streams in: past it
   * reading stops and the request is refused (413, `invalid_request` with
   * `{limit: "http.max_body_bytes", max, received_at_least}`). The default equals the wire
   * door's frame limit (subc.md: 64 MiB) and `inline.byte_budget`, so one request is accepted
   * or refused alike by both doors, and a file job of ~100 000 passages of 600 bytes fits in one
   * body; the door holds at most this much per request while it parses.
   *
   * @default {67108864}
   */
  max_body_bytes: number;
}

/** `tokenize` section: the tokenizer worker pool (lib/tokenize/tokenizer_pool.ts). */
export interface TokenizeConfig {
  /**
   * Tokenizer worker threads; 0 picks half the cores, at least 1, at most 4.
   *
   * @default {0}
   */
  workers: number;
  /**
   * A tokenizer call whose texts total at most this many UTF-16 code units runs on the calling
   * thread instead of a worker (measured: cheaper and faster for such calls).
   *
   * @default {256}
   */
  inline_max_chars: number;
}

/** `jobs` section. The older key `ttl_ms` sets all three TTLs. */
export interface JobsConfig {
  /**
   * How long a job may execute, in milliseconds.
   *
   * @default {86400000}
   */
  execution_ttl_ms: number;
  /**
   * How long results are kept after a job ends, in milliseconds.
   *
   * @default {86400000}
   */
  result_retention_ttl_ms: number;
  /**
   * How long a paused job may be resumed, in milliseconds.
   *
   * @default {86400000}
   */
  resume_deadline_ms: number;
  /**
   * Size of one result page, in bytes.
   *
   * @default {524288}
   */
  result_page_bytes: number;
  /**
   * Tokens per bulk quantum.
   *
   * @default {3072}
   */
  bulk_quantum_tokens: number;
}

/** `probe` section: certification thresholds, each in [0, 1]. */
export interface ProbeConfig {
  /**
   * Least mean cosine against the reference.
   *
   * @default {0.999}
   */
  mean_cosine_threshold: number;
  /**
   * Least worst-decile rank overlap.
   *
   * @default {0.9}
   */
  worst_decile_rank_overlap_threshold: number;
  /**
   * Least ANE placement share.
   *
   * @default {0.9}
   */
  ane_placement_threshold: number;
}

/** The resolved configuration: every key present, defaults applied. */
export interface SynapseConfig {
  /**
   * Scheduler knob.
   *
   * @default {"balanced"}
   */
  knob: Knob;
  /**
   * Most tokens `microllm.oneshot` may generate.
   *
   * @default {512}
   */
  microllm_max_tokens: number;
  /**
   * Allow grammar-constrained generation.
   *
   * @default {false}
   */
  grammar_enabled: boolean;
  /**
   * Decode chain length, 1..16; honoured only from the user config.
   *
   * @default {1}
   */
  decode_chain_k: number;
  /**
   * Model cache size cap, in bytes.
   *
   * @default {34359738368}
   */
  cache_max_bytes: number;
  /**
   * Allow `alias.declare` / `alias.retract`.
   *
   * @default {false}
   */
  alias_admin_enabled: boolean;
  /**
   * Serve `certify.observations`.
   *
   * @default {false}
   */
  certify_observation: boolean;
  /** Hugging Face endpoint override (absent: the public hub). */
  hf_endpoint?: string;
  /**
   * Sidecar specification, passed through unchecked.
   *
   * @default {{}}
   */
  sidecar_spec: Record<string, unknown>;
  /**
   * Remote providers (from the user config when a project config also exists).
   *
   * @default {[]}
   */
  remote_providers: Record<string, unknown>[];
  /** Worker settings. */
  worker: WorkerConfig;
  /** Log settings. */
  log: LogConfig;
  /** Inline request limits. */
  inline: InlineConfig;
  /** HTTP door settings. */
  http: HttpConfig;
  /** Tokenizer pool settings. */
  tokenize: TokenizeConfig;
  /** Job settings. */
  jobs: JobsConfig;
  /** Probe thresholds. */
  probe: ProbeConfig;
  /**
   * Models loaded at boot.
   *
   * @default {[]}
   */
  preload_models: PreloadModelConfig[];
}

/** Result of {@link loadConfig}. */
export interface LoadedConfig {
  /** The resolved configuration. */
  config: SynapseConfig;
  /**
   * Inputs that contributed, lowest precedence first: absolute file paths, then
   * `env:SYNAPSE_CONFIG_JSON` and `env:SYNAPSE_PRELOAD_MODELS`.
   */
  sources: string[];
}

/** Options of {@link loadConfig}. */
export interface LoadConfigOptions {
  /**
   * Environment source.
   *
   * @default {Deno.env.get}
   */
  env?: EnvSource;
  /**
   * Directory holding the project config (`.cortexkit/synapse.jsonc`); relative config paths are
   * resolved against it.
   *
   * @default {Deno.cwd()}
   */
  cwd?: string;
  /**
   * Reads a file as UTF-8, returning `undefined` when it does not exist (other failures throw).
   *
   * @default {Deno.readTextFileSync, with NotFound mapped to undefined}
   */
  readFile?: (path: string) => string | undefined;
  /**
   * OS whose config-home ladder to follow.
   *
   * @default {Deno.build.os}
   */
  os?: typeof Deno.build.os;
}

/**
 * Engine-name aliases accepted in `preload_models[].engine`, mapped to canonical names.
 */
export const ENGINE_ALIASES: Readonly<Record<string, string>> = Object.freeze({
  onnx: "ort",
  "llama.cpp": "llama",
  coreml: "ane",
  metal: "owned-metal",
  cuda: "owned-cuda",
  "owned-decode": "owned-metal-decode",
});

/** Model ids the catalog reserves (contract.md §10); a preload entry may not use them. */
export const CATALOG_RESERVED_MODEL_IDS: ReadonlySet<string> = new Set([
  "gte-modernbert-base",
  "gte-reranker-modernbert-base",
  "qwen3-embedding-0.6b",
  "qwen3-reranker-0.6b",
]);

/** The defaults of every key (contract.md §9); deeply frozen. */
export const DEFAULT_CONFIG: Readonly<SynapseConfig> = deepFreeze(
  {
    knob: "balanced",
    microllm_max_tokens: 512,
    grammar_enabled: false,
    decode_chain_k: 1,
    cache_max_bytes: 32 * 2 ** 30,
    alias_admin_enabled: false,
    certify_observation: false,
    sidecar_spec: {},
    remote_providers: [],
    worker: { load_timeout_ms: 900_000, start_timeout_ms: 60_000 },
    log: { perf_interval_secs: 0, worker_forward_lines_per_sec: 50 },
    inline: {
      max_items: 64,
      max_tokens: 8192,
      byte_budget: 64 * 2 ** 20,
      max_queue_ms: 5000,
      deadline_ms: 30_000,
      estimated_execution_ms: 25,
      max_concurrent_workers: 2,
    },
    http: { max_body_bytes: 64 * 2 ** 20 },
    tokenize: { workers: 0, inline_max_chars: 256 },
    jobs: {
      execution_ttl_ms: 86_400_000,
      result_retention_ttl_ms: 86_400_000,
      resume_deadline_ms: 86_400_000,
      result_page_bytes: 524_288,
      bulk_quantum_tokens: 3072,
    },
    probe: {
      mean_cosine_threshold: 0.999,
      worst_decile_rank_overlap_threshold: 0.9,
      ane_placement_threshold: 0.9,
    },
    preload_models: [],
  } satisfies SynapseConfig,
);

const positiveInt = z.int().positive();
const nonNegativeInt = z.int().nonnegative();
const unitInterval = z.number().min(0).max(1);
const nonEmpty = z.string().min(1);

const PreloadEntrySchema = z.strictObject({
  engine: nonEmpty,
  model_path: nonEmpty,
  tokenizer_path: nonEmpty,
  model_id: nonEmpty.optional(),
  profile: nonEmpty.optional(),
  task: z.enum(["embed", "rerank", "generate"]).optional(),
  artifact_digest: nonEmpty.optional(),
  format: nonEmpty.optional(),
  config_path: nonEmpty.optional(),
  revision: nonEmpty.optional(),
  pooling: z.enum(["mean", "cls", "last_token"]).optional(),
  normalize: z.boolean().optional(),
  max_tokens: positiveInt.optional(),
  quant: nonEmpty.optional(),
  family: nonEmpty.optional(),
  dtype: nonEmpty.optional(),
  execution: nonEmpty.optional(),
  worker_bin: nonEmpty.optional(),
  worker_runtime_dir: nonEmpty.optional(),
});

/** One layer as written: every key optional, alias keys accepted, unknown keys refused. */
const LayerSchema = z.strictObject({
  knob: z.enum(["performance", "balanced", "quiet"]).optional(),
  microllm_max_tokens: positiveInt.optional(),
  grammar_enabled: z.boolean().optional(),
  decode_chain_k: z.int().min(1).max(16).optional(),
  cache_max_bytes: nonNegativeInt.optional(),
  alias_admin_enabled: z.boolean().optional(),
  dev_alias_admin: z.boolean().optional(),
  dev: z.strictObject({ alias_admin_enabled: z.boolean().optional() }).optional(),
  certify_observation: z.boolean().optional(),
  hf_endpoint: nonEmpty.optional(),
  sidecar_spec: z.record(z.string(), z.unknown()).optional(),
  remote_providers: z.array(z.record(z.string(), z.unknown())).optional(),
  worker: z.strictObject({
    load_timeout_ms: positiveInt.optional(),
    start_timeout_ms: positiveInt.optional(),
  }).optional(),
  log: z.strictObject({
    perf_interval_secs: nonNegativeInt.optional(),
    worker_forward_lines_per_sec: nonNegativeInt.optional(),
  }).optional(),
  inline: z.strictObject({
    max_items: positiveInt.optional(),
    max_tokens: positiveInt.optional(),
    byte_budget: positiveInt.optional(),
    max_queue_ms: nonNegativeInt.optional(),
    deadline_ms: positiveInt.optional(),
    estimated_execution_ms: nonNegativeInt.optional(),
    max_concurrent_workers: positiveInt.optional(),
  }).optional(),
  http: z.strictObject({ max_body_bytes: positiveInt.optional() }).optional(),
  tokenize: z.strictObject({
    workers: nonNegativeInt.optional(),
    inline_max_chars: nonNegativeInt.optional(),
  }).optional(),
  jobs: z.strictObject({
    execution_ttl_ms: positiveInt.optional(),
    result_retention_ttl_ms: positiveInt.optional(),
    resume_deadline_ms: positiveInt.optional(),
    ttl_ms: positiveInt.optional(),
    result_page_bytes: positiveInt.optional(),
    bulk_quantum_tokens: positiveInt.optional(),
  }).optional(),
  probe: z.strictObject({
    mean_cosine_threshold: unitInterval.optional(),
    worst_decile_rank_overlap_threshold: unitInterval.optional(),
    ane_placement_threshold: unitInterval.optional(),
  }).optional(),
  preload_models: z.array(PreloadEntrySchema).optional(),
});

type LayerInput = z.infer<typeof LayerSchema>;
type PreloadEntryInput = z.infer<typeof PreloadEntrySchema>;

/** One layer in canonical form: aliases resolved, preload defaults applied. */
interface ConfigLayer {
  knob?: Knob;
  microllm_max_tokens?: number;
  grammar_enabled?: boolean;
  decode_chain_k?: number;
  cache_max_bytes?: number;
  alias_admin_enabled?: boolean;
  certify_observation?: boolean;
  hf_endpoint?: string;
  sidecar_spec?: Record<string, unknown>;
  remote_providers?: Record<string, unknown>[];
  worker?: Partial<WorkerConfig>;
  log?: Partial<LogConfig>;
  inline?: Partial<InlineConfig>;
  http?: Partial<HttpConfig>;
  tokenize?: Partial<TokenizeConfig>;
  jobs?: Partial<JobsConfig>;
  probe?: Partial<ProbeConfig>;
  preload_models?: PreloadModelConfig[];
}

const USER_ONLY_KEYS = ["decode_chain_k"] as const;
const ENV_CONFIG_JSON = "env:SYNAPSE_CONFIG_JSON";
const ENV_PRELOAD_MODELS = "env:SYNAPSE_PRELOAD_MODELS";

/**
 * Maps an engine name through {@link ENGINE_ALIASES}; canonical and unknown names pass through.
 *
 * @param name Engine name as written.
 * @returns The canonical engine name.
 */
export function normalizeEngineName(name: string): string {
  return Object.hasOwn(ENGINE_ALIASES, name) ? ENGINE_ALIASES[name] as string : name;
}

/**
 * Loads the layered configuration (see the module docs for the resolution order).
 *
 * @param options Environment, project directory, file reader and OS.
 * @returns The resolved configuration and the inputs it came from.
 * @throws {SynapseError} Code `invalid_request` when boot must be refused: a config file named by
 * `SYNAPSE_CONFIG_PATH`/`SYNAPSE_CONFIG` is missing or unreadable, a JSONC syntax error (details
 * `{file, line, column, offset}`), an unknown or mistyped key (details `{file, key}` with a key
 * path such as `inline.max_items` or `preload_models[0].engine`), `decode_chain_k` in a project
 * file, or a catalog-reserved `model_id` in `preload_models`.
 *
 * @example Defaults when nothing is configured
 * ```ts
 * import { loadConfig } from "./config.ts";
 * import assert from "node:assert";
 *
 * const { config, sources } = loadConfig({ env: {}, cwd: "/nowhere", readFile: () => undefined });
 * assert.strictEqual(config.knob, "balanced");
 * assert.deepStrictEqual(sources, []);
 * ```
 */
export function loadConfig(options: LoadConfigOptions = {}): LoadedConfig {
  const get = envLookup(options.env);
  const cwd = options.cwd ?? Deno.cwd();
  const readFile = options.readFile ?? readTextFileIfExists;
  const sources: string[] = [];
  let layer: ConfigLayer = {};

  const explicit = get("SYNAPSE_CONFIG_PATH") ?? get("SYNAPSE_CONFIG");
  if (explicit !== undefined) {
    const path = resolve(cwd, explicit);
    const text = readConfigFile(readFile, path);
    if (text === undefined) {
      throw configError(path, "", "file not found");
    }
    layer = parseLayer(text, path, { userOnlyAllowed: true });
    sources.push(path);
  } else {
    const projectPath = resolve(cwd, ".cortexkit", "synapse.jsonc");
    const userPath = resolve(
      cwd,
      join(configHome(options.env, { os: options.os }), "cortexkit"),
      "synapse.jsonc",
    );
    const projectText = readConfigFile(readFile, projectPath);
    const userText = readConfigFile(readFile, userPath);
    const user = userText === undefined
      ? undefined
      : parseLayer(userText, userPath, { userOnlyAllowed: true });
    const project = projectText === undefined
      ? undefined
      : parseLayer(projectText, projectPath, { userOnlyAllowed: false, userPath });
    if (user !== undefined) sources.push(userPath);
    if (project !== undefined) sources.push(projectPath);
    if (project !== undefined) {
      layer = project;
      if (user !== undefined) {
        delete layer.remote_providers;
        if (user.remote_providers !== undefined) layer.remote_providers = user.remote_providers;
        if (user.decode_chain_k !== undefined) layer.decode_chain_k = user.decode_chain_k;
      }
    } else if (user !== undefined) {
      layer = user;
    }
  }

  const configJson = get("SYNAPSE_CONFIG_JSON");
  if (configJson !== undefined) {
    layer = mergeLayers(layer, parseLayer(configJson, ENV_CONFIG_JSON, { userOnlyAllowed: true }));
    sources.push(ENV_CONFIG_JSON);
  }

  const preloadJson = get("SYNAPSE_PRELOAD_MODELS");
  if (preloadJson !== undefined) {
    const value = parseJsoncText(preloadJson, ENV_PRELOAD_MODELS);
    if (!Array.isArray(value)) {
      throw configError(
        ENV_PRELOAD_MODELS,
        "preload_models",
        `expected a JSON array, received ${kindOf(value)}`,
      );
    }
    const parsed = validateLayer({ preload_models: value }, ENV_PRELOAD_MODELS);
    layer = mergeLayers(layer, canonicalLayer(parsed, ENV_PRELOAD_MODELS));
    sources.push(ENV_PRELOAD_MODELS);
  }

  return { config: resolveConfig(layer), sources };
}

function readConfigFile(
  readFile: (path: string) => string | undefined,
  path: string,
): string | undefined {
  try {
    return readFile(path);
  } catch (err) {
    const reason = err instanceof Error ? err.message : String(err);
    throw new SynapseError("invalid_request", `Cannot load config ${path}: ${reason}`, {
      details: { file: path },
      cause: err,
    });
  }
}

function readTextFileIfExists(path: string): string | undefined {
  try {
    return Deno.readTextFileSync(path);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return undefined;
    throw err;
  }
}

interface ParseLayerOptions {
  /** May the layer set user-only keys? */
  userOnlyAllowed: boolean;
  /** Where user-only keys belong, for the refusal message. */
  userPath?: string;
}

function parseLayer(text: string, source: string, options: ParseLayerOptions): ConfigLayer {
  const value = parseJsoncText(text, source);
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw configError(
      source,
      "",
      `expected a JSON object at the top level, received ${kindOf(value)}`,
    );
  }
  if (!options.userOnlyAllowed) {
    for (const key of USER_ONLY_KEYS) {
      if (Object.hasOwn(value, key)) {
        const where = options.userPath === undefined ? "the user config" : options.userPath;
        throw configError(
          source,
          key,
          `'${key}' is honoured only from the user config; move it to ${where}`,
        );
      }
    }
  }
  return canonicalLayer(validateLayer(value, source), source);
}

function parseJsoncText(text: string, source: string): unknown {
  const errors: ParseError[] = [];
  const body = text.startsWith("\uFEFF") ? text.slice(1) : text;
  const value: unknown = parseJsonc(body, errors, {
    allowTrailingComma: true,
    disallowComments: false,
  });
  const first = errors[0];
  if (first !== undefined) {
    const { line, column } = lineColumn(body, first.offset);
    throw new SynapseError(
      "invalid_request",
      `Cannot load config ${source}: JSONC syntax error ${
        printParseErrorCode(first.error)
      } at line ${line}, column ${column} (offset ${first.offset})`,
      { details: { file: source, line, column, offset: first.offset } },
    );
  }
  return value;
}

function lineColumn(text: string, offset: number): { line: number; column: number } {
  let line = 1;
  let lineStart = 0;
  for (let i = 0; i < offset && i < text.length; i++) {
    if (text.charCodeAt(i) === 10) {
      line++;
      lineStart = i + 1;
    }
  }
  return { line, column: offset - lineStart + 1 };
}

function validateLayer(value: unknown, source: string): LayerInput {
  const result = LayerSchema.safeParse(value);
  if (result.success) return result.data;
  const issues = result.error.issues;
  const unknown = issues.find((issue) => issue.code === "unrecognized_keys");
  if (unknown !== undefined && unknown.code === "unrecognized_keys") {
    const key = formatKeyPath([...unknown.path, unknown.keys[0] ?? ""]);
    throw configError(source, key, `unknown key '${key}'`);
  }
  const issue = issues[0];
  if (issue === undefined) {
    throw new Error("Config validation failed without an issue. This is a bug");
  }
  const key = formatKeyPath(issue.path);
  throw configError(source, key, `invalid value for '${key}': ${issue.message}`);
}

function canonicalLayer(input: LayerInput, source: string): ConfigLayer {
  const { dev_alias_admin, dev, jobs, preload_models, ...rest } = input;
  const layer: ConfigLayer = dropUndefined(rest);
  const aliasAdmin = rest.alias_admin_enabled ?? dev?.alias_admin_enabled ?? dev_alias_admin;
  if (aliasAdmin !== undefined) layer.alias_admin_enabled = aliasAdmin;
  if (jobs !== undefined) {
    const { ttl_ms, ...named } = jobs;
    layer.jobs = dropUndefined({
      ...named,
      execution_ttl_ms: named.execution_ttl_ms ?? ttl_ms,
      result_retention_ttl_ms: named.result_retention_ttl_ms ?? ttl_ms,
      resume_deadline_ms: named.resume_deadline_ms ?? ttl_ms,
    });
  }
  if (preload_models !== undefined) {
    layer.preload_models = preload_models.map((entry, i) => preloadEntry(entry, i, source));
  }
  return layer;
}

function preloadEntry(entry: PreloadEntryInput, index: number, source: string): PreloadModelConfig {
  if (entry.model_id !== undefined && CATALOG_RESERVED_MODEL_IDS.has(entry.model_id)) {
    const key = `preload_models[${index}].model_id`;
    throw configError(
      source,
      key,
      `'${key}' is '${entry.model_id}', an id reserved for the catalog; choose another model_id`,
      { model_id: entry.model_id },
    );
  }
  return dropUndefined({
    ...entry,
    engine: normalizeEngineName(entry.engine),
    pooling: entry.pooling ?? "mean",
    normalize: entry.normalize ?? true,
    max_tokens: entry.max_tokens ?? (entry.profile === undefined ? 512 : 8192),
  });
}

function mergeLayers(base: ConfigLayer, top: ConfigLayer): ConfigLayer {
  const merged: ConfigLayer = { ...base, ...top };
  if (base.worker !== undefined && top.worker !== undefined) {
    merged.worker = { ...base.worker, ...top.worker };
  }
  if (base.log !== undefined && top.log !== undefined) merged.log = { ...base.log, ...top.log };
  if (base.inline !== undefined && top.inline !== undefined) {
    merged.inline = { ...base.inline, ...top.inline };
  }
  if (base.http !== undefined && top.http !== undefined) {
    merged.http = { ...base.http, ...top.http };
  }
  if (base.tokenize !== undefined && top.tokenize !== undefined) {
    merged.tokenize = { ...base.tokenize, ...top.tokenize };
  }
  if (base.jobs !== undefined && top.jobs !== undefined) {
    merged.jobs = { ...base.jobs, ...top.jobs };
  }
  if (base.probe !== undefined && top.probe !== undefined) {
    merged.probe = { ...base.probe, ...top.probe };
  }
  return merged;
}

function resolveConfig(layer: ConfigLayer): SynapseConfig {
  const d = DEFAULT_CONFIG;
  const config: SynapseConfig = {
    knob: layer.knob ?? d.knob,
    microllm_max_tokens: layer.microllm_max_tokens ?? d.microllm_max_tokens,
    grammar_enabled: layer.grammar_enabled ?? d.grammar_enabled,
    decode_chain_k: layer.decode_chain_k ?? d.decode_chain_k,
    cache_max_bytes: layer.cache_max_bytes ?? d.cache_max_bytes,
    alias_admin_enabled: layer.alias_admin_enabled ?? d.alias_admin_enabled,
    certify_observation: layer.certify_observation ?? d.certify_observation,
    sidecar_spec: structuredClone(layer.sidecar_spec ?? {}),
    remote_providers: structuredClone(layer.remote_providers ?? []),
    worker: { ...d.worker, ...layer.worker },
    log: { ...d.log, ...layer.log },
    inline: { ...d.inline, ...layer.inline },
    http: { ...d.http, ...layer.http },
    tokenize: { ...d.tokenize, ...layer.tokenize },
    jobs: { ...d.jobs, ...layer.jobs },
    probe: { ...d.probe, ...layer.probe },
    preload_models: (layer.preload_models ?? []).map((entry) => ({ ...entry })),
  };
  if (layer.hf_endpoint !== undefined) config.hf_endpoint = layer.hf_endpoint;
  return config;
}

function configError(
  source: string,
  key: string,
  reason: string,
  extra: Record<string, unknown> = {},
): SynapseError {
  return new SynapseError("invalid_request", `Cannot load config ${source}: ${reason}`, {
    details: { file: source, key, ...extra },
  });
}

function formatKeyPath(path: readonly PropertyKey[]): string {
  let out = "";
  for (const segment of path) {
    if (typeof segment === "number") out += `[${segment}]`;
    else out += out === "" ? String(segment) : `.${String(segment)}`;
  }
  return out;
}

function kindOf(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  return typeof value === "object" ? "an object" : `a ${typeof value}`;
}

function dropUndefined<T extends object>(value: T): T {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) if (v !== undefined) out[k] = v;
  return out as T;
}

function deepFreeze<T>(value: T): T {
  if (typeof value === "object" && value !== null) {
    for (const child of Object.values(value)) deepFreeze(child);
    Object.freeze(value);
  }
  return value;
}
