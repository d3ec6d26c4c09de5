/**
 * Signals a whole process group through libc `kill(2)` with a negative pid. Workers are spawned
 * as the leaders of their own group (`Deno.Command` with `detached: true` calls `setsid()` on
 * Unix, so a worker's pid is its process group id), and killing the group also kills what the
 * worker started (node-llama-cpp's binary-test child, ~74 MB, was left orphaned by a kill of the
 * worker alone).
 *
 * `Deno.kill(-pgid, …)` does the same but needs `--allow-run` for every program, which the module
 * does not have (`ck-synapse` lists its programs); through FFI it needs only `--allow-ffi`.
 *
 * @module
 */
import { errnoText, lastErrno } from "./_errno.ts";

/** Signals {@link killProcessGroup} sends, with their numbers (the same on Linux and macOS). */
const SIGNALS = { SIGKILL: 9, SIGTERM: 15 } as const;

/** A signal {@link killProcessGroup} can send. */
export type GroupSignal = keyof typeof SIGNALS;

const ESRCH = 3;

const SYMBOLS = {
  kill: { parameters: ["i32", "i32"], result: "i32" },
  getpgrp: { parameters: [], result: "i32" },
} as const;

let libc: Deno.DynamicLibrary<typeof SYMBOLS> | undefined;

function lib(): Deno.DynamicLibrary<typeof SYMBOLS>["symbols"] {
  libc ??= Deno.dlopen(Deno.build.os === "darwin" ? "libc.dylib" : "libc.so.6", SYMBOLS);
  return libc.symbols;
}

/**
 * The caller's own process group id (Unix).
 *
 * @returns `getpgrp()`, or undefined on Windows.
 */
export function ownProcessGroup(): number | undefined {
  return Deno.build.os === "windows" ? undefined : lib().getpgrp();
}

/**
 * Sends `signal` to every process of group `pgid` (Unix; on Windows it does nothing).
 *
 * @param pgid Process group id: the pid of a worker spawned with `detached: true`.
 * @param signal The signal. @default "SIGKILL"
 * @returns True when at least one process was signalled; false when the group has no process
 *   left (ESRCH) or on Windows.
 * @throws {RangeError} when `pgid` is not an integer > 1, or is the caller's own group (that
 *   would kill the caller: a worker that was not spawned detached shares the module's group).
 * @throws {Error} when libc refuses for another reason (EPERM: a process of another user).
 */
export function killProcessGroup(pgid: number, signal: GroupSignal = "SIGKILL"): boolean {
  if (!Number.isSafeInteger(pgid) || pgid <= 1) {
    throw new RangeError(
      `Cannot signal process group as 'pgid' must be an integer > 1: received ${pgid}`,
    );
  }
  if (Deno.build.os === "windows") return false;
  const c = lib();
  if (pgid === c.getpgrp()) {
    throw new RangeError(`Cannot signal process group ${pgid}: it is the caller's own group`);
  }
  if (c.kill(-pgid, SIGNALS[signal]) === 0) return true;
  const errno = lastErrno();
  if (errno === ESRCH) return false;
  throw new Error(`Cannot send ${signal} to process group ${pgid}: ${errnoText(errno)}`);
}

/**
 * SIGKILLs the caller's process group, the caller included, but only when the caller leads it
 * (it was spawned with `detached: true`); a process that merely belongs to a group (its parent's)
 * leaves it alone. A worker calls it when the module has gone away, so nothing it started
 * outlives it.
 *
 * @returns False when the caller does not lead its group (or on Windows); when it does, the
 *   process dies before it returns.
 * @throws {Error} when libc refuses (never expected for the caller's own processes).
 */
export function killOwnProcessGroup(): boolean {
  if (Deno.build.os === "windows") return false;
  const c = lib();
  if (c.getpgrp() !== Deno.pid) return false;
  c.kill(-Deno.pid, SIGNALS.SIGKILL);
  throw new Error(`Cannot send SIGKILL to process group ${Deno.pid}: ${errnoText(lastErrno())}`);
}
