/**
 * The worker side of the worker protocol (docs/internals.md "§7 Worker protocol"), shared by the
 * worker programs (`workers/llama.ts` over node-llama-cpp, `workers/ffi.ts` over a native shim):
 * the launch flags and nonce, the parent-death signal, the connection, HELLO / ACK, the frame
 * reader that takes CANCEL out of the queue as it arrives, one request at a time, ERR for a
 * request that throws, the test hooks, and the exit when the module goes away. A worker program
 * supplies its engine identity and a handler; nothing else differs between them.
 *
 * The module spawns a worker with `--socket PATH` and the nonce in `SYNAPSE_WORKER_NONCE` (or
 * `--nonce HEX`); it connects, sends HELLO with its engine identity, waits for ACK and then
 * answers one request at a time. CANCEL `{req_id}` may arrive while a request runs: the reader
 * takes it out of the frame queue (the other frames keep their order), tells the handler at once
 * ({@link WorkerBackend.onCancel}) and the request stops at its next boundary. A CANCEL for a
 * request that is neither running nor queued is ignored.
 *
 * When the module goes away (EOF on the socket) the worker stops what it runs and SIGKILLs its
 * own process group, itself included, when it leads one (the host spawns it detached), so
 * nothing it started outlives the module. On Linux the worker also arms a parent-death signal
 * (`prctl(PR_SET_PDEATHSIG, SIGKILL)`, ffi/parent_death.ts) at start: the kernel kills it when
 * the module's process exits, even mid native call or while stopped (SIGSTOP), where no EOF is
 * read.
 *
 * Hidden flags for tests make a real worker misbehave (never used in production):
 * `--test-abort-after N` (libc `abort()` on request N+1), `--test-hang-after N` (never answer
 * request N+1), `--test-ping-uncounted` (PINGs are answered and not counted by those two),
 * `--test-garbage-frame` (answer the first request with a non-JSON frame),
 * `--test-oversize-frame` (announce a frame over the negotiated max), `--test-truncated-frame`
 * (write half a frame, then exit), `--test-no-hello`, `--test-wrong-nonce`,
 * `--test-protocol-version V`, `--test-engine NAME`, `--test-log-burst N` (print N lines at
 * start), `--test-exit-before-connect`, `--test-connect-after-file PATH` (connect only once PATH
 * exists), `--test-wait-cancel-after N` (after N generated tokens or embedded items, wait for
 * the CANCEL of that request; only the first request that gets that far), `--test-spawn-child`
 * (start a helper process that shares the worker's stderr and process group and runs until
 * killed), `--test-stray-part` (a streamed GENERATE first sends a TEXT_PART for another req_id).
 * A worker program may add its own (`extraFlags`).
 *
 * `--nice N` (0…19) lowers the CPU priority of the worker's whole process group, every thread of
 * it and those created later. The worker must lead its group (the host spawns it detached);
 * when the kernel refuses, it says "<name>: cannot set nice …" on stderr and exits 2.
 *
 * @module
 */
import { parseArgs, type ParseArgsOptionsConfig } from "node:util";
import process from "node:process";
import { encodeFrame, FrameDecoder } from "../lib/workers/frame.ts";
import type { ModuleToWorkerMessage, WorkerToModuleMessage } from "../lib/workers/messages.ts";
import { decodeFromModule, encodeControl } from "../lib/workers/codec.ts";
import { WORKER_PROTOCOL_VERSION } from "../lib/workers/handshake.ts";
import type { WorkerEngineIdentity } from "../lib/workers/spawn.ts";
import { setProcessGroupNice } from "../ffi/priority.ts";
import { killOwnProcessGroup } from "../ffi/process_group.ts";
import { killWithParent } from "../ffi/parent_death.ts";

const MAX_FRAME = 64 * 1024 * 1024;

/** What a request handler may do besides answering. */
export interface WorkerIo {
  /** Sends one message (and its tensor frame). */
  send(msg: WorkerToModuleMessage, tensor?: Uint8Array): Promise<void>;
  /** True once request `reqId` is cancelled or the module has gone away. */
  stopRequested(reqId: number): boolean;
  /**
   * Test hook `--test-wait-cancel-after N`: call with the items or tokens done so far; at the
   * N-th (once per process) it waits until the request is cancelled.
   */
  maybeWaitForCancel(reqId: number, done: number, unit: "items" | "tokens"): Promise<void>;
  /** The parsed flags (the shared ones and the program's `extraFlags`). */
  flags: Record<string, string | boolean | undefined>;
}

/** A worker program's part: its identity and its requests. */
export interface WorkerBackend {
  /** Handles one request (never ACK, CANCEL or SHUTDOWN); throws {@link refused} errors. */
  handle(msg: ModuleToWorkerMessage, tensor: Uint8Array | undefined, io: WorkerIo): Promise<void>;
  /** Told at once when the request in flight (or a queued one) is cancelled. */
  onCancel?(reqId: number): void;
  /** Loaded models, for the PONG of an uncounted PING. */
  modelsLoaded(): number;
}

/** Options of {@link serveWorker}. */
export interface ServeOptions {
  /** Names the worker in its stderr lines (`llama worker`, `ffi worker`). */
  name: string;
  /** The two words `main.ts worker <kind>` passes first (stripped from the arguments). */
  kind: string;
  /** The program's own flags (parsed with the shared ones). */
  extraFlags?: ParseArgsOptionsConfig;
  /**
   * Makes the backend once the flags are read, the parent-death signal is armed and nice is
   * set, before connecting (a slow runtime start stays inside the module's accept timeout).
   */
  start(flags: Record<string, string | boolean | undefined>): Promise<{
    backend: WorkerBackend;
    identity: WorkerEngineIdentity;
  }>;
}

/** An error a worker answers as ERR `{code}` (the module maps the code). */
export function refused(code: string, message: string): Error {
  return Object.assign(new Error(message), { workerCode: code });
}

/** Requests followed by a tensor frame. */
export function needsTensor(msg: ModuleToWorkerMessage): boolean {
  return msg.type === "EMBED_BATCH" || msg.type === "GENERATE" || msg.type === "RERANK" ||
    msg.type === "RERANK_SEQUENCES";
}

/** `process.memoryUsage().rss` in MiB, as PONG's `rss_mb` carries it. */
export function rssMb(): number {
  return Math.round(process.memoryUsage().rss / 1048576);
}

/** Runs a worker until SHUTDOWN or the module goes away; never returns. */
export async function serveWorker(options: ServeOptions): Promise<never> {
  const name = options.name;
  const { values: flags } = parseArgs({
    args: Deno.args[0] === "worker" && Deno.args[1] === options.kind
      ? Deno.args.slice(2)
      : Deno.args,
    options: {
      socket: { type: "string" },
      nonce: { type: "string" },
      "test-abort-after": { type: "string" },
      "test-ping-uncounted": { type: "boolean" },
      "test-hang-after": { type: "string" },
      "test-garbage-frame": { type: "boolean" },
      "test-oversize-frame": { type: "boolean" },
      "test-truncated-frame": { type: "boolean" },
      "test-no-hello": { type: "boolean" },
      "test-wrong-nonce": { type: "boolean" },
      "test-protocol-version": { type: "string" },
      "test-engine": { type: "string" },
      "test-log-burst": { type: "string" },
      "test-exit-before-connect": { type: "boolean" },
      "test-connect-after-file": { type: "string" },
      "test-wait-cancel-after": { type: "string" },
      "test-spawn-child": { type: "boolean" },
      "test-stray-part": { type: "boolean" },
      nice: { type: "string" },
      ...options.extraFlags,
    },
    strict: true,
  }) as { values: Record<string, string | boolean | undefined> };

  // The module hands the nonce over in the environment (never on the command line, which `ps`
  // shows every local user); `--nonce` (docs/internals.md §7) is still accepted. Removed from the
  // environment at once, so no child process of this worker inherits it.
  const launchNonce = (flags.nonce as string | undefined) ?? Deno.env.get("SYNAPSE_WORKER_NONCE");
  Deno.env.delete("SYNAPSE_WORKER_NONCE");
  const socket = flags.socket as string | undefined;
  if (socket === undefined || launchNonce === undefined) {
    console.error(`${name}: --socket PATH and the nonce (SYNAPSE_WORKER_NONCE) are required`);
    Deno.exit(2);
  }

  // Never outlive the module: the kernel SIGKILLs this worker when its parent (the module that
  // spawned it, whose pid the host passes in SYNAPSE_WORKER_PARENT_PID) exits, even in the middle
  // of a native call or while stopped. Off Linux the EOF watch on the socket does it.
  {
    const parent = Number(Deno.env.get("SYNAPSE_WORKER_PARENT_PID") ?? "");
    Deno.env.delete("SYNAPSE_WORKER_PARENT_PID");
    try {
      if (
        killWithParent(Number.isSafeInteger(parent) && parent > 0 ? parent : undefined) ===
          "parent_gone"
      ) {
        console.error(`${name}: the module that started it is gone; exiting`);
        Deno.exit(0);
      }
    } catch (err) {
      console.error(`${name}: ${(err as Error).message}; relying on the socket's EOF`);
    }
  }

  const burst = Number(flags["test-log-burst"] ?? 0);
  for (let i = 0; i < burst; i++) console.error(`${name}: test log line ${i}`);
  if (flags["test-exit-before-connect"]) {
    console.error(`${name}: exiting before connecting (test hook)`);
    Deno.exit(3);
  }

  // `--nice N`: lower the CPU priority of the whole process group (this process leads it): every
  // thread that exists now (Deno's), and, by inheritance, the runtime's threads and children, so
  // all of them yield to the module's interactive lanes.
  if (flags.nice !== undefined) {
    const nice = Number(flags.nice);
    if (!Number.isInteger(nice) || nice < 0 || nice > 19) {
      console.error(`${name}: --nice must be an integer in 0..19: received '${flags.nice}'`);
      Deno.exit(2);
    }
    try {
      setProcessGroupNice(Deno.pid, nice);
    } catch (err) {
      console.error(`${name}: cannot set nice ${nice}: ${(err as Error).message}`);
      Deno.exit(2);
    }
  }

  if (flags["test-spawn-child"]) {
    const helper = new Deno.Command(Deno.execPath(), {
      args: ["eval", "setInterval(() => {}, 1 << 30)"],
      stdin: "null",
      stdout: "null",
      stderr: "inherit",
    }).spawn();
    helper.unref();
    console.error(`${name}: test child ${helper.pid} (test hook)`);
  }

  const { backend, identity } = await options.start(flags);

  const barrier = flags["test-connect-after-file"] as string | undefined;
  if (barrier !== undefined) {
    console.error(`${name}: waiting for ${barrier} before connecting (test hook)`);
    while (!(await exists(barrier))) await new Promise((r) => setTimeout(r, 10));
  }

  const conn = await Deno.connect({ transport: "unix", path: socket });
  const decoder = new FrameDecoder({ maxFrameBytes: MAX_FRAME });
  /**
   * Frames read and not yet taken, in order: control messages (decoded once, here), the tensor
   * frame after a request that has one, and frames that did not decode (the main loop fails on
   * them in turn).
   */
  type Inbound =
    | { kind: "control"; msg: ModuleToWorkerMessage }
    | { kind: "tensor"; frame: Uint8Array }
    | { kind: "invalid"; error: unknown };
  const inbox: Inbound[] = [];
  let wake: (() => void) | undefined;
  let closed = false;
  /** req_ids read and not yet answered: a CANCEL for one of them counts. */
  const pending = new Set<number>();
  /** req_ids cancelled while pending. */
  const cancelled = new Set<number>();
  /** Woken when a CANCEL is taken or the connection closes. */
  let cancelWake: (() => void) | undefined;
  let tensorNext = false;
  let negotiated = MAX_FRAME;
  /** The request being handled (a CANCEL or EOF for it reaches the backend at once). */
  let current: number | undefined;

  async function writeAll(bytes: Uint8Array): Promise<void> {
    let off = 0;
    while (off < bytes.byteLength) off += await conn.write(bytes.subarray(off));
  }

  async function send(msg: WorkerToModuleMessage, tensor?: Uint8Array): Promise<void> {
    await writeAll(encodeFrame(encodeControl(msg), { maxFrameBytes: negotiated }));
    if (tensor !== undefined) await writeAll(encodeFrame(tensor, { maxFrameBytes: negotiated }));
  }

  async function readLoop(): Promise<void> {
    const buf = new Uint8Array(256 * 1024);
    try {
      while (true) {
        const n = await conn.read(buf);
        if (n === null) break;
        for (const f of decoder.push(buf.subarray(0, n))) take(f);
        wake?.();
      }
    } catch (err) {
      console.error(`${name}: connection failed: ${(err as Error).message}`);
    }
    closed = true;
    if (current !== undefined) backend.onCancel?.(current);
    wake?.();
    cancelWake?.();
  }

  /** Sorts one frame: a CANCEL is applied at once, everything else queues in order. */
  function take(frame: Uint8Array): void {
    if (tensorNext) {
      tensorNext = false;
      inbox.push({ kind: "tensor", frame });
      return;
    }
    let msg: ModuleToWorkerMessage;
    try {
      msg = decodeFromModule(frame);
    } catch (error) {
      inbox.push({ kind: "invalid", error });
      return;
    }
    if (msg.type === "CANCEL") {
      if (pending.has(msg.req_id)) {
        cancelled.add(msg.req_id);
        if (msg.req_id === current) backend.onCancel?.(msg.req_id);
        cancelWake?.();
      }
      return;
    }
    if ("req_id" in msg) pending.add(msg.req_id);
    tensorNext = needsTensor(msg);
    inbox.push({ kind: "control", msg });
  }

  function next(): Promise<Inbound | undefined> {
    return new Promise((resolve) => {
      const check = () => {
        const f = inbox.shift();
        if (f !== undefined || closed) {
          wake = undefined;
          resolve(f);
        } else wake = check;
      };
      check();
    });
  }

  /** The next control message; undefined once the connection is closed. */
  async function nextControl(): Promise<ModuleToWorkerMessage | undefined> {
    const f = await next();
    if (f === undefined) return undefined;
    if (f.kind === "invalid") throw f.error;
    if (f.kind === "tensor") throw new Error(`${name}: a tensor frame without its request`);
    return f.msg;
  }

  function stopRequested(reqId: number): boolean {
    return closed || cancelled.has(reqId);
  }

  /** `--test-wait-cancel-after`: holds one request only, the first to get that far. */
  let waitCancelAfter = flags["test-wait-cancel-after"] === undefined
    ? Infinity
    : Number(flags["test-wait-cancel-after"]);

  async function maybeWaitForCancel(reqId: number, done: number, unit: string): Promise<void> {
    if (done < waitCancelAfter) return;
    waitCancelAfter = Infinity;
    console.error(`${name}: waiting for CANCEL after ${done} ${unit} (test hook)`);
    while (!stopRequested(reqId)) await new Promise<void>((r) => cancelWake = r);
    cancelWake = undefined;
  }

  /** The module has gone away: SIGKILLs this worker's group when it leads one, else exits 0. */
  function exitModuleGone(): never {
    try {
      conn.close();
    } catch { /* closed */ }
    killOwnProcessGroup();
    Deno.exit(0);
  }

  void readLoop();

  if (flags["test-no-hello"]) {
    console.error(`${name}: not sending HELLO (test hook)`);
    setInterval(() => {}, 1 << 30);
    await new Promise(() => {});
  }

  await send({
    type: "HELLO",
    v: flags["test-protocol-version"] !== undefined
      ? Number(flags["test-protocol-version"])
      : WORKER_PROTOCOL_VERSION,
    nonce: flags["test-wrong-nonce"] ? "0000000000000000" : launchNonce,
    engine: {
      ...identity,
      engine: (flags["test-engine"] as string | undefined) ?? identity.engine,
    },
    pid: Deno.pid,
    max_frame: MAX_FRAME,
  });

  const ack = await nextControl();
  if (ack === undefined) exitModuleGone();
  if (ack.type !== "ACK" || !ack.accept) {
    console.error(`${name}: expected ACK, got ${ack.type}`);
    Deno.exit(2);
  }
  negotiated = ack.max_frame;
  decoder.setMaxFrameBytes(negotiated);

  const io: WorkerIo = { send, stopRequested, maybeWaitForCancel, flags };
  let handled = 0;
  const abortAfter = flags["test-abort-after"] === undefined
    ? Infinity
    : Number(flags["test-abort-after"]);
  const hangAfter = flags["test-hang-after"] === undefined
    ? Infinity
    : Number(flags["test-hang-after"]);

  while (true) {
    const msg = await nextControl();
    if (msg === undefined) exitModuleGone();
    if (msg.type === "SHUTDOWN") break;
    if (msg.type === "ACK") continue;
    // `--test-ping-uncounted`: a PING (the module reading this worker's RSS for models.list) is
    // answered and not counted by the hooks below, so a test scripting "request N misbehaves"
    // through the whole service stays tied to its work requests. A hung worker still hangs.
    if (flags["test-ping-uncounted"] && msg.type === "PING" && handled < hangAfter) {
      await send({
        type: "PONG",
        req_id: msg.req_id,
        rss_mb: rssMb(),
        models_loaded: backend.modelsLoaded(),
      });
      continue;
    }
    if (handled >= abortAfter) {
      console.error(`${name}: GGML_ASSERT-style abort (test hook --test-abort-after)`);
      abortProcess();
    }
    if (handled >= hangAfter) {
      console.error(`${name}: hanging (test hook --test-hang-after)`);
      setInterval(() => {}, 1 << 30);
      await new Promise(() => {});
    }
    handled++;
    if (flags["test-garbage-frame"]) {
      await writeAll(encodeFrame(new TextEncoder().encode("\u0000not json{")));
      continue;
    }
    if (flags["test-oversize-frame"]) {
      const header = new Uint8Array(4);
      new DataView(header.buffer).setUint32(0, negotiated + 1, true);
      await writeAll(header);
      continue;
    }
    if (flags["test-truncated-frame"]) {
      const whole = encodeFrame(
        encodeControl({ type: "PONG", req_id: 0, rss_mb: 1, models_loaded: 0 }),
      );
      await writeAll(whole.subarray(0, Math.floor(whole.byteLength / 2)));
      conn.close();
      Deno.exit(0);
    }
    let tensor: Uint8Array | undefined;
    if (needsTensor(msg)) {
      const t = await next();
      if (t === undefined) exitModuleGone();
      if (t.kind !== "tensor") throw new Error(`${name}: ${msg.type} without its tensor`);
      tensor = t.frame;
    }
    const reqId = (msg as { req_id?: number }).req_id;
    current = reqId;
    try {
      await backend.handle(msg, tensor, io);
    } catch (err) {
      try {
        await send({
          type: "ERR",
          ...(reqId === undefined ? {} : { req_id: reqId }),
          code: (err as { workerCode?: string }).workerCode ?? "engine_error",
          msg: (err as Error).message ?? String(err),
        });
      } catch {
        exitModuleGone(); // the answer cannot be written: the module is gone
      }
    } finally {
      current = undefined;
      if (reqId !== undefined) {
        pending.delete(reqId);
        cancelled.delete(reqId);
      }
    }
  }
  try {
    conn.close();
  } catch { /* closed */ }
  Deno.exit(0);
}

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.stat(path);
    return true;
  } catch {
    return false;
  }
}

/** libc `abort()`: the process dies of SIGABRT, as a runtime's failed assert makes it. */
export function abortProcess(): never {
  const libc = Deno.dlopen(Deno.build.os === "darwin" ? "libc.dylib" : "libc.so.6", {
    abort: { parameters: [], result: "void" },
  });
  libc.symbols.abort();
  Deno.exit(134);
}
