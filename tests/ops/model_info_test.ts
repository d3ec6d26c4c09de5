/**
 * `model.info` (what a model is, from its file: GGUF metadata, chat template, parameter count,
 * tensors with `verbose`; an ONNX model's architecture) and `microllm.oneshot`'s
 * `max_context_tokens` (a smaller context refused by name, never a cut; at or above the model's
 * own context nothing changes).
 */
import assert from "node:assert/strict";
import { INFO_MAX_ARRAY } from "../../lib/ops/model_info.ts";
import { MODELS, preload, resultOf, semanticError, startSynapse } from "../_helpers.ts";

const GEN = `${MODELS}/synapse-tiny-llama`;

function genEntry(modelId: string) {
  return {
    engine: "llama",
    model_path: `${GEN}/model.gguf`,
    tokenizer_path: `${GEN}/tokenizer.json`,
    task: "generate",
    model_id: modelId,
  };
}

Deno.test("model.info describes GGUF and ONNX models from their files", async (t) => {
  await using s = await startSynapse({
    preload_models: [genEntry("gen"), preload(`${MODELS}/synapse-tiny-embed`, "embed")],
  });
  const { syn } = s;

  await t.step("a GGUF model: metadata, parameter count, context, no chat template", async () => {
    const info = resultOf(await syn.call("model.info", { model_id: "gen" }));
    assert.equal(info.format, "gguf");
    assert.equal(info.engine, "llama");
    assert.equal(info.task, "generate");
    assert.equal(info.state, "ready");
    assert.match(info.fingerprint, /^[0-9a-f]{64}$/);
    assert.equal(info.architecture, "llama");
    assert.equal(info.metadata["llama.context_length"], 2048);
    assert.equal(info.metadata["general.name"], "synapse-tiny-llama");
    // Long arrays are cut to [] without verbose; the library's own bookkeeping is not a key.
    assert.deepEqual(info.metadata["tokenizer.ggml.tokens"], []);
    assert.equal(info.metadata.kv_count, undefined);
    assert.equal(info.chat_template, undefined);
    assert.equal(info.parameter_count, 4170048);
    assert.equal(info.quant, "f32");
    assert.equal(info.context_tokens, 2048);
    assert.equal(info.artifact_bytes, (await Deno.stat(`${GEN}/model.gguf`)).size);
    assert.equal(info.tensors, undefined);
    assert.equal(info.test_model, true);
    const v = resultOf(await syn.call("model.info", { model_id: "gen", verbose: true }));
    assert.equal(v.metadata["tokenizer.ggml.tokens"].length, 32000);
    assert.ok(v.tensors.length > 0);
    assert.ok(v.tensors.every((x: { type: string }) => /^[A-Z0-9_]+$/.test(x.type)));
    assert.ok(INFO_MAX_ARRAY < 32000);
  });

  await t.step("an ONNX model: its config.json's model_type, no GGUF metadata", async () => {
    const info = resultOf(await syn.call("model.info", { model_id: "embed" }));
    assert.equal(info.format, "onnx");
    assert.equal(info.task, "embed");
    assert.deepEqual(info.metadata, {});
    assert.equal(typeof info.architecture, "string");
    assert.equal(typeof info.dims, "number");
    assert.equal(info.context_tokens, undefined);
  });

  await t.step("with task: resolved as a request of that task, with its refusals", async () => {
    const ok = resultOf(await syn.call("model.info", { model_id: "gen", task: "generate" }));
    assert.equal(ok.model_id, "gen");
    const wrong = await syn.call("model.info", { model_id: "embed", task: "generate" });
    assert.equal(semanticError(wrong).code, "invalid_request");
    const unknown = semanticError(await syn.call("model.info", { model_id: "nope" }));
    assert.equal(unknown.code, "unknown_model");
    assert.deepEqual(unknown.details.known.sort(), ["embed", "gen"]);
    const bad = await syn.call("model.info", { model_id: "gen", extra: 1 });
    assert.equal(bad.kind, "channel");
  });

  await t.step("max_context_tokens: a call that does not fit is refused naming it", async () => {
    const base = { model: "gen", prompt: "Once upon a time", max_tokens: 8 };
    const plain = resultOf(await syn.call("microllm.oneshot", base));
    // At or above the model's context: nothing changes.
    const above = resultOf(
      await syn.call("microllm.oneshot", { ...base, max_context_tokens: 4096 }),
    );
    assert.equal(above.text, plain.text);
    const fits = resultOf(
      await syn.call("microllm.oneshot", {
        ...base,
        max_context_tokens: plain.n_prompt + 8,
      }),
    );
    assert.equal(fits.text, plain.text);
    const e = semanticError(
      await syn.call("microllm.oneshot", { ...base, max_context_tokens: plain.n_prompt + 7 }),
    );
    assert.equal(e.code, "invalid_request");
    assert.equal(e.details.field, "max_context_tokens");
    assert.equal(e.details.model_context, 2048);
    assert.equal(e.details.tokens, plain.n_prompt + 8);
  });
});
