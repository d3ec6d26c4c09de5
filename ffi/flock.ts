/**
 * Non-blocking exclusive file locks through libc `flock(2)` (design.md: `ffi/` holds the
 * Deno.dlopen bindings, "also libc flock"). Deno's own `FsFile.lock()` only blocks; a singleton
 * must instead learn at once that another process holds the lock.
 *
 * The file is created (without truncation) by Deno, then opened through FFI with the two fixed
 * arguments of `open(2)` (no variadic mode argument is passed, which keeps the call safe on every
 * ABI). The lock lives as long as the descriptor: the kernel drops it when the process dies, so a
 * crashed holder never leaves a stale lease. Only the holder rewrites the file (its pid).
 *
 * @module
 */

const O_RDONLY = 0;
const O_RDWR = 2;
const LOCK_SH = 1;
const LOCK_EX = 2;
const LOCK_NB = 4;
const LOCK_UN = 8;

const SYMBOLS = {
  open: { parameters: ["buffer", "i32"], result: "i32" },
  ftruncate: { parameters: ["i32", "i64"], result: "i32" },
  flock: { parameters: ["i32", "i32"], result: "i32" },
  write: { parameters: ["i32", "buffer", "usize"], result: "isize" },
  close: { parameters: ["i32"], result: "i32" },
} as const;

let libc: Deno.DynamicLibrary<typeof SYMBOLS> | undefined;

function lib(): Deno.DynamicLibrary<typeof SYMBOLS>["symbols"] {
  libc ??= Deno.dlopen(Deno.build.os === "darwin" ? "libc.dylib" : "libc.so.6", SYMBOLS);
  return libc.symbols;
}

/** A held lock; release is idempotent. */
export interface FileLock extends Disposable {
  readonly path: string;
  release(): void;
}

/**
 * Takes an exclusive lock on `path` without waiting (the file is created with mode 0600 if
 * absent; once locked, its content becomes this process's pid).
 *
 * @returns The lock, or `undefined` when another open file description holds it.
 * @throws {Error} when the file cannot be created (errno from libc is not exposed).
 */
export function tryLockExclusive(path: string): FileLock | undefined {
  const c = lib();
  Deno.openSync(path, { create: true, write: true, mode: 0o600 }).close();
  const fd = c.open(new TextEncoder().encode(path + "\0"), O_RDWR);
  if (fd < 0) throw new Error(`Cannot open lock file ${path}`);
  if (c.flock(fd, LOCK_EX | LOCK_NB) !== 0) {
    c.close(fd);
    return undefined;
  }
  const pid = new TextEncoder().encode(`${Deno.pid}\n`);
  c.ftruncate(fd, 0n);
  c.write(fd, pid, BigInt(pid.length));
  let held = true;
  const release = (): void => {
    if (!held) return;
    held = false;
    c.flock(fd, LOCK_UN);
    c.close(fd);
  };
  return { path, release, [Symbol.dispose]: release };
}

/**
 * Whether some open file description holds an exclusive lock on `path` right now: a
 * non-blocking shared lock is tried and, when granted, dropped at once. The file is never
 * created or written. A lock of this very process (another descriptor) counts as held.
 *
 * @returns `true` when the lock is held; `false` when it is free or the file does not exist (or
 *   cannot be opened: nobody can hold a lease on it then).
 */
export function isLockHeld(path: string): boolean {
  const c = lib();
  const fd = c.open(new TextEncoder().encode(path + "\0"), O_RDONLY);
  if (fd < 0) return false;
  try {
    if (c.flock(fd, LOCK_SH | LOCK_NB) !== 0) return true;
    c.flock(fd, LOCK_UN);
    return false;
  } finally {
    c.close(fd);
  }
}

/**
 * Takes a shared lock on `path` without waiting (the file is created with mode 0600 if absent;
 * its content is never written). Any number of shared holders may coexist, across processes and
 * within one (each call opens its own descriptor); an exclusive lock ({@link tryLockExclusive})
 * excludes them all. The kernel drops the lock when the process dies.
 *
 * @param path The lock file.
 * @returns The lock, or `undefined` when an exclusive lock is held on the file right now.
 * @throws {Error} when the file cannot be created or opened (errno from libc is not exposed).
 *
 * @example
 * ```ts ignore
 * const a = tryLockShared("/tmp/x.lock")!;
 * const b = tryLockShared("/tmp/x.lock")!; // shared locks coexist
 * assert.equal(tryLockExclusive("/tmp/x.lock"), undefined);
 * a.release();
 * b.release();
 * ```
 */
export function tryLockShared(path: string): FileLock | undefined {
  return lockShared(path, false);
}

/**
 * Takes a shared lock on `path`, waiting (blocking the calling thread) while an exclusive lock
 * is held. Meant for exclusive holders that keep the lock only for a short synchronous section;
 * a holder in this same process can never be waited for that way, because a synchronous section
 * cannot interleave with this call.
 *
 * @param path The lock file (created with mode 0600 if absent).
 * @returns The lock.
 * @throws {Error} when the file cannot be created or opened, or flock(2) fails.
 */
export function waitLockShared(path: string): FileLock {
  const lock = lockShared(path, true);
  if (lock === undefined) throw new Error(`Cannot take a shared lock on ${path}: flock failed`);
  return lock;
}

function lockShared(path: string, wait: boolean): FileLock | undefined {
  const c = lib();
  Deno.openSync(path, { create: true, write: true, mode: 0o600 }).close();
  const fd = c.open(new TextEncoder().encode(path + "\0"), O_RDONLY);
  if (fd < 0) throw new Error(`Cannot open lock file ${path}`);
  if (c.flock(fd, wait ? LOCK_SH : LOCK_SH | LOCK_NB) !== 0) {
    c.close(fd);
    return undefined;
  }
  let held = true;
  const release = (): void => {
    if (!held) return;
    held = false;
    c.flock(fd, LOCK_UN);
    c.close(fd);
  };
  return { path, release, [Symbol.dispose]: release };
}
