/**
 * The jobs of run-time loads and catalog downloads (`model.load`, `models.download`): their
 * views as `model.status` answers them, their request keys (idempotency) and their lifetimes.
 * Jobs live in memory; the newest ended ones are kept for `model.status`.
 *
 * @module
 */
import { SynapseError, type WireError } from "../contract/errors.ts";
import type { Digest } from "../cache/types.ts";
import type { ModelTask } from "./model.ts";

/** State of a `model.load` job. */
export type LoadJobState =
  | "resolving"
  | "downloading"
  | "validating"
  | "loading"
  | "ready"
  | "failed";

/** State of a `models.download` job. */
export type DownloadJobState =
  | "queued"
  | "downloading"
  | "verifying"
  | "committed"
  | "failed"
  | "cancelled";

/** A job as `model.load`, `model.status` and `models.download` answer it. */
export interface ModelJobView {
  job_id: string;
  kind: "model.load" | "models.download";
  state: LoadJobState | DownloadJobState;
  model_id: string | null;
  catalog_id?: string;
  request_key?: string;
  /** Bytes fetched so far and expected (downloading, and after). */
  bytes_done: number;
  bytes_total: number | null;
  /** Set when `state` is `failed`. */
  error?: WireError;
  /** True when the same files were already loaded under this id (nothing was done). */
  already_loaded?: boolean;
  /** The task the model serves (set once known). */
  task?: ModelTask;
  /** Why that task: `asked` (the request named it) or what the file said (F36). */
  task_reason?: string;
  /** Sentences the pull prints: a surprising task choice, a default taken over or kept. */
  notes?: string[];
  /** Set when the model became the default of its task (requests that name no model). */
  default_for?: ModelTask;
  /** The model that was the default of that task before (null: none). */
  replaced_default?: string | null;
  /** Damaged or missing blobs this load fetched again from their recorded source (F28). */
  healed?: { file: string; digest: Digest; from: "url" | "file" }[];
  created_ms: number;
  updated_ms: number;
}

/** A job and what runs it. */
export interface Job {
  view: ModelJobView;
  digest: string;
  controller: AbortController;
  done: Promise<void>;
  /** Blobs the job brought into the cache (or found there). */
  digests: Digest[];
}

/** Ended jobs kept for `model.status` (the newest ones). */
const KEEP_ENDED_JOBS = 256;

/** The job table of {@link ModelLoads}. */
export class ModelJobTable {
  #jobs = new Map<string, Job>();
  #byKey = new Map<string, Job>();
  #seq = 0;
  #now: () => number;

  constructor(now: () => number) {
    this.#now = now;
  }

  /**
   * The live job a request key names, when its params digest matches; undefined for none (or a
   * failed or cancelled one: the same key starts afresh).
   *
   * @throws {SynapseError} `idempotency_conflict` for the key with other params.
   */
  attach(key: string | undefined, digest: string): ModelJobView | undefined {
    if (key === undefined) return undefined;
    const job = this.#byKey.get(key);
    if (job === undefined) return undefined;
    if (job.digest !== digest) {
      throw new SynapseError(
        "idempotency_conflict",
        `Cannot start: request_key '${key}' already names a job with other params (${job.view.job_id})`,
        { details: { request_key: key, job_id: job.view.job_id } },
      );
    }
    // A failed or cancelled job under the same key starts afresh (the cache resumes its bytes).
    if (job.view.state === "failed" || job.view.state === "cancelled") return undefined;
    return { ...job.view };
  }

  /** A new job under an optional request key. */
  create(
    kind: ModelJobView["kind"],
    modelId: string | null,
    digest: string,
    requestKey: string | undefined,
    state: ModelJobView["state"],
  ): Job {
    const now = this.#now();
    const rand = crypto.getRandomValues(new Uint8Array(6));
    const id = `${kind === "model.load" ? "load" : "dl"}_${now.toString(36)}${
      (++this.#seq).toString(36)
    }${[...rand].map((b) => b.toString(16).padStart(2, "0")).join("")}`;
    const job: Job = {
      view: {
        job_id: id,
        kind,
        state,
        model_id: modelId,
        ...(requestKey === undefined ? {} : { request_key: requestKey }),
        bytes_done: 0,
        bytes_total: null,
        created_ms: now,
        updated_ms: now,
      },
      digest,
      controller: new AbortController(),
      done: Promise.resolve(),
      digests: [],
    };
    this.#jobs.set(id, job);
    if (requestKey !== undefined) this.#byKey.set(requestKey, job);
    this.trim();
    return job;
  }

  /** Moves a job to a state, with extra view fields. */
  set(job: Job, state: ModelJobView["state"], extra: Partial<ModelJobView> = {}): void {
    Object.assign(job.view, extra, { state, updated_ms: this.#now() });
  }

  /**
   * A job, by id.
   *
   * @throws {SynapseError} `invalid_request` for an unknown job.
   */
  get(jobId: string): Job {
    const job = this.#jobs.get(jobId);
    if (job === undefined) {
      throw new SynapseError("invalid_request", `Cannot find job '${jobId}'`, {
        details: { field: "job_id", job_id: jobId },
      });
    }
    return job;
  }

  /** Forgets the oldest ended jobs past {@link KEEP_ENDED_JOBS}. */
  trim(): void {
    if (this.#jobs.size <= KEEP_ENDED_JOBS * 2) return;
    for (const [id, job] of this.#jobs) {
      if (this.#jobs.size <= KEEP_ENDED_JOBS) break;
      const s = job.view.state;
      if (s === "ready" || s === "failed" || s === "committed" || s === "cancelled") {
        this.#jobs.delete(id);
        if (job.view.request_key !== undefined) this.#byKey.delete(job.view.request_key);
      }
    }
  }
}
