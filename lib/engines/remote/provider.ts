/**
 * One remote provider at run time (docs/remote.md): its keep-alive connection pool (a Deno
 * `HttpClient` of its own), at most `max_concurrency` requests in flight, a per-request timeout,
 * a {@link CircuitBreaker}, a {@link LatencyEstimator}, retries of idempotent requests, refused
 * redirects, and the address rules of its `base_url`.
 *
 * Every failure becomes a stable code (contract §2), with `details.provider`:
 * | what happened | code |
 * |---|---|
 * | breaker open, connection refused or reset, timeout, 5xx, 429 | `provider_unavailable` (transient, `retry_after_ms`) |
 * | 401, 403 | `needs_reauth` (the key is read again before the next request: a fixed key file serves without a restart) |
 * | a redirect, another 4xx, a body that is not the API's shape | `provider_protocol_violation` |
 * | the key's variable or file | `credential_config_invalid` (provider_config.ts) |
 *
 * @module
 */
import { SynapseError } from "../../contract/errors.ts";
import { type BreakerSnapshot, CircuitBreaker } from "./breaker.ts";
import { LatencyEstimator, type LatencySnapshot } from "./estimator.ts";
import {
  readProviderKey,
  REMOTE_PROVIDER_DEFAULTS,
  type RemoteProviderConfig,
  type RemoteProviderKind,
} from "./provider_config.ts";

/** Retries of an idempotent request after a connection error or a 502/503/504 (then it fails). */
export const IDEMPOTENT_RETRIES = 2;

/** `retry_after_ms` of a provider failure that names no delay (a reset, a 5xx without Retry-After). */
export const PROVIDER_RETRY_AFTER_MS = 1000;

/** Longest provider request id kept (contract §3: ≤ 128 bytes). */
const REQUEST_ID_MAX = 128;

/** An answered request. */
export interface ProviderAnswer {
  /** The parsed JSON body. */
  body: unknown;
  /** The response headers. */
  headers: Headers;
  /** The provider's request id (its `x-request-id`, else the one sent). */
  requestId: string;
  /** Wall time of the request that answered, ms. */
  ms: number;
}

/** Options of {@link RemoteProvider.request}. */
export interface ProviderRequestOptions {
  /** The caller's signal: aborting it cancels the request (never retried). */
  signal?: AbortSignal | undefined;
  /** Tokens the request carries, for the latency estimator. */
  tokens?: number;
  /** Safe to send again after a connection error or a 502/503/504. @default false */
  idempotent?: boolean;
  /** Extra request headers. */
  headers?: Record<string, string>;
}

/** What a status row shows of a provider (never its key). */
export interface ProviderSnapshot {
  provider: string;
  kind: RemoteProviderKind;
  base_url: string;
  max_concurrency: number;
  in_flight: number;
  breaker: BreakerSnapshot;
  latency: LatencySnapshot;
  requests: number;
  failures: number;
}

/** How an address is classified by the loopback and private-network rules. */
export type AddressClass = "loopback" | "private" | "public";

/**
 * Classifies an IP address (IPv4 dotted, or IPv6): `loopback` (127/8, ::1, 0.0.0.0/8, ::),
 * `private` (10/8, 172.16/12, 192.168/16, 100.64/10, 169.254/16, fc00::/7, fe80::/10), else
 * `public`. IPv4-mapped IPv6 addresses are judged as their IPv4 address.
 *
 * @returns The class, or undefined when `ip` is not an IP address.
 */
export function classifyAddress(ip: string): AddressClass | undefined {
  const v4 = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(ip);
  if (v4) {
    const [a, b] = [Number(v4[1]), Number(v4[2])];
    if (v4.slice(1).some((x) => Number(x) > 255)) return undefined;
    if (a === 127 || a === 0) return "loopback";
    if (a === 10 || (a === 172 && b >= 16 && b <= 31) || (a === 192 && b === 168)) {
      return "private";
    }
    if ((a === 100 && b >= 64 && b <= 127) || (a === 169 && b === 254)) return "private";
    return "public";
  }
  const h = ipv6Hextets(ip.replace(/^\[|\]$/g, ""));
  if (h === undefined) return undefined;
  if (h.slice(0, 7).every((x) => x === 0) && (h[7] === 0 || h[7] === 1)) return "loopback";
  if (h.slice(0, 5).every((x) => x === 0) && h[5] === 0xffff) {
    // IPv4-mapped (::ffff:a.b.c.d, also written ::ffff:7f00:1): judged as its IPv4 address.
    return classifyAddress(`${h[6]! >> 8}.${h[6]! & 255}.${h[7]! >> 8}.${h[7]! & 255}`);
  }
  if ((h[0]! & 0xfe00) === 0xfc00 || (h[0]! & 0xffc0) === 0xfe80) return "private";
  return "public";
}

/** The eight 16-bit groups of an IPv6 address (`::` and a trailing dotted IPv4 expanded), or undefined. */
function ipv6Hextets(s: string): number[] | undefined {
  if (!s.includes(":") || /[^0-9a-fA-F:.]/.test(s)) return undefined;
  let text = s;
  const v4 = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text);
  if (v4) {
    const b = v4.slice(1).map(Number);
    if (b.some((x) => x > 255)) return undefined;
    text = `${text.slice(0, v4.index)}${((b[0]! << 8) | b[1]!).toString(16)}:${
      ((b[2]! << 8) | b[3]!).toString(16)
    }`;
  }
  const halves = text.split("::");
  if (halves.length > 2) return undefined;
  const part = (x: string) => (x === "" ? [] : x.split(":"));
  const head = part(halves[0]!);
  const tail = halves.length === 2 ? part(halves[1]!) : [];
  const fill = 8 - head.length - tail.length;
  if (halves.length === 2 ? fill < 1 : fill !== 0) return undefined;
  const groups = [...head, ...Array(halves.length === 2 ? fill : 0).fill("0"), ...tail];
  if (groups.some((g) => !/^[0-9a-fA-F]{1,4}$/.test(g))) return undefined;
  return groups.map((g) => parseInt(g, 16));
}

/**
 * Checks a provider's `base_url`: its syntax (`http`/`https`, no credentials, query or
 * fragment) and, resolving its host, the loopback and private-network rules.
 *
 * @param p The entry.
 * @param resolve Host → addresses. @default A and AAAA records via `Deno.resolveDns`
 * @returns The URL without a trailing slash.
 * @throws {SynapseError} `invalid_request` `{provider, field: "base_url", reason}` — `bad_url`,
 *   `loopback_refused`, `private_network_refused`, `unresolvable`.
 */
export async function checkBaseUrl(
  p: Pick<RemoteProviderConfig, "id" | "base_url" | "allow_loopback" | "allow_private_network">,
  resolve: (host: string) => Promise<string[]> = resolveHost,
): Promise<string> {
  const refuse = (reason: string, why: string): never => {
    throw new SynapseError(
      "invalid_request",
      `Cannot use remote provider '${p.id}': its base_url ${why}`,
      { details: { provider: p.id, field: "base_url", reason } },
    );
  };
  let url: URL;
  try {
    url = new URL(p.base_url);
  } catch {
    return refuse("bad_url", "is not a URL");
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    return refuse("bad_url", `must be http or https, not ${url.protocol.replace(":", "")}`);
  }
  if (url.username !== "" || url.password !== "") {
    return refuse("bad_url", "must not hold credentials; use api_key_env or api_key_file");
  }
  if (url.search !== "" || url.hash !== "" || /[?#]/.test(p.base_url)) {
    return refuse("bad_url", "must not have a query or fragment");
  }
  const host = url.hostname.replace(/^\[|\]$/g, "");
  let addresses: string[];
  if (classifyAddress(host) !== undefined) addresses = [host];
  else if (host === "localhost" || host.endsWith(".localhost")) addresses = ["127.0.0.1"];
  else {
    try {
      addresses = await resolve(host);
    } catch {
      addresses = [];
    }
    if (addresses.length === 0) return refuse("unresolvable", `host ${host} does not resolve`);
  }
  for (const a of addresses) {
    const cls = classifyAddress(a);
    if (cls === "loopback" && p.allow_loopback !== true) {
      return refuse(
        "loopback_refused",
        `resolves to the loopback address ${a}; set "allow_loopback": true on the provider to allow it`,
      );
    }
    if (cls === "private" && p.allow_private_network !== true) {
      return refuse(
        "private_network_refused",
        `resolves to the private address ${a}; set "allow_private_network": true on the provider to allow it`,
      );
    }
  }
  return url.href.replace(/\/+$/, "");
}

async function resolveHost(host: string): Promise<string[]> {
  const out: string[] = [];
  for (const type of ["A", "AAAA"] as const) {
    try {
      out.push(...await Deno.resolveDns(host, type));
    } catch { /* no record of this type */ }
  }
  return out;
}

/** A semaphore of `n` slots, FIFO. */
class Slots {
  readonly #n: number;
  #free: number;
  #waiters: (() => void)[] = [];
  constructor(n: number) {
    this.#n = n;
    this.#free = n;
  }
  get inUse(): number {
    return this.#n - this.#free;
  }
  async take(signal: AbortSignal | undefined): Promise<void> {
    if (this.#free > 0) {
      this.#free--;
      return;
    }
    const { promise, resolve, reject } = Promise.withResolvers<void>();
    const w = () => resolve();
    this.#waiters.push(w);
    const onAbort = () => {
      const i = this.#waiters.indexOf(w);
      if (i >= 0) this.#waiters.splice(i, 1);
      reject(signal!.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      await promise;
    } finally {
      signal?.removeEventListener("abort", onAbort);
    }
  }
  give(): void {
    const w = this.#waiters.shift();
    if (w) w();
    else this.#free++;
  }
}

/** One provider: pool, slots, breaker, estimator. */
export class RemoteProvider {
  readonly id: string;
  readonly kind: RemoteProviderKind;
  readonly maxConcurrency: number;
  readonly timeoutMs: number;
  readonly breaker: CircuitBreaker;
  readonly latency = new LatencyEstimator();
  #config: RemoteProviderConfig;
  #baseUrl: string | undefined;
  #key: string | undefined;
  #client: Deno.HttpClient | undefined;
  #slots: Slots;
  #requests = 0;
  #failures = 0;
  #opening: Promise<void> | undefined;
  /** The provider refused the key: read it again before the next request (a fixed key file). */
  #keyStale = false;

  /**
   * @param config The entry (validated by {@link RemoteProviderSchema}).
   * @param now Clock of the breaker, ms. @default Date.now
   */
  constructor(config: RemoteProviderConfig, now: () => number = Date.now) {
    this.#config = config;
    this.id = config.id;
    this.kind = config.kind;
    this.maxConcurrency = config.max_concurrency ?? REMOTE_PROVIDER_DEFAULTS.max_concurrency;
    this.timeoutMs = config.timeout_ms ?? REMOTE_PROVIDER_DEFAULTS.timeout_ms;
    this.breaker = new CircuitBreaker(
      config.breaker?.failure_threshold ?? REMOTE_PROVIDER_DEFAULTS.failure_threshold,
      config.breaker?.open_ms ?? REMOTE_PROVIDER_DEFAULTS.open_ms,
      now,
    );
    this.#slots = new Slots(this.maxConcurrency);
  }

  /** The checked base URL (after {@link open}). */
  get baseUrl(): string {
    return this.#baseUrl ?? this.#config.base_url.replace(/\/+$/, "");
  }

  /**
   * Checks the base URL's address, reads the key and opens the connection pool; once (later
   * calls wait for the first).
   *
   * @throws {SynapseError} as {@link checkBaseUrl} and `readProviderKey`; `invalid_request`
   *   `{reason: "ca_file_unreadable"}`.
   */
  open(): Promise<void> {
    this.#opening ??= this.#open();
    const p = this.#opening;
    // A failed open may be retried by the next load.
    p.catch(() => {
      if (this.#opening === p) this.#opening = undefined;
    });
    return p;
  }

  async #open(): Promise<void> {
    this.#baseUrl = await checkBaseUrl(this.#config);
    this.#key = readProviderKey(this.#config);
    let caCerts: string[] | undefined;
    if (this.#config.tls?.ca_file !== undefined) {
      try {
        caCerts = [await Deno.readTextFile(this.#config.tls.ca_file)];
      } catch {
        throw new SynapseError(
          "invalid_request",
          `Cannot use remote provider '${this.id}': its tls.ca_file ${this.#config.tls.ca_file} cannot be read`,
          { details: { provider: this.id, field: "tls.ca_file", reason: "ca_file_unreadable" } },
        );
      }
    }
    this.#client?.close();
    this.#client = Deno.createHttpClient({
      ...(caCerts === undefined ? {} : { caCerts }),
      poolMaxIdlePerHost: this.maxConcurrency,
      poolIdleTimeout: 90_000,
    });
  }

  /** Where the key comes from, for messages: the variable's name, never a file's path. */
  get keySource(): string {
    return this.#config.api_key_env !== undefined
      ? `its api_key_env ${this.#config.api_key_env}`
      : this.#config.api_key_file !== undefined
      ? "the file its api_key_file names"
      : "no key (set api_key_env or api_key_file)";
  }

  /** Requests in flight. */
  get inFlight(): number {
    return this.#slots.inUse;
  }

  /**
   * The refusal a request would get now without being sent: the breaker is open.
   *
   * @returns `provider_unavailable` with `retry_after_ms`, or undefined.
   */
  refusalNow(): SynapseError | undefined {
    const wait = this.breaker.retryAfterMs();
    if (wait === 0) return undefined;
    return this.#unavailable(
      `its circuit breaker is open after ${this.breaker.failureThreshold} consecutive failures; retry in ${wait} ms`,
      "breaker_open",
      wait,
    );
  }

  /**
   * Sends one request and parses its JSON answer.
   *
   * @param method `GET` or `POST`.
   * @param path Route appended to the base URL (`/v1/embeddings`).
   * @param body JSON body (POST).
   * @returns The answer.
   * @throws {SynapseError} as the module doc's table says; the caller's `signal.reason` when it
   *   aborted.
   */
  async request(
    method: "GET" | "POST",
    path: string,
    body: unknown,
    options: ProviderRequestOptions = {},
  ): Promise<ProviderAnswer> {
    await this.open();
    const { signal } = options;
    for (let attempt = 0;; attempt++) {
      signal?.throwIfAborted();
      if (!this.breaker.tryAcquire()) {
        throw this.refusalNow() ??
          this.#unavailable(
            "its circuit breaker is half-open and its trial request is in flight",
            "breaker_open",
            100,
          );
      }
      try {
        await this.#slots.take(signal);
      } catch (e) {
        this.breaker.onAbandoned();
        throw e;
      }
      let outcome: { ok: true; answer: ProviderAnswer } | {
        ok: false;
        error: unknown;
        retry: boolean;
      };
      try {
        outcome = await this.#send(method, path, body, options);
      } finally {
        this.#slots.give();
      }
      if (outcome.ok) return outcome.answer;
      if (signal?.aborted) throw signal.reason;
      if (!(outcome.retry && options.idempotent === true && attempt < IDEMPOTENT_RETRIES)) {
        throw outcome.error;
      }
      if (this.breaker.state !== "closed") throw outcome.error;
      await sleep(50 * 4 ** attempt, signal);
    }
  }

  async #send(
    method: "GET" | "POST",
    path: string,
    body: unknown,
    options: ProviderRequestOptions,
  ): Promise<{ ok: true; answer: ProviderAnswer } | { ok: false; error: unknown; retry: boolean }> {
    const sentId = crypto.randomUUID();
    const headers: Record<string, string> = {
      accept: "application/json",
      "x-request-id": sentId,
      ...options.headers,
    };
    if (this.#keyStale) {
      // The key the provider refused may have been fixed in its file since (an environment
      // variable reads the same until a restart). A key that cannot be read now is that error.
      try {
        this.#key = readProviderKey(this.#config);
        this.#keyStale = false;
      } catch (e) {
        return { ok: false, error: e, retry: false };
      }
    }
    if (this.#key !== undefined) headers.authorization = `Bearer ${this.#key}`;
    if (method === "POST") headers["content-type"] = "application/json";
    const timeout = AbortSignal.timeout(this.timeoutMs);
    const signal = options.signal === undefined
      ? timeout
      : AbortSignal.any([options.signal, timeout]);
    const t0 = performance.now();
    this.#requests++;
    let res: Response;
    let text: string;
    try {
      res = await fetch(`${this.baseUrl}${path}`, {
        method,
        headers,
        ...(method === "POST" ? { body: JSON.stringify(body) } : {}),
        redirect: "manual",
        signal,
        ...(this.#client === undefined ? {} : { client: this.#client }),
      });
      text = await res.text();
    } catch (e) {
      if (options.signal?.aborted) {
        this.breaker.onAbandoned();
        return { ok: false, error: options.signal.reason, retry: false };
      }
      this.#failures++;
      this.breaker.onFailure();
      if (e instanceof Deno.errors.NotCapable || e instanceof Deno.errors.PermissionDenied) {
        return {
          ok: false,
          retry: false,
          error: this.#unavailable(
            "this process may not connect to its host (under the ck-synapse launcher, add host:port to SYNAPSE_ALLOW_NET)",
            "net_not_allowed",
            PROVIDER_RETRY_AFTER_MS,
          ),
        };
      }
      const timedOut = timeout.aborted;
      const why = connectionFailure(e);
      return {
        ok: false,
        retry: !timedOut,
        error: this.#unavailable(
          timedOut
            ? `it did not answer within timeout_ms ${this.timeoutMs}`
            : `the connection failed (${why})`,
          timedOut ? "timeout" : "connection_failed",
          PROVIDER_RETRY_AFTER_MS,
        ),
      };
    }
    const ms = performance.now() - t0;
    const requestId = clipId(res.headers.get("x-request-id")) ?? sentId;
    const status = res.status;
    if (status >= 200 && status < 300) {
      let parsed: unknown;
      try {
        parsed = JSON.parse(text);
      } catch {
        this.breaker.onSuccess();
        return {
          ok: false,
          retry: false,
          error: this.violation("its answer is not JSON", "bad_json", { http_status: status }),
        };
      }
      this.breaker.onSuccess();
      this.latency.observe(options.tokens ?? 0, ms);
      return { ok: true, answer: { body: parsed, headers: res.headers, requestId, ms } };
    }
    const providerMessage = messageOf(text);
    const providerCode = codeOf(text);
    if (status >= 500 || status === 429 || status === 408) {
      const retryAfter = retryAfterMs(res.headers.get("retry-after")) ?? PROVIDER_RETRY_AFTER_MS;
      if (status === 429) this.breaker.onSuccess();
      else {
        this.#failures++;
        this.breaker.onFailure();
      }
      return {
        ok: false,
        retry: status === 502 || status === 503 || status === 504,
        error: this.#unavailable(
          `it answered HTTP ${status}${providerMessage === "" ? "" : `: ${providerMessage}`}`,
          status === 429 ? "rate_limited" : "http_status",
          retryAfter,
          { http_status: status, provider_request_id: requestId },
        ),
      };
    }
    this.breaker.onSuccess();
    if (status === 401 || status === 403) {
      this.#keyStale = true;
      return {
        ok: false,
        retry: false,
        error: new SynapseError(
          "needs_reauth",
          `Remote provider '${this.id}' refused the credentials (HTTP ${status}); ${
            this.#config.api_key_env !== undefined
              ? `fix the key in ${this.#config.api_key_env} and restart the server`
              : this.#config.api_key_file !== undefined
              ? `fix the key in the file remote_providers '${this.id}' names as api_key_file (this server's own; read again at the next request)`
              : "the provider entry sends none: set api_key_env or api_key_file and restart the server"
          }, then send the request again; a durable job this paused continues with job.resume {job_id}`,
          { details: { provider: this.id, http_status: status, provider_request_id: requestId } },
        ),
      };
    }
    if (status >= 300 && status < 400) {
      return {
        ok: false,
        retry: false,
        error: this.violation(
          `it answered a redirect (HTTP ${status}), and redirects are refused; set base_url to where it points`,
          "redirect_refused",
          { http_status: status },
        ),
      };
    }
    return {
      ok: false,
      retry: false,
      error: this.violation(
        `it refused the request with HTTP ${status}${
          providerMessage === "" ? "" : `: ${providerMessage}`
        }`,
        "provider_refused",
        {
          http_status: status,
          provider_request_id: requestId,
          ...(providerCode === undefined ? {} : { provider_code: providerCode }),
          ...(providerMessage === "" ? {} : { provider_message: providerMessage }),
        },
      ),
    };
  }

  /**
   * A `provider_protocol_violation` of this provider.
   *
   * @param why What the provider did.
   * @param reason Stable reason.
   */
  violation(why: string, reason: string, extra: Record<string, unknown> = {}): SynapseError {
    return new SynapseError(
      "provider_protocol_violation",
      `Remote provider '${this.id}' broke its API: ${why}`,
      { details: { provider: this.id, reason, ...extra } },
    );
  }

  #unavailable(
    why: string,
    reason: string,
    retryAfter: number,
    extra: Record<string, unknown> = {},
  ): SynapseError {
    return new SynapseError(
      "provider_unavailable",
      `Remote provider '${this.id}' is unavailable: ${why}`,
      {
        retryAfterMs: Math.max(1, Math.round(retryAfter)),
        details: { provider: this.id, reason, ...extra },
      },
    );
  }

  /** What status rows show (never the key). */
  snapshot(): ProviderSnapshot {
    return {
      provider: this.id,
      kind: this.kind,
      base_url: this.baseUrl,
      max_concurrency: this.maxConcurrency,
      in_flight: this.inFlight,
      breaker: this.breaker.snapshot(),
      latency: this.latency.snapshot(),
      requests: this.#requests,
      failures: this.#failures,
    };
  }

  /** Closes the connection pool. Idempotent. */
  close(): void {
    this.#client?.close();
    this.#client = undefined;
    this.#opening = undefined;
  }
}

/** What a failed fetch says of the connection, in a few words (never a URL or a path). */
function connectionFailure(e: unknown): string {
  const text = `${(e as Error)?.message ?? ""} ${String((e as { cause?: unknown })?.cause ?? "")}`;
  const known =
    /connection refused|connection reset|connection closed[a-z ]*|broken pipe|timed out|dns error|no route to host|network is unreachable|certificate[a-z ]*|tls[a-z ]*handshake[a-z ]*/i
      .exec(text);
  return known?.[0].toLowerCase() ?? (e as Error)?.name ?? "unknown error";
}

function clipId(v: string | null): string | undefined {
  if (v === null) return undefined;
  const s = v.trim();
  if (s === "" || !/^[\x21-\x7e]+$/.test(s)) return undefined;
  return s.length > REQUEST_ID_MAX ? s.slice(0, REQUEST_ID_MAX) : s;
}

/** `Retry-After` as ms (seconds, or an HTTP date), capped at 10 minutes. */
function retryAfterMs(v: string | null): number | undefined {
  if (v === null) return undefined;
  const s = Number(v.trim());
  const ms = Number.isFinite(s) ? s * 1000 : Date.parse(v) - Date.now();
  if (!Number.isFinite(ms)) return undefined;
  return Math.min(Math.max(ms, 1), 600_000);
}

/** A provider's error code (`error.code`, else `code`), when its body is JSON with a short one. */
function codeOf(text: string): string | undefined {
  try {
    const j = JSON.parse(text);
    const c = j?.error?.code ?? j?.code ?? j?.error_type;
    return typeof c === "string" && /^[A-Za-z0-9_.-]{1,64}$/.test(c) ? c : undefined;
  } catch {
    return undefined;
  }
}

/** A provider's error message, from a JSON body's usual fields, clipped. */
function messageOf(text: string): string {
  let m = text;
  try {
    const j = JSON.parse(text);
    m = typeof j?.error === "string"
      ? j.error
      : typeof j?.error?.message === "string"
      ? j.error.message
      : typeof j?.message === "string"
      ? j.message
      : text;
  } catch { /* not JSON: the text itself */ }
  m = m.replace(/\s+/g, " ").trim();
  return m.length > 300 ? `${m.slice(0, 300)}…` : m;
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
