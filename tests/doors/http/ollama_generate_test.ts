/**
 * Ollama's generation API with the official `ollama` npm client, unchanged: `generate` and `chat`
 * (streamed and not; the streamed pieces join to the non-streamed text, which is what
 * `microllm.oneshot` answers for the same input), `format` (`"json"` and a schema: the answer
 * parses), `options` (mapped, listed when ignored or unknown, refused by name when they would
 * change a greedy answer; `num_ctx` below the context refused by name), the warm-up and unload
 * calls, `show` and `ps`, and 404 / 400 answers the client reads as `ResponseError`s with the
 * message.
 */
import assert from "node:assert/strict";
import { Ollama } from "ollama";
import { loadConfig } from "../../../lib/config/loader.ts";
import { serveHttp } from "../../../lib/doors/http/server.ts";
import { humanNumber, mapOptions } from "../../../lib/doors/http/ollama_generate.ts";
import { nullLog } from "../../../lib/log/log.ts";
import type { LogSink } from "../../../lib/log/log.ts";
import { fallbackPrompt } from "../../../lib/ops/_chat_template.ts";
import { createSynapse } from "../../../lib/synapse.ts";
import type { Synapse } from "../../../lib/synapse.ts";
import { parkedWorker, watchGenerations } from "../../_generation.ts";
import { MODELS, preload, resultOf } from "../../_helpers.ts";
import { ggufWithChatTemplate } from "../../_gguf_chat_template.ts";

const GEN = `${MODELS}/synapse-tiny-llama`;
const EMBED = `${MODELS}/synapse-tiny-embed`;

function genEntry(modelId: string, modelPath = `${GEN}/model.gguf`) {
  return {
    engine: "llama",
    model_path: modelPath,
    tokenizer_path: `${GEN}/tokenizer.json`,
    task: "generate",
    model_id: modelId,
  };
}

/** A template in the shape of the usual ones, so the prompt shows which roles it got. */
const TEMPLATE = "{{ bos_token }}{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n" +
  "{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}";

interface Door extends AsyncDisposable {
  syn: Synapse;
  base: string;
  ollama: Ollama;
}

/**
 * One served instance: `gen` (no chat template), `chat` (with one) and `embed` (ONNX), or the
 * models and worker flags given.
 */
async function door(
  more: { models?: unknown[]; deadlineMs?: number; llamaWorkerArgs?: string[]; log?: LogSink } = {},
): Promise<Door> {
  const dir = await Deno.makeTempDir({ prefix: "synapse-ollama-gen-" });
  await ggufWithChatTemplate(`${GEN}/model.gguf`, `${dir}/chat.gguf`, TEMPLATE);
  const env = {
    XDG_DATA_HOME: `${dir}/data`,
    XDG_CONFIG_HOME: `${dir}/config`,
    HOME: dir,
    SYNAPSE_CONFIG_JSON: JSON.stringify({
      certification: "warn",
      grammar_enabled: true,
      preload_models: more.models ?? [
        genEntry("gen"),
        genEntry("chat", `${dir}/chat.gguf`),
        preload(EMBED, "embed"),
      ],
      // Only the mid-stream failure is about the deadline (a loaded 2-core machine is slow).
      inline: { deadline_ms: more.deadlineMs ?? 600_000 },
    }),
  };
  const { config } = loadConfig({ env, cwd: dir });
  const syn = await createSynapse({
    config,
    env,
    log: more.log ?? nullLog,
    ...(more.llamaWorkerArgs ? { llamaWorkerArgs: more.llamaWorkerArgs } : {}),
  });
  const server = serveHttp(syn, { log: nullLog });
  const base = `http://127.0.0.1:${server.port}`;
  return {
    syn,
    base,
    ollama: new Ollama({ host: base }),
    async [Symbol.asyncDispose]() {
      await server.shutdown();
      await syn.dispose();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

/** The ResponseError the client throws for a refused call, with its status and message. */
async function refused(p: Promise<unknown>, status: number, message: RegExp): Promise<void> {
  await assert.rejects(p, (err: Error & { status_code?: number }) => {
    assert.equal(err.name, "ResponseError", String(err));
    assert.equal(err.status_code, status, err.message);
    assert.match(err.message, message);
    return true;
  });
}

/** POSTs a JSON body; the response's status, content type and the body's lines parsed. */
async function post(base: string, path: string, body: unknown) {
  const res = await fetch(`${base}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  // deno-lint-ignore no-explicit-any
  const lines: any[] = text.split("\n").filter((l) => l !== "").map((l) => JSON.parse(l));
  return { status: res.status, type: res.headers.get("content-type") ?? "", lines };
}

Deno.test("the official ollama client generates and chats against Synapse unchanged", async (t) => {
  await using d = await door();
  const { ollama, syn } = d;
  const oneshot = async (params: Record<string, unknown>) =>
    resultOf(await syn.call("microllm.oneshot", params));

  await t.step("generate (raw): microllm.oneshot's text; streamed pieces join to it", async () => {
    const r = await oneshot({ model: "gen", prompt: "Once upon", max_tokens: 12 });
    const g = await ollama.generate({
      model: "gen",
      prompt: "Once upon",
      raw: true,
      options: { num_predict: 12 },
    });
    assert.equal(g.response, r.text);
    assert.equal(g.done, true);
    assert.equal(g.done_reason, "length");
    assert.equal(g.model, "gen");
    assert.equal(g.prompt_eval_count, r.n_prompt);
    assert.equal(g.eval_count, 12);
    for (const k of ["total_duration", "prompt_eval_duration", "eval_duration"] as const) {
      assert.ok(Number.isInteger(g[k]) && g[k] >= 0, `${k} ${g[k]}`);
    }
    assert.equal(g.load_duration, 0);
    // deno-lint-ignore no-explicit-any
    const synapse = (g as any).synapse;
    assert.equal(synapse.fingerprint, r.fingerprint);
    assert.equal(synapse.model_id, "gen");
    assert.equal(synapse.finish_reason, "max_tokens");
    const pieces: string[] = [];
    let last: Record<string, unknown> | undefined;
    for await (
      const part of await ollama.generate({
        model: "gen:latest",
        prompt: "Once upon",
        raw: true,
        stream: true,
        options: { num_predict: 12 },
      })
    ) {
      if (part.done) last = part as unknown as Record<string, unknown>;
      else pieces.push(part.response ?? "");
    }
    assert.ok(pieces.length > 1, `streamed in ${pieces.length} piece(s)`);
    assert.equal(pieces.join(""), r.text);
    assert.equal(last?.response, "");
    assert.equal(last?.done_reason, "length");
    assert.equal(last?.model, "gen:latest");
    assert.equal((last?.synapse as Record<string, unknown>).streamed, "tokens");
  });

  await t.step("generate renders [system, user] through the model's template", async () => {
    const messages = [
      { role: "system", content: "Be brief." },
      { role: "user", content: "Hello there" },
    ];
    const r = await oneshot({ model: "chat", messages, max_tokens: 8 });
    const g = await ollama.generate({
      model: "chat",
      system: "Be brief.",
      prompt: "Hello there",
      options: { num_predict: 8 },
    });
    assert.equal(g.response, r.text);
    // deno-lint-ignore no-explicit-any
    assert.equal((g as any).synapse.chat_template, "gguf");
    // Without a template: Synapse's fallback, and the answer says so.
    const f = await ollama.generate({ model: "gen", prompt: "Hello", options: { num_predict: 6 } });
    const fr = await oneshot({
      model: "gen",
      prompt: fallbackPrompt([{ role: "user", content: "Hello" }]),
      max_tokens: 6,
    });
    assert.equal(f.response, fr.text);
    // deno-lint-ignore no-explicit-any
    assert.equal((f as any).synapse.chat_template, "fallback");
  });

  await t.step("chat: streamed and not, the same text as microllm.oneshot", async () => {
    const messages = [
      { role: "system", content: "You are terse." },
      { role: "user", content: "Say hi" },
    ];
    const r = await oneshot({ model: "chat", messages, max_tokens: 10 });
    const c = await ollama.chat({ model: "chat", messages, options: { num_predict: 10 } });
    assert.deepEqual(c.message, { role: "assistant", content: r.text });
    assert.equal(c.done_reason, "length");
    assert.equal(c.eval_count, 10);
    const pieces: string[] = [];
    let final: { done_reason?: string; message?: { content: string } } | undefined;
    for await (
      const part of await ollama.chat({
        model: "chat",
        messages,
        stream: true,
        options: { num_predict: 10 },
      })
    ) {
      assert.equal(part.message.role, "assistant");
      if (part.done) final = part;
      else pieces.push(part.message.content);
    }
    assert.equal(pieces.join(""), r.text);
    assert.equal(final?.done_reason, "length");
    assert.equal(final?.message?.content, "");
    // developer is the system role to the template.
    const dev = await ollama.chat({
      model: "chat",
      messages: [{ role: "developer", content: "You are terse." }, messages[1]!],
      options: { num_predict: 10 },
    });
    assert.equal(dev.message.content, r.text);
  });

  await t.step("format json and a JSON schema: the answers parse", async () => {
    const g = await ollama.generate({
      model: "gen",
      prompt: "JSON:",
      raw: true,
      format: "json",
      options: { num_predict: 64 },
    });
    // deno-lint-ignore no-explicit-any
    const synapse = (g as any).synapse;
    assert.equal(synapse.json_complete, true, String(g.response));
    assert.equal(g.done_reason, "stop");
    const v = JSON.parse(g.response ?? "");
    assert.ok(typeof v === "object" && v !== null && !Array.isArray(v));
    const schema = {
      type: "object",
      properties: { ok: { type: "boolean" } },
      required: ["ok"],
      additionalProperties: false,
    };
    const c = await ollama.chat({
      model: "chat",
      messages: [{ role: "user", content: "Answer in JSON" }],
      format: schema,
      options: { num_predict: 64 },
    });
    const o = JSON.parse(c.message.content);
    assert.deepEqual(Object.keys(o), ["ok"]);
    assert.equal(typeof o.ok, "boolean");
    // The streamed constrained answer joins to the same JSON.
    const pieces: string[] = [];
    for await (
      const part of await ollama.chat({
        model: "chat",
        messages: [{ role: "user", content: "Answer in JSON" }],
        format: schema,
        stream: true,
        options: { num_predict: 64 },
      })
    ) {
      if (!part.done) pieces.push(part.message.content);
    }
    assert.equal(pieces.join(""), c.message.content);
  });

  await t.step("options: runner and greedy-neutral ones listed, unknown ones listed", async () => {
    const plain = await ollama.generate({
      model: "gen",
      prompt: "Once upon",
      raw: true,
      options: { num_predict: 8 },
    });
    const g = await ollama.generate({
      model: "gen",
      prompt: "Once upon",
      raw: true,
      keep_alive: "5m",
      options: {
        num_predict: 8,
        num_thread: 8,
        num_gpu: 1,
        use_mmap: true,
        top_k: 40,
        top_p: 0.9,
        seed: 7,
        temperature: 0,
        num_ctx: 4096,
        // deno-lint-ignore no-explicit-any
        ...({ not_an_option: 1 } as any),
      },
    });
    assert.equal(g.response, plain.response);
    // deno-lint-ignore no-explicit-any
    const synapse = (g as any).synapse;
    assert.deepEqual(synapse.ignored_fields, ["keep_alive"]);
    // Runner options, then the sampler options greedy decoding did not read.
    assert.deepEqual(
      synapse.ignored_options,
      ["num_thread", "num_gpu", "use_mmap", "top_k", "top_p", "seed"],
    );
    assert.equal(synapse.sampling.mode, "greedy");
    assert.deepEqual(synapse.unknown_options, ["not_an_option"]);
    // stop strings cut the text.
    const text = plain.response ?? "";
    const words = text.trim().split(/\s+/);
    if (words.length > 1) {
      const stop = words[1]!;
      const s = await ollama.generate({
        model: "gen",
        prompt: "Once upon",
        raw: true,
        options: { num_predict: 8, stop: [stop] },
      });
      assert.equal(s.response, text.slice(0, text.indexOf(stop)));
      assert.equal(s.done_reason, "stop");
    }
  });

  await t.step(
    "sampling: the same seed gives the same text; the answer reports its seed",
    async () => {
      const options = { temperature: 0.8, seed: 7, num_predict: 16 };
      const a = await ollama.generate({ model: "gen", prompt: "Once upon", raw: true, options });
      const b = await ollama.generate({ model: "gen", prompt: "Once upon", raw: true, options });
      assert.equal(a.response, b.response);
      // deno-lint-ignore no-explicit-any
      const sampling = (a as any).synapse.sampling;
      assert.equal(sampling.mode, "sampled");
      assert.equal(sampling.seed, 7);
      assert.equal(sampling.seed_source, "request");
      assert.equal(sampling.temperature, 0.8);
      // The op's own answer for the same params is the same text.
      const r = await oneshot({
        model: "gen",
        prompt: "Once upon",
        max_tokens: 16,
        temperature: 0.8,
        seed: 7,
      });
      assert.equal(a.response, r.text);
      // Streamed, the pieces join to the same sampled text.
      const pieces: string[] = [];
      for await (
        const part of await ollama.generate({
          model: "gen",
          prompt: "Once upon",
          raw: true,
          stream: true,
          options,
        })
      ) {
        if (!part.done) pieces.push(part.response ?? "");
      }
      assert.equal(pieces.join(""), a.response);
      // Ollama's seed -1 is "pick one": the service picks it, reports it, and it replays.
      const c = await ollama.chat({
        model: "chat",
        messages: [{ role: "user", content: "Hi" }],
        options: { temperature: 0.9, seed: -1, num_predict: 12 },
      });
      // deno-lint-ignore no-explicit-any
      const picked = (c as any).synapse.sampling;
      assert.equal(picked.seed_source, "service");
      assert.ok(Number.isInteger(picked.seed));
      const again = await ollama.chat({
        model: "chat",
        messages: [{ role: "user", content: "Hi" }],
        options: { temperature: 0.9, seed: picked.seed, num_predict: 12 },
      });
      assert.equal(again.message.content, c.message.content);
      // Greedy stays the default: no temperature is microllm.oneshot's greedy answer.
      const g = await ollama.generate({
        model: "gen",
        prompt: "Once upon",
        raw: true,
        options: { num_predict: 16, seed: 7 },
      });
      const greedy = await oneshot({ model: "gen", prompt: "Once upon", max_tokens: 16 });
      assert.equal(g.response, greedy.text);
      // deno-lint-ignore no-explicit-any
      assert.equal((g as any).synapse.sampling.mode, "greedy");
    },
  );

  await t.step("a sampler Synapse lacks, or a value out of range, is refused by name", async () => {
    await refused(
      ollama.generate({
        model: "gen",
        prompt: "x",
        options: { temperature: 0.8, typical_p: 0.5 },
      }),
      400,
      /options\.typical_p 0\.5/,
    );
    const r = await post(d.base, "/api/chat", {
      model: "chat",
      messages: [{ role: "user", content: "x" }],
      options: { mirostat: 2 },
    });
    assert.equal(r.status, 400);
    assert.equal(r.lines[0].field, "options.mirostat");
    assert.equal(r.lines[0].code, "invalid_request");
    const hot = await post(d.base, "/api/generate", {
      model: "gen",
      prompt: "x",
      options: { temperature: 5 },
    });
    assert.equal(hot.status, 400);
    assert.equal(hot.lines[0].field, "options.temperature", JSON.stringify(hot.lines[0]));
  });

  await t.step(
    "num_ctx below the context: a call that does not fit is refused by name",
    async () => {
      const ok = await ollama.generate({
        model: "gen",
        prompt: "Once upon",
        raw: true,
        options: { num_predict: 8, num_ctx: 64 },
      });
      assert.equal(ok.eval_count, 8);
      const r = await post(d.base, "/api/generate", {
        model: "gen",
        prompt: "Once upon a time",
        raw: true,
        stream: false,
        options: { num_predict: 30, num_ctx: 20 },
      });
      assert.equal(r.status, 400);
      assert.equal(r.lines[0].field, "options.num_ctx");
      assert.match(r.lines[0].error, /exceed options\.num_ctx 20/);
      await refused(
        ollama.chat({
          model: "chat",
          messages: [{ role: "user", content: "Hello" }],
          options: { num_predict: 100, num_ctx: 16 },
        }),
        400,
        /options\.num_ctx 16/,
      );
    },
  );

  await t.step("num_predict -1 asks for the service's limit", async () => {
    const r = await post(d.base, "/api/generate", {
      model: "gen",
      prompt: "Hi",
      raw: true,
      stream: false,
      options: { num_predict: -1, num_ctx: 32 },
    });
    // 512 tokens (microllm_max_tokens) do not fit 32: the refusal shows the limit was asked for.
    assert.equal(r.status, 400);
    assert.match(r.lines[0].error, /max_tokens 512 exceed options\.num_ctx 32/);
  });
});

Deno.test("Ollama's warm-up, unload and refusals, as its client reads them", async (t) => {
  await using d = await door();
  const { ollama } = d;

  await t.step("{model} alone loads: done_reason load, nothing generated", async () => {
    const g = await ollama.generate({ model: "gen", prompt: "" });
    assert.equal(g.done, true);
    assert.equal(g.done_reason, "load");
    assert.equal(g.response, "");
    const c = await ollama.chat({ model: "chat:latest", messages: [] });
    assert.equal(c.done_reason, "load");
    assert.deepEqual(c.message, { role: "assistant", content: "" });
    assert.equal(c.model, "chat:latest");
    const raw = await post(d.base, "/api/generate", { model: "gen" });
    assert.equal(raw.status, 200);
    assert.match(raw.type, /application\/json/);
    assert.equal(raw.lines.length, 1);
    assert.equal(raw.lines[0].done_reason, "load");
    assert.equal(raw.lines[0].synapse.model_id, "gen");
  });

  await t.step("keep_alive 0 with no prompt: answered unload, nothing unloaded", async () => {
    const g = await ollama.generate({ model: "gen", prompt: "", keep_alive: 0 });
    assert.equal(g.done_reason, "unload");
    // deno-lint-ignore no-explicit-any
    assert.equal((g as any).synapse.unloaded, false);
    const ps = await ollama.ps();
    assert.ok(ps.models.some((m) => m.name === "gen"));
  });

  await t.step("an unknown model is 404 'model ... not found', streamed or not", async () => {
    await refused(ollama.generate({ model: "nope", prompt: "x" }), 404, /^model 'nope' not found$/);
    await refused(
      ollama.chat({ model: "nope", messages: [{ role: "user", content: "x" }], stream: true }),
      404,
      /^model 'nope' not found$/,
    );
    await refused(ollama.generate({ model: "nope", prompt: "" }), 404, /model 'nope' not found/);
    await refused(ollama.show({ model: "nope" }), 404, /model 'nope' not found/);
    const r = await post(d.base, "/api/chat", { model: "nope", messages: [] });
    assert.equal(r.status, 404);
    assert.equal(r.lines[0].code, "unknown_model");
    assert.match(r.lines[0].message, /nope/);
  });

  await t.step("a warm-up of a model of another task is refused", async () => {
    const r = await post(d.base, "/api/generate", { model: "embed" });
    assert.equal(r.status, 400);
    assert.equal(r.lines[0].code, "invalid_request");
  });

  await t.step("what Synapse does not do is refused by name", async () => {
    const cases: [string, Record<string, unknown>, string][] = [
      ["/api/generate", { model: "gen", prompt: "x", suffix: "y" }, "suffix"],
      ["/api/generate", { model: "gen", prompt: "x", template: "{{ .Prompt }}" }, "template"],
      ["/api/generate", { model: "gen", prompt: "x", context: [1, 2] }, "context"],
      ["/api/generate", { model: "gen", prompt: "x", images: ["aGk="] }, "images"],
      ["/api/generate", { model: "gen", prompt: "x", raw: true, system: "s" }, "system"],
      ["/api/generate", { model: "gen", prompt: "x", think: true }, "think"],
      ["/api/generate", { model: "gen", prompt: "x", format: "yaml" }, "format"],
      [
        "/api/generate",
        { model: "gen", prompt: "x", options: { num_predict: 0 } },
        "options.num_predict",
      ],
      ["/api/generate", { model: "gen", prompt: "x", options: { top_k: "a" } }, "options.top_k"],
      ["/api/generate", { model: "gen", prompt: "x", unknown_field: 1 }, "unknown_field"],
      [
        "/api/chat",
        { model: "chat", messages: [{ role: "tool", content: "42" }] },
        "messages.0.role",
      ],
      [
        "/api/chat",
        {
          model: "chat",
          messages: [{ role: "assistant", content: "", tool_calls: [{ function: {} }] }],
        },
        "messages.0.tool_calls",
      ],
      [
        "/api/chat",
        { model: "chat", messages: [{ role: "user", content: "x" }], tools: [{ type: "f" }] },
        "tools",
      ],
      [
        "/api/chat",
        { model: "chat", messages: [{ role: "user", content: "x", images: ["aGk="] }] },
        "messages.0.images",
      ],
      [
        "/api/chat",
        {
          model: "chat",
          messages: [{ role: "user", content: "x" }],
          format: "json",
          options: { stop: ["}"] },
        },
        "options.stop",
      ],
    ];
    for (const [path, body, field] of cases) {
      const r = await post(d.base, path, body);
      assert.equal(r.status, 400, `${JSON.stringify(body)}: ${JSON.stringify(r.lines)}`);
      assert.equal(r.lines[0].field, field, JSON.stringify(r.lines[0]));
      assert.equal(typeof r.lines[0].error, "string");
    }
    // The client shows the message of a 400.
    await refused(
      ollama.generate({ model: "gen", prompt: "x", think: true }),
      400,
      /Cannot honour think true/,
    );
  });

  await t.step("a prompt too long for the context is refused before any piece", async () => {
    const r = await post(d.base, "/api/generate", {
      model: "gen",
      prompt: "word ".repeat(3000),
      raw: true,
      options: { num_predict: 8 },
    });
    assert.equal(r.status, 422);
    assert.equal(r.lines[0].code, "sequence_too_long");
    assert.equal(r.lines[0].field, "prompt");
    assert.match(r.type, /application\/json/);
    // A prompt is never cut, so the answer does not advise truncate (which is refused here).
    assert.match(r.lines[0].error, /takes prompts of at most \d+ tokens/);
    assert.doesNotMatch(r.lines[0].error, /truncate/);
  });
});

Deno.test("ollama show and ps describe the models from their files", async (t) => {
  await using d = await door();
  const { ollama } = d;

  await t.step("show: a GGUF model's template, details, model_info and capabilities", async () => {
    const s = await ollama.show({ model: "chat" });
    assert.equal(s.template, TEMPLATE);
    assert.deepEqual(s.capabilities, ["completion"]);
    assert.equal(s.details.format, "gguf");
    assert.equal(s.details.family, "llama");
    assert.deepEqual(s.details.families, ["llama"]);
    assert.equal(s.details.quantization_level, "F32");
    assert.equal(s.details.parameter_size, humanNumber(4170048));
    assert.equal(s.details.parameter_size, "4.17M");
    const info = s.model_info as unknown as Record<string, unknown>;
    assert.equal(info["general.architecture"], "llama");
    assert.equal(info["llama.context_length"], 2048);
    assert.equal(info["llama.embedding_length"], 64);
    // Long arrays are cut, as Ollama cuts them without verbose; the template is `template`.
    assert.deepEqual(info["tokenizer.ggml.tokens"], []);
    assert.equal(info["tokenizer.chat_template"], undefined);
    assert.match(s.parameters, /^num_ctx\s+2048$/);
    assert.match(s.modelfile, /^FROM chat$/m);
    // `verbose` is Ollama's own field; this client version does not type it.
    const v = await ollama.show(
      { model: "gen:latest", verbose: true } as unknown as Parameters<Ollama["show"]>[0],
    );
    assert.equal(v.template, "");
    const vinfo = v.model_info as unknown as Record<string, unknown>;
    assert.equal((vinfo["tokenizer.ggml.tokens"] as string[]).length, 32000);
    // deno-lint-ignore no-explicit-any
    const tensors = (v as any).tensors as { name: string; type: string; shape: number[] }[];
    assert.ok(tensors.length > 0);
    const total = tensors.reduce((a, t) => a + t.shape.reduce((x, y) => x * y, 1), 0);
    assert.equal(total, 4170048);
  });

  await t.step("show: an ONNX embedding model answers with capabilities embedding", async () => {
    const s = await ollama.show({ model: "embed" });
    assert.deepEqual(s.capabilities, ["embedding"]);
    assert.equal(s.details.format, "onnx");
    const info = s.model_info as unknown as Record<string, unknown>;
    const arch = info["general.architecture"] as string;
    assert.equal(typeof arch, "string");
    assert.equal(typeof info[`${arch}.embedding_length`], "number");
    // The older `name` field names the model too.
    const r = await post(d.base, "/api/show", { name: "embed" });
    assert.equal(r.status, 200);
    assert.deepEqual(r.lines[0].capabilities, ["embedding"]);
  });

  await t.step("ps: the loaded models with sizes and an expiry of forever", async () => {
    const ps = await ollama.ps();
    const names = ps.models.map((m) => m.name).sort();
    assert.deepEqual(names, ["chat", "embed", "gen"]);
    const gen = ps.models.find((m) => m.name === "gen")!;
    assert.equal(gen.size, (await Deno.stat(`${GEN}/model.gguf`)).size);
    assert.equal(gen.size_vram, 0);
    assert.match(gen.digest, /^[0-9a-f]{64}$/);
    assert.ok(new Date(gen.expires_at).getUTCFullYear() > 2200, String(gen.expires_at));
    assert.equal(gen.details.format, "gguf");
  });
});

Deno.test("mapOptions() maps num_predict, stop and num_ctx, and sorts the rest", () => {
  const m = mapOptions({
    num_predict: 5,
    stop: ["\n", ""],
    num_ctx: 128,
    num_batch: 512,
    typical_p: 0.7,
    frobnicate: true,
    penalize_newline: true,
    main_gpu: null,
  });
  assert.equal(m.maxTokens, 5);
  assert.deepEqual(m.params, { stop: ["\n"], max_context_tokens: 128 });
  assert.deepEqual(m.ignored, ["num_batch", "typical_p", "penalize_newline"]);
  assert.deepEqual(m.unknown, ["frobnicate"]);
  assert.equal(mapOptions({ num_predict: -1 }).maxTokens, undefined);
  assert.equal(mapOptions({ num_predict: -2 }).maxTokens, undefined);
  // Sampling options go to microllm.oneshot under their names; Ollama's seed -1 is none.
  const sampled = mapOptions({ temperature: 0.5, top_k: 20, seed: -1, repeat_penalty: 1.1 });
  assert.deepEqual(sampled.params, { temperature: 0.5, top_k: 20, repeat_penalty: 1.1 });
  assert.throws(() => mapOptions({ temperature: 0.5, typical_p: 0.7 }), /options\.typical_p/);
  assert.throws(() => mapOptions({ mirostat: 1 }), /options\.mirostat/);
  assert.deepEqual(mapOptions({ temperature: 0.5, tfs_z: 1 }).ignored, ["tfs_z"]);
  assert.throws(() => mapOptions({ num_ctx: 1.5 }), /options\.num_ctx: it must be an integer/);
  assert.deepEqual(humanNumber(8_000_000_000), "8B");
  assert.deepEqual(humanNumber(1_500_000_000), "1.5B");
  assert.deepEqual(humanNumber(999), "999");
});

/** Reads NDJSON lines from a response body until `until` says stop (or the body ends). */
async function readLines(
  reader: ReadableStreamDefaultReader<string>,
  // deno-lint-ignore no-explicit-any
  until: (lines: any[]) => boolean,
  // deno-lint-ignore no-explicit-any
  lines: any[] = [],
  state = { buf: "" },
  // deno-lint-ignore no-explicit-any
): Promise<{ lines: any[]; ended: boolean }> {
  while (!until(lines)) {
    const { value, done } = await reader.read();
    if (done) return { lines, ended: true };
    state.buf += value;
    let cut: number;
    while ((cut = state.buf.indexOf("\n")) >= 0) {
      lines.push(JSON.parse(state.buf.slice(0, cut)));
      state.buf = state.buf.slice(cut + 1);
    }
  }
  return { lines, ended: false };
}

Deno.test("NDJSON arrives while the generation runs; a client that goes away cancels it; a failure after the first piece is a last {error} line", async (t) => {
  // Each worker generates 3 tokens, then waits for its CANCEL: the generation cannot end before
  // the client hangs up (or the deadline passes), so what the client reads was sent while it ran.
  const worker = parkedWorker();
  await using d = await door({
    models: [genEntry("gen"), genEntry("gen2")],
    llamaWorkerArgs: ["--test-wait-cancel-after", "3"],
    log: worker.log,
    // Generous for 3 tokens of a tiny model; it ends the held generation of the second step.
    deadlineMs: 20_000,
  });
  const whole = resultOf(
    await d.syn.call("microllm.oneshot", { model: "gen", prompt: "hi", max_tokens: 3 }),
  );

  await t.step("the client goes away: the generation is cancelled, the lane freed", async () => {
    const watch = watchGenerations(d.syn);
    let ended = false;
    void watch.ended.then(() => ended = true, () => ended = true);
    const abort = new AbortController();
    const res = await fetch(`${d.base}/api/generate`, {
      method: "POST",
      body: JSON.stringify({ model: "gen", prompt: "hi", raw: true }),
      signal: abort.signal,
    });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get("content-type"), "application/x-ndjson");
    const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
    const text = (lines: { response: string }[]) => lines.map((l) => l.response).join("");
    const { lines } = await readLines(reader, (ls) => text(ls) === whole.text);
    for (const l of lines) {
      assert.equal(l.done, false);
      assert.equal(l.model, "gen");
      assert.equal(typeof l.created_at, "string");
    }
    await worker.parked;
    assert.equal(ended, false, "text arrived while the generation was held");
    abort.abort();
    await assert.rejects(reader.read());
    const out = await watch.ended;
    assert.equal(out.finishReason, "cancelled");
    assert.equal(out.generatedIds.length, 3);
    const next = await d.ollama.generate({
      model: "gen",
      prompt: "hi",
      raw: true,
      options: { num_predict: 4 },
    });
    assert.equal(next.eval_count, 4);
  });

  await t.step("the deadline passes mid-stream: a last {error} line, no done line", async () => {
    const res = await fetch(`${d.base}/api/chat`, {
      method: "POST",
      body: JSON.stringify({ model: "gen2", messages: [{ role: "user", content: "hi" }] }),
    });
    assert.equal(res.status, 200);
    const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
    const { lines, ended } = await readLines(reader, () => false);
    assert.equal(ended, true);
    const last = lines.at(-1);
    assert.ok(lines.length >= 2, JSON.stringify(lines));
    assert.match(last.error, /deadline/i, JSON.stringify(last));
    assert.ok(lines.slice(0, -1).every((l) => l.done === false && l.message.role === "assistant"));
    assert.ok(!lines.some((l) => l.done === true));
  });
});
