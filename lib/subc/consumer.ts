/**
 * The client side of the subc bus (subc §4 "Caller flow"): a program that calls a module
 * through the daemon, as `ck-synapse call --subc` and {@link SubcConsumer} users do.
 *
 * 1. Authenticate as a client ({@link connectAndAuthenticate}); a pure client sends no HELLO.
 * 2. Channel-0 Request `route.open {target, identity, consumer_identity?, config: []}`, its corr
 *    from the connection's counter; the Response names the route `(route_channel, route_epoch)`.
 *    The retryable refusals (`module_warming`, `module_reloading`, `target_unavailable`,
 *    `module_timeout`, `scope_not_synced`, `scope_changed`) are retried with capped exponential
 *    backoff under one total deadline; every other code, unknown ones included, is final.
 * 3. Requests `{method, params}` on `(N, E)`, each with a fresh corr and flags 0x02; each waits for
 *    exactly one terminal: Response (its body), Error (`ErrorBody` → {@link SubcCallError}) or
 *    StreamEnd (after any StreamData of that corr). Many requests may be in flight on one route
 *    (the daemon's credit window, 32 for Synapse, holds the rest back).
 * 4. On `unknown_channel` or `stale_route_epoch` the route is re-opened once, and the request
 *    resent once.
 * 5. Goodbye on `(N, E)` when the route closes.
 *
 * An aborted request sends a Cancel (corr = the request's) and still waits, for at most
 * {@link SubcConsumerOptions.cancelGraceMs}, for its terminal before rejecting with the signal's
 * reason: the terminal is what frees the module's work and the daemon's credit. Pings are
 * answered with Pongs.
 *
 * @module
 */
import { sleep } from "../async.ts";
import { connectAndAuthenticate } from "./auth.ts";
import type { AuthConn } from "./auth.ts";
import { discoverConnectionFile } from "./connection_file.ts";
import type { ConnectionInfo } from "./connection_file.ts";
import {
  decodeControlBody,
  encodeControlBody,
  ErrorBodySchema,
  parseControl,
  RouteOpenResponseSchema,
} from "./control.ts";
import type { ErrorBody, JsonValue, RouteOpen, RouteTarget } from "./control.ts";
import {
  CONTROL_FLAGS,
  DATA_FLAGS,
  FLAG_DAEMON_ORIGIN,
  FrameDecoder,
  FrameType,
  pongFor,
} from "./bus_envelope.ts";
import type { SubcFrame } from "./bus_envelope.ts";
import { SubcWireError } from "./errors.ts";
import { FrameWriter } from "./frame_writer.ts";
import { DEFAULT_MODULE_ID, launchNonce, readLaunchNonce, subcModuleId } from "./launch.ts";
import type { EnvSource } from "../paths.ts";

/** route.open refusals worth retrying, with backoff (subc §4 step 3). */
export const RETRYABLE_OPEN_CODES: readonly string[] = Object.freeze([
  "module_warming",
  "module_reloading",
  "target_unavailable",
  "module_timeout",
  "scope_not_synced",
  "scope_changed",
]);

/** Request refusals that mean "the route is gone": re-open once, resend once (subc §4). */
export const REOPEN_CODES: readonly string[] = Object.freeze([
  "unknown_channel",
  "stale_route_epoch",
]);

/** The harness label this build puts in `route.open.identity`. */
export const CONSUMER_HARNESS = "ck-synapse";
/** Default total deadline of one route.open, retries included, in milliseconds. */
export const DEFAULT_OPEN_DEADLINE_MS = 30_000;
/** Default first retry delay of route.open, in milliseconds (doubles each try). */
export const DEFAULT_OPEN_RETRY_BASE_MS = 50;
/** Default longest retry delay of route.open, in milliseconds. */
export const DEFAULT_OPEN_RETRY_MAX_MS = 1_000;
/** Default wait for the terminal of a cancelled request, in milliseconds. */
export const DEFAULT_CANCEL_GRACE_MS = 5_000;

const READ_CHUNK_BYTES = 64 * 1024;
/** Longest wait for the Goodbyes to be written at close, in milliseconds. */
const CLOSE_FLUSH_MS = 1_000;
const ENCODER = new TextEncoder();

/**
 * Where a {@link SubcCallError} arose:
 * - `connect`: reaching the daemon (after the connection file and the handshake, which throw
 *   {@link SubcWireError});
 * - `open`: `route.open`;
 * - `request`: a request on an open route.
 */
export type SubcCallPhase = "connect" | "open" | "request";

/**
 * Who produced the code of a {@link SubcCallError}: the daemon (route.open refusals, frames with
 * DAEMON_ORIGIN), the module (an Error terminal it sent), or this consumer (`daemon_unreachable`,
 * `connection_lost`, `route_closed`, `invalid_response`, `route_open_timeout`,
 * `consumer_closed`).
 */
export type SubcCallOrigin = "daemon" | "module" | "consumer";

/** Options of {@link SubcCallError}. */
export interface SubcCallErrorOptions {
  /** The ErrorBody's `detail`, or the consumer's own facts. */
  detail?: JsonValue;
  /** Where it arose. */
  phase: SubcCallPhase;
  /** Who produced the code. */
  origin: SubcCallOrigin;
  /** Tries made before giving up (route.open retries). @default 1 */
  attempts?: number;
  /** The ErrorBody's own `message`, when the code came in an Error frame. */
  remoteMessage?: string;
  /** The underlying error. */
  cause?: unknown;
}

/**
 * A call over the bus that ended in a refusal: an Error terminal (the module's or the daemon's
 * `ErrorBody`, `code` verbatim, unknown codes included), a route.open that failed, or a fault of
 * the connection. Callers branch on `code`, never on the message.
 *
 * Codes this consumer produces itself: `daemon_unreachable` (nothing listens at the endpoint),
 * `connection_lost` (the connection closed or broke before the terminal), `route_closed` (the
 * daemon said Goodbye on the route while the request waited), `invalid_response` (a Response or
 * reply body that is not the JSON it must be), `route_open_timeout` (no route.open reply within
 * the deadline), `consumer_closed` (a call after {@link SubcConsumer.close}).
 */
export class SubcCallError extends Error {
  /** The stable code (ErrorBody `code`, or the consumer's own). */
  readonly code: string;
  /** The ErrorBody's `detail`, or the consumer's facts. */
  readonly detail: JsonValue | undefined;
  /** Where it arose. */
  readonly phase: SubcCallPhase;
  /** Who produced the code. */
  readonly origin: SubcCallOrigin;
  /** Tries made (route.open retries); 1 otherwise. */
  readonly attempts: number;
  /** The ErrorBody's own `message` as the daemon or module sent it, when there was one. */
  readonly remoteMessage: string | undefined;

  /**
   * @param code The stable code.
   * @param message House-style message.
   * @param options Phase, origin, detail, attempts, cause.
   */
  constructor(code: string, message: string, options: SubcCallErrorOptions) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "SubcCallError";
    this.code = code;
    this.detail = options.detail;
    this.phase = options.phase;
    this.origin = options.origin;
    this.attempts = options.attempts ?? 1;
    this.remoteMessage = options.remoteMessage;
  }

  /** Whether route.open treats this code as retryable ({@link RETRYABLE_OPEN_CODES}). */
  get retryable(): boolean {
    return RETRYABLE_OPEN_CODES.includes(this.code);
  }

  /** The ErrorBody form `{code, message, detail?}`, with the sender's own message when known. */
  toErrorBody(): ErrorBody {
    const message = this.remoteMessage ?? this.message;
    return this.detail === undefined
      ? { code: this.code, message }
      : { code: this.code, message, detail: this.detail };
  }
}

/** The identity a route.open carries: unattested labels for scoping and attribution. */
export type ConsumerIdentity = RouteOpen["identity"];

/** What `route.open.consumer_identity` proves: this process's module id and launch nonce. */
export type ConsumerLaunchIdentity = NonNullable<RouteOpen["consumer_identity"]>;

/** The terminal of one request. */
export type SubcTerminal =
  | {
    kind: "response";
    /** The Response body (the module's; Synapse sends JSON). */
    body: Uint8Array;
  }
  | {
    kind: "error";
    /** The ErrorBody. */
    error: ErrorBody;
    /** Whether the daemon, not the module, produced it (flag DAEMON_ORIGIN). */
    daemonOrigin: boolean;
  }
  | {
    kind: "stream_end";
    /** The bodies of the StreamData frames before it, in order. */
    stream: Uint8Array[];
  };

/** Counters of one consumer connection (for tests and reports). */
export interface SubcConsumerStats {
  /** route.open requests sent (each retry counts). */
  opensSent: number;
  /** Routes opened. */
  routesOpened: number;
  /** Re-opens after `unknown_channel` / `stale_route_epoch`. */
  reopens: number;
  /** Requests sent (each resend counts). */
  requestsSent: number;
  /** Terminals received for a request still waiting, by kind. */
  terminals: { response: number; error: number; stream_end: number };
  /** Error terminals, by code. */
  errorsByCode: Record<string, number>;
  /** Cancels sent. */
  cancelsSent: number;
  /** Terminals that matched no waiting request (late after a cancel grace, or stray). */
  unmatchedTerminals: number;
  /** Pongs sent. */
  pongs: number;
}

/** Options of {@link SubcConsumer.connect}. */
export interface SubcConsumerOptions {
  /**
   * The connection file: an explicit path (a `--subc` flag). Without it, the client ladder of
   * subc §1: `SUBC_CONNECTION_FILE` (exclusive), `$XDG_RUNTIME_DIR/subc-connection.json`,
   * `$HOME/.local/share/cortexkit/run/subc-connection.json`, `$TMPDIR/subc-<uid>.connection.json`.
   */
  connectionFile?: string;
  /** An already validated connection file (skips the ladder). */
  info?: ConnectionInfo;
  /** Environment source (the ladder, `SUBC_MODULE_ID`, the launch nonce). @default {Deno.env.get} */
  env?: EnvSource;
  /**
   * The `route.open` identity.
   * @default {project_root: Deno.cwd(), harness: "ck-synapse", session: "ck-synapse-<pid>"}
   */
  identity?: ConsumerIdentity;
  /**
   * `route.open.consumer_identity`, or `null` for none.
   * @default `{module_id: $SUBC_MODULE_ID, launch_nonce}` when this process runs under the daemon
   *   with a launch nonce it can read; none otherwise (a nonce that cannot be read is left out:
   *   the route is then opened as an unattested client)
   */
  consumerIdentity?: ConsumerLaunchIdentity | null;
  /** Handshake deadline, in milliseconds. @default 10000 */
  authDeadlineMs?: number;
  /** Total deadline of one route.open, retries included, ms. @default {DEFAULT_OPEN_DEADLINE_MS} */
  openDeadlineMs?: number;
  /** First route.open retry delay, ms (doubles). @default {DEFAULT_OPEN_RETRY_BASE_MS} */
  openRetryBaseMs?: number;
  /** Longest route.open retry delay, ms. @default {DEFAULT_OPEN_RETRY_MAX_MS} */
  openRetryMaxMs?: number;
  /** Wait for the terminal of a cancelled request, ms. @default {DEFAULT_CANCEL_GRACE_MS} */
  cancelGraceMs?: number;
  /** Aborts connecting and authenticating. */
  signal?: AbortSignal;
  /** Random source of the backoff jitter, in [0, 1). @default Math.random */
  random?: () => number;
}

/** Options of {@link SubcConsumer.openRoute}. */
export interface OpenRouteOptions {
  /** Aborts the open (and its retries); rejects with the signal's reason. */
  signal?: AbortSignal | undefined;
  /** Total deadline, retries included, ms. @default the consumer's `openDeadlineMs` */
  deadlineMs?: number | undefined;
}

/** Options of a request ({@link SubcRoute.request}, {@link SubcRoute.call}). */
export interface SubcRequestOptions {
  /**
   * Aborts the request: a Cancel is sent, the terminal awaited (at most the consumer's
   * `cancelGraceMs`), then the call rejects with the signal's reason.
   */
  signal?: AbortSignal | undefined;
  /** Deadline of the request, ms; past it the request is cancelled as by `signal` (a TimeoutError). */
  timeoutMs?: number | undefined;
  /** Flag byte of the Request. @default {DATA_FLAGS} (0x02, priority interactive) */
  flags?: number | undefined;
}

interface PendingRequest {
  channel: number;
  stream: Uint8Array[];
  settle(terminal: SubcTerminal | SubcCallError): void;
}

interface PendingControl {
  settle(frame: SubcFrame | SubcCallError): void;
}

/**
 * One authenticated client connection to the subc daemon: route.open, requests on routes, Ping,
 * Goodbye. Create with {@link SubcConsumer.connect}; close with {@link SubcConsumer.close} (or
 * `await using`).
 *
 * @example Call Synapse over the bus
 * ```ts ignore
 * import { SubcConsumer } from "./consumer.ts";
 *
 * await using consumer = await SubcConsumer.connect({ connectionFile: "/run/subc.json" });
 * const route = await consumer.openRoute("synapse");
 * const answer = await route.call("embed.query", { text: "hello" }, { timeoutMs: 10_000 });
 * ```
 */
export class SubcConsumer implements AsyncDisposable {
  /** The connection file's path, when it was read from a file. */
  readonly connectionFile: string | undefined;
  /** The daemon's version string, from the handshake. */
  readonly daemonVer: string;
  readonly #conn: AuthConn;
  readonly #writer: FrameWriter;
  readonly #identity: ConsumerIdentity;
  readonly #launchIdentity: ConsumerLaunchIdentity | undefined;
  readonly #openDeadlineMs: number;
  readonly #retryBaseMs: number;
  readonly #retryMaxMs: number;
  readonly #cancelGraceMs: number;
  readonly #random: () => number;
  #nextCorr = 1n;
  readonly #control = new Map<bigint, PendingControl>();
  readonly #requests = new Map<bigint, PendingRequest>();
  readonly #routes = new Set<SubcRoute>();
  #closed: SubcCallError | undefined;
  readonly #reader: Promise<void>;
  readonly #stats: SubcConsumerStats = {
    opensSent: 0,
    routesOpened: 0,
    reopens: 0,
    requestsSent: 0,
    terminals: { response: 0, error: 0, stream_end: 0 },
    errorsByCode: {},
    cancelsSent: 0,
    unmatchedTerminals: 0,
    pongs: 0,
  };

  /** @internal Use {@link SubcConsumer.connect}. */
  constructor(
    conn: AuthConn,
    init: {
      connectionFile: string | undefined;
      daemonVer: string;
      identity: ConsumerIdentity;
      launchIdentity: ConsumerLaunchIdentity | undefined;
      options: SubcConsumerOptions;
    },
  ) {
    const o = init.options;
    this.connectionFile = init.connectionFile;
    this.daemonVer = init.daemonVer;
    this.#conn = conn;
    this.#writer = new FrameWriter(conn);
    this.#identity = init.identity;
    this.#launchIdentity = init.launchIdentity;
    this.#openDeadlineMs = positive(o.openDeadlineMs, DEFAULT_OPEN_DEADLINE_MS, "openDeadlineMs");
    this.#retryBaseMs = positive(o.openRetryBaseMs, DEFAULT_OPEN_RETRY_BASE_MS, "openRetryBaseMs");
    this.#retryMaxMs = positive(o.openRetryMaxMs, DEFAULT_OPEN_RETRY_MAX_MS, "openRetryMaxMs");
    this.#cancelGraceMs = positive(o.cancelGraceMs, DEFAULT_CANCEL_GRACE_MS, "cancelGraceMs");
    this.#random = o.random ?? Math.random;
    this.#reader = this.#readLoop();
  }

  /**
   * Finds the connection file (or takes `info`), connects to its first endpoint over loopback
   * TCP and authenticates as a client. Nothing else is sent until a route is opened.
   *
   * @param options Connection file, identity, timings.
   * @returns The connected consumer.
   * @throws {SubcWireError} a refusal of the connection file (`connection_file_*`) or of the
   *   handshake (`invalid_server_proof`, `daemon_id_mismatch`, `auth_timeout`, …).
   * @throws {SubcCallError} `daemon_unreachable` (phase `connect`) when nothing accepts the
   *   connection at the endpoint: the daemon is not running, or the file is stale.
   * @throws {RangeError} for a timing option that is not a positive number.
   */
  static async connect(options: SubcConsumerOptions = {}): Promise<SubcConsumer> {
    let path: string | undefined;
    let info = options.info;
    if (info === undefined) {
      const found = await discoverConnectionFile({
        explicit: options.connectionFile,
        env: options.env,
      });
      path = found.path;
      info = found.info;
    }
    const identity = options.identity ?? defaultIdentity();
    const launchIdentity = options.consumerIdentity === undefined
      ? defaultLaunchIdentity(options.env)
      : options.consumerIdentity ?? undefined;
    let connected: { conn: Deno.TcpConn; daemonVer: string };
    try {
      connected = await connectAndAuthenticate(info, {
        deadlineMs: options.authDeadlineMs,
        signal: options.signal,
      });
    } catch (err) {
      if (err instanceof SubcWireError || options.signal?.aborted) throw err;
      const ep = info.endpoints[0]!;
      const where = `${ep.host}:${ep.port}${path === undefined ? "" : ` (from ${path})`}`;
      throw new SubcCallError(
        "daemon_unreachable",
        `Cannot connect to the subc daemon at ${where}: ${errText(err)}; is the subc daemon ` +
          "running? (its connection file may be stale)",
        {
          phase: "connect",
          origin: "consumer",
          detail: { host: ep.host, port: ep.port, ...(path === undefined ? {} : { path }) },
          cause: err,
        },
      );
    }
    return new SubcConsumer(connected.conn, {
      connectionFile: path,
      daemonVer: connected.daemonVer,
      identity,
      launchIdentity,
      options,
    });
  }

  /** The identity this consumer's route.open requests carry. */
  get identity(): ConsumerIdentity {
    return { ...this.#identity };
  }

  /** Whether route.open requests carry a `consumer_identity` (this process's launch nonce). */
  get attested(): boolean {
    return this.#launchIdentity !== undefined;
  }

  /** True once closed, or once the connection ended. */
  get closed(): boolean {
    return this.#closed !== undefined;
  }

  /** A snapshot of the counters. */
  get stats(): SubcConsumerStats {
    return {
      ...this.#stats,
      terminals: { ...this.#stats.terminals },
      errorsByCode: { ...this.#stats.errorsByCode },
    };
  }

  /** Requests waiting for their terminal now. */
  get inFlight(): number {
    return this.#requests.size;
  }

  /**
   * Opens a route to a module's management surface (or another target): `route.open`, retried
   * with capped exponential backoff (with jitter) on the retryable codes
   * ({@link RETRYABLE_OPEN_CODES}) until the deadline.
   *
   * @param target A module id (its management surface), or a full route target.
   * @param options Signal and deadline.
   * @returns The open route.
   * @throws {SubcCallError} phase `open`: the daemon's (or module's, relayed) refusal, code
   *   verbatim — a final code at once, a retryable one once the deadline left no time for another
   *   try (`attempts` says how many were made); `route_open_timeout` when no reply came in time;
   *   `invalid_response` for a reply of the wrong shape; `connection_lost`, `consumer_closed`.
   * @throws the signal's reason when aborted.
   */
  async openRoute(
    target: string | RouteTarget = DEFAULT_MODULE_ID,
    options: OpenRouteOptions = {},
  ): Promise<SubcRoute> {
    const t: RouteTarget = typeof target === "string"
      ? { kind: "management_surface", module_id: target }
      : target;
    const { channel, epoch } = await this.#open(t, options);
    const route = new SubcRoute(this, t, channel, epoch);
    this.#routes.add(route);
    return route;
  }

  /**
   * Closes the connection: a Goodbye on every open route, then the socket. Requests still waiting
   * reject with `consumer_closed`. Idempotent.
   */
  async close(): Promise<void> {
    if (this.#closed === undefined) {
      for (const route of this.#routes) route.sendGoodbye();
      this.#routes.clear();
      this.#fail(
        new SubcCallError("consumer_closed", "Cannot finish the call: the consumer was closed", {
          phase: "request",
          origin: "consumer",
        }),
      );
      // The Goodbyes are best effort: a daemon that stopped reading does not hold the close up.
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([
        this.#writer.flush(),
        new Promise<void>((resolve) => timer = setTimeout(resolve, CLOSE_FLUSH_MS)),
      ]);
      clearTimeout(timer);
      this.#writer.close();
      try {
        this.#conn.close();
      } catch {
        // Already closed by the peer.
      }
    }
    await this.#reader;
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  // -------------------------------------------------------------------------------------------
  // For SubcRoute
  // -------------------------------------------------------------------------------------------

  /** @internal Opens a route's (channel, epoch); see {@link openRoute}. */
  async #open(
    target: RouteTarget,
    options: OpenRouteOptions,
  ): Promise<{ channel: number; epoch: number }> {
    const deadlineMs = options.deadlineMs ?? this.#openDeadlineMs;
    const started = performance.now();
    const body: RouteOpen = {
      op: "route.open",
      target,
      identity: this.#identity,
      ...(this.#launchIdentity === undefined ? {} : { consumer_identity: this.#launchIdentity }),
      config: [],
    };
    const bytes = encodeControlBody(body);
    const what = describeTarget(target);
    for (let attempt = 1;; attempt++) {
      options.signal?.throwIfAborted();
      const left = deadlineMs - (performance.now() - started);
      const reply = await this.#controlRequest(bytes, left, options.signal, what, attempt);
      if (reply.type === FrameType.Response) {
        let parsed;
        try {
          parsed = parseControl(RouteOpenResponseSchema, reply.body, "route.open reply");
        } catch (err) {
          throw new SubcCallError(
            "invalid_response",
            `Cannot open a route to ${what}: ${errText(err)}`,
            { phase: "open", origin: "daemon", cause: err, attempts: attempt },
          );
        }
        this.#stats.routesOpened++;
        return { channel: parsed.route_channel, epoch: parsed.route_epoch };
      }
      const error = readErrorBody(reply.body);
      const retryable = RETRYABLE_OPEN_CODES.includes(error.code);
      const delay = this.#backoff(attempt);
      const remaining = deadlineMs - (performance.now() - started);
      if (!retryable || delay >= remaining) {
        const tries = attempt === 1
          ? ""
          : ` (after ${attempt} tries in ${Math.round(performance.now() - started)} ms)`;
        throw new SubcCallError(
          error.code,
          `Cannot open a route to ${what}: ${error.code}: ${error.message}${tries}`,
          {
            phase: "open",
            origin: "daemon",
            attempts: attempt,
            remoteMessage: error.message,
            ...(error.detail === undefined ? {} : { detail: error.detail }),
          },
        );
      }
      await sleep(delay, options.signal);
    }
  }

  /** The retry delay after `attempt` tries: base·2^(attempt-1), capped, with ±25 % jitter. */
  #backoff(attempt: number): number {
    const raw = Math.min(this.#retryMaxMs, this.#retryBaseMs * 2 ** Math.min(attempt - 1, 30));
    return Math.round(raw * (0.75 + this.#random() * 0.5));
  }

  /** Sends a channel-0 Request and waits for its Response or Error (or the deadline). */
  #controlRequest(
    body: Uint8Array,
    deadlineMs: number,
    signal: AbortSignal | undefined,
    what: string,
    attempt: number,
  ): Promise<SubcFrame> {
    this.#ensureOpen("open");
    const corr = this.#corr();
    return new Promise<SubcFrame>((resolve, reject) => {
      const onAbort = (): void => done(signal!.reason);
      const done = (result: SubcFrame | unknown): void => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
        this.#control.delete(corr);
        if (result instanceof Error || !isFrame(result)) reject(result);
        else resolve(result);
      };
      this.#control.set(corr, {
        settle: (frame) => done(frame instanceof SubcCallError ? withPhase(frame, "open") : frame),
      });
      const timer = setTimeout(() => {
        done(
          new SubcCallError(
            "route_open_timeout",
            `Cannot open a route to ${what}: the daemon did not answer route.open in time ` +
              `(${attempt} tries); is the daemon overloaded?`,
            { phase: "open", origin: "consumer", attempts: attempt },
          ),
        );
      }, Math.max(0, deadlineMs));
      if (signal !== undefined) {
        if (signal.aborted) return onAbort();
        signal.addEventListener("abort", onAbort, { once: true });
      }
      this.#stats.opensSent++;
      this.#writer.send({ type: FrameType.Request, flags: CONTROL_FLAGS, corr, body });
    });
  }

  /**
   * @internal Sends one Request on `route` and waits for its terminal; on abort sends a Cancel
   * and waits (bounded) for the terminal, then rejects with the abort reason.
   */
  sendRequest(
    route: { channel: number; epoch: number },
    body: Uint8Array,
    options: SubcRequestOptions,
  ): Promise<SubcTerminal> {
    this.#ensureOpen("request");
    const signal = requestSignal(options);
    signal?.throwIfAborted();
    const corr = this.#corr();
    const { channel, epoch } = route;
    return new Promise<SubcTerminal>((resolve, reject) => {
      let graceTimer: ReturnType<typeof setTimeout> | undefined;
      let aborted = false;
      const finish = (terminal: SubcTerminal | SubcCallError | undefined): void => {
        clearTimeout(graceTimer);
        signal?.removeEventListener("abort", onAbort);
        this.#requests.delete(corr);
        if (aborted) reject(signal!.reason);
        else if (terminal === undefined || terminal instanceof SubcCallError) reject(terminal);
        else resolve(terminal);
      };
      const onAbort = (): void => {
        if (aborted || !this.#requests.has(corr)) return;
        aborted = true;
        // The terminal still comes (subc §3): it frees the module's work and the daemon's credit.
        this.#stats.cancelsSent++;
        this.#writer.send({ type: FrameType.Cancel, flags: DATA_FLAGS, channel, epoch, corr });
        graceTimer = setTimeout(() => finish(undefined), this.#cancelGraceMs);
      };
      this.#requests.set(corr, { channel, stream: [], settle: finish });
      this.#stats.requestsSent++;
      this.#writer.send({
        type: FrameType.Request,
        flags: options.flags ?? DATA_FLAGS,
        channel,
        epoch,
        corr,
        body,
      });
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  }

  /** @internal Re-opens a route's (channel, epoch) after `unknown_channel` / `stale_route_epoch`. */
  reopen(
    target: RouteTarget,
    options: OpenRouteOptions,
  ): Promise<{ channel: number; epoch: number }> {
    this.#stats.reopens++;
    return this.#open(target, options);
  }

  /** @internal Sends a route Goodbye (no body, corr 0, flags 0). */
  sendRouteGoodbye(channel: number, epoch: number): void {
    this.#writer.send({ type: FrameType.Goodbye, flags: CONTROL_FLAGS, channel, epoch, corr: 0n });
  }

  /**
   * @internal Forgets a closed route. Its requests still waiting reject with `route_closed`: after
   * the route's Goodbye the module drops their work and answers nothing.
   */
  forget(route: SubcRoute): void {
    this.#routes.delete(route);
    const closed = new SubcCallError(
      "route_closed",
      `Cannot finish the call: route ${route.channel} was closed while it waited`,
      {
        phase: "request",
        origin: "consumer",
        detail: { route_channel: route.channel, route_epoch: route.epoch },
      },
    );
    for (const p of [...this.#requests.values()]) {
      if (p.channel === route.channel) p.settle(closed);
    }
  }

  // -------------------------------------------------------------------------------------------
  // Reading
  // -------------------------------------------------------------------------------------------

  async #readLoop(): Promise<void> {
    const decoder = new FrameDecoder();
    const buf = new Uint8Array(READ_CHUNK_BYTES);
    let why: SubcCallError | undefined;
    try {
      for (;;) {
        const n = await this.#conn.read(buf);
        if (n === null) {
          decoder.end();
          break;
        }
        for (const frame of decoder.push(buf.subarray(0, n))) this.#onFrame(frame);
      }
    } catch (err) {
      if (this.#closed === undefined) {
        why = new SubcCallError(
          "connection_lost",
          `Cannot finish the call: the connection to the subc daemon broke: ${errText(err)}`,
          { phase: "request", origin: "consumer", cause: err },
        );
      }
    }
    this.#fail(
      why ?? new SubcCallError(
        "connection_lost",
        "Cannot finish the call: the subc daemon closed the connection; is it restarting?",
        { phase: "request", origin: "consumer" },
      ),
    );
    this.#writer.close();
    try {
      this.#conn.close();
    } catch {
      // Already closed.
    }
  }

  #onFrame(f: SubcFrame): void {
    if (f.type === FrameType.Ping) {
      this.#stats.pongs++;
      this.#writer.send(pongFor(f));
      return;
    }
    if (f.channel === 0) return this.#onControl(f);
    switch (f.type) {
      case FrameType.Response:
      case FrameType.Error:
      case FrameType.StreamEnd:
        return this.#onTerminal(f);
      case FrameType.StreamData: {
        const p = this.#requests.get(f.corr);
        if (p !== undefined && p.channel === f.channel) p.stream.push(f.body);
        return;
      }
      case FrameType.Goodbye:
        return this.#onRouteGoodbye(f.channel, f.epoch);
      case FrameType.Request:
        // A reverse request (module → client): this consumer serves none, and says so at once
        // rather than leave the module waiting.
        this.#writer.send({
          type: FrameType.Error,
          flags: DATA_FLAGS,
          channel: f.channel,
          epoch: f.epoch,
          corr: f.corr,
          body: encodeControlBody({
            code: "unknown_method",
            message: "Cannot serve a reverse request: this client serves no methods",
          }),
        });
        return;
      default:
        // Push, Pong, Cancel: nothing to do for a client that subscribes to nothing.
        return;
    }
  }

  #onControl(f: SubcFrame): void {
    if (f.type === FrameType.Response || f.type === FrameType.Error) {
      this.#control.get(f.corr)?.settle(f);
      return;
    }
    if (f.type === FrameType.Goodbye) {
      // The daemon is leaving: what waits now will get no answer.
      this.#fail(
        new SubcCallError(
          "connection_lost",
          "Cannot finish the call: the subc daemon said Goodbye (it is shutting down)",
          { phase: "request", origin: "daemon" },
        ),
      );
      return;
    }
    if (f.type === FrameType.Request) {
      this.#writer.send({
        type: FrameType.Error,
        flags: CONTROL_FLAGS,
        corr: f.corr,
        body: encodeControlBody({
          code: "unknown_control_op",
          message: `Cannot serve control op '${
            decodeOp(f.body) ?? "?"
          }': this client serves no control ops`,
        }),
      });
    }
  }

  #onTerminal(f: SubcFrame): void {
    const p = this.#requests.get(f.corr);
    if (p === undefined || p.channel !== f.channel) {
      this.#stats.unmatchedTerminals++;
      return;
    }
    let terminal: SubcTerminal;
    if (f.type === FrameType.Response) {
      this.#stats.terminals.response++;
      terminal = { kind: "response", body: f.body };
    } else if (f.type === FrameType.StreamEnd) {
      this.#stats.terminals.stream_end++;
      terminal = { kind: "stream_end", stream: p.stream };
    } else {
      this.#stats.terminals.error++;
      const error = readErrorBody(f.body);
      this.#stats.errorsByCode[error.code] = (this.#stats.errorsByCode[error.code] ?? 0) + 1;
      terminal = { kind: "error", error, daemonOrigin: (f.flags & FLAG_DAEMON_ORIGIN) !== 0 };
    }
    p.settle(terminal);
  }

  #onRouteGoodbye(channel: number, epoch: number): void {
    for (const route of this.#routes) {
      if (route.channel === channel && route.epoch === epoch) route.markGone();
    }
    const gone = new SubcCallError(
      "route_closed",
      `Cannot finish the call: the daemon closed route ${channel} (the module left or reloads); ` +
        "retry to open a new route",
      {
        phase: "request",
        origin: "daemon",
        detail: { route_channel: channel, route_epoch: epoch },
      },
    );
    for (const p of [...this.#requests.values()]) {
      if (p.channel === channel) p.settle(gone);
    }
  }

  #fail(error: SubcCallError): void {
    this.#closed ??= error;
    for (const p of [...this.#control.values()]) p.settle(error);
    for (const p of [...this.#requests.values()]) p.settle(error);
  }

  #ensureOpen(phase: SubcCallPhase): void {
    if (this.#closed !== undefined) throw withPhase(this.#closed, phase);
  }

  #corr(): bigint {
    return this.#nextCorr++;
  }
}

/**
 * An open route to a module through the daemon. Requests on it run concurrently, matched to their
 * terminals by corr. Close it with {@link SubcRoute.close} (a Goodbye), or close the consumer.
 */
export class SubcRoute implements AsyncDisposable {
  /** The route's target. */
  readonly target: RouteTarget;
  readonly #consumer: SubcConsumer;
  #channel: number;
  #epoch: number;
  #state: "open" | "gone" | "closed" = "open";
  #reopening: Promise<void> | undefined;

  /** @internal Use {@link SubcConsumer.openRoute}. */
  constructor(consumer: SubcConsumer, target: RouteTarget, channel: number, epoch: number) {
    this.#consumer = consumer;
    this.target = target;
    this.#channel = channel;
    this.#epoch = epoch;
  }

  /** The route's slot on this connection. */
  get channel(): number {
    return this.#channel;
  }

  /** The route's epoch. */
  get epoch(): number {
    return this.#epoch;
  }

  /** `open`; `gone` after the daemon's Goodbye (the next request re-opens); `closed` after {@link close}. */
  get state(): "open" | "gone" | "closed" {
    return this.#state;
  }

  /**
   * Sends one request body and waits for its terminal. On `unknown_channel` or
   * `stale_route_epoch` the route is re-opened once (concurrent requests share the re-open) and
   * the request resent once; a route the daemon said Goodbye to is re-opened before sending.
   *
   * @param body The request body (for Synapse, the JSON of `{method, params}`).
   * @param options Signal, timeout, flags.
   * @returns The terminal: `response`, `error` (any code but those retried), or `stream_end`.
   * @throws {SubcCallError} `connection_lost`, `route_closed`, `consumer_closed`, or a re-open's
   *   refusal (phase `open`).
   * @throws the signal's reason (a `TimeoutError` for `timeoutMs`) once the cancelled request's
   *   terminal came or the grace passed.
   */
  async request(body: Uint8Array, options: SubcRequestOptions = {}): Promise<SubcTerminal> {
    if (this.#state === "closed") {
      throw new SubcCallError("consumer_closed", "Cannot send on a closed route", {
        phase: "request",
        origin: "consumer",
      });
    }
    const signal = requestSignal(options);
    const opts = { ...options, signal, timeoutMs: undefined };
    if (this.#state === "gone") await this.#reopen(this.#channel, this.#epoch, signal);
    let sent = { channel: this.#channel, epoch: this.#epoch };
    let terminal = await this.#consumer.sendRequest(sent, body, opts);
    if (terminal.kind === "error" && REOPEN_CODES.includes(terminal.error.code)) {
      await this.#reopen(sent.channel, sent.epoch, signal);
      sent = { channel: this.#channel, epoch: this.#epoch };
      terminal = await this.#consumer.sendRequest(sent, body, opts);
    }
    return terminal;
  }

  /**
   * Calls a method of a management surface: sends `{method, params}` as JSON and reads the
   * answer.
   *
   * @param method The operation, e.g. `"embed.query"`.
   * @param params Its params (a JSON value). @default {}
   * @param options Signal, timeout.
   * @returns The Response body, parsed as JSON; for a StreamEnd terminal, the StreamData bodies
   *   parsed as JSON, in order (an array).
   * @throws {SubcCallError} for an Error terminal (`code`, `detail` as sent; `origin` `daemon`
   *   when flagged DAEMON_ORIGIN, else `module`), `invalid_response` for a body that is not
   *   UTF-8 JSON, and what {@link request} throws.
   */
  async call(
    method: string,
    params: unknown = {},
    options: SubcRequestOptions = {},
  ): Promise<unknown> {
    const body = ENCODER.encode(JSON.stringify({ method, params: params ?? {} }));
    const terminal = await this.request(body, options);
    if (terminal.kind === "error") throw terminalError(terminal, method);
    if (terminal.kind === "stream_end") return terminal.stream.map((b) => parseJson(b, method));
    return parseJson(terminal.body, method);
  }

  /**
   * Closes the route: a Goodbye on `(channel, epoch)`; requests still waiting on it reject with
   * `route_closed` (the module drops their work and answers nothing). Idempotent.
   */
  close(): Promise<void> {
    if (this.#state !== "closed") {
      if (this.#state === "open") this.sendGoodbye();
      this.#state = "closed";
      this.#consumer.forget(this);
    }
    return Promise.resolve();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  /** @internal The consumer's Goodbye on close. */
  sendGoodbye(): void {
    if (this.#state === "open") this.#consumer.sendRouteGoodbye(this.#channel, this.#epoch);
    this.#state = "closed";
  }

  /** @internal The daemon said Goodbye on this route. */
  markGone(): void {
    if (this.#state === "open") this.#state = "gone";
  }

  /** Re-opens once per stale (channel, epoch): concurrent requests share one route.open. */
  async #reopen(channel: number, epoch: number, signal: AbortSignal | undefined): Promise<void> {
    if (this.#channel !== channel || this.#epoch !== epoch) return; // someone already did
    this.#reopening ??= (async () => {
      try {
        const next = await this.#consumer.reopen(this.target, { signal });
        this.#channel = next.channel;
        this.#epoch = next.epoch;
        if (this.#state === "gone") this.#state = "open";
      } finally {
        this.#reopening = undefined;
      }
    })();
    await this.#reopening;
  }
}

/**
 * The SubcCallError of an Error terminal.
 *
 * @param terminal An `error` terminal.
 * @param method The method called, for the message.
 * @returns The error (phase `request`).
 */
export function terminalError(
  terminal: Extract<SubcTerminal, { kind: "error" }>,
  method: string,
): SubcCallError {
  const e = terminal.error;
  return new SubcCallError(
    e.code,
    `Cannot call '${method}' over the subc bus: ${e.code}: ${e.message}`,
    {
      phase: "request",
      origin: terminal.daemonOrigin ? "daemon" : "module",
      remoteMessage: e.message,
      ...(e.detail === undefined ? {} : { detail: e.detail }),
    },
  );
}

/**
 * The default route.open identity (subc §4): `{project_root: cwd, harness: "ck-synapse",
 * session: "ck-synapse-<pid>"}`.
 *
 * @returns The identity.
 */
export function defaultIdentity(): ConsumerIdentity {
  return {
    project_root: Deno.cwd(),
    harness: CONSUMER_HARNESS,
    session: `${CONSUMER_HARNESS}-${Deno.pid}`,
  };
}

/**
 * `consumer_identity` when this process runs under the daemon with a launch nonce:
 * `{module_id: $SUBC_MODULE_ID (else "synapse"), launch_nonce}`; undefined when there is no
 * nonce, or it cannot be read (an inherited `SUBC_LAUNCH_NONCE_FD` whose pipe is not ours).
 *
 * @param env Environment source; when given, the nonce is read from it afresh (no descriptor
 *   cache). @default the process environment, through the cached {@link launchNonce}
 * @returns The identity, or undefined.
 */
export function defaultLaunchIdentity(env?: EnvSource): ConsumerLaunchIdentity | undefined {
  let nonce;
  try {
    nonce = env === undefined ? launchNonce() : readLaunchNonce({ env });
  } catch (err) {
    if (err instanceof SubcWireError) return undefined;
    throw err;
  }
  if (nonce === undefined) return undefined;
  return { module_id: subcModuleId(env), launch_nonce: nonce.value };
}

function requestSignal(options: SubcRequestOptions): AbortSignal | undefined {
  const signals: AbortSignal[] = [];
  if (options.signal !== undefined) signals.push(options.signal);
  if (options.timeoutMs !== undefined) {
    if (!Number.isFinite(options.timeoutMs) || options.timeoutMs <= 0) {
      throw new RangeError(
        `Cannot send the request as 'timeoutMs' must be a positive number: received ${options.timeoutMs}`,
      );
    }
    signals.push(AbortSignal.timeout(options.timeoutMs));
  }
  return signals.length === 0
    ? undefined
    : signals.length === 1
    ? signals[0]
    : AbortSignal.any(signals);
}

function readErrorBody(body: Uint8Array): ErrorBody {
  try {
    const { value } = decodeControlBody(body);
    const parsed = ErrorBodySchema.safeParse(value);
    if (parsed.success) return parsed.data;
    return {
      code: "invalid_response",
      message: "an Error frame whose body is not {code, message}",
    };
  } catch {
    return { code: "invalid_response", message: "an Error frame whose body is not UTF-8 JSON" };
  }
}

function parseJson(body: Uint8Array, method: string): unknown {
  try {
    return JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(body));
  } catch (err) {
    throw new SubcCallError(
      "invalid_response",
      `Cannot read the answer to '${method}': the Response body is not UTF-8 JSON`,
      { phase: "request", origin: "module", cause: err },
    );
  }
}

function decodeOp(body: Uint8Array): string | undefined {
  try {
    return decodeControlBody(body).op;
  } catch {
    return undefined;
  }
}

function describeTarget(t: RouteTarget): string {
  return t.kind === "management_surface" ? `'${t.module_id}'` : `${t.kind} of '${t.module_id}'`;
}

function withPhase(e: SubcCallError, phase: SubcCallPhase): SubcCallError {
  if (e.phase === phase) return e;
  return new SubcCallError(e.code, e.message, {
    phase,
    origin: e.origin,
    attempts: e.attempts,
    ...(e.remoteMessage === undefined ? {} : { remoteMessage: e.remoteMessage }),
    ...(e.detail === undefined ? {} : { detail: e.detail }),
    ...(e.cause === undefined ? {} : { cause: e.cause }),
  });
}

function isFrame(v: unknown): v is SubcFrame {
  return typeof v === "object" && v !== null && "type" in v && "body" in v;
}

function positive(value: number | undefined, fallback: number, name: string): number {
  const v = value ?? fallback;
  if (!Number.isFinite(v) || v <= 0) {
    throw new RangeError(`Cannot use '${name}' as it must be a positive number: received ${v}`);
  }
  return v;
}

function errText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
