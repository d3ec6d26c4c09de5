/**
 * `embed.batch` served as inline chunks (the OpenAI door's call options): cut within
 * `inline.max_items`, `inline.byte_budget` and `inline.max_tokens`, each chunk admitted like an
 * inline request, item errors reported at their place in the whole request, no job.
 */
import assert from "node:assert/strict";
import { inlineChunks, tokenGroups } from "../../lib/ops/embed.ts";
import type { PreparedItem } from "../../lib/ops/_embedding.ts";
import { nullLog } from "../../lib/log/log.ts";
import { cosine, resultOf, semanticError, startSynapse } from "../_helpers.ts";

const item = (text: string, i = 0) => ({ id: String(i), text });

Deno.test("inlineChunks() cuts at max_items and at the byte budget; an item over the budget is alone", () => {
  const items = ["aaaa", "bbbb", "cccc", "dddd", "eeee"].map(item);
  assert.deepEqual(inlineChunks(items, 2, 1000), [[0, 2, 8], [2, 4, 8], [4, 5, 4]]);
  assert.deepEqual(inlineChunks(items, 10, 9), [[0, 2, 8], [2, 4, 8], [4, 5, 4]]);
  assert.deepEqual(inlineChunks(items, 10, 1000), [[0, 5, 20]]);
  // UTF-8 bytes, not UTF-16 units: "é" is 2 bytes, "😀" 4.
  assert.deepEqual(inlineChunks(["é", "😀", "ab"].map(item), 10, 6), [[0, 2, 6], [2, 3, 2]]);
  assert.deepEqual(inlineChunks([item("x".repeat(50)), item("y")], 10, 10), [[0, 1, 50], [
    1,
    2,
    1,
  ]]);
  assert.deepEqual(inlineChunks([], 10, 10), []);
});

Deno.test("tokenGroups() keeps order and each group within max_tokens; an item over it is alone", () => {
  const prepared = [5, 5, 3, 9, 20, 1].map((n, index) =>
    ({ index, seq: { effectiveTokens: n } }) as unknown as PreparedItem
  );
  const groups = tokenGroups(prepared, 10).map((g) => g.map((x) => x.index));
  assert.deepEqual(groups, [[0, 1], [2], [3], [4], [5]]);
  assert.deepEqual(tokenGroups(prepared, 100).map((g) => g.length), [6]);
  assert.deepEqual(tokenGroups([], 10), []);
});

Deno.test("embed.batch in inline chunks: item errors keep their place in the whole request; no job", async () => {
  await using t = await startSynapse({ inline: { max_items: 16, max_tokens: 64 } }, {
    log: nullLog,
  });
  const texts = Array.from({ length: 100 }, (_, i) => `passage ${i} of the long batch`);
  texts[3] = ""; // refused before any engine work
  texts[70] = Array(600).fill("word").join(" "); // too long, found when its chunk tokenizes
  const o = await t.syn.call("embed.batch", { texts }, { embed: { inlineChunksUpTo: 2048 } });
  const r = resultOf(o);
  assert.equal(r.vectors.length, 98);
  assert.deepEqual(
    r.item_errors.map((e: { index: number; id: string; error: { code: string } }) => [
      e.index,
      e.id,
      e.error.code,
    ]),
    [[3, "3", "invalid_request"], [70, "70", "sequence_too_long"]],
  );
  // Served in request order, each the vector embed.query gives.
  const ids = r.vectors.map((v: { id: string }) => Number(v.id));
  assert.deepEqual(ids, [...Array(100).keys()].filter((i) => i !== 3 && i !== 70));
  for (const i of [0, 15, 16, 99]) {
    const q = resultOf(await t.syn.call("embed.query", { text: texts[i] }));
    const v = r.vectors.find((x: { id: string }) => x.id === String(i));
    assert.ok(cosine(q.vectors[0].vector, v.vector) >= 0.99999, `item ${i}`);
  }
  assert.equal(resultOf(await t.syn.call("admission.status", {})).jobs_minted, 0);
  // Without the door's options the same batch is refused inline (no request_key).
  const plain = semanticError(await t.syn.call("embed.batch", { texts }));
  assert.equal(plain.details.limit, "inline.max_items");
});

Deno.test("embed.batch in inline chunks, all or nothing: stops at the first refused item, before engine work", async () => {
  await using t = await startSynapse({ inline: { max_items: 16 } }, { log: nullLog });
  const texts = Array.from({ length: 64 }, (_, i) => `text ${i}`);
  texts[40] = "   ";
  const r = resultOf(
    await t.syn.call("embed.batch", { texts }, {
      embed: { inlineChunksUpTo: 2048, allOrNothing: true },
    }),
  );
  assert.equal(r.vectors.length, 0);
  assert.deepEqual(r.item_errors.map((e: { index: number }) => e.index), [40]);
  assert.equal(r.item_errors[0].error.details.reason, "empty_text");
});

Deno.test("embed.batch in inline chunks refuses more than its bound, and a width it cannot give", async () => {
  await using t = await startSynapse({}, { log: nullLog });
  const over = semanticError(
    await t.syn.call("embed.batch", { texts: ["a", "b", "c"] }, {
      embed: { inlineChunksUpTo: 2 },
    }),
  );
  assert.equal(over.code, "invalid_request");
  assert.deepEqual(over.details, { field: "items", reason: "too_many_items", items: 3, max: 2 });
  const dims = semanticError(
    await t.syn.call("embed.batch", { texts: ["a"] }, {
      embed: { inlineChunksUpTo: 2048, requiredDims: 8 },
    }),
  );
  assert.equal(dims.code, "invalid_request");
  assert.equal(dims.details.field, "dimensions");
  assert.equal(dims.details.dims, 32);
  assert.deepEqual(dims.details.allowed_dims, []);
  assert.match(dims.message, /declares no matryoshka_dims, so it serves only its full 32-dim/);
  resultOf(
    await t.syn.call("embed.batch", { texts: ["a"] }, {
      embed: { inlineChunksUpTo: 2048, requiredDims: 32 },
    }),
  );
});
