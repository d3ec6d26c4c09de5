/**
 * Durable jobs and their result pages (docs/operations.md "embed.batch", "embed.result";
 * docs/internals.md §8.2), over the `jobs` and `job_pages` tables of the {@link Store}.
 *
 * ## Admission and idempotency
 *
 * A job is admitted under a `request_key` (1..256 UTF-8 bytes) bound to a request digest
 * (`lib/identity/request_digest.ts`). {@link JobStore.admit} looks at the newest job with that
 * key, in the same transaction that mints:
 *
 * | newest job with the key | outcome |
 * |---|---|
 * | none, or its retention ended | mint a fresh job |
 * | same digest, `failed_transient` with an error that is `safe_to_retry_same_request` (always so for `module_restarted`) | mint a fresh job |
 * | same digest, any other state (queued, running, paused, done, failed) | attach: return it |
 * | another digest, still retained | `idempotency_conflict` `{request_key, job_id}` |
 *
 * "Retained" means non-terminal, or terminal with `terminal_at_ms + result_retention_ttl_ms ≥ now`.
 *
 * ## Pages
 *
 * Pages live in `job_pages`, keyed by (job_id, page_no): a fresh job minted after a restart never
 * collides with the old job's pages, which stay readable (in any state) until the old job is
 * swept. Pages are appended in order (0, 1, 2 …) while the job is `running`.
 *
 * ## Restart and expiry
 *
 * - {@link JobStore.inheritEarlierGenerations} (at boot): every `queued`/`running` job of an
 *   earlier module generation becomes `failed_transient` with `module_restarted` (transient, 100
 *   ms, safe to retry the same request). So does a `paused_needs_reauth` one: a job's inputs
 *   live only in the process that admitted it, so a paused job cannot be resumed by another
 *   (`job.resume` resumes one in its own process; {@link JobStore.pause}, {@link JobStore.resume}).
 * - {@link JobStore.sweepExpired}: a `queued`/`running` job past `execution_expires_ms` becomes
 *   `failed_transient` with `deadline_exceeded`; a `paused_needs_reauth` job past
 *   `resume_deadline_ms` becomes `failed_permanent` with `needs_reauth_expired`. Failing first
 *   (rather than deleting at once) starts the retention clock, so the caller can still read what
 *   happened and the pages made so far. Terminal jobs past retention are deleted with their pages.
 *
 * ## Counters
 *
 * {@link JobStore.counters} (admission.status `jobs_*`) counts in memory, for the lifetime of this
 * `JobStore` (one per process): `minted` fresh jobs, `completed` (→ done), `failed` (→ failed_*,
 * including expiry and inheritance), `inherited` (earlier-generation jobs taken over at boot, each
 * also counted as failed, since inheriting fails them), `open = minted + inherited − completed −
 * failed`, saturating at 0.
 *
 * ## Faults
 *
 * Every SQLite failure surfaces as {@link SynapseError} `store_failure` (details `reason:
 * "storage_full"` on a full disk, `"io_error"`), a corrupt page or an unreadable stored JSON
 * column as `internal_error` `{reason: "store_corrupt"}` (permanent: a retry cannot mend it); a
 * disposed store as `disposed`. When the store refuses to write a job's failure ({@link
 * JobStore.finish} on a full disk), the failure is kept in memory and laid over the row: the job
 * reads as failed and a resubmit with its key mints a fresh job (never attaches to a job that
 * shows `running` forever); it is written at the next write that succeeds, and a restart fails
 * the row `module_restarted` in any case.
 *
 * @module
 */

import type { DatabaseSync } from "node:sqlite";
import { SynapseError } from "../contract/errors.ts";
import type { WireError } from "../contract/errors.ts";
import type { Store } from "./store.ts";
import { storeFailure } from "./_store_faults.ts";
import {
  getJob,
  JOB_COLUMNS,
  mustGet,
  requireJob,
  RETENTION_ENDED,
  rowToJob,
} from "./_job_rows.ts";
import {
  checkCount,
  checkFinish,
  checkRequestKey,
  isRetained,
  isRetryableFailure,
  isTerminal,
  wrongState,
} from "./_job_rules.ts";
import type {
  AdmitJobInput,
  AdmitJobResult,
  JobCounters,
  JobPage,
  JobProgress,
  JobRow,
  SweepResult,
  TerminalJobState,
} from "./job_types.ts";

/** Options of {@link JobStore}. */
export interface JobStoreOptions {
  /**
   * Wall clock, unix milliseconds.
   *
   * @default {Date.now}
   */
  clock?: () => number;
  /**
   * Job id generator.
   *
   * @default {() => "job_" + crypto.randomUUID() without dashes}
   */
  newId?: () => string;
}

/**
 * Jobs and their result pages in the Synapse store (rules in the module documentation).
 *
 * @example Admit, run, page, finish
 * ```ts ignore
 * const jobs = new JobStore(store);
 * const { job } = jobs.admit({
 *   requestKey: "k1", requestDigest: digest, kind: "embed.batch",
 *   moduleGeneration: store.moduleGeneration, params: {}, itemsTotal: 2, tokensTotal: 10,
 *   ttls: { executionMs: 86_400_000, retentionMs: 86_400_000, resumeMs: 86_400_000 },
 * });
 * jobs.markRunning(job.jobId);
 * jobs.commitPage(job.jobId, 0, 2, pageJson, { itemsDone: 2, tokensDone: 10 });
 * jobs.finish(job.jobId, "done");
 * ```
 */
export class JobStore {
  #store: Store;
  #clock: () => number;
  #newId: () => string;
  #minted = 0;
  #completed = 0;
  #failed = 0;
  #inherited = 0;
  /** Failures whose write the store refused (a full disk), by job id, until a write succeeds. */
  #unrecorded = new Map<string, { state: TerminalJobState; error: WireError; atMs: number }>();

  /**
   * Wraps an open store (migration 3 or later).
   *
   * @param store The store; the JobStore does not own it and never disposes it.
   * @param options Clock and id generator.
   */
  constructor(store: Store, options: JobStoreOptions = {}) {
    this.#store = store;
    this.#clock = options.clock ?? Date.now;
    this.#newId = options.newId ?? defaultNewId;
  }

  /**
   * Admits a job under `requestKey`, or attaches to the existing one, in one transaction (table
   * in the module documentation). A minted job is `queued`, with
   * `execution_expires_ms = now + ttls.executionMs`.
   *
   * @param input Key, digest, kind, generation, params, totals and TTLs.
   * @returns The job and whether it was attached.
   * @throws {SynapseError} `invalid_request` (details `{field: "request_key", bytes, max_bytes}`)
   * when the key is empty or longer than 256 UTF-8 bytes; `idempotency_conflict` (details
   * `{request_key}`, plus `job_id` with `revealConflictingJob`) when a retained job holds the
   *   key under another digest;
   * `store_failure`; `disposed`.
   * @throws {TypeError} when a field has the wrong type or `params` cannot be serialized.
   * @throws {RangeError} when a count or TTL is not a non-negative integer.
   */
  admit(input: AdmitJobInput): AdmitJobResult {
    checkRequestKey(input.requestKey);
    for (const field of ["requestDigest", "kind"] as const) {
      if (typeof input[field] !== "string" || input[field] === "") {
        throw new TypeError(`Cannot admit job: '${field}' must be a non-empty string`);
      }
    }
    if (input.logicalHandle !== undefined && typeof input.logicalHandle !== "string") {
      throw new TypeError("Cannot admit job: 'logicalHandle' must be a string");
    }
    checkCount("admit job", "moduleGeneration", input.moduleGeneration);
    checkCount("admit job", "itemsTotal", input.itemsTotal);
    checkCount("admit job", "tokensTotal", input.tokensTotal);
    checkCount("admit job", "ttls.executionMs", input.ttls?.executionMs);
    checkCount("admit job", "ttls.retentionMs", input.ttls?.retentionMs);
    checkCount("admit job", "ttls.resumeMs", input.ttls?.resumeMs);
    const paramsJson = JSON.stringify(input.params ?? null);
    if (paramsJson === undefined) {
      throw new TypeError("Cannot admit job: 'params' is not serializable as JSON");
    }
    const now = this.#clock();
    const newId = this.#newId;
    this.#flushUnrecorded();
    const outcome = this.#store.transaction((db) => {
      const newest = db.prepare(
        `SELECT ${JOB_COLUMNS} FROM jobs WHERE request_key = ?
         ORDER BY created_ms DESC, rowid DESC LIMIT 1`,
      ).get(input.requestKey);
      if (newest !== undefined) {
        const job = this.#overlay(rowToJob(newest));
        if (isRetained(job, now)) {
          if (job.requestDigest !== input.requestDigest) {
            // A query's job is read by its id: only the owner's operations learn whose it is.
            const reveal = input.revealConflictingJob === true;
            throw new SynapseError(
              "idempotency_conflict",
              reveal
                ? `Cannot admit job: request_key '${input.requestKey}' is bound to job ${job.jobId} with another request digest`
                : `Cannot admit job: request_key '${input.requestKey}' is bound to another request; use a new key, or resend exactly the original request`,
              {
                details: reveal
                  ? { request_key: input.requestKey, job_id: job.jobId }
                  : { request_key: input.requestKey },
              },
            );
          }
          if (!isRetryableFailure(job)) return { job, attached: true };
        }
      }
      const jobId = newId();
      db.prepare(
        `INSERT INTO jobs (job_id, request_key, request_digest, kind, module_generation, state,
           created_ms, updated_ms, execution_expires_ms, result_retention_ttl_ms, logical_handle,
           resume_ttl_ms, params_json, page_count, items_total, items_done, tokens_total,
           tokens_done)
         VALUES (?, ?, ?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?, ?, 0, ?, 0, ?, 0)`,
      ).run(
        jobId,
        input.requestKey,
        input.requestDigest,
        input.kind,
        input.moduleGeneration,
        now,
        now,
        now + input.ttls.executionMs,
        input.ttls.retentionMs,
        input.logicalHandle ?? null,
        input.ttls.resumeMs,
        paramsJson,
        input.itemsTotal,
        input.tokensTotal,
      );
      return { job: mustGet(db, jobId), attached: false };
    });
    if (!outcome.attached) this.#minted++;
    return outcome;
  }

  /**
   * Reads one job.
   *
   * @param jobId Job id.
   * @returns The job, or undefined when there is none (never admitted, or swept).
   * @throws {SynapseError} `store_failure`; `disposed`.
   */
  get(jobId: string): JobRow | undefined {
    const job = this.#read(`read job ${jobId}`, (db) => getJob(db, jobId));
    return job === undefined ? undefined : this.#overlay(job);
  }

  /**
   * Moves a `queued` job to `running` (a `running` one stays so).
   *
   * @param jobId Job id.
   * @returns The updated job.
   * @throws {SynapseError} `invalid_request` (details `{job_id, state?}`) when the job is unknown
   * or in another state; `store_failure`; `disposed`.
   */
  markRunning(jobId: string): JobRow {
    const now = this.#clock();
    return this.#store.transaction((db) => {
      const job = this.#overlay(requireJob(db, jobId, "mark running"));
      if (job.state !== "queued" && job.state !== "running") {
        throw wrongState(jobId, job.state, "mark running", "queued or running");
      }
      db.prepare("UPDATE jobs SET state = 'running', updated_ms = ? WHERE job_id = ?").run(
        now,
        jobId,
      );
      return mustGet(db, jobId);
    });
  }

  /**
   * Appends a result page and records progress, in one transaction.
   *
   * @param jobId Job id; the job must be `running`.
   * @param pageNo Page number; must equal the job's current page count (pages are appended).
   * @param itemCount Items on the page (non-negative integer).
   * @param pageJson The page as JSON text.
   * @param progress Running totals after this page.
   * @returns The updated job.
   * @throws {SynapseError} `invalid_request` (details `{job_id, state?, page_no?, page_count?}`)
   * when the job is unknown, not running (e.g. swept or failed meanwhile) or `pageNo` is out of
   * order; `store_failure`; `disposed`.
   * @throws {RangeError} when a count is not a non-negative integer.
   * @throws {TypeError} when `pageJson` is not a string.
   */
  commitPage(
    jobId: string,
    pageNo: number,
    itemCount: number,
    pageJson: string,
    progress: JobProgress,
  ): JobRow {
    checkCount("commit page", "pageNo", pageNo);
    checkCount("commit page", "itemCount", itemCount);
    checkCount("commit page", "progress.itemsDone", progress?.itemsDone);
    checkCount("commit page", "progress.tokensDone", progress?.tokensDone);
    if (typeof pageJson !== "string") {
      throw new TypeError("Cannot commit page: 'pageJson' must be a string");
    }
    const now = this.#clock();
    return this.#store.transaction((db) => {
      const job = this.#overlay(requireJob(db, jobId, "commit page"));
      if (job.state !== "running") throw wrongState(jobId, job.state, "commit page", "running");
      if (pageNo !== job.pageCount) {
        throw new SynapseError(
          "invalid_request",
          `Cannot commit page ${pageNo} of job ${jobId}: the next page is ${job.pageCount}`,
          { details: { job_id: jobId, page_no: pageNo, page_count: job.pageCount } },
        );
      }
      db.prepare(
        `INSERT INTO job_pages (job_id, page_no, item_count, page_json, committed_at_ms)
         VALUES (?, ?, ?, ?, ?)`,
      ).run(jobId, pageNo, itemCount, pageJson, now);
      db.prepare(
        `UPDATE jobs SET page_count = page_count + 1, items_done = ?, tokens_done = ?,
           updated_ms = ? WHERE job_id = ?`,
      ).run(progress.itemsDone, progress.tokensDone, now, jobId);
      return mustGet(db, jobId);
    });
  }

  /**
   * Ends a job: sets the terminal state, `terminal_at_ms` and, for a failure, `error_json`.
   *
   * @param jobId Job id; the job must not be terminal yet.
   * @param state `done`, or a failure whose class matches `error.class`.
   * @param error Why it failed (required for failures, refused for `done`); a
   * `SynapseError#toWire()` fits.
   * @returns The updated job.
   * @throws {SynapseError} `invalid_request` (details `{job_id, state?}`) when the job is unknown
   * or already terminal; `store_failure`; `disposed`.
   * @throws {TypeError} when the error is missing, present for `done`, or of the other class.
   */
  finish(jobId: string, state: TerminalJobState, error?: WireError): JobRow {
    checkFinish(state, error);
    const errorJson = error === undefined ? null : JSON.stringify(error);
    const now = this.#clock();
    this.#flushUnrecorded();
    let known: JobRow | undefined;
    let job: JobRow;
    try {
      job = this.#store.transaction((db) => {
        known = this.#overlay(requireJob(db, jobId, "finish"));
        if (isTerminal(known.state)) {
          throw wrongState(jobId, known.state, "finish", "not terminal");
        }
        db.prepare(
          `UPDATE jobs SET state = ?, error_json = ?, terminal_at_ms = ?, updated_ms = ?,
             active_attempt_id = NULL WHERE job_id = ?`,
        ).run(state, errorJson, now, now, jobId);
        return mustGet(db, jobId);
      });
    } catch (err) {
      // The store refused the write (a full disk, an I/O error) after the job was read: a
      // failure is kept in memory and laid over the row, so the job reads as failed and its key
      // mints a fresh job, instead of showing `running` forever. Written at the next write that
      // succeeds; a restart fails the row `module_restarted` anyway.
      const refused = err instanceof SynapseError &&
        (err.code === "store_failure" || err.details?.reason === "store_corrupt");
      if (refused && known === undefined) {
        // The write lock itself was refused: read the job as it is.
        try {
          const row = getJob(this.#store.database, jobId);
          known = row === undefined ? undefined : this.#overlay(row);
        } catch { /* unreadable as well: nothing to lay over */ }
      }
      if (
        refused && known !== undefined && !isTerminal(known.state) && state !== "done" &&
        error !== undefined
      ) {
        this.#unrecorded.set(jobId, { state, error, atMs: now });
        this.#failed++;
      }
      throw err;
    }
    this.#unrecorded.delete(jobId);
    if (state === "done") this.#completed++;
    else this.#failed++;
    return job;
  }

  /**
   * Pauses a running job for re-authentication (contract §1 `job.resume`, §7 job states): a
   * remote provider refused its credentials. Sets `paused_needs_reauth`, `paused_at_ms` (now),
   * `resume_deadline_ms` (now + the job's resume TTL) and `error_json` (why it paused; cleared by
   * {@link resume}). Pages committed before stay readable.
   *
   * @param jobId Job id; the job must be `running`.
   * @param error Why it paused (`needs_reauth`, `credential_config_invalid`).
   * @returns The updated job.
   * @throws {SynapseError} `invalid_request` (details `{job_id, state?}`) when the job is unknown
   *   or not running; `store_failure`; `disposed`.
   */
  pause(jobId: string, error: WireError): JobRow {
    const now = this.#clock();
    return this.#store.transaction((db) => {
      const job = this.#overlay(requireJob(db, jobId, "pause"));
      if (job.state !== "running") throw wrongState(jobId, job.state, "pause", "running");
      const deadline = now + (job.resumeTtlMs ?? 86_400_000);
      db.prepare(
        `UPDATE jobs SET state = 'paused_needs_reauth', paused_at_ms = ?, resume_deadline_ms = ?,
           error_json = ?, updated_ms = ? WHERE job_id = ?`,
      ).run(now, deadline, JSON.stringify(error), now, jobId);
      return mustGet(db, jobId);
    });
  }

  /**
   * Resumes a paused job (`job.resume`): `paused_needs_reauth` → `running`, its pause fields and
   * error cleared. A job past its resume deadline is failed `needs_reauth_expired` instead (what
   * the sweep would do), and that error thrown.
   *
   * @param jobId Job id; the job must be `paused_needs_reauth`.
   * @returns The updated job.
   * @throws {SynapseError} `needs_reauth_expired` past the deadline; `invalid_request` (details
   *   `{job_id, state?}`) when the job is unknown or not paused; `store_failure`; `disposed`.
   */
  resume(jobId: string): JobRow {
    const now = this.#clock();
    const expired = this.#store.transaction((db) => {
      const job = this.#overlay(requireJob(db, jobId, "resume"));
      if (job.state !== "paused_needs_reauth") {
        throw wrongState(jobId, job.state, "resume", "paused_needs_reauth");
      }
      if (job.resumeDeadlineMs !== null && job.resumeDeadlineMs < now) return true;
      db.prepare(
        `UPDATE jobs SET state = 'running', paused_at_ms = NULL, resume_deadline_ms = NULL,
           error_json = NULL, updated_ms = ? WHERE job_id = ?`,
      ).run(now, jobId);
      return false;
    });
    if (!expired) return this.get(jobId)!;
    const error = new SynapseError(
      "needs_reauth_expired",
      `Job ${jobId} was not resumed before its resume deadline; submit the request again with a new request_key`,
      { details: { job_id: jobId } },
    );
    this.finish(jobId, "failed_permanent", error.toWire());
    throw error;
  }

  /**
   * Reads a result page; pages are readable in any job state until the job is swept.
   *
   * @param jobId Job id.
   * @param pageNo Page number (0-based).
   * @returns The page, or undefined when the job or the page does not exist.
   * @throws {SynapseError} `store_failure`; `disposed`.
   */
  readPage(jobId: string, pageNo: number): JobPage | undefined {
    return this.#read(`read page ${pageNo} of job ${jobId}`, (db) => {
      const row = db.prepare(
        "SELECT page_json, item_count FROM job_pages WHERE job_id = ? AND page_no = ?",
      ).get(jobId, pageNo);
      if (row === undefined) return undefined;
      return { pageJson: String(row.page_json), itemCount: Number(row.item_count) };
    });
  }

  /**
   * Counts the committed pages of a job (pages 0..n−1 are readable).
   *
   * @param jobId Job id.
   * @returns The page count, or undefined when the job does not exist.
   * @throws {SynapseError} `store_failure`; `disposed`.
   */
  pageCount(jobId: string): number | undefined {
    return this.#read(`count pages of job ${jobId}`, (db) => {
      const row = db.prepare("SELECT page_count FROM jobs WHERE job_id = ?").get(jobId);
      return row === undefined ? undefined : Number(row.page_count);
    });
  }

  /**
   * Fails every `queued`/`running` job of an earlier module generation with `module_restarted`
   * (transient, `retry_after_ms` 100, safe to retry the same request). Their pages stay readable.
   * Call once at boot; calling again changes nothing.
   *
   * @param currentGeneration Module generation of this process.
   * @returns How many jobs were inherited (each also counts as failed).
   * @throws {SynapseError} `store_failure`; `disposed`.
   * @throws {RangeError} when the generation is not a non-negative integer.
   */
  inheritEarlierGenerations(currentGeneration: number): number {
    checkCount("inherit jobs", "currentGeneration", currentGeneration);
    const error = new SynapseError(
      "module_restarted",
      `Job interrupted by a module restart (now generation ${currentGeneration}); resubmit the same request to run it again`,
    ).toWire();
    const now = this.#clock();
    const n = this.#store.transaction((db) =>
      Number(
        db.prepare(
          `UPDATE jobs SET state = 'failed_transient', error_json = ?, terminal_at_ms = ?,
             updated_ms = ?, active_attempt_id = NULL
           WHERE module_generation < ? AND state IN ('queued', 'running', 'paused_needs_reauth')`,
        ).run(JSON.stringify(error), now, now, currentGeneration).changes,
      )
    );
    this.#inherited += n;
    this.#failed += n;
    return n;
  }

  /**
   * Fails non-terminal jobs past their deadlines, then deletes terminal jobs whose retention
   * ended (`terminal_at_ms + result_retention_ttl_ms < now`) with their pages, in one transaction.
   *
   * @param now Unix milliseconds; defaults to the clock.
   * @returns Counts of expired, deleted jobs and deleted pages.
   * @throws {SynapseError} `store_failure`; `disposed`.
   */
  sweepExpired(now: number = this.#clock()): SweepResult {
    const deadline = JSON.stringify(
      new SynapseError(
        "deadline_exceeded",
        "Job exceeded its execution TTL before it finished",
      ).toWire(),
    );
    const reauth = JSON.stringify(
      new SynapseError(
        "needs_reauth_expired",
        "Job was not resumed before its resume deadline",
      ).toWire(),
    );
    this.#flushUnrecorded();
    const result = this.#store.transaction((db) => {
      const timedOut = Number(
        db.prepare(
          `UPDATE jobs SET state = 'failed_transient', error_json = ?, terminal_at_ms = ?,
             updated_ms = ?, active_attempt_id = NULL
           WHERE state IN ('queued', 'running') AND execution_expires_ms < ?`,
        ).run(deadline, now, now, now).changes,
      );
      const reauthExpired = Number(
        db.prepare(
          `UPDATE jobs SET state = 'failed_permanent', error_json = ?, terminal_at_ms = ?,
             updated_ms = ?, active_attempt_id = NULL
           WHERE state = 'paused_needs_reauth' AND resume_deadline_ms < ?`,
        ).run(reauth, now, now, now).changes,
      );
      const deletedPages = Number(
        db.prepare(
          `DELETE FROM job_pages WHERE job_id IN (SELECT job_id FROM jobs WHERE ${RETENTION_ENDED})`,
        ).run(now).changes,
      );
      const deletedJobs = Number(
        db.prepare(`DELETE FROM jobs WHERE ${RETENTION_ENDED}`).run(now).changes,
      );
      return { expired: timedOut + reauthExpired, deletedJobs, deletedPages };
    });
    this.#failed += result.expired;
    return result;
  }

  /**
   * Job counters of this JobStore's lifetime (rules in the module documentation).
   *
   * @returns A fresh snapshot.
   */
  counters(): JobCounters {
    const open = this.#minted + this.#inherited - this.#completed - this.#failed;
    return {
      minted: this.#minted,
      completed: this.#completed,
      failed: this.#failed,
      inherited: this.#inherited,
      open: Math.max(0, open),
    };
  }

  #read<T>(action: string, fn: (db: DatabaseSync) => T): T {
    const db = this.#store.database;
    try {
      return fn(db);
    } catch (err) {
      throw storeFailure(`Cannot ${action} in store ${this.#store.path}`, err, this.#store.path);
    }
  }

  /** The job as the store holds it, with an end that could not be written laid over it. */
  #overlay(job: JobRow): JobRow {
    const end = this.#unrecorded.get(job.jobId);
    if (end === undefined || isTerminal(job.state)) return job;
    return {
      ...job,
      state: end.state,
      error: end.error,
      terminalAtMs: end.atMs,
      updatedMs: end.atMs,
    };
  }

  /** Writes the ends that could not be written before; those that still fail stay in memory. */
  #flushUnrecorded(): void {
    for (const [jobId, end] of this.#unrecorded) {
      try {
        this.#store.transaction((db) => {
          db.prepare(
            `UPDATE jobs SET state = ?, error_json = ?, terminal_at_ms = ?, updated_ms = ?,
               active_attempt_id = NULL
             WHERE job_id = ? AND state NOT IN ('done', 'failed_transient', 'failed_permanent')`,
          ).run(end.state, JSON.stringify(end.error), end.atMs, end.atMs, jobId);
        });
        this.#unrecorded.delete(jobId);
      } catch {
        return; // the store still refuses writes: try again at the next write
      }
    }
  }
}

function defaultNewId(): string {
  return "job_" + crypto.randomUUID().replaceAll("-", "");
}
