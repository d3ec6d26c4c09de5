/**
 * What a failure of the store's SQLite file means, and the stable error it answers. Private to
 * `lib/store/`.
 *
 * | fault | seen as | answered |
 * |---|---|---|
 * | `storage_full` | SQLITE_FULL (13), ENOSPC / EDQUOT | `store_failure` (transient) `{reason: "storage_full"}`, "the disk is full" |
 * | `io_error` | SQLITE_IOERR (10, any extended code) | `store_failure` (transient) `{reason: "io_error"}` |
 * | `store_corrupt` | SQLITE_CORRUPT (11), SQLITE_NOTADB (26), a stored JSON column that does not parse | `internal_error` (permanent, not safe to retry) `{reason: "store_corrupt"}`, naming the file and what to do |
 *
 * A corrupt store never answers a transient error: a client would retry it forever, and only a
 * person (restoring or moving the file aside) can mend it.
 *
 * @module
 */

import { SynapseError } from "../contract/errors.ts";

/** What a failed store access says about the store file. */
export type StoreFault = "storage_full" | "io_error" | "store_corrupt";

const SQLITE_IOERR = 10;
const SQLITE_CORRUPT = 11;
const SQLITE_FULL = 13;
const SQLITE_NOTADB = 26;

/**
 * Classifies a failure of a store access.
 *
 * @param err What `node:sqlite` or `Deno.*` threw.
 * @returns The fault, or undefined for any other failure (a busy lock, a bug).
 */
export function storeFault(err: unknown): StoreFault | undefined {
  if (err instanceof SyntaxError) return "store_corrupt";
  const e = err as { errcode?: unknown; code?: unknown } | null;
  if (typeof e?.errcode === "number") {
    const primary = e.errcode & 0xff;
    if (primary === SQLITE_FULL) return "storage_full";
    if (primary === SQLITE_CORRUPT || primary === SQLITE_NOTADB) return "store_corrupt";
    if (primary === SQLITE_IOERR) return "io_error";
  }
  if (e?.code === "ENOSPC" || e?.code === "EDQUOT") return "storage_full";
  if (!(err instanceof Error)) return undefined;
  // Errors of `exec()` (COMMIT among them) carry no errcode: SQLite's own message tells.
  const m = err.message;
  if (/database or disk is full|os error (28|122)\b|No space left on device/.test(m)) {
    return "storage_full";
  }
  if (/database disk image is malformed|file is not a database/.test(m)) return "store_corrupt";
  if (/disk I\/O error/.test(m)) return "io_error";
  return undefined;
}

/** What to do about a corrupt or empty store file at `path`, said in every such error. */
export function corruptStoreAdvice(path: string): string {
  return `stop Synapse, move ${path} (with its -wal and -shm files) aside and start again for an ` +
    `empty store, or restore it from a backup ('sqlite3 ${path} .recover' may save its rows)`;
}

/**
 * The stable error of a failed store access (table in the module documentation).
 *
 * @param message What could not be done, e.g. "Cannot commit page 3 of job j in store /x".
 * @param err What was thrown; a {@link SynapseError} passes through unchanged.
 * @param path The store file.
 * @returns `store_failure` (transient) or, for a corrupt store, `internal_error` (permanent).
 */
export function storeFailure(message: string, err: unknown, path: string): SynapseError {
  if (err instanceof SynapseError) return err;
  const reason = err instanceof Error ? err.message : String(err);
  const fault = storeFault(err);
  if (fault === "store_corrupt") {
    return new SynapseError(
      "internal_error",
      `${message}: the store file is corrupt (${reason}); ${corruptStoreAdvice(path)}`,
      { details: { path, reason: "store_corrupt" }, cause: err },
    );
  }
  if (fault === "storage_full") {
    return new SynapseError(
      "store_failure",
      `${message}: the disk is full (${reason}); free space where ${path} lives`,
      { details: { path, reason: "storage_full" }, cause: err },
    );
  }
  return new SynapseError("store_failure", `${message}: ${reason}`, {
    details: fault === undefined ? { path } : { path, reason: fault },
    cause: err,
  });
}
