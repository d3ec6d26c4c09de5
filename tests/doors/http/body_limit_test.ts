import assert from "node:assert/strict";
import { serveHttp } from "../../../lib/doors/http/server.ts";
import { startSynapse } from "../../_helpers.ts";

const MIB = 2 ** 20;

/** A body of `total` bytes made lazily in 64 KiB chunks, yielding to the event loop between. */
function slowBody(total: number, sent: { bytes: number }): ReadableStream<Uint8Array> {
  return new ReadableStream<Uint8Array>({
    async pull(c) {
      if (sent.bytes >= total) return c.close();
      await new Promise((r) => setTimeout(r, 0));
      const chunk = new Uint8Array(Math.min(64 * 1024, total - sent.bytes)).fill(0x20);
      sent.bytes += chunk.byteLength;
      c.enqueue(chunk);
    },
  });
}

Deno.test("serveHttp() refuses a 50 MiB body at http.max_body_bytes while it streams, /health answering meanwhile", async () => {
  // The cap comes from the config (SYNAPSE_CONFIG_JSON, as an operator would set it).
  await using t = await startSynapse({ http: { max_body_bytes: 4 * MIB } });
  await using server = serveHttp(t.syn, {});
  const base = `http://127.0.0.1:${server.port}`;
  // Warm up, then take the baseline.
  await (await fetch(`${base}/health`)).body?.cancel();
  const rssBefore = Deno.memoryUsage().rss;

  const sent = { bytes: 0 };
  let uploading = true;
  const upload = fetch(`${base}/v1/ops/embed.query`, {
    method: "POST",
    body: slowBody(50 * MIB, sent),
  }).then(async (res) => ({ status: res.status, body: await res.json() }))
    .finally(() => uploading = false);
  let healthy = 0;
  while (uploading) {
    const res = await fetch(`${base}/health`);
    assert.equal(res.status, 200);
    await res.body?.cancel();
    healthy++;
  }
  const { status, body } = await upload;
  assert.equal(status, 413);
  const e = body.result.error;
  assert.equal(e.code, "invalid_request");
  assert.equal(e.class, "permanent");
  assert.equal(e.details.limit, "http.max_body_bytes");
  assert.equal(e.details.max, 4 * MIB);
  assert.ok(e.details.received_at_least > 4 * MIB);
  // Reading stopped at the cap: the client was not made to send the 50 MiB.
  assert.ok(sent.bytes < 20 * MIB, `${sent.bytes} bytes sent`);
  assert.ok(healthy >= 1, "/health answered while the body streamed in");
  // The refusal did not buffer the body: memory stays well under the body's size.
  const grew = Deno.memoryUsage().rss - rssBefore;
  assert.ok(grew < 32 * MIB, `RSS grew by ${(grew / MIB).toFixed(1)} MiB`);
  // Still serving.
  const ok = await fetch(`${base}/v1/ops/embed.query`, {
    method: "POST",
    body: JSON.stringify({ text: "still serving" }),
  });
  assert.equal(ok.status, 200);
  await ok.body?.cancel();
});

Deno.test("serveHttp() refuses a declared 50 MiB Content-Length before reading the body", async () => {
  await using t = await startSynapse({ http: { max_body_bytes: 4 * MIB } });
  await using server = serveHttp(t.syn, {});
  using conn = await Deno.connect({ hostname: "127.0.0.1", port: server.port });
  const head = `POST /v1/embeddings HTTP/1.1\r\nHost: 127.0.0.1\r\n` +
    `Content-Type: application/json\r\nContent-Length: ${50 * MIB}\r\n\r\n`;
  await conn.write(new TextEncoder().encode(head));
  // No body byte is sent: the answer comes from the header alone.
  const buf = new Uint8Array(4096);
  let text = "";
  while (!text.includes("}}")) {
    const n = await conn.read(buf);
    if (n === null) break;
    text += new TextDecoder().decode(buf.subarray(0, n));
  }
  assert.match(text, /^HTTP\/1\.1 413 /);
  // The OpenAI route answers in OpenAI's error shape.
  assert.match(text, /"code":"invalid_request"/);
  assert.match(text, /http\.max_body_bytes/);
});
