/**
 * Per-thread CPU priority through libc `setpriority(2)` (Linux: `PRIO_PROCESS` with a thread id
 * sets that one thread's nice value). The bulk lane lowers its own threads so that, when a query
 * and a bulk job share the cores, the kernel runs the query first.
 *
 * @module
 */

const PRIO_PROCESS = 0;

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
