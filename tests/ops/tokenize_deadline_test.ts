/**
 * Field report F21, found again by a replay from outside: a text to truncate on a tokenizer with
 * no proven prefix cut (a byte-level BPE built from a GGUF: Qwen's) is tokenized in full, and its
 * answer came 47 s past `deadline_ms`. The deadline now holds while the pool tokenizes: the
 * request ends `deadline_exceeded` (reason `deadline`), the worker is replaced, and the next
 * request is served.
 */
import assert from "node:assert/strict";
import { MODELS, resultOf, semanticError, startSynapse } from "../_helpers.ts";

Deno.test("F21: deadline_ms holds while a huge text to truncate is tokenized in full (no proven cut); the pool serves the next request", async () => {
  await using t = await startSynapse({
    preload_models: [{
      engine: "llama",
      task: "embed",
      model_id: "qemb",
      model_path: `${MODELS}/synapse-tiny-qwen/model.gguf`,
      max_tokens: 512,
    }],
  });
  await t.syn.modelsSettled;
  // 5 MiB of plain text: over a million tokens, seconds of tokenizing on any machine.
  const big = "Plain ascii text here. ".repeat(Math.floor(5 * 1024 * 1024 / 23));
  const call = (deadline_ms: number) =>
    t.syn.call("embed.batch", {
      model: "qemb",
      truncate: true,
      deadline_ms,
      items: [{ id: "big", text: big }, { id: "ok", text: "hello" }],
    });
  // The pool's worker has the tokenizer loaded first (a text over the inline limit goes there).
  resultOf(
    await t.syn.call("embed.batch", {
      model: "qemb",
      truncate: true,
      items: [{ id: "warm", text: "warm up text ".repeat(4000) }],
    }),
  );
  // How long tokenizing it in full takes here (a generous deadline lets it finish)...
  let t0 = performance.now();
  const full = resultOf(await call(600_000));
  const fullMs = performance.now() - t0;
  assert.equal(full.truncation_disclosures[0].truncated, true);
  // ...and the short deadline answers long before that: the tokenizing was stopped, not awaited
  // (before, the answer came once tokenizing ended, as late as the full run; now at the deadline).
  // A ratio of one run, not a time limit.
  t0 = performance.now();
  const e = semanticError(await call(300));
  const deadlineMs = performance.now() - t0;
  assert.equal(e.code, "deadline_exceeded", JSON.stringify(e));
  assert.equal(e.details?.reason, "deadline");
  assert.ok(
    deadlineMs < fullMs / 2,
    `deadline answer ${deadlineMs} ms, full tokenizing ${fullMs} ms`,
  );
  const after = resultOf(
    await t.syn.call("embed.batch", { model: "qemb", items: [{ id: "ok", text: "hello" }] }),
  );
  assert.equal(after.vectors.length, 1);
});
