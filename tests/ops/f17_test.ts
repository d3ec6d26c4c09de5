/**
 * F17: a lone UTF-16 surrogate (half of a cut emoji) in a caller string that names something —
 * an item id, a request_key, a model — is a permanent invalid_request naming the field path,
 * never echoed back and never turned into U+FFFD (two different keys must never share a job).
 * F16 for batch items: an unknown field inside an item is named at its own path.
 */
import assert from "node:assert/strict";
import { channelError, resultOf, startSynapse } from "../_helpers.ts";

const LONE = "\ud83d";

Deno.test("F17: a lone surrogate in an item id, request_key, model or job id is invalid_request naming the field", async () => {
  await using t = await startSynapse({ inline: { max_items: 2 } });
  const cases: [string, Record<string, unknown>, string][] = [
    ["embed.batch", { items: [{ id: `a${LONE}`, text: "x" }] }, "items.0.id"],
    ["embed.query", { text: "x", id: `q${LONE}` }, "id"],
    ["embed.query", { text: "x", model: `m${LONE}` }, "model"],
    ["embed.query", { text: "x", required_fingerprint: LONE }, "required_fingerprint"],
    ["embed.batch", { texts: ["a", "b", "c"], request_key: `k${LONE}` }, "request_key"],
    ["embed.result", { job_id: `job_${LONE}` }, "job_id"],
    ["rerank.score", { query: "q", candidates: ["a"], model_id: LONE }, "model_id"],
  ];
  for (const [method, params, field] of cases) {
    const e = channelError(await t.syn.call(method, params));
    assert.equal(e.code, "invalid_request", `${method} ${field}`);
    assert.match(e.message, new RegExp(`'${field.replaceAll(".", "\\.")}'`), e.message);
    assert.match(e.message, /lone UTF-16 surrogate/);
    assert.ok(!e.message.includes(LONE), "the bad string is not echoed back");
  }
  // The U+FFFD spelling of that key is another key: it mints its own job, nothing attached.
  const job = resultOf(
    await t.syn.call("embed.batch", { texts: ["a", "b", "c"], request_key: "k\ufffd" }),
  );
  assert.equal(job.attached, false);
});

Deno.test("F16: an unknown field inside a batch item is named at its own path", async () => {
  await using t = await startSynapse();
  const e = channelError(
    await t.syn.call("embed.batch", { items: [{ id: "a", text: "x" }, { id: "b", txt: "y" }] }),
  );
  assert.equal(e.code, "invalid_request");
  assert.match(e.message, /unknown field 'items\.1\.txt'/);
});
