import assert from "node:assert/strict";
import { SynapseError } from "../../lib/contract/errors.ts";
import { JsonBodyParser } from "../../lib/doors/_json_body_parser.ts";
import { parseJsonBytes, readJsonBody } from "../../lib/doors/_request_body.ts";
import { serveHttp } from "../../lib/doors/http/server.ts";
import { nullLog } from "../../lib/log/log.ts";
import { startSynapse } from "../_helpers.ts";

const enc = new TextEncoder();

function inline(bytes: Uint8Array): { ok: boolean; value?: unknown; error?: SynapseError } {
  try {
    return { ok: true, value: parseJsonBytes(bytes) };
  } catch (e) {
    return { ok: false, error: e as SynapseError };
  }
}

Deno.test("JsonBodyParser.parse() gives what parseJsonBytes() gives, errors included", async () => {
  using parser = new JsonBodyParser({ offloadBytes: 0 });
  const bodies = [
    enc.encode('{"text": "héllo", "items": [1, 2.5, null, true]}'),
    enc.encode("   \n"),
    enc.encode(""),
    Uint8Array.of(0x7b, 0xff, 0x7d),
    enc.encode('{\n  "a": tru\n}'),
    enc.encode(JSON.stringify({ text: "lorem ipsum ".repeat(200_000) })),
  ];
  for (const bytes of bodies) {
    const want = inline(bytes);
    try {
      const got = await parser.parse(bytes.slice());
      assert.ok(want.ok);
      assert.deepEqual(got, want.value);
    } catch (e) {
      assert.ok(!want.ok, String(e));
      assert.ok(e instanceof SynapseError);
      assert.equal(e.code, want.error!.code);
      assert.equal(e.message, want.error!.message);
      assert.equal(e.channel, want.error!.channel);
      assert.deepEqual(e.details, want.error!.details);
    }
  }
});

Deno.test("readJsonBody() with a parser reads large bodies on the worker, small ones inline", async () => {
  using parser = new JsonBodyParser({ offloadBytes: 1000 });
  const req = (body: BodyInit) => new Request("http://127.0.0.1/", { method: "POST", body });
  const big = { text: "x".repeat(5000) };
  assert.deepEqual(await readJsonBody(req(JSON.stringify(big)), { parser }), big);
  assert.deepEqual(await readJsonBody(req('{"a":1}'), { parser }), { a: 1 });
  assert.deepEqual(await readJsonBody(req(" ".repeat(2000)), { parser, empty: 7 }), 7);
  await assert.rejects(readJsonBody(req(`{"a": ${"1".repeat(2000)}x}`), { parser }), {
    code: "invalid_request",
  });
});

Deno.test("JsonBodyParser.dispose() rejects later parses with disposed and is idempotent", async () => {
  const parser = new JsonBodyParser();
  assert.deepEqual(await parser.parse(enc.encode("[1]")), { empty: false, value: [1] });
  parser.dispose();
  parser.dispose();
  assert.equal(parser.disposed, true);
  await assert.rejects(parser.parse(enc.encode("[1]")), { code: "disposed" });
});

/** `[[[[…]]]]` nested `depth` deep, padded past the worker threshold. */
function deepBody(depth: number): Uint8Array<ArrayBuffer> {
  return enc.encode("[".repeat(depth) + "]".repeat(depth) + " ".repeat((1 << 20) + 16));
}

Deno.test("JsonBodyParser.parse(): a body nested 100k deep is invalid_request, and the parses beside it succeed", async () => {
  using parser = new JsonBodyParser({ offloadBytes: 0 });
  const good = (i: number) => enc.encode(JSON.stringify({ i, pad: "x".repeat(1 << 20) }));
  const settled = await Promise.allSettled([
    parser.parse(good(0)),
    parser.parse(deepBody(100_000)),
    parser.parse(good(1)),
    parser.parse(good(2)),
  ]);
  assert.deepEqual(
    settled.map((s) => s.status),
    ["fulfilled", "rejected", "fulfilled", "fulfilled"],
  );
  const err = (settled[1] as PromiseRejectedResult).reason;
  assert.ok(err instanceof SynapseError);
  assert.equal(err.code, "invalid_request");
  assert.equal(err.channel, true);
  assert.equal(err.details?.reason, "nested_too_deep");
  for (const [k, i] of [[0, 0], [2, 1], [3, 2]] as const) {
    const v = (settled[k] as PromiseFulfilledResult<{ value: { i: number } }>).value.value;
    assert.equal(v.i, i);
  }
  // The worker lives on.
  assert.deepEqual((await parser.parse(enc.encode('{"a":1}'))).value, { a: 1 });
});

Deno.test("POST /v1/ops/embed.batch with a body over the worker threshold nested 100k deep answers 400 invalid_request; requests beside it are served", async () => {
  await using t = await startSynapse();
  await using server = serveHttp(t.syn, { port: 0, log: nullLog });
  const url = `http://127.0.0.1:${server.port}/v1/ops/embed.batch`;
  const goodBody = JSON.stringify({ texts: ["hello"] }) +
    " ".repeat((1 << 20) + 16);
  const [deep, ...goods] = await Promise.all([
    fetch(url, { method: "POST", body: deepBody(100_000) }),
    ...[0, 1, 2].map(() => fetch(url, { method: "POST", body: goodBody })),
  ]);
  assert.equal(deep.status, 400);
  const body = await deep.json();
  assert.equal(body.code, "invalid_request");
  assert.match(body.message, /nests too deep/);
  for (const g of goods) {
    assert.equal(g.status, 200);
    assert.equal((await g.json()).result.vectors.length, 1);
  }
});
