/**
 * The worker process as the host sees it, shared by the start (`spawn.ts`) and the connection
 * (`host.ts`): killing its process group, naming how it ended, the `engine_crashed` error that
 * reports it, and the write loop of its socket. Private to `lib/workers/`.
 *
 * @module
 */
import { killProcessGroup } from "../../ffi/process_group.ts";
import { SynapseError } from "../contract/errors.ts";
import type { LogTail } from "./_log_tail.ts";

/** Longest wait, ms, for the last lines of a dead worker's output. */
export const LOG_SETTLE_MS = 500;

/**
 * SIGKILLs a worker's process group (Unix; the worker leads it), then the worker itself (the only
 * step on Windows, and a fallback where FFI is refused). Never throws.
 */
export function killGroup(child: Deno.ChildProcess): void {
  if (Deno.build.os !== "windows") {
    try {
      killProcessGroup(child.pid, "SIGKILL");
    } catch { /* no FFI permission, or not our group: the leader alone below */ }
  }
  try {
    child.kill("SIGKILL");
  } catch { /* already gone */ }
}

/** `details.reason` for a process that is gone: `signal` or `exited`. */
export function exitReason(st: Deno.CommandStatus): string {
  return st.signal !== null ? "signal" : "exited";
}

/** `{signal}` when a signal ended the process, else `{exit_code}`. */
export function statusDetails(st: Deno.CommandStatus): { signal: string } | { exit_code: number } {
  return st.signal !== null ? { signal: st.signal } : { exit_code: st.code };
}

/** How a process ended, for a message: `signal SIGKILL` or `exit code 3`. */
export function describeStatus(st: Deno.CommandStatus): string {
  return st.signal !== null ? `signal ${st.signal}` : `exit code ${st.code}`;
}

/**
 * The error of a worker that is gone or refused: `engine_crashed`, transient (retry after
 * 250 ms), message "Engine worker 'ID' MESSAGE".
 *
 * @param workerId The worker's id.
 * @param reason `details.reason` (`eof`, `timeout`, `signal`, `hello_timeout`, …).
 * @param message What happened, completing "Engine worker 'ID' …".
 * @param log The worker's log tail, copied into `details.log_tail` now.
 * @param pid The worker's process id, when it was spawned.
 * @param cause The underlying error, if any.
 * @returns The error, with details `{worker_id, reason, pid?, log_tail}`.
 */
export function crashError(
  workerId: string,
  reason: string,
  message: string,
  log: LogTail,
  pid: number | undefined,
  cause?: unknown,
): SynapseError {
  return new SynapseError("engine_crashed", `Engine worker '${workerId}' ${message}`, {
    retryAfterMs: 250,
    ...(cause === undefined ? {} : { cause }),
    details: {
      worker_id: workerId,
      reason,
      ...(pid === undefined ? {} : { pid }),
      log_tail: log.text(),
    },
  });
}

/**
 * Writes all of `bytes` to the connection.
 *
 * @throws whatever `conn.write` throws (a broken or closed connection).
 */
export async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  let off = 0;
  while (off < bytes.byteLength) off += await conn.write(bytes.subarray(off));
}

/** An error's message, or the value as a string. */
export function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
