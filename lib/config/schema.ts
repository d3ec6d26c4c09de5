/**
 * The shape of `synapse.jsonc` (docs/config.md), written once as zod schemas: the resolved
 * configuration ({@link SynapseConfigSchema}: every key present) and, derived from it, one layer
 * as written ({@link LayerSchema}: every key optional, alias keys accepted). Both are strict: an
 * unknown key is an issue. The TypeScript types are inferred from these schemas (`types.ts`);
 * the defaults are in `defaults.ts`, and the `@default` of each field below names them.
 *
 * Key names stay snake_case as in the file: they leave TypeScript (units live in the names).
 *
 * @module
 */

import { z } from "zod";
import { ILL_FORMED, NAME_MAX_CHARS } from "../contract/schemas.ts";
import { RemoteProviderSchema } from "./remote_providers.ts";

const positiveInt = z.int().positive();
const nonNegativeInt = z.int().nonnegative();
const unitInterval = z.number().min(0).max(1);
const nonEmpty = z.string().min(1);

/** Scheduler knob: how much of the machine Synapse may use. */
export const KnobSchema = z.enum(["performance", "balanced", "quiet"]);

/** Config `certification`: serving admission of lanes without a certificate. */
export const CertificationModeSchema = z.enum(["require", "warn"]);

/** Task of a preloaded model. */
export const PreloadTaskSchema = z.enum(["embed", "rerank", "generate"]);

/** Pooling of a preloaded embedding model. */
export const PreloadPoolingSchema = z.enum(["mean", "cls", "last_token"]);

/** One `preload_models[]` entry, with defaults applied and the engine name normalized. */
export const PreloadModelConfigSchema = z.strictObject({
  /** Engine, normalized through `ENGINE_ALIASES` (`onnx` → `ort`, …). */
  engine: nonEmpty,
  /** Path of the model artifact, as written in the config. Required for every engine but `remote`. */
  model_path: nonEmpty.optional(),
  /** Engine `remote`: the id of the `remote_providers` entry that serves the model. */
  provider: nonEmpty.optional(),
  /** Engine `remote`: the model's name at the provider (its `model` field, or TEI's one model). */
  model: nonEmpty.max(256).optional(),
  /**
   * Engine `remote`, task `embed`: the vectors' width; checked against the provider's answers at
   * load (another width fails the model with `provider_protocol_violation`). Absent: learnt then.
   */
  dims: positiveInt.max(65536).optional(),
  /**
   * Path of the `tokenizer.json`, as written in the config. Required for every engine but
   * `llama` (checked when the layer is made canonical); a GGUF without one uses the
   * `tokenizer.json` beside it when there is one, else a tokenizer built from its own vocabulary.
   */
  tokenizer_path: nonEmpty.optional(),
  /** Model id; catalog ids are reserved and refused. */
  model_id: nonEmpty.optional(),
  /** Named profile of the model. */
  profile: nonEmpty.optional(),
  /** Task. */
  task: PreloadTaskSchema.optional(),
  /** Expected artifact digest (`sha256:<hex>`). */
  artifact_digest: nonEmpty.optional(),
  /** Artifact format: the engine's own (`onnx` for `ort`, `gguf` for `llama`), else boot refuses. */
  format: nonEmpty.optional(),
  /** Path of the model's `config.json`. */
  config_path: nonEmpty.optional(),
  /**
   * Upstream revision: refused at boot on a local lane (a preloaded model is the files at
   * `model_path`; pin a download with `model.load {source: "hf", repo, revision}`). Engine
   * `remote`: a label of the operator's that enters the fingerprint; change it to serve a provider
   * whose numbers moved (its canary says `remote_identity_drift`) as a new vector space.
   */
  revision: nonEmpty.max(128).optional(),
  /**
   * Engine `remote`: the canary (docs/remote.md "Canary"): `interval_ms` between checks (0: only
   * at load; default 300000), `min_cosine` the embedding bar per input (default 0.9999).
   */
  canary: z.strictObject({
    interval_ms: nonNegativeInt.optional(),
    min_cosine: z.number().gt(0).lte(1).optional(),
  }).optional(),
  /**
   * Pooling.
   *
   * @default {"mean"}
   */
  pooling: PreloadPoolingSchema,
  /**
   * L2-normalize vectors.
   *
   * @default {true}
   */
  normalize: z.boolean(),
  /**
   * Most tokens per input. Absent: 512, or 8192 when `profile` is set (the preload default), or
   * the model's own limit where that is smaller (an ONNX model's `max_position_embeddings`, a
   * GGUF lane's context) — a default never makes a model fail to load. A value given here above
   * the model's limit refuses the load (`artifact_invalid`).
   */
  max_tokens: positiveInt.optional(),
  /**
   * Quantization the lane serves, e.g. `q8_0`, `f16`, `int8`: checked at load against the file (an
   * ONNX model's weight dtype, or `int8` for one with integer MatMuls; a GGUF's
   * `general.file_type`); another value fails the model.
   */
  quant: nonEmpty.optional(),
  /**
   * Model family, e.g. `bert`: checked at load against the architecture the files name
   * (`config.json` `model_type`, GGUF `general.architecture`); another value fails the model.
   */
  family: nonEmpty.optional(),
  /**
   * Storage dtype of the weights, e.g. `f16`: checked against the model file at load (an ONNX
   * model's initializers, a GGUF's tensors); a different value refuses the load.
   */
  dtype: nonEmpty.optional(),
  /**
   * Model id of the reference lane with the same weights (an ORT fp32 model): the probe checks
   * this model's parity against it, and the lane needs a certificate. Never the model's own id.
   */
  reference_model: nonEmpty.optional(),
  /**
   * Prompt table of an embed model: prompt name → the prefix put before each text
   * (`{query: "query: ", passage: "passage: "}`); part of the numeric profile. Absent: the
   * model directory's `config_sentence_transformers.json` `prompts`, when there is one.
   */
  prompts: z.record(z.string(), z.string()).optional(),
  /** The prompt applied when a request selects none; must name one of `prompts`. */
  default_prompt_name: nonEmpty.optional(),
  /**
   * Matryoshka widths the model was trained to be cut to, e.g. `[64, 128, 256, 512, 768]`:
   * strictly ascending positive integers, each at most the model's width (checked at load; embed
   * models only). A request's `dimensions` may then name one: the vectors are the first `n`
   * values, L2-normalised when the model normalises, under a derived fingerprint. Absent: only
   * the full width is served.
   */
  matryoshka_dims: z.array(positiveInt).min(1).max(64).optional(),
  /** Where the lanes run: only `cpu` in this build; another value refuses boot. */
  execution: nonEmpty.optional(),
  /**
   * Engine `ffi` only: the native shim that serves the model: `llama` (the llama shim,
   * `libsynapse_llama`, for GGUF files) or `cuda` (the GPU shim of issue 23's plan; this build
   * has none: such a model fails to load with `backend_unavailable`, reason `no_cuda_device` on
   * a machine without an NVIDIA device, else `shim_missing`).
   *
   * @default {"llama"}
   */
  shim: z.enum(["llama", "cuda"]).optional(),
  /**
   * Engine `ffi`, task `rerank`: `rank` (the GGUF's classification head, a cross-encoder) or
   * `yes_no` (logit("yes") − logit("no") at the last token, a causal-LM reranker).
   *
   * @default {"rank"}
   */
  readout: z.enum(["rank", "yes_no"]).optional(),
  /**
   * Engine `ffi`, task `rerank`: the prompt template a causal-LM reranker scores a pair in, with
   * `{query}` before `{document}`, once each (Qwen3-Reranker's is in docs/config.md). Overrides
   * the GGUF's `tokenizer.chat_template.rerank`; needed for a yes/no reranker GGUF without one.
   */
  rerank_template: nonEmpty.optional(),
  /** Worker binary override. */
  worker_bin: nonEmpty.optional(),
  /** Runtime directory of the worker's socket. */
  worker_runtime_dir: nonEmpty.optional(),
});

/**
 * `model_aliases`: a model name a client sends (`text-embedding-3-small`, the default of many
 * frameworks) → the id of a model this service serves. Each name and target is 1 to
 * {@link NAME_MAX_CHARS} UTF-16 code units of well-formed Unicode (no lone surrogate), the length
 * a request's `model` may have. A name never maps to itself, and aliases do not chain: a target
 * that is itself a name of the table is refused, naming the key. Whether names shadow a served
 * model id and whether each target is served is checked at boot, against the configured models
 * (lib/models/model_aliases.ts).
 */
export const ModelAliasesSchema = z.record(z.string(), z.string()).superRefine((table, ctx) => {
  for (const [name, target] of Object.entries(table)) {
    const named = checkAliasName(name);
    if (named !== undefined) {
      // A malformed name is named by the table (never echoed: it may not be valid Unicode).
      ctx.addIssue({ code: "custom", message: `has a name that ${named}` });
      return;
    }
    const bad = checkAliasName(target);
    if (bad !== undefined) {
      ctx.addIssue({ code: "custom", message: `its target ${bad}`, path: [name] });
      return;
    }
    if (target === name) {
      ctx.addIssue({ code: "custom", message: "maps the name to itself", path: [name] });
      return;
    }
    if (Object.hasOwn(table, target)) {
      ctx.addIssue({
        code: "custom",
        message:
          `its target '${target}' is itself a model alias, and aliases do not chain; map '${name}' to a model id`,
        path: [name],
      });
      return;
    }
  }
});

/** Why a model alias name or target is malformed, or undefined when it is well formed. */
function checkAliasName(s: string): string | undefined {
  if (s.length === 0) return "is empty";
  if (s.length > NAME_MAX_CHARS) return `is longer than ${NAME_MAX_CHARS} UTF-16 code units`;
  if (!s.isWellFormed()) return ILL_FORMED;
  return undefined;
}

/** `worker` section. */
export const WorkerConfigSchema = z.strictObject({
  /**
   * Worker model-load timeout, in milliseconds.
   *
   * @default {900000}
   */
  load_timeout_ms: positiveInt,
  /**
   * Worker start timeout, in milliseconds: how long a spawned worker may take to connect to its
   * socket, and then again to send HELLO. A loaded machine can need tens of seconds (F20; the
   * contract's 5 s failed workers at boot on a busy 2-core machine).
   *
   * @default {60000}
   */
  start_timeout_ms: positiveInt,
  /**
   * CANCEL grace, in milliseconds: how long a worker has to answer a request after its CANCEL
   * (a deadline that passed, a caller that hung up). A live worker answers within one token or
   * item; one that does not (stopped, wedged) is killed then, the request answers its deadline
   * or cancel, and the model's worker restarts within its crash budget.
   *
   * @default {5000}
   */
  cancel_grace_ms: positiveInt,
});

/** `log` section. */
export const LogConfigSchema = z.strictObject({
  /**
   * Interval of perf log lines, in seconds; 0 disables them.
   *
   * @default {0}
   */
  perf_interval_secs: nonNegativeInt,
  /**
   * Most worker log lines forwarded per second.
   *
   * @default {50}
   */
  worker_forward_lines_per_sec: nonNegativeInt,
});

/** `inline` section: limits of inline (non-job) requests and their admission. */
export const InlineConfigSchema = z.strictObject({
  /**
   * Most items served inline; larger batches become jobs.
   *
   * @default {64}
   */
  max_items: positiveInt,
  /**
   * Most aggregate tokens served inline.
   *
   * @default {8192}
   */
  max_tokens: positiveInt,
  /**
   * Admission byte budget (queued + in flight + request), in bytes.
   *
   * @default {67108864}
   */
  byte_budget: positiveInt,
  /**
   * Default longest predicted queue wait, in milliseconds.
   *
   * @default {5000}
   */
  max_queue_ms: nonNegativeInt,
  /**
   * Default relative deadline, in milliseconds.
   *
   * @default {30000}
   */
  deadline_ms: positiveInt,
  /**
   * Estimated execution time used by admission, in milliseconds.
   *
   * @default {25}
   */
  estimated_execution_ms: nonNegativeInt,
  /**
   * Execution permits (semaphore size).
   *
   * @default {2}
   */
  max_concurrent_workers: positiveInt,
});

/** `http` section: the HTTP front door (`ck-synapse serve --http`). */
export const HttpConfigSchema = z.strictObject({
  /**
   * Largest request body the HTTP door reads, in bytes, counted while it streams in: past it
   * reading stops and the request is refused (413, `invalid_request` with
   * `{limit: "http.max_body_bytes", max, received_at_least}`). The default equals the wire
   * door's frame limit (64 MiB; docs/internals.md "subc wire") and `inline.byte_budget`, so one
   * request is accepted or refused alike by both doors, and a file job of ~100 000 passages of 600
   * bytes fits in one body; the door holds at most this much per request while it parses.
   *
   * @default {67108864}
   */
  max_body_bytes: positiveInt,
  /**
   * Ask the owner's local key (lib/doors/http/owner_key.ts) for every request of the HTTP door, not
   * only for the mutating operations: embeddings, rerank, generation, `/v1/models`, `/health`
   * and `/metrics` too. Off by default (a query changes nothing another caller sees); turn it on
   * when other local users must not use or observe the service. The unix socket door
   * (`serve --http unix:PATH`, 0600) needs no key either way.
   *
   * @default {false}
   */
  require_key_for_queries: z.boolean(),
  /**
   * Longest a request head may take to arrive, in milliseconds, from its first byte (or, for the
   * first request of a connection, from the connection's start); past it the door answers 408
   * and closes the connection (a client sending headers a byte a second is dropped).
   *
   * @default {10000}
   */
  header_timeout_ms: positiveInt,
  /**
   * Longest a request body may stall, in milliseconds: the gap between two of its bytes; past it
   * the connection is closed and the request dropped.
   *
   * @default {30000}
   */
  body_timeout_ms: positiveInt,
  /**
   * Longest a kept-alive connection may sit idle between requests, in milliseconds (every answer
   * sent, no next request begun); past it the connection is closed.
   *
   * @default {30000}
   */
  idle_timeout_ms: positiveInt,
});

/** `tokenize` section: the tokenizer worker pool (lib/tokenize/tokenizer_pool.ts). */
export const TokenizeConfigSchema = z.strictObject({
  /**
   * Tokenizer worker threads; 0 picks half the cores, at least 1, at most 4.
   *
   * @default {0}
   */
  workers: nonNegativeInt,
  /**
   * A tokenizer call whose texts total at most this many UTF-16 code units runs on the calling
   * thread instead of a worker (measured: cheaper and faster for such calls).
   *
   * @default {256}
   */
  inline_max_chars: nonNegativeInt,
});

/** `jobs` section. In a layer, the older key `ttl_ms` sets all three TTLs. */
export const JobsConfigSchema = z.strictObject({
  /**
   * How long a job may execute, in milliseconds.
   *
   * @default {86400000}
   */
  execution_ttl_ms: positiveInt,
  /**
   * How long results are kept after a job ends, in milliseconds.
   *
   * @default {86400000}
   */
  result_retention_ttl_ms: positiveInt,
  /**
   * How long a paused job may be resumed, in milliseconds.
   *
   * @default {86400000}
   */
  resume_deadline_ms: positiveInt,
  /**
   * Size of one result page, in bytes.
   *
   * @default {524288}
   */
  result_page_bytes: positiveInt,
  /**
   * Tokens per bulk quantum.
   *
   * @default {3072}
   */
  bulk_quantum_tokens: positiveInt,
});

/** `probe` section: certification thresholds, each in [0, 1]. */
export const ProbeConfigSchema = z.strictObject({
  /**
   * Least mean cosine against the reference.
   *
   * @default {0.999}
   */
  mean_cosine_threshold: unitInterval,
  /**
   * Least worst-decile rank overlap.
   *
   * @default {0.9}
   */
  worst_decile_rank_overlap_threshold: unitInterval,
  /**
   * Least ANE placement share. macOS only; this build places no work on an ANE, so only the
   * default is accepted (`unserved.ts`).
   *
   * @default {0.9}
   */
  ane_placement_threshold: unitInterval,
});

/** The resolved configuration: every key present, defaults applied. */
export const SynapseConfigSchema = z.strictObject({
  /**
   * Scheduler knob.
   *
   * @default {"balanced"}
   */
  knob: KnobSchema,
  /**
   * Most tokens `microllm.oneshot` may generate.
   *
   * @default {512}
   */
  microllm_max_tokens: positiveInt,
  /**
   * Allow grammar-constrained generation.
   *
   * @default {false}
   */
  grammar_enabled: z.boolean(),
  /**
   * Decode chain length, 1..16; honoured only from the user config. It chains the owned Metal
   * decoder, not in this build: only the default is accepted (`unserved.ts`).
   *
   * @default {1}
   */
  decode_chain_k: z.int().min(1).max(16),
  /**
   * Model cache size cap, in bytes.
   *
   * @default {34359738368}
   */
  cache_max_bytes: nonNegativeInt,
  /**
   * Allow `alias.declare` / `alias.retract` (lib/ops/aliases.ts); off, they refuse
   * `invalid_request` `{reason: "alias_admin_disabled"}`. Probe-measured aliases need no setting.
   *
   * @default {false}
   */
  alias_admin_enabled: z.boolean(),
  /**
   * Serve `certify.observations` (not in this build: only the default is accepted,
   * `unserved.ts`).
   *
   * @default {false}
   */
  certify_observation: z.boolean(),
  /**
   * Serving admission of lanes that need a certificate (docs/internals.md §12): `require` refuses
   * `not_certified` until `ck-synapse probe run` certified the lane on this machine profile;
   * `warn` serves, and every answer says `provenance.certified: false`.
   *
   * @default {"require"}
   */
  certification: CertificationModeSchema,
  /** Hugging Face endpoint override (absent: the public hub). */
  hf_endpoint: nonEmpty.optional(),
  /**
   * Sidecar specification (no sidecar in this build: only the default is accepted,
   * `unserved.ts`).
   *
   * @default {{}}
   */
  sidecar_spec: z.record(z.string(), z.unknown()),
  /**
   * Remote providers (from the user config when a project config also exists): the inference
   * servers remote lanes send work to (lib/engines/remote/provider_config.ts; docs/remote.md).
   * Ids are unique.
   *
   * @default {[]}
   */
  remote_providers: z.array(RemoteProviderSchema).max(64).superRefine((list, ctx) => {
    const seen = new Set<string>();
    list.forEach((p, i) => {
      if (seen.has(p.id)) {
        ctx.addIssue({ code: "custom", message: `repeats provider id '${p.id}'`, path: [i, "id"] });
      }
      seen.add(p.id);
    });
  }),
  /**
   * Model names clients default to, mapped onto served model ids (`{"text-embedding-3-small":
   * "minilm"}`): a request naming an alias is served by its target, and the answer names both
   * ({@link ModelAliasesSchema}; docs/config.md "Model aliases").
   *
   * @default {{}}
   */
  model_aliases: ModelAliasesSchema,
  /** Worker settings. */
  worker: WorkerConfigSchema,
  /** Log settings. */
  log: LogConfigSchema,
  /** Inline request limits. */
  inline: InlineConfigSchema,
  /** HTTP door settings. */
  http: HttpConfigSchema,
  /** Tokenizer pool settings. */
  tokenize: TokenizeConfigSchema,
  /** Job settings. */
  jobs: JobsConfigSchema,
  /** Probe thresholds. */
  probe: ProbeConfigSchema,
  /**
   * Models loaded at boot.
   *
   * @default {[]}
   */
  preload_models: z.array(PreloadModelConfigSchema),
});

/** One `preload_models[]` entry as written: the keys that have defaults are optional. */
export const PreloadEntrySchema = PreloadModelConfigSchema.partial({
  pooling: true,
  normalize: true,
});

/**
 * One layer as written: every key optional, sections partial, alias keys accepted
 * (`dev_alias_admin` and `dev.alias_admin_enabled` for `alias_admin_enabled`, `jobs.ttl_ms` for
 * the three job TTLs), unknown keys refused. Alias keys sit right after the key they alias:
 * zod reports issues in shape order, and the loader names the first.
 */
export const LayerSchema = z.strictObject(
  insertAfter(
    {
      ...SynapseConfigSchema.shape,
      worker: WorkerConfigSchema.partial(),
      log: LogConfigSchema.partial(),
      inline: InlineConfigSchema.partial(),
      http: HttpConfigSchema.partial(),
      tokenize: TokenizeConfigSchema.partial(),
      jobs: z.strictObject(
        insertAfter(JobsConfigSchema.shape, "resume_deadline_ms", { ttl_ms: positiveInt }),
      ).partial(),
      probe: ProbeConfigSchema.partial(),
      preload_models: z.array(PreloadEntrySchema),
    },
    "alias_admin_enabled",
    {
      dev_alias_admin: z.boolean(),
      dev: z.strictObject({ alias_admin_enabled: z.boolean().optional() }),
    },
  ),
).partial();

/** A layer as {@link LayerSchema} parsed it (alias keys not yet resolved). */
export type LayerInput = z.infer<typeof LayerSchema>;

/** A `preload_models[]` entry as {@link PreloadEntrySchema} parsed it (no defaults applied). */
export type PreloadEntryInput = z.infer<typeof PreloadEntrySchema>;

/** `shape` with the keys of `extra` inserted right after `key`, keeping the order otherwise. */
function insertAfter<S extends z.ZodRawShape, E extends z.ZodRawShape>(
  shape: S,
  key: keyof S & string,
  extra: E,
): S & E {
  const out: Record<string, unknown> = {};
  for (const [k, schema] of Object.entries(shape)) {
    out[k] = schema;
    if (k === key) Object.assign(out, extra);
  }
  return out as S & E;
}
