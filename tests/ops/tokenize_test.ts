/**
 * `tokenize` / `detokenize` (issue 19 item 6) and the F26 content hash (item 7) through the real
 * ops and doors: counts agree with what embed.query, embed.batch and rerank.score report, for an
 * ORT model (tokenizer.json) and a GGUF-only model (tokenizer built from the GGUF, checked against
 * llama.cpp at load); offsets (code points) slice the caller's text into the tokens' pieces for
 * ASCII, accents, combining marks, CJK and emoji; detokenize round-trips; an out-of-vocabulary id
 * is refused by index; a cut item's content_sha256 is the SHA-256 of its first kept_chars code
 * points, and kept_chars is the end of the last kept token's span; TEI `/tokenize`, `/decode` and
 * llama.cpp `/tokenize`, `/detokenize` answer in their shapes.
 */
import assert from "node:assert/strict";
import { sha256Hex } from "../../lib/identity/sha256.ts";
import { serveHttp } from "../../lib/doors/http/server.ts";
import { nullLog } from "../../lib/log/log.ts";
import { MODELS, resultOf, semanticError, startSynapse } from "../_helpers.ts";

const QWEN = `${MODELS}/synapse-tiny-qwen`;
const LLAMA = `${MODELS}/synapse-tiny-llama`;

const TEXTS = [
  "The quick brown fox jumps over the lazy dog.",
  "Café ÜBER naïve déjà vu",
  "cafe\u0301 combining e\u0301 marks",
  "日本語のテキスト、中文文本",
  "emoji 🦙🔥👍🏽 and 🇫🇷 flags",
  "  leading spaces,\n\nnew lines\tand tabs",
];

/** Code-point slice. */
function cps(text: string, start: number, end: number): string {
  return [...text].slice(start, end).join("");
}

// deno-lint-ignore no-explicit-any
function checkSlices(text: string, item: any, family: "wordpiece" | "spm" | "bytelevel"): void {
  const n = [...text].length;
  let prevEnd = 0;
  item.ids.forEach((_: number, i: number) => {
    const [s, e] = item.offsets[i];
    assert.ok(0 <= s && s <= e && e <= n, `span ${s},${e} in ${JSON.stringify(text)}`);
    if (item.special[i]) {
      assert.equal(s, e);
      return;
    }
    assert.ok(e >= prevEnd, "ends never go back");
    prevEnd = e;
    const piece: string = item.pieces[i];
    const slice = cps(text, s, e);
    const what = `${JSON.stringify(piece)} vs ${JSON.stringify(slice)} in ${JSON.stringify(text)}`;
    const shared = item.offsets.filter((o: [number, number], j: number) =>
      !item.special[j] && o[0] === s && o[1] === e
    ).length > 1;
    if (piece === "[UNK]" || /^<0x[0-9A-F]{2}>$/.test(piece) || shared) {
      // One span for several tokens (the bytes of one character): it is not empty.
      assert.ok(slice.length > 0, what);
      return;
    }
    if (family === "wordpiece") {
      const norm = slice.normalize("NFD").replace(/\p{M}/gu, "").toLowerCase();
      assert.equal(norm, piece.replace(/^##/, ""), what);
    } else if (family === "spm") {
      // The marker SentencePiece prepends to the text stands for no character of it.
      const marked = slice.replaceAll(" ", "▁");
      assert.equal(s === 0 ? `▁${marked}` : marked, piece, what);
    } else {
      // Byte-level: the piece's bytes are the slice's UTF-8 (a character split over several
      // tokens shares one span).
      assert.ok(slice.length > 0, what);
    }
  });
}

Deno.test("tokenize (ORT tokenizer.json): counts equal embed.query, embed.batch and rerank.score; offsets slice the text; detokenize round-trips", async () => {
  await using t = await startSynapse();
  const r = resultOf(await t.syn.call("tokenize", { texts: TEXTS }));
  assert.equal(r.model_id, "synapse-tiny-embed");
  assert.match(r.fingerprint, /^[0-9a-f]{64}$/);
  assert.match(r.sanitized_tokenizer_digest, /^sha256:[0-9a-f]{64}$/);
  assert.ok(r.max_tokens > 0);
  const batch = resultOf(await t.syn.call("embed.batch", { texts: TEXTS }));
  assert.equal(batch.fingerprint, r.fingerprint);
  assert.deepEqual(r.items.map((i: { count: number }) => i.count), batch.real_token_counts);
  for (let k = 0; k < TEXTS.length; k++) {
    const item = r.items[k];
    assert.equal(item.count, item.ids.length);
    assert.equal(item.exceeds_max_tokens, false);
    const q = resultOf(await t.syn.call("embed.query", { text: TEXTS[k] }));
    assert.equal(q.real_token_counts[0], item.count);
    checkSlices(TEXTS[k]!, item, "wordpiece");
    assert.equal(item.special[0], true);
    assert.equal(item.special.at(-1), true);
  }
  // Plain text round-trips (an uncased model lower-cases: compare with a lower-case text).
  const plain = "the quick brown fox jumps over the lazy dog.";
  const ids = resultOf(await t.syn.call("tokenize", { texts: [plain] })).items[0].ids;
  const d = resultOf(await t.syn.call("detokenize", { ids }));
  assert.equal(d.text, plain);
  assert.equal(d.fingerprint, r.fingerprint);
  // Without special tokens: two fewer.
  const bare = resultOf(
    await t.syn.call("tokenize", { texts: [plain], add_special_tokens: false }),
  );
  assert.equal(bare.items[0].count, ids.length - 2);
  // rerank.score counts a (query, document) pair: the pair's specials plus both texts' tokens.
  const rr = resultOf(
    await t.syn.call("rerank.score", { query: "fox", candidates: [TEXTS[0], TEXTS[1]] }),
  );
  const tq = resultOf(
    await t.syn.call("tokenize", {
      model: rr.model_id,
      texts: ["fox", TEXTS[0], TEXTS[1]],
      add_special_tokens: false,
    }),
  );
  const pairSpecials = 3; // [CLS] q [SEP] d [SEP]
  assert.deepEqual(rr.real_token_counts, [
    pairSpecials + tq.items[0].count + tq.items[1].count,
    pairSpecials + tq.items[0].count + tq.items[2].count,
  ]);
  // An over-long text is flagged, not refused.
  const long = "word ".repeat(2000);
  const lr = resultOf(await t.syn.call("tokenize", { texts: [long] }));
  assert.equal(lr.items[0].exceeds_max_tokens, true);
  assert.ok(lr.items[0].count > lr.max_tokens);
});

Deno.test("detokenize refuses an id out of vocabulary by index; tokenize discloses a prompt it cannot apply and refuses a lone surrogate by name", async () => {
  await using t = await startSynapse();
  const e = semanticError(await t.syn.call("detokenize", { ids: [101, 10_000_000] }));
  assert.equal(e.code, "invalid_request");
  assert.equal(e.details.field, "ids.1");
  assert.equal(e.details.index, 1);
  assert.equal(e.details.id, 10_000_000);
  const neg = semanticError(await t.syn.call("detokenize", { ids: [-1] }));
  assert.equal(neg.details.field, "ids.0");
  // A model without a prompt table: the selector applies nothing, and the answer says so.
  const p = resultOf(await t.syn.call("tokenize", { texts: ["a"], prompt_name: "query" }));
  assert.equal(p.prompt.reason, "no_prompt_table");
  assert.equal(p.prompt.applied, null);
  const both = semanticError(
    await t.syn.call("tokenize", { texts: ["a"], prompt_name: "q", input_type: "query" }),
  );
  assert.equal(both.code, "invalid_request");
  assert.equal(both.details.reason, "conflicting_selectors");
  const lone = await t.syn.call("tokenize", { texts: ["ok", "bad \ud800"] });
  assert.equal(lone.kind, "channel");
  if (lone.kind === "channel") assert.equal(lone.error.details?.field, "texts.1");
});

Deno.test("F26: a cut item's content_sha256 is sha256 of its first kept_chars code points, the end of its last kept token's span; uncut: kept_chars is the length", async () => {
  await using t = await startSynapse();
  const text = "Café ÜBER naïve 日本語 🦙 déjà vu ".repeat(120);
  const r = resultOf(
    await t.syn.call("embed.batch", { texts: [text, "short text"], truncate: true }),
  );
  const d = r.truncation_disclosures[0];
  assert.equal(d.truncated, true);
  const v = r.vectors[0];
  assert.equal(v.content_sha256, sha256Hex(cps(text, 0, d.kept_chars)));
  assert.notEqual(v.content_sha256, v.submitted_sha256);
  const tk = resultOf(await t.syn.call("tokenize", { texts: [text] })).items[0];
  // The kept content tokens are the first effective_tokens - 2 ([CLS], [SEP]).
  const lastKept = d.effective_tokens - 2; // index in ids of the last kept content token
  assert.equal(tk.offsets[lastKept][1], d.kept_chars);
  // Uncut: the whole text.
  assert.equal(r.truncation_disclosures[1].kept_chars, [..."short text"].length);
  assert.equal(r.vectors[1].content_sha256, r.vectors[1].submitted_sha256);
});

Deno.test("tokenize a GGUF-only model (tokenizer from the GGUF): counts equal embed's, offsets slice the text, detokenize round-trips", async () => {
  const tmp = await Deno.makeTempDir({ prefix: "synapse-tokenize-gguf-" });
  try {
    // The llama2 fixture without its tokenizer.json: SentencePiece from the GGUF.
    await Deno.copyFile(`${LLAMA}/model.gguf`, `${tmp}/model.gguf`);
    await Deno.copyFile(`${LLAMA}/config.json`, `${tmp}/config.json`);
    await using t = await startSynapse({
      preload_models: [
        { engine: "llama", model_path: QWEN, task: "embed", model_id: "qwen", max_tokens: 512 },
        { engine: "llama", model_path: tmp, task: "embed", model_id: "spm", max_tokens: 512 },
      ],
    });
    for (const [id, family] of [["qwen", "bytelevel"], ["spm", "spm"]] as const) {
      const model = t.syn.registry.resolve(id, "embed");
      assert.equal(model.tokenizerSource, "gguf");
      const r = resultOf(await t.syn.call("tokenize", { model: id, texts: TEXTS }));
      assert.equal(r.sanitized_tokenizer_digest, model.tokenizer.digest);
      const batch = resultOf(await t.syn.call("embed.batch", { model: id, texts: TEXTS }));
      assert.deepEqual(
        r.items.map((i: { count: number }) => i.count),
        batch.real_token_counts,
        id,
      );
      r.items.forEach((item: unknown, k: number) => checkSlices(TEXTS[k]!, item, family));
      if (family === "bytelevel") {
        // Byte-level: the UTF-8 of the spans, token by token, is the text (no span overlaps
        // except tokens of one character, which share it).
        for (let k = 0; k < TEXTS.length; k++) {
          const item = r.items[k];
          let rebuilt = "";
          let last: string | undefined;
          item.offsets.forEach(([s, e]: [number, number], i: number) => {
            if (item.special[i]) return;
            const key = `${s},${e}`;
            if (key !== last) rebuilt += cps(TEXTS[k]!, s, e);
            last = key;
          });
          assert.equal(rebuilt, TEXTS[k]);
        }
      }
      const plain = "The quick brown fox jumps over the lazy dog.";
      const ids = resultOf(
        await t.syn.call("tokenize", { model: id, texts: [plain], add_special_tokens: false }),
      ).items[0].ids;
      const d = resultOf(await t.syn.call("detokenize", { model: id, ids }));
      assert.equal(d.text.trim(), plain, id);
      // F26 on a GGUF tokenizer: the same rule.
      const long = "Ünïcode text 日本 🦙 words ".repeat(80);
      const cut = resultOf(
        await t.syn.call("embed.query", { model: id, text: long, truncate: true }),
      );
      const disc = cut.truncation_disclosures[0];
      assert.equal(disc.truncated, true);
      assert.equal(cut.vectors[0].content_sha256, sha256Hex(cps(long, 0, disc.kept_chars)));
    }
  } finally {
    await Deno.remove(tmp, { recursive: true });
  }
});

Deno.test("doors: TEI POST /tokenize and /decode, llama.cpp POST /tokenize and /detokenize, POST /v1/ops/tokenize", async () => {
  await using t = await startSynapse();
  const server = serveHttp(t.syn, { log: nullLog });
  const base = `http://127.0.0.1:${server.port}`;
  const post = async (path: string, body: unknown) => {
    const res = await fetch(`${base}${path}`, { method: "POST", body: JSON.stringify(body) });
    return { status: res.status, headers: res.headers, body: await res.json() };
  };
  try {
    const text = "Café 🦙 fox";
    const native = (await post("/v1/ops/tokenize", { texts: [text] })).body.result;
    const item = native.items[0];
    // TEI: one list per input; byte offsets; specials with null start/stop.
    const tei = await post("/tokenize", { inputs: text });
    assert.equal(tei.status, 200, JSON.stringify(tei.body));
    assert.equal(tei.headers.get("x-synapse-fingerprint"), native.fingerprint);
    assert.equal(tei.body.length, 1);
    const toks = tei.body[0];
    assert.deepEqual(toks.map((x: { id: number }) => x.id), item.ids);
    assert.deepEqual(toks[0], {
      id: item.ids[0],
      text: "[CLS]",
      special: true,
      start: null,
      stop: null,
    });
    const bytes = new TextEncoder().encode(text);
    for (const tok of toks.filter((x: { special: boolean }) => !x.special)) {
      assert.equal(new TextDecoder().decode(bytes.subarray(tok.start, tok.stop)), tok.text);
    }
    const cafe = toks[1];
    assert.equal(cafe.text, "Café");
    assert.equal(cafe.stop, 5); // é is two UTF-8 bytes
    const two = await post("/tokenize", { inputs: ["a", "b c"], add_special_tokens: false });
    assert.equal(two.body.length, 2);
    assert.equal(two.body[1].length, 2);
    const dec = await post("/decode", { ids: item.ids });
    assert.equal(dec.status, 200);
    assert.deepEqual(dec.body, [resultOf(await t.syn.call("detokenize", { ids: item.ids })).text]);
    // prompt_name on a model without a prompt table applies nothing, as TEI /embed: disclosed.
    const prompt = await post("/tokenize", { inputs: "a", prompt_name: "query" });
    assert.equal(prompt.status, 200);
    assert.deepEqual(
      prompt.body[0].map((tk: { id: number }) => tk.id),
      resultOf(await t.syn.call("tokenize", { texts: ["a"] })).items[0].ids,
    );
    assert.equal(prompt.headers.get("x-synapse-prompt"), "applied=none; reason=no_prompt_table");
    // llama.cpp: {content} → {tokens}; add_special defaults to false.
    const ll = await post("/tokenize", { content: text });
    assert.equal(ll.status, 200, JSON.stringify(ll.body));
    assert.deepEqual(ll.body.tokens, item.ids.slice(1, -1));
    const lp = await post("/tokenize", { content: text, add_special: true, with_pieces: true });
    assert.deepEqual(lp.body.tokens.map((x: { id: number }) => x.id), item.ids);
    assert.equal(lp.body.tokens[1].piece, "Café");
    const de = await post("/detokenize", { tokens: ll.body.tokens });
    assert.equal(de.status, 200);
    assert.equal(typeof de.body.content, "string");
    const bad = await post("/detokenize", { tokens: [99_999_999] });
    assert.equal(bad.status, 400);
    assert.equal(bad.body.error.synapse_code, "invalid_request");
    assert.equal(bad.body.error.field, "ids.0");
  } finally {
    await server.shutdown();
  }
});
