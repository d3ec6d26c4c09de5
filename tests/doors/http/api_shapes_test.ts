/**
 * The API shapes of issue 21 item 3 through the real HTTP door: Cohere `POST /v2/embed` with
 * `embedding_types` float and base64 (and v2's `inputs`, `max_tokens`, `priority`), Cohere
 * `POST /v1/tokenize` and `/v1/detokenize`, OpenAI `GET /v1/models/{id}` and TEI's root route
 * `POST /`. Each is checked against the native operation's numbers and with the official npm
 * client unchanged (`cohere-ai`'s CohereClientV2, `openai`).
 */
import assert from "node:assert/strict";
import { CohereClient, CohereClientV2 } from "cohere-ai";
import OpenAI from "openai";
import { serveHttp } from "../../../lib/doors/http/server.ts";
import { nullLog } from "../../../lib/log/log.ts";
import type { LogSink } from "../../../lib/log/log.ts";
import { MODELS, preload, startSynapse } from "../../_helpers.ts";
import type { TestSynapse } from "../../_helpers.ts";

interface Door extends AsyncDisposable {
  t: TestSynapse;
  base: string;
  // deno-lint-ignore no-explicit-any
  post(path: string, body: unknown): Promise<{ res: Response; body: any }>;
  // deno-lint-ignore no-explicit-any
  get(path: string): Promise<{ res: Response; body: any }>;
}

async function door(
  overrides: Record<string, unknown> = {},
  log: LogSink = nullLog,
): Promise<Door> {
  const t = await startSynapse(overrides, { log: nullLog });
  const server = serveHttp(t.syn, { log });
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
    async get(path) {
      const res = await fetch(`${base}${path}`);
      return { res, body: await res.json() };
    },
    async [Symbol.asyncDispose]() {
      await server.shutdown();
      await t[Symbol.asyncDispose]();
    },
  };
}

/** The float32 values of a base64 string of little-endian float32 bytes. */
function decodeFloat32LE(b64: string): number[] {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const view = new DataView(bytes.buffer);
  return Array.from({ length: bytes.length / 4 }, (_, i) => view.getFloat32(i * 4, true));
}

const TEXTS = ["apple trees grow in orchards", "the car has four wheels"];
const LONG = Array.from({ length: 700 }, (_, i) => `word${i % 50}`).join(" ");

// ---------------------------------------------------------------------------------------------
// Cohere POST /v2/embed

Deno.test("/v2/embed answers float and base64 under their keys: base64 is the float32 LE bytes of the same vectors", async () => {
  await using d = await door();
  const native = (await d.post("/v1/ops/embed.batch", { texts: TEXTS })).body.result;
  const vectors = native.vectors.map((v: { vector: number[] }) => v.vector);
  const both = await d.post("/v2/embed", {
    texts: TEXTS,
    input_type: "search_document",
    embedding_types: ["float", "base64", "float"],
  });
  assert.equal(both.res.status, 200, JSON.stringify(both.body).slice(0, 400));
  assert.equal(both.body.response_type, "embeddings_by_type");
  assert.deepEqual(Object.keys(both.body.embeddings), ["float", "base64"]);
  assert.deepEqual(both.body.embeddings.float, vectors);
  assert.equal(both.body.embeddings.base64.length, TEXTS.length);
  both.body.embeddings.base64.forEach((b64: string, i: number) => {
    assert.equal(typeof b64, "string");
    // Exactly the float32 bytes: 4 bytes per value, the same numbers as float32.
    assert.deepEqual(decodeFloat32LE(b64), vectors[i].map((x: number) => Math.fround(x)));
  });
  assert.equal(both.body.synapse.fingerprint, native.fingerprint);
  // base64 alone: only its key.
  const b64 = await d.post("/v2/embed", { texts: TEXTS, embedding_types: ["base64"] });
  assert.deepEqual(Object.keys(b64.body.embeddings), ["base64"]);
  assert.deepEqual(b64.body.embeddings.base64, both.body.embeddings.base64);
  // v2 without embedding_types: float.
  const plain = await d.post("/v2/embed", { texts: TEXTS });
  assert.deepEqual(Object.keys(plain.body.embeddings), ["float"]);
  // v1: floats unless embedding_types asks for types, then by type (as Cohere's v1).
  const v1 = await d.post("/v1/embed", { texts: TEXTS });
  assert.equal(v1.body.response_type, "embeddings_floats");
  assert.deepEqual(v1.body.embeddings, vectors);
  const v1Typed = await d.post("/v1/embed", { texts: TEXTS, embedding_types: ["base64"] });
  assert.equal(v1Typed.body.response_type, "embeddings_by_type");
  assert.deepEqual(v1Typed.body.embeddings.base64, both.body.embeddings.base64);
});

Deno.test("/v2/embed refuses by name what it does not serve: quantised types, images, START, a smaller max_tokens", async () => {
  await using d = await door();
  const cases: [Record<string, unknown>, string][] = [
    [{ texts: TEXTS, embedding_types: ["int8"] }, "embedding_types"],
    [{ texts: TEXTS, embedding_types: ["float", "ubinary"] }, "embedding_types"],
    [{ texts: TEXTS, embedding_types: [] }, "embedding_types"],
    [{ texts: TEXTS, truncate: "START" }, "truncate"],
    [{ images: ["data:image/png;base64,AAAA"] }, "images"],
    [{ texts: TEXTS, input_type: "image" }, "input_type"],
    [{ texts: TEXTS, max_tokens: 8 }, "max_tokens"],
    [{ texts: TEXTS, inputs: [{ content: [{ type: "text", text: "x" }] }] }, "inputs"],
    [{}, "texts"],
    [
      { inputs: [{ content: [{ type: "image_url", image_url: { url: "x" } }] }] },
      "inputs[0].content[0]",
    ],
    [
      { inputs: [{ content: [{ type: "text", text: "a" }, { type: "text", text: "b" }] }] },
      "inputs[0].content",
    ],
    [{ texts: TEXTS, output_dimension: 7 }, "dimensions"],
  ];
  for (const [body, field] of cases) {
    const r = await d.post("/v2/embed", body);
    assert.equal(r.res.status, 400, `${JSON.stringify(body)} → ${JSON.stringify(r.body)}`);
    assert.equal(r.body.code, "invalid_request");
    assert.ok(typeof r.body.message === "string" && r.body.message.length > 0);
    assert.ok(
      r.body.field === field || JSON.stringify(r.body).includes(field),
      `${JSON.stringify(body)} → ${JSON.stringify(r.body)}`,
    );
  }
  const quantised = await d.post("/v2/embed", { texts: TEXTS, embedding_types: ["int8"] });
  assert.match(quantised.body.message, /'int8'/);
  // max_tokens at or above the model's limit changes nothing, and is served.
  const list = (await d.post("/v1/ops/models.list", {})).body.result;
  const limit = list.models.find((m: { model_id: string }) => m.model_id === list.served_by.embed)
    .max_tokens;
  const atLimit = await d.post("/v2/embed", { texts: TEXTS, max_tokens: limit });
  const bare = await d.post("/v2/embed", { texts: TEXTS });
  assert.equal(atLimit.res.status, 200, JSON.stringify(atLimit.body).slice(0, 300));
  assert.deepEqual(atLimit.body.embeddings, bare.body.embeddings);
  // Truncation: END (the default) cuts and discloses; NONE refuses, naming the text.
  const cut = await d.post("/v2/embed", { texts: [LONG] });
  assert.equal(cut.res.status, 200);
  assert.equal(cut.body.synapse.truncation_disclosures.length, 1);
  const none = await d.post("/v2/embed", { texts: ["ok", LONG], truncate: "NONE" });
  assert.equal(none.res.status, 422);
  assert.equal(none.body.code, "sequence_too_long");
  assert.equal(none.body.field, "texts[1]");
});

Deno.test("/v2/embed serves v2's text inputs as texts; priority is accepted and named", async () => {
  await using d = await door();
  const byTexts = await d.post("/v2/embed", { texts: TEXTS, input_type: "search_query" });
  const byInputs = await d.post("/v2/embed", {
    inputs: TEXTS.map((text) => ({ content: [{ type: "text", text }] })),
    input_type: "search_query",
    priority: 3,
  });
  assert.equal(byInputs.res.status, 200, JSON.stringify(byInputs.body).slice(0, 400));
  assert.deepEqual(byInputs.body.embeddings, byTexts.body.embeddings);
  assert.deepEqual(byInputs.body.texts, TEXTS);
  assert.deepEqual(byInputs.body.synapse.ignored_fields, ["priority"]);
  assert.equal(byTexts.body.synapse.ignored_fields, undefined);
  // A refused input is named in the request's own terms.
  const refused = await d.post("/v2/embed", {
    inputs: ["ok", LONG].map((text) => ({ content: [{ type: "text", text }] })),
    truncate: "NONE",
  });
  assert.equal(refused.res.status, 422);
  assert.equal(refused.body.field, "inputs[1]");
});

Deno.test("the official cohere-ai client embeds float and base64 against /v2/embed unchanged", async () => {
  await using d = await door();
  const native = (await d.post("/v1/ops/embed.batch", { texts: TEXTS })).body.result;
  const vectors = native.vectors.map((v: { vector: number[] }) => v.vector);
  const cohere = new CohereClientV2({ token: "unused", environment: d.base });
  const res = await cohere.embed({
    model: "synapse-tiny-embed",
    texts: TEXTS,
    inputType: "search_document",
    embeddingTypes: ["float", "base64"],
  });
  assert.deepEqual(res.embeddings.float, vectors);
  assert.equal(res.embeddings.base64?.length, TEXTS.length);
  assert.deepEqual(
    decodeFloat32LE(res.embeddings.base64![1]!),
    vectors[1].map((x: number) => Math.fround(x)),
  );
  assert.deepEqual(res.texts, TEXTS);
  // v2's inputs through the client.
  const byInputs = await cohere.embed({
    model: "synapse-tiny-embed",
    inputs: TEXTS.map((text) => ({ content: [{ type: "text" as const, text }] })),
    inputType: "search_document",
    embeddingTypes: ["float"],
  });
  assert.deepEqual(byInputs.embeddings.float, vectors);
  // The v1 client: floats by default, by type when it asks for types.
  const v1 = new CohereClient({ token: "unused", environment: d.base });
  const floats = await v1.embed({ texts: TEXTS, model: "synapse-tiny-embed" });
  assert.equal(floats.responseType, "embeddings_floats");
  assert.deepEqual(floats.embeddings, vectors);
  const typed = await v1.embed({
    texts: TEXTS,
    model: "synapse-tiny-embed",
    embeddingTypes: ["base64"],
  });
  assert.equal(typed.responseType, "embeddings_by_type");
  assert.ok(typed.responseType === "embeddings_by_type");
  assert.deepEqual(typed.embeddings.base64, res.embeddings.base64);
});

// ---------------------------------------------------------------------------------------------
// Cohere POST /v1/tokenize, /v1/detokenize

Deno.test("/v1/tokenize answers Cohere's {tokens, token_strings, meta} over tokenize, without special tokens", async () => {
  await using d = await door();
  const text = "Café ÜBER naïve, hello world";
  const native = (await d.post("/v1/ops/tokenize", {
    texts: [text],
    model: "synapse-tiny-embed",
    add_special_tokens: false,
  })).body.result;
  const r = await d.post("/v1/tokenize", { text, model: "synapse-tiny-embed" });
  assert.equal(r.res.status, 200, JSON.stringify(r.body).slice(0, 400));
  assert.deepEqual(r.body.tokens, native.items[0].ids);
  assert.equal(r.body.token_strings.length, r.body.tokens.length);
  // Joined, the token strings are the text up to the last token's end.
  const lastEnd = native.items[0].offsets.at(-1)[1];
  assert.equal(r.body.token_strings.join(""), [...text].slice(0, lastEnd).join(""));
  assert.deepEqual(r.body.meta, { api_version: { version: "1" } });
  assert.equal(r.body.synapse.model_id, "synapse-tiny-embed");
  assert.equal(r.body.synapse.fingerprint, native.fingerprint);
  assert.equal(r.res.headers.get("x-synapse-fingerprint"), native.fingerprint);
  // Detokenize gives back the text the ids stand for, as detokenize does.
  const back = await d.post("/v1/detokenize", {
    tokens: r.body.tokens,
    model: "synapse-tiny-embed",
  });
  assert.equal(back.res.status, 200, JSON.stringify(back.body));
  const nativeText = (await d.post("/v1/ops/detokenize", {
    ids: r.body.tokens,
    model: "synapse-tiny-embed",
    skip_special_tokens: false,
  })).body.result.text;
  assert.equal(back.body.text, nativeText);
  assert.deepEqual(back.body.meta, { api_version: { version: "1" } });
  // Errors in Cohere's body, fields in the request's terms.
  const badId = await d.post("/v1/detokenize", { tokens: [1, 99_999_999] });
  assert.equal(badId.res.status, 400, JSON.stringify(badId.body));
  assert.equal(badId.body.field, "tokens[1]");
  assert.equal(badId.body.code, "invalid_request");
  const unknown = await d.post("/v1/tokenize", { text: "x", model: "nope" });
  assert.equal(unknown.res.status, 404);
  assert.equal(unknown.body.code, "unknown_model");
  assert.match(unknown.body.message, /nope/);
  const lone = await d.post("/v1/tokenize", '{"text":"a\\ud800b"}');
  assert.equal(lone.res.status, 400);
  assert.equal(lone.body.field, "text");
  const extra = await d.post("/v1/tokenize", { text: "x", add_special_tokens: true });
  assert.equal(extra.res.status, 400);
  assert.match(extra.body.message, /add_special_tokens/);
});

Deno.test("the official cohere-ai client tokenizes and detokenizes against Synapse unchanged", async () => {
  await using d = await door();
  // CohereClient's own methods: cohere-ai 8.1.0's CohereClientV2 binds tokenize and detokenize
  // to its v2 client, which lacks them ("this.__tokenize is not a function", before any request).
  const cohere = new CohereClient({ token: "unused", environment: d.base });
  const tok = await cohere.tokenize({ text: "hello world", model: "synapse-tiny-embed" });
  assert.ok(tok.tokens.length >= 2);
  assert.equal(tok.tokenStrings.length, tok.tokens.length);
  assert.equal(tok.tokenStrings.join(""), "hello world");
  assert.equal(tok.meta?.apiVersion?.version, "1");
  const detok = await cohere.detokenize({ tokens: tok.tokens, model: "synapse-tiny-embed" });
  assert.equal(detok.text, "hello world");
  // It throws before it sends anything.
  assert.throws(
    () =>
      void new CohereClientV2({ token: "unused", environment: d.base }).tokenize({
        text: "x",
        model: "m",
      }),
    /__tokenize is not a function/,
    "CohereClientV2.tokenize works now: test it here instead of CohereClient's",
  );
});

// ---------------------------------------------------------------------------------------------
// OpenAI GET /v1/models/{id}

Deno.test("GET /v1/models/{id} answers the model's entry of the list; an unknown id is 404 in OpenAI's shape", async () => {
  await using d = await door();
  const list = await d.get("/v1/models");
  const entry = list.body.data.find((m: { id: string }) => m.id === "synapse-tiny-embed");
  const one = await d.get("/v1/models/synapse-tiny-embed");
  assert.equal(one.res.status, 200);
  assert.deepEqual(one.body, entry);
  assert.equal(one.body.object, "model");
  assert.equal(one.body.owned_by, "synapse");
  assert.equal(typeof one.body.created, "number");
  const missing = await d.get("/v1/models/nope");
  assert.equal(missing.res.status, 404);
  assert.equal(missing.body.error.code, "unknown_model");
  assert.equal(missing.body.error.type, "not_found_error");
  assert.equal(missing.body.error.param, "model");
  // The message lists what is served.
  for (const m of list.body.data) assert.ok(missing.body.error.message.includes(m.id));
  const post = await d.post("/v1/models/synapse-tiny-embed", {});
  assert.equal(post.res.status, 405);
  assert.equal(post.res.headers.get("allow"), "GET");
  assert.equal(post.body.error.type, "invalid_request_error");
});

Deno.test("GET /v1/models/{id} takes a URL-encoded id with a slash", async () => {
  await using d = await door({
    preload_models: [preload(`${MODELS}/synapse-tiny-embed`, "org/tiny-embed")],
  });
  const encoded = await d.get("/v1/models/org%2Ftiny-embed");
  assert.equal(encoded.res.status, 200, JSON.stringify(encoded.body));
  assert.equal(encoded.body.id, "org/tiny-embed");
  const raw = await d.get("/v1/models/org/tiny-embed");
  assert.deepEqual(raw.body, encoded.body);
  const openai = new OpenAI({ apiKey: "unused", baseURL: `${d.base}/v1` });
  const model = await openai.models.retrieve("org/tiny-embed");
  assert.equal(model.id, "org/tiny-embed");
});

Deno.test("the official openai client retrieves a model; an unknown one is a NotFoundError showing Synapse's message", async () => {
  await using d = await door();
  const openai = new OpenAI({ apiKey: "unused", baseURL: `${d.base}/v1`, maxRetries: 0 });
  const model = await openai.models.retrieve("synapse-tiny-rerank");
  assert.equal(model.id, "synapse-tiny-rerank");
  assert.equal(model.object, "model");
  assert.equal(model.owned_by, "synapse");
  const err = await openai.models.retrieve("nope").then(
    () => assert.fail("retrieve('nope') answered"),
    (e) => e,
  );
  assert.ok(err instanceof OpenAI.NotFoundError, String(err));
  assert.equal(err.status, 404);
  assert.equal(err.code, "unknown_model");
  assert.match(err.message, /Cannot describe model 'nope': it is not served here/);
  assert.match(err.message, /synapse-tiny-embed/);
});

// ---------------------------------------------------------------------------------------------
// TEI POST /

Deno.test("TEI POST / embeds {inputs} as /embed and reranks {query, texts} as /rerank", async () => {
  const lines: Record<string, unknown>[] = [];
  const log: LogSink = (_l, _t, message, fields) => {
    if (message === "request") lines.push(fields ?? {});
  };
  await using d = await door({}, log);
  const embed = await d.post("/embed", { inputs: TEXTS });
  const root = await d.post("/", { inputs: TEXTS });
  assert.equal(root.res.status, 200, JSON.stringify(root.body).slice(0, 300));
  assert.deepEqual(root.body, embed.body);
  assert.equal(
    root.res.headers.get("x-synapse-fingerprint"),
    embed.res.headers.get("x-synapse-fingerprint"),
  );
  const one = await d.post("/", { inputs: "apple" });
  assert.equal(one.body.length, 1);
  const rerank = await d.post("/rerank", { query: "apples", texts: TEXTS, return_text: true });
  const rootRerank = await d.post("/", { query: "apples", texts: TEXTS, return_text: true });
  assert.equal(rootRerank.res.status, 200, JSON.stringify(rootRerank.body).slice(0, 300));
  assert.deepEqual(rootRerank.body, rerank.body);
  // Refusals in TEI's shape.
  const bad = await d.post("/", { inputs: TEXTS, truncation_direction: "Left" });
  assert.equal(bad.res.status, 400);
  assert.equal(bad.body.error_type, "Validation");
  assert.equal(bad.body.code, "invalid_request");
  assert.match(bad.body.error, /left/);
  const get = await d.get("/");
  assert.equal(get.res.status, 405);
  assert.equal(get.res.headers.get("allow"), "POST");
  assert.equal(typeof get.body.error, "string");
  // The request log names the operation each ran.
  const rootLines = lines.filter((f) => f.path === "/");
  assert.deepEqual(
    rootLines.slice(0, 3).map((f) => [f.op, f.status]),
    [["embed.batch", 200], ["embed.batch", 200], ["rerank.score", 200]],
  );
});

Deno.test("TEI POST / refuses TEI's predict by name: inputs for a reranker, or as pairs", async () => {
  await using d = await door();
  for (
    const body of [
      { inputs: ["a", "b"], model: "synapse-tiny-rerank" },
      { inputs: [["what is an apple", "a fruit"]] },
    ]
  ) {
    const r = await d.post("/", body);
    assert.equal(r.res.status, 400, JSON.stringify(r.body));
    assert.equal(r.body.field, "inputs");
    assert.equal(r.body.code, "invalid_request");
    assert.match(r.body.error, /TEI's \/predict/);
  }
  // A model that is not served is just that, in TEI's body.
  const unknown = await d.post("/", { inputs: "x", model: "nope" });
  assert.equal(unknown.res.status, 404);
  assert.equal(unknown.body.code, "unknown_model");
  assert.equal(typeof unknown.body.error_type, "string");
  // An instance whose only model is a reranker: POST / with inputs is predict (as TEI's).
  await using reranker = await door({
    preload_models: [preload(`${MODELS}/synapse-tiny-rerank`, "only-rerank", { task: "rerank" })],
  });
  const list = (await reranker.post("/v1/ops/models.list", {})).body.result;
  assert.equal(list.served_by.embed, null, JSON.stringify(list.served_by));
  const r = await reranker.post("/", { inputs: "x" });
  assert.equal(r.res.status, 400, JSON.stringify(r.body));
  assert.match(r.body.error, /only-rerank/);
  const ranked = await reranker.post("/", { query: "apples", texts: TEXTS });
  assert.equal(ranked.res.status, 200, JSON.stringify(ranked.body));
  assert.equal(ranked.body.length, TEXTS.length);
});
