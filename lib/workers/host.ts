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
 * When the process is gone, `details` names how it ended: `signal` (`"SIGKILL"`, `"SIGABRT"`, …)
 * or `exit_code`. Crash budgets and restarts live one level up, in `supervisor.ts`.
 *
 * Each worker leads its own process group (spawned with `detached: true`, which calls `setsid()`
 * on Unix), and every kill path (crash, timeout, shutdown grace expiry, failed start) kills the
 * whole group, so nothing the worker started (node-llama-cpp's binary-test child) outlives it. A
 * clean shutdown ends the group too. If the module itself is SIGKILLed, the worker reads EOF on
 * its socket and kills its own group (`workers/llama.ts`); a worker that is in the middle of a
 * request stops at its next token or item.
 *
 * @module
 */
import { killProcessGroup } from "../../ffi/process_group.ts";
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
  /**
   * ms to wait for the worker to connect (config `worker.start_timeout_ms`).
   * @default {DEFAULT_WORKER_START_TIMEOUT_MS}
   */
  acceptTimeoutMs?: number;
  /**
   * ms to wait for HELLO once connected (config `worker.start_timeout_ms`).
   * @default {DEFAULT_WORKER_START_TIMEOUT_MS}
   */
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

/**
 * Default of each start phase (accept, then HELLO), ms: the default of `worker.start_timeout_ms`.
 * contract.md §7 says 5 s, which failed workers at boot on a loaded 2-core machine (F20).
 */
export const DEFAULT_WORKER_START_TIMEOUT_MS = 60_000;

/** Default start and per-request timeouts, ms (contract.md §7; start: F20). */
export const WORKER_TIMEOUTS = Object.freeze({
  acceptMs: DEFAULT_WORKER_START_TIMEOUT_MS,
  helloMs: DEFAULT_WORKER_START_TIMEOUT_MS,
  requestMs: 30_000,
  generateMs: 180_000,
  loadMs: 180_000,
});

/**
 * Longest wait, ms, for a worker's exit status once its connection closed, so the crash names
 * the signal or exit code (the status arrives right after the EOF when the process died).
 */
const EXIT_WAIT_MS = 2_000;
/** Longest wait, ms, for the last lines of a dead worker's output. */
const LOG_SETTLE_MS = 500;

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
  /** Process id of the spawned worker; also its process group id (Unix). */
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
  /** Writes in order: a request with its tensor, a CANCEL, SHUTDOWN never interleave. */
  #writes: Promise<unknown> = Promise.resolve();
  /** Requests waiting behind the one in flight: req_id → type. */
  #queued = new Map<number, ModuleToWorkerMessage["type"]>();
  /** req_id of the request written and not yet answered. */
  #inFlight: number | undefined;
  /** Queued GENERATE / EMBED_BATCH requests cancelled before they were written. */
  #cancelledQueued = new Set<number>();
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

  /**
   * Resolves when the worker's stdout and stderr have both reached EOF: the worker and every
   * process that shares them (what it started with inherited output) are gone. Unbounded.
   */
  outputEnded(): Promise<void> {
    return this.#log.ended();
  }

  /** Called once when the connection dies for any reason other than {@link shutdown}. */
  set onDeath(fn: ((err: SynapseError) => void) | undefined) {
    this.#onDeath = fn;
  }

  /**
   * Spawns a worker, as the leader of a new process group, and runs the handshake.
   *
   * @throws {SynapseError} `engine_crashed` (transient) with `details.reason` one of
   *   `spawn_failed`, `exited_before_hello`, `accept_timeout`, `hello_timeout`,
   *   `version_mismatch`, `nonce_mismatch`, `engine_mismatch`, `identity_mismatch`,
   *   `frame_too_large`, `truncated`, `bad_json`, `bad_message`, `unknown_type`, `eof`;
   *   the worker's process group is killed and its log tail attached, with `details.signal` or
   *   `details.exit_code` saying how it ended. `spawn_failed` also covers a socket that cannot be
   *   created (a runtime dir too long for the 108-byte unix path limit).
   */
  static async start(options: WorkerStartOptions): Promise<WorkerConnection> {
    const maxFrame = options.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES;
    const acceptMs = options.acceptTimeoutMs ?? WORKER_TIMEOUTS.acceptMs;
    const helloMs = options.helloTimeoutMs ?? WORKER_TIMEOUTS.helloMs;
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
      void exit.then(async (st) => {
        await log.settled(LOG_SETTLE_MS);
        wc.#die(exitReason(st), `exited (${describeStatus(st)})`);
      });
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

  /**
   * Sends one request and waits for its answer (requests queue: one in flight).
   *
   * @param msg The request (any module → worker message but ACK, SHUTDOWN and CANCEL).
   * @param tensor i32 frame that follows the request (token ids), when the request has one.
   * @param timeoutMs Longest wait for the answer, ms.
   * @returns The answer; VECTORS and SCORES come with their f32 tensor.
   * @throws {WorkerErrReply} when the worker answers ERR (not a crash); `workerCode`
   *   `cancelled` for an EMBED_BATCH stopped by {@link cancel}.
   * @throws {SynapseError} `engine_crashed` when the worker dies, times out or breaks the
   *   protocol (the worker is killed).
   * @throws {TypeError} for ACK, SHUTDOWN or CANCEL (a bug in the caller).
   */
  request<M extends WorkerToModuleMessage = WorkerToModuleMessage>(
    msg: ModuleToWorkerMessage,
    tensor: Uint8Array | undefined,
    timeoutMs: number,
  ): Promise<WorkerReply<M>> {
    const reqId = (msg as { req_id?: number }).req_id;
    if (reqId !== undefined) this.#queued.set(reqId, msg.type);
    const run = this.#chain.then(() => {
      if (reqId === undefined) return this.#request(msg, tensor, timeoutMs);
      this.#queued.delete(reqId);
      if (!this.#cancelledQueued.delete(reqId)) return this.#request(msg, tensor, timeoutMs);
      return cancelledBeforeSent(msg, tensor);
    });
    this.#chain = run.catch(() => {});
    return run as Promise<WorkerReply<M>>;
  }

  /**
   * Asks the worker to stop request `reqId` (CANCEL): written at once, not behind the request in
   * flight. The request still gets its answer: GENERATE a TEXT with `finish_reason: "cancelled"`
   * and the tokens generated so far (the worker checks between tokens), EMBED_BATCH an ERR
   * `cancelled` (checked between items). A GENERATE or EMBED_BATCH still queued here is never
   * sent and gets the same answers at its turn (no tokens, no items); an id that is neither
   * queued nor in flight (already answered, or a request of another type still queued) is
   * ignored, and so is every call once the worker is dead (the request in flight carries the
   * crash).
   *
   * @param reqId `req_id` of a request passed to {@link request}.
   * @returns Resolves once the CANCEL is written (or ignored); never rejects.
   */
  async cancel(reqId: number): Promise<void> {
    if (this.#dead !== undefined) return;
    const queued = this.#queued.get(reqId);
    if (queued === "GENERATE" || queued === "EMBED_BATCH") {
      this.#cancelledQueued.add(reqId);
      return;
    }
    if (this.#inFlight !== reqId) return;
    try {
      await this.#write([encodeControl({ type: "CANCEL", req_id: reqId })]);
    } catch (err) {
      if (this.#dead === undefined) await this.#lost("io_error", `write failed: ${errorText(err)}`);
    }
  }

  /**
   * Asks the worker to exit (SHUTDOWN), waiting up to `graceMs`, then kills its process group;
   * a helper process the worker left behind is killed either way.
   */
  async shutdown(graceMs = 2_000): Promise<void> {
    if (this.#dead === undefined) {
      this.#dead = new SynapseError("engine_crashed", "Cannot use the worker: it was shut down", {
        retryAfterMs: 250,
        details: { worker_id: this.#workerId, reason: "shutdown" },
      });
      await this.#write([encodeControl({ type: "SHUTDOWN" })]).catch(() => {});
    }
    let timer: ReturnType<typeof setTimeout> | undefined;
    const grace = new Promise<"timeout">((r) => timer = setTimeout(() => r("timeout"), graceMs));
    const res = await Promise.race([this.#exit, grace]);
    clearTimeout(timer);
    if (res === "timeout") this.kill();
    await this.#exit.catch(() => {});
    killGroup(this.#child);
    this.#closeConn();
    this.#wake?.();
  }

  /**
   * Kills the worker's process group now (SIGKILL) and closes the connection. A request waiting
   * on a dead connection is answered at once. Idempotent.
   */
  kill(): void {
    killGroup(this.#child);
    this.#closeConn();
    this.#wake?.();
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
      this.#inFlight = undefined;
    }
  }

  async #exchange(
    msg: ModuleToWorkerMessage,
    tensor: Uint8Array | undefined,
    expected: WorkerToModuleMessage["type"],
  ): Promise<WorkerReply> {
    const reqId = (msg as { req_id?: number }).req_id;
    const payloads = [encodeControl(msg)];
    if (tensor !== undefined) payloads.push(tensor);
    this.#inFlight = reqId;
    try {
      await this.#write(payloads);
    } catch (err) {
      if (this.#dead !== undefined) throw this.#dead;
      if (err instanceof WorkerProtocolError) throw err; // our own frame too large: a bug upstream
      throw await this.#lost("io_error", `write failed: ${errorText(err)}`);
    }
    const reply = this.#decode(await this.#nextFrame());
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

  /** Writes frames back to back, after any write already under way (never interleaved). */
  #write(payloads: Uint8Array[]): Promise<void> {
    const opts = { maxFrameBytes: this.maxFrameBytes };
    const frames = payloads.map((p) => encodeFrame(p, opts));
    const run = this.#writes.then(async () => {
      for (const f of frames) await writeAll(this.#conn, f);
    });
    this.#writes = run.catch(() => {});
    return run;
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
          await this.#lost("eof", "closed the connection");
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
        await this.#lost("eof", `closed the connection (${errorText(err)})`);
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

  /**
   * The connection broke (EOF, reset, failed write), usually because the worker died: waits for
   * its exit status (at most {@link EXIT_WAIT_MS}) and its last output, so the crash says
   * `signal` or `exited` with the signal name or exit code and the log tail; `reason` (`eof`,
   * `io_error`) only when the process is still running, and then it is killed.
   */
  async #lost(reason: string, message: string): Promise<SynapseError> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const st = await Promise.race([
      this.#exit.catch(() => undefined),
      new Promise<undefined>((r) => timer = setTimeout(() => r(undefined), EXIT_WAIT_MS)),
    ]);
    clearTimeout(timer);
    if (st === undefined) return this.#die(reason, message);
    await this.#log.settled(LOG_SETTLE_MS);
    return this.#die(exitReason(st), `${message}: ${describeStatus(st)}`);
  }

  /** Marks the connection dead (first reason wins), kills the worker, wakes the waiter. */
  #die(reason: string, message: string): SynapseError {
    if (this.#dead !== undefined) return this.#dead;
    const err = crashError(this.#workerId, reason, message, this.#log, this.pid);
    if (this.#exitStatus !== undefined) {
      Object.assign(err.details!, statusDetails(this.#exitStatus));
    }
    this.#dead = err;
    this.kill();
    // The tail is refreshed once the process is gone and its last lines (an abort message) are
    // in, and the details say how it ended (SIGKILL after a timeout).
    void this.#exit.then(() => this.#log.settled(LOG_SETTLE_MS)).then(() => this.#refreshDetails());
    try {
      this.#onDeath?.(err);
    } catch { /* observers must not break the connection's bookkeeping */ }
    return err;
  }

  #refreshDetails(): void {
    if (this.#dead === undefined) return;
    const d = this.#dead.details as Record<string, unknown>;
    d.log_tail = this.#log.text();
    if (this.#exitStatus !== undefined && d.reason !== "shutdown") {
      Object.assign(d, statusDetails(this.#exitStatus));
    }
  }

  /** Resolves once the process has exited and its output is read (bounded by `ms`). */
  async settled(ms = 1_000): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      this.#exit.then(() => this.#log.settled(ms)),
      new Promise<void>((r) => timer = setTimeout(r, ms)),
    ]);
    clearTimeout(timer);
    this.#refreshDetails();
  }

  #closeConn(): void {
    try {
      this.#conn.close();
    } catch { /* already closed */ }
  }
}

/**
 * The answer of a GENERATE or EMBED_BATCH cancelled while it was queued, before it was written: a
 * TEXT with no tokens, or ERR `cancelled`, as the worker would answer a cancel before its first
 * token or item.
 */
function cancelledBeforeSent(
  msg: ModuleToWorkerMessage,
  tensor: Uint8Array | undefined,
): Promise<WorkerReply> {
  if (msg.type === "EMBED_BATCH") {
    return Promise.reject(
      new WorkerErrReply("cancelled", `EMBED_BATCH cancelled after 0 of ${msg.items.length} items`),
    );
  }
  if (msg.type !== "GENERATE") {
    throw new Error(`Cannot answer a cancelled ${msg.type}. This is a bug.`);
  }
  return Promise.resolve({
    msg: {
      type: "TEXT",
      req_id: msg.req_id,
      text: "",
      n_prompt: (tensor?.byteLength ?? 0) / 4,
      n_gen: 0,
      finish_reason: "cancelled",
      generated_token_ids: [],
    },
  });
}

/**
 * SIGKILLs a worker's process group (Unix; the worker leads it), then the worker itself (the only
 * step on Windows, and a fallback where FFI is refused). Never throws.
 */
function killGroup(child: Deno.ChildProcess): void {
  if (Deno.build.os !== "windows") {
    try {
      killProcessGroup(child.pid, "SIGKILL");
    } catch { /* no FFI permission, or not our group: the leader alone below */ }
  }
  try {
    child.kill("SIGKILL");
  } catch { /* already gone */ }
}

/** `details.reason` for a process that is gone: `signal` or `exited`. */
function exitReason(st: Deno.CommandStatus): string {
  return st.signal !== null ? "signal" : "exited";
}

/** `{signal}` when a signal ended the process, else `{exit_code}`. */
function statusDetails(st: Deno.CommandStatus): { signal: string } | { exit_code: number } {
  return st.signal !== null ? { signal: st.signal } : { exit_code: st.code };
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

  /** Resolves when both pumps finished: every writer of the pipes is gone. */
  async ended(): Promise<void> {
    await Promise.all(this.#pumps);
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
