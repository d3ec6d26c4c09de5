/**
 * Config `model_aliases` through the real doors (issue 21 item 5): the names clients default to
 * (`text-embedding-3-small`, `gpt-4o-mini`, …) are served by the models they map to, and every
 * answer echoes the name sent (`model`) and names the model that served it (`synapse.model_id`,
 * the native envelope's `model_id` beside `requested_model`). The official `openai`, `ollama`
 * and `cohere-ai` clients, unchanged. Boot refuses a table that shadows a model id or maps to a
 * model the config does not serve.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { Ollama } from "ollama";
import { CohereClientV2 } from "cohere-ai";
import { serveHttp } from "../../../lib/doors/http/server.ts";
import { nullLog } from "../../../lib/log/log.ts";
import { SynapseError } from "../../../lib/contract/errors.ts";
import { MODELS, preload, resultOf, startSynapse } from "../../_helpers.ts";
import type { TestSynapse } from "../../_helpers.ts";

const GEN = `${MODELS}/synapse-tiny-llama`;

const ALIASES = {
  "text-embedding-3-small": "tiny-embed",
  "text-embedding-ada-002": "tiny-embed",
  "nomic-embed-text": "tiny-embed",
  "rerank-v3.5": "tiny-rerank",
  "gpt-4o-mini": "gen",
};

interface Door extends AsyncDisposable {
  t: TestSynapse;
  base: string;
  openai: OpenAI;
  // deno-lint-ignore no-explicit-any
  post(path: string, body: unknown): Promise<{ status: number; body: any }>;
  // deno-lint-ignore no-explicit-any
  get(path: string): Promise<{ status: number; body: any }>;
}

async function door(generate = false): Promise<Door> {
  const t = await startSynapse({
    preload_models: [
      preload(`${MODELS}/synapse-tiny-embed`, "tiny-embed"),
      preload(`${MODELS}/synapse-tiny-rerank`, "tiny-rerank", { task: "rerank", pooling: "cls" }),
      ...(generate
        ? [{
          engine: "llama",
          model_path: GEN,
          tokenizer_path: `${GEN}/tokenizer.json`,
          task: "generate",
          model_id: "gen",
        }]
        : []),
    ],
    model_aliases: generate ? ALIASES : Object.fromEntries(
      Object.entries(ALIASES).filter(([, target]) => target !== "gen"),
    ),
  }, { log: nullLog });
  const server = serveHttp(t.syn, { log: nullLog });
  const base = `http://127.0.0.1:${server.port}`;
  return {
    t,
    base,
    openai: new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0 }),
    async post(path, body) {
      const res = await fetch(`${base}${path}`, { method: "POST", body: JSON.stringify(body) });
      return { status: res.status, body: await res.json() };
    },
    async get(path) {
      const res = await fetch(`${base}${path}`);
      return { status: res.status, body: await res.json() };
    },
    async [Symbol.asyncDispose]() {
      await server.shutdown();
      await t[Symbol.asyncDispose]();
    },
  };
}

async function bootRefusal(overrides: Record<string, unknown>): Promise<SynapseError> {
  try {
    const t = await startSynapse(overrides, { log: nullLog });
    await t[Symbol.asyncDispose]();
  } catch (err) {
    assert.ok(err instanceof SynapseError, `expected a SynapseError, got ${err}`);
    return err;
  }
  assert.fail(`expected boot to refuse ${JSON.stringify(overrides)}`);
}

Deno.test("boot refuses a model alias that shadows a model id or maps to no served model, naming the key", async () => {
  const shadow = await bootRefusal({
    model_aliases: { "synapse-tiny-embed": "synapse-tiny-rerank" },
  });
  assert.equal(shadow.code, "invalid_request");
  assert.equal(shadow.details?.key, "model_aliases.synapse-tiny-embed");
  assert.equal(shadow.details?.reason, "shadows_model_id");
  assert.match(shadow.message, /never shadows a model id/);
  const catalog = await bootRefusal({
    model_aliases: { "gte-modernbert-base": "synapse-tiny-embed" },
  });
  assert.equal(catalog.details?.reason, "shadows_model_id");
  assert.match(catalog.message, /catalog model 'gte-modernbert-base'/);
  const unknown = await bootRefusal({ model_aliases: { "text-embedding-3-small": "minilm" } });
  assert.equal(unknown.details?.key, "model_aliases.text-embedding-3-small");
  assert.equal(unknown.details?.reason, "unknown_target");
  assert.deepEqual(unknown.details?.served, ["synapse-tiny-embed", "synapse-tiny-rerank"]);
  assert.match(
    unknown.message,
    /maps to 'minilm', which is no configured model \(serving: synapse-tiny-embed, synapse-tiny-rerank\)/,
  );
  // With preload_models, the test models are not served: an alias of one is refused too.
  const off = await bootRefusal({
    preload_models: [preload(`${MODELS}/synapse-tiny-embed`, "tiny-embed")],
    model_aliases: { e: "synapse-tiny-embed" },
  });
  assert.equal(off.details?.reason, "unknown_target");
});

Deno.test("a model alias of a catalog model is accepted at boot and refused, naming both, until the model is pulled", async () => {
  await using t = await startSynapse({ model_aliases: { "gte-base": "gte-modernbert-base" } }, {
    log: nullLog,
  });
  const out = await t.syn.call("embed.query", { text: "hello", model: "gte-base" });
  assert.equal(out.kind, "semantic");
  const error = (out.body.result as {
    error: { code: string; message: string; details: Record<string, unknown> };
  }).error;
  assert.equal(error.code, "model_not_installed");
  assert.equal(error.details.model_alias, "gte-base");
  assert.equal(error.details.catalog_id, "gte-modernbert-base");
  assert.match(error.message, /model 'gte-base' is a model alias of 'gte-modernbert-base'/);
  const list = resultOf(await t.syn.call("models.list", {}));
  assert.deepEqual(list.model_aliases, [
    { model_alias: "gte-base", model_id: "gte-modernbert-base", task: null },
  ]);
});

Deno.test("the official openai client embeds with a client default name: served by its alias target, `model` echoes it", async () => {
  await using d = await door();
  const native = resultOf(
    await d.t.syn.call("embed.batch", { texts: ["hello", "world"], model: "tiny-embed" }),
  );
  const res = await d.openai.embeddings.create({
    model: "text-embedding-3-small",
    input: ["hello", "world"],
  });
  assert.equal(res.model, "text-embedding-3-small");
  // deno-lint-ignore no-explicit-any
  const synapse = (res as any).synapse;
  assert.equal(synapse.model_id, "tiny-embed");
  assert.equal(synapse.fingerprint, native.fingerprint);
  assert.deepEqual(
    res.data.map((e) => e.embedding),
    native.vectors.map((v: { vector: number[] }) => v.vector),
  );
  // The real id still answers as itself.
  const real = await d.openai.embeddings.create({ model: "tiny-embed", input: "hello" });
  assert.equal(real.model, "tiny-embed");
  // deno-lint-ignore no-explicit-any
  assert.equal((real as any).synapse.model_id, "tiny-embed");
  // A name with no entry: 404, listing what is served and the aliases.
  await assert.rejects(
    d.openai.embeddings.create({ model: "text-embedding-3-large", input: "hello" }),
    // deno-lint-ignore no-explicit-any
    (err: any) => {
      assert.equal(err.status, 404);
      assert.equal(err.code, "unknown_model");
      assert.match(err.message, /unknown model 'text-embedding-3-large'/);
      assert.match(err.message, /serving embed: tiny-embed/);
      assert.match(err.message, /model aliases: text-embedding-3-small → tiny-embed/);
      assert.ok(!/rerank-v3\.5/.test(err.message), "only the task's aliases are listed");
      return true;
    },
  );
});

Deno.test("native embed.query over /v1/ops names the served model and the alias requested", async () => {
  await using d = await door();
  const direct = resultOf(
    await d.t.syn.call("embed.query", { text: "hello", model: "tiny-embed" }),
  );
  assert.equal(direct.requested_model, undefined, "no alias, no requested_model");
  const { status, body } = await d.post("/v1/ops/embed.query", {
    text: "hello",
    model: "text-embedding-ada-002",
  });
  assert.equal(status, 200, JSON.stringify(body));
  assert.equal(body.result.model_id, "tiny-embed");
  assert.equal(body.result.requested_model, "text-embedding-ada-002");
  assert.equal(body.result.fingerprint, direct.fingerprint);
  assert.deepEqual(body.result.vectors[0].vector, direct.vectors[0].vector);
  // `model_id` is the same param.
  const byId = resultOf(
    await d.t.syn.call("embed.query", { text: "hello", model_id: "nomic-embed-text" }),
  );
  assert.equal(byId.requested_model, "nomic-embed-text");
  // An alias of a model of another task is refused as that model would be.
  const wrong = await d.t.syn.call("embed.query", { text: "hello", model: "rerank-v3.5" });
  assert.equal(wrong.kind, "semantic");
  // deno-lint-ignore no-explicit-any
  const err = (wrong.body.result as any).error;
  assert.equal(err.code, "invalid_request");
  assert.equal(err.details.model_alias, "rerank-v3.5");
  assert.match(err.message, /it serves rerank/);
  // rerank and tokenize resolve aliases too.
  const rr = resultOf(
    await d.t.syn.call("rerank.score", {
      query: "q",
      candidates: ["a", "b"],
      model: "rerank-v3.5",
    }),
  );
  assert.equal(rr.model_id, "tiny-rerank");
  assert.equal(rr.requested_model, "rerank-v3.5");
  const tok = resultOf(
    await d.t.syn.call("tokenize", { texts: ["hello"], model: "text-embedding-3-small" }),
  );
  assert.equal(tok.model_id, "tiny-embed");
  assert.equal(tok.requested_model, "text-embedding-3-small");
  const det = resultOf(
    await d.t.syn.call("detokenize", { ids: tok.items[0].ids, model: "text-embedding-3-small" }),
  );
  assert.equal(det.requested_model, "text-embedding-3-small");
});

Deno.test("models.list, GET /v1/models and /api/tags list each alias with the model it names", async () => {
  await using d = await door();
  const list = resultOf(await d.t.syn.call("models.list", {}));
  assert.deepEqual(list.model_aliases, [
    { model_alias: "text-embedding-3-small", model_id: "tiny-embed", task: "embed" },
    { model_alias: "text-embedding-ada-002", model_id: "tiny-embed", task: "embed" },
    { model_alias: "nomic-embed-text", model_id: "tiny-embed", task: "embed" },
    { model_alias: "rerank-v3.5", model_id: "tiny-rerank", task: "rerank" },
  ]);
  const models = [];
  for await (const m of d.openai.models.list()) models.push(m);
  assert.deepEqual(models.map((m) => m.id), [
    "tiny-embed",
    "tiny-rerank",
    "text-embedding-3-small",
    "text-embedding-ada-002",
    "nomic-embed-text",
    "rerank-v3.5",
  ]);
  // deno-lint-ignore no-explicit-any
  const alias = models[2] as any;
  assert.equal(alias.synapse.alias_of, "tiny-embed");
  assert.equal(alias.synapse.task, "embed");
  // deno-lint-ignore no-explicit-any
  assert.equal((models[0] as any).synapse.alias_of, undefined);
  const ollama = new Ollama({ host: d.base });
  const tags = await ollama.list();
  assert.deepEqual(tags.models.map((m) => m.name), models.map((m) => m.id));
  // deno-lint-ignore no-explicit-any
  const tag = tags.models[4] as any;
  assert.equal(tag.model, "nomic-embed-text");
  assert.equal(tag.synapse.alias_of, "tiny-embed");
  assert.equal(tag.digest, tags.models[0]!.digest);
  // GET /v1/models/<id> answers an alias's entry as the list has it.
  const one = await d.openai.models.retrieve("text-embedding-3-small");
  assert.deepEqual(one, models[2]);
  await assert.rejects(d.openai.models.retrieve("text-embedding-3-large"), (e: Error) => {
    assert.equal((e as { status?: number }).status, 404);
    assert.match(e.message, /text-embedding-3-large/);
    return true;
  });
});

Deno.test("the official ollama and cohere-ai clients serve an alias and answer the name they sent", async () => {
  await using d = await door();
  const native = resultOf(
    await d.t.syn.call("embed.batch", { texts: ["hi"], model: "tiny-embed" }),
  );
  const ollama = new Ollama({ host: d.base });
  const e = await ollama.embed({ model: "nomic-embed-text", input: ["hi"] });
  assert.equal(e.model, "nomic-embed-text");
  // deno-lint-ignore no-explicit-any
  assert.equal((e as any).synapse.model_id, "tiny-embed");
  assert.deepEqual(e.embeddings, [native.vectors[0].vector]);
  // Ollama's clients send `:latest`: dropped, then the alias is looked up.
  const latest = await ollama.embed({ model: "nomic-embed-text:latest", input: ["hi"] });
  assert.equal(latest.model, "nomic-embed-text");
  assert.deepEqual(latest.embeddings, e.embeddings);
  // /api/show (model.info) describes the alias's model.
  const shown = await ollama.show({ model: "nomic-embed-text:latest" });
  const shownDirect = await ollama.show({ model: "tiny-embed" });
  assert.deepEqual(shown.capabilities, ["embedding"]);
  assert.deepEqual(shown.details, shownDirect.details);
  assert.deepEqual(shown.model_info, shownDirect.model_info);
  const cohere = new CohereClientV2({ token: "unused", environment: d.base });
  const ranked = await cohere.rerank({ model: "rerank-v3.5", query: "q", documents: ["a", "b"] });
  // deno-lint-ignore no-explicit-any
  const raw = ranked as any;
  assert.equal(raw.results.length, 2);
  // TEI's `model`: the alias's model answers, and its normalize is checked (it normalises).
  const tei = await d.post("/embed", { inputs: "hi", model: "text-embedding-3-small" });
  assert.equal(tei.status, 200, JSON.stringify(tei.body));
  assert.deepEqual(tei.body, [native.vectors[0].vector]);
  const teiOff = await d.post("/embed", {
    inputs: "hi",
    model: "text-embedding-3-small",
    normalize: false,
  });
  assert.equal(teiOff.status, 400, JSON.stringify(teiOff.body));
  assert.equal(teiOff.body.field, "normalize");
  assert.match(teiOff.body.error, /model 'tiny-embed' normalises its vectors/);
  const direct = await d.post("/v2/rerank", { model: "rerank-v3.5", query: "q", documents: ["a"] });
  assert.equal(direct.status, 200);
  assert.equal(direct.body.model, "rerank-v3.5");
  assert.equal(direct.body.synapse.model_id, "tiny-rerank");
});

Deno.test("chat and completions with a client default name: `model` echoes it, synapse.model_id serves it", async () => {
  await using d = await door(true);
  const chat = await d.openai.chat.completions.create({
    model: "gpt-4o-mini",
    messages: [{ role: "user", content: "Hello" }],
    max_tokens: 4,
  });
  assert.equal(chat.model, "gpt-4o-mini");
  // deno-lint-ignore no-explicit-any
  assert.equal((chat as any).synapse.model_id, "gen");
  const direct = await d.openai.chat.completions.create({
    model: "gen",
    messages: [{ role: "user", content: "Hello" }],
    max_tokens: 4,
  });
  assert.equal(chat.choices[0]!.message.content, direct.choices[0]!.message.content);
  const stream = await d.openai.completions.create({
    model: "gpt-4o-mini",
    prompt: "Once",
    max_tokens: 4,
    stream: true,
  });
  const seen = new Set<string>();
  for await (const chunk of stream) seen.add(chunk.model);
  assert.deepEqual([...seen], ["gpt-4o-mini"]);
  const native = resultOf(
    await d.t.syn.call("microllm.oneshot", { prompt: "Once", max_tokens: 4, model: "gpt-4o-mini" }),
  );
  assert.equal(native.model_id, "gen");
  assert.equal(native.requested_model, "gpt-4o-mini");
});

Deno.test("a model loaded later under an alias's name is served as itself: a real id wins", async () => {
  await using t = await startSynapse({
    model_aliases: { "text-embedding-3-small": "synapse-tiny-embed" },
  }, { log: nullLog });
  const before = resultOf(
    await t.syn.call("embed.query", { text: "hello", model: "text-embedding-3-small" }),
  );
  assert.equal(before.model_id, "synapse-tiny-embed");
  assert.equal(before.requested_model, "text-embedding-3-small");
  const job = resultOf(
    await t.syn.call("model.load", {
      path: `${MODELS}/synapse-tiny-embed`,
      model_id: "text-embedding-3-small",
    }),
  );
  const done = await t.syn.loads.settled(job.job_id);
  assert.equal(done.state, "ready", JSON.stringify(done));
  const after = resultOf(
    await t.syn.call("embed.query", { text: "hello", model: "text-embedding-3-small" }),
  );
  assert.equal(after.model_id, "text-embedding-3-small");
  assert.equal(after.requested_model, undefined);
  const list = resultOf(await t.syn.call("models.list", {}));
  assert.deepEqual(list.model_aliases, []);
});
