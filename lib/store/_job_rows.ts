/**
 * Rows of the `jobs` table: the column list every read selects, the codec from a SQLite row to a
 * {@link JobRow} (JSON columns parsed), and the reads the store's transactions share. Private to
 * `lib/store/`.
 *
 * @module
 */

import type { DatabaseSync, SQLOutputValue } from "node:sqlite";
import { SynapseError } from "../contract/errors.ts";
import type { WireError } from "../contract/errors.ts";
import type { JobRow, JobState } from "./job_types.ts";

/** The columns of `jobs`, in the order {@link rowToJob} reads them. */
export const JOB_COLUMNS =
  `job_id, CAST(request_key AS BLOB) AS request_key, request_digest, kind, module_generation, state, created_ms,
  updated_ms, execution_expires_ms, result_retention_ttl_ms, terminal_at_ms, active_attempt_id,
  logical_handle, paused_at_ms, resume_deadline_ms, resume_ttl_ms, params_json, result_json,
  error_json, page_count, items_total, items_done, tokens_total, tokens_done`;

const KEY_DECODER = new TextDecoder();

/** `terminal_at_ms + result_retention_ttl_ms < ?` — the retention of a terminal job ended. */
export const RETENTION_ENDED = `terminal_at_ms IS NOT NULL
  AND terminal_at_ms + COALESCE(result_retention_ttl_ms, 0) < ?`;

/** Reads one job, or `undefined` when there is none. */
export function getJob(db: DatabaseSync, jobId: string): JobRow | undefined {
  const row = db.prepare(`SELECT ${JOB_COLUMNS} FROM jobs WHERE job_id = ?`).get(jobId);
  return row === undefined ? undefined : rowToJob(row);
}

/**
 * Reads one job that an action needs.
 *
 * @throws {SynapseError} `invalid_request` "Cannot ACTION job ID: unknown job" (details `{job_id}`).
 */
export function requireJob(db: DatabaseSync, jobId: string, action: string): JobRow {
  const job = getJob(db, jobId);
  if (job === undefined) {
    throw new SynapseError("invalid_request", `Cannot ${action} job ${jobId}: unknown job`, {
      details: { job_id: jobId },
    });
  }
  return job;
}

/** Reads a row this transaction just wrote; its absence is a bug. */
export function mustGet(db: DatabaseSync, jobId: string): JobRow {
  const job = getJob(db, jobId);
  if (job === undefined) {
    throw new Error(`Job ${jobId} vanished inside its transaction. This is a bug`);
  }
  return job;
}

/**
 * A `jobs` row as a {@link JobRow}.
 *
 * @throws {SyntaxError} when a JSON column does not parse (the store reports it as
 * `store_failure`).
 */
export function rowToJob(row: Record<string, SQLOutputValue>): JobRow {
  return {
    jobId: String(row.job_id),
    // Read as bytes: SQLite's text read stops at a NUL, and a key is echoed whole.
    requestKey: row.request_key instanceof Uint8Array
      ? KEY_DECODER.decode(row.request_key)
      : String(row.request_key),
    requestDigest: String(row.request_digest),
    kind: String(row.kind),
    moduleGeneration: Number(row.module_generation),
    state: String(row.state) as JobState,
    createdMs: Number(row.created_ms),
    updatedMs: Number(row.updated_ms),
    executionExpiresMs: nullableNumber(row.execution_expires_ms),
    resultRetentionTtlMs: nullableNumber(row.result_retention_ttl_ms),
    terminalAtMs: nullableNumber(row.terminal_at_ms),
    activeAttemptId: nullableString(row.active_attempt_id),
    logicalHandle: nullableString(row.logical_handle),
    pausedAtMs: nullableNumber(row.paused_at_ms),
    resumeDeadlineMs: nullableNumber(row.resume_deadline_ms),
    resumeTtlMs: nullableNumber(row.resume_ttl_ms),
    params: parseJson(row.params_json),
    result: parseJson(row.result_json),
    error: parseJson(row.error_json) as WireError | null,
    pageCount: Number(row.page_count),
    itemsTotal: Number(row.items_total),
    itemsDone: Number(row.items_done),
    tokensTotal: Number(row.tokens_total),
    tokensDone: Number(row.tokens_done),
  };
}

function nullableNumber(v: SQLOutputValue | undefined): number | null {
  return v === null || v === undefined ? null : Number(v);
}

function nullableString(v: SQLOutputValue | undefined): string | null {
  return v === null || v === undefined ? null : String(v);
}

function parseJson(v: SQLOutputValue | undefined): unknown {
  return v === null || v === undefined ? null : JSON.parse(String(v));
}
