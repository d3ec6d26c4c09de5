/**
 * Sampling at the OpenAI completions doors with the official `openai` npm client, unchanged
 * (docs/generation.md "Sampling"): a seeded call replays, an unseeded one reports the seed it
 * used and replays from it, streamed and non-streamed answers of one seed are the same text, a
 * sampled JSON schema answer still parses, llama.cpp's extras (`top_k`, `min_p`,
 * `repeat_penalty`) sample what `microllm.oneshot` samples, a `developer` message renders exactly
 * as a `system` one (a GGUF chat template and the fallback), greedy logprobs in OpenAI's shapes
 * (refused where they would not be the model's own), and out-of-range values and what the engine
 * cannot serve are refused naming the field in OpenAI's error shape.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { serveHttp } from "../../../lib/doors/http/server.ts";
import { nullLog } from "../../../lib/log/log.ts";
import { fallbackPrompt } from "../../../lib/ops/_chat_template.ts";
import { MODELS, resultOf, startSynapse } from "../../_helpers.ts";
import type { TestSynapse } from "../../_helpers.ts";
import { ggufWithChatTemplate } from "../../_gguf_chat_template.ts";

const GEN = `${MODELS}/synapse-tiny-llama`;
const QWEN = `${MODELS}/synapse-tiny-qwen`;

/**
 * Qwen2.5's chat template, as its GGUFs carry it: a default system turn when the first message
 * is not `system`, and no branch for any role but system, user and assistant (a `developer`
 * message passed through as it is would vanish from the prompt).
 */
const QWEN_TEMPLATE = "{%- if messages[0]['role'] == 'system' %}" +
  "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}" +
  "{%- else %}{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{%- endif %}" +
  "{%- for message in messages %}" +
  "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) or message.role == 'assistant' %}" +
  "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}" +
  "{%- endif %}{%- endfor %}" +
  "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

interface Door extends AsyncDisposable {
  t: TestSynapse;
  client: OpenAI;
  // deno-lint-ignore no-explicit-any
  post(path: string, body: unknown): Promise<{ status: number; body: any }>;
}

async function door(): Promise<Door> {
  const dir = await Deno.makeTempDir({ prefix: "synapse-sampling-door-" });
  await ggufWithChatTemplate(`${QWEN}/model.gguf`, `${dir}/qwen.gguf`, QWEN_TEMPLATE);
  const t = await startSynapse({
    grammar_enabled: true,
    // Nothing here is about the deadline; a grammar-constrained answer on a loaded machine is slow.
    inline: { deadline_ms: 600_000 },
    preload_models: [
      {
        engine: "llama",
        model_path: GEN,
        tokenizer_path: `${GEN}/tokenizer.json`,
        task: "generate",
        model_id: "gen",
      },
      { engine: "llama", model_path: `${dir}/qwen.gguf`, task: "generate", model_id: "qwen" },
      // The same model without a chat template: the fallback.
      { engine: "llama", model_path: `${QWEN}/model.gguf`, task: "generate", model_id: "plain" },
    ],
  }, { log: nullLog });
  const server = serveHttp(t.syn, { log: nullLog });
  const base = `http://127.0.0.1:${server.port}`;
  return {
    t,
    client: new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0 }),
    async post(path, body) {
      const res = await fetch(`${base}${path}`, { method: "POST", body: JSON.stringify(body) });
      return { status: res.status, body: await res.json() };
    },
    async [Symbol.asyncDispose]() {
      await server.shutdown();
      await t[Symbol.asyncDispose]();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

// deno-lint-ignore no-explicit-any
function synapseOf(answer: unknown): any {
  // deno-lint-ignore no-explicit-any
  return (answer as any).synapse;
}

const CHAT = [{ role: "user" as const, content: "Tell me a story" }];

Deno.test("the completions doors sample, seeded and replayable, with the openai client", async (t) => {
  await using d = await door();
  const { client } = d;
  const fingerprint = d.t.syn.registry.resolve("gen", "generate").fingerprint;
  const chat = (more: Record<string, unknown>) =>
    client.chat.completions.create({
      model: "gen",
      messages: CHAT,
      max_tokens: 16,
      ...more,
    } as OpenAI.ChatCompletionCreateParamsNonStreaming);

  await t.step("the same seed twice: the same content, the seed reported", async () => {
    const a = await chat({ temperature: 0.8, seed: 7 });
    const b = await chat({ temperature: 0.8, seed: 7 });
    assert.equal(b.choices[0]!.message.content, a.choices[0]!.message.content);
    assert.equal(a.usage!.completion_tokens, 16);
    const s = synapseOf(a).sampling;
    assert.equal(s.mode, "sampled");
    assert.equal(s.temperature, 0.8);
    assert.equal(s.seed, 7);
    assert.equal(s.seed_source, "request");
    // A sampled answer still names the model by its fingerprint; the seed is not an ignored field.
    assert.equal(a.system_fingerprint, fingerprint);
    assert.equal(synapseOf(a).ignored_fields, undefined);
    // It is what microllm.oneshot generates from the same messages and values.
    const r = resultOf(
      await d.t.syn.call("microllm.oneshot", {
        model: "gen",
        messages: CHAT,
        max_tokens: 16,
        temperature: 0.8,
        seed: 7,
      }),
    );
    assert.equal(a.choices[0]!.message.content, r.text);
    assert.deepEqual(s, r.sampling);
  });

  await t.step(
    "unseeded: each call picks a seed, reports it, and it replays the content",
    async () => {
      const answers = [];
      for (let i = 0; i < 3; i++) answers.push(await chat({ temperature: 1.2 }));
      const seeds = answers.map((a) => synapseOf(a).sampling.seed);
      for (const a of answers) assert.equal(synapseOf(a).sampling.seed_source, "service");
      assert.equal(new Set(seeds).size, 3, String(seeds));
      // Different seeds give different answers at this temperature on this model.
      const texts = new Set(answers.map((a) => a.choices[0]!.message.content));
      assert.ok(texts.size > 1, [...texts].join(" | "));
      for (const a of answers.slice(0, 2)) {
        const again = await chat({ temperature: 1.2, seed: synapseOf(a).sampling.seed });
        assert.equal(again.choices[0]!.message.content, a.choices[0]!.message.content);
        assert.equal(synapseOf(again).sampling.seed_source, "request");
      }
    },
  );

  await t.step("streamed with a seed joins to the non-streamed answer of that seed", async () => {
    const params = { temperature: 1.1, top_p: 0.95, seed: 21 };
    const whole = await chat(params);
    const stream = await client.chat.completions.create({
      model: "gen",
      messages: CHAT,
      max_tokens: 16,
      stream: true,
      ...params,
    });
    let joined = "";
    // deno-lint-ignore no-explicit-any
    let synapse: any;
    for await (const chunk of stream) {
      joined += chunk.choices[0]?.delta?.content ?? "";
      if (synapseOf(chunk) !== undefined) synapse = synapseOf(chunk);
    }
    assert.equal(joined, whole.choices[0]!.message.content);
    assert.deepEqual(synapse.sampling, synapseOf(whole).sampling);
    // The same on /v1/completions.
    const prompt = "Once upon a time";
    const c = await client.completions.create({ model: "gen", prompt, max_tokens: 16, ...params });
    const cs = await client.completions.create({
      model: "gen",
      prompt,
      max_tokens: 16,
      stream: true,
      ...params,
    });
    let text = "";
    for await (const chunk of cs) text += chunk.choices[0]?.text ?? "";
    assert.equal(text, c.choices[0]!.text);
    assert.equal(synapseOf(c).sampling.seed, 21);
  });

  await t.step(
    "llama.cpp's extras top_k, min_p, repeat_penalty sample what the op samples",
    async () => {
      const params = {
        temperature: 0.9,
        seed: 5,
        top_k: 20,
        min_p: 0.05,
        repeat_penalty: 1.3,
        repeat_last_n: 16,
        frequency_penalty: 0.2,
      };
      const prompt = "a b a b a b a b";
      const c = await d.post("/v1/completions", {
        model: "gen",
        prompt,
        max_tokens: 16,
        ...params,
      });
      assert.equal(c.status, 200, JSON.stringify(c.body));
      const r = resultOf(
        await d.t.syn.call("microllm.oneshot", { model: "gen", prompt, max_tokens: 16, ...params }),
      );
      assert.equal(c.body.choices[0].text, r.text);
      assert.deepEqual(c.body.synapse.sampling, r.sampling);
      assert.equal(r.sampling.top_k, 20);
      assert.equal(r.sampling.repeat_penalty, 1.3);
      // The extras change the answer (else this step proves nothing).
      const plain = await d.post("/v1/completions", {
        model: "gen",
        prompt,
        max_tokens: 16,
        temperature: 0.9,
        seed: 5,
      });
      assert.notEqual(plain.body.choices[0].text, c.body.choices[0].text);
    },
  );

  await t.step("no temperature is greedy, as before; temperature 0 with a seed too", async () => {
    const plain = await chat({});
    const zero = await chat({ temperature: 0, seed: 99 });
    assert.equal(zero.choices[0]!.message.content, plain.choices[0]!.message.content);
    assert.equal(synapseOf(plain).sampling.mode, "greedy");
    assert.equal(synapseOf(plain).sampling.without_effect, undefined);
    assert.deepEqual(synapseOf(zero).sampling.without_effect, ["seed"]);
  });

  await t.step("a sampled json_schema answer still parses and follows the schema", async () => {
    const schema = {
      type: "object",
      properties: { ok: { type: "boolean" }, n: { type: "integer" } },
      required: ["ok", "n"],
      additionalProperties: false,
    };
    const texts = new Set<string>();
    let complete = 0;
    for (let seed = 1; seed <= 4; seed++) {
      const a = await chat({
        temperature: 1,
        seed,
        max_tokens: 60,
        response_format: { type: "json_schema", json_schema: { name: "t", schema } },
      });
      const text = a.choices[0]!.message.content!;
      if (a.choices[0]!.finish_reason === "length") {
        // Whitespace the schema allows may run to the limit: then disclosed, a JSON prefix.
        assert.equal(synapseOf(a).json_complete, false);
        assert.match(text, /^\s*\{/);
        continue;
      }
      complete++;
      assert.equal(synapseOf(a).json_complete, true);
      const v = JSON.parse(text);
      assert.deepEqual(Object.keys(v).sort(), ["n", "ok"], text);
      assert.equal(typeof v.ok, "boolean");
      assert.ok(Number.isInteger(v.n), text);
      texts.add(text);
    }
    assert.ok(complete >= 2, `only ${complete} of 4 completed`);
  });
});

Deno.test("a developer message renders exactly as a system message, GGUF template and fallback", async () => {
  await using d = await door();
  // Sampled with a seed: the ids follow every token of the prompt (this model's greedy answer
  // is the same for many prompts), and the same seed makes the comparison exact.
  const SEEDED = { max_tokens: 12, temperature: 1.5, seed: 3 };
  const oneshot = async (params: Record<string, unknown>) =>
    resultOf(await d.t.syn.call("microllm.oneshot", { ...SEEDED, ...params }));
  const as = (role: "system" | "developer" | "user") => [
    { role, content: "Answer in French." },
    { role: "user" as const, content: "Hello" },
  ];
  for (const model of ["qwen", "plain"]) {
    const system = await oneshot({ model, messages: as("system") });
    const developer = await oneshot({ model, messages: as("developer") });
    assert.equal(developer.chat_template, model === "qwen" ? "gguf" : "fallback");
    assert.equal(developer.n_prompt, system.n_prompt, model);
    assert.deepEqual(developer.generated_token_ids, system.generated_token_ids, model);
    // The role changes the answer: a user turn in its place is another prompt (else the
    // comparison above proves nothing).
    const user = await oneshot({ model, messages: as("user") });
    assert.notDeepEqual(user.generated_token_ids, system.generated_token_ids, model);
    // Through the door, with the openai client's own `developer` role.
    const c = await d.client.chat.completions.create({
      model,
      messages: as("developer"),
      ...SEEDED,
    });
    assert.equal(c.choices[0]!.message.content, system.text, model);
    assert.equal(c.usage!.prompt_tokens, system.n_prompt, model);
  }
  // The fallback renders the system role: the developer prompt is the system prompt's text,
  // not the `developer: …` lines a developer role passed through would give.
  const direct = await oneshot({ model: "plain", prompt: fallbackPrompt(as("system")) });
  const developer = await oneshot({ model: "plain", messages: as("developer") });
  assert.deepEqual(developer.generated_token_ids, direct.generated_token_ids);
  assert.equal(developer.n_prompt, direct.n_prompt);
  const unmapped = await oneshot({ model: "plain", prompt: fallbackPrompt(as("developer")) });
  assert.notDeepEqual(unmapped.generated_token_ids, direct.generated_token_ids);
});

Deno.test("out-of-range sampling values and what the engine cannot serve are refused by name, in OpenAI's shape", async () => {
  await using d = await door();
  const base = { model: "gen", max_tokens: 4 };
  const ranged: [string, unknown, RegExp][] = [
    ["temperature", 2.5, /from 0 to 2/],
    ["temperature", -0.1, /from 0 to 2/],
    ["top_p", 0, /above 0 and at most 1/],
    ["top_p", 1.5, /above 0 and at most 1/],
    ["presence_penalty", 2.5, /from -2 to 2/],
    ["frequency_penalty", -3, /from -2 to 2/],
    ["seed", -1, /integer from 0 to 4294967294/],
    ["seed", 4294967295, /integer from 0 to 4294967294/],
    ["seed", 1.5, /integer from 0 to 4294967294/],
    ["top_k", -1, /integer from 0/],
    ["min_p", 1.5, /from 0 to 1/],
    ["repeat_penalty", 0, /above 0/],
    ["repeat_last_n", -1, /integer from 0/],
    ["n", 9, /from 1 to 8/],
    ["n", 0, /from 1 to 8/],
  ];
  for (const [field, value, range] of ranged) {
    for (const path of ["/v1/completions", "/v1/chat/completions"]) {
      const input = path === "/v1/completions" ? { prompt: "x" } : { messages: CHAT };
      const r = await d.post(path, { ...base, ...input, [field]: value });
      const what = `${path} ${field} ${value}`;
      assert.equal(r.status, 400, `${what}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.error.type, "invalid_request_error", what);
      assert.equal(r.body.error.code, "invalid_request", what);
      assert.equal(r.body.error.param, field, what);
      assert.match(r.body.error.message, range, what);
    }
  }
  const unserved: [Record<string, unknown>, string][] = [
    [{ n: 2, stream: true }, "n"],
    [{ prompt: "x", best_of: 2 }, "best_of"],
  ];
  for (const [fields, param] of unserved) {
    const r = "prompt" in fields
      ? await d.post("/v1/completions", { ...base, ...fields })
      : await d.post("/v1/chat/completions", { ...base, messages: CHAT, ...fields });
    assert.equal(r.status, 400, `${param}: ${JSON.stringify(r.body)}`);
    assert.equal(r.body.error.param, param);
    assert.match(r.body.error.message, new RegExp(`^Cannot honour ${param} `));
  }
  // The client shows the message and the field.
  await assert.rejects(
    d.client.chat.completions.create({ ...base, messages: CHAT, seed: -5 }),
    (e) =>
      e instanceof OpenAI.APIError && e.status === 400 && e.param === "seed" &&
      /4294967294/.test(e.message),
  );
  await assert.rejects(
    d.client.completions.create({ ...base, prompt: "x", temperature: 3 }),
    (e) => e instanceof OpenAI.APIError && e.status === 400 && e.param === "temperature",
  );
});

Deno.test("logprobs: the model's own log-probabilities of a greedy answer, in OpenAI's shapes", async (t) => {
  await using d = await door();
  const { client } = d;
  const prompt = "Once upon a time";

  await t.step("microllm.oneshot: one per token, the generated token the most likely", async () => {
    const plain = resultOf(
      await d.t.syn.call("microllm.oneshot", { model: "gen", prompt, max_tokens: 10 }),
    );
    const r = resultOf(
      await d.t.syn.call("microllm.oneshot", { model: "gen", prompt, max_tokens: 10, logprobs: 4 }),
    );
    // Asking for them changes no token.
    assert.deepEqual(r.generated_token_ids, plain.generated_token_ids);
    assert.equal(r.text, plain.text);
    assert.equal(r.logprobs.length, r.n_gen);
    // deno-lint-ignore no-explicit-any
    r.logprobs.forEach((lp: any, i: number) => {
      assert.equal(lp.id, r.generated_token_ids[i]);
      assert.ok(lp.logprob <= 0 && lp.logprob > -9999, String(lp.logprob));
      assert.equal(lp.top.length, 4);
      // Greedy: the generated token is the most likely one, and the list is sorted.
      assert.equal(lp.top[0].id, lp.id);
      assert.equal(lp.top[0].logprob, lp.logprob);
      for (let j = 1; j < 4; j++) assert.ok(lp.top[j].logprob <= lp.top[j - 1].logprob);
      // A distribution over the whole vocabulary: the top 4 hold at most all of it.
      // deno-lint-ignore no-explicit-any
      const mass = lp.top.reduce((a: number, x: any) => a + Math.exp(x.logprob), 0);
      assert.ok(mass <= 1 + 1e-4, String(mass));
      // `token` is `bytes` as UTF-8 (whole characters here: no replacement character).
      if (!lp.token.includes("\uFFFD")) {
        assert.deepEqual(lp.bytes, [...new TextEncoder().encode(lp.token)]);
      }
    });
    // The same call again gives the same numbers (greedy, one lane).
    const again = resultOf(
      await d.t.syn.call("microllm.oneshot", { model: "gen", prompt, max_tokens: 10, logprobs: 4 }),
    );
    assert.deepEqual(again.logprobs, r.logprobs);
  });

  await t.step("chat: logprobs true with top_logprobs, through the openai client", async () => {
    const c = await client.chat.completions.create({
      model: "gen",
      messages: CHAT,
      max_tokens: 8,
      logprobs: true,
      top_logprobs: 3,
    });
    const r = resultOf(
      await d.t.syn.call("microllm.oneshot", {
        model: "gen",
        messages: CHAT,
        max_tokens: 8,
        logprobs: 3,
      }),
    );
    const content = c.choices[0]!.logprobs!.content!;
    assert.equal(c.choices[0]!.message.content, r.text);
    assert.equal(content.length, c.usage!.completion_tokens);
    content.forEach((x, i) => {
      assert.equal(x.token, r.logprobs[i].token);
      assert.equal(x.logprob, r.logprobs[i].logprob);
      assert.deepEqual(x.bytes, r.logprobs[i].bytes);
      assert.equal(x.top_logprobs.length, 3);
      assert.equal(x.top_logprobs[0]!.logprob, x.logprob);
    });
    // The tokens' bytes make the text (a leading space the decoder strips aside).
    const joined = new TextDecoder().decode(new Uint8Array(content.flatMap((x) => x.bytes!)));
    assert.ok(joined.endsWith(r.text), `${JSON.stringify(joined)} vs ${JSON.stringify(r.text)}`);
    // Without logprobs the choice says null, as OpenAI's does.
    const none = await client.chat.completions.create({
      model: "gen",
      messages: CHAT,
      max_tokens: 2,
    });
    assert.equal(none.choices[0]!.logprobs, null);
  });

  await t.step("completions: logprobs k, the legacy shape", async () => {
    const c = await client.completions.create({ model: "gen", prompt, max_tokens: 8, logprobs: 2 });
    const lp = c.choices[0]!.logprobs!;
    assert.equal(lp.tokens!.length, 8);
    assert.equal(lp.token_logprobs!.length, 8);
    assert.equal(lp.top_logprobs!.length, 8);
    lp.top_logprobs!.forEach((top, i) => {
      assert.ok(Object.keys(top).length <= 2);
      assert.equal(Math.max(...Object.values(top)), lp.token_logprobs![i]);
    });
    assert.equal(lp.text_offset![0], 0);
    for (let i = 1; i < 8; i++) assert.ok(lp.text_offset![i]! >= lp.text_offset![i - 1]!);
    const zero = await client.completions.create({
      model: "gen",
      prompt,
      max_tokens: 4,
      logprobs: 0,
    });
    assert.equal(zero.choices[0]!.logprobs!.token_logprobs!.length, 4);
    assert.equal(zero.choices[0]!.logprobs!.top_logprobs, null);
  });

  await t.step("refused by name where they would not be the model's own", async () => {
    const cases: [Record<string, unknown>, string, RegExp][] = [
      [{ temperature: 0.7, logprobs: true }, "logprobs", /with temperature/],
      [{ repeat_penalty: 1.2, logprobs: true }, "logprobs", /with repeat_penalty/],
      [{ stop: ["x"], logprobs: true }, "logprobs", /with stop/],
      [{ stream: true, logprobs: true }, "logprobs", /with stream/],
      [
        { response_format: { type: "json_object" }, logprobs: true },
        "logprobs",
        /with response_format/,
      ],
      [{ top_logprobs: 2 }, "top_logprobs", /without logprobs/],
      [{ logprobs: true, top_logprobs: 21 }, "top_logprobs", /from 0 to 20/],
    ];
    for (const [fields, param, why] of cases) {
      const r = await d.post("/v1/chat/completions", {
        model: "gen",
        messages: CHAT,
        max_tokens: 4,
        ...fields,
      });
      const what = JSON.stringify(fields);
      assert.equal(r.status, 400, `${what}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.error.type, "invalid_request_error", what);
      assert.equal(r.body.error.param, param, what);
      assert.match(r.body.error.message, why, what);
    }
    const big = await d.post("/v1/completions", { model: "gen", prompt, logprobs: 6 });
    assert.equal(big.status, 400);
    assert.equal(big.body.error.param, "logprobs");
  });
});

Deno.test("n: each choice its own generation, choice i sampled with seed + i; usage sums", async () => {
  await using d = await door();
  const { client } = d;
  const base = { model: "gen", messages: CHAT, max_tokens: 10 };
  const c = await client.chat.completions.create({ ...base, temperature: 1.2, seed: 10, n: 3 });
  assert.deepEqual(c.choices.map((x) => x.index), [0, 1, 2]);
  const s = synapseOf(c);
  assert.deepEqual(s.choices.map((x: { seed: number }) => x.seed), [10, 11, 12]);
  assert.equal(s.sampling.seed, 10);
  assert.equal(
    c.usage!.completion_tokens,
    s.choices.reduce((a: number, x: { n_gen: number }) => a + x.n_gen, 0),
  );
  assert.equal(c.usage!.completion_tokens, 30);
  // Choice i is the single answer of seed 10 + i.
  for (let i = 0; i < 3; i++) {
    const one = await client.chat.completions.create({ ...base, temperature: 1.2, seed: 10 + i });
    assert.equal(c.choices[i]!.message.content, one.choices[0]!.message.content, `choice ${i}`);
    assert.equal(one.choices.length, 1);
    assert.equal(synapseOf(one).choices, undefined);
  }
  assert.ok(new Set(c.choices.map((x) => x.message.content)).size > 1);
  // Unseeded: the picked seed is the first choice's, and the others follow it.
  const u = await client.chat.completions.create({ ...base, temperature: 1.2, n: 2 });
  const useed = synapseOf(u).sampling.seed;
  assert.deepEqual(
    synapseOf(u).choices.map((x: { seed: number }) => x.seed),
    [useed, (useed + 1) % 4294967295],
  );
  // Greedy: every choice is the greedy answer.
  const plain = await client.chat.completions.create(base);
  const greedy = await client.chat.completions.create({ ...base, n: 2 });
  for (const x of greedy.choices) {
    assert.equal(x.message.content, plain.choices[0]!.message.content);
  }
  // Completions, with logprobs on every choice.
  const k = await client.completions.create({
    model: "gen",
    prompt: "Once upon a time",
    max_tokens: 5,
    n: 2,
    logprobs: 1,
  });
  assert.equal(k.choices.length, 2);
  for (const x of k.choices) assert.equal(x.logprobs!.tokens!.length, 5);
  assert.equal(k.usage!.completion_tokens, 10);
});

Deno.test("logit_bias: each id's bias is added to its logit before the pick, greedy or sampled", async () => {
  await using d = await door();
  const { client } = d;
  const prompt = "Once upon a time";
  const ids = async (more: Record<string, unknown>) =>
    resultOf(
      await d.t.syn.call("microllm.oneshot", { model: "gen", prompt, max_tokens: 6, ...more }),
    ).generated_token_ids as number[];
  const plain = await ids({});
  // −100 bans the greedy first token: another one comes first.
  const banned = await ids({ logit_bias: { [String(plain[0])]: -100 } });
  assert.notEqual(banned[0], plain[0]);
  assert.ok(!banned.includes(plain[0]!), JSON.stringify(banned));
  // 100 forces a token at every step, sampled too.
  const forced = 1000;
  assert.deepEqual(await ids({ logit_bias: { [forced]: 100 } }), Array(6).fill(forced));
  assert.deepEqual(
    await ids({ logit_bias: { [forced]: 100 }, temperature: 1, seed: 4 }),
    Array(6).fill(forced),
  );
  // Through the door with the openai client: the same ids' text.
  const c = await client.completions.create({
    model: "gen",
    prompt,
    max_tokens: 6,
    logit_bias: { [String(plain[0])]: -100 },
  });
  const direct = resultOf(
    await d.t.syn.call("microllm.oneshot", {
      model: "gen",
      prompt,
      max_tokens: 6,
      logit_bias: { [String(plain[0])]: -100 },
    }),
  );
  assert.equal(c.choices[0]!.text, direct.text);
  // Refused by name: an id outside the vocabulary, a bias out of range, logprobs with a bias.
  for (
    const [bias, param, why] of [
      [{ "32000": 1 }, "logit_bias.32000", /not in the model's vocabulary of 32000/],
      [{ "5": 101 }, "logit_bias.5", /from -100 to 100/],
      [{ "x": 1 }, "logit_bias.x", /field .logit_bias\.x.: Invalid key/],
    ] as const
  ) {
    const r = await d.post("/v1/completions", { model: "gen", prompt, logit_bias: bias });
    assert.equal(r.status, 400, JSON.stringify(r.body));
    assert.equal(r.body.error.param, param);
    assert.match(r.body.error.message, why);
  }
  const lp = await d.post("/v1/completions", {
    model: "gen",
    prompt,
    logprobs: 1,
    logit_bias: { "5": 1 },
  });
  assert.equal(lp.status, 400);
  assert.equal(lp.body.error.param, "logprobs");
  assert.match(lp.body.error.message, /with logit_bias/);
});
