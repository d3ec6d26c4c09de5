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
 * - **Control** (channel 0): `route.bind` is answered at once, on the reader's turn (never after
 *   model loading or a lane): ack Response `{"op":"route.bind"}`, then the route is installed; a
 *   strictly higher epoch replaces an installed route (its work is aborted, its answers dropped),
 *   an equal or lower one is refused `stale_route_epoch`. `health.check` is answered from the
 *   service's cached state, off the reader's turn. Ping → Pong. Another op →
 *   `unknown_control_op`. Goodbye → drain: requests in flight get up to
 *   {@link DRAIN_GRACE_MS} to finish (then they are cancelled and answered `cancelled`), and the
 *   session ends with reason `goodbye`.
 * - **Data plane** (channel ≠ 0): a frame whose `(channel, epoch)` is not installed is dropped
 *   silently. A Request body `{method, params}` (`params` defaults to `{}`) goes to the service
 *   with its own AbortSignal; exactly one terminal goes back (Response, or Error `{code, message}`)
 *   with the request's channel, epoch and corr and flags 0x02. Cancel aborts the request and its
 *   terminal is Error `cancelled`. A route Goodbye drops the route and aborts its work, and
 *   nothing is sent for it. On a flow-scoped route (`route.bind` `scope.attributes.flow_id`) only
 *   operations the manifest declares as `query` are served; anything else is
 *   `flow_scope_refused`.
 * - **Idle routes.** Route Goodbyes are best-effort, so a route with nothing in flight and no
 *   frame for {@link ROUTE_IDLE_MS} is reaped: forgotten here, and closed with the module's own
 *   Goodbye on its `(channel, epoch)` so the daemon stops routing to it.
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
  parseRouteBind,
} from "./control.ts";
import type {
  BindIdentity,
  Capabilities,
  ErrorBody,
  Hello,
  HelloAck,
  JsonValue,
  Principal,
  ProviderRole,
} from "./control.ts";
import {
  CONTROL_FLAGS,
  DATA_FLAGS,
  describeFrame,
  FrameDecoder,
  FrameType,
  pongFor,
} from "./envelope.ts";
import type { SubcFrame } from "./envelope.ts";
import { SubcWireError } from "./errors.ts";
import { FrameWriter } from "./frame_writer.ts";
import { declaredOperations } from "./manifest.ts";
import { RouteTable } from "./module_routes.ts";
import type { InFlightRequest, Route } from "./module_routes.ts";

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

/** One data-plane request, as the service sees it. */
export interface ModuleRequest {
  /** The operation, e.g. `embed.query`. */
  method: string;
  /** Its params (`{}` when the body had none). */
  params: unknown;
  /** Aborted by Cancel, route Goodbye, a replacing bind, or the end of the session. */
  signal: AbortSignal;
  /** The route and the request's correlation id (for logs). */
  channel: number;
  epoch: number;
  corr: bigint;
  /** The bind's identity: unattested, for attribution only. */
  identity: BindIdentity;
  /** The route's principal as the daemon attests it, when given. */
  principal: Principal | undefined;
}

/** The terminal the service answers a request with. */
export type ModuleReply =
  | { kind: "response"; body: Uint8Array }
  | { kind: "error"; body: ErrorBody };

/** What `health.check` answers (subc §3); `metrics` at most 16 KiB of JSON with the session's. */
export interface ModuleHealth {
  status: "ok" | "degraded" | "failing";
  detail?: string;
  metrics?: Record<string, JsonValue>;
}

/** What the module serves once initialised. */
export interface ModuleService {
  /** Serves one request; should not throw (a throw is answered `internal_error`). */
  call(request: ModuleRequest): Promise<ModuleReply>;
  /** The module's health from cached state only: no engine call, no I/O. */
  health(): ModuleHealth;
}

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
  readonly #now: () => number;
  readonly #writer: FrameWriter;
  readonly #decoder = new FrameDecoder();
  readonly #routes = new RouteTable();
  readonly #kinds: Map<string, "query" | "mutate">;
  readonly #moduleId: string;
  #state: State = "new";
  #ack: HelloAck | undefined;
  #service: ModuleService | undefined;
  #initDone: Promise<unknown> = Promise.resolve();
  #ended = Promise.withResolvers<SessionEnd>();
  #finishing = false;
  #ackTimer: ReturnType<typeof setTimeout> | undefined;
  #reaper: ReturnType<typeof setInterval> | undefined;
  #idleWaiters: (() => void)[] = [];
  #nextCorr = 2n;
  #pending = new Map<bigint, { resolve(): void; reject(e: unknown): void }>();
  #stats = { requests: 0, terminals: 0, droppedFrames: 0 };

  /** @param options Connection, HELLO, initialisation and timings. */
  constructor(options: ModuleSessionOptions) {
    this.#o = options;
    this.#log = options.log ?? nullLog;
    this.#now = options.now ?? Date.now;
    this.#writer = new FrameWriter(
      options.conn,
      options.highWaterBytes === undefined ? {} : { highWaterBytes: options.highWaterBytes },
    );
    this.#kinds = declaredOperations(options.hello.manifest);
    this.#moduleId = options.hello.manifest.module_id;
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
      routes: this.#routes.size,
      inFlight: this.#routes.inFlightCount,
      ...this.#stats,
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
      void this.#finish(
        sessionError(
          "hello_timeout",
          `the subc daemon sent no HELLO_ACK within ${ackMs} ms; check that it is a subc v2 daemon`,
          { timeout_ms: ackMs },
        ),
      );
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
        this.#log("error", TARGET, `subc protocol violation: ${(err as Error).message}`);
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
    if (f.channel === 0) return this.#onControl(f);
    this.#onData(f);
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
      const init = this.#o.initialize(ack);
      this.#initDone = init.then(
        (service) => {
          if (this.#finishing) return;
          this.#service = service;
          if (this.#state !== "initialising") return; // a drain began meanwhile
          this.#state = "ready";
          this.#startReaper();
          this.#log("info", TARGET, "ready: accepting routes", { module_id: this.#moduleId });
        },
        (err) => {
          void this.#finish(
            sessionError(
              "module_init_failed",
              `the module registered, then could not start: ${errText(err)}`,
              { ...(err instanceof Error && "code" in err ? { code: String(err.code) } : {}) },
              err,
            ),
            true,
          );
        },
      );
      return;
    }
    if (f.channel === 0 && f.type === FrameType.Error) {
      let body: ErrorBody;
      try {
        body = parseErrorBody(f.body);
      } catch {
        body = {
          code: "unreadable_error_body",
          message: "(the Error body was not {code, message})",
        };
      }
      void this.#finish(
        sessionError(
          "hello_refused",
          `the subc daemon refused HELLO with ${body.code}: ${body.message}`,
          { code: body.code, message: body.message },
        ),
      );
      return;
    }
    void this.#finish(
      sessionError(
        "unexpected_frame",
        `the subc daemon's first frame was ${describeFrame(f)}, not HELLO_ACK`,
        { type: f.type, channel: f.channel },
      ),
    );
  }

  #onControl(f: SubcFrame): void {
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

  #onControlRequest(f: SubcFrame): void {
    let op: string | undefined;
    let value: unknown;
    try {
      ({ op, value } = decodeControlBody(f.body));
    } catch (err) {
      return this.#controlError(f.corr, "invalid_request", (err as Error).message);
    }
    if (op === "route.bind") return this.#onBind(f.corr, value);
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

  #onBind(corr: bigint, value: unknown): void {
    if (this.#state !== "ready") {
      const why = this.#state === "draining" ? "is shutting down" : "is still starting";
      return this.#controlError(
        corr,
        "module_not_initialized",
        `Cannot bind a route: module '${this.#moduleId}' ${why}; retry shortly`,
      );
    }
    let bind;
    try {
      bind = parseRouteBind(value);
    } catch (err) {
      const field = err instanceof SubcWireError ? String(err.details?.field ?? "") : "";
      return this.#controlError(corr, "route_rejected", (err as Error).message, { field });
    }
    const { target } = bind;
    if (target.kind !== "management_surface" || target.module_id !== this.#moduleId) {
      return this.#controlError(
        corr,
        "route_rejected",
        `Cannot bind a route to ${target.kind} '${target.module_id}': this module is the ` +
          `management_surface of '${this.#moduleId}'`,
      );
    }
    const decision = this.#routes.decide(bind.route_channel, bind.epoch);
    if (decision.kind === "stale") {
      return this.#controlError(
        corr,
        "stale_route_epoch",
        `Cannot bind channel ${bind.route_channel} at epoch ${bind.epoch}: epoch ` +
          `${decision.installedEpoch} is installed there; a rebind needs a higher epoch`,
        { route_channel: bind.route_channel, epoch: bind.epoch },
      );
    }
    // Ack first, install after (subc §3): both on this turn, so no frame of the route can be
    // read before it is installed.
    this.#writer.send({
      type: FrameType.Response,
      corr,
      body: encodeControlBody({ op: "route.bind" }),
    });
    const route: Route = {
      channel: bind.route_channel,
      epoch: bind.epoch,
      identity: bind.identity,
      principal: bind.principal,
      flowId: flowIdOf(value),
      inFlight: new Map(),
      lastActivityMs: this.#now(),
    };
    this.#routes.install(route);
    if (decision.kind === "replace") this.#abandon(decision.previous);
    this.#log("debug", TARGET, "route bound", {
      channel: route.channel,
      epoch: route.epoch,
      principal: route.principal?.kind ?? "-",
      flow: route.flowId ?? "-",
      replaced_epoch: decision.kind === "replace" ? decision.previous.epoch : "-",
    });
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
    const own = { routes: this.#routes.size, in_flight: this.#routes.inFlightCount };
    let metrics: Record<string, JsonValue> = { ...(report.metrics ?? {}), ...own };
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
    let body: ErrorBody;
    try {
      body = parseErrorBody(f.body);
    } catch {
      body = { code: "unreadable_error_body", message: "(the Error body was not {code, message})" };
    }
    pending.reject(
      sessionError(
        "catalog_update_refused",
        `the subc daemon refused catalog.update with ${body.code}: ${body.message}`,
        {
          code: body.code,
        },
      ),
    );
  }

  #onData(f: SubcFrame): void {
    const route = this.#routes.get(f.channel, f.epoch);
    if (route === undefined) {
      this.#stats.droppedFrames++;
      this.#log("debug", TARGET, "dropped a frame for a route not installed", {
        frame: describeFrame(f),
      });
      return;
    }
    route.lastActivityMs = this.#now();
    switch (f.type) {
      case FrameType.Request:
        return this.#onRequest(route, f);
      case FrameType.Cancel: {
        const req = route.inFlight.get(f.corr);
        if (req === undefined || req.cancelled) return;
        req.cancelled = true;
        req.controller.abort(new DOMException("the caller cancelled (subc Cancel)", "AbortError"));
        return;
      }
      case FrameType.Goodbye:
        this.#routes.remove(route);
        this.#abandon(route);
        this.#log("debug", TARGET, "route closed", { channel: route.channel, epoch: route.epoch });
        return;
      case FrameType.Ping:
        this.#writer.send(pongFor(f));
        return;
      default:
        this.#log("debug", TARGET, "ignored a data-plane frame", { frame: describeFrame(f) });
    }
  }

  #onRequest(route: Route, f: SubcFrame): void {
    this.#stats.requests++;
    if (this.#state !== "ready") {
      return this.#terminal(
        route,
        f.corr,
        refusal(
          "module_not_initialized",
          `Cannot serve: module '${this.#moduleId}' is shutting down; retry`,
        ),
      );
    }
    if (route.inFlight.has(f.corr)) {
      return this.#terminal(
        route,
        f.corr,
        refusal(
          "invalid_request",
          `Cannot serve: corr ${f.corr} is already in flight on this route; use a fresh corr`,
        ),
      );
    }
    const req: InFlightRequest = {
      corr: f.corr,
      controller: new AbortController(),
      cancelled: false,
      suppressed: false,
    };
    route.inFlight.set(f.corr, req);
    void this.#serve(route, req, f.body);
  }

  async #serve(route: Route, req: InFlightRequest, body: Uint8Array): Promise<void> {
    let reply: ModuleReply;
    try {
      const request = await this.#readRequest(body);
      if ("kind" in request) reply = request;
      else if (route.flowId !== undefined && this.#kinds.get(request.method) !== "query") {
        reply = refusal(
          "flow_scope_refused",
          `Cannot call '${request.method}' on a flow-scoped route (flow ${route.flowId}): flows ` +
            `may call only the query operations of '${this.#moduleId}'`,
        );
      } else if (req.controller.signal.aborted) {
        reply = refusal("cancelled", "Cancelled by the caller before it started");
      } else {
        reply = await this.#service!.call({
          ...request,
          signal: req.controller.signal,
          channel: route.channel,
          epoch: route.epoch,
          corr: req.corr,
          identity: route.identity,
          principal: route.principal,
        });
      }
    } catch (err) {
      this.#log("error", TARGET, `serving a request failed. This is a bug: ${errText(err)}`, {
        stack: (err as Error).stack ?? "",
      });
      reply = refusal("internal_error", `Cannot serve the request: ${errText(err)}`);
    }
    if (route.inFlight.get(req.corr) === req) route.inFlight.delete(req.corr);
    if (!req.suppressed && !this.#finishing) {
      if (req.cancelled) reply = refusal("cancelled", "Cancelled by the caller");
      this.#terminal(route, req.corr, reply);
    }
    if (this.#routes.inFlightCount === 0) {
      const waiters = this.#idleWaiters;
      this.#idleWaiters = [];
      for (const w of waiters) w();
    }
  }

  /** `{method, params}` from a request body, or the `invalid_request` it is answered with. */
  async #readRequest(
    body: Uint8Array,
  ): Promise<{ method: string; params: unknown } | ModuleReply> {
    let value: unknown;
    try {
      value = await (this.#o.parseBody ?? parseJson)(body);
    } catch (err) {
      return refusal("invalid_request", `Cannot read the request: ${errText(err)}`);
    }
    if (typeof value !== "object" || value === null || Array.isArray(value)) {
      return refusal(
        "invalid_request",
        'Cannot read the request: the body must be a JSON object {"method", "params"}',
      );
    }
    const { method, params } = value as { method?: unknown; params?: unknown };
    if (typeof method !== "string" || method === "") {
      return refusal(
        "invalid_request",
        "Cannot read the request: field 'method' must be a non-empty string (e.g. \"embed.query\")",
      );
    }
    return { method, params: params ?? {} };
  }

  /** Sends the one terminal of a request (a Response over the 64 MiB cap becomes an Error). */
  #terminal(route: Route, corr: bigint, reply: ModuleReply): void {
    const head = { channel: route.channel, epoch: route.epoch, corr, flags: DATA_FLAGS };
    try {
      this.#writer.send(
        reply.kind === "response"
          ? { ...head, type: FrameType.Response, body: reply.body }
          : { ...head, type: FrameType.Error, body: encodeControlBody(reply.body) },
      );
    } catch (err) {
      this.#writer.send({
        ...head,
        type: FrameType.Error,
        body: encodeControlBody(
          errorBody("encode_failed", `Cannot send the answer: ${errText(err)}`),
        ),
      });
    }
    this.#stats.terminals++;
    route.lastActivityMs = this.#now();
  }

  #controlError(corr: bigint, code: string, message: string, detail?: JsonValue): void {
    this.#writer.send({
      type: FrameType.Error,
      corr,
      body: encodeControlBody(errorBody(code, message, detail)),
    });
  }

  /** Aborts a route's work; nothing is sent for it. */
  #abandon(route: Route): void {
    for (const req of route.inFlight.values()) {
      req.suppressed = true;
      req.controller.abort(new DOMException("the route was closed", "AbortError"));
    }
  }

  #startReaper(): void {
    const idleMs = this.#o.routeIdleMs ?? ROUTE_IDLE_MS;
    this.#reaper = setInterval(() => {
      for (const route of this.#routes.idle(this.#now(), idleMs)) {
        this.#routes.remove(route);
        this.#writer.send({ type: FrameType.Goodbye, channel: route.channel, epoch: route.epoch });
        this.#log("info", TARGET, "reaped an idle route (closed with Goodbye)", {
          channel: route.channel,
          epoch: route.epoch,
          idle_ms: idleMs,
        });
      }
    }, this.#o.reapIntervalMs ?? ROUTE_REAP_INTERVAL_MS);
    Deno.unrefTimer(this.#reaper as unknown as number);
  }

  /** Stops taking work, lets requests in flight finish (then cancels them), and ends. */
  async #drain(reason: "goodbye" | "stopped"): Promise<void> {
    if (this.#finishing || this.#state === "draining") return;
    const before = this.#state;
    this.#state = "draining";
    clearTimeout(this.#ackTimer);
    clearInterval(this.#reaper);
    this.#log(
      "info",
      TARGET,
      reason === "goodbye" ? "the subc daemon said Goodbye: draining" : "stopping: draining",
      {
        in_flight: this.#routes.inFlightCount,
      },
    );
    if (before === "initialising") await this.#initDone;
    const grace = this.#o.drainGraceMs ?? DRAIN_GRACE_MS;
    if (!(await this.#whenIdle(grace))) {
      for (const route of this.#routes.all()) {
        for (const req of route.inFlight.values()) {
          req.cancelled = true;
          req.controller.abort(new DOMException("the module is shutting down", "AbortError"));
        }
      }
      await this.#whenIdle(grace);
    }
    // Only a module leaving on its own says so; after the daemon's Goodbye there is no one to tell.
    await this.#finish({ reason }, reason === "stopped" && before !== "awaiting_ack");
  }

  #whenIdle(ms: number): Promise<boolean> {
    if (this.#routes.inFlightCount === 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const waiter = (): void => {
        clearTimeout(timer);
        resolve(true);
      };
      const timer = setTimeout(() => {
        this.#idleWaiters = this.#idleWaiters.filter((w) => w !== waiter);
        resolve(false);
      }, ms);
      this.#idleWaiters.push(waiter);
    });
  }

  #connectionLost(err: unknown): void {
    if (this.#state === "draining") {
      // The daemon left during a drain: nothing can be answered any more; the drain ends.
      for (const route of this.#routes.all()) this.#abandon(route);
      this.#writer.close();
      return;
    }
    const how = err === undefined
      ? "it closed the connection"
      : `the connection broke: ${errText(err)}`;
    void this.#finish(
      sessionError(
        "daemon_gone",
        `the subc daemon went away (${how}); not falling back to standalone serving. The store ` +
          "is intact; the supervisor restarts the module",
        { in_flight: this.#routes.inFlightCount },
        err,
      ),
    );
  }

  /** Ends the session once: aborts what is left, optionally says Goodbye, closes the socket. */
  async #finish(outcome: SessionEnd | unknown, goodbye = false): Promise<void> {
    if (this.#finishing) return;
    this.#finishing = true;
    this.#state = "ended";
    clearTimeout(this.#ackTimer);
    clearInterval(this.#reaper);
    for (const route of this.#routes.clear()) this.#abandon(route);
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

/** `scope.attributes.flow_id` of a raw route.bind body (newer daemons), when a non-empty string. */
function flowIdOf(value: unknown): string | undefined {
  const scope = (value as { scope?: unknown }).scope;
  if (typeof scope !== "object" || scope === null) return undefined;
  const attributes = (scope as { attributes?: unknown }).attributes;
  if (typeof attributes !== "object" || attributes === null) return undefined;
  const flowId = (attributes as { flow_id?: unknown }).flow_id;
  return typeof flowId === "string" && flowId !== "" ? flowId : undefined;
}

function refusal(code: string, message: string): ModuleReply {
  return { kind: "error", body: { code, message } };
}

function errText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function sessionError(
  reason:
    | "hello_refused"
    | "hello_timeout"
    | "unexpected_frame"
    | "daemon_gone"
    | "module_init_failed"
    | "catalog_update_unsupported"
    | "catalog_update_refused"
    | "session_closed",
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
