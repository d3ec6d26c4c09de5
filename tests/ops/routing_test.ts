/**
 * Routing by fingerprint (issue 19 item 3; lib/ops/_resolve_model.ts): `target_fingerprint`
 * picks the loaded model that serves it, `required_fingerprint` and `required_epoch` refuse
 * before any work (nothing tokenized, nothing admitted), through embed.query, embed.batch
 * (inline and job), rerank.score and the refusal shapes.
 */
import assert from "node:assert/strict";
import {
  channelError,
  MODELS,
  preload,
  resultOf,
  semanticError,
  startSynapse,
} from "../_helpers.ts";
import type { TestSynapse } from "../_helpers.ts";
import { serveHttp } from "../../lib/doors/http/server.ts";
import { nullLog } from "../../lib/log/log.ts";

const EMBED = `${MODELS}/synapse-tiny-embed`;
const RERANK = `${MODELS}/synapse-tiny-rerank`;
const LLAMA = `${MODELS}/synapse-tiny-llama`;

/** Two copies of the tiny embed model whose `max_tokens` differ: two fingerprints. */
function twoEmbeds(extra: Record<string, unknown> = {}) {
  return startSynapse({
    preload_models: [
      preload(EMBED, "e-short", { task: "embed", max_tokens: 32 }),
      preload(EMBED, "e-long", { task: "embed", max_tokens: 64 }),
      preload(RERANK, "rr", { task: "rerank" }),
    ],
    ...extra,
  }, { log: nullLog });
}

async function fingerprints(t: TestSynapse): Promise<Record<string, string>> {
  const list = resultOf(await t.syn.call("models.list", {}));
  const out: Record<string, string> = {};
  for (const m of list.models) out[m.model_id] = m.fingerprints[0];
  return out;
}

/** Counts tokenizer calls and admissions on the instance (the real pool and admission, wrapped). */
function countWork(t: TestSynapse): { tokenized: () => number; admitted: () => number } {
  const ctx = t.syn.context;
  let tokenized = 0;
  let admitted = 0;
  const pool = ctx.tokenizers;
  const items = pool.encodeItems.bind(pool);
  const pairs = pool.encodePairs.bind(pool);
  pool.encodeItems = (...a: Parameters<typeof items>) => (tokenized++, items(...a));
  pool.encodePairs = (...a: Parameters<typeof pairs>) => (tokenized++, pairs(...a));
  const admission = ctx.admission;
  const admit = admission.admit.bind(admission);
  admission.admit = (...a: Parameters<typeof admit>) => (admitted++, admit(...a));
  return { tokenized: () => tokenized, admitted: () => admitted };
}

Deno.test("target_fingerprint routes to the one of two loaded models that serves it", async () => {
  await using t = await twoEmbeds();
  const fp = await fingerprints(t);
  assert.notEqual(fp["e-short"], fp["e-long"], "max_tokens is part of the fingerprint");
  for (const id of ["e-short", "e-long"]) {
    const q = resultOf(
      await t.syn.call("embed.query", { text: "hello world", target_fingerprint: fp[id] }),
    );
    assert.equal(q.model_id, id);
    assert.equal(q.fingerprint, fp[id]);
    const b = resultOf(
      await t.syn.call("embed.batch", { texts: ["a", "b"], target_fingerprint: fp[id] }),
    );
    assert.equal(b.model_id, id);
    assert.equal(b.fingerprint, fp[id]);
  }
  // Without a target the default (the first loaded) serves.
  assert.equal(resultOf(await t.syn.call("embed.query", { text: "x" })).model_id, "e-short");
  // A model named with its own fingerprint as the target is served.
  const named = resultOf(
    await t.syn.call("embed.query", {
      text: "x",
      model: "e-long",
      target_fingerprint: fp["e-long"],
    }),
  );
  assert.equal(named.model_id, "e-long");
  // Target and required agree: served.
  const both = resultOf(
    await t.syn.call("embed.query", {
      text: "x",
      target_fingerprint: fp["e-long"],
      required_fingerprint: fp["e-long"],
    }),
  );
  assert.equal(both.model_id, "e-long");
  // rerank routes the same way.
  const rr = resultOf(
    await t.syn.call("rerank.score", { query: "q", candidates: ["a"], target_fingerprint: fp.rr }),
  );
  assert.equal(rr.model_id, "rr");
  assert.equal(rr.fingerprint, fp.rr);
});

Deno.test("fingerprints are case-blind: upper-case hex routes, requires, declares and checks as its lowercase form", async () => {
  await using t = await twoEmbeds({ alias_admin_enabled: true });
  const fp = await fingerprints(t);
  const up = fp["e-long"]!.toUpperCase();
  const q = resultOf(
    await t.syn.call("embed.query", {
      text: "x",
      target_fingerprint: up,
      required_fingerprint: up,
    }),
  );
  assert.equal(q.model_id, "e-long");
  assert.equal(q.fingerprint, fp["e-long"]);
  // An alias declared in upper case is stored, and answered, in lowercase.
  const other = "ab".repeat(32);
  const d = resultOf(
    await t.syn.call("alias.declare", { left: other.toUpperCase(), right: up }),
  );
  assert.deepEqual([d.fingerprint_a, d.fingerprint_b], [fp["e-long"]!, other].sort());
  const again = resultOf(await t.syn.call("alias.declare", { left: other, right: fp["e-long"] }));
  assert.equal(again.changed, false, "the lowercase pair is the same row");
  const check = resultOf(
    await t.syn.call("aliases.check_index", {
      index_fingerprint: other.toUpperCase(),
      provenance_set: [up],
    }),
  );
  assert.equal(check.status, "valid");
  // A compat door's header takes upper case too.
  const server = serveHttp(t.syn, { log: nullLog });
  try {
    const res = await fetch(`http://127.0.0.1:${server.port}/v1/embeddings`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-synapse-target-fingerprint": up },
      body: JSON.stringify({ input: ["apples"] }),
    });
    const body = await res.json();
    assert.equal(res.status, 200, JSON.stringify(body));
    assert.equal(body.model, "e-long");
    assert.equal(res.headers.get("x-synapse-fingerprint"), fp["e-long"]);
  } finally {
    await server.shutdown();
  }
  // What is not 64 hex is a malformed param naming the field, never a routing miss.
  for (const bad of [`${up.slice(0, 63)}G`, "abc", `${up}0`]) {
    for (const field of ["target_fingerprint", "required_fingerprint"]) {
      const e = channelError(await t.syn.call("embed.query", { text: "x", [field]: bad }));
      assert.equal(e.code, "invalid_request", `${field} ${bad}`);
      assert.match(e.message, new RegExp(`${field}.*not a fingerprint \\(64 hex characters\\)`));
    }
  }
});

Deno.test("a target no model serves is substitution_rejected naming what is served, before any work", async () => {
  await using t = await twoEmbeds();
  const fp = await fingerprints(t);
  const work = countWork(t);
  const nope = "f".repeat(64);
  const err = semanticError(
    await t.syn.call("embed.query", { text: "hello", target_fingerprint: nope }),
  );
  assert.equal(err.code, "substitution_rejected");
  assert.equal(err.details.target_fingerprint, nope);
  assert.equal(err.details.task, "embed");
  assert.equal(err.details.reason, "no_match");
  assert.deepEqual(err.details.served, [
    { model_id: "e-short", fingerprint: fp["e-short"] },
    { model_id: "e-long", fingerprint: fp["e-long"] },
  ]);
  assert.match(err.message, /no ready embed model serves it/);
  // A rerank model's fingerprint does not serve embed.
  const cross = semanticError(
    await t.syn.call("embed.batch", { texts: ["a"], target_fingerprint: fp.rr }),
  );
  assert.equal(cross.code, "substitution_rejected");
  assert.equal(cross.details.reason, "no_match");
  // A named model that does not serve the target: refused, naming both.
  const named = semanticError(
    await t.syn.call("embed.query", {
      text: "x",
      model: "e-short",
      target_fingerprint: fp["e-long"],
    }),
  );
  assert.equal(named.code, "substitution_rejected");
  assert.deepEqual(named.details, {
    model_id: "e-short",
    fingerprint: fp["e-short"],
    target_fingerprint: fp["e-long"],
    reason: "fingerprint_mismatch",
  });
  // allow_equivalent with no alias row changes nothing.
  const eq = semanticError(
    await t.syn.call("embed.query", {
      text: "x",
      target_fingerprint: nope,
      allow_equivalent: true,
    }),
  );
  assert.equal(eq.code, "substitution_rejected");
  assert.equal(eq.details.reason, "no_match");
  assert.equal(work.tokenized(), 0);
  assert.equal(work.admitted(), 0);
});

Deno.test("a mismatched required_fingerprint refuses before any work: embed, batch job, rerank", async () => {
  await using t = await twoEmbeds({ inline: { max_items: 4 } });
  const fp = await fingerprints(t);
  const work = countWork(t);
  const before = resultOf(await t.syn.call("admission.status", {}));
  const wrong = fp["e-long"];
  const q = semanticError(
    await t.syn.call("embed.query", { text: "hello", required_fingerprint: wrong }),
  );
  assert.equal(q.code, "substitution_rejected");
  assert.deepEqual(q.details, {
    model_id: "e-short",
    fingerprint: fp["e-short"],
    required_fingerprint: wrong,
    reason: "fingerprint_mismatch",
  });
  // Over inline.max_items with a request_key this would be a job: no job is minted.
  const job = semanticError(
    await t.syn.call("embed.batch", {
      texts: ["a", "b", "c", "d", "e", "f"],
      request_key: "k1",
      required_fingerprint: wrong,
    }),
  );
  assert.equal(job.code, "substitution_rejected");
  const rr = semanticError(
    await t.syn.call("rerank.score", {
      query: "q",
      candidates: ["a", "b"],
      required_fingerprint: wrong,
    }),
  );
  assert.equal(rr.code, "substitution_rejected");
  assert.equal(rr.details.model_id, "rr");
  const rrJob = semanticError(
    await t.syn.call("rerank.score", {
      query: "q",
      candidates: ["a", "b", "c", "d", "e"],
      request_key: "k2",
      required_fingerprint: wrong,
    }),
  );
  assert.equal(rrJob.code, "substitution_rejected");
  // A target routed to e-long, required e-short: refused.
  const both = semanticError(
    await t.syn.call("embed.query", {
      text: "x",
      target_fingerprint: fp["e-long"],
      required_fingerprint: fp["e-short"],
    }),
  );
  assert.equal(both.code, "substitution_rejected");
  assert.equal(both.details.model_id, "e-long");
  assert.equal(work.tokenized(), 0, "nothing was tokenized");
  assert.equal(work.admitted(), 0, "nothing was admitted");
  const after = resultOf(await t.syn.call("admission.status", {}));
  assert.equal(after.jobs_minted, before.jobs_minted);
  assert.deepEqual(after.refusals, before.refusals);
  // The same requests with the right fingerprint are served (and do tokenize and admit).
  const ok = resultOf(
    await t.syn.call("embed.query", { text: "hello", required_fingerprint: fp["e-short"] }),
  );
  assert.equal(ok.fingerprint, fp["e-short"]);
  const okRr = resultOf(
    await t.syn.call("rerank.score", {
      query: "q",
      candidates: ["a", "b"],
      required_fingerprint: fp.rr,
    }),
  );
  assert.equal(okRr.scores.length, 2);
  assert.ok(work.tokenized() >= 2);
  assert.ok(work.admitted() >= 2);
});

Deno.test("required_epoch above the alias table's epoch refuses (table_epoch_behind); at or below it serves", async () => {
  await using t = await startSynapse();
  const work = countWork(t);
  const epoch = resultOf(await t.syn.call("models.list", {})).table_epoch;
  for (
    const [method, params] of [
      ["embed.query", { text: "x" }],
      ["embed.batch", { texts: ["x"] }],
      ["rerank.score", { query: "q", candidates: ["a"] }],
    ] as const
  ) {
    const err = semanticError(
      await t.syn.call(method, { ...params, required_epoch: epoch + 1 }),
    );
    assert.equal(err.code, "substitution_rejected", method);
    assert.deepEqual(err.details, {
      reason: "table_epoch_behind",
      table_epoch: epoch,
      required_epoch: epoch + 1,
    });
    assert.equal(err.retryable ?? false, false);
  }
  assert.equal(work.tokenized(), 0);
  assert.equal(work.admitted(), 0);
  const ok = resultOf(await t.syn.call("embed.query", { text: "x", required_epoch: epoch }));
  assert.equal(ok.table_epoch, epoch);
  resultOf(await t.syn.call("embed.query", { text: "x", required_epoch: 0 }));
  // A negative or fractional epoch is a malformed param.
  const bad = channelError(await t.syn.call("embed.query", { text: "x", required_epoch: -1 }));
  assert.equal(bad.code, "invalid_request");
  assert.match(bad.message, /required_epoch/);
});

/** The tiny llama as an embed model: a lane that needs a certificate (none on a fresh store). */
function llamaEmbed(modelId: string) {
  return {
    engine: "llama",
    model_path: LLAMA,
    tokenizer_path: `${LLAMA}/tokenizer.json`,
    task: "embed",
    model_id: modelId,
    pooling: "mean",
    normalize: true,
    max_tokens: 512,
  };
}

Deno.test("tokenize and detokenize route by fingerprint across tasks (native and TEI headers), with no certification gate", async () => {
  await using t = await startSynapse({
    certification: "require",
    preload_models: [
      preload(EMBED, "e-short", { task: "embed", max_tokens: 32 }),
      preload(EMBED, "e-long", { task: "embed", max_tokens: 64 }),
      preload(RERANK, "rr", { task: "rerank" }),
      llamaEmbed("e-llama"),
    ],
  }, { log: nullLog });
  await t.syn.modelsSettled;
  const fp = await fingerprints(t);
  for (const id of ["e-long", "rr", "e-llama"]) {
    const tok = resultOf(
      await t.syn.call("tokenize", { texts: ["hello world"], target_fingerprint: fp[id] }),
    );
    assert.equal(tok.model_id, id);
    assert.equal(tok.fingerprint, fp[id]);
    const de = resultOf(await t.syn.call("detokenize", { ids: [1], target_fingerprint: fp[id] }));
    assert.equal(de.model_id, id);
  }
  // The uncertified llama lane refuses embed in require mode, but its tokenizer answers.
  const refused = semanticError(
    await t.syn.call("embed.query", { text: "x", target_fingerprint: fp["e-llama"] }),
  );
  assert.equal(refused.code, "not_certified");
  // A named model must serve a required fingerprint; a target nothing serves is refused.
  const miss = semanticError(
    await t.syn.call("tokenize", {
      model: "e-short",
      texts: ["a"],
      required_fingerprint: fp["e-long"],
    }),
  );
  assert.equal(miss.code, "substitution_rejected");
  const none = semanticError(
    await t.syn.call("tokenize", { texts: ["a"], target_fingerprint: "0".repeat(64) }),
  );
  assert.equal(none.code, "substitution_rejected");
  assert.equal(none.details.reason, "no_match");
  const behind = semanticError(
    await t.syn.call("detokenize", { ids: [1], required_epoch: 1_000_000 }),
  );
  assert.equal(behind.details.reason, "table_epoch_behind");
  // TEI's /tokenize takes the routing headers like every model-serving door.
  const server = serveHttp(t.syn, { log: nullLog });
  try {
    const res = await fetch(`http://127.0.0.1:${server.port}/tokenize`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "x-synapse-target-fingerprint": fp["e-long"]!,
      },
      body: JSON.stringify({ inputs: "hello world" }),
    });
    assert.equal(res.status, 200, await res.clone().text());
    assert.equal(res.headers.get("x-synapse-fingerprint"), fp["e-long"]);
    await res.body?.cancel();
    const bad = await fetch(`http://127.0.0.1:${server.port}/tokenize`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "x-synapse-target-fingerprint": "0".repeat(64),
      },
      body: JSON.stringify({ inputs: "hello world" }),
    });
    assert.equal(bad.status, 422);
    await bad.body?.cancel();
  } finally {
    await server.shutdown();
  }
});

Deno.test("a routed target passes the certification gate: not_certified in require mode, served uncertified in warn", async () => {
  for (const mode of ["require", "warn"] as const) {
    await using t = await startSynapse({
      certification: mode,
      preload_models: [preload(EMBED, "e-ort", { task: "embed" }), llamaEmbed("e-llama")],
    });
    await t.syn.modelsSettled;
    const fp = await fingerprints(t);
    const r = await t.syn.call("embed.query", { text: "x", target_fingerprint: fp["e-llama"] });
    if (mode === "require") {
      const err = semanticError(r);
      assert.equal(err.code, "not_certified");
      assert.equal(err.details.model_id, "e-llama");
    } else {
      const ok = resultOf(r);
      assert.equal(ok.model_id, "e-llama");
      assert.equal(ok.fingerprint, fp["e-llama"]);
      assert.equal(ok.provenance.certified, false);
    }
    // The reference lane routes either way.
    const ort = resultOf(
      await t.syn.call("embed.query", { text: "x", target_fingerprint: fp["e-ort"] }),
    );
    assert.equal(ort.model_id, "e-ort");
    assert.equal(ort.provenance.certified, true);
  }
});

/** A probe row's evidence (the shape lib/ops/probe.ts writes). */
function probeEvidence(laneId: string, referenceId: string, t: TestSynapse) {
  return {
    source: "probe" as const,
    machine_profile_hash: t.syn.context.machineProfileHash,
    lane_id: laneId,
    model_id: laneId,
    reference_lane_id: referenceId,
    reference_model_id: referenceId,
    mean_cosine: 0.99999,
    min_cosine: 0.9999,
    mean_cosine_threshold: 0.9999,
    min_cosine_threshold: 0.999,
    probe_job_id: null,
  };
}

Deno.test("allow_equivalent routes a target to a model equivalent by a probe row; declared rows need accept_declared", async () => {
  await using t = await twoEmbeds();
  const fp = await fingerprints(t);
  const ctx = t.syn.context;
  // Two fingerprints nothing here serves: one probe-equivalent to e-short, one declared
  // equivalent to e-long.
  const probed = "a".repeat(64);
  const declared = "b".repeat(64);
  ctx.aliases.declare(probed, fp["e-short"]!, probeEvidence("e-short", "elsewhere", t), ctx.now());
  ctx.aliases.declare(declared, fp["e-long"]!, { source: "declared", note: "test" }, ctx.now());
  const epoch = ctx.tableEpoch();
  assert.ok(epoch >= 2);
  const work = countWork(t);

  // Without allow_equivalent: refused, saying an equivalent is served.
  const no = semanticError(
    await t.syn.call("embed.query", { text: "x", target_fingerprint: probed }),
  );
  assert.equal(no.code, "substitution_rejected");
  assert.equal(no.details.reason, "equivalent_not_allowed");
  assert.match(no.message, /allow_equivalent: true/);
  // A probe row counts with allow_equivalent alone: served by e-short under its own fingerprint,
  // equivalent_to naming the target.
  const yes = resultOf(
    await t.syn.call("embed.query", {
      text: "x",
      target_fingerprint: probed,
      allow_equivalent: true,
      required_epoch: epoch,
    }),
  );
  assert.equal(yes.model_id, "e-short");
  assert.equal(yes.fingerprint, fp["e-short"]);
  assert.ok(yes.equivalent_to.includes(probed), JSON.stringify(yes.equivalent_to));
  assert.equal(yes.table_epoch, epoch);

  // A declared row: refused with allow_equivalent alone (declared_only), served with
  // accept_declared too.
  const tokenizedBefore = work.tokenized();
  const decl = semanticError(
    await t.syn.call("embed.query", {
      text: "x",
      target_fingerprint: declared,
      allow_equivalent: true,
    }),
  );
  assert.equal(decl.code, "substitution_rejected");
  assert.equal(decl.details.reason, "declared_only");
  assert.match(decl.message, /accept_declared: true/);
  // accept_declared without allow_equivalent admits nothing.
  const onlyAccept = semanticError(
    await t.syn.call("embed.query", {
      text: "x",
      target_fingerprint: declared,
      accept_declared: true,
    }),
  );
  assert.equal(onlyAccept.details.reason, "declared_only");
  assert.equal(work.tokenized(), tokenizedBefore, "the refusals did no work");
  const both = resultOf(
    await t.syn.call("embed.batch", {
      texts: ["x", "y"],
      target_fingerprint: declared,
      allow_equivalent: true,
      accept_declared: true,
    }),
  );
  assert.equal(both.model_id, "e-long");
  assert.equal(both.fingerprint, fp["e-long"]);
  assert.ok(both.equivalent_to.includes(declared));

  // required_fingerprint: a named model satisfies an equivalent only when allowed.
  const req = semanticError(
    await t.syn.call("embed.query", { text: "x", model: "e-short", required_fingerprint: probed }),
  );
  assert.equal(req.details.reason, "equivalent_not_allowed");
  assert.equal(req.details.required_fingerprint, probed);
  const reqOk = resultOf(
    await t.syn.call("embed.query", {
      text: "x",
      model: "e-short",
      required_fingerprint: probed,
      allow_equivalent: true,
    }),
  );
  assert.equal(reqOk.fingerprint, fp["e-short"]);
  const reqDecl = semanticError(
    await t.syn.call("embed.query", {
      text: "x",
      model: "e-long",
      required_fingerprint: declared,
      allow_equivalent: true,
    }),
  );
  assert.equal(reqDecl.details.reason, "declared_only");

  // An exact match comes before an equivalent: e-short probe-equivalent to e-long now, a target
  // of e-long still serves e-long.
  ctx.aliases.declare(
    fp["e-short"]!,
    fp["e-long"]!,
    probeEvidence("e-short", "e-long", t),
    ctx.now(),
  );
  const exact = resultOf(
    await t.syn.call("embed.query", {
      text: "x",
      target_fingerprint: fp["e-long"],
      allow_equivalent: true,
    }),
  );
  assert.equal(exact.model_id, "e-long");
  assert.ok(exact.equivalent_to.includes(fp["e-short"]));

  // Retracted: the equivalent no longer serves the target, and an old required_epoch is met.
  ctx.aliases.retract(probed, fp["e-short"]!, ctx.now());
  const gone = semanticError(
    await t.syn.call("embed.query", {
      text: "x",
      target_fingerprint: probed,
      allow_equivalent: true,
    }),
  );
  assert.equal(gone.code, "substitution_rejected");
  assert.equal(gone.details.reason, "no_match");
  const newer = semanticError(
    await t.syn.call("embed.query", { text: "x", required_epoch: ctx.tableEpoch() + 1 }),
  );
  assert.equal(newer.details.reason, "table_epoch_behind");
});

Deno.test("routing applies to rerank.score: an equivalent target routes to the rerank model", async () => {
  await using t = await twoEmbeds();
  const fp = await fingerprints(t);
  const ctx = t.syn.context;
  const other = "c".repeat(64);
  ctx.aliases.declare(other, fp.rr!, probeEvidence("rr", "elsewhere", t), ctx.now());
  const no = semanticError(
    await t.syn.call("rerank.score", { query: "q", candidates: ["a"], target_fingerprint: other }),
  );
  assert.equal(no.details.reason, "equivalent_not_allowed");
  const yes = resultOf(
    await t.syn.call("rerank.score", {
      query: "q",
      candidates: ["a"],
      target_fingerprint: other,
      allow_equivalent: true,
    }),
  );
  assert.equal(yes.model_id, "rr");
  assert.ok(yes.equivalent_to.includes(other));
});

Deno.test("alias.declare → target of the equivalent served with allow_equivalent + accept_declared (native and OpenAI headers) → retract → refused", async () => {
  await using t = await twoEmbeds({ alias_admin_enabled: true });
  const fp = await fingerprints(t);
  const other = "9".repeat(64); // an index built elsewhere, under a fingerprint nothing here serves
  const declared = resultOf(
    await t.syn.call("alias.declare", {
      left: other,
      right: fp["e-long"],
      evidence: { note: "t" },
    }),
  );
  assert.equal(declared.changed, true);
  const epoch = declared.table_epoch;
  const server = serveHttp(t.syn, { log: nullLog });
  try {
    const base = `http://127.0.0.1:${server.port}`;
    const openAi = async (headers: Record<string, string>) => {
      const res = await fetch(`${base}/v1/embeddings`, {
        method: "POST",
        headers: { "content-type": "application/json", ...headers },
        body: JSON.stringify({ input: ["apples"] }),
      });
      return { res, body: await res.json() };
    };
    const native = (more: Record<string, unknown>) =>
      t.syn.call("embed.query", { text: "apples", target_fingerprint: other, ...more });

    // Without allow_equivalent, and with it alone (a declared row): refused.
    for (const more of [{}, { allow_equivalent: true }]) {
      const e = semanticError(await native(more));
      assert.equal(e.code, "substitution_rejected");
      assert.equal(e.details.reason, "declared_only");
    }
    const h0 = await openAi({
      "x-synapse-target-fingerprint": other,
      "x-synapse-allow-equivalent": "true",
    });
    assert.equal(h0.res.status, 422);
    assert.equal(h0.body.error.code, "substitution_rejected");
    // Accepted: served by e-long under its own fingerprint, equivalent_to naming the target.
    const ok = resultOf(
      await native({ allow_equivalent: true, accept_declared: true, required_epoch: epoch }),
    );
    assert.equal(ok.model_id, "e-long");
    assert.equal(ok.fingerprint, fp["e-long"]);
    assert.deepEqual(ok.equivalent_to, [other]);
    assert.equal(ok.table_epoch, epoch);
    const h1 = await openAi({
      "x-synapse-target-fingerprint": other,
      "x-synapse-allow-equivalent": "true",
      "x-synapse-accept-declared": "true",
      "x-synapse-required-epoch": String(epoch),
    });
    assert.equal(h1.res.status, 200, JSON.stringify(h1.body));
    assert.equal(h1.body.model, "e-long");
    assert.equal(h1.res.headers.get("x-synapse-fingerprint"), fp["e-long"]);
    assert.deepEqual(h1.body.synapse.equivalent_to, [other]);
    const tooNew = await openAi({ "x-synapse-required-epoch": String(epoch + 1) });
    assert.equal(tooNew.res.status, 422);

    // Retracted: the same request is refused (the epoch moved on).
    const retracted = resultOf(
      await t.syn.call("alias.retract", { left: other, right: fp["e-long"] }),
    );
    assert.equal(retracted.table_epoch, epoch + 1);
    const gone = semanticError(await native({ allow_equivalent: true, accept_declared: true }));
    assert.equal(gone.code, "substitution_rejected");
    assert.equal(gone.details.reason, "no_match");
    const h2 = await openAi({
      "x-synapse-target-fingerprint": other,
      "x-synapse-allow-equivalent": "true",
      "x-synapse-accept-declared": "true",
    });
    assert.equal(h2.res.status, 422);
  } finally {
    await server.shutdown();
  }
});

Deno.test("a probe-measured alias routes with allow_equivalent alone: the fp32 index's target served by the certified fp16 lane once the fp32 model is unloaded", async () => {
  const F16 = `${MODELS}/synapse-tiny-embed-f16`;
  await using t = await startSynapse({
    certification: "require",
    preload_models: [
      preload(EMBED, "tiny", { task: "embed" }),
      preload(F16, "tiny-f16", { task: "embed", reference_model: "tiny" }),
    ],
  }, { log: nullLog });
  await t.syn.modelsSettled;
  const fp = await fingerprints(t);
  assert.notEqual(fp.tiny, fp["tiny-f16"]);
  // Uncertified: the f16 lane is refused even by its own fingerprint.
  const before = semanticError(
    await t.syn.call("embed.query", { text: "x", target_fingerprint: fp["tiny-f16"] }),
  );
  assert.equal(before.code, "not_certified");
  // The probe certifies it and, at the alias bar, writes a probe row between the two.
  const job = resultOf(await t.syn.call("probe.start", { models: ["tiny-f16"] }));
  for (const hungAt = Date.now() + 600_000;;) {
    const s = resultOf(await t.syn.call("probe.status", { job_id: job.job_id }));
    if (["done", "failed_transient", "failed_permanent"].includes(s.state)) {
      assert.equal(s.state, "done", JSON.stringify(s));
      break;
    }
    assert.ok(Date.now() < hungAt, "the probe job did not end");
    await new Promise((r) => setTimeout(r, 25));
  }
  const eq = t.syn.context.aliases.equivalentsOf(fp.tiny!, t.syn.context.now());
  assert.deepEqual(eq, [{ fingerprint: fp["tiny-f16"], source: "probe" }]);
  // With both loaded, the exact match serves.
  const exact = resultOf(
    await t.syn.call("embed.query", {
      text: "x",
      target_fingerprint: fp.tiny,
      allow_equivalent: true,
    }),
  );
  assert.equal(exact.model_id, "tiny");
  // The fp32 model unloaded: its fingerprint is served by the equivalent, with allow_equivalent.
  resultOf(await t.syn.call("model.unload", { model_id: "tiny" }));
  const no = semanticError(
    await t.syn.call("embed.query", { text: "x", target_fingerprint: fp.tiny }),
  );
  assert.equal(no.code, "substitution_rejected");
  assert.equal(no.details.reason, "equivalent_not_allowed");
  const yes = resultOf(
    await t.syn.call("embed.query", {
      text: "x",
      target_fingerprint: fp.tiny,
      allow_equivalent: true,
    }),
  );
  assert.equal(yes.model_id, "tiny-f16");
  assert.equal(yes.fingerprint, fp["tiny-f16"]);
  assert.equal(yes.provenance.certified, true);
  assert.deepEqual(yes.equivalent_to, [fp.tiny]);
  // required_fingerprint of the fp32 index: satisfied by the equivalent only when allowed.
  const req = semanticError(
    await t.syn.call("embed.query", { text: "x", required_fingerprint: fp.tiny }),
  );
  assert.equal(req.details.reason, "equivalent_not_allowed");
  const reqOk = resultOf(
    await t.syn.call("embed.query", {
      text: "x",
      required_fingerprint: fp.tiny,
      allow_equivalent: true,
    }),
  );
  assert.equal(reqOk.model_id, "tiny-f16");
});

Deno.test("among equivalents a certified lane is preferred; an uncertified only candidate is not_certified in require mode", async () => {
  const F16 = `${MODELS}/synapse-tiny-embed-f16`;
  for (const mode of ["require", "warn"] as const) {
    await using t = await startSynapse({
      certification: mode,
      preload_models: [
        // Loaded first, uncertified (no probe has run): it would be first in load order.
        preload(F16, "tiny-f16", { task: "embed", reference_model: "tiny" }),
        preload(EMBED, "tiny", { task: "embed" }),
      ],
    }, { log: nullLog });
    await t.syn.modelsSettled;
    const fp = await fingerprints(t);
    const ctx = t.syn.context;
    const both = "1".repeat(64);
    const onlyF16 = "2".repeat(64);
    ctx.aliases.declare(both, fp["tiny-f16"]!, probeEvidence("tiny-f16", "x", t), ctx.now());
    ctx.aliases.declare(both, fp.tiny!, probeEvidence("tiny", "x", t), ctx.now());
    ctx.aliases.declare(onlyF16, fp["tiny-f16"]!, probeEvidence("tiny-f16", "x", t), ctx.now());
    const r = resultOf(
      await t.syn.call("embed.query", {
        text: "x",
        target_fingerprint: both,
        allow_equivalent: true,
      }),
    );
    assert.equal(r.model_id, "tiny", mode);
    assert.equal(r.provenance.certified, true);
    const only = await t.syn.call("embed.query", {
      text: "x",
      target_fingerprint: onlyF16,
      allow_equivalent: true,
    });
    if (mode === "require") {
      const e = semanticError(only);
      assert.equal(e.code, "not_certified");
      assert.equal(e.details.model_id, "tiny-f16");
    } else {
      const ok = resultOf(only);
      assert.equal(ok.model_id, "tiny-f16");
      assert.equal(ok.provenance.certified, false);
    }
  }
});

Deno.test("the default model is known a test model when its load starts, so the order of loads decides it, not their ends", async () => {
  await using t = await startSynapse({
    certification: "warn",
    preload_models: [preload(EMBED, "tiny", { task: "embed" })],
  }, { log: nullLog });
  await t.syn.modelsSettled;
  const { sourceFromPreload } = await import("../../lib/models/sources.ts");
  const { defaultModelOf } = await import("../../lib/models/model_registry.ts");
  const loading = t.syn.registry.load(
    sourceFromPreload({
      ...preload(`${MODELS}/synapse-tiny-embed-f16`, "f16", { task: "embed" }),
      pooling: "mean",
      normalize: true,
    }),
  );
  // Still loading: labelled from its config.json already, it never takes over from 'tiny'.
  const entry = t.syn.registry.list().find((m) => m.modelId === "f16")!;
  assert.equal(entry.state, "loading");
  assert.equal(entry.testModel, true);
  assert.equal(defaultModelOf(t.syn.registry.list(), "embed")?.modelId, "tiny");
  await loading;
  assert.equal(defaultModelOf(t.syn.registry.list(), "embed")?.modelId, "tiny");
  const r = resultOf(await t.syn.call("embed.query", { text: "x" }));
  assert.equal(r.model_id, "tiny");
});

Deno.test("the default model passes over one the certification gate refuses when another of the task can serve; alone, its refusal", async () => {
  const F16 = `${MODELS}/synapse-tiny-embed-f16`;
  for (const mode of ["require", "warn"] as const) {
    await using t = await startSynapse({
      certification: mode,
      preload_models: [
        // First in preload order, uncertified (no probe has run).
        preload(F16, "tiny-f16", { task: "embed", reference_model: "tiny" }),
        preload(EMBED, "tiny", { task: "embed" }),
      ],
    }, { log: nullLog });
    await t.syn.modelsSettled;
    const r = resultOf(await t.syn.call("embed.query", { text: "x" }));
    const servedBy = resultOf(await t.syn.call("models.list", {})).served_by.embed;
    assert.equal(servedBy, r.model_id, "models.list served_by names the model that serves");
    if (mode === "require") {
      assert.equal(r.model_id, "tiny", mode);
      assert.equal(r.provenance.certified, true);
    } else {
      // warn: the gate refuses nothing, so the first model serves, uncertified.
      assert.equal(r.model_id, "tiny-f16", mode);
      assert.equal(r.provenance.certified, false);
    }
    if (mode === "require") {
      resultOf(await t.syn.call("model.unload", { model_id: "tiny" }));
      const e = semanticError(await t.syn.call("embed.query", { text: "x" }));
      assert.equal(e.code, "not_certified");
      assert.equal(e.details.model_id, "tiny-f16");
    }
  }
});
