/**
 * The in-test subc daemon: a stand-in for the real daemon (which cannot be installed here) that
 * follows `subc.md` exactly, so a module (`ck-synapse serve --subc`) and a consumer can be tested
 * against it over real loopback TCP. See {@link startPeer}.
 *
 * What it does, in the daemon's order:
 *
 * - listens on `127.0.0.1:0`, publishes the connection file (0600, directory 0700) with a fresh key
 *   and daemon id, and authenticates every connection with the library's `serverHandshake`;
 * - tells a MODULE (first frame HELLO) from a CLIENT (anything else: channel-0 Requests such as
 *   `route.open`);
 * - modules: checks HELLO with `control.ts` (answering `invalid_hello`, `version_unsupported`,
 *   `invalid_manifest`, `duplicate_module_id` as the daemon does), answers HELLO_ACK (the first
 *   frame the module sees), then serves `catalog.update`, caches `route.status` pushes, answers
 *   Ping, and treats a channel-0 Goodbye as the module leaving;
 * - clients: `route.open` → a route slot and epoch on the module connection, `route.bind` to the
 *   module (12 s for its ack; an Error is relayed verbatim; no answer → `module_timeout`), then a
 *   route slot and epoch on the client connection;
 * - relay: client Requests take a credit of the route's window (serial 1, module_managed 32,
 *   stateless_parallel 1024) and WAIT when none is free, stalling that client's reader; a module
 *   terminal releases its credit by corr before it is delivered; Cancel and StreamData are relayed
 *   and release nothing; a client Goodbye on a route sends the module a route Goodbye.
 *
 * Everything it sees is counted for tests ({@link Peer.stats}, {@link Peer.routes}): credits in use,
 * leaked credits, terminals per corr (a terminal for an unknown or finished corr is a protocol
 * violation), dropped frames. Faults: {@link Peer.kill}, {@link Peer.goodbyeModule},
 * {@link Peer.rawToModule}, `negotiatedVer`, `bindEpochMode`.
 *
 * Choices the spec leaves open are documented where they are made (the error code of a malformed
 * `route.open`, what in-flight requests get when their module leaves, the principal of a bind).
 *
 * @module
 */
import { randomNonce, serverHandshake } from "../../../lib/subc/auth.ts";
import {
  daemonConnectionFilePath,
  writeConnectionFile,
} from "../../../lib/subc/connection_file.ts";
import type { ConnectionInfo } from "../../../lib/subc/connection_file.ts";
import {
  CatalogUpdateSchema,
  decodeControlBody,
  encodeControlBody,
  errorBody,
  HealthCheckResponseSchema,
  parseControl,
  parseErrorBody,
  parseHello,
  RouteBindAckSchema,
  RouteOpenSchema,
  RouteStatusSchema,
} from "../../../lib/subc/control.ts";
import type {
  BindIdentity,
  Concurrency,
  ErrorBody,
  HealthCheckResponse,
  Hello,
  HelloAck,
  JsonValue,
  Principal,
  RouteBind,
  RouteOpen,
} from "../../../lib/subc/control.ts";
import {
  CONTROL_FLAGS,
  DATA_FLAGS,
  FLAG_DAEMON_ORIGIN,
  FrameType,
  frameTypeName,
  pongFor,
} from "../../../lib/subc/bus_envelope.ts";
import type { SubcFrame } from "../../../lib/subc/bus_envelope.ts";
import { SubcWireError } from "../../../lib/subc/errors.ts";
import { FramedConn } from "./framed_conn.ts";
import { ClientConn, Link, ModuleConn, Route } from "./state.ts";
import type { ControlResult } from "./state.ts";
import {
  DEFAULT_SUBC_CAPABILITIES,
  DEFAULT_SUBC_OPS,
  DEFAULT_WAIT_MS,
  HEALTH_CHECK_DEADLINE_MS,
  PEER_DAEMON_VER,
  PeerError,
  ROUTE_BIND_TIMEOUT_MS,
} from "./types.ts";
import type {
  ConnKind,
  ControlReply,
  ModuleInfo,
  PeerOptions,
  PeerStats,
  RouteCloseReason,
  RouteInfo,
  Violation,
  WaitOptions,
} from "./types.ts";

export * from "./types.ts";

/**
 * Starts an in-test subc daemon ({@link Peer}): listener, connection file, accept loop.
 *
 * @param options See {@link PeerOptions}.
 * @returns The running peer; dispose it (`await using`) or call {@link Peer.close}.
 * @throws {RangeError} for a bad option (a key under 32 bytes, a daemon id not of 16 bytes, a
 *   negotiated version outside u8, a non-positive timeout).
 * @throws {SubcWireError} `connection_file_unwritable` when the connection file cannot be written.
 *
 * @example A scripted module and a client through the peer
 * ```ts ignore
 * await using peer = await startPeer();
 * await using module = await connectEndpoint(peer);
 * await module.hello(manifest);
 * await using client = await connectEndpoint(peer);
 * const opening = client.openRoute();
 * const bind = await module.next((f) => f.type === FrameType.Request && f.channel === 0);
 * await module.send({ type: FrameType.Response, corr: bind.corr, body: encodeControlBody({ op: "route.bind" }) });
 * const { channel, epoch } = await opening;
 * ```
 */
export async function startPeer(options: PeerOptions = {}): Promise<Peer> {
  return await Peer._start(options);
}

/**
 * A running in-test subc daemon. Create it with {@link startPeer}. All state is owned by the one
 * event loop of the test process; every method is safe to call at any time, and does nothing
 * harmful after {@link Peer.close} or {@link Peer.kill}.
 */
export class Peer implements AsyncDisposable {
  /** Where the connection file is published (pass it as `--subc`). */
  readonly connectionFile: string;
  /** The data home of the storage descriptor and the connection file. */
  readonly dataHome: string;
  /** The TCP port on 127.0.0.1. */
  readonly port: number;
  /** The published connection info. **Holds the key: never log it.** */
  readonly info: ConnectionInfo;

  readonly #options: PeerOptions;
  readonly #ownsDataHome: boolean;
  readonly #listener: Deno.TcpListener;
  readonly #configured: Set<string>;
  readonly #bindTimeoutMs: number;
  readonly #healthDeadlineMs: number;
  readonly #negotiatedVer: number;
  readonly #links = new Set<Link>();
  readonly #rawConns = new Set<Deno.Conn>();
  readonly #tasks = new Set<Promise<unknown>>();
  readonly #modules = new Map<string, ModuleConn>();
  readonly #allRoutes: Route[] = [];
  readonly #minted = new Map<string, string>();
  readonly #waiters = new Set<{ check(): void; fail(err: Error): void }>();
  #acceptLoop: Promise<void> | undefined;
  #nextConnId = 0;
  #nextRouteId = 0;
  #killed = false;
  #closed: Promise<void> | undefined;
  readonly #stats = {
    connections: 0,
    authFailures: [] as { connId: number; reason: string }[],
    wireRejections: [] as { connId: number; kind: ConnKind; reason: string }[],
    modulesRegistered: 0,
    helloRefusals: {} as Record<string, number>,
    routesOpened: 0,
    routeOpenRefusals: {} as Record<string, number>,
    bindTimeouts: 0,
    requestsForwarded: 0,
    terminals: 0,
    creditWaits: 0,
    overReleases: 0,
    creditsLeaked: 0,
    cancelsRelayed: 0,
    streamDataRelayed: 0,
    framesDropped: 0,
    lateControlReplies: 0,
    violations: [] as Violation[],
    warnings: [] as Violation[],
  };

  private constructor(
    options: PeerOptions,
    init: {
      listener: Deno.TcpListener;
      dataHome: string;
      ownsDataHome: boolean;
      connectionFile: string;
      info: ConnectionInfo;
    },
  ) {
    this.#options = options;
    this.#listener = init.listener;
    this.dataHome = init.dataHome;
    this.#ownsDataHome = init.ownsDataHome;
    this.connectionFile = init.connectionFile;
    this.info = init.info;
    this.port = init.listener.addr.port;
    this.#configured = new Set(options.modules ?? ["synapse"]);
    this.#bindTimeoutMs = options.bindTimeoutMs ?? ROUTE_BIND_TIMEOUT_MS;
    this.#healthDeadlineMs = options.healthDeadlineMs ?? HEALTH_CHECK_DEADLINE_MS;
    this.#negotiatedVer = options.negotiatedVer ?? 2;
  }

  /** @internal Use {@link startPeer}. */
  static async _start(options: PeerOptions): Promise<Peer> {
    const key = options.key ?? randomNonce(32);
    const daemonId = options.daemonId ?? randomNonce(16);
    if (key.byteLength < 32) {
      throw new RangeError(
        `Cannot start the subc peer as 'key' must be at least 32 bytes: received ${key.byteLength}`,
      );
    }
    if (daemonId.byteLength !== 16) {
      throw new RangeError(
        `Cannot start the subc peer as 'daemonId' must be 16 bytes: received ${daemonId.byteLength}`,
      );
    }
    const nv = options.negotiatedVer ?? 2;
    if (!Number.isInteger(nv) || nv < 0 || nv > 255) {
      throw new RangeError(
        `Cannot start the subc peer as 'negotiatedVer' must be an integer 0-255: received ${nv}`,
      );
    }
    for (const name of ["bindTimeoutMs", "healthDeadlineMs", "authDeadlineMs"] as const) {
      const v = options[name];
      if (v !== undefined && !(Number.isFinite(v) && v > 0)) {
        throw new RangeError(
          `Cannot start the subc peer as '${name}' must be a positive number: received ${v}`,
        );
      }
    }
    const ownsDataHome = options.dataHome === undefined;
    const dataHome = (options.dataHome ?? await Deno.makeTempDir({ prefix: "subc-peer-" }))
      .replace(/\/+$/, "");
    const connectionFile = options.connectionFile ??
      daemonConnectionFilePath({ XDG_DATA_HOME: dataHome });
    const listener = Deno.listen({ hostname: "127.0.0.1", port: 0, transport: "tcp" });
    const info: ConnectionInfo = {
      schema: 1,
      wireVersion: 2,
      endpoints: [{ host: "127.0.0.1", port: listener.addr.port }],
      key,
      daemonId,
      pid: Deno.pid,
      daemonVer: options.daemonVer ?? PEER_DAEMON_VER,
    };
    try {
      await writeConnectionFile(connectionFile, info);
    } catch (err) {
      listener.close();
      if (ownsDataHome) await Deno.remove(dataHome, { recursive: true }).catch(() => {});
      throw err;
    }
    const peer = new Peer(options, { listener, dataHome, ownsDataHome, connectionFile, info });
    peer.#acceptLoop = peer.#accept();
    return peer;
  }

  // -------------------------------------------------------------------------------------------
  // Public API
  // -------------------------------------------------------------------------------------------

  /** The argv tail the daemon gives a module it launches (subc §8): `["--subc", <file>]`. */
  launchArgs(): string[] {
    return ["--subc", this.connectionFile];
  }

  /**
   * The environment the daemon gives a module it launches (subc §8), with a fresh launch nonce
   * that the peer remembers (a `route.open` whose `consumer_identity` echoes it is bound with
   * principal `reserved`), and `XDG_DATA_HOME` set to {@link Peer.dataHome} so that a module
   * without a storage descriptor falls back into it.
   *
   * @param moduleId The module id. @default "synapse"
   * @returns `{SUBC_MODULE_ID, SUBC_LAUNCH_NONCE, XDG_DATA_HOME}`.
   */
  launchEnv(moduleId = "synapse"): Record<string, string> {
    const nonce = randomNonce(32).toHex();
    this.#minted.set(nonce, moduleId);
    return { SUBC_MODULE_ID: moduleId, SUBC_LAUNCH_NONCE: nonce, XDG_DATA_HOME: this.dataHome };
  }

  /**
   * A snapshot of the newest module connection that registered `moduleId`.
   *
   * @param moduleId The module id. @default "synapse"
   * @returns Its info, or undefined when no module of that id ever registered.
   */
  module(moduleId = "synapse"): ModuleInfo | undefined {
    const m = this.#modules.get(moduleId);
    return m === undefined ? undefined : moduleInfo(m);
  }

  /**
   * Snapshots of every module id that ever registered (the newest connection of each).
   *
   * @returns One {@link ModuleInfo} per module id, in registration order.
   */
  modules(): ModuleInfo[] {
    return [...this.#modules.values()].map(moduleInfo);
  }

  /**
   * Waits until a module of `moduleId` is registered (its HELLO_ACK queued).
   *
   * @param moduleId The module id. @default "synapse"
   * @param options Hang guard.
   * @returns Its info.
   * @throws {Error} when the hang guard expires.
   */
  async waitModule(moduleId = "synapse", options: WaitOptions = {}): Promise<ModuleInfo> {
    await this.until(() => this.#modules.get(moduleId)?.state === "registered", {
      what: `module '${moduleId}' to register`,
      ...options,
    });
    return this.module(moduleId)!;
  }

  /**
   * Waits until the module connection of `moduleId` has closed (or the module said Goodbye).
   *
   * @param moduleId The module id. @default "synapse"
   * @param options Hang guard.
   * @throws {Error} when the hang guard expires.
   */
  async waitModuleGone(moduleId = "synapse", options: WaitOptions = {}): Promise<void> {
    await this.until(() => {
      const m = this.#modules.get(moduleId);
      return m !== undefined && m.state === "gone";
    }, { what: `module '${moduleId}' to leave`, ...options });
  }

  /**
   * Snapshots of routes, in open order.
   *
   * @param options `includeClosed`: closed routes too. @default false
   * @returns One {@link RouteInfo} per route.
   */
  routes(options: { includeClosed?: boolean } = {}): RouteInfo[] {
    return this.#allRoutes.filter((r) => r.open || options.includeClosed === true).map((r) =>
      r.info()
    );
  }

  /** A snapshot of the counters (lists and maps are copies). */
  stats(): PeerStats {
    const s = this.#stats;
    return {
      ...s,
      authFailures: [...s.authFailures],
      wireRejections: [...s.wireRejections],
      helloRefusals: { ...s.helloRefusals },
      routeOpenRefusals: { ...s.routeOpenRefusals },
      violations: [...s.violations],
      warnings: [...s.warnings],
    };
  }

  /**
   * Waits until `predicate()` is true. It is checked now and after every event of the peer (a
   * frame handled, a credit taken or released, a route or connection opened or closed, a
   * violation), never on a timer: tests wait on events, the timeout is only a hang guard.
   *
   * @param predicate A side-effect-free check of the peer's state.
   * @param options Hang guard and what is awaited.
   * @throws {Error} `Timed out after N ms waiting for <what>`, or what `predicate` threw.
   */
  until(predicate: () => boolean, options: WaitOptions = {}): Promise<void> {
    const timeoutMs = options.timeoutMs ?? DEFAULT_WAIT_MS;
    return new Promise<void>((resolve, reject) => {
      let ready: boolean;
      try {
        ready = predicate();
      } catch (err) {
        return reject(err);
      }
      if (ready) return resolve();
      const settle = (err?: unknown): void => {
        clearTimeout(timer);
        this.#waiters.delete(waiter);
        if (err === undefined) resolve();
        else reject(err);
      };
      const waiter = {
        check(): void {
          let done: boolean;
          try {
            done = predicate();
          } catch (err) {
            return settle(err);
          }
          if (done) settle();
        },
        fail(err: Error): void {
          settle(err);
        },
      };
      const timer = setTimeout(() => {
        settle(
          new Error(`Timed out after ${timeoutMs} ms waiting for ${options.what ?? "a condition"}`),
        );
      }, timeoutMs);
      this.#waiters.add(waiter);
    });
  }

  /**
   * Sends a channel-0 Request to a module with the daemon's next corr and waits for its reply.
   *
   * @param body The control body (e.g. `{op: "health.check"}`; any object, for fault tests).
   * @param options The module, and the deadline in milliseconds.
   * @returns The reply frame (Response or Error) and its JSON body.
   * @throws {PeerError} `no_module`, `timeout` (no reply in time), `module_gone`, `bad_reply`
   *   (the body is not JSON).
   */
  async controlRequest(
    body: object,
    options: { moduleId?: string; timeoutMs?: number } = {},
  ): Promise<ControlReply> {
    const m = this.#liveModule(options.moduleId ?? "synapse");
    const timeoutMs = options.timeoutMs ?? DEFAULT_WAIT_MS;
    const op = (body as { op?: unknown }).op;
    const res = await this.#control(m, body, timeoutMs);
    if (res.kind === "timeout") {
      throw new PeerError(
        "timeout",
        `Cannot complete ${
          String(op)
        }: module '${m.moduleId}' did not answer within ${timeoutMs} ms`,
      );
    }
    if (res.kind === "gone") {
      throw new PeerError(
        "module_gone",
        `Cannot complete ${String(op)}: module '${m.moduleId}' left first`,
      );
    }
    try {
      return { frame: res.frame, body: decodeControlBody(res.frame.body).value };
    } catch (err) {
      throw new PeerError(
        "bad_reply",
        `Cannot read the reply to ${String(op)}: ${(err as Error).message}`,
      );
    }
  }

  /**
   * Probes a module with `health.check` (subc §3) under the 5 s deadline. Probes take no credits.
   *
   * @param options The module, and the deadline in milliseconds.
   * @returns The Response body, checked against the health.check reply schema.
   * @throws {PeerError} `no_module`, `not_advertised` (HELLO's `control_ops` lacks `health.check`,
   *   so the daemon would never send it), `timeout` (the deadline passed: a missed probe),
   *   `error_reply` (an Error frame; `body` holds it), `bad_reply` (a Response of the wrong shape),
   *   `module_gone`.
   */
  async healthCheck(
    options: { moduleId?: string; deadlineMs?: number } = {},
  ): Promise<HealthCheckResponse> {
    const m = this.#liveModule(options.moduleId ?? "synapse");
    if (!(m.hello.control_ops ?? []).includes("health.check")) {
      throw new PeerError(
        "not_advertised",
        `Cannot probe module '${m.moduleId}': its HELLO control_ops does not list health.check`,
      );
    }
    const reply = await this.controlRequest({ op: "health.check" }, {
      moduleId: m.moduleId,
      timeoutMs: options.deadlineMs ?? this.#healthDeadlineMs,
    });
    if (reply.frame.type === FrameType.Error) {
      const body = safeErrorBody(reply.body);
      throw new PeerError(
        "error_reply",
        `Cannot probe module '${m.moduleId}': it answered Error ${body.code}: ${body.message}`,
        body,
      );
    }
    try {
      return parseControl(HealthCheckResponseSchema, reply.body, "health.check reply");
    } catch (err) {
      throw new PeerError("bad_reply", (err as Error).message);
    }
  }

  /**
   * Pings a module on channel 0 and waits for its Pong.
   *
   * @param options The module; the hang guard in milliseconds.
   * @returns The Pong frame (it must echo the Ping's ver, flags and corr).
   * @throws {PeerError} `no_module`, `timeout`, `module_gone`.
   */
  async pingModule(
    options: { moduleId?: string; timeoutMs?: number; flags?: number } = {},
  ): Promise<SubcFrame> {
    const m = this.#liveModule(options.moduleId ?? "synapse");
    const corr = m.nextPingCorr++;
    const timeoutMs = options.timeoutMs ?? DEFAULT_WAIT_MS;
    const pong = await new Promise<SubcFrame | null | "timeout">((resolve) => {
      const timer = setTimeout(() => {
        m.pings.delete(corr);
        resolve("timeout");
      }, timeoutMs);
      m.pings.set(corr, (f) => {
        clearTimeout(timer);
        resolve(f);
      });
      void m.link.framed.send({ type: FrameType.Ping, corr, flags: options.flags ?? 0 });
    });
    if (pong === "timeout") {
      throw new PeerError(
        "timeout",
        `Cannot ping module '${m.moduleId}': no Pong within ${timeoutMs} ms`,
      );
    }
    if (pong === null) {
      throw new PeerError("module_gone", `Cannot ping module '${m.moduleId}': it left first`);
    }
    return pong;
  }

  /**
   * Writes bytes verbatim to a module's socket (fault injection: malformed frames, frames on
   * unbound channels, bodies that are not JSON).
   *
   * @param bytes Any bytes.
   * @param options The module. @default "synapse"
   * @returns Whether the bytes were written (false when the connection closed first).
   * @throws {PeerError} `no_module`.
   */
  rawToModule(bytes: Uint8Array, options: { moduleId?: string } = {}): Promise<boolean> {
    const m = this.#moduleConn(options.moduleId ?? "synapse");
    return m.link.framed.sendRaw(bytes);
  }

  /**
   * Reload/restart/disable of a module, as the daemon does it (subc §3 "Lifecycle"): a route
   * Goodbye for each of its routes (their clients get `target_unavailable` for requests in flight
   * and a Goodbye on the route), then a channel-0 Goodbye. The module is `draining` until its
   * connection closes (`route.open` answers `module_reloading`; Requests on surviving client routes
   * cannot exist, all were closed).
   *
   * @param options The module. @default "synapse"
   * @throws {PeerError} `no_module`.
   */
  async goodbyeModule(options: { moduleId?: string } = {}): Promise<void> {
    const m = this.#liveModule(options.moduleId ?? "synapse");
    m.state = "draining";
    for (const route of [...m.routes.values()]) this.#dropRoute(route, "peer_goodbye");
    this.#notify();
    await m.link.framed.send({ type: FrameType.Goodbye });
  }

  /**
   * Closes a route as the daemon would on its own, telling each side or not (fault injection: a
   * module whose route Goodbye never comes needs its idle reaper; a client whose route vanished
   * silently gets `unknown_channel` on its next request and must re-open).
   *
   * @param routeId The route's {@link RouteInfo.id}.
   * @param options `goodbyeToModule` (default true): send the module a route Goodbye;
   *   `goodbyeToClient` (default true): answer the client's requests in flight with
   *   `target_unavailable` and send it a Goodbye on the route.
   * @returns Whether the route was open.
   */
  closeRoute(
    routeId: number,
    options: { goodbyeToModule?: boolean; goodbyeToClient?: boolean } = {},
  ): boolean {
    const route = this.#allRoutes.find((r) => r.id === routeId);
    if (route === undefined || !route.open) return false;
    this.#dropRoute(route, "peer_closed", {
      module: options.goodbyeToModule ?? true,
      client: options.goodbyeToClient ?? true,
    });
    return true;
  }

  /**
   * A daemon crash: closes the listener and every socket at once, with no Goodbye. The connection
   * file stays (a crashed daemon leaves it). Idempotent; {@link Peer.close} is still needed to
   * await the loops and remove a temporary data home.
   */
  kill(): void {
    if (this.#killed) return;
    this.#killed = true;
    try {
      this.#listener.close();
    } catch {
      // Already closed.
    }
    for (const conn of this.#rawConns) {
      try {
        conn.close();
      } catch {
        // Closed by a failed handshake.
      }
    }
    for (const link of this.#links) link.framed?.close();
    this.#notify();
  }

  /**
   * Shuts the peer down: every socket closed (each endpoint reads end of stream, as at a daemon
   * shutdown), every loop awaited, the connection file removed, and the data home removed when the
   * peer created it. Idempotent.
   */
  close(): Promise<void> {
    this.#closed ??= (async () => {
      this.kill();
      await this.#acceptLoop;
      while (this.#tasks.size > 0) await Promise.allSettled([...this.#tasks]);
      for (const w of [...this.#waiters]) w.check();
      for (const w of [...this.#waiters]) {
        w.fail(new Error("Cannot keep waiting: the subc peer closed"));
      }
      if (this.#ownsDataHome) {
        await Deno.remove(this.dataHome, { recursive: true }).catch(() => {});
      } else {
        await Deno.remove(this.connectionFile).catch(() => {});
      }
    })();
    return this.#closed;
  }

  /** Same as {@link Peer.close}. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  // -------------------------------------------------------------------------------------------
  // Connections
  // -------------------------------------------------------------------------------------------

  async #accept(): Promise<void> {
    while (true) {
      let conn: Deno.TcpConn;
      try {
        conn = await this.#listener.accept();
      } catch {
        return; // The listener closed.
      }
      if (this.#killed) {
        conn.close();
        continue;
      }
      this.#track(this.#serve(conn));
    }
  }

  #track(task: Promise<unknown>): void {
    this.#tasks.add(task);
    void task.finally(() => this.#tasks.delete(task));
  }

  async #serve(conn: Deno.TcpConn): Promise<void> {
    const link = new Link(++this.#nextConnId);
    this.#stats.connections++;
    this.#rawConns.add(conn);
    try {
      await serverHandshake(conn, {
        key: this.info.key,
        daemonId: this.info.daemonId,
        daemonVer: this.info.daemonVer,
        ...(this.#options.authDeadlineMs === undefined
          ? {}
          : { deadlineMs: this.#options.authDeadlineMs }),
        ...(this.#options.serverNonce === undefined
          ? {}
          : { serverNonce: this.#options.serverNonce }),
      });
    } catch (err) {
      this.#rawConns.delete(conn);
      const reason = err instanceof SubcWireError ? err.reason : String(err);
      this.#stats.authFailures.push({ connId: link.id, reason });
      this.#log(`#${link.id} handshake failed: ${reason}`);
      this.#notify();
      return;
    }
    this.#rawConns.delete(conn);
    const onFrame = this.#options.onFrame;
    // The tap costs a decode of every frame written, so it is installed only when asked for.
    link.framed = new FramedConn(
      conn,
      onFrame === undefined ? {} : {
        onFrame: (direction, frame) => {
          onFrame({
            direction,
            connId: link.id,
            // A first frame other than HELLO makes the connection a client as it is read.
            kind: link.kind === "pending" && frame.type !== FrameType.Hello ? "client" : link.kind,
            moduleId: link.module?.moduleId,
            frame,
          });
        },
      },
    );
    this.#links.add(link);
    if (this.#killed) link.framed.close();
    this.#notify();
    try {
      for await (const frame of link.framed.frames()) {
        if (link.kind === "pending") {
          if (frame.type === FrameType.Hello) {
            await this.#onHello(link, frame);
            // A waitModule() must hear of it even if the module sends nothing after HELLO.
            this.#notify();
            continue;
          }
          link.kind = "client";
          link.client = new ClientConn(link);
        }
        if (link.kind === "module") this.#onModuleFrame(link.module!, frame);
        else await this.#onClientFrame(link.client!, frame);
        this.#notify();
      }
    } catch (err) {
      if (err instanceof SubcWireError) {
        this.#stats.wireRejections.push({ connId: link.id, kind: link.kind, reason: err.reason });
        this.#log(`#${link.id} ${link.kind} closed: ${err.message}`);
      } else if (!link.framed.closed) {
        this.#log(`#${link.id} ${link.kind} read failed: ${(err as Error).message}`);
      }
    } finally {
      link.framed.close();
      this.#links.delete(link);
      this.#onLinkClosed(link);
      this.#notify();
    }
  }

  #onLinkClosed(link: Link): void {
    if (link.module !== undefined && link.module.state !== "gone") {
      this.#moduleGone(link.module);
    }
    if (link.client !== undefined) {
      for (const route of [...link.client.routes.values()]) this.#dropRoute(route, "client_gone");
    }
  }

  // -------------------------------------------------------------------------------------------
  // Module side
  // -------------------------------------------------------------------------------------------

  async #onHello(link: Link, frame: SubcFrame): Promise<void> {
    const refuse = async (code: string, message: string, detail?: JsonValue): Promise<void> => {
      this.#stats.helloRefusals[code] = (this.#stats.helloRefusals[code] ?? 0) + 1;
      this.#log(`#${link.id} HELLO refused: ${code}: ${message}`);
      await link.framed.send({
        type: FrameType.Error,
        corr: frame.corr,
        body: encodeControlBody(errorBody(code, message, detail)),
      });
      link.framed.close();
    };
    if (frame.channel !== 0) {
      return await refuse(
        "invalid_hello",
        `Cannot register: HELLO must travel on channel 0, not ${frame.channel}`,
      );
    }
    let hello: Hello;
    try {
      hello = parseHello(frame.body);
    } catch (err) {
      if (!(err instanceof SubcWireError)) throw err;
      const code = typeof err.details?.error_code === "string"
        ? err.details.error_code
        : "invalid_hello";
      const field = err.details?.field;
      return await refuse(code, err.message, typeof field === "string" ? { field } : undefined);
    }
    if (frame.corr !== 1n) {
      this.#violation(link, "hello_corr", `HELLO carries corr ${frame.corr}, not 1`);
    }
    if (frame.flags !== CONTROL_FLAGS) {
      this.#warning(link, "hello_flags", `HELLO carries flags 0x${hex2(frame.flags)}, not 0x00`);
    }
    const id = hello.manifest.module_id;
    const existing = this.#modules.get(id);
    if (existing !== undefined && existing.state !== "gone") {
      return await refuse(
        "duplicate_module_id",
        `Cannot register module '${id}': another connection (#${existing.link.id}) holds that id`,
      );
    }
    const surface = hello.manifest.provides.find((r) => r.role === "management_surface");
    const tools = hello.manifest.provides.find((r) => r.role === "tool_provider");
    const concurrency: Concurrency =
      (surface?.role === "management_surface" ? surface.concurrency : undefined) ??
        (tools?.role === "tool_provider" ? tools.concurrency : undefined) ?? "module_managed";
    const m = new ModuleConn(link, hello, concurrency);
    link.kind = "module";
    link.module = m;
    // HELLO_ACK is queued before the module becomes routable: always the first frame it sees.
    void link.framed.send({
      type: FrameType.HelloAck,
      corr: frame.corr,
      body: encodeControlBody(this.#helloAck(id)),
    });
    this.#modules.set(id, m);
    this.#stats.modulesRegistered++;
    this.#log(`#${link.id} module '${id}' registered (window ${m.window})`);
  }

  #helloAck(moduleId: string): HelloAck {
    const o = this.#options;
    return {
      negotiated_ver: this.#negotiatedVer,
      subc_ops: [...(o.subcOps ?? DEFAULT_SUBC_OPS)],
      subc_capabilities: [...(o.subcCapabilities ?? DEFAULT_SUBC_CAPABILITIES)],
      ...(o.storage === false ? {} : {
        storage: {
          module_id: moduleId,
          storage_namespace: "default",
          isolation: { kind: "module" },
          backend: { backend: "sqlite", path: `${this.dataHome}/cortexkit/${moduleId}/store.db` },
        },
      }),
      ...(o.machineId === undefined ? {} : { machine_id: o.machineId }),
    };
  }

  #onModuleFrame(m: ModuleConn, frame: SubcFrame): void {
    if (frame.channel === 0) return this.#onModuleControl(m, frame);
    const route = m.routes.get(frame.channel);
    if (route === undefined || route.moduleEpoch !== frame.epoch) {
      // The daemon drops frames of an unknown or stale (channel, epoch), as a module does.
      this.#stats.framesDropped++;
      this.#log(
        `#${m.link.id} dropped ${frameTypeName(frame.type)} on unbound ch=${frame.channel} ` +
          `ep=${frame.epoch}`,
      );
      return;
    }
    const toClient = (): void => {
      void route.client.link.framed.send({
        ...frame,
        channel: route.clientChannel,
        epoch: route.clientEpoch,
      });
    };
    switch (frame.type) {
      case FrameType.Response:
      case FrameType.Error:
      case FrameType.StreamEnd: {
        // Release by corr BEFORE delivery (subc §3).
        if (route.window.release(frame.corr)) {
          route.terminals++;
          this.#stats.terminals++;
          route.terminalsByCorr.set(frame.corr, 1);
        } else {
          this.#stats.overReleases++;
          const seen = route.terminalsByCorr.get(frame.corr);
          if (seen !== undefined) route.terminalsByCorr.set(frame.corr, seen + 1);
          this.#violation(
            m.link,
            seen === undefined ? "terminal_unknown_corr" : "terminal_after_terminal",
            `${frameTypeName(frame.type)} for corr ${frame.corr} on route ${route.id} ` +
              (seen === undefined
                ? "that no request in flight has"
                : "that already had its terminal"),
          );
        }
        return toClient();
      }
      case FrameType.StreamData:
        if (!route.window.holds(frame.corr)) {
          this.#violation(
            m.link,
            "stream_data_unknown_corr",
            `StreamData for corr ${frame.corr} on route ${route.id}, no request in flight has it`,
          );
        }
        this.#stats.streamDataRelayed++;
        return toClient();
      case FrameType.Push:
      case FrameType.Cancel:
        return toClient();
      case FrameType.Request:
        route.reverse.add(frame.corr);
        return toClient();
      case FrameType.Goodbye:
        return this.#dropRoute(route, "module_goodbye");
      case FrameType.Ping:
        void m.link.framed.send(pongFor(frame));
        return;
      default:
        this.#violation(
          m.link,
          "unexpected_frame",
          `${frameTypeName(frame.type)} on route ch=${frame.channel}`,
        );
    }
  }

  #onModuleControl(m: ModuleConn, frame: SubcFrame): void {
    switch (frame.type) {
      case FrameType.Request:
        return this.#onModuleRequest(m, frame);
      case FrameType.Response:
      case FrameType.Error: {
        if (frame.flags !== CONTROL_FLAGS) {
          this.#warning(
            m.link,
            "control_reply_flags",
            `channel-0 ${frameTypeName(frame.type)} corr ${frame.corr} carries flags ` +
              `0x${hex2(frame.flags)}, not 0x00`,
          );
        }
        const pending = m.pending.get(frame.corr);
        if (pending !== undefined) {
          m.pending.delete(frame.corr);
          pending.resolve({ kind: "reply", frame });
        } else if (m.expired.has(frame.corr)) {
          this.#stats.lateControlReplies++;
          this.#log(`#${m.link.id} late reply to corr ${frame.corr} (its wait had ended)`);
        } else {
          this.#violation(
            m.link,
            "reply_unknown_corr",
            `channel-0 ${frameTypeName(frame.type)} for corr ${frame.corr}, never sent`,
          );
        }
        return;
      }
      case FrameType.Push:
        return this.#onModulePush(m, frame);
      case FrameType.Ping:
        void m.link.framed.send(pongFor(frame));
        return;
      case FrameType.Pong: {
        const waiter = m.pings.get(frame.corr);
        m.pings.delete(frame.corr);
        waiter?.(frame);
        return;
      }
      case FrameType.Goodbye:
        this.#log(`#${m.link.id} module '${m.moduleId}' said Goodbye`);
        return this.#moduleGone(m);
      default:
        this.#violation(
          m.link,
          "unexpected_frame",
          `${frameTypeName(frame.type)} on channel 0 from a registered module`,
        );
    }
  }

  #onModuleRequest(m: ModuleConn, frame: SubcFrame): void {
    const reply = (type: FrameType, body: object): void => {
      void m.link.framed.send({ type, corr: frame.corr, body: encodeControlBody(body) });
    };
    if (frame.corr < 2n || frame.corr <= m.lastModuleCorr) {
      this.#violation(
        m.link,
        "control_corr_reused",
        `channel-0 Request with corr ${frame.corr}; the module's counter starts at 2 and never ` +
          `goes back (last ${m.lastModuleCorr})`,
      );
    }
    if (frame.corr > m.lastModuleCorr) m.lastModuleCorr = frame.corr;
    let op: string | undefined;
    let value: unknown;
    try {
      ({ op, value } = decodeControlBody(frame.body));
    } catch (err) {
      return reply(FrameType.Error, errorBody("invalid_request", (err as Error).message));
    }
    if (op !== "catalog.update") {
      return reply(
        FrameType.Error,
        errorBody("unknown_control_op", `Cannot serve channel-0 op '${op}': unknown to the daemon`),
      );
    }
    if (!(this.#options.subcOps ?? DEFAULT_SUBC_OPS).includes("catalog.update")) {
      this.#violation(
        m.link,
        "catalog_update_not_offered",
        "catalog.update sent although HELLO_ACK subc_ops does not list it",
      );
      return reply(
        FrameType.Error,
        errorBody(
          "unknown_control_op",
          "Cannot serve catalog.update: this daemon does not offer it",
        ),
      );
    }
    try {
      const update = parseControl(CatalogUpdateSchema, value, "catalog.update");
      m.manifest = {
        ...m.manifest,
        provides: update.provides,
        ...(update.capabilities === undefined ? {} : { capabilities: update.capabilities }),
      };
      const ready = (value as { ready?: unknown }).ready;
      if (typeof ready === "boolean") m.ready = ready;
      m.catalogUpdates++;
      reply(FrameType.Response, { op: "catalog.update" });
    } catch (err) {
      const field = (err as SubcWireError).details?.field;
      reply(
        FrameType.Error,
        errorBody(
          "invalid_manifest",
          (err as Error).message,
          typeof field === "string" ? { field } : undefined,
        ),
      );
    }
  }

  #onModulePush(m: ModuleConn, frame: SubcFrame): void {
    let value: unknown;
    let op: string | undefined;
    try {
      ({ op, value } = decodeControlBody(frame.body));
    } catch {
      return this.#violation(m.link, "unexpected_frame", "channel-0 Push whose body is not JSON");
    }
    if (op !== "route.status") {
      return this.#violation(m.link, "unexpected_frame", `channel-0 Push of unknown op '${op}'`);
    }
    if (frame.corr !== 0n) {
      this.#violation(
        m.link,
        "route_status_corr",
        `route.status push with corr ${frame.corr}, not 0`,
      );
    }
    try {
      const status = parseControl(RouteStatusSchema, value, "route.status");
      const key = `${status.route_channel}:${status.route_epoch}`;
      m.routeStatus.delete(key);
      m.routeStatus.set(key, status);
    } catch (err) {
      this.#violation(m.link, "unexpected_frame", (err as Error).message);
    }
  }

  #moduleGone(m: ModuleConn): void {
    m.state = "gone";
    for (const route of [...m.routes.values()]) this.#dropRoute(route, "module_gone");
    for (const pending of [...m.pending.values()]) pending.resolve({ kind: "gone" });
    m.pending.clear();
    for (const waiter of [...m.pings.values()]) waiter(null);
    m.pings.clear();
  }

  #liveModule(moduleId: string): ModuleConn {
    const m = this.#moduleConn(moduleId);
    if (m.state !== "registered") {
      throw new PeerError(
        m.state === "gone" ? "module_gone" : "no_module",
        `Cannot reach module '${moduleId}': it is ${m.state}`,
      );
    }
    return m;
  }

  #moduleConn(moduleId: string): ModuleConn {
    const m = this.#modules.get(moduleId);
    if (m === undefined) {
      throw new PeerError("no_module", `Cannot reach module '${moduleId}': it never registered`);
    }
    return m;
  }

  /**
   * Sends a daemon channel-0 Request (corr from the endpoint's counter) and awaits its reply.
   * `settle`, when given, runs synchronously as the reply is read (before the module's next frame
   * is handled): a route.bind ack installs the route there, so route traffic the module sends right
   * after its ack finds the route.
   */
  #control(
    m: ModuleConn,
    body: object,
    timeoutMs: number,
    settle: (result: ControlResult) => void = () => {},
  ): Promise<ControlResult> {
    const corr = m.nextCorr++;
    return new Promise<ControlResult>((resolve) => {
      const done = (result: ControlResult): void => {
        settle(result);
        resolve(result);
      };
      if (m.state === "gone") return done({ kind: "gone" });
      const timer = setTimeout(() => {
        m.pending.delete(corr);
        m.expired.add(corr);
        done({ kind: "timeout" });
        this.#notify();
      }, timeoutMs);
      m.pending.set(corr, {
        resolve: (result) => {
          clearTimeout(timer);
          done(result);
        },
      });
      void m.link.framed.send({ type: FrameType.Request, corr, body: encodeControlBody(body) });
    });
  }

  // -------------------------------------------------------------------------------------------
  // Client side
  // -------------------------------------------------------------------------------------------

  async #onClientFrame(c: ClientConn, frame: SubcFrame): Promise<void> {
    if (frame.channel === 0) return this.#onClientControl(c, frame);
    const route = c.routes.get(frame.channel);
    if (route === undefined || route.clientEpoch !== frame.epoch) {
      this.#stats.framesDropped++;
      if (frame.type === FrameType.Goodbye) return; // closing a route that is gone: nothing to do
      const stale = route !== undefined;
      const code = stale ? "stale_route_epoch" : "unknown_channel";
      const message = stale
        ? `Cannot relay: route channel ${frame.channel} is at epoch ${route.clientEpoch}, not ` +
          `${frame.epoch}; re-open the route`
        : `Cannot relay: channel ${frame.channel} has no open route on this connection; re-open ` +
          "the route";
      this.#log(`#${c.link.id} ${frameTypeName(frame.type)} corr ${frame.corr}: ${code}`);
      if (
        frame.type === FrameType.Request || frame.type === FrameType.Cancel ||
        frame.type === FrameType.StreamData
      ) {
        this.#daemonError(c, frame.channel, frame.epoch, frame.corr, code, message, {
          route_channel: frame.channel,
          route_epoch: frame.epoch,
        });
      }
      return;
    }
    const toModule = (): void => {
      void route.module.link.framed.send({
        ...frame,
        channel: route.moduleChannel,
        epoch: route.moduleEpoch,
      });
    };
    switch (frame.type) {
      case FrameType.Request:
        return await this.#forwardRequest(route, frame);
      case FrameType.Cancel:
        // Relayed; releases nothing (the module's terminal does).
        route.cancels++;
        this.#stats.cancelsRelayed++;
        return toModule();
      case FrameType.StreamData:
        this.#stats.streamDataRelayed++;
        return toModule();
      case FrameType.Push:
        return toModule();
      case FrameType.Response:
      case FrameType.Error:
      case FrameType.StreamEnd:
        if (!route.reverse.delete(frame.corr)) {
          this.#stats.framesDropped++;
          return this.#violation(
            c.link,
            "reverse_terminal_unknown_corr",
            `${frameTypeName(frame.type)} for corr ${frame.corr} on route ${route.id}, which ` +
              "answers no module request",
          );
        }
        return toModule();
      case FrameType.Goodbye:
        return this.#dropRoute(route, "client_goodbye");
      case FrameType.Ping:
        void c.link.framed.send(pongFor(frame));
        return;
      default:
        this.#violation(
          c.link,
          "unexpected_frame",
          `${frameTypeName(frame.type)} on route ch=${frame.channel}`,
        );
    }
  }

  async #forwardRequest(route: Route, frame: SubcFrame): Promise<void> {
    const c = route.client;
    if (route.module.state === "draining") {
      return this.#daemonError(
        c,
        frame.channel,
        frame.epoch,
        frame.corr,
        "module_reloading",
        `Cannot send the request: module '${route.module.moduleId}' is reloading; retry (not sent)`,
      );
    }
    if (route.window.holds(frame.corr)) {
      this.#violation(
        c.link,
        "duplicate_request_corr",
        `Request corr ${frame.corr} on route ${route.id} while a request of that corr is in flight`,
      );
    }
    if (route.window.inUse >= route.window.size) this.#stats.creditWaits++;
    // No credit free: WAIT, stalling this client's reader (subc §3).
    const granted = await route.window.acquire(frame.corr);
    if (!granted || !route.open) {
      if (granted) route.window.release(frame.corr);
      return this.#daemonError(
        c,
        frame.channel,
        frame.epoch,
        frame.corr,
        "target_unavailable",
        `Cannot send the request: route ${frame.channel} closed while it waited for a credit; ` +
          "re-open the route and retry",
      );
    }
    route.requests++;
    route.terminalsByCorr.delete(frame.corr);
    this.#stats.requestsForwarded++;
    void route.module.link.framed.send({
      ...frame,
      channel: route.moduleChannel,
      epoch: route.moduleEpoch,
    });
  }

  #onClientControl(c: ClientConn, frame: SubcFrame): void {
    switch (frame.type) {
      case FrameType.Request: {
        let op: string | undefined;
        let value: unknown;
        try {
          ({ op, value } = decodeControlBody(frame.body));
        } catch (err) {
          return this.#controlError(c, frame.corr, "invalid_request", (err as Error).message);
        }
        if (op === "route.open") {
          this.#track(this.#routeOpen(c, frame, value));
          return;
        }
        return this.#controlError(
          c,
          frame.corr,
          "unknown_control_op",
          `Cannot serve channel-0 op '${op}': the daemon knows route.open only`,
        );
      }
      case FrameType.Ping:
        void c.link.framed.send(pongFor(frame));
        return;
      case FrameType.Pong:
        return;
      case FrameType.Goodbye:
        for (const route of [...c.routes.values()]) this.#dropRoute(route, "client_goodbye");
        c.link.framed.close();
        return;
      default:
        this.#violation(
          c.link,
          "unexpected_frame",
          `${frameTypeName(frame.type)} on channel 0 from a client`,
        );
    }
  }

  async #routeOpen(c: ClientConn, frame: SubcFrame, value: unknown): Promise<void> {
    const refuse = (code: string, message: string, detail?: JsonValue): void =>
      this.#refuseOpen(c, frame.corr, code, message, detail);
    let open: RouteOpen;
    try {
      open = parseControl(RouteOpenSchema, value, "route.open");
    } catch (err) {
      // The spec does not fix this code; the peer answers a malformed route.open like a bad request.
      const field = (err as SubcWireError).details?.field;
      return refuse(
        "invalid_request",
        (err as Error).message,
        typeof field === "string" ? { field } : undefined,
      );
    }
    if (open.target.kind !== "management_surface") {
      return refuse(
        "target_unavailable",
        `Cannot open a route to a ${open.target.kind}: the test peer routes management surfaces only`,
      );
    }
    const id = open.target.module_id;
    const m = this.#modules.get(id);
    if (m === undefined || m.state === "gone") {
      if (this.#configured.has(id)) {
        return refuse(
          "module_warming",
          `Cannot open a route to '${id}': the module has not registered yet; retry`,
          { reason: "not_registered" },
        );
      }
      return refuse(
        "target_unavailable",
        `Cannot open a route to '${id}': no such module is configured or registered`,
      );
    }
    if (m.state === "draining") {
      return refuse(
        "module_reloading",
        `Cannot open a route to '${id}': the module is reloading; retry`,
      );
    }
    if (!m.ready) {
      return refuse(
        "module_warming",
        `Cannot open a route to '${id}': the module declared itself not ready; retry`,
        { reason: "declared_not_ready" },
      );
    }
    if (!m.manifest.provides.some((r) => r.role === "management_surface")) {
      return refuse(
        "target_unavailable",
        `Cannot open a route to '${id}': the module provides no management_surface`,
      );
    }
    const slot = this.#allocateModuleSlot(m);
    if (slot === undefined) {
      return refuse("target_unavailable", `Cannot open a route to '${id}': no free route channel`);
    }
    const principal = this.#principalFor(open);
    const identity: BindIdentity = {
      project_root: open.identity.project_root,
      harness: open.identity.harness,
      session: open.identity.session,
    };
    const bind: RouteBind = {
      op: "route.bind",
      route_channel: slot.channel,
      epoch: slot.epoch,
      target: { kind: "management_surface", module_id: id },
      identity,
      ...(principal === undefined ? {} : { principal }),
      ...(open.consumer_capabilities === undefined
        ? {}
        : { consumer_capabilities: open.consumer_capabilities }),
    };
    if (slot.replaces === undefined) m.reservedSlots.add(slot.channel);
    await this.#control(
      m,
      bind,
      this.#bindTimeoutMs,
      (res) => this.#bindSettled({ c, openCorr: frame.corr, m, slot, identity, principal }, res),
    );
  }

  /** The end of a route.open, run as the module's answer to route.bind is read. */
  #bindSettled(
    open: {
      c: ClientConn;
      openCorr: bigint;
      m: ModuleConn;
      slot: { channel: number; epoch: number; replaces?: Route };
      identity: BindIdentity;
      principal: Principal | undefined;
    },
    res: ControlResult,
  ): void {
    const { c, m, slot, identity, principal } = open;
    const id = m.moduleId;
    const refuse = (code: string, message: string): void =>
      this.#refuseOpen(c, open.openCorr, code, message);
    m.reservedSlots.delete(slot.channel);
    if (res.kind === "timeout") {
      this.#stats.bindTimeouts++;
      return refuse(
        "module_timeout",
        `Cannot open a route to '${id}': it did not answer route.bind within ` +
          `${this.#bindTimeoutMs} ms; retry`,
      );
    }
    if (res.kind === "gone" || m.state !== "registered") {
      return refuse(
        "target_unavailable",
        `Cannot open a route to '${id}': the module left while binding; retry`,
      );
    }
    const reply = res.frame;
    if (reply.type === FrameType.Error) {
      // Relayed verbatim: the module's ErrorBody bytes, untouched.
      const code = safeErrorBody(decodeSafe(reply.body)).code;
      this.#stats.routeOpenRefusals[code] = (this.#stats.routeOpenRefusals[code] ?? 0) + 1;
      this.#log(`#${c.link.id} route.open refused by module '${id}': ${code}`);
      void c.link.framed.send({ type: FrameType.Error, corr: open.openCorr, body: reply.body });
      return;
    }
    try {
      parseControl(RouteBindAckSchema, reply.body, "route.bind ack");
    } catch (err) {
      this.#violation(m.link, "bind_ack_body", (err as Error).message);
    }
    if (slot.replaces !== undefined) {
      this.#violation(
        m.link,
        "bind_not_higher_accepted",
        `module accepted route.bind on channel ${slot.channel} with epoch ${slot.epoch}, not ` +
          `higher than the installed ${slot.replaces.moduleEpoch}`,
      );
      this.#dropRoute(slot.replaces, "replaced");
    }
    if (c.link.framed.closed) {
      // The opener left while the module bound: unbind at once.
      void m.link.framed.send({
        type: FrameType.Goodbye,
        channel: slot.channel,
        epoch: slot.epoch,
      });
      return;
    }
    let clientChannel = 1;
    while (c.routes.has(clientChannel)) clientChannel++;
    const clientEpoch = (c.slotEpochs.get(clientChannel) ?? 0) + 1;
    c.slotEpochs.set(clientChannel, clientEpoch);
    const route = new Route({
      id: ++this.#nextRouteId,
      client: c,
      clientChannel,
      clientEpoch,
      module: m,
      moduleChannel: slot.channel,
      moduleEpoch: slot.epoch,
      identity,
      principal,
      onChange: () => this.#notify(),
    });
    c.routes.set(clientChannel, route);
    m.routes.set(slot.channel, route);
    this.#allRoutes.push(route);
    this.#stats.routesOpened++;
    void c.link.framed.send({
      type: FrameType.Response,
      corr: open.openCorr,
      body: encodeControlBody({
        op: "route.open",
        route_channel: clientChannel,
        route_epoch: clientEpoch,
      }),
    });
    this.#notify();
  }

  #refuseOpen(
    c: ClientConn,
    corr: bigint,
    code: string,
    message: string,
    detail?: JsonValue,
  ): void {
    this.#stats.routeOpenRefusals[code] = (this.#stats.routeOpenRefusals[code] ?? 0) + 1;
    this.#log(`#${c.link.id} route.open refused: ${code}`);
    this.#controlError(c, corr, code, message, detail);
  }

  #allocateModuleSlot(
    m: ModuleConn,
  ): { channel: number; epoch: number; replaces?: Route } | undefined {
    const mode = this.#options.bindEpochMode ?? "fresh";
    if (mode !== "fresh") {
      const live = [...m.routes.values()].at(-1);
      if (live !== undefined) {
        return {
          channel: live.moduleChannel,
          epoch: mode === "equal" ? live.moduleEpoch : Math.max(0, live.moduleEpoch - 1),
          replaces: live,
        };
      }
    }
    for (let channel = 1; channel <= 0xffff; channel++) {
      if (m.routes.has(channel) || m.reservedSlots.has(channel)) continue;
      const epoch = (m.slotEpochs.get(channel) ?? 0) + 1;
      m.slotEpochs.set(channel, epoch);
      return { channel, epoch };
    }
    return undefined;
  }

  #principalFor(open: RouteOpen): Principal | undefined {
    if (this.#options.principal !== undefined) return this.#options.principal ?? undefined;
    const ci = open.consumer_identity;
    if (ci === undefined) return { kind: "direct" };
    if (this.#minted.get(ci.launch_nonce) === ci.module_id) {
      return { kind: "reserved", module_id: ci.module_id };
    }
    return { kind: "unverified" };
  }

  // -------------------------------------------------------------------------------------------
  // Routes
  // -------------------------------------------------------------------------------------------

  /**
   * Closes a route on both sides. Who hears of it depends on who closed it: the module gets a
   * route Goodbye when the client or the peer closed it; the client gets `target_unavailable`
   * for each request in flight and a Goodbye on the route when the module or the peer did.
   */
  #dropRoute(
    route: Route,
    reason: RouteCloseReason,
    tell?: { module: boolean; client: boolean },
  ): void {
    if (!route.open) return;
    route.open = false;
    route.closedBy = reason;
    if (route.client.routes.get(route.clientChannel) === route) {
      route.client.routes.delete(route.clientChannel);
    }
    if (route.module.routes.get(route.moduleChannel) === route) {
      route.module.routes.delete(route.moduleChannel);
    }
    const held = route.window.close();
    route.leakedCredits = held.length;
    this.#stats.creditsLeaked += held.length;
    const clientLink = route.client.link;
    const moduleLink = route.module.link;
    const notifyModule = tell?.module ??
      (reason === "client_goodbye" || reason === "client_gone" || reason === "peer_goodbye");
    const tellClient = tell?.client ??
      (reason === "module_goodbye" || reason === "module_gone" || reason === "peer_goodbye" ||
        reason === "replaced");
    if (tellClient && !clientLink.framed.closed) {
      // The spec does not say what in-flight requests of a vanished route get; the peer answers
      // each with a retryable target_unavailable so that no client waits forever.
      for (const corr of held) {
        this.#daemonError(
          route.client,
          route.clientChannel,
          route.clientEpoch,
          corr,
          "target_unavailable",
          `Cannot complete the request: module '${route.module.moduleId}' closed the route; ` +
            "re-open it and retry",
        );
      }
      void clientLink.framed.send({
        type: FrameType.Goodbye,
        channel: route.clientChannel,
        epoch: route.clientEpoch,
      });
    }
    if (notifyModule && !moduleLink.framed.closed && route.module.state !== "gone") {
      void moduleLink.framed.send({
        type: FrameType.Goodbye,
        channel: route.moduleChannel,
        epoch: route.moduleEpoch,
      });
    }
    this.#log(
      `route ${route.id} closed: ${reason}${held.length > 0 ? `, ${held.length} in flight` : ""}`,
    );
    this.#notify();
  }

  /** An Error the daemon itself originates on a data channel (flags 0x02 | DAEMON_ORIGIN). */
  #daemonError(
    c: ClientConn,
    channel: number,
    epoch: number,
    corr: bigint,
    code: string,
    message: string,
    detail?: JsonValue,
  ): void {
    void c.link.framed.send({
      type: FrameType.Error,
      flags: DATA_FLAGS | FLAG_DAEMON_ORIGIN,
      channel,
      epoch,
      corr,
      body: encodeControlBody(errorBody(code, message, detail)),
    });
  }

  /** A channel-0 Error reply to a client (flags 0x00, as control replies). */
  #controlError(
    c: ClientConn,
    corr: bigint,
    code: string,
    message: string,
    detail?: JsonValue,
  ): void {
    void c.link.framed.send({
      type: FrameType.Error,
      corr,
      body: encodeControlBody(errorBody(code, message, detail)),
    });
  }

  // -------------------------------------------------------------------------------------------
  // Bookkeeping
  // -------------------------------------------------------------------------------------------

  #violation(link: Link, code: string, message: string): void {
    this.#stats.violations.push({ side: link.kind, connId: link.id, code, message });
    this.#log(`#${link.id} VIOLATION ${code}: ${message}`);
    this.#notify();
  }

  #warning(link: Link, code: string, message: string): void {
    this.#stats.warnings.push({ side: link.kind, connId: link.id, code, message });
    this.#log(`#${link.id} warning ${code}: ${message}`);
  }

  #log(line: string): void {
    this.#options.onLog?.(line);
  }

  #notify(): void {
    for (const w of [...this.#waiters]) w.check();
  }
}

function moduleInfo(m: ModuleConn): ModuleInfo {
  return {
    moduleId: m.moduleId,
    connId: m.link.id,
    state: m.state,
    hello: m.hello,
    manifest: m.manifest,
    concurrency: m.concurrency,
    window: m.window,
    ready: m.ready,
    controlOps: m.hello.control_ops ?? null,
    launchNonce: m.hello.launch_nonce,
    catalogUpdates: m.catalogUpdates,
    routeStatuses: [...m.routeStatus.values()],
    openRoutes: m.routes.size,
  };
}

function decodeSafe(body: Uint8Array): unknown {
  try {
    return decodeControlBody(body).value;
  } catch {
    return undefined;
  }
}

function safeErrorBody(value: unknown): ErrorBody {
  try {
    return parseErrorBody(value);
  } catch {
    return { code: "(malformed ErrorBody)", message: JSON.stringify(value) ?? "(not JSON)" };
  }
}

function hex2(n: number): string {
  return n.toString(16).padStart(2, "0");
}
