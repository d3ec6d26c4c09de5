/**
 * A module's session with the subc daemon (subc §2–§4), over a connection already authenticated
 * (`connectAndAuthenticate`): HELLO, HELLO_ACK, initialisation, then the control channel and the
 * data plane until the daemon says Goodbye, the owner stops it, or the connection ends.
 *
 * - **Registration.** HELLO (type 9, channel 0, epoch 0, corr 1, flags 0) goes out first; the
 *   first frame back must be HELLO_ACK with `negotiated_ver` 2, else the session fails loudly
 *   (a channel-0 Error is `hello_refused` with the daemon's code). Then `initialize(ack)` runs
 *   (the door opens its store at the ack's storage descriptor); until it resolves, `route.bind` is
 *   refused with `module_not_initialized`.
 * - **Control** (channel 0): `route.bind` is handed to the data plane on the reader's own turn
 *   (never after model loading or a lane), so it is acked at once; `health.check` is answered
 *   from the service's cached state, off the reader's turn; Ping → Pong; another op →
 *   `unknown_control_op`; `catalog.update` goes out when HELLO_ACK offers it. Goodbye → drain:
 *   requests in flight get up to {@link DRAIN_GRACE_MS} to finish (then they are cancelled and
 *   answered `cancelled`), and the session ends with reason `goodbye`.
 * - **Data plane** (channel ≠ 0): `lib/subc/module_data_plane.ts` (routes and epochs, one
 *   terminal per request, Cancel, route Goodbye, flow scope, the idle reaper).
 * - **Writes** go through one {@link FrameWriter}: frames never interleave; while the daemon does
 *   not read (more than the high-water mark queued), the session stops reading.
 *
 * The daemon closing the connection (end of stream or a broken socket) fails the session with
 * `daemon_gone`: the owner exits loudly, never falls back to serving standalone.
 *
 * @module
 */
import type { LogSink } from "../log/log.ts";
import { nullLog } from "../log/log.ts";
import type { AuthConn } from "./auth.ts";
import {
  CatalogUpdateSchema,
  decodeControlBody,
  encodeControlBody,
  errorBody,
  MAX_HEALTH_METRICS_BYTES,
  parseControl,
  parseErrorBody,
  parseHelloAck,
} from "./control.ts";
import type {
  Capabilities,
  ErrorBody,
  Hello,
  HelloAck,
  JsonValue,
  ProviderRole,
} from "./control.ts";
import { CONTROL_FLAGS, describeFrame, FrameDecoder, FrameType, pongFor } from "./bus_envelope.ts";
import type { SubcFrame } from "./bus_envelope.ts";
import { SubcWireError } from "./errors.ts";
import type { ModuleSessionReason } from "./errors.ts";
import { FrameWriter } from "./frame_writer.ts";
import { declaredOperations } from "./manifest.ts";
import { DataPlane } from "./module_data_plane.ts";
import type { ModuleHealth, ModuleService } from "./module_data_plane.ts";

export type {
  ModuleHealth,
  ModuleReply,
  ModuleRequest,
  ModuleService,
} from "./module_data_plane.ts";

/** A route with nothing in flight and no frame for this long is reaped: 10 minutes. */
export const ROUTE_IDLE_MS = 10 * 60_000;
/** How often idle routes are looked for: every minute. */
export const ROUTE_REAP_INTERVAL_MS = 60_000;
/**
 * How long a draining session lets requests in flight finish before cancelling them: 10 s (the
 * daemon's drain timeout is 30 s by default, so their terminals still arrive within it).
 */
export const DRAIN_GRACE_MS = 10_000;
/** How long the session waits for HELLO_ACK after sending HELLO: 30 s. */
export const HELLO_ACK_TIMEOUT_MS = 30_000;
/** Longest wait for queued frames to leave when the session closes: 5 s. */
const CLOSE_FLUSH_MS = 5_000;
const READ_CHUNK_BYTES = 64 * 1024;
const TARGET = "synapse.subc";

/** Options of {@link ModuleSession}. */
export interface ModuleSessionOptions {
  /** The authenticated connection (`connectAndAuthenticate`). The session closes it. */
  conn: AuthConn;
  /** The HELLO body (`buildHello`); its manifest's operation kinds gate flow-scoped routes. */
  hello: Hello;
  /**
   * Initialises the module once HELLO_ACK arrived (opens the store at its descriptor). Binds are
   * refused `module_not_initialized` until it resolves; a rejection ends the session with
   * `module_init_failed` (after a channel-0 Goodbye).
   */
  initialize(ack: HelloAck): Promise<ModuleService>;
  /**
   * Decodes a request body to JSON; throws (any error; its message is sent) for one that is not
   * UTF-8 JSON. @default strict UTF-8 and `JSON.parse` on this thread
   */
  parseBody?(body: Uint8Array): Promise<unknown>;
  /** Log sink (target `synapse.subc`). @default nullLog */
  log?: LogSink;
  /** Clock, ms (route idleness). @default Date.now */
  now?: () => number;
  /** Idle time that reaps a route, ms. @default {ROUTE_IDLE_MS} */
  routeIdleMs?: number;
  /** Interval of the idle-route check, ms. @default {ROUTE_REAP_INTERVAL_MS} */
  reapIntervalMs?: number;
  /** Grace of requests in flight at a drain, ms. @default {DRAIN_GRACE_MS} */
  drainGraceMs?: number;
  /** HELLO_ACK deadline, ms. @default {HELLO_ACK_TIMEOUT_MS} */
  helloAckTimeoutMs?: number;
  /** Queued bytes past which the session stops reading. @default 8 MiB */
  highWaterBytes?: number;
}

/** How a session ended without failing: the daemon's Goodbye, or the owner's stop signal. */
export interface SessionEnd {
  reason: "goodbye" | "stopped";
}

/** Counters of a session (tests and health metrics). */
export interface SessionStats {
  routes: number;
  inFlight: number;
  /** Data-plane Requests received on installed routes. */
  requests: number;
  /** Terminals sent. */
  terminals: number;
  /** Data-plane frames dropped for an unknown `(channel, epoch)`. */
  droppedFrames: number;
}

type State = "new" | "awaiting_ack" | "initialising" | "ready" | "draining" | "ended";

/** One module session; {@link run} it once. */
export class ModuleSession {
  readonly #o: ModuleSessionOptions;
  readonly #log: LogSink;
  readonly #writer: FrameWriter;
  readonly #decoder = new FrameDecoder();
  readonly #data: DataPlane;
  readonly #moduleId: string;
  #state: State = "new";
  #ack: HelloAck | undefined;
  #service: ModuleService | undefined;
  #initDone: Promise<unknown> = Promise.resolve();
  #ended = Promise.withResolvers<SessionEnd>();
  #finishing = false;
  #ackTimer: ReturnType<typeof setTimeout> | undefined;
  #nextCorr = 2n;
  #pending = new Map<bigint, { resolve(): void; reject(e: unknown): void }>();

  /** @param options Connection, HELLO, initialisation and timings. */
  constructor(options: ModuleSessionOptions) {
    this.#o = options;
    this.#log = options.log ?? nullLog;
    this.#writer = new FrameWriter(
      options.conn,
      { highWaterBytes: options.highWaterBytes },
    );
    this.#moduleId = options.hello.manifest.module_id;
    this.#data = new DataPlane({
      writer: this.#writer,
      log: this.#log,
      now: options.now ?? Date.now,
      moduleId: this.#moduleId,
      kinds: declaredOperations(options.hello.manifest),
      parseBody: options.parseBody ?? parseJson,
    });
  }

  /** The HELLO_ACK, once received. */
  get ack(): HelloAck | undefined {
    return this.#ack;
  }

  /** True once initialised and until a drain starts: binds are accepted. */
  get ready(): boolean {
    return this.#state === "ready";
  }

  /** Routes, requests in flight and frame counters. */
  get stats(): SessionStats {
    return {
      routes: this.#data.routeCount,
      inFlight: this.#data.inFlightCount,
      ...this.#data.counters,
    };
  }

  /**
   * Sends HELLO and serves until the session ends.
   *
   * @param signal Stops the session from this side: a drain as for the daemon's Goodbye, then a
   *   channel-0 Goodbye ("the module is leaving"); the result's reason is `stopped`.
   * @returns How it ended: `goodbye` (the daemon's channel-0 Goodbye, after the drain) or
   *   `stopped`.
   * @throws {SubcWireError} `hello_refused` (`details.code`), `unsupported_negotiated_version`,
   *   `hello_timeout`, `unexpected_frame`, `module_init_failed`, `daemon_gone`, a frame the
   *   envelope rules reject, or `invalid_control_body` for a HELLO_ACK of the wrong shape.
   */
  async run(signal?: AbortSignal): Promise<SessionEnd> {
    if (this.#state !== "new") throw new Error("ModuleSession.run() called twice. This is a bug");
    this.#state = "awaiting_ack";
    const stop = (): void => void this.#drain("stopped");
    signal?.addEventListener("abort", stop, { once: true });
    const ackMs = this.#o.helloAckTimeoutMs ?? HELLO_ACK_TIMEOUT_MS;
    this.#ackTimer = setTimeout(() => {
      void this.#finish(sessionError(
        "hello_timeout",
        `the subc daemon sent no HELLO_ACK within ${ackMs} ms; check that it is a subc v2 daemon`,
        { timeout_ms: ackMs },
      ));
    }, ackMs);
    this.#writer.send({ type: FrameType.Hello, corr: 1n, body: encodeControlBody(this.#o.hello) });
    void this.#readLoop();
    if (signal?.aborted) stop();
    try {
      return await this.#ended.promise;
    } finally {
      signal?.removeEventListener("abort", stop);
    }
  }

  /**
   * Replaces the module's catalog (`catalog.update`, subc §3): sends the Request with the next
   * corr of the module's counter (from 2, never reused) and waits for the daemon's answer.
   *
   * @param provides The new `provides[]`.
   * @param capabilities The new `capabilities`, or undefined to leave them out.
   * @throws {SubcWireError} `catalog_update_unsupported` (HELLO_ACK's `subc_ops` does not list
   *   it, or the session is not registered), `catalog_update_refused` (`details.code`, e.g.
   *   `catalog_update_frozen_field`), `session_closed`, `invalid_control_body` for a body the
   *   daemon would refuse.
   */
  updateCatalog(provides: ProviderRole[], capabilities?: Capabilities): Promise<void> {
    if (this.#finishing) {
      return Promise.reject(sessionError("session_closed", "the subc session has ended"));
    }
    if (this.#ack === undefined || !this.#ack.subc_ops.includes("catalog.update")) {
      return Promise.reject(sessionError(
        "catalog_update_unsupported",
        this.#ack === undefined
          ? "the module is not registered with the subc daemon yet"
          : "the subc daemon does not offer catalog.update (not in HELLO_ACK subc_ops)",
        { subc_ops: this.#ack?.subc_ops ?? [] },
      ));
    }
    const body = parseControl(CatalogUpdateSchema, {
      op: "catalog.update",
      provides,
      ...(capabilities === undefined ? {} : { capabilities }),
    }, "catalog.update");
    const corr = this.#nextCorr++;
    const reply = Promise.withResolvers<void>();
    this.#pending.set(corr, reply);
    this.#writer.send({ type: FrameType.Request, corr, body: encodeControlBody(body) });
    return reply.promise;
  }

  async #readLoop(): Promise<void> {
    const buf = new Uint8Array(READ_CHUNK_BYTES);
    while (!this.#finishing) {
      // Backpressure: the daemon is not reading what this side writes; stop reading new work.
      await this.#writer.belowHighWater();
      if (this.#finishing) return;
      let n: number | null;
      try {
        n = await this.#o.conn.read(buf);
      } catch (err) {
        if (!this.#finishing) this.#connectionLost(err);
        return;
      }
      if (n === null) {
        if (!this.#finishing) this.#connectionLost(undefined);
        return;
      }
      let frames: SubcFrame[];
      try {
        frames = this.#decoder.push(buf.subarray(0, n));
      } catch (err) {
        this.#log("error", TARGET, `subc protocol violation: ${errText(err)}`);
        void this.#finish(err);
        return;
      }
      for (const frame of frames) {
        if (this.#finishing) return;
        try {
          this.#onFrame(frame);
        } catch (err) {
          this.#log("error", TARGET, `frame handling failed. This is a bug: ${errText(err)}`, {
            stack: (err as Error).stack ?? "",
          });
        }
      }
    }
  }

  #onFrame(f: SubcFrame): void {
    if (this.#state === "awaiting_ack") return this.#onFirstFrame(f);
    if (f.channel !== 0) return this.#data.onFrame(f);
    switch (f.type) {
      case FrameType.Request:
        return this.#onControlRequest(f);
      case FrameType.Response:
      case FrameType.Error:
        return this.#onControlReply(f);
      case FrameType.Ping:
        this.#writer.send(pongFor(f));
        return;
      case FrameType.Goodbye:
        void this.#drain("goodbye");
        return;
      default:
        this.#log("debug", TARGET, "ignored a channel-0 frame", { frame: describeFrame(f) });
    }
  }

  #onFirstFrame(f: SubcFrame): void {
    clearTimeout(this.#ackTimer);
    if (f.channel === 0 && f.type === FrameType.HelloAck) {
      let ack: HelloAck;
      try {
        ack = parseHelloAck(f.body);
      } catch (err) {
        // Registered, but on terms this build cannot keep: say it is leaving.
        void this.#finish(err, true);
        return;
      }
      this.#ack = ack;
      this.#state = "initialising";
      this.#log("info", TARGET, "registered with the subc daemon", {
        module_id: this.#moduleId,
        negotiated_ver: ack.negotiated_ver,
        storage: ack.storage?.backend.backend ?? "-",
      });
      this.#initDone = this.#o.initialize(ack).then(
        (service) => this.#opened(service),
        (err) => {
          void this.#finish(
            sessionError(
              "module_init_failed",
              `the module registered, then could not start: ${errText(err)}`,
              typeof (err as { code?: unknown }).code === "string"
                ? { code: (err as { code: string }).code }
                : {},
              err,
            ),
            true,
          );
        },
      );
      return;
    }
    if (f.channel === 0 && f.type === FrameType.Error) {
      const body = readErrorBody(f.body);
      void this.#finish(sessionError(
        "hello_refused",
        `the subc daemon refused HELLO with ${body.code}: ${body.message}`,
        { code: body.code, message: body.message },
      ));
      return;
    }
    void this.#finish(sessionError(
      "unexpected_frame",
      `the subc daemon's first frame was ${describeFrame(f)}, not HELLO_ACK`,
      { type: f.type, channel: f.channel },
    ));
  }

  #opened(service: ModuleService): void {
    if (this.#finishing) return; // the owner disposes what it made
    this.#service = service;
    this.#data.open(service);
    if (this.#state !== "initialising") return; // a drain began meanwhile
    this.#state = "ready";
    this.#data.startReaper(
      this.#o.routeIdleMs ?? ROUTE_IDLE_MS,
      this.#o.reapIntervalMs ?? ROUTE_REAP_INTERVAL_MS,
    );
    this.#log("info", TARGET, "ready: accepting routes", { module_id: this.#moduleId });
  }

  #onControlRequest(f: SubcFrame): void {
    let op: string | undefined;
    let value: unknown;
    try {
      ({ op, value } = decodeControlBody(f.body));
    } catch (err) {
      return this.#controlError(f.corr, "invalid_request", errText(err));
    }
    if (op === "route.bind") {
      if (this.#state === "ready") return this.#data.bind(f.corr, value);
      const why = this.#state === "draining" ? "is shutting down" : "is still starting";
      return this.#controlError(
        f.corr,
        "module_not_initialized",
        `Cannot bind a route: module '${this.#moduleId}' ${why}; retry shortly`,
      );
    }
    if (op === "health.check") {
      // Off the reader's turn, as a data request is served (subc §3).
      queueMicrotask(() => this.#answerHealth(f.corr));
      return;
    }
    if (op === undefined) {
      return this.#controlError(
        f.corr,
        "invalid_request",
        "Cannot answer a channel-0 request: its body has no 'op'",
      );
    }
    this.#controlError(
      f.corr,
      "unknown_control_op",
      `Cannot answer channel-0 op '${op}': this module answers route.bind and health.check`,
      { op },
    );
  }

  #answerHealth(corr: bigint): void {
    if (this.#finishing) return;
    let report: ModuleHealth;
    if (this.#service === undefined) {
      report = { status: "degraded", detail: "starting: the module is opening its store" };
    } else {
      try {
        report = this.#service.health();
      } catch (err) {
        report = { status: "failing", detail: `health could not be read: ${errText(err)}` };
      }
    }
    if (this.#state === "draining") {
      report = { ...report, status: "degraded", detail: "draining: the module is shutting down" };
    }
    const own = { routes: this.#data.routeCount, in_flight: this.#data.inFlightCount };
    let metrics: Record<string, JsonValue> = { ...report.metrics, ...own };
    if (new TextEncoder().encode(JSON.stringify(metrics)).byteLength > MAX_HEALTH_METRICS_BYTES) {
      metrics = own;
    }
    this.#writer.send({
      type: FrameType.Response,
      corr,
      body: encodeControlBody({
        op: "health.check",
        status: report.status,
        ...(report.detail === undefined ? {} : { detail: report.detail }),
        metrics,
      }),
    });
  }

  #onControlReply(f: SubcFrame): void {
    const pending = this.#pending.get(f.corr);
    if (pending === undefined) {
      this.#log("warn", TARGET, "a channel-0 reply matches no request of this module", {
        frame: describeFrame(f),
      });
      return;
    }
    this.#pending.delete(f.corr);
    if (f.type === FrameType.Response) return pending.resolve();
    const body = readErrorBody(f.body);
    pending.reject(sessionError(
      "catalog_update_refused",
      `the subc daemon refused catalog.update with ${body.code}: ${body.message}`,
      { code: body.code },
    ));
  }

  #controlError(corr: bigint, code: string, message: string, detail?: JsonValue): void {
    this.#writer.send({
      type: FrameType.Error,
      corr,
      body: encodeControlBody(errorBody(code, message, detail)),
    });
  }

  /** Stops taking work, lets requests in flight finish (then cancels them), and ends. */
  async #drain(reason: "goodbye" | "stopped"): Promise<void> {
    if (this.#finishing || this.#state === "draining") return;
    const before = this.#state;
    this.#state = "draining";
    clearTimeout(this.#ackTimer);
    this.#data.stopAccepting();
    this.#log(
      "info",
      TARGET,
      reason === "goodbye" ? "the subc daemon said Goodbye: draining" : "stopping: draining",
      { in_flight: this.#data.inFlightCount },
    );
    if (before === "initialising") await this.#initDone;
    const grace = this.#o.drainGraceMs ?? DRAIN_GRACE_MS;
    if (!(await this.#data.whenIdle(grace))) {
      this.#data.cancelAll("the module is shutting down");
      await this.#data.whenIdle(grace);
    }
    // Only a module leaving on its own says so; after the daemon's Goodbye no one listens.
    await this.#finish({ reason }, reason === "stopped" && before !== "awaiting_ack");
  }

  #connectionLost(err: unknown): void {
    if (this.#state === "draining") {
      // The daemon left during a drain: nothing can be answered any more; the drain ends.
      this.#data.abandonAll();
      this.#writer.close();
      return;
    }
    const how = err === undefined
      ? "it closed the connection"
      : `the connection broke: ${errText(err)}`;
    void this.#finish(sessionError(
      "daemon_gone",
      `the subc daemon went away (${how}); not falling back to standalone serving. The store ` +
        "is intact; the supervisor restarts the module",
      { in_flight: this.#data.inFlightCount },
      err,
    ));
  }

  /** Ends the session once: aborts what is left, optionally says Goodbye, closes the socket. */
  async #finish(outcome: SessionEnd | unknown, goodbye = false): Promise<void> {
    if (this.#finishing) return;
    this.#finishing = true;
    this.#state = "ended";
    clearTimeout(this.#ackTimer);
    this.#data.close();
    for (const pending of this.#pending.values()) {
      pending.reject(sessionError("session_closed", "the subc session ended before the reply"));
    }
    this.#pending.clear();
    if (goodbye) this.#writer.send({ type: FrameType.Goodbye, flags: CONTROL_FLAGS });
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      this.#writer.flush(),
      new Promise((r) => timer = setTimeout(r, CLOSE_FLUSH_MS)),
    ]);
    clearTimeout(timer);
    this.#writer.close();
    try {
      this.#o.conn.close();
    } catch { /* already closed */ }
    // The owner disposes what initialisation made: wait until it exists.
    await this.#initDone.catch(() => {});
    if (isSessionEnd(outcome)) this.#ended.resolve(outcome);
    else this.#ended.reject(outcome);
  }
}

function isSessionEnd(v: unknown): v is SessionEnd {
  return typeof v === "object" && v !== null && !(v instanceof Error) && "reason" in v;
}

/** The default body decoder: strict UTF-8, then JSON. */
function parseJson(body: Uint8Array): Promise<unknown> {
  const text = new TextDecoder("utf-8", { fatal: true }).decode(body);
  if (text.trim() === "") throw new SyntaxError("the body is empty");
  return Promise.resolve(JSON.parse(text));
}

function readErrorBody(body: Uint8Array): ErrorBody {
  try {
    return parseErrorBody(body);
  } catch {
    return { code: "unreadable_error_body", message: "(the Error body was not {code, message})" };
  }
}

function errText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function sessionError(
  reason: Exclude<ModuleSessionReason, "daemon_unreachable">,
  why: string,
  details: Record<string, unknown> = {},
  cause?: unknown,
): SubcWireError {
  const verb = reason.startsWith("catalog") ? "update the catalog" : "serve on the subc bus";
  return new SubcWireError(reason, `Cannot ${verb}: ${why}`, {
    details,
    ...(cause === undefined ? {} : { cause }),
  });
}
