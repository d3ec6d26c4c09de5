/**
 * `microllm.oneshot` through the native door (`POST /v1/ops/microllm.oneshot`) with the params
 * the OpenAI completions doors map their requests onto: `messages` (the chat template),
 * `response_format` (JSON Schema compiled to a grammar), `stop` and `max_tokens` (absent with
 * messages: `microllm_max_tokens`), with the same answers as the doors and the prompt-and-grammar
 * form of the operation. `onStart` and `onText` (the call options a streaming door passes) are
 * checked in process.
 */
import assert from "node:assert/strict";
import { loadConfig } from "../../../lib/config/loader.ts";
import { compileJsonSchema } from "../../../lib/grammar/json_schema_gbnf.ts";
import { serveHttp } from "../../../lib/doors/http/server.ts";
import { nullLog } from "../../../lib/log/log.ts";
import type { LogSink } from "../../../lib/log/log.ts";
import type { GenerationStart } from "../../../lib/ops/context.ts";
import { fallbackPrompt } from "../../../lib/ops/_chat_template.ts";
import { createSynapse } from "../../../lib/synapse.ts";
import type { Synapse } from "../../../lib/synapse.ts";
import { MODELS, resultOf } from "../../_helpers.ts";
import { ggufWithChatTemplate } from "../../_gguf_chat_template.ts";

const GEN = `${MODELS}/synapse-tiny-llama`;
/** The instance's `microllm_max_tokens`: what a call with messages and no max_tokens gets. */
const LIMIT = 40;

function genEntry(modelId: string, modelPath = GEN) {
  return {
    engine: "llama",
    model_path: modelPath,
    tokenizer_path: `${GEN}/tokenizer.json`,
    task: "generate",
    model_id: modelId,
  };
}

/** The same llama2-style template as tests/doors/http/completions_test.ts. */
const TEMPLATE = "{% if messages[0]['role'] == 'assistant' %}" +
  "{{ raise_exception('Conversation must start with a system or user message') }}{% endif %}" +
  "{{ bos_token }}{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}" +
  "{% if add_generation_prompt %}[assistant]{% endif %}";

interface Door extends AsyncDisposable {
  syn: Synapse;
  /** POSTs JSON to a path; the status and the parsed body. */
  // deno-lint-ignore no-explicit-any
  post(path: string, body: unknown): Promise<{ status: number; body: any; headers: Headers }>;
}

async function door(overrides: Record<string, unknown>, httpLog: LogSink = nullLog): Promise<Door> {
  const dir = await Deno.makeTempDir({ prefix: "synapse-microllm-native-" });
  await ggufWithChatTemplate(`${GEN}/model.gguf`, `${dir}/chat.gguf`, TEMPLATE);
  const env = {
    XDG_DATA_HOME: `${dir}/data`,
    XDG_CONFIG_HOME: `${dir}/config`,
    HOME: dir,
    SYNAPSE_CONFIG_JSON: JSON.stringify({
      certification: "warn",
      preload_models: [genEntry("gen"), genEntry("chat", `${dir}/chat.gguf`)],
      microllm_max_tokens: LIMIT,
      inline: { deadline_ms: 600_000 },
      ...overrides,
    }),
  };
  const { config } = loadConfig({ env, cwd: dir });
  const syn = await createSynapse({ config, env, log: nullLog });
  const server = serveHttp(syn, { log: httpLog });
  const base = `http://127.0.0.1:${server.port}`;
  return {
    syn,
    async post(path, body) {
      const res = await fetch(`${base}${path}`, { method: "POST", body: JSON.stringify(body) });
      return { status: res.status, body: await res.json(), headers: res.headers };
    },
    async [Symbol.asyncDispose]() {
      await server.shutdown();
      await syn.dispose();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

const OP = "/v1/ops/microllm.oneshot";
const MESSAGES = [{ role: "system", content: "Be brief" }, { role: "user", content: "hi" }];
const SCHEMA = {
  type: "object",
  properties: { ok: { type: "boolean" } },
  required: ["ok"],
  additionalProperties: false,
};

Deno.test("microllm.oneshot over POST /v1/ops takes messages, response_format and stop as the completions doors send them", async (t) => {
  const line = Promise.withResolvers<Record<string, unknown>>();
  await using d = await door({ grammar_enabled: true }, (_level, _target, message, fields) => {
    if (message === "request" && fields?.path === OP) line.resolve({ ...fields });
  });

  await t.step(
    "messages: the model's chat template renders them, as the chat door does",
    async () => {
      const r = await d.post(OP, { model: "chat", messages: MESSAGES, max_tokens: 8 });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      const res = r.body.result;
      assert.equal(res.chat_template, "gguf");
      assert.equal(res.chat_template_reason, undefined);
      const prompt = "[system] Be brief\n[user] hi\n[assistant]";
      const byPrompt = resultOf(
        await d.syn.call("microllm.oneshot", { model: "chat", prompt, max_tokens: 8 }),
      );
      assert.equal(res.text, byPrompt.text);
      assert.equal(res.n_prompt, byPrompt.n_prompt);
      assert.equal(res.chat_template, "gguf");
      const chat = await d.post("/v1/chat/completions", {
        model: "chat",
        messages: MESSAGES,
        max_tokens: 8,
      });
      assert.equal(chat.status, 200, JSON.stringify(chat.body));
      assert.equal(chat.body.choices[0].message.content, res.text);
      assert.equal(chat.body.usage.prompt_tokens, res.n_prompt);
      assert.equal(chat.headers.get("x-synapse-chat-template"), "gguf");
      // The request log line counts a generation from messages as one item.
      const fields = await line.promise;
      assert.equal(fields.op, "microllm.oneshot");
      assert.equal(fields.model, "chat");
      assert.equal(fields.items, 1);
      assert.equal(fields.tokens, res.n_prompt + res.n_gen);
    },
  );

  await t.step("messages on a model without a template: the fallback, and why", async () => {
    const r = await d.post(OP, { model: "gen", messages: MESSAGES, max_tokens: 6 });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(r.body.result.chat_template, "fallback");
    assert.equal(r.body.result.chat_template_reason, "no_chat_template");
    const byPrompt = resultOf(
      await d.syn.call("microllm.oneshot", {
        model: "gen",
        prompt: fallbackPrompt(MESSAGES),
        max_tokens: 6,
      }),
    );
    assert.equal(r.body.result.text, byPrompt.text);
    assert.equal(r.body.result.n_prompt, byPrompt.n_prompt);
    // A prompt call says nothing about a template.
    assert.equal(byPrompt.chat_template, undefined);
  });

  await t.step(
    "messages without max_tokens: microllm_max_tokens bounds the generation",
    async () => {
      const r = await d.post(OP, { model: "gen", messages: [{ role: "user", content: "Once" }] });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      // The fixture never stops by itself.
      assert.equal(r.body.result.finish_reason, "max_tokens");
      assert.equal(r.body.result.n_gen, LIMIT);
    },
  );

  await t.step(
    "an assistant's content null is empty content; on another role it is refused",
    async () => {
      const ok = await d.post(OP, {
        model: "gen",
        messages: [{ role: "user", content: "hi" }, { role: "assistant", content: null }, {
          role: "user",
          content: "again",
        }],
        max_tokens: 2,
      });
      assert.equal(ok.status, 200, JSON.stringify(ok.body));
      const refused = await d.post(OP, {
        model: "gen",
        messages: [{ role: "user", content: null }],
        max_tokens: 2,
      });
      assert.equal(refused.status, 400);
      assert.equal(refused.body.result.error.code, "invalid_request");
      assert.equal(refused.body.result.error.details.field, "messages.0.content");
      assert.equal(refused.body.result.error.details.reason, "content_required");
    },
  );

  await t.step(
    "response_format json_schema: the grammar's text, as the same grammar gives",
    async () => {
      const r = await d.post(OP, {
        model: "gen",
        prompt: "A JSON record:",
        max_tokens: LIMIT,
        response_format: { type: "json_schema", json_schema: { name: "rec", schema: SCHEMA } },
      });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      const res = r.body.result;
      assert.equal(res.finish_reason, "grammar_complete", res.text);
      assert.equal(typeof JSON.parse(res.text).ok, "boolean");
      const grammar = compileJsonSchema(SCHEMA, "schema").gbnf;
      const byGrammar = resultOf(
        await d.syn.call("microllm.oneshot", {
          model: "gen",
          prompt: "A JSON record:",
          max_tokens: LIMIT,
          grammar,
        }),
      );
      assert.equal(res.text, byGrammar.text);
      const object = await d.post(OP, {
        model: "gen",
        prompt: "A JSON object:",
        max_tokens: LIMIT,
        response_format: { type: "json_object" },
      });
      assert.equal(object.status, 200, JSON.stringify(object.body));
      if (object.body.result.finish_reason === "grammar_complete") {
        const value = JSON.parse(object.body.result.text);
        assert.equal(typeof value, "object");
      } else assert.equal(object.body.result.finish_reason, "max_tokens");
      // `text` constrains nothing: the same as no response_format.
      const text = await d.post(OP, {
        model: "gen",
        prompt: "Hello",
        max_tokens: 4,
        response_format: { type: "text" },
      });
      const plain = resultOf(
        await d.syn.call("microllm.oneshot", { model: "gen", prompt: "Hello", max_tokens: 4 }),
      );
      assert.equal(text.body.result.text, plain.text);
    },
  );

  await t.step(
    "a bound beyond the safe integers is read as none, and said in schema_notes",
    async () => {
      const r = await d.post(OP, {
        model: "gen",
        prompt: "A number:",
        max_tokens: LIMIT,
        response_format: {
          type: "json_schema",
          json_schema: {
            name: "n",
            schema: { type: "integer", minimum: 0, maximum: Number.MAX_SAFE_INTEGER },
          },
        },
      });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      const notes = r.body.result.schema_notes;
      assert.equal(notes.length, 1);
      assert.equal(notes[0].keyword, "maximum");
      assert.equal(notes[0].reason, "beyond_safe_integer");
      assert.equal(notes[0].field, "response_format.json_schema.schema.maximum");
    },
  );

  await t.step("stop with messages: the text ends before the stop string", async () => {
    const whole = resultOf(
      await d.syn.call("microllm.oneshot", { model: "gen", messages: MESSAGES, max_tokens: 16 }),
    );
    const stop = whole.text.trim().slice(0, 2);
    assert.ok(stop.length > 0, whole.text);
    const r = await d.post(OP, { model: "gen", messages: MESSAGES, max_tokens: 16, stop: [stop] });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(r.body.result.finish_reason, "stop_string");
    assert.equal(r.body.result.stop_matched, stop);
    assert.equal(r.body.result.text, whole.text.slice(0, whole.text.indexOf(stop)));
  });

  await t.step("refusals name the param, before anything is generated", async () => {
    const refused = async (params: Record<string, unknown>) => {
      const r = await d.post(OP, { model: "gen", ...params });
      assert.ok(r.status >= 400, JSON.stringify(r.body));
      return r.body.result?.error ?? r.body;
    };
    const rf = { type: "json_object" };
    let e = await refused({ prompt: "x", max_tokens: 2, response_format: rf, stop: ["}"] });
    assert.equal(e.code, "invalid_request");
    assert.equal(e.details.field, "stop");
    e = await refused({ prompt: "x", max_tokens: 2, response_format: rf, grammar: 'root ::= "a"' });
    assert.equal(e.details.field, "response_format");
    e = await refused({
      prompt: "x",
      max_tokens: 2,
      response_format: {
        type: "json_schema",
        json_schema: { name: "s", schema: { type: "string", format: "date-time" } },
      },
    });
    // A schema the compiler refuses is a channel error ({code, message}) naming the keyword.
    assert.equal(e.code, "invalid_request");
    assert.match(e.message, /'format' .* is not supported/);
    e = await refused({ messages: MESSAGES, max_tokens: LIMIT + 1 });
    assert.equal(e.details.field, "max_tokens");
    assert.equal(e.details.reason, "max_tokens_above_limit");
    assert.equal(e.details.limit, LIMIT);
    assert.match(e.message, new RegExp(`exceeds this service's microllm_max_tokens ${LIMIT}`));
    // Malformed params are channel errors ({code, message}), naming the field in the message.
    e = await refused({ prompt: "x", messages: MESSAGES, max_tokens: 2 });
    assert.equal(e.code, "invalid_request");
    assert.match(e.message, /unknown field 'prompt'/);
    e = await refused({ messages: [{ role: "tool", content: "x" }], max_tokens: 2 });
    assert.equal(e.code, "invalid_request");
    assert.match(e.message, /messages\.0\.role/);
    e = await refused({ messages: [], max_tokens: 2 });
    assert.match(e.message, /messages/);
    // The template's own refusal.
    e = await refused({ model: "chat", messages: [{ role: "assistant", content: "x" }] });
    assert.equal(e.code, "invalid_request");
    assert.match(e.message, /must start with a system or user message/);
  });

  await t.step(
    "onStart tells the model before the first onText; the pieces join to the text",
    async () => {
      const events: string[] = [];
      let start: GenerationStart | undefined;
      const pieces: string[] = [];
      const outcome = await d.syn.call("microllm.oneshot", {
        model: "chat",
        messages: MESSAGES,
        max_tokens: 12,
      }, {
        onStart: (s) => {
          events.push("start");
          start = s;
        },
        onText: (text) => {
          events.push("text");
          pieces.push(text);
        },
      });
      const res = resultOf(outcome);
      assert.equal(events[0], "start");
      assert.equal(events.filter((e) => e === "start").length, 1);
      assert.deepEqual(start, {
        model_id: "chat",
        fingerprint: res.fingerprint,
        chat_template: "gguf",
      });
      assert.equal(pieces.join(""), res.text);
    },
  );
});

Deno.test("microllm.oneshot: a JSON response_format while grammar_enabled is false is grammar_disabled naming it", async () => {
  await using d = await door({});
  const r = await d.post(OP, {
    model: "gen",
    messages: MESSAGES,
    response_format: { type: "json_object" },
  });
  assert.equal(r.status, 403);
  assert.equal(r.body.result.error.code, "grammar_disabled");
  assert.equal(r.body.result.error.details.field, "response_format");
});
