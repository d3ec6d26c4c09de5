/**
 * What the daemon hands a module it launches (subc §8): the module id and the launch nonce.
 *
 * The launch nonce is 32 CSPRNG bytes as 64 lowercase hex digits, new on every spawn; the module
 * echoes it in `HELLO.launch_nonce` and in `route.open.consumer_identity`. It comes either
 *
 * - through the **descriptor hand-off**: `SUBC_LAUNCH_NONCE_FD=<fd>:<inode>` (the daemon uses
 *   fd 3). The descriptor must be a FIFO with that inode; it is read to end of file and closed.
 *   After a named descriptor fails, the environment copy is **never** used: the hand-off went
 *   wrong, or this process inherited the variable from a module without the pipe, and a
 *   fallback would hide either;
 * - or in the environment, `SUBC_LAUNCH_NONCE`.
 *
 * Deno cannot examine an inherited descriptor, so the hand-off goes through libc (`ffi/fd.ts`,
 * needs `--allow-ffi`). On Windows the daemon would name a pipe (`SUBC_LAUNCH_NONCE_PIPE`); this
 * build has no reader for it and refuses loudly unless the daemon allows the environment copy
 * (`SUBC_LAUNCH_NONCE_PIPE_FALLBACK=env`).
 *
 * Read the nonce before spawning any child (an unread descriptor is inheritable), and read it
 * once: {@link launchNonce} caches the first answer (or refusal) for the life of the process.
 *
 * @module
 */
import { closeFd, fdBindingsSupported, fstatFd, readFd } from "../../ffi/fd.ts";
import type { FdStat } from "../../ffi/fd.ts";
import { envLookup } from "../paths.ts";
import type { EnvSource } from "../paths.ts";
import { SubcWireError } from "./errors.ts";
import type { LaunchNonceReason } from "./errors.ts";

/** The environment copy of the nonce. */
export const LAUNCH_NONCE_ENV = "SUBC_LAUNCH_NONCE";
/** Names the descriptor holding the nonce, as `<fd>:<inode>`. */
export const LAUNCH_NONCE_FD_ENV = "SUBC_LAUNCH_NONCE_FD";
/** Windows: the one-time pipe holding the nonce. */
export const LAUNCH_NONCE_PIPE_ENV = "SUBC_LAUNCH_NONCE_PIPE";
/** Windows: `env` lets a failed pipe read use the environment copy. */
export const LAUNCH_NONCE_PIPE_FALLBACK_ENV = "SUBC_LAUNCH_NONCE_PIPE_FALLBACK";
/** The module id the daemon sets. */
export const MODULE_ID_ENV = "SUBC_MODULE_ID";
/** The module id when the daemon sets none. */
export const DEFAULT_MODULE_ID = "synapse";
/** Most bytes read from the nonce pipe (a nonce is 64). */
const MAX_PIPE_BYTES = 4096;

/** Where the nonce came from. */
export type LaunchNonceSource = "fd" | "env";

/**
 * A launch nonce. The value is a secret: `JSON.stringify` and Deno's inspector show only its
 * source, so logging the object never prints it.
 */
export interface LaunchNonce {
  /** 64 lowercase hex digits. */
  readonly value: string;
  /** Where it came from. */
  readonly source: LaunchNonceSource;
}

/** The descriptor calls {@link readLaunchNonce} makes; tests may pass their own. */
export interface DescriptorOps {
  /** File type and inode of an open descriptor, or its errno. */
  fstat(fd: number): FdStat;
  /** One `read(2)`: bytes read (0 at end of file), or `{errno}`. */
  read(fd: number, buf: Uint8Array): number | { errno: number };
  /** Closes the descriptor. */
  close(fd: number): void;
}

/** Options of {@link readLaunchNonce}. */
export interface ReadLaunchNonceOptions {
  /** Environment source. @default {Deno.env.get} */
  env?: EnvSource;
  /** Operating system. @default {Deno.build.os} */
  os?: typeof Deno.build.os;
  /** Descriptor calls. @default libc through `ffi/fd.ts` */
  descriptors?: DescriptorOps;
}

/**
 * Reads the launch nonce now, without caching (the process should call {@link launchNonce}).
 * Empty variables count as unset.
 *
 * @param options Environment, OS and descriptor calls.
 * @returns The nonce and its source, or `undefined` when the daemon set neither variable.
 * @throws {SubcWireError} a {@link LaunchNonceReason}: `launch_fd_malformed`,
 *   `launch_fd_not_open`, `launch_fd_not_a_pipe`, `launch_fd_wrong_pipe` (each leaves the
 *   descriptor untouched), `launch_fd_empty` (left open), `launch_fd_unreadable`,
 *   `launch_fd_unsupported` (no FFI, or Windows' pipe), `launch_nonce_malformed` (not 64
 *   lowercase hex, from either source).
 */
export function readLaunchNonce(options: ReadLaunchNonceOptions = {}): LaunchNonce | undefined {
  const get = envLookup(options.env);
  const os = options.os ?? Deno.build.os;
  if (os === "windows") {
    if (get(LAUNCH_NONCE_PIPE_ENV) !== undefined && get(LAUNCH_NONCE_PIPE_FALLBACK_ENV) !== "env") {
      throw refusal(
        "launch_fd_unsupported",
        `${LAUNCH_NONCE_PIPE_ENV} names a pipe, and this build cannot read the Windows hand-off; ` +
          `run the daemon with ${LAUNCH_NONCE_PIPE_FALLBACK_ENV}=env`,
        {},
      );
    }
  } else {
    const named = get(LAUNCH_NONCE_FD_ENV);
    if (named !== undefined) {
      return nonce(readDescriptor(named, options.descriptors ?? libcDescriptors()), "fd");
    }
  }
  const value = get(LAUNCH_NONCE_ENV);
  return value === undefined ? undefined : nonce(value, "env");
}

let cached: { nonce: LaunchNonce | undefined } | { error: unknown } | undefined;

/**
 * This process's launch nonce, read once: the first call reads ({@link readLaunchNonce} with
 * the process environment) and every later call returns the same answer, or throws the same
 * refusal, without touching the descriptor or the environment again (after the first read
 * closed it, fd 3 may be another file of this process).
 *
 * @returns The nonce, or `undefined` when the daemon gave none.
 * @throws {SubcWireError} the refusal of the first read, every time.
 */
export function launchNonce(): LaunchNonce | undefined {
  if (cached === undefined) {
    try {
      cached = { nonce: readLaunchNonce() };
    } catch (error) {
      cached = { error };
    }
  }
  if ("error" in cached) throw cached.error;
  return cached.nonce;
}

/**
 * The module id: `SUBC_MODULE_ID`, else `"synapse"` (subc §4); empty counts as unset.
 *
 * @param env Environment source. @default {Deno.env.get}
 * @returns The module id.
 */
export function subcModuleId(env?: EnvSource): string {
  return envLookup(env)(MODULE_ID_ENV) ?? DEFAULT_MODULE_ID;
}

/**
 * Parses `SUBC_LAUNCH_NONCE_FD` as the reference reader does: `<fd>:<inode>`, split at the first
 * colon; fd a decimal (optional sign) from 0 to 2^31−1, inode a decimal (optional `+`) up to
 * 2^64−1.
 *
 * @param text The variable's value.
 * @returns The descriptor and the inode it must have.
 * @throws {SubcWireError} `launch_fd_malformed`.
 */
export function parseLaunchNonceFd(text: string): { fd: number; inode: bigint } {
  const m = /^([+-]?\d+):(\+?\d+)$/.exec(text);
  const fd = m === null ? -1n : BigInt(m[1]!);
  const inode = m === null ? -1n : BigInt(m[2]!);
  if (fd < 0n || fd > 0x7fff_ffffn || inode < 0n || inode > (1n << 64n) - 1n) {
    throw refusal(
      "launch_fd_malformed",
      `${LAUNCH_NONCE_FD_ENV}=${JSON.stringify(text)} is not <fd>:<inode>`,
      { value: text },
    );
  }
  return { fd: Number(fd), inode };
}

function readDescriptor(text: string, ops: DescriptorOps): string {
  const { fd, inode } = parseLaunchNonceFd(text);
  // Examine before taking ownership: a descriptor that is not the named pipe belongs to
  // something else in this process, and is left alone.
  const stat = ops.fstat(fd);
  if (!stat.open) {
    throw refusal(
      "launch_fd_not_open",
      `${LAUNCH_NONCE_FD_ENV} names descriptor ${fd}, which is not open (errno ${stat.errno}); ` +
        "a process spawned by a module inherits the variable but not the descriptor",
      { fd, errno: stat.errno },
    );
  }
  if (!stat.isFifo) {
    throw refusal(
      "launch_fd_not_a_pipe",
      `${LAUNCH_NONCE_FD_ENV} names descriptor ${fd}, which is not a pipe; left it untouched`,
      { fd },
    );
  }
  if (stat.ino !== inode) {
    throw refusal(
      "launch_fd_wrong_pipe",
      `${LAUNCH_NONCE_FD_ENV} names descriptor ${fd} with inode ${inode}, but it has inode ` +
        `${stat.ino}; left it untouched`,
      { fd, expected_inode: String(inode), found_inode: String(stat.ino) },
    );
  }
  const buf = new Uint8Array(MAX_PIPE_BYTES + 1);
  // The first read is the emptiness check: at end of file it consumes nothing, and the
  // descriptor stays open.
  const first = ops.read(fd, buf);
  if (typeof first !== "number") throw unreadable(fd, first.errno);
  if (first === 0) {
    throw refusal(
      "launch_fd_empty",
      `the launch nonce pipe at descriptor ${fd} is empty; left it open`,
      { fd },
    );
  }
  let got = first;
  try {
    while (got < buf.byteLength) {
      const n = ops.read(fd, buf.subarray(got));
      if (typeof n !== "number") throw unreadable(fd, n.errno);
      if (n === 0) break;
      got += n;
    }
  } finally {
    ops.close(fd);
  }
  if (got > MAX_PIPE_BYTES) {
    throw refusal(
      "launch_fd_unreadable",
      `the launch nonce pipe at descriptor ${fd} holds more than ${MAX_PIPE_BYTES} bytes`,
      { fd },
    );
  }
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(buf.subarray(0, got));
  } catch {
    throw refusal(
      "launch_nonce_malformed",
      `the launch nonce pipe at descriptor ${fd} held bytes that are not UTF-8`,
      { fd, source: "fd" },
    );
  }
}

function libcDescriptors(): DescriptorOps {
  if (!fdBindingsSupported()) {
    throw refusal(
      "launch_fd_unsupported",
      `${LAUNCH_NONCE_FD_ENV} is set, and this build has no descriptor reader on ` +
        `${Deno.build.os}; the daemon must pass ${LAUNCH_NONCE_ENV} instead`,
      {},
    );
  }
  return {
    fstat(fd: number): FdStat {
      try {
        return fstatFd(fd);
      } catch (err) {
        throw refusal(
          "launch_fd_unsupported",
          `${LAUNCH_NONCE_FD_ENV} is set, and libc cannot be called to read it ` +
            `(${
              err instanceof Error ? err.message : String(err)
            }); run ck-synapse with --allow-ffi`,
          {},
          err,
        );
      }
    },
    read: readFd,
    close: closeFd,
  };
}

function nonce(value: string, source: LaunchNonceSource): LaunchNonce {
  if (!/^[0-9a-f]{64}$/.test(value)) {
    throw refusal(
      "launch_nonce_malformed",
      `the launch nonce from ${source === "fd" ? "the descriptor" : LAUNCH_NONCE_ENV} is not 64 ` +
        `lowercase hex digits (${value.length} characters); the daemon must mint 32 random bytes`,
      { source, length: value.length },
    );
  }
  return new RedactedNonce(value, source);
}

/** Keeps the value out of JSON and the inspector (a log line never prints the secret). */
class RedactedNonce implements LaunchNonce {
  readonly #value: string;
  readonly source: LaunchNonceSource;

  constructor(value: string, source: LaunchNonceSource) {
    this.#value = value;
    this.source = source;
    Object.freeze(this);
  }

  get value(): string {
    return this.#value;
  }

  toJSON(): { source: LaunchNonceSource } {
    return { source: this.source };
  }

  [Symbol.for("Deno.customInspect")](): string {
    return `LaunchNonce { value: <redacted>, source: "${this.source}" }`;
  }
}

function unreadable(fd: number, errno: number): SubcWireError {
  return refusal(
    "launch_fd_unreadable",
    `the launch nonce pipe at descriptor ${fd} could not be read (errno ${errno})`,
    { fd, errno },
  );
}

function refusal(
  reason: LaunchNonceReason,
  why: string,
  details: Record<string, unknown>,
  cause?: unknown,
): SubcWireError {
  return new SubcWireError(reason, `Cannot read the subc launch nonce: ${why}`, {
    details,
    ...(cause === undefined ? {} : { cause }),
  });
}
