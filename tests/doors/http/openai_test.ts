/**
 * The OpenAI door as a thin adapter over the dispatcher: `POST /v1/embeddings` is `embed.batch`
 * with its params and results mapped — up to 2,048 inputs in one call, served as inline chunks
 * under the same lane admission (no durable job), the same caller-string checks as the native
 * door, the same codes, each with the OpenAI error `type` that fits — and `GET /v1/models` lists
 * the served models.
 */
import assert from "node:assert/strict";
import { serveHttp } from "../../../lib/doors/http/server.ts";
import { nullLog } from "../../../lib/log/log.ts";
import { cosine, MODELS, preload, resultOf, startSynapse } from "../../_helpers.ts";
import type { TestSynapse } from "../../_helpers.ts";

interface Door extends AsyncDisposable {
  t: TestSynapse;
  base: string;
  // deno-lint-ignore no-explicit-any
  post(path: string, body: unknown): Promise<{ res: Response; body: any }>;
}

async function door(overrides: Record<string, unknown> = {}): Promise<Door> {
  const t = await startSynapse(overrides, { log: nullLog });
  const server = serveHttp(t.syn, { log: nullLog });
  const base = `http://127.0.0.1:${server.port}`;
  return {
    t,
    base,
    async post(path, body) {
      const res = await fetch(`${base}${path}`, {
        method: "POST",
        body: typeof body === "string" ? body : JSON.stringify(body),
      });
      return { res, body: await res.json() };
    },
    async [Symbol.asyncDispose]() {
      await server.shutdown();
      await t[Symbol.asyncDispose]();
    },
  };
}

const texts = (n: number, prefix = "text") =>
  Array.from({ length: n }, (_, i) => `${prefix} number ${i} about item ${i % 7}`);

Deno.test("/v1/embeddings serves 2,048 inputs in one call, in order, without a job", async () => {
  await using d = await door();
  const input = texts(2048);
  const { res, body } = await d.post("/v1/embeddings", { input });
  assert.equal(res.status, 200, JSON.stringify(body).slice(0, 400));
  assert.equal(body.data.length, 2048);
  assert.deepEqual(body.data.map((x: { index: number }) => x.index), input.map((_, i) => i));
  assert.equal(body.synapse.real_token_counts.length, 2048);
  assert.equal(
    body.usage.prompt_tokens,
    body.synapse.real_token_counts.reduce((a: number, b: number) => a + b, 0),
  );
  // The same vectors as the native door gives each text (any chunk, any position).
  for (const i of [0, 63, 64, 1000, 2047]) {
    const q = resultOf(await d.t.syn.call("embed.query", { text: input[i] }));
    assert.ok(cosine(q.vectors[0].vector, body.data[i].embedding) >= 0.99999, `input ${i}`);
    assert.equal(body.synapse.items[i].submitted_sha256, q.vectors[0].submitted_sha256);
  }
  // No durable job was made: it ran as inline chunks.
  const status = resultOf(await d.t.syn.call("admission.status", {}));
  assert.equal(status.jobs_minted, 0);
});

Deno.test("/v1/embeddings refuses 2,049 inputs naming input, with advice the doors accept", async () => {
  await using d = await door();
  const { res, body } = await d.post("/v1/embeddings", { input: texts(2049) });
  assert.equal(res.status, 400);
  assert.equal(body.error.code, "invalid_request");
  assert.equal(body.error.type, "invalid_request_error");
  assert.equal(body.error.param, "input");
  assert.match(body.error.message, /2049 inputs .* at most 2048/);
  // The advice names the native door's job path, never a field this door refuses.
  assert.match(body.error.message, /POST \/v1\/ops\/embed\.batch and a request_key/);
  const withKey = await d.post("/v1/embeddings", { input: ["x"], request_key: "k" });
  assert.equal(withKey.res.status, 400);
  assert.equal(withKey.body.error.param, "request_key");
});

Deno.test("/v1/embeddings cuts work into chunks within inline.max_items and inline.max_tokens", async () => {
  // 8 items and 40 tokens per inline request: 30 inputs take several chunks and token groups.
  await using d = await door({ inline: { max_items: 8, max_tokens: 40 } });
  const input = texts(30, "a somewhat longer text so that the token limit cuts groups");
  const { res, body } = await d.post("/v1/embeddings", { input });
  assert.equal(res.status, 200, JSON.stringify(body).slice(0, 400));
  assert.equal(body.data.length, 30);
  for (let i = 0; i < 30; i += 7) {
    const q = resultOf(await d.t.syn.call("embed.query", { text: input[i] }));
    assert.ok(cosine(q.vectors[0].vector, body.data[i].embedding) >= 0.99999, `input ${i}`);
  }
  // The native door still refuses the same batch inline without a request_key.
  const native = await d.post("/v1/ops/embed.batch", { texts: input });
  assert.equal(native.res.status, 400);
  assert.equal(native.body.result.error.details.limit, "inline.max_items");
});

Deno.test("/v1/embeddings goes through the same admission: queue_full is 429 rate_limit_error with Retry-After", async () => {
  await using d = await door({ inline: { byte_budget: 64 } });
  const held = d.t.syn.admission.admit({
    bytes: 60,
    deadlineMs: 30000,
    maxQueueMs: 5000,
    queueClass: "bulk",
  });
  try {
    const { res, body } = await d.post("/v1/embeddings", { input: ["apple pie"] });
    assert.equal(res.status, 429);
    assert.equal(body.error.code, "queue_full");
    assert.equal(body.error.type, "rate_limit_error");
    assert.equal(body.error.retry_after_ms, 100);
    assert.equal(res.headers.get("retry-after"), "1");
    // The native door answers the same code for the same request.
    const native = await d.post("/v1/ops/embed.batch", { texts: ["apple pie"] });
    assert.equal(native.res.status, 429);
    assert.equal(native.body.result.error.code, "queue_full");
  } finally {
    held.release();
  }
  const ok = await d.post("/v1/embeddings", { input: ["apple pie"] });
  assert.equal(ok.res.status, 200);
});

Deno.test("/v1/embeddings maps each code to its OpenAI type: a NaN output is server_error, not invalid_request_error", async () => {
  await using d = await door({
    preload_models: [preload(`${MODELS}/synapse-tiny-embed-nan`, "nan-embed")],
  });
  const { res, body } = await d.post("/v1/embeddings", {
    input: ["a healthy sentence", "this has poison in it"],
  });
  assert.equal(res.status, 422);
  assert.equal(body.error.code, "engine_output_invalid");
  assert.equal(body.error.type, "server_error");
  assert.equal(body.error.param, "input[1]");
  const unknown = await d.post("/v1/embeddings", { input: "x", model: "nope" });
  assert.equal(unknown.res.status, 404);
  assert.equal(unknown.body.error.type, "not_found_error");
  assert.equal(unknown.body.error.param, null);
});

Deno.test("/v1/embeddings checks caller strings as the native door does, naming the field", async () => {
  await using d = await door();
  const cases: [unknown, string, RegExp][] = [
    [{ input: "x", model: "m\ud800" }, "model", /lone UTF-16 surrogate/],
    [{ input: "x", user: "u\udc00" }, "user", /lone UTF-16 surrogate/],
    [{ input: ["fine", "bad \ud83d"] }, "input[1]", /lone surrogate/],
    [{ input: "bad \ud83d" }, "input", /lone surrogate/],
    [{ input: ["fine", "  "] }, "input[1]", /empty or only whitespace/],
    [{ input: [1, 2, 3] }, "input[0]", /./],
    [{ input: [] }, "input", /empty batch/],
    [{ input: "x", model: "" }, "model", /./],
  ];
  for (const [req, param, message] of cases) {
    // JSON.stringify writes a lone surrogate as its \u escape: the door gets exactly that string.
    const { res, body } = await d.post("/v1/embeddings", req);
    assert.equal(res.status, 400, `${JSON.stringify(req)}: ${JSON.stringify(body)}`);
    assert.equal(body.error.code, "invalid_request");
    assert.equal(body.error.type, "invalid_request_error");
    assert.equal(body.error.param, param, JSON.stringify(req));
    assert.match(body.error.message, message);
  }
  // The native door refuses the same model string the same way.
  const native = await d.post("/v1/ops/embed.batch", { texts: ["x"], model: "m\ud800" });
  assert.equal(native.res.status, 400);
  assert.match(native.body.message, /'model'.*lone UTF-16 surrogate/);
});

Deno.test("/v1/embeddings on a disposed instance answers what the dispatcher answers", async () => {
  const t = await startSynapse({}, { log: nullLog });
  const server = serveHttp(t.syn, { log: nullLog });
  try {
    await t.syn.dispose();
    const post = (path: string, body: unknown) =>
      fetch(`http://127.0.0.1:${server.port}${path}`, {
        method: "POST",
        body: JSON.stringify(body),
      });
    const res = await post("/v1/embeddings", { input: "x" });
    const body = await res.json();
    const native = await post("/v1/ops/embed.batch", { texts: ["x"] });
    const nativeBody = await native.json();
    assert.equal(res.status, native.status);
    assert.equal(res.status, 503);
    assert.equal(body.error.code, nativeBody.code);
    assert.equal(body.error.code, "module_not_initialized");
    assert.equal(body.error.type, "unavailable_error");
    assert.equal(res.headers.get("retry-after"), "1");
  } finally {
    await server.shutdown();
    await t[Symbol.asyncDispose]();
  }
});

Deno.test("GET /v1/models lists the served models in OpenAI's list shape", async () => {
  await using d = await door();
  const res = await fetch(`${d.base}/v1/models`);
  assert.equal(res.status, 200);
  const body = await res.json();
  assert.equal(body.object, "list");
  const list = resultOf(await d.t.syn.call("models.list", {}));
  assert.deepEqual(
    body.data.map((m: { id: string }) => m.id),
    list.models.map((m: { model_id: string }) => m.model_id),
  );
  for (const m of body.data) {
    assert.equal(m.object, "model");
    assert.ok(Number.isInteger(m.created) && m.created > 1_600_000_000, String(m.created));
    assert.equal(m.owned_by, "synapse");
    assert.equal(m.synapse.state, "ready");
    assert.match(m.synapse.fingerprint, /^[0-9a-f]{64}$/);
  }
  assert.deepEqual(
    body.data.map((m: { synapse: { task: string } }) => m.synapse.task),
    ["embed", "rerank"],
  );
  const post = await fetch(`${d.base}/v1/models`, { method: "POST" });
  assert.equal(post.status, 405);
  assert.equal(post.headers.get("allow"), "GET");
  const refused = await post.json();
  assert.equal(refused.error.type, "invalid_request_error");
});
