/**
 * The request log: one structured line per request at `info` — method, path, op, model, items,
 * item_errors, tokens, queue_ms, inference_ms, outcome, status, total_ms — and never a text, an
 * id, a key or a header. `/health` logs at `debug`.
 */
import assert from "node:assert/strict";
import { serveHttp } from "../../../lib/doors/http/server.ts";
import { logRequest } from "../../../lib/doors/request_log.ts";
import { renderLogEvent } from "../../../lib/log/log.ts";
import type { LogLevel } from "../../../lib/log/log.ts";
import { startSynapse } from "../../_helpers.ts";

interface Line {
  level: LogLevel;
  target: string;
  message: string;
  fields: Record<string, string | number | boolean>;
}

const KEYS = [
  "method",
  "path",
  "op",
  "model",
  "items",
  "item_errors",
  "tokens",
  "queue_ms",
  "inference_ms",
  "outcome",
  "status",
  "total_ms",
];

Deno.test("the request log writes one line per request with the fields of a real request", async () => {
  const lines: Line[] = [];
  await using t = await startSynapse({}, {
    log: (level, target, message, fields) =>
      lines.push({ level, target, message, fields: fields ?? {} }),
  });
  const server = serveHttp(t.syn);
  const base = `http://127.0.0.1:${server.port}`;
  const requests = () => lines.filter((l) => l.message === "request");
  const post = async (path: string, body: unknown) => {
    const res = await fetch(`${base}${path}`, { method: "POST", body: JSON.stringify(body) });
    return { status: res.status, body: await res.json() };
  };
  try {
    const secret = "SECRET-TEXT-4417";
    const ok = await post("/v1/ops/embed.batch", {
      items: [
        { id: "doc-key-1", text: `${secret} alpha` },
        { id: "doc-key-2", text: `${secret} beta gamma` },
        { id: "doc-key-3", text: "" },
      ],
      request_key: "KEY-ABC",
    });
    assert.equal(ok.status, 200);
    const r = ok.body.result;
    let line = requests().at(-1)!;
    assert.equal(line.level, "info");
    assert.equal(line.target, "synapse.http");
    assert.deepEqual(Object.keys(line.fields), KEYS);
    const f = line.fields;
    assert.equal(f.method, "POST");
    assert.equal(f.path, "/v1/ops/embed.batch");
    assert.equal(f.op, "embed.batch");
    assert.equal(f.model, "synapse-tiny-embed");
    assert.equal(f.items, 3);
    assert.equal(f.item_errors, 1);
    assert.equal(f.tokens, r.real_token_counts[0] + r.real_token_counts[1]);
    assert.equal(f.queue_ms, r.queue_time_ms);
    assert.equal(f.inference_ms, r.inference_time_ms);
    assert.equal(f.outcome, "ok");
    assert.equal(f.status, 200);
    assert.ok(typeof f.total_ms === "number" && f.total_ms >= 0);
    const text = renderLogEvent(line.level, line.target, line.message, line.fields);
    // What the operator sees (CK_LOG=info, on stderr and in the day file):
    console.log(text);
    assert.match(
      text,
      /^\S+Z INFO {2}synapse\.http: request method=POST path=\/v1\/ops\/embed\.batch op=embed\.batch model=synapse-tiny-embed items=3 item_errors=1 tokens=\d+ queue_ms=[\d.]+ inference_ms=[\d.]+ outcome=ok status=200 total_ms=[\d.]+$/,
    );
    for (const s of [secret, "doc-key", "KEY-ABC"]) assert.ok(!text.includes(s), s);

    // A refusal: its code and status; facts it never reached are "-".
    const refused = await post("/v1/ops/embed.query", { text: "x", model: "nope" });
    assert.equal(refused.status, 404);
    line = requests().at(-1)!;
    assert.equal(line.fields.outcome, "unknown_model");
    assert.equal(line.fields.status, 404);
    assert.equal(line.fields.model, "nope");
    assert.equal(line.fields.items, 1);
    assert.equal(line.fields.tokens, "-");
    assert.equal(line.fields.queue_ms, "-");

    // The OpenAI door logs the operation it maps to.
    const oa = await post("/v1/embeddings", { input: ["one", "two"] });
    assert.equal(oa.status, 200);
    line = requests().at(-1)!;
    assert.equal(line.fields.path, "/v1/embeddings");
    assert.equal(line.fields.op, "embed.batch");
    assert.equal(line.fields.items, 2);
    assert.equal(line.fields.tokens, oa.body.usage.prompt_tokens);
    assert.equal(line.fields.outcome, "ok");

    // A malformed body never reaches an operation.
    const bad = await fetch(`${base}/v1/ops/embed.query`, { method: "POST", body: "{" });
    assert.equal(bad.status, 400);
    await bad.body?.cancel();
    line = requests().at(-1)!;
    assert.equal(line.fields.outcome, "invalid_request");
    assert.equal(line.fields.model, "-");

    // /health is logged at debug, so a prober does not fill the log.
    const before = requests().length;
    await (await fetch(`${base}/health`)).body?.cancel();
    assert.equal(requests().length, before + 1);
    line = requests().at(-1)!;
    assert.equal(line.level, "debug");
    assert.equal(line.fields.path, "/health");
    // Each request also has a debug line when it starts.
    assert.ok(lines.some((l) => l.level === "debug" && l.message === "request start"));
  } finally {
    await server.shutdown();
  }
});

Deno.test("one request log for every door (lib/doors/request_log.ts): the door's fields around the facts, cancelled over the facts, caller strings cut", () => {
  const lines: Line[] = [];
  const log = (level: LogLevel, target: string, message: string, fields?: Line["fields"]) =>
    lines.push({ level, target, message, fields: fields ?? {} });
  const facts = { model: "m".repeat(250), items: 2, tokens: 5, outcome: "ok" };
  logRequest(log, {
    target: "synapse.subc",
    op: "embed.batch",
    facts,
    cancelled: true,
    tail: { channel: 3, corr: "7" },
    totalMs: 1.23456,
  });
  logRequest(log, {
    target: "synapse.http",
    level: "debug",
    lead: { method: "GET", path: `/${"p".repeat(300)}` },
    unreached: "invalid_request",
    tail: { status: 400 },
    totalMs: 0.5,
  });
  const [bus, http] = lines;
  assert.deepEqual(bus, {
    level: "info",
    target: "synapse.subc",
    message: "request",
    fields: {
      op: "embed.batch",
      model: `${"m".repeat(200)}…`,
      items: 2,
      item_errors: "-",
      tokens: 5,
      queue_ms: "-",
      inference_ms: "-",
      outcome: "cancelled",
      channel: 3,
      corr: "7",
      total_ms: 1.235,
    },
  });
  assert.equal(http!.level, "debug");
  assert.deepEqual(Object.keys(http!.fields), KEYS);
  assert.equal(http!.fields.path, `/${"p".repeat(199)}…`);
  assert.equal(http!.fields.op, "-");
  assert.equal(http!.fields.model, "-");
  assert.equal(http!.fields.outcome, "invalid_request");
  assert.equal(http!.fields.status, 400);
});
