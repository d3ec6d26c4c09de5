/** The probe workload: deterministic, fitted to the lane's tokenizer and limits. */
import assert from "node:assert/strict";
import { SanitizedTokenizer } from "../../lib/tokenize/tokenizer.ts";
import {
  boundaryCases,
  embedWorkload,
  GENERATION_MAX_TOKENS,
  generationWorkload,
  PROBE_WORKLOAD_REVISION,
  ProbeRng,
  rerankWorkload,
} from "../../lib/probe/workload.ts";
import { MINILM, MODELS } from "../_helpers.ts";

const ORT_LIMITS = { maxTokens: 512, maxMicroBatchTokens: 4096, maxSequences: 64 };

Deno.test("ProbeRng gives the same sequence for the same seed", () => {
  const a = new ProbeRng(7), b = new ProbeRng(7), c = new ProbeRng(8);
  const xs = Array.from({ length: 5 }, () => a.next());
  assert.deepEqual(Array.from({ length: 5 }, () => b.next()), xs);
  assert.notDeepEqual(Array.from({ length: 5 }, () => c.next()), xs);
  for (const x of xs) assert.ok(x >= 0 && x < 1);
});

Deno.test("boundaryCases() names the micro-batch edges within the lane's limits", () => {
  assert.deepEqual(boundaryCases(ORT_LIMITS, 3), [
    { edge: "rows+1", tokens: 9, rows: 65 },
    { edge: "budget/rows+1", tokens: 65, rows: 64 },
  ]);
  // half the budget (2048) is over max tokens 512: dropped.
  assert.deepEqual(
    boundaryCases({ maxTokens: 4096, maxMicroBatchTokens: 4096, maxSequences: 64 }, 3).map((c) =>
      c.tokens
    ),
    [9, 65, 2048, 2049],
  );
  // One row per call: no edge but the max.
  assert.deepEqual(
    boundaryCases({ maxTokens: 512, maxMicroBatchTokens: 512, maxSequences: 1 }, 3),
    [],
  );
});

Deno.test("embedWorkload() is deterministic and hits exact token lengths", async () => {
  for (const dir of [`${MODELS}/synapse-tiny-embed`, MINILM]) {
    const tok = await SanitizedTokenizer.fromFile(`${dir}/tokenizer.json`);
    const w = embedWorkload(tok, ORT_LIMITS);
    const again = embedWorkload(tok, ORT_LIMITS);
    assert.deepEqual(again, w);
    assert.equal(w.revision, PROBE_WORKLOAD_REVISION);
    const count = (t: string) => tok.encode(t, { maxTokens: 1 << 30 }).ids.length;
    assert.equal(count(w.maxContext), 512);
    assert.equal(count(w.overMax), 513);
    // The same length check the ops use refuses max+1.
    assert.throws(
      () => tok.encode(w.overMax, { maxTokens: 512 }),
      (e: { code?: string }) => e.code === "sequence_too_long",
    );
    assert.equal(tok.encode(w.maxContext, { maxTokens: 512 }).ids.length, 512);
    assert.deepEqual(w.long.map(count), [256, 511]);
    assert.equal(w.batched.length, 32);
    assert.deepEqual(w.batched.slice(0, w.short.length), w.short);
    for (const t of w.batched) assert.ok(count(t) <= 512);
    assert.equal(w.boundary.length, 2);
    for (const b of w.boundary) for (const t of b.texts) assert.equal(count(t), b.tokens);
    for (const [t, n] of w.tokens) assert.equal(count(t), n);
  }
});

Deno.test("rerankWorkload() has near-duplicate candidates and exact max-context pairs", async () => {
  const tok = await SanitizedTokenizer.fromFile(`${MODELS}/synapse-tiny-rerank/tokenizer.json`);
  const w = rerankWorkload(tok, ORT_LIMITS);
  assert.deepEqual(rerankWorkload(tok, ORT_LIMITS), w);
  assert.equal(w.groups.length, 4);
  for (const g of w.groups) {
    assert.equal(g.candidates.length, 12);
    // Candidates 2k and 2k+1 differ by exactly one word.
    for (let k = 0; k < 3; k++) {
      const a = g.candidates[2 * k]!.split(" "), b = g.candidates[2 * k + 1]!.split(" ");
      assert.equal(a.length, b.length);
      assert.equal(a.filter((x, i) => x !== b[i]).length, 1);
    }
  }
  const pair = (p: { query: string; candidate: string }, max: number) =>
    tok.encodePair(p.query, p.candidate, { maxTokens: max }).ids.length;
  assert.equal(pair(w.maxContext, 512), 512);
  assert.throws(
    () => pair(w.overMax, 512),
    (e: { code?: string }) => e.code === "sequence_too_long",
  );
});

Deno.test("generationWorkload() is 20 fixed prompts for 64 tokens", () => {
  const w = generationWorkload();
  assert.equal(w.prompts.length, 20);
  assert.equal(w.maxTokens, GENERATION_MAX_TOKENS);
  assert.equal(w.maxTokens, 64);
  assert.equal(new Set(w.prompts).size, 20);
  assert.deepEqual(generationWorkload(), w);
});
