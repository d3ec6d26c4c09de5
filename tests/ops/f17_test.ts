/**
 * F17: a lone UTF-16 surrogate (half of a cut emoji) in a caller string that names something —
 * an item id, a request_key, a model — is a permanent invalid_request naming the field path,
 * never echoed back and never turned into U+FFFD (two different keys must never share a job).
 * F16 for batch items: an unknown field inside an item is named at its own path.
 */
import assert from "node:assert/strict";
import { channelError, MODELS, resultOf, semanticError, startSynapse } from "../_helpers.ts";
import { NAME_MAX_CHARS, REQUEST_KEY_MAX_BYTES } from "../../lib/contract/schemas.ts";

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
    // An unknown key with one is named by the object that holds it, never echoed.
    ["embed.query", { text: "x", [`k${LONE}`]: 1 }, "params"],
    ["embed.batch", { items: [{ id: "a", text: "x", [LONE]: 1 }] }, "items.0"],
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

Deno.test("Caller names have exact types and length bounds, refused naming the field path (issue 9.1)", async () => {
  await using t = await startSynapse({ inline: { max_items: 2 } });
  const long = "x".repeat(NAME_MAX_CHARS + 1);
  const cases: [string, Record<string, unknown>, string, RegExp][] = [
    // A number is not turned into "7" (which would clash with a real "7"): refused.
    ["embed.batch", { items: [{ id: 7, text: "x" }] }, "items.0.id", /expected string/],
    [
      "embed.batch",
      { items: [{ id: "a", text: "x" }, { id: true, text: "y" }] },
      "items.1.id",
      /expected string/,
    ],
    ["embed.query", { text: "x", id: 7 }, "id", /expected string/],
    ["embed.batch", { items: [{ id: long, text: "x" }] }, "items.0.id", /longer than 256/],
    ["embed.batch", { items: [{ id: "", text: "x" }] }, "items.0.id", /must not be empty/],
    ["embed.query", { text: "x", model: "" }, "model", /must not be empty/],
    ["embed.query", { text: "x", model: long }, "model", /longer than 256/],
    [
      "embed.batch",
      // 86 three-byte characters: 86 code units, 258 UTF-8 bytes (the job store's unit).
      { items: ["x"], request_key: "€".repeat(Math.ceil((REQUEST_KEY_MAX_BYTES + 1) / 3)) },
      "request_key",
      /longer than 256 UTF-8 bytes/,
    ],
    ["embed.result", { job_id: long }, "job_id", /longer than 256/],
    ["embed.batch", { items: [{ id: "a", text: 5 }] }, "items.0.text", /expected string/],
    ["rerank.score", { query: "q", candidates: ["a", 3] }, "candidates.1", /expected string/],
    [
      "microllm.oneshot",
      { prompt: "p", max_tokens: 4, grammar: "x".repeat(70_000) },
      "grammar",
      /longer than 65536/,
    ],
  ];
  for (const [method, params, field, why] of cases) {
    const e = channelError(await t.syn.call(method, params));
    assert.equal(e.code, "invalid_request", `${method} ${field}: ${e.message}`);
    assert.match(e.message, new RegExp(`field '${field.replaceAll(".", "\\.")}'`), e.message);
    assert.match(e.message, why, e.message);
  }
});

Deno.test("F17 in a job-sized batch: a lone-surrogate id is a permanent invalid_request, not engine_crashed (issue 9.1)", async () => {
  await using t = await startSynapse({ inline: { max_items: 2 } });
  const items = Array.from({ length: 5 }, (_, i) => ({ id: `i${i}`, text: `text ${i}` }));
  items[3] = { id: `i${LONE}`, text: "text 3" };
  const out = await t.syn.call("embed.batch", { items, request_key: "job-sized" });
  const e = channelError(out);
  assert.equal(e.code, "invalid_request");
  assert.match(e.message, /field 'items\.3\.id'/);
  assert.equal(out.kind === "channel" && out.error.errorClass, "permanent");
  // Two keys that differ only in their lone surrogate are both refused: neither mints a job, so
  // neither can later collide with the other as an idempotency_conflict.
  for (const key of ["kk\ud800", "kk\udbff"]) {
    const k = channelError(
      await t.syn.call("embed.batch", { texts: ["a", "b", "c"], request_key: key }),
    );
    assert.equal(k.code, "invalid_request");
    assert.match(k.message, /field 'request_key'/);
  }
  // An empty request_key still means none: an inline-sized batch is served.
  const ok = resultOf(await t.syn.call("embed.batch", { texts: ["a"], request_key: "" }));
  assert.equal((ok.vectors as unknown[]).length, 1);
});

Deno.test("F17: microllm.oneshot refuses a lone surrogate in a stop string, and in a message's content naming the message", async () => {
  const gen = `${MODELS}/synapse-tiny-llama`;
  await using t = await startSynapse({
    preload_models: [{
      engine: "llama",
      model_path: gen,
      tokenizer_path: `${gen}/tokenizer.json`,
      task: "generate",
      model_id: "gen",
    }],
  });
  for (const stop of [[LONE], ["ok", `a${"\udc00"}`]]) {
    const e = channelError(
      await t.syn.call("microllm.oneshot", { model: "gen", prompt: "Hi", max_tokens: 2, stop }),
    );
    assert.equal(e.code, "invalid_request");
    assert.match(e.message, new RegExp(`'stop\\.${stop.length - 1}'.*lone UTF-16 surrogate`));
    assert.ok(!e.message.includes(LONE) && !e.message.includes("\udc00"), e.message);
  }
  const messages = [{ role: "user", content: "Hello" }, { role: "user", content: "\udc00" }];
  const e = semanticError(
    await t.syn.call("microllm.oneshot", { model: "gen", messages, max_tokens: 2 }),
  );
  assert.equal(e.code, "invalid_request");
  assert.equal(e.details.field, "messages.1.content");
  assert.equal(e.details.reason, "invalid_unicode");
  assert.ok(!JSON.stringify(e).includes("\\udc00") && !JSON.stringify(e).includes("\udc00"));
});

Deno.test("F17 on the native door's other strings: a json_schema name, a catalog query, a prompt table's keys and values", async () => {
  const gen = `${MODELS}/synapse-tiny-llama`;
  await using t = await startSynapse({
    preload_models: [{
      engine: "llama",
      model_path: gen,
      tokenizer_path: `${gen}/tokenizer.json`,
      task: "generate",
      model_id: "gen",
    }],
  });
  const schema = { type: "json_schema", json_schema: { name: `n${LONE}`, schema: {} } };
  const load = { path: `${MODELS}/synapse-tiny-embed`, model_id: "e2" };
  const cases: [string, Record<string, unknown>, string][] = [
    [
      "microllm.oneshot",
      { model: "gen", prompt: "Hi", max_tokens: 2, response_format: schema },
      "response_format.json_schema.name",
    ],
    ["models.catalog", { query: `q${LONE}` }, "query"],
    ["model.load", { ...load, prompts: { [`k${LONE}`]: "p: " } }, "prompts"],
    ["model.load", { ...load, prompts: { k: `p${LONE}` } }, "prompts.k"],
  ];
  for (const [method, params, field] of cases) {
    const e = channelError(await t.syn.call(method, params));
    assert.equal(e.code, "invalid_request", `${method} ${field}: ${e.message}`);
    assert.match(e.message, new RegExp(`field '${field.replaceAll(".", "\\.")}'`), e.message);
    assert.match(e.message, /lone UTF-16 surrogate/);
    assert.ok(!e.message.includes(LONE), "the bad string is not echoed back");
  }
});
