/**
 * Field report F35 through the real HTTP doors: `input_type` / a door's prompt selector is never
 * accepted and ignored. On a model with a prompt table it applies the prompt (native
 * `input_type` / `prompt_name`, TEI `prompt_name`, Cohere `input_type`, Jina `task` on
 * `/v1/embeddings`), with query and document vectors under ONE fingerprint and the prompt
 * disclosed (body, or `x-synapse-prompt` where the body has no room); on a model without a table
 * it has no effect, and the answer says so. On the tiny fixture model.
 */
import assert from "node:assert/strict";
import { serveHttp } from "../../../lib/doors/http/server.ts";
import { nullLog } from "../../../lib/log/log.ts";
import { MODELS, preload, startSynapse } from "../../_helpers.ts";

const TINY = `${MODELS}/synapse-tiny-embed`;

async function door() {
  const t = await startSynapse({
    preload_models: [
      preload(TINY, "tiny-prompts", { prompts: { query: "query: ", passage: "passage: " } }),
      preload(TINY, "tiny-plain"),
    ],
  }, { log: nullLog });
  const server = serveHttp(t.syn, { log: nullLog });
  const base = `http://127.0.0.1:${server.port}`;
  return {
    t,
    async post(
      path: string,
      body: unknown,
      // deno-lint-ignore no-explicit-any
    ): Promise<{ status: number; body: any; headers: Headers }> {
      const res = await fetch(`${base}${path}`, { method: "POST", body: JSON.stringify(body) });
      return { status: res.status, body: await res.json(), headers: res.headers };
    },
    async [Symbol.asyncDispose]() {
      await server.shutdown();
      await t[Symbol.asyncDispose]();
    },
  };
}

Deno.test("F35: native door: input_type query/document apply the table's prompts under one fingerprint", async () => {
  await using d = await door();
  const texts = ["what is a pear", "A pear is a fruit."];
  const ask = async (params: Record<string, unknown>) => {
    const r = await d.post("/v1/ops/embed.batch", { model: "tiny-prompts", texts, ...params });
    assert.equal(r.status, 200, JSON.stringify(r.body).slice(0, 400));
    return r.body.result;
  };
  const q = await ask({ input_type: "query" });
  const doc = await ask({ input_type: "document" });
  const bare = await ask({});
  assert.equal(q.fingerprint, doc.fingerprint);
  assert.notDeepEqual(q.vectors[0].vector, doc.vectors[0].vector);
  assert.notDeepEqual(q.vectors[0].vector, bare.vectors[0].vector);
  assert.equal(q.prompt.applied, "query");
  assert.equal(doc.prompt.applied, "passage");
  assert.ok(q.real_token_counts[0] > bare.real_token_counts[0]);
  // embed.query takes it too.
  const one = await d.post("/v1/ops/embed.query", {
    model: "tiny-prompts",
    text: texts[0],
    input_type: "query",
  });
  assert.equal(one.status, 200);
  assert.deepEqual(one.body.result.vectors[0].vector, q.vectors[0].vector);
  // Any other value is malformed, named.
  const other = await d.post("/v1/ops/embed.batch", { texts, input_type: "search_query" });
  assert.equal(other.status, 400);
  assert.equal(other.body.code, "invalid_request");
  assert.match(other.body.message, /field 'input_type'/);
  // Without a table: no effect, disclosed; the same vectors as without the selector.
  const plain = await d.post("/v1/ops/embed.batch", { model: "tiny-plain", texts });
  const plainQ = await d.post("/v1/ops/embed.batch", {
    model: "tiny-plain",
    texts,
    input_type: "query",
  });
  assert.equal(plainQ.status, 200);
  assert.deepEqual(plainQ.body.result.vectors, plain.body.result.vectors);
  assert.deepEqual(plainQ.body.result.prompt, {
    requested: "query",
    selector: "input_type",
    applied: null,
    reason: "no_prompt_table",
  });
});

Deno.test("F35: TEI prompt_name applies the prompt; unknown names are refused; no table is disclosed", async () => {
  await using d = await door();
  const native = await d.post("/v1/ops/embed.batch", {
    model: "tiny-prompts",
    texts: ["what is a pear"],
    prompt_name: "query",
  });
  const tei = await d.post("/embed", {
    model: "tiny-prompts",
    inputs: "what is a pear",
    prompt_name: "query",
  });
  assert.equal(tei.status, 200, JSON.stringify(tei.body));
  assert.deepEqual(tei.body, [native.body.result.vectors[0].vector]);
  assert.equal(tei.headers.get("x-synapse-prompt"), "applied=query");
  assert.equal(tei.headers.get("x-synapse-fingerprint"), native.body.result.fingerprint);
  const unknown = await d.post("/embed", { model: "tiny-prompts", inputs: "x", prompt_name: "q" });
  assert.equal(unknown.status, 400);
  assert.equal(unknown.body.code, "invalid_request");
  assert.match(unknown.body.error, /'passage', 'query'/);
  const plain = await d.post("/embed", { model: "tiny-plain", inputs: "x" });
  const plainQ = await d.post("/embed", { model: "tiny-plain", inputs: "x", prompt_name: "query" });
  assert.equal(plainQ.status, 200);
  assert.deepEqual(plainQ.body, plain.body);
  assert.equal(plainQ.headers.get("x-synapse-prompt"), "applied=none; reason=no_prompt_table");
  assert.equal(plain.headers.get("x-synapse-prompt"), null);
});

Deno.test("F35: Cohere input_type and Jina task select the prompt on their doors", async () => {
  await using d = await door();
  const texts = ["what is a pear", "A pear is a fruit."];
  const native = async (input_type: string) =>
    (await d.post("/v1/ops/embed.batch", { model: "tiny-prompts", texts, input_type })).body
      .result;
  const q = await native("query");
  const doc = await native("document");
  for (const path of ["/v1/embed", "/v2/embed"]) {
    const cq = await d.post(path, { model: "tiny-prompts", texts, input_type: "search_query" });
    assert.equal(cq.status, 200, JSON.stringify(cq.body).slice(0, 400));
    const floats = path === "/v2/embed" ? cq.body.embeddings.float : cq.body.embeddings;
    assert.deepEqual(floats, q.vectors.map((v: { vector: number[] }) => v.vector));
    assert.equal(cq.body.synapse.fingerprint, q.fingerprint);
    assert.equal(cq.body.synapse.prompt.applied, "query");
    assert.deepEqual(cq.body.texts, texts);
    const cd = await d.post(path, { model: "tiny-prompts", texts, input_type: "search_document" });
    const dfloats = path === "/v2/embed" ? cd.body.embeddings.float : cd.body.embeddings;
    assert.deepEqual(dfloats, doc.vectors.map((v: { vector: number[] }) => v.vector));
    assert.equal(cd.body.synapse.fingerprint, q.fingerprint);
  }
  // classification: no prompt of that name → bare, disclosed.
  const cls = await d.post("/v2/embed", {
    model: "tiny-prompts",
    texts,
    input_type: "classification",
  });
  assert.equal(cls.status, 200);
  assert.deepEqual(cls.body.synapse.prompt, {
    requested: "classification",
    selector: "input_type",
    applied: null,
    reason: "no_prompt_for_input_type",
  });
  // Refused by name: images, another embedding type, truncation from the start.
  for (
    const [body, field] of [
      [{ texts, input_type: "image" }, "input_type"],
      [{ texts, embedding_types: ["int8"] }, "embedding_types"],
      [{ texts, truncate: "START" }, "truncate"],
      [{ texts, images: ["x"] }, "images"],
    ] as const
  ) {
    const r = await d.post("/v2/embed", body);
    assert.equal(r.status, 400, JSON.stringify(r.body));
    assert.ok(JSON.stringify(r.body).includes(field), JSON.stringify(r.body));
  }
  // Jina's task on /v1/embeddings.
  const jq = await d.post("/v1/embeddings", {
    model: "tiny-prompts",
    input: texts,
    task: "retrieval.query",
  });
  assert.equal(jq.status, 200, JSON.stringify(jq.body).slice(0, 400));
  assert.deepEqual(
    jq.body.data.map((x: { embedding: number[] }) => x.embedding),
    q.vectors.map((v: { vector: number[] }) => v.vector),
  );
  assert.equal(jq.body.synapse.prompt.applied, "query");
  assert.equal(jq.headers.get("x-synapse-prompt"), "applied=query");
  const jp = await d.post("/v1/embeddings", {
    model: "tiny-prompts",
    input: texts,
    task: "retrieval.passage",
  });
  assert.deepEqual(
    jp.body.data.map((x: { embedding: number[] }) => x.embedding),
    doc.vectors.map((v: { vector: number[] }) => v.vector),
  );
  // A model without a table: Cohere's input_type has no effect, and says so.
  const plain = await d.post("/v1/embed", { model: "tiny-plain", texts });
  const plainQ = await d.post("/v1/embed", {
    model: "tiny-plain",
    texts,
    input_type: "search_query",
  });
  assert.deepEqual(plainQ.body.embeddings, plain.body.embeddings);
  assert.equal(plainQ.body.synapse.prompt.reason, "no_prompt_table");
  // input_type on the OpenAI and Ollama doors is still refused by name (not theirs).
  const openai = await d.post("/v1/embeddings", { input: "x", input_type: "query" });
  assert.equal(openai.status, 400);
  assert.equal(openai.body.error.param, "input_type");
  const ollama = await d.post("/api/embed", { model: "tiny-plain", input: "x", input_type: "q" });
  assert.equal(ollama.status, 400, JSON.stringify(ollama.body));
  assert.match(JSON.stringify(ollama.body), /input_type/);
});
