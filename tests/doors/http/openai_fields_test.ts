/**
 * Field report F24: the fields real OpenAI clients always send (`metadata`, `store: false`,
 * `service_tier`, `tool_choice: "none"`, `parallel_tool_calls`, `user`, `stream_options`, an
 * assistant message with `content: null`; `/v1/embeddings` with `metadata`) are accepted, change
 * nothing (the same text, the same vectors as the request without them) and are named in
 * `synapse.ignored_fields`; the values that would ask for something (`store: true`, tools, a
 * `tool_choice` other than `"none"`, tool calls) and every other field are refused by name.
 * Through the real doors: the official `openai` npm client, and raw fetch for each field.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { serveHttp } from "../../../lib/doors/http/server.ts";
import { nullLog } from "../../../lib/log/log.ts";
import { MODELS, preload, resultOf, startSynapse } from "../../_helpers.ts";
import type { TestSynapse } from "../../_helpers.ts";

const GEN = `${MODELS}/synapse-tiny-llama`;

interface Door extends AsyncDisposable {
  t: TestSynapse;
  client: OpenAI;
  // deno-lint-ignore no-explicit-any
  post(path: string, body: unknown): Promise<{ status: number; body: any }>;
}

async function door(): Promise<Door> {
  const t = await startSynapse({
    preload_models: [
      preload(`${MODELS}/synapse-tiny-embed`, "embed"),
      {
        engine: "llama",
        model_path: GEN,
        tokenizer_path: `${GEN}/tokenizer.json`,
        task: "generate",
        model_id: "gen",
      },
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
    },
  };
}

/** A conversation with an earlier assistant turn; `content` of that turn as given. */
function conversation(assistant: string | null) {
  return [
    { role: "system" as const, content: "You are brief." },
    { role: "user" as const, content: "Hello" },
    { role: "assistant" as const, content: assistant },
    { role: "user" as const, content: "And again?" },
  ];
}

/** The harmless chat fields, one at a time, and how each is named when ignored. */
const HARMLESS_CHAT: [string, unknown][] = [
  ["metadata", { session: "s-1", team: "search" }],
  ["store", false],
  ["service_tier", "auto"],
  ["service_tier", "flex"],
  ["tool_choice", "none"],
  ["tools", []],
  ["parallel_tool_calls", false],
  ["parallel_tool_calls", true],
  ["user", "user-42"],
  ["stream_options", { include_usage: true }],
];

/** Chat fields whose values ask for something Synapse does not do: refused, `param` the name. */
const REFUSED_CHAT: [string, Record<string, unknown>, string][] = [
  ["store true", { store: true }, "store"],
  ["tool_choice auto", { tool_choice: "auto" }, "tool_choice"],
  ["tool_choice required", { tool_choice: "required" }, "tool_choice"],
  [
    "tool_choice a function",
    { tool_choice: { type: "function", function: { name: "lookup" } } },
    "tool_choice",
  ],
  [
    "tools",
    { tools: [{ type: "function", function: { name: "lookup", parameters: {} } }] },
    "tools",
  ],
  [
    "parallel_tool_calls with tools",
    {
      parallel_tool_calls: false,
      tools: [{ type: "function", function: { name: "lookup", parameters: {} } }],
    },
    "tools",
  ],
  ["metadata with a number", { metadata: { n: 1 } }, "metadata.n"],
  ["an unknown field", { reasoning_effort: "low" }, "reasoning_effort"],
  ["functions", { functions: [{ name: "lookup" }] }, "functions"],
];

Deno.test("F24: chat fields real clients send are accepted, change nothing and are disclosed", async (t) => {
  await using d = await door();
  const base = { model: "gen", max_tokens: 6 };
  const plain = await d.post("/v1/chat/completions", {
    ...base,
    messages: conversation(""),
  });
  assert.equal(plain.status, 200, JSON.stringify(plain.body));
  const text: string = plain.body.choices[0].message.content;
  assert.notEqual(text, "");
  assert.equal(plain.body.synapse.ignored_fields, undefined);

  await t.step("the openai client with every such field at once", async () => {
    const c = await d.client.chat.completions.create({
      ...base,
      messages: conversation(null),
      metadata: { session: "s-1" },
      store: false,
      service_tier: "auto",
      tool_choice: "none",
      parallel_tool_calls: false,
      user: "user-42",
    });
    assert.equal(c.choices[0]!.message.content, text);
    assert.deepEqual(c.usage, plain.body.usage);
    // deno-lint-ignore no-explicit-any
    assert.deepEqual((c as any).synapse.ignored_fields, [
      "metadata",
      "store",
      "service_tier",
      "tool_choice",
      "parallel_tool_calls",
      "user",
    ]);
    // An answer's message sent back as it came (`refusal: null`) is a turn like any other.
    const again = await d.client.chat.completions.create({
      ...base,
      messages: [
        { role: "user", content: "Hello" },
        c.choices[0]!.message,
        { role: "user", content: "And again?" },
      ],
    });
    const direct = await d.post("/v1/chat/completions", {
      ...base,
      messages: [
        { role: "user", content: "Hello" },
        { role: "assistant", content: text },
        { role: "user", content: "And again?" },
      ],
    });
    assert.equal(again.choices[0]!.message.content, direct.body.choices[0].message.content);
  });

  await t.step("the openai client streaming with stream_options.include_usage", async () => {
    const stream = await d.client.chat.completions.create({
      ...base,
      messages: conversation(null),
      stream: true,
      stream_options: { include_usage: true },
      metadata: { session: "s-1" },
      store: false,
      service_tier: "default",
      tool_choice: "none",
      parallel_tool_calls: true,
      user: "user-42",
    });
    let joined = "";
    let usage: unknown;
    // deno-lint-ignore no-explicit-any
    let synapse: any;
    for await (const chunk of stream) {
      joined += chunk.choices[0]?.delta?.content ?? "";
      if (chunk.usage) usage = chunk.usage;
      // deno-lint-ignore no-explicit-any
      if ((chunk as any).synapse) synapse = (chunk as any).synapse;
    }
    assert.equal(joined, text);
    assert.deepEqual(usage, plain.body.usage); // honoured: the last chunk carries usage
    // stream_options was honoured, so it is not among the ignored fields.
    assert.deepEqual(synapse.ignored_fields, [
      "metadata",
      "store",
      "service_tier",
      "tool_choice",
      "parallel_tool_calls",
      "user",
    ]);
  });

  await t.step("raw fetch, each harmless field alone", async () => {
    for (const [field, value] of HARMLESS_CHAT) {
      const r = await d.post("/v1/chat/completions", {
        ...base,
        messages: conversation(""),
        [field]: value,
      });
      const what = `${field}: ${JSON.stringify(value)}`;
      assert.equal(r.status, 200, `${what} → ${JSON.stringify(r.body)}`);
      assert.equal(r.body.choices[0].message.content, text, what);
      assert.deepEqual(r.body.synapse.ignored_fields, [field], what);
      // `null` is the same as leaving the field out: nothing to disclose.
      const nul = await d.post("/v1/chat/completions", {
        ...base,
        messages: conversation(""),
        [field]: null,
      });
      assert.equal(nul.status, 200, `${field}: null → ${JSON.stringify(nul.body)}`);
      assert.equal(nul.body.synapse.ignored_fields, undefined, `${field}: null`);
    }
  });

  await t.step("raw fetch, an assistant message with content null is empty content", async () => {
    const r = await d.post("/v1/chat/completions", {
      ...base,
      messages: conversation(null),
    });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(r.body.choices[0].message.content, text);
    const absent = await d.post("/v1/chat/completions", {
      ...base,
      messages: [
        ...conversation("").slice(0, 2),
        { role: "assistant", refusal: null, tool_calls: [] },
        conversation("")[3],
      ],
    });
    assert.equal(absent.status, 200, JSON.stringify(absent.body));
    assert.equal(absent.body.choices[0].message.content, text);
    assert.equal(absent.body.synapse.ignored_fields, undefined);
  });

  await t.step("what asks for something is refused by name", async () => {
    for (const [what, fields, param] of REFUSED_CHAT) {
      const r = await d.post("/v1/chat/completions", {
        ...base,
        messages: conversation(""),
        ...fields,
      });
      assert.equal(r.status, 400, `${what}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.error.code, "invalid_request", what);
      assert.equal(r.body.error.type, "invalid_request_error", what);
      assert.equal(r.body.error.param, param, `${what}: ${r.body.error.message}`);
    }
    const tools = await d.post("/v1/chat/completions", {
      ...base,
      messages: conversation(""),
      tool_choice: "auto",
    });
    assert.match(tools.body.error.message, /does not call tools/);
    const store = await d.post("/v1/chat/completions", {
      ...base,
      messages: conversation(""),
      store: true,
    });
    assert.match(store.body.error.message, /does not store completions/);
    // Tool calls in an earlier assistant turn, and a user message without content.
    const calls = await d.post("/v1/chat/completions", {
      ...base,
      messages: [
        { role: "user", content: "Hello" },
        {
          role: "assistant",
          content: null,
          tool_calls: [{
            id: "call_1",
            type: "function",
            function: { name: "lookup", arguments: "{}" },
          }],
        },
      ],
    });
    assert.equal(calls.status, 400, JSON.stringify(calls.body));
    assert.equal(calls.body.error.param, "messages.1.tool_calls");
    const empty = await d.post("/v1/chat/completions", {
      ...base,
      messages: [{ role: "user", content: null }],
    });
    assert.equal(empty.status, 400, JSON.stringify(empty.body));
    assert.equal(empty.body.error.param, "messages.0.content");
    // The client's own error carries the name too.
    await assert.rejects(
      d.client.chat.completions.create({
        ...base,
        messages: conversation(""),
        tool_choice: "required",
      }),
      (e) => e instanceof OpenAI.APIError && e.status === 400 && e.param === "tool_choice",
    );
  });
});

Deno.test("F24: /v1/completions ignores user and stream_options without stream, and says so; a greedy seed is named as without effect", async () => {
  await using d = await door();
  const base = { model: "gen", prompt: "Once upon", max_tokens: 6 };
  const plain = await d.post("/v1/completions", base);
  assert.equal(plain.status, 200, JSON.stringify(plain.body));
  assert.equal(plain.body.synapse.ignored_fields, undefined);
  const c = await d.client.completions.create({
    ...base,
    user: "user-42",
    seed: 3,
    stream_options: { include_usage: true },
  });
  assert.equal(c.choices[0]!.text, plain.body.choices[0].text);
  // deno-lint-ignore no-explicit-any
  const synapse = (c as any).synapse;
  assert.deepEqual(synapse.ignored_fields, ["user", "stream_options"]);
  // The seed goes to the sampler; greedy decoding (no temperature) never reads it, and says so.
  assert.equal(synapse.sampling.mode, "greedy");
  assert.deepEqual(synapse.sampling.without_effect, ["seed"]);
  // Chat-only fields are not part of this door: refused by name as before.
  const meta = await d.post("/v1/completions", { ...base, metadata: { a: "b" } });
  assert.equal(meta.status, 400, JSON.stringify(meta.body));
  assert.equal(meta.body.error.param, "metadata");
});

Deno.test("F24: /v1/embeddings accepts metadata and user, the same vectors, disclosed", async () => {
  await using d = await door();
  const input = ["apple pie", "pear tart"];
  const plain = await d.post("/v1/embeddings", { input, model: "embed" });
  assert.equal(plain.status, 200, JSON.stringify(plain.body).slice(0, 400));
  assert.equal(plain.body.synapse.ignored_fields, undefined);
  const native = resultOf(await d.t.syn.call("embed.batch", { texts: input, model: "embed" }));

  const viaClient = await d.client.embeddings.create({
    input,
    model: "embed",
    user: "user-42",
    encoding_format: "float",
    metadata: { session: "s-1" },
  } as OpenAI.EmbeddingCreateParams);
  assert.deepEqual(
    viaClient.data.map((x) => x.embedding),
    native.vectors.map((v: { vector: number[] }) => v.vector),
  );
  // deno-lint-ignore no-explicit-any
  assert.deepEqual((viaClient as any).synapse.ignored_fields, ["metadata", "user"]);

  for (const [field, value] of [["metadata", { k: "v" }], ["user", "user-42"]] as const) {
    const r = await d.post("/v1/embeddings", { input, model: "embed", [field]: value });
    assert.equal(r.status, 200, `${field}: ${JSON.stringify(r.body).slice(0, 400)}`);
    assert.deepEqual(r.body.data, plain.body.data, field);
    assert.deepEqual(r.body.synapse.ignored_fields, [field]);
  }
  const nul = await d.post("/v1/embeddings", { input, model: "embed", metadata: null });
  assert.equal(nul.status, 200);
  assert.equal(nul.body.synapse.ignored_fields, undefined);
  // A malformed metadata, and any other field, are still refused by name.
  const bad = await d.post("/v1/embeddings", { input, metadata: { n: 1 } });
  assert.equal(bad.status, 400, JSON.stringify(bad.body));
  assert.equal(bad.body.error.param, "metadata.n");
  const other = await d.post("/v1/embeddings", { input, input_type: "query" });
  assert.equal(other.status, 400, JSON.stringify(other.body));
  assert.equal(other.body.error.param, "input_type");
});
