/**
 * A task no model serves: the refusal says why (the test models are off because preload_models
 * lists models, or the test models do not serve the task) and which preload entry to add;
 * `models.list` says which model serves each task.
 */
import assert from "node:assert/strict";
import { MODELS, preload, resultOf, semanticError, startSynapse } from "../_helpers.ts";

Deno.test("with only a rerank model configured, embed is refused saying the test models are off and what to add", async () => {
  await using t = await startSynapse({
    preload_models: [preload(`${MODELS}/synapse-tiny-rerank`, "rr", { task: "rerank" })],
  });
  await t.syn.modelsSettled;
  const e = semanticError(await t.syn.call("embed.query", { text: "hello" }));
  assert.equal(e.code, "unknown_model");
  assert.equal(e.class, "permanent");
  assert.equal(
    e.message,
    "Cannot serve embed: no embed model is loaded (preload_models lists rr (rerank), and the " +
      "test models are off whenever preload_models lists a model); load one now with " +
      "'ck-synapse pull gte-modernbert-base' (more: 'ck-synapse models catalog --task embed'), " +
      "or add an embed model to " +
      'preload_models in the config, e.g. {"engine":"ort","task":"embed","model_path":' +
      '"/models/all-MiniLM-L6-v2","tokenizer_path":"/models/all-MiniLM-L6-v2/tokenizer.json"}',
  );
  assert.deepEqual(e.details, {
    model_id: null,
    task: "embed",
    serving: [{ model_id: "rr", task: "rerank" }],
    test_models: false,
    example: {
      engine: "ort",
      task: "embed",
      model_path: "/models/all-MiniLM-L6-v2",
      tokenizer_path: "/models/all-MiniLM-L6-v2/tokenizer.json",
    },
    catalog: [
      "gte-modernbert-base",
      "all-minilm-l6-v2",
      "bge-small-en-v1.5",
      "qwen3-embedding-0.6b",
    ],
  });
  // The same refusal on the batch path, and from microllm.
  const b = semanticError(await t.syn.call("embed.batch", { texts: ["a"] }));
  assert.equal(b.code, "unknown_model");
  assert.match(b.message, /test models are off/);
  const g = semanticError(await t.syn.call("microllm.oneshot", { prompt: "hi", max_tokens: 1 }));
  assert.equal(g.details.example.engine, "llama");
  // A named model that does not exist keeps its own refusal.
  const named = semanticError(await t.syn.call("embed.query", { text: "x", model: "nope" }));
  assert.equal(named.code, "unknown_model");
  assert.match(named.message, /unknown model 'nope'/);
  // A catalog model that is not installed says how to get it.
  const notInstalled = semanticError(
    await t.syn.call("embed.query", { text: "x", model: "all-minilm-l6-v2" }),
  );
  assert.equal(notInstalled.code, "model_not_installed");
  assert.deepEqual(notInstalled.details, {
    catalog_id: "all-minilm-l6-v2",
    lane_id: "all-minilm-l6-v2-ort",
    download_op: "models.download",
    download_job_id: null,
  });
  assert.match(notInstalled.message, /ck-synapse pull all-minilm-l6-v2/);

  const list = resultOf(await t.syn.call("models.list", {}));
  assert.deepEqual(list.served_by, { embed: null, rerank: "rr", generate: null });
  assert.equal(list.default_test_models, false);
});

Deno.test("with no model configured, generate is refused saying the test models serve embed and rerank only", async () => {
  await using t = await startSynapse();
  await t.syn.modelsSettled;
  const e = semanticError(
    await t.syn.call("microllm.oneshot", { prompt: "hi", max_tokens: 1 }),
  );
  assert.equal(e.code, "unknown_model");
  assert.match(
    e.message,
    /^Cannot serve generate: no generate model is loaded \(the generated test models serve embed and rerank only\); load one now with 'ck-synapse pull qwen2\.5-0\.5b-instruct' \(more: 'ck-synapse models catalog --task generate'\), or add a generate model to preload_models in the config, e\.g\. \{"engine":"llama","task":"generate",/,
  );
  assert.equal(e.details.test_models, true);
  const list = resultOf(await t.syn.call("models.list", {}));
  assert.deepEqual(list.served_by, {
    embed: "synapse-tiny-embed",
    rerank: "synapse-tiny-rerank",
    generate: null,
  });
  assert.equal(list.default_test_models, true);
});
