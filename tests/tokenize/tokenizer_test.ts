import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { SanitizedTokenizer } from "../../lib/tokenize/tokenizer.ts";
import { SynapseError } from "../../lib/contract/errors.ts";
import { MODELS } from "../_helpers.ts";

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
