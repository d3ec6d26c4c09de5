/**
 * One durable job spread over its model's local lane and two remote lanes of the same
 * fingerprint (docs/remote.md "Spreading a job"): two providers (Synapses serving the same model
 * file, so the same fingerprint), each behind a loopback proxy that counts what it is sent. The
 * job returns exactly the vectors the model returns alone, every id once, pages in order; a
 * provider failing mid-job has its quanta computed elsewhere; a provider whose numbers differ is
 * never used.
 */
import assert from "node:assert/strict";
import { preload, resultOf, startSynapse } from "../../_helpers.ts";
import type { Synapse } from "../../../lib/synapse.ts";
import { FaultProxy } from "./_fault_proxy.ts";
import { EMBED, provider, ready } from "./_servers.ts";

const ITEMS = Array.from(
  { length: 120 },
  (_, i) => ({ id: `p${i}`, text: `passage ${i} about ${"things ".repeat(i % 9)}and more` }),
);

/** A gateway serving `tiny` locally, with remote lanes `tiny-a`, `tiny-b` at `bases`. */
async function gateway(bases: string[]) {
  const ids = ["a", "b"].slice(0, bases.length);
  const g = await startSynapse({
    inline: { max_items: 8 },
    jobs: { result_page_bytes: 2048, bulk_quantum_tokens: 40 },
    remote_providers: bases.map((base, i) => ({
      id: `peer-${ids[i]}`,
      kind: "synapse",
      base_url: base,
      allow_loopback: true,
    })),
    preload_models: [
      preload(EMBED, "tiny"),
      ...ids.map((id) => ({
        engine: "remote",
        provider: `peer-${id}`,
        model: "tiny",
        model_id: `tiny-${id}`,
        task: "embed",
        tokenizer_path: `${EMBED}/tokenizer.json`,
      })),
    ],
  });
  for (const m of ["tiny", ...ids.map((id) => `tiny-${id}`)]) {
    assert.equal((await ready(g.syn, m)).state, "ready", m);
  }
  return g;
}

/** Runs a job of ITEMS on `tiny` to its end; its final page and every vector, page by page. */
async function runJob(syn: Synapse, key: string) {
  const job = resultOf(
    await syn.call("embed.batch", { items: ITEMS, model: "tiny", request_key: key }),
  );
  let done;
  for (let i = 0; i < 12_000; i++) {
    done = resultOf(await syn.call("embed.result", { job_id: job.job_id }));
    if (done.state !== "queued" && done.state !== "running") break;
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.equal(done.state, "done", JSON.stringify(done.error));
  const vectors: { id: string; vector: number[] }[] = [];
  for (let page = 0; page < done.page_count; page++) {
    vectors.push(...resultOf(await syn.call("embed.result", { job_id: job.job_id, page })).vectors);
  }
  return { done, vectors };
}

/** The model's own vectors of ITEMS, by id (inline, on a provider: the same model file). */
async function ownVectors(syn: Synapse): Promise<Map<string, number[]>> {
  const out = new Map<string, number[]>();
  for (let i = 0; i < ITEMS.length; i += 60) {
    const r = resultOf(
      await syn.call("embed.batch", { items: ITEMS.slice(i, i + 60), model: "tiny" }),
    );
    for (const v of r.vectors) out.set(v.id, v.vector);
  }
  return out;
}

function assertSameVectors(
  vectors: { id: string; vector: number[] }[],
  own: Map<string, number[]>,
): void {
  assert.deepEqual(vectors.map((v) => v.id).sort(), ITEMS.map((x) => x.id).sort());
  for (const v of vectors) assert.deepEqual(v.vector, own.get(v.id), v.id);
}

Deno.test("a job spread over the local lane and two providers of the same fingerprint returns exactly the model's vectors, every id once; a provider failing mid-job has its quanta computed elsewhere", async () => {
  await using p1 = await provider();
  await using p2 = await provider();
  const a = new FaultProxy(p1.base);
  const b = new FaultProxy(p2.base);
  try {
    await using g = await gateway([a.base, b.base]);
    const own = await ownVectors(p1.t.syn);
    const fp = async (syn: Synapse) =>
      resultOf(await syn.call("embed.query", { text: "x", model: "tiny" })).fingerprint;
    const fingerprint = await fp(g.syn);
    assert.equal(fingerprint, await fp(p1.t.syn), "the premise: one model file, one fingerprint");

    const [seenA, seenB] = [a.seen, b.seen];
    const first = await runJob(g.syn, "spread-1");
    assertSameVectors(first.vectors, own);
    assert.equal(first.done.fingerprint, fingerprint);
    // Both providers computed quanta (more than the canary's one request each).
    assert.ok(a.seen - seenA > 1 && b.seen - seenB > 1, `a ${a.seen - seenA}, b ${b.seen - seenB}`);

    // Provider a fails after its second request of the next job: its quanta go elsewhere.
    const start = a.seen;
    a.onRequest = (n) => {
      if (n === start + 2) a.mode = "status_500";
    };
    const second = await runJob(g.syn, "spread-2");
    assertSameVectors(second.vectors, own);
    assert.equal(a.mode, "status_500", "provider a failed during the job");
  } finally {
    a.onRequest = undefined;
    await a.close();
    await b.close();
  }
});

Deno.test("a remote lane whose provider reports the fingerprint but answers other numbers never computes a job's quanta", async () => {
  await using p = await provider();
  const proxy = new FaultProxy(p.base);
  try {
    await using g = await gateway([proxy.base]);
    const own = await ownVectors(p.t.syn);
    // From now on the provider's embeddings are moved, its fingerprint header unchanged.
    proxy.mode = "perturbed";
    const before = proxy.seen;
    const { vectors } = await runJob(g.syn, "not-equal");
    assertSameVectors(vectors, own);
    assert.equal(proxy.seen - before, 1, "only the canary request reached the provider");
  } finally {
    await proxy.close();
  }
});
