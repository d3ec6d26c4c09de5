/** StopHoldBack: what a streamed completion may send so far, given its stop strings. */
import assert from "node:assert/strict";
import { StopHoldBack } from "../../lib/http/openai_completions.ts";

Deno.test("StopHoldBack without stop strings releases every text at once", () => {
  const h = new StopHoldBack([]);
  assert.equal(h.push("ab"), "ab");
  assert.equal(h.push(""), "");
  assert.equal(h.push("c"), "c");
  assert.equal(h.sent, "abc");
});

Deno.test("StopHoldBack holds a tail that could start a stop string, releases it when it does not", () => {
  const h = new StopHoldBack(["END"]);
  assert.equal(h.push("the E"), "the ");
  assert.equal(h.push("N"), "");
  assert.equal(h.push("d"), "ENd", "ENd is not END: released");
  assert.equal(h.push("x"), "x");
  assert.equal(h.sent, "the ENdx");
});

Deno.test("StopHoldBack sends nothing from the first stop string on", () => {
  const h = new StopHoldBack(["\n\n", "END"]);
  assert.equal(h.push("one E"), "one ");
  assert.equal(h.push("ND two"), "", "the stop completed across two pushes");
  assert.equal(h.push("more\n\n"), "");
  assert.equal(h.sent, "one ");
  const k = new StopHoldBack(["END", "b"]);
  assert.equal(k.push("aENDb"), "a", "the earliest stop string wins");
  const w = new StopHoldBack(["xy"]);
  assert.equal(w.push("a"), "a");
  assert.equal(w.push("bxyc"), "b", "a stop inside one push");
});

Deno.test("StopHoldBack holds the longest possible start among several stop strings", () => {
  const h = new StopHoldBack(["abc", "bcd"]);
  assert.equal(h.push("zab"), "z", "'ab' may start abc");
  assert.equal(h.push("x"), "abx");
  assert.equal(h.push("bc"), "", "'bc' may start bcd");
  assert.equal(h.push("d"), "");
  assert.equal(h.sent, "zabx");
});

Deno.test("StopHoldBack never splits a surrogate pair", () => {
  const h = new StopHoldBack(["\udc00z"]);
  // "😀" is \ud83d\ude00; its low half is not \udc00, so the whole pair goes.
  assert.equal(h.push("a😀"), "a😀");
  const k = new StopHoldBack(["\ude00z"]);
  // Here the pair's low half could start the (odd) stop string: the pair is held whole.
  assert.equal(k.push("a😀"), "a");
  assert.equal(k.push("b"), "😀b");
});
