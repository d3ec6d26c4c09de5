import assert from "node:assert/strict";
import { mulberry32 } from "../../scripts/gen_models.ts";
import { SynapseError } from "../../lib/contract/errors.ts";
import { sha256Hex } from "../../lib/identity/sha256.ts";
import { TokenizerPool } from "../../lib/tokenize/tokenizer_pool.ts";
import { SanitizedTokenizer } from "../../lib/tokenize/tokenizer.ts";
import type { EncodedSequence, EncodeOutcome } from "../../lib/tokenize/tokenizer.ts";
import { MODELS } from "../_helpers.ts";
import { allTokenizers, randomText } from "./_tokenizers.ts";

function direct(f: () => EncodedSequence): EncodeOutcome {
  try {
    return { ok: true, seq: f() };
  } catch (error) {
    return { ok: false, error: error as Error };
  }
}

function assertSameOutcome(got: EncodeOutcome, want: EncodeOutcome, what: string): void {
  assert.equal(got.ok, want.ok, what);
  if (got.ok && want.ok) {
    assert.ok(got.seq.ids instanceof Int32Array && got.seq.typeIds instanceof Int32Array);
    assert.deepEqual(got.seq, want.seq, what);
  } else if (!got.ok && !want.ok) {
    assert.equal(got.error.name, want.error.name, what);
    assert.equal(got.error.message, want.error.message, what);
    if (want.error instanceof SynapseError) {
      assert.ok(got.error instanceof SynapseError, what);
      assert.equal(got.error.code, want.error.code, what);
      assert.deepEqual(got.error.details, want.error.details, what);
    }
  }
}

Deno.test("TokenizerPool.encodeItems() equals SanitizedTokenizer.encode() for random texts, on workers and inline", async () => {
  await using pool = new TokenizerPool({ size: 2, inlineMaxChars: 0 });
  await using inline = new TokenizerPool({ size: 1, inlineMaxChars: Infinity });
  for (const { name, tok } of await allTokenizers()) {
    const rand = mulberry32(0x9001 + name.length);
    for (let batch = 0; batch < 12; batch++) {
      const texts = Array.from({ length: 16 }, () => randomText(rand, 120));
      // Some long texts, so plans refuse by bound and cut prefixes before the worker.
      if (batch % 3 === 0) texts.push("lorem ipsum dolor sit amet ".repeat(4000));
      const options = {
        maxTokens: 4 + Math.floor(rand() * 80),
        truncate: rand() < 0.5,
        itemIds: texts.map((_, i) => `b${batch}-${i}`),
      };
      const [fromPool, fromInline] = await Promise.all([
        pool.encodeItems(tok, texts, options),
        inline.encodeItems(tok, texts, options),
      ]);
      texts.forEach((text, i) => {
        const want = direct(() => tok.encode(text, { ...options, itemId: options.itemIds[i]! }));
        const what = `${name} batch ${batch} item ${i}`;
        assertSameOutcome(fromPool[i]!, want, what);
        assertSameOutcome(fromInline[i]!, want, what);
      });
    }
  }
});

Deno.test("TokenizerPool.encodePairs() equals SanitizedTokenizer.encodePair() per document", async () => {
  await using pool = new TokenizerPool({ size: 1, inlineMaxChars: 0 });
  const tok = await SanitizedTokenizer.fromFile(`${MODELS}/synapse-tiny-rerank/tokenizer.json`);
  const rand = mulberry32(0x9a1);
  for (let k = 0; k < 20; k++) {
    const query = randomText(rand, 20);
    const docs = Array.from({ length: 10 }, () => randomText(rand, 150));
    docs.push("w ".repeat(50_000));
    const options = {
      maxTokens: 8 + Math.floor(rand() * 100),
      truncate: rand() < 0.5,
      itemIds: docs.map((_, i) => String(i)),
    };
    const got = await pool.encodePairs(tok, query, docs, options);
    docs.forEach((doc, i) => {
      const want = direct(() => tok.encodePair(query, doc, { ...options, itemId: String(i) }));
      assertSameOutcome(got[i]!, want, `pair ${k}/${i}`);
    });
  }
});

Deno.test("TokenizerPool: a throwing item becomes that item's error and the worker keeps serving", async () => {
  await using pool = new TokenizerPool({ size: 1, inlineMaxChars: 0 });
  // A Unigram tokenizer (no bound, so tokenized in full) throws RangeError from the library for
  // a very long text, and only for it.
  const unigram = SanitizedTokenizer.fromJson({
    version: "1.0",
    added_tokens: [],
    normalizer: null,
    pre_tokenizer: null,
    post_processor: null,
    decoder: null,
    model: { type: "Unigram", unk_id: 0, vocab: [["<unk>", 0], ["a", -1], ["b", -2]] },
  });
  const texts = ["ab ab", "ab".repeat(1_000_000), "ba"];
  const out = await pool.encodeItems(unigram, texts, { maxTokens: 10_000_000 });
  assert.ok(out[0]!.ok && out[2]!.ok);
  assert.ok(!out[1]!.ok);
  assert.equal(out[1]!.error.name, "RangeError");
  // sequence_too_long thrown inside the worker is that item's error too.
  const bert = await SanitizedTokenizer.fromFile(`${MODELS}/synapse-tiny-embed/tokenizer.json`);
  const again = await pool.encodeItems(bert, ["a b c d e f g", "ok"], {
    maxTokens: 5,
    itemIds: ["long", "short"],
  });
  assert.ok(!again[0]!.ok && again[0]!.error instanceof SynapseError);
  assert.equal(again[0]!.error.code, "sequence_too_long");
  assert.deepEqual(again[0]!.error.details, { tokens: 9, max_tokens: 5, item_id: "long" });
  assert.ok(again[1]!.ok);
  assert.equal(pool.running, 0);
});

Deno.test("TokenizerPool tokenizes a 10 MiB text while the main thread keeps running timers", async () => {
  await using pool = new TokenizerPool({ size: 1 });
  const tok = await SanitizedTokenizer.fromFile(`${MODELS}/synapse-tiny-embed/tokenizer.json`);
  await pool.warm(tok);
  // Fits (no truncation, a huge limit), so the worker must tokenize all of it.
  const unit = "the quick brown fox jumps over the lazy dog ";
  const reps = Math.floor(10 * 2 ** 20 / unit.length);
  const text = unit.repeat(reps);
  let ticks = 0;
  const timer = setInterval(() => ticks++, 1);
  try {
    const [out] = await pool.encodeItems(tok, [text], { maxTokens: 100_000_000 });
    assert.ok(out!.ok);
    assert.equal(out!.seq.submittedTokens, reps * tok.tokenize(unit).length + 2);
  } finally {
    clearInterval(timer);
  }
  // Event-loop progress, not a wall-clock limit: timers kept firing during the work.
  assert.ok(ticks >= 10, `only ${ticks} timer ticks while the worker tokenized`);
});

Deno.test("TokenizerPool: aborting a running batch rejects with the reason and replaces the worker", async () => {
  await using pool = new TokenizerPool({ size: 1 });
  const tok = await SanitizedTokenizer.fromFile(`${MODELS}/synapse-tiny-embed/tokenizer.json`);
  // Fits a huge limit, so the worker tokenizes all 20 MiB (seconds of work).
  const text = "many small words ".repeat(20 * 2 ** 20 / 17);
  const ac = new AbortController();
  const running = pool.encodeItems(tok, [text], { maxTokens: 100_000_000, signal: ac.signal });
  const queued = pool.encodeItems(tok, ["queued text"], { maxTokens: 512 });
  await new Promise((r) => setTimeout(r, 50));
  ac.abort(new Error("caller went away"));
  await assert.rejects(running, /caller went away/);
  const [q] = await queued;
  assert.ok(q!.ok);
  // An already aborted signal rejects before any work.
  await assert.rejects(
    pool.encodeItems(tok, ["a"], { maxTokens: 5, signal: AbortSignal.abort(new Error("gone")) }),
    /gone/,
  );
});

Deno.test("TokenizerPool.dispose() rejects pending batches with disposed and is idempotent", async () => {
  const pool = new TokenizerPool({ size: 1, inlineMaxChars: 0 });
  const tok = await SanitizedTokenizer.fromFile(`${MODELS}/synapse-tiny-embed/tokenizer.json`);
  const pending = pool.encodeItems(tok, ["x".repeat(8 * 2 ** 20)], { maxTokens: 512 });
  const queued = pool.encodeItems(tok, ["a b"], { maxTokens: 512 });
  await pool.dispose();
  await pool.dispose();
  assert.equal(pool.disposed, true);
  for (const p of [pending, queued]) await assert.rejects(p, { code: "disposed" });
  await assert.rejects(pool.encodeItems(tok, ["a"], { maxTokens: 5 }), { code: "disposed" });
  await assert.rejects(pool.warm(tok), { code: "disposed" });
});

Deno.test("TokenizerPool() throws RangeError for an invalid size or limit, and encodeItems() for an invalid maxTokens", async () => {
  for (const size of [0, -1, 1.5, NaN]) {
    assert.throws(() => new TokenizerPool({ size }), RangeError, String(size));
  }
  assert.throws(() => new TokenizerPool({ inlineMaxChars: -1 }), RangeError);
  assert.throws(() => new TokenizerPool({ scanLimit: NaN }), RangeError);
  await using pool = new TokenizerPool({ size: 1 });
  const tok = await SanitizedTokenizer.fromFile(`${MODELS}/synapse-tiny-embed/tokenizer.json`);
  await assert.rejects(pool.encodeItems(tok, ["a"], { maxTokens: 0 }), RangeError);
});

Deno.test("TokenizerPool.encodeItems() hashes the whole submitted text when asked, even when tokenizing a prefix", async () => {
  const tok = await SanitizedTokenizer.fromFile(`${MODELS}/synapse-tiny-embed/tokenizer.json`);
  const texts = ["héllo wörld", "many words ".repeat(20_000), "a b c d e f g h"];
  for (const inlineMaxChars of [0, Infinity]) {
    await using pool = new TokenizerPool({ size: 1, inlineMaxChars });
    const options = { maxTokens: 6, truncate: true, submittedSha256: true };
    const out = await pool.encodeItems(tok, texts, options);
    texts.forEach((text, i) => {
      const o = out[i]!;
      assert.ok(o.ok);
      assert.equal(o.submittedSha256, sha256Hex(text));
      assert.deepEqual(o.seq, tok.encode(text, options));
    });
    assert.equal(out[1]!.ok && out[1]!.seq.submittedTokensIsLowerBound, true);
    // Not asked: not computed.
    const plain = await pool.encodeItems(tok, texts, { maxTokens: 6, truncate: true });
    assert.ok(plain.every((o) => o.ok && o.submittedSha256 === undefined));
  }
});
