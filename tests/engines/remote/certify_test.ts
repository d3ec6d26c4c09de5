/**
 * A remote lane proven against a local reference lane (docs/remote.md "Identity"): an
 * OpenAI-kind remote entry with `reference_model` serves as `declared` (refused without
 * `accept_declared`) until `probe.start` measures it against the local lane; once it passes it
 * serves as `proven` under another fingerprint, with `provenance.certified: true` and no
 * `accept_declared`, a probe-measured alias to the local fingerprint, and it stays proven across
 * a restart. A durable job that allows equivalents is computed partly by it, its pages naming both
 * fingerprints. A provider answering another model's numbers fails the probe and stays declared.
 */
import assert from "node:assert/strict";
import { MODELS, preload, resultOf, semanticError } from "../../_helpers.ts";
import type { Synapse } from "../../../lib/synapse.ts";
import { FaultProxy } from "./_fault_proxy.ts";
import { bootIn, EMBED, provider, ready, RERANK } from "./_servers.ts";

const TEXTS = ["the quick brown fox", "a remote lane proven here"];
const TERMINAL = new Set(["done", "failed_transient", "failed_permanent"]);

const ITEMS = Array.from(
  { length: 150 },
  (_, i) => ({ id: `p${i}`, text: `passage ${i} about ${"things ".repeat(i % 7)}and more` }),
);

/** The gateway's config: local `tiny` (and `tiny-rerank`), their remote lanes on `base`. */
function gatewayConfig(base: string, entry: Record<string, unknown> = {}) {
  return {
    certification: "require",
    inline: { max_items: 8 },
    jobs: { result_page_bytes: 2048, bulk_quantum_tokens: 40 },
    remote_providers: [{ id: "peer", kind: "openai", base_url: base, allow_loopback: true }],
    preload_models: [
      preload(EMBED, "tiny"),
      preload(RERANK, "tiny-rerank", { task: "rerank" }),
      {
        engine: "remote",
        provider: "peer",
        model: "tiny",
        model_id: "remote",
        task: "embed",
        tokenizer_path: `${EMBED}/tokenizer.json`,
        reference_model: "tiny",
        ...entry,
      },
      {
        engine: "remote",
        provider: "peer",
        model: "tiny-rerank",
        model_id: "remote-rerank",
        task: "rerank",
        tokenizer_path: `${RERANK}/tokenizer.json`,
        reference_model: "tiny-rerank",
      },
    ],
  };
}

/** Boots a Synapse with `config` in the data home under `dir`, its models ready. */
async function boot(dir: string, config: ReturnType<typeof gatewayConfig>): Promise<Synapse> {
  const syn = await bootIn(dir, config);
  for (const m of config.preload_models) {
    const id = (m as { model_id: string }).model_id;
    assert.equal((await ready(syn, id)).state, "ready", id);
  }
  return syn;
}

let probes = 0;

/** A fresh probe job of `models`, to its end. */
// deno-lint-ignore no-explicit-any
async function probe(syn: Synapse, models: string[]): Promise<any> {
  const request_key = `remote-certify-test-${++probes}`;
  const job = resultOf(await syn.call("probe.start", { models, request_key }));
  for (const hungAt = Date.now() + 600_000; Date.now() < hungAt;) {
    const s = resultOf(await syn.call("probe.status", { job_id: job.job_id }));
    if (TERMINAL.has(s.state)) return s;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`probe job ${job.job_id} did not end`);
}

// deno-lint-ignore no-explicit-any
function reportLane(syn: Synapse, model: string): Promise<any> {
  return syn.call("probe.report", {}).then((o) =>
    // deno-lint-ignore no-explicit-any
    resultOf(o).lanes.find((l: any) => l.model_id === model)
  );
}

function cosine(a: number[], b: number[]): number {
  let ab = 0, aa = 0, bb = 0;
  for (let i = 0; i < a.length; i++) {
    ab += a[i]! * b[i]!;
    aa += a[i]! * a[i]!;
    bb += b[i]! * b[i]!;
  }
  return ab / Math.sqrt(aa * bb);
}

Deno.test("a remote lane with a reference_model is proven by the probe: it then serves without accept_declared under a proven fingerprint, equivalent to the local one, across a restart, and helps a job that allows equivalents", async () => {
  await using p = await provider();
  const proxy = new FaultProxy(p.base);
  const dir = await Deno.makeTempDir({ prefix: "synapse-certify-" });
  try {
    const config = gatewayConfig(proxy.base);
    let proven: string;
    let local: string;
    {
      const g = await boot(dir, config);
      try {
        local = resultOf(await g.call("embed.batch", { texts: TEXTS, model: "tiny" })).fingerprint;
        // Declared: refused without accept_declared, and the refusal names the probe.
        const refused = semanticError(
          await g.call("embed.batch", { texts: TEXTS, model: "remote" }),
        );
        assert.equal(refused.code, "declared_identity_not_accepted");
        assert.equal(refused.details.probe_command, "ck-synapse probe run --model remote");
        assert.match(refused.message, /prove it against 'tiny'/);
        const declared = resultOf(
          await g.call("embed.batch", { texts: TEXTS, model: "remote", accept_declared: true }),
        );
        assert.equal(declared.provenance.remote.assurance, "declared");
        assert.equal(declared.provenance.certified, false);
        const before = await reportLane(g, "remote");
        assert.equal(before.serving_admission, "refused");
        assert.equal(before.certification_status, "probe_required");

        const job = await probe(g, ["remote", "remote-rerank"]);
        assert.equal(job.state, "done", JSON.stringify(job));
        for (const lane of job.lanes) {
          assert.equal(lane.status, "passed", JSON.stringify(lane));
        }
        assert.equal(job.lanes[0].reference_model_id, "tiny");

        // Proven: served without accept_declared, certified, under another fingerprint.
        const served = resultOf(await g.call("embed.batch", { texts: TEXTS, model: "remote" }));
        assert.equal(served.provenance.remote.assurance, "proven");
        assert.equal(served.provenance.engine.build_flags.assurance, "proven");
        assert.equal(served.provenance.certified, true);
        proven = served.fingerprint;
        assert.notEqual(proven, declared.fingerprint);
        assert.notEqual(proven, local);
        // The probe measured it at the alias bar: the local fingerprint is its equivalent.
        assert.deepEqual(served.equivalent_to, [local]);
        declared.vectors.forEach((v: { vector: number[] }, i: number) =>
          assert.deepEqual(served.vectors[i].vector, v.vector)
        );
        // probe.start without a key attaches to the job that proved the lane, until a later
        // probe writes the lane's certificate: then that job is no longer the answer.
        const first = resultOf(await g.call("probe.start", { models: ["remote"] }));
        assert.equal(first.attached, false);
        for (let s = first; !TERMINAL.has(s.state);) {
          await new Promise((r) => setTimeout(r, 25));
          s = resultOf(await g.call("probe.status", { job_id: first.job_id }));
        }
        const again = resultOf(await g.call("probe.start", { models: ["remote"] }));
        assert.equal(again.attached, true);
        assert.equal(again.job_id, first.job_id);
        assert.equal((await probe(g, ["remote"])).lanes[0].status, "passed");
        const fresh = resultOf(await g.call("probe.start", { models: ["remote"] }));
        assert.equal(fresh.attached, false, "attached to a job a later probe superseded");
        assert.notEqual(fresh.job_id, first.job_id);
        for (let s = fresh; !TERMINAL.has(s.state);) {
          await new Promise((r) => setTimeout(r, 25));
          s = resultOf(await g.call("probe.status", { job_id: fresh.job_id }));
        }
        const after = await reportLane(g, "remote");
        assert.equal(after.serving_admission, "serving");
        assert.equal(after.certification_status, "certified");
        const rr = resultOf(
          await g.call("rerank.score", { query: "fox", candidates: TEXTS, model: "remote-rerank" }),
        );
        assert.equal(rr.provenance.remote.assurance, "proven");

        // A job on the local model that allows equivalents is computed by both lanes; its pages
        // name the two fingerprints where the remote lane computed vectors, and every vector is
        // the local lane's (the provider runs the same model file).
        const own = new Map<string, number[]>();
        for (let i = 0; i < ITEMS.length; i += 8) {
          const r = resultOf(
            await g.call("embed.batch", { items: ITEMS.slice(i, i + 8), model: "tiny" }),
          );
          for (const v of r.vectors) own.set(v.id, v.vector);
        }
        const sentBefore = proxy.seen;
        const accepted = resultOf(
          await g.call("embed.batch", {
            items: ITEMS,
            model: "tiny",
            request_key: "spread-equivalent",
            allow_equivalent: true,
          }),
        );
        let done;
        for (let i = 0; i < 12_000; i++) {
          done = resultOf(await g.call("embed.result", { job_id: accepted.job_id }));
          if (done.state !== "queued" && done.state !== "running") break;
          await new Promise((r) => setTimeout(r, 20));
        }
        assert.equal(done.state, "done", JSON.stringify(done.error));
        const seen = new Set<string>();
        let withRemote = 0;
        for (let page = 0; page < done.page_count; page++) {
          const r = resultOf(await g.call("embed.result", { job_id: accepted.job_id, page }));
          assert.equal(r.fingerprint, local);
          if (r.provenance_set !== undefined) {
            assert.deepEqual(r.provenance_set, [local, proven]);
            withRemote++;
          }
          for (const v of r.vectors) {
            assert.ok(!seen.has(v.id), `${v.id} twice`);
            seen.add(v.id);
            assert.ok(cosine(v.vector, own.get(v.id)!) > 0.99999, v.id);
          }
        }
        assert.equal(seen.size, ITEMS.length);
        assert.ok(proxy.seen > sentBefore, "the proven lane computed nothing");
        assert.ok(withRemote > 0, "no page names the proven lane's fingerprint");
        // Without allow_equivalent the same job stays on the local lane (an OpenAI provider
        // never reports the local fingerprint): no page names another fingerprint.
        const sentLocal = proxy.seen;
        const plain = resultOf(
          await g.call("embed.batch", { items: ITEMS, model: "tiny", request_key: "spread-plain" }),
        );
        for (let i = 0; i < 12_000; i++) {
          done = resultOf(await g.call("embed.result", { job_id: plain.job_id }));
          if (done.state !== "queued" && done.state !== "running") break;
          await new Promise((r) => setTimeout(r, 20));
        }
        assert.equal(done.state, "done");
        assert.equal(proxy.seen, sentLocal);
        assert.equal(done.provenance_set, undefined);
      } finally {
        await g.dispose();
      }
    }
    // The certificate is in the store: the next boot serves the lane proven at once.
    {
      const g = await boot(dir, config);
      try {
        const served = resultOf(await g.call("embed.batch", { texts: TEXTS, model: "remote" }));
        assert.equal(served.provenance.remote.assurance, "proven");
        assert.equal(served.fingerprint, proven);
      } finally {
        await g.dispose();
      }
    }
  } finally {
    await proxy.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a proven remote lane whose provider now answers another model's numbers fails its next probe: declared again, its alias retracted, and halted by the canary the failure runs at once; without a reference_model a remote lane cannot be probed", async () => {
  await using p = await provider();
  // A badly quantized model served under the name `tiny`.
  await using bad = await provider([
    preload(`${MODELS}/synapse-tiny-embed-int8-badscale`, "tiny"),
  ]);
  const proxy = new FaultProxy(p.base);
  const dir = await Deno.makeTempDir({ prefix: "synapse-certify-" });
  try {
    const g = await boot(dir, gatewayConfig(proxy.base));
    try {
      assert.equal((await probe(g, ["remote"])).lanes[0].status, "passed");
      const proven = resultOf(await g.call("embed.batch", { texts: TEXTS, model: "remote" }));
      assert.equal(proven.equivalent_to.length, 1);
      proxy.upstream = bad.base;
      const job = await probe(g, ["remote"]);
      assert.equal(job.state, "done", JSON.stringify(job));
      assert.equal(job.lanes[0].status, "failed", JSON.stringify(job.lanes[0]));
      assert.ok(
        // deno-lint-ignore no-explicit-any
        job.lanes[0].failed_checks.some((c: any) => c.id.startsWith("reference_parity")),
        JSON.stringify(job.lanes[0].failed_checks),
      );
      // The failed probe checks the canary at once: the provider's numbers moved since the
      // baseline, so the lane refuses everyone now, not at the next canary interval.
      const refused = semanticError(
        await g.call("embed.batch", { texts: TEXTS, model: "remote", accept_declared: true }),
      );
      assert.equal(refused.code, "remote_identity_drift", JSON.stringify(refused));
      // deno-lint-ignore no-explicit-any
      const listed = resultOf(await g.call("models.list", {})).models.find((m: any) =>
        m.model_id === "remote"
      );
      assert.equal(listed.state, "remote_refusing");
      assert.notEqual(listed.fingerprints[0], proven.fingerprint, "declared again");
      const halted = await reportLane(g, "remote");
      assert.equal(halted.serving_admission, "refused");
      assert.equal(halted.blocking_reason, "remote_identity_drift");
      // The alias the first probe measured is retracted: the proven fingerprint has none now.
      const aliases = resultOf(await g.call("models.list", {})).alias_rows;
      // deno-lint-ignore no-explicit-any
      const row = aliases.find((r: any) =>
        r.fingerprint_a === proven.fingerprint || r.fingerprint_b === proven.fingerprint
      );
      assert.ok(row !== undefined && row.valid_to_ms !== null, JSON.stringify(aliases));
      const lane = await reportLane(g, "remote");
      assert.equal(lane.certification_status, "certification_failed");
    } finally {
      await g.dispose();
    }
    const { reference_model: _, ...bare } = gatewayConfig(p.base).preload_models[2] as Record<
      string,
      unknown
    >;
    const config = gatewayConfig(p.base);
    config.preload_models = [config.preload_models[0]!, bare as typeof config.preload_models[0]];
    const g2 = await boot(`${dir}/b`, config);
    try {
      const e = semanticError(await g2.call("probe.start", { models: ["remote"] }));
      assert.equal(e.code, "invalid_request");
      assert.equal(e.details.reason, "remote_lane_without_reference");
      const refused = semanticError(
        await g2.call("embed.batch", { texts: TEXTS, model: "remote" }),
      );
      assert.match(refused.message, /give its entry a reference_model/);
    } finally {
      await g2.dispose();
    }
  } finally {
    await proxy.close();
    await Deno.remove(dir, { recursive: true });
  }
});
