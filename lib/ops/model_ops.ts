/**
 * Model lifecycle, catalog and cache operations (docs/operations.md "Model, catalog and cache
 * operations"): `model.load`, `model.status`, `model.unload`, `models.catalog`, `models.download`,
 * `models.download.cancel`, `models.remove`, `cache.pin`, `cache.gc`. The work lives in
 * lib/models/model_loads.ts and lib/cache/; these functions parse params and shape answers.
 *
 * @module
 */
import {
  CacheGcParams,
  CachePinParams,
  ModelLoadParams,
  ModelsCatalogParams,
  ModelsDownloadCancelParams,
  ModelsDownloadParams,
  ModelsRemoveParams,
  ModelStatusParams,
  ModelUnloadParams,
  parseParams,
} from "../contract/schemas.ts";
import { SynapseError } from "../contract/errors.ts";
import type { GcRow } from "../cache/types.ts";
import {
  backendUnrunnableReason,
  CATALOG_REVISION,
  catalogLaneId,
  type CatalogModel,
  manifestDigest,
} from "../models/catalog.ts";
import type { ModelJobView, SelfCheckView } from "../models/model_loads.ts";
import type { PromptTable } from "../models/prompts.ts";
import type { OpContext } from "./context.ts";
import { modelStatus } from "./status.ts";

function loads(ctx: OpContext) {
  if (ctx.loads === undefined) {
    throw new SynapseError(
      "backend_unavailable",
      "Cannot manage models: this instance has no model cache",
      { details: { backends: [{ backend: "cache", reason: "not_configured" }] } },
    );
  }
  return ctx.loads;
}

/**
 * Durable jobs running on a model: `model_in_use` holders of kind `job` (an embed or rerank job
 * names its model; a probe job holds every model it probes until it ends).
 */
function jobHolders(ctx: OpContext, modelId: string): { kind: string; job_id: string }[] {
  const out: { kind: string; job_id: string }[] = [];
  for (const jobId of ctx.jobs.running.keys()) {
    const row = ctx.jobs.store.get(jobId);
    const params = row?.params as
      | { model_id?: string; lanes?: { model_id?: string }[] }
      | null
      | undefined;
    if (params?.model_id === modelId || params?.lanes?.some((l) => l.model_id === modelId)) {
      out.push({ kind: "job", job_id: jobId });
    }
  }
  return out;
}

/** A job answer: the job view with the module generation. */
function jobAnswer(ctx: OpContext, v: ModelJobView): ModelJobView & { module_generation: number } {
  return { module_generation: ctx.moduleGeneration, ...v };
}

/**
 * `model.load`: starts a load job (see lib/models/model_loads.ts) and answers it at once.
 * Progress: `model.status {job_id}`.
 *
 * @throws {SynapseError} `invalid_request` (unpinned source, missing file, id taken, catalog
 *   id), `idempotency_conflict`.
 */
export function modelLoad(
  ctx: OpContext,
  params: unknown,
): ModelJobView & { module_generation: number } {
  const req = parseParams("model.load", ModelLoadParams, params);
  return jobAnswer(ctx, loads(ctx).load(req));
}

/** Answer of `model.status {model_id}` and `model.unload`. */
export interface ModelStatusResult {
  module_generation: number;
  model_id: string;
  fingerprint: string | null;
  state: string;
  engine: string;
  task: string;
  /** Why a model is not ready (`model_loading`, its load error, …). */
  error?: unknown;
}

/**
 * `model.status {job_id} XOR {model_id}`: a load or download job, or a model's state.
 *
 * @throws {SynapseError} `invalid_request` for an unknown job; `unknown_model`.
 */
export function modelStatusOp(
  ctx: OpContext,
  params: unknown,
): ModelStatusResult | (ModelJobView & { module_generation: number }) {
  const p = parseParams("model.status", ModelStatusParams, params);
  if (p.job_id !== undefined) return jobAnswer(ctx, loads(ctx).job(p.job_id));
  const entry = ctx.registry.list().find((m) => m.modelId === p.model_id);
  if (entry === undefined) {
    throw new SynapseError("unknown_model", `Cannot find model '${p.model_id}'`, {
      details: { model_id: p.model_id, known: ctx.registry.list().map((m) => m.modelId) },
    });
  }
  const s = modelStatus(entry, ctx.now(), ctx);
  return {
    module_generation: ctx.moduleGeneration,
    model_id: entry.modelId,
    fingerprint: entry.ready?.fingerprint ?? null,
    state: s.state,
    engine: entry.engine,
    task: entry.task,
    ...(s.state_reason === undefined ? {} : { error: s.state_reason }),
  };
}

/**
 * `model.unload {model_id}`: stops serving the model and forgets a run-time load across
 * restarts (see {@link ModelLoads.unload}).
 *
 * @throws {SynapseError} `unknown_model`; `model_loading`; `model_in_use {holders[]}`;
 *   `invalid_request` for a catalog id that is not loaded (`{catalog_id, lane_ids[]}`).
 */
export async function modelUnload(ctx: OpContext, params: unknown): Promise<ModelStatusResult> {
  const p = parseParams("model.unload", ModelUnloadParams, params);
  const l = loads(ctx);
  const cat = l.catalog.find((m) => m.id === p.model_id);
  if (cat !== undefined && !ctx.registry.list().some((m) => m.modelId === p.model_id)) {
    throw new SynapseError(
      "invalid_request",
      `Cannot unload '${p.model_id}': it is a catalog id that is not loaded; remove its files with models.remove`,
      {
        details: {
          catalog_id: cat.id,
          lane_ids: cat.backends.map((b) => catalogLaneId(cat, b.backend)),
        },
      },
    );
  }
  const entry = await l.unload(p.model_id, jobHolders(ctx, p.model_id));
  return {
    module_generation: ctx.moduleGeneration,
    model_id: entry.modelId,
    fingerprint: entry.ready?.fingerprint ?? null,
    state: "unloaded",
    engine: entry.engine,
    task: entry.task,
  };
}

/** One `models.catalog` row (docs/operations.md "models.catalog"). */
export interface CatalogRow {
  id: string;
  task: string;
  name: string;
  description: string;
  default_for_task: boolean;
  upstream: { hf_repo: string; revision: string };
  manifest_digest: string;
  /**
   * Bytes of the first runnable backend's files: their pinned sizes summed; a lower bound when a
   * small file's size is not pinned (`download_bytes_exact: false`); null when the model file's
   * size is not pinned.
   */
  download_bytes: number | null;
  download_bytes_exact: boolean;
  install_state: "not_installed" | "installed";
  /** Loaded and serving in this instance (state as models.list says it). */
  loaded_state: string | null;
  dims: number;
  /**
   * The Matryoshka widths a request's `dimensions` may cut this model's vectors to (each served
   * under its own derived fingerprint); null for a model not Matryoshka-trained.
   */
  matryoshka_dims: number[] | null;
  backends: {
    backend: string;
    lane_id: string;
    /**
     * The lane's prompt table (`input_type` / `prompt_name` select a prefix; part of its
     * fingerprint), as the upstream model publishes it; null for a lane with none.
     */
    prompts: PromptTable | null;
    fingerprint: string | null;
    runnable: boolean;
    reason: string | null;
    installed: boolean;
    /** The lane's catalog self-check (lib/probe/self_check.ts). */
    self_check: SelfCheckView;
    files: {
      role: string;
      hf_repo: string;
      revision: string;
      path: string;
      sha256: string | null;
      size: number | null;
      digest_source: string | null;
    }[];
  }[];
  no_backend_reason?: string;
}

/**
 * `models.catalog {query?, task?, runnable_here?, installed?}`: the shipped catalog with, per
 * backend, whether it can run here and whether its files are in the cache.
 */
export async function modelsCatalog(
  ctx: OpContext,
  params: unknown,
): Promise<{ module_generation: number; catalog_revision: number; models: CatalogRow[] }> {
  const p = parseParams("models.catalog", ModelsCatalogParams, params);
  const l = loads(ctx);
  const q = p.query?.toLowerCase();
  const rows: CatalogRow[] = [];
  for (const m of l.catalog) {
    if (p.task !== undefined && m.task !== p.task) continue;
    if (q !== undefined && !`${m.id} ${m.name} ${m.description}`.toLowerCase().includes(q)) {
      continue;
    }
    const row = await catalogRow(ctx, m);
    if (p.runnable_here === true && !row.backends.some((b) => b.runnable)) continue;
    if (p.runnable_here === false && row.backends.some((b) => b.runnable)) continue;
    if (p.installed !== undefined && (row.install_state === "installed") !== p.installed) continue;
    rows.push(row);
  }
  return {
    module_generation: ctx.moduleGeneration,
    catalog_revision: CATALOG_REVISION,
    models: rows,
  };
}

async function catalogRow(ctx: OpContext, m: CatalogModel): Promise<CatalogRow> {
  const l = loads(ctx);
  const installed = await l.installed(m);
  const entry = ctx.registry.list().find((e) => e.modelId === m.id);
  const backends = m.backends.map((b, i) => {
    const reason = backendUnrunnableReason(b, { llama: l.llamaAvailable }) ?? null;
    return {
      backend: b.backend,
      lane_id: catalogLaneId(m, b.backend),
      prompts: b.prompts === undefined ? null : {
        prompts: { ...b.prompts.prompts },
        ...(b.prompts.default_prompt_name === undefined
          ? {}
          : { default_prompt_name: b.prompts.default_prompt_name }),
      },
      fingerprint: entry?.ready && entry.engine === b.backend ? entry.ready.fingerprint : null,
      runnable: reason === null,
      reason,
      installed: installed[i]?.installed ?? false,
      self_check: l.selfCheck?.view(catalogLaneId(m, b.backend)) ?? { state: "pending" as const },
      files: [
        ["model", b.files.model] as const,
        ...(b.files.tokenizer ? [["tokenizer", b.files.tokenizer] as const] : []),
        ...(b.files.config ? [["config", b.files.config] as const] : []),
      ].map(([role, f]) => ({ role, ...f })),
    };
  });
  const first = backends.find((b) => b.runnable) ?? backends[0];
  // The sum of the sizes the catalog pins; a lower bound (`download_bytes_exact: false`) when a
  // small file's size is not pinned, null when the model file's is not.
  const bytes = first?.files[0]?.size != null
    ? first.files.reduce((a, f) => a + (f.size ?? 0), 0)
    : null;
  const exact = first?.files.every((f) => f.size !== null) ?? false;
  return {
    id: m.id,
    task: m.task,
    name: m.name,
    description: m.description,
    default_for_task: m.default_for_task,
    upstream: m.upstream,
    manifest_digest: manifestDigest(m),
    download_bytes: bytes,
    download_bytes_exact: bytes !== null && exact,
    install_state: backends.some((b) => b.installed) ? "installed" : "not_installed",
    loaded_state: entry === undefined ? null : modelStatus(entry, ctx.now(), ctx).state,
    dims: m.dims,
    matryoshka_dims: m.matryoshka_dims === undefined ? null : [...m.matryoshka_dims],
    backends,
    ...(m.no_backend_reason === undefined ? {} : { no_backend_reason: m.no_backend_reason }),
  };
}

/**
 * `models.download {catalog_id, request_key?}`: downloads a catalog model's pinned files into the
 * cache and loads it under its catalog id.
 *
 * @throws {SynapseError} `unknown_model`; `backend_unavailable`; `idempotency_conflict`.
 */
export function modelsDownload(
  ctx: OpContext,
  params: unknown,
): ModelJobView & { module_generation: number } {
  const p = parseParams("models.download", ModelsDownloadParams, params);
  return jobAnswer(ctx, loads(ctx).download(p.catalog_id, p.request_key));
}

/**
 * `models.download.cancel {job_id}`: stops a download (the partial stays in the cache, so a
 * later download resumes it).
 *
 * @throws {SynapseError} `invalid_request` for an unknown job.
 */
export function modelsDownloadCancel(
  ctx: OpContext,
  params: unknown,
): ModelJobView & { module_generation: number } {
  const p = parseParams("models.download.cancel", ModelsDownloadCancelParams, params);
  return jobAnswer(ctx, loads(ctx).cancel(p.job_id));
}

/**
 * `models.remove {catalog_id}`: unloads the model and deletes its unpinned blobs.
 *
 * @throws {SynapseError} `unknown_model`; `model_in_use {catalog_id, holders[]}`.
 */
export async function modelsRemove(
  ctx: OpContext,
  params: unknown,
): Promise<
  {
    module_generation: number;
    catalog_id: string;
    removed_manifests: string[];
    freed_bytes: number;
  }
> {
  const p = parseParams("models.remove", ModelsRemoveParams, params);
  const r = await loads(ctx).remove(p.catalog_id, jobHolders(ctx, p.catalog_id));
  return { module_generation: ctx.moduleGeneration, ...r };
}

/**
 * `cache.pin {digest | source_url + expected_digest, module_id?, unpin?}`: pins a blob for a
 * module (downloading it first when given a URL), or drops that module's pin with `unpin`.
 * Other modules' pins are never touched.
 *
 * @throws {SynapseError} `invalid_request` (a URL without `expected_digest`); `unknown_model`
 *   for a digest not in the cache; the download's errors.
 */
export async function cachePin(
  ctx: OpContext,
  params: unknown,
): Promise<
  { module_generation: number; digest: string; pins: unknown[]; size: number; format: string }
> {
  const p = parseParams("cache.pin", CachePinParams, params);
  const cache = loads(ctx).cache;
  let digest = p.digest;
  if (p.source_url !== undefined) {
    if (p.expected_digest === undefined) {
      throw new SynapseError(
        "invalid_request",
        "Cannot pin a URL without expected_digest: an unhashed download is refused",
        { details: { field: "expected_digest" } },
      );
    }
    const meta = await cache.download(p.source_url, {
      sha256: p.expected_digest,
      format: p.format,
    });
    digest = meta.digest;
  }
  if ((await cache.meta(digest!)) === undefined) {
    throw new SynapseError("unknown_model", `Cannot pin ${digest}: it is not in the model cache`, {
      details: { digest },
    });
  }
  const owner = p.module_id ?? "synapse";
  const meta = p.unpin === true
    ? await cache.unpin(digest!, owner)
    : await cache.pin(digest!, owner);
  return {
    module_generation: ctx.moduleGeneration,
    digest: meta.digest,
    pins: meta.pins,
    size: meta.size,
    format: meta.format,
  };
}

/**
 * `cache.gc {digest?, grace_ms?}`: two-phase GC (docs/internals.md §8.5) of one blob, or of the
 * cache down to `cache_max_bytes`: `[{digest, state: deleted|marked|kept, reason?}]`.
 */
export async function cacheGc(
  ctx: OpContext,
  params: unknown,
): Promise<{ module_generation: number; rows: GcRow[]; freed_bytes: number }> {
  const p = parseParams("cache.gc", CacheGcParams, params);
  const rows = await loads(ctx).cache.gc({ digest: p.digest, graceMs: p.grace_ms });
  return {
    module_generation: ctx.moduleGeneration,
    rows,
    freed_bytes: rows.reduce((a, r) => a + (r.freed_bytes ?? 0), 0),
  };
}
