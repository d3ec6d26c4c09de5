/**
 * The API-shaped doors as thin adapters over the dispatcher: Cohere/Jina rerank (`/v1/rerank`,
 * `/v2/rerank`, `/rerank` with `documents`), TEI (`/rerank` with `texts`, `/embed`, `/info`) and
 * Ollama (`/api/embed`, `/api/tags`). Each answers its API's documented shape, gives the native
 * operation's exact numbers, sorts ranks by score, and maps the stable codes to its own error
 * body; the official `ollama` and `cohere-ai` npm clients work against it unchanged.
 */
import assert from "node:assert/strict";
import { CohereClient, CohereClientV2 } from "cohere-ai";
import { Ollama } from "ollama";
import { serveHttp } from "../../../lib/doors/http/server.ts";
import { ollamaDetails } from "../../../lib/doors/http/ollama_generate.ts";
import type { ModelsListResult } from "../../../lib/ops/models.ts";
import { nullLog } from "../../../lib/log/log.ts";
import type { LogSink } from "../../../lib/log/log.ts";
import { MODELS, preload, resultOf, startSynapse } from "../../_helpers.ts";
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

const QUERY = "how do apples grow";
const DOCS = [
  "apple trees grow in orchards",
  "the car has four wheels",
  "apples are a fruit",
  "a recipe for banana bread",
  "orchard apples ripen in autumn",
];
/** Over the model's 512 tokens. */
const LONG = Array.from({ length: 700 }, (_, i) => `word${i % 50}`).join(" ");

const sigmoid = (x: number) => 1 / (1 + Math.exp(-x));

/** Indices by score, highest first, equal scores in input order. */
function expectedOrder(scores: number[]): number[] {
  return scores.map((_, i) => i).sort((a, b) => scores[b]! - scores[a]! || a - b);
}

// ---------------------------------------------------------------------------------------------
// Cohere / Jina rerank

Deno.test("/v1/rerank answers Cohere's shape: sorted, top_n, return_documents, sigmoid and raw logit named", async () => {
  await using d = await door();
  const native = resultOf(await d.t.syn.call("rerank.score", { query: QUERY, candidates: DOCS }));
  const order = expectedOrder(native.scores);
  const { res, body } = await d.post("/v1/rerank", {
    model: "synapse-tiny-rerank",
    query: QUERY,
    documents: [DOCS[0], { text: DOCS[1] }, ...DOCS.slice(2)],
    top_n: 3,
    return_documents: true,
  });
  assert.equal(res.status, 200, JSON.stringify(body));
  assert.equal(body.model, "synapse-tiny-rerank");
  assert.match(body.id, /^[0-9a-f-]{36}$/);
  assert.equal(res.headers.get("x-synapse-fingerprint"), native.fingerprint);
  assert.deepEqual(body.results.map((r: { index: number }) => r.index), order.slice(0, 3));
  for (const r of body.results) {
    // relevance_score is the logistic of the raw logit; raw_logit is the native score, exactly.
    assert.equal(r.raw_logit, native.scores[r.index]);
    assert.equal(r.relevance_score, native.sigmoid_scores[r.index]);
    assert.equal(r.relevance_score, sigmoid(r.raw_logit));
    assert.ok(r.relevance_score > 0 && r.relevance_score < 1);
    assert.deepEqual(r.document, { text: DOCS[r.index] });
  }
  for (let i = 1; i < body.results.length; i++) {
    assert.ok(body.results[i - 1].relevance_score >= body.results[i].relevance_score);
  }
  assert.equal(
    body.usage.total_tokens,
    native.real_token_counts.reduce((a: number, b: number) => a + b, 0),
  );
  assert.equal(body.synapse.score_kind, "raw_logit");
  assert.equal(body.synapse.fingerprint, native.fingerprint);
  assert.equal(body.synapse.test_model, true);

  // Cohere v2's `priority` is accepted, changes nothing, and is named in the answer.
  const prio = await d.post("/v2/rerank", { query: QUERY, documents: DOCS, priority: 3 });
  assert.equal(prio.res.status, 200);
  assert.deepEqual(prio.body.results.map((r: { index: number }) => r.index), order);
  assert.deepEqual(prio.body.synapse.ignored_fields, ["priority"]);
  // Without top_n: every document; without return_documents: no document (Cohere's default).
  const all = await d.post("/v1/rerank", { query: QUERY, documents: DOCS });
  assert.equal(all.res.status, 200);
  assert.deepEqual(all.body.results.map((r: { index: number }) => r.index), order);
  assert.ok(all.body.results.every((r: object) => !("document" in r)));
  // top_n over the count gives every document; /v2/rerank and /rerank with documents are the same.
  for (const path of ["/v2/rerank", "/rerank"]) {
    const more = await d.post(path, { query: QUERY, documents: DOCS, top_n: 50 });
    assert.equal(more.res.status, 200, path);
    assert.equal(more.body.synapse.ignored_fields, undefined, path);
    assert.deepEqual(
      more.body.results.map((r: { index: number; raw_logit: number }) => [r.index, r.raw_logit]),
      order.map((i) => [i, native.scores[i]]),
      path,
    );
  }
});

Deno.test("/v1/rerank serves more documents than inline.max_items as chunks, with the native scores and global indices", async () => {
  await using d = await door({ inline: { max_items: 8 } });
  const docs = Array.from({ length: 30 }, (_, i) => `document ${i} about apples and ${i % 4}`);
  const { res, body } = await d.post("/v1/rerank", { query: QUERY, documents: docs });
  assert.equal(res.status, 200, JSON.stringify(body).slice(0, 400));
  assert.equal(body.results.length, 30);
  const byIndex = new Map<number, number>(
    body.results.map((r: { index: number; raw_logit: number }) => [r.index, r.raw_logit]),
  );
  // Each chunk of 8 scored natively gives the same numbers.
  const scores: number[] = [];
  for (let a = 0; a < 30; a += 8) {
    const chunk = resultOf(
      await d.t.syn.call("rerank.score", { query: QUERY, candidates: docs.slice(a, a + 8) }),
    );
    scores.push(...chunk.scores);
  }
  for (let i = 0; i < 30; i++) assert.equal(byIndex.get(i), scores[i], `document ${i}`);
  assert.deepEqual(body.results.map((r: { index: number }) => r.index), expectedOrder(scores));
  // The native door still refuses 30 candidates inline.
  const native = await d.post("/v1/ops/rerank.score", { query: QUERY, candidates: docs });
  assert.equal(native.res.status, 400);
  assert.equal(native.body.result.error.details.limit, "inline.max_items");
  // A refused document in a later chunk is named by its index in the request.
  const bad = [...docs];
  bad[21] = "   ";
  const refused = await d.post("/v1/rerank", { query: QUERY, documents: bad });
  assert.equal(refused.res.status, 400);
  assert.equal(refused.body.code, "invalid_request");
  assert.equal(refused.body.field, "documents[21]");
  // Over 1,000 documents: refused naming documents.
  const many = await d.post("/v1/rerank", {
    query: QUERY,
    documents: Array.from({ length: 1001 }, () => "x"),
  });
  assert.equal(many.res.status, 400);
  assert.equal(many.body.field, "documents");
  assert.match(many.body.message, /1001 documents .* at most 1000/);
});

Deno.test("/v1/rerank maps errors to Cohere's {message} with the table's status", async () => {
  await using d = await door();
  const unknown = await d.post("/v1/rerank", { model: "nope", query: QUERY, documents: DOCS });
  assert.equal(unknown.res.status, 404);
  assert.equal(unknown.body.code, "unknown_model");
  assert.match(unknown.body.message, /unknown model 'nope'/);
  // Fields that change what is scored are refused by name, never ignored.
  for (const field of ["rank_fields", "max_chunks_per_doc", "max_tokens_per_doc"]) {
    const r = await d.post("/v1/rerank", { query: QUERY, documents: DOCS, [field]: 1 });
    assert.equal(r.res.status, 400, field);
    assert.match(r.body.message, new RegExp(field), field);
  }
  const tooLong = await d.post("/v1/rerank", { query: QUERY, documents: ["short", LONG] });
  assert.equal(tooLong.res.status, 422);
  assert.equal(tooLong.body.code, "sequence_too_long");
  assert.equal(tooLong.body.field, "documents[1]");
  // Synapse's truncate cuts it instead, and says so.
  const cut = await d.post("/v1/rerank", {
    query: QUERY,
    documents: ["short", LONG],
    truncate: true,
  });
  assert.equal(cut.res.status, 200);
  assert.equal(cut.body.synapse.truncation_disclosures[1].truncated, true);
  const bad = await d.post("/v1/rerank", "{not json");
  assert.equal(bad.res.status, 400);
  assert.equal(bad.body.code, "invalid_request");
  assert.equal(typeof bad.body.message, "string");
  const get = await fetch(`${d.base}/v1/rerank`);
  assert.equal(get.status, 405);
  assert.equal(get.headers.get("allow"), "POST");
  assert.equal((await get.json()).code, "invalid_request");
});

Deno.test("the official cohere-ai client reranks against Synapse unchanged (v1 and v2)", async () => {
  await using d = await door();
  const native = resultOf(await d.t.syn.call("rerank.score", { query: QUERY, candidates: DOCS }));
  const order = expectedOrder(native.scores);
  const v1 = new CohereClient({ token: "unused", environment: d.base });
  const r1 = await v1.rerank({ query: QUERY, documents: DOCS, topN: 2, returnDocuments: true });
  assert.deepEqual(r1.results.map((r) => r.index), order.slice(0, 2));
  assert.deepEqual(
    r1.results.map((r) => [r.relevanceScore, r.document?.text]),
    order.slice(0, 2).map((i) => [native.sigmoid_scores[i], DOCS[i]]),
  );
  const v2 = new CohereClientV2({ token: "unused", environment: d.base });
  const r2 = await v2.rerank({ model: "synapse-tiny-rerank", query: QUERY, documents: DOCS });
  assert.deepEqual(r2.results.map((r) => r.index), order);
  await assert.rejects(
    v2.rerank({ model: "nope", query: QUERY, documents: DOCS }),
    // deno-lint-ignore no-explicit-any
    (err: any) => err.statusCode === 404 && err.body.code === "unknown_model",
  );
});

// ---------------------------------------------------------------------------------------------
// TEI

Deno.test("TEI /rerank (texts) answers [{index, score, text?}] sorted; raw_scores gives the raw logit", async () => {
  await using d = await door();
  const native = resultOf(await d.t.syn.call("rerank.score", { query: QUERY, candidates: DOCS }));
  const order = expectedOrder(native.scores);
  const plain = await d.post("/rerank", { query: QUERY, texts: DOCS });
  assert.equal(plain.res.status, 200);
  assert.ok(Array.isArray(plain.body));
  assert.deepEqual(plain.body, order.map((i) => ({ index: i, score: native.sigmoid_scores[i] })));
  const raw = await d.post("/rerank", {
    query: QUERY,
    texts: DOCS,
    raw_scores: true,
    return_text: true,
    truncate: false,
  });
  assert.equal(raw.res.status, 200);
  assert.deepEqual(
    raw.body,
    order.map((i) => ({ index: i, score: native.scores[i], text: DOCS[i] })),
  );
  assert.equal(raw.res.headers.get("x-synapse-fingerprint"), native.fingerprint);
  // Errors in TEI's shape, named in TEI's terms.
  const tooLong = await d.post("/rerank", { query: QUERY, texts: ["short", LONG] });
  assert.equal(tooLong.res.status, 422);
  assert.equal(tooLong.body.error_type, "Validation");
  assert.equal(tooLong.body.code, "sequence_too_long");
  assert.equal(tooLong.body.field, "texts[1]");
  assert.equal(typeof tooLong.body.error, "string");
  const left = await d.post("/rerank", {
    query: QUERY,
    texts: DOCS,
    truncate: true,
    truncation_direction: "Left",
  });
  assert.equal(left.res.status, 400);
  assert.equal(left.body.field, "truncation_direction");
  // A body that is neither shape: TEI's error (its path), naming the missing field.
  const neither = await d.post("/rerank", { query: QUERY });
  assert.equal(neither.res.status, 400);
  assert.equal(neither.body.error_type, "Validation");
});

Deno.test("TEI /embed answers [[floats]] equal to embed.batch's; normalize and truncate are never changed silently", async () => {
  await using d = await door({
    preload_models: [
      preload(`${MODELS}/synapse-tiny-embed`, "tiny"),
      preload(`${MODELS}/synapse-tiny-embed`, "tiny-raw", { normalize: false }),
    ],
  });
  const texts = ["apple pie", "banana bread", "a car"];
  const native = resultOf(await d.t.syn.call("embed.batch", { texts }));
  const { res, body } = await d.post("/embed", { inputs: texts, normalize: true });
  assert.equal(res.status, 200, JSON.stringify(body));
  assert.deepEqual(body, native.vectors.map((v: { vector: number[] }) => v.vector));
  assert.equal(res.headers.get("x-synapse-fingerprint"), native.fingerprint);
  const one = await d.post("/embed", { inputs: "apple pie", truncate: null, prompt_name: null });
  assert.equal(one.res.status, 200);
  assert.deepEqual(one.body, [native.vectors[0].vector]);
  // normalize that differs from the model's own is refused, both ways.
  const off = await d.post("/embed", { inputs: texts, normalize: false });
  assert.equal(off.res.status, 400);
  assert.equal(off.body.field, "normalize");
  assert.equal(off.body.error_type, "Validation");
  assert.match(off.body.error, /'tiny' normalises its vectors/);
  const rawNative = resultOf(await d.t.syn.call("embed.batch", { texts, model: "tiny-raw" }));
  const raw = await d.post("/embed", { inputs: texts, model: "tiny-raw", normalize: false });
  assert.equal(raw.res.status, 200);
  assert.deepEqual(raw.body, rawNative.vectors.map((v: { vector: number[] }) => v.vector));
  const on = await d.post("/embed", { inputs: texts, model: "tiny-raw", normalize: true });
  assert.equal(on.res.status, 400);
  assert.match(on.body.error, /does not normalise/);
  // truncate false (TEI's default) refuses an over-long input, naming it; true cuts it.
  for (const req of [{ inputs: ["ok", LONG] }, { inputs: ["ok", LONG], truncate: false }]) {
    const r = await d.post("/embed", req);
    assert.equal(r.res.status, 422);
    assert.equal(r.body.code, "sequence_too_long");
    assert.equal(r.body.error_type, "Validation");
    assert.equal(r.body.field, "inputs[1]");
    assert.match(r.body.error, /; send truncate: true to cut it to the model's limit/);
  }
  const single = await d.post("/embed", { inputs: LONG });
  assert.equal(single.body.field, "inputs");
  const cut = await d.post("/embed", { inputs: ["ok", LONG], truncate: true });
  assert.equal(cut.res.status, 200);
  const cutNative = resultOf(
    await d.t.syn.call("embed.batch", { texts: ["ok", LONG], truncate: true }),
  );
  assert.deepEqual(cut.body, cutNative.vectors.map((v: { vector: number[] }) => v.vector));
  // Refused by name: an unknown field, a width the model does not have, a bad body. (A
  // prompt_name is served: tests/doors/http/input_type_test.ts.)
  const cases: [unknown, string][] = [
    [{ inputs: "x", extra: 1 }, "extra"],
    [{ inputs: "x", dimensions: 7 }, "dimensions"],
    [{ inputs: [1, 2] }, "inputs[0]"],
  ];
  for (const [req, field] of cases) {
    const r = await d.post("/embed", req);
    assert.equal(r.res.status, 400, JSON.stringify(req));
    assert.equal(r.body.code, "invalid_request");
    assert.ok(String(r.body.field ?? r.body.error).includes(field), JSON.stringify(r.body));
  }
  const notJson = await d.post("/embed", "{nope");
  assert.equal(notJson.res.status, 400);
  assert.equal(notJson.body.error_type, "Validation");
  const unknown = await d.post("/embed", { inputs: "x", model: "nope" });
  assert.equal(unknown.res.status, 404);
  assert.equal(unknown.body.code, "unknown_model");
});

Deno.test("TEI /embed maps queue_full to 429 Overloaded with Retry-After", async () => {
  await using d = await door({ inline: { byte_budget: 64 } });
  const held = d.t.syn.admission.admit({
    bytes: 60,
    deadlineMs: 30000,
    maxQueueMs: 5000,
    queueClass: "bulk",
  });
  try {
    const { res, body } = await d.post("/embed", { inputs: ["apple pie"] });
    assert.equal(res.status, 429);
    assert.equal(body.error_type, "Overloaded");
    assert.equal(body.code, "queue_full");
    assert.equal(res.headers.get("retry-after"), "1");
  } finally {
    held.release();
  }
});

Deno.test("TEI /info describes the default embedding model", async () => {
  await using d = await door();
  const list = resultOf(await d.t.syn.call("models.list", {}));
  const row = list.models.find((m: { model_id: string }) => m.model_id === "synapse-tiny-embed");
  const { res, body } = await d.get("/info");
  assert.equal(res.status, 200);
  assert.equal(body.model_id, "synapse-tiny-embed");
  assert.equal(body.model_dtype, row.dtype);
  assert.deepEqual(body.model_type, { embedding: { pooling: row.pooling } });
  assert.equal(body.max_input_length, row.max_tokens);
  assert.equal(body.max_client_batch_size, 2048);
  assert.equal(body.auto_truncate, false);
  assert.match(body.version, /^\d+\.\d+\.\d+/);
  assert.equal(body.synapse.fingerprint, row.fingerprints[0]);
  assert.equal(body.synapse.rerank_model_id, "synapse-tiny-rerank");
  const post = await fetch(`${d.base}/info`, { method: "POST" });
  assert.equal(post.status, 405);
  assert.equal((await post.json()).error_type, "Validation");
});

// ---------------------------------------------------------------------------------------------
// Ollama

Deno.test("Ollama /api/embed answers its shape with embed.batch's vectors; truncate defaults to true, false refuses", async () => {
  await using d = await door();
  const texts = ["apple pie", "banana bread"];
  const native = resultOf(await d.t.syn.call("embed.batch", { texts }));
  const { res, body } = await d.post("/api/embed", {
    model: "synapse-tiny-embed",
    input: texts,
    keep_alive: "5m",
    options: { temperature: 0 },
  });
  assert.equal(res.status, 200, JSON.stringify(body));
  assert.equal(body.model, "synapse-tiny-embed");
  assert.deepEqual(body.embeddings, native.vectors.map((v: { vector: number[] }) => v.vector));
  assert.equal(
    body.prompt_eval_count,
    native.real_token_counts.reduce((a: number, b: number) => a + b, 0),
  );
  assert.ok(Number.isInteger(body.total_duration) && body.total_duration > 0);
  assert.equal(body.load_duration, 0);
  // Ollama's runner settings are accepted, change nothing, and are named in the answer (each
  // option by name: tests/doors/http/ollama_embed_test.ts).
  assert.deepEqual(body.synapse.ignored_fields, ["keep_alive"]);
  assert.deepEqual(body.synapse.ignored_options, ["temperature"]);
  const one = await d.post("/api/embed", { model: "synapse-tiny-embed", input: "apple pie" });
  assert.equal(one.body.synapse.ignored_fields, undefined);
  assert.deepEqual(one.body.embeddings, [native.vectors[0].vector]);
  // `name:latest` (what Ollama's clients send) names the model; another tag does not.
  const latest = await d.post("/api/embed", {
    model: "synapse-tiny-embed:latest",
    input: "apple pie",
  });
  assert.deepEqual(latest.body.embeddings, one.body.embeddings);
  const tagged = await d.post("/api/embed", { model: "synapse-tiny-embed:v2", input: "x" });
  assert.equal(tagged.res.status, 404);
  // Ollama's legacy endpoint: {model, prompt} → {embedding}, the same vector.
  const legacy = await d.post("/api/embeddings", {
    model: "synapse-tiny-embed:latest",
    prompt: "apple pie",
  });
  assert.equal(legacy.res.status, 200);
  assert.deepEqual(legacy.body.embedding, one.body.embeddings[0]);
  const legacyKept = await d.post("/api/embeddings", {
    model: "synapse-tiny-embed",
    prompt: "apple pie",
    keep_alive: 0,
  });
  assert.deepEqual(legacyKept.body.synapse.ignored_fields, ["keep_alive"]);
  const legacyBad = await d.post("/api/embeddings", { model: "nope", prompt: "x" });
  assert.equal(legacyBad.res.status, 404);
  assert.equal(typeof legacyBad.body.error, "string");
  // Ollama's default truncates, and the cut is disclosed.
  const cut = await d.post("/api/embed", { model: "synapse-tiny-embed", input: ["ok", LONG] });
  assert.equal(cut.res.status, 200);
  const cutNative = resultOf(
    await d.t.syn.call("embed.batch", { texts: ["ok", LONG], truncate: true }),
  );
  assert.deepEqual(
    cut.body.embeddings,
    cutNative.vectors.map((v: { vector: number[] }) => v.vector),
  );
  assert.equal(cut.body.synapse.truncation_disclosures[1].truncated, true);
  const refused = await d.post("/api/embed", {
    model: "synapse-tiny-embed",
    input: ["ok", LONG],
    truncate: false,
  });
  assert.equal(refused.res.status, 422);
  assert.equal(refused.body.code, "sequence_too_long");
  assert.equal(refused.body.field, "input[1]");
  assert.match(refused.body.error, /send truncate: true/);
  // Errors: {error} with the table's status.
  const unknown = await d.post("/api/embed", { model: "nope", input: "x" });
  assert.equal(unknown.res.status, 404);
  assert.match(unknown.body.error, /unknown model 'nope'/);
  const noModel = await d.post("/api/embed", { input: "x" });
  assert.equal(noModel.res.status, 400);
  assert.equal(noModel.body.field, "model");
  const notJson = await d.post("/api/embed", "[");
  assert.equal(notJson.res.status, 400);
  assert.equal(typeof notJson.body.error, "string");
});

Deno.test("Ollama /api/tags lists every model in Ollama's shape", async () => {
  await using d = await door();
  const list = resultOf(await d.t.syn.call("models.list", {}));
  const { res, body } = await d.get("/api/tags");
  assert.equal(res.status, 200);
  const version = await d.get("/api/version");
  assert.equal(version.res.status, 200);
  assert.match(version.body.version, /^\d+\.\d+\.\d+/);
  assert.deepEqual(
    body.models.map((m: { name: string }) => m.name),
    list.models.map((m: { model_id: string }) => m.model_id),
  );
  for (const [i, m] of body.models.entries()) {
    assert.equal(m.model, m.name);
    assert.equal(m.digest, list.models[i].fingerprints[0]);
    assert.ok(!Number.isNaN(Date.parse(m.modified_at)));
    assert.ok(Number.isInteger(m.size) && m.size > 0);
    assert.equal(m.details.format, "onnx");
    assert.equal(m.details.family, list.models[i].task);
    // The quantization the lane serves, as /api/show gives it (the test models are f32 lanes).
    assert.equal(m.details.quantization_level, "F32");
  }
});

/** A models.list row with only what `ollamaDetails` reads. */
function resultRowFor(
  fields: { dtype: string; quant?: string },
): ModelsListResult["models"][number] {
  return { model_id: "m", engine: "ort", task: "embed", ...fields } as unknown as ModelsListResult[
    "models"
  ][number];
}

Deno.test("Ollama details name an int8 lane's quantization INT8, not its f32 dtype", () => {
  const row = resultRowFor({ dtype: "f32", quant: "int8" });
  assert.equal(ollamaDetails(row).quantization_level, "INT8");
  assert.equal(
    ollamaDetails(resultRowFor({ dtype: "f16", quant: "q8_0" })).quantization_level,
    "Q8_0",
  );
  assert.equal(ollamaDetails(resultRowFor({ dtype: "f32" })).quantization_level, "F32");
});

Deno.test("the official ollama client embeds and lists against Synapse unchanged", async () => {
  await using d = await door();
  const native = resultOf(await d.t.syn.call("embed.batch", { texts: ["hello", "world"] }));
  const ollama = new Ollama({ host: d.base });
  const e = await ollama.embed({ model: "synapse-tiny-embed", input: ["hello", "world"] });
  assert.deepEqual(e.embeddings, native.vectors.map((v: { vector: number[] }) => v.vector));
  const tags = await ollama.list();
  assert.deepEqual(tags.models.map((m) => m.name), ["synapse-tiny-embed", "synapse-tiny-rerank"]);
  await assert.rejects(
    ollama.embed({ model: "nope", input: "x" }),
    // deno-lint-ignore no-explicit-any
    (err: any) => err.status_code === 404 && /unknown model 'nope'/.test(err.message),
  );
});

// ---------------------------------------------------------------------------------------------
// All doors

Deno.test("every adapter logs its operation and facts; an unknown path is unknown_method", async () => {
  const lines: { message: string; fields: Record<string, unknown> }[] = [];
  const log: LogSink = (_level, _target, message, fields) =>
    lines.push({ message, fields: fields ?? {} });
  await using d = await door({}, log);
  await d.post("/v1/rerank", { query: QUERY, documents: DOCS });
  await d.post("/rerank", { query: QUERY, texts: DOCS });
  await d.post("/embed", { inputs: ["a", "b"] });
  await d.post("/api/embed", { model: "nope", input: "x" });
  await d.get("/api/tags");
  const req = lines.filter((l) => l.message === "request").map((l) => l.fields);
  assert.deepEqual(
    req.map((f) => [f.path, f.op, f.items, f.outcome, f.status]),
    [
      ["/v1/rerank", "rerank.score", 5, "ok", 200],
      ["/rerank", "rerank.score", 5, "ok", 200],
      ["/embed", "embed.batch", 2, "ok", 200],
      ["/api/embed", "embed.batch", 1, "unknown_model", 404],
      ["/api/tags", "models.list", "-", "ok", 200],
    ],
  );
  assert.equal(req[0]!.model, "synapse-tiny-rerank");
  const missing = await d.get("/api/nothing");
  assert.equal(missing.res.status, 404);
  assert.equal(missing.body.code, "unknown_method");
});
