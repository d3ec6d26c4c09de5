import assert from "node:assert/strict";
import { findJsonSyntaxError, readJsonBody } from "../../lib/doors/_request_body.ts";
import { SynapseError } from "../../lib/contract/errors.ts";

Deno.test("findJsonSyntaxError() finds nothing in valid JSON", () => {
  const valid = [
    "{}",
    "[]",
    ' { "a" : [1, -2.5e+3, true, false, null, "x\\u00e9\\n"], "b": {} } ',
    '"\\ud800"',
    "0",
    "[[[[[]]]]]",
    "[".repeat(100_000) + "]".repeat(100_000),
  ];
  for (const text of valid) {
    JSON.parse(text);
    assert.equal(findJsonSyntaxError(text), undefined, text.slice(0, 40));
  }
});

Deno.test("findJsonSyntaxError() names the position V8 names, and one where V8 names none", () => {
  const cases: [string, number][] = [
    ['{"a":1,}', 7],
    ['{"a" 1}', 5],
    ["{", 1],
    ["xyz", 0],
    ['{"a":tru}', 5],
    ["", 0],
    ["[1,2", 4],
    ['"abc', 4],
    ['{"a":1}x', 7],
    ["[01]", 2],
    ['["\\x"]', 3],
    ['["a\tb"]', 3],
    ["[-]", 2],
    ["[1.]", 3],
    ["[1e]", 3],
    ["[1 2]", 3],
  ];
  for (const [text, position] of cases) {
    assert.throws(() => JSON.parse(text));
    const err = findJsonSyntaxError(text);
    assert.ok(err, `no error found in ${JSON.stringify(text)}`);
    assert.equal(err.position, position, `${JSON.stringify(text)}: ${err.reason}`);
    const v8 = /at position (\d+)/.exec(safeParseError(text));
    if (v8) assert.equal(err.position, Number(v8[1]), `V8 disagrees on ${JSON.stringify(text)}`);
  }
});

Deno.test("readJsonBody() refuses invalid UTF-8, names the JSON error position, and reads empty as {}", async () => {
  const req = (body: BodyInit | null) => new Request("http://127.0.0.1/", { method: "POST", body });
  assert.deepEqual(await readJsonBody(req(null)), {});
  assert.deepEqual(await readJsonBody(req("  \n")), {});
  assert.deepEqual(await readJsonBody(req('{"a":[1]}')), { a: [1] });
  await assert.rejects(readJsonBody(req(Uint8Array.of(0x7b, 0xff, 0x7d))), (e: unknown) => {
    assert.ok(e instanceof SynapseError);
    assert.equal(e.code, "invalid_request");
    assert.equal(e.channel, true);
    assert.match(e.message, /body is not valid UTF-8/);
    return true;
  });
  await assert.rejects(readJsonBody(req('{\n  "a": tru\n}')), (e: unknown) => {
    assert.ok(e instanceof SynapseError);
    assert.match(e.message, /at position 9 \(line 2 column 8\)/);
    assert.equal(e.details?.position, 9);
    return true;
  });
});

Deno.test("readJsonBody() counts streamed bytes against the cap and answers 413", async () => {
  const stream = new ReadableStream<Uint8Array>({
    start(c) {
      for (let i = 0; i < 10; i++) c.enqueue(new Uint8Array(100).fill(0x20));
      c.close();
    },
  });
  const req = new Request("http://127.0.0.1/", { method: "POST", body: stream });
  await assert.rejects(readJsonBody(req, { maxBytes: 550 }), (e: unknown) => {
    assert.ok(e instanceof SynapseError);
    assert.equal((e as SynapseError & { status: number }).status, 413);
    assert.equal(e.code, "invalid_request");
    // Semantic, so the details reach the caller; reading stopped at the chunk past the cap.
    assert.equal(e.channel, false);
    assert.deepEqual(e.details, {
      field: "body",
      reason: "body_too_large",
      limit: "http.max_body_bytes",
      max: 550,
      received_at_least: 600,
    });
    return true;
  });
  // A declared Content-Length over the cap is refused before a byte is read.
  const declared = new Request("http://127.0.0.1/", {
    method: "POST",
    body: "{}",
    headers: { "content-length": "999999" },
  });
  await assert.rejects(readJsonBody(declared, { maxBytes: 550 }), (e: unknown) => {
    assert.equal((e as SynapseError).details?.received_at_least, 999999);
    return true;
  });
});

function safeParseError(text: string): string {
  try {
    JSON.parse(text);
    return "";
  } catch (e) {
    return (e as Error).message;
  }
}
