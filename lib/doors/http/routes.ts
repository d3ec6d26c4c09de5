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
 * - `openai`: OpenAI's embeddings and model list (lib/doors/http/openai.ts).
 * - `openai_completions`: OpenAI's completions and chat (lib/doors/http/openai_completions.ts).
 * - `rerank_shapes`: Cohere's and Jina's rerank, and `/rerank` in TEI's or Cohere's shape
 *   (lib/doors/http/rerank_shapes.ts).
 * - `cohere_embed`: Cohere's embed (lib/doors/http/cohere_embed.ts).
 * - `tei`: TEI's embed and info (lib/doors/http/tei.ts).
 * - `tokenize_doors`: TEI's and llama.cpp's tokenize, TEI's decode, llama.cpp's detokenize
 *   (lib/doors/http/tokenize_doors.ts).
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
   * The path: exact, or ending `/<method>` for the native door, whose last segment is the
   * operation (`/v1/ops/embed.query`).
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
    { method: "POST", path: "/v1/rerank", adapter: "rerank_shapes", summary: "Cohere/Jina rerank" },
    { method: "POST", path: "/v2/rerank", adapter: "rerank_shapes", summary: "Cohere/Jina rerank" },
    { method: "POST", path: "/v1/embed", adapter: "cohere_embed", summary: "Cohere embed (v1)" },
    { method: "POST", path: "/v2/embed", adapter: "cohere_embed", summary: "Cohere embed (v2)" },
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

/** The routes by exact path (the native door's is found by {@link OPS_PREFIX}). */
const BY_PATH: ReadonlyMap<string, HttpRoute> = new Map(
  HTTP_ROUTES.filter((r) => r.adapter !== "ops").map((r) => [r.path, r]),
);

/** The native door's route. */
const OPS_ROUTE: HttpRoute = HTTP_ROUTES.find((r) => r.adapter === "ops")!;

/**
 * The route of a request path.
 *
 * @param path The request's path (no query).
 * @returns Its route, or undefined (404).
 */
export function findRoute(path: string): HttpRoute | undefined {
  if (path.startsWith(OPS_PREFIX)) return OPS_ROUTE;
  return BY_PATH.get(path);
}

/** Every route as `METHOD PATH` (`POST /v1/ops/<method>`), in table order: the 404 details. */
export function routeLines(): string[] {
  return HTTP_ROUTES.map((r) => `${r.method} ${r.path}`);
}

/**
 * The refusal of a request whose path has no route: `unknown_method` (404), its details the
 * path and every route of the table ({@link routeLines}). It is a channel error, so over HTTP
 * the body is `{code, message}`: the message lists the routes too, and the details stay with the
 * error (the request log, a caller in process).
 *
 * @param method The request's method.
 * @param path The request's path.
 */
export function unknownRoute(method: string, path: string): SynapseError {
  // A channel error's body is {code, message}: the message itself lists the routes.
  const routes = routeLines().join(", ");
  return new SynapseError(
    "unknown_method",
    `Cannot route ${method} ${path}: no such endpoint; the routes are ${routes}`,
    {
      details: { path, endpoints: routeLines() },
    },
  );
}
