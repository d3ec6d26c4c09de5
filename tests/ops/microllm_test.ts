/**
 * microllm.oneshot end to end: the real llama worker on the generated GGUF fixtures, checked
 * against node-llama-cpp called directly, the tokenizer, and independent UTF-8 arithmetic
 * (field reports F11, F12, F14, F16).
 */
import assert from "node:assert/strict";
import type { LlamaEngine } from "../../lib/engines/llama/llama_engine.ts";
import { getLlama, LlamaLogLevel, type Token } from "node-llama-cpp";
import { loadConfig } from "../../lib/config/loader.ts";
import { serveHttp } from "../../lib/doors/http/server.ts";
import { nullLog } from "../../lib/log/log.ts";
import { threadsForKnob } from "../../lib/models/model_registry.ts";
import type { OpOutcome } from "../../lib/ops/dispatcher.ts";
import { createSynapse } from "../../lib/synapse.ts";
import { checkGbnf } from "../../lib/grammar/gbnf.ts";
import { grammarFinishReason } from "../../lib/ops/_grammar_finish.ts";
import { decodeGenerated } from "../../lib/tokenize/token_bytes.ts";
import type { SynapseError } from "../../lib/contract/errors.ts";
import { channelError, MODELS, resultOf, semanticError } from "../_helpers.ts";
import type { TestSynapse } from "../_helpers.ts";

const GEN = `${MODELS}/synapse-tiny-llama`;
const BYTES = `${MODELS}/synapse-tiny-llama-bytes`;

function llamaEntry(dir: string, modelId: string, task: "generate" | "embed") {
  return {
    engine: "llama",
    model_path: dir,
    tokenizer_path: `${dir}/tokenizer.json`,
    task,
    model_id: modelId,
    pooling: "mean",
    normalize: true,
    max_tokens: 512,
  };
}

/** The three llama models every instance here serves. */
const PRELOAD = [
  llamaEntry(GEN, "gen", "generate"),
  llamaEntry(GEN, "gguf-embed", "embed"),
  llamaEntry(BYTES, "bytes", "generate"),
];

/** A Synapse configured as an operator would (SYNAPSE_CONFIG_JSON), worker logs dropped. */
async function start(overrides: Record<string, unknown>): Promise<TestSynapse> {
  const dir = await Deno.makeTempDir({ prefix: "synapse-microllm-" });
  const env = {
    XDG_DATA_HOME: `${dir}/data`,
    XDG_CONFIG_HOME: `${dir}/config`,
    HOME: dir,
    SYNAPSE_CONFIG_JSON: JSON.stringify({
      certification: "warn",
      preload_models: PRELOAD,
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
async function workerRow(t: TestSynapse, modelId: string): Promise<any> {
  const list = resultOf(await t.syn.call("models.list", {}));
  // deno-lint-ignore no-explicit-any
  const row = list.models.find((m: any) => m.model_id === modelId);
  assert.ok(row, `models.list has no row '${modelId}'`);
  return row.worker;
}

/** A channel invalid_request whose message and details name `field`. */
function assertChannelNames(o: OpOutcome, field: string): void {
  const body = channelError(o);
  assert.equal(body.code, "invalid_request");
  assert.ok(body.message.includes(`'${field}'`), body.message);
  assert.equal(o.kind === "channel" ? o.error.details?.field : undefined, field);
}

/** Everything but the timings, which differ between two calls. */
// deno-lint-ignore no-explicit-any
function withoutTimings(r: any): any {
  const { queue_time_ms: _q, inference_time_ms: _i, ...rest } = r;
  return rest;
}

Deno.test("microllmOneshot() generates greedily, bounded by max_tokens, with the envelope", async (t) => {
  await using s = await start({
    grammar_enabled: true,
    preload_models: [...PRELOAD, { ...llamaEntry(GEN, "gen-long", "generate"), max_tokens: 2048 }],
  });
  const gen = s.syn.registry.resolve("gen", "generate");
  const tok = gen.tokenizer!;

  await t.step("max_tokens bounds a model that never stops, and says so (F12)", async () => {
    for (const prompt of ["Hello there", "The quick brown fox"]) {
      const r = resultOf(
        await s.syn.call("microllm.oneshot", { model: "gen", prompt, max_tokens: 16 }),
      );
      assert.equal(r.finish_reason, "max_tokens");
      assert.equal(r.n_gen, 16);
      assert.equal(r.generated_token_ids.length, r.n_gen);
      assert.equal(r.dims, 0);
      assert.match(r.fingerprint, /^[0-9a-f]{64}$/);
      assert.equal(r.fingerprint, gen.fingerprint);
      assert.equal(r.model_id, "gen");
      assert.equal(r.module_generation, s.syn.moduleGeneration);
      assert.deepEqual(r.provenance.engine, {
        engine: "llama.cpp-worker",
        version: "3.21.1",
        build_flags: { backend: "cpu", llama_cpp: r.provenance.engine.build_flags.llama_cpp },
      });
      assert.equal(typeof r.provenance.engine.build_flags.llama_cpp, "string");
      assert.notEqual(r.provenance.engine.build_flags.llama_cpp, "");
      // The text is the tokenizer's own decoding of the ids.
      assert.equal(r.text, tok.decode(r.generated_token_ids));
      assert.notEqual(r.text, "");
      assert.equal(r.text_repair, undefined);
      // The prompt counts its BOS.
      const ids = tok.encode(prompt, { maxTokens: 512 }).ids;
      assert.equal(ids[0], 1);
      assert.equal(r.n_prompt, ids.length);
      assert.deepEqual(r.real_token_counts, [ids.length]);
      assert.deepEqual(r.truncation_disclosures, [{
        submitted_tokens: ids.length,
        effective_tokens: ids.length,
        truncated: false,
      }]);
      assert.equal(typeof r.queue_time_ms, "number");
      assert.ok(r.inference_time_ms > 0);
      // Deterministic: the same call gives the same ids.
      const again = resultOf(
        await s.syn.call("microllm.oneshot", { model: "gen", prompt, max_tokens: 16 }),
      );
      assert.deepEqual(again.generated_token_ids, r.generated_token_ids);
      // A shorter run is a prefix of the longer one (greedy, fresh sequence each call).
      const short = resultOf(
        await s.syn.call("microllm.oneshot", { model_id: "gen", prompt, max_tokens: 5 }),
      );
      assert.equal(short.n_gen, 5);
      assert.deepEqual(short.generated_token_ids, r.generated_token_ids.slice(0, 5));
    }
  });

  await t.step("without a model it serves the first generation model", async () => {
    const r = resultOf(await s.syn.call("microllm.oneshot", { prompt: "hi", max_tokens: 2 }));
    assert.equal(r.model_id, "gen");
  });

  await t.step("the prompt and max_tokens may fill the context exactly, not one more", async () => {
    // "gen-long" takes prompts as long as its context, so the prompt does most of the filling.
    const long = s.syn.registry.resolve("gen-long", "generate");
    const context = long.profile.certified_shape.max_context_tokens;
    assert.equal(long.maxTokens, context);
    const prompt = Array(context - 8).fill("word").join(" ");
    const nPrompt = tok.encode(prompt, { maxTokens: context }).ids.length;
    assert.ok(nPrompt > context - 16 && nPrompt < context, `${nPrompt} prompt tokens`);
    const over = semanticError(
      await s.syn.call("microllm.oneshot", {
        model: "gen-long",
        prompt,
        max_tokens: context - nPrompt + 1,
      }),
    );
    assert.equal(over.code, "sequence_too_long");
    assert.equal(over.class, "permanent");
    assert.equal(over.details.tokens, context + 1);
    assert.equal(over.details.max_tokens, context);
    const full = resultOf(
      await s.syn.call("microllm.oneshot", {
        model: "gen-long",
        prompt,
        max_tokens: context - nPrompt,
      }),
    );
    assert.equal(full.n_prompt, nPrompt);
    assert.equal(full.n_gen, context - nPrompt);
    assert.equal(full.finish_reason, "max_tokens");
  });

  await t.step("a prompt longer than the model's max_tokens is sequence_too_long", async () => {
    const e = semanticError(
      await s.syn.call("microllm.oneshot", {
        model: "gen",
        prompt: Array(600).fill("word").join(" "),
        max_tokens: 4,
      }),
    );
    assert.equal(e.code, "sequence_too_long");
    assert.equal(e.details.max_tokens, 512);
    assert.ok(e.details.tokens > 512, JSON.stringify(e.details));
    // Named as the prompt, with the limit and the context it shares, and no truncate advice.
    assert.equal(e.details.field, "prompt");
    assert.equal(e.details.reason, "prompt_over_max_tokens");
    assert.equal(e.details.context_tokens, gen.profile.certified_shape.max_context_tokens);
    assert.match(
      e.message,
      new RegExp(
        `^Cannot generate: the prompt has ${e.details.tokens} tokens, and model 'gen' takes prompts of at most 512 tokens \\(its max_tokens; its context of ${e.details.context_tokens} holds`,
      ),
    );
    assert.doesNotMatch(e.message, /truncate/);
  });
});

Deno.test({
  name: "microllmOneshot() generates the ids node-llama-cpp generates directly",
  // node-llama-cpp in the test process keeps native handles of its own.
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    await using s = await start({});
    const gen = s.syn.registry.resolve("gen", "generate");
    const threads = threadsForKnob(s.syn.config.knob);
    assert.equal((gen.interactive.engine as LlamaEngine).spec.threads, threads);
    const contextSize = gen.profile.certified_shape.max_context_tokens;
    assert.equal((gen.interactive.engine as LlamaEngine).spec.contextSize, contextSize);
    const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.disabled });
    try {
      const model = await llama.loadModel({ modelPath: `${GEN}/model.gguf` });
      const context = await model.createContext({ contextSize, threads });
      const sequence = context.getSequence();
      const N = 24;
      const prompts = ["Hello there", "The quick brown fox", "日本語 and émoji 🎉 mixed"];
      for (const prompt of prompts) {
        const r = resultOf(
          await s.syn.call("microllm.oneshot", { model: "gen", prompt, max_tokens: N }),
        );
        const ids = Array.from(gen.tokenizer!.encode(prompt, { maxTokens: 512 }).ids) as Token[];
        await sequence.clearHistory();
        const direct: number[] = [];
        for await (const tok of sequence.evaluate(ids, { temperature: 0 })) {
          direct.push(tok);
          if (direct.length >= N) break;
        }
        assert.equal(direct.length, N);
        assert.deepEqual(r.generated_token_ids, direct, prompt);
        assert.equal(r.provenance.engine.build_flags.llama_cpp, llama.llamaCppRelease.release);
      }
      await context.dispose();
      await model.dispose();
    } finally {
      await llama.dispose();
    }
  },
});

Deno.test("microllmOneshot() constrains output with a grammar and refuses bad ones without touching the worker (F11)", async (t) => {
  await using s = await start({ grammar_enabled: true });
  const before = await workerRow(s, "gen");
  assert.equal(typeof before.pid, "number");
  assert.equal(before.total_crashes, 0);

  await t.step("a yes/no grammar completes with yes or no", async () => {
    const r = resultOf(
      await s.syn.call("microllm.oneshot", {
        model: "gen",
        prompt: "Answer:",
        max_tokens: 16,
        grammar: 'root ::= "yes" | "no"',
      }),
    );
    assert.ok(r.text === "yes" || r.text === "no", r.text);
    assert.equal(r.finish_reason, "grammar_complete");
    assert.ok(r.n_gen >= 1 && r.n_gen < 16);
    assert.equal(
      r.text,
      s.syn.registry.resolve("gen", "generate").tokenizer!.decode(
        r.generated_token_ids,
      ),
    );
  });

  await t.step("a JSON-shaped grammar gives text of that shape", async () => {
    const grammar = [
      'root ::= "{" ws "\\"answer\\"" ws ":" ws value ws "}"',
      'value ::= "true" | "false" | [0-9]{1,3}',
      "ws ::= [ ]?",
    ].join("\n");
    const r = resultOf(
      await s.syn.call("microllm.oneshot", {
        model: "gen",
        prompt: "Reply in JSON:",
        max_tokens: 48,
        grammar,
      }),
    );
    assert.match(r.text, /^\{ ?"answer" ?: ?(true|false|[0-9]{1,3}) ?\}$/);
    assert.equal(r.finish_reason, "grammar_complete");
  });

  await t.step("a grammar that never has to end is bounded by max_tokens (F12)", async () => {
    const r = resultOf(
      await s.syn.call("microllm.oneshot", {
        model: "gen",
        prompt: "Letters:",
        max_tokens: 20,
        grammar: "root ::= [a-z]+",
      }),
    );
    assert.equal(r.finish_reason, "max_tokens");
    assert.equal(r.n_gen, 20);
    assert.match(r.text, /^[a-z]+$/);
  });

  await t.step("invalid grammars are invalid_request naming the field and the reason", async () => {
    const cases: [string, string, string][] = [
      ["syntax error", 'root ::= "yes', "syntax"],
      ["no ::=", 'root = "yes"', "syntax"],
      ["undefined rule", "root ::= answer", "undefined_rule"],
      ["left recursion", 'root ::= root "x" | "x"', "left_recursion"],
      ["hidden left recursion", 'root ::= opt root "x"\nopt ::= "a"?', "left_recursion"],
      ["empty", "", "empty_grammar"],
      ["only a comment", "  # nothing\n", "empty_grammar"],
      ["no root", 'answer ::= "yes"', "missing_root"],
      ["lone surrogate", 'root ::= "\uD800"', "invalid_utf8"],
    ];
    for (const [name, grammar, reason] of cases) {
      const e = semanticError(
        await s.syn.call("microllm.oneshot", {
          model: "gen",
          prompt: "Answer:",
          max_tokens: 4,
          grammar,
        }),
      );
      assert.equal(e.code, "invalid_request", name);
      assert.equal(e.class, "permanent", name);
      assert.equal(e.details.field, "grammar", name);
      assert.equal(e.details.reason, reason, name);
      assert.match(e.message, /^Cannot use grammar: /, name);
    }
  });

  await t.step("the worker stayed up and the next valid call works", async () => {
    const after = await workerRow(s, "gen");
    assert.equal(after.pid, before.pid);
    assert.equal(after.total_crashes, 0);
    assert.equal(after.generation, before.generation);
    const r = resultOf(
      await s.syn.call("microllm.oneshot", {
        model: "gen",
        prompt: "Answer:",
        max_tokens: 4,
        grammar: 'root ::= "yes" | "no"',
      }),
    );
    assert.equal(r.finish_reason, "grammar_complete");
    const plain = resultOf(
      await s.syn.call("microllm.oneshot", { model: "gen", prompt: "Answer:", max_tokens: 4 }),
    );
    assert.equal(plain.n_gen, 4);
  });
});

Deno.test("microllmOneshot() says grammar_complete only for text the grammar accepts (F18)", async (t) => {
  await using s = await start({ grammar_enabled: true });
  const gen = s.syn.registry.resolve("gen", "generate");
  const bytes = s.syn.registry.resolve("bytes", "generate");
  const before = await workerRow(s, "gen");
  const call = (model: string, grammar: string, max_tokens = 8, prompt = "Hello there") =>
    s.syn.call("microllm.oneshot", { model, prompt, max_tokens, grammar });

  await t.step("a grammar that can match nothing is refused before generation", async () => {
    const cases: [string, string, number, number, string][] = [
      ["root ::= [^\\x00-\\U0010FFFF]", "empty_class", 1, 10, "root"],
      ['root ::= "a" | x\nx ::= [\\x00]', "empty_class", 2, 7, "x"],
      ['root ::= "a" root', "unsatisfiable_rule", 1, 1, "root"],
      ['root ::= item+\nitem ::= "(" item ")"', "unsatisfiable_rule", 2, 1, "item"],
    ];
    for (const [grammar, reason, line, column, rule] of cases) {
      const e = semanticError(await call("gen", grammar));
      assert.equal(e.code, "invalid_request", grammar);
      assert.equal(e.class, "permanent", grammar);
      assert.deepEqual(e.details, { field: "grammar", reason, line, column, rule }, grammar);
      assert.match(e.message, new RegExp(` at line ${line} column ${column}$`), grammar);
    }
    const after = await workerRow(s, "gen");
    assert.equal(after.pid, before.pid);
    assert.equal(after.total_crashes, 0);
  });

  await t.step(
    "the F18 input, had it reached llama.cpp: 'complete' on bytes that are no text",
    async () => {
      // The engine below the op, given the grammar unchecked, as the module used to.
      for (const model of [gen, bytes]) {
        const engine = model.interactive.engine as LlamaEngine;
        const ids = model.tokenizer!.encode("Hello there", { maxTokens: 512 }).ids;
        const out = await engine.generate({
          ids,
          maxTokens: 8,
          grammar: "root ::= [^\\x00-\\U0010FFFF]",
        });
        assert.equal(out.finishReason, "grammar_complete", model.modelId);
        const decoded = decodeGenerated(out.generatedIds, model.tokenizer!.tokenBytes, {
          stripLeading: false,
        });
        assert.ok(decoded.replacedSequences > 0, model.modelId);
        // What the op now makes of such an output.
        const grammar = checkGbnf("root ::= [^a]"); // any checked grammar: the bytes fail first
        assert.throws(
          () =>
            grammarFinishReason(grammar, out.finishReason, decoded, {
              modelId: model.modelId,
              nGen: out.generatedIds.length,
            }),
          (e: SynapseError) =>
            e.code === "engine_output_invalid" && e.details?.reason === "not_utf8",
        );
      }
    },
  );

  await t.step(
    "a negated class llama.cpp reads loosely: valid text completes, bytes are refused",
    async () => {
      // The byte model emits only <0x80>..<0xFF>. One character of [^a]: a valid 4-byte one.
      const one = resultOf(await call("bytes", "root ::= [^a]"));
      assert.equal(one.finish_reason, "grammar_complete");
      assert.equal([...one.text].length, 1);
      assert.notEqual(one.text, "a");
      assert.equal(one.text_repair, undefined);
      assert.equal(
        new TextDecoder("utf-8", { fatal: true }).decode(
          Uint8Array.from(one.generated_token_ids, byteOf),
        ),
        one.text,
      );
      // More of them: the second "character" llama.cpp lets through is F4 9x…, beyond U+10FFFF.
      const many = semanticError(await call("bytes", "root ::= [^a]+"));
      assert.equal(many.code, "engine_output_invalid");
      assert.equal(many.class, "permanent");
      assert.equal(many.details.reason, "not_utf8");
      assert.equal(many.details.model_id, "bytes");
      assert.equal(many.details.engine_finish_reason, "max_tokens");
      assert.equal(many.details.n_gen, 8);
      assert.equal(many.details.replaced_sequences, 4);
      // Without a grammar the same bytes are an answer, repaired and said so (F14).
      const plain = resultOf(
        await s.syn.call("microllm.oneshot", {
          model: "bytes",
          prompt: "Hello there",
          max_tokens: 8,
        }),
      );
      assert.equal(plain.finish_reason, "max_tokens");
    },
  );

  await t.step(
    "a grammar completing on exactly the max_tokens-th token is grammar_complete",
    async () => {
      const grammar = 'root ::= "yes" | "no"';
      const free = resultOf(await call("gen", grammar, 16));
      assert.equal(free.finish_reason, "grammar_complete");
      assert.ok(free.text === "yes" || free.text === "no", free.text);
      const k = free.n_gen;
      assert.ok(k >= 2, `the answer takes ${k} tokens`);
      // The worker stops at the limit and calls it max_tokens; the text is the whole answer, and
      // the grammar admits nothing after it.
      const atLimit = resultOf(await call("gen", grammar, k));
      assert.equal(atLimit.n_gen, k);
      assert.deepEqual(atLimit.generated_token_ids, free.generated_token_ids);
      assert.equal(atLimit.text, free.text);
      assert.equal(atLimit.finish_reason, "grammar_complete");
      // One token fewer is a cut answer.
      const short = resultOf(await call("gen", grammar, k - 1));
      assert.equal(short.n_gen, k - 1);
      assert.equal(short.finish_reason, "max_tokens");
      assert.ok(free.text.startsWith(short.text) && short.text !== free.text, short.text);
    },
  );

  await t.step("at the limit, text the grammar could extend stays max_tokens", async () => {
    const r = resultOf(await call("gen", 'root ::= [a-z]+ | [a-z]+ "."', 12));
    assert.equal(r.n_gen, 12);
    assert.match(r.text, /^[a-z]+$/);
    assert.equal(r.finish_reason, "max_tokens");
  });

  await t.step(
    "a grammar's leading space is kept: the text is what the grammar allowed",
    async () => {
      const r = resultOf(await call("gen", 'root ::= " yes" | " no"', 16));
      assert.ok(r.text === " yes" || r.text === " no", JSON.stringify(r.text));
      assert.equal(r.finish_reason, "grammar_complete");
      // The tokenizer's own decode strips that space (a SentencePiece "▁" piece).
      assert.equal(gen.tokenizer!.decode(r.generated_token_ids), r.text.slice(1));
    },
  );
});

Deno.test("microllmOneshot() refuses malformed params, limits, bad prompts and wrong models", async (t) => {
  await using s = await start({ microllm_max_tokens: 8 });
  const call = (params: unknown) => s.syn.call("microllm.oneshot", params);

  await t.step("a grammar while grammar_enabled is false is grammar_disabled (F11)", async () => {
    for (const grammar of ['root ::= "yes" | "no"', "root ::= answer"]) {
      const e = semanticError(
        await call({ model: "gen", prompt: "Answer:", max_tokens: 4, grammar }),
      );
      assert.equal(e.code, "grammar_disabled");
      assert.equal(e.class, "permanent");
      assert.equal(e.details.field, "grammar");
    }
  });

  await t.step("max_tokens above microllm_max_tokens is invalid_request", async () => {
    const e = semanticError(await call({ model: "gen", prompt: "hi", max_tokens: 9 }));
    assert.equal(e.code, "invalid_request");
    assert.equal(e.class, "permanent");
    assert.equal(e.details.field, "max_tokens");
    assert.equal(e.details.limit, 8);
    assert.equal(resultOf(await call({ model: "gen", prompt: "hi", max_tokens: 8 })).n_gen, 8);
  });

  await t.step(
    "a missing, zero, negative, fractional or string max_tokens is a channel error (F16)",
    async () => {
      for (const max_tokens of [undefined, 0, -1, 1.5, "8", null]) {
        const params: Record<string, unknown> = { model: "gen", prompt: "hi" };
        if (max_tokens !== undefined) params.max_tokens = max_tokens;
        assertChannelNames(await call(params), "max_tokens");
      }
    },
  );

  await t.step(
    "a missing or non-string prompt or grammar is a channel error naming it",
    async () => {
      assertChannelNames(await call({ model: "gen", max_tokens: 2 }), "prompt");
      assertChannelNames(await call({ model: "gen", prompt: 7, max_tokens: 2 }), "prompt");
      assertChannelNames(
        await call({ model: "gen", prompt: "hi", max_tokens: 2, grammar: ["root"] }),
        "grammar",
      );
    },
  );

  await t.step("an unknown field is a channel error naming it (F16)", async () => {
    for (const field of ["temprature", "maxTokens", "stop"]) {
      assertChannelNames(
        await call({ model: "gen", prompt: "hi", max_tokens: 2, [field]: 1 }),
        field,
      );
    }
  });

  await t.step("a prompt with a lone surrogate is invalid_request, not a crash (F14)", async () => {
    for (const prompt of ["\uD800", "ok \uDC00 then", "end \uD83D"]) {
      const e = semanticError(await call({ model: "gen", prompt, max_tokens: 2 }));
      assert.equal(e.code, "invalid_request");
      assert.equal(e.details.field, "prompt");
      assert.equal(e.details.reason, "invalid_unicode");
    }
    const e = semanticError(await call({ model: "gen", prompt: "  ", max_tokens: 2 }));
    assert.equal(e.details.reason, "empty_text");
    // A surrogate pair is fine.
    resultOf(await call({ model: "gen", prompt: "emoji \uD83C\uDF89", max_tokens: 2 }));
    const row = await workerRow(s, "gen");
    assert.equal(row.total_crashes, 0);
  });

  await t.step(
    "a required_fingerprint other than the model's is substitution_rejected",
    async () => {
      const gen = s.syn.registry.resolve("gen", "generate");
      const other = s.syn.registry.resolve("bytes", "generate");
      const e = semanticError(
        await call({
          model: "gen",
          prompt: "hi",
          max_tokens: 2,
          required_fingerprint: other.fingerprint,
        }),
      );
      assert.equal(e.code, "substitution_rejected");
      const r = resultOf(
        await call({
          model: "gen",
          prompt: "hi",
          max_tokens: 2,
          required_fingerprint: gen.fingerprint,
        }),
      );
      assert.equal(r.fingerprint, gen.fingerprint);
    },
  );

  await t.step(
    "an unknown model is unknown_model; an embedding model is invalid_request",
    async () => {
      let e = semanticError(await call({ model: "nope", prompt: "hi", max_tokens: 2 }));
      assert.equal(e.code, "unknown_model");
      assert.equal(e.details.model_id, "nope");
      e = semanticError(await call({ model: "gguf-embed", prompt: "hi", max_tokens: 2 }));
      assert.equal(e.code, "invalid_request");
      assert.equal(e.details.model_id, "gguf-embed");
      assert.equal(e.details.task, "embed");
    },
  );
});

Deno.test("microllmOneshot() counts the grammar in UTF-8 bytes against inline.byte_budget", async () => {
  await using s = await start({
    grammar_enabled: true,
    inline: { byte_budget: 18 },
    preload_models: [llamaEntry(GEN, "gen", "generate")],
  });
  // "hi" is 2 bytes; the grammar 17 (its three "é" are 2 bytes each): 19 > 18.
  const grammar = 'root ::= "\u00e9\u00e9\u00e9"';
  assert.equal(new TextEncoder().encode(grammar).length, 17);
  const e = semanticError(
    await s.syn.call("microllm.oneshot", { model: "gen", prompt: "hi", max_tokens: 2, grammar }),
  );
  assert.equal(e.code, "queue_full");
  assert.equal(e.details.request_bytes, 19);
  // One "é" less fits: 2 + 15 bytes.
  const r = resultOf(
    await s.syn.call("microllm.oneshot", {
      model: "gen",
      prompt: "hi",
      max_tokens: 8,
      grammar: grammar.replace("\u00e9", ""),
    }),
  );
  assert.equal(r.text, "\u00e9\u00e9");
  assert.equal(r.finish_reason, "grammar_complete");
});

/** Byte of a llama2 byte-fallback token: ids 3..258 are `<0x00>`..`<0xFF>`. */
function byteOf(id: number): number {
  assert.ok(id >= 3 && id <= 258, `id ${id} is not a byte token`);
  return id - 3;
}

/**
 * What valid text those bytes make, computed with WHATWG's decoder: text without an incomplete
 * final character, how many bytes that character had, and how many U+FFFD replaced invalid bytes.
 */
function independentRepair(bytes: Uint8Array): { text: string; dropped: number; replaced: number } {
  // A streaming decode holds back exactly the incomplete final character.
  const text = new TextDecoder("utf-8").decode(bytes, { stream: true });
  let dropped = 0;
  while (new TextDecoder("utf-8").decode(bytes.subarray(0, bytes.length - dropped)) !== text) {
    dropped++;
    assert.ok(dropped <= 3, "an incomplete UTF-8 character is at most 3 bytes");
  }
  const replaced = [...text].filter((c) => c === "\uFFFD").length;
  return { text, dropped, replaced };
}

Deno.test("microllmOneshot() answers valid UTF-8 for byte tokens cut anywhere, and says what it repaired (F14)", async (t) => {
  await using s = await start({});
  const all: number[][] = [];
  await t.step("every max_tokens from 1 to 7", async () => {
    for (let k = 1; k <= 7; k++) {
      const r = resultOf(
        await s.syn.call("microllm.oneshot", {
          model: "bytes",
          prompt: "Hello there",
          max_tokens: k,
        }),
      );
      assert.equal(r.n_gen, k);
      assert.equal(r.finish_reason, "max_tokens");
      // The fixture emits only <0x80>..<0xFF>.
      for (const id of r.generated_token_ids) assert.ok(id >= 131 && id <= 258, `id ${id}`);
      all.push(r.generated_token_ids);
      // Valid text, serializable and back.
      assert.deepEqual(JSON.parse(JSON.stringify(r)), r);
      assert.equal(r.text, r.text.toWellFormed());
      const utf8 = new TextEncoder().encode(r.text);
      assert.equal(new TextDecoder("utf-8", { fatal: true }).decode(utf8), r.text);
      // Independently: the raw bytes, decoded by WHATWG rules, tail dropped.
      const raw = Uint8Array.from(r.generated_token_ids, byteOf);
      // A real U+FFFD in the raw bytes would be indistinguishable from a replacement.
      assert.ok(!/\xef\xbf\xbd/.test(String.fromCharCode(...raw)), "fixture bytes hold EF BF BD");
      const want = independentRepair(raw);
      assert.equal(r.text, want.text, `max_tokens ${k}`);
      if (want.dropped === 0 && want.replaced === 0) {
        assert.equal(r.text_repair, undefined, `max_tokens ${k}`);
      } else {
        assert.deepEqual(r.text_repair, {
          dropped_tail_bytes: want.dropped,
          replaced_sequences: want.replaced,
        }, `max_tokens ${k}`);
      }
    }
  });
  await t.step("the runs are prefixes of one greedy sequence, and it covers both repairs", () => {
    for (const ids of all) assert.deepEqual(ids, all[6]!.slice(0, ids.length));
    const repairs = all.map((ids) => independentRepair(Uint8Array.from(ids, byteOf)));
    assert.ok(repairs.some((x) => x.dropped > 0), "some run ends mid-character");
    assert.ok(repairs.some((x) => x.replaced > 0), "some run has invalid bytes");
  });
});

Deno.test("POST /v1/ops/microllm.oneshot answers the same envelope as an in-process call", async () => {
  await using s = await start({});
  const server = serveHttp(s.syn, {});
  const base = `http://127.0.0.1:${server.port}`;
  try {
    const post = (body: unknown) =>
      fetch(`${base}/v1/ops/microllm.oneshot`, { method: "POST", body: JSON.stringify(body) });
    for (const model of ["gen", "bytes"]) {
      const params = { model, prompt: "Hello there", max_tokens: 7 };
      const res = await post(params);
      assert.equal(res.status, 200);
      // The body is strict UTF-8 even when the model emitted invalid bytes.
      const raw = new Uint8Array(await res.arrayBuffer());
      const body = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(raw));
      assert.deepEqual(Object.keys(body), ["result"]);
      assert.equal(res.headers.get("x-synapse-fingerprint"), body.result.fingerprint);
      const direct = resultOf(await s.syn.call("microllm.oneshot", params));
      assert.deepEqual(withoutTimings(body.result), withoutTimings(direct));
    }
    let res = await post({ model: "gen", prompt: "hi", max_tokens: 2, grammar: "root ::= x" });
    assert.equal(res.status, 403);
    assert.equal((await res.json()).result.error.code, "grammar_disabled");
    // The default limit is 512.
    res = await post({ model: "gen", prompt: "hi", max_tokens: 513 });
    assert.equal(res.status, 400);
    assert.equal((await res.json()).result.error.details.field, "max_tokens");
    res = await post({ model: "gen", prompt: "hi", max_tokens: 2, top_k: -1 });
    assert.equal(res.status, 400);
    const body = await res.json();
    assert.deepEqual(Object.keys(body).sort(), ["code", "message"]);
    assert.match(body.message, /'top_k'/);
    // A lone surrogate escaped in JSON reaches the op as one and is refused, not a crash.
    res = await fetch(`${base}/v1/ops/microllm.oneshot`, {
      method: "POST",
      body: '{"model":"gen","prompt":"a\\ud800b","max_tokens":2}',
    });
    assert.equal(res.status, 400);
    assert.equal((await res.json()).result.error.details.reason, "invalid_unicode");
  } finally {
    await server.shutdown();
  }
});
