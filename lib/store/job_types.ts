/**
 * The shapes of durable jobs (docs/internals.md §8.2): states, the `jobs` row as the `JobStore`
 * returns it, and the inputs and outcomes of its actions. The rules are in `job_store.ts`.
 *
 * @module
 */
import { REQUEST_KEY_MAX_BYTES } from "../contract/schemas.ts";

import type { WireError } from "../contract/errors.ts";

/** Lifecycle states of a job (docs/internals.md §8.2). */
export type JobState =
  | "queued"
  | "running"
  | "paused_needs_reauth"
  | "done"
  | "failed_transient"
  | "failed_permanent";

/** Terminal states: the job will not change again (until it is swept). */
export type TerminalJobState = "done" | "failed_transient" | "failed_permanent";

/** Longest `request_key`, in UTF-8 bytes: the door's own limit (lib/contract/schemas.ts). */
export const MAX_REQUEST_KEY_BYTES = REQUEST_KEY_MAX_BYTES;

/** A row of `jobs`, with the JSON columns parsed. Times are unix milliseconds. */
export interface JobRow {
  /** Job id, e.g. `job_3f0c…`. */
  jobId: string;
  /** Idempotency key the job was admitted under. */
  requestKey: string;
  /** Request digest (64 lowercase hex) the key is bound to. */
  requestDigest: string;
  /** Operation that made the job, e.g. `embed.batch`. */
  kind: string;
  /** Module generation that admitted the job. */
  moduleGeneration: number;
  /** Current state. */
  state: JobState;
  /** Admission time (ms). */
  createdMs: number;
  /** Last change (ms). */
  updatedMs: number;
  /** Execution deadline (ms): a non-terminal job past it is failed by the sweep. */
  executionExpiresMs: number | null;
  /** How long the job stays readable after it ends (ms). */
  resultRetentionTtlMs: number | null;
  /** When the job reached a terminal state (ms), or null. */
  terminalAtMs: number | null;
  /** Id of the attempt running the job, or null. */
  activeAttemptId: string | null;
  /** Logical handle of the request, or null. */
  logicalHandle: string | null;
  /** When the job paused for re-authentication (ms), or null. */
  pausedAtMs: number | null;
  /** Deadline to resume a paused job (ms), or null. */
  resumeDeadlineMs: number | null;
  /** Resume TTL granted on pause (ms), or null. */
  resumeTtlMs: number | null;
  /** The job's parameters, as admitted (parsed `params_json`). */
  params: unknown;
  /** The job's result summary (parsed `result_json`), or null. */
  result: unknown;
  /** Why the job failed (parsed `error_json`), or null. */
  error: WireError | null;
  /** Pages committed so far. */
  pageCount: number;
  /** Items in the job. */
  itemsTotal: number;
  /** Items whose results are committed. */
  itemsDone: number;
  /** Estimated tokens in the job. */
  tokensTotal: number;
  /** Tokens whose results are committed. */
  tokensDone: number;
}

/** Time budgets of a job, in milliseconds (config `jobs.*`, 24 h each by default). */
export interface JobTtls {
  /** From admission to the execution deadline. */
  executionMs: number;
  /** From the terminal state to deletion. */
  retentionMs: number;
  /** From a pause to the resume deadline. */
  resumeMs: number;
}

/** Input of {@link JobStore.admit}. */
export interface AdmitJobInput {
  /** Idempotency key: 1..256 UTF-8 bytes. */
  requestKey: string;
  /** Request digest of the request (64 lowercase hex). */
  requestDigest: string;
  /** Operation, e.g. `embed.batch`. */
  kind: string;
  /** Module generation of this process. */
  moduleGeneration: number;
  /** Parameters the executor needs; stored as JSON. */
  params: unknown;
  /** Items in the job (non-negative integer). */
  itemsTotal: number;
  /** Estimated tokens in the job (non-negative integer). */
  tokensTotal: number;
  /** Time budgets. */
  ttls: JobTtls;
  /** Logical handle of the request, when it has one. */
  logicalHandle?: string;
  /**
   * Name the job that holds the key in an `idempotency_conflict` (`details.job_id`, the
   * message). Only for jobs of the owner's operations (`probe.start`): a job id is the
   * capability that reads a job's results, and a query's `request_key` may be guessed by any
   * local caller (field report F39). @default false
   */
  revealConflictingJob?: boolean;
}

/** Outcome of {@link JobStore.admit}. */
export interface AdmitJobResult {
  /** The job: the existing one when attached, else the fresh one (state `queued`). */
  job: JobRow;
  /** True when an existing job with the same key and digest was returned. */
  attached: boolean;
}

/** Progress after a committed page: running totals, not increments. */
export interface JobProgress {
  /** Items whose results are committed, this page included. */
  itemsDone: number;
  /** Tokens whose results are committed, this page included. */
  tokensDone: number;
}

/** One stored result page. */
export interface JobPage {
  /** The page as JSON text (what embed.result serves). */
  pageJson: string;
  /** Items on the page. */
  itemCount: number;
}

/** Outcome of {@link JobStore.sweepExpired}. */
export interface SweepResult {
  /** Non-terminal jobs failed because their execution or resume deadline passed. */
  expired: number;
  /** Terminal jobs deleted because their retention ended. */
  deletedJobs: number;
  /** Pages deleted with them. */
  deletedPages: number;
}

/** Job counters of this process (admission.status `jobs_*`). */
export interface JobCounters {
  /** Fresh jobs admitted. */
  minted: number;
  /** Jobs that reached `done`. */
  completed: number;
  /** Jobs that reached `failed_transient` or `failed_permanent`. */
  failed: number;
  /** Earlier-generation jobs taken over at boot. */
  inherited: number;
  /** `minted + inherited − completed − failed`, saturating at 0. */
  open: number;
}
