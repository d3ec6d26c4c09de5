import assert from "node:assert/strict";
import { mulberry32 } from "../../scripts/gen_models.ts";
import { SynapseError } from "../../lib/contract/errors.ts";
import { checkLengthBound } from "../../lib/tokenize/check_length_bound.ts";
import { SanitizedTokenizer } from "../../lib/tokenize/tokenizer.ts";
import { MODELS } from "../_helpers.ts";
import { allTokenizers, randomText } from "./_tokenizers.ts";

Deno.test("checkLengthBound() refuses a 50 MiB text with the error encode() gives", async () => {
  for (const name of ["synapse-tiny-embed", "synapse-tiny-llama"]) {
    const tok = await SanitizedTokenizer.fromFile(`${MODELS}/${name}/tokenizer.json`);
    const text = "all work and no play ".repeat(50 * 2 ** 20 / 21);
    const options = { maxTokens: 512, itemId: "q" };
    let fromCheck: unknown;
    try {
      checkLengthBound(tok, text, options);
    } catch (e) {
      fromCheck = e;
    }
    assert.ok(fromCheck instanceof SynapseError, name);
    assert.equal(fromCheck.code, "sequence_too_long");
    assert.equal(fromCheck.details?.tokens_is_lower_bound, true);
    assert.equal(fromCheck.details?.item_id, "q");
    assert.throws(() => tok.encode(text, options), (e: unknown) => {
      assert.deepEqual((e as SynapseError).details, fromCheck.details);
      assert.equal((e as SynapseError).message, fromCheck.message);
      return true;
    });
    // Truncation asked for: passes (the encoder cuts a prefix).
    checkLengthBound(tok, text, { ...options, truncate: true });
    // A rerank query that alone leaves no room is refused even with truncation.
    assert.throws(
      () => checkLengthBound(tok, "doc", { ...options, truncate: true, pairQuery: text }),
      { code: "sequence_too_long" },
    );
  }
});

Deno.test("checkLengthBound() never refuses a text that fits, and refuses only what encode() refuses", async () => {
  for (const { name, tok } of await allTokenizers()) {
    const rand = mulberry32(0xc4ec + name.length);
    for (let k = 0; k < 200; k++) {
      const text = randomText(rand, 200);
      const options = {
        maxTokens: 2 + Math.floor(rand() * 100),
        truncate: rand() < 0.3,
        fullTokenizeMaxChars: rand() < 0.5 ? 0 : undefined,
      };
      let refused: SynapseError | undefined;
      try {
        checkLengthBound(tok, text, options);
      } catch (e) {
        refused = e as SynapseError;
      }
      if (refused === undefined) continue;
      assert.throws(() => tok.encode(text, options), (e: unknown) => {
        assert.deepEqual((e as SynapseError).details, refused!.details, name);
        return true;
      });
      // And the full tokenization really is over the limit.
      assert.ok(
        tok.tokenize(text).length + tok.singleSpecialTokens > options.maxTokens,
        `${name} refused a text that fits`,
      );
    }
  }
});

Deno.test("checkLengthBound() lets a text through when its scan limit leaves it undecided", async () => {
  const tok = await SanitizedTokenizer.fromFile(`${MODELS}/synapse-tiny-embed/tokenizer.json`);
  const word = "a".repeat(4 * 2 ** 20);
  checkLengthBound(tok, word, { maxTokens: 512 }); // one word: it fits
  // 1001 words, but the first 4 Mi code units are one word: past the default scan limit.
  checkLengthBound(tok, word + " b".repeat(1000), { maxTokens: 512 });
  assert.throws(
    () => checkLengthBound(tok, word + " b".repeat(1000), { maxTokens: 512, scanLimit: Infinity }),
    { code: "sequence_too_long" },
  );
});
