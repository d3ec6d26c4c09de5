/**
 * Models loaded at run time (docs/operations.md "model.load", "models.download"): a load
 * is a job that resolves its files, brings them into the content-addressed cache (a local copy,
 * or a download verified against its pinned SHA-256), validates them there, and loads the model
 * into the registry, where it serves at once. The loaded model is recorded in the store and
 * loaded again at the next boot ({@link ModelLoads.restore}); its blobs are pinned so `cache.gc`
 * never takes them.
 *
 * **Every load verifies its blobs (F28)** — a `model.load`, a catalog model's load, a load at boot
 * from the store — against their recorded digests before an engine reads them
 * (`ModelCache.verifyBlob`: hashed once per boot, reused while size, mtime, inode and ctime are
 * unchanged). A damaged (or missing) blob is healed from its recorded source when one is known —
 * the load's own source (a pinned URL, or a local file that must still hash to the digest), the
 * blob's recorded source, the catalog entry's pinned URL — and the load goes on; the job's
 * `healed` lists what was healed, and the log says so. With no source that heals it the load
 * fails `artifact_invalid {reason: "blob_digest_mismatch", model_id, file, digest}` and the rest
 * of the service serves on.
 *
 * Job states (`model.load`): `resolving → downloading {bytes_done, bytes_total} → validating →
 * loading → ready | failed {error}`. `models.download` of a catalog model: `queued →
 * downloading → verifying → committed | failed {error} | cancelled`; a committed catalog model
 * then loads under its catalog id.
 *
 * Jobs live in memory (a load is not resumed across a restart; a partial left by a killed
 * process is resumed by the next attempt; a job that ends leaves nothing in the cache's tmp/).
 * A `request_key` makes a call idempotent: the same key with the same params answers the same
 * job; other params are `idempotency_conflict`.
 *
 * @module
 */
import { SynapseError, toSynapseError } from "../contract/errors.ts";
import type { ArtifactFormat, BlobMeta, DownloadProgress, GcRow } from "../cache/types.ts";
import type { Digest } from "../cache/types.ts";
import { jcsSha256, type JsonValue } from "../identity/jcs.ts";
import { type LogSink, nullLog } from "../log/log.ts";
import { defaultModelOf, type ModelRegistry } from "./model_registry.ts";
import type { ModelEngine, ModelEntry, ModelSource } from "./model.ts";
import {
  backendFiles,
  backendUnrunnableReason,
  CATALOG,
  type CatalogBackend,
  catalogLaneId,
  type CatalogModel,
  fileUrl,
  manifestDigest,
} from "./catalog.ts";
import { type FileRef, type LoadRequest, resolveLoadFiles } from "./_load_request.ts";
import { inferTask, modelIdFor } from "./_load_infer.ts";
import { checkReferenceModel } from "./sources.ts";
import { parsePromptTable, readSentenceTransformersPrompts, ST_CONFIG_FILE } from "./prompts.ts";
import type { PromptTable } from "./prompts.ts";
import { checkMatryoshkaDims } from "./matryoshka.ts";
import {
  checkFormat,
  type LoadSpec,
  type ResolvedFile,
  sameLoad,
  sourceFromSpec,
} from "./_load_spec.ts";
import {
  type DownloadJobState,
  type Job,
  type LoadJobState,
  ModelJobTable,
  type ModelJobView,
} from "./_model_jobs.ts";

export type { LoadRequest };
export type { DownloadJobState, LoadJobState, LoadSpec, ModelJobView, ResolvedFile };

/** The cache as loads use it (lib/cache/model_cache.ts `ModelCache`). */
export interface LoadCache {
  blobPath(digest: Digest): string;
  meta(digest: Digest): Promise<BlobMeta | undefined>;
  importFile(
    path: string,
    opts?: {
      expectedDigest?: Digest | undefined;
      format?: ArtifactFormat | undefined;
      signal?: AbortSignal | undefined;
    },
  ): Promise<BlobMeta>;
  download(url: string, opts: {
    sha256: Digest;
    size?: number | undefined;
    format?: ArtifactFormat | undefined;
    file?: string | undefined;
    signal?: AbortSignal | undefined;
    onProgress?: ((p: DownloadProgress) => void) | undefined;
  }): Promise<BlobMeta>;
  validate(digest: Digest, format?: ArtifactFormat): Promise<BlobMeta>;
  acquireShared(digest: Digest): Disposable & { release(): void };
  verifyBlob(digest: Digest, label?: { model_id?: string; file?: string }): Promise<unknown>;
  healBlob(
    digest: Digest,
    sources: readonly string[],
    label?: { model_id?: string; file?: string },
  ): Promise<{ from: "url" | "file"; source: string }>;
  pin(digest: Digest, owner?: string): Promise<BlobMeta>;
  unpin(digest: Digest, owner?: string): Promise<BlobMeta>;
  gc(opts?: { digest?: Digest | undefined; graceMs?: number | undefined }): Promise<GcRow[]>;
}

/** The store as loads use it (lib/store/store.ts `Store`). */
export interface LoadStore {
  upsertModel(row: {
    model_id: string;
    engine: string;
    task: string;
    fingerprint: string;
    config_json: string;
  }): void;
  deleteModel(modelId: string): void;
  listModels(): { model_id: string; config_json: string; updated_ms: number }[];
}

/**
 * A catalog lane's self-check state (`models.catalog` `backends[].self_check`, `models.list`
 * rows of catalog models; docs/internals.md §10).
 */
export interface SelfCheckView {
  state: "pending" | "passed" | "failed";
  /** The key of the lane's current check (once loaded). */
  check_id?: string;
  /** When the check ended, ms since the epoch. */
  checked_at_ms?: number;
  /** ms of engine work it took. */
  duration_ms?: number;
  /** The input that failed and why (`failed`). */
  failed_input?: { index: number; reason: string; detail?: string };
}

/**
 * The catalog self-check as loads run it (lib/probe/self_check.ts `SelfChecks`): after a catalog
 * model loads — installed by `models.download`, or at boot — its check runs, or the row of its
 * key is reused.
 */
export interface CatalogSelfCheck {
  /** Runs or reuses the check of a loaded catalog model; resolves once it has ended; never rejects. */
  ensure(
    entry: ModelEntry,
    model: CatalogModel,
    backend: CatalogBackend,
    manifestDigest: string,
  ): Promise<SelfCheckView>;
  /** `model_in_use` holders of kind `self_check` while a check of the model runs. */
  holders(modelId: string): { kind: "self_check"; check_id: string }[];
  /** The state of a catalog lane (`<catalog_id>-<backend>`). */
  view(laneId: string): SelfCheckView;
  /** The model was unloaded: its lane is `pending` again until it loads (its rows stay). */
  forget(modelId: string): void;
}

/** Options of {@link ModelLoads}. */
export interface ModelLoadsOptions {
  cache: LoadCache;
  registry: ModelRegistry;
  store?: LoadStore;
  /** Pins are owned by `<moduleId>:model:<id>` / `<moduleId>:catalog:<id>`. @default "synapse" */
  moduleId?: string;
  /** Base URL of Hugging Face downloads (config `hf_endpoint`). @default "https://huggingface.co" */
  hfEndpoint?: string;
  /** @default CATALOG */
  catalog?: readonly CatalogModel[];
  /** Whether a llama worker can run here (catalog `runnable`). @default true */
  llamaAvailable?: boolean;
  /** Runs the catalog self-check of each catalog model loaded; without it none runs. */
  selfCheck?: CatalogSelfCheck;
  now?: () => number;
  log?: LogSink;
}

/** Runtime model loads, catalog downloads and their jobs. */
export class ModelLoads {
  readonly cache: LoadCache;
  readonly registry: ModelRegistry;
  readonly catalog: readonly CatalogModel[];
  readonly llamaAvailable: boolean;
  /** The catalog self-check, when this instance runs it. */
  readonly selfCheck: CatalogSelfCheck | undefined;
  #store: LoadStore | undefined;
  #moduleId: string;
  #hfEndpoint: string;
  #now: () => number;
  #log: LogSink;
  #jobs: ModelJobTable;
  #specs = new Map<string, LoadSpec>();
  /** Model ids a `model.load` job named and has not yet handed to the registry or failed. */
  #pending = new Map<string, string>();

  constructor(options: ModelLoadsOptions) {
    this.cache = options.cache;
    this.registry = options.registry;
    this.#store = options.store;
    this.#moduleId = options.moduleId ?? "synapse";
    this.#hfEndpoint = options.hfEndpoint ?? "https://huggingface.co";
    this.catalog = options.catalog ?? CATALOG;
    this.llamaAvailable = options.llamaAvailable ?? true;
    this.selfCheck = options.selfCheck;
    this.#now = options.now ?? Date.now;
    this.#log = options.log ?? nullLog;
    this.#jobs = new ModelJobTable(this.#now);
  }

  /** The load spec of a model loaded at run time or from the catalog. */
  spec(modelId: string): LoadSpec | undefined {
    return this.#specs.get(modelId);
  }

  /**
   * The job id of a `model.load` that named this model id and is still resolving, fetching or
   * validating its files (before the registry holds the model as `loading`); undefined when
   * none. A request naming the id meanwhile answers `model_loading`, never `unknown_model`
   * (lib/ops/_resolve_model.ts).
   */
  pendingLoad(modelId: string): string | undefined {
    const jobId = this.#pending.get(modelId);
    if (jobId === undefined) return undefined;
    const state = this.#jobs.get(jobId).view.state;
    return state === "ready" || state === "failed" || state === "cancelled" ? undefined : jobId;
  }

  /**
   * Starts a `model.load` job (or answers the job its `request_key` already names).
   *
   * @throws {SynapseError} `invalid_request` for unpinned or malformed sources, a catalog id
   *   (use `models.download`), or an id already loaded; `idempotency_conflict` for a reused key.
   */
  load(req: LoadRequest): ModelJobView {
    const digest = jcsSha256(req as unknown as JsonValue);
    const known = this.#jobs.attach(req.request_key, digest);
    if (known) return known;
    if (req.model_id !== undefined) this.#checkIdFree(req.model_id, true);
    if (req.model_id !== undefined && req.reference_model !== undefined) {
      checkReferenceModel(req.model_id, req.reference_model, "reference_model");
    }
    // A bad prompt table is refused before a job exists, naming the field.
    parsePromptTable(req.prompts, req.default_prompt_name, "prompts", req.model_id ?? "model.load");
    if (req.matryoshka_dims !== undefined) {
      // The order and the task now; the widths against the model's once it is loaded.
      checkMatryoshkaDims(
        {
          modelId: req.model_id ?? req.repo ?? req.path ?? req.url ?? "model",
          task: req.task ?? "embed",
          matryoshkaDims: req.matryoshka_dims,
        },
        undefined,
      );
    }
    // Refuse what cannot work before a job exists: unpinned sources, missing files.
    const plan = resolveLoadFiles(req, this.#hfEndpoint);
    const job = this.#jobs.create(
      "model.load",
      req.model_id ?? null,
      digest,
      req.request_key,
      "resolving",
    );
    const named = req.model_id;
    // Known as loading from the moment the job is answered, until the registry holds it.
    if (named !== undefined && !this.#pending.has(named)) this.#pending.set(named, job.view.job_id);
    job.done = this.#runLoad(job, req, plan).finally(() => {
      if (named !== undefined && this.#pending.get(named) === job.view.job_id) {
        this.#pending.delete(named);
      }
    });
    return { ...job.view };
  }

  /**
   * Starts a `models.download` of a catalog model: its first runnable backend's files, verified
   * and pinned, then loaded under the catalog id. The default key is
   * `models.download:<id>:<manifest_digest>` (docs/internals.md §10).
   *
   * @throws {SynapseError} `unknown_model` for an id not in the catalog; `backend_unavailable`
   *   when no backend can run here (unverified digests included); `idempotency_conflict`.
   */
  download(catalogId: string, requestKey?: string): ModelJobView {
    const model = this.catalog.find((m) => m.id === catalogId);
    if (model === undefined) {
      throw new SynapseError(
        "unknown_model",
        `Cannot download '${catalogId}': it is not in the catalog; see models.catalog`,
        { details: { model_id: catalogId, catalog: this.catalog.map((m) => m.id) } },
      );
    }
    const manifest = manifestDigest(model);
    const backend = model.backends.find((b) =>
      backendUnrunnableReason(b, { llama: this.llamaAvailable }) === undefined
    );
    if (backend === undefined) {
      throw new SynapseError(
        "backend_unavailable",
        `Cannot download '${catalogId}': no backend of it can run here${
          model.no_backend_reason ? ` (${model.no_backend_reason})` : ""
        }`,
        {
          details: {
            catalog_id: catalogId,
            lane_id: model.backends[0] ? catalogLaneId(model, model.backends[0].backend) : null,
            backends: model.backends.map((b) => ({
              backend: b.backend,
              reason: backendUnrunnableReason(b, { llama: this.llamaAvailable }),
            })),
          },
        },
      );
    }
    const key = requestKey ?? `models.download:${catalogId}:${manifest}`;
    const digest = jcsSha256({ catalog_id: catalogId, manifest_digest: manifest });
    const known = this.#jobs.attach(key, digest);
    // A committed download whose model was removed since (models.remove) is not what the key
    // asks for any more — the model installed — so the same key installs it again.
    const removedSince = known?.state === "committed" &&
      !this.registry.list().some((m) => m.modelId === catalogId);
    if (known && !removedSince) return known;
    const job = this.#jobs.create("models.download", catalogId, digest, key, "queued");
    job.view.catalog_id = catalogId;
    job.done = this.#runDownload(job, model, backend, manifest);
    return { ...job.view };
  }

  /**
   * Cancels a download or load job (state `cancelled`; its partial download is removed, so
   * `tmp/` is clean once the job ends); an ended job is answered as it is. An engine load that has started runs to its end.
   *
   * @throws {SynapseError} `invalid_request` for an unknown job.
   */
  cancel(jobId: string): ModelJobView {
    const job = this.#jobs.get(jobId);
    job.controller.abort(new DOMException("Cancelled by models.download.cancel", "AbortError"));
    return { ...job.view };
  }

  /**
   * A job, by id.
   *
   * @throws {SynapseError} `invalid_request` for an unknown job (ended jobs are kept, the newest
   *   {@link KEEP_ENDED_JOBS}).
   */
  job(jobId: string): ModelJobView {
    return { ...this.#jobs.get(jobId).view };
  }

  /** Resolves when a job has ended (tests and the CLI's wait). */
  async settled(jobId: string): Promise<ModelJobView> {
    const job = this.#jobs.get(jobId);
    await job.done;
    return { ...job.view };
  }

  /**
   * Stops serving a model and forgets it across restarts: the store record goes, its pins are
   * dropped (the blobs stay in the cache until `cache.gc`). A model from the config's
   * `preload_models` comes back at the next boot.
   *
   * @throws {SynapseError} what {@link ModelRegistry.unload} throws (`model_in_use`, …).
   */
  async unload(
    modelId: string,
    extraHolders: { kind: string; job_id?: string; check_id?: string }[] = [],
  ): Promise<ModelEntry> {
    const entry = await this.registry.unload(modelId, [
      ...extraHolders,
      ...(this.selfCheck?.holders(modelId) ?? []),
    ]);
    this.selfCheck?.forget(modelId);
    const spec = this.#specs.get(modelId);
    this.#specs.delete(modelId);
    if (spec !== undefined) {
      await this.#unpinAll(spec);
      try {
        this.#store?.deleteModel(modelId);
      } catch (err) {
        this.#log("warn", "synapse.models", `cannot forget model '${modelId}' in the store`, {
          message: (err as Error).message,
        });
      }
    }
    return entry;
  }

  /**
   * `models.remove`: unloads the model (a catalog id, or a model loaded by `model.load`), drops
   * its pins and deletes its blobs that nothing else pins or leases.
   *
   * @throws {SynapseError} `unknown_model` when neither is known; `model_in_use {catalog_id,
   *   holders[]}`.
   */
  async remove(
    id: string,
    extraHolders: { kind: string; job_id?: string }[] = [],
  ): Promise<{ catalog_id: string; removed_manifests: string[]; freed_bytes: number }> {
    const catalogModel = this.catalog.find((m) => m.id === id);
    let spec = this.#specs.get(id);
    // Refused before anything is unloaded: a model from the config is not removed.
    if (spec === undefined && catalogModel === undefined) {
      throw new SynapseError(
        "unknown_model",
        this.registry.list().some((m) => m.modelId === id)
          ? `Cannot remove '${id}': it comes from the config (preload_models) or is a generated test model, so it has no files in the model cache; stop it until the next start with 'ck-synapse models unload ${id}' (model.unload), or remove it from the config`
          : `Cannot remove '${id}': it is neither a catalog model nor a model loaded with 'ck-synapse pull' (model.load)`,
        { details: { model_id: id } },
      );
    }
    if (this.registry.list().some((m) => m.modelId === id)) {
      try {
        await this.unload(id, extraHolders);
      } catch (err) {
        const e = toSynapseError(err, "model_in_use");
        if (e.code === "model_in_use") {
          throw new SynapseError("model_in_use", e.message, {
            details: { ...(e.details ?? {}), catalog_id: id },
          });
        }
        throw e;
      }
    } else if (spec !== undefined) {
      this.#specs.delete(id);
      await this.#unpinAll(spec);
      this.#store?.deleteModel(id);
    }
    // A catalog model installed but not loaded: its files are still pinned under its owner.
    const digests = new Set<Digest>();
    if (spec) { for (const f of Object.values(spec.files)) if (f) digests.add(f.digest); }
    if (catalogModel) {
      for (const b of catalogModel.backends) {
        for (const [, f] of backendFiles(b)) {
          if (f.sha256 !== null) digests.add(`sha256:${f.sha256}`);
        }
      }
      spec ??= { pin_owner: this.#owner("catalog", id) } as LoadSpec;
    }
    let freed = 0;
    for (const d of digests) {
      if (spec?.pin_owner) await this.cache.unpin(d, spec.pin_owner).catch(() => {});
      for (const row of await this.cache.gc({ digest: d, graceMs: 0 }).catch(() => [])) {
        // Phase one marks; with no grace the second pass deletes.
        if (row.state === "marked") {
          for (const r2 of await this.cache.gc({ digest: d, graceMs: 0 }).catch(() => [])) {
            freed += r2.freed_bytes ?? 0;
          }
        } else freed += row.freed_bytes ?? 0;
      }
    }
    return {
      catalog_id: id,
      removed_manifests: catalogModel ? [manifestDigest(catalogModel)] : [],
      freed_bytes: freed,
    };
  }

  /**
   * Loads again, at boot, every model a previous run loaded with `model.load` or
   * `models.download` (the store's records), except ids the config's `preload_models` already
   * serves. Resolves once every load has started.
   */
  restore(): Promise<ModelEntry>[] {
    const rows = (() => {
      try {
        return this.#store?.listModels() ?? [];
      } catch {
        return [];
      }
    })();
    const started: Promise<ModelEntry>[] = [];
    // In the order they were loaded (the first of a task serves requests that name none).
    rows.sort((a, b) => a.updated_ms - b.updated_ms);
    for (const row of rows) {
      let spec: LoadSpec | undefined;
      try {
        spec = (JSON.parse(row.config_json) as { load?: LoadSpec }).load;
      } catch { /* not ours */ }
      if (spec === undefined || this.registry.list().some((m) => m.modelId === row.model_id)) {
        continue;
      }
      this.#specs.set(spec.model_id, spec);
      const loading = this.registry.load(this.#source(spec));
      // A catalog model runs its self-check once loaded (or reuses the row of its key).
      started.push(
        spec.origin === "catalog" ? loading.then((e) => this.#selfCheck(e, spec)) : loading,
      );
    }
    return started;
  }

  /**
   * Runs the self-check of a catalog model once it is ready (through any background retries of
   * its load); resolves with the entry. A model whose catalog entry or backend is gone is left
   * unchecked (`pending`).
   */
  async #selfCheck(entry: ModelEntry, spec: LoadSpec): Promise<ModelEntry> {
    if (this.selfCheck === undefined || spec.catalog_id === undefined) return entry;
    const model = this.catalog.find((m) => m.id === spec.catalog_id);
    const backend = model?.backends.find((b) => b.backend === spec.engine);
    if (model === undefined || backend === undefined) return entry;
    await this.registry.ready(entry.modelId).catch(() => {});
    if (entry.state !== "ready") return entry;
    try {
      await this.selfCheck.ensure(
        entry,
        model,
        backend,
        spec.manifest_digest ?? manifestDigest(model),
      );
    } catch (err) {
      // Never the load's failure: the model stays `pending`, checked again at its next load.
      this.#log("warn", "synapse.models", `cannot run the self-check of '${entry.modelId}'`, {
        message: (err as Error).message,
      });
    }
    return entry;
  }

  /** Whether a catalog model's backend files are all in the cache. */
  async installed(model: CatalogModel): Promise<{ backend: string; installed: boolean }[]> {
    const out: { backend: string; installed: boolean }[] = [];
    for (const b of model.backends) {
      let all = true;
      for (const [, f] of backendFiles(b)) {
        if (f.sha256 === null || (await this.cache.meta(`sha256:${f.sha256}`)) === undefined) {
          all = false;
        }
      }
      out.push({ backend: b.backend, installed: all });
    }
    return out;
  }

  /** Records a loaded model in the store, so the next boot loads it again. */
  record(entry: ModelEntry, spec: LoadSpec): void {
    if (!entry.ready) return;
    try {
      this.#store?.upsertModel({
        model_id: entry.modelId,
        engine: entry.engine,
        task: entry.task,
        fingerprint: entry.ready.fingerprint,
        config_json: JSON.stringify({ load: spec, profile: entry.ready.profile }),
      });
    } catch (err) {
      this.#log("warn", "synapse.models", `cannot record model '${entry.modelId}' in the store`, {
        message: (err as Error).message,
      });
    }
  }

  #fail(job: Job, err: unknown): void {
    const signal = job.controller.signal;
    // A deadline aborts with its own error; models.download.cancel with an AbortError.
    const reason = signal.aborted ? signal.reason : undefined;
    if (signal.aborted && !(reason instanceof SynapseError)) {
      this.#jobs.set(job, "cancelled");
      return;
    }
    const e = toSynapseError(reason ?? err, "artifact_invalid");
    this.#jobs.set(job, "failed", { error: e.toWire() });
    this.#log("warn", "synapse.models", `${job.view.kind} ${job.view.job_id} failed`, {
      code: e.code,
      message: e.message,
    });
  }

  /**
   * Refuses an id that is taken. With `allowSameLoad`, an id a run-time load already holds passes
   * here: whether it is the same files is known only once they are resolved ({@link #sameLoad}).
   */
  #checkIdFree(modelId: string, allowSameLoad = false): void {
    if (allowSameLoad && this.#specs.get(modelId)?.origin === "runtime") return;
    if (this.registry.list().some((m) => m.modelId === modelId)) {
      throw new SynapseError(
        "invalid_request",
        `Cannot load '${modelId}': a model with this id is already loaded; unload it first or pick another model_id`,
        { details: { field: "model_id", model_id: modelId } },
      );
    }
    if (this.catalog.some((m) => m.id === modelId)) {
      throw new SynapseError(
        "invalid_request",
        `Cannot load '${modelId}': it is a catalog id; use models.download (ck-synapse pull ${modelId})`,
        { details: { field: "model_id", catalog_id: modelId } },
      );
    }
  }

  /**
   * The registry source of a spec, whose `verify` checks (and heals) its blobs first. A catalog
   * model takes its entry's `matryoshka_dims` (the catalog in this build) unless the spec has its own.
   */
  #source(spec: LoadSpec, job?: Job): ModelSource {
    const matryoshka = spec.matryoshka_dims ??
      (spec.catalog_id === undefined
        ? undefined
        : this.catalog.find((m) => m.id === spec.catalog_id)?.matryoshka_dims);
    return {
      ...sourceFromSpec(spec, (d) => this.cache.blobPath(d)),
      ...(matryoshka === undefined ? {} : { matryoshkaDims: [...matryoshka] }),
      verify: () => this.#verifySpec(spec, job),
    };
  }

  /**
   * Verifies every blob of a spec against its digest, healing a damaged or missing one from its
   * recorded sources (see the module doc); resolves to the model file's digest.
   *
   * @throws {SynapseError} `artifact_invalid {reason: "blob_digest_mismatch"}` (with `heal` when
   *   a source was tried and failed for good); a heal's transient failure as it is.
   */
  async #verifySpec(spec: LoadSpec, job?: Job): Promise<string> {
    for (const [role, f] of Object.entries(spec.files)) {
      if (f === undefined) continue;
      const label = { model_id: spec.model_id, file: role };
      try {
        await this.cache.verifyBlob(f.digest, label);
        continue;
      } catch (err) {
        const e = toSynapseError(err, "artifact_invalid");
        const damaged = e.code === "artifact_invalid" &&
          e.details?.reason === "blob_digest_mismatch";
        if (!damaged && e.code !== "model_not_installed") throw e;
        const sources = await this.#healSources(spec, f);
        if (sources.length === 0) throw e;
        let healed: { from: "url" | "file" };
        try {
          healed = await this.cache.healBlob(f.digest, sources, label);
        } catch (healErr) {
          const h = toSynapseError(healErr, "artifact_invalid");
          // A network fault: the registry retries the load (and the heal) later.
          if (h.errorClass === "transient") throw h;
          const why = String(h.details?.reason ?? h.code);
          throw new SynapseError(
            e.code,
            `${e.message.replace(/; pull the model again.*$/, "")}; its recorded source did not ` +
              `heal it (${why}); pull the model again from a good copy`,
            { cause: e, details: { ...e.details, heal: { code: h.code, reason: why } } },
          );
        }
        await this.cache.verifyBlob(f.digest, label);
        const note = { file: role, digest: f.digest, from: healed.from };
        if (job !== undefined) job.view.healed = [...(job.view.healed ?? []), note];
        this.#log(
          "warn",
          "synapse.models",
          `healed the damaged ${role} file of model '${spec.model_id}' from its recorded source`,
          { model_id: spec.model_id, file: role, digest: f.digest, from: healed.from },
        );
      }
    }
    return spec.files.model.digest;
  }

  /**
   * Where a blob's bytes can come from again: the spec's recorded source, the blob's recorded
   * source, and for a catalog model its entry's pinned URL (http(s) URLs and `file://` paths).
   */
  async #healSources(spec: LoadSpec, f: ResolvedFile): Promise<string[]> {
    const out = [f.source];
    const meta = await this.cache.meta(f.digest).catch(() => undefined);
    if (meta?.source) out.push(meta.source);
    const model = spec.catalog_id === undefined
      ? undefined
      : this.catalog.find((m) => m.id === spec.catalog_id);
    for (const b of model?.backends ?? []) {
      for (const [, cf] of backendFiles(b)) {
        if (cf.sha256 !== null && `sha256:${cf.sha256}` === f.digest) {
          out.push(fileUrl(cf, this.#hfEndpoint));
        }
      }
    }
    return [...new Set(out)].filter((s) => /^(https?|file):\/\//i.test(s));
  }

  #owner(kind: "model" | "catalog", id: string): string {
    return `${this.#moduleId}:${kind}:${id}`;
  }

  async #unpinAll(spec: LoadSpec): Promise<void> {
    if (spec.pin_owner === undefined) return;
    for (const f of Object.values(spec.files)) {
      if (f) await this.cache.unpin(f.digest, spec.pin_owner).catch(() => {});
    }
  }

  /** Brings one file into the cache; progress adds to the job's bytes. */
  async #fetch(job: Job, ref: FileRef, role: string, base: number): Promise<BlobMeta> {
    const meta = await this.#fetchOne(job, ref, role, base);
    job.digests.push(meta.digest);
    return meta;
  }

  async #fetchOne(job: Job, ref: FileRef, role: string, base: number): Promise<BlobMeta> {
    const signal = job.controller.signal;
    if (ref.kind === "local") {
      return await this.cache.importFile(ref.path, {
        expectedDigest: ref.sha256,
        signal,
      });
    }
    return await this.cache.download(ref.url, {
      sha256: ref.sha256,
      size: ref.size,
      file: role,
      signal,
      onProgress: (p) => {
        // No size pinned: the total is what the servers announced, for the files so far (a
        // pinned total, the sum of all files, is never below it).
        const announced = p.bytes_total === null ? null : base + p.bytes_total;
        const now = job.view.bytes_total;
        const total = now === null || (announced !== null && announced > now) ? announced : now;
        this.#jobs.set(job, job.view.state, {
          bytes_done: base + p.bytes_done,
          bytes_total: total,
        });
      },
    });
  }

  async #runLoad(
    job: Job,
    req: LoadRequest,
    plan: ReturnType<typeof resolveLoadFiles>,
  ): Promise<void> {
    try {
      const remote = plan.filter((f) => f.ref.kind === "url");
      const total = remote.every((f) => f.ref.kind === "url" && f.ref.size !== undefined)
        ? remote.reduce((a, f) => a + (f.ref.kind === "url" ? f.ref.size ?? 0 : 0), 0)
        : null;
      if (remote.length > 0) this.#jobs.set(job, "downloading", { bytes_total: total });
      const files: Partial<Record<"model" | "tokenizer" | "config", ResolvedFile>> = {};
      let done = 0;
      for (const f of plan) {
        const meta = await this.#fetch(job, f.ref, f.role, done);
        done += f.ref.kind === "url" ? meta.size : 0;
        files[f.role] = {
          digest: meta.digest,
          source: meta.source,
          format: meta.format,
          size: meta.size,
        };
      }
      this.#jobs.set(
        job,
        "validating",
        remote.length > 0 ? { bytes_done: done, bytes_total: done } : {},
      );
      for (const [role, f] of Object.entries(files)) {
        const meta = await this.cache.validate(
          f.digest,
          role === "model" ? undefined : `${role}_json` as ArtifactFormat,
        );
        if (meta.validation_state === "invalid") {
          throw new SynapseError(
            meta.validation_error?.code === "artifact_invalid"
              ? "artifact_invalid"
              : "artifact_invalid",
            meta.validation_error?.message ?? `Cannot load: ${role} file is not valid`,
            { details: { file: role, ...(meta.validation_error?.details ?? {}) } },
          );
        }
        f.format = meta.format;
      }
      const model = files.model!;
      const engine: ModelEngine = req.engine ?? (model.format === "gguf" ? "llama" : "ort");
      checkFormat(engine, model.format);
      if (engine === "ort" && files.tokenizer === undefined) {
        throw new SynapseError(
          "invalid_request",
          "Cannot load: an ONNX model needs its tokenizer.json (beside it, or files.tokenizer)",
          { details: { field: "files.tokenizer" } },
        );
      }
      job.controller.signal.throwIfAborted();
      const inferred = req.task !== undefined ? undefined : await inferTask(
        engine,
        this.cache.blobPath(model.digest),
        files.config && this.cache.blobPath(files.config.digest),
      );
      const task = req.task ?? inferred!.task;
      const modelId = req.model_id ?? modelIdFor(req, plan);
      this.#checkIdFree(modelId, true);
      if (req.reference_model !== undefined) {
        checkReferenceModel(modelId, req.reference_model, "reference_model");
      }
      const prompts = await loadRequestPrompts(req, modelId);
      job.view.model_id = modelId;
      job.view.task = task;
      job.view.task_reason = inferred === undefined ? "asked" : inferred.reason;
      if (inferred?.surprise !== undefined) this.#note(job, inferred.surprise);
      if (
        prompts !== undefined && req.prompts === undefined && req.default_prompt_name === undefined
      ) {
        // A table the caller did not send changes the vectors: say where it came from.
        this.#note(job, promptTableNote(prompts));
      }
      // A task chosen against mixed signals never takes over a default that serves already.
      const current = defaultModelOf(this.registry.list(), task);
      const notDefault = inferred?.surprise !== undefined && current !== undefined &&
        current.modelId !== modelId;
      const spec: LoadSpec = {
        model_id: modelId,
        engine,
        task,
        ...(req.pooling === undefined
          ? {}
          : { pooling: req.pooling === "last" ? "last_token" as const : req.pooling }),
        ...(req.normalize === undefined ? {} : { normalize: req.normalize }),
        ...(req.max_tokens === undefined ? {} : { max_tokens: req.max_tokens }),
        files: files as LoadSpec["files"],
        origin: "runtime",
        ...(req.pin === false ? {} : { pin_owner: this.#owner("model", modelId) }),
        ...(notDefault ? { not_default: true } : {}),
        ...(req.reference_model === undefined ? {} : { reference_model: req.reference_model }),
        ...(prompts === undefined ? {} : { prompts }),
        ...(req.matryoshka_dims === undefined ? {} : { matryoshka_dims: req.matryoshka_dims }),
      };
      let loaded = this.#specs.get(modelId);
      const entry = this.registry.list().find((m) => m.modelId === modelId);
      if (loaded !== undefined && entry?.state === "failed" && sameLoad(loaded, spec)) {
        // The same files failed to load before (a blob lost at a restart …): try them again.
        this.#specs.delete(modelId);
        await this.registry.unload(modelId).catch(() => {});
        loaded = undefined;
      }
      if (loaded !== undefined) {
        // Pulling what is already loaded is a no-op answered ready (like `ollama pull` twice);
        // other files under a taken id are refused.
        if (!sameLoad(loaded, spec)) {
          throw new SynapseError(
            "invalid_request",
            `Cannot load '${modelId}': a model with this id is already loaded from other files or settings; unload it first or pick another model_id`,
            { details: { field: "model_id", model_id: modelId } },
          );
        }
        this.#jobs.set(job, "ready", { already_loaded: true });
        return;
      }
      await this.#loadSpec(job, spec);
    } catch (err) {
      this.#fail(job, err);
      await this.#dropInvalid(job);
    }
  }

  /**
   * Deletes the blobs of a failed job that nothing can use: those that failed validation, and
   * those that are no model format at all. Pinned or leased blobs stay (GC skips them).
   */
  async #dropInvalid(job: Job): Promise<void> {
    for (const digest of job.digests) {
      const meta = await this.cache.meta(digest).catch(() => undefined);
      const useless = meta?.validation_state === "invalid" || meta?.format === "other";
      if (meta === undefined || !useless || meta.pins.length > 0) continue;
      for (let pass = 0; pass < 2; pass++) {
        await this.cache.gc({ digest, graceMs: 0 }).catch(() => []);
      }
    }
  }

  async #runDownload(
    job: Job,
    model: CatalogModel,
    backend: CatalogModel["backends"][number],
    manifest: string,
  ): Promise<void> {
    try {
      const list = backendFiles(backend);
      const sized = list.every(([, f]) => f.size !== null);
      this.#jobs.set(job, "downloading", {
        bytes_total: sized ? list.reduce((a, [, f]) => a + (f.size ?? 0), 0) : null,
      });
      const files: Partial<Record<"model" | "tokenizer" | "config", ResolvedFile>> = {};
      let done = 0;
      for (const [role, f] of list) {
        const ref: FileRef = {
          kind: "url",
          url: fileUrl(f, this.#hfEndpoint),
          sha256: `sha256:${f.sha256!}`,
          ...(f.size === null ? {} : { size: f.size }),
        };
        const meta = await this.#fetch(job, ref, role, done);
        done += meta.size;
        files[role] = {
          digest: meta.digest,
          source: meta.source,
          format: meta.format,
          size: meta.size,
        };
      }
      this.#jobs.set(job, "verifying", { bytes_done: done, bytes_total: done });
      for (const f of Object.values(files)) await this.cache.validate(f!.digest);
      const spec: LoadSpec = {
        model_id: model.id,
        engine: backend.backend,
        task: model.task,
        pooling: backend.pooling,
        normalize: backend.normalize,
        max_tokens: backend.max_tokens,
        files: files as LoadSpec["files"],
        origin: "catalog",
        catalog_id: model.id,
        lane_id: catalogLaneId(model, backend.backend),
        manifest_digest: manifest,
        pin_owner: this.#owner("catalog", model.id),
        ...(backend.prompts === undefined ? {} : { prompts: backend.prompts }),
      };
      for (const f of Object.values(spec.files)) await this.cache.pin(f!.digest, spec.pin_owner);
      this.#jobs.set(job, "committed");
      this.#specs.set(model.id, spec);
      job.view.task = spec.task;
      job.view.task_reason = "the catalog's";
      if (!this.registry.list().some((m) => m.modelId === model.id)) {
        const before = defaultModelOf(this.registry.list(), spec.task)?.modelId;
        const entry = await this.registry.load(this.#source(spec, job));
        this.record(entry, spec);
        if (entry.state === "ready") this.#noteDefault(job, spec, before);
        // Installed: the catalog self-check runs as part of the job (it ends once the check has).
        await this.#selfCheck(entry, spec);
      }
    } catch (err) {
      this.#fail(job, err);
    }
  }

  /** Adds a sentence to the job's notes (and the log). */
  #note(job: Job, text: string): void {
    job.view.notes = [...(job.view.notes ?? []), text];
    this.#log("info", "synapse.models", text, {
      job_id: job.view.job_id,
      model_id: job.view.model_id ?? "",
    });
  }

  /** Says whether a just-loaded model became the default of its task (F36). */
  #noteDefault(job: Job, spec: LoadSpec, before: string | undefined): void {
    const now = defaultModelOf(this.registry.list(), spec.task)?.modelId;
    if (now === spec.model_id && before !== spec.model_id) {
      job.view.default_for = spec.task;
      job.view.replaced_default = before ?? null;
      this.#note(
        job,
        `now the default ${spec.task} model${before === undefined ? "" : ` (was ${before})`}`,
      );
    } else if (spec.not_default && now !== undefined) {
      this.#note(
        job,
        `not made the default ${spec.task} model: ${now} stays; name it with model: ` +
          `${spec.model_id}, or pull it with --task ${spec.task} to make it the default`,
      );
    }
  }

  /** Leases, pins and loads a resolved model; the job ends ready or failed. */
  async #loadSpec(job: Job, spec: LoadSpec): Promise<void> {
    this.#jobs.set(job, "loading");
    const before = defaultModelOf(this.registry.list(), spec.task)?.modelId;
    const leases = Object.values(spec.files).map((f) => this.cache.acquireShared(f!.digest));
    try {
      if (spec.pin_owner !== undefined) {
        for (const f of Object.values(spec.files)) await this.cache.pin(f!.digest, spec.pin_owner);
      }
      this.#specs.set(spec.model_id, spec);
      const entry = await this.registry.load(this.#source(spec, job));
      // Through any background retries of a transient failure (a worker slow to start).
      await this.registry.ready(spec.model_id).catch(() => {});
      if (entry.state !== "ready") {
        this.#specs.delete(spec.model_id);
        await this.#unpinAll(spec);
        // A failed load leaves no model behind: the id is free for the next attempt.
        await this.registry.unload(spec.model_id).catch(() => {});
        throw entry.error ?? new SynapseError("artifact_invalid", `Cannot load '${spec.model_id}'`);
      }
      this.record(entry, spec);
      this.#noteDefault(job, spec, before);
      this.#jobs.set(job, "ready");
    } finally {
      for (const l of leases) l.release();
    }
  }
}

/**
 * The note of a prompt table read from the model directory's `config_sentence_transformers.json`:
 * its names and prefixes, the default, and what selects one.
 */
export function promptTableNote(table: PromptTable): string {
  const names = Object.entries(table.prompts).map(([n, p]) => `${n} ${JSON.stringify(p)}`);
  const def = table.default_prompt_name === undefined
    ? ""
    : `; default ${table.default_prompt_name}`;
  return `prompt table from ${ST_CONFIG_FILE}: ${
    names.join(", ") || "(empty)"
  }${def}; input_type / prompt_name select a prompt, and the table is part of the fingerprint`;
}

/**
 * The prompt table of a `model.load`: the request's `prompts` / `default_prompt_name`, else (a
 * local `path`) the `config_sentence_transformers.json` in the model's directory, else none.
 *
 * @throws {SynapseError} as `parsePromptTable` / `readSentenceTransformersPrompts`.
 */
async function loadRequestPrompts(
  req: LoadRequest,
  modelId: string,
): Promise<PromptTable | undefined> {
  if (req.prompts !== undefined || req.default_prompt_name !== undefined) {
    return parsePromptTable(req.prompts, req.default_prompt_name, "prompts", modelId);
  }
  if (req.path === undefined || (req.source !== undefined && req.source !== "path")) {
    return undefined;
  }
  let dir = req.path.replace(/\/+$/, "");
  try {
    if (!Deno.statSync(dir).isDirectory) dir = dir.slice(0, dir.lastIndexOf("/")) || ".";
  } catch {
    return undefined;
  }
  return await readSentenceTransformersPrompts(`${dir}/${ST_CONFIG_FILE}`, modelId);
}
