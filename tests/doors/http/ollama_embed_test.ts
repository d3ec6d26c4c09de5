/**
 * Ollama's own embedding behaviour at `/api/embed` and `/api/embeddings` (issue 21 item 6), with
 * the official `ollama` client unchanged: `{model}` without input is a warm-up answered
 * `{model, embeddings: []}` once the model is found serving (Ollama's `EmbedHandler`), `input: []`
 * and `""` answer `[]`; `options.num_ctx` below the model's limit is this call's context — a cut
 * disclosed per input, or with `truncate: false` a refusal naming `input[i]` — and every other
 * option is named in `synapse.ignored_options`.
 */
import assert from "node:assert/strict";
import { Ollama } from "ollama";
import { serveHttp } from "../../../lib/doors/http/server.ts";
import { nullLog } from "../../../lib/log/log.ts";
import { resultOf, startSynapse } from "../../_helpers.ts";
import type { TestSynapse } from "../../_helpers.ts";

const MODEL = "synapse-tiny-embed";
/** About 80 tokens: well under the model's 512, well over a num_ctx of 8. */
const TEXT = Array.from({ length: 40 }, (_, i) => `word${i % 10}`).join(" ");
/** Over the model's 512 tokens. */
const LONG = Array.from({ length: 700 }, (_, i) => `word${i % 50}`).join(" ");

interface Door extends AsyncDisposable {
  t: TestSynapse;
  ollama: Ollama;
  // deno-lint-ignore no-explicit-any
  post(path: string, body: unknown): Promise<{ status: number; body: any }>;
}

async function door(): Promise<Door> {
  const t = await startSynapse({}, { log: nullLog });
  const server = serveHttp(t.syn, { log: nullLog });
  const base = `http://127.0.0.1:${server.port}`;
  return {
    t,
    ollama: new Ollama({ host: base }),
    async post(path, body) {
      const res = await fetch(`${base}${path}`, { method: "POST", body: JSON.stringify(body) });
      return { status: res.status, body: await res.json() };
    },
    async [Symbol.asyncDispose]() {
      await server.shutdown();
      await t[Symbol.asyncDispose]();
    },
  };
}

Deno.test("ollama.embed({model}) without input is a warm-up: {model, embeddings: []}; an unknown model is 404", async () => {
  await using d = await door();
  // The client's type asks for `input`; its warm-up call (what Ollama's docs show) leaves it out.
  const warm = await d.ollama.embed({ model: `${MODEL}:latest` } as Parameters<Ollama["embed"]>[0]);
  assert.equal(warm.model, MODEL);
  assert.deepEqual(warm.embeddings, []);
  assert.equal(warm.prompt_eval_count, 0);
  // deno-lint-ignore no-explicit-any
  const synapse = (warm as any).synapse;
  assert.equal(synapse.model_id, MODEL);
  assert.match(synapse.fingerprint, /^[0-9a-f]{64}$/);
  assert.deepEqual(synapse.truncation_disclosures, []);
  // `input: []`, `""` and `null` are the same call.
  for (const input of [[], "", null]) {
    const r = await d.post("/api/embed", { model: MODEL, input });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.deepEqual(r.body.embeddings, [], JSON.stringify(input));
    assert.equal(r.body.model, MODEL);
  }
  // A warm-up of a model that is not served is refused as an embedding would be.
  await assert.rejects(
    d.ollama.embed({ model: "nope" } as Parameters<Ollama["embed"]>[0]),
    // deno-lint-ignore no-explicit-any
    (err: any) => err.status_code === 404 && /unknown model 'nope'/.test(err.message),
  );
  // So is a width the model does not serve.
  const dims = await d.post("/api/embed", { model: MODEL, dimensions: 7 });
  assert.equal(dims.status, 400);
  assert.equal(dims.body.field, "dimensions");
  // One empty string inside a list is still an input, and refused.
  const empty = await d.post("/api/embed", { model: MODEL, input: ["ok", ""] });
  assert.equal(empty.status, 400);
  assert.equal(empty.body.field, "input[1]");
  // The legacy endpoint: no prompt (or "") loads and answers an empty embedding.
  const legacy = await d.ollama.embeddings({ model: MODEL, prompt: "" });
  assert.deepEqual(legacy.embedding, []);
  const legacyBare = await d.post("/api/embeddings", { model: MODEL });
  assert.equal(legacyBare.status, 200);
  assert.deepEqual(legacyBare.body.embedding, []);
  const legacyUnknown = await d.post("/api/embeddings", { model: "nope" });
  assert.equal(legacyUnknown.status, 404);
});

Deno.test("options.num_ctx below the model's limit cuts each input to it, disclosed; truncate: false refuses naming input[i]", async () => {
  await using d = await door();
  const full = resultOf(await d.t.syn.call("tokenize", { texts: [TEXT] })).items[0];
  assert.ok(full.count > 40 && full.count < 512, `TEXT is ${full.count} tokens`);
  const cut = await d.ollama.embed({
    model: MODEL,
    input: [TEXT, "short"],
    options: { num_ctx: 8 },
  });
  // deno-lint-ignore no-explicit-any
  const synapse = (cut as any).synapse;
  assert.equal(synapse.num_ctx, 8);
  assert.equal(synapse.ignored_options, undefined);
  const [long, short] = synapse.truncation_disclosures;
  assert.equal(long.truncated, true);
  assert.equal(long.submitted_tokens, full.count);
  assert.equal(long.effective_tokens, 8);
  assert.equal(short.truncated, false);
  assert.deepEqual(synapse.real_token_counts, [8, short.effective_tokens]);
  assert.equal(cut.prompt_eval_count, 8 + short.effective_tokens);
  // The vector is the one of the kept prefix (the characters the kept tokens cover).
  const prefix = [...TEXT].slice(0, long.kept_chars).join("");
  const native = resultOf(await d.t.syn.call("embed.batch", { texts: [prefix, "short"] }));
  assert.equal(native.real_token_counts[0], 8);
  assert.deepEqual(cut.embeddings, native.vectors.map((v: { vector: number[] }) => v.vector));
  // The legacy endpoint honours it the same way.
  const legacy = await d.ollama.embeddings({ model: MODEL, prompt: TEXT, options: { num_ctx: 8 } });
  assert.deepEqual(legacy.embedding, cut.embeddings[0]);
  // truncate: false refuses an input over num_ctx, naming it and the option.
  await assert.rejects(
    d.ollama.embed({
      model: MODEL,
      input: ["short", TEXT],
      truncate: false,
      options: { num_ctx: 8 },
    }),
    // deno-lint-ignore no-explicit-any
    (err: any) => err.status_code === 422 && /options\.num_ctx/.test(err.message),
  );
  const refused = await d.post("/api/embed", {
    model: MODEL,
    input: ["short", TEXT],
    truncate: false,
    options: { num_ctx: 8 },
  });
  assert.equal(refused.status, 422);
  assert.equal(refused.body.code, "sequence_too_long");
  assert.equal(refused.body.field, "input[1]");
  // Without num_ctx the same call is served: the cap was the option's.
  const served = await d.post("/api/embed", {
    model: MODEL,
    input: ["short", TEXT],
    truncate: false,
  });
  assert.equal(served.status, 200);
});

Deno.test("options.num_ctx at or above the model's limit changes nothing; other options are named, never honoured silently", async () => {
  await using d = await door();
  const plain = await d.post("/api/embed", { model: MODEL, input: [TEXT, LONG] });
  assert.equal(plain.status, 200);
  assert.equal(plain.body.synapse.truncation_disclosures[1].effective_tokens, 512);
  for (const numCtx of [512, 2048]) {
    const same = await d.post("/api/embed", {
      model: MODEL,
      input: [TEXT, LONG],
      options: { num_ctx: numCtx, temperature: 0.7, num_thread: 4, num_gpu: 1 },
    });
    assert.equal(same.status, 200);
    assert.deepEqual(same.body.embeddings, plain.body.embeddings);
    assert.deepEqual(
      same.body.synapse.truncation_disclosures,
      plain.body.synapse.truncation_disclosures,
    );
    assert.deepEqual(same.body.synapse.ignored_options, ["temperature", "num_thread", "num_gpu"]);
    assert.equal(same.body.synapse.ignored_fields, undefined);
  }
  // A num_ctx that is not a positive integer is refused by name.
  for (const bad of [0, -1, 1.5, "8"]) {
    const r = await d.post("/api/embed", { model: MODEL, input: "x", options: { num_ctx: bad } });
    assert.equal(r.status, 400, JSON.stringify(bad));
    assert.equal(r.body.field, "options.num_ctx");
    assert.match(r.body.error, /num_ctx must be a positive integer/);
  }
});
