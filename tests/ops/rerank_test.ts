import assert from "node:assert/strict";
import { resultOf, semanticError, startSynapse } from "../_helpers.ts";

Deno.test("F15: rerank gives raw scores in input order, stated as raw, with a separate sigmoid field", async () => {
  await using t = await startSynapse();
  const docs = ["synapse serves embeddings", "bananas are yellow", "a local inference service"];
  const r = resultOf(
    await t.syn.call("rerank.score", { query: "what is synapse", candidates: docs }),
  );
  assert.equal(r.score_kind, "raw_logit");
  assert.equal(r.scores.length, 3);
  assert.equal(r.dims, 1);
  assert.match(r.fingerprint, /^[0-9a-f]{64}$/);
  r.scores.forEach((s: number, i: number) => {
    assert.ok(Math.abs(r.sigmoid_scores[i] - 1 / (1 + Math.exp(-s))) < 1e-12);
  });
  // Input order: reversing the candidates reverses the scores.
  const rev = resultOf(
    await t.syn.call("rerank.score", { query: "what is synapse", candidates: [...docs].reverse() }),
  );
  [...rev.scores].reverse().forEach((s: number, i: number) =>
    assert.ok(Math.abs(s - r.scores[i]) < 1e-5)
  );
  // One candidate keeps its raw score (no min-max normalisation to 0.0).
  const one = resultOf(
    await t.syn.call("rerank.score", { query: "what is synapse", candidates: [docs[1]] }),
  );
  assert.ok(Math.abs(one.scores[0] - r.scores[1]) < 1e-5);
  assert.notEqual(one.scores[0], 0);
  // Tied candidates tie.
  const tied = resultOf(
    await t.syn.call("rerank.score", { query: "q", candidates: ["same text", "same text"] }),
  );
  assert.equal(tied.scores[0], tied.scores[1]);
});

Deno.test("F15: an empty candidate or query is invalid_request naming it", async () => {
  await using t = await startSynapse();
  let e = semanticError(await t.syn.call("rerank.score", { query: "q", candidates: ["fine", ""] }));
  assert.equal(e.code, "invalid_request");
  assert.equal(e.details.item_id, "1");
  e = semanticError(await t.syn.call("rerank.score", { query: " ", candidates: ["fine"] }));
  assert.equal(e.code, "invalid_request");
  assert.equal(e.details.field, "query");
  e = semanticError(await t.syn.call("rerank.score", { query: "q", candidates: [] }));
  assert.equal(e.code, "invalid_request");
  resultOf(await t.syn.call("rerank.score", { query: "q", candidates: ["still serving"] }));
});

Deno.test("rerank refuses an over-long pair unless asked to truncate, then cuts the document", async () => {
  await using t = await startSynapse();
  const long = Array(600).fill("a").join(" ");
  const e = semanticError(
    await t.syn.call("rerank.score", { query: "q", candidates: ["short", long] }),
  );
  assert.equal(e.code, "sequence_too_long");
  assert.deepEqual(e.details, { tokens: 604, max_tokens: 512, item_id: "1" });
  const r = resultOf(
    await t.syn.call("rerank.score", { query: "q", candidates: ["short", long], truncate: true }),
  );
  assert.deepEqual(r.truncation_disclosures[1], {
    submitted_tokens: 604,
    effective_tokens: 512,
    truncated: true,
    kept_chars: Array(508).fill("a").join(" ").length, // F26: [CLS] q [SEP] 508 × a [SEP]
  });
  assert.deepEqual(r.truncation_disclosures[0], {
    submitted_tokens: 5,
    effective_tokens: 5,
    truncated: false,
  });
  assert.deepEqual(r.real_token_counts, [5, 512]); // [CLS] q [SEP] short [SEP]
});

Deno.test("rerank with more than 20 candidates runs in the bulk class on the bulk lane, same scores", async () => {
  await using t = await startSynapse();
  const docs = Array.from({ length: 30 }, (_, i) => `candidate document number ${i}`);
  const big = resultOf(
    await t.syn.call("rerank.score", { query: "which document", candidates: docs }),
  );
  assert.equal(big.scores.length, 30);
  const model = t.syn.registry.resolve(undefined, "rerank");
  assert.equal(model.bulk.stats().classes.bulk.dispatched, 1);
  assert.equal(model.interactive.stats().classes.interactive.dispatched, 0);
  const small = resultOf(
    await t.syn.call("rerank.score", { query: "which document", candidates: docs.slice(0, 5) }),
  );
  assert.equal(model.interactive.stats().classes.interactive.dispatched, 1);
  small.scores.forEach((s: number, i: number) => assert.ok(Math.abs(s - big.scores[i]) < 1e-5));
  assert.equal(big.fingerprint, small.fingerprint);
});
