/**
 * Raw file descriptors through libc, for the one descriptor Deno cannot reach: an inherited fd
 * the process did not open itself (the subc launch-nonce pipe at fd 3, subc §8). Deno wraps only
 * the descriptors it opens, so `fstat`, `read` and `close` of such an fd go through FFI.
 *
 * The file type and inode come from `statx(2)` on Linux (its struct has one layout on every
 * architecture, unlike `struct stat`) and from `fstat(2)` on macOS (the 64-bit-inode struct:
 * `fstat$INODE64` on x86_64, `fstat` on arm64). Other systems have no binding here.
 *
 * @module
 */
import { lastErrno } from "./_errno.ts";

/** `S_IFMT` and `S_IFIFO` (the same on Linux and macOS). */
const S_IFMT = 0o170000;
const S_IFIFO = 0o010000;
/** Linux `statx` arguments: `AT_EMPTY_PATH`, `STATX_TYPE | STATX_INO`. */
const AT_EMPTY_PATH = 0x1000;
const STATX_TYPE_INO = 0x1 | 0x100;
/** Big enough for `struct statx` (256) and macOS `struct stat` (144). */
const STAT_BUF_BYTES = 256;

const LINUX = {
  statx: { parameters: ["i32", "buffer", "i32", "u32", "buffer"], result: "i32" },
  read: { parameters: ["i32", "buffer", "usize"], result: "isize" },
  close: { parameters: ["i32"], result: "i32" },
} as const;

const DARWIN = {
  fstat: {
    name: Deno.build.arch === "x86_64" ? "fstat$INODE64" : "fstat",
    parameters: ["i32", "buffer"],
    result: "i32",
  },
  read: { parameters: ["i32", "buffer", "usize"], result: "isize" },
  close: { parameters: ["i32"], result: "i32" },
} as const;

let linux: Deno.DynamicLibrary<typeof LINUX> | undefined;
let darwin: Deno.DynamicLibrary<typeof DARWIN> | undefined;

/** What {@link fstatFd} learns about a descriptor. */
export type FdStat =
  | {
    /** The descriptor is open. */
    open: true;
    /** Whether it is a FIFO (a pipe, anonymous or named). */
    isFifo: boolean;
    /** Its inode number, unsigned 64-bit. */
    ino: bigint;
  }
  | {
    /** The call failed: `errno` 9 (EBADF) means nothing is open at that number. */
    open: false;
    /** The errno of the failed call. */
    errno: number;
  };

/**
 * Whether this platform has the bindings of this file (Linux with glibc, macOS).
 *
 * @returns True on Linux and macOS.
 */
export function fdBindingsSupported(): boolean {
  return Deno.build.os === "linux" || Deno.build.os === "darwin";
}

/**
 * The file type and inode of an open descriptor, without touching its data.
 *
 * @param fd A descriptor number.
 * @returns Its type and inode, or the errno when it cannot be examined (EBADF: not open).
 * @throws {Error} on a platform without bindings ({@link fdBindingsSupported}).
 * @throws {Deno.errors.NotCapable} without `--allow-ffi`.
 */
export function fstatFd(fd: number): FdStat {
  const buf = new Uint8Array(STAT_BUF_BYTES);
  const view = new DataView(buf.buffer);
  if (Deno.build.os === "linux") {
    linux ??= Deno.dlopen("libc.so.6", LINUX);
    const rc = linux.symbols.statx(fd, new Uint8Array(1), AT_EMPTY_PATH, STATX_TYPE_INO, buf);
    if (rc !== 0) return { open: false, errno: lastErrno() };
    // struct statx: u16 stx_mode at 28, u64 stx_ino at 32.
    const mode = view.getUint16(28, true);
    return { open: true, isFifo: (mode & S_IFMT) === S_IFIFO, ino: view.getBigUint64(32, true) };
  }
  if (Deno.build.os === "darwin") {
    darwin ??= Deno.dlopen("libc.dylib", DARWIN);
    if (darwin.symbols.fstat(fd, buf) !== 0) return { open: false, errno: lastErrno() };
    // struct stat (64-bit inodes): u16 st_mode at 4, u64 st_ino at 8.
    const mode = view.getUint16(4, true);
    return { open: true, isFifo: (mode & S_IFMT) === S_IFIFO, ino: view.getBigUint64(8, true) };
  }
  throw new Error(`Cannot examine descriptor ${fd}: no libc binding on ${Deno.build.os}`);
}

/**
 * Reads from a raw descriptor (one `read(2)`; blocks like it).
 *
 * @param fd A descriptor number.
 * @param buf Where the bytes go.
 * @returns The number of bytes read (0 at end of file), or `{errno}` when the call failed.
 * @throws {Error} on a platform without bindings.
 */
export function readFd(fd: number, buf: Uint8Array): number | { errno: number } {
  const n = Number(symbols().read(fd, buf, BigInt(buf.byteLength)));
  return n < 0 ? { errno: lastErrno() } : n;
}

/**
 * Closes a raw descriptor. Errors are ignored (nothing useful can follow a failed close).
 *
 * @param fd A descriptor number.
 * @throws {Error} on a platform without bindings.
 */
export function closeFd(fd: number): void {
  symbols().close(fd);
}

function symbols(): {
  read: (fd: number, buf: Uint8Array, n: bigint) => number | bigint;
  close: (fd: number) => number;
} {
  if (Deno.build.os === "linux") {
    linux ??= Deno.dlopen("libc.so.6", LINUX);
    return linux.symbols;
  }
  if (Deno.build.os === "darwin") {
    darwin ??= Deno.dlopen("libc.dylib", DARWIN);
    return darwin.symbols;
  }
  throw new Error(`Cannot use raw descriptors: no libc binding on ${Deno.build.os}`);
}
