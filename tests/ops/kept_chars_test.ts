/**
 * Field report F26 through the real ops: a truncated item's `content_sha256` is the SHA-256 of
 * the caller's own text up to the end of its last kept token, whose length is disclosed as
 * `kept_chars` — on an uncased WordPiece model (which lower-cases and strips accents), so
 * `Café ÜBER …` and `CAFÉ ÜBER …` no longer share a hash; the same for rerank documents and the
 * Ollama door.
 */
import assert from "node:assert/strict";
import { sha256Hex } from "../../lib/identity/sha256.ts";
import { serveHttp } from "../../lib/doors/http/server.ts";
import { nullLog } from "../../lib/log/log.ts";
import { resultOf, startSynapse } from "../_helpers.ts";

const CASED = "Café ÜBER naïve 🦙 ".repeat(200);
const UPPER = "CAFÉ ÜBER NAÏVE 🦙 ".repeat(200);

/** The first `n` code points of `text`. */
function head(text: string, n: number): string {
  return [...text].slice(0, n).join("");
}

Deno.test("F26: a truncated item's content_sha256 hashes the caller's own kept text, kept_chars long", async () => {
  await using t = await startSynapse();
  const r = resultOf(
    await t.syn.call("embed.batch", {
      items: [{ id: "cased", text: CASED }, { id: "upper", text: UPPER }],
      truncate: true,
    }),
  );
  const [dc, du] = r.truncation_disclosures;
  assert.equal(dc.truncated, true);
  assert.ok(dc.kept_chars > 0 && dc.kept_chars < [...CASED].length);
  // The uncased model sees the same ids, so keeps as many characters of each …
  assert.deepEqual(r.vectors[0].vector, r.vectors[1].vector);
  assert.equal(du.kept_chars, dc.kept_chars);
  // … but each hash is of the caller's own text: they differ.
  const keptCased = head(CASED, dc.kept_chars);
  assert.equal(r.vectors[0].content_sha256, sha256Hex(keptCased));
  assert.equal(r.vectors[1].content_sha256, sha256Hex(head(UPPER, du.kept_chars)));
  assert.notEqual(r.vectors[0].content_sha256, r.vectors[1].content_sha256);
  assert.ok(keptCased.startsWith("Café ÜBER naïve 🦙 Café"));
  // The kept text, sent alone, is served untruncated with that hash as both hashes and the
  // same vector; one character less is another sequence.
  const alone = resultOf(
    await t.syn.call("embed.batch", {
      items: [{ id: "kept", text: keptCased }, {
        id: "less",
        text: head(CASED, dc.kept_chars - 1),
      }],
    }),
  );
  assert.equal(alone.truncation_disclosures[0].truncated, false);
  // Uncut: kept_chars is the whole text (F26).
  assert.equal(alone.truncation_disclosures[0].kept_chars, dc.kept_chars);
  assert.equal(alone.vectors[0].submitted_sha256, r.vectors[0].content_sha256);
  assert.equal(alone.vectors[0].content_sha256, alone.vectors[0].submitted_sha256);
  assert.deepEqual(alone.vectors[0].vector, r.vectors[0].vector);
  assert.notDeepEqual(alone.vectors[1].vector, r.vectors[0].vector);
  // The Ollama door (which truncates by default) discloses the same.
  const server = serveHttp(t.syn, { log: nullLog });
  try {
    const res = await fetch(`http://127.0.0.1:${server.port}/api/embed`, {
      method: "POST",
      body: JSON.stringify({ model: "synapse-tiny-embed", input: [CASED], truncate: true }),
    });
    const body = await res.json();
    assert.equal(res.status, 200, JSON.stringify(body));
    assert.deepEqual(body.embeddings[0], r.vectors[0].vector);
    assert.equal(body.synapse.truncation_disclosures[0].kept_chars, dc.kept_chars);
  } finally {
    await server.shutdown();
  }
});

Deno.test("F26: a truncated rerank document discloses kept_chars of its own text", async () => {
  await using t = await startSynapse();
  const r = resultOf(
    await t.syn.call("rerank.score", {
      query: "what is a café",
      candidates: [CASED, "short"],
      truncate: true,
    }),
  );
  const d = r.truncation_disclosures[0];
  assert.equal(d.truncated, true);
  const kept = head(CASED, d.kept_chars);
  assert.ok(kept.length > 0 && kept.length < CASED.length);
  // The kept document alone scores as the truncated one.
  const alone = resultOf(
    await t.syn.call("rerank.score", { query: "what is a café", candidates: [kept] }),
  );
  assert.equal(alone.truncation_disclosures[0].truncated, false);
  assert.equal(alone.scores[0], r.scores[0]);
  assert.equal(r.truncation_disclosures[1].kept_chars, undefined);
});

Deno.test("F26: a durable job's pages carry the same hashes and kept_chars", async () => {
  await using t = await startSynapse();
  // Over the inline limits, so it runs as a job.
  const texts = [CASED, UPPER, ...Array.from({ length: 98 }, (_, i) => `short text ${i}`)];
  const inline = resultOf(
    await t.syn.call("embed.batch", { texts: [CASED, UPPER], truncate: true }),
  );
  const job = resultOf(
    await t.syn.call("embed.batch", {
      texts,
      truncate: true,
      request_key: "f26",
    }),
  );
  assert.match(job.job_id, /^job_/);
  const hungAt = Date.now() + 600_000;
  // deno-lint-ignore no-explicit-any
  let page: any;
  while (Date.now() < hungAt) {
    page = resultOf(await t.syn.call("embed.result", { job_id: job.job_id }));
    if (page.state !== "queued" && page.state !== "running") break;
    await new Promise((res) => setTimeout(res, 20));
  }
  assert.equal(page.state, "done");
  // Pages hold items in their own order: find them by id.
  for (const id of ["0", "1"]) {
    const k = page.vectors.findIndex((v: { id: string }) => v.id === id);
    assert.ok(k >= 0, id);
    assert.equal(page.vectors[k].content_sha256, inline.vectors[Number(id)].content_sha256);
    assert.deepEqual(page.truncation_disclosures[k], inline.truncation_disclosures[Number(id)]);
    assert.ok(page.truncation_disclosures[k].kept_chars > 0);
  }
});
