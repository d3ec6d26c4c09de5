import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mulberry32 } from "../../scripts/gen_models.ts";
import { SanitizedTokenizer } from "../../lib/tokenize/tokenizer.ts";
import type { EncodedSequence } from "../../lib/tokenize/tokenizer.ts";
import { SynapseError } from "../../lib/contract/errors.ts";
import { MODELS } from "../_helpers.ts";
import { allTokenizers, randomText } from "./_tokenizers.ts";

const path = `${MODELS}/synapse-tiny-embed/tokenizer.json`;

Deno.test("SanitizedTokenizer strips padding and truncation and digests the sanitized JSON", async () => {
  const raw = JSON.parse(await Deno.readTextFile(path));
  assert.notEqual(raw.truncation, null, "fixture must carry truncation to prove sanitization");
  assert.notEqual(raw.padding, null, "fixture must carry padding to prove sanitization");
  const tok = await SanitizedTokenizer.fromFile(path);
  const expected = "sha256:" +
    createHash("sha256").update(JSON.stringify({ ...raw, padding: null, truncation: null })).digest(
      "hex",
    );
  assert.equal(tok.digest, expected);
  // Same digest whatever padding/truncation the file carried.
  const other = SanitizedTokenizer.fromJson({
    ...raw,
    padding: null,
    truncation: { max_length: 7 },
  });
  assert.equal(other.digest, tok.digest);
  // The file's truncation (128) and padding (Fixed 128) are not applied.
  const long = Array(300).fill("a").join(" ");
  const enc = tok.encode(long, { maxTokens: 512 });
  assert.equal(enc.ids.length, 302);
  const short = tok.encode("hello", { maxTokens: 512 });
  assert.equal(short.ids.length, 3);
});

Deno.test("SanitizedTokenizer.encode() truncates content and keeps the special tokens", async () => {
  const tok = await SanitizedTokenizer.fromFile(path);
  const full = tok.encode("a b c d e f", { maxTokens: 100 });
  const cut = tok.encode("a b c d e f", { maxTokens: 5, truncate: true });
  assert.equal(cut.ids.length, 5);
  assert.equal(cut.ids[0], full.ids[0]); // [CLS]
  assert.equal(cut.ids[4], full.ids[full.ids.length - 1]); // [SEP]
  assert.deepEqual(Array.from(cut.ids.subarray(1, 4)), Array.from(full.ids.subarray(1, 4)));
  assert.equal(cut.submittedTokens, 8);
  assert.equal(cut.effectiveTokens, 5);
  assert.equal(cut.truncated, true);
  assert.equal(tok.decode(cut.keptContentIds), "a b c");
});

Deno.test("SanitizedTokenizer.encode() refuses over max_tokens with sequence_too_long details", async () => {
  const tok = await SanitizedTokenizer.fromFile(path);
  assert.throws(() => tok.encode("a b c d", { maxTokens: 5, itemId: "it" }), (e: unknown) => {
    assert.ok(e instanceof SynapseError);
    assert.equal(e.code, "sequence_too_long");
    assert.deepEqual(e.details, { tokens: 6, max_tokens: 5, item_id: "it" });
    return true;
  });
  assert.equal(tok.encode("a b c", { maxTokens: 5 }).ids.length, 5);
});

Deno.test("SanitizedTokenizer.encodePair() marks segments and truncates only the document", async () => {
  const tok = await SanitizedTokenizer.fromFile(`${MODELS}/synapse-tiny-rerank/tokenizer.json`);
  const e = tok.encodePair("q q", "d d d", { maxTokens: 100 });
  assert.deepEqual(Array.from(e.typeIds), [0, 0, 0, 0, 1, 1, 1, 1]);
  const cut = tok.encodePair("q q", "d d d", { maxTokens: 7, truncate: true });
  assert.equal(cut.ids.length, 7);
  assert.deepEqual(Array.from(cut.typeIds), [0, 0, 0, 0, 1, 1, 1]);
  assert.throws(() => tok.encodePair("q q q q q q", "d", { maxTokens: 7, truncate: true }), {
    code: "sequence_too_long",
  });
});

Deno.test("SanitizedTokenizer.fromFile() refuses a missing or broken file with artifact_invalid", async () => {
  await assert.rejects(SanitizedTokenizer.fromFile("/nonexistent/tokenizer.json"), {
    code: "artifact_invalid",
  });
  const dir = await Deno.makeTempDir();
  await Deno.writeTextFile(`${dir}/tokenizer.json`, "{not json");
  await assert.rejects(SanitizedTokenizer.fromFile(`${dir}/tokenizer.json`), {
    code: "artifact_invalid",
  });
  await Deno.remove(dir, { recursive: true });
});

Deno.test("SanitizedTokenizer.encode() of long texts keeps exactly the tokens full tokenization keeps", async () => {
  // fullTokenizeMaxChars 0 takes the bounded path for every text; Infinity never does.
  for (const { name, tok } of await allTokenizers()) {
    const rand = mulberry32(0xd1ff + name.length);
    let prefixes = 0, lowerBoundRefusals = 0;
    for (let k = 0; k < 300; k++) {
      const text = randomText(rand, 200);
      const query = rand() < 0.3 ? randomText(rand, 12) : undefined;
      const options = {
        maxTokens: 3 + Math.floor(rand() * 60),
        truncate: rand() < 0.6,
        itemId: `i${k}`,
      };
      const encode = (fullTokenizeMaxChars: number) => () =>
        query === undefined
          ? tok.encode(text, { ...options, fullTokenizeMaxChars })
          : tok.encodePair(query, text, { ...options, fullTokenizeMaxChars });
      const full = outcome(encode(Infinity));
      const bounded = outcome(encode(0));
      const what = `${name} ${JSON.stringify({ query, options })} ${JSON.stringify(text)}`;
      if (!full.ok) {
        assert.ok(!bounded.ok, what);
        const a = full.error as SynapseError, b = bounded.error as SynapseError;
        assert.equal(b.code, a.code, what);
        if (b.details?.tokens_is_lower_bound === true) {
          lowerBoundRefusals++;
          const { tokens_is_lower_bound: _, tokens, ...rest } = b.details;
          const { tokens: exact, ...want } = a.details!;
          assert.deepEqual(rest, want, what);
          assert.ok((tokens as number) <= (exact as number), what);
          assert.ok((tokens as number) > options.maxTokens, what);
        } else assert.deepEqual(b.details, a.details, what);
        continue;
      }
      assert.ok(bounded.ok, what);
      const a = full.seq, b = bounded.seq;
      assert.deepEqual(Array.from(b.ids), Array.from(a.ids), what);
      assert.deepEqual(Array.from(b.typeIds), Array.from(a.typeIds), what);
      assert.deepEqual(b.keptContentIds, a.keptContentIds, what);
      assert.equal(b.effectiveTokens, a.effectiveTokens, what);
      assert.equal(b.truncated, a.truncated, what);
      assert.equal(a.submittedTokensIsLowerBound, false);
      if (b.submittedTokensIsLowerBound) {
        prefixes++;
        assert.ok(b.truncated && b.submittedTokens <= a.submittedTokens, what);
        assert.ok(b.submittedTokens > options.maxTokens, what);
      } else assert.equal(b.submittedTokens, a.submittedTokens, what);
    }
    if (tok.bound.canCut) assert.ok(prefixes > 20, `${name}: ${prefixes} prefix encodings`);
    if (tok.bound.kind !== "none") assert.ok(lowerBoundRefusals > 10, name);
  }
});

Deno.test("SanitizedTokenizer.encode() refuses a 10 MiB text from its length, with a lower bound", async () => {
  for (const name of ["synapse-tiny-embed", "synapse-tiny-llama"]) {
    const tok = await SanitizedTokenizer.fromFile(`${MODELS}/${name}/tokenizer.json`);
    const text = "the quick brown fox ".repeat(10 * 2 ** 20 / 20);
    assert.throws(() => tok.encode(text, { maxTokens: 512, itemId: "big" }), (e: unknown) => {
      assert.ok(e instanceof SynapseError);
      assert.equal(e.code, "sequence_too_long");
      assert.equal(e.details?.max_tokens, 512);
      assert.equal(e.details?.item_id, "big");
      assert.equal(e.details?.tokens_is_lower_bound, true);
      assert.ok((e.details?.tokens as number) > 512);
      assert.match(e.message, /at least \d+ tokens exceed max_tokens 512/);
      return true;
    });
    // Truncated from a prefix: the kept tokens are those of the text's first words.
    const cut = tok.encode(text, { maxTokens: 512, truncate: true });
    const head = tok.encode(text.slice(0, 40_000), { maxTokens: 512, truncate: true });
    assert.deepEqual(Array.from(cut.ids), Array.from(head.ids));
    assert.deepEqual(cut.keptContentIds, head.keptContentIds);
    assert.equal(cut.truncated, true);
    assert.equal(cut.submittedTokensIsLowerBound, true);
    assert.ok(cut.submittedTokens > 512);
  }
});

Deno.test("SanitizedTokenizer.encodePairs() equals encodePair() per document, errors included", async () => {
  const tok = await SanitizedTokenizer.fromFile(`${MODELS}/synapse-tiny-rerank/tokenizer.json`);
  const docs = ["short", Array(600).fill("a").join(" "), "x y z", "b ".repeat(40_000)];
  for (const truncate of [false, true]) {
    const options = { maxTokens: 512, truncate };
    const many = tok.encodePairs("the query", docs, { ...options, itemIds: ["0", "1", "2", "3"] });
    docs.forEach((doc, i) => {
      const one = outcome(() =>
        tok.encodePair("the query", doc, { ...options, itemId: String(i) })
      );
      assert.equal(many[i]!.ok, one.ok);
      if (one.ok && many[i]!.ok) assert.deepEqual(many[i]!.seq, one.seq);
      if (!one.ok && !many[i]!.ok) {
        assert.deepEqual(
          (many[i]!.error as SynapseError).details,
          (one.error as SynapseError).details,
        );
      }
    });
  }
});

Deno.test("SanitizedTokenizer.planEncode() is undecided past its scan limit, and encodeWithPlan() still equals encode()", async () => {
  const tok = await SanitizedTokenizer.fromFile(`${MODELS}/synapse-tiny-embed/tokenizer.json`);
  const word = "a".repeat(200_000) + " b c";
  const options = { maxTokens: 8, truncate: true };
  const plan = tok.planEncode(word, { ...options, scanLimit: 1000 });
  assert.deepEqual(plan, { kind: "undecided" });
  assert.deepEqual(tok.encodeWithPlan(word, plan, options), tok.encode(word, options));
  const prose = "one two three ".repeat(20_000);
  const p = tok.planEncode(prose, { ...options, scanLimit: 1000 });
  assert.equal(p.kind, "prefix");
  if (p.kind !== "prefix") return;
  // The worker may get only the prefix.
  assert.deepEqual(
    tok.encodeWithPlan(prose.slice(0, p.cut), p, options),
    tok.encode(prose, options),
  );
});

Deno.test("SanitizedTokenizer.encode() throws RangeError for an invalid maxTokens", async () => {
  const tok = await SanitizedTokenizer.fromFile(path);
  for (const maxTokens of [0, -1, 1.5, NaN, Infinity]) {
    assert.throws(() => tok.encode("a", { maxTokens }), RangeError, String(maxTokens));
  }
});

function outcome(f: () => EncodedSequence): { ok: true; seq: EncodedSequence } | {
  ok: false;
  error: unknown;
} {
  try {
    return { ok: true, seq: f() };
  } catch (error) {
    return { ok: false, error };
  }
}
