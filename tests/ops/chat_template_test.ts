/**
 * Chat messages → prompt: a ChatML template from GGUF metadata rendered by @huggingface/jinja,
 * the announced fallback for a model without one or with one the renderer cannot parse, and a
 * template's own refusal as invalid_request naming messages.
 */
import assert from "node:assert/strict";
import { SynapseError } from "../../lib/contract/errors.ts";
import type { ReadyModel } from "../../lib/models/model.ts";
import { renderChat } from "../../lib/ops/_chat_template.ts";

/** A model stand-in: only its GGUF facts matter (its tokenizer adds no special tokens). */
function model(chatTemplate?: string): Pick<ReadyModel, "gguf" | "tokenizer" | "modelId"> {
  return {
    modelId: "m",
    tokenizer: { singleSpecialTokens: 0 } as ReadyModel["tokenizer"],
    gguf: {
      architecture: "qwen3",
      contextLength: 512,
      embeddingLength: 8,
      pooling: "last",
      quant: "f16",
      dtype: "f16",
      tokens: [],
      ...(chatTemplate === undefined ? {} : { chatTemplate }),
      bosToken: "<|endoftext|>",
      eosToken: "<|im_end|>",
    },
  };
}

const CHATML = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + " +
  "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}" +
  "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

const MESSAGES = [
  { role: "system", content: "Be brief" },
  { role: "user", content: "Hi" },
];

Deno.test("renderChat() renders the GGUF's ChatML template with the generation prompt", () => {
  const r = renderChat(model(CHATML), MESSAGES);
  assert.equal(r.template, "gguf");
  assert.equal(r.reason, undefined);
  assert.equal(
    r.prompt,
    "<|im_start|>system\nBe brief<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
  );
});

Deno.test("renderChat() falls back to role: content lines, and says why", () => {
  const none = renderChat(model(), MESSAGES);
  assert.deepEqual(none, {
    prompt: "system: Be brief\nuser: Hi\nassistant:",
    template: "fallback",
    reason: "no_chat_template",
  });
  const broken = renderChat(model("{% for m in messages %}{{ m.content "), MESSAGES);
  assert.equal(broken.template, "fallback");
  assert.match(broken.reason!, /^template_unparsable: /);
  assert.equal(broken.prompt, none.prompt);
});

Deno.test("renderChat() answers a template's raise_exception as invalid_request naming messages", () => {
  const strict =
    "{% if messages[0]['role'] != 'user' %}{{ raise_exception('first must be user') }}" +
    "{% endif %}{{ messages[0]['content'] }}";
  assert.throws(() => renderChat(model(strict), MESSAGES), (e: unknown) => {
    assert.ok(e instanceof SynapseError);
    assert.equal(e.code, "invalid_request");
    assert.equal(e.details?.field, "messages");
    assert.match(e.message, /first must be user/);
    return true;
  });
  assert.equal(renderChat(model(strict), MESSAGES.slice(1)).prompt, "Hi");
});
