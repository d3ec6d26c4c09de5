/**
 * Field report F35: `input_type: "query"` / `"document"` is never accepted and ignored. No
 * served model has a query/document prompt table yet, so `embed.batch` refuses it naming
 * `input_type` (saying the model has no prompt table and embeds every text as given), before
 * anything is embedded or a job is made — on the native HTTP door, for an inline batch and for
 * one over the inline limits with a `request_key`; TEI's `prompt_name` is refused the same way;
 * the same request without `input_type` is served. Through the real doors, on the tiny fixture.
 */
import assert from "node:assert/strict";
import { serveHttp } from "../../lib/http/server.ts";
import { nullLog } from "../../lib/log/log.ts";
import { startSynapse } from "../_helpers.ts";

async function door() {
  const t = await startSynapse({}, { log: nullLog });
  const server = serveHttp(t.syn, { log: nullLog });
  const base = `http://127.0.0.1:${server.port}`;
  return {
    t,
    // deno-lint-ignore no-explicit-any
    async post(path: string, body: unknown): Promise<{ status: number; body: any }> {
      const res = await fetch(`${base}${path}`, { method: "POST", body: JSON.stringify(body) });
      return { status: res.status, body: await res.json() };
    },
    async [Symbol.asyncDispose]() {
      await server.shutdown();
      await t[Symbol.asyncDispose]();
    },
  };
}

Deno.test("F35: input_type on embed.batch is refused by name: no model has a prompt table", async () => {
  await using d = await door();
  const texts = ["what is a pear", "A pear is a fruit."];
  const served = await d.post("/v1/ops/embed.batch", { texts });
  assert.equal(served.status, 200, JSON.stringify(served.body).slice(0, 400));
  const modelId: string = served.body.result.model_id;
  assert.equal(served.body.result.vectors.length, 2);

  for (const inputType of ["query", "document"]) {
    for (
      const params of [
        { texts, input_type: inputType },
        { items: [{ id: "q", text: texts[0] }], input_type: inputType, model: modelId },
      ]
    ) {
      const r = await d.post("/v1/ops/embed.batch", params);
      const what = JSON.stringify(params);
      assert.equal(r.status, 400, `${what} → ${JSON.stringify(r.body).slice(0, 400)}`);
      const e = r.body.result.error;
      assert.equal(e.code, "invalid_request", what);
      assert.deepEqual(e.details, {
        field: "input_type",
        reason: "no_prompt_table",
        input_type: inputType,
        model_id: modelId,
      });
      assert.match(e.message, /input_type/);
      assert.match(e.message, /no query\/document prompt table/);
      assert.match(e.message, /without input_type/);
      assert.equal(r.body.result.vectors, undefined, what);
    }
  }
  // Any other value is malformed, named the same.
  const other = await d.post("/v1/ops/embed.batch", { texts, input_type: "search_query" });
  assert.equal(other.status, 400);
  assert.equal(other.body.code, "invalid_request");
  assert.match(other.body.message, /field 'input_type'/);
});

Deno.test("F35: a batch over the inline limits with input_type makes no job", async () => {
  await using d = await door();
  const texts = Array.from({ length: 70 }, (_, i) => `document number ${i}`); // > inline.max_items
  const r = await d.post("/v1/ops/embed.batch", {
    texts,
    request_key: "f35-job",
    input_type: "document",
  });
  assert.equal(r.status, 400, JSON.stringify(r.body).slice(0, 400));
  assert.equal(r.body.result.error.details.field, "input_type");
  // The same key without input_type is a fresh job (nothing was recorded under it).
  const job = await d.post("/v1/ops/embed.batch", { texts, request_key: "f35-job" });
  assert.equal(job.status, 200, JSON.stringify(job.body).slice(0, 400));
  assert.equal(typeof job.body.result.job_id, "string");
  const again = await d.post("/v1/ops/embed.batch", {
    texts,
    request_key: "f35-job",
    input_type: "query",
  });
  assert.equal(again.status, 400);
  assert.equal(again.body.result.error.details.field, "input_type");
});

Deno.test("F35: the compat doors map no input_type: TEI prompt_name refused, others by name", async () => {
  await using d = await door();
  const tei = await d.post("/embed", { inputs: "what is a pear", prompt_name: "query" });
  assert.equal(tei.status, 400, JSON.stringify(tei.body));
  assert.match(JSON.stringify(tei.body), /prompt_name/);
  assert.match(JSON.stringify(tei.body), /no prompt table/);
  const openai = await d.post("/v1/embeddings", { input: "x", input_type: "query" });
  assert.equal(openai.status, 400);
  assert.equal(openai.body.error.param, "input_type");
  const served = await d.post("/v1/ops/embed.batch", { texts: ["x"] });
  const model: string = served.body.result.model_id;
  const ollama = await d.post("/api/embed", { model, input: "x", input_type: "query" });
  assert.equal(ollama.status, 400, JSON.stringify(ollama.body));
  assert.match(JSON.stringify(ollama.body), /input_type/);
});
