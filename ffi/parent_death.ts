/**
 * Parent-death signal through libc `prctl(PR_SET_PDEATHSIG, SIGKILL)` (Linux): the kernel
 * SIGKILLs the calling process when its parent exits, whatever the process is doing (a long
 * native call, a SIGSTOP), so a worker never outlives the server that started it. Elsewhere
 * (macOS has no such call) it does nothing; the worker's EOF watch on its socket covers those.
 *
 * The signal fires when the parent *thread* that forked the caller exits; Deno spawns children
 * from its main JavaScript thread, which lives as long as the server process.
 *
 * @module
 */
import { errnoText, lastErrno } from "./_errno.ts";

const PR_SET_PDEATHSIG = 1;
const SIGKILL = 9;

const SYMBOLS = {
  prctl: { parameters: ["i32", "u64", "u64", "u64", "u64"], result: "i32" },
} as const;

let libc: Deno.DynamicLibrary<typeof SYMBOLS> | undefined;

/**
 * Asks the kernel to SIGKILL this process when its parent exits (Linux only).
 *
 * A parent that died before the call cannot be caught by it: pass the parent's pid as the
 * caller was told it, and when the process has already been re-parented the call reports it.
 *
 * @param expectedParentPid The pid the parent had (the spawner says it in the environment);
 *   when `Deno.ppid` differs after the call, the parent is already gone.
 * @returns `"armed"`, `"parent_gone"` (re-parented before the call: the caller should exit), or
 *   `"unsupported"` off Linux.
 * @throws {Error} when the kernel refuses, naming errno.
 */
export function killWithParent(
  expectedParentPid?: number,
): "armed" | "parent_gone" | "unsupported" {
  if (Deno.build.os !== "linux") return "unsupported";
  libc ??= Deno.dlopen("libc.so.6", SYMBOLS);
  if (libc.symbols.prctl(PR_SET_PDEATHSIG, BigInt(SIGKILL), 0n, 0n, 0n) !== 0) {
    throw new Error(`Cannot set the parent-death signal: prctl failed (${errnoText(lastErrno())})`);
  }
  if (expectedParentPid !== undefined && Deno.ppid !== expectedParentPid) return "parent_gone";
  return "armed";
}
