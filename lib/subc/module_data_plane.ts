/**
 * The data plane of a module session (subc §3, channel ≠ 0), and the binds that open it: the
 * routes the daemon installed, the requests in flight on them, and the one terminal each request
 * gets. `ModuleSession` owns one {@link DataPlane} and hands it every data frame and every
 * `route.bind` once the module is ready.
 *
 * - `route.bind`: validated (unknown fields ignored), then acked with Response
 *   `{"op":"route.bind"}` and only then installed, on the same turn. A strictly higher epoch on
 *   an installed channel replaces the route silently (its work is aborted, its answers dropped);
 *   an equal or lower epoch is `stale_route_epoch`, the code the daemon relays to the opener so
 *   its client re-opens the route (subc §4); a target other than this module's management surface
 *   or a body of the wrong shape is `route_rejected`.
 * - A frame whose `(channel, epoch)` is not installed is dropped silently (counted).
 * - Request → `{method, params}` → the service, with its own AbortSignal → exactly one terminal
 *   (same channel, epoch and corr; flags 0x02): Response with the service's bytes, or Error
 *   `{code, message}`. Cancel aborts it and makes its terminal Error `cancelled`. A route Goodbye
 *   drops the route and aborts its work; nothing is sent for it.
 * - Flow-scoped routes (`scope.attributes.flow_id` in the bind, as the reference module reads
 *   it) serve only operations the manifest declares `query`; anything else, including a name it
 *   does not declare, is `flow_scope_refused`.
 * - Idle routes (nothing in flight, no frame for `routeIdleMs`) are reaped, and closed with the
 *   module's own Goodbye on their `(channel, epoch)` so the daemon stops routing to them.
 *
 * @module
 */
import type { LogSink } from "../log/log.ts";
import { encodeControlBody, errorBody, parseRouteBind } from "./control.ts";
import type { BindIdentity, ErrorBody, JsonValue, Principal, RouteBind } from "./control.ts";
import { DATA_FLAGS, describeFrame, FrameType, pongFor } from "./bus_envelope.ts";
import type { SubcFrame } from "./bus_envelope.ts";
import { SubcWireError } from "./errors.ts";
import type { FrameWriter } from "./frame_writer.ts";
import { RouteTable } from "./module_routes.ts";
import type { InFlightRequest, Route } from "./module_routes.ts";

const TARGET = "synapse.subc";

/** One data-plane request, as the service sees it. */
export interface ModuleRequest {
  /** The operation, e.g. `embed.query`. */
  method: string;
  /** Its params (`{}` when the body had none). */
  params: unknown;
  /** Aborted by Cancel, route Goodbye, a replacing bind, or the end of the session. */
  signal: AbortSignal;
  /** The route's channel (for logs). */
  channel: number;
  /** The route's epoch (for logs). */
  epoch: number;
  /** The request's correlation id (for logs). */
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

/** What a {@link DataPlane} needs from its session. */
export interface DataPlaneOptions {
  writer: FrameWriter;
  log: LogSink;
  now: () => number;
  /** The module id (a bind's target must name it). */
  moduleId: string;
  /** Declared operation kinds (the manifest's), for flow-scoped routes. */
  kinds: ReadonlyMap<string, "query" | "mutate">;
  /** Body decoder; throws for a body that is not JSON. */
  parseBody: (body: Uint8Array) => Promise<unknown>;
}

/** Routes, requests in flight and terminals of one session. */
export class DataPlane {
  readonly #o: DataPlaneOptions;
  readonly #routes = new RouteTable();
  #service: ModuleService | undefined;
  #accepting = true;
  #reaper: ReturnType<typeof setInterval> | undefined;
  #idleWaiters: (() => void)[] = [];
  readonly counters = { requests: 0, terminals: 0, droppedFrames: 0 };

  constructor(options: DataPlaneOptions) {
    this.#o = options;
  }

  /** Installed routes. */
  get routeCount(): number {
    return this.#routes.size;
  }

  /** Requests in flight on installed routes. */
  get inFlightCount(): number {
    return this.#routes.inFlightCount;
  }

  /** Starts serving with `service`. */
  open(service: ModuleService): void {
    this.#service = service;
  }

  /** From now on, new requests are answered `module_not_initialized` (a drain). */
  stopAccepting(): void {
    this.#accepting = false;
    clearInterval(this.#reaper);
  }

  /**
   * Handles a `route.bind` body: refuses it (Error on channel 0) or acks and installs it.
   *
   * @param corr The daemon's corr.
   * @param value The decoded body.
   */
  bind(corr: bigint, value: unknown): void {
    let bind: RouteBind;
    try {
      bind = parseRouteBind(value);
    } catch (err) {
      const field = err instanceof SubcWireError ? String(err.details?.field ?? "") : "";
      return this.#controlError(corr, "route_rejected", (err as Error).message, { field });
    }
    const { target } = bind;
    if (target.kind !== "management_surface" || target.module_id !== this.#o.moduleId) {
      return this.#controlError(
        corr,
        "route_rejected",
        `Cannot bind a route to ${target.kind} '${target.module_id}': this module is the ` +
          `management_surface of '${this.#o.moduleId}'`,
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
    // Ack first, install after (subc §3), on one turn: no frame of the route is read in between.
    this.#o.writer.send({
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
      lastActivityMs: this.#o.now(),
    };
    this.#routes.install(route);
    if (decision.kind === "replace") this.#abandon(decision.previous);
    this.#o.log("debug", TARGET, "route bound", {
      channel: route.channel,
      epoch: route.epoch,
      principal: route.principal?.kind ?? "-",
      flow: route.flowId ?? "-",
      replaced_epoch: decision.kind === "replace" ? decision.previous.epoch : "-",
    });
  }

  /** Handles a frame on a channel other than 0. */
  onFrame(f: SubcFrame): void {
    const route = this.#routes.get(f.channel, f.epoch);
    if (route === undefined) {
      this.counters.droppedFrames++;
      this.#o.log("debug", TARGET, "dropped a frame for a route not installed", {
        frame: describeFrame(f),
      });
      return;
    }
    route.lastActivityMs = this.#o.now();
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
        this.#o.log("debug", TARGET, "route closed", {
          channel: route.channel,
          epoch: route.epoch,
        });
        return;
      case FrameType.Ping:
        this.#o.writer.send(pongFor(f));
        return;
      default:
        this.#o.log("debug", TARGET, "ignored a data-plane frame", { frame: describeFrame(f) });
    }
  }

  /**
   * Reaps routes with nothing in flight and no frame for `idleMs`, every `intervalMs`.
   */
  startReaper(idleMs: number, intervalMs: number): void {
    clearInterval(this.#reaper);
    this.#reaper = setInterval(() => {
      for (const route of this.#routes.idle(this.#o.now(), idleMs)) {
        this.#routes.remove(route);
        this.#o.writer.send({
          type: FrameType.Goodbye,
          channel: route.channel,
          epoch: route.epoch,
        });
        this.#o.log("info", TARGET, "reaped an idle route (closed with Goodbye)", {
          channel: route.channel,
          epoch: route.epoch,
          idle_ms: idleMs,
        });
      }
    }, intervalMs);
    Deno.unrefTimer(this.#reaper as unknown as number);
  }

  /** Cancels every request in flight: each still gets its terminal, Error `cancelled`. */
  cancelAll(why: string): void {
    for (const route of this.#routes.all()) {
      for (const req of route.inFlight.values()) {
        req.cancelled = true;
        req.controller.abort(new DOMException(why, "AbortError"));
      }
    }
  }

  /** Aborts every request in flight and sends nothing more for any of them. */
  abandonAll(): void {
    for (const route of this.#routes.all()) this.#abandon(route);
  }

  /** Removes every route (their work aborted, unanswered) and stops the reaper. */
  close(): void {
    clearInterval(this.#reaper);
    this.#accepting = false;
    for (const route of this.#routes.clear()) this.#abandon(route);
  }

  /**
   * Waits until nothing is in flight, at most `ms`.
   *
   * @returns True when idle, false at the time limit.
   */
  whenIdle(ms: number): Promise<boolean> {
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

  #onRequest(route: Route, f: SubcFrame): void {
    this.counters.requests++;
    if (!this.#accepting || this.#service === undefined) {
      return this.#terminal(
        route,
        f.corr,
        refusal(
          "module_not_initialized",
          `Cannot serve: module '${this.#o.moduleId}' is shutting down; retry`,
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
    void this.#serve(route, req, f.body, this.#service);
  }

  async #serve(
    route: Route,
    req: InFlightRequest,
    body: Uint8Array,
    service: ModuleService,
  ): Promise<void> {
    let reply: ModuleReply;
    try {
      const request = await this.#readRequest(body);
      if ("kind" in request) reply = request;
      else if (route.flowId !== undefined && this.#o.kinds.get(request.method) !== "query") {
        reply = refusal(
          "flow_scope_refused",
          `Cannot call '${request.method}' on a flow-scoped route (flow ${route.flowId}): flows ` +
            `may call only the query operations of '${this.#o.moduleId}'`,
        );
      } else if (req.controller.signal.aborted) {
        reply = refusal("cancelled", "Cancelled by the caller before it started");
      } else {
        reply = await service.call({
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
      this.#o.log("error", TARGET, `serving a request failed. This is a bug: ${errText(err)}`, {
        stack: (err as Error).stack ?? "",
      });
      reply = refusal("internal_error", `Cannot serve the request: ${errText(err)}`);
    }
    if (route.inFlight.get(req.corr) === req) route.inFlight.delete(req.corr);
    if (!req.suppressed) {
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
  async #readRequest(body: Uint8Array): Promise<{ method: string; params: unknown } | ModuleReply> {
    let value: unknown;
    try {
      value = await this.#o.parseBody(body);
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
      this.#o.writer.send(
        reply.kind === "response"
          ? { ...head, type: FrameType.Response, body: reply.body }
          : { ...head, type: FrameType.Error, body: encodeControlBody(reply.body) },
      );
    } catch (err) {
      this.#o.writer.send({
        ...head,
        type: FrameType.Error,
        body: encodeControlBody(
          errorBody("encode_failed", `Cannot send the answer: ${errText(err)}`),
        ),
      });
    }
    this.counters.terminals++;
    route.lastActivityMs = this.#o.now();
  }

  #controlError(corr: bigint, code: string, message: string, detail?: JsonValue): void {
    this.#o.writer.send({
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
