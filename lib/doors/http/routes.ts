/**
 * The routes of the HTTP door: one table of `(method, path, adapter)`. The server finds a
 * request's route here (lib/doors/http/server.ts), its 404 answer lists these routes, and
 * `ck-synapse serve --help` prints them, so the three cannot disagree. This module imports no
 * door: the CLI's usage text reads it without loading one.
 *
 * @module
 */

import { SynapseError } from "../../contract/errors.ts";

/**
 * Who serves a route: the module that maps its shapes onto the dispatcher.
 *
 * - `ops`: the native door, the wire JSON of docs/operations.md (lib/doors/http/server.ts).
 * - `openai`: OpenAI's embeddings, model list and model (lib/doors/http/openai.ts).
 * - `openai_completions`: OpenAI's completions and chat (lib/doors/http/openai_completions.ts).
 * - `rerank_shapes`: Cohere's and Jina's rerank, and `/rerank` in TEI's or Cohere's shape
 *   (lib/doors/http/rerank_shapes.ts).
 * - `cohere_embed`: Cohere's embed (lib/doors/http/cohere_embed.ts).
 * - `tei`: TEI's embed, info and root route `POST /` (lib/doors/http/tei.ts).
 * - `tokenize_doors`: TEI's and llama.cpp's tokenize, TEI's decode, llama.cpp's detokenize,
 *   Cohere's tokenize and detokenize (lib/doors/http/tokenize_doors.ts).
 * - `ollama`: Ollama's embed, tags, legacy embeddings and version (lib/doors/http/ollama.ts), and
 *   its generate, chat, show and ps (lib/doors/http/ollama_generate.ts).
 * - `health`: the service status (lib/ops/status.ts).
 * - `metrics`: the Prometheus exposition (lib/ops/metrics_exposition.ts).
 */
export type RouteAdapter =
  | "ops"
  | "openai"
  | "openai_completions"
  | "rerank_shapes"
  | "cohere_embed"
  | "tei"
  | "tokenize_doors"
  | "ollama"
  | "health"
  | "metrics";

/** One route of the HTTP door. */
export interface HttpRoute {
  /** The HTTP method it takes; any other is 405 (a `GET` route also answers `HEAD`, see `head`). */
  readonly method: "GET" | "POST";
  /**
   * The path: exact, or ending in a parameter `<name>` — then it is every path that starts with
   * what comes before it and has something after it, which is the parameter ({@link routeParam}):
   * the native door's `/v1/ops/<method>` (the operation, `/v1/ops/embed.query`) and OpenAI's
   * `/v1/models/<id>` (a model id, URL-encoded).
   */
  readonly path: string;
  /** Who serves it ({@link RouteAdapter}). */
  readonly adapter: RouteAdapter;
  /**
   * The operation it runs, for the request log, where the server's own adapter serves it
   * (`openai`, `openai_completions`); the API-shaped doors name theirs in their route
   * (lib/doors/http/_adapter.ts `AdapterRoute.op`), the native door's is in its path.
   */
  readonly op?: string;
  /** `HEAD` is answered as `GET` without a body (`/health`, `/metrics`). @default false */
  readonly head?: boolean;
  /** What it is, in a few words (`serve --help`). */
  readonly summary: string;
}

/** The native door's path prefix: `POST /v1/ops/<method>`. */
export const OPS_PREFIX = "/v1/ops/";

/** Every route of the HTTP door, in the order the 404 answer and `serve --help` list them. */
export const HTTP_ROUTES: readonly HttpRoute[] = Object.freeze(
  [
    {
      method: "POST",
      path: `${OPS_PREFIX}<method>`,
      adapter: "ops",
      summary: "any operation, wire JSON (docs/operations.md)",
    },
    {
      method: "POST",
      path: "/v1/embeddings",
      adapter: "openai",
      op: "embed.batch",
      summary: "OpenAI embeddings",
    },
    {
      method: "POST",
      path: "/v1/completions",
      adapter: "openai_completions",
      op: "microllm.oneshot",
      summary: "OpenAI completions (greedy; JSON or server-sent events)",
    },
    {
      method: "POST",
      path: "/v1/chat/completions",
      adapter: "openai_completions",
      op: "microllm.oneshot",
      summary: "OpenAI chat completions (the model's chat template)",
    },
    {
      method: "GET",
      path: "/v1/models",
      adapter: "openai",
      op: "models.list",
      summary: "OpenAI model list",
    },
    {
      method: "GET",
      path: "/v1/models/<id>",
      adapter: "openai",
      op: "models.list",
      summary: "OpenAI model (404 for an id not served)",
    },
    { method: "POST", path: "/v1/rerank", adapter: "rerank_shapes", summary: "Cohere/Jina rerank" },
    { method: "POST", path: "/v2/rerank", adapter: "rerank_shapes", summary: "Cohere/Jina rerank" },
    { method: "POST", path: "/v1/embed", adapter: "cohere_embed", summary: "Cohere embed (v1)" },
    {
      method: "POST",
      path: "/v2/embed",
      adapter: "cohere_embed",
      summary: "Cohere embed (v2; float and base64)",
    },
    {
      method: "POST",
      path: "/v1/tokenize",
      adapter: "tokenize_doors",
      summary: "Cohere tokenize",
    },
    {
      method: "POST",
      path: "/v1/detokenize",
      adapter: "tokenize_doors",
      summary: "Cohere detokenize",
    },
    {
      method: "POST",
      path: "/rerank",
      adapter: "rerank_shapes",
      summary: "TEI rerank (Cohere's shape when the body has documents)",
    },
    { method: "POST", path: "/embed", adapter: "tei", summary: "TEI embed" },
    { method: "GET", path: "/info", adapter: "tei", summary: "TEI info" },
    {
      method: "POST",
      path: "/",
      adapter: "tei",
      summary: "TEI root route: embed (inputs) or rerank (query, texts) as TEI for the model kind",
    },
    {
      method: "POST",
      path: "/tokenize",
      adapter: "tokenize_doors",
      summary: "TEI tokenize (inputs) or llama.cpp tokenize (content)",
    },
    { method: "POST", path: "/decode", adapter: "tokenize_doors", summary: "TEI decode" },
    {
      method: "POST",
      path: "/detokenize",
      adapter: "tokenize_doors",
      summary: "llama.cpp detokenize",
    },
    { method: "POST", path: "/api/embed", adapter: "ollama", summary: "Ollama embed" },
    { method: "GET", path: "/api/tags", adapter: "ollama", summary: "Ollama model list" },
    {
      method: "POST",
      path: "/api/embeddings",
      adapter: "ollama",
      summary: "Ollama embeddings (legacy)",
    },
    { method: "GET", path: "/api/version", adapter: "ollama", summary: "Ollama version" },
    {
      method: "POST",
      path: "/api/generate",
      adapter: "ollama",
      summary: "Ollama generate (NDJSON streaming by default)",
    },
    {
      method: "POST",
      path: "/api/chat",
      adapter: "ollama",
      summary: "Ollama chat (the model's chat template; NDJSON streaming by default)",
    },
    { method: "POST", path: "/api/show", adapter: "ollama", summary: "Ollama model details" },
    { method: "GET", path: "/api/ps", adapter: "ollama", summary: "Ollama loaded models" },
    {
      method: "GET",
      path: "/health",
      adapter: "health",
      head: true,
      summary: "the service status, never touching an engine",
    },
    {
      method: "GET",
      path: "/metrics",
      adapter: "metrics",
      head: true,
      summary: "Prometheus metrics",
    },
  ] satisfies HttpRoute[],
);

/** Where a route path's parameter starts (`/v1/ops/<method>`: after `/v1/ops/`), or -1. */
function paramAt(path: string): number {
  return path.endsWith(">") ? path.lastIndexOf("<") : -1;
}

/** The routes by exact path. */
const BY_PATH: ReadonlyMap<string, HttpRoute> = new Map(
  HTTP_ROUTES.filter((r) => paramAt(r.path) < 0).map((r) => [r.path, r]),
);

/** The routes with a parameter, by the prefix before it, longest prefix first. */
const BY_PREFIX: readonly (readonly [string, HttpRoute])[] = HTTP_ROUTES
  .filter((r) => paramAt(r.path) >= 0)
  .map((r) => [r.path.slice(0, paramAt(r.path)), r] as const)
  .sort((a, b) => b[0].length - a[0].length);

/**
 * The route of a request path: the route of that exact path, else the route with a parameter
 * whose prefix it starts with, something after it (`/v1/ops/embed.query`, `/v1/models/m`).
 *
 * @param path The request's path (no query).
 * @returns Its route, or undefined (404).
 */
export function findRoute(path: string): HttpRoute | undefined {
  const exact = BY_PATH.get(path);
  if (exact !== undefined) return exact;
  for (const [prefix, route] of BY_PREFIX) {
    if (path.length > prefix.length && path.startsWith(prefix)) return route;
  }
  return undefined;
}

/**
 * The parameter of a request path on its route with a parameter: what comes after the route's
 * prefix, still URL-encoded (`/v1/models/BAAI%2Fbge` → `BAAI%2Fbge`).
 *
 * @param route A route whose path ends in a parameter.
 * @param path The request's path, found on `route` by {@link findRoute}.
 * @throws {Error} "… This is a bug" for a route without a parameter or a path not on it.
 */
export function routeParam(route: HttpRoute, path: string): string {
  const at = paramAt(route.path);
  const prefix = route.path.slice(0, at);
  if (at < 0 || !path.startsWith(prefix)) {
    throw new Error(`${path} has no parameter of route ${route.path}. This is a bug`);
  }
  return path.slice(prefix.length);
}

/**
 * Whose error body answers a request on a path that has no route, or a refusal before its route
 * is known, decided by the path's prefix so that the client of that API prints the message:
 *
 * - `ops`: `/v1/ops` and `/v1/ops/…`, the native door's `{code, message}`;
 * - `ollama`: `/api/…`, Ollama's `{error}` (the `ollama` client shows `error`);
 * - `openai_cohere`: any other `/v1/…` and `/v2/…`, a body both OpenAI's clients (they read
 *   `error.message`) and Cohere's (they read `message`) show: `{error: {message, type, code,
 *   param}, message, code}`;
 * - `tei`: every other path, TEI's `{error, error_type}`.
 *
 * Every one of them carries Synapse's stable `code` too.
 *
 * @param path The request's path.
 */
export function errorShapeFor(path: string): "ops" | "ollama" | "openai_cohere" | "tei" {
  const under = (prefix: string) => path === prefix || path.startsWith(`${prefix}/`);
  if (under("/v1/ops")) return "ops";
  if (under("/api")) return "ollama";
  if (under("/v1") || under("/v2")) return "openai_cohere";
  return "tei";
}

/** Every route as `METHOD PATH` (`POST /v1/ops/<method>`), in table order: the 404 details. */
export function routeLines(): string[] {
  return HTTP_ROUTES.map((r) => `${r.method} ${r.path}`);
}

/**
 * The refusal of a request whose path has no route: `unknown_method` (404), its details the
 * path and every route of the table ({@link routeLines}). It is a channel error, answered in the
 * error body of the API the path's prefix belongs to ({@link errorShapeFor}): the message lists
 * the routes too, and the details stay with the error (the request log, a caller in process).
 *
 * @param method The request's method.
 * @param path The request's path.
 */
export function unknownRoute(method: string, path: string): SynapseError {
  // No error body has room for the details: the message itself lists the routes.
  const routes = routeLines().join(", ");
  return new SynapseError(
    "unknown_method",
    `Cannot route ${method} ${path}: no such endpoint; the routes are ${routes}`,
    {
      details: { path, endpoints: routeLines() },
    },
  );
}
