/**
 * How CLI commands reach Synapse: an embedded instance in this process, a running server over
 * loopback HTTP (`--url`, `SYNAPSE_URL`, or the address a running `serve` recorded), or the
 * `synapse` module on the subc bus (`--subc`). All answer with the wire body and its kind, so
 * commands print the same thing whichever door they used.
 *
 * The instance, the HTTP door and the bus consumer are imported when a client opens, not when
 * this module loads.
 *
 * @module
 */
import { SynapseError } from "../contract/errors.ts";
import type { EnvSource } from "../paths.ts";
import type { SubcConsumer, SubcRoute } from "../subc/consumer.ts";
import { SubcWireError } from "../subc/errors.ts";
import type { Synapse, SynapseOptions } from "../synapse.ts";
import { describeSource } from "./_find_server.ts";
import type { ServerSource } from "./_find_server.ts";

/** Kind of a call's outcome, as the wire body shows it. */
export type ClientOutcomeKind = "result" | "semantic" | "channel";

/**
 * One call's outcome: `body` is the wire JSON — `{result}` for results and semantic errors
 * (`result.error` set), `{code, message}` for channel errors.
 */
export interface ClientOutcome {
  kind: ClientOutcomeKind;
  body: unknown;
}

/** A way to call Synapse operations. */
export interface SynapseClient extends AsyncDisposable {
  /**
   * Calls one operation.
   *
   * @param method Contract method, e.g. `"embed.query"`.
   * @param params Its params (a JSON value).
   * @returns The outcome; never rejects for a refusal (errors travel in the body).
   */
  call(method: string, params: unknown): Promise<ClientOutcome>;
  /** Releases the client (disposes an embedded instance). Idempotent. */
  close(): Promise<void>;
  /** The server's base URL for a client over HTTP; absent for an embedded instance. */
  readonly url?: URL;
  /**
   * The command-line flag that reaches the same server again (`--url http://…`, `--subc FILE`),
   * for hints; absent for an embedded instance.
   */
  readonly serverFlag?: string;
}

/** A client over an embedded instance that it created and owns. */
export class InProcessClient implements SynapseClient {
  /** The embedded instance. */
  readonly synapse: Synapse;

  /** @internal Use {@link InProcessClient.create}. */
  constructor(synapse: Synapse) {
    this.synapse = synapse;
  }

  /**
   * Starts an embedded instance and waits for its models to settle.
   *
   * @param options Passed to {@link createSynapse}.
   * @throws {SynapseError} as {@link createSynapse} (bad config, store failure).
   */
  static async create(options: SynapseOptions = {}): Promise<InProcessClient> {
    const { createSynapse } = await import("../synapse.ts");
    const synapse = await createSynapse(options);
    await synapse.modelsSettled;
    return new InProcessClient(synapse);
  }

  /** @inheritdoc */
  async call(method: string, params: unknown): Promise<ClientOutcome> {
    const outcome = await this.synapse.call(method, params, { door: "cli" });
    return { kind: outcome.kind, body: outcome.body };
  }

  /** Disposes the embedded instance. */
  close(): Promise<void> {
    return this.synapse.dispose();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}

/**
 * Parses a server URL: an `http:` URL whose host is loopback.
 *
 * @param url The value, e.g. `http://127.0.0.1:8080`.
 * @param isLoopbackHostname The HTTP door's loopback rule (`lib/doors/http/server.ts`).
 * @param source Where the value came from, named in the message. @default "--url"
 * @returns The parsed URL.
 * @throws {SynapseError} channel `invalid_request` for anything else.
 */
export function parseLoopbackUrl(
  url: string,
  isLoopbackHostname: (hostname: string) => boolean,
  source: ServerSource = "--url",
): URL {
  const what = typeof source === "string" ? `${source} '${url}'` : `the server address '${url}'`;
  const field = source === "SYNAPSE_URL" ? "SYNAPSE_URL" : "url";
  if (url.startsWith("unix:")) {
    if (!url.startsWith("unix:/")) {
      throw new SynapseError(
        "invalid_request",
        `Cannot use ${what}: give unix:/ABSOLUTE/PATH of the socket`,
        { channel: true, details: { field } },
      );
    }
    return new URL(url);
  }
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new SynapseError("invalid_request", `Cannot use ${what}: not a URL`, {
      channel: true,
      details: { field },
    });
  }
  if (parsed.protocol !== "http:" || !isLoopbackHostname(parsed.hostname)) {
    throw new SynapseError(
      "invalid_request",
      `Cannot use ${what}: give an http:// URL on a loopback host (127.0.0.1, [::1], localhost)`,
      { channel: true, details: { field } },
    );
  }
  return parsed;
}

/**
 * The code of a CLI outcome when the server could not be reached at all (refused, reset, no
 * answer). It is the CLI's own, never sent by a Synapse server: the request never reached one.
 */
export const CONNECTION_FAILED = "connection_failed";

/** Options of {@link HttpClient}. */
export interface HttpClientOptions {
  /** Fetch implementation. @default globalThis.fetch */
  fetch?: typeof fetch;
  /** Where the URL came from, named in errors. @default "--url" */
  source?: ServerSource;
  /** The owner's key, sent as `Authorization: Bearer` (only to the recorded server). */
  key?: string | undefined;
}

/** A client over a running server's `POST /v1/ops/<method>`. */
export class HttpClient implements SynapseClient {
  /** Base URL of the server. */
  readonly url: URL;
  /** Where the URL came from. */
  readonly source: ServerSource;
  #fetch: typeof fetch;
  #key: string | undefined;
  #unix: Deno.HttpClient | undefined;

  /** `--url <origin>` (`--url unix:PATH` for a unix socket). */
  get serverFlag(): string {
    return `--url ${this.#origin}`;
  }

  get #origin(): string {
    return this.url.protocol === "unix:" ? `unix:${this.url.pathname}` : this.url.origin;
  }

  /** @internal Use {@link HttpClient.open}. */
  constructor(url: URL, options: HttpClientOptions = {}) {
    this.url = url;
    this.source = options.source ?? "--url";
    this.#fetch = options.fetch ?? fetch;
    this.#key = options.key;
  }

  /**
   * Checks the URL and makes a client (nothing is sent yet).
   *
   * @param url Loopback http URL of the server.
   * @param options Injected fetch; where the URL came from.
   * @throws {SynapseError} channel `invalid_request` for a URL that is not loopback http.
   */
  static async open(url: string, options: HttpClientOptions = {}): Promise<HttpClient> {
    const { isLoopbackHostname } = await import("../doors/http/server.ts");
    return new HttpClient(parseLoopbackUrl(url, isLoopbackHostname, options.source), options);
  }

  /**
   * Posts the params; a server that cannot be reached answers a channel outcome with code
   * {@link CONNECTION_FAILED} naming the URL and where it came from, a body that is not wire
   * JSON a channel `encode_failed`.
   */
  async call(method: string, params: unknown): Promise<ClientOutcome> {
    const unix = this.url.protocol === "unix:";
    const target = new URL(
      `/v1/ops/${encodeURIComponent(method)}`,
      unix ? "http://localhost" : this.url,
    );
    const headers: Record<string, string> = { "content-type": "application/json" };
    if (this.#key !== undefined) headers["authorization"] = `Bearer ${this.#key}`;
    let text: string;
    try {
      if (unix) {
        this.#unix ??= Deno.createHttpClient({
          proxy: { transport: "unix", path: this.url.pathname },
        });
      }
      const res = await this.#fetch(target, {
        method: "POST",
        headers,
        body: JSON.stringify(params ?? {}),
        ...(this.#unix === undefined ? {} : { client: this.#unix }),
      });
      text = await res.text();
    } catch (err) {
      return connectionFailed(this.url, this.source, err);
    }
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      return channel("encode_failed", `Cannot decode the answer of ${target.href}: not JSON`);
    }
    return classify(body);
  }

  /** Closes the unix socket client, if one was opened. */
  close(): Promise<void> {
    this.#unix?.close();
    this.#unix = undefined;
    return Promise.resolve();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}

/**
 * Classifies a wire body: a top-level `code` is a channel error, a `result` holding only
 * `module_generation` and an `error` object a semantic error (a job payload may carry an `error`
 * field of its own), any other `result` a result.
 *
 * @param body Parsed wire JSON.
 * @returns The outcome; a body of none of these shapes is a channel `encode_failed`.
 */
export function classify(body: unknown): ClientOutcome {
  if (typeof body === "object" && body !== null && !Array.isArray(body)) {
    const b = body as Record<string, unknown>;
    if (typeof b.code === "string") return { kind: "channel", body };
    if ("result" in b) {
      return { kind: isSemanticError(b.result) ? "semantic" : "result", body };
    }
  }
  return channel("encode_failed", "Cannot decode the answer: not a Synapse wire body");
}

function isSemanticError(r: unknown): boolean {
  if (typeof r !== "object" || r === null || Array.isArray(r)) return false;
  const rec = r as Record<string, unknown>;
  return typeof rec.error === "object" && rec.error !== null &&
    Object.keys(rec).every((k) => k === "error" || k === "module_generation");
}

function channel(code: "encode_failed", message: string): ClientOutcome {
  return { kind: "channel", body: { code, message } };
}

/** The outcome of a request that reached no server: `{code: "connection_failed", message, url}`. */
function connectionFailed(url: URL, source: ServerSource, err: unknown): ClientOutcome {
  // Deno's fetch says "fetch failed"; the OS error is in the cause, in three layers of wording.
  const raw = [err, (err as { cause?: unknown })?.cause]
    .map((e) => e instanceof Error ? e.message : e === undefined ? "" : String(e))
    .filter((m) => m !== "").join(": ");
  const reason = /(Connection refused|Connection reset[^(]*|timed out|No route to host)/i.exec(raw)
    ?.[1]?.trim() ?? raw;
  const origin = url.protocol === "unix:" ? `unix:${url.pathname}` : url.origin;
  const listen = url.protocol === "unix:" ? origin : url.host;
  const hint = source === "--url"
    ? `is 'ck-synapse serve --http ${listen}' running?`
    : source === "SYNAPSE_URL"
    ? `is 'ck-synapse serve --http ${listen}' running? (unset SYNAPSE_URL to run embedded)`
    : "it may be shutting down; try again";
  return {
    kind: "channel",
    body: {
      code: CONNECTION_FAILED,
      message: `Cannot connect to Synapse at ${origin} (from ${
        describeSource(source)
      }): ${reason}; ${hint}`,
      url: origin,
    },
  };
}

/** Options of {@link BusClient}. */
export interface BusClientOptions {
  /** Environment source (`SUBC_CONNECTION_FILE` and the ladder, `SUBC_MODULE_ID`). */
  env?: EnvSource | undefined;
  /** Stops a route.open still retrying (the command's signal). */
  signal?: AbortSignal | undefined;
}

/**
 * A client over the subc bus: it authenticates to the daemon as a client, opens a
 * management-surface route to the module `SUBC_MODULE_ID` (else `synapse`), sends each call as
 * `{method, params}` on it, and at the end says Goodbye on the route and closes the connection.
 * It connects at the first call; later calls reuse the route.
 *
 * Outcomes: a Response is the wire body (`{result}`, classified as {@link classify}); an Error
 * terminal is a channel outcome `{code, message}` with its code verbatim (`unknown_method`,
 * `invalid_request`, `cancelled`, …; `details` when the module sent any); a daemon that cannot
 * be reached, a connection file that cannot be trusted or a handshake that fails is a channel
 * outcome {@link CONNECTION_FAILED}, naming the file; a route.open refused after its retries is a
 * channel outcome with the daemon's code (`module_warming`, `target_unavailable`, …). There is
 * never a fallback to another door.
 */
export class BusClient implements SynapseClient {
  /** The `--subc` path, or undefined for the ladder (`SUBC_CONNECTION_FILE`, …). */
  readonly connectionFile: string | undefined;
  readonly #options: BusClientOptions;
  #connected: { consumer: SubcConsumer; route: SubcRoute } | undefined;
  #closed = false;

  /**
   * Makes a client (nothing is sent until the first call).
   *
   * @param connectionFile The `--subc` path; undefined or empty for the ladder of subc §1.
   * @param options Environment, signal.
   */
  constructor(connectionFile: string | undefined, options: BusClientOptions = {}) {
    this.connectionFile = connectionFile === "" ? undefined : connectionFile;
    this.#options = options;
  }

  /** `--subc <the connection file used>` (or the one named). */
  get serverFlag(): string {
    const path = this.#connected?.consumer.connectionFile ?? this.connectionFile;
    return path === undefined ? "--subc" : `--subc ${path}`;
  }

  /** Sends one call on the route (connecting and opening it first when needed). */
  async call(method: string, params: unknown): Promise<ClientOutcome> {
    const { SubcCallError, terminalError } = await import("../subc/consumer.ts");
    let connected;
    try {
      connected = await this.#connect();
    } catch (err) {
      return busRefusal(err, this.connectionFile, SubcCallError);
    }
    const body = new TextEncoder().encode(JSON.stringify({ method, params: params ?? {} }));
    let terminal;
    try {
      terminal = await connected.route.request(body);
    } catch (err) {
      return busRefusal(err, this.connectionFile, SubcCallError);
    }
    if (terminal.kind === "error") {
      const e = terminalError(terminal, method);
      const out: Record<string, unknown> = { code: e.code, message: e.remoteMessage ?? e.message };
      if (typeof e.detail === "object" && e.detail !== null) out.details = e.detail;
      return { kind: "channel", body: out };
    }
    if (terminal.kind === "stream_end") {
      return channel(
        "encode_failed",
        `Cannot decode the answer to '${method}': a stream, not a body`,
      );
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(terminal.body));
    } catch {
      return channel("encode_failed", `Cannot decode the answer to '${method}': not UTF-8 JSON`);
    }
    return classify(parsed);
  }

  /** Goodbye on the route, then the connection closes. Idempotent. */
  async close(): Promise<void> {
    this.#closed = true;
    const c = this.#connected;
    this.#connected = undefined;
    if (c === undefined) return;
    await c.route.close();
    await c.consumer.close();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  async #connect(): Promise<{ consumer: SubcConsumer; route: SubcRoute }> {
    if (this.#connected !== undefined && !this.#connected.consumer.closed) return this.#connected;
    if (this.#closed) throw new Error("Cannot call: the bus client was closed. This is a bug");
    const { SubcConsumer } = await import("../subc/consumer.ts");
    const { subcModuleId } = await import("../subc/launch.ts");
    const env = this.#options.env;
    const consumer = await SubcConsumer.connect({
      ...(this.connectionFile === undefined ? {} : { connectionFile: this.connectionFile }),
      ...(env === undefined ? {} : { env }),
    });
    try {
      const route = await consumer.openRoute(subcModuleId(env), {
        signal: this.#options.signal,
      });
      this.#connected = { consumer, route };
      return this.#connected;
    } catch (err) {
      await consumer.close();
      throw err;
    }
  }
}

/**
 * The channel outcome of a bus fault: {@link CONNECTION_FAILED} for what stops the connection
 * (a connection file refused, a failed handshake, an unreachable or vanished daemon), the code
 * itself for a route.open refusal or a closed route.
 */
function busRefusal(
  err: unknown,
  file: string | undefined,
  callError: typeof import("../subc/consumer.ts").SubcCallError,
): ClientOutcome {
  const text = err instanceof Error ? err.message : String(err);
  const where = file === undefined ? "the subc connection file ladder" : file;
  if (err instanceof callError && err.phase !== "connect" && err.code !== "connection_lost") {
    const body: Record<string, unknown> = { code: err.code, message: err.message };
    if (typeof err.detail === "object" && err.detail !== null) body.details = err.detail;
    return { kind: "channel", body };
  }
  if (err instanceof SubcWireError || err instanceof callError) {
    const reason = err instanceof SubcWireError ? err.reason : err.code;
    return {
      kind: "channel",
      body: {
        code: CONNECTION_FAILED,
        message: text.startsWith("Cannot") ? text : `Cannot reach Synapse on the subc bus: ${text}`,
        connection_file: where,
        reason,
      },
    };
  }
  throw err;
}
