/**
 * The door call options of `embed.batch` behind Ollama's `options.num_ctx` and warm-up
 * (lib/ops/context.ts `EmbedCallOptions.maxTokens`, `allowEmpty`), on the inline path as well as
 * the chunked one the doors use: a cap below the model's limit cuts (with `truncate`) or refuses,
 * at or above it changes nothing, and a durable job refuses it rather than drop it.
 */
import assert from "node:assert/strict";
import { resultOf, startSynapse } from "../_helpers.ts";

const TEXT = Array.from({ length: 40 }, (_, i) => `word${i % 10}`).join(" ");

Deno.test("embed.batch maxTokens below the model's limit cuts with truncate and refuses without; at the limit it changes nothing", async () => {
  await using t = await startSynapse({ inline: { max_items: 2 } });
  const plain = resultOf(await t.syn.call("embed.batch", { texts: [TEXT], truncate: true }));
  assert.equal(plain.truncation_disclosures[0].truncated, false);
  const cut = resultOf(
    await t.syn.call("embed.batch", { texts: [TEXT], truncate: true }, { embed: { maxTokens: 8 } }),
  );
  assert.equal(cut.truncation_disclosures[0].truncated, true);
  assert.equal(cut.truncation_disclosures[0].effective_tokens, 8);
  assert.notDeepEqual(cut.vectors[0].vector, plain.vectors[0].vector);
  const refused = resultOf(
    await t.syn.call("embed.batch", { texts: [TEXT] }, { embed: { maxTokens: 8 } }),
  );
  assert.equal(refused.vectors.length, 0);
  assert.equal(refused.item_errors[0].error.code, "sequence_too_long");
  assert.equal(refused.item_errors[0].error.details.max_tokens, 8);
  const same = resultOf(
    await t.syn.call("embed.batch", { texts: [TEXT] }, { embed: { maxTokens: 512 } }),
  );
  assert.deepEqual(same.vectors, plain.vectors);
  assert.deepEqual(same.truncation_disclosures, plain.truncation_disclosures);
  // A batch that would become a durable job refuses the cap rather than drop it.
  const job = await t.syn.call(
    "embed.batch",
    { texts: [TEXT, "b", "c"], request_key: "k1", truncate: true },
    { embed: { maxTokens: 8 } },
  );
  assert.equal(job.kind, "semantic");
  // deno-lint-ignore no-explicit-any
  const err = (job.body.result as any).error;
  assert.equal(err.code, "invalid_request");
  assert.equal(err.details.reason, "token_cap_in_job");
  assert.equal(err.details.field, "request_key");
  assert.equal(resultOf(await t.syn.call("admission.status", {})).jobs_minted, 0);
});

Deno.test("embed.batch allowEmpty answers no vectors after resolving the model; without it an empty batch is refused", async () => {
  await using t = await startSynapse();
  const warm = resultOf(
    await t.syn.call("embed.batch", { texts: [] }, { embed: { allowEmpty: true } }),
  );
  assert.deepEqual(warm.vectors, []);
  assert.equal(warm.model_id, "synapse-tiny-embed");
  assert.match(warm.fingerprint, /^[0-9a-f]{64}$/);
  const unknown = await t.syn.call("embed.batch", { texts: [], model: "nope" }, {
    embed: { allowEmpty: true },
  });
  assert.equal(unknown.kind, "semantic");
  const empty = await t.syn.call("embed.batch", { texts: [] });
  assert.equal(empty.kind, "channel");
});
