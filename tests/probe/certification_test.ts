/**
 * Serving admission by certification (issue 18, design rules 1, 4, 5, 8) through the real doors:
 * a GGUF lane (the tiny llama fixture on a real llama.cpp worker) refuses `not_certified` in
 * `require` mode until a probe result for its current keys is stored, then serves with
 * `provenance.certified: true`; another machine profile makes the row stale; a failing row
 * refuses `certification_failed`; `warn` serves with `certified: false`; the ORT fp32 test
 * model is a reference lane. models.list, admission.status, /health and /metrics show it, and
 * rows survive a restart (real SQLite).
 */
import assert from "node:assert/strict";
import { loadConfig } from "../../lib/config/loader.ts";
import { serveHttp } from "../../lib/doors/http/server.ts";
import { nullLog } from "../../lib/log/log.ts";
import { createSynapse } from "../../lib/synapse.ts";
import type { Synapse } from "../../lib/synapse.ts";
import {
  certificationOf,
  laneCertificationClass,
  probeFactsOf,
  runtimeConfigDigestOf,
} from "../../lib/probe/certification.ts";
import type { ProbeLaneResult } from "../../lib/probe/types.ts";
import type { ReadyModel } from "../../lib/models/model.ts";
import { MODELS, preload, resultOf, semanticError } from "../_helpers.ts";

const GEN = `${MODELS}/synapse-tiny-llama`;
const LLAMA = "lle";
const ORT = "ort-embed";
const OTHER_OS = "Synapse-Test-OS 99.1";

const PRELOADS = [
  preload(`${MODELS}/synapse-tiny-embed`, ORT),
  {
    engine: "llama",
    model_path: GEN,
    tokenizer_path: `${GEN}/tokenizer.json`,
    task: "embed",
    model_id: LLAMA,
    pooling: "mean",
    normalize: true,
    max_tokens: 512,
  },
];

/** One instance over the data home `dir` (restart = a second call with the same dir). */
async function start(
  dir: string,
  config: Record<string, unknown> = {},
  extraEnv: Record<string, string> = {},
): Promise<Synapse> {
  const env = {
    XDG_DATA_HOME: `${dir}/data`,
    XDG_CONFIG_HOME: `${dir}/config`,
    HOME: dir,
    SYNAPSE_CONFIG_JSON: JSON.stringify({ preload_models: PRELOADS, ...config }),
    ...extraEnv,
  };
  const loaded = loadConfig({ env, cwd: dir });
  const syn = await createSynapse({ config: loaded.config, env, log: nullLog });
  for (const m of syn.registry.list()) {
    assert.equal(m.state, "ready", `${m.modelId}: ${m.error?.message}`);
  }
  return syn;
}

function readyOf(syn: Synapse, id: string): ReadyModel {
  const r = syn.registry.list().find((m) => m.modelId === id)?.ready;
  assert.ok(r, `${id} is not ready`);
  return r;
}

/** A probe result for the model's current keys (passing unless told). */
function probeResult(model: ReadyModel, passed = true): ProbeLaneResult {
  return {
    model_id: model.modelId,
    lane_id: model.modelId,
    task: "embed",
    cert_class: "embedding",
    numeric_profile_id: model.numericProfileId,
    fingerprint: model.fingerprint,
    reference_model_id: null,
    passed,
    checks: [
      { id: "determinism", passed: true, value: 1, threshold: 1, comparison: "==" },
      {
        id: "query_path_equals_batch_path",
        passed,
        value: passed ? 1 : 0.42,
        threshold: 0.9999,
        comparison: ">=",
        ...(passed ? {} : { detail: "row 3 at batch size 8" }),
      },
    ],
    checks_lacking: [{ id: "reference_parity", reason: "no_reference_lane" }],
    query_path: "enabled",
    perf: [{
      knob: "balanced",
      batch_rows: 8,
      tokens_per_second: 900,
      start_delay_p50_ms: 1,
      call_ms_p50: 37,
    }],
    knob_assignment: {
      knob: "balanced",
      recommended_batch: { rows: 8, token_budget: 1536 },
      estimated_execution_ms: 37,
      tokens_per_second: 900,
    },
    duration_ms: 4321,
  };
}

function record(syn: Synapse, passed = true): void {
  const model = readyOf(syn, LLAMA);
  syn.certifications.putProbeResult(
    probeResult(model, passed),
    probeFactsOf(syn.context, model, { probe_job_id: null, now_ms: 1_700_000_000_000 }),
  );
}

async function embed(syn: Synapse, model: string) {
  return await syn.call("embed.query", { text: "hello world", model });
}

// deno-lint-ignore no-explicit-any
async function listRow(syn: Synapse, id: string): Promise<any> {
  const list = resultOf(await syn.call("models.list", {}));
  // deno-lint-ignore no-explicit-any
  const row = list.models.find((m: any) => m.model_id === id);
  assert.ok(row, `${id} in models.list`);
  return row;
}

// deno-lint-ignore no-explicit-any
async function admission(syn: Synapse): Promise<any> {
  return resultOf(await syn.call("admission.status", {}));
}

/** GET /health, GET /metrics and one refused or served POST over a real socket. */
async function overHttp(syn: Synapse) {
  await using server = serveHttp(syn, { log: nullLog });
  const base = `http://127.0.0.1:${server.port}`;
  const health = await (await fetch(`${base}/health`)).json();
  const metrics = await (await fetch(`${base}/metrics`)).text();
  const res = await fetch(`${base}/v1/ops/embed.query`, {
    method: "POST",
    body: JSON.stringify({ text: "hello world", model: LLAMA }),
  });
  const body = await res.json();
  return { health, metrics, embedStatus: res.status, embedBody: body };
}

function gauge(metrics: string, model: string): number | undefined {
  const line = metrics.split("\n").find((l) =>
    l.startsWith(`synapse_lane_certified{model="${model}",lane_id="${model}"}`)
  );
  return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(" ") + 1));
}

const PROBE_DETAILS = {
  model_id: LLAMA,
  lane_id: LLAMA,
  probe_command: `ck-synapse probe run --model ${LLAMA}`,
  probe_op: { method: "probe.start", params: { models: [LLAMA] } },
};

Deno.test("require: a GGUF lane refuses not_certified probe_required until its probe row exists, then serves certified; the row and its knob assignment survive a restart; another OS build makes it stale", async () => {
  const dir = await Deno.makeTempDir({ prefix: "synapse-cert-" });
  try {
    // --- 1. No row: refused everywhere, with the probe to run.
    let syn = await start(dir);
    try {
      assert.equal(syn.config.certification, "require");
      const err = semanticError(await embed(syn, LLAMA));
      assert.equal(err.code, "not_certified");
      assert.deepEqual(err.details, { ...PROBE_DETAILS, blocking_reason: "probe_required" });
      assert.match(err.message, /ck-synapse probe run --model lle/);
      assert.equal(err.class, "permanent");
      assert.equal(err.safe_to_retry_same_request, false);
      // Every inference op resolves through the gate: embed.batch too.
      const batch = semanticError(
        await syn.call("embed.batch", { items: ["a", "b"], model: LLAMA }),
      );
      assert.equal(batch.code, "not_certified");
      const ort = resultOf(await embed(syn, ORT));
      assert.equal(ort.provenance.certified, true, "ORT fp32 on the CPU is a reference lane");

      const row = await listRow(syn, LLAMA);
      assert.equal(row.state, "not_certified");
      assert.equal(row.state_reason.code, "not_certified");
      assert.equal(row.state_reason.reason, "probe_required");
      // What a request gets now, though its worker is up (a newcomer saw "serving" here).
      assert.equal(row.serving_admission, "not_certified");
      assert.deepEqual(row.serving_admission_reason, {
        reason: "probe_required",
        probe_command: `ck-synapse probe run --model ${LLAMA}`,
      });
      assert.equal(row.certified, false);
      assert.deepEqual(row.certification, {
        status: "probe_required",
        required: true,
        machine_profile_hash: syn.machineProfileHash,
        probed_at_ms: null,
        checks: [],
        checks_lacking: [],
        query_path: "enabled",
        blocking_reason: "probe_required",
      });
      const ortRow = await listRow(syn, ORT);
      assert.equal(ortRow.state, "ready");
      assert.equal(ortRow.certified, true);
      assert.equal(ortRow.certification.status, "reference");
      assert.equal(ortRow.certification.required, false);

      const a = await admission(syn);
      assert.deepEqual(a.catalog_lanes, [ORT, LLAMA]);
      assert.deepEqual(a.certified_lanes, [ORT]);
      assert.deepEqual(a.certification_stale, []);
      assert.deepEqual(a.performance_stale, [LLAMA]);
      // deno-lint-ignore no-explicit-any
      const lane = a.lanes.find((l: any) => l.lane === `llama-${LLAMA}`);
      assert.equal(lane.lane_id, LLAMA);
      assert.equal(lane.certification_status, "probe_required");
      assert.equal(lane.certified, false);
      assert.equal(lane.certification[0].blocking_reason, "probe_required");

      const http = await overHttp(syn);
      assert.equal(http.health.status, "degraded");
      assert.match(
        http.health.reason,
        /'lle' not_certified \(probe_required; run 'ck-synapse probe run --model lle'\)/,
      );
      assert.equal(gauge(http.metrics, LLAMA), 0);
      assert.equal(gauge(http.metrics, ORT), 1);
      assert.match(http.metrics, /synapse_model_state\{model="lle",[^}]*state="not_certified"\} 1/);
      assert.equal(http.embedStatus, 409);
      assert.match(JSON.stringify(http.embedBody), /"not_certified"/);
      assert.match(JSON.stringify(http.embedBody), /"blocking_reason":"probe_required"/);

      // --- 2. A passing row for the current keys: serves at once (the cached status follows).
      const before = (await listRow(syn, LLAMA)).recommended_batch;
      record(syn, true);
      const served = resultOf(await embed(syn, LLAMA));
      assert.equal(served.provenance.certified, true);
      assert.equal(served.provenance.engine.engine, "llama.cpp-worker");
      const after = await listRow(syn, LLAMA);
      assert.equal(after.state, "ready");
      assert.equal(after.certified, true);
      assert.equal(after.certification.status, "certified");
      assert.equal(after.certification.probed_at_ms, 1_700_000_000_000);
      assert.deepEqual(after.certification.checks.map((c: { id: string }) => c.id), [
        "determinism",
        "query_path_equals_batch_path",
      ]);
      assert.deepEqual(after.certification.checks_lacking, [
        { id: "reference_parity", reason: "no_reference_lane" },
      ]);
      assert.equal(after.certification.blocking_reason, undefined);
      // A knob assignment written now applies after a restart only.
      assert.deepEqual(after.recommended_batch, before);
      const http2 = await overHttp(syn);
      assert.equal(http2.health.status, "ok");
      assert.equal(gauge(http2.metrics, LLAMA), 1);
      assert.equal(http2.embedStatus, 200);
      assert.equal(
        http2.embedBody.result?.provenance?.certified ?? http2.embedBody.provenance?.certified,
        true,
      );
    } finally {
      await syn.dispose();
    }

    // --- 3. Restart: the row is still there; the knob assignment now applies.
    syn = await start(dir);
    try {
      assert.equal(resultOf(await embed(syn, LLAMA)).provenance.certified, true);
      const row = await listRow(syn, LLAMA);
      assert.deepEqual(row.recommended_batch, { rows: 8, token_budget: 1536 });
      // The llama lane's scheduler starts from the probe's execution estimate.
      assert.equal(readyOf(syn, LLAMA).interactive.stats().classes.control.meanRunMs, 37);
      const a = await admission(syn);
      assert.deepEqual(a.performance_stale, []);
      assert.ok(a.certified_lanes.includes(LLAMA));
    } finally {
      await syn.dispose();
    }

    // --- 4. Another OS build (so another machine profile): the row is stale.
    syn = await start(dir, {}, { SYNAPSE_OS_BUILD_OVERRIDE: OTHER_OS });
    try {
      assert.equal(syn.machineProfile.os_build, OTHER_OS);
      const err = semanticError(await embed(syn, LLAMA));
      assert.equal(err.code, "not_certified");
      assert.deepEqual(err.details, {
        ...PROBE_DETAILS,
        blocking_reason: "certification_stale",
        stale_facts: ["os_build", "machine_profile"],
      });
      const row = await listRow(syn, LLAMA);
      assert.equal(row.state, "not_certified");
      assert.equal(row.certification.status, "certification_stale");
      assert.deepEqual(row.certification.stale_facts, ["os_build", "machine_profile"]);
      // The stale row's evidence is shown (what was probed, and when).
      assert.equal(row.certification.probed_at_ms, 1_700_000_000_000);
      const a = await admission(syn);
      assert.deepEqual(a.certification_stale, [LLAMA]);
      assert.deepEqual(
        a.performance_stale,
        [LLAMA],
        "its knob assignment is for the other profile",
      );
      assert.ok(!a.certified_lanes.includes(LLAMA));
    } finally {
      await syn.dispose();
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a failing row refuses certification_failed; warn serves it with certified: false, and a stale certificate is a /health degraded reason while the model stays ready", async () => {
  const dir = await Deno.makeTempDir({ prefix: "synapse-cert-" });
  try {
    let syn = await start(dir);
    try {
      record(syn, false);
      const err = semanticError(await embed(syn, LLAMA));
      assert.equal(err.code, "not_certified");
      assert.deepEqual(err.details, { ...PROBE_DETAILS, blocking_reason: "certification_failed" });
      assert.match(err.message, /query_path_equals_batch_path/);
      const row = await listRow(syn, LLAMA);
      assert.equal(row.certification.status, "certification_failed");
      assert.equal(row.certification.checks[1].passed, false);
      // The row is keyed by this machine, the lane's numeric profile and its runtime config.
      const stored = syn.certifications.row(
        syn.machineProfileHash,
        readyOf(syn, LLAMA).numericProfileId,
        runtimeConfigDigestOf(syn.context, readyOf(syn, LLAMA)),
      );
      assert.equal(stored?.status, "uncertified");
    } finally {
      await syn.dispose();
    }

    // warn: the failed lane serves, every answer disclosing certified: false.
    syn = await start(dir, { certification: "warn" });
    try {
      const r = resultOf(await embed(syn, LLAMA));
      assert.equal(r.provenance.certified, false);
      const row = await listRow(syn, LLAMA);
      assert.equal(row.state, "ready");
      assert.equal(row.certified, false);
      assert.equal(row.certification.blocking_reason, "certification_failed");
      const http = await overHttp(syn);
      assert.equal(http.embedStatus, 200);
      assert.equal(gauge(http.metrics, LLAMA), 0);
    } finally {
      await syn.dispose();
    }

    // warn on another OS build: stale, still served, and /health says so.
    syn = await start(dir, { certification: "warn" }, { SYNAPSE_OS_BUILD_OVERRIDE: OTHER_OS });
    try {
      assert.equal(resultOf(await embed(syn, LLAMA)).provenance.certified, false);
      const http = await overHttp(syn);
      assert.equal(http.health.status, "degraded");
      assert.match(
        http.health.reason,
        /'lle' certification_stale \(os_build, machine_profile; serving uncertified\)/,
      );
      // deno-lint-ignore no-explicit-any
      assert.equal(http.health.models.find((m: any) => m.model_id === LLAMA).state, "ready");
    } finally {
      await syn.dispose();
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("laneCertificationClass (rule 1): ORT f32 on the CPU without a reference model is the reference; llama, another dtype, a GPU build or a declared reference needs a certificate", async () => {
  const dir = await Deno.makeTempDir({ prefix: "synapse-cert-" });
  try {
    const syn = await start(dir, { certification: "warn" });
    try {
      const ort = readyOf(syn, ORT);
      const llama = readyOf(syn, LLAMA);
      assert.equal(ort.profile.dtype, "f32");
      assert.equal(laneCertificationClass(ort), "reference");
      assert.equal(laneCertificationClass(llama), "certification_required");
      const entry = syn.registry.list().find((m) => m.modelId === ORT)!;
      assert.equal(laneCertificationClass(entry), "reference");
      assert.equal(
        laneCertificationClass({ ...entry, source: { ...entry.source, referenceModel: "x" } }),
        "certification_required",
      );
      assert.equal(
        laneCertificationClass({ ...ort, profile: { ...ort.profile, dtype: "f16" } }),
        "certification_required",
      );
      assert.equal(
        laneCertificationClass({
          ...ort,
          profile: {
            ...ort.profile,
            engine: { ...ort.profile.engine, build_flags: { backend: "cuda" } },
          },
        }),
        "certification_required",
      );
      // The runtime config digest moves with the knob (threads), and only with it.
      const balanced = runtimeConfigDigestOf({ config: { knob: "balanced" } }, ort);
      assert.equal(runtimeConfigDigestOf({ config: { knob: "balanced" } }, ort), balanced);
      assert.notEqual(runtimeConfigDigestOf({ config: { knob: "quiet" } }, ort), balanced);
      assert.notEqual(runtimeConfigDigestOf({ config: { knob: "balanced" } }, llama), balanced);
    } finally {
      await syn.dispose();
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("generation refuses the same way: microllm.oneshot and POST /v1/chat/completions answer not_certified for an uncertified GGUF", async () => {
  const dir = await Deno.makeTempDir({ prefix: "synapse-cert-" });
  try {
    const env = {
      XDG_DATA_HOME: `${dir}/data`,
      XDG_CONFIG_HOME: `${dir}/config`,
      HOME: dir,
      SYNAPSE_CONFIG_JSON: JSON.stringify({
        preload_models: [{
          engine: "llama",
          model_path: GEN,
          tokenizer_path: `${GEN}/tokenizer.json`,
          task: "generate",
          model_id: "gen",
        }],
      }),
    };
    const syn = await createSynapse({
      config: loadConfig({ env, cwd: dir }).config,
      env,
      log: nullLog,
    });
    try {
      const err = semanticError(
        await syn.call("microllm.oneshot", { prompt: "hi", max_tokens: 2, model: "gen" }),
      );
      assert.equal(err.code, "not_certified");
      assert.equal(err.details.blocking_reason, "probe_required");
      assert.equal(err.details.probe_command, "ck-synapse probe run --model gen");
      await using server = serveHttp(syn, { log: nullLog });
      const res = await fetch(`http://127.0.0.1:${server.port}/v1/chat/completions`, {
        method: "POST",
        body: JSON.stringify({
          model: "gen",
          max_tokens: 2,
          messages: [{ role: "user", content: "hi" }],
        }),
      });
      const body = await res.text();
      assert.equal(res.status, 409, body);
      assert.match(body, /not_certified/);
      assert.match(body, /ck-synapse probe run --model gen/);
      // The only model refuses until probed: the service is up (degraded), not unavailable.
      const health = await (await fetch(`http://127.0.0.1:${server.port}/health`)).json();
      assert.equal(health.status, "degraded");
      assert.equal(health.models[0].state, "not_certified");
    } finally {
      await syn.dispose();
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("the ORT schedulers start from the probe's estimates after a restart: the one-row call for the query path, the recommended batch's call for the bulk path; unload forgets them", async () => {
  const dir = await Deno.makeTempDir({ prefix: "synapse-cert-ort-seed-" });
  try {
    let syn = await start(dir);
    const controlMeanMs = (s: Synapse) => {
      const m = readyOf(s, ORT);
      return {
        interactive: m.interactive.stats().classes.control.meanRunMs,
        bulk: m.bulk.stats().classes.control.meanRunMs,
      };
    };
    let defaults: { interactive: number; bulk: number };
    try {
      defaults = controlMeanMs(syn);
      const model = readyOf(syn, ORT);
      const result = probeResult(model);
      result.perf = [
        {
          knob: "balanced",
          batch_rows: 1,
          tokens_per_second: 800,
          start_delay_p50_ms: 0,
          call_ms_p50: 3.5,
        },
        {
          knob: "balanced",
          batch_rows: 8,
          tokens_per_second: 900,
          start_delay_p50_ms: 1,
          call_ms_p50: 37,
        },
      ];
      syn.certifications.putProbeResult(
        result,
        probeFactsOf(syn.context, model, { probe_job_id: null, now_ms: 1_700_000_000_000 }),
      );
      // Written now, it applies after a restart only.
      assert.deepEqual(controlMeanMs(syn), defaults);
    } finally {
      await syn.dispose();
    }
    syn = await start(dir);
    try {
      assert.notDeepEqual(defaults, { interactive: 3.5, bulk: 37 });
      assert.deepEqual(controlMeanMs(syn), { interactive: 3.5, bulk: 37 });
      // The lanes share the ORT schedulers: once the model is gone, they start from the defaults.
      const lanes = readyOf(syn, ORT);
      await syn.registry.unload(ORT);
      assert.deepEqual({
        interactive: lanes.interactive.stats().classes.control.meanRunMs,
        bulk: lanes.bulk.stats().classes.control.meanRunMs,
      }, defaults);
    } finally {
      await syn.dispose();
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a stale certificate names only what changed against the nearest row: a row on another machine profile does not add os_build to a runtime-config change here", async () => {
  const dir = await Deno.makeTempDir({ prefix: "synapse-cert-nearest-" });
  try {
    const syn = await start(dir);
    try {
      const model = readyOf(syn, LLAMA);
      const facts = probeFactsOf(syn.context, model, { probe_job_id: null, now_ms: 1_000 });
      // Newest first: a row from another OS build (another machine profile), then one from
      // this machine under another runtime config.
      syn.certifications.putProbeResult(probeResult(model), {
        ...facts,
        runtime_config_digest: "0".repeat(64),
        now_ms: 1_000,
      });
      syn.certifications.putProbeResult(probeResult(model), {
        ...facts,
        machine_profile_hash: "f".repeat(64),
        os_build: OTHER_OS,
        now_ms: 2_000,
      });
      const view = certificationOf(syn.context, model);
      // The row on the other machine is for this runtime config: it matches nothing either.
      assert.equal(view.status, "certification_stale");
      assert.deepEqual(view.stale_facts, ["runtime_config"]);
      assert.equal(view.row?.machine_profile_hash, syn.machineProfileHash);
    } finally {
      await syn.dispose();
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
