/**
 * What is counted is what happened (field reports F29, F30), through the real HTTP door with real
 * sockets: a request the door refuses all or nothing is counted and logged as its code with no
 * tokens; a client that hangs up is `cancelled` (never a 504 nobody received), and its hang-up
 * stops a big inline-chunked call at the next chunk boundary.
 */
import assert from "node:assert/strict";
import { loadConfig } from "../../../lib/config/loader.ts";
import { serveHttp } from "../../../lib/doors/http/server.ts";
import type { LogFields, LogSink } from "../../../lib/log/log.ts";
import { createSynapse } from "../../../lib/synapse.ts";
import { parkedWorker } from "../../_generation.ts";
import { MODELS, startSynapse } from "../../_helpers.ts";

interface Line {
  message: string;
  fields: LogFields;
}

function recorder(): { log: LogSink; lines: Line[]; requests: () => Line[] } {
  const lines: Line[] = [];
  return {
    lines,
    log: (_level, _target, message, fields) => void lines.push({ message, fields: fields ?? {} }),
    requests: () => lines.filter((l) => l.message === "request" && l.fields.path !== "/metrics"),
  };
}

/** The `synapse_requests_total` and `synapse_tokens_total` series of a scrape. */
async function scrape(base: string): Promise<Map<string, number>> {
  const text = await (await fetch(`${base}/metrics`)).text();
  const series = new Map<string, number>();
  for (const line of text.split("\n")) {
    const m = /^(synapse_(?:requests|tokens)_total\{[^}]*\}) (\S+)$/.exec(line);
    if (m) series.set(m[1]!, Number(m[2]));
  }
  return series;
}

async function until(what: string, cond: () => boolean, ms = 120_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const LONG = Array(2000).fill("word").join(" ");

Deno.test("F29: an embeddings call refused all or nothing is counted and logged as its code, 0 tokens", async () => {
  const rec = recorder();
  await using t = await startSynapse({}, { log: rec.log });
  const server = serveHttp(t.syn);
  const base = `http://127.0.0.1:${server.port}`;
  try {
    // 200 inputs; input 150 is too long: the first chunks run, then the whole call is refused.
    const texts = Array.from({ length: 200 }, (_, i) => `passage ${i} about things`);
    texts[150] = LONG;
    const doors = [
      { path: "/v1/embeddings", body: { input: texts } },
      { path: "/embed", body: { inputs: texts } },
      { path: "/api/embed", body: { model: "synapse-tiny-embed", input: texts, truncate: false } },
    ];
    for (const door of doors) {
      const res = await fetch(`${base}${door.path}`, {
        method: "POST",
        body: JSON.stringify(door.body),
      });
      const body = await res.text();
      assert.equal(res.status, 422, `${door.path}: ${body}`);
      assert.match(body, /sequence_too_long|too long|Input validation/i, door.path);
      const line = rec.requests().at(-1)!;
      assert.equal(line.fields.path, door.path);
      assert.equal(line.fields.outcome, "sequence_too_long", door.path);
      assert.equal(line.fields.status, 422);
      assert.equal(line.fields.tokens, 0, door.path);
      assert.equal(line.fields.items, 200);
    }
    const m = await scrape(base);
    assert.equal(
      m.get('synapse_requests_total{op="embed.batch",door="http",outcome="sequence_too_long"}'),
      3,
    );
    assert.equal(
      m.get('synapse_requests_total{op="embed.batch",door="http",outcome="ok"}'),
      undefined,
    );
    assert.equal(
      m.get('synapse_tokens_total{op="embed.batch",model="synapse-tiny-embed"}'),
      undefined,
      "no tokens were served",
    );
    // A served call still counts its tokens.
    const ok = await (await fetch(`${base}/v1/embeddings`, {
      method: "POST",
      body: JSON.stringify({ input: ["one two", "three"] }),
    })).json();
    const after = await scrape(base);
    assert.equal(after.get('synapse_requests_total{op="embed.batch",door="http",outcome="ok"}'), 1);
    assert.equal(
      after.get('synapse_tokens_total{op="embed.batch",model="synapse-tiny-embed"}'),
      ok.usage.prompt_tokens,
    );
  } finally {
    await server.shutdown();
  }
});

Deno.test("F30: a client hanging up during a 2,048-input embeddings call stops its chunks; cancelled", async () => {
  const rec = recorder();
  let chunks = 0;
  let chunkSeen!: () => void;
  const firstChunks = new Promise<void>((r) => chunkSeen = r);
  await using t = await startSynapse({ inline: { max_items: 16 } }, {
    log: (level, target, message, fields) => {
      rec.log(level, target, message, fields);
      if (message === "embed chunk" && ++chunks === 2) chunkSeen();
    },
  });
  const server = serveHttp(t.syn);
  const base = `http://127.0.0.1:${server.port}`;
  try {
    const texts = Array.from(
      { length: 2048 },
      (_, i) => `passage ${i} ${Array(60).fill("word").join(" ")}`,
    );
    const total = 2048 / 16;
    const abort = new AbortController();
    const call = fetch(`${base}/v1/embeddings`, {
      method: "POST",
      body: JSON.stringify({ input: texts }),
      signal: abort.signal,
    }).then(() => "answered", (e) => (e as Error).name);
    await firstChunks;
    abort.abort();
    assert.equal(await call, "AbortError");
    await until("the request log line", () => rec.requests().some((l) => l.fields.items === 2048));
    const ran = chunks;
    console.log(`chunks run: ${ran} of ${total}`);
    assert.ok(ran < total / 2, `${ran} of ${total} chunks ran after the hang-up`);
    const line = rec.requests().find((l) => l.fields.items === 2048)!;
    assert.equal(line.fields.outcome, "cancelled");
    assert.equal(line.fields.status, 499);
    assert.equal(line.fields.path, "/v1/embeddings");
    const m = await scrape(base);
    assert.equal(
      m.get('synapse_requests_total{op="embed.batch",door="http",outcome="cancelled"}'),
      1,
    );
    assert.equal(
      m.get('synapse_tokens_total{op="embed.batch",model="synapse-tiny-embed"}'),
      undefined,
    );
    // No chunk runs after the count was taken: the call ended.
    await new Promise((r) => setTimeout(r, 500));
    assert.equal(chunks, ran);
  } finally {
    await server.shutdown();
  }
});

const GEN = `${MODELS}/synapse-tiny-llama`;

/** A served generation model whose worker parks after 3 tokens until the request is cancelled. */
async function parkedDoor(rec: ReturnType<typeof recorder>) {
  const dir = await Deno.makeTempDir({ prefix: "synapse-cancelled-" });
  const env = {
    XDG_DATA_HOME: `${dir}/data`,
    XDG_CONFIG_HOME: `${dir}/config`,
    HOME: dir,
    SYNAPSE_CONFIG_JSON: JSON.stringify({
      certification: "warn",
      preload_models: [{
        engine: "llama",
        model_path: GEN,
        tokenizer_path: `${GEN}/tokenizer.json`,
        task: "generate",
        model_id: "gen",
      }],
    }),
  };
  const worker = parkedWorker();
  const { config } = loadConfig({ env, cwd: dir });
  const syn = await createSynapse({
    config,
    env,
    log: (level, target, message, fields) => {
      worker.log(level, target, message, fields);
      rec.log(level, target, message, fields);
    },
    llamaWorkerArgs: ["--test-wait-cancel-after", "3"],
  });
  const server = serveHttp(syn);
  return {
    base: `http://127.0.0.1:${server.port}`,
    parked: worker.parked,
    async [Symbol.asyncDispose]() {
      await server.shutdown();
      await syn.dispose();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

for (const stream of [false, true]) {
  Deno.test(`a client hanging up mid-generation (stream: ${stream}) is counted and logged cancelled`, async () => {
    const rec = recorder();
    await using d = await parkedDoor(rec);
    const abort = new AbortController();
    // The non-streamed prompt is longer than Deno's first read (512 bytes): only the door's peer
    // watch sees that hang-up.
    const prompt = stream ? "hi" : `hi ${"there ".repeat(120)}`;
    const call = fetch(`${d.base}/v1/completions`, {
      method: "POST",
      body: JSON.stringify({ model: "gen", prompt, max_tokens: 64, stream }),
      signal: abort.signal,
    });
    let reader: ReadableStreamDefaultReader<Uint8Array> | undefined;
    if (stream) {
      const res = await call;
      assert.equal(res.status, 200);
      reader = res.body!.getReader();
      await reader.read();
    }
    await d.parked;
    abort.abort();
    await call.catch(() => {});
    await reader?.cancel().catch(() => {});
    await until(
      "the request log line",
      () => rec.requests().some((l) => l.fields.path === "/v1/completions"),
    );
    const line = rec.requests().find((l) => l.fields.path === "/v1/completions")!;
    assert.equal(line.fields.outcome, "cancelled");
    // Answered to nobody: 499 (client closed request), not a 504 nobody received; a stream had
    // sent its 200 already.
    assert.equal(line.fields.status, stream ? 200 : 499);
    const m = await scrape(d.base);
    assert.equal(
      m.get('synapse_requests_total{op="microllm.oneshot",door="http",outcome="cancelled"}'),
      1,
    );
    assert.equal(
      m.get(
        'synapse_requests_total{op="microllm.oneshot",door="http",outcome="deadline_exceeded"}',
      ),
      undefined,
    );
  });
}
