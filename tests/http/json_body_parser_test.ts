import assert from "node:assert/strict";
import { SynapseError } from "../../lib/contract/errors.ts";
import { JsonBodyParser } from "../../lib/http/_json_body_parser.ts";
import { parseJsonBytes, readJsonBody } from "../../lib/http/_request_body.ts";

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
