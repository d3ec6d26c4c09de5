/**
 * The HTTP front door (design.md "Three front doors, one dispatcher"): a loopback-only
 * `Deno.serve` that decodes requests into the ops layer and encodes its outcomes. No operation
 * logic lives here.
 *
 * Routes:
 *
 * - `POST /v1/ops/<method>`: the body is the params JSON (empty body = `{}`); the answer is the
 *   wire JSON exactly — `{"result": …}` (200), a semantic error
 *   `{"result": {"module_generation", "error": WireError}}` or a channel error `{code, message}`,
 *   each with the status of {@link httpStatusFor}.
 * - `POST /v1/embeddings`: OpenAI's embeddings shape, served by the shared embed path
 *   ({@link embedItems}), with Synapse's identity facts under `synapse`.
 * - `GET /health`: cached model states only; never touches an engine.
 *
 * Transient errors carry `Retry-After` (whole seconds, rounded up) and `retry-after-ms`;
 * results that carry a fingerprint carry `x-synapse-fingerprint`.
 *
 * @module
 */
import { z } from "zod";
import { invalidRequest, SynapseError, toSynapseError } from "../contract/errors.ts";
import { parseParams } from "../contract/schemas.ts";
import type { CommonParams } from "../contract/schemas.ts";
import { embedItems } from "../ops/embed.ts";
import type { EmbedItem, EmbedResult } from "../ops/embed.ts";
import type { OpOutcome } from "../ops/dispatcher.ts";
import { serviceStatus } from "../ops/status.ts";
import type { LogSink } from "../log/log.ts";
import { SYNAPSE_VERSION } from "../synapse.ts";
import type { Synapse } from "../synapse.ts";
import { HttpRefusal, MAX_BODY_BYTES, readJsonBody } from "./_request_body.ts";
import { JsonBodyParser } from "./_json_body_parser.ts";
import { httpStatusFor } from "./status_table.ts";

/** What the HTTP door needs from a Synapse instance. */
export type HttpBackend = Pick<
  Synapse,
  "call" | "context" | "registry" | "disposed" | "moduleGeneration"
>;

/** Address the server is bound to. */
export interface ListenAddress {
  hostname: string;
  /** The bound port (the ephemeral one when 0 was asked). */
  port: number;
}

/** Options of {@link serveHttp}. */
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
   * Where the request log goes (one line per request, lib/http/server.ts `logRequest`).
   *
   * @default {the instance's log (`context.log`)}
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
 * Serves a Synapse instance over HTTP on a loopback address.
 *
 * @param synapse The instance; the server never disposes it.
 * @param options Address, shutdown signal and body cap.
 * @returns The running server, already bound.
 * @throws {SynapseError} channel `invalid_request` for a non-loopback hostname or a bad port.
 * @throws {Deno.errors.AddrInUse} when the port is taken.
 *
 * @example Serve on an ephemeral port
 * ```ts ignore
 * const server = serveHttp(synapse, { port: 0 });
 * const res = await fetch(`http://127.0.0.1:${server.port}/health`);
 * await server.shutdown();
 * ```
 */
export function serveHttp(synapse: HttpBackend, options: ServeHttpOptions = {}): HttpServer {
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
  // `context` is absent on test doubles of the backend.
  const maxBodyBytes = options.maxBodyBytes ?? synapse.context?.config?.http?.max_body_bytes ??
    MAX_BODY_BYTES;
  // Bodies over 1 MiB are decoded and parsed on a worker thread (F21); stopped with the server.
  const parser = new JsonBodyParser();
  const body = { maxBodyBytes, parser };
  const bindHost = hostname.startsWith("[") ? hostname.slice(1, -1) : hostname;
  const server = Deno.serve({
    hostname: bindHost,
    port,
    ...(options.signal ? { signal: options.signal } : {}),
    onListen: function onListen(addr: Deno.NetAddr): void {
      options.onListen?.({ hostname: addr.hostname, port: addr.port });
    },
    onError: function onError(err: unknown): Response {
      return errorResponse(
        new SynapseError("encode_failed", `Cannot answer: ${errorMessage(err)}`, { cause: err }),
        synapse,
      );
    },
  }, function handle(req: Request): Promise<Response> {
    return route(synapse, req, body);
  });
  server.finished.then(() => parser.dispose(), () => parser.dispose());
  const addr = server.addr as Deno.NetAddr;
  let shutdown: Promise<void> | undefined;
  return {
    hostname: addr.hostname,
    port: addr.port,
    finished: server.finished,
    shutdown(): Promise<void> {
      shutdown ??= server.shutdown().then(() => server.finished);
      return shutdown;
    },
    [Symbol.asyncDispose](): Promise<void> {
      return this.shutdown();
    },
  };
}

/** How the door reads bodies. */
interface BodyReading {
  maxBodyBytes: number;
  parser: JsonBodyParser;
}

async function route(synapse: HttpBackend, req: Request, body: BodyReading): Promise<Response> {
  try {
    checkHostAndOrigin(req);
    const path = new URL(req.url).pathname;
    if (path === "/health") {
      if (req.method === "HEAD") {
        const res = health(synapse);
        return new Response(null, { status: res.status, headers: res.headers });
      }
      requireMethod(req, "GET");
      return health(synapse);
    }
    if (path === "/v1/embeddings") {
      requireMethod(req, "POST");
      return await openAiEmbeddings(synapse, req, body);
    }
    if (path.startsWith("/v1/ops/")) {
      requireMethod(req, "POST");
      const method = decodeMethod(path.slice("/v1/ops/".length));
      const params = await readJsonBody(req, { maxBytes: body.maxBodyBytes, parser: body.parser });
      return outcomeResponse(await synapse.call(method, params, { signal: req.signal }));
    }
    throw new SynapseError(
      "unknown_method",
      `Cannot route ${req.method} ${path}: no such endpoint`,
      {
        details: {
          path,
          endpoints: ["POST /v1/ops/<method>", "POST /v1/embeddings", "GET /health"],
        },
      },
    );
  } catch (err) {
    return errorResponse(toSynapseError(err, "encode_failed"), synapse);
  }
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
function errorResponse(e: SynapseError, synapse: HttpBackend): Response {
  const status = e instanceof HttpRefusal ? e.status : httpStatusFor(e.code);
  const headers = retryHeaders(e);
  if (e instanceof HttpRefusal && e.status === 405) {
    headers.set("allow", String(e.details?.allow ?? ""));
  }
  const body = e.channel
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
 * engine.
 */
function health(synapse: HttpBackend): Response {
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
// POST /v1/embeddings (OpenAI shape)

/**
 * OpenAI embeddings request; unknown fields are refused (field report F16). `user` is accepted
 * and ignored; token-id inputs (`number[]`) are refused as `invalid_request` naming `input`.
 */
const OpenAiEmbeddingsRequest = z.strictObject({
  input: z.union([z.string(), z.array(z.string())]),
  model: z.string().min(1).optional(),
  encoding_format: z.enum(["float", "base64"]).optional(),
  dimensions: z.number().int().positive().optional(),
  user: z.string().optional(),
});

/** The OpenAI error body `{error: {message, type, code, param}}`. */
interface OpenAiError {
  error: {
    message: string;
    /** `invalid_request_error` (4xx), `rate_limit_error` (429) or `server_error` (5xx). */
    type: string;
    /** The Synapse stable code. */
    code: string;
    /** The offending field, e.g. `input[2]`, or null. */
    param: string | null;
    retry_after_ms?: number;
  };
}

async function openAiEmbeddings(
  synapse: HttpBackend,
  req: Request,
  body: BodyReading,
): Promise<Response> {
  let single = false;
  try {
    const raw = await readJsonBody(req, { maxBytes: body.maxBodyBytes, parser: body.parser });
    const p = parseParams("/v1/embeddings", OpenAiEmbeddingsRequest, raw);
    if (synapse.disposed) {
      throw new SynapseError(
        "module_not_initialized",
        "Cannot embed: this instance is shutting down",
      );
    }
    single = typeof p.input === "string";
    const texts = typeof p.input === "string" ? [p.input] : p.input;
    // One path for a string and a one-element list (field report F5).
    const items: EmbedItem[] = texts.map((text, i) => ({ id: String(i), text }));
    const common: CommonParams = p.model === undefined ? {} : { model: p.model };
    if (p.dimensions !== undefined) {
      const model = synapse.registry.resolve(p.model, "embed");
      if (model.dims !== p.dimensions) {
        throw invalidRequest(
          `Cannot embed with dimensions ${p.dimensions}: model '${model.modelId}' produces ${model.dims}-dimensional vectors, and Synapse never shortens or projects vectors`,
          { field: "dimensions", dims: model.dims, dimensions: p.dimensions },
        );
      }
    }
    const res = await embedItems(synapse.context, common, items, {
      signal: req.signal,
    });
    // Without a request_key an over-limit batch is refused, never turned into a job.
    if (!("vectors" in res)) throw new Error("An OpenAI request became a job. This is a bug");
    const refused = res.item_errors?.[0];
    if (refused !== undefined) {
      // OpenAI clients expect all or nothing: name the first refused item.
      const more = res.item_errors!.length - 1;
      const e = new SynapseError(refused.error.code, refused.error.message, {
        ...(refused.error.retry_after_ms === undefined
          ? {}
          : { retryAfterMs: refused.error.retry_after_ms }),
      });
      const param = single ? "input" : `input[${refused.index}]`;
      const suffix = more > 0 ? ` (and ${more} more input${more > 1 ? "s" : ""} refused)` : "";
      return openAiErrorResponse(e, param, `${e.message}${suffix}`);
    }
    return openAiResult(res, p.encoding_format ?? "float");
  } catch (err) {
    const e = toSynapseError(err, "engine_crashed");
    const field = e.details?.field;
    return openAiErrorResponse(e, typeof field === "string" ? field : null, e.message);
  }
}

function openAiErrorResponse(e: SynapseError, param: string | null, message: string): Response {
  const status = e instanceof HttpRefusal ? e.status : httpStatusFor(e.code);
  const type = status === 429
    ? "rate_limit_error"
    : status >= 500
    ? "server_error"
    : "invalid_request_error";
  const body: OpenAiError = { error: { message, type, code: e.code, param } };
  if (e.retryAfterMs !== undefined) body.error.retry_after_ms = e.retryAfterMs;
  return jsonResponse(status, body, retryHeaders(e));
}

function openAiResult(res: EmbedResult, format: "float" | "base64"): Response {
  const promptTokens = res.real_token_counts.reduce((a, b) => a + b, 0);
  const synapse: Record<string, unknown> = {
    fingerprint: res.fingerprint,
    table_epoch: res.table_epoch,
    dims: res.dims,
    provenance: res.provenance,
    module_generation: res.module_generation,
    equivalent_to: res.equivalent_to,
  };
  if (res.test_model) synapse.test_model = true;
  synapse.items = res.vectors.map((v) => ({
    index: Number(v.id),
    content_sha256: v.content_sha256,
    submitted_sha256: v.submitted_sha256,
  }));
  synapse.real_token_counts = res.real_token_counts;
  synapse.truncation_disclosures = res.truncation_disclosures;
  synapse.queue_time_ms = res.queue_time_ms;
  synapse.inference_time_ms = res.inference_time_ms;
  const body = {
    object: "list",
    data: res.vectors.map((v) => ({
      object: "embedding",
      index: Number(v.id),
      embedding: format === "base64" ? float32Base64LE(v.vector) : v.vector,
    })),
    model: res.model_id,
    usage: { prompt_tokens: promptTokens, total_tokens: promptTokens },
    synapse,
  };
  return jsonResponse(200, body, new Headers({ "x-synapse-fingerprint": res.fingerprint }));
}

/**
 * Base64 of a vector as little-endian float32 bytes (OpenAI's `encoding_format: "base64"`).
 *
 * @param vector The values.
 * @returns Standard base64 (with padding) of `4 × vector.length` bytes.
 */
export function float32Base64LE(vector: ArrayLike<number>): string {
  const bytes = new Uint8Array(vector.length * 4);
  const view = new DataView(bytes.buffer);
  for (let i = 0; i < vector.length; i++) view.setFloat32(i * 4, vector[i]!, true);
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return btoa(binary);
}
