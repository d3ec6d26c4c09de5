/**
 * The remote provider's parts, model-free: the circuit breaker (breaker.ts) on a fake clock, the
 * latency estimator (estimator.ts), the address rules and `base_url` check (provider.ts) with a
 * fake resolver, {@link RemoteProvider} against a real loopback HTTP server started here, and
 * the reading of a provider's key (provider_config.ts).
 */
import assert from "node:assert/strict";
import { SynapseError } from "../../../lib/contract/errors.ts";
import { CircuitBreaker, MAX_OPEN_MS } from "../../../lib/engines/remote/breaker.ts";
import { LatencyEstimator } from "../../../lib/engines/remote/estimator.ts";
import {
  checkBaseUrl,
  classifyAddress,
  IDEMPOTENT_RETRIES,
  PROVIDER_RETRY_AFTER_MS,
  RemoteProvider,
} from "../../../lib/engines/remote/provider.ts";
import {
  readProviderKey,
  type RemoteProviderConfig,
} from "../../../lib/engines/remote/provider_config.ts";

// ---------------------------------------------------------------------------------------------
// Helpers

/** Awaits `p`, which must reject with a SynapseError, and returns that error. */
async function rejection(p: Promise<unknown>): Promise<SynapseError> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof SynapseError, `expected a SynapseError, got ${String(e)}`);
    return e;
  }
  assert.fail("expected a rejection, but the promise resolved");
}

/** Calls `f`, which must throw a SynapseError, and returns that error. */
function thrown(f: () => unknown): SynapseError {
  try {
    f();
  } catch (e) {
    assert.ok(e instanceof SynapseError, `expected a SynapseError, got ${String(e)}`);
    return e;
  }
  assert.fail("expected a throw, but it returned");
}

/** A fake clock: `now()` reads it, `advance(ms)` moves it. */
function fakeClock(start = 1_000_000): { now: () => number; advance: (ms: number) => void } {
  let t = start;
  return { now: () => t, advance: (ms) => void (t += ms) };
}

/** A loopback HTTP server on a free port. */
function startServer(
  handler: (req: Request) => Response | Promise<Response>,
): { server: Deno.HttpServer<Deno.NetAddr>; port: number; url: string } {
  const server = Deno.serve({ port: 0, hostname: "127.0.0.1", onListen() {} }, handler);
  const port = server.addr.port;
  return { server, port, url: `http://127.0.0.1:${port}` };
}

/** A JSON response. */
function json(body: unknown, status = 200, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: { "content-type": "application/json", ...headers },
  });
}

/** Resolves after `ms`, or early when `signal` aborts (its timer cleared either way). */
function wait(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}

/** A provider entry for a loopback server at `url`. */
function cfg(url: string, extra: Partial<RemoteProviderConfig> = {}): RemoteProviderConfig {
  return { id: "p", kind: "openai", base_url: url, allow_loopback: true, ...extra };
}

// ---------------------------------------------------------------------------------------------
// CircuitBreaker

Deno.test("CircuitBreaker: opens after exactly failure_threshold consecutive failures", () => {
  const clock = fakeClock();
  const b = new CircuitBreaker(3, 1000, clock.now);
  assert.equal(b.state, "closed");
  assert.equal(b.retryAfterMs(), 0);

  b.onFailure();
  b.onFailure();
  // One fewer than the threshold: still closed and letting requests through.
  assert.equal(b.state, "closed");
  assert.equal(b.tryAcquire(), true);
  assert.equal(b.snapshot().consecutiveFailures, 2);

  // A success in between resets the count: two more failures do not open it either.
  b.onSuccess();
  assert.equal(b.snapshot().consecutiveFailures, 0);
  b.onFailure();
  b.onFailure();
  assert.equal(b.state, "closed");
  assert.equal(b.snapshot().opened, 0);

  // The third consecutive one opens it.
  b.onFailure();
  assert.equal(b.state, "open");
  assert.equal(b.tryAcquire(), false);
  assert.deepEqual(b.snapshot(), {
    state: "open",
    consecutiveFailures: 3,
    retryAfterMs: 1000,
    opened: 1,
  });
});

Deno.test("CircuitBreaker: open refuses and retryAfterMs counts down with the clock", () => {
  const clock = fakeClock();
  const b = new CircuitBreaker(1, 1000, clock.now);
  b.onFailure();
  assert.equal(b.state, "open");
  assert.equal(b.retryAfterMs(), 1000);
  assert.equal(b.tryAcquire(), false);

  clock.advance(400);
  assert.equal(b.retryAfterMs(), 600);
  assert.equal(b.tryAcquire(), false);
  assert.equal(b.state, "open");

  clock.advance(599);
  assert.equal(b.retryAfterMs(), 1);
  assert.equal(b.tryAcquire(), false);

  clock.advance(1);
  assert.equal(b.state, "half_open");
  assert.equal(b.retryAfterMs(), 0);
});

Deno.test("CircuitBreaker: half_open lets exactly one trial through; its success closes", () => {
  const clock = fakeClock();
  const b = new CircuitBreaker(2, 5000, clock.now);
  b.onFailure();
  b.onFailure();
  clock.advance(5000);
  assert.equal(b.state, "half_open");

  assert.equal(b.tryAcquire(), true, "the trial goes");
  assert.equal(b.tryAcquire(), false, "a second request waits while the trial is in flight");
  assert.equal(b.tryAcquire(), false);
  assert.ok(b.retryAfterMs() > 0, "a refused caller is told to wait");
  assert.equal(b.state, "half_open");

  b.onSuccess();
  assert.equal(b.state, "closed");
  assert.equal(b.retryAfterMs(), 0);
  assert.equal(b.tryAcquire(), true);
  assert.equal(b.tryAcquire(), true);
  assert.deepEqual(b.snapshot(), {
    state: "closed",
    consecutiveFailures: 0,
    retryAfterMs: 0,
    opened: 1,
  });
});

Deno.test("CircuitBreaker: a failed trial reopens for twice the period, capped at MAX_OPEN_MS", () => {
  assert.equal(MAX_OPEN_MS, 60_000);
  const clock = fakeClock();
  const b = new CircuitBreaker(1, 20_000, clock.now);
  b.onFailure();
  assert.equal(b.retryAfterMs(), 20_000);

  clock.advance(20_000);
  assert.equal(b.tryAcquire(), true);
  b.onFailure();
  assert.equal(b.state, "open");
  assert.equal(b.retryAfterMs(), 40_000, "twice the first period");
  assert.equal(b.snapshot().opened, 2);

  clock.advance(39_999);
  assert.equal(b.state, "open");
  clock.advance(1);
  assert.equal(b.tryAcquire(), true);
  b.onFailure();
  assert.equal(b.retryAfterMs(), 60_000, "80000 capped at MAX_OPEN_MS");

  clock.advance(60_000);
  assert.equal(b.tryAcquire(), true);
  b.onFailure();
  assert.equal(b.retryAfterMs(), 60_000, "stays at the cap");
  assert.equal(b.snapshot().opened, 4);

  // A successful trial resets the period: the next opening is the base period again.
  clock.advance(60_000);
  assert.equal(b.tryAcquire(), true);
  b.onSuccess();
  assert.equal(b.state, "closed");
  b.onFailure();
  assert.equal(b.state, "open");
  assert.equal(b.retryAfterMs(), 20_000);
  assert.equal(b.snapshot().opened, 5);
});

Deno.test("CircuitBreaker: onAbandoned frees the half-open trial", () => {
  const clock = fakeClock();
  const b = new CircuitBreaker(1, 100, clock.now);
  b.onFailure();
  clock.advance(100);
  assert.equal(b.tryAcquire(), true);
  assert.equal(b.tryAcquire(), false);
  b.onAbandoned();
  assert.equal(b.state, "half_open", "an abandoned trial neither closes nor reopens it");
  assert.equal(b.retryAfterMs(), 0);
  assert.equal(b.tryAcquire(), true, "the next caller gets the trial");
  assert.equal(b.tryAcquire(), false);
  assert.equal(b.snapshot().opened, 1);
});

Deno.test("CircuitBreaker: refuses a threshold or period out of range", () => {
  assert.throws(() => new CircuitBreaker(0, 100), RangeError);
  assert.throws(() => new CircuitBreaker(1.5, 100), RangeError);
  assert.throws(() => new CircuitBreaker(1, 0), RangeError);
  assert.throws(() => new CircuitBreaker(1, NaN), RangeError);
});

// ---------------------------------------------------------------------------------------------
// LatencyEstimator

Deno.test("LatencyEstimator: undefined before a sample; one sample is all overhead", () => {
  const e = new LatencyEstimator();
  assert.equal(e.expectedMs(10), undefined);
  assert.deepEqual(e.snapshot(), { samples: 0, overheadMs: 0, perTokenMs: 0 });
  e.observe(10, 30);
  assert.equal(e.expectedMs(10), 30);
  assert.equal(e.expectedMs(1000), 30);
  assert.deepEqual(e.snapshot(), { samples: 1, overheadMs: 30, perTokenMs: 0 });
});

Deno.test("LatencyEstimator: converges near the truth on samples of varied token counts", () => {
  // True model: 20 ms + 0.5 ms/token, noise-free, token counts 10..400 in a fixed mixed order.
  // 200 samples: with alpha 0.2 the starting state weighs 0.8^200 ≈ 4e-20, so whatever is left
  // is the method's own bias. Any consistent linear fit recovers noise-free linear data exactly;
  // 15% leaves room for the "online approximation" the module documents (a bias of a few ms),
  // while an estimate that mixes up overhead and per-token cost misses it by far more.
  const truth = (n: number) => 20 + 0.5 * n;
  const counts = [10, 400, 50, 300, 100, 200, 25, 150, 350, 75];
  const e = new LatencyEstimator();
  for (let i = 0; i < 200; i++) {
    const n = counts[i % counts.length]!;
    e.observe(n, truth(n));
  }
  assert.equal(e.snapshot().samples, 200);
  for (const n of [10, 50, 100, 200, 400]) {
    const got = e.expectedMs(n)!;
    const want = truth(n);
    assert.ok(
      Math.abs(got - want) <= 0.15 * want,
      `expectedMs(${n}) = ${got.toFixed(1)} ms, truth ${want} ms (±15%); snapshot ${
        JSON.stringify(e.snapshot())
      }`,
    );
  }
  const { perTokenMs } = e.snapshot();
  assert.ok(
    Math.abs(perTokenMs - 0.5) <= 0.15 * 0.5,
    `perTokenMs ${perTokenMs}, truth 0.5 (±15%)`,
  );
});

Deno.test("LatencyEstimator: negative and NaN samples are ignored", () => {
  const e = new LatencyEstimator();
  e.observe(-1, 10);
  e.observe(10, -5);
  e.observe(NaN, 10);
  e.observe(10, NaN);
  assert.equal(e.expectedMs(10), undefined);
  assert.equal(e.snapshot().samples, 0);

  e.observe(100, 70);
  const before = e.snapshot();
  e.observe(-1, 10);
  e.observe(10, -5);
  e.observe(NaN, 10);
  e.observe(10, NaN);
  assert.deepEqual(e.snapshot(), before);
  assert.equal(e.expectedMs(100), 70);
});

// ---------------------------------------------------------------------------------------------
// classifyAddress, checkBaseUrl

Deno.test("classifyAddress: loopback, private, public and not an address", () => {
  const cases: [string, string | undefined][] = [
    ["127.0.0.1", "loopback"],
    ["127.255.0.9", "loopback"],
    ["0.0.0.0", "loopback"],
    ["::1", "loopback"],
    ["::", "loopback"],
    ["10.0.0.1", "private"],
    ["10.255.255.255", "private"],
    ["172.16.0.1", "private"],
    ["172.31.255.254", "private"],
    ["192.168.1.1", "private"],
    ["100.64.0.1", "private"],
    ["100.127.255.255", "private"],
    ["169.254.169.254", "private"],
    ["fc00::1", "private"],
    ["fd12::1", "private"],
    ["fe80::1", "private"],
    ["::ffff:10.0.0.1", "private"],
    ["::ffff:127.0.0.1", "loopback"],
    ["172.15.255.255", "public"],
    ["172.32.0.1", "public"],
    ["100.128.0.1", "public"],
    ["192.169.0.1", "public"],
    ["8.8.8.8", "public"],
    ["2001:db8::1", "public"],
    ["::ffff:8.8.8.8", "public"],
    ["example.com", undefined],
    ["300.1.1.1", undefined],
    ["1.2.3", undefined],
    ["", undefined],
  ];
  for (const [ip, want] of cases) assert.equal(classifyAddress(ip), want, ip);
});

/** A fake resolver that answers from a table and records what it was asked. */
function fakeResolver(table: Record<string, string[]>): {
  resolve: (host: string) => Promise<string[]>;
  asked: string[];
} {
  const asked: string[] = [];
  return {
    asked,
    resolve: (host) => {
      asked.push(host);
      const a = table[host];
      return a === undefined ? Promise.reject(new Error(`NXDOMAIN ${host}`)) : Promise.resolve(a);
    },
  };
}

Deno.test("checkBaseUrl: a loopback address is refused without allow_loopback", async () => {
  const r = fakeResolver({});
  for (const base_url of ["http://127.0.0.1:8080", "http://[::1]:8080/v1", "http://0.0.0.0"]) {
    const err = await rejection(checkBaseUrl({ id: "p", base_url }, r.resolve));
    assert.equal(err.code, "invalid_request", base_url);
    assert.deepEqual(
      err.details,
      { provider: "p", field: "base_url", reason: "loopback_refused" },
      base_url,
    );
    assert.match(err.message, /allow_loopback/);
  }
  assert.equal(
    await checkBaseUrl({ id: "p", base_url: "http://127.0.0.1:8080/", allow_loopback: true }),
    "http://127.0.0.1:8080",
  );
  assert.equal(
    await checkBaseUrl({ id: "p", base_url: "http://[::1]:8080/v1", allow_loopback: true }),
    "http://[::1]:8080/v1",
  );
  // allow_private_network does not stand in for allow_loopback.
  const err = await rejection(
    checkBaseUrl({ id: "p", base_url: "http://127.0.0.1", allow_private_network: true }),
  );
  assert.equal(err.details?.reason, "loopback_refused");
  assert.deepEqual(r.asked, [], "an IP literal is never resolved");
});

Deno.test("checkBaseUrl: localhost is loopback", async () => {
  const r = fakeResolver({});
  for (const base_url of ["http://localhost:9000/", "http://api.localhost"]) {
    const err = await rejection(checkBaseUrl({ id: "p", base_url }, r.resolve));
    assert.equal(err.code, "invalid_request");
    assert.equal(err.details?.reason, "loopback_refused", base_url);
    assert.equal(err.details?.field, "base_url");
  }
  assert.equal(
    await checkBaseUrl(
      { id: "p", base_url: "http://localhost:9000/", allow_loopback: true },
      r.resolve,
    ),
    "http://localhost:9000",
  );
  assert.deepEqual(r.asked, [], "localhost is never resolved");
});

Deno.test("checkBaseUrl: a host resolving to a private address needs allow_private_network", async () => {
  const r = fakeResolver({
    "models.internal": ["10.0.0.5"],
    "mixed.example": ["93.184.216.34", "192.168.0.7"],
    "back.example": ["127.0.0.1"],
  });
  const err = await rejection(
    checkBaseUrl({ id: "gpu", base_url: "http://models.internal:8000/v1/" }, r.resolve),
  );
  assert.equal(err.code, "invalid_request");
  assert.deepEqual(err.details, {
    provider: "gpu",
    field: "base_url",
    reason: "private_network_refused",
  });
  assert.match(err.message, /10\.0\.0\.5/);
  assert.match(err.message, /allow_private_network/);
  assert.deepEqual(r.asked, ["models.internal"]);

  assert.equal(
    await checkBaseUrl(
      { id: "gpu", base_url: "http://models.internal:8000/v1/", allow_private_network: true },
      r.resolve,
    ),
    "http://models.internal:8000/v1",
  );
  // One private address among public ones is enough to refuse.
  const mixed = await rejection(
    checkBaseUrl({ id: "gpu", base_url: "https://mixed.example" }, r.resolve),
  );
  assert.equal(mixed.details?.reason, "private_network_refused");
  // A name resolving to loopback is loopback.
  const back = await rejection(
    checkBaseUrl(
      { id: "gpu", base_url: "https://back.example", allow_private_network: true },
      r.resolve,
    ),
  );
  assert.equal(back.details?.reason, "loopback_refused");
});

Deno.test("checkBaseUrl: a public resolution is accepted, trailing slashes stripped", async () => {
  const r = fakeResolver({ "api.example.com": ["93.184.216.34", "2606:2800:220:1::1"] });
  assert.equal(
    await checkBaseUrl({ id: "p", base_url: "https://api.example.com/v1///" }, r.resolve),
    "https://api.example.com/v1",
  );
  assert.equal(
    await checkBaseUrl({ id: "p", base_url: "https://api.example.com/" }, r.resolve),
    "https://api.example.com",
  );
  assert.equal(
    await checkBaseUrl({ id: "p", base_url: "https://api.example.com:8443" }, r.resolve),
    "https://api.example.com:8443",
  );
  assert.equal(
    await checkBaseUrl({ id: "p", base_url: "http://8.8.8.8/" }, r.resolve),
    "http://8.8.8.8",
  );
  assert.deepEqual(r.asked, ["api.example.com", "api.example.com", "api.example.com"]);
});

Deno.test("checkBaseUrl: an unresolvable host is refused", async () => {
  const cases: [string, (host: string) => Promise<string[]>][] = [
    ["no answer", () => Promise.resolve([])],
    ["a resolver error", () => Promise.reject(new Error("NXDOMAIN"))],
  ];
  for (const [what, resolve] of cases) {
    const err = await rejection(
      checkBaseUrl({ id: "p", base_url: "https://nowhere.invalid/v1" }, resolve),
    );
    assert.equal(err.code, "invalid_request", what);
    assert.deepEqual(
      err.details,
      { provider: "p", field: "base_url", reason: "unresolvable" },
      what,
    );
    assert.match(err.message, /nowhere\.invalid/);
  }
});

Deno.test("checkBaseUrl: a bad URL is refused as bad_url", async () => {
  const r = fakeResolver({ h: ["8.8.8.8"], x: ["8.8.8.8"] });
  for (
    const base_url of [
      "ftp://x",
      "http://user:pw@h",
      "http://user@h",
      "http://h/?q=1",
      "http://h/#frag",
      "not a url",
      "",
    ]
  ) {
    const err = await rejection(checkBaseUrl({ id: "p", base_url }, r.resolve));
    assert.equal(err.code, "invalid_request", base_url);
    assert.deepEqual(
      err.details,
      { provider: "p", field: "base_url", reason: "bad_url" },
      base_url,
    );
  }
  // Credentials in a refused URL are not echoed.
  const err = await rejection(checkBaseUrl({ id: "p", base_url: "http://user:pw@h" }, r.resolve));
  assert.ok(!err.message.includes("pw"), err.message);
  assert.deepEqual(r.asked, [], "a bad URL is refused before any resolution");
});

Deno.test("checkBaseUrl: an IPv4-mapped IPv6 literal is judged as its IPv4 address", async () => {
  // The URL parser writes [::ffff:127.0.0.1] as [::ffff:7f00:1]: it must still be loopback.
  const r = fakeResolver({});
  const loop = await rejection(
    checkBaseUrl({ id: "p", base_url: "http://[::ffff:127.0.0.1]:8080" }, r.resolve),
  );
  assert.equal(loop.details?.reason, "loopback_refused");
  const priv = await rejection(
    checkBaseUrl({ id: "p", base_url: "http://[::ffff:10.0.0.1]:8080" }, r.resolve),
  );
  assert.equal(priv.details?.reason, "private_network_refused");
  assert.equal(classifyAddress("::ffff:7f00:1"), "loopback");
  assert.equal(classifyAddress("::ffff:a00:1"), "private");
});

Deno.test("checkBaseUrl: an empty query or fragment marker does not survive into the URL", async () => {
  // "http://h/?" has url.search === "", but the returned base would make every route a query
  // ("http://h/?/v1/embeddings"). Refusing it (bad_url) or dropping the marker are both correct.
  const r = fakeResolver({ h: ["8.8.8.8"] });
  for (const base_url of ["http://h/?", "http://h/#"]) {
    let out: string;
    try {
      out = await checkBaseUrl({ id: "p", base_url }, r.resolve);
    } catch (e) {
      assert.ok(e instanceof SynapseError);
      assert.equal(e.details?.reason, "bad_url", base_url);
      continue;
    }
    assert.ok(!/[?#]/.test(out), `${base_url} was accepted as ${out}`);
  }
});

// ---------------------------------------------------------------------------------------------
// RemoteProvider against a loopback server

Deno.test("RemoteProvider: sends the bearer key from api_key_env and x-request-id", async () => {
  const envName = `SYNAPSE_TEST_KEY_${crypto.randomUUID().replaceAll("-", "_")}`;
  const key = `sk-test-${crypto.randomUUID()}`;
  Deno.env.set(envName, `  ${key}\n`);
  const seen: { path: string; method: string; headers: Headers; body: string }[] = [];
  const { server, url } = startServer(async (req) => {
    const path = new URL(req.url).pathname;
    seen.push({ path, method: req.method, headers: req.headers, body: await req.text() });
    if (path === "/with-id") return json({ data: [1, 2] }, 200, { "x-request-id": "srv-req-42" });
    return json({ data: [3] });
  });
  const provider = new RemoteProvider(cfg(url, { api_key_env: envName }));
  try {
    const a = await provider.request("POST", "/with-id", { input: ["x"] }, { tokens: 5 });
    assert.deepEqual(a.body, { data: [1, 2] });
    assert.equal(a.requestId, "srv-req-42", "the server's x-request-id wins");
    assert.ok(a.ms >= 0);
    assert.equal(seen.length, 1);
    assert.equal(seen[0]!.method, "POST");
    assert.equal(seen[0]!.headers.get("authorization"), `Bearer ${key}`);
    assert.equal(seen[0]!.headers.get("content-type"), "application/json");
    assert.deepEqual(JSON.parse(seen[0]!.body), { input: ["x"] });
    const sent1 = seen[0]!.headers.get("x-request-id");
    assert.ok(sent1 !== null && sent1 !== "", "an x-request-id is sent");

    const b = await provider.request("GET", "/no-id", undefined);
    assert.deepEqual(b.body, { data: [3] });
    const sent2 = seen[1]!.headers.get("x-request-id");
    assert.equal(seen[1]!.method, "GET");
    assert.equal(seen[1]!.headers.get("authorization"), `Bearer ${key}`);
    assert.ok(sent2 !== null && sent2 !== "");
    assert.notEqual(sent2, sent1, "each request gets its own id");
    assert.equal(b.requestId, sent2, "without the server's id, the one sent");

    assert.equal(provider.baseUrl, url);
    const snap = provider.snapshot();
    assert.equal(snap.requests, 2);
    assert.equal(snap.failures, 0);
    assert.equal(snap.latency.samples, 2);
    assert.ok(!JSON.stringify(snap).includes(key), "the status row never shows the key");
  } finally {
    provider.close();
    await server.shutdown();
    Deno.env.delete(envName);
  }
});

Deno.test("RemoteProvider: a 5xx is provider_unavailable; only idempotent 502/503/504 are retried", async () => {
  assert.equal(IDEMPOTENT_RETRIES, 2);
  let status = 500;
  let count = 0;
  const { server, url } = startServer(() => {
    count++;
    return json({ error: { message: "boom" } }, status);
  });
  const provider = new RemoteProvider(cfg(url, { breaker: { failure_threshold: 100 } }));
  try {
    const e500 = await rejection(provider.request("POST", "/v1/embeddings", {}));
    assert.equal(count, 1);
    assert.equal(e500.code, "provider_unavailable");
    assert.equal(e500.retryAfterMs, PROVIDER_RETRY_AFTER_MS);
    assert.equal(e500.details?.http_status, 500);
    assert.equal(e500.details?.reason, "http_status");
    assert.equal(e500.details?.provider, "p");
    assert.match(e500.message, /boom/);
    assert.equal(e500.toWire().retry_after_ms, PROVIDER_RETRY_AFTER_MS);
    assert.equal(e500.toWire().class, "transient");

    // A 500 is not retried, even for an idempotent request.
    count = 0;
    await rejection(provider.request("POST", "/v1/embeddings", {}, { idempotent: true }));
    assert.equal(count, 1);

    status = 503;
    count = 0;
    const e503 = await rejection(
      provider.request("POST", "/v1/embeddings", {}, { idempotent: true }),
    );
    assert.equal(count, 1 + IDEMPOTENT_RETRIES, "an idempotent 503 is sent 3 times in all");
    assert.equal(e503.code, "provider_unavailable");
    assert.equal(e503.details?.http_status, 503);

    count = 0;
    const once = await rejection(provider.request("POST", "/v1/embeddings", {}));
    assert.equal(count, 1, "without idempotent, no retry");
    assert.equal(once.details?.http_status, 503);
    assert.equal(provider.snapshot().failures, 1 + 1 + 3 + 1);
  } finally {
    provider.close();
    await server.shutdown();
  }
});

Deno.test("RemoteProvider: an idempotent 503 then a 200 answers", async () => {
  let count = 0;
  const { server, url } = startServer(() => {
    count++;
    return count === 1 ? json({}, 503) : json({ ok: true });
  });
  const provider = new RemoteProvider(cfg(url));
  try {
    const a = await provider.request("GET", "/info", undefined, { idempotent: true });
    assert.deepEqual(a.body, { ok: true });
    assert.equal(count, 2);
    assert.equal(provider.breaker.state, "closed");
    assert.equal(provider.breaker.snapshot().consecutiveFailures, 0);
  } finally {
    provider.close();
    await server.shutdown();
  }
});

Deno.test("RemoteProvider: 401/403 is needs_reauth and never shows the key", async () => {
  const envName = `SYNAPSE_TEST_KEY_${crypto.randomUUID().replaceAll("-", "_")}`;
  const key = `sk-secret-${crypto.randomUUID()}`;
  Deno.env.set(envName, key);
  let status = 401;
  const { server, url } = startServer((req) => {
    // A provider that echoes the key it refused, as some do.
    const auth = req.headers.get("authorization") ?? "";
    return json({ error: { message: `Incorrect API key provided: ${auth}` } }, status);
  });
  const provider = new RemoteProvider(cfg(url, { api_key_env: envName }));
  try {
    for (const s of [401, 403]) {
      status = s;
      const err = await rejection(provider.request("POST", "/v1/embeddings", { input: "x" }));
      assert.equal(err.code, "needs_reauth", `HTTP ${s}`);
      assert.equal(err.details?.http_status, s);
      assert.equal(err.details?.provider, "p");
      assert.ok(err.message.includes(envName), "the message names the variable");
      assert.ok(!err.message.includes(key), "the message never holds the key");
      assert.ok(!JSON.stringify(err.toWire()).includes(key), "the wire error never holds the key");
    }
    // A 4xx is an answer: the breaker does not count it.
    assert.equal(provider.breaker.state, "closed");
    assert.equal(provider.snapshot().failures, 0);
  } finally {
    provider.close();
    await server.shutdown();
    Deno.env.delete(envName);
  }
});

Deno.test("RemoteProvider: a redirect is refused and never followed", async () => {
  let targetCount = 0;
  const target = startServer(() => {
    targetCount++;
    return json({ followed: true });
  });
  let status = 302;
  const origin = startServer(() =>
    new Response(null, { status, headers: { location: `${target.url}/v1/embeddings` } })
  );
  const provider = new RemoteProvider(cfg(origin.url));
  try {
    for (const s of [302, 307]) {
      status = s;
      const err = await rejection(
        provider.request("POST", "/v1/embeddings", {}, { idempotent: true }),
      );
      assert.equal(err.code, "provider_protocol_violation", `HTTP ${s}`);
      assert.equal(err.details?.reason, "redirect_refused");
      assert.equal(err.details?.http_status, s);
    }
    assert.equal(targetCount, 0, "the Location is never called");
  } finally {
    provider.close();
    await origin.server.shutdown();
    await target.server.shutdown();
  }
});

Deno.test("RemoteProvider: a request past timeout_ms is provider_unavailable (timeout)", async () => {
  let count = 0;
  const { server, url } = startServer(async (req) => {
    count++;
    await wait(2000, req.signal);
    return json({ late: true });
  });
  const provider = new RemoteProvider(cfg(url, { timeout_ms: 200 }));
  try {
    const t0 = performance.now();
    const err = await rejection(
      provider.request("POST", "/v1/embeddings", {}, { idempotent: true }),
    );
    const ms = performance.now() - t0;
    assert.equal(err.code, "provider_unavailable");
    assert.equal(err.details?.reason, "timeout");
    assert.equal(err.retryAfterMs, PROVIDER_RETRY_AFTER_MS);
    assert.ok(ms >= 150 && ms < 1500, `failed after ${ms.toFixed(0)} ms, timeout_ms 200`);
    assert.equal(count, 1, "a timeout is not retried");
    assert.equal(provider.snapshot().failures, 1);
    assert.equal(provider.breaker.snapshot().consecutiveFailures, 1);
  } finally {
    provider.close();
    await server.shutdown();
  }
});

Deno.test("RemoteProvider: an open breaker refuses without sending", async () => {
  const clock = fakeClock();
  let status = 500;
  let count = 0;
  const { server, url } = startServer(() => {
    count++;
    return json({ answered: count }, status);
  });
  const provider = new RemoteProvider(
    cfg(url, { breaker: { failure_threshold: 2, open_ms: 60_000 } }),
    clock.now,
  );
  try {
    await rejection(provider.request("POST", "/v1/embeddings", {}));
    assert.equal(provider.refusalNow(), undefined, "one failure of two: still closed");
    await rejection(provider.request("POST", "/v1/embeddings", {}));
    assert.equal(count, 2);

    const refusal = provider.refusalNow();
    assert.ok(refusal instanceof SynapseError);
    assert.equal(refusal.code, "provider_unavailable");
    assert.equal(refusal.details?.reason, "breaker_open");
    assert.equal(refusal.details?.provider, "p");
    assert.equal(refusal.retryAfterMs, 60_000);

    clock.advance(10_000);
    const err = await rejection(provider.request("POST", "/v1/embeddings", {}));
    assert.equal(err.code, "provider_unavailable");
    assert.equal(err.details?.reason, "breaker_open");
    assert.equal(err.retryAfterMs, 50_000);
    assert.equal(count, 2, "the server saw no request");
    assert.equal(provider.snapshot().breaker.opened, 1);
    assert.equal(provider.snapshot().breaker.state, "open");

    // After open_ms one trial goes; its success closes the breaker.
    clock.advance(50_000);
    assert.equal(provider.refusalNow(), undefined);
    status = 200;
    const a = await provider.request("POST", "/v1/embeddings", {});
    assert.deepEqual(a.body, { answered: 3 });
    assert.equal(provider.breaker.state, "closed");
  } finally {
    provider.close();
    await server.shutdown();
  }
});

Deno.test("RemoteProvider: never more than max_concurrency requests in flight", async () => {
  let inFlight = 0;
  let maxInFlight = 0;
  let seen = 0;
  const gate = Promise.withResolvers<void>();
  const twoArrived = Promise.withResolvers<void>();
  const { server, url } = startServer(async () => {
    seen++;
    inFlight++;
    maxInFlight = Math.max(maxInFlight, inFlight);
    if (seen === 2) twoArrived.resolve();
    await gate.promise;
    inFlight--;
    return json({ ok: true });
  });
  const provider = new RemoteProvider(cfg(url, { max_concurrency: 2 }));
  try {
    const all = Promise.all(
      Array.from({ length: 5 }, (_, i) => provider.request("POST", "/v1/embeddings", { i })),
    );
    await twoArrived.promise;
    await wait(200);
    assert.equal(seen, 2, "the other three wait for a slot");
    assert.equal(provider.inFlight, 2);
    gate.resolve();
    const answers = await all;
    assert.equal(answers.length, 5);
    for (const a of answers) assert.deepEqual(a.body, { ok: true });
    assert.equal(seen, 5);
    assert.equal(maxInFlight, 2);
    assert.equal(provider.inFlight, 0);
  } finally {
    gate.resolve();
    provider.close();
    await server.shutdown();
  }
});

Deno.test("RemoteProvider: 429 with Retry-After is provider_unavailable and spares the breaker", async () => {
  let count = 0;
  const { server, url } = startServer(() => {
    count++;
    return json({ error: "slow down" }, 429, { "retry-after": "3" });
  });
  const provider = new RemoteProvider(cfg(url, { breaker: { failure_threshold: 1 } }));
  try {
    for (let i = 1; i <= 3; i++) {
      const err = await rejection(
        provider.request("POST", "/v1/embeddings", {}, { idempotent: true }),
      );
      assert.equal(err.code, "provider_unavailable");
      assert.equal(err.retryAfterMs, 3000);
      assert.equal(err.details?.http_status, 429);
      assert.equal(err.details?.reason, "rate_limited");
      assert.equal(count, i, "sent each time: the breaker stays closed");
    }
    assert.equal(provider.refusalNow(), undefined);
    assert.equal(provider.breaker.state, "closed");
    assert.equal(provider.breaker.snapshot().opened, 0);
    assert.equal(provider.breaker.snapshot().consecutiveFailures, 0);
    assert.equal(provider.snapshot().failures, 0);
  } finally {
    provider.close();
    await server.shutdown();
  }
});

// ---------------------------------------------------------------------------------------------
// readProviderKey

Deno.test("readProviderKey: api_key_env", () => {
  const envName = `SYNAPSE_TEST_UNSET_${crypto.randomUUID().replaceAll("-", "_")}`;
  const err = thrown(() => readProviderKey({ id: "p", api_key_env: envName }));
  assert.equal(err.code, "credential_config_invalid");
  assert.deepEqual(err.details, { provider: "p", source: "api_key_env", reason: "env_unset" });
  assert.ok(err.message.includes(envName), "the message names the variable");

  const blank = thrown(() => readProviderKey({ id: "p", api_key_env: "K" }, () => "  \n"));
  assert.equal(blank.details?.reason, "env_unset");

  assert.equal(readProviderKey({ id: "p", api_key_env: "K" }, () => " sk-env \n"), "sk-env");
  Deno.env.set(envName, "sk-real-env");
  try {
    assert.equal(readProviderKey({ id: "p", api_key_env: envName }), "sk-real-env");
  } finally {
    Deno.env.delete(envName);
  }
  assert.equal(readProviderKey({ id: "p" }), undefined, "an entry naming no key has none");
});

Deno.test("readProviderKey: api_key_file", async () => {
  const dir = await Deno.makeTempDir({ prefix: "synapse_key_" });
  const key = `sk-file-${crypto.randomUUID()}`;
  const noKey = (e: SynapseError) => {
    assert.ok(!e.message.includes(key), e.message);
    assert.ok(!JSON.stringify(e.toWire()).includes(key));
  };
  try {
    const open = `${dir}/open.key`;
    Deno.writeTextFileSync(open, `${key}\n`);
    Deno.chmodSync(open, 0o644);
    const e1 = thrown(() => readProviderKey({ id: "p", api_key_file: open }));
    assert.equal(e1.code, "credential_config_invalid");
    assert.deepEqual(e1.details, {
      provider: "p",
      source: "api_key_file",
      reason: "file_not_private",
    });
    assert.ok(
      !e1.message.includes(open),
      "the message never names the path (other users read status rows)",
    );
    assert.match(e1.message, /api_key_file must belong to this user with mode 0600/);
    noKey(e1);

    const priv = `${dir}/private.key`;
    Deno.writeTextFileSync(priv, `  ${key}  \n`);
    Deno.chmodSync(priv, 0o600);
    assert.equal(readProviderKey({ id: "p", api_key_file: priv }), key);

    const two = `${dir}/two.key`;
    Deno.writeTextFileSync(two, `${key}\nsecond-line\n`);
    Deno.chmodSync(two, 0o600);
    const e2 = thrown(() => readProviderKey({ id: "p", api_key_file: two }));
    assert.equal(e2.details?.reason, "empty");
    assert.ok(!e2.message.includes(two), "never the path");
    assert.ok(!e2.message.includes("second-line"));
    noKey(e2);

    const blank = `${dir}/blank.key`;
    Deno.writeTextFileSync(blank, " \n\n");
    Deno.chmodSync(blank, 0o600);
    assert.equal(
      thrown(() => readProviderKey({ id: "p", api_key_file: blank })).details?.reason,
      "empty",
    );

    const missing = `${dir}/missing.key`;
    const e3 = thrown(() => readProviderKey({ id: "p", api_key_file: missing }));
    assert.deepEqual(e3.details, {
      provider: "p",
      source: "api_key_file",
      reason: "file_unreadable",
    });
    assert.ok(!e3.message.includes(missing), "never the path");

    const sub = `${dir}/sub`;
    Deno.mkdirSync(sub, { mode: 0o700 });
    const e4 = thrown(() => readProviderKey({ id: "p", api_key_file: sub }));
    assert.equal(e4.details?.reason, "file_not_private", "a directory is not a key file");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
