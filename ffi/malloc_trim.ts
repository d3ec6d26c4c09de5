/**
 * Returns freed heap memory to the OS through glibc `malloc_trim(3)`. When a native library
 * frees large blocks (onnxruntime releasing a session's arena and weights), glibc keeps much of
 * that memory in its per-thread arenas, still counted in RSS, until something asks it back.
 *
 * @module
 */

const SYMBOLS = {
  malloc_trim: { parameters: ["usize"], result: "i32" },
} as const;

let libc: Deno.DynamicLibrary<typeof SYMBOLS> | undefined;

/**
 * Asks glibc to give free heap memory back to the OS, in every malloc arena (glibc 2.8 and
 * later release free pages inside the heaps too, not only at their tops). Costs a walk of the
 * heaps (milliseconds); call it after freeing something large, not per request.
 *
 * @returns True when glibc released memory; false when it had none to release, and off Linux
 *   (other C libraries have no `malloc_trim`).
 * @throws {Deno.errors.NotCapable} without `--allow-ffi`.
 */
export function mallocTrim(): boolean {
  if (Deno.build.os !== "linux") return false;
  libc ??= Deno.dlopen("libc.so.6", SYMBOLS);
  return libc.symbols.malloc_trim(0n) === 1;
}
