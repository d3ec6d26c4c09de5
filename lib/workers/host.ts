/**
 * Worker host, one connection (contract.md §7, "Process" and "Handshake"): the module listens on a
 * unix socket in a 0700 runtime directory (socket 0600), spawns the worker with
 * `--socket PATH --nonce HEX`, accepts one connection within the accept timeout, and takes it
 * only if its first frame is a HELLO with protocol version 2, the launch nonce and the expected
 * engine identity, within the HELLO timeout. Then requests run one at a time (one in flight per
 * connection), each under its own timeout.
 *
 * Any I/O error, EOF, protocol violation or timeout kills the worker and answers
 * `engine_crashed` (transient, retry hint) with the last 8 KiB of the worker's output in
 * `details.log_tail`; a worker `ERR` frame is an answer, not a crash ({@link WorkerErrReply}).
 * Crash budgets and restarts live one level up, in `supervisor.ts`.
 *
 * @module
 */
import { SynapseError } from "../contract/errors.ts";
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
import {
  decodeF32LE,
  decodeFromWorker,
  encodeControl,
  type HelloMessage,
  type ModuleToWorkerMessage,
  type WorkerToModuleMessage,
} from "./messages.ts";

/** How to start a worker: the program and its leading arguments (the host appends its own). */
export interface WorkerLaunch {
  /** Executable path. */
  command: string;
  /** Arguments before `--socket PATH --nonce HEX`. */
  args: string[];
  /** Extra environment variables (the host adds `SYNAPSE_WORKER_ID`). */
  env?: Record<string, string>;
}

/** Engine identity a worker announced in HELLO (contract.md §3 `provenance.engine`). */
export interface WorkerEngineIdentity {
  engine: string;
  version: string;
  build_flags?: Record<string, string>;
}

/** Options of {@link WorkerConnection.start}. */
export interface WorkerStartOptions {
  /** The engine name HELLO must announce. */
  engine: KnownWorkerEngine;
  /** Stable id of this worker (names the socket, `SYNAPSE_WORKER_ID`). */
  workerId: string;
  /** Directory of the socket; created 0700 when missing. */
  runtimeDir: string;
  launch: WorkerLaunch;
  /** When set, HELLO's `engine.version` must equal it. */
  expectedVersion?: string;
  /**
   * When set, HELLO's `engine.build_flags` must equal it (a restarted worker must have the
   * identity the model's fingerprint was computed with).
   */
  expectedBuildFlags?: Record<string, string>;
  /** ms to wait for the worker to connect. @default 5000 */
  acceptTimeoutMs?: number;
  /** ms to wait for HELLO once connected. @default 5000 */
  helloTimeoutMs?: number;
  /** Our largest frame in bytes. @default 64 MiB */
  maxFrameBytes?: number;
  /** Each line the worker writes on stdout or stderr, as it arrives. */
  onLogLine?: (line: string, stream: "stdout" | "stderr") => void;
}

/** An answer to a request: the control message and, for VECTORS / SCORES, its f32 tensor. */
export interface WorkerReply<M extends WorkerToModuleMessage = WorkerToModuleMessage> {
  msg: M;
  tensor?: Float32Array;
}

/** Bytes of worker output kept for crash reports (contract.md §7: the last 8 KiB). */
export const LOG_TAIL_BYTES = 8 * 1024;

/** Default per-request timeouts, ms (contract.md §7). */
export const WORKER_TIMEOUTS = Object.freeze({
  acceptMs: 5_000,
  helloMs: 5_000,
  requestMs: 30_000,
  generateMs: 180_000,
  loadMs: 180_000,
});

const EXPECTED_REPLY: Record<string, WorkerToModuleMessage["type"]> = {
  LOAD: "LOADED",
  EMBED_BATCH: "VECTORS",
  RERANK: "SCORES",
  RERANK_SEQUENCES: "SCORES",
  GENERATE: "TEXT",
  UNLOAD: "UNLOADED",
  PING: "PONG",
};

/**
 * A worker's `ERR` answer `{code, msg}`: the request was refused, the worker is fine. Callers map
 * `workerCode` to a stable Synapse code.
 */
export class WorkerErrReply extends Error {
  /** The worker's code (e.g. `artifact_invalid`, `grammar_invalid`, `oom`). */
  readonly workerCode: string;
  constructor(workerCode: string, message: string) {
    super(message);
    this.name = "WorkerErrReply";
    this.workerCode = workerCode;
  }
}

/**
 * One spawned worker and its accepted connection. Create with {@link WorkerConnection.start};
 * once {@link WorkerConnection.dead} is set every request rejects with that error.
 */
export class WorkerConnection {
  /** The worker's HELLO. */
  readonly hello: HelloMessage;
  /** Negotiated max frame, bytes. */
  readonly maxFrameBytes: number;
  /** Process id of the spawned worker. */
  readonly pid: number;
  #child: Deno.ChildProcess;
  #conn: Deno.Conn;
  #log: LogTail;
  #workerId: string;
  #decoder: FrameDecoder;
  #frames: Uint8Array[] = [];
  #wake: (() => void) | undefined;
  #dead: SynapseError | undefined;
  #chain: Promise<unknown> = Promise.resolve();
  #exit: Promise<Deno.CommandStatus>;
  #exitStatus: Deno.CommandStatus | undefined;
  #onDeath: ((err: SynapseError) => void) | undefined;

  private constructor(init: {
    hello: HelloMessage;
    maxFrameBytes: number;
    child: Deno.ChildProcess;
    conn: Deno.Conn;
    log: LogTail;
    workerId: string;
    decoder: FrameDecoder;
    frames: Uint8Array[];
    exit: Promise<Deno.CommandStatus>;
  }) {
    this.hello = init.hello;
    this.maxFrameBytes = init.maxFrameBytes;
    this.pid = init.child.pid;
    this.#child = init.child;
    this.#conn = init.conn;
    this.#log = init.log;
    this.#workerId = init.workerId;
    this.#decoder = init.decoder;
    this.#frames = init.frames;
    this.#exit = init.exit;
    void this.#exit.then((st) => this.#exitStatus = st, () => {});
  }

  /** The engine identity from HELLO. */
  get engine(): WorkerEngineIdentity {
    return this.hello.engine;
  }

  /** Set once the worker is gone (crashed, killed or shut down): why. */
  get dead(): SynapseError | undefined {
    return this.#dead;
  }

  /** How the worker process ended (`signal` is `"SIGABRT"` after an abort); unset while it runs. */
  get exitStatus(): Deno.CommandStatus | undefined {
    return this.#exitStatus;
  }

  /** The last {@link LOG_TAIL_BYTES} of the worker's output. */
  logTail(): string {
    return this.#log.text();
  }

  /** Called once when the connection dies for any reason other than {@link shutdown}. */
  set onDeath(fn: ((err: SynapseError) => void) | undefined) {
    this.#onDeath = fn;
  }

  /**
   * Spawns a worker and runs the handshake.
   *
   * @throws {SynapseError} `engine_crashed` (transient) with `details.reason` one of
   *   `spawn_failed`, `exited_before_hello`, `accept_timeout`, `hello_timeout`,
   *   `version_mismatch`, `nonce_mismatch`, `engine_mismatch`, `identity_mismatch`,
   *   `frame_too_large`, `truncated`, `bad_json`, `bad_message`, `unknown_type`, `eof`;
   *   the worker is killed and its log tail attached. `spawn_failed` also covers a socket that
   *   cannot be created (a runtime dir too long for the 108-byte unix path limit).
   */
  static async start(options: WorkerStartOptions): Promise<WorkerConnection> {
    const maxFrame = options.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES;
    const log = new LogTail(LOG_TAIL_BYTES);
    const path = workerSocketPath(options.runtimeDir, options.workerId);
    let listener: Deno.UnixListener;
    try {
      await Deno.mkdir(options.runtimeDir, { recursive: true, mode: 0o700 });
      if (Deno.build.os !== "windows") await Deno.chmod(options.runtimeDir, 0o700);
      await Deno.remove(path).catch(() => {});
      listener = Deno.listen({ transport: "unix", path });
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
      if (Deno.build.os !== "windows") await Deno.chmod(path, 0o600);
      const nonce = newNonce();
      try {
        child = new Deno.Command(options.launch.command, {
          args: [...options.launch.args, "--socket", path, "--nonce", nonce],
          // NO_COLOR: Deno's own error output (an uncaught error) then has no ANSI codes in the
          // forwarded log lines and the crash report's log tail.
          env: { NO_COLOR: "1", ...options.launch.env, SYNAPSE_WORKER_ID: options.workerId },
          stdin: "null",
          stdout: "piped",
          stderr: "piped",
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
        timeout(options.acceptTimeoutMs ?? WORKER_TIMEOUTS.acceptMs, "timeout"),
      ]);
      if (accepted === "exited") {
        await log.settled(500);
        const st = await exit;
        fail(
          "exited_before_hello",
          `exited before connecting (${describeStatus(st)})`,
        );
      }
      if (accepted === "timeout") {
        fail(
          "accept_timeout",
          `did not connect within ${options.acceptTimeoutMs ?? WORKER_TIMEOUTS.acceptMs} ms`,
        );
      }
      conn = accepted as Deno.Conn;
      const decoder = new FrameDecoder({ maxFrameBytes: maxFrame });
      const first = await readOneFrame(
        conn,
        decoder,
        options.helloTimeoutMs ?? WORKER_TIMEOUTS.helloMs,
      );
      if (first.kind === "timeout") {
        fail(
          "hello_timeout",
          `sent no HELLO within ${options.helloTimeoutMs ?? WORKER_TIMEOUTS.helloMs} ms`,
        );
      }
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
      const wc = new WorkerConnection({
        hello,
        maxFrameBytes: negotiated,
        child: proc,
        conn,
        log,
        workerId: options.workerId,
        decoder,
        frames: rest,
        exit,
      });
      wc.#pump();
      exit.then((st) => wc.#die("exited", `exited (${describeStatus(st)})`));
      return wc;
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
        try {
          child.kill("SIGKILL");
        } catch { /* already gone */ }
        await child.status.catch(() => {});
        await log.settled(500);
      }
      if (err instanceof SynapseError && err.details !== undefined) {
        (err.details as Record<string, unknown>).log_tail = log.text();
      }
      throw err;
    } finally {
      for (const t of timers) clearTimeout(t);
    }
  }

  /**
   * Sends one request and waits for its answer (requests queue: one in flight).
   *
   * @param msg The request (any module → worker message but ACK and SHUTDOWN).
   * @param tensor i32 frame that follows the request (token ids), when the request has one.
   * @param timeoutMs Longest wait for the answer, ms.
   * @returns The answer; VECTORS and SCORES come with their f32 tensor.
   * @throws {WorkerErrReply} when the worker answers ERR (not a crash).
   * @throws {SynapseError} `engine_crashed` when the worker dies, times out or breaks the
   *   protocol (the worker is killed).
   */
  request<M extends WorkerToModuleMessage = WorkerToModuleMessage>(
    msg: ModuleToWorkerMessage,
    tensor: Uint8Array | undefined,
    timeoutMs: number,
  ): Promise<WorkerReply<M>> {
    const run = this.#chain.then(() => this.#request(msg, tensor, timeoutMs));
    this.#chain = run.catch(() => {});
    return run as Promise<WorkerReply<M>>;
  }

  /** Asks the worker to exit (SHUTDOWN), waiting up to `graceMs`, then kills it. */
  async shutdown(graceMs = 2_000): Promise<void> {
    if (this.#dead === undefined) {
      this.#dead = new SynapseError("engine_crashed", "Cannot use the worker: it was shut down", {
        retryAfterMs: 250,
        details: { worker_id: this.#workerId, reason: "shutdown" },
      });
      await writeAll(this.#conn, encodeFrame(encodeControl({ type: "SHUTDOWN" }))).catch(() => {});
    }
    let timer: ReturnType<typeof setTimeout> | undefined;
    const grace = new Promise<"timeout">((r) => timer = setTimeout(() => r("timeout"), graceMs));
    const res = await Promise.race([this.#exit, grace]);
    clearTimeout(timer);
    if (res === "timeout") this.kill();
    await this.#exit.catch(() => {});
    this.#closeConn();
  }

  /** Kills the worker now (SIGKILL). Idempotent. */
  kill(): void {
    try {
      this.#child.kill("SIGKILL");
    } catch { /* already gone */ }
    this.#closeConn();
  }

  async #request(
    msg: ModuleToWorkerMessage,
    tensor: Uint8Array | undefined,
    timeoutMs: number,
  ): Promise<WorkerReply> {
    if (this.#dead !== undefined) throw this.#dead;
    const expected = EXPECTED_REPLY[msg.type];
    if (expected === undefined) throw new TypeError(`Cannot send ${msg.type} as a request`);
    let timer: ReturnType<typeof setTimeout> | undefined;
    const timedOut = new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        reject(this.#die("timeout", `did not answer ${msg.type} within ${timeoutMs} ms`));
      }, timeoutMs);
    });
    try {
      return await Promise.race([this.#exchange(msg, tensor, expected), timedOut]);
    } finally {
      clearTimeout(timer);
    }
  }

  async #exchange(
    msg: ModuleToWorkerMessage,
    tensor: Uint8Array | undefined,
    expected: WorkerToModuleMessage["type"],
  ): Promise<WorkerReply> {
    try {
      const opts = { maxFrameBytes: this.maxFrameBytes };
      await writeAll(this.#conn, encodeFrame(encodeControl(msg), opts));
      if (tensor !== undefined) await writeAll(this.#conn, encodeFrame(tensor, opts));
    } catch (err) {
      if (this.#dead !== undefined) throw this.#dead;
      if (err instanceof WorkerProtocolError) throw err; // our own frame too large: a bug upstream
      throw this.#die("io_error", `write failed: ${errorText(err)}`);
    }
    const reply = this.#decode(await this.#nextFrame());
    const reqId = (msg as { req_id?: number }).req_id;
    const replyId = (reply as { req_id?: number }).req_id;
    if (reply.type === "ERR") {
      if (replyId !== undefined && replyId !== reqId) {
        throw this.#die("bad_message", `ERR for req_id ${replyId}, expected ${reqId}`);
      }
      throw new WorkerErrReply(reply.code, reply.msg);
    }
    if (reply.type !== expected || replyId !== reqId) {
      throw this.#die(
        "unknown_type",
        `answered ${msg.type} (req_id ${reqId}) with ${reply.type} (req_id ${replyId})`,
      );
    }
    if (reply.type === "VECTORS" || reply.type === "SCORES") {
      const n = reply.type === "VECTORS" ? reply.n * reply.dims : reply.n;
      const frame = await this.#nextFrame();
      try {
        return { msg: reply, tensor: decodeF32LE(frame, n) };
      } catch (err) {
        throw this.#die("bad_message", errorText(err));
      }
    }
    return { msg: reply };
  }

  #decode(frame: Uint8Array): WorkerToModuleMessage {
    try {
      return decodeFromWorker(frame);
    } catch (err) {
      const code = err instanceof WorkerProtocolError ? err.code : "bad_message";
      throw this.#die(code, `sent an invalid frame: ${errorText(err)}`);
    }
  }

  #nextFrame(): Promise<Uint8Array> {
    return new Promise<Uint8Array>((resolve, reject) => {
      const check = () => {
        const f = this.#frames.shift();
        if (f !== undefined) {
          this.#wake = undefined;
          resolve(f);
        } else if (this.#dead !== undefined) {
          this.#wake = undefined;
          reject(this.#dead);
        } else this.#wake = check;
      };
      check();
    });
  }

  async #pump(): Promise<void> {
    const buf = new Uint8Array(256 * 1024);
    try {
      while (true) {
        const n = await this.#conn.read(buf);
        if (n === null) {
          this.#decoder.end();
          this.#die("eof", "closed the connection");
          return;
        }
        const frames = this.#decoder.push(buf.subarray(0, n));
        if (frames.length > 0) {
          for (const f of frames) this.#frames.push(f);
          this.#wake?.();
        }
      }
    } catch (err) {
      if (this.#dead !== undefined) return;
      if (err instanceof Deno.errors.ConnectionReset) {
        // A worker that dies with unread data in its socket resets it: the same as EOF.
        this.#die("eof", `closed the connection (${errorText(err)})`);
        return;
      }
      const code = err instanceof WorkerProtocolError ? err.code : "io_error";
      this.#die(code, `broke the connection: ${errorText(err)}`);
    } finally {
      // Nothing more will arrive. A request still waiting hears it now, also when the connection
      // was already dead (shut down, then killed), where #die returned without waking it.
      this.#wake?.();
    }
  }

  /** Marks the connection dead (first reason wins), kills the worker, wakes the waiter. */
  #die(reason: string, message: string): SynapseError {
    if (this.#dead !== undefined) return this.#dead;
    const err = crashError(this.#workerId, reason, message, this.#log, this.pid);
    this.#dead = err;
    this.kill();
    this.#wake?.();
    // The tail is refreshed once the process is gone and its last lines (an abort message) are in.
    void this.#exit.then(() => this.#log.settled(500)).then(() => {
      (err.details as Record<string, unknown>).log_tail = this.#log.text();
    });
    this.#onDeath?.(err);
    return err;
  }

  /** Resolves once the process has exited and its output is read (bounded by `ms`). */
  async settled(ms = 1_000): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      this.#exit.then(() => this.#log.settled(ms)),
      new Promise<void>((r) => timer = setTimeout(r, ms)),
    ]);
    clearTimeout(timer);
    if (this.#dead !== undefined) {
      (this.#dead.details as Record<string, unknown>).log_tail = this.#log.text();
    }
  }

  #closeConn(): void {
    try {
      this.#conn.close();
    } catch { /* already closed */ }
  }
}

function crashError(
  workerId: string,
  reason: string,
  message: string,
  log: LogTail,
  pid: number | undefined,
  cause?: unknown,
): SynapseError {
  return new SynapseError("engine_crashed", `Engine worker '${workerId}' ${message}`, {
    retryAfterMs: 250,
    ...(cause === undefined ? {} : { cause }),
    details: {
      worker_id: workerId,
      reason,
      ...(pid === undefined ? {} : { pid }),
      log_tail: log.text(),
    },
  });
}

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

type FirstFrame =
  | { kind: "frame"; frame: Uint8Array; rest: Uint8Array[] }
  | { kind: "timeout" }
  | { kind: "eof" }
  | { kind: "error"; error: unknown };

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

async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  let off = 0;
  while (off < bytes.byteLength) off += await conn.write(bytes.subarray(off));
}

function describeStatus(st: Deno.CommandStatus): string {
  return st.signal !== null ? `signal ${st.signal}` : `exit code ${st.code}`;
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * The last `cap` bytes of a worker's stdout and stderr, interleaved by line as they arrive, and
 * the pumps that read them.
 */
const tailEncoder = new TextEncoder();
const tailDecoder = new TextDecoder();

class LogTail {
  #cap: number;
  #lines: string[] = [];
  /** UTF-8 bytes of each line, newline included. */
  #sizes: number[] = [];
  #bytes = 0;
  #pumps: Promise<void>[] = [];

  constructor(cap: number) {
    this.#cap = cap;
  }

  add(line: string): void {
    const bytes = tailEncoder.encode(line).byteLength + 1;
    this.#lines.push(line);
    this.#sizes.push(bytes);
    this.#bytes += bytes;
    while (this.#bytes > this.#cap && this.#lines.length > 1) {
      this.#lines.shift();
      this.#bytes -= this.#sizes.shift()!;
    }
  }

  /** The tail, at most `cap` UTF-8 bytes (a character cut at the start is dropped). */
  text(): string {
    const bytes = tailEncoder.encode(this.#lines.join("\n"));
    if (bytes.byteLength <= this.#cap) return tailDecoder.decode(bytes);
    let start = bytes.byteLength - this.#cap;
    while (start < bytes.byteLength && (bytes[start]! & 0xc0) === 0x80) start++;
    return tailDecoder.decode(bytes.subarray(start));
  }

  pump(
    stream: ReadableStream<Uint8Array>,
    name: "stdout" | "stderr",
    onLine: ((line: string, stream: "stdout" | "stderr") => void) | undefined,
  ): void {
    this.#pumps.push((async () => {
      let partial = "";
      try {
        for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
          const parts = (partial + chunk).split("\n");
          partial = parts.pop()!;
          for (const line of parts) this.#emit(line, name, onLine);
          if (partial.length > 16 * 1024) {
            this.#emit(partial, name, onLine);
            partial = "";
          }
        }
      } catch { /* the stream broke with the process */ }
      if (partial !== "") this.#emit(partial, name, onLine);
    })());
  }

  #emit(
    line: string,
    name: "stdout" | "stderr",
    onLine: ((line: string, stream: "stdout" | "stderr") => void) | undefined,
  ): void {
    const l = line.endsWith("\r") ? line.slice(0, -1) : line;
    this.add(l);
    try {
      onLine?.(l, name);
    } catch { /* a log sink must not break the pump */ }
  }

  /** Resolves when both pumps finished, or after `ms`. */
  async settled(ms: number): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      Promise.all(this.#pumps),
      new Promise<void>((r) => timer = setTimeout(r, ms)),
    ]);
    clearTimeout(timer);
  }
}
