/**
 * `ck-synapse tokenize` through the real launcher (in-process instance): the human listing shows
 * each text's count and its tokens' ids, pieces and code-point spans; `--json` is the `tokenize`
 * result, whose count is what `embed` reports for the same text; no TEXT is a usage error.
 */
import assert from "node:assert/strict";
import { cli } from "./_launcher.ts";
import { MODELS } from "../_helpers.ts";

Deno.test("ck-synapse tokenize prints ids, pieces and spans; --json is the tokenize result; counts agree with embed", async () => {
  const [human, json, embed, none] = await Promise.all([
    cli(["tokenize", "Hello world", "Café"]),
    cli(["tokenize", "--json", "Hello world"]),
    cli(["embed", "--json", "Hello world"]),
    cli(["tokenize"]),
  ]);
  assert.equal(human.code, 0, human.stderr);
  assert.match(human.stdout, /model +synapse-tiny-embed/);
  assert.match(human.stdout, /fingerprint +[0-9a-f]{64}/);
  assert.match(human.stdout, /tokenizer +sha256:[0-9a-f]{64}/);
  assert.match(human.stdout, /text 0: 4 tokens/);
  assert.match(human.stdout, /text 1: \d+ tokens/);
  assert.match(human.stdout, /"\[CLS\]" +\[0, 0\) +special/);
  assert.match(human.stdout, /"hello" +\[0, 5\)/);
  assert.equal(json.code, 0, json.stderr);
  const r = JSON.parse(json.stdout);
  assert.equal(r.items[0].count, 4);
  assert.deepEqual(r.items[0].offsets.slice(1, 3), [[0, 5], [6, 11]]);
  assert.equal(embed.code, 0, embed.stderr);
  assert.deepEqual(JSON.parse(embed.stdout).real_token_counts, [r.items[0].count]);
  assert.equal(r.fingerprint, JSON.parse(embed.stdout).fingerprint);
  assert.equal(none.code, 2);
  assert.match(none.stderr, /Cannot tokenize: give at least one TEXT/);
});

Deno.test("ck-synapse tokenize --input-type / --prompt put the model's prompt first, as embed does: the same count", async () => {
  const tiny = `${MODELS}/synapse-tiny-embed`;
  const env = {
    SYNAPSE_CONFIG_JSON: JSON.stringify({
      preload_models: [{
        engine: "ort",
        model_path: tiny,
        tokenizer_path: `${tiny}/tokenizer.json`,
        model_id: "tiny-prompts",
        prompts: { query: "query: ", passage: "passage: " },
      }],
    }),
  };
  const [human, json, embed, both] = await Promise.all([
    cli(["tokenize", "--input-type", "query", "cats"], env),
    cli(["tokenize", "--json", "--prompt", "passage", "cats"], env),
    cli(["embed", "--json", "--prompt", "passage", "cats"], env),
    cli(["tokenize", "--prompt", "nope", "cats"], env),
  ]);
  assert.equal(human.code, 0, human.stderr);
  assert.match(human.stdout, /\nprompt +query\n/);
  assert.match(human.stdout, /\n {2}tokenized "query: cats" \(prefix 7 code points\)\n/);
  assert.equal(json.code, 0, json.stderr);
  const r = JSON.parse(json.stdout);
  assert.equal(r.items[0].tokenized_text, "passage: cats");
  assert.deepEqual(JSON.parse(embed.stdout).real_token_counts, [r.items[0].count]);
  assert.equal(both.code, 1);
  assert.match(both.stderr, /no prompt of that name/);
});

Deno.test("embed and tokenize take the routing flags: --target-fingerprint, --required-fingerprint, --required-epoch", async () => {
  const first = await cli(["tokenize", "--json", "x"]);
  assert.equal(first.code, 0, first.stderr);
  const fp = JSON.parse(first.stdout).fingerprint as string;
  const none = "0".repeat(64);
  const [routed, embedOk, embedMiss, tokMiss, badEpoch, behind] = await Promise.all([
    cli(["tokenize", "--json", "--target-fingerprint", fp.toUpperCase(), "x"]),
    cli(["embed", "--json", "--required-fingerprint", fp, "hello"]),
    cli(["embed", "--required-fingerprint", none, "hello"]),
    cli(["tokenize", "--target-fingerprint", none, "x"]),
    cli(["embed", "--required-epoch", "soon", "hello"]),
    cli(["embed", "--json", "--required-epoch", "999", "hello"]),
  ]);
  assert.equal(routed.code, 0, routed.stderr);
  assert.equal(JSON.parse(routed.stdout).fingerprint, fp);
  assert.equal(embedOk.code, 0, embedOk.stderr);
  assert.equal(JSON.parse(embedOk.stdout).fingerprint, fp);
  assert.equal(embedMiss.code, 1);
  assert.match(embedMiss.stderr, /substitution_rejected/);
  assert.equal(tokMiss.code, 1);
  assert.match(tokMiss.stderr, /substitution_rejected/);
  assert.equal(badEpoch.code, 2);
  assert.match(badEpoch.stderr, /Cannot use --required-epoch soon/);
  assert.equal(behind.code, 1);
  assert.equal(JSON.parse(behind.stdout).error.details.reason, "table_epoch_behind");
});
