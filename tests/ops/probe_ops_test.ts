/**
 * The probe operations (docs/internals.md §1 `probe.*`) on a real Synapse: the tiny llama
 * embed lane refuses `not_certified` until `probe.start` (over HTTP with the owner key; without it
 * 401) certifies it, `probe.status` follows the job to `done`, `probe.report` lists the rows and
 * what serves, the same key attaches, other models under it conflict, a deadline fails the job and
 * the default key then admits a fresh one; and a probe job killed with SIGKILL mid-probe is
 * `failed_transient` `module_restarted` at the next boot, where its key admits a fresh job.
 */
import assert from "node:assert/strict";
import { DatabaseSync } from "node:sqlite";
import { serve } from "../cli/_launcher.ts";
import { MODELS, preload, resultOf, semanticError, startSynapse } from "../_helpers.ts";
import { channelError } from "../_helpers.ts";
import { serveHttp } from "../../lib/doors/http/server.ts";
import { newKey } from "../../lib/doors/http/owner_key.ts";
import type { Synapse } from "../../lib/synapse.ts";

const LLAMA = `${MODELS}/synapse-tiny-llama`;
const EMBED = `${MODELS}/synapse-tiny-embed`;

/** The tiny llama GGUF as an embed model: a lane that needs a certificate. */
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

const TERMINAL = new Set(["done", "failed_transient", "failed_permanent"]);

/** Polls probe.status until the job ends (10 minutes means hung); the states seen on the way. */
// deno-lint-ignore no-explicit-any
async function waitEnd(syn: Synapse, jobId: string): Promise<{ end: any; seen: any[] }> {
  const seen = [];
  for (const hungAt = Date.now() + 600_000; Date.now() < hungAt;) {
    const s = resultOf(await syn.call("probe.status", { job_id: jobId }));
    seen.push(s);
    if (TERMINAL.has(s.state)) return { end: s, seen };
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`probe job ${jobId} did not end`);
}

Deno.test("probe.start certifies the tiny llama lane: not_certified before, served with provenance.certified after; status, report, attach, conflict, refusals", async () => {
  await using t = await startSynapse({
    certification: "require",
    preload_models: [llamaEmbed("tiny-llama"), preload(EMBED, "tiny-embed")],
  });
  const { syn } = t;
  await syn.modelsSettled;

  // Before: the llama lane needs a certificate and has none; the ORT f32 lane is the reference.
  const refused = semanticError(
    await syn.call("embed.query", { text: "hello", model: "tiny-llama" }),
  );
  assert.equal(refused.code, "not_certified");
  assert.equal(refused.details.blocking_reason, "probe_required");
  assert.equal(refused.details.probe_command, "ck-synapse probe run --model tiny-llama");
  const before = resultOf(await syn.call("probe.report", {}));
  assert.equal(before.machine_profile_hash, syn.machineProfileHash);
  assert.equal(before.certification_mode, "require");
  assert.deepEqual(before.cert_rows, []);
  // deno-lint-ignore no-explicit-any
  const laneOf = (r: any, id: string) => r.lanes.find((l: any) => l.model_id === id);
  assert.deepEqual(
    {
      required: laneOf(before, "tiny-llama").certification_required,
      status: laneOf(before, "tiny-llama").certification_status,
      admission: laneOf(before, "tiny-llama").serving_admission,
      blocking: laneOf(before, "tiny-llama").blocking_reason,
      command: laneOf(before, "tiny-llama").probe_command,
    },
    {
      required: true,
      status: "probe_required",
      admission: "refused",
      blocking: "probe_required",
      command: "ck-synapse probe run --model tiny-llama",
    },
  );
  assert.equal(laneOf(before, "tiny-embed").certification_required, false);
  assert.equal(laneOf(before, "tiny-embed").certification_status, "reference");
  assert.equal(laneOf(before, "tiny-embed").serving_admission, "serving");

  // Refusals: bad params, an unknown model, an unknown job.
  assert.equal(
    channelError(await syn.call("probe.start", { models: ["tiny-llama"], lanes: 1 })).code,
    "invalid_request",
  );
  const unknown = semanticError(await syn.call("probe.start", { models: ["nope"] }));
  assert.equal(unknown.code, "unknown_model");
  assert.equal(unknown.details.model_id, "nope");
  const noJob = semanticError(await syn.call("probe.status", { job_id: "job_nope" }));
  assert.equal(noJob.code, "invalid_request");
  assert.match(noJob.message, /job_nope/);

  // Over HTTP: probe.start needs the owner's key (401 without), probe.report does not.
  const key = newKey();
  await using server = serveHttp(syn, { port: 0, ownerKey: key });
  const ops = `http://127.0.0.1:${server.port}/v1/ops`;
  const anon = await fetch(`${ops}/probe.start`, { method: "POST", body: "{}" });
  assert.equal(anon.status, 401);
  assert.equal((await anon.json()).code, "unauthorized");
  const openReport = await fetch(`${ops}/probe.report`, { method: "POST", body: "{}" });
  assert.equal(openReport.status, 200);
  await openReport.body?.cancel();
  const res = await fetch(`${ops}/probe.start`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}` },
    body: JSON.stringify({ models: ["tiny-llama"], request_key: "first-probe" }),
  });
  assert.equal(res.status, 200);
  const started = (await res.json()).result;
  assert.equal(started.attached, false);
  assert.equal(started.request_key, "first-probe");
  assert.deepEqual(
    // deno-lint-ignore no-explicit-any
    started.lanes.map((l: any) => [l.model_id, l.lane_id, l.status]),
    [["tiny-llama", "tiny-llama", "queued"]],
  );

  // The same key and models attach; other models under it conflict.
  const again = resultOf(
    await syn.call("probe.start", { models: ["tiny-llama"], request_key: "first-probe" }),
  );
  assert.equal(again.job_id, started.job_id);
  assert.equal(again.attached, true);
  const conflict = semanticError(
    await syn.call("probe.start", { models: ["tiny-embed"], request_key: "first-probe" }),
  );
  assert.equal(conflict.code, "idempotency_conflict");
  assert.equal(conflict.details.job_id, started.job_id);

  const { end, seen } = await waitEnd(syn, started.job_id);
  for (const s of seen.slice(0, -1)) {
    assert.ok(s.state === "queued" || s.state === "running", s.state);
    const lane = s.lanes[0];
    assert.ok(["queued", "running", "passed"].includes(lane.status), lane.status);
    if (lane.status === "running" && lane.step !== undefined) {
      assert.equal(typeof lane.step, "string");
      if (lane.total !== undefined) assert.ok(lane.done <= lane.total);
    }
  }
  assert.equal(end.state, "done", JSON.stringify(end));
  assert.equal(end.error, undefined);
  const lane = end.lanes[0];
  assert.equal(lane.status, "passed", JSON.stringify(lane));
  assert.equal(lane.failed_checks, undefined);
  assert.ok(lane.duration_ms > 0);
  // No ONNX counterpart: certified by self-consistency, saying which checks it lacked.
  assert.deepEqual(lane.checks_lacking, [{ id: "reference_parity", reason: "no_reference_lane" }]);

  // After: served, and the answer says so.
  const served = resultOf(await syn.call("embed.query", { text: "hello", model: "tiny-llama" }));
  assert.equal(served.provenance.certified, true);
  assert.equal(served.vectors.length, 1);
  const reference = resultOf(
    await syn.call("embed.query", { text: "hello", model: "tiny-embed" }),
  );
  assert.equal(reference.provenance.certified, true);

  const after = resultOf(await syn.call("probe.report", {}));
  assert.equal(laneOf(after, "tiny-llama").certification_status, "certified");
  assert.equal(laneOf(after, "tiny-llama").serving_admission, "serving");
  assert.equal(laneOf(after, "tiny-llama").blocking_reason, undefined);
  assert.equal(after.cert_rows.length, 1);
  const row = after.cert_rows[0];
  assert.equal(row.model_id, "tiny-llama");
  assert.equal(row.status, "certified");
  assert.equal(row.machine_profile_hash, syn.machineProfileHash);
  assert.equal(row.module_generation, syn.moduleGeneration);
  assert.equal(row.evidence.probe_job_id, started.job_id);
  assert.ok(after.perf_rows.length >= 1);
  // deno-lint-ignore no-explicit-any
  assert.ok(after.perf_rows.every((r: any) => r.tokens_per_second > 0));
  assert.equal(after.knob_assignments.length, 1);
  assert.equal(after.knob_assignments[0].knob, syn.config.knob);
  assert.ok(after.knob_assignments[0].assignment.recommended_batch.rows >= 1);

  // A finished job stays attached under its key (its rows are the answer).
  const late = resultOf(
    await syn.call("probe.start", { models: ["tiny-llama"], request_key: "first-probe" }),
  );
  assert.equal(late.job_id, started.job_id);
  assert.equal(late.state, "done");
  assert.equal(late.lanes[0].status, "passed");
});

Deno.test("probe.start past its deadline_ms fails deadline_exceeded; the default key then admits a fresh job, and the same facts attach to it", async () => {
  await using t = await startSynapse({
    certification: "require",
    preload_models: [llamaEmbed("tiny-llama")],
  });
  const { syn } = t;
  await syn.modelsSettled;
  // No models named: every loaded model that needs a certificate.
  const first = resultOf(await syn.call("probe.start", { deadline_ms: 1 }));
  assert.deepEqual(
    // deno-lint-ignore no-explicit-any
    first.lanes.map((l: any) => l.model_id),
    ["tiny-llama"],
  );
  assert.match(first.request_key, /^probe\.start:tiny-llama:[0-9a-f]{16}:[0-9a-f]{16}$/);
  assert.ok(first.request_key.includes(syn.machineProfileHash.slice(0, 16)));
  const { end } = await waitEnd(syn, first.job_id);
  assert.equal(end.state, "failed_transient", JSON.stringify(end));
  assert.equal(end.error.code, "deadline_exceeded");
  // The lane in flight when the deadline passed failed with the job (it was reached).
  assert.equal(end.lanes[0].status, "failed");
  assert.equal(end.lanes[0].error.code, "deadline_exceeded");
  // Nothing was certified.
  const refused = semanticError(
    await syn.call("embed.query", { text: "x", model: "tiny-llama" }),
  );
  assert.equal(refused.code, "not_certified");

  // The default key of a failed job admits a fresh one; the same call again attaches to it.
  const second = resultOf(await syn.call("probe.start", { models: ["tiny-llama"] }));
  assert.notEqual(second.job_id, first.job_id);
  assert.equal(second.attached, false);
  const third = resultOf(await syn.call("probe.start", { models: ["tiny-llama"] }));
  assert.equal(third.job_id, second.job_id);
  assert.equal(third.attached, true);
  const done = await waitEnd(syn, second.job_id);
  assert.equal(done.end.state, "done", JSON.stringify(done.end));
  assert.equal(done.end.lanes[0].status, "passed", JSON.stringify(done.end.lanes[0]));
  const ok = resultOf(await syn.call("embed.query", { text: "x", model: "tiny-llama" }));
  assert.equal(ok.provenance.certified, true);
});

interface Server {
  child: Deno.ChildProcess;
  base: string;
}

/** A `ck-synapse serve` child on `env`'s home, once up (`until: "loaded"`, tests/cli/_launcher.ts). */
async function startServer(env: Record<string, string>): Promise<Server> {
  const served = await serve({ env, dir: env.HOME! }, { until: "loaded" });
  return { child: served.child, base: served.url };
}

// deno-lint-ignore no-explicit-any
async function call(base: string, method: string, params: unknown, key?: string): Promise<any> {
  const res = await fetch(`${base}/v1/ops/${method}`, {
    method: "POST",
    headers: key === undefined ? {} : { authorization: `Bearer ${key}` },
    body: JSON.stringify(params),
  });
  const body = await res.json();
  if (!body.result) throw new Error(JSON.stringify(body));
  return body.result;
}

function jobState(storeFile: string, jobId: string): string {
  const db = new DatabaseSync(storeFile, { readOnly: true });
  try {
    return String(db.prepare("SELECT state FROM jobs WHERE job_id = ?").get(jobId)?.state);
  } finally {
    db.close();
  }
}

Deno.test("a probe job killed with SIGKILL mid-probe is failed_transient module_restarted at the next boot; its key admits a fresh job", async () => {
  const dir = await Deno.makeTempDir({ prefix: "synapse-probe-kill-" });
  const env = {
    PATH: Deno.env.get("PATH") ?? "/usr/bin:/bin",
    HOME: dir,
    XDG_DATA_HOME: `${dir}/data`,
    XDG_CONFIG_HOME: `${dir}/config`,
    SYNAPSE_CONFIG_JSON: JSON.stringify({ preload_models: [llamaEmbed("tiny-llama")] }),
  };
  const storeFile = `${dir}/data/cortexkit/synapse/store.db`;
  let server = await startServer(env);
  try {
    const key = (await Deno.readTextFile(`${dir}/data/cortexkit/synapse/owner.key`)).trim();
    const gen1 = (await call(server.base, "admission.status", {})).module_generation;
    // Freeze the server (SIGSTOP) while the job runs, and read its state from the store: what
    // the SIGKILL interrupts is then known. A job that ended first is tried again under a new key.
    let frozen: { jobId: string; requestKey: string } | undefined;
    for (let attempt = 0; attempt < 4 && frozen === undefined; attempt++) {
      const requestKey = `nightly-probe-${attempt}`;
      const job = await call(server.base, "probe.start", {
        models: ["tiny-llama"],
        request_key: requestKey,
      }, key);
      while (true) {
        const s = await call(server.base, "probe.status", { job_id: job.job_id });
        if (s.state !== "queued") break;
        await new Promise((r) => setTimeout(r, 5));
      }
      server.child.kill("SIGSTOP");
      if (jobState(storeFile, job.job_id) === "running") frozen = { jobId: job.job_id, requestKey };
      else server.child.kill("SIGCONT");
    }
    assert.ok(frozen !== undefined, "no probe job could be frozen while running");
    server.child.kill("SIGKILL");
    await server.child.status;

    server = await startServer(env);
    const status = await call(server.base, "admission.status", {});
    assert.equal(status.module_generation, gen1 + 1);
    const old = await call(server.base, "probe.status", { job_id: frozen.jobId });
    assert.equal(old.state, "failed_transient");
    assert.equal(old.error.code, "module_restarted");
    assert.equal(old.error.safe_to_retry_same_request, true);
    assert.equal(old.lanes[0].status, "failed");
    assert.equal(old.lanes[0].error.code, "module_restarted");

    // Its key admits a fresh job, which runs to its end; the same call then attaches to it.
    const again = await call(server.base, "probe.start", {
      models: ["tiny-llama"],
      request_key: frozen.requestKey,
    }, key);
    assert.notEqual(again.job_id, frozen.jobId);
    assert.equal(again.attached, false);
    const third = await call(server.base, "probe.start", {
      models: ["tiny-llama"],
      request_key: frozen.requestKey,
    }, key);
    assert.equal(third.job_id, again.job_id);
    assert.equal(third.attached, true);
    let end;
    for (const hungAt = Date.now() + 600_000; Date.now() < hungAt;) {
      end = await call(server.base, "probe.status", { job_id: again.job_id });
      if (TERMINAL.has(end.state)) break;
      await new Promise((r) => setTimeout(r, 20));
    }
    assert.equal(end.state, "done", JSON.stringify(end));
    assert.equal(end.lanes[0].status, "passed");
    const served = await call(server.base, "embed.query", { text: "hi", model: "tiny-llama" });
    assert.equal(served.provenance.certified, true);
  } finally {
    try {
      server.child.kill("SIGKILL");
    } catch { /* already gone */ }
    await server.child.status;
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("probe.report names a model that failed to load as not_loaded with its error, and names no probe for it", async () => {
  const dir = await Deno.makeTempDir({ prefix: "synapse-probe-notloaded-" });
  try {
    // A model file that is not a model: its load fails (artifact_invalid or the like).
    await Deno.writeTextFile(`${dir}/model.onnx`, "not an onnx model");
    await Deno.copyFile(`${EMBED}/tokenizer.json`, `${dir}/tokenizer.json`);
    await using t = await startSynapse({
      certification: "require",
      preload_models: [preload(EMBED, "good"), preload(dir, "broken")],
    });
    await t.syn.modelsSettled;
    const rep = resultOf(await t.syn.call("probe.report", {}));
    // deno-lint-ignore no-explicit-any
    const broken = rep.lanes.find((l: any) => l.model_id === "broken");
    assert.ok(broken, JSON.stringify(rep.lanes));
    assert.equal(broken.certification_status, "not_loaded");
    assert.equal(broken.serving_admission, "refused");
    assert.match(broken.serving_admission_reason, /^the model is failed \(\w+: /);
    assert.equal(broken.probe_command, undefined);
    const { servingLines } = await import("../../lib/cli/commands/probe.ts");
    const lines = servingLines(rep);
    assert.ok(
      lines.some((l) => /^refuses broken: not loaded \(the model is failed/.test(l)),
      lines.join("\n"),
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a GGUF reranker on the ffi lane (Qwen3-Reranker-shaped, its template applied) lists dims 1, is not_certified until probe.start certifies it, then scores", async () => {
  await using t = await startSynapse({
    certification: "require",
    preload_models: [{
      engine: "ffi",
      task: "rerank",
      model_id: "qwen3-rerank",
      model_path: `${MODELS}/synapse-tiny-qwen3-rerank`,
      max_tokens: 512,
    }],
  });
  const { syn } = t;
  await syn.modelsSettled;
  const row = resultOf(await syn.call("models.list", {})).models.find(
    (m: { model_id: string }) => m.model_id === "qwen3-rerank",
  );
  assert.equal(row.dims, 1);
  const args = { model: "qwen3-rerank", query: "what is a fox?", candidates: ["a canid", "a car"] };
  assert.equal(semanticError(await syn.call("rerank.score", args)).code, "not_certified");
  const job = resultOf(await syn.call("probe.start", { models: ["qwen3-rerank"] }));
  const { end } = await waitEnd(syn, job.job_id);
  assert.equal(end.state, "done", JSON.stringify(end));
  const r = resultOf(await syn.call("rerank.score", args));
  assert.equal(r.scores.length, 2);
  assert.ok(r.scores.every((x: number) => Number.isFinite(x)));
  assert.equal(r.provenance.certified, true);
});
