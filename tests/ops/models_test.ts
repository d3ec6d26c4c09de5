import assert from "node:assert/strict";
import { MINILM, MODELS, resultOf, semanticError, startSynapse } from "../_helpers.ts";

Deno.test("preload_models loads a model directory without config.json, and a bare model.onnx path", async () => {
  const dir = await Deno.makeTempDir();
  for (const f of ["model.onnx", "tokenizer.json"]) {
    await Deno.copyFile(`${MODELS}/synapse-tiny-embed/${f}`, `${dir}/${f}`);
  }
  await using t = await startSynapse({
    preload_models: [
      { engine: "onnx", model_path: dir, tokenizer_path: `${dir}/tokenizer.json`, model_id: "dir" },
      {
        engine: "ort",
        model_path: `${dir}/model.onnx`,
        tokenizer_path: `${dir}/tokenizer.json`,
        model_id: "file",
      },
    ],
  });
  const list = resultOf(await t.syn.call("models.list", {}));
  assert.deepEqual(list.models.map((m: { state: string }) => m.state), ["ready", "ready"]);
  // Same bytes, same profile: one fingerprint. No config.json, so not labelled a test model.
  assert.equal(list.models[0].fingerprints[0], list.models[1].fingerprints[0]);
  assert.equal(list.models[0].test_model, undefined);
  resultOf(await t.syn.call("embed.query", { model: "dir", text: "from a directory" }));
  await Deno.remove(dir, { recursive: true });
});

Deno.test("preload_models: a max_tokens beyond the model's positions, or below specials + 1, fails the load", async () => {
  const entry = (id: string, max: number) => ({
    engine: "ort",
    model_path: MINILM,
    tokenizer_path: `${MINILM}/tokenizer.json`,
    model_id: id,
    max_tokens: max,
  });
  await using t = await startSynapse({ preload_models: [entry("big", 100000), entry("tiny", 2)] });
  const list = resultOf(await t.syn.call("models.list", {}));
  for (const m of list.models) {
    assert.equal(m.state, "failed");
    assert.equal(m.error.code, "artifact_invalid");
    assert.match(m.error.message, /max_tokens/);
  }
  const e = semanticError(await t.syn.call("embed.query", { model: "big", text: "x" }));
  assert.equal(e.code, "artifact_invalid");
});

Deno.test("preload_models: the default max_tokens (512) is capped at the model's own positions, never a failed load", async () => {
  // A BERT with 128 positions (config.json says so); no max_tokens in its entry.
  const dir = await Deno.makeTempDir();
  for (const f of ["model.onnx", "tokenizer.json"]) {
    await Deno.copyFile(`${MODELS}/synapse-tiny-embed/${f}`, `${dir}/${f}`);
  }
  const config = JSON.parse(await Deno.readTextFile(`${MODELS}/synapse-tiny-embed/config.json`));
  config.max_position_embeddings = 128;
  delete config.synapse_max_tokens;
  await Deno.writeTextFile(`${dir}/config.json`, JSON.stringify(config));
  const entry = (id: string, extra: Record<string, unknown> = {}) => ({
    engine: "ort",
    model_path: dir,
    tokenizer_path: `${dir}/tokenizer.json`,
    model_id: id,
    ...extra,
  });
  await using t = await startSynapse({
    preload_models: [
      entry("short"),
      entry("asked", { max_tokens: 256 }),
      // MiniLM-shaped: 512 positions, so the default 512 applies as is.
      { ...entry("minilm"), model_path: MINILM, tokenizer_path: `${MINILM}/tokenizer.json` },
    ],
  });
  const list = resultOf(await t.syn.call("models.list", {}));
  const row = (id: string) => list.models.find((m: { model_id: string }) => m.model_id === id);
  assert.equal(row("short").state, "ready");
  assert.equal(row("short").max_tokens, 128);
  assert.equal(row("minilm").max_tokens, 512);
  // Asking for more than the model has is still refused, not clamped.
  assert.equal(row("asked").state, "failed");
  assert.equal(row("asked").error.code, "artifact_invalid");
  const e = semanticError(
    await t.syn.call("embed.query", { model: "short", text: "word ".repeat(200) }),
  );
  assert.equal(e.code, "sequence_too_long");
  assert.equal(e.details.max_tokens, 128);
  await Deno.remove(dir, { recursive: true });
});

Deno.test("preload_models: a cross-encoder loaded as an embedder fails with artifact_invalid", async () => {
  const d = `${MODELS}/synapse-tiny-rerank`;
  await using t = await startSynapse({
    preload_models: [{
      engine: "ort",
      model_path: d,
      tokenizer_path: `${d}/tokenizer.json`,
      model_id: "wrong",
    }],
  });
  const e = semanticError(await t.syn.call("embed.query", { model: "wrong", text: "hi" }));
  assert.equal(e.code, "artifact_invalid");
  assert.match(e.message, /check the preload entry's task/);
});

Deno.test("preload_models: a model.onnx onnxruntime cannot parse fails as artifact_invalid naming the model and file", async () => {
  const dir = await Deno.makeTempDir();
  await Deno.writeFile(`${dir}/model.onnx`, crypto.getRandomValues(new Uint8Array(4096)));
  await Deno.copyFile(`${MODELS}/synapse-tiny-embed/tokenizer.json`, `${dir}/tokenizer.json`);
  await using t = await startSynapse({
    preload_models: [{
      engine: "ort",
      model_path: dir,
      tokenizer_path: `${dir}/tokenizer.json`,
      model_id: "garbage",
    }],
  });
  const m = resultOf(await t.syn.call("models.list", {})).models[0];
  assert.equal(m.state, "failed");
  assert.equal(m.error.code, "artifact_invalid");
  assert.match(
    m.error.message,
    /^Cannot load model 'garbage': onnxruntime cannot open '.*model\.onnx': /,
  );
  assert.equal(m.error.details.model_id, "garbage");
  assert.equal(m.error.details.reason, "onnx_load_failed");
  await Deno.remove(dir, { recursive: true });
});
