/**
 * The defaults of every configuration key (docs/config.md), and the engine-name aliases and
 * reserved model ids the loader applies to `preload_models`.
 *
 * @module
 */

import type { SynapseConfig } from "./types.ts";

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

/** Model ids the catalog reserves (docs/internals.md §10); a preload entry may not use them. */
export const CATALOG_RESERVED_MODEL_IDS: ReadonlySet<string> = new Set([
  "gte-modernbert-base",
  "gte-reranker-modernbert-base",
  "qwen3-embedding-0.6b",
  "qwen3-reranker-0.6b",
]);

/** The defaults of every key (docs/config.md); deeply frozen. */
export const DEFAULT_CONFIG: Readonly<SynapseConfig> = deepFreeze(
  {
    knob: "balanced",
    microllm_max_tokens: 512,
    grammar_enabled: false,
    decode_chain_k: 1,
    cache_max_bytes: 32 * 2 ** 30,
    alias_admin_enabled: false,
    certify_observation: false,
    certification: "require",
    sidecar_spec: {},
    remote_providers: [],
    model_aliases: {},
    worker: { load_timeout_ms: 900_000, start_timeout_ms: 60_000, cancel_grace_ms: 5000 },
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
    http: {
      max_body_bytes: 64 * 2 ** 20,
      header_timeout_ms: 10_000,
      body_timeout_ms: 30_000,
      idle_timeout_ms: 30_000,
      require_key_for_queries: false,
    },
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

/**
 * Maps an engine name through {@link ENGINE_ALIASES}; canonical and unknown names pass through.
 *
 * @param name Engine name as written.
 * @returns The canonical engine name.
 */
export function normalizeEngineName(name: string): string {
  return Object.hasOwn(ENGINE_ALIASES, name) ? ENGINE_ALIASES[name] as string : name;
}

function deepFreeze<T>(value: T): T {
  if (typeof value === "object" && value !== null) {
    for (const child of Object.values(value)) deepFreeze(child);
    Object.freeze(value);
  }
  return value;
}
