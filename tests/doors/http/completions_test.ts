/**
 * The completions doors with the official `openai` npm client, unchanged: `/v1/completions`
 * (plain, with a JSON schema whose output parses and validates, streaming), `/v1/chat/completions`
 * (the GGUF chat template and the announced fallback, streaming), sampling as the op samples it,
 * refusals by name of what the engine cannot serve, the max_tokens bound, and a client that goes
 * away cancelling the generation. Every answer is checked against `microllm.oneshot` called
 * directly with the same prompt (and grammar).
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { loadConfig } from "../../../lib/config/loader.ts";
import { compileJsonSchema } from "../../../lib/grammar/json_schema_gbnf.ts";
import { serveHttp } from "../../../lib/doors/http/server.ts";
import { nullLog } from "../../../lib/log/log.ts";
import type { LogSink } from "../../../lib/log/log.ts";
import { fallbackPrompt } from "../../../lib/ops/_chat_template.ts";
import { createSynapse } from "../../../lib/synapse.ts";
import type { Synapse } from "../../../lib/synapse.ts";
import { parkedWorker, watchGenerations } from "../../_generation.ts";
import { MODELS, resultOf } from "../../_helpers.ts";
import { ggufWithChatTemplate } from "../../_gguf_chat_template.ts";

const GEN = `${MODELS}/synapse-tiny-llama`;

function genEntry(modelId: string, modelPath = GEN) {
  return {
    engine: "llama",
    model_path: modelPath,
    tokenizer_path: `${GEN}/tokenizer.json`,
    task: "generate",
    model_id: modelId,
  };
}

interface Door extends AsyncDisposable {
  syn: Synapse;
  base: string;
  dir: string;
  client: OpenAI;
}

/** A served instance; `configOf` gives the config overrides (it may write files in `dir`). */
async function door(
  configOf: Record<string, unknown> | ((dir: string) => Promise<Record<string, unknown>>),
  more: { llamaWorkerArgs?: string[]; log?: LogSink; httpLog?: LogSink } = {},
): Promise<Door> {
  const dir = await Deno.makeTempDir({ prefix: "synapse-completions-" });
  const overrides = typeof configOf === "function" ? await configOf(dir) : configOf;
  const env = {
    XDG_DATA_HOME: `${dir}/data`,
    XDG_CONFIG_HOME: `${dir}/config`,
    HOME: dir,
    SYNAPSE_CONFIG_JSON: JSON.stringify({
      certification: "warn",
      preload_models: [genEntry("gen")],
      // No test here is about the deadline: a grammar-constrained answer on a loaded 2-core
      // machine took longer than the 30 s default.
      inline: { deadline_ms: 600_000 },
      ...overrides,
    }),
  };
  const { config } = loadConfig({ env, cwd: dir });
  const syn = await createSynapse({
    config,
    env,
    log: more.log ?? nullLog,
    ...(more.llamaWorkerArgs ? { llamaWorkerArgs: more.llamaWorkerArgs } : {}),
  });
  const server = serveHttp(syn, { log: more.httpLog ?? nullLog });
  const base = `http://127.0.0.1:${server.port}`;
  const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0 });
  return {
    syn,
    base,
    dir,
    client,
    async [Symbol.asyncDispose]() {
      await server.shutdown();
      await syn.dispose();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

/** A llama2-style template that uses `bos_token` and refuses a chat that opens with assistant. */
const TEMPLATE = "{% if messages[0]['role'] == 'assistant' %}" +
  "{{ raise_exception('Conversation must start with a system or user message') }}{% endif %}" +
  "{{ bos_token }}{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}" +
  "{% if add_generation_prompt %}[assistant]{% endif %}";

/**
 * A validator of the schema subset the tests use (type, properties, required,
 * additionalProperties, items, min/maxItems, min/maxLength, enum, const); errors as paths.
 */
// deno-lint-ignore no-explicit-any
function validate(v: unknown, s: any, path = "$"): string[] {
  const errs: string[] = [];
  if (s.const !== undefined && JSON.stringify(v) !== JSON.stringify(s.const)) errs.push(path);
  if (
    s.enum !== undefined && !s.enum.some((e: unknown) => JSON.stringify(e) === JSON.stringify(v))
  ) {
    errs.push(path);
  }
  const types: string[] = s.type === undefined ? [] : [s.type].flat();
  const typeOf = (x: unknown): string[] =>
    x === null
      ? ["null"]
      : Array.isArray(x)
      ? ["array"]
      : typeof x === "number"
      ? Number.isInteger(x) ? ["integer", "number"] : ["number"]
      : [typeof x];
  if (types.length > 0 && !typeOf(v).some((t) => types.includes(t))) return [`${path}: type`];
  if (typeof v === "string") {
    const n = [...v].length;
    if (s.minLength !== undefined && n < s.minLength) errs.push(`${path}: minLength`);
    if (s.maxLength !== undefined && n > s.maxLength) errs.push(`${path}: maxLength`);
  }
  if (Array.isArray(v)) {
    if (s.minItems !== undefined && v.length < s.minItems) errs.push(`${path}: minItems`);
    if (s.maxItems !== undefined && v.length > s.maxItems) errs.push(`${path}: maxItems`);
    if (s.items) v.forEach((x, i) => errs.push(...validate(x, s.items, `${path}[${i}]`)));
  }
  if (typeof v === "object" && v !== null && !Array.isArray(v)) {
    const o = v as Record<string, unknown>;
    for (const r of s.required ?? []) if (!(r in o)) errs.push(`${path}.${r}: required`);
    for (const [k, x] of Object.entries(o)) {
      if (s.properties?.[k]) errs.push(...validate(x, s.properties[k], `${path}.${k}`));
      else if (s.additionalProperties === false) errs.push(`${path}.${k}: additional`);
    }
  }
  return errs;
}

const SCHEMA = {
  type: "object",
  properties: {
    name: { type: "string", minLength: 1, maxLength: 6 },
    count: { type: "integer" },
    ok: { type: "boolean" },
    color: { enum: ["red", "green"] },
    tags: { type: "array", items: { type: "string", maxLength: 3 }, maxItems: 2 },
  },
  required: ["name", "count", "ok", "color"],
  additionalProperties: false,
};

/** An APIError the client threw, with its status and OpenAI error fields. */
async function refusedBy(
  p: Promise<unknown>,
): Promise<{ status: number; code: string; param: string; type: string; message: string }> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIError, String(e));
    return {
      status: e.status!,
      code: String(e.code),
      param: String(e.param),
      type: String(e.type),
      message: e.message,
    };
  }
  assert.fail("the request was not refused");
}

Deno.test("/v1/completions and /v1/chat/completions answer the openai client, as microllm.oneshot does", async (t) => {
  await using d = await door(async (dir) => {
    // A copy of the fixture whose GGUF carries a chat template, served as model `chat`.
    await ggufWithChatTemplate(`${GEN}/model.gguf`, `${dir}/chat.gguf`, TEMPLATE);
    return {
      grammar_enabled: true,
      preload_models: [genEntry("gen"), genEntry("chat", `${dir}/chat.gguf`)],
    };
  });
  const { client, syn } = d;
  const oneshot = async (params: Record<string, unknown>) =>
    resultOf(await syn.call("microllm.oneshot", params));

  await t.step("completions: text, finish_reason, usage, ids and the fingerprint", async () => {
    const c = await client.completions.create({
      model: "gen",
      prompt: "Hello there",
      max_tokens: 8,
    });
    const r = await oneshot({ model: "gen", prompt: "Hello there", max_tokens: 8 });
    assert.equal(c.choices.length, 1);
    assert.equal(c.choices[0]!.text, r.text);
    assert.notEqual(r.text, "");
    assert.equal(c.choices[0]!.finish_reason, "length"); // the fixture never stops by itself
    assert.deepEqual(c.usage, {
      prompt_tokens: r.n_prompt,
      completion_tokens: 8,
      total_tokens: r.n_prompt + 8,
    });
    assert.equal(c.object, "text_completion");
    assert.match(c.id, /^cmpl-[0-9a-f]{32}$/);
    assert.equal(c.model, "gen");
    assert.equal(c.system_fingerprint, syn.registry.resolve("gen", "generate").fingerprint);
    // A prompt given as a list of one string is the same request.
    const list = await client.completions.create({
      model: "gen",
      prompt: ["Hello there"],
      max_tokens: 8,
    });
    assert.equal(list.choices[0]!.text, r.text);
    // In warn mode the uncertified model's answer says so, as the native answer does.
    // deno-lint-ignore no-explicit-any
    const provenance = (c as any).synapse.provenance;
    assert.deepEqual(provenance, r.provenance);
    assert.equal(provenance.certified, false);
  });

  await t.step("completions with a JSON schema: the text parses and validates", async () => {
    const c = await client.completions.create({
      model: "gen",
      prompt: "A JSON record:",
      max_tokens: 96,
      response_format: {
        type: "json_schema",
        json_schema: { name: "rec", schema: SCHEMA, strict: true },
      },
    } as OpenAI.CompletionCreateParamsNonStreaming);
    const text = c.choices[0]!.text;
    assert.equal(c.choices[0]!.finish_reason, "stop", text);
    const value = JSON.parse(text);
    assert.deepEqual(validate(value, SCHEMA), [], text);
    // deno-lint-ignore no-explicit-any
    const synapse = (c as any).synapse;
    assert.equal(synapse.json_complete, true);
    assert.equal(synapse.finish_reason, "grammar_complete");
    // The same grammar through microllm.oneshot gives the same text.
    const grammar = compileJsonSchema(SCHEMA, "schema").gbnf;
    const r = await oneshot({ model: "gen", prompt: "A JSON record:", max_tokens: 96, grammar });
    assert.equal(text, r.text);
  });

  await t.step(
    "a JSON output cut by max_tokens is finish_reason length, and says it is not JSON",
    async () => {
      const c = await client.completions.create({
        model: "gen",
        prompt: "A JSON record:",
        max_tokens: 3,
        response_format: { type: "json_schema", json_schema: { name: "rec", schema: SCHEMA } },
      } as OpenAI.CompletionCreateParamsNonStreaming);
      assert.equal(c.choices[0]!.finish_reason, "length");
      assert.throws(() => JSON.parse(c.choices[0]!.text));
      // deno-lint-ignore no-explicit-any
      const synapse = (c as any).synapse;
      assert.equal(synapse.json_complete, false);
      assert.match(synapse.warning, /not valid JSON/);
    },
  );

  await t.step("json_object: one JSON object", async () => {
    const c = await client.completions.create({
      model: "gen",
      prompt: "JSON:",
      max_tokens: 64,
      response_format: { type: "json_object" },
    } as OpenAI.CompletionCreateParamsNonStreaming);
    assert.equal(c.choices[0]!.finish_reason, "stop", c.choices[0]!.text);
    const v = JSON.parse(c.choices[0]!.text);
    assert.equal(typeof v, "object");
    assert.ok(v !== null && !Array.isArray(v));
  });

  await t.step("stop: the text is cut before the first stop string", async () => {
    const r = await oneshot({ model: "gen", prompt: "Hello there", max_tokens: 8 });
    const cps = [...r.text];
    const stop = cps.slice(4, 6).join("");
    const at = r.text.indexOf(stop);
    assert.ok(at > 0);
    const c = await client.completions.create({
      model: "gen",
      prompt: "Hello there",
      max_tokens: 8,
      stop: [stop, "\u0000never"],
    });
    assert.equal(c.choices[0]!.text, r.text.slice(0, at));
    assert.equal(c.choices[0]!.finish_reason, "stop");
  });

  await t.step("chat without a GGUF template: the fallback, announced", async () => {
    const messages = [{ role: "system" as const, content: "Be brief" }, {
      role: "user" as const,
      content: "hi",
    }];
    const raw = await client.chat.completions.create({
      model: "gen",
      messages,
      max_completion_tokens: 8,
    }).asResponse();
    assert.equal(raw.headers.get("x-synapse-chat-template"), "fallback");
    const c = await raw.json();
    const r = await oneshot({ model: "gen", prompt: fallbackPrompt(messages), max_tokens: 8 });
    assert.equal(c.choices[0].message.role, "assistant");
    assert.equal(c.choices[0].message.content, r.text);
    assert.equal(c.choices[0].finish_reason, "length");
    assert.equal(c.object, "chat.completion");
    assert.match(c.id, /^chatcmpl-/);
    assert.equal(c.synapse.chat_template, "fallback");
    assert.equal(c.synapse.chat_template_reason, "no_chat_template");
    assert.equal(c.usage.prompt_tokens, r.n_prompt);
  });

  await t.step("chat with the GGUF's chat template: rendered by it, BOS not doubled", async () => {
    const messages = [{ role: "system" as const, content: "Be brief" }, {
      role: "user" as const,
      content: "hi",
    }];
    const raw = await client.chat.completions.create({ model: "chat", messages, max_tokens: 8 })
      .asResponse();
    assert.equal(raw.headers.get("x-synapse-chat-template"), "gguf");
    const c = await raw.json();
    const prompt = "[system] Be brief\n[user] hi\n[assistant]";
    const r = await oneshot({ model: "chat", prompt, max_tokens: 8 });
    assert.equal(c.choices[0].message.content, r.text);
    assert.equal(c.usage.prompt_tokens, r.n_prompt);
    assert.equal(c.synapse.chat_template, "gguf");
    // The template's own refusal names messages.
    const refused = await refusedBy(
      client.chat.completions.create({
        model: "chat",
        messages: [{ role: "assistant", content: "x" }],
        max_tokens: 4,
      }),
    );
    assert.equal(refused.status, 400);
    assert.equal(refused.param, "messages");
    assert.match(refused.message, /must start with a system or user message/);
  });

  await t.step(
    "chat streaming: chunks add up to the non-streaming answer, then usage",
    async () => {
      const messages = [{ role: "user" as const, content: "Tell me a story" }];
      const whole = await client.chat.completions.create({
        model: "gen",
        messages,
        max_tokens: 24,
      });
      const stream = await client.chat.completions.create({
        model: "gen",
        messages,
        max_tokens: 24,
        stream: true,
        stream_options: { include_usage: true },
      });
      let content = "";
      const finishes: (string | null)[] = [];
      let usage: OpenAI.CompletionUsage | null | undefined;
      let chunks = 0;
      for await (const chunk of stream) {
        chunks++;
        assert.equal(chunk.object, "chat.completion.chunk");
        for (const ch of chunk.choices) {
          content += ch.delta.content ?? "";
          finishes.push(ch.finish_reason);
        }
        if (chunk.usage) usage = chunk.usage;
      }
      assert.ok(chunks >= 3, `${chunks} chunks`);
      assert.equal(content, whole.choices[0]!.message.content);
      assert.equal(finishes.at(-1), "length");
      assert.deepEqual(usage, whole.usage);
    },
  );

  await t.step("completions streaming", async () => {
    const whole = await client.completions.create({ model: "gen", prompt: "Once", max_tokens: 12 });
    const stream = await client.completions.create({
      model: "gen",
      prompt: "Once",
      max_tokens: 12,
      stream: true,
    });
    let text = "";
    let finish: string | null = null;
    let contentChunks = 0;
    let synapse: Record<string, unknown> | undefined;
    for await (const chunk of stream) {
      const piece = chunk.choices[0]?.text ?? "";
      if (piece !== "") contentChunks++;
      text += piece;
      finish = chunk.choices[0]?.finish_reason ?? finish;
      synapse ??= (chunk as unknown as { synapse?: Record<string, unknown> }).synapse;
    }
    assert.equal(text, whole.choices[0]!.text);
    assert.notEqual(text, "");
    // Token by token: more than one chunk of text (one per token whose text is complete).
    assert.ok(contentChunks > 1, `${contentChunks} content chunks`);
    assert.equal(finish, "length");
    assert.equal(synapse?.streamed, "tokens");
    assert.equal(synapse?.n_gen, 12);
  });

  await t.step("streaming with stop: the deltas end before the stop string", async () => {
    const r = await oneshot({ model: "gen", prompt: "Hello there", max_tokens: 8 });
    const cps = [...r.text];
    // A stop string whose first code point appears before it does: its start is held back and
    // then released when the next text shows it is not the stop.
    const stop = cps.slice(4, 6).join("");
    const at = r.text.indexOf(stop);
    assert.ok(at > 0);
    const whole = await client.completions.create({
      model: "gen",
      prompt: "Hello there",
      max_tokens: 8,
      stop: [stop, "\u0000never"],
    });
    const stream = await client.completions.create({
      model: "gen",
      prompt: "Hello there",
      max_tokens: 8,
      stop: [stop, "\u0000never"],
      stream: true,
    });
    let text = "";
    let finish: string | null = null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.text ?? "";
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.equal(text, r.text.slice(0, at));
    assert.equal(text, whole.choices[0]!.text);
    assert.equal(finish, "stop");
  });

  await t.step(
    "sampling is honoured; what the engine cannot serve is refused by name, before anything is generated",
    async () => {
      const cases: [Record<string, unknown>, string][] = [
        [{ n: 2, stream: true }, "n"],
        [{ suffix: "The end." }, "suffix"],
        [{ best_of: 3 }, "best_of"],
        [{ echo: true }, "echo"],
      ];
      for (const [extra, param] of cases) {
        const e = await refusedBy(
          client.completions.create({ model: "gen", prompt: "x", max_tokens: 4, ...extra }),
        );
        assert.equal(e.status, 400, param);
        assert.equal(e.type, "invalid_request_error");
        assert.equal(e.code, "invalid_request");
        assert.equal(e.param, param);
        assert.match(e.message, new RegExp(`^400 Cannot honour ${param} `));
      }
      // Greedy values are greedy: the same text, and the seed is named as without effect.
      const plain = await client.completions.create({ model: "gen", prompt: "x", max_tokens: 4 });
      const greedy = await client.completions.create({
        model: "gen",
        prompt: "x",
        max_tokens: 4,
        temperature: 0,
        top_p: 1,
        n: 1,
        presence_penalty: 0,
        frequency_penalty: 0,
        seed: 42,
      });
      assert.equal(greedy.choices[0]!.text, plain.choices[0]!.text);
      // deno-lint-ignore no-explicit-any
      const sampling = (greedy as any).synapse.sampling;
      assert.equal(sampling.mode, "greedy");
      assert.deepEqual(sampling.without_effect, ["top_p", "seed"]);
      // A sampled call is what microllm.oneshot samples with the same params.
      const params = { temperature: 1, top_p: 0.9, presence_penalty: 0.5, seed: 5 };
      const sampled = await client.completions.create({
        model: "gen",
        prompt: "Hello there",
        max_tokens: 12,
        ...params,
      });
      const r = await oneshot({ model: "gen", prompt: "Hello there", max_tokens: 12, ...params });
      assert.equal(sampled.choices[0]!.text, r.text);
      // deno-lint-ignore no-explicit-any
      assert.deepEqual((sampled as any).synapse.sampling, r.sampling);
      assert.equal(r.sampling.mode, "sampled");
      const chatTemp = await refusedBy(
        client.chat.completions.create({
          model: "gen",
          messages: [{ role: "user", content: "x" }],
          temperature: 2.5,
        }),
      );
      assert.equal(chatTemp.param, "temperature");
      const chatTools = await refusedBy(
        client.chat.completions.create({
          model: "gen",
          messages: [{ role: "user", content: "x" }],
          tools: [{ type: "function", function: { name: "f" } }],
        }),
      );
      assert.equal(chatTools.param, "tools");
    },
  );

  await t.step("an unsupported schema keyword is refused naming its path", async () => {
    const schema = {
      type: "object",
      properties: { when: { type: "string", format: "date-time" } },
    };
    const e = await refusedBy(client.completions.create({
      model: "gen",
      prompt: "x",
      max_tokens: 4,
      response_format: { type: "json_schema", json_schema: { name: "s", schema } },
    } as OpenAI.CompletionCreateParamsNonStreaming));
    assert.equal(e.status, 400);
    assert.equal(e.param, "response_format.json_schema.schema.properties.when.format");
    assert.match(e.message, /'format' .* is not supported/);
    const stop = await refusedBy(client.completions.create({
      model: "gen",
      prompt: "x",
      max_tokens: 4,
      stop: "}",
      response_format: { type: "json_object" },
    } as OpenAI.CompletionCreateParamsNonStreaming));
    assert.equal(stop.param, "stop");
  });

  await t.step(
    "max_tokens above microllm_max_tokens is refused naming the field, never clamped",
    async () => {
      const limit = syn.context.config.microllm_max_tokens;
      const e = await refusedBy(
        client.completions.create({ model: "gen", prompt: "x", max_tokens: limit + 1 }),
      );
      assert.equal(e.status, 400);
      assert.equal(e.param, "max_tokens");
      assert.match(e.message, new RegExp(`exceeds this service's microllm_max_tokens ${limit}`));
      const chat = await refusedBy(client.chat.completions.create({
        model: "gen",
        messages: [{ role: "user", content: "x" }],
        max_completion_tokens: limit + 1,
      }));
      assert.equal(chat.param, "max_completion_tokens");
      const streamed = await refusedBy(client.chat.completions.create({
        model: "gen",
        messages: [{ role: "user", content: "x" }],
        max_tokens: limit + 1,
        stream: true,
      }));
      assert.equal(streamed.status, 400);
      assert.equal(streamed.param, "max_tokens");
    },
  );
});

Deno.test("response_format while grammar_enabled is false: grammar_disabled naming response_format", async () => {
  await using d = await door({});
  const e = await refusedBy(d.client.completions.create({
    model: "gen",
    prompt: "x",
    max_tokens: 4,
    response_format: { type: "json_object" },
  } as OpenAI.CompletionCreateParamsNonStreaming));
  assert.equal(e.status, 403);
  assert.equal(e.code, "grammar_disabled");
  assert.equal(e.type, "permission_error");
  assert.equal(e.param, "response_format");
});

Deno.test("streaming: text arrives while the generation runs; a client that goes away cancels it", async () => {
  // The worker generates 3 tokens, then waits for its CANCEL: the generation cannot end before
  // the client hangs up, so any text the client reads was sent while it ran.
  const worker = parkedWorker();
  await using d = await door({}, {
    llamaWorkerArgs: ["--test-wait-cancel-after", "3"],
    log: worker.log,
  });
  const whole = await d.syn.call("microllm.oneshot", { model: "gen", prompt: "hi", max_tokens: 3 })
    .then(resultOf);
  // Watches the streamed generation (not the one above).
  const watch = watchGenerations(d.syn);
  let ended = false;
  void watch.ended.then(() => ended = true, () => ended = true);
  const abort = new AbortController();
  const res = await fetch(`${d.base}/v1/completions`, {
    method: "POST",
    body: JSON.stringify({ model: "gen", prompt: "hi", max_tokens: 400, stream: true }),
    signal: abort.signal,
  });
  assert.equal(res.status, 200);
  assert.match(res.headers.get("content-type")!, /^text\/event-stream/);
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  let text = "";
  // Reads events until the text of the 3 held tokens is in (the worker holds after them).
  while (text !== whole.text) {
    const { value, done } = await reader.read();
    assert.ok(!done, `stream ended early after ${JSON.stringify(text)}`);
    buf += value;
    let cut: number;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const line = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      assert.ok(line.startsWith("data: {"), line);
      const ev = JSON.parse(line.slice(6));
      assert.equal(ev.choices[0].finish_reason, null);
      text += ev.choices[0].text;
    }
    assert.ok(
      whole.text.startsWith(text),
      `${JSON.stringify(text)} vs ${JSON.stringify(whole.text)}`,
    );
  }
  assert.notEqual(text, "");
  await worker.parked;
  assert.equal(ended, false, "text arrived while the generation was held");
  abort.abort();
  await assert.rejects(reader.read());
  const out = await watch.ended;
  assert.equal(out.finishReason, "cancelled");
  assert.equal(out.generatedIds.length, 3);
  // The lane is free again: the next request runs to its own limit.
  const next = await d.client.chat.completions.create({
    model: "gen",
    messages: [{ role: "user", content: "hi" }],
    max_tokens: 4,
  });
  assert.equal(next.choices[0]!.finish_reason, "length");
  assert.equal(next.usage!.completion_tokens, 4);
});

Deno.test("streaming a model that emits raw bytes: each delta is whole characters, together the answer", async () => {
  // The byte model emits only <0x80>..<0xFF> tokens: characters span tokens, and invalid
  // sequences become U+FFFD. The streamed deltas must never cut a character.
  await using d = await door({
    preload_models: [{
      engine: "llama",
      model_path: `${MODELS}/synapse-tiny-llama-bytes`,
      tokenizer_path: `${MODELS}/synapse-tiny-llama-bytes/tokenizer.json`,
      task: "generate",
      model_id: "bytes",
    }],
  });
  const whole = await d.client.completions.create({
    model: "bytes",
    prompt: "Hello there",
    max_tokens: 16,
  });
  const stream = await d.client.completions.create({
    model: "bytes",
    prompt: "Hello there",
    max_tokens: 16,
    stream: true,
  });
  const deltas: string[] = [];
  let synapse: Record<string, unknown> | undefined;
  for await (const chunk of stream) {
    const piece = chunk.choices[0]?.text ?? "";
    if (piece !== "") deltas.push(piece);
    synapse ??= (chunk as unknown as { synapse?: Record<string, unknown> }).synapse;
  }
  assert.notEqual(whole.choices[0]!.text, "");
  assert.equal(deltas.join(""), whole.choices[0]!.text);
  for (const piece of deltas) assert.ok(piece.isWellFormed(), JSON.stringify(piece));
  assert.ok(deltas.length > 1, `${deltas.length} deltas`);
  // The same repair facts as the whole answer.
  const facts = (whole as unknown as { synapse: Record<string, unknown> }).synapse;
  assert.deepEqual(synapse?.text_repair, facts.text_repair);
});

Deno.test("a streamed completion's request log line comes once the generation ended, with its facts", async () => {
  const line = Promise.withResolvers<Record<string, unknown>>();
  await using d = await door({}, {
    httpLog: (_level, _target, message, fields) => {
      if (message === "request") line.resolve({ ...fields });
    },
  });
  const stream = await d.client.completions.create({
    model: "gen",
    prompt: "Once",
    max_tokens: 6,
    stream: true,
  });
  let text = "";
  for await (const chunk of stream) text += chunk.choices[0]?.text ?? "";
  assert.notEqual(text, "");
  const fields = await line.promise;
  assert.equal(fields.path, "/v1/completions");
  assert.equal(fields.op, "microllm.oneshot");
  assert.equal(fields.model, "gen", "the facts of the finished generation");
  assert.equal(fields.outcome, "ok");
  assert.equal(fields.status, 200);
  assert.equal(typeof fields.inference_ms, "number");
});
