/**
 * Transport faults are the client's, typed, and never an encoding failure of ours: a body shorter
 * than its Content-Length (the client half-closes) or an unterminated chunked body is 400
 * `invalid_request` (`body_incomplete`), over a raw TCP socket. An address already in use is
 * refused at bind, naming the address.
 */
import assert from "node:assert/strict";
import { SynapseError } from "../../../lib/contract/errors.ts";
import { bindHttp, serveHttp } from "../../../lib/doors/http/server.ts";
import type { LogLevel } from "../../../lib/log/log.ts";
import { startSynapse } from "../../_helpers.ts";

/** Sends raw bytes, half-closes (no more to send), and reads the whole answer. */
async function raw(port: number, request: string): Promise<{ status: number; body: string }> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  try {
    await conn.write(new TextEncoder().encode(request));
    await conn.closeWrite();
    const text = await new Response(conn.readable).text();
    const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1]);
    return { status, body: text.slice(text.indexOf("\r\n\r\n") + 4) };
  } finally {
    try {
      conn.close();
    } catch { /* closed by reading to the end */ }
  }
}

Deno.test("a body cut short by the client is 400 invalid_request body_incomplete, not 500 encode_failed", async () => {
  await using t = await startSynapse();
  const lines: { level: LogLevel; fields: Record<string, unknown> }[] = [];
  const server = serveHttp(t.syn, {
    log: (level, _t, message, fields) => {
      if (message === "request") lines.push({ level, fields: fields ?? {} });
    },
  });
  try {
    const head = (path: string, extra: string) =>
      `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n${extra}\r\n`;
    // 100 bytes announced, 14 sent, then the client closes its side.
    let r = await raw(
      server.port,
      head("/v1/ops/embed.query", "Content-Length: 100\r\n") + '{"text":"hell',
    );
    assert.equal(r.status, 400, r.body);
    let body = JSON.parse(r.body);
    assert.equal(body.code, "invalid_request");
    assert.match(
      body.message,
      /^Cannot read body: the connection ended before the 100 bytes its Content-Length announced had arrived/,
    );

    // A chunked body without its last chunk.
    r = await raw(
      server.port,
      head("/v1/ops/embed.query", "Transfer-Encoding: chunked\r\n") + '8\r\n{"text":\r\n',
    );
    assert.equal(r.status, 400, r.body);
    body = JSON.parse(r.body);
    assert.equal(body.code, "invalid_request");
    assert.match(body.message, /before the end of its chunked body/);

    // The OpenAI door answers the same fault in its own shape.
    r = await raw(
      server.port,
      head("/v1/embeddings", "Content-Length: 50\r\n") + '{"input":',
    );
    assert.equal(r.status, 400, r.body);
    body = JSON.parse(r.body);
    assert.equal(body.error.code, "invalid_request");
    assert.equal(body.error.type, "invalid_request_error");
    assert.equal(body.error.param, "body");

    // Each was logged as the client's fault, and the server still serves.
    assert.deepEqual(lines.map((l) => [l.fields.status, l.fields.outcome]), [
      [400, "invalid_request"],
      [400, "invalid_request"],
      [400, "invalid_request"],
    ]);
    const ok = await fetch(`http://127.0.0.1:${server.port}/v1/ops/embed.query`, {
      method: "POST",
      body: '{"text":"hello"}',
    });
    assert.equal(ok.status, 200);
    await ok.body?.cancel();
  } finally {
    await server.shutdown();
  }
});

Deno.test("bindHttp() refuses an address in use, naming it, and answers 503 until an instance is attached", async () => {
  using taken = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (taken.addr as Deno.NetAddr).port;
  assert.throws(() => bindHttp({ hostname: "127.0.0.1", port }), (e: unknown) => {
    assert.ok(e instanceof SynapseError);
    assert.equal(e.code, "invalid_request");
    assert.equal(e.channel, true);
    assert.deepEqual(e.details, {
      field: "http",
      address: `127.0.0.1:${port}`,
      reason: "address_in_use",
    });
    assert.ok(
      e.message.startsWith(`Cannot listen on 127.0.0.1:${port}: the address is already in use`),
      e.message,
    );
    assert.match(e.message, /--http 127\.0\.0\.1:0 picks a free one/);
    return true;
  });

  // Bound, nothing attached yet: a typed "starting" answer, never a hang or a crash.
  await using t = await startSynapse();
  const bound = bindHttp({ log: () => {} });
  try {
    const base = `http://127.0.0.1:${bound.port}`;
    const health = await fetch(`${base}/health`);
    assert.equal(health.status, 503);
    const h = await health.json();
    assert.equal(h.status, "loading");
    assert.equal(h.reason, "the instance is starting");
    const early = await fetch(`${base}/v1/ops/embed.query`, { method: "POST", body: "{}" });
    assert.equal(early.status, 503);
    assert.equal(early.headers.get("retry-after"), "1");
    assert.equal((await early.json()).code, "module_not_initialized");
    bound.attach(t.syn);
    const served = await fetch(`${base}/v1/ops/embed.query`, {
      method: "POST",
      body: '{"text":"now"}',
    });
    assert.equal(served.status, 200);
    await served.body?.cancel();
    assert.throws(() => bound.attach(t.syn), /This is a bug/);
  } finally {
    await bound.shutdown();
  }
});
