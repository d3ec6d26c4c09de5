import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import {
  channelError,
  cosine,
  MODELS,
  preload,
  resultOf,
  semanticError,
  startSynapse,
} from "../_helpers.ts";

const sha = (s: string) => createHash("sha256").update(s).digest("hex");

Deno.test("embed.query answers the envelope with a 64-hex fingerprint and per-item hashes", async () => {
  await using t = await startSynapse();
  const r = resultOf(await t.syn.call("embed.query", { text: "hello world" }));
  assert.match(r.fingerprint, /^[0-9a-f]{64}$/);
  assert.equal(r.dims, 32);
  assert.equal(r.vectors.length, 1);
  assert.equal(r.vectors[0].vector.length, 32);
  assert.equal(r.vectors[0].id, "0");
  assert.equal(r.vectors[0].submitted_sha256, sha("hello world"));
  assert.equal(r.vectors[0].content_sha256, sha("hello world"));
  assert.deepEqual(r.real_token_counts, [4]); // [CLS] hello world [SEP]
  assert.deepEqual(r.truncation_disclosures, [{
    submitted_tokens: 4,
    effective_tokens: 4,
    truncated: false,
    kept_chars: 11, // F26: an uncut item covers its whole text
  }]);
  assert.equal(r.model_id, "synapse-tiny-embed");
  assert.equal(r.test_model, true);
  assert.deepEqual(r.provenance, {
    engine: { engine: "ort", version: "1.30.0", build_flags: { ep: "cpu" } },
    certified: true,
  });
  assert.equal(r.module_generation, t.syn.moduleGeneration);
  assert.equal(r.table_epoch, 0);
  assert.deepEqual(r.equivalent_to, []);
  const norm = Math.hypot(...r.vectors[0].vector);
  assert.ok(Math.abs(norm - 1) < 1e-5, `L2 norm ${norm}`);
});

Deno.test("F1: empty and whitespace-only text is invalid_request naming the item; the rest is served", async () => {
  await using t = await startSynapse();
  for (const text of ["", "   "]) {
    const err = semanticError(await t.syn.call("embed.query", { text, id: "q1" }));
    assert.equal(err.code, "invalid_request");
    assert.equal(err.details.item_id, "q1");
  }
  const r = resultOf(
    await t.syn.call("embed.batch", {
      items: [{ id: "a", text: "first" }, { id: "b", text: "" }, { id: "c", text: "  \t " }, {
        id: "d",
        text: "last",
      }],
    }),
  );
  assert.deepEqual(r.vectors.map((v: { id: string }) => v.id), ["a", "d"]);
  assert.deepEqual(
    r.item_errors.map((
      e: { id: string; index: number; error: { code: string } },
    ) => [e.id, e.index, e.error.code]),
    [
      ["b", 1, "invalid_request"],
      ["c", 2, "invalid_request"],
    ],
  );
  assert.equal(r.real_token_counts.length, 2);
  // The process is unaffected.
  resultOf(await t.syn.call("embed.query", { text: "still here" }));
});

Deno.test("F1 (kind): text with no readable token (zero-width, control, U+FFFD) is invalid_request", async () => {
  await using t = await startSynapse();
  for (const text of ["\u200b", "\u0000", "\u0007", "\ufffd", " \u200b\u0007 "]) {
    const err = semanticError(await t.syn.call("embed.query", { text, id: "z" }));
    assert.equal(err.code, "invalid_request", JSON.stringify(text));
    assert.equal(err.details.item_id, "z");
  }
  const e = semanticError(
    await t.syn.call("rerank.score", { query: "q", candidates: ["ok", "\u200b"] }),
  );
  assert.equal(e.details.reason, "no_tokens");
  assert.equal(e.details.item_id, "1");
});

Deno.test("F2: max_tokens is served untruncated, max_tokens + 1 is sequence_too_long, truncation is disclosed", async () => {
  await using t = await startSynapse();
  // 'a' is one token; [CLS] and [SEP] make two more.
  const exact = Array(510).fill("a").join(" ");
  const over = Array(511).fill("a").join(" ");
  const r = resultOf(await t.syn.call("embed.batch", { items: [{ id: "x", text: exact }] }));
  assert.deepEqual(r.truncation_disclosures, [{
    submitted_tokens: 512,
    effective_tokens: 512,
    truncated: false,
    kept_chars: exact.length,
  }]);
  assert.equal(r.vectors[0].content_sha256, r.vectors[0].submitted_sha256);

  const err = semanticError(await t.syn.call("embed.query", { text: over, id: "y" }));
  assert.equal(err.code, "sequence_too_long");
  assert.equal(err.class, "permanent");
  assert.deepEqual(err.details, { tokens: 513, max_tokens: 512, item_id: "y" });

  const b = resultOf(await t.syn.call("embed.batch", { items: [{ id: "y", text: over }, "ok"] }));
  assert.equal(b.item_errors[0].error.code, "sequence_too_long");
  assert.equal(b.vectors.length, 1);

  const tr = resultOf(await t.syn.call("embed.query", { text: over, id: "y", truncate: true }));
  assert.deepEqual(tr.truncation_disclosures, [{
    submitted_tokens: 513,
    effective_tokens: 512,
    truncated: true,
    kept_chars: exact.length, // F26: the caller's text up to the end of the last kept token
  }]);
  assert.deepEqual(tr.real_token_counts, [512]);
  assert.notEqual(tr.vectors[0].content_sha256, tr.vectors[0].submitted_sha256);
  assert.equal(tr.vectors[0].submitted_sha256, sha(over));
  // The kept content is the first 510 'a's.
  assert.equal(tr.vectors[0].content_sha256, sha(exact));
});

Deno.test("F3: a batch far over the context is cut only at the model's certified context, each item disclosed", async () => {
  await using t = await startSynapse();
  // The limit is the one the model's profile certifies (and models.list reports), not a constant.
  const limit = t.syn.registry.resolve(undefined, "embed").profile.certified_shape
    .max_context_tokens;
  const list = resultOf(await t.syn.call("models.list", {}));
  assert.equal(list.models.find((m: { task: string }) => m.task === "embed").max_tokens, limit);
  const lengths = [5000, limit - 1, 3 * limit, limit - 2];
  const items = lengths.map((n, i) => ({ id: `w${i}`, text: Array(n).fill("word").join(" ") }));
  const r = resultOf(await t.syn.call("embed.batch", { items, truncate: true }));
  assert.equal(r.vectors.length, items.length);
  lengths.forEach((n, i) => {
    // [CLS] word × n [SEP]; at most the certified context is kept, never a smaller internal cut.
    const kept = Math.min(n, limit - 2);
    assert.deepEqual(r.truncation_disclosures[i], {
      submitted_tokens: n + 2,
      effective_tokens: kept + 2,
      truncated: n + 2 > limit,
      kept_chars: Array(kept).fill("word").join(" ").length, // the whole text when uncut (F26)
    });
    assert.equal(r.real_token_counts[i], kept + 2);
    assert.equal(r.vectors[i].submitted_sha256, sha(items[i]!.text));
    // The content hash is that of the kept words, exactly.
    assert.equal(r.vectors[i].content_sha256, sha(Array(kept).fill("word").join(" ")));
  });
});

Deno.test("F4: the same text alone, in a batch of 32 mixed lengths and concurrently gives the same vector", async () => {
  await using t = await startSynapse();
  const text = "the quick brown fox jumps over the lazy dog";
  const alone = resultOf(await t.syn.call("embed.query", { text }));
  const others = Array.from(
    { length: 31 },
    (_, i) => Array(1 + ((i * 53) % 300)).fill("data").join(" "),
  );
  const items = [...others.slice(0, 17), text, ...others.slice(17)].map((x, i) => ({
    id: `i${i}`,
    text: x,
  }));
  const batch = resultOf(await t.syn.call("embed.batch", { items }));
  const inBatch = batch.vectors.find((v: { id: string }) => v.id === "i17");
  const [c1, c2] = await Promise.all([
    t.syn.call("embed.query", { text }),
    t.syn.call("embed.batch", { items: [text, ...others.slice(0, 8)] }),
  ]);
  const conc1 = resultOf(c1).vectors[0].vector;
  const conc2 = resultOf(c2).vectors[0].vector;
  for (const v of [inBatch.vector, conc1, conc2]) {
    assert.ok(cosine(alone.vectors[0].vector, v) >= 0.99999);
  }
  assert.equal(batch.fingerprint, alone.fingerprint);
  assert.equal(resultOf(c1).fingerprint, alone.fingerprint);
  assert.equal(resultOf(c2).fingerprint, alone.fingerprint);
});

Deno.test("F5: 'apple' and ['apple'] share one admission policy, served and refused alike", async () => {
  await using t = await startSynapse({ inline: { byte_budget: 8 } });
  const q = resultOf(await t.syn.call("embed.query", { text: "apple" }));
  const b = resultOf(await t.syn.call("embed.batch", { texts: ["apple"] }));
  const i = resultOf(await t.syn.call("embed.batch", { items: ["apple"] }));
  assert.deepEqual(b.vectors[0].vector, q.vectors[0].vector);
  assert.deepEqual(i.vectors[0].vector, q.vectors[0].vector);
  // Full load: 4 bytes held leave less than 5 for "apple".
  const held = t.syn.admission.admit({
    bytes: 4,
    deadlineMs: 30000,
    maxQueueMs: 5000,
    queueClass: "bulk",
  });
  const outcomes = await Promise.all([
    t.syn.call("embed.query", { text: "apple" }),
    t.syn.call("embed.batch", { texts: ["apple"] }),
    t.syn.call("embed.batch", { items: [{ id: "0", text: "apple" }] }),
  ]);
  for (const o of outcomes) {
    const e = semanticError(o);
    assert.equal(e.code, "queue_full");
    assert.equal(e.retry_after_ms, 100);
    assert.equal(e.safe_to_retry_same_request, true);
  }
  held.release();
  resultOf(await t.syn.call("embed.query", { text: "apple" }));
});

Deno.test("F6: a non-finite model output is engine_output_invalid for that item, never a vector", async () => {
  await using t = await startSynapse({
    preload_models: [preload(`${MODELS}/synapse-tiny-embed-nan`, "nan-embed")],
  });
  const r = resultOf(
    await t.syn.call("embed.batch", {
      items: [{ id: "ok", text: "a healthy sentence" }, {
        id: "bad",
        text: "this has poison in it",
      }],
    }),
  );
  assert.deepEqual(r.vectors.map((v: { id: string }) => v.id), ["ok"]);
  assert.ok(r.vectors[0].vector.every(Number.isFinite));
  assert.equal(r.item_errors.length, 1);
  assert.equal(r.item_errors[0].id, "bad");
  assert.equal(r.item_errors[0].error.code, "engine_output_invalid");
  assert.equal(r.item_errors[0].error.class, "permanent");
  assert.ok(!JSON.stringify(r).includes("null"));
  const e = semanticError(await t.syn.call("embed.query", { text: "poison" }));
  assert.equal(e.code, "engine_output_invalid");
});

Deno.test("F16: an unknown field or a wrong type is a channel invalid_request naming the field", async () => {
  await using t = await startSynapse();
  const cases: [string, unknown, string][] = [
    ["embed.query", { txt: "x" }, "txt"],
    ["embed.query", { text: 5 }, "text"],
    ["embed.query", { text: "x", deadline_ms: "soon" }, "deadline_ms"],
    ["embed.batch", { items: [{ id: "a", text: "x", extra: 1 }] }, "items.0.extra"],
    ["embed.batch", { items: [{ id: "a", txt: "x" }] }, "items.0"],
    ["rerank.score", { query: "q", candidates: ["a"], top_k: 3 }, "top_k"],
    ["models.list", { verbose: true }, "verbose"],
  ];
  for (const [method, params, field] of cases) {
    const body = channelError(await t.syn.call(method, params));
    assert.equal(body.code, "invalid_request");
    assert.ok(body.message.includes(`'${field}`), `${body.message} names ${field}`);
    assert.deepEqual(Object.keys(body).sort(), ["code", "message"]);
  }
});

Deno.test("embed.batch refuses an empty batch, duplicate ids and params that are not an object", async () => {
  await using t = await startSynapse();
  for (
    const [params, needle] of [
      [{ items: [] }, "empty batch"],
      [{ texts: [] }, "empty batch"],
      [{ items: [{ id: "a", text: "x" }, { id: "a", text: "y" }] }, "'a' appears more than once"],
      [{ items: ["x", { id: "0", text: "y" }] }, "'0' appears more than once"],
      [{}, "'items' is required"],
      [{ items: ["x"], texts: ["y"] }, "not both"],
      [[1, 2], "must be a JSON object"],
    ] as const
  ) {
    const body = channelError(await t.syn.call("embed.batch", params));
    assert.equal(body.code, "invalid_request");
    assert.ok(body.message.includes(needle), body.message);
  }
});

Deno.test("embed refuses an unknown model, a mismatched required_fingerprint and over-limit batches", async () => {
  await using t = await startSynapse({ inline: { max_items: 4, max_tokens: 64 } });
  let e = semanticError(await t.syn.call("embed.query", { text: "x", model: "nope" }));
  assert.equal(e.code, "unknown_model");
  assert.equal(e.details.model_id, "nope");
  e = semanticError(await t.syn.call("embed.query", { text: "x", model: "synapse-tiny-rerank" }));
  assert.equal(e.code, "invalid_request");
  e = semanticError(
    await t.syn.call("embed.query", { text: "x", required_fingerprint: "0".repeat(64) }),
  );
  assert.equal(e.code, "substitution_rejected");
  e = semanticError(await t.syn.call("embed.batch", { texts: ["a", "b", "c", "d", "e"] }));
  assert.equal(e.code, "invalid_request");
  assert.equal(e.details.limit, "inline.max_items");
  e = semanticError(await t.syn.call("embed.batch", { texts: [Array(70).fill("a").join(" ")] }));
  assert.equal(e.details.limit, "inline.max_tokens");
  assert.equal(e.details.tokens, 72);
  const ok = resultOf(await t.syn.call("embed.query", { text: "fine" }));
  assert.equal(ok.vectors.length, 1);
});

Deno.test("embed answers model_loading with a retry hint while the model loads (F9)", async () => {
  const { createSynapse } = await import("../../lib/synapse.ts");
  const { DEFAULT_CONFIG } = await import("../../lib/config/defaults.ts");
  const dir = await Deno.makeTempDir();
  const syn = await createSynapse({
    config: DEFAULT_CONFIG,
    storePath: `${dir}/store.db`,
    waitForModels: false,
  });
  try {
    const e = semanticError(await syn.call("embed.query", { text: "early" }));
    assert.equal(e.code, "model_loading");
    assert.equal(e.class, "transient");
    assert.equal(e.retry_after_ms, 250);
    await syn.modelsSettled;
    resultOf(await syn.call("embed.query", { text: "later" }));
  } finally {
    await syn.dispose();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("embed.query refuses a lone surrogate as invalid_request (F14)", async () => {
  await using t = await startSynapse();
  const e = semanticError(await t.syn.call("embed.query", { text: "ok \udc00 not ok" }));
  assert.equal(e.code, "invalid_request");
  assert.equal(e.details.reason, "invalid_unicode");
  assert.equal(e.details.utf16_index, 3);
});

Deno.test("dispatch answers unknown_method as a channel error", async () => {
  await using t = await startSynapse();
  const e = channelError(await t.syn.call("embed.querry", {}));
  assert.equal(e.code, "unknown_method");
  // The channel body is {code, message}: the message names every method a caller may call.
  for (
    const m of ["embed.query", "embed.batch", "rerank.score", "microllm.oneshot", "models.list"]
  ) {
    assert.ok(e.message.includes(m), `${m} missing from: ${e.message}`);
  }
});

Deno.test("F21: a text far over the limit with truncate is cut from a proven prefix, and the disclosure says its count is a lower bound", async () => {
  await using t = await startSynapse();
  const limit = t.syn.registry.resolve(undefined, "embed").maxTokens;
  // 200,000 words: far past the length the tokenizer counts exactly (the bound takes over).
  const text = Array(200_000).fill("word").join(" ");
  const r = resultOf(await t.syn.call("embed.query", { text, truncate: true }));
  const d = r.truncation_disclosures[0];
  assert.equal(d.truncated, true);
  assert.equal(d.effective_tokens, limit);
  assert.equal(d.submitted_tokens_is_lower_bound, true);
  assert.ok(d.submitted_tokens > limit && d.submitted_tokens <= 200_002, `${d.submitted_tokens}`);
  // The kept content is exactly the first limit - 2 words, as a full tokenization would keep.
  assert.equal(r.vectors[0].content_sha256, sha(Array(limit - 2).fill("word").join(" ")));
  assert.equal(r.vectors[0].submitted_sha256, sha(text));
  // Without truncate the same text is refused at once, the count again a lower bound.
  const e = semanticError(await t.syn.call("embed.query", { text }));
  assert.equal(e.code, "sequence_too_long");
  assert.equal(e.details.max_tokens, limit);
  assert.equal(e.details.tokens_is_lower_bound, true);
});
