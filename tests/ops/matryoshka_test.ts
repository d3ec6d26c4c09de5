/**
 * Matryoshka dimensions as their own vector space (issue 19 item 5): a model that declares
 * `matryoshka_dims` serves `dimensions: n` as the first `n` values of the pooled vector,
 * L2-normalised after the cut, under a derived fingerprint (`operation:
 * "synapse-matryoshka-v1:dims=<n>"`), through the native door, the jobs path, and the OpenAI and
 * Ollama doors; the full width is the plain profile; an undeclared model or an undeclared width
 * is refused naming the allowed widths. The generated tiny embed model is 32-dimensional.
 */
import assert from "node:assert/strict";
import { serveHttp } from "../../lib/doors/http/server.ts";
import { fingerprint, numericProfileId } from "../../lib/identity/numeric_profile.ts";
import {
  matryoshkaVariant,
  matryoshkaVariants,
  matryoshkaWidthOf,
} from "../../lib/models/matryoshka.ts";
import { nullLog } from "../../lib/log/log.ts";
import {
  channelError,
  MODELS,
  preload,
  resultOf,
  semanticError,
  startSynapse,
} from "../_helpers.ts";
import type { TestSynapse } from "../_helpers.ts";

const TINY = `${MODELS}/synapse-tiny-embed`;
const TEXT = "matryoshka dolls nest inside one another";

/** `mat` declares [16, 32]; `raw` is the same weights unnormalised (declares [16]); `plain` none. */
const CONFIG = {
  preload_models: [
    preload(TINY, "mat", { matryoshka_dims: [16, 32] }),
    preload(TINY, "raw", { normalize: false, matryoshka_dims: [16] }),
    preload(TINY, "plain"),
  ],
};

function norm(v: readonly number[]): number {
  return Math.sqrt(v.reduce((a, x) => a + x * x, 0));
}

function normalised(v: readonly number[]): number[] {
  const n = norm(v);
  return v.map((x) => x / n);
}

function assertClose(a: readonly number[], b: readonly number[], tol: number, what: string) {
  assert.equal(a.length, b.length, what);
  for (let i = 0; i < a.length; i++) {
    assert.ok(Math.abs(a[i]! - b[i]!) <= tol, `${what}[${i}]: ${a[i]} vs ${b[i]}`);
  }
}

// deno-lint-ignore no-explicit-any
async function rows(t: TestSynapse): Promise<Record<string, any>> {
  const list = resultOf(await t.syn.call("models.list", {})).models;
  return Object.fromEntries(list.map((m: { model_id: string }) => [m.model_id, m]));
}

Deno.test("embed.query dimensions: 16 is the unit-normalised first 16 of the pooled vector, under a derived fingerprint", async () => {
  await using t = await startSynapse(CONFIG, { log: nullLog });
  const full = resultOf(await t.syn.call("embed.query", { model: "mat", text: TEXT }));
  const cut = resultOf(
    await t.syn.call("embed.query", { model: "mat", text: TEXT, dimensions: 16 }),
  );
  const raw = resultOf(await t.syn.call("embed.query", { model: "raw", text: TEXT }));
  assert.equal(full.dims, 32);
  assert.equal(raw.dims, 32);
  assert.equal(cut.dims, 16);
  const v: number[] = cut.vectors[0].vector;
  assert.equal(v.length, 16);
  assert.ok(Math.abs(norm(v) - 1) < 1e-6, `norm ${norm(v)}`);
  // The unnormalised pooled vector of the same weights: the cut comes before the normalisation.
  const u: number[] = raw.vectors[0].vector;
  assert.ok(Math.abs(norm(u) - 1) > 1e-3, "the raw model's vector is not unit length");
  assertClose(v, normalised(u.slice(0, 16)), 1e-6, "dims 16");
  // ... and never the full unit vector's first 16 values at their full-vector scale.
  const head: number[] = full.vectors[0].vector.slice(0, 16);
  assert.ok(Math.abs(norm(head) - 1) > 1e-3, "the full vector's head alone is not unit length");
  // The same item keeps its hashes and counts.
  assert.equal(cut.vectors[0].content_sha256, full.vectors[0].content_sha256);
  assert.deepEqual(cut.real_token_counts, full.real_token_counts);

  // A distinct space: the derived profile's fingerprint, as models.list lists it.
  assert.notEqual(cut.fingerprint, full.fingerprint);
  const m = t.syn.registry.resolve("mat", "embed");
  const expected = fingerprint({ ...m.profile, operation: "synapse-matryoshka-v1:dims=16" });
  assert.equal(cut.fingerprint, expected);
  assert.deepEqual(matryoshkaVariant(m, 16), {
    dims: 16,
    fingerprint: expected,
    numericProfileId: numericProfileId({
      ...m.profile,
      operation: "synapse-matryoshka-v1:dims=16",
    }),
  });
  const r = await rows(t);
  assert.deepEqual(r.mat.fingerprints, [full.fingerprint, cut.fingerprint]);
  assert.deepEqual(r.mat.matryoshka_dims, [16, 32]);
  assert.deepEqual(r.mat.matryoshka, [{
    dims: 16,
    fingerprint: cut.fingerprint,
    numeric_profile_id: matryoshkaVariant(m, 16)!.numericProfileId,
  }]);
  assert.deepEqual(r.plain.fingerprints, [r.plain.fingerprints[0]]);
  assert.equal("matryoshka" in r.plain, false);
  // The unnormalised model cuts without normalising: its derived vector is u's head.
  const rawCut = resultOf(
    await t.syn.call("embed.query", { model: "raw", text: TEXT, dimensions: 16 }),
  );
  assertClose(rawCut.vectors[0].vector, u.slice(0, 16), 0, "raw dims 16");
  assert.notEqual(rawCut.fingerprint, cut.fingerprint);
  assert.equal(
    rawCut.fingerprint,
    matryoshkaVariants(t.syn.registry.resolve("raw", "embed"))[0]!.fingerprint,
  );

  // required_fingerprint checks the space served.
  resultOf(
    await t.syn.call("embed.query", {
      model: "mat",
      text: TEXT,
      dimensions: 16,
      required_fingerprint: cut.fingerprint,
    }),
  );
  const wrong = semanticError(
    await t.syn.call("embed.query", {
      model: "mat",
      text: TEXT,
      dimensions: 16,
      required_fingerprint: full.fingerprint,
    }),
  );
  assert.equal(wrong.code, "substitution_rejected");
  // Without dimensions, a fingerprint of a derived space selects its width.
  const named = resultOf(
    await t.syn.call("embed.query", {
      model: "mat",
      text: TEXT,
      required_fingerprint: cut.fingerprint,
    }),
  );
  assert.equal(named.dims, 16);
  assert.deepEqual(named.vectors[0].vector, v);
  const batchNamed = resultOf(
    await t.syn.call("embed.batch", {
      model: "mat",
      texts: [TEXT],
      required_fingerprint: cut.fingerprint,
    }),
  );
  assert.equal(batchNamed.fingerprint, cut.fingerprint);
  assert.equal(matryoshkaWidthOf(m, cut.fingerprint), 16);
  assert.equal(matryoshkaWidthOf(m, full.fingerprint), 32);
  assert.equal(matryoshkaWidthOf(m, rawCut.fingerprint), undefined);
  // Another model's derived fingerprint is still refused.
  const other = semanticError(
    await t.syn.call("embed.query", {
      model: "mat",
      text: TEXT,
      required_fingerprint: rawCut.fingerprint,
    }),
  );
  assert.equal(other.code, "substitution_rejected");
});

Deno.test("dimensions equal to the full width is the plain profile; an undeclared model or width is refused naming the allowed dims", async () => {
  await using t = await startSynapse(CONFIG, { log: nullLog });
  const full = resultOf(await t.syn.call("embed.query", { model: "mat", text: TEXT }));
  const same = resultOf(
    await t.syn.call("embed.query", { model: "mat", text: TEXT, dimensions: 32 }),
  );
  assert.equal(same.fingerprint, full.fingerprint);
  assert.equal(same.dims, 32);
  assert.deepEqual(same.vectors[0].vector, full.vectors[0].vector);
  const plainFull = resultOf(
    await t.syn.call("embed.query", { model: "plain", text: TEXT, dimensions: 32 }),
  );
  assert.equal(plainFull.dims, 32);

  const undeclared = semanticError(
    await t.syn.call("embed.query", { model: "plain", text: TEXT, dimensions: 16 }),
  );
  assert.equal(undeclared.code, "invalid_request");
  assert.deepEqual(undeclared.details, {
    field: "dimensions",
    dimensions: 16,
    dims: 32,
    allowed_dims: [],
    model_id: "plain",
  });
  assert.match(undeclared.message, /declares no matryoshka_dims/);
  for (const n of [8, 24, 64]) {
    const e = semanticError(
      await t.syn.call("embed.batch", { model: "mat", texts: [TEXT], dimensions: n }),
    );
    assert.equal(e.code, "invalid_request");
    assert.equal(e.details.field, "dimensions");
    assert.deepEqual(e.details.allowed_dims, [16, 32]);
    assert.equal(e.details.model_id, "mat");
    assert.match(e.message, /one of its matryoshka_dims \[16, 32\]/);
  }
  // Not an integer width: the params are refused by name.
  const bad = channelError(
    await t.syn.call("embed.query", { model: "mat", text: TEXT, dimensions: 1.5 }),
  );
  assert.equal(bad.code, "invalid_request");
  assert.match(bad.message, /dimensions/);
});

Deno.test("embed.batch dimensions, inline and as a job: the same vectors as embed.query, dims in the request digest", async () => {
  await using t = await startSynapse({ ...CONFIG, inline: { max_items: 2 } }, { log: nullLog });
  const texts = ["one doll", "two dolls", "three dolls", "four dolls", "five dolls"];
  // deno-lint-ignore no-explicit-any
  const queries: any[] = [];
  for (const text of texts) {
    queries.push(
      resultOf(await t.syn.call("embed.query", { model: "mat", text, dimensions: 16 })),
    );
  }
  const inline = resultOf(
    await t.syn.call("embed.batch", { model: "mat", texts: texts.slice(0, 2), dimensions: 16 }),
  );
  assert.equal(inline.dims, 16);
  assert.equal(inline.fingerprint, queries[0].fingerprint);
  // Query ≡ batch holds for truncated vectors: the cut is deterministic.
  inline.vectors.forEach((v: { vector: number[] }, i: number) =>
    assert.deepEqual(v.vector, queries[i].vectors[0].vector)
  );

  const job = resultOf(
    await t.syn.call("embed.batch", {
      model: "mat",
      texts,
      dimensions: 16,
      request_key: "dolls",
    }),
  );
  assert.equal(job.fingerprint, queries[0].fingerprint);
  await t.syn.context.jobs.running.get(job.job_id);
  const page = resultOf(await t.syn.call("embed.result", { job_id: job.job_id }));
  assert.equal(page.state, "done");
  assert.equal(page.dims, 16);
  assert.equal(page.fingerprint, queries[0].fingerprint);
  page.vectors.forEach((v: { vector: number[] }, i: number) =>
    assert.deepEqual(v.vector, queries[i].vectors[0].vector)
  );
  // The same key with another width is another request.
  const other = semanticError(
    await t.syn.call("embed.batch", { model: "mat", texts, request_key: "dolls" }),
  );
  assert.equal(other.code, "idempotency_conflict");
  // The same request attaches.
  const again = resultOf(
    await t.syn.call("embed.batch", { model: "mat", texts, dimensions: 16, request_key: "dolls" }),
  );
  assert.equal(again.job_id, job.job_id);
  // dimensions equal to the full width is the same request as none.
  const fullJob = resultOf(
    await t.syn.call("embed.batch", { model: "mat", texts, request_key: "dolls-full" }),
  );
  await t.syn.context.jobs.running.get(fullJob.job_id);
  const fullAgain = resultOf(
    await t.syn.call("embed.batch", {
      model: "mat",
      texts,
      dimensions: 32,
      request_key: "dolls-full",
    }),
  );
  assert.equal(fullAgain.job_id, fullJob.job_id);
  const fullPage = resultOf(await t.syn.call("embed.result", { job_id: fullJob.job_id }));
  assert.equal(fullPage.dims, 32);
});

Deno.test("a derived fingerprint is stable across a restart", async () => {
  const fps: string[] = [];
  for (let i = 0; i < 2; i++) {
    await using t = await startSynapse(CONFIG, { log: nullLog });
    fps.push(
      resultOf(await t.syn.call("embed.query", { model: "mat", text: TEXT, dimensions: 16 }))
        .fingerprint,
    );
  }
  assert.equal(fps[0], fps[1]);
  assert.match(fps[0]!, /^[0-9a-f]{64}$/);
});

Deno.test("OpenAI /v1/embeddings and Ollama /api/embed serve dimensions under the derived fingerprint, and refuse an undeclared width in their 400 shape", async () => {
  await using t = await startSynapse(CONFIG, { log: nullLog });
  const server = serveHttp(t.syn, { log: nullLog });
  const base = `http://127.0.0.1:${server.port}`;
  const post = async (path: string, body: unknown) => {
    const res = await fetch(`${base}${path}`, { method: "POST", body: JSON.stringify(body) });
    return { res, body: await res.json() };
  };
  try {
    const native = resultOf(
      await t.syn.call("embed.query", { model: "mat", text: TEXT, dimensions: 16 }),
    );
    const full = resultOf(await t.syn.call("embed.query", { model: "mat", text: TEXT }));

    const oa = await post("/v1/embeddings", { model: "mat", input: TEXT, dimensions: 16 });
    assert.equal(oa.res.status, 200, JSON.stringify(oa.body));
    assert.equal(oa.res.headers.get("x-synapse-fingerprint"), native.fingerprint);
    assert.deepEqual(oa.body.data[0].embedding, native.vectors[0].vector);
    const oaFull = await post("/v1/embeddings", { model: "mat", input: TEXT, dimensions: 32 });
    assert.equal(oaFull.res.headers.get("x-synapse-fingerprint"), full.fingerprint);
    assert.equal(oaFull.body.data[0].embedding.length, 32);
    for (const [model, allowed] of [["plain", []], ["mat", [16, 32]]] as const) {
      const r = await post("/v1/embeddings", { model, input: TEXT, dimensions: 8 });
      assert.equal(r.res.status, 400);
      assert.equal(r.body.error.code, "invalid_request");
      assert.equal(r.body.error.param, "dimensions");
      assert.match(
        r.body.error.message,
        allowed.length === 0 ? /declares no matryoshka_dims/ : /\[16, 32\]/,
      );
    }

    const ol = await post("/api/embed", { model: "mat", input: [TEXT], dimensions: 16 });
    assert.equal(ol.res.status, 200, JSON.stringify(ol.body));
    assert.equal(ol.res.headers.get("x-synapse-fingerprint"), native.fingerprint);
    assert.deepEqual(ol.body.embeddings[0], native.vectors[0].vector);
    const olBad = await post("/api/embed", { model: "plain", input: [TEXT], dimensions: 16 });
    assert.equal(olBad.res.status, 400);
    assert.equal(olBad.body.code, "invalid_request");
    assert.match(olBad.body.error, /declares no matryoshka_dims/);
    const olOff = await post("/api/embed", { model: "mat", input: [TEXT], dimensions: 24 });
    assert.equal(olOff.res.status, 400);
    assert.match(olOff.body.error, /\[16, 32\]/);

    // TEI /embed takes the same width.
    const tei = await post("/embed", { inputs: TEXT, dimensions: 16 });
    assert.equal(tei.res.status, 200, JSON.stringify(tei.body));
    assert.equal(tei.res.headers.get("x-synapse-fingerprint"), native.fingerprint);
    assert.deepEqual(tei.body[0], native.vectors[0].vector);
  } finally {
    await server.shutdown();
  }
});

Deno.test("matryoshka_dims is checked at load: wider than the model, not ascending, on a rerank model", async () => {
  await using t = await startSynapse({
    preload_models: [
      preload(TINY, "wide", { matryoshka_dims: [16, 64] }),
      preload(TINY, "unordered", { matryoshka_dims: [16, 8] }),
      preload(`${MODELS}/synapse-tiny-rerank`, "rr", { task: "rerank", matryoshka_dims: [1] }),
      preload(TINY, "ok", { matryoshka_dims: [8] }),
    ],
  }, { log: nullLog });
  const r = await rows(t);
  assert.equal(r.ok.state, "ready");
  for (
    const [id, reason] of [["wide", "exceeds_dims"], ["unordered", "not_ascending"], [
      "rr",
      "not_embed",
    ]] as const
  ) {
    assert.equal(r[id].state, "failed", id);
    assert.equal(r[id].error.code, "invalid_request", id);
    assert.equal(r[id].error.details.field, "matryoshka_dims", id);
    assert.equal(r[id].error.details.reason, reason, id);
    assert.match(r[id].error.message, /matryoshka_dims/);
  }
  const zero = await startSynapse({
    preload_models: [preload(TINY, "z", { matryoshka_dims: [0] })],
  })
    .catch((e) => e);
  assert.ok(zero instanceof Error, "a non-positive width is refused by the config");
  assert.match(String(zero.message), /matryoshka_dims/);
});

Deno.test("model.load matryoshka_dims: served at load, kept with the load, refused before a job when unordered", async () => {
  await using t = await startSynapse({ preload_models: [preload(TINY, "base")] }, { log: nullLog });
  const refused = semanticError(
    await t.syn.call("model.load", { path: TINY, model_id: "m2", matryoshka_dims: [16, 16] }),
  );
  assert.equal(refused.code, "invalid_request");
  assert.equal(refused.details.field, "matryoshka_dims");
  assert.equal(refused.details.reason, "not_ascending");
  const job = resultOf(
    await t.syn.call("model.load", { path: TINY, model_id: "m2", matryoshka_dims: [8, 16] }),
  );
  const done = await t.syn.loads.settled(job.job_id);
  assert.equal(done.state, "ready", JSON.stringify(done));
  const r = await rows(t);
  assert.deepEqual(r.m2.matryoshka_dims, [8, 16]);
  assert.equal(r.m2.fingerprints.length, 3);
  const v = resultOf(await t.syn.call("embed.query", { model: "m2", text: TEXT, dimensions: 8 }));
  assert.equal(v.vectors[0].vector.length, 8);
  assert.equal(v.fingerprint, r.m2.matryoshka[0].fingerprint);
  // Over the model's width: the job fails naming the field.
  const wide = resultOf(
    await t.syn.call("model.load", { path: TINY, model_id: "m3", matryoshka_dims: [64] }),
  );
  const failed = await t.syn.loads.settled(wide.job_id);
  assert.equal(failed.state, "failed");
  assert.equal(failed.error?.code, "invalid_request");
  assert.equal(failed.error?.details?.field, "matryoshka_dims");
});

Deno.test("a GGUF embed model (llama worker) serves its declared widths the same way; a width over its own fails the load", async () => {
  const GEN = `${MODELS}/synapse-tiny-llama`;
  const entry = (modelId: string, dims: number[]) => ({
    engine: "llama",
    model_path: GEN,
    tokenizer_path: `${GEN}/tokenizer.json`,
    task: "embed",
    model_id: modelId,
    pooling: "mean",
    normalize: true,
    max_tokens: 512,
    matryoshka_dims: dims,
  });
  await using t = await startSynapse({
    preload_models: [entry("gguf", [8]), entry("gguf-wide", [1 << 20])],
  }, { log: nullLog });
  const r = await rows(t);
  assert.equal(r.gguf.state, "ready", JSON.stringify(r.gguf.error));
  assert.equal(r["gguf-wide"].state, "failed");
  assert.equal(r["gguf-wide"].error.details.reason, "exceeds_dims");
  const full = resultOf(await t.syn.call("embed.query", { model: "gguf", text: TEXT }));
  const cut = resultOf(
    await t.syn.call("embed.query", { model: "gguf", text: TEXT, dimensions: 8 }),
  );
  assert.ok(full.dims > 8);
  assert.equal(cut.dims, 8);
  assert.equal(cut.fingerprint, r.gguf.matryoshka[0].fingerprint);
  assert.notEqual(cut.fingerprint, full.fingerprint);
  const v: number[] = cut.vectors[0].vector;
  assert.ok(Math.abs(norm(v) - 1) < 1e-6);
  assertClose(v, normalised(full.vectors[0].vector.slice(0, 8)), 1e-6, "gguf dims 8");
});
