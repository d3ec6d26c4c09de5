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

// The calling thread's own priority. Listing /proc/self/task (threadIds above) needs Deno's
// --allow-all, which the launcher does not grant; these need only --allow-ffi. On Linux,
// setpriority(PRIO_PROCESS, 0, n) sets the nice value of the calling thread alone (the kernel
// resolves who = 0 to the current task, and the nice value is per thread under NPTL:
// setpriority(2), BUGS), and threads that thread creates afterwards start with its value
// (clone copies the creator's static priority). So a thread that lowers itself before it creates
// a thread pool lowers the pool too.

const THREAD_SYMBOLS = {
  setpriority: { parameters: ["i32", "u32", "i32"], result: "i32" },
  gettid: { parameters: [], result: "i32", optional: true },
} as const;

let threadLibc: Deno.DynamicLibrary<typeof THREAD_SYMBOLS> | undefined;

function threadLib(): Deno.DynamicLibrary<typeof THREAD_SYMBOLS>["symbols"] {
  threadLibc ??= Deno.dlopen("libc.so.6", THREAD_SYMBOLS);
  return threadLibc.symbols;
}

/**
 * Id of the calling thread through libc `gettid(2)` (Linux, glibc 2.30 or later), without
 * reading /proc, so `--allow-ffi` is enough.
 *
 * @returns The kernel thread id, or undefined off Linux or where libc has no `gettid`.
 * @throws {Deno.errors.NotCapable} without `--allow-ffi`.
 */
export function callingThreadId(): number | undefined {
  if (Deno.build.os !== "linux") return undefined;
  const gettid = threadLib().gettid;
  return gettid === null ? undefined : gettid();
}

/**
 * Sets the calling thread's nice value (Linux), and with it that of every thread it creates
 * afterwards (a native library's thread pool, for instance). Other threads keep theirs.
 *
 * @param nice Integer −20 … 19. Raising it needs no privilege; lowering it below the current
 *   value needs `CAP_SYS_NICE` or a matching `RLIMIT_NICE`.
 * @throws {RangeError} when `nice` is not an integer in −20 … 19.
 * @throws {Deno.errors.NotSupported} off Linux (thread nice values are a Linux notion).
 * @throws {Deno.errors.NotCapable} without `--allow-ffi`.
 * @throws {Error} when libc refuses; the message names the errno (`EACCES`, `EPERM`, …).
 */
export function setCallingThreadNice(nice: number): void {
  if (!Number.isInteger(nice) || nice < -20 || nice > 19) {
    throw new RangeError(
      `Cannot set the thread's nice value: it must be an integer in -20..19: received ${nice}`,
    );
  }
  if (Deno.build.os !== "linux") {
    throw new Deno.errors.NotSupported(
      `Cannot set the thread's nice value on ${Deno.build.os}: only Linux has per-thread nice values`,
    );
  }
  if (threadLib().setpriority(PRIO_PROCESS, 0, nice) === 0) return;
  throw new Error(
    `Cannot set the thread's nice value to ${nice}: setpriority failed with ${
      errnoText(lastErrno())
    }`,
  );
}
