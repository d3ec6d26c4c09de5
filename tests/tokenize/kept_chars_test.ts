/**
 * Field report F26 on the real fixture tokenizers: a truncated text's kept tokens cover a prefix
 * of the caller's own text that ends exactly where the last kept token ends (`keptTextEnd`,
 * `keptChars` in code points: the end of that token's `tokenize` span, lib/tokenize/
 * token_offsets.ts), the same rule for every tokenizer family, inline and in a pool worker.
 */
import assert from "node:assert/strict";
import { readGgufMetadata } from "../../lib/engines/llama/gguf.ts";
import { ggufTokenizer } from "../../lib/tokenize/gguf_tokenizer.ts";
import { SanitizedTokenizer } from "../../lib/tokenize/tokenizer.ts";
import type { EncodeOutcome } from "../../lib/tokenize/tokenizer.ts";
import { TokenizerPool } from "../../lib/tokenize/tokenizer_pool.ts";
import { MODELS } from "../_helpers.ts";

const built = ggufTokenizer(
  await readGgufMetadata(`${MODELS}/synapse-tiny-qwen/model.gguf`, "qwen"),
);
const TOKENIZERS: { name: string; tok: SanitizedTokenizer }[] = [
  ...await Promise.all(
    ["synapse-tiny-embed", "synapse-tiny-llama"].map(async (name) => ({
      name,
      tok: await SanitizedTokenizer.fromFile(`${MODELS}/${name}/tokenizer.json`),
    })),
  ),
  { name: "qwen (byte-level BPE)", tok: SanitizedTokenizer.fromJson(built.json, built.config) },
];
const TEXTS = [
  "Café ÜBER naïve ".repeat(200),
  "CAFÉ ÜBER NAÏVE ".repeat(200),
  "emoji 🦙🔥 👨‍👩‍👧‍👦 日本語のテキスト ".repeat(80),
  ("xy".repeat(30) + " ").repeat(100),
  "unbelievably, the tokenization-of-hyphenated words ".repeat(60),
];

function codePoints(s: string): number {
  return [...s].length;
}

Deno.test("F26: a truncated text's kept prefix ends where its last kept token ends, in every family", () => {
  for (const { name, tok } of TOKENIZERS) {
    for (const text of TEXTS) {
      for (const maxTokens of [17, 64, 200]) {
        const seq = tok.encode(text, { maxTokens, truncate: true });
        assert.ok(seq.truncated, name);
        const end = seq.keptTextEnd!;
        const prefix = text.slice(0, end);
        assert.equal(seq.keptChars, codePoints(prefix), name);
        assert.ok(prefix.isWellFormed(), name);
        // The prefix tokenizes to exactly the kept tokens …
        const kept = seq.keptContentIds;
        const again = tok.encode(prefix, { maxTokens: 4096 }).keptContentIds;
        assert.deepEqual(again.slice(0, kept.length), kept, `${name} ${maxTokens}`);
        // … and one code point less does not start with them — the last kept token ends there —
        // unless that code point adds no token of its own: the rest of a word one [UNK] stands
        // for, or a mark an uncased model strips, belongs to the token (its `tokenize` span, as
        // Hugging Face's offsets give an [UNK] the whole word).
        const shorter = [...prefix].slice(0, -1).join("");
        const less = tok.encode(shorter, { maxTokens: 4096 }).keptContentIds;
        const addsNoToken = tok.tokenize(shorter).length === tok.tokenize(prefix).length &&
          !/\s$/u.test(prefix);
        if (!addsNoToken) {
          assert.notDeepEqual(less.slice(0, kept.length), kept, `${name} ${maxTokens}`);
        }
      }
    }
  }
  // Not truncated: nothing to disclose.
  const whole = TOKENIZERS[0]!.tok.encode("short text", { maxTokens: 64, truncate: true });
  assert.equal(whole.keptTextEnd, undefined);
  assert.equal(whole.keptChars, undefined);
});

Deno.test("F26: cased and uncased texts keep different prefixes of their own text; a worker agrees", async () => {
  const tok = TOKENIZERS[0]!.tok; // uncased WordPiece: both texts encode to the same ids
  const [a, b] = [TEXTS[0]!, TEXTS[1]!];
  const sa = tok.encode(a, { maxTokens: 64, truncate: true });
  const sb = tok.encode(b, { maxTokens: 64, truncate: true });
  assert.deepEqual(Array.from(sa.ids), Array.from(sb.ids));
  assert.equal(sa.keptChars, sb.keptChars);
  assert.notEqual(a.slice(0, sa.keptTextEnd), b.slice(0, sb.keptTextEnd));
  assert.ok(a.slice(0, sa.keptTextEnd).startsWith("Café ÜBER"));
  await using pool = new TokenizerPool({ size: 1, inlineMaxChars: 0 });
  const [wa, wb] = (await pool.encodeItems(tok, [a, b], { maxTokens: 64, truncate: true })) as [
    EncodeOutcome,
    EncodeOutcome,
  ];
  assert.ok(wa.ok && wb.ok);
  assert.equal(wa.seq.keptTextEnd, sa.keptTextEnd);
  assert.equal(wa.seq.keptChars, sa.keptChars);
  assert.equal(wb.seq.keptTextEnd, sb.keptTextEnd);
  // A text far over the limit, tokenized from a proven prefix, follows the same rule.
  const huge = "Café ÜBER naïve ".repeat(20_000);
  const [wh] = (await pool.encodeItems(tok, [huge], { maxTokens: 64, truncate: true })) as [
    EncodeOutcome,
  ];
  assert.ok(wh.ok && wh.seq.submittedTokensIsLowerBound);
  assert.equal(wh.seq.keptTextEnd, sa.keptTextEnd);
});
