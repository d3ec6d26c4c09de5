import assert from "node:assert/strict";
import { mulberry32 } from "../../scripts/gen_models.ts";
import { TokenBound, UNICODE_RATIOS } from "../../lib/tokenize/token_bound.ts";
import { SanitizedTokenizer } from "../../lib/tokenize/tokenizer.ts";
import { MODELS } from "../_helpers.ts";
import { allTokenizers, byteLevelBpe, corpusText, randomText } from "./_tokenizers.ts";

const TEXTS_PER_TOKENIZER = 1000;

Deno.test("UNICODE_RATIOS are the worst cases over every code point of this runtime's Unicode", () => {
  const enc = new TextEncoder();
  const bytes = (s: string): number => enc.encode(s).length;
  let maxCp = 0, maxGrowth = 0, nfdMin = Infinity, nfkdMin = Infinity, lowerMin = Infinity;
  for (let c = 0; c < 0x110000; c++) {
    if (c >= 0xd800 && c <= 0xdfff) continue;
    const s = String.fromCodePoint(c);
    const b = bytes(s);
    const nfd = s.normalize("NFD");
    const nfkd = s.normalize("NFKD");
    const lower = s.toLowerCase();
    const nfdCps = [...nfd];
    maxCp = Math.max(maxCp, nfdCps.length);
    maxGrowth = Math.max(maxGrowth, bytes(nfd) / b);
    nfdMin = Math.min(nfdMin, bytes(nfd) / b);
    nfkdMin = Math.min(nfkdMin, bytes(nfkd) / b);
    lowerMin = Math.min(lowerMin, bytes(lower) / b);
    // Decompositions and lowercasing never drop a code point.
    assert.ok([...nfkd].length >= 1 && [...lower].length >= 1, `U+${c.toString(16)}`);
    // An ASCII character is never a later part of a canonical decomposition, so NFC/NFKC keep
    // every ASCII character as (the start of) an output character of its own.
    for (let i = 1; i < nfdCps.length; i++) {
      assert.ok(nfdCps[i]!.codePointAt(0)! >= 0x80, `U+${c.toString(16)} decomposes to ASCII`);
    }
    if (c < 0x80) {
      assert.equal(nfd, s);
      assert.equal(nfkd, s);
      assert.ok(lower.length === 1 && lower.charCodeAt(0) < 0x80);
    }
  }
  assert.ok(UNICODE_RATIOS.nfdMaxCodePoints >= maxCp, `nfdMaxCodePoints < ${maxCp}`);
  assert.ok(UNICODE_RATIOS.nfdMaxByteGrowth >= maxGrowth, `nfdMaxByteGrowth < ${maxGrowth}`);
  assert.ok(UNICODE_RATIOS.nfdMinByteRatio <= nfdMin, `nfdMinByteRatio > ${nfdMin}`);
  assert.ok(UNICODE_RATIOS.nfkdMinByteRatio <= nfkdMin, `nfkdMinByteRatio > ${nfkdMin}`);
  assert.ok(UNICODE_RATIOS.lowercaseMinByteRatio <= lowerMin, `lowercase ratio > ${lowerMin}`);
});

Deno.test("TokenBound.analyze() picks the proof each fixture and synthetic tokenizer allows", async () => {
  for (const { name, tok, kind, canCut } of await allTokenizers()) {
    assert.equal(tok.bound.kind, kind, `${name}: ${tok.bound.reason}`);
    assert.equal(tok.bound.canCut, canCut, name);
  }
});

Deno.test("TokenBound.analyze() proves nothing for tokenizers without a proof, and says why", async () => {
  const bert = JSON.parse(await Deno.readTextFile(`${MODELS}/synapse-tiny-embed/tokenizer.json`));
  const llama = JSON.parse(await Deno.readTextFile(`${MODELS}/synapse-tiny-llama/tokenizer.json`));
  const bpe = byteLevelBpe(await corpusText(), { normalizer: null, preTokenizer: null });
  const cases: [string, Record<string, unknown>, RegExp][] = [
    [
      "WordPiece behind WhitespaceSplit",
      { ...bert, pre_tokenizer: { type: "WhitespaceSplit" } },
      /BertPreTokenizer/,
    ],
    ["WordPiece with NFC (composes)", { ...bert, normalizer: { type: "NFC" } }, /per code point/],
    ["WordPiece with fuse_unk", { ...bert, model: { ...bert.model, fuse_unk: true } }, /fuse_unk/],
    [
      "WordPiece with a normalized added token",
      {
        ...bert,
        added_tokens: [...bert.added_tokens, { id: 5, content: "hello world", normalized: true }],
      },
      /normalized added tokens/,
    ],
    [
      "BPE with a regex Replace",
      { ...bpe, normalizer: { type: "Replace", pattern: { Regex: "\\s+" }, content: "" } },
      /regex/,
    ],
    ["BPE with Strip", { ...bpe, normalizer: { type: "Strip", strip_left: true } }, /remove/],
    ["BPE behind Whitespace", { ...bpe, pre_tokenizer: { type: "Whitespace" } }, /drop/],
    [
      "BPE Split that removes",
      {
        ...bpe,
        pre_tokenizer: { type: "Split", pattern: { String: " " }, behavior: "Removed" },
      },
      /Removed/,
    ],
    [
      "BPE fusing unknown pieces",
      { ...llama, model: { ...llama.model, byte_fallback: false } },
      /fuse_unk/,
    ],
    [
      "Unigram",
      { ...bert, model: { type: "Unigram", unk_id: 0, vocab: [["<unk>", 0], ["a", -1]] } },
      /Unigram/,
    ],
  ];
  for (const [what, json, why] of cases) {
    const tok = SanitizedTokenizer.fromJson(json);
    assert.equal(tok.bound.kind, "none", what);
    assert.match(tok.bound.reason, why, what);
    assert.deepEqual(tok.bound.lowerBound("a b c d e f"), { tokens: 0, exhausted: false });
    assert.deepEqual(tok.bound.safeCut("a b c d e f", 1), { kind: "none" });
  }
  // A llama-style tokenizer whose merges cross the space boundary gets a bound but no cut.
  const crossing = {
    ...llama,
    model: { ...llama.model, merges: [...llama.model.merges, "a \u2581b"] },
  };
  const tok = SanitizedTokenizer.fromJson(crossing);
  assert.equal(tok.bound.kind, "units");
  assert.equal(tok.bound.canCut, false);
});

Deno.test("TokenBound.lowerBound() never exceeds the tokens of random texts, for every tokenizer", async () => {
  for (const { name, tok } of await allTokenizers()) {
    const rand = mulberry32(0xb0b0 + name.length);
    let bound = 0, actual = 0;
    for (let k = 0; k < TEXTS_PER_TOKENIZER; k++) {
      const text = randomText(rand, 80);
      const tokens = tok.tokenize(text).length;
      const lb = tok.bound.lowerBound(text);
      assert.ok(!lb.exhausted);
      assert.ok(
        lb.tokens <= tokens,
        `${name}: ${lb.tokens} > ${tokens} for ${JSON.stringify(text)}`,
      );
      // Stopping early still gives a lower bound.
      const stop = Math.floor(rand() * 20);
      assert.ok(tok.bound.lowerBound(text, { stopAbove: stop }).tokens <= tokens, name);
      bound += lb.tokens;
      actual += tokens;
    }
    // Not vacuous: the bound proves a real share of the tokens.
    assert.ok(bound > actual * 0.01, `${name}: bound ${bound} of ${actual}`);
  }
});

Deno.test("TokenBound.lowerBound() counts words, punctuation, CJK and added tokens exactly for WordPiece", async () => {
  const tok = await SanitizedTokenizer.fromFile(`${MODELS}/synapse-tiny-embed/tokenizer.json`);
  const cases: [string, number][] = [
    ["a b c", 3],
    ["hello, world!", 4],
    ["  \t\n ", 0],
    ["\u0000\u200b\ufffd", 0],
    ["a\u200bb", 1], // zero-width space is a format character the cleaner drops: one word
    ["a\ufeffb", 1], // BOM is whitespace to a regex but dropped by the cleaner
    ["北京 is", 3],
    // Special-token strings are text (F25): "[", "sep", "]".
    ["[SEP]", 3],
    ["x[SEP]y", 5],
    ["[SE", 2],
    ["a".repeat(500), 1],
  ];
  for (const [text, words] of cases) {
    assert.equal(tok.bound.lowerBound(text).tokens, words, JSON.stringify(text));
    assert.ok(tok.tokenize(text).length >= words);
  }
  // A non-special added token is still matched in text: one token.
  const json = tok.source.json as { added_tokens: unknown[]; model: { vocab: object } };
  const withAdded = SanitizedTokenizer.fromJson({
    ...json,
    added_tokens: [...json.added_tokens, {
      id: Object.keys(json.model.vocab).length,
      content: "[X]",
      special: false,
      normalized: false,
    }],
  });
  for (const [text, words] of [["[X]", 1], ["a[X]b", 3], ["[SEP][X]", 4]] as const) {
    assert.equal(withAdded.bound.lowerBound(text).tokens, words, JSON.stringify(text));
    assert.ok(withAdded.tokenize(text).length >= words, JSON.stringify(text));
    assert.equal(withAdded.tokenize(text).filter((p) => p === "[X]").length, 1);
  }
});

Deno.test("TokenBound.safeCut() prefixes tokenize to the first tokens of the whole text", async () => {
  for (const { name, tok, canCut } of await allTokenizers()) {
    if (!canCut) continue;
    const rand = mulberry32(0xc07 + name.length);
    let cuts = 0;
    for (let k = 0; k < TEXTS_PER_TOKENIZER; k++) {
      const text = randomText(rand, 80);
      const want = 1 + Math.floor(rand() * 30);
      const cut = tok.bound.safeCut(text, want);
      if (cut.kind !== "cut") {
        assert.equal(cut.kind, "none");
        continue;
      }
      cuts++;
      assert.ok(cut.at > 0 && cut.at < text.length);
      const whole = tok.tokenize(text);
      const prefix = tok.tokenize(text.slice(0, cut.at));
      assert.ok(prefix.length >= want, `${name}: ${prefix.length} < ${want}`);
      assert.deepEqual(
        prefix,
        whole.slice(0, prefix.length),
        `${name}: cut at ${cut.at} of ${JSON.stringify(text)}`,
      );
    }
    assert.ok(cuts > TEXTS_PER_TOKENIZER / 4, `${name}: only ${cuts} cuts`);
  }
});

Deno.test("TokenBound scans stop early on a 50 MiB text and honour the scan limit", async () => {
  const bert = await SanitizedTokenizer.fromFile(`${MODELS}/synapse-tiny-embed/tokenizer.json`);
  const llama = await SanitizedTokenizer.fromFile(`${MODELS}/synapse-tiny-llama/tokenizer.json`);
  const huge = "lorem ipsum dolor ".repeat(Math.ceil(50 * 2 ** 20 / 18));
  for (const tok of [bert, llama]) {
    const lb = tok.bound.lowerBound(huge, { stopAbove: 512, scanLimit: 1 << 20 });
    assert.equal(lb.exhausted, false);
    assert.ok(lb.tokens > 512);
    const cut = tok.bound.safeCut(huge, 600, { scanLimit: 1 << 20 });
    assert.equal(cut.kind, "cut");
  }
  // One 8 MiB word: WordPiece proves one token, and only a full scan can say so.
  const word = "a".repeat(8 * 2 ** 20);
  assert.deepEqual(bert.bound.lowerBound(word, { stopAbove: 512, scanLimit: 1 << 20 }), {
    tokens: 1,
    exhausted: true,
  });
  assert.deepEqual(bert.bound.lowerBound(word, { stopAbove: 512 }), {
    tokens: 1,
    exhausted: false,
  });
  assert.deepEqual(bert.bound.safeCut(word, 2, { scanLimit: 1 << 20 }), { kind: "exhausted" });
  assert.deepEqual(bert.bound.safeCut(word, 2), { kind: "none" });
});

Deno.test("TokenBound.none() proves nothing", () => {
  const b = TokenBound.none("test");
  assert.equal(b.kind, "none");
  assert.equal(b.reason, "test");
  assert.deepEqual(b.lowerBound("a b c"), { tokens: 0, exhausted: false });
});

Deno.test("TokenBound.compact() shortens long words and keeps every token, for every tokenizer", async () => {
  for (const { name, tok } of await allTokenizers()) {
    const rand = mulberry32(0xc0c0 + name.length);
    let shortened = 0;
    for (let k = 0; k < TEXTS_PER_TOKENIZER / 2; k++) {
      let text = randomText(rand, 60);
      // Long words of every kind: plain, with accents or zero-width characters, next to
      // punctuation, CJK and added tokens.
      if (rand() < 0.5) {
        const piece = ["x", "é", "a\u200b", "Ab", "1", "e\u0301"][Math.floor(rand() * 6)]!;
        const at = Math.floor(rand() * (text.length + 1));
        text = text.slice(0, at) + piece.repeat(50 + Math.floor(rand() * 200)) + text.slice(at);
      }
      const compacted = tok.bound.compact(text);
      if (compacted.length < text.length) shortened++;
      assert.deepEqual(tok.tokenize(compacted), tok.tokenize(text), `${name}: ${text}`);
    }
    if (tok.bound.kind === "pre_tokens") assert.ok(shortened > 50, `${name}: ${shortened}`);
    else assert.equal(shortened, 0);
  }
});

Deno.test("SanitizedTokenizer.encode() of one 32 MiB word is one [UNK], tokenized from a compacted text", async () => {
  const tok = await SanitizedTokenizer.fromFile(`${MODELS}/synapse-tiny-embed/tokenizer.json`);
  const word = "é".repeat(32 * 2 ** 20);
  assert.equal(tok.bound.compact(word).length, 101);
  const seq = tok.encode(word, { maxTokens: 512 });
  assert.deepEqual(
    Array.from(seq.ids),
    Array.from(tok.encode("é".repeat(101), { maxTokens: 512 }).ids),
  );
  assert.equal(seq.submittedTokens, 3);
});
