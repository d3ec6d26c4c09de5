/**
 * The calling thread's libc `errno`, read right after a failed libc call made through FFI (glibc
 * `__errno_location`, macOS `__error`). Best effort: it is the value the last libc call on this
 * thread left, so read it before any other FFI call.
 *
 * @module
 */

const SYMBOLS = {
  errnoLocation: {
    name: Deno.build.os === "darwin" ? "__error" : "__errno_location",
    parameters: [],
    result: "pointer",
  },
} as const;

let libc: Deno.DynamicLibrary<typeof SYMBOLS> | undefined;

/** Names of the errno values the `ffi/` callers can meet (Linux and macOS agree on these). */
const NAMES: Record<number, string> = {
  1: "EPERM",
  3: "ESRCH",
  9: "EBADF",
  13: "EACCES",
  22: "EINVAL",
};

/**
 * The current thread's errno (Unix only).
 *
 * @returns `errno`, or 0 where it cannot be read (Windows).
 */
export function lastErrno(): number {
  if (Deno.build.os === "windows") return 0;
  libc ??= Deno.dlopen(Deno.build.os === "darwin" ? "libc.dylib" : "libc.so.6", SYMBOLS);
  const at = libc.symbols.errnoLocation();
  return at === null ? 0 : new Deno.UnsafePointerView(at).getInt32();
}

/**
 * A readable errno: `"ESRCH (3)"`, or `"errno 42"` for one without a name here.
 *
 * @param errno An errno value.
 * @returns Its name and number.
 */
export function errnoText(errno: number): string {
  const name = NAMES[errno];
  return name === undefined ? `errno ${errno}` : `${name} (${errno})`;
}
