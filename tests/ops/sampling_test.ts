/**
 * microllm.oneshot's sampling params on the real llama worker (docs/generation.md "Sampling"):
 * greedy by default and unchanged, a sampled answer reproducible from its seed (sent or
 * reported), the same ids node-llama-cpp samples directly with the same values, grammars still
 * constraining sampled output, and out-of-range values refused by name.
 */
import assert from "node:assert/strict";
import { getLlama, LlamaLogLevel, type Token } from "node-llama-cpp";
import type { LlamaEngine } from "../../lib/engines/llama/llama_engine.ts";
import { loadConfig } from "../../lib/config/loader.ts";
import { nullLog } from "../../lib/log/log.ts";
import { resolveSampling, SEED_MAX } from "../../lib/ops/microllm.ts";
import { createSynapse } from "../../lib/synapse.ts";
import { channelError, MODELS, resultOf } from "../_helpers.ts";
import type { TestSynapse } from "../_helpers.ts";

const GEN = `${MODELS}/synapse-tiny-llama`;

async function start(overrides: Record<string, unknown> = {}): Promise<TestSynapse> {
  const dir = await Deno.makeTempDir({ prefix: "synapse-sampling-" });
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
        pooling: "mean",
        normalize: true,
        max_tokens: 512,
      }],
      ...overrides,
    }),
  };
  const { config } = loadConfig({ env, cwd: dir });
  const syn = await createSynapse({ config, env, log: nullLog });
  return {
    syn,
    dir,
    async [Symbol.asyncDispose]() {
      await syn.dispose();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

// deno-lint-ignore no-explicit-any
async function generate(s: TestSynapse, params: Record<string, unknown>): Promise<any> {
  return resultOf(
    await s.syn.call("microllm.oneshot", {
      model: "gen",
      prompt: "Once upon a time",
      max_tokens: 24,
      ...params,
    }),
  );
}

Deno.test("resolveSampling() is greedy and sends nothing without sampling params", () => {
  const none = resolveSampling({});
  assert.equal(none.config, undefined);
  assert.deepEqual(none.report, {
    mode: "greedy",
    temperature: 0,
    top_k: 0,
    top_p: 1,
    min_p: 0,
    repeat_penalty: 1,
    repeat_last_n: 64,
    frequency_penalty: 0,
    presence_penalty: 0,
  });
  // temperature 0 with sampler params: still greedy, the params named as without effect.
  const zero = resolveSampling({ temperature: 0, top_p: 0.9, seed: 3 });
  assert.equal(zero.config, undefined);
  assert.deepEqual(zero.report.without_effect, ["top_p", "seed"]);
  // A penalty applies to greedy decoding too: then the worker is told.
  const penalised = resolveSampling({ repeat_penalty: 1.3 });
  assert.equal(penalised.report.mode, "greedy");
  assert.deepEqual(penalised.config, {
    temperature: 0,
    top_k: 0,
    top_p: 1,
    min_p: 0,
    seed: 0,
    repeat_penalty: 1.3,
    repeat_last_n: 64,
    frequency_penalty: 0,
    presence_penalty: 0,
  });
  // repeat_last_n 0 turns the penalties off.
  assert.equal(resolveSampling({ repeat_penalty: 1.3, repeat_last_n: 0 }).config, undefined);
});

Deno.test("resolveSampling() picks and reports a seed when a sampled call sends none", () => {
  const picked = resolveSampling({ temperature: 0.7 }, () => 12345);
  assert.deepEqual(picked.report, {
    mode: "sampled",
    temperature: 0.7,
    top_k: 0,
    top_p: 1,
    min_p: 0,
    seed: 12345,
    seed_source: "service",
    repeat_penalty: 1,
    repeat_last_n: 64,
    frequency_penalty: 0,
    presence_penalty: 0,
  });
  const { seed_source: _s, mode: _m, ...config } = picked.report;
  assert.deepEqual(picked.config, config);
  const sent = resolveSampling({ temperature: 0.7, seed: 9, top_k: 40 });
  assert.equal(sent.report.seed_source, "request");
  assert.equal(sent.config?.seed, 9);
  assert.equal(sent.config?.top_k, 40);
  // The random seed stays inside llama.cpp's range (2^32 − 1 means "random" there).
  for (let i = 0; i < 200; i++) {
    const seed = resolveSampling({ temperature: 1 }).config!.seed;
    assert.ok(Number.isInteger(seed) && seed >= 0 && seed <= SEED_MAX, String(seed));
  }
});

Deno.test("microllm.oneshot samples reproducibly from a seed, and greedy stays as it was", async (t) => {
  await using s = await start();

  const greedy = await generate(s, {});
  await t.step("no sampling params: greedy, reported", async () => {
    assert.equal(greedy.sampling.mode, "greedy");
    assert.equal(greedy.sampling.seed, undefined);
    const zero = await generate(s, { temperature: 0, top_p: 0.5 });
    assert.deepEqual(zero.generated_token_ids, greedy.generated_token_ids);
    assert.deepEqual(zero.sampling.without_effect, ["top_p"]);
  });

  await t.step("the same seed gives the same tokens; another seed other tokens", async () => {
    const a = await generate(s, { temperature: 1.2, seed: 7 });
    const b = await generate(s, { temperature: 1.2, seed: 7 });
    assert.equal(a.sampling.mode, "sampled");
    assert.equal(a.sampling.seed, 7);
    assert.equal(a.sampling.seed_source, "request");
    assert.equal(a.n_gen, 24);
    assert.deepEqual(b.generated_token_ids, a.generated_token_ids);
    assert.equal(b.text, a.text);
    const c = await generate(s, { temperature: 1.2, seed: 8 });
    assert.notDeepEqual(c.generated_token_ids, a.generated_token_ids);
    // Sampling at this temperature leaves the greedy path on this model.
    assert.notDeepEqual(a.generated_token_ids, greedy.generated_token_ids);
  });

  await t.step("without a seed: a seed is picked, reported, and replays the answer", async () => {
    const a = await generate(s, { temperature: 1.2 });
    const b = await generate(s, { temperature: 1.2 });
    assert.equal(a.sampling.seed_source, "service");
    assert.notEqual(a.sampling.seed, b.sampling.seed);
    for (const r of [a, b]) {
      const again = await generate(s, { temperature: 1.2, seed: r.sampling.seed });
      assert.deepEqual(again.generated_token_ids, r.generated_token_ids);
    }
  });

  await t.step("a grammar still constrains sampled output", async () => {
    const grammar = 'root ::= "{\\"ok\\": " ("true" | "false") ", \\"n\\": " [0-9] "}"';
    const seen = new Set<string>();
    for (let seed = 1; seed <= 6; seed++) {
      const r = await generate(s, { temperature: 1.5, seed, grammar, max_tokens: 40 });
      assert.equal(r.finish_reason, "grammar_complete", r.text);
      const parsed = JSON.parse(r.text);
      assert.equal(typeof parsed.ok, "boolean");
      assert.ok(Number.isInteger(parsed.n));
      seen.add(r.text);
    }
    // The grammar leaves 20 answers open, and the seeds pick among them.
    assert.ok(seen.size > 1, [...seen].join(" | "));
  });

  await t.step("a JSON response_format still parses when sampled", async () => {
    const r = await generate(s, {
      temperature: 1,
      seed: 11,
      max_tokens: 60,
      response_format: {
        type: "json_schema",
        json_schema: {
          name: "t",
          schema: {
            type: "object",
            properties: { ok: { type: "boolean" } },
            required: ["ok"],
            additionalProperties: false,
          },
        },
      },
    });
    if (r.finish_reason === "grammar_complete") {
      assert.equal(typeof JSON.parse(r.text).ok, "boolean");
    } else {
      // Whitespace the schema allows may run to the limit; the text is then a JSON prefix.
      assert.equal(r.finish_reason, "max_tokens");
      assert.match(r.text, /^\s*\{/);
    }
  });

  await t.step("out-of-range sampling params are refused by name", async () => {
    for (
      const [field, value] of [
        ["temperature", 2.5],
        ["temperature", -1],
        ["top_p", 0],
        ["top_p", 1.5],
        ["top_k", -1],
        ["min_p", 2],
        ["seed", -1],
        ["seed", 2 ** 32 - 1],
        ["seed", 1.5],
        ["repeat_penalty", 0],
        ["repeat_last_n", -2],
        ["frequency_penalty", 3],
        ["presence_penalty", -3],
      ] as const
    ) {
      const body = channelError(
        await s.syn.call("microllm.oneshot", {
          model: "gen",
          prompt: "x",
          max_tokens: 2,
          [field]: value,
        }),
      );
      assert.equal(body.code, "invalid_request", `${field} ${value}`);
      assert.ok(body.message.includes(`'${field}'`), body.message);
      // The message gives the range, in words, whatever door sent the value.
      assert.match(body.message, /must be (a number|an integer|above 0)/, body.message);
    }
  });
});

Deno.test({
  name: "microllm.oneshot samples the ids node-llama-cpp samples directly with the same values",
  // node-llama-cpp in the test process keeps native handles of its own.
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    await using s = await start();
    const gen = s.syn.registry.resolve("gen", "generate");
    const spec = (gen.interactive.engine as LlamaEngine).spec;
    const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.disabled });
    try {
      const model = await llama.loadModel({ modelPath: `${GEN}/model.gguf` });
      const context = await model.createContext({
        contextSize: spec.contextSize,
        threads: spec.threads,
      });
      const sequence = context.getSequence();
      const N = 24;
      const cases: { prompt: string; params: Record<string, number> }[] = [
        {
          prompt: "Once upon a time",
          params: { temperature: 0.8, seed: 42, top_k: 40, top_p: 0.9, min_p: 0.05 },
        },
        { prompt: "Once upon a time", params: { temperature: 1.5, seed: 3 } },
        // Greedy with penalties over the last 8 tokens of the prompt and the generation; on this
        // prompt the plain greedy answer repeats itself within 8 tokens.
        {
          prompt: "a b a b a b a b a b",
          params: {
            repeat_penalty: 1.5,
            frequency_penalty: 0.5,
            presence_penalty: 0.25,
            repeat_last_n: 8,
          },
        },
      ];
      for (const { prompt, params } of cases) {
        const ids = Array.from(gen.tokenizer!.encode(prompt, { maxTokens: 512 }).ids) as Token[];
        const r = await generate(s, { prompt, max_tokens: N, ...params });
        const c = resolveSampling(params).config!;
        await sequence.clearHistory();
        const direct: number[] = [];
        for await (
          const tok of sequence.evaluate(ids, {
            temperature: c.temperature,
            topK: c.top_k,
            topP: c.top_p,
            minP: c.min_p,
            seed: c.seed,
            ...(params.repeat_penalty === undefined ? {} : {
              repeatPenalty: {
                punishTokens: () => [...ids, ...direct as Token[]].slice(-c.repeat_last_n),
                maxPunishTokens: c.repeat_last_n,
                penalty: c.repeat_penalty,
                frequencyPenalty: c.frequency_penalty,
                presencePenalty: c.presence_penalty,
              },
            }),
          })
        ) {
          direct.push(tok);
          if (direct.length >= N) break;
        }
        assert.deepEqual(r.generated_token_ids, direct, JSON.stringify(params));
      }
      // The penalties changed the greedy answer (else the last case proves nothing).
      const { prompt, params } = cases[2]!;
      const plain = await generate(s, { prompt, max_tokens: N });
      const penalised = await generate(s, { prompt, max_tokens: N, ...params });
      assert.notDeepEqual(penalised.generated_token_ids, plain.generated_token_ids);
      await context.dispose();
      await model.dispose();
    } finally {
      await llama.dispose();
    }
  },
});
