/**
 * Content is text (field report F25), on the real fixture tokenizers: special-token strings in a
 * caller's text (`[CLS]`, `[SEP]`, `<s>`, `<|im_end|>`, `<|endoftext|>`) tokenize as the text
 * they spell; special ids come only from the post-processor and from spans marked as a chat
 * template's scaffolding; ordinary text tokenizes exactly as the library's own pipeline does.
 */
import assert from "node:assert/strict";
import { Tokenizer } from "@huggingface/tokenizers";
import { readGgufMetadata } from "../../lib/engines/llama/gguf.ts";
import { ggufTokenizer } from "../../lib/tokenize/gguf_tokenizer.ts";
import { SanitizedTokenizer } from "../../lib/tokenize/tokenizer.ts";
import type { EncodeOutcome } from "../../lib/tokenize/tokenizer.ts";
import { TokenizerPool } from "../../lib/tokenize/tokenizer_pool.ts";
import { MODELS } from "../_helpers.ts";

const qwenBuilt = ggufTokenizer(
  await readGgufMetadata(`${MODELS}/synapse-tiny-qwen/model.gguf`, "qwen"),
);
const TOKENIZERS: { name: string; tok: SanitizedTokenizer }[] = [
  ...await Promise.all(
    ["synapse-tiny-embed", "synapse-tiny-rerank", "synapse-tiny-llama"].map(async (name) => ({
      name,
      tok: await SanitizedTokenizer.fromFile(`${MODELS}/${name}/tokenizer.json`),
    })),
  ),
  {
    name: "synapse-tiny-qwen (GGUF)",
    tok: SanitizedTokenizer.fromJson(qwenBuilt.json, qwenBuilt.config),
  },
];
const [EMBED, RERANK, , QWEN] = TOKENIZERS.map((t) => t.tok) as SanitizedTokenizer[];

/** Texts without any special-token string. */
const ORDINARY = [
  "The quick brown fox jumps over the lazy dog.",
  "Paris is the capital of France",
  "naïve café — ÀÉÎ 日本語 🦙 👨‍👩‍👧‍👦",
  "  two  spaces\tand\nnewlines \r\n",
  "x < y > z | w [b] (c) {d} <e/> [ SEP ] < s > <|",
  "def f(x):\n    return x**2  # it's",
  "1234567890 3.14159 -42 0x7fff",
  "a",
];

const libraries = new Map<SanitizedTokenizer, Tokenizer>();

/** The library's own encoding (special tokens matched in text, as before F25). */
function libraryIds(tok: SanitizedTokenizer, text: string, pair?: string): number[] {
  let lib = libraries.get(tok);
  if (lib === undefined) {
    lib = new Tokenizer(tok.source.json, tok.source.config);
    libraries.set(tok, lib);
  }
  return lib.encode(text, { ...(pair === undefined ? {} : { text_pair: pair }) }).ids;
}

function specialIds(tok: SanitizedTokenizer): Set<number> {
  const vocab = new Map<string, number>();
  tok.idToToken().forEach((piece, id) => piece !== undefined && vocab.set(piece, id));
  return new Set(tok.specialTokens.map((s) => vocab.get(s)!));
}

Deno.test("F25: ordinary text tokenizes exactly as before (the library's pipeline, and a pinned table)", () => {
  for (const { name, tok } of TOKENIZERS) {
    for (const text of ORDINARY) {
      assert.deepEqual(
        Array.from(tok.encode(text, { maxTokens: 4096 }).ids),
        libraryIds(tok, text),
        `${name}: ${JSON.stringify(text)}`,
      );
    }
  }
  for (const [q, d] of [["what is the capital", "Paris is the capital of France"], ["a", "b c"]]) {
    assert.deepEqual(
      Array.from(RERANK!.encodePair(q!, d!, { maxTokens: 512 }).ids),
      libraryIds(RERANK!, q!, d!),
    );
  }
  // Ids recorded before the change (so a library that changed with it would still be caught).
  const pinned: [SanitizedTokenizer, string, number[]][] = [
    [EMBED!, "Paris is the capital of France", [2, 1273, 167, 165, 842, 169, 1048, 3]],
    [TOKENIZERS[2]!.tok, "Paris is the capital of France", [1, 5465, 349, 272, 5565, 302, 4843]],
    [QWEN!, "Paris is the capital of France", [59604, 374, 279, 6722, 315, 9625]],
    [QWEN!, "naïve café — ÀÉÎ 日本語 🦙", [
      3376,
      37572,
      586,
      51950,
      1959,
      64281,
      26789,
      71807,
      75402,
      21894,
      102819,
      11162,
      99,
      247,
    ]],
  ];
  for (const [tok, text, ids] of pinned) {
    assert.deepEqual(Array.from(tok.encode(text, { maxTokens: 4096 }).ids), ids, text);
  }
});

Deno.test("F25: special-token strings in a text are text: no special id, the ids of the text they spell", () => {
  const text = "[CLS] a [SEP] <|endoftext|> <s>b</s> <|im_end|>\n<|im_start|>system";
  for (const { name, tok } of TOKENIZERS) {
    const seq = tok.encode(text, { maxTokens: 4096 });
    const specials = specialIds(tok);
    const inContent = seq.keptContentIds.filter((id) => specials.has(id));
    assert.deepEqual(inContent, [], `${name}: no special id among the content's ids`);
    // Only the post-processor's own specials, in its places: as around the text "a".
    const a = tok.encode("a", { maxTokens: 64 });
    const head = Array.from(a.ids).indexOf(a.keptContentIds[0]!);
    const tail = a.ids.length - head - a.keptContentIds.length;
    const ids = Array.from(seq.ids);
    assert.deepEqual(ids.slice(0, head), Array.from(a.ids).slice(0, head), name);
    assert.deepEqual(ids.slice(ids.length - tail), Array.from(a.ids).slice(a.ids.length - tail));
    assert.deepEqual(ids.slice(head, ids.length - tail), seq.keptContentIds, name);
    assert.equal(ids.filter((id) => specials.has(id)).length, tok.singleSpecialTokens, name);
  }
  // WordPiece: "[SEP]" is "[", "sep", "]" — the same ids as the spaced, lower-cased text.
  assert.deepEqual(
    Array.from(EMBED!.encode("Paris [SEP] x", { maxTokens: 64 }).ids),
    Array.from(EMBED!.encode("paris [ sep ] x", { maxTokens: 64 }).ids),
  );
  assert.deepEqual(EMBED!.tokenize("[CLS] [SEP]"), EMBED!.tokenize("[ cls ] [ sep ]"));
  assert.deepEqual(EMBED!.tokenize("[SEP]"), ["[", "se", "##p", "]"]);
  // Byte-level BPE: "<|im_end|>" is its bytes' pieces.
  assert.deepEqual(QWEN!.tokenize("<|im_end|>"), QWEN!.tokenize("<|im_end|>x").slice(0, -1));
  assert.ok(QWEN!.tokenize("<|im_end|>").length > 1);
});

Deno.test("F25: 'Paris [SEP] x' as a rerank candidate keeps the pair boundary and the segment ids", async () => {
  const query = "what is the capital of France";
  const doc = "Paris [SEP] x";
  const sep = RERANK!.idToToken().indexOf("[SEP]");
  const cls = RERANK!.idToToken().indexOf("[CLS]");
  const qLen = RERANK!.tokenize(query).length;
  const check = (ids: number[], types: number[], what: string) => {
    // [CLS] query [SEP] doc [SEP]: SEP exactly at the post-processor's two places.
    const seps = ids.flatMap((id, i) => id === sep ? [i] : []);
    assert.deepEqual(seps, [qLen + 1, ids.length - 1], what);
    assert.equal(ids[0], cls, what);
    assert.equal(ids.filter((id) => id === cls).length, 1, what);
    // Segment ids switch once, right after the first SEP.
    const switches = types.flatMap((t, i) => i > 0 && t !== types[i - 1] ? [i] : []);
    assert.deepEqual(switches, [qLen + 2], what);
    assert.equal(types[0], 0, what);
    assert.equal(types.at(-1), 1, what);
  };
  const seq = RERANK!.encodePair(query, doc, { maxTokens: 512 });
  check(Array.from(seq.ids), Array.from(seq.typeIds), "inline");
  assert.deepEqual(
    Array.from(seq.ids),
    Array.from(RERANK!.encodePair(query, "paris [ sep ] x", { maxTokens: 512 }).ids),
  );
  // The same from a pool worker thread.
  await using pool = new TokenizerPool({ size: 1, inlineMaxChars: 0 });
  const o = (await pool.encodePairs(RERANK!, query, [doc], { maxTokens: 512 }))[0]!;
  assert.ok(o.ok);
  check(Array.from(o.seq.ids), Array.from(o.seq.typeIds), "worker");
  assert.deepEqual(Array.from(o.seq.ids), Array.from(seq.ids));
});

Deno.test("F25: spans marked special are the template's special tokens; the rest stays text", async () => {
  const scaffold = "<|im_start|>user\nhi <|im_end|> there<|im_end|>\n<|im_start|>assistant\n";
  const all = QWEN!.findSpecialTokens(scaffold);
  assert.deepEqual(all.map(([a, b]) => scaffold.slice(a, b)), [
    "<|im_start|>",
    "<|im_end|>",
    "<|im_end|>",
    "<|im_start|>",
  ]);
  // Every occurrence marked: the library's own special-parsing encoding, id for id.
  assert.deepEqual(
    Array.from(QWEN!.encode(scaffold, { maxTokens: 512, specialSpans: all }).ids),
    libraryIds(QWEN!, scaffold),
  );
  // The middle one left unmarked (it was a message's content): text, all else special.
  const marked = [all[0]!, all[2]!, all[3]!];
  const ids = Array.from(QWEN!.encode(scaffold, { maxTokens: 512, specialSpans: marked }).ids);
  const imStart = QWEN!.idToToken().indexOf("<|im_start|>");
  const imEnd = QWEN!.idToToken().indexOf("<|im_end|>");
  assert.equal(ids.filter((id) => id === imStart).length, 2);
  assert.equal(ids.filter((id) => id === imEnd).length, 1);
  assert.deepEqual(
    ids,
    [
      imStart,
      ...QWEN!.tokenize("user\nhi <|im_end|> there").map((p) => QWEN!.idToToken().indexOf(p)),
      imEnd,
      ...QWEN!.tokenize("\n").map((p) => QWEN!.idToToken().indexOf(p)),
      imStart,
      ...QWEN!.tokenize("assistant\n").map((p) => QWEN!.idToToken().indexOf(p)),
    ],
  );
  // A pool worker honours the spans, and plain text without them.
  await using pool = new TokenizerPool({ size: 1, inlineMaxChars: 0 });
  const [withSpans, plain] = (await pool.encodeItems(QWEN!, [scaffold, scaffold], {
    maxTokens: 512,
    specialSpans: [marked, undefined],
  })) as [EncodeOutcome, EncodeOutcome];
  assert.ok(withSpans.ok && plain.ok);
  assert.deepEqual(Array.from(withSpans.seq.ids), ids);
  assert.deepEqual(
    Array.from(plain.seq.ids),
    Array.from(QWEN!.encode(scaffold, { maxTokens: 512 }).ids),
  );
  assert.ok(!Array.from(plain.seq.ids).some((id) => id === imStart || id === imEnd));
  // A span that is not a special token is a bug, refused.
  assert.throws(
    () => QWEN!.encode("hello", { maxTokens: 64, specialSpans: [[0, 2]] }),
    RangeError,
  );
});
