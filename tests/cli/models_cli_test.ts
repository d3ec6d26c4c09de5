/**
 * `models list` says which model serves each task, and `embed` with only a rerank model
 * configured says the test models are off and what to add (through the real launcher).
 */
import assert from "node:assert/strict";
import { cli } from "./_launcher.ts";
import { MODELS } from "../_helpers.ts";

const RERANK_ONLY = {
  SYNAPSE_CONFIG_JSON: JSON.stringify({
    preload_models: [{
      engine: "ort",
      task: "rerank",
      model_id: "rr",
      model_path: `${MODELS}/synapse-tiny-rerank`,
      tokenizer_path: `${MODELS}/synapse-tiny-rerank/tokenizer.json`,
    }],
  }),
};

Deno.test("models list prints what serves each task; a bare task says why and what to add", async () => {
  const [plain, configured, embed] = await Promise.all([
    cli(["models", "list"]),
    cli(["models", "list"], RERANK_ONLY),
    cli(["embed", "hello"], RERANK_ONLY),
  ]);
  assert.equal(plain.code, 0, plain.stderr);
  const tail = (out: string): string => out.slice(out.indexOf("\nTASK ") + 1);
  assert.equal(
    tail(plain.stdout),
    [
      "TASK      SERVED BY",
      "embed     synapse-tiny-embed (test model)",
      "rerank    synapse-tiny-rerank (test model)",
      "generate  none (the test models serve embed and rerank only); add a generate model to preload_models",
      "",
    ].join("\n"),
  );
  assert.equal(configured.code, 0, configured.stderr);
  assert.equal(
    tail(configured.stdout),
    [
      "TASK      SERVED BY",
      "embed     none (the test models are off because preload_models lists models); add an embed model to preload_models",
      "rerank    rr (test model)",
      "generate  none (the test models are off because preload_models lists models); add a generate model to preload_models",
      "",
    ].join("\n"),
  );
  assert.equal(embed.code, 1, embed.stdout);
  assert.match(
    embed.stderr,
    /^error: unknown_model: Cannot serve embed: no embed model is loaded \(preload_models lists rr \(rerank\), and the test models are off whenever preload_models lists a model\); load one now with .ck-synapse pull gte-modernbert-base. \(more: .ck-synapse models catalog --task embed.\), or add an embed model to preload_models in the config, e\.g\. \{"engine":"ort"/,
  );
});

Deno.test("models list prints the config's model_aliases after what serves each task; embed --model takes an alias", async () => {
  const env = {
    SYNAPSE_CONFIG_JSON: JSON.stringify({
      model_aliases: {
        "text-embedding-3-small": "synapse-tiny-embed",
        "gte-base": "gte-modernbert-base",
      },
    }),
  };
  const [list, embed] = await Promise.all([
    cli(["models", "list"], env),
    cli(["embed", "--model", "text-embedding-3-small", "--json", "hello"], env),
  ]);
  assert.equal(list.code, 0, list.stderr);
  assert.ok(
    list.stdout.endsWith(
      [
        "",
        "MODEL ALIAS             MODEL                TASK",
        "text-embedding-3-small  synapse-tiny-embed   embed",
        "gte-base                gte-modernbert-base  (not loaded)",
        "",
      ].join("\n"),
    ),
    list.stdout,
  );
  assert.equal(embed.code, 0, embed.stderr);
  const out = JSON.parse(embed.stdout);
  assert.equal(out.model_id, "synapse-tiny-embed");
  assert.equal(out.requested_model, "text-embedding-3-small");
});
