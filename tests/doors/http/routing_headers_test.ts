/**
 * Routing by fingerprint on the compat doors (issue 19 item 3): the `x-synapse-*` request
 * headers (lib/doors/http/routing_headers.ts) route and refuse exactly as the native params do, on the
 * OpenAI embeddings and completions doors, TEI, Ollama and Cohere/Jina rerank; a malformed value
 * is a 400 naming the header; the served fingerprint is the `x-synapse-fingerprint` response
 * header; `/v1/ops` refuses the headers (the params are in its body).
 */
import assert from "node:assert/strict";
import { serveHttp } from "../../../lib/doors/http/server.ts";
import { routingFromHeaders } from "../../../lib/doors/http/routing_headers.ts";
import { nullLog } from "../../../lib/log/log.ts";
import { MODELS, preload, resultOf, startSynapse } from "../../_helpers.ts";
import type { TestSynapse } from "../../_helpers.ts";

const EMBED = `${MODELS}/synapse-tiny-embed`;
const RERANK = `${MODELS}/synapse-tiny-rerank`;
const GEN = `${MODELS}/synapse-tiny-llama`;

interface Door extends AsyncDisposable {
  t: TestSynapse;
  base: string;
  fp: Record<string, string>;
  post(path: string, body: unknown, headers?: Record<string, string>): Promise<Answer>;
  get(path: string, headers?: Record<string, string>): Promise<Answer>;
}

// deno-lint-ignore no-explicit-any
type Answer = { res: Response; body: any };

async function door(extra: unknown[] = []): Promise<Door> {
  const t = await startSynapse({
    preload_models: [
      preload(EMBED, "e-short", { task: "embed", max_tokens: 32 }),
      preload(EMBED, "e-long", { task: "embed", max_tokens: 64 }),
      preload(RERANK, "rr", { task: "rerank" }),
      ...extra,
    ],
  }, { log: nullLog });
  await t.syn.modelsSettled;
  const server = serveHttp(t.syn, { log: nullLog });
  const base = `http://127.0.0.1:${server.port}`;
  const fp: Record<string, string> = {};
  for (const m of resultOf(await t.syn.call("models.list", {})).models) {
    fp[m.model_id] = m.fingerprints[0];
  }
  return {
    t,
    base,
    fp,
    async post(path, body, headers = {}) {
      const res = await fetch(`${base}${path}`, {
        method: "POST",
        headers: { "content-type": "application/json", ...headers },
        body: JSON.stringify(body),
      });
      return { res, body: await res.json() };
    },
    async get(path, headers = {}) {
      const res = await fetch(`${base}${path}`, { headers });
      return { res, body: await res.json() };
    },
    async [Symbol.asyncDispose]() {
      await server.shutdown();
      await t[Symbol.asyncDispose]();
    },
  };
}

Deno.test("routingFromHeaders parses each header and refuses a malformed value naming it", () => {
  assert.deepEqual(routingFromHeaders(new Headers()), {});
  assert.deepEqual(
    routingFromHeaders(
      new Headers({
        "x-synapse-target-fingerprint": ` ${"a".repeat(64)} `,
        "x-synapse-required-fingerprint": "b".repeat(64),
        "x-synapse-allow-equivalent": "TRUE",
        "x-synapse-accept-declared": "false",
        "x-synapse-required-epoch": "7",
      }),
    ),
    {
      target_fingerprint: "a".repeat(64),
      required_fingerprint: "b".repeat(64),
      allow_equivalent: true,
      accept_declared: false,
      required_epoch: 7,
    },
  );
  // Hex is case-blind: an upper-case fingerprint is read as its lowercase form.
  assert.deepEqual(
    routingFromHeaders(new Headers({ "x-synapse-target-fingerprint": "AB".repeat(32) })),
    { target_fingerprint: "ab".repeat(32) },
  );
  for (
    const [header, value] of [
      ["x-synapse-allow-equivalent", "yes"],
      ["x-synapse-accept-declared", "1"],
      ["x-synapse-required-epoch", "-1"],
      ["x-synapse-required-epoch", "1.5"],
      ["x-synapse-required-epoch", "99999999999999999999"],
      ["x-synapse-target-fingerprint", "a b"],
      ["x-synapse-target-fingerprint", "abc"],
      ["x-synapse-target-fingerprint", "g".repeat(64)],
      ["x-synapse-required-fingerprint", "a".repeat(65)],
      ["x-synapse-required-fingerprint", "x".repeat(300)],
    ] as [string, string][]
  ) {
    assert.throws(
      () => routingFromHeaders(new Headers({ [header]: value })),
      (e: { code: string; details: { field: string } }) =>
        e.code === "invalid_request" && e.details.field === header,
      `${header}: ${value}`,
    );
  }
});

Deno.test("OpenAI /v1/embeddings routes by x-synapse-target-fingerprint and refuses a mismatched required one (422)", async () => {
  await using d = await door();
  for (const id of ["e-short", "e-long"]) {
    const { res, body } = await d.post("/v1/embeddings", { input: ["a", "b"] }, {
      "x-synapse-target-fingerprint": d.fp[id]!,
    });
    assert.equal(res.status, 200, JSON.stringify(body));
    assert.equal(body.model, id);
    assert.equal(body.synapse.fingerprint, d.fp[id]);
    assert.equal(res.headers.get("x-synapse-fingerprint"), d.fp[id]);
  }
  const { res, body } = await d.post("/v1/embeddings", { input: "a" }, {
    "x-synapse-required-fingerprint": d.fp["e-long"]!,
  });
  assert.equal(res.status, 422);
  assert.equal(body.error.code, "substitution_rejected");
  assert.match(body.error.message, /is not the required/);
  const epoch = await d.post("/v1/embeddings", { input: "a" }, {
    "x-synapse-required-epoch": "1",
  });
  assert.equal(epoch.res.status, 422);
  assert.equal(epoch.body.error.code, "substitution_rejected");
  assert.match(epoch.body.error.message, /epoch 0, older than the required_epoch 1/);
  // A malformed header: 400 naming it.
  const bad = await d.post("/v1/embeddings", { input: "a" }, {
    "x-synapse-allow-equivalent": "maybe",
  });
  assert.equal(bad.res.status, 400);
  assert.equal(bad.body.error.code, "invalid_request");
  assert.equal(bad.body.error.param, "x-synapse-allow-equivalent");
  // GET /v1/models serves no model: the headers are not read there.
  const models = await d.get("/v1/models", { "x-synapse-required-epoch": "nope" });
  assert.equal(models.res.status, 200);
});

Deno.test("TEI, Ollama and Cohere doors route by the headers; equivalence needs x-synapse-allow-equivalent (and accept-declared for a declared row)", async () => {
  await using d = await door();
  const ctx = d.t.syn.context;
  const declared = "d".repeat(64);
  ctx.aliases.declare(declared, d.fp["e-long"]!, { source: "declared" }, ctx.now());
  const epoch = String(ctx.tableEpoch());
  const eq = {
    "x-synapse-target-fingerprint": declared,
    "x-synapse-allow-equivalent": "true",
    "x-synapse-accept-declared": "true",
    "x-synapse-required-epoch": epoch,
  };
  // TEI /embed
  const tei = await d.post("/embed", { inputs: ["a"] }, eq);
  assert.equal(tei.res.status, 200, JSON.stringify(tei.body));
  assert.equal(tei.res.headers.get("x-synapse-fingerprint"), d.fp["e-long"]);
  const teiNo = await d.post("/embed", { inputs: ["a"] }, {
    "x-synapse-target-fingerprint": declared,
    "x-synapse-allow-equivalent": "true",
  });
  assert.equal(teiNo.res.status, 422, JSON.stringify(teiNo.body));
  assert.match(JSON.stringify(teiNo.body), /accept_declared: true/);
  const teiBad = await d.post("/embed", { inputs: ["a"] }, { "x-synapse-required-epoch": "x" });
  assert.equal(teiBad.res.status, 400);
  assert.match(JSON.stringify(teiBad.body), /x-synapse-required-epoch/);
  // Ollama /api/embed (its body names the model: the model must serve the target)
  const ol = await d.post("/api/embed", { model: "e-long", input: ["a"] }, eq);
  assert.equal(ol.res.status, 200, JSON.stringify(ol.body));
  assert.equal(ol.body.model, "e-long");
  assert.equal(ol.res.headers.get("x-synapse-fingerprint"), d.fp["e-long"]);
  const olNo = await d.post("/api/embed", { model: "e-long", input: ["a"] }, {
    "x-synapse-target-fingerprint": declared,
  });
  assert.equal(olNo.res.status, 422, JSON.stringify(olNo.body));
  const olShort = await d.post("/api/embed", { model: "e-short", input: ["a"] }, {
    "x-synapse-target-fingerprint": d.fp["e-long"]!,
  });
  assert.equal(olShort.res.status, 422, JSON.stringify(olShort.body));
  // Cohere /v1/rerank and TEI /rerank
  const rr = await d.post("/v1/rerank", { query: "q", documents: ["a", "b"] }, {
    "x-synapse-required-fingerprint": d.fp.rr!,
  });
  assert.equal(rr.res.status, 200, JSON.stringify(rr.body));
  assert.equal(rr.res.headers.get("x-synapse-fingerprint"), d.fp.rr);
  const rrNo = await d.post("/v1/rerank", { query: "q", documents: ["a", "b"] }, {
    "x-synapse-required-fingerprint": d.fp["e-long"]!,
  });
  assert.equal(rrNo.res.status, 422, JSON.stringify(rrNo.body));
  const teiRr = await d.post("/rerank", { query: "q", texts: ["a", "b"] }, {
    "x-synapse-target-fingerprint": d.fp["e-short"]!,
  });
  assert.equal(teiRr.res.status, 422, JSON.stringify(teiRr.body));
  const rrBad = await d.post("/v2/rerank", { query: "q", documents: ["a"] }, {
    "x-synapse-accept-declared": "sure",
  });
  assert.equal(rrBad.res.status, 400);
  assert.match(JSON.stringify(rrBad.body), /x-synapse-accept-declared/);
});

Deno.test("/v1/ops refuses a routing header by name: the native door takes the params in its body", async () => {
  await using d = await door();
  const { res, body } = await d.post("/v1/ops/embed.query", { text: "x" }, {
    "x-synapse-target-fingerprint": d.fp["e-long"]!,
  });
  assert.equal(res.status, 400);
  assert.equal(body.code ?? body.error?.code, "invalid_request");
  assert.match(JSON.stringify(body), /target_fingerprint/);
  const ok = await d.post("/v1/ops/embed.query", {
    text: "x",
    target_fingerprint: d.fp["e-long"],
  });
  assert.equal(ok.res.status, 200);
  assert.equal(ok.res.headers.get("x-synapse-fingerprint"), d.fp["e-long"]);
});

Deno.test("the completions doors take the routing headers: required and target fingerprints, streamed too", async () => {
  const gen = {
    engine: "llama",
    model_path: GEN,
    tokenizer_path: `${GEN}/tokenizer.json`,
    task: "generate",
    model_id: "gen",
  };
  await using d = await door([gen]);
  const fp = d.fp.gen!;
  const body = { prompt: "hello", max_tokens: 4 };
  const ok = await d.post("/v1/completions", body, { "x-synapse-required-fingerprint": fp });
  assert.equal(ok.res.status, 200, JSON.stringify(ok.body));
  assert.equal(ok.res.headers.get("x-synapse-fingerprint"), fp);
  const no = await d.post("/v1/completions", body, {
    "x-synapse-required-fingerprint": d.fp["e-short"]!,
  });
  assert.equal(no.res.status, 422, JSON.stringify(no.body));
  assert.equal(no.body.error.code, "substitution_rejected");
  const chat = { messages: [{ role: "user", content: "hi" }], max_tokens: 4 };
  const chatOk = await d.post("/v1/chat/completions", chat, {
    "x-synapse-target-fingerprint": fp,
  });
  assert.equal(chatOk.res.status, 200, JSON.stringify(chatOk.body));
  assert.equal(chatOk.res.headers.get("x-synapse-fingerprint"), fp);
  const chatNo = await d.post("/v1/chat/completions", chat, {
    "x-synapse-target-fingerprint": "e".repeat(64),
  });
  assert.equal(chatNo.res.status, 422, JSON.stringify(chatNo.body));
  assert.equal(chatNo.body.error.code, "substitution_rejected");
  const bad = await d.post("/v1/chat/completions", chat, { "x-synapse-required-epoch": "-3" });
  assert.equal(bad.res.status, 400);
  assert.equal(bad.body.error.param, "x-synapse-required-epoch");
  // Streamed: the routed model serves the stream.
  const res = await fetch(`${d.base}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-synapse-target-fingerprint": fp },
    body: JSON.stringify({ ...body, stream: true }),
  });
  assert.equal(res.status, 200);
  assert.equal(res.headers.get("x-synapse-fingerprint"), fp);
  const text = await res.text();
  assert.match(text, /data: \[DONE\]/);
});
