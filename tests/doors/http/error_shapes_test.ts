/**
 * Each API's own error body (issue 21 item 3): a path without a route, and a refusal before the
 * route is known, answer in the body of the API its prefix belongs to — `/api/*` Ollama's
 * `{error}`, other `/v1/*` and `/v2/*` a body OpenAI's and Cohere's clients both read, other
 * paths TEI's `{error, error_type}`, `/v1/ops*` the native `{code, message}` — each with
 * Synapse's `code`; a wrong method (405) answers in its route's own body. The official `openai`,
 * `cohere-ai` and `ollama` clients show Synapse's message for a 404 and a 400.
 */
import assert from "node:assert/strict";
import { CohereClient, CohereClientV2, CohereError } from "cohere-ai";
import { Ollama } from "ollama";
import OpenAI from "openai";
import { HTTP_ROUTES } from "../../../lib/doors/http/routes.ts";
import { serveHttp } from "../../../lib/doors/http/server.ts";
import { nullLog } from "../../../lib/log/log.ts";
import { startSynapse } from "../../_helpers.ts";
import type { TestSynapse } from "../../_helpers.ts";

interface Door extends AsyncDisposable {
  t: TestSynapse;
  base: string;
  // deno-lint-ignore no-explicit-any
  send(method: string, path: string, body?: unknown): Promise<{ res: Response; body: any }>;
}

async function door(overrides: Record<string, unknown> = {}): Promise<Door> {
  const t = await startSynapse(overrides, { log: nullLog });
  const server = serveHttp(t.syn, { log: nullLog, ownerKey: "the-owner-key" });
  const base = `http://127.0.0.1:${server.port}`;
  return {
    t,
    base,
    async send(method, path, body) {
      const res = await fetch(`${base}${path}`, {
        method,
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
      assert.match(res.headers.get("content-type") ?? "", /^application\/json/);
      return { res, body: await res.json() };
    },
    async [Symbol.asyncDispose]() {
      await server.shutdown();
      await t[Symbol.asyncDispose]();
    },
  };
}

/** The message of a path without a route. */
function routeMessage(method: string, path: string): string {
  return `Cannot route ${method} ${path}: no such endpoint; the routes are ${
    HTTP_ROUTES.map((r) => `${r.method} ${r.path}`).join(", ")
  }`;
}

Deno.test("a path without a route answers 404 in the body of its prefix's API, with Synapse's code", async () => {
  await using d = await door();
  // Ollama: {error, code}.
  const ollama = await d.send("POST", "/api/copy", {});
  assert.equal(ollama.res.status, 404);
  assert.deepEqual(ollama.body, {
    error: routeMessage("POST", "/api/copy"),
    code: "unknown_method",
  });
  // OpenAI and Cohere: {error: {message, type, code, param}, message, code}.
  for (const path of ["/v1/files", "/v2/classify", "/v1"]) {
    const r = await d.send("GET", path);
    assert.equal(r.res.status, 404, path);
    assert.deepEqual(r.body, {
      error: {
        message: routeMessage("GET", path),
        type: "not_found_error",
        code: "unknown_method",
        param: null,
      },
      message: routeMessage("GET", path),
      code: "unknown_method",
    }, path);
  }
  // TEI: {error, error_type, code}, for every other path.
  for (const path of ["/predict", "/embed_sparse", "/v3/embed", "/apix"]) {
    const r = await d.send("POST", path, {});
    assert.equal(r.res.status, 404, path);
    assert.equal(r.body.error, routeMessage("POST", path), path);
    assert.equal(r.body.code, "unknown_method", path);
    assert.equal(typeof r.body.error_type, "string", path);
    assert.equal(r.body.message, undefined, path);
  }
  // The native door's paths keep the native {code, message}.
  for (const path of ["/v1/ops", "/v1/ops/"]) {
    const r = await d.send("POST", path, {});
    assert.equal(r.res.status, 404, path);
    assert.deepEqual(r.body, { code: "unknown_method", message: routeMessage("POST", path) });
  }
  const op = await d.send("POST", "/v1/ops/no.such", {});
  assert.equal(op.res.status, 404);
  assert.equal(op.body.code, "unknown_method");
  assert.equal(op.body.error, undefined);
});

Deno.test("a refusal before the route is known (the owner key) answers in its prefix's body too", async () => {
  await using d = await door({ http: { require_key_for_queries: true } });
  const ollama = await d.send("GET", "/api/nothing");
  assert.equal(ollama.res.status, 401);
  assert.equal(ollama.body.code, "unauthorized");
  assert.match(ollama.body.error, /owner's key/);
  const openai = await d.send("GET", "/v1/nothing");
  assert.equal(openai.res.status, 401);
  assert.equal(openai.body.error.type, "authentication_error");
  assert.equal(openai.body.message, openai.body.error.message);
  assert.equal(openai.res.headers.get("www-authenticate"), 'Bearer realm="synapse"');
  const tei = await d.send("POST", "/predict", {});
  assert.equal(tei.res.status, 401);
  assert.equal(tei.body.code, "unauthorized");
  assert.match(tei.body.error, /owner's key/);
});

Deno.test("a wrong method is 405 in its route's own body", async () => {
  await using d = await door();
  const cases: [string, string, (body: Record<string, unknown>) => unknown][] = [
    ["/v1/embeddings", "POST", (b) => (b.error as { message: unknown }).message],
    ["/v1/models", "GET", (b) => (b.error as { message: unknown }).message],
    ["/v1/models/synapse-tiny-embed", "GET", (b) => (b.error as { message: unknown }).message],
    ["/v2/embed", "POST", (b) => b.message],
    ["/v1/tokenize", "POST", (b) => b.message],
    ["/v2/rerank", "POST", (b) => b.message],
    ["/api/embed", "POST", (b) => b.error],
    ["/api/tags", "GET", (b) => b.error],
    ["/embed", "POST", (b) => b.error],
    ["/", "POST", (b) => b.error],
    ["/v1/ops/embed.query", "POST", (b) => b.message],
  ];
  for (const [path, allowed, messageOf] of cases) {
    const r = await d.send(allowed === "GET" ? "PUT" : "GET", path);
    assert.equal(r.res.status, 405, path);
    assert.equal(r.res.headers.get("allow"), allowed, path);
    const message = messageOf(r.body);
    assert.equal(typeof message, "string", `${path}: ${JSON.stringify(r.body)}`);
    assert.match(message as string, new RegExp(`use ${allowed}`), path);
    assert.ok(JSON.stringify(r.body).includes('"invalid_request"'), path);
  }
});

Deno.test("the official openai client shows Synapse's message for a 404 route, a 404 model, a 400 and a 405", async () => {
  await using d = await door();
  const openai = new OpenAI({ apiKey: "unused", baseURL: `${d.base}/v1`, maxRetries: 0 });
  const caught = (p: Promise<unknown>) =>
    p.then(() => assert.fail("the call answered"), (e: unknown) => e);
  const route = await caught(openai.files.list());
  assert.ok(route instanceof OpenAI.NotFoundError, String(route));
  assert.equal(route.message, `404 ${routeMessage("GET", "/v1/files")}`);
  assert.equal(route.code, "unknown_method");
  const model = await caught(openai.models.retrieve("nope"));
  assert.ok(model instanceof OpenAI.NotFoundError, String(model));
  assert.match(model.message, /^404 Cannot describe model 'nope'/);
  const bad = await caught(
    openai.embeddings.create({ model: "synapse-tiny-embed", input: "x", dimensions: 7 }),
  );
  assert.ok(bad instanceof OpenAI.BadRequestError, String(bad));
  assert.match(bad.message, /^400 .*dimensions/);
  assert.equal(bad.param, "dimensions");
  const unknownModel = await caught(openai.embeddings.create({ model: "nope", input: "x" }));
  assert.ok(unknownModel instanceof OpenAI.NotFoundError, String(unknownModel));
  assert.match(unknownModel.message, /unknown model 'nope'/);
  const method = await caught(openai.post("/models", { body: {} }));
  assert.ok(method instanceof OpenAI.APIError, String(method));
  assert.equal(method.status, 405);
  assert.match(method.message, /^405 Cannot POST \/v1\/models: use GET/);
});

Deno.test("the official cohere-ai client shows Synapse's message for a 404 route, a 404 model and a 400", async () => {
  await using d = await door();
  const v1 = new CohereClient({ token: "unused", environment: d.base, maxRetries: 0 });
  const v2 = new CohereClientV2({ token: "unused", environment: d.base, maxRetries: 0 });
  const caught = (p: Promise<unknown>) =>
    p.then(() => assert.fail("the call answered"), (e: unknown) => e);
  const route = await caught(v1.classify({ inputs: ["x"] }));
  assert.ok(route instanceof CohereError, String(route));
  assert.equal(route.statusCode, 404);
  assert.ok(route.message.includes(routeMessage("POST", "/v1/classify")), route.message);
  assert.equal((route.body as { message?: string }).message, routeMessage("POST", "/v1/classify"));
  const model = await caught(
    v2.embed({ model: "nope", texts: ["x"], inputType: "search_query", embeddingTypes: ["float"] }),
  );
  assert.ok(model instanceof CohereError, String(model));
  assert.equal(model.statusCode, 404);
  assert.match(model.message, /unknown model 'nope'/);
  const bad = await caught(
    v2.embed({
      texts: ["x"],
      model: "synapse-tiny-embed",
      inputType: "search_query",
      embeddingTypes: ["int8"],
    }),
  );
  assert.ok(bad instanceof CohereError, String(bad));
  assert.equal(bad.statusCode, 400);
  assert.match(bad.message, /Cannot serve embedding type 'int8'/);
  const tokenize = await caught(v1.tokenize({ text: "x", model: "nope" }));
  assert.ok(tokenize instanceof CohereError, String(tokenize));
  assert.equal(tokenize.statusCode, 404);
  assert.match(tokenize.message, /unknown model 'nope'/);
});

Deno.test("the official ollama client shows Synapse's message for a 404 route, a 404 model and a 400", async () => {
  await using d = await door();
  const ollama = new Ollama({ host: d.base });
  const caught = (p: Promise<unknown>) =>
    p.then(() => assert.fail("the call answered"), (e: unknown) => e);
  const route = await caught(ollama.copy({ source: "a", destination: "b" })) as {
    name: string;
    error: string;
    status_code: number;
  };
  assert.equal(route.name, "ResponseError");
  assert.equal(route.status_code, 404);
  assert.equal(route.error, routeMessage("POST", "/api/copy"));
  const model = await caught(ollama.embed({ model: "nope", input: "x" })) as {
    error: string;
    status_code: number;
  };
  assert.equal(model.status_code, 404);
  assert.match(model.error, /unknown model 'nope'/);
  const bad = await caught(
    ollama.embed({ model: "synapse-tiny-embed", input: "x", dimensions: 7 }),
  ) as { error: string; status_code: number };
  assert.equal(bad.status_code, 400);
  assert.match(bad.error, /dimensions/);
});
