/**
 * Field report F17 at every door: a lone UTF-16 surrogate in any string a door accepts — a value
 * or an object key, a field the door ignores included — is `invalid_request` naming the field's
 * path in the door's own terms (a bad key: the object holding it), and the bad string is not
 * echoed. Each body is sent over real HTTP as JSON with the `\ud83d` escape.
 *
 * @module
 */
import assert from "node:assert/strict";
import { serveHttp } from "../../../lib/doors/http/server.ts";
import { nullLog } from "../../../lib/log/log.ts";
import { MODELS, preload, startSynapse } from "../../_helpers.ts";

const GEN = `${MODELS}/synapse-tiny-llama`;

/** Where each door's error body keeps its code and field. */
type Shape = "openai" | "tei" | "ollama" | "native";

const CHAT = [{ role: "user", content: "Hello" }];

/** [door path, body, error shape, the field the refusal names]. */
const CASES: [string, Record<string, unknown>, Shape, string][] = [
  ["/embed", { inputs: "x", prompt_name: "p\ud83d" }, "tei", "prompt_name"],
  ["/embed", { inputs: "x", "\udc00": 1 }, "tei", "params"],
  ["/api/embed", { model: "embed", input: "x", keep_alive: "5\ud83d" }, "ollama", "keep_alive"],
  ["/api/embed", { model: "embed", input: "x", options: { "\ud83d": 1 } }, "ollama", "options"],
  ["/v1/embeddings", { input: "x", metadata: { "k\ud83d": "v" } }, "openai", "metadata"],
  ["/v1/embeddings", { input: "x", metadata: { k: "v\ud83d" } }, "openai", "metadata.k"],
  [
    "/v1/chat/completions",
    { model: "gen", messages: CHAT, max_tokens: 2, metadata: { a: "\ud83d" } },
    "openai",
    "metadata.a",
  ],
  [
    "/v1/chat/completions",
    { model: "gen", messages: CHAT, max_tokens: 2, stop: ["\ud83d"] },
    "openai",
    "stop.0",
  ],
  [
    "/v1/completions",
    { model: "gen", prompt: "Hi", max_tokens: 2, stop: "a\udc00" },
    "openai",
    "stop",
  ],
  [
    "/v1/chat/completions",
    { model: "gen", messages: [CHAT[0], { role: "user", content: "\udc00" }], max_tokens: 2 },
    "openai",
    "messages.1.content",
  ],
  [
    "/v1/ops/microllm.oneshot",
    { model: "gen", prompt: "Hi", max_tokens: 2, stop: ["\ud83d"] },
    "native",
    "stop.0",
  ],
  [
    "/v1/ops/microllm.oneshot",
    { model: "gen", messages: [CHAT[0], { role: "user", content: "\udc00" }], max_tokens: 2 },
    "native",
    "messages.1.content",
  ],
];

/** The code and field of a door's error body. */
// deno-lint-ignore no-explicit-any
function refusal(shape: Shape, body: any): { code: unknown; field: unknown } {
  if (shape === "openai") return { code: body.error?.code, field: body.error?.param };
  if (shape === "native") {
    // A semantic refusal is the result's error; a channel one names its field in the message.
    if (body.result?.error !== undefined) {
      return { code: body.result.error.code, field: body.result.error.details?.field };
    }
    return { code: body.code, field: /field '([^']*)'/.exec(body.message ?? "")?.[1] };
  }
  return { code: body.code, field: body.field };
}

Deno.test("F17: a lone surrogate in any string or key a door accepts is invalid_request naming its path, not echoed", async () => {
  await using t = await startSynapse({
    preload_models: [
      preload(`${MODELS}/synapse-tiny-embed`, "embed"),
      {
        engine: "llama",
        model_path: GEN,
        tokenizer_path: `${GEN}/tokenizer.json`,
        task: "generate",
        model_id: "gen",
      },
    ],
  }, { log: nullLog });
  const server = serveHttp(t.syn, { log: nullLog });
  try {
    const base = `http://127.0.0.1:${server.port}`;
    for (const [path, req, shape, field] of CASES) {
      const what = `${path} ${JSON.stringify(req)}`;
      const res = await fetch(`${base}${path}`, { method: "POST", body: JSON.stringify(req) });
      // The raw bytes: a lone surrogate echoed would come back as its \u escape or as U+FFFD.
      const raw = await res.text();
      assert.ok(res.status >= 400 && res.status < 500, `${what}: ${res.status} ${raw}`);
      const got = refusal(shape, JSON.parse(raw));
      assert.equal(got.code, "invalid_request", `${what}: ${raw}`);
      assert.equal(got.field, field, `${what}: ${raw}`);
      assert.doesNotMatch(raw, /\\ud[89a-f][0-9a-f]{2}|\uFFFD/i, `${what} echoes: ${raw}`);
      assert.match(raw, /lone UTF-16 surrogate/, what);
    }
    // The same bodies without the bad code unit are served.
    const ok = await fetch(`${base}/api/embed`, {
      method: "POST",
      body: JSON.stringify({ model: "embed", input: "x", keep_alive: "5m", options: { k: 1 } }),
    });
    assert.equal(ok.status, 200, await ok.text());
  } finally {
    await server.shutdown();
  }
});

Deno.test("F14 kept: an embed text with a lone surrogate is still the item's own error on the native door", async () => {
  await using t = await startSynapse({
    preload_models: [preload(`${MODELS}/synapse-tiny-embed`, "embed")],
  }, { log: nullLog });
  const server = serveHttp(t.syn, { log: nullLog });
  try {
    const res = await fetch(`http://127.0.0.1:${server.port}/v1/ops/embed.batch`, {
      method: "POST",
      body: JSON.stringify({ texts: ["fine", "bad \ud83d"] }),
    });
    assert.equal(res.status, 200);
    const body = await res.json();
    assert.equal(body.result.vectors.length, 1);
    assert.equal(body.result.item_errors.length, 1);
    assert.equal(body.result.item_errors[0].error.details.reason, "invalid_unicode");
  } finally {
    await server.shutdown();
  }
});
