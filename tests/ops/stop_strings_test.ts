/** StopStrings and cutAtStop: what a growing generation may release, and when its cut is decided. */
import assert from "node:assert/strict";
import { cutAtStop, StopStrings } from "../../lib/ops/_stop_strings.ts";

/** Pushes `pieces`, checking after each that the released text is a prefix of `final`. */
function run(stops: string[], pieces: string[]): { released: string; doneAt: number } {
  const whole = pieces.join("");
  const cut = cutAtStop(whole, stops);
  const final = cut === undefined ? whole : whole.slice(0, cut.at);
  const s = new StopStrings(stops);
  let released = "";
  let doneAt = -1;
  pieces.forEach((p, i) => {
    released += s.push(p);
    assert.ok(
      final.startsWith(released),
      `${JSON.stringify(released)} is not a prefix of ${JSON.stringify(final)}`,
    );
    assert.equal(released, s.released);
    if (s.done && doneAt < 0) doneAt = i;
  });
  return { released, doneAt };
}

Deno.test("cutAtStop() cuts at the earliest start over every stop string", () => {
  assert.deepEqual(cutAtStop("xaby", ["ab", "xaby"]), { at: 0, stop: "xaby" });
  assert.deepEqual(cutAtStop("xabz", ["ab", "xaby"]), { at: 1, stop: "ab" });
  assert.deepEqual(cutAtStop("aENDb", ["b", "END"]), { at: 1, stop: "END" });
  assert.equal(cutAtStop("abc", ["zz"]), undefined);
  assert.deepEqual(cutAtStop("ab", ["ab", "a"]), { at: 0, stop: "ab" }, "a tie: the first listed");
});

Deno.test("StopStrings holds a stop string's start that began before a shorter one matched (F23)", () => {
  // "ab" matches at 1, but "xaby" may still match from 0: nothing is released, not done.
  const s = new StopStrings(["ab", "xaby"]);
  assert.equal(s.push("xa"), "");
  assert.equal(s.push("b"), "");
  assert.equal(s.done, false, "xaby is still open before ab");
  assert.equal(s.push("y"), "");
  assert.equal(s.done, true);
  assert.deepEqual(s.match, { at: 0, stop: "xaby" });
  assert.equal(s.released, "");
  // The longer one fails: the cut is at ab, and the x is released then.
  const k = new StopStrings(["ab", "xaby"]);
  assert.equal(k.push("xab"), "");
  assert.equal(k.push("z"), "x");
  assert.equal(k.done, true);
  assert.deepEqual(k.match, { at: 1, stop: "ab" });
  assert.equal(k.push("more"), "", "nothing after the decided cut");
});

Deno.test("StopStrings holds a tail that could start a stop string, releases it when it does not", () => {
  const h = new StopStrings(["END"]);
  assert.equal(h.push("the E"), "the ");
  assert.equal(h.push("N"), "");
  assert.equal(h.push("d"), "ENd", "ENd is not END: released");
  assert.equal(h.push("x"), "x");
  assert.equal(h.released, "the ENdx");
  assert.equal(h.done, false);
  const none = new StopStrings([]);
  assert.equal(none.push("ab"), "ab");
  assert.equal(none.done, false);
});

Deno.test("StopStrings is done at the token that decides the cut, across pushes", () => {
  const h = new StopStrings(["\n\n", "END"]);
  assert.equal(h.push("one E"), "one ");
  assert.equal(h.push("ND two"), "");
  assert.equal(h.done, true, "END completed across two pushes");
  assert.equal(h.released, "one ");
  const w = new StopStrings(["xy"]);
  assert.equal(w.push("a"), "a");
  assert.equal(w.push("bxyc"), "b", "a stop inside one push");
  assert.equal(w.done, true);
});

Deno.test("StopStrings never splits a surrogate pair", () => {
  const k = new StopStrings(["\ude00z"]);
  // The pair's low half could start the (odd) stop string: the pair is held whole.
  assert.equal(k.push("a😀"), "a");
  assert.equal(k.push("b"), "😀b");
});

Deno.test("StopStrings releases only prefixes of the final text, for random texts and stops", () => {
  let seed = 42;
  const rand = (n: number): number => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return seed % n;
  };
  const alphabet = ["a", "b", "x", "y", "é", "😀"];
  const word = (n: number): string =>
    Array.from({ length: n }, () => alphabet[rand(alphabet.length)]).join("");
  for (let trial = 0; trial < 3000; trial++) {
    const stops = Array.from({ length: 1 + rand(4) }, () => word(1 + rand(4)));
    const pieces = Array.from({ length: 1 + rand(12) }, () => word(rand(4)));
    const whole = pieces.join("");
    const cut = cutAtStop(whole, stops);
    const { released, doneAt } = run(stops, pieces);
    if (cut === undefined) {
      assert.equal(doneAt, -1);
      continue;
    }
    // Once done, the cut is the whole text's cut, and everything before it was released.
    if (doneAt >= 0) {
      assert.equal(released, whole.slice(0, cut.at), JSON.stringify({ stops, pieces }));
    }
    // Done no later than when the earliest match and every earlier open start are settled: at
    // the latest, the piece where the text passes cut.at + the longest stop.
    const longest = Math.max(...stops.map((s) => s.length));
    let len = 0;
    let settled = -1;
    for (let i = 0; i < pieces.length; i++) {
      len += pieces[i]!.length;
      if (len >= cut.at + longest) {
        settled = i;
        break;
      }
    }
    if (settled >= 0) {
      assert.ok(
        doneAt >= 0 && doneAt <= settled,
        JSON.stringify({ stops, pieces, doneAt, settled }),
      );
    }
  }
});

Deno.test("StopStrings reports the first listed of two stops starting at one position, however the text is chunked (field report replay: the ffi lane reported either)", () => {
  const stops = ["旅 p", "旅"];
  for (const chunks of [["旅", " p"], ["旅 p"], ["旅", " ", "p"], ["a旅", " pq"]]) {
    const s = new StopStrings(stops);
    let released = "";
    for (const c of chunks) released += s.push(c);
    assert.equal(s.done, true, JSON.stringify(chunks));
    assert.equal(s.match?.stop, "旅 p", JSON.stringify(chunks));
    assert.equal(released, chunks[0]!.startsWith("a") ? "a" : "", JSON.stringify(chunks));
  }
  // The earlier-listed stop does not complete: the later one is the match, decided then.
  const s = new StopStrings(stops);
  s.push("旅");
  assert.equal(s.done, false, "旅 p may still complete");
  s.push(" q");
  assert.equal(s.done, true);
  assert.equal(s.match?.stop, "旅");
  assert.deepEqual(cutAtStop("x旅 p", stops), { at: 1, stop: "旅 p" });
});
