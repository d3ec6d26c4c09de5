/**
 * `rerank.score` over `inline.max_items` with a `request_key` is a durable job (issue 12, a step-2
 * leftover): its pages, read with `embed.result`, hold every candidate's raw score by index —
 * the same scores the inline path gives — and the key is idempotent like embed.batch's.
 */
import assert from "node:assert/strict";
import { resultOf, semanticError, startSynapse } from "../_helpers.ts";

const QUERY = "what do cats eat";
const CANDIDATES = Array.from(
  { length: 90 },
  (_, i) => `candidate ${i}: ${"cats eat fish and birds ".repeat(1 + (i % 7))}`,
);

Deno.test("an over-limit rerank with a request_key is a durable job whose pages hold every candidate's raw score", async () => {
  await using t = await startSynapse();
  await t.syn.modelsSettled;
  const noKey = semanticError(
    await t.syn.call("rerank.score", { query: QUERY, candidates: CANDIDATES }),
  );
  assert.equal(noKey.code, "invalid_request");
  assert.equal(noKey.details.field, "request_key");

  const job = resultOf(
    await t.syn.call("rerank.score", { query: QUERY, candidates: CANDIDATES, request_key: "rr-1" }),
  );
  assert.match(job.job_id, /^job_/);
  assert.equal(job.items_total, 90);
  assert.equal(job.attached, false);
  // The same request again attaches; other candidates under the key are refused.
  const again = resultOf(
    await t.syn.call("rerank.score", { query: QUERY, candidates: CANDIDATES, request_key: "rr-1" }),
  );
  assert.deepEqual([again.job_id, again.attached], [job.job_id, true]);
  const conflict = semanticError(
    await t.syn.call("rerank.score", {
      query: QUERY,
      candidates: CANDIDATES.slice(1),
      request_key: "rr-1",
    }),
  );
  assert.equal(conflict.code, "idempotency_conflict");

  await t.syn.context.jobs.running.get(job.job_id);
  const byIndex = new Map<number, number>();
  let first;
  for (let page = 0;; page++) {
    const r = resultOf(await t.syn.call("embed.result", { job_id: job.job_id, page }));
    first ??= r;
    assert.equal(r.kind, "rerank.score");
    assert.equal(r.score_kind, "raw_logit");
    assert.deepEqual(r.vectors, []);
    assert.equal(r.real_token_counts.length, r.scores.length);
    for (const s of r.scores) byIndex.set(s.index, s.score);
    if (page + 1 >= r.pages_available) break;
  }
  assert.equal(first.state, "done");
  assert.equal(first.dims, 1);
  assert.equal(byIndex.size, 90);
  // The same scores as the inline path (chunks within inline.max_items).
  for (let a = 0; a < 90; a += 45) {
    const inline = resultOf(
      await t.syn.call("rerank.score", { query: QUERY, candidates: CANDIDATES.slice(a, a + 45) }),
    );
    inline.scores.forEach((s: number, i: number) => {
      assert.ok(Math.abs(byIndex.get(a + i)! - s) < 1e-5, `candidate ${a + i}`);
    });
  }
});

Deno.test("a bad candidate in an over-limit rerank is refused before any job exists", async () => {
  await using t = await startSynapse();
  await t.syn.modelsSettled;
  const bad = [...CANDIDATES];
  bad[70] = "   ";
  const e = semanticError(
    await t.syn.call("rerank.score", { query: QUERY, candidates: bad, request_key: "rr-bad" }),
  );
  assert.equal(e.code, "invalid_request");
  assert.equal(e.details.field, "candidates.70");
  // Nothing was minted under the key: a fixed request takes it.
  const ok = resultOf(
    await t.syn.call("rerank.score", {
      query: QUERY,
      candidates: CANDIDATES,
      request_key: "rr-bad",
    }),
  );
  assert.equal(ok.attached, false);
  await t.syn.context.jobs.running.get(ok.job_id);
});
