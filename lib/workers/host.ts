/**
 * Worker host, one connection (docs/internals.md §7): a worker started and handshaken by `spawn.ts`
 * (socket, process group, HELLO), then requests run one at a time (one in flight per
 * connection), each under its own timeout.
 *
 * Any I/O error, EOF, protocol violation, timeout or a request not answered within 5 s of its
 * CANCEL ({@link DEFAULT_CANCEL_GRACE_MS}: a SIGSTOPped or wedged worker) kills the worker and answers
 * `engine_crashed` (transient, retry hint) with the last 8 KiB of the worker's output in
 * `details.log_tail`; a worker `ERR` frame is an answer, not a crash ({@link WorkerErrReply}).
 * When the process is gone, `details` names how it ended: `signal` (`"SIGKILL"`, `"SIGABRT"`, …)
 * or `exit_code`. Crash budgets and restarts live one level up, in `supervisor.ts`.
 *
 * Each worker leads its own process group, and every kill path (crash, timeout, shutdown grace
 * expiry, failed start) kills the whole group, so nothing the worker started (node-llama-cpp's
 * binary-test child) outlives it. A clean shutdown ends the group too. If the module itself is
 * SIGKILLed, the worker reads EOF on its socket and kills its own group (`workers/llama.ts`); a
 * worker that is in the middle of a request stops at its next token or item.
 *
 * @module
 */
import { SynapseError } from "../contract/errors.ts";
import { LogTail } from "./_log_tail.ts";
import {
  crashError,
  describeStatus,
  errorText,
  exitReason,
  killGroup,
  LOG_SETTLE_MS,
  statusDetails,
  writeAll,
} from "./_process.ts";
import { encodeFrame, FrameDecoder, WorkerProtocolError } from "./frame.ts";
import {
  type HelloMessage,
  type ModuleToWorkerMessage,
  type TextPartMessage,
  type WorkerToModuleMessage,
} from "./messages.ts";
import { decodeF32LE, decodeFromWorker, encodeControl } from "./codec.ts";
import {
  DEFAULT_WORKER_START_TIMEOUT_MS,
  spawnWorker,
  type WorkerEngineIdentity,
  type WorkerStartOptions,
} from "./spawn.ts";

/** An answer to a request: the control message and, for VECTORS / SCORES, its f32 tensor. */
export interface WorkerReply<M extends WorkerToModuleMessage = WorkerToModuleMessage> {
  msg: M;
  tensor?: Float32Array;
}

/**
 * Receives each TEXT_PART of a GENERATE sent with `stream: true`, in order, while the request
 * runs (the request still resolves with its TEXT). An exception it throws is swallowed.
 */
export type TextPartHandler = (msg: TextPartMessage) => void;

/** Bytes of worker output kept for crash reports (docs/internals.md §7: the last 8 KiB). */
export const LOG_TAIL_BYTES = 8 * 1024;

/**
 * ms a worker has to answer a request after its CANCEL was written (it checks between tokens and
 * items, so a live worker answers within one token); past it the worker is killed, so a stopped
 * or wedged worker does not hold its model until the request's own timeout (180 s for GENERATE).
 */
export const DEFAULT_CANCEL_GRACE_MS = 5_000;

/** Default start and per-request timeouts, ms (docs/internals.md §7; start: F20). */
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

const EXPECTED_REPLY: Record<string, WorkerToModuleMessage["type"]> = {
  LOAD: "LOADED",
  EMBED_BATCH: "VECTORS",
  RERANK: "SCORES",
  RERANK_SEQUENCES: "SCORES",
  GENERATE: "TEXT",
  UNLOAD: "UNLOADED",
  PING: "PONG",
  TOKENIZE: "TOKENS",
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
  #cancelGraceMs = DEFAULT_CANCEL_GRACE_MS;
  /** Kills the worker when the request in flight was cancelled and is not answered in time. */
  #cancelTimer: ReturnType<typeof setTimeout> | undefined;
  #debug: ((message: string, fields: Record<string, string | number>) => void) | undefined;

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
   * Spawns a worker, as the leader of a new process group, and runs the handshake
   * ({@link spawnWorker}); the connection then serves requests.
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
    const log = new LogTail(LOG_TAIL_BYTES);
    const spawned = await spawnWorker(options, log);
    const wc = new WorkerConnection({ ...spawned, log, workerId: options.workerId });
    if (options.cancelGraceMs !== undefined) wc.#cancelGraceMs = options.cancelGraceMs;
    const sink = options.log;
    if (sink !== undefined) {
      wc.#debug = (message, fields) =>
        sink("debug", "synapse.worker", message, { worker_id: options.workerId, ...fields });
    }
    wc.#pump();
    void spawned.exit.then(async (st) => {
      await log.settled(LOG_SETTLE_MS);
      wc.#die(exitReason(st), `exited (${describeStatus(st)})`);
    });
    return wc;
  }

  /**
   * Sends one request and waits for its answer (requests queue: one in flight).
   *
   * @param msg The request (any module → worker message but ACK, SHUTDOWN and CANCEL).
   * @param tensor i32 frame that follows the request (token ids), when the request has one.
   * @param timeoutMs Longest wait for the answer, ms.
   * @param onPart Receives the TEXT_PART frames of this request (a GENERATE sent with
   *   `stream: true`) while it runs; they never answer it. A TEXT_PART for any other `req_id`
   *   (an earlier request's late part) is ignored and logged at debug.
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
    onPart?: TextPartHandler,
  ): Promise<WorkerReply<M>> {
    const reqId = (msg as { req_id?: number }).req_id;
    if (reqId !== undefined) this.#queued.set(reqId, msg.type);
    const run = this.#chain.then(() => {
      if (reqId === undefined) return this.#request(msg, tensor, timeoutMs, onPart);
      this.#queued.delete(reqId);
      if (!this.#cancelledQueued.delete(reqId)) {
        return this.#request(msg, tensor, timeoutMs, onPart);
      }
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
   * crash). A request in flight that is not answered within the CANCEL grace
   * ({@link DEFAULT_CANCEL_GRACE_MS}, option `cancelGraceMs`) after its CANCEL was written kills
   * the worker: the request rejects `engine_crashed` `{reason: "cancel_timeout"}`, counted as a
   * crash (the supervisor restarts the worker on the next call, within its crash budget).
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
      return;
    }
    if (this.#inFlight !== reqId || this.#cancelTimer !== undefined) return;
    const graceMs = this.#cancelGraceMs;
    this.#cancelTimer = setTimeout(() => {
      this.#cancelTimer = undefined;
      if (this.#inFlight !== reqId) return;
      this.#die(
        "cancel_timeout",
        `did not answer req_id ${reqId} within ${graceMs} ms of its CANCEL (stopped or wedged); killed`,
      );
    }, graceMs);
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
    onPart: TextPartHandler | undefined,
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
      return await Promise.race([this.#exchange(msg, tensor, expected, onPart), timedOut]);
    } finally {
      clearTimeout(timer);
      clearTimeout(this.#cancelTimer);
      this.#cancelTimer = undefined;
      this.#inFlight = undefined;
    }
  }

  async #exchange(
    msg: ModuleToWorkerMessage,
    tensor: Uint8Array | undefined,
    expected: WorkerToModuleMessage["type"],
    onPart: TextPartHandler | undefined,
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
    let reply = this.#decode(await this.#nextFrame());
    // TEXT_PART frames come before the answer of a streamed GENERATE; they never answer it.
    while (reply.type === "TEXT_PART") {
      if (reply.req_id === reqId && msg.type === "GENERATE") {
        try {
          onPart?.(reply);
        } catch { /* a consumer's fault must not break the connection */ }
      } else {
        this.#debug?.("TEXT_PART for no pending request ignored", {
          req_id: reply.req_id,
          pending_req_id: reqId ?? -1,
        });
      }
      reply = this.#decode(await this.#nextFrame());
    }
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
