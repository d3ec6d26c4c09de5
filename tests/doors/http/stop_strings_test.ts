/**
 * Field report F23 through the real doors: `/v1/completions` and `/v1/chat/completions` with
 * `stop`, streamed and not, on the tiny llama fixture (a real llama worker). For a table of stop
 * lists the joined stream deltas equal the non-streamed text byte for byte, and both are the
 * unstopped greedy text cut before the earliest match of any stop string. A stop matched early
 * with `max_tokens: 512` ends the generation at once: few tokens counted, the lane free, and the
 * next request starts without queueing.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { loadConfig } from "../../../lib/config/loader.ts";
import { serveHttp } from "../../../lib/doors/http/server.ts";
import { nullLog } from "../../../lib/log/log.ts";
import { cutAtStop } from "../../../lib/ops/_stop_strings.ts";
import { createSynapse } from "../../../lib/synapse.ts";
import { watchGenerations } from "../../_generation.ts";
import { MODELS, resultOf } from "../../_helpers.ts";

const GEN = `${MODELS}/synapse-tiny-llama`;

async function served() {
  const dir = await Deno.makeTempDir({ prefix: "synapse-stop-" });
  const env = {
    XDG_DATA_HOME: `${dir}/data`,
    XDG_CONFIG_HOME: `${dir}/config`,
    HOME: dir,
    SYNAPSE_CONFIG_JSON: JSON.stringify({
      certification: "warn",
      grammar_enabled: true,
      preload_models: [{
        engine: "llama",
        model_path: GEN,
        tokenizer_path: `${GEN}/tokenizer.json`,
        task: "generate",
        model_id: "gen",
      }],
    }),
  };
  const { config } = loadConfig({ env, cwd: dir });
  const syn = await createSynapse({ config, env, log: nullLog });
  const server = serveHttp(syn, { log: nullLog });
  const base = `http://127.0.0.1:${server.port}`;
  const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0 });
  return {
    syn,
    base,
    client,
    async [Symbol.asyncDispose]() {
      await server.shutdown();
      await syn.dispose();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

// deno-lint-ignore no-explicit-any
type Any = any;

Deno.test("stop strings: streamed deltas equal the non-streamed text, generation ends at the stop (F23)", async (t) => {
  await using d = await served();
  const { client, syn } = d;
  const PROMPT = "Hello there";
  const N = 20;
  // The fixture's greedy text for the prompt (deterministic), and its tokens' texts.
  const free = resultOf(
    await syn.call("microllm.oneshot", { model: "gen", prompt: PROMPT, max_tokens: N }),
  );
  const whole: string = free.text;
  const tb = syn.registry.resolve("gen", "generate").tokenizer.tokenBytes;
  const pieces = (free.generated_token_ids as number[]).map((id) =>
    new TextDecoder().decode(tb.bytesOf(id))
  );
  assert.equal(free.finish_reason, "max_tokens");
  // Stop strings taken from the text itself, so they really match.
  const tok = (i: number) => pieces[i]!.trim();
  const multi = [...whole].find((c) => new TextEncoder().encode(c).length >= 3)!; // CJK: 3 bytes
  const at = whole.indexOf(multi);
  const spanning = whole.slice(
    whole.indexOf(tok(3)) + tok(3).length - 2,
    whole.indexOf(tok(3)) + tok(3).length + 3,
  );
  const inner = tok(9); // "raw" in the fixture
  const outerStart = whole.indexOf(inner) - 3;
  const outer = whole.slice(outerStart, whole.indexOf(inner) + inner.length + 1);
  const table: { name: string; stop: string[]; maxTokens?: number; chat?: true }[] = [
    { name: "single", stop: [tok(2)] },
    { name: "several", stop: [tok(8), tok(5), "\u0000never"] },
    { name: "one inside another, the outer matches", stop: [inner, outer], chat: true },
    {
      name: "one inside another, the outer fails",
      stop: [inner, outer.slice(0, -1) + "\u0001"],
      chat: true,
    },
    { name: "the outer listed first", stop: [outer, inner] },
    { name: "a stop spanning token boundaries", stop: [spanning] },
    { name: "a stop that never matches", stop: ["\u0000never", "zzzq"] },
    { name: "a stop at the first token", stop: [whole.slice(0, 1)] },
    { name: "multi-byte UTF-8", stop: [multi + whole.slice(at + 1, at + 3)] },
    { name: "inside a multi-byte word", stop: ["é"] },
    {
      name: "open at max_tokens (held, then released)",
      stop: [pieces.slice(0, 2).join("").slice(-1) + "\u0001"],
      maxTokens: 2,
    },
  ];
  for (const row of table) {
    await t.step(row.name, async () => {
      const maxTokens = row.maxTokens ?? N;
      const full = maxTokens === N ? whole : resultOf(
        await syn.call("microllm.oneshot", { model: "gen", prompt: PROMPT, max_tokens: maxTokens }),
      ).text;
      const cut = cutAtStop(full, row.stop);
      const expected = cut === undefined ? full : full.slice(0, cut.at);
      if (row.name.includes("never") || row.name.includes("open")) assert.equal(cut, undefined);
      else {assert.ok(
          cut !== undefined,
          `${JSON.stringify(row.stop)} matches ${JSON.stringify(full)}`,
        );}
      // A stop that matches runs under a budget far past the match, so "the generation ended at
      // the stop" is told apart from "it ran out" whatever the machine's load: the few tokens the
      // worker makes before the cancel lands are never 200 (the greedy text of 256 tokens starts
      // with that of N, so the expected cut is the same).
      const budget = cut !== undefined && row.maxTokens === undefined ? 256 : maxTokens;
      const req = { model: "gen", prompt: PROMPT, max_tokens: budget, stop: row.stop };
      const c = await client.completions.create(req);
      assert.equal(c.choices[0]!.text, expected, JSON.stringify(row.stop));
      assert.equal(c.choices[0]!.finish_reason, cut === undefined ? "length" : "stop");
      assert.equal((c as Any).synapse.stop_matched, cut?.stop);
      assert.equal(
        (c as Any).synapse.finish_reason,
        cut === undefined ? "max_tokens" : "stop_string",
      );
      assert.equal(c.usage!.completion_tokens, (c as Any).synapse.n_gen);
      let streamed = "";
      let finish: string | null = null;
      let usage: Any;
      for await (
        const chunk of await client.completions.create({
          ...req,
          stream: true,
          stream_options: { include_usage: true },
        })
      ) {
        streamed += chunk.choices[0]?.text ?? "";
        finish = chunk.choices[0]?.finish_reason ?? finish;
        usage = chunk.usage ?? usage;
      }
      assert.equal(streamed, c.choices[0]!.text, "joined deltas = the non-streamed text");
      assert.equal(finish, c.choices[0]!.finish_reason);
      assert.ok(usage.completion_tokens <= budget);
      if (cut !== undefined) {
        // The generation ended once the cut was decided, well before max_tokens.
        assert.ok(c.usage!.completion_tokens < budget, `${c.usage!.completion_tokens} tokens`);
        assert.ok(usage.completion_tokens < budget, `streamed: ${usage.completion_tokens} tokens`);
      }
      if (row.chat !== true) return;
      // The chat door, streamed and not, gives the same text as each other.
      const chatReq = {
        model: "gen",
        messages: [{ role: "user" as const, content: PROMPT }],
        max_tokens: maxTokens,
        stop: row.stop,
      };
      const chat = await client.chat.completions.create(chatReq);
      let chatStreamed = "";
      for await (
        const chunk of await client.chat.completions.create({ ...chatReq, stream: true })
      ) {
        chatStreamed += chunk.choices[0]?.delta?.content ?? "";
      }
      assert.equal(chatStreamed, chat.choices[0]!.message.content);
    });
  }

  await t.step(
    "a stop matched at token 2 of 512 frees the lane at once; usage counts what ran",
    async () => {
      const lane = syn.registry.resolve("gen", "generate").interactive;
      const watch = watchGenerations(syn);
      for (const stream of [false, true]) {
        const req = { model: "gen", prompt: PROMPT, max_tokens: 512, stop: [tok(1)] };
        let text = "";
        let tokens = 0;
        if (!stream) {
          const c = await client.completions.create(req);
          text = c.choices[0]!.text;
          tokens = c.usage!.completion_tokens;
          assert.equal(c.choices[0]!.finish_reason, "stop");
        } else {
          for await (
            const chunk of await client.completions.create({
              ...req,
              stream: true,
              stream_options: { include_usage: true },
            })
          ) {
            text += chunk.choices[0]?.text ?? "";
            tokens = chunk.usage?.completion_tokens ?? tokens;
          }
        }
        assert.equal(text, whole.slice(0, whole.indexOf(tok(1))));
        // The worker was told to stop: far fewer than 512 tokens ran (2 up to the match, plus
        // what the worker made before the CANCEL reached it).
        assert.ok(tokens >= 2 && tokens < 64, `${tokens} tokens generated`);
        assert.equal(lane.activeRequests, 0, "the lane is free once the answer is out");
        // The next caller starts at once: a one-second queue limit is met.
        const next = await syn.call("microllm.oneshot", {
          model: "gen",
          prompt: PROMPT,
          max_tokens: 4,
          max_queue_ms: 1000,
          deadline_ms: 60_000,
        });
        assert.equal(resultOf(next).n_gen, 4);
      }
      const ended = await watch.ended;
      assert.equal(ended.finishReason, "cancelled", "the worker got CANCEL");
    },
  );

  await t.step("microllm.oneshot takes stop too, and refuses it with a grammar", async () => {
    const r = resultOf(
      await syn.call("microllm.oneshot", {
        model: "gen",
        prompt: PROMPT,
        max_tokens: 512,
        stop: [tok(2)],
      }),
    );
    assert.equal(r.text, whole.slice(0, whole.indexOf(tok(2))));
    assert.equal(r.finish_reason, "stop_string");
    assert.equal(r.stop_matched, tok(2));
    assert.ok(r.n_gen < 64 && r.generated_token_ids.length === r.n_gen);
    const out = await syn.call("microllm.oneshot", {
      model: "gen",
      prompt: PROMPT,
      max_tokens: 4,
      grammar: 'root ::= "a"',
      stop: ["a"],
    });
    assert.ok(out.kind !== "result");
    assert.equal(out.error.code, "invalid_request");
    assert.equal(out.error.details?.field, "stop");
  });
});
