import assert from "node:assert/strict";
import { canonicalJson, jcsSha256 } from "../../lib/identity/jcs.ts";

Deno.test("canonicalJson: sorted keys (UTF-16 code units), no whitespace, undefined members left out", () => {
  assert.equal(
    canonicalJson({ b: 1, a: [true, null, "x"], c: undefined }),
    '{"a":[true,null,"x"],"b":1}',
  );
  // RFC 8785 §3.2.3 orders by UTF-16 code units: "\u00e9" (é) sorts before "\ud83d" (an emoji's first unit).
  assert.equal(canonicalJson({ "😀": 1, "é": 2, "a": 3 }), '{"a":3,"é":2,"😀":1}');
  assert.equal(canonicalJson({ s: "line\nbreak \u0001" }), '{"s":"line\\nbreak \\u0001"}');
  assert.equal(canonicalJson([1e21, 0.5, -0]), "[1e+21,0.5,0]");
  assert.throws(() => canonicalJson(NaN), TypeError);
});

Deno.test("jcsSha256 is sha256: of the canonical text, the same for any key order", () => {
  assert.equal(jcsSha256({ a: 1, b: 2 }), jcsSha256({ b: 2, a: 1 }));
  assert.equal(
    jcsSha256({}),
    "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
  );
});
