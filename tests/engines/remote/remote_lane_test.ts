/**
 * The remote lane against real servers on loopback (docs/remote.md): the provider is a second
 * Synapse serving HTTP on a real socket (its OpenAI, TEI and native routes), faults come from a
 * loopback proxy in front of it (`_fault_proxy.ts`). Every answer is compared with the provider's
 * own answer for the same input.
 */
import assert from "node:assert/strict";
import { MODELS, preload, resultOf, semanticError, startSynapse } from "../../_helpers.ts";
import { serveHttp } from "../../../lib/doors/http/server.ts";
import { nullLog } from "../../../lib/log/log.ts";
import type { Synapse } from "../../../lib/synapse.ts";
import { FaultProxy } from "./_fault_proxy.ts";
import { bootIn, EMBED, gateway, provider, ready, RERANK } from "./_servers.ts";

const TEXTS = ["the quick brown fox", "remote lanes keep fingerprints", "a third passage"];

Deno.test("a remote lane over another Synapse serves exactly its vectors, under its own fingerprint, to a caller who accepts the declared identity", async () => {
  await using p = await provider();
  await using g = await gateway(p.base);
  const local = resultOf(await p.t.syn.call("embed.batch", { texts: TEXTS, model: "tiny" }));
  const remote = resultOf(
    await g.syn.call("embed.batch", { texts: TEXTS, model: "remote", accept_declared: true }),
  );
  assert.deepEqual(remote.vectors, local.vectors, "bit for bit, with the same content hashes");
  assert.deepEqual(remote.real_token_counts, local.real_token_counts);
  assert.equal(remote.dims, local.dims);
  assert.match(remote.fingerprint, /^[0-9a-f]{64}$/);
  assert.notEqual(remote.fingerprint, local.fingerprint, "a remote lane is its own vector space");
  assert.deepEqual(remote.provenance.remote, {
    provider: "peer",
    deployment: local.fingerprint,
    assurance: "declared",
  });
  assert.equal(remote.provenance.certified, false);
  assert.equal(remote.provenance.engine.engine, "remote");
  assert.equal(typeof remote.provider_request_id, "string");
  assert.ok(new TextEncoder().encode(remote.provider_request_id).length <= 128);
  // Without accept_declared: refused by name, nothing sent.
  const refused = semanticError(await g.syn.call("embed.batch", { texts: TEXTS, model: "remote" }));
  assert.equal(refused.code, "declared_identity_not_accepted");
  assert.equal(refused.details.provider, "peer");
  assert.equal(refused.details.assurance, "declared");
  // Over the gateway's OpenAI door: the header accepts it, its absence is refused (HTTP 422).
  const door = serveHttp(g.syn, { log: nullLog });
  try {
    const post = (headers: Record<string, string>) =>
      fetch(`http://127.0.0.1:${door.port}/v1/embeddings`, {
        method: "POST",
        headers,
        body: JSON.stringify({ model: "remote", input: TEXTS }),
      });
    const ok = await post({ "x-synapse-accept-declared": "true" });
    assert.equal(ok.status, 200);
    assert.equal(ok.headers.get("x-synapse-fingerprint"), remote.fingerprint);
    const body = await ok.json();
    assert.deepEqual(body.data[0].embedding, local.vectors[0].vector);
    const no = await post({});
    assert.equal(no.status, 422);
    assert.equal((await no.json()).error.code, "declared_identity_not_accepted");
  } finally {
    await door.shutdown();
  }
  // models.list names the lane.
  const row = await ready(g.syn, "remote");
  assert.equal(row.state, "ready");
  assert.equal(row.dims, local.dims);
});

Deno.test("a remote lane truncates here and sends the kept part: content_sha256 and counts equal the provider's own truncation", async () => {
  await using p = await provider();
  await using g = await gateway(p.base, {}, { max_tokens: 8 });
  const long = "one two three four five six seven eight nine ten eleven twelve";
  const remote = resultOf(
    await g.syn.call("embed.batch", {
      texts: [long],
      model: "remote",
      truncate: true,
      accept_declared: true,
    }),
  );
  assert.equal(remote.truncation_disclosures[0].truncated, true);
  assert.equal(remote.real_token_counts[0], 8);
  // 8 tokens: [CLS], six words, [SEP] (one token per word in this vocabulary).
  const kept = "one two three four five six";
  const local = resultOf(await p.t.syn.call("embed.batch", { texts: [kept], model: "tiny" }));
  assert.equal(local.real_token_counts[0], 8);
  assert.deepEqual(remote.vectors[0].vector, local.vectors[0].vector);
  assert.equal(remote.vectors[0].content_sha256, local.vectors[0].submitted_sha256);
  assert.notEqual(remote.vectors[0].content_sha256, remote.vectors[0].submitted_sha256);
});

Deno.test("the TEI and OpenAI kinds reach the provider's TEI and OpenAI routes and give the same vectors", async () => {
  await using p = await provider();
  const local = resultOf(await p.t.syn.call("embed.batch", { texts: TEXTS, model: "tiny" }));
  for (const kind of ["tei", "openai"]) {
    await using g = await gateway(p.base, {}, {}, kind);
    const remote = resultOf(
      await g.syn.call("embed.batch", { texts: TEXTS, model: "remote", accept_declared: true }),
    );
    assert.deepEqual(
      remote.vectors.map((v: { vector: number[] }) => v.vector),
      local.vectors.map((v: { vector: number[] }) => v.vector),
      kind,
    );
    assert.equal(remote.provenance.engine.version, kind);
    assert.match(
      remote.provenance.remote.deployment,
      kind === "tei" ? /^tiny@unpinned$/ : /^tiny;owned_by=synapse$/,
    );
  }
});

Deno.test("a remote reranker scores through the provider's /rerank exactly as the provider does", async () => {
  await using p = await provider();
  const g = await startSynapse({
    remote_providers: [{ id: "peer", kind: "synapse", base_url: p.base, allow_loopback: true }],
    preload_models: [{
      engine: "remote",
      provider: "peer",
      model: "tiny-rerank",
      model_id: "remote-rerank",
      task: "rerank",
      tokenizer_path: `${RERANK}/tokenizer.json`,
    }],
  });
  await using _g = g;
  assert.equal((await ready(g.syn, "remote-rerank")).state, "ready");
  const params = { query: "which fox", candidates: TEXTS };
  const local = resultOf(await p.t.syn.call("rerank.score", { ...params, model: "tiny-rerank" }));
  const remote = resultOf(
    await g.syn.call("rerank.score", { ...params, model: "remote-rerank", accept_declared: true }),
  );
  assert.deepEqual(remote.scores, local.scores);
  assert.equal(remote.provenance.remote.provider, "peer");
  assert.equal(typeof remote.provider_request_id, "string");
});

Deno.test("faults: 5xx is provider_unavailable; the breaker opens after its threshold (nothing sent), lets one trial through later, and closes on its success", async () => {
  await using p = await provider();
  const proxy = new FaultProxy(p.base);
  try {
    await using g = await gateway(proxy.base, { breaker: { failure_threshold: 2, open_ms: 200 } });
    const call = () =>
      g.syn.call("embed.batch", { texts: TEXTS, model: "remote", accept_declared: true });
    proxy.mode = "status_500";
    for (let i = 0; i < 2; i++) {
      const e = semanticError(await call());
      assert.equal(e.code, "provider_unavailable");
      assert.equal(e.class, "transient");
      assert.equal(e.details.http_status, 500);
      assert.ok(e.retry_after_ms > 0);
    }
    const seen = proxy.seen;
    const open = semanticError(await call());
    assert.equal(open.code, "provider_unavailable");
    assert.equal(open.details.reason, "breaker_open");
    assert.ok(open.retry_after_ms >= 1 && open.retry_after_ms <= 200, String(open.retry_after_ms));
    assert.equal(proxy.seen, seen, "an open breaker sends nothing");
    proxy.mode = "pass";
    // After open_ms the next request is the half-open trial; it succeeds and closes the breaker.
    let answered;
    for (let i = 0; i < 500 && answered === undefined; i++) {
      const o = await call();
      if (o.kind === "result") answered = resultOf(o);
      else await new Promise((r) => setTimeout(r, 20));
    }
    assert.ok(answered !== undefined, "the breaker closed again");
    assert.equal(answered.vectors.length, TEXTS.length);
    resultOf(await call());
  } finally {
    await proxy.close();
  }
});

Deno.test("an open breaker shows in the model's state and in /health: remote_refusing (breaker_open, provider_unavailable with retry_after_ms), the service unavailable when it is the only model", async () => {
  await using p = await provider();
  const proxy = new FaultProxy(p.base);
  try {
    await using g = await gateway(proxy.base, {
      breaker: { failure_threshold: 1, open_ms: 600_000 },
    });
    const server = serveHttp(g.syn, { log: nullLog });
    try {
      const health = async () => {
        const r = await fetch(`http://127.0.0.1:${server.port}/health`);
        return { status: r.status, body: await r.json() };
      };
      assert.equal((await health()).body.status, "ok");
      proxy.mode = "status_500";
      semanticError(
        await g.syn.call("embed.batch", { texts: TEXTS, model: "remote", accept_declared: true }),
      );
      const h = await health();
      assert.equal(h.status, 503, JSON.stringify(h.body));
      assert.equal(h.body.status, "unavailable");
      assert.match(h.body.reason, /'remote' remote_refusing \(provider_unavailable\)/);
      // deno-lint-ignore no-explicit-any
      const row = h.body.models.find((m: any) => m.model_id === "remote");
      assert.equal(row.state, "remote_refusing");
      assert.equal(row.state_reason.reason, "breaker_open");
      assert.equal(row.state_reason.code, "provider_unavailable");
      assert.ok(row.state_reason.details.retry_after_ms > 0, JSON.stringify(row));
      const listed = resultOf(await g.syn.call("models.list", {})).models.find((
        m: { model_id: string },
      ) => m.model_id === "remote");
      assert.equal(listed.state, "remote_refusing");
    } finally {
      await server.shutdown();
    }
  } finally {
    await proxy.close();
  }
});

Deno.test("newcomer replay: a request naming no model passes over a remote lane whose breaker is open for the next default", async () => {
  await using p = await provider();
  const proxy = new FaultProxy(p.base);
  try {
    await using g = await startSynapse({
      remote_providers: [{
        id: "peer",
        kind: "synapse",
        base_url: proxy.base,
        allow_loopback: true,
        breaker: { failure_threshold: 1, open_ms: 600_000 },
      }],
      preload_models: [
        {
          engine: "remote",
          provider: "peer",
          model: "tiny",
          model_id: "remote",
          task: "embed",
          tokenizer_path: `${EMBED}/tokenizer.json`,
        },
        preload(EMBED, "tiny"),
      ],
    });
    for (const m of ["remote", "tiny"]) assert.equal((await ready(g.syn, m)).state, "ready");
    const call = () => g.syn.call("embed.batch", { texts: TEXTS, accept_declared: true });
    assert.equal(resultOf(await call()).model_id, "remote", "the first default serves");
    proxy.mode = "status_500";
    assert.equal(semanticError(await call()).code, "provider_unavailable");
    // The breaker is open: the remote lane refuses at once, so the next default serves.
    assert.equal(resultOf(await call()).model_id, "tiny");
  } finally {
    await proxy.close();
  }
});

Deno.test("newcomer replay: a provider down when the gateway starts is retried past the local lanes' three attempts; the lane serves once the provider is back, without a restart", async () => {
  await using p = await provider();
  const proxy = new FaultProxy(p.base);
  proxy.mode = "status_503";
  const dir = await Deno.makeTempDir({ prefix: "synapse-remote-retry-" });
  try {
    const syn = await bootIn(dir, {
      remote_providers: [{
        id: "peer",
        kind: "synapse",
        base_url: proxy.base,
        allow_loopback: true,
        breaker: { failure_threshold: 1000 },
      }],
      preload_models: [{
        engine: "remote",
        provider: "peer",
        model: "tiny",
        model_id: "remote",
        task: "embed",
        tokenizer_path: `${EMBED}/tokenizer.json`,
      }],
    }, { loadRetryBaseMs: 20 });
    try {
      // deno-lint-ignore no-explicit-any
      let row: any;
      for (let i = 0; i < 3000; i++) {
        // deno-lint-ignore no-explicit-any
        row = resultOf(await syn.call("models.list", {})).models.find((m: any) =>
          m.model_id === "remote"
        );
        if (Number(row.state_reason?.details?.attempt ?? 0) >= 5) break;
        await new Promise((r) => setTimeout(r, 20));
      }
      assert.equal(row.state, "loading", JSON.stringify(row));
      // Between attempts (`retrying_after_failure`) or in one (`loading`): never failed.
      assert.ok(
        ["loading", "retrying_after_failure"].includes(row.state_reason.reason),
        JSON.stringify(row),
      );
      assert.ok(row.state_reason.details.attempt >= 5, JSON.stringify(row));
      proxy.mode = "pass";
      assert.equal((await ready(syn, "remote")).state, "ready");
      resultOf(
        await syn.call("embed.batch", { texts: TEXTS, model: "remote", accept_declared: true }),
      );
    } finally {
      await syn.dispose();
    }
  } finally {
    await proxy.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("faults: a slow provider times out, a reset connection is retried then unavailable, wrong dims is a protocol violation", async () => {
  await using p = await provider();
  const proxy = new FaultProxy(p.base);
  // A port that accepts and closes at once: a connection reset before any answer.
  const dead = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  let accepted = 0;
  const acceptLoop = (async () => {
    for await (const c of dead) {
      accepted++;
      c.close();
    }
  })();
  try {
    await using g = await gateway(proxy.base, { timeout_ms: 300 });
    const call = (syn: Synapse, model = "remote") =>
      syn.call("embed.batch", { texts: TEXTS, model, accept_declared: true });
    proxy.mode = "slow";
    const slow = semanticError(await call(g.syn));
    assert.equal(slow.code, "provider_unavailable");
    assert.equal(slow.details.reason, "timeout");
    proxy.mode = "wrong_dims";
    const dims = semanticError(await call(g.syn));
    assert.equal(dims.code, "provider_protocol_violation");
    assert.equal(dims.details.reason, "wrong_dims");
    assert.equal(dims.details.got_dims, dims.details.expected_dims - 1);
    proxy.mode = "pass";
    resultOf(await call(g.syn));
    // The reset: a second gateway on the dead port fails its load, retrying the idempotent GET.
    await using g2 = await startSynapse({
      remote_providers: [{
        id: "dead",
        kind: "synapse",
        base_url: `http://127.0.0.1:${(dead.addr as Deno.NetAddr).port}`,
        allow_loopback: true,
      }],
      preload_models: [{
        engine: "remote",
        provider: "dead",
        model: "tiny",
        task: "embed",
        tokenizer_path: `${EMBED}/tokenizer.json`,
      }],
    });
    const e = semanticError(await call(g2.syn, "tiny"));
    assert.ok(["provider_unavailable", "model_loading"].includes(e.code), e.code);
    assert.ok(accepted >= 3, `the idempotent request was tried 3 times (${accepted})`);
  } finally {
    dead.close();
    await acceptLoop.catch(() => {});
    await proxy.close();
  }
});

Deno.test("faults: a changed deployment behind the same name is remote_deployment_changed; a redirect is refused; 401 is needs_reauth and the key never leaks", async () => {
  await using p = await provider();
  const proxy = new FaultProxy(p.base);
  const keyVar = `SYNAPSE_TEST_REMOTE_KEY_${crypto.randomUUID().replaceAll("-", "")}`;
  const key = `sk-${crypto.randomUUID()}`;
  Deno.env.set(keyVar, key);
  try {
    proxy.requireKey = key;
    await using g = await gateway(proxy.base, { api_key_env: keyVar });
    assert.equal(proxy.lastAuthorization, `Bearer ${key}`);
    const call = () =>
      g.syn.call("embed.batch", { texts: TEXTS, model: "remote", accept_declared: true });
    resultOf(await call());
    proxy.mode = "other_fingerprint";
    const drift = semanticError(await call());
    assert.equal(drift.code, "remote_deployment_changed");
    assert.equal(drift.details.fingerprint, "f".repeat(64));
    proxy.mode = "redirect";
    const seen = proxy.seen;
    const redirect = semanticError(await call());
    assert.equal(redirect.code, "provider_protocol_violation");
    assert.equal(redirect.details.reason, "redirect_refused");
    assert.equal(proxy.seen, seen + 1, "the redirect was not followed");
    proxy.mode = "pass";
    proxy.requireKey = "another key";
    const reauth = semanticError(await call());
    assert.equal(reauth.code, "needs_reauth");
    assert.equal(reauth.details.http_status, 401);
    assert.match(reauth.message, new RegExp(keyVar));
    assert.ok(!JSON.stringify(reauth).includes(key), "the key is never in an error");
    const status = JSON.stringify(resultOf(await g.syn.call("models.list", {})));
    assert.ok(!status.includes(key), "nor in models.list");
  } finally {
    Deno.env.delete(keyVar);
    await proxy.close();
  }
});

Deno.test("a provider on loopback without allow_loopback fails the model's load by name; an unset key variable is credential_config_invalid", async () => {
  await using p = await provider();
  for (
    const [extra, code, reason] of [
      [{ allow_loopback: false }, "invalid_request", "loopback_refused"],
      [{ api_key_env: "SYNAPSE_TEST_UNSET_VARIABLE_X" }, "credential_config_invalid", "env_unset"],
    ] as const
  ) {
    await using g = await startSynapse({
      remote_providers: [{
        id: "peer",
        kind: "synapse",
        base_url: p.base,
        allow_loopback: true,
        ...extra,
      }],
      preload_models: [{
        engine: "remote",
        provider: "peer",
        model: "tiny",
        task: "embed",
        tokenizer_path: `${EMBED}/tokenizer.json`,
      }],
    });
    const row = await ready(g.syn, "tiny");
    assert.equal(row.state, "failed");
    const e = semanticError(
      await g.syn.call("embed.batch", { texts: TEXTS, model: "tiny", accept_declared: true }),
    );
    assert.equal(e.code, code);
    assert.equal(e.details.reason, reason);
  }
});

Deno.test("config: a remote entry names a configured provider and takes no local-lane setting", async () => {
  await assert.rejects(
    startSynapse({
      preload_models: [{
        engine: "remote",
        provider: "nowhere",
        model: "m",
        tokenizer_path: `${EMBED}/tokenizer.json`,
      }],
    }),
    /names remote provider 'nowhere', which remote_providers does not list/,
  );
  await assert.rejects(
    startSynapse({
      remote_providers: [{ id: "p", kind: "openai", base_url: "http://127.0.0.1:9" }],
      preload_models: [{
        engine: "remote",
        provider: "p",
        model: "m",
        model_path: "/x.onnx",
        tokenizer_path: `${EMBED}/tokenizer.json`,
      }],
    }),
    /model_path' is a setting of a local lane/,
  );
  await assert.rejects(
    startSynapse({
      preload_models: [{ ...preload(EMBED, "x"), provider: "p" }],
    }),
    /provider' is a setting of engine 'remote'/,
  );
});

Deno.test("a durable job runs on the remote lane: every id once, the provider's vectors", async () => {
  await using p = await provider();
  await using g = await gateway(p.base, {}, {}, "synapse", {
    inline: { max_items: 8 },
    jobs: { result_page_bytes: 4096 },
  });
  const items = Array.from(
    { length: 40 },
    (_, i) => ({ id: `p${i}`, text: `passage ${i} ${"w ".repeat(i % 7)}` }),
  );
  const local = resultOf(await p.t.syn.call("embed.batch", { items, model: "tiny" }));
  const job = resultOf(
    await g.syn.call("embed.batch", {
      items,
      model: "remote",
      request_key: "remote-job",
      accept_declared: true,
    }),
  );
  let done;
  for (let i = 0; i < 30_000; i++) {
    done = resultOf(await g.syn.call("embed.result", { job_id: job.job_id }));
    if (done.state !== "queued" && done.state !== "running") break;
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.equal(done.state, "done");
  const vectors = [];
  for (let page = 0; page < done.page_count; page++) {
    vectors.push(
      ...resultOf(await g.syn.call("embed.result", { job_id: job.job_id, page })).vectors,
    );
  }
  assert.deepEqual(vectors.map((v) => v.id).sort(), items.map((x) => x.id).sort());
  const byId = new Map(local.vectors.map((v: { id: string }) => [v.id, v]));
  for (const v of vectors) {
    assert.deepEqual(v.vector, (byId.get(v.id) as { vector: number[] }).vector);
  }
  assert.equal(done.provenance.remote.provider, "peer");
});

Deno.test("admission.status shows a remote lane with its provider's breaker and latency, never its key", async () => {
  await using p = await provider();
  const keyVar = `SYNAPSE_TEST_REMOTE_KEY_${crypto.randomUUID().replaceAll("-", "")}`;
  const key = `sk-${crypto.randomUUID()}`;
  Deno.env.set(keyVar, key);
  try {
    await using g = await gateway(p.base, { api_key_env: keyVar });
    resultOf(
      await g.syn.call("embed.batch", { texts: TEXTS, model: "remote", accept_declared: true }),
    );
    const status = resultOf(await g.syn.call("admission.status", {}));
    // deno-lint-ignore no-explicit-any
    const row = status.lanes.find((l: any) => l.lane === "remote-remote");
    assert.ok(row !== undefined, JSON.stringify(status.lanes.map((l: { lane: string }) => l.lane)));
    assert.equal(row.worker.remote.provider, "peer");
    assert.equal(row.worker.remote.breaker.state, "closed");
    assert.ok(row.worker.remote.requests >= 2, "the load's checks and the call");
    assert.ok(row.worker.remote.latency.samples >= 1);
    assert.ok(!JSON.stringify(status).includes(key));
  } finally {
    Deno.env.delete(keyVar);
  }
});

Deno.test("newcomer replay: a remote lane without a reference_model cannot be probed, keeps asking for accept_declared and never degrades /health; a model the provider does not serve is the entry's mistake; the provider's test model stays one", async () => {
  await using p = await provider();
  await using g = await gateway(p.base, {}, {}, "synapse", { certification: "require" });
  const probe = semanticError(await g.syn.call("probe.start", { models: ["remote"] }));
  assert.equal(probe.code, "invalid_request");
  assert.equal(probe.details.reason, "remote_lane_without_reference");
  const refused = semanticError(await g.syn.call("embed.batch", { texts: TEXTS, model: "remote" }));
  assert.equal(refused.code, "declared_identity_not_accepted");
  assert.match(refused.message, /--accept-declared/);
  const served = resultOf(
    await g.syn.call("embed.batch", { texts: TEXTS, model: "remote", accept_declared: true }),
  );
  assert.equal(served.provenance.certified, false);
  assert.equal(served.test_model, true, "the provider's test model is labelled here too");
  const row = await ready(g.syn, "remote");
  assert.equal(row.state, "ready", "not not_certified: it serves whoever accepts it");
  await using wrong = await gateway(p.base, {}, { model: "no-such-model", model_id: "remote" });
  const e = semanticError(
    await wrong.syn.call("embed.batch", { texts: TEXTS, model: "remote", accept_declared: true }),
  );
  assert.equal(e.code, "invalid_request");
  assert.equal(e.details.reason, "model_not_served");
  assert.equal(e.details.field, "preload_models.model");
  assert.ok(e.details.served.includes("tiny"), JSON.stringify(e.details.served));
});

Deno.test("an OpenAI-kind reranker's relevance_score (a logistic) is turned back into the raw logit the score_kind says", async () => {
  await using p = await provider();
  await using g = await startSynapse({
    remote_providers: [{ id: "peer", kind: "openai", base_url: p.base, allow_loopback: true }],
    preload_models: [{
      engine: "remote",
      provider: "peer",
      model: "tiny-rerank",
      model_id: "remote-rerank",
      task: "rerank",
      tokenizer_path: `${RERANK}/tokenizer.json`,
    }],
  });
  assert.equal((await ready(g.syn, "remote-rerank")).state, "ready");
  const params = { query: "which fox", candidates: TEXTS };
  const local = resultOf(await p.t.syn.call("rerank.score", { ...params, model: "tiny-rerank" }));
  const remote = resultOf(
    await g.syn.call("rerank.score", { ...params, model: "remote-rerank", accept_declared: true }),
  );
  assert.equal(remote.score_kind, "raw_logit");
  remote.scores.forEach((s: number, i: number) =>
    assert.ok(Math.abs(s - local.scores[i]) < 1e-6, `${s} vs ${local.scores[i]}`)
  );
});

Deno.test("a remote entry's normalize is checked against the provider's vectors at load; pooling is refused on a remote entry", async () => {
  await using p = await provider();
  await using g = await gateway(p.base, {}, { normalize: false });
  const row = await ready(g.syn, "remote");
  assert.equal(row.state, "failed");
  const e = semanticError(
    await g.syn.call("embed.batch", { texts: TEXTS, model: "remote", accept_declared: true }),
  );
  assert.equal(e.code, "provider_protocol_violation");
  assert.equal(e.details.reason, "normalization_mismatch");
  assert.match(e.message, /set "normalize": true/);
  await assert.rejects(
    gateway(p.base, {}, { pooling: "cls" }),
    /pooling' is a setting of a local lane/,
  );
});

Deno.test("field reports F1/F6 on the remote lane: an input with unknown tokens, or one the provider refuses (NaN), is that item's error and the rest is served", async () => {
  const nanDir = `${MODELS}/synapse-tiny-embed-nan`;
  const t = await startSynapse({ preload_models: [preload(nanDir, "tiny")] });
  const server = serveHttp(t.syn, { log: nullLog });
  try {
    await ready(t.syn, "tiny");
    await using g = await gateway(`http://127.0.0.1:${server.port}`, {}, {
      tokenizer_path: `${nanDir}/tokenizer.json`,
    });
    const items = [
      { id: "ok", text: "hello" },
      { id: "poison", text: "poison" },
      { id: "emoji", text: "x\u{1F600}y" },
    ];
    const local = resultOf(await t.syn.call("embed.batch", { items, model: "tiny" }));
    const remote = resultOf(
      await g.syn.call("embed.batch", { items, model: "remote", accept_declared: true }),
    );
    assert.deepEqual(remote.vectors.map((v: { id: string }) => v.id), ["ok"]);
    assert.deepEqual(
      remote.vectors[0].vector,
      local.vectors.find((v: { id: string }) => v.id === "ok").vector,
    );
    const errors = Object.fromEntries(
      remote.item_errors.map((e: { id: string; error: { code: string; details: unknown } }) => [
        e.id,
        e.error,
      ]),
    );
    assert.equal(errors.poison.code, "engine_output_invalid", JSON.stringify(errors.poison));
    assert.equal(errors.emoji.code, "op_not_supported_for_remote");
    assert.equal(errors.emoji.details.reason, "unknown_tokens");
  } finally {
    await server.shutdown();
    await t[Symbol.asyncDispose]();
  }
});

Deno.test("a Synapse provider that now serves another model under the name refuses the recorded fingerprint: remote_deployment_changed", async () => {
  await using p = await provider();
  const other = await startSynapse({
    preload_models: [preload(`${MODELS}/synapse-tiny-embed-f16`, "tiny")],
  });
  const otherServer = serveHttp(other.syn, { log: nullLog });
  const proxy = new FaultProxy(p.base);
  try {
    await ready(other.syn, "tiny");
    await using g = await gateway(proxy.base);
    resultOf(
      await g.syn.call("embed.batch", { texts: TEXTS, model: "remote", accept_declared: true }),
    );
    proxy.upstream = `http://127.0.0.1:${otherServer.port}`;
    const e = semanticError(
      await g.syn.call("embed.batch", { texts: TEXTS, model: "remote", accept_declared: true }),
    );
    assert.equal(e.code, "remote_deployment_changed", JSON.stringify(e));
    assert.equal(e.details.provider, "peer");
    assert.match(e.details.expected_fingerprint, /^[0-9a-f]{64}$/);
  } finally {
    await proxy.close();
    await otherServer.shutdown();
    await other[Symbol.asyncDispose]();
  }
});
