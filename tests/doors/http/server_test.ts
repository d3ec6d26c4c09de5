import assert from "node:assert/strict";
import { SynapseError } from "../../../lib/contract/errors.ts";
import { outcomeOf } from "../../../lib/ops/dispatcher.ts";
import { nullLog, stderrLog } from "../../../lib/log/log.ts";
import { Metrics } from "../../../lib/log/metrics.ts";
import { DEFAULT_CONFIG } from "../../../lib/config/defaults.ts";
import { doorBackend, type DoorSource } from "../../../lib/ops/door_backend.ts";
import type { OpOutcome } from "../../../lib/ops/dispatcher.ts";
import { isLoopbackHostname, serveHttp } from "../../../lib/doors/http/server.ts";
import type { HttpBackend, ServeHttpOptions } from "../../../lib/doors/http/server.ts";
import { SYNAPSE_VERSION } from "../../../lib/synapse.ts";
import { startSynapse } from "../../_helpers.ts";
import type { TestSynapse } from "../../_helpers.ts";

/** A real Synapse on a temp store behind a real socket on an ephemeral port. */
interface TestServer extends AsyncDisposable {
  t: TestSynapse;
  base: string;
  post(path: string, body: BodyInit | null): Promise<Response>;
}

async function startServer(options: ServeHttpOptions = {}): Promise<TestServer> {
  const t = await startSynapse();
  const server = serveHttp(t.syn, options);
  const base = `http://127.0.0.1:${server.port}`;
  return {
    t,
    base,
    post: (path, body) => fetch(`${base}${path}`, { method: "POST", body }),
    async [Symbol.asyncDispose]() {
      await server.shutdown();
      await t[Symbol.asyncDispose]();
    },
  };
}

/**
 * A backend with fixed models and a fixed outcome (or its own `call`), for states a real instance
 * passes quickly: the real door backend (lib/ops/door_backend.ts) over a stand-in instance.
 */
function fakeBackend(
  models: { modelId: string; state: string; testModel?: boolean }[],
  outcome?: OpOutcome,
  call: DoorSource["call"] = () => Promise.resolve(outcome!),
): HttpBackend {
  const entries = models.map((m) => ({ task: "embed", loadAttempts: 1, ...m }));
  const source = {
    call,
    context: { config: DEFAULT_CONFIG, log: stderrLog },
    registry: { list: () => entries },
    metrics: new Metrics(),
    disposed: false,
    moduleGeneration: 7,
  } as unknown as DoorSource;
  return { door: (name) => doorBackend(source, name) };
}

// deno-lint-ignore no-explicit-any
async function json(res: Response): Promise<any> {
  assert.match(res.headers.get("content-type") ?? "", /^application\/json/);
  return await res.json();
}

Deno.test("serveHttp() refuses to bind a non-loopback hostname", () => {
  for (
    const hostname of [
      "0.0.0.0",
      "192.168.1.10",
      "::",
      "example.com",
      "128.0.0.1",
      "127.0.0.256",
      // Loopback, but outside the launcher's network permission (127.0.0.1, localhost, ::1).
      "127.1.2.3",
    ]
  ) {
    assert.throws(() => serveHttp(fakeBackend([]), { hostname }), (e: unknown) => {
      assert.ok(e instanceof SynapseError);
      assert.equal(e.code, "invalid_request");
      assert.match(e.message, /loopback addresses only/);
      return true;
    }, hostname);
  }
  for (
    const h of [
      "127.0.0.1",
      "localhost",
      "LOCALHOST",
      "::1",
      "[::1]",
      "0:0:0:0:0:0:0:1",
    ]
  ) {
    assert.ok(isLoopbackHostname(h), h);
  }
});

Deno.test("serveHttp() answers /health 503 loading while no model is ready, degraded when one failed", async () => {
  const cases: [{ modelId: string; state: string }[], number, string, string][] = [
    [
      [{ modelId: "a", state: "loading" }],
      503,
      "loading",
      "no model is ready: 'a' loading (model_loading)",
    ],
    [
      [{ modelId: "a", state: "ready" }, { modelId: "b", state: "failed" }],
      200,
      "degraded",
      "1 of 2 models not ready: 'b' failed",
    ],
    [[{ modelId: "a", state: "failed" }], 503, "unavailable", "no model is ready: 'a' failed"],
  ];
  for (const [models, status, word, reason] of cases) {
    const server = serveHttp(fakeBackend(models), {});
    try {
      const res = await fetch(`http://127.0.0.1:${server.port}/health`);
      assert.equal(res.status, status);
      const body = await json(res);
      assert.equal(body.status, word);
      assert.equal(body.reason, reason);
      assert.equal(body.module_generation, 7);
    } finally {
      await server.shutdown();
    }
  }
});

Deno.test("serveHttp() sets Retry-After and retry-after-ms on a transient refusal", async () => {
  const refusal = outcomeOf(
    { moduleGeneration: 7, log: nullLog },
    new SynapseError("queue_full", "Cannot admit request: over byte_budget"),
  );
  const server = serveHttp(fakeBackend([], refusal), {});
  try {
    const res = await fetch(`http://127.0.0.1:${server.port}/v1/ops/embed.query`, {
      method: "POST",
      body: '{"text":"x"}',
    });
    assert.equal(res.status, 429);
    assert.equal(res.headers.get("retry-after"), "1");
    assert.equal(res.headers.get("retry-after-ms"), "100");
    const body = await json(res);
    assert.equal(body.result.error.code, "queue_full");
    assert.equal(body.result.error.class, "transient");
    assert.equal(body.result.error.retry_after_ms, 100);
  } finally {
    await server.shutdown();
  }
});

Deno.test("serveHttp() passes the request's signal to the call, so a client that goes away aborts it", async () => {
  let callStarted!: () => void;
  const started = new Promise<void>((resolve) => callStarted = resolve);
  let sawAbort!: (aborted: boolean) => void;
  const aborted = new Promise<boolean>((resolve) => sawAbort = resolve);
  const backend = fakeBackend(
    [],
    undefined,
    (_method: string, _params: unknown, options: { signal?: AbortSignal } = {}) =>
      new Promise<OpOutcome>((resolve) => {
        // Only a watchdog, so that a server that never aborts fails instead of hanging: the
        // test passes on the abort event, however long the machine takes to deliver it.
        const watchdog = setTimeout(() => {
          sawAbort(false);
          resolve({ kind: "result", body: { result: {} } });
        }, 30_000);
        options.signal?.addEventListener("abort", () => {
          clearTimeout(watchdog);
          sawAbort(true);
          resolve({ kind: "result", body: { result: {} } });
        }, { once: true });
        callStarted();
      }),
  );
  const server = serveHttp(backend, {});
  try {
    const client = new AbortController();
    const res = fetch(`http://127.0.0.1:${server.port}/v1/ops/embed.query`, {
      method: "POST",
      body: '{"text":"x"}',
      signal: client.signal,
    });
    await started; // the call is running, its abort listener in place: now the client goes away
    client.abort();
    await assert.rejects(res);
    assert.equal(await aborted, true);
  } finally {
    await server.shutdown();
  }
});

// One real instance behind a real socket for the steps below (each instance start costs ~1 s).
Deno.test("serveHttp() over a real instance", async (t) => {
  await using s = await startServer({ maxBodyBytes: 4096 });
  await t.step("answers GET /health with ok, the version, generation and models", async () => {
    const res = await fetch(`${s.base}/health`);
    assert.equal(res.status, 200);
    const body = await json(res);
    assert.deepEqual(body, {
      status: "ok",
      version: SYNAPSE_VERSION,
      module_generation: s.t.syn.moduleGeneration,
      models: [
        { model_id: "synapse-tiny-embed", task: "embed", state: "ready", test_model: true },
        { model_id: "synapse-tiny-rerank", task: "rerank", state: "ready", test_model: true },
      ],
    });
  });

  await t.step("answers HEAD /health with the status and no body", async () => {
    const res = await fetch(`${s.base}/health`, { method: "HEAD" });
    assert.equal(res.status, 200);
    assert.equal(await res.text(), "");
    // The Content-Length a GET would have, not 0 (RFC 9110 §9.3.2).
    const got = await fetch(`${s.base}/health`);
    const bytes = (await got.arrayBuffer()).byteLength;
    assert.ok(bytes > 0);
    assert.equal(res.headers.get("content-length"), String(bytes));
  });

  await t.step(
    "refuses a foreign Host (DNS rebinding) and a cross-site Origin with 403",
    async () => {
      const { request } = await import("node:http");
      const port = new URL(s.base).port;
      const status = await new Promise<number>((resolve, reject) => {
        const r = request({
          host: "127.0.0.1",
          port,
          path: "/health",
          headers: { host: "evil.example:80" },
        }, (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        });
        r.on("error", reject);
        r.end();
      });
      assert.equal(status, 403);
      const res = await fetch(`${s.base}/v1/ops/embed.query`, {
        method: "POST",
        headers: { origin: "https://evil.example" },
        body: JSON.stringify({ text: "x" }),
      });
      assert.equal(res.status, 403);
      const body = await json(res);
      assert.equal(body.code, "invalid_request");
      assert.match(body.message, /origin 'https:\/\/evil.example'/);
      const local = await fetch(`${s.base}/health`, { headers: { origin: s.base } });
      assert.equal(local.status, 200);
      await local.body?.cancel();
    },
  );

  await t.step(
    "answers POST /v1/ops/embed.query with the envelope and its fingerprint header",
    async () => {
      const res = await s.post("/v1/ops/embed.query", JSON.stringify({ text: "hello world" }));
      assert.equal(res.status, 200);
      const body = await json(res);
      assert.deepEqual(Object.keys(body), ["result"]);
      assert.match(body.result.fingerprint, /^[0-9a-f]{64}$/);
      assert.equal(res.headers.get("x-synapse-fingerprint"), body.result.fingerprint);
      assert.equal(body.result.vectors.length, 1);
      assert.equal(body.result.test_model, true);
      // The same as calling the instance directly.
      const direct = await s.t.syn.call("embed.query", { text: "hello world" });
      assert.equal(direct.kind, "result");
      assert.deepEqual(
        body.result.vectors[0].vector,
        (direct.body.result as { vectors: { vector: number[] }[] }).vectors[0]!.vector,
      );
    },
  );

  await t.step("reads an empty body as {} params", async () => {
    const res = await s.post("/v1/ops/models.list", null);
    assert.equal(res.status, 200);
    const body = await json(res);
    assert.equal(body.result.models.length, 2);
    assert.equal(res.headers.get("x-synapse-fingerprint"), null);
  });

  await t.step("answers a semantic error with the table's status and the wire shape", async () => {
    let res = await s.post("/v1/ops/embed.query", JSON.stringify({ text: "" }));
    assert.equal(res.status, 400);
    let body = await json(res);
    assert.deepEqual(Object.keys(body), ["result"]);
    assert.equal(body.result.module_generation, s.t.syn.moduleGeneration);
    const e = body.result.error;
    assert.equal(e.code, "invalid_request");
    assert.equal(e.class, "permanent");
    assert.equal(e.safe_to_retry_same_request, false);
    assert.equal(typeof e.message, "string");
    assert.equal(e.details.reason, "empty_text");
    assert.equal(res.headers.get("retry-after"), null);

    res = await s.post("/v1/ops/embed.query", JSON.stringify({ text: "x", model: "nope" }));
    assert.equal(res.status, 404);
    body = await json(res);
    assert.equal(body.result.error.code, "unknown_model");

    const long = Array(600).fill("a").join(" ");
    res = await s.post("/v1/ops/embed.query", JSON.stringify({ text: long }));
    assert.equal(res.status, 422);
    assert.equal((await json(res)).result.error.code, "sequence_too_long");
  });

  await t.step("answers 400 invalid_request naming an unknown field (F16)", async () => {
    const res = await s.post("/v1/ops/embed.query", JSON.stringify({ txt: "x" }));
    assert.equal(res.status, 400);
    const body = await json(res);
    assert.deepEqual(Object.keys(body).sort(), ["code", "message"]);
    assert.equal(body.code, "invalid_request");
    assert.match(body.message, /'txt'/);
  });

  await t.step(
    "answers bad JSON and invalid UTF-8 with channel invalid_request, an oversized body with 413",
    async () => {
      let res = await s.post("/v1/ops/embed.query", '{"text": tru}');
      assert.equal(res.status, 400);
      let body = await json(res);
      assert.equal(body.code, "invalid_request");
      assert.match(body.message, /at position 9 \(line 1 column 10\)/);

      res = await s.post(
        "/v1/ops/embed.query",
        Uint8Array.of(0x7b, 0x22, 0x74, 0xc3, 0x28, 0x22, 0x7d),
      );
      assert.equal(res.status, 400);
      body = await json(res);
      assert.deepEqual(body, {
        code: "invalid_request",
        message: "Cannot read body: body is not valid UTF-8",
      });

      res = await s.post("/v1/ops/embed.query", JSON.stringify({ text: "a".repeat(5000) }));
      assert.equal(res.status, 413);
      const refusal = (await json(res)).result.error;
      assert.equal(refusal.code, "invalid_request");
      assert.equal(refusal.details.limit, "http.max_body_bytes");
      assert.equal(refusal.details.max, 4096);
      assert.equal(refusal.details.received_at_least, 5011); // its Content-Length

      // Streamed without a Content-Length: counted as it arrives.
      const stream = new ReadableStream<Uint8Array>({
        start(c) {
          for (let i = 0; i < 8; i++) c.enqueue(new TextEncoder().encode(" ".repeat(1000)));
          c.close();
        },
      });
      res = await fetch(`${s.base}/v1/ops/embed.query`, { method: "POST", body: stream });
      assert.equal(res.status, 413);
      await res.body?.cancel();
    },
  );

  await t.step("refuses a lone surrogate as a typed error, not a crash (F14)", async () => {
    const res = await s.post("/v1/ops/embed.query", '{"text":"ab\\ud800c"}');
    assert.equal(res.status, 400);
    const body = await json(res);
    assert.equal(body.result.error.code, "invalid_request");
    assert.equal(body.result.error.details.reason, "invalid_unicode");
    const ok = await s.post("/v1/ops/embed.query", '{"text":"still up"}');
    assert.equal(ok.status, 200);
    await ok.body?.cancel();
  });

  await t.step(
    "answers an unknown method 404, an unknown path 404 and a wrong verb 405",
    async () => {
      let res = await s.post("/v1/ops/no.such", "{}");
      assert.equal(res.status, 404);
      assert.equal((await json(res)).code, "unknown_method");

      res = await s.post("/v2/nothing", "{}");
      assert.equal(res.status, 404);
      assert.equal((await json(res)).code, "unknown_method");

      res = await fetch(`${s.base}/v1/ops/embed.query`);
      assert.equal(res.status, 405);
      assert.equal(res.headers.get("allow"), "POST");
      assert.equal((await json(res)).code, "invalid_request");

      res = await s.post("/health", null);
      assert.equal(res.status, 405);
      assert.equal(res.headers.get("allow"), "GET");
      await res.body?.cancel();
    },
  );

  await t.step(
    "/v1/embeddings gives 'apple' and ['apple'] the same path and vector (F5)",
    async () => {
      const one = await s.post("/v1/embeddings", JSON.stringify({ input: "apple" }));
      const list = await s.post("/v1/embeddings", JSON.stringify({ input: ["apple"] }));
      assert.equal(one.status, 200);
      assert.equal(list.status, 200);
      const a = await json(one);
      const b = await json(list);
      assert.deepEqual(a.data, b.data);
      assert.deepEqual(a.usage, b.usage);
      assert.equal(a.object, "list");
      assert.equal(a.data[0].object, "embedding");
      assert.equal(a.data[0].index, 0);
      assert.equal(a.data[0].embedding.length, 32);
      assert.equal(a.model, "synapse-tiny-embed");
      assert.equal(a.usage.prompt_tokens, 3);
      assert.equal(a.usage.total_tokens, 3);
      assert.match(a.synapse.fingerprint, /^[0-9a-f]{64}$/);
      assert.equal(one.headers.get("x-synapse-fingerprint"), a.synapse.fingerprint);
      assert.equal(a.synapse.test_model, true);
      assert.equal(a.synapse.dims, 32);
      assert.equal(a.synapse.items[0].index, 0);
      assert.match(a.synapse.items[0].content_sha256, /^[0-9a-f]{64}$/);
      assert.deepEqual(a.synapse.truncation_disclosures, [
        { submitted_tokens: 3, effective_tokens: 3, truncated: false, kept_chars: 5 },
      ]);
      // The same vector as embed.query.
      const q = await s.post("/v1/ops/embed.query", JSON.stringify({ text: "apple" }));
      assert.deepEqual((await json(q)).result.vectors[0].vector, a.data[0].embedding);
    },
  );

  await t.step(
    "/v1/embeddings base64 is the little-endian float32 bytes of the vector",
    async () => {
      const f = await json(await s.post("/v1/embeddings", JSON.stringify({ input: ["a", "b c"] })));
      const res = await s.post(
        "/v1/embeddings",
        JSON.stringify({
          input: ["a", "b c"],
          encoding_format: "base64",
          model: "synapse-tiny-embed",
        }),
      );
      assert.equal(res.status, 200);
      const b = await json(res);
      assert.equal(b.data.length, 2);
      for (let k = 0; k < 2; k++) {
        const bytes = Uint8Array.from(atob(b.data[k].embedding), (c) => c.charCodeAt(0));
        assert.equal(bytes.length, 32 * 4);
        const view = new DataView(bytes.buffer);
        const decoded = Array.from({ length: 32 }, (_, i) => view.getFloat32(i * 4, true));
        assert.deepEqual(decoded, f.data[k].embedding.map((x: number) => Math.fround(x)));
      }
    },
  );

  await t.step(
    "/v1/embeddings refuses unknown fields, wrong dimensions and a refused item",
    async () => {
      let res = await s.post("/v1/embeddings", JSON.stringify({ input: "x", truncate_it: true }));
      assert.equal(res.status, 400);
      let body = await json(res);
      assert.equal(body.error.code, "invalid_request");
      assert.equal(body.error.type, "invalid_request_error");
      assert.equal(body.error.param, "truncate_it");
      assert.match(body.error.message, /'truncate_it'/);

      res = await s.post("/v1/embeddings", JSON.stringify({ input: "x", dimensions: 8 }));
      assert.equal(res.status, 400);
      body = await json(res);
      assert.equal(body.error.param, "dimensions");
      assert.match(body.error.message, /32-dimensional/);

      res = await s.post("/v1/embeddings", JSON.stringify({ input: "x", dimensions: 32 }));
      assert.equal(res.status, 200);
      await res.body?.cancel();

      // OpenAI clients expect all or nothing: one refused item refuses the request, naming it.
      res = await s.post("/v1/embeddings", JSON.stringify({ input: ["fine", "", "also fine"] }));
      assert.equal(res.status, 400);
      body = await json(res);
      assert.deepEqual(Object.keys(body), ["error"]);
      assert.equal(body.error.code, "invalid_request");
      assert.equal(body.error.param, "input[1]");

      res = await s.post("/v1/embeddings", JSON.stringify({ input: "x", model: "nope" }));
      assert.equal(res.status, 404);
      assert.equal((await json(res)).error.code, "unknown_model");

      res = await s.post("/v1/embeddings", "{");
      assert.equal(res.status, 400);
      assert.equal((await json(res)).error.param, "body");
    },
  );
});
