/**
 * The checks the `JobStore`'s actions apply before they touch the store, and the
 * predicates on job states and rows its rules are written in. Private to `lib/store/`.
 *
 * @module
 */

import { SynapseError } from "../contract/errors.ts";
import type { WireError } from "../contract/errors.ts";
import {
  type JobRow,
  type JobState,
  MAX_REQUEST_KEY_BYTES,
  type TerminalJobState,
} from "./job_types.ts";

const TERMINAL_STATES: readonly TerminalJobState[] = [
  "done",
  "failed_transient",
  "failed_permanent",
];

/**
 * Checks a `request_key`: a string of 1..{@link MAX_REQUEST_KEY_BYTES} UTF-8 bytes.
 *
 * @throws {SynapseError} `invalid_request` (details `{field: "request_key", bytes?, max_bytes?}`).
 */
export function checkRequestKey(key: unknown): void {
  if (typeof key !== "string") {
    throw new SynapseError("invalid_request", "Cannot admit job: request_key must be a string", {
      details: { field: "request_key" },
    });
  }
  const bytes = new TextEncoder().encode(key).length;
  if (bytes === 0 || bytes > MAX_REQUEST_KEY_BYTES) {
    throw new SynapseError(
      "invalid_request",
      bytes === 0
        ? "Cannot admit job: request_key must not be empty"
        : `Cannot admit job: request_key is ${bytes} bytes, max ${MAX_REQUEST_KEY_BYTES}`,
      { details: { field: "request_key", bytes, max_bytes: MAX_REQUEST_KEY_BYTES } },
    );
  }
}

/**
 * Checks that `value` is a non-negative safe integer.
 *
 * @throws {RangeError} "Cannot ACTION: 'FIELD' must be a non-negative integer: received VALUE".
 */
export function checkCount(action: string, field: string, value: unknown): void {
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < 0) {
    throw new RangeError(
      `Cannot ${action}: '${field}' must be a non-negative integer: received ${String(value)}`,
    );
  }
}

/**
 * Checks the arguments of `JobStore.finish`: a terminal state; no error for `done`; for a
 * failure, an error whose class matches the state.
 *
 * @throws {TypeError} naming what is wrong.
 */
export function checkFinish(state: TerminalJobState, error: WireError | undefined): void {
  if (!TERMINAL_STATES.includes(state)) {
    throw new TypeError(`Cannot finish job: '${String(state)}' is not a terminal state`);
  }
  if (state === "done") {
    if (error !== undefined) throw new TypeError("Cannot finish job: 'done' takes no error");
    return;
  }
  if (typeof error !== "object" || error === null || typeof error.code !== "string") {
    throw new TypeError(`Cannot finish job: '${state}' needs an error`);
  }
  const expected = state === "failed_transient" ? "transient" : "permanent";
  if (error.class !== expected) {
    throw new TypeError(
      `Cannot finish job: '${state}' needs a ${expected} error: received ${String(error.class)}`,
    );
  }
}

/** True for `done`, `failed_transient` and `failed_permanent`. */
export function isTerminal(state: JobState): state is TerminalJobState {
  return (TERMINAL_STATES as readonly JobState[]).includes(state);
}

/** Non-terminal, or terminal with `terminal_at_ms + result_retention_ttl_ms ≥ now`. */
export function isRetained(job: JobRow, now: number): boolean {
  if (job.terminalAtMs === null) return true;
  return job.terminalAtMs + (job.resultRetentionTtlMs ?? 0) >= now;
}

/** A transient failure the caller may retry with the very same request: mint a fresh job. */
export function isRetryableFailure(job: JobRow): boolean {
  if (job.state !== "failed_transient") return false;
  if (job.error?.code === "module_restarted") return true;
  return job.error?.safe_to_retry_same_request === true;
}

/** `invalid_request` "Cannot ACTION job ID: its state is 'STATE', expected WANT" (details `{job_id, state}`). */
export function wrongState(
  jobId: string,
  state: JobState,
  action: string,
  want: string,
): SynapseError {
  return new SynapseError(
    "invalid_request",
    `Cannot ${action} job ${jobId}: its state is '${state}', expected ${want}`,
    { details: { job_id: jobId, state } },
  );
}
