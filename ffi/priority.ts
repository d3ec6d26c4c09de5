/**
 * Per-thread CPU priority through libc `setpriority(2)` (Linux: `PRIO_PROCESS` with a thread id
 * sets that one thread's nice value). The bulk lane lowers its own threads so that, when a query
 * and a bulk job share the cores, the kernel runs the query first.
 *
 * Also per process group ({@link setProcessGroupNice}, `PRIO_PGRP`): a generation worker leads its
 * own group and lowers all of it at once.
 *
 * @module
 */
import { errnoText, lastErrno } from "./_errno.ts";

const PRIO_PROCESS = 0;
const PRIO_PGRP = 1;

const SYMBOLS = {
  setpriority: { parameters: ["i32", "u32", "i32"], result: "i32" },
} as const;

let libc: Deno.DynamicLibrary<typeof SYMBOLS> | undefined;

/** Thread ids of this process (Linux `/proc/self/task`); empty elsewhere. */
export function threadIds(): number[] {
  if (Deno.build.os !== "linux") return [];
  try {
    return [...Deno.readDirSync("/proc/self/task")].map((e) => Number(e.name)).filter((n) => n > 0);
  } catch {
    return [];
  }
}

/** Id of the calling thread (Linux), or undefined. */
export function currentThreadId(): number | undefined {
  if (Deno.build.os !== "linux") return undefined;
  try {
    const link = Deno.readLinkSync("/proc/thread-self");
    const tid = Number(link.split("/").pop());
    return tid > 0 ? tid : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Sets one thread's nice value (Linux only; elsewhere it does nothing).
 *
 * @param tid Thread id.
 * @param nice −20 … 19; raising it needs no privilege.
 * @returns True when the kernel accepted it.
 */
export function setThreadNice(tid: number, nice: number): boolean {
  if (Deno.build.os !== "linux") return false;
  libc ??= Deno.dlopen("libc.so.6", SYMBOLS);
  return libc.symbols.setpriority(PRIO_PROCESS, tid, nice) === 0;
}

/**
 * Sets the nice value of every process of a process group (libc `setpriority(PRIO_PGRP, …)`). On
 * Linux that reaches every thread of every process in the group, and threads or processes they
 * create later inherit it; this needs no /proc access, which Deno grants only with `--allow-all`.
 *
 * @param pgid Process group id; pass the caller's pid when it leads its group (spawned with
 *   `detached: true`). 0 (libc's "the caller's group", which for a process that does not lead
 *   one is its parent's) is refused: callers name the group.
 * @param nice −20 … 19; raising it needs no privilege.
 * @throws {RangeError} when `pgid` is not a positive integer, or `nice` not an integer in
 *   −20…19.
 * @throws {Error} when the kernel refuses, naming errno: ESRCH when no group `pgid` exists (the
 *   caller does not lead one), EACCES when lowering needs privilege; also on Windows.
 */
export function setProcessGroupNice(pgid: number, nice: number): void {
  if (!Number.isSafeInteger(pgid) || pgid < 1) {
    throw new RangeError(
      `Cannot set process group nice as 'pgid' must be a positive integer: received ${pgid}`,
    );
  }
  if (!Number.isInteger(nice) || nice < -20 || nice > 19) {
    throw new RangeError(
      `Cannot set process group nice as 'nice' must be an integer in -20..19: received ${nice}`,
    );
  }
  if (Deno.build.os === "windows") {
    throw new Error("Cannot set process group nice: not supported on Windows");
  }
  libc ??= Deno.dlopen(Deno.build.os === "darwin" ? "libc.dylib" : "libc.so.6", SYMBOLS);
  if (libc.symbols.setpriority(PRIO_PGRP, pgid, nice) !== 0) {
    throw new Error(
      `Cannot set nice ${nice} on process group ${pgid}: ${errnoText(lastErrno())}`,
    );
  }
}
