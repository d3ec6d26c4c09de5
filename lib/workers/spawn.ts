/**
 * Starting a worker (docs/internals.md §7 "Process and handshake"): listen on a unix socket in a
 * 0700 runtime directory (socket 0600 from its creation), spawn the worker with `--socket PATH`
 * and the launch nonce in its environment ({@link WORKER_NONCE_ENV}) as the
 * leader of its own process group (`detached: true`, which calls `setsid()` on Unix), accept one
 * connection within the accept timeout, and take it only if its first frame is a HELLO with
 * protocol version 2, the launch nonce and the expected engine identity, within the HELLO
 * timeout; then answer ACK. Any failure kills the whole group and throws `engine_crashed` with
 * the worker's log tail. `host.ts` wraps what this returns in a `WorkerConnection`.
 *
 * @module
 */
import { SynapseError } from "../contract/errors.ts";
import type { LogTail } from "./_log_tail.ts";
import type { LogSink } from "../log/log.ts";
import {
  crashError,
  describeStatus,
  errorText,
  killGroup,
  LOG_SETTLE_MS,
  statusDetails,
  writeAll,
} from "./_process.ts";
import {
  DEFAULT_MAX_FRAME_BYTES,
  encodeFrame,
  FrameDecoder,
  WorkerProtocolError,
} from "./frame.ts";
import {
  checkHello,
  type KnownWorkerEngine,
  makeAck,
  newNonce,
  workerSocketPath,
} from "./handshake.ts";
import { type HelloMessage } from "./messages.ts";
import { prepareRuntimeDir } from "./runtime_dir.ts";
import { decodeFromWorker, encodeControl } from "./codec.ts";

/**
 * Environment variable that carries the launch nonce to the worker (the reference implementation
 * passes it as `--nonce`, which any local user can read in `ps`; this project hands it over
 * privately).
 */
export const WORKER_NONCE_ENV = "SYNAPSE_WORKER_NONCE";

/**
 * Listens on a unix socket created 0600 from the start: the umask is tightened for the one
 * synchronous `listen` call, so the socket never exists with looser permissions (a chmod after
 * the fact leaves a window).
 *
 * @param path Socket path (its directory already checked by `prepareRuntimeDir`).
 * @returns The listener.
 * @throws what `Deno.listen` throws (the path exists, is too long for a unix socket, …).
 */
export function listenPrivate(path: string): Deno.UnixListener {
  if (Deno.build.os === "windows") return Deno.listen({ transport: "unix", path });
  const old = Deno.umask(0o177);
  try {
    return Deno.listen({ transport: "unix", path });
  } finally {
    Deno.umask(old);
  }
}

/** How to start a worker: the program and its leading arguments (the host appends its own). */
export interface WorkerLaunch {
  /** Executable path. */
  command: string;
  /** Arguments before `--socket PATH`. */
  args: string[];
  /** Extra environment variables (the host adds `SYNAPSE_WORKER_ID`). */
  env?: Record<string, string>;
}

/** Engine identity a worker announced in HELLO (docs/internals.md §3 `provenance.engine`). */
export interface WorkerEngineIdentity {
  engine: string;
  version: string;
  build_flags?: Record<string, string>;
}

/** Options of `WorkerConnection.start` (`host.ts`) and {@link spawnWorker}. */
export interface WorkerStartOptions {
  /** The engine name HELLO must announce. */
  engine: KnownWorkerEngine;
  /** Stable id of this worker (names the socket, `SYNAPSE_WORKER_ID`). */
  workerId: string;
  /** Directory of the socket; created 0700 when missing. */
  runtimeDir: string;
  launch: WorkerLaunch;
  /** When set, HELLO's `engine.version` must equal it. */
  expectedVersion?: string | undefined;
  /**
   * When set, HELLO's `engine.build_flags` must equal it (a restarted worker must have the
   * identity the model's fingerprint was computed with).
   */
  expectedBuildFlags?: Record<string, string> | undefined;
  /**
   * ms to wait for the worker to connect (config `worker.start_timeout_ms`).
   * @default {DEFAULT_WORKER_START_TIMEOUT_MS}
   */
  acceptTimeoutMs?: number | undefined;
  /**
   * ms to wait for HELLO once connected (config `worker.start_timeout_ms`).
   * @default {DEFAULT_WORKER_START_TIMEOUT_MS}
   */
  helloTimeoutMs?: number | undefined;
  /**
   * ms a worker has to answer a request it was sent CANCEL for; past it the worker is killed
   * (`engine_crashed` `{reason: "cancel_timeout"}`, counted as a crash).
   * @default {DEFAULT_CANCEL_GRACE_MS} (5000)
   */
  cancelGraceMs?: number | undefined;
  /** Our largest frame in bytes. @default 64 MiB */
  maxFrameBytes?: number | undefined;
  /** Each line the worker writes on stdout or stderr, as it arrives. */
  onLogLine?: ((line: string, stream: "stdout" | "stderr") => void) | undefined;
  /** Module log for the connection's own debug lines (a stray TEXT_PART). @default none */
  log?: LogSink | undefined;
}

/**
 * Default of each start phase (accept, then HELLO), ms: the default of `worker.start_timeout_ms`.
 * The reference implementation allows 5 s, which failed workers at boot on a loaded 2-core
 * machine (F20).
 */
export const DEFAULT_WORKER_START_TIMEOUT_MS = 60_000;

/** A worker that passed the handshake: its process, its connection, and what HELLO said. */
export interface SpawnedWorker {
  /** The worker's HELLO. */
  hello: HelloMessage;
  /** Negotiated max frame, bytes: min(ours, the worker's). */
  maxFrameBytes: number;
  /** The worker process, leader of its own process group. */
  child: Deno.ChildProcess;
  /** The accepted connection; the ACK is written. */
  conn: Deno.Conn;
  /** The connection's decoder, set to the negotiated max frame. */
  decoder: FrameDecoder;
  /** Frames that arrived after HELLO in the same reads, in order. */
  frames: Uint8Array[];
  /** `child.status`. */
  exit: Promise<Deno.CommandStatus>;
}

/**
 * Spawns a worker, as the leader of a new process group, and runs the handshake. The worker's
 * stdout and stderr are read into `log` (and handed to `options.onLogLine`) from the spawn on.
 *
 * @param options What to start and what its HELLO must say; timeouts in ms.
 * @param log Receives the worker's output; its tail goes into every crash error.
 * @returns The worker, handshake done; the socket's path is already unlinked.
 * @throws {SynapseError} `engine_crashed` (transient) with `details.reason` one of
 *   `spawn_failed`, `exited_before_hello`, `accept_timeout`, `hello_timeout`,
 *   `version_mismatch`, `nonce_mismatch`, `engine_mismatch`, `identity_mismatch`,
 *   `frame_too_large`, `truncated`, `bad_json`, `bad_message`, `unknown_type`, `eof`;
 *   the worker's process group is killed and its log tail attached, with `details.signal` or
 *   `details.exit_code` saying how it ended. `spawn_failed` also covers a socket that cannot be
 *   created (a runtime dir too long for the 108-byte unix path limit).
 */
export async function spawnWorker(
  options: WorkerStartOptions,
  log: LogTail,
): Promise<SpawnedWorker> {
  const maxFrame = options.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES;
  const acceptMs = options.acceptTimeoutMs ?? DEFAULT_WORKER_START_TIMEOUT_MS;
  const helloMs = options.helloTimeoutMs ?? DEFAULT_WORKER_START_TIMEOUT_MS;
  const path = workerSocketPath(options.runtimeDir, options.workerId);
  // A runtime dir others could reach is refused, typed and permanent (runtime_dir.ts).
  prepareRuntimeDir(options.runtimeDir);
  let listener: Deno.UnixListener;
  try {
    await Deno.remove(path).catch(() => {});
    listener = listenPrivate(path);
  } catch (err) {
    // No worker can start (e.g. a runtime dir too long for a unix socket path): typed, so the
    // supervisor counts it and quarantines the key instead of passing a raw error up.
    throw crashError(
      options.workerId,
      "spawn_failed",
      `cannot listen on '${path}': ${errorText(err)}`,
      log,
      undefined,
      err,
    );
  }
  let child: Deno.ChildProcess | undefined;
  let conn: Deno.Conn | undefined;
  let accepting: Promise<Deno.Conn> | undefined;
  const timers: ReturnType<typeof setTimeout>[] = [];
  const fail = (reason: string, message: string, cause?: unknown): never => {
    throw crashError(options.workerId, reason, message, log, child?.pid, cause);
  };
  try {
    const nonce = newNonce();
    try {
      child = new Deno.Command(options.launch.command, {
        // The nonce travels in the environment, which only this user can read
        // (/proc/PID/environ is 0400), never on the command line that `ps` shows everyone.
        args: [...options.launch.args, "--socket", path],
        // NO_COLOR: Deno's own error output (an uncaught error) then has no ANSI codes in the
        // forwarded log lines and the crash report's log tail.
        env: {
          NO_COLOR: "1",
          ...options.launch.env,
          SYNAPSE_WORKER_ID: options.workerId,
          // The worker arms its parent-death signal against this pid (workers/llama.ts).
          SYNAPSE_WORKER_PARENT_PID: String(Deno.pid),
          [WORKER_NONCE_ENV]: nonce,
        },
        stdin: "null",
        stdout: "piped",
        stderr: "piped",
        // Unix: setsid(), so the worker leads its own process group and a kill reaches all of
        // it. (A terminal's Ctrl-C then reaches only the module, which shuts its workers down.)
        detached: Deno.build.os !== "windows",
      }).spawn();
    } catch (err) {
      fail(
        "spawn_failed",
        `cannot start '${options.launch.command}': ${(err as Error).message}`,
        err,
      );
    }
    const proc = child!;
    log.pump(proc.stdout, "stdout", options.onLogLine);
    log.pump(proc.stderr, "stderr", options.onLogLine);
    const exit = proc.status;
    const timeout = (ms: number, tag: string) =>
      new Promise<string>((resolve) => timers.push(setTimeout(() => resolve(tag), ms)));
    accepting = listener.accept();
    const accepted = await Promise.race([
      accepting,
      exit.then(() => "exited"),
      timeout(acceptMs, "timeout"),
    ]);
    if (accepted === "exited") {
      await log.settled(LOG_SETTLE_MS);
      fail("exited_before_hello", `exited before connecting (${describeStatus(await exit)})`);
    }
    if (accepted === "timeout") fail("accept_timeout", `did not connect within ${acceptMs} ms`);
    conn = accepted as Deno.Conn;
    const decoder = new FrameDecoder({ maxFrameBytes: maxFrame });
    const first = await readOneFrame(conn, decoder, helloMs);
    if (first.kind === "timeout") fail("hello_timeout", `sent no HELLO within ${helloMs} ms`);
    if (first.kind === "eof") fail("eof", "closed the connection before HELLO");
    if (first.kind === "error") {
      const e = first.error;
      fail(e instanceof WorkerProtocolError ? e.code : "io_error", errorText(e), e);
    }
    const { frame, rest } = first as { frame: Uint8Array; rest: Uint8Array[] };
    let hello: HelloMessage;
    let negotiated: number;
    try {
      const msg = decodeFromWorker(frame);
      if (msg.type !== "HELLO") {
        throw new WorkerProtocolError("unknown_type", `first frame is ${msg.type}, not HELLO`);
      }
      hello = msg;
      negotiated = checkHello(hello, {
        nonce,
        expectedEngine: options.engine,
        maxFrameBytes: maxFrame,
      }).maxFrameBytes;
    } catch (err) {
      const code = err instanceof WorkerProtocolError ? err.code : "bad_message";
      return fail(code, `was refused at HELLO: ${errorText(err)}`, err);
    }
    const mismatch = identityMismatch(hello.engine, options);
    if (mismatch !== undefined) fail("identity_mismatch", `was refused at HELLO: ${mismatch}`);
    decoder.setMaxFrameBytes(negotiated);
    await writeAll(conn, encodeFrame(encodeControl(makeAck(negotiated))));
    listener.close();
    await Deno.remove(path).catch(() => {});
    return { hello, maxFrameBytes: negotiated, child: proc, conn, decoder, frames: rest, exit };
  } catch (err) {
    try {
      listener.close();
    } catch { /* already closed */ }
    // Deno unlinks the socket's path when the listener is dropped, which with an accept pending
    // happens only once that accept settles: wait for it, or it would unlink the socket of the
    // next worker started on this path.
    const late = await accepting?.catch(() => undefined);
    if (late !== undefined && late !== conn) {
      try {
        late.close();
      } catch { /* already closed */ }
    }
    await Deno.remove(path).catch(() => {});
    try {
      conn?.close();
    } catch { /* already closed */ }
    if (child !== undefined) {
      killGroup(child);
      const st = await child.status.catch(() => undefined);
      // The pipes end when the last process holding them is gone (the group was killed).
      await log.settled(LOG_SETTLE_MS);
      if (err instanceof SynapseError && err.details !== undefined && st !== undefined) {
        Object.assign(err.details, statusDetails(st));
      }
    }
    if (err instanceof SynapseError && err.details !== undefined) {
      (err.details as Record<string, unknown>).log_tail = log.text();
    }
    throw err;
  } finally {
    for (const t of timers) clearTimeout(t);
  }
}

/** Why HELLO's engine identity is not the one asked for, or `undefined` when it is. */
function identityMismatch(
  got: WorkerEngineIdentity,
  options: WorkerStartOptions,
): string | undefined {
  if (options.expectedVersion !== undefined && got.version !== options.expectedVersion) {
    return `engine version '${got.version}', expected '${options.expectedVersion}'`;
  }
  if (options.expectedBuildFlags !== undefined) {
    const a = JSON.stringify(sortedFlags(got.build_flags ?? {}));
    const b = JSON.stringify(sortedFlags(options.expectedBuildFlags));
    if (a !== b) return `engine build flags ${a}, expected ${b}`;
  }
  return undefined;
}

function sortedFlags(f: Record<string, string>): [string, string][] {
  return Object.entries(f).sort(([a], [b]) => a < b ? -1 : a > b ? 1 : 0);
}

/** What the first read of a connection found. */
type FirstFrame =
  | { kind: "frame"; frame: Uint8Array; rest: Uint8Array[] }
  | { kind: "timeout" }
  | { kind: "eof" }
  | { kind: "error"; error: unknown };

/** Reads until the first whole frame, EOF, an error, or `timeoutMs` elapses; never rejects. */
async function readOneFrame(
  conn: Deno.Conn,
  decoder: FrameDecoder,
  timeoutMs: number,
): Promise<FirstFrame> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<FirstFrame>((r) =>
    timer = setTimeout(() => r({ kind: "timeout" }), timeoutMs)
  );
  const read = (async (): Promise<FirstFrame> => {
    const buf = new Uint8Array(64 * 1024);
    try {
      while (true) {
        const n = await conn.read(buf);
        if (n === null) {
          try {
            decoder.end();
          } catch (err) {
            return { kind: "error", error: err };
          }
          return { kind: "eof" };
        }
        const frames = decoder.push(buf.subarray(0, n));
        if (frames.length > 0) return { kind: "frame", frame: frames[0]!, rest: frames.slice(1) };
      }
    } catch (err) {
      return { kind: "error", error: err };
    }
  })();
  try {
    return await Promise.race([read, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
