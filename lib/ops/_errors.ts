/**
 * What an operation's failure means on the wire: a {@link SynapseError} as it is; an aborted
 * request signal as `deadline_exceeded` (the deadline passed, or the caller went away); anything
 * else is a bug — logged with its stack and answered `internal_error`, permanent and not safe to
 * retry, never a transient `engine_crashed` that a client would retry forever.
 *
 * @module
 */
import { SynapseError } from "../contract/errors.ts";
import type { LogSink } from "../log/log.ts";

/**
 * Maps an operation's failure to its stable error.
 *
 * @param err What the operation threw.
 * @param ctx Where to log a bug.
 * @param what The operation, for the log line (e.g. `embed.query`).
 */
export function asOperationError(err: unknown, ctx: { log: LogSink }, what: string): SynapseError {
  if (err instanceof SynapseError) return err;
  if (err instanceof DOMException && err.name === "TimeoutError") {
    return new SynapseError(
      "deadline_exceeded",
      "Cannot finish: the request's deadline_ms passed",
      {
        details: { reason: "deadline" },
        cause: err,
      },
    );
  }
  if (err instanceof DOMException && err.name === "AbortError") {
    return new SynapseError(
      "deadline_exceeded",
      "Cannot finish: the caller cancelled the request",
      {
        details: { reason: "cancelled" },
        cause: err,
      },
    );
  }
  const message = err instanceof Error ? err.message : String(err);
  const stack = err instanceof Error ? err.stack ?? message : message;
  ctx.log("error", "synapse.ops", `${what} failed with a bug: ${message}`, { stack });
  return new SynapseError(
    "internal_error",
    `Cannot finish ${what}: internal error (${message}); this is a bug in Synapse, not a transient fault`,
    { cause: err, details: { reason: "bug" } },
  );
}
