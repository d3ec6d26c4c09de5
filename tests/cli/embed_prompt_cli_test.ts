/**
 * `ck-synapse embed --input-type` / `--prompt` (issue 19 item 4, F35) through the real launcher:
 * on a model with a prompt table the query and document vectors differ under one fingerprint;
 * on the default test model (no table) the flag has no effect and the summary says so.
 */
import assert from "node:assert/strict";
import { MODELS, preload } from "../_helpers.ts";
import { cli } from "./_launcher.ts";

Deno.test("ck-synapse embed --input-type selects the model's prompt, and says when it has none", async () => {
  const plain = await cli(["embed", "--input-type", "query", "hello world"]);
  assert.equal(plain.code, 0, plain.stderr);
  assert.match(plain.stdout, /prompt +none \(no_prompt_table\)/);
  const env = {
    SYNAPSE_CONFIG_JSON: JSON.stringify({
      preload_models: [
        preload(`${MODELS}/synapse-tiny-embed`, "tiny-prompts", {
          prompts: { query: "query: ", passage: "passage: " },
        }),
      ],
    }),
  };
  const [q, d, named] = await Promise.all([
    cli(["embed", "--json", "--input-type", "query", "hello world"], env),
    cli(["embed", "--json", "--input-type", "document", "hello world"], env),
    cli(["embed", "--prompt", "passage", "hello world"], env),
  ]);
  assert.equal(q.code, 0, q.stderr);
  assert.equal(d.code, 0, d.stderr);
  const qr = JSON.parse(q.stdout);
  const dr = JSON.parse(d.stdout);
  assert.equal(qr.prompt.applied, "query");
  assert.equal(dr.prompt.applied, "passage");
  assert.equal(qr.fingerprint, dr.fingerprint);
  assert.notDeepEqual(qr.vectors[0].vector, dr.vectors[0].vector);
  assert.equal(named.code, 0, named.stderr);
  assert.match(named.stdout, /prompt +passage/);
  const both = await cli(["embed", "--file", "x.jsonl", "--request-key", "k", "--prompt", "q"]);
  assert.equal(both.code, 2);
  assert.match(both.stderr, /--prompt with --file/);
});
