/**
 * The HTTP door's TCP front (lib/doors/http/_front.ts) from a raw TCP client: a request that half-closes
 * after its whole body (Content-Length or chunked) is answered (F40); a slow head, a stalled body
 * and an idle kept-alive connection are dropped after their configured timeouts; 200 slow
 * connections do not stop a normal /health. Timeouts are short here; every bound is loose.
 */
import assert from "node:assert/strict";
import { serveHttp } from "../../../lib/doors/http/server.ts";
import { DEFAULT_HTTP_TIMEOUTS } from "../../../lib/doors/http/server.ts";
import { nullLog } from "../../../lib/log/log.ts";
import { startSynapse } from "../../_helpers.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();

/** Reads until the server closes (or `capMs`, a loose bound, passes); what came, and whether it closed. */
async function readToClose(
  conn: Deno.Conn,
  capMs = 60_000,
): Promise<{ text: string; closed: boolean }> {
  const buf = new Uint8Array(65536);
  let text = "";
  let timer: ReturnType<typeof setTimeout> | undefined;
  const cap = new Promise<"cap">((r) => timer = setTimeout(() => r("cap"), capMs));
  try {
    while (true) {
      const n = await Promise.race([conn.read(buf).catch(() => null), cap]);
      if (n === "cap") return { text, closed: false };
      if (n === null) return { text, closed: true };
      text += dec.decode(buf.subarray(0, n));
    }
  } finally {
    clearTimeout(timer);
  }
}

function body(text: string): string {
  return JSON.stringify({ text });
}

Deno.test("the documented HTTP timeout defaults", () => {
  assert.deepEqual({ ...DEFAULT_HTTP_TIMEOUTS }, {
    headerMs: 10_000,
    bodyMs: 30_000,
    idleMs: 30_000,
  });
});

Deno.test("F40: a request that half-closes after its whole body is answered (Content-Length and chunked)", async () => {
  await using t = await startSynapse();
  await using server = serveHttp(t.syn, { port: 0, log: nullLog });
  const b = body("hello world");
  const requests = [
    `POST /v1/ops/embed.query HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${enc.encode(b).length}\r\n\r\n${b}`,
    `POST /v1/ops/embed.query HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n` +
    `${enc.encode(b).length.toString(16)}\r\n${b}\r\n0\r\n\r\n`,
  ];
  for (const req of requests) {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port: server.port });
    await conn.write(enc.encode(req));
    await conn.closeWrite();
    const { text, closed } = await readToClose(conn);
    conn.close();
    assert.ok(closed, "the connection closes once answered");
    assert.match(text, /^(HTTP\/1\.1 100 Continue\r\n\r\n)*HTTP\/1\.1 200 /, text.slice(0, 200));
    const json = JSON.parse(text.slice(text.indexOf("\r\n\r\n", text.lastIndexOf("HTTP/1.1")) + 4));
    assert.equal(json.result.vectors.length, 1);
  }
});

Deno.test("a client sending its head a byte at a time is answered 408 and dropped after http.header_timeout_ms", async () => {
  await using t = await startSynapse({ http: { header_timeout_ms: 1500 } });
  await using server = serveHttp(t.syn, { port: 0, log: nullLog });
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: server.port });
  const head = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + "a".repeat(200) + "\r\n\r\n";
  let stopped = false;
  const trickle = (async () => {
    for (const ch of head) {
      if (stopped) return;
      try {
        await conn.write(enc.encode(ch));
      } catch {
        return;
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  })();
  const { text, closed } = await readToClose(conn);
  stopped = true;
  await trickle;
  conn.close();
  assert.ok(closed, "dropped");
  assert.match(text, /^HTTP\/1\.1 408 /);
});

Deno.test("a body that stalls is dropped after http.body_timeout_ms; an idle kept-alive connection after http.idle_timeout_ms", async () => {
  await using t = await startSynapse({ http: { body_timeout_ms: 1500, idle_timeout_ms: 1500 } });
  await using server = serveHttp(t.syn, { port: 0, log: nullLog });
  {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port: server.port });
    await conn.write(enc.encode(
      "POST /v1/ops/embed.query HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n" +
        '{"text": "',
    ));
    const { closed } = await readToClose(conn);
    conn.close();
    assert.ok(closed, "a stalled body is dropped");
  }
  {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port: server.port });
    await conn.write(enc.encode("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    const { text, closed } = await readToClose(conn);
    conn.close();
    assert.match(text, /^HTTP\/1\.1 200 /, "answered, then kept alive");
    assert.ok(closed, "and closed once idle");
  }
});

Deno.test("200 slow connections do not stop /health; each is dropped at the header timeout", async () => {
  await using t = await startSynapse({ http: { header_timeout_ms: 8000 } });
  await using server = serveHttp(t.syn, { port: 0, log: nullLog });
  const conns = await Promise.all(
    Array.from({ length: 200 }, () => Deno.connect({ hostname: "127.0.0.1", port: server.port })),
  );
  await Promise.all(conns.map((c) => c.write(enc.encode("GET /health HTTP/1.1\r\nHo"))));
  const ends = conns.map((c) => readToClose(c, 120_000));
  const res = await fetch(`http://127.0.0.1:${server.port}/health`);
  assert.equal(res.status, 200);
  assert.equal((await res.json()).status, "ok");
  const all = await Promise.all(ends);
  for (const c of conns) c.close();
  assert.equal(all.filter((e) => e.closed).length, 200, "every slow connection was dropped");
});
