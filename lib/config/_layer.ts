/**
 * One configuration layer: parsed from JSONC text, validated against {@link LayerSchema},
 * brought to canonical form (aliases resolved, preload defaults applied), merged over a lower
 * layer, and finally resolved over the defaults. Private to `lib/config/`: the loader decides
 * which layers there are.
 *
 * @module
 */

import { lineColumn } from "../line_column.ts";
import { type Node, type ParseError, parseTree, printParseErrorCode } from "jsonc-parser";
import { SynapseError } from "../contract/errors.ts";
import { CATALOG_RESERVED_MODEL_IDS, DEFAULT_CONFIG, normalizeEngineName } from "./defaults.ts";
import { type LayerInput, LayerSchema, type PreloadEntryInput } from "./schema.ts";
import type { PreloadModelConfig, SynapseConfig } from "./types.ts";
import { firstUnservedValue } from "./unserved.ts";

/** Keys of {@link SynapseConfig} that are sections (objects merged key by key across layers). */
type SectionKey = "worker" | "log" | "inline" | "http" | "tokenize" | "jobs" | "probe";

/**
 * One layer in canonical form: aliases resolved, preload defaults applied; every key optional,
 * and so is every key of a section.
 */
export type ConfigLayer = {
  [K in keyof SynapseConfig]?: K extends SectionKey ? Partial<SynapseConfig[K]> : SynapseConfig[K];
};

/** Options of {@link parseLayer}. */
export interface ParseLayerOptions {
  /** May the layer set user-only keys? */
  userOnlyAllowed: boolean;
  /** Where user-only keys belong, for the refusal message. */
  userPath?: string;
}

/** Keys honoured only from the user config (or an explicit config file). */
const USER_ONLY_KEYS = ["decode_chain_k"] as const;

/**
 * Parses one layer from JSONC text and brings it to canonical form.
 *
 * @param text JSONC text (a leading BOM is ignored).
 * @param source Where the text came from (a file path or `env:NAME`), named in errors.
 * @param options Whether user-only keys are allowed here.
 * @returns The layer in canonical form.
 * @throws {SynapseError} `invalid_request`: a syntax error, a top level that is not an object, a
 * user-only key where it is not allowed, an unknown or mistyped key, a reserved `model_id`, or a
 * key this build accepts only at its default set to another value (`unserved.ts`).
 */
export function parseLayer(text: string, source: string, options: ParseLayerOptions): ConfigLayer {
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

/**
 * Parses JSONC text (comments and trailing commas allowed, a leading BOM ignored).
 *
 * @param text The text.
 * @param source Where the text came from, named in errors.
 * @returns The parsed value.
 * @throws {SynapseError} `invalid_request` at the first syntax error, with details
 * `{file, line, column, offset}` (1-based line and column, 0-based UTF-16 offset).
 */
export function parseJsoncText(text: string, source: string): unknown {
  const errors: ParseError[] = [];
  const body = text.startsWith("\uFEFF") ? text.slice(1) : text;
  const tree = parseTree(body, errors, {
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
  return tree === undefined ? undefined : valueOf(tree);
}

/** The path of the first own key `__proto__` in a parsed value, or undefined. */
function protoKeyPath(value: unknown, path: (string | number)[]): (string | number)[] | undefined {
  if (typeof value !== "object" || value === null) return undefined;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = protoKeyPath(value[i], [...path, i]);
      if (found !== undefined) return found;
    }
    return undefined;
  }
  for (const key of Object.keys(value)) {
    if (key === "__proto__") return [...path, key];
    const found = protoKeyPath((value as Record<string, unknown>)[key], [...path, key]);
    if (found !== undefined) return found;
  }
  return undefined;
}

/**
 * The value of a parsed JSONC node, as `JSON.parse` builds it: every key an own property, so a
 * key `__proto__` is a key (named as unknown, or refused, by the schema) and never sets the
 * object's prototype, as plain assignment would (jsonc-parser's own `parse` assigns). A key
 * written twice keeps its last value.
 */
function valueOf(node: Node): unknown {
  switch (node.type) {
    case "object": {
      const out: Record<string, unknown> = {};
      for (const prop of node.children ?? []) {
        const [key, value] = prop.children ?? [];
        if (key === undefined || value === undefined) continue;
        Object.defineProperty(out, key.value as string, {
          value: valueOf(value),
          enumerable: true,
          writable: true,
          configurable: true,
        });
      }
      return out;
    }
    case "array":
      return (node.children ?? []).map(valueOf);
    default:
      return node.value;
  }
}

/**
 * Validates a parsed value against {@link LayerSchema}.
 *
 * @param value The parsed JSON value.
 * @param source Where it came from, named in errors.
 * @returns The layer as written (aliases not yet resolved).
 * @throws {SynapseError} `invalid_request` with details `{file, key}`: an unknown key is named
 * first; otherwise the first invalid value in schema order.
 */
export function validateLayer(value: unknown, source: string): LayerInput {
  // No config object takes a key `__proto__`, and the schema library drops one unseen (it would
  // set the parsed object's prototype): it is refused here, by its path.
  const proto = protoKeyPath(value, []);
  if (proto !== undefined) {
    const key = formatKeyPath(proto);
    throw configError(source, key, `unknown key '${key}'`);
  }
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

/**
 * Brings a validated layer to canonical form: `alias_admin_enabled` from itself or its aliases,
 * `jobs.ttl_ms` spread over the TTLs it stands for, preload entries with defaults applied and
 * engine names normalized.
 *
 * @param input The validated layer.
 * @param source Where it came from, named in errors.
 * @returns The canonical layer (keys left unset stay absent).
 * @throws {SynapseError} `invalid_request` when a preload entry uses a catalog-reserved
 * `model_id` (details `{file, key, model_id}`) or lacks `tokenizer_path` for an engine other than
 * `llama` (details `{file, key}`), or sets a key this build accepts only at its default to
 * another value (`unserved.ts`; details `{file, key, value, accepted}`).
 */
export function canonicalLayer(input: LayerInput, source: string): ConfigLayer {
  const unserved = firstUnservedValue(input);
  if (unserved !== undefined) {
    const { entry, value } = unserved;
    throw configError(
      source,
      entry.key,
      `'${entry.key}' is ${
        JSON.stringify(value)
      }, which this build does not honour: ${entry.reason}`,
      { value, accepted: entry.accepted },
    );
  }
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
  const engine = normalizeEngineName(entry.engine);
  const at = (k: string) => `preload_models[${index}].${k}`;
  if (engine === "remote") {
    for (const k of ["provider", "model"] as const) {
      if (entry[k] === undefined) {
        throw configError(
          source,
          at(k),
          `invalid value for '${at(k)}': required for engine 'remote'`,
        );
      }
    }
    const local = ([
      "model_path",
      "config_path",
      "format",
      "quant",
      "dtype",
      "family",
      "prompts",
      "default_prompt_name",
      "matryoshka_dims",
      "execution",
      "shim",
      "readout",
      "rerank_template",
      "worker_bin",
      "worker_runtime_dir",
      "profile",
      "artifact_digest",
      // The provider pools.
      "pooling",
    ] as const)
      .find((k) => entry[k] !== undefined);
    if (local !== undefined) {
      throw configError(
        source,
        at(local),
        `'${
          at(local)
        }' is a setting of a local lane; engine 'remote' takes provider, model, task, tokenizer_path, model_id, dims, max_tokens, normalize, revision, canary and reference_model (the provider pools)`,
      );
    }
  } else {
    const remoteOnly = (["provider", "model", "dims", "canary"] as const).find((k) =>
      entry[k] !== undefined
    );
    if (remoteOnly !== undefined) {
      throw configError(
        source,
        at(remoteOnly),
        `'${at(remoteOnly)}' is a setting of engine 'remote', not of '${engine}'`,
      );
    }
    if (entry.model_path === undefined) {
      throw configError(
        source,
        at("model_path"),
        `invalid value for '${at("model_path")}': required for engine '${engine}'`,
      );
    }
  }
  if (entry.tokenizer_path === undefined && engine !== "llama" && engine !== "ffi") {
    const key = `preload_models[${index}].tokenizer_path`;
    throw configError(
      source,
      key,
      `invalid value for '${key}': required for engine '${engine}' (only a GGUF, engine llama or ffi, can do without a tokenizer.json)`,
    );
  }
  return dropUndefined({
    ...entry,
    engine,
    pooling: entry.pooling ?? "mean",
    normalize: entry.normalize ?? true,
  });
}

/**
 * Layers `top` over `base`: sections merge key by key; arrays and scalars replace.
 *
 * @returns A new layer; neither input is changed.
 */
export function mergeLayers(base: ConfigLayer, top: ConfigLayer): ConfigLayer {
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

/**
 * Resolves a layer over {@link DEFAULT_CONFIG}.
 *
 * @returns A fresh configuration with every key present (nothing shared with the layer or the
 * defaults).
 */
export function resolveConfig(layer: ConfigLayer): SynapseConfig {
  const d = DEFAULT_CONFIG;
  const config: SynapseConfig = {
    knob: layer.knob ?? d.knob,
    microllm_max_tokens: layer.microllm_max_tokens ?? d.microllm_max_tokens,
    grammar_enabled: layer.grammar_enabled ?? d.grammar_enabled,
    decode_chain_k: layer.decode_chain_k ?? d.decode_chain_k,
    cache_max_bytes: layer.cache_max_bytes ?? d.cache_max_bytes,
    alias_admin_enabled: layer.alias_admin_enabled ?? d.alias_admin_enabled,
    certify_observation: layer.certify_observation ?? d.certify_observation,
    certification: layer.certification ?? d.certification,
    sidecar_spec: structuredClone(layer.sidecar_spec ?? {}),
    remote_providers: structuredClone(layer.remote_providers ?? []),
    // A copy whose keys are all own data properties (a name `__proto__` included).
    model_aliases: Object.fromEntries(Object.entries(layer.model_aliases ?? {})),
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

/**
 * The refusal of a config input: `invalid_request` "Cannot load config SOURCE: REASON".
 *
 * @param source File path or `env:NAME`.
 * @param key Key path (`inline.max_items`, `preload_models[0].engine`), or `""` for the whole
 * input.
 * @param reason What is wrong.
 * @param extra More details.
 * @returns The error, with details `{file, key, ...extra}`.
 */
export function configError(
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

/** The kind of a JSON value for a message: `null`, `an array`, `an object`, `a string`, … */
export function kindOf(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  return typeof value === "object" ? "an object" : `a ${typeof value}`;
}

/**
 * `T` with the keys whose value may be `undefined` made optional and never `undefined`, in `T`
 * and in the plain objects it holds (arrays are kept as they are).
 */
type DroppedUndefined<T> =
  & { [K in keyof T as undefined extends T[K] ? never : K]: Dropped<T[K]> }
  & { [K in keyof T as undefined extends T[K] ? K : never]?: Dropped<Exclude<T[K], undefined>> };
type Dropped<V> = V extends readonly unknown[] ? V : V extends object ? DroppedUndefined<V> : V;

/**
 * A copy of `value` without its `undefined`-valued keys, in it and in the plain objects it holds:
 * an absent key, never an undefined one, so that {@link mergeLayers} cannot let an undefined key
 * of a layer hide the key below it.
 */
function dropUndefined<T extends object>(value: T): DroppedUndefined<T> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) {
    if (v === undefined) continue;
    out[k] = isPlainObject(v) ? dropUndefined(v) : v;
  }
  return out as DroppedUndefined<T>;
}

function isPlainObject(v: unknown): v is object {
  return typeof v === "object" && v !== null && Object.getPrototypeOf(v) === Object.prototype;
}
