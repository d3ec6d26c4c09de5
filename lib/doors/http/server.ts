/**
 * The HTTP front door: a loopback-only `Deno.serve` that decodes requests into the ops
 * dispatcher and encodes its outcomes (docs/operations.md). No operation logic lives here.
 *
 * Routes: one table, lib/doors/http/routes.ts (`HTTP_ROUTES`: method, path, adapter); an unknown path is
 * 404 `unknown_method` listing them, in the error body of the API its prefix belongs to
 * (lib/doors/http/unrouted.ts). The native door `POST /v1/ops/<method>` takes the params JSON
 * (empty body = `{}`) and answers the wire JSON exactly — `{"result": …}` (200), a semantic error
 * `{"result": {"module_generation", "error": WireError}}` or a channel error `{code, message}`,
 * each with the status of {@link httpStatusFor}. The other routes map an upstream API's shapes
 * (OpenAI, Cohere/Jina, TEI, llama.cpp, Ollama) onto the same dispatcher, each in its own module;
 * `GET /health` is the service status of lib/ops/status.ts (it never touches an engine) and
 * `GET /metrics` the Prometheus text exposition (lib/ops/metrics_exposition.ts).
 *
 * The door holds no instance: at {@link BoundHttpServer.attach} it takes the instance's
 * {@link DoorBackend} (`synapse.door("http")`, lib/ops/door_backend.ts) and sees it through that
 * alone — its calls (counted `door="http"`, each answered with its request facts), the service
 * status, the module generation, the `http` config section, the log and the metrics text.
 *
 * Transient errors carry `Retry-After` (whole seconds, rounded up) and `retry-after-ms`;
 * results that carry a fingerprint carry `x-synapse-fingerprint`. The doors that serve a model with
 * the upstream APIs' bodies (all but `/v1/ops`) take the routing params as `x-synapse-*` request
 * headers (lib/doors/http/routing_headers.ts); `/v1/ops` refuses those headers (its params are in the
 * body). Every request is logged in one
 * line at `info` (`/health` and `/metrics` at `debug`): the request log of every door,
 * lib/doors/request_log.ts.
 *
 * Who may call what (field report F39): a call of an `owner` operation (`OPERATIONS[m].access`:
 * every mutating one) must show the owner's local key (lib/doors/http/owner_key.ts) as
 * `Authorization: Bearer KEY` or `X-Synapse-Key: KEY`, and with `http.require_key_for_queries`
 * every request must; else 401 `unauthorized` in the route's own error shape. On a unix socket
 * (`path`, 0600) no key is asked: only the owner can connect.
 *
 * The socket is bound before the instance starts ({@link bindHttp}), so a port already in use
 * fails at once, naming the address, before a store is opened; until an instance is attached the
 * door answers 503 `module_not_initialized`.
 *
 * @module
 */
import { invalidRequest, SynapseError } from "../../contract/errors.ts";
import { outcomeOf } from "../../ops/dispatcher.ts";
import type { OpOutcome } from "../../ops/dispatcher.ts";
import {
  type DoorBackend,
  METRICS_CONTENT_TYPE,
  type RequestFacts,
} from "../../ops/door_backend.ts";
import { type LogSink, stderrLog } from "../../log/log.ts";
import { SYNAPSE_VERSION } from "../../synapse.ts";
import type { Synapse } from "../../synapse.ts";
import { HttpRefusal, MAX_BODY_BYTES, readJsonBody } from "../_request_body.ts";
import { JsonBodyParser } from "../_json_body_parser.ts";
import { cohereEmbedRoute } from "./cohere_embed.ts";
import {
  embeddingsAnswer,
  embeddingsCall,
  modelAnswer,
  modelsAnswer,
  openAiError,
} from "./openai.ts";
import { type CompletionsDoor, serveCompletions } from "./openai_completions.ts";
import {
  findRoute,
  type HttpRoute,
  OPS_PREFIX,
  type RouteAdapter,
  routeParam,
  unknownRoute,
} from "./routes.ts";
import { unroutedError } from "./unrouted.ts";
import type { OpenAiAnswer } from "./openai.ts";
import { httpStatusFor } from "./status_table.ts";
import {
  type AdapterAnswer,
  type AdapterIo,
  type AdapterRoute,
  promptHeader,
  ROUTED_OPS,
} from "./_adapter.ts";
import { refuseRoutingHeaders, routingFromHeaders } from "./routing_headers.ts";
import { rerankShapesRoute } from "./rerank_shapes.ts";
import { teiRoute } from "./tei.ts";
import { tokenizeRoute } from "./tokenize_doors.ts";
import { ollamaRoute } from "./ollama.ts";
import { clip, logRequest } from "../request_log.ts";
import { OPERATIONS } from "../../ops/dispatcher.ts";
import { keyOfRequest, OWNER_KEY_HEADER, sameKey } from "./owner_key.ts";
import { type Front, type FrontTimeouts, startFront } from "./_front.ts";
import { defaultWorkerRuntimeDir } from "../../engines/llama/launch.ts";
import { prepareRuntimeDir, privateDirFault } from "../../workers/runtime_dir.ts";
import { dirname } from "node:path";

export { float32Base64LE } from "./openai.ts";

/**
 * What the HTTP door needs from a Synapse instance: its {@link DoorBackend}, made once at attach
 * (`door("http")`); the door reads nothing else of it.
 */
export type HttpBackend = Pick<Synapse, "door">;

/** Address the server is bound to. */
export interface ListenAddress {
  hostname: string;
  /** The bound port (the ephemeral one when 0 was asked). */
  port: number;
}

/** Options of {@link serveHttp} and {@link bindHttp}. */
export interface ServeHttpOptions {
  /**
   * Loopback address to bind: `127.0.0.1`, `::1` (or `[::1]`) or `localhost`.
   *
   * @default "127.0.0.1"
   */
  hostname?: string;
  /** TCP port; 0 picks an ephemeral one. @default 0 */
  port?: number;
  /**
   * Serve on a unix socket at this path instead of TCP (`serve --http unix:PATH`): the socket
   * is made 0600, in a directory of this user that no one else can write (checked as the worker
   * runtime dir is, lib/workers/runtime_dir.ts); a stale socket of this user there is replaced.
   * Only this user can connect, so the door needs no key: every operation is served.
   */
  path?: string;
  /**
   * The owner's local key (lib/doors/http/owner_key.ts): a call of an `owner` operation
   * (`OPERATIONS[m].access`), and with `http.require_key_for_queries` every request, must show
   * it (`Authorization: Bearer KEY` or `X-Synapse-Key: KEY`), else 401 `unauthorized`.
   *
   * @default {none: over TCP the owner operations are refused, whatever a caller sends}
   */
  ownerKey?: string;
  /** Shuts the server down when aborted. */
  signal?: AbortSignal;
  /** Called once the socket is bound. */
  onListen?: (address: ListenAddress) => void;
  /**
   * Largest request body in bytes, counted while it streams in.
   *
   * @default {the config's `http.max_body_bytes` (67108864)}
   */
  maxBodyBytes?: number;
  /**
   * The unix socket `Deno.serve` listens on behind the TCP front (`lib/doors/http/_front.ts`), in the
   * worker runtime dir (0700): `http-<pid>.sock` for the first server of a process (the path the
   * `ck-synapse` launcher grants), `http-<pid>-<n>.sock` for later ones.
   *
   * @default {`<worker runtime dir>/http-<pid>.sock`}
   */
  backendSocket?: string;
  /**
   * Where the request log goes (one line per request, lib/doors/request_log.ts).
   *
   * @default {the instance's log; stderr, filtered by CK_LOG, before one is attached}
   */
  log?: LogSink;
}

/** A running HTTP server. */
export interface HttpServer extends AsyncDisposable {
  /** Bound hostname (`unix` on a unix socket). */
  readonly hostname: string;
  /** Bound port (0 on a unix socket). */
  readonly port: number;
  /** The unix socket path, when it serves on one. */
  readonly path?: string;
  /** Its base URL: `http://HOST:PORT`, or `unix:PATH` on a unix socket. */
  readonly url: string;
  /** Resolves when the server has stopped. */
  readonly finished: Promise<void>;
  /** Stops accepting, lets in-flight requests finish, and resolves when stopped. Idempotent. */
  shutdown(): Promise<void>;
}

/** A bound server that serves an instance once one is attached. */
export interface BoundHttpServer extends HttpServer {
  /**
   * Starts serving `synapse`; until then every route answers 503 `module_not_initialized`
   * (`/health`: `loading`, "the instance is starting").
   *
   * @param options `ownerKey`: the owner's local key, when it was not known at bind time
   *   (`serve` makes it once the instance started, so a failed start leaves no file behind).
   * @throws {Error} "… This is a bug" when an instance is already attached.
   */
  attach(synapse: HttpBackend, options?: { ownerKey?: string }): void;
}

/**
 * True for the hostnames the HTTP door may bind or a client may call: `localhost`, `::1` (bare
 * or bracketed, any spelling) and `127.0.0.1`.
 *
 * @param hostname A hostname or IP literal.
 * @returns True when binding or calling it stays on this machine.
 */
export function isLoopbackHostname(hostname: string): boolean {
  const host = hostname.startsWith("[") && hostname.endsWith("]")
    ? hostname.slice(1, -1)
    : hostname;
  if (host.toLowerCase() === "localhost" || host === "127.0.0.1") return true;
  if (host.includes(":")) {
    try {
      return new URL(`http://[${host}]/`).hostname === "[::1]";
    } catch {
      return false;
    }
  }
  // Other 127.0.0.0/8 addresses are loopback too, but the launcher's network permission names
  // exactly 127.0.0.1, localhost and ::1, so only those are accepted.
  return false;
}

/**
 * Serves a Synapse instance over HTTP on a loopback address: {@link bindHttp}, then
 * {@link BoundHttpServer.attach}.
 *
 * @param synapse The instance; the server never disposes it.
 * @param options Address, shutdown signal, body cap and request log.
 * @returns The running server, already bound.
 * @throws {SynapseError} channel `invalid_request` for a non-loopback hostname, a bad port, or an
 *   address that cannot be bound (in use, not permitted), naming the address.
 *
 * @example Serve on an ephemeral port
 * ```ts ignore
 * const server = serveHttp(synapse, { port: 0 });
 * const res = await fetch(`http://127.0.0.1:${server.port}/health`);
 * await server.shutdown();
 * ```
 */
export function serveHttp(synapse: HttpBackend, options: ServeHttpOptions = {}): HttpServer {
  const server = bindHttp(options);
  server.attach(synapse);
  return server;
}

/**
 * Binds the HTTP door's socket before any instance exists, so that an address already in use is
 * refused at once, naming it — before a store is opened in the data home (`serve` binds first,
 * then starts the instance and {@link BoundHttpServer.attach}es it).
 *
 * @param options Address, shutdown signal, body cap and request log.
 * @returns The bound server, answering 503 `module_not_initialized` until an instance is attached.
 * @throws {SynapseError} channel `invalid_request` for a non-loopback hostname or a bad port;
 *   channel `invalid_request` `{field: "http", address, reason: "address_in_use" |
 *   "address_not_permitted" | "bind_failed"}` when the socket cannot be bound.
 */
export function bindHttp(options: ServeHttpOptions = {}): BoundHttpServer {
  const hostname = options.hostname ?? "127.0.0.1";
  const port = options.port ?? 0;
  if (options.path !== undefined) prepareSocketPath(options.path);
  else if (!isLoopbackHostname(hostname)) {
    throw invalidRequest(
      `Cannot listen on '${hostname}': the HTTP door binds loopback addresses only (127.0.0.1, ::1, localhost)`,
      { field: "hostname", hostname },
    );
  }
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw invalidRequest(`Cannot listen on port ${port}: a port is an integer in 0..65535`, {
      field: "port",
    });
  }
  // Bodies over 1 MiB are decoded and parsed on a worker thread (F21); stopped with the server.
  const parser = new JsonBodyParser();
  const door: Door = {
    backend: undefined,
    parser,
    maxBodyBytes: options.maxBodyBytes,
    log: options.log,
    startedSec: Math.floor(Date.now() / 1000),
    ownerKey: options.ownerKey,
    unix: options.path !== undefined,
    front: undefined,
  };
  const bindHost = hostname.startsWith("[") ? hostname.slice(1, -1) : hostname;
  let server: Deno.HttpServer<Deno.UnixAddr>;
  const onError = function onError(err: unknown): Response {
    return errorResponse(
      new SynapseError("encode_failed", `Cannot answer: ${errorMessage(err)}`, { cause: err }),
      door.backend,
    );
  };
  const handle = function handle(req: Request): Promise<Response> {
    return handleLogged(door, req);
  };
  // On TCP, the front holds the loopback port and enforces the header, body and idle timeouts
  // that Deno.serve has no setting for, and tells the door when a client hung up
  // (lib/doors/http/_front.ts); Deno.serve listens behind it on a unix socket in the 0700 worker
  // runtime dir, which no other user can reach. The owner's own unix socket door (0600, no
  // other user can connect) is served by Deno.serve directly.
  const timeouts: FrontTimeouts = { ...DEFAULT_HTTP_TIMEOUTS };
  let front: Front | undefined;
  let socketPath: string;
  try {
    if (options.path === undefined) {
      front = startFront({ hostname: bindHost, port, backend: "", timeouts });
      socketPath = options.backendSocket ?? nextBackendSocket();
      prepareRuntimeDir(dirname(socketPath));
      try {
        Deno.removeSync(socketPath);
      } catch { /* none left by an earlier process with this pid */ }
      front.setBackend(socketPath);
    } else socketPath = options.path;
    door.front = front;
    const listening = front;
    server = Deno.serve({
      path: socketPath,
      transport: "unix",
      ...(options.signal ? { signal: options.signal } : {}),
      onListen: function onListen(): void {
        // Made with the umask's mode: others cannot connect before this (connecting needs
        // write permission on the socket, which 0755 does not give them).
        Deno.chmodSync(socketPath, 0o600);
        options.onListen?.(
          listening === undefined
            ? { hostname: "unix", port: 0 }
            : { hostname: listening.addr.hostname, port: listening.addr.port },
        );
      },
      onError,
    }, handle);
  } catch (err) {
    parser.dispose();
    front?.close();
    throw bindError(err, options.path === undefined ? hostname : `unix:${options.path}`, port);
  }
  Deno.chmodSync(socketPath, 0o600);
  const stopped = (): void => {
    parser.dispose();
    front?.close();
    try {
      Deno.removeSync(socketPath);
    } catch { /* gone already */ }
  };
  server.finished.then(stopped, stopped);
  if (front !== undefined) {
    const f = front;
    options.signal?.addEventListener("abort", () => f.stopAccepting(), { once: true });
  }
  const tcp = front?.addr;
  const host = tcp === undefined ? "unix" : tcp.hostname;
  const url = tcp === undefined
    ? `unix:${options.path}`
    : `http://${host.includes(":") ? `[${host}]` : host}:${tcp.port}`;
  let shutdown: Promise<void> | undefined;
  return {
    hostname: host,
    port: tcp?.port ?? 0,
    ...(options.path === undefined ? {} : { path: options.path }),
    url,
    finished: server.finished,
    attach(synapse: HttpBackend, attachOptions: { ownerKey?: string } = {}): void {
      if (door.backend !== undefined) {
        throw new Error(
          "An HTTP server serves one instance; attach() was called twice. This is a bug",
        );
      }
      if (attachOptions.ownerKey !== undefined) door.ownerKey = attachOptions.ownerKey;
      // Every call through this door is counted with door="http" (synapse_requests_total).
      const backend = synapse.door("http");
      door.backend = backend;
      const http = backend.http;
      timeouts.headerMs = http.header_timeout_ms;
      timeouts.bodyMs = http.body_timeout_ms;
      timeouts.idleMs = http.idle_timeout_ms;
    },
    shutdown(): Promise<void> {
      front?.stopAccepting();
      shutdown ??= server.shutdown().then(() => server.finished);
      return shutdown;
    },
    [Symbol.asyncDispose](): Promise<void> {
      return this.shutdown();
    },
  };
}

/**
 * Checks where a unix socket of the door may be made: its directory must be a real directory of
 * this user that no one else can write, under parents no one else can swap out (the worker
 * runtime dir's rules, lib/workers/runtime_dir.ts); a socket of this user left at the path by a
 * server that died is removed, anything else there is refused.
 *
 * @throws {SynapseError} channel `invalid_request` `{field: "http", path, reason}`.
 */
function prepareSocketPath(path: string): void {
  const refuse = (reason: string, why: string): never => {
    throw new SynapseError("invalid_request", `Cannot listen on unix:${path}: ${why}`, {
      channel: true,
      details: { field: "http", path, reason },
    });
  };
  if (!path.startsWith("/")) {
    refuse("not_absolute", "give an absolute path (unix:/run/…/synapse.sock)");
  }
  const dir = path.slice(0, path.lastIndexOf("/")) || "/";
  let fault;
  try {
    fault = privateDirFault(dir);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) {
      refuse("no_directory", `its directory ${dir} does not exist`);
    }
    throw err;
  }
  if (fault !== undefined) {
    refuse(
      fault.reason,
      fault.at === dir ? `its directory ${dir} is unsafe: ${fault.why}` : fault.why,
    );
  }
  let info: Deno.FileInfo;
  try {
    info = Deno.lstatSync(path);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return;
    throw err;
  }
  if (!info.isSocket || info.uid !== Deno.uid()) {
    refuse("path_in_use", "something else is at that path (not a socket of this user); remove it");
  }
  // A live server on it answers; a dead one's socket is ours to replace.
  Deno.removeSync(path);
}

/**
 * Defaults of the HTTP door's timeouts, ms (config `http.header_timeout_ms`,
 * `http.body_timeout_ms`, `http.idle_timeout_ms`).
 */
export const DEFAULT_HTTP_TIMEOUTS: Readonly<FrontTimeouts> = Object.freeze({
  headerMs: 10_000,
  bodyMs: 30_000,
  idleMs: 30_000,
});

let backendCount = 0;

/** `<runtime dir>/http-<pid>.sock`, then `http-<pid>-<n>.sock` (see `backendSocket`). */
function nextBackendSocket(): string {
  const n = backendCount++;
  return `${defaultWorkerRuntimeDir()}/http-${Deno.pid}${n === 0 ? "" : `-${n}`}.sock`;
}

/** The typed refusal of an address that cannot be bound, naming it and what to do. */
function bindError(err: unknown, hostname: string, port: number): SynapseError {
  const address = hostname.startsWith("unix:")
    ? hostname
    : hostname.includes(":") && !hostname.startsWith("[")
    ? `[${hostname}]:${port}`
    : `${hostname}:${port}`;
  const [reason, why] = err instanceof Deno.errors.AddrInUse
    ? ["address_in_use", "the address is already in use (another Synapse, or another program)"]
    : err instanceof Deno.errors.PermissionDenied || err instanceof Deno.errors.NotCapable
    ? ["address_not_permitted", `binding it is not permitted (${errorMessage(err)})`]
    : ["bind_failed", errorMessage(err)];
  return new SynapseError(
    "invalid_request",
    `Cannot listen on ${address}: ${why}; stop what holds it or pick another port (--http ${hostname}:0 picks a free one)`,
    { channel: true, cause: err, details: { field: "http", address, reason } },
  );
}

/** The door's state: the attached instance (once there is one) and how it reads bodies. */
interface Door {
  /** The attached instance's backend (lib/ops/door_backend.ts), once there is one. */
  backend: DoorBackend | undefined;
  parser: JsonBodyParser;
  maxBodyBytes: number | undefined;
  log: LogSink | undefined;
  /** When the server started, Unix seconds (`created` of `GET /v1/models`). */
  startedSec: number;
  /** The owner's local key ({@link ServeHttpOptions.ownerKey}). */
  ownerKey: string | undefined;
  /** True on a unix socket (0600: only the owner connects, no key asked). */
  unix: boolean;
  /**
   * The TCP front (lib/doors/http/_front.ts), which also tells when a request's client hung up (a
   * hang-up Deno.serve's own signal misses); undefined on the owner's unix socket door.
   */
  front: Front | undefined;
}

/** What one request did, for its log line; `route` fills it in. */
interface RequestRecord {
  /** The operation it ran (`embed.batch` for `/v1/embeddings`), when it got that far. */
  op?: string;
  /** The params the operation got (counted, never logged). */
  params?: unknown;
  /** The outcome's facts (model, items, tokens, times). */
  facts?: RequestFacts | undefined;
  /** The error it was answered with, when it did not reach or finish an operation. */
  error?: SynapseError;
  /** Set for a response that streams past the handler: the log line waits for it. */
  settled?: Promise<void>;
  /** The client went away before it was answered (logged `cancelled`, whatever the error). */
  cancelled?: boolean;
}

/** The status logged for a request whose client hung up before its answer (nginx's 499). */
const CLIENT_CLOSED_REQUEST = 499;

async function handleLogged(door: Door, req: Request): Promise<Response> {
  const started = performance.now();
  const path = new URL(req.url).pathname;
  const log = door.log ?? door.backend?.log ?? stderrLog;
  log("debug", "synapse.http", "request start", {
    method: req.method,
    path: clip(path),
    content_length: req.headers.get("content-length") ?? "-",
  });
  const record: RequestRecord = {};
  // The request's signal, also aborted when the front saw its client go (lib/doors/http/_front.ts).
  const watched = door.front?.watch(req) ?? { signal: req.signal, [Symbol.dispose]() {} };
  let res: Response;
  try {
    res = await route(door, req, path, record, watched.signal);
    // Answered to nobody: the client went away while it was served.
    if (watched.signal.aborted) record.cancelled = true;
  } finally {
    if (record.settled === undefined) watched[Symbol.dispose]();
  }
  void record.settled?.finally(() => watched[Symbol.dispose]());
  // A request whose client went away before its answer is counted and logged 499 (client closed
  // request, as nginx logs it): the status it would have had reached nobody.
  const status = record.cancelled ? CLIENT_CLOSED_REQUEST : res.status;
  door.backend?.countHttpResponse(status);
  if (record.settled === undefined) {
    logHttpRequest(log, req.method, path, record, status, performance.now() - started);
  } else {
    void record.settled.then(() =>
      logHttpRequest(log, req.method, path, record, status, performance.now() - started)
    );
  }
  return res;
}

/**
 * Writes the request's line of the request log (lib/doors/request_log.ts): target
 * `synapse.http`, `method path` before the facts, `status` after the outcome, at `info`
 * (`/health` and `/metrics` at `debug`, so a prober or a scraper does not fill the log). A
 * request that reached no operation has the code of its refusal as its outcome (`ok` for an
 * answer under 400, e.g. `/health`).
 */
function logHttpRequest(
  log: LogSink,
  method: string,
  path: string,
  record: RequestRecord,
  status: number,
  totalMs: number,
): void {
  logRequest(log, {
    target: "synapse.http",
    level: path === "/health" || path === "/metrics" ? "debug" : "info",
    lead: { method, path },
    op: record.op,
    facts: record.facts,
    cancelled: record.cancelled,
    unreached: record.error?.code ?? (status < 400 ? "ok" : "-"),
    tail: { status },
    totalMs,
  });
}

/** How a route's adapter serves a request that reached it (the method is checked before). */
type Serve = (
  door: Door,
  req: Request,
  record: RequestRecord,
  signal: AbortSignal,
) => Promise<Response>;

/** The API-shaped doors' routes by path, one lookup per module. */
const ADAPTER_ROUTES: Readonly<
  Record<
    "rerank_shapes" | "cohere_embed" | "tei" | "tokenize_doors" | "ollama",
    (path: string) => AdapterRoute | undefined
  >
> = {
  rerank_shapes: rerankShapesRoute,
  cohere_embed: cohereEmbedRoute,
  tei: teiRoute,
  tokenize_doors: tokenizeRoute,
  ollama: ollamaRoute,
};

/** The door's own adapters (the native, OpenAI, health and metrics routes). */
const SERVE: Readonly<
  Record<Exclude<RouteAdapter, keyof typeof ADAPTER_ROUTES>, Serve>
> = {
  ops: serveOps,
  openai: (door, req, record, signal) => {
    const path = new URL(req.url).pathname;
    const entry = findRoute(path)!;
    if (entry.path === "/v1/models") return openAiModels(door, record, signal);
    if (entry.path === "/v1/models/<id>") {
      return openAiModel(door, routeParam(entry, path), record, signal);
    }
    return openAiEmbeddings(door, req, record, signal);
  },
  openai_completions: serveCompletionsRoute,
  health: async (door, req) => {
    const res = health(door.backend);
    if (req.method !== "HEAD") return res;
    // HEAD: the headers a GET would get, its Content-Length included (RFC 9110 §9.3.2).
    const bytes = (await res.arrayBuffer()).byteLength;
    res.headers.set("content-length", String(bytes));
    return new Response(null, { status: res.status, headers: res.headers });
  },
  metrics: async (door, req) => {
    const text = await attached(door).metricsText();
    const headers = new Headers({
      "content-type": METRICS_CONTENT_TYPE,
      "cache-control": "no-store",
    });
    if (req.method !== "HEAD") return new Response(text, { status: 200, headers });
    headers.set("content-length", String(new TextEncoder().encode(text).byteLength));
    return new Response(null, { status: 200, headers });
  },
};

/** The API-shaped route of a table entry, or undefined for the door's own adapters. */
function adapterRouteOf(route: HttpRoute): AdapterRoute | undefined {
  if (!Object.hasOwn(ADAPTER_ROUTES, route.adapter)) return undefined;
  const found = ADAPTER_ROUTES[route.adapter as keyof typeof ADAPTER_ROUTES](route.path);
  if (found === undefined) {
    throw new Error(`${route.method} ${route.path} has no ${route.adapter} route. This is a bug`);
  }
  return found;
}

async function route(
  door: Door,
  req: Request,
  path: string,
  record: RequestRecord,
  signal: AbortSignal,
): Promise<Response> {
  // The one route table (lib/doors/http/routes.ts): each route's method, path and adapter.
  const entry = findRoute(path);
  const adapter = entry === undefined ? undefined : adapterRouteOf(entry);
  const openAi = entry?.adapter === "openai" || entry?.adapter === "openai_completions";
  try {
    checkHostAndOrigin(req);
    checkAccess(door, req, path);
    if (entry === undefined) {
      throw unknownRoute(req.method, path);
    }
    if (adapter !== undefined) return await serveAdapter(door, req, adapter, record, signal);
    if (entry.op !== undefined) record.op = entry.op;
    if (!(entry.head && req.method === "HEAD")) requireMethod(req, entry.method);
    return await SERVE[entry.adapter as keyof typeof SERVE](door, req, record, signal);
  } catch (err) {
    const e = doorError(door, err, path);
    record.error = e;
    if (openAi) return openAiResponse(openAiError(e));
    if (adapter !== undefined) return openAiResponse(adapter.error(e));
    // No route: the body of the API the path's prefix belongs to (lib/doors/http/unrouted.ts).
    const unrouted = entry === undefined ? unroutedError(path, e) : undefined;
    if (unrouted !== undefined) return openAiResponse(unrouted);
    return errorResponse(e, door.backend);
  }
}

/**
 * `GET /v1/models/{id}`: OpenAI's model object, mapped from `models.list`
 * (lib/doors/http/openai.ts); the id is the path's URL-decoded rest (`BAAI%2Fbge-small`).
 */
async function openAiModel(
  door: Door,
  rawId: string,
  record: RequestRecord,
  signal: AbortSignal,
): Promise<Response> {
  let id: string;
  try {
    id = decodeURIComponent(rawId);
  } catch {
    throw new SynapseError(
      "invalid_request",
      `Cannot describe model '${rawId}': the id in the path is not valid URL encoding`,
      { channel: true, details: { field: "model", reason: "malformed_path" } },
    );
  }
  const backend = attached(door);
  record.params = {};
  const { outcome, facts } = await backend.call("models.list", {}, { signal });
  record.facts = facts;
  return openAiResponse(modelAnswer(outcome, id, door.startedSec));
}

/** `GET /v1/models`: OpenAI's model list, mapped from `models.list` (lib/doors/http/openai.ts). */
async function openAiModels(
  door: Door,
  record: RequestRecord,
  signal: AbortSignal,
): Promise<Response> {
  const backend = attached(door);
  record.params = {};
  const { outcome, facts } = await backend.call("models.list", {}, { signal });
  record.facts = facts;
  return openAiResponse(modelsAnswer(outcome, door.startedSec));
}

/**
 * `POST /v1/completions`, `POST /v1/chat/completions`: OpenAI's completions and chat over
 * `microllm.oneshot` (lib/doors/http/openai_completions.ts). The request's facts are the instance's
 * own for the call (answered with its outcome), known when the generation ended.
 */
async function serveCompletionsRoute(
  door: Door,
  req: Request,
  record: RequestRecord,
  signal: AbortSignal,
): Promise<Response> {
  const path = new URL(req.url).pathname as CompletionsDoor;
  const backend = attached(door);
  const routing = routingFromHeaders(req.headers);
  const body = await readJsonBody(req, bodyOptions(door));
  const served = await serveCompletions(backend, path, body, signal, routing);
  record.params = served.params;
  // The facts the instance worked out for the call (once per call), for the log line; a live
  // stream's line waits for the generation's end.
  const facts = served.facts.then((f) => {
    if (f !== undefined) record.facts = f;
  });
  if (served.live) record.settled = facts;
  else await facts;
  return served.response;
}

/** `POST /v1/ops/<method>`: the native door, the wire JSON exactly. */
async function serveOps(
  door: Door,
  req: Request,
  record: RequestRecord,
  signal: AbortSignal,
): Promise<Response> {
  const path = new URL(req.url).pathname;
  const method = decodeMethod(path.slice(OPS_PREFIX.length));
  record.op = method;
  refuseRoutingHeaders(req.headers);
  const backend = attached(door);
  const params = await readJsonBody(req, bodyOptions(door));
  record.params = params;
  const { outcome, facts } = await backend.call(method, params, { signal });
  record.facts = facts;
  return outcomeResponse(outcome);
}

/**
 * The attached instance's backend. @throws {SynapseError} `module_not_initialized` before one is.
 */
function attached(door: Door): DoorBackend {
  if (door.backend === undefined) {
    throw new SynapseError(
      "module_not_initialized",
      "Cannot serve yet: the instance is starting; retry shortly",
      { retryAfterMs: 250 },
    );
  }
  return door.backend;
}

function bodyOptions(door: Door): { maxBytes: number; parser: JsonBodyParser } {
  const maxBytes = door.maxBodyBytes ?? door.backend?.http.max_body_bytes ?? MAX_BODY_BYTES;
  return { maxBytes, parser: door.parser };
}

/**
 * A failure of the door itself as its stable error: a {@link SynapseError} as it is; anything else
 * is a bug, logged with its stack and answered `internal_error` (as the dispatcher does).
 */
function doorError(door: Door, err: unknown, path: string): SynapseError {
  if (err instanceof SynapseError) return err;
  const log = door.log ?? door.backend?.log ?? stderrLog;
  const o = outcomeOf({ moduleGeneration: door.backend?.moduleGeneration ?? 0, log }, err, path);
  if (o.kind === "result") throw new Error("outcomeOf() answered a result. This is a bug");
  return o.error;
}

/**
 * Refuses requests a web page could make: a `Host` that is not a loopback name defeats DNS
 * rebinding, and a cross-site `Origin` (a page in a browser) is refused outright.
 */
function checkHostAndOrigin(req: Request): void {
  const host = req.headers.get("host");
  if (host !== null && !isLoopbackHostname(hostOnly(host))) {
    throw new HttpRefusal(403, `Cannot serve Host '${host}': Synapse answers loopback names only`, {
      field: "host",
    });
  }
  const origin = req.headers.get("origin");
  if (origin !== null) {
    let ok = false;
    try {
      ok = isLoopbackHostname(new URL(origin).hostname);
    } catch { /* "null" or malformed */ }
    if (!ok) {
      throw new HttpRefusal(
        403,
        `Cannot serve a request from origin '${origin}': Synapse answers local programs, not web pages`,
        { field: "origin" },
      );
    }
  }
}

/**
 * Refuses a request that needs the owner's key and does not show it (field report F39): a call
 * of an `owner` operation over `POST /v1/ops/<method>`, and with `http.require_key_for_queries`
 * any request. A unix socket door (0600) asks nothing: the kernel already checked who connects.
 *
 * @throws {SynapseError} channel `unauthorized` `{field: "authorization", reason:
 *   "missing_key" | "wrong_key" | "no_owner_key", method?}`.
 */
function checkAccess(door: Door, req: Request, path: string): void {
  if (door.unix) return;
  let method: string | undefined;
  let owner = false;
  if (path.startsWith("/v1/ops/")) {
    try {
      method = decodeURIComponent(path.slice("/v1/ops/".length));
    } catch { /* answered unknown_method by the route */ }
    owner = method !== undefined && Object.hasOwn(OPERATIONS, method) &&
      OPERATIONS[method]!.access === "owner";
  }
  const queriesToo = door.backend?.http.require_key_for_queries === true;
  if (!owner && !queriesToo) return;
  const what = method === undefined ? `${req.method} ${path}` : `'${method}'`;
  const given = keyOfRequest(req.headers);
  const refuse = (reason: string, why: string): never => {
    throw new SynapseError("unauthorized", `Cannot call ${what} over HTTP: ${why}`, {
      channel: true,
      details: { field: "authorization", reason, ...(method === undefined ? {} : { method }) },
    });
  };
  if (door.ownerKey === undefined) {
    refuse(
      "no_owner_key",
      "this door was started without an owner key, so it serves no mutating operation",
    );
  }
  const how =
    `send the owner's key (the owner.key file in the server's data home) as Authorization: Bearer KEY or ${OWNER_KEY_HEADER}: KEY; ck-synapse commands of the owner send it themselves`;
  if (given === undefined) {
    refuse(
      "missing_key",
      `${
        owner ? "it changes the service, so it needs" : "this server asks"
      } the owner's key; ${how}`,
    );
  }
  if (!sameKey(given, door.ownerKey!)) {
    refuse("wrong_key", `the key sent is not the owner's; ${how}`);
  }
}

function hostOnly(host: string): string {
  if (host.startsWith("[")) return host.slice(0, host.indexOf("]") + 1);
  const colon = host.lastIndexOf(":");
  return colon >= 0 ? host.slice(0, colon) : host;
}

function requireMethod(req: Request, allowed: string): void {
  if (req.method !== allowed) {
    throw new HttpRefusal(
      405,
      `Cannot ${req.method} ${new URL(req.url).pathname}: use ${allowed}`,
      { allow: allowed },
    );
  }
}

function decodeMethod(raw: string): string {
  try {
    return decodeURIComponent(raw);
  } catch {
    throw new SynapseError("unknown_method", `Cannot call '${raw}': unknown method`, {
      details: { method: raw },
    });
  }
}

/** The wire body of an ops outcome, with its status and headers. */
function outcomeResponse(outcome: OpOutcome): Response {
  if (outcome.kind === "result") {
    const headers = new Headers();
    const fp = fingerprintOf(outcome.body.result);
    if (fp !== undefined) headers.set("x-synapse-fingerprint", fp);
    return jsonResponse(200, outcome.body, headers);
  }
  return jsonResponse(
    httpStatusFor(outcome.error.code),
    outcome.body,
    retryHeaders(outcome.error),
  );
}

/** A front-door error in the ops wire shape (channel, or semantic when the error says so). */
function errorResponse(e: SynapseError, backend: DoorBackend | undefined): Response {
  const status = e instanceof HttpRefusal ? e.status : httpStatusFor(e.code);
  const headers = retryHeaders(e);
  if (e instanceof HttpRefusal && e.status === 405) {
    headers.set("allow", String(e.details?.allow ?? ""));
  }
  const body = e.channel || backend === undefined
    ? e.toChannel()
    : { result: { module_generation: backend.moduleGeneration, error: e.toWire() } };
  return jsonResponse(status, body, headers);
}

function retryHeaders(e: SynapseError): Headers {
  const headers = new Headers();
  if (e.code === "unauthorized") headers.set("www-authenticate", 'Bearer realm="synapse"');
  if (e.retryAfterMs !== undefined) {
    headers.set("retry-after", String(Math.max(1, Math.ceil(e.retryAfterMs / 1000))));
    headers.set("retry-after-ms", String(e.retryAfterMs));
  }
  return headers;
}

function fingerprintOf(result: unknown): string | undefined {
  if (typeof result !== "object" || result === null) return undefined;
  const fp = (result as { fingerprint?: unknown }).fingerprint;
  return typeof fp === "string" ? fp : undefined;
}

function jsonResponse(status: number, body: unknown, headers: Headers = new Headers()): Response {
  let text: string;
  try {
    text = JSON.stringify(body);
  } catch (err) {
    status = httpStatusFor("encode_failed");
    text = JSON.stringify({
      code: "encode_failed",
      message: `Cannot encode response: ${errorMessage(err)}`,
    });
  }
  headers.set("content-type", "application/json; charset=utf-8");
  return new Response(text, { status, headers });
}

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

// ---------------------------------------------------------------------------------------------
// GET /health

/**
 * The service status ({@link DoorBackend.status}, the one status function below the doors): 200
 * for `ok` and `degraded`, 503 for `loading` and `unavailable`. Cached state only; never touches
 * an engine. Before an instance is attached: 503 `loading`, "the instance is starting".
 */
function health(backend: DoorBackend | undefined): Response {
  if (backend === undefined) {
    return jsonResponse(503, {
      status: "loading",
      reason: "the instance is starting",
      version: SYNAPSE_VERSION,
      models: [],
    });
  }
  const s = backend.status();
  const body = {
    status: s.status,
    ...(s.reason === undefined ? {} : { reason: s.reason }),
    version: SYNAPSE_VERSION,
    module_generation: backend.moduleGeneration,
    models: s.models,
  };
  return jsonResponse(s.status === "ok" || s.status === "degraded" ? 200 : 503, body);
}

// ---------------------------------------------------------------------------------------------
// The OpenAI door: a mapping around the dispatcher (lib/doors/http/openai.ts)

async function openAiEmbeddings(
  door: Door,
  req: Request,
  record: RequestRecord,
  signal: AbortSignal,
): Promise<Response> {
  const backend = attached(door);
  const routing = routingFromHeaders(req.headers);
  const body = await readJsonBody(req, bodyOptions(door));
  const call = embeddingsCall(body, signal);
  const params = { ...call.params, ...routing };
  record.params = params;
  const { outcome, facts } = await backend.call("embed.batch", params, call.options);
  record.facts = facts;
  return openAiResponse(embeddingsAnswer(outcome, call));
}

// ---------------------------------------------------------------------------------------------
// The API-shaped doors: mappings around the dispatcher (lib/doors/http/rerank_shapes.ts, tei.ts,
// ollama.ts)

async function serveAdapter(
  door: Door,
  req: Request,
  route: AdapterRoute,
  record: RequestRecord,
  signal: AbortSignal,
): Promise<Response> {
  record.op = route.op;
  requireMethod(req, route.method);
  const io: AdapterIo = {
    backend: () => attached(door),
    body: () => readJsonBody(req, bodyOptions(door)),
    signal,
    record,
    // The routing headers are read where a model serves (a models.list route serves none).
    routing: ROUTED_OPS.has(route.op) ? routingFromHeaders(req.headers) : {},
  };
  const answer = await route.serve(io);
  if (answer.error !== undefined) record.error = answer.error;
  if (answer.stream !== undefined) {
    // A streamed answer (Ollama's NDJSON): its log line waits for the generation's end.
    record.settled = answer.stream.settled;
    const headers = new Headers({
      "content-type": answer.stream.contentType,
      "cache-control": "no-cache",
    });
    if (answer.fingerprint !== undefined) headers.set("x-synapse-fingerprint", answer.fingerprint);
    return new Response(answer.stream.body, { status: answer.status, headers });
  }
  return openAiResponse(answer);
}

/** A door's answer as a response: its status and body, retry and fingerprint headers. */
function openAiResponse(answer: OpenAiAnswer | AdapterAnswer): Response {
  const headers = answer.error ? retryHeaders(answer.error) : new Headers();
  if (answer.fingerprint !== undefined) headers.set("x-synapse-fingerprint", answer.fingerprint);
  if (answer.prompt !== undefined) headers.set("x-synapse-prompt", promptHeader(answer.prompt));
  if (answer.error instanceof HttpRefusal && answer.error.status === 405) {
    headers.set("allow", String(answer.error.details?.allow ?? ""));
  }
  return jsonResponse(answer.status, answer.body, headers);
}
