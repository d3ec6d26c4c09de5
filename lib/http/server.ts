/**
 * The HTTP front door (design.md "Three front doors, one dispatcher"): a loopback-only
 * `Deno.serve` that decodes requests into the ops dispatcher and encodes its outcomes. No operation
 * logic lives here.
 *
 * Routes:
 *
 * - `POST /v1/ops/<method>`: the body is the params JSON (empty body = `{}`); the answer is the
 *   wire JSON exactly — `{"result": …}` (200), a semantic error
 *   `{"result": {"module_generation", "error": WireError}}` or a channel error `{code, message}`,
 *   each with the status of {@link httpStatusFor}.
 * - `POST /v1/embeddings`: OpenAI's embeddings shape, mapped onto `embed.batch` (lib/http/openai.ts).
 * - `GET /v1/models`: OpenAI's model list, mapped from `models.list`.
 * - `POST /v1/rerank`, `POST /v2/rerank`: Cohere's and Jina's rerank shape over `rerank.score`;
 *   `POST /rerank`: TEI's shape when the body has `texts`, else Cohere's (lib/http/rerank_shapes.ts).
 * - `POST /embed`, `GET /info`: TEI's shapes over `embed.batch` and `models.list` (lib/http/tei.ts).
 * - `POST /api/embed`, `GET /api/tags`: Ollama's shapes over `embed.batch` and `models.list`
 *   (lib/http/ollama.ts).
 * - `POST /v1/completions`, `POST /v1/chat/completions`: OpenAI's completions shapes over
 *   `microllm.oneshot` (lib/http/openai_completions.ts), greedy only, JSON or server-sent events.
 * - `GET /health`: the service status of lib/ops/status.ts; never touches an engine.
 * - `GET /metrics`: Prometheus text exposition format (lib/http/metrics.ts).
 *
 * Transient errors carry `Retry-After` (whole seconds, rounded up) and `retry-after-ms`;
 * results that carry a fingerprint carry `x-synapse-fingerprint`. Every request is logged in one
 * line at `info` (`/health` at `debug`): see {@link logRequest}.
 *
 * The socket is bound before the instance starts ({@link bindHttp}), so a port already in use
 * fails at once, naming the address, before a store is opened; until an instance is attached the
 * door answers 503 `module_not_initialized`.
 *
 * @module
 */
import { invalidRequest, SynapseError } from "../contract/errors.ts";
import { outcomeOf } from "../ops/dispatcher.ts";
import type { OpOutcome } from "../ops/dispatcher.ts";
import { requestFacts } from "../ops/request_facts.ts";
import type { RequestFacts } from "../ops/request_facts.ts";
import { serviceStatus } from "../ops/status.ts";
import { type LogSink, stderrLog } from "../log/log.ts";
import { SYNAPSE_VERSION } from "../synapse.ts";
import type { Synapse } from "../synapse.ts";
import { HttpRefusal, MAX_BODY_BYTES, readJsonBody } from "./_request_body.ts";
import { JsonBodyParser } from "./_json_body_parser.ts";
import { embeddingsAnswer, embeddingsCall, modelsAnswer, openAiError } from "./openai.ts";
import { isCompletionsPath, serveCompletions } from "./openai_completions.ts";
import type { OpenAiAnswer } from "./openai.ts";
import { httpStatusFor } from "./status_table.ts";
import type { AdapterAnswer, AdapterIo, AdapterRoute } from "./_adapter.ts";
import { rerankShapesRoute } from "./rerank_shapes.ts";
import { teiRoute } from "./tei.ts";
import { ollamaRoute } from "./ollama.ts";
import { metricsResponse, throughDoor } from "./metrics.ts";
import { type Front, type FrontTimeouts, startFront } from "./_front.ts";
import { defaultWorkerRuntimeDir } from "../engines/llama/launch.ts";
import { prepareRuntimeDir } from "../workers/runtime_dir.ts";
import { dirname } from "node:path";

export { float32Base64LE } from "./openai.ts";

/** What the HTTP door needs from a Synapse instance. */
export type HttpBackend = Pick<
  Synapse,
  "call" | "context" | "registry" | "disposed" | "moduleGeneration" | "metrics"
>;

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
   * The unix socket `Deno.serve` listens on behind the TCP front (`lib/http/_front.ts`), in the
   * worker runtime dir (0700): `http-<pid>.sock` for the first server of a process (the path the
   * `ck-synapse` launcher grants), `http-<pid>-<n>.sock` for later ones.
   *
   * @default {`<worker runtime dir>/http-<pid>.sock`}
   */
  backendSocket?: string;
  /**
   * Where the request log goes (one line per request, see {@link logRequest}).
   *
   * @default {the instance's log (`context.log`); stderr, filtered by CK_LOG, before one is attached}
   */
  log?: LogSink;
}

/** A running HTTP server. */
export interface HttpServer extends AsyncDisposable {
  /** Bound hostname. */
  readonly hostname: string;
  /** Bound port. */
  readonly port: number;
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
   * @throws {Error} "… This is a bug" when an instance is already attached.
   */
  attach(synapse: HttpBackend): void;
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
  if (!isLoopbackHostname(hostname)) {
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
  };
  const bindHost = hostname.startsWith("[") ? hostname.slice(1, -1) : hostname;
  // The TCP front holds the loopback port and enforces the header, body and idle timeouts that
  // Deno.serve has no setting for (lib/http/_front.ts); Deno.serve listens behind it on a unix
  // socket in the 0700 worker runtime dir, which no other user can reach.
  const timeouts: FrontTimeouts = { ...DEFAULT_HTTP_TIMEOUTS };
  let front: Front;
  try {
    front = startFront({ hostname: bindHost, port, backend: "", timeouts });
  } catch (err) {
    parser.dispose();
    throw bindError(err, hostname, port);
  }
  let backendPath: string;
  let server: Deno.HttpServer<Deno.UnixAddr>;
  try {
    backendPath = options.backendSocket ?? nextBackendSocket();
    prepareRuntimeDir(dirname(backendPath));
    try {
      Deno.removeSync(backendPath);
    } catch { /* none left by an earlier process with this pid */ }
    front.setBackend(backendPath);
    server = Deno.serve({
      path: backendPath,
      ...(options.signal ? { signal: options.signal } : {}),
      onListen: function onListen(): void {
        options.onListen?.({ hostname: front.addr.hostname, port: front.addr.port });
      },
      onError: function onError(err: unknown): Response {
        return errorResponse(
          new SynapseError("encode_failed", `Cannot answer: ${errorMessage(err)}`, { cause: err }),
          door.backend,
        );
      },
    }, function handle(req: Request): Promise<Response> {
      return handleLogged(door, req);
    });
  } catch (err) {
    parser.dispose();
    front.close();
    throw bindError(err, hostname, port);
  }
  const ended = (): void => {
    parser.dispose();
    front.close();
    try {
      Deno.removeSync(backendPath);
    } catch { /* already gone */ }
  };
  server.finished.then(ended, ended);
  options.signal?.addEventListener("abort", () => front.stopAccepting(), { once: true });
  const addr = front.addr;
  let shutdown: Promise<void> | undefined;
  return {
    hostname: addr.hostname,
    port: addr.port,
    finished: server.finished,
    attach(synapse: HttpBackend): void {
      if (door.backend !== undefined) {
        throw new Error(
          "An HTTP server serves one instance; attach() was called twice. This is a bug",
        );
      }
      // Every call through this door is counted with door="http" (synapse_requests_total).
      door.backend = throughDoor(synapse, "http");
      const http = synapse.context?.config?.http;
      if (http?.header_timeout_ms !== undefined) timeouts.headerMs = http.header_timeout_ms;
      if (http?.body_timeout_ms !== undefined) timeouts.bodyMs = http.body_timeout_ms;
      if (http?.idle_timeout_ms !== undefined) timeouts.idleMs = http.idle_timeout_ms;
    },
    shutdown(): Promise<void> {
      front.stopAccepting();
      shutdown ??= server.shutdown().then(() => server.finished);
      return shutdown;
    },
    [Symbol.asyncDispose](): Promise<void> {
      return this.shutdown();
    },
  };
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
  const address = hostname.includes(":") && !hostname.startsWith("[")
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
  backend: HttpBackend | undefined;
  parser: JsonBodyParser;
  maxBodyBytes: number | undefined;
  log: LogSink | undefined;
  /** When the server started, Unix seconds (`created` of `GET /v1/models`). */
  startedSec: number;
}

/** What one request did, for its log line; `route` fills it in. */
interface RequestRecord {
  /** The operation it ran (`embed.batch` for `/v1/embeddings`), when it got that far. */
  op?: string;
  /** The params the operation got (counted, never logged). */
  params?: unknown;
  /** The outcome's facts (model, items, tokens, times). */
  facts?: RequestFacts;
  /** The error it was answered with, when it did not reach or finish an operation. */
  error?: SynapseError;
  /** Set for a response that streams past the handler: the log line waits for it. */
  settled?: Promise<void>;
}

async function handleLogged(door: Door, req: Request): Promise<Response> {
  const started = performance.now();
  const path = new URL(req.url).pathname;
  const log = door.log ?? door.backend?.context?.log ?? stderrLog;
  log("debug", "synapse.http", "request start", {
    method: req.method,
    path: clip(path),
    content_length: req.headers.get("content-length") ?? "-",
  });
  const record: RequestRecord = {};
  const res = await route(door, req, path, record);
  door.backend?.metrics?.httpResponses.inc({ code: String(res.status) });
  if (record.settled === undefined) {
    logRequest(log, req.method, path, record, res.status, performance.now() - started);
  } else {
    void record.settled.then(() =>
      logRequest(log, req.method, path, record, res.status, performance.now() - started)
    );
  }
  return res;
}

/**
 * Writes the request log line: `request` at `info` (`/health` and `/metrics` at `debug`, so a
 * prober or a scraper does not fill the log) with `method path op model items item_errors tokens queue_ms inference_ms outcome
 * status total_ms`, in that order; `-` where a fact is unknown (the request never reached an
 * operation, or the operation has no such fact). No text, id, key or header is logged: only
 * counts, times, the model id and codes.
 */
function logRequest(
  log: LogSink,
  method: string,
  path: string,
  record: RequestRecord,
  status: number,
  totalMs: number,
): void {
  const f = record.facts;
  const dash = (v: string | number | undefined): string | number => v ?? "-";
  log(path === "/health" || path === "/metrics" ? "debug" : "info", "synapse.http", "request", {
    method: clip(method),
    path: clip(path),
    op: clip(record.op ?? "-"),
    model: clip(f?.model ?? "-"),
    items: dash(f?.items),
    item_errors: dash(f?.item_errors),
    tokens: dash(f?.tokens),
    queue_ms: dash(f?.queue_ms),
    inference_ms: dash(f?.inference_ms),
    outcome: f?.outcome ?? record.error?.code ?? (status < 400 ? "ok" : "-"),
    status,
    total_ms: Math.round(totalMs * 1000) / 1000,
  });
}

/** A caller-supplied string cut to a log-friendly length. */
function clip(s: string): string {
  return s.length > 200 ? `${s.slice(0, 200)}…` : s;
}

async function route(
  door: Door,
  req: Request,
  path: string,
  record: RequestRecord,
): Promise<Response> {
  const openAi = path === "/v1/embeddings" || path === "/v1/models" || isCompletionsPath(path);
  // The API-shaped doors (Cohere/Jina and TEI rerank, TEI, Ollama): one route lookup per file.
  const adapter = rerankShapesRoute(path) ?? teiRoute(path) ?? ollamaRoute(path);
  try {
    checkHostAndOrigin(req);
    if (path === "/health") {
      if (req.method === "HEAD") {
        const res = health(door.backend);
        return new Response(null, { status: res.status, headers: res.headers });
      }
      requireMethod(req, "GET");
      return health(door.backend);
    }
    if (path === "/metrics") {
      if (req.method !== "HEAD") requireMethod(req, "GET");
      return await metricsResponse(attached(door), req.method === "HEAD");
    }
    if (path === "/v1/embeddings") {
      record.op = "embed.batch";
      requireMethod(req, "POST");
      return await openAiEmbeddings(door, req, record);
    }
    if (path === "/v1/models") {
      record.op = "models.list";
      requireMethod(req, "GET");
      const synapse = attached(door);
      record.params = {};
      const outcome = await synapse.call("models.list", {}, { signal: req.signal });
      record.facts = requestFacts({}, outcome);
      return openAiResponse(modelsAnswer(outcome, door.startedSec));
    }
    if (adapter !== undefined) return await serveAdapter(door, req, adapter, record);
    if (isCompletionsPath(path)) {
      // OpenAI completions and chat over microllm.oneshot (lib/http/openai_completions.ts).
      record.op = "microllm.oneshot";
      requireMethod(req, "POST");
      const synapse = attached(door);
      const body = await readJsonBody(req, bodyOptions(door));
      const served = await serveCompletions(synapse, path, body, req.signal);
      record.params = served.params;
      if (served.outcome !== undefined) {
        record.facts = requestFacts(served.params, served.outcome);
      } else {
        // A live stream: its log line waits for the generation's end.
        record.settled = served.settled.then(
          (outcome) => void (record.facts = requestFacts(served.params, outcome)),
          (err) => void (record.error = err instanceof SynapseError ? err : undefined),
        );
      }
      return served.response;
    }
    if (path.startsWith("/v1/ops/")) {
      requireMethod(req, "POST");
      const method = decodeMethod(path.slice("/v1/ops/".length));
      record.op = method;
      const synapse = attached(door);
      const params = await readJsonBody(req, bodyOptions(door));
      record.params = params;
      const outcome = await synapse.call(method, params, { signal: req.signal });
      record.facts = requestFacts(params, outcome);
      return outcomeResponse(outcome);
    }
    throw new SynapseError(
      "unknown_method",
      `Cannot route ${req.method} ${path}: no such endpoint`,
      {
        details: {
          path,
          endpoints: [
            "POST /v1/ops/<method>",
            "POST /v1/embeddings",
            "POST /v1/completions",
            "POST /v1/chat/completions",
            "GET /v1/models",
            "POST /v1/rerank",
            "POST /v2/rerank",
            "POST /rerank",
            "POST /embed",
            "GET /info",
            "POST /api/embed",
            "GET /api/tags",
            "POST /api/embeddings",
            "GET /api/version",
            "GET /health",
            "GET /metrics",
          ],
        },
      },
    );
  } catch (err) {
    const e = doorError(door, err, path);
    record.error = e;
    if (openAi) return openAiResponse(openAiError(e));
    if (adapter !== undefined) return openAiResponse(adapter.error(e));
    return errorResponse(e, door.backend);
  }
}

/** The attached instance. @throws {SynapseError} `module_not_initialized` before one is. */
function attached(door: Door): HttpBackend {
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
  // `context` is absent on test doubles of the backend.
  const maxBytes = door.maxBodyBytes ?? door.backend?.context?.config?.http?.max_body_bytes ??
    MAX_BODY_BYTES;
  return { maxBytes, parser: door.parser };
}

/**
 * A failure of the door itself as its stable error: a {@link SynapseError} as it is; anything else
 * is a bug, logged with its stack and answered `internal_error` (as the dispatcher does).
 */
function doorError(door: Door, err: unknown, path: string): SynapseError {
  if (err instanceof SynapseError) return err;
  const log = door.log ?? door.backend?.context?.log ?? stderrLog;
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
function errorResponse(e: SynapseError, synapse: HttpBackend | undefined): Response {
  const status = e instanceof HttpRefusal ? e.status : httpStatusFor(e.code);
  const headers = retryHeaders(e);
  if (e instanceof HttpRefusal && e.status === 405) {
    headers.set("allow", String(e.details?.allow ?? ""));
  }
  const body = e.channel || synapse === undefined
    ? e.toChannel()
    : { result: { module_generation: synapse.moduleGeneration, error: e.toWire() } };
  return jsonResponse(status, body, headers);
}

function retryHeaders(e: SynapseError): Headers {
  const headers = new Headers();
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
 * The service status ({@link serviceStatus}, the one status function below the doors): 200 for
 * `ok` and `degraded`, 503 for `loading` and `unavailable`. Cached state only; never touches an
 * engine. Before an instance is attached: 503 `loading`, "the instance is starting".
 */
function health(synapse: HttpBackend | undefined): Response {
  if (synapse === undefined) {
    return jsonResponse(503, {
      status: "loading",
      reason: "the instance is starting",
      version: SYNAPSE_VERSION,
      models: [],
    });
  }
  const s = serviceStatus(synapse.registry.list(), { disposed: synapse.disposed });
  const body = {
    status: s.status,
    ...(s.reason === undefined ? {} : { reason: s.reason }),
    version: SYNAPSE_VERSION,
    module_generation: synapse.moduleGeneration,
    models: s.models,
  };
  return jsonResponse(s.status === "ok" || s.status === "degraded" ? 200 : 503, body);
}

// ---------------------------------------------------------------------------------------------
// The OpenAI door: a mapping around the dispatcher (lib/http/openai.ts)

async function openAiEmbeddings(
  door: Door,
  req: Request,
  record: RequestRecord,
): Promise<Response> {
  const synapse = attached(door);
  const body = await readJsonBody(req, bodyOptions(door));
  const call = embeddingsCall(body, req.signal);
  record.params = call.params;
  const outcome = await synapse.call("embed.batch", call.params, call.options);
  record.facts = requestFacts(call.params, outcome);
  return openAiResponse(embeddingsAnswer(outcome, call));
}

// ---------------------------------------------------------------------------------------------
// The API-shaped doors: mappings around the dispatcher (lib/http/rerank_shapes.ts, tei.ts,
// ollama.ts)

async function serveAdapter(
  door: Door,
  req: Request,
  route: AdapterRoute,
  record: RequestRecord,
): Promise<Response> {
  record.op = route.op;
  requireMethod(req, route.method);
  const io: AdapterIo = {
    backend: () => attached(door),
    body: () => readJsonBody(req, bodyOptions(door)),
    signal: req.signal,
    record,
  };
  const answer = await route.serve(io);
  if (answer.error !== undefined) record.error = answer.error;
  return openAiResponse(answer);
}

/** A door's answer as a response: its status and body, retry and fingerprint headers. */
function openAiResponse(answer: OpenAiAnswer | AdapterAnswer): Response {
  const headers = answer.error ? retryHeaders(answer.error) : new Headers();
  if (answer.fingerprint !== undefined) headers.set("x-synapse-fingerprint", answer.fingerprint);
  if (answer.error instanceof HttpRefusal && answer.error.status === 405) {
    headers.set("allow", String(answer.error.details?.allow ?? ""));
  }
  return jsonResponse(answer.status, answer.body, headers);
}
