/**
 * `ck-synapse probe run|status|report` and `pull --probe` through the real launcher (issue 18's
 * first-run path): an embedded `probe run --json` certifies the tiny llama lane and the rows
 * outlive the process (`probe report` in the next run says it serves, `probe status` reads the
 * job); a rotated OS build (`SYNAPSE_OS_BUILD_OVERRIDE`) makes it `certification_stale` and
 * refused, with the fix named; a local GGUF pulled into a running server says it will refuse
 * until probed, and `pull --probe` certifies it and says how long the probe took.
 */
import assert from "node:assert/strict";
import { cliIn, type Home, isolatedEnv, serve } from "./_launcher.ts";
import { MODELS } from "../_helpers.ts";

const LLAMA = `${MODELS}/synapse-tiny-llama`;

const CONFIG = JSON.stringify({
  preload_models: [{
    engine: "llama",
    model_path: LLAMA,
    tokenizer_path: `${LLAMA}/tokenizer.json`,
    task: "embed",
    model_id: "tiny-llama",
    pooling: "mean",
    normalize: true,
    max_tokens: 512,
  }],
});

Deno.test("probe run --json certifies the tiny llama lane; probe report and probe status read it in the next run; a rotated OS build makes it stale and refused", async () => {
  const home = await isolatedEnv({ SYNAPSE_CONFIG_JSON: CONFIG });
  try {
    const before = await cliIn(home, ["embed", "--model", "tiny-llama", "hello"]);
    assert.equal(before.code, 1, before.stderr);
    assert.match(before.stderr, /not_certified/);

    const run = await cliIn(home, ["probe", "run", "--json"]);
    assert.equal(run.code, 0, run.stdout + run.stderr);
    const out = JSON.parse(run.stdout);
    assert.equal(out.job.state, "done");
    assert.deepEqual(
      // deno-lint-ignore no-explicit-any
      out.job.lanes.map((l: any) => [l.model_id, l.status]),
      [["tiny-llama", "passed"]],
    );
    assert.ok(out.wall_ms > 0);
    // deno-lint-ignore no-explicit-any
    const lane = out.report.lanes.find((l: any) => l.model_id === "tiny-llama");
    assert.equal(lane.certification_status, "certified");
    assert.equal(lane.serving_admission, "serving");

    // The rows outlive the process: the next run serves, and reads the job (one embedded
    // instance at a time: each holds the data home's singleton lease).
    const report = await cliIn(home, ["probe", "report"]);
    const reportJson = await cliIn(home, ["probe", "report", "--json"]);
    const status = await cliIn(home, ["probe", "status", out.job.job_id, "--json"]);
    const embed = await cliIn(home, ["embed", "--json", "--model", "tiny-llama", "hello"]);
    assert.equal(report.code, 0, report.stderr);
    assert.match(report.stdout, /^machine profile {2}[0-9a-f]{64}\n/);
    assert.match(report.stdout, /\nserves {2}tiny-llama: certified\n/);
    assert.equal(reportJson.code, 0, reportJson.stderr);
    const rows = JSON.parse(reportJson.stdout);
    assert.equal(rows.cert_rows.length, 1);
    assert.equal(rows.cert_rows[0].evidence.probe_job_id, out.job.job_id);
    assert.equal(status.code, 0, status.stderr);
    assert.equal(JSON.parse(status.stdout).state, "done");
    assert.equal(embed.code, 0, embed.stderr);
    assert.equal(JSON.parse(embed.stdout).provenance.certified, true);

    // The same probe again attaches to the job that ran it; --again probes anew.
    const same = await cliIn(home, ["probe", "run", "--json"]);
    assert.equal(same.code, 0, same.stderr);
    assert.equal(JSON.parse(same.stdout).job.job_id, out.job.job_id);
    const again = await cliIn(home, ["probe", "run", "--again", "--json"]);
    assert.equal(again.code, 0, again.stderr);
    const againJob = JSON.parse(again.stdout).job;
    assert.notEqual(againJob.job_id, out.job.job_id);
    assert.equal(againJob.state, "done");
    assert.match(againJob.request_key, /^probe-again-\d+-[0-9a-f]{8}$/);
    const both = await cliIn(home, ["probe", "run", "--again", "--request-key", "k"]);
    assert.equal(both.code, 2);
    assert.match(both.stderr, /Cannot use --again with --request-key/);

    // Another OS build: another machine profile, so the row is stale and the lane refuses.
    const rotated: Home = {
      dir: home.dir,
      env: { ...home.env, SYNAPSE_OS_BUILD_OVERRIDE: "synapse-test-os-2" },
    };
    const stale = await cliIn(rotated, ["probe", "report"]);
    assert.equal(stale.code, 0, stale.stderr);
    assert.match(
      stale.stdout,
      /\nrefuses tiny-llama: certification_stale \(changed: os_build, machine_profile\); run 'ck-synapse probe run --model tiny-llama'\n/,
    );
    const refused = await cliIn(rotated, ["embed", "--model", "tiny-llama", "hello"]);
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /not_certified/);
    // The fix it names: a probe on this profile (human output: a line per lane, then what serves).
    const fix = await cliIn(rotated, ["probe", "run", "--model", "tiny-llama"]);
    assert.equal(fix.code, 0, fix.stdout + fix.stderr);
    assert.match(fix.stdout, /^passed {2}tiny-llama {2}\d+\.\ds\n/);
    assert.match(fix.stdout, /\n {2}lacked check reference_parity: no_reference_lane\n/);
    assert.match(fix.stdout, /\nserves {2}tiny-llama: certified\n/);
    assert.match(fix.stderr, /probe job job_\w+ done in \d+\.\ds/);
  } finally {
    await Deno.remove(home.dir, { recursive: true });
  }
});

Deno.test("pull of a local GGUF says it refuses until probed; pull --probe certifies it and says how long the probe took", async () => {
  const home = await isolatedEnv();
  home.env.CORTEXKIT_MODEL_CACHE = `${home.dir}/model-cache`;
  try {
    await using _server = await serve(home);
    const plain = await cliIn(home, [
      "pull",
      LLAMA,
      "--task",
      "embed",
      "--model-id",
      "gguf-plain",
    ]);
    assert.equal(plain.code, 0, plain.stderr);
    assert.match(plain.stdout, /^loaded: gguf-plain {2}[0-9a-f]{64} {2}\(not certified\)\n$/);
    assert.match(
      plain.stderr,
      /\nnote: gguf-plain needs a certificate on this machine \(probe_required\): it refuses requests \(not_certified\) until 'ck-synapse probe run --model gguf-plain' \(or set certification: "warn"\)/,
    );
    const refused = await cliIn(home, ["embed", "--model", "gguf-plain", "hello"]);
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /not_certified/);

    const probed = await cliIn(home, [
      "pull",
      LLAMA,
      "--task",
      "embed",
      "--model-id",
      "gguf-probed",
      "--probe",
    ]);
    assert.equal(probed.code, 0, probed.stdout + probed.stderr);
    assert.match(probed.stdout, /^loaded: gguf-probed {2}[0-9a-f]{64} {2}\(not certified\)\n/);
    assert.match(probed.stdout, /\npassed {2}gguf-probed {2}\d+\.\ds\n/);
    assert.match(probed.stderr, /\nprobe: gguf-probed certified; the probe took \d+\.\ds\n/);
    // Progress on a non-terminal stderr: a line when a step starts and one per quarter of the
    // runs, not one per poll (each step of an embed lane, at most 5 quarter lines more).
    const progress = probed.stderr.split("\n").filter((l) => l.startsWith("  … gguf-probed: "));
    const steps = new Set(progress.map((l) => l.replace(/ \(\d+\/\d+\)$/, "")));
    assert.ok(progress.length >= 1, probed.stderr);
    assert.ok(progress.length <= steps.size + 5, progress.join("\n"));
    // A probe that runs out of time says so and names the flag that gives it more.
    // (Other files: the same files and settings would share gguf-probed's certificate.)
    const late = await cliIn(home, [
      "pull",
      `${MODELS}/synapse-tiny-llama-bytes`,
      "--model-id",
      "gguf-late",
      "--probe",
      "--probe-deadline-ms",
      "1",
    ]);
    assert.equal(late.code, 1, late.stdout + late.stderr);
    assert.match(late.stderr, /error: deadline_exceeded: /);
    assert.match(
      late.stderr,
      /hint: run 'ck-synapse probe run --model gguf-late --deadline-ms N'.*--probe-deadline-ms N/,
    );
    assert.match(late.stdout, /\nfailed {2}gguf-late/);
    const noProbe = await cliIn(home, ["pull", LLAMA, "--probe-deadline-ms", "5"]);
    assert.equal(noProbe.code, 2);
    assert.match(noProbe.stderr, /--probe-deadline-ms needs --probe/);
    const served = await cliIn(home, ["embed", "--json", "--model", "gguf-probed", "hello"]);
    assert.equal(served.code, 0, served.stderr);
    assert.equal(JSON.parse(served.stdout).provenance.certified, true);
    // The reference lane needs none, and says so.
    const ref = await cliIn(home, [
      "pull",
      `${MODELS}/synapse-tiny-embed`,
      "--model-id",
      "ort-ref",
      "--probe",
    ]);
    assert.equal(ref.code, 0, ref.stderr);
    assert.match(ref.stderr, /\nprobe: ort-ref needs no probe \(its lane is the reference/);
  } finally {
    await Deno.remove(home.dir, { recursive: true });
  }
});

Deno.test("probe's lane lines name the shape cap and each shape class of a split lane, its parity, a miss and whether it is served", async () => {
  const { laneLines } = await import("../../lib/cli/commands/probe.ts");
  const lines = laneLines({
    model_id: "m",
    lane_id: "m",
    status: "passed",
    duration_ms: 1500,
    failed_checks: [{
      id: "shape_invariance",
      value: 0.995,
      threshold: 0.99999,
      comparison: ">=",
    }],
    shape_cap: 8,
    shape_classes: [
      {
        id: "rows_alone",
        served: true,
        shapes: ["calls of 1 row", "calls of 8 rows"],
        parity: {
          against: "reference",
          metric: "mean_cosine",
          value: 1,
          threshold: 0.999,
          comparison: ">=",
          passed: true,
        },
      },
      {
        id: "class_1",
        served: false,
        shapes: ["calls of 9 rows"],
        parity: {
          against: "reference",
          metric: "mean_cosine",
          value: 0.995,
          threshold: 0.999,
          comparison: ">=",
          passed: false,
        },
      },
    ],
  });
  assert.deepEqual(lines, [
    "passed  m  1.5s",
    "  failed check shape_invariance: 0.995 (needs >= 0.99999)",
    "  not shape-invariant: calls capped at 8 rows (the shapes that match a row alone)",
    "  shape class rows_alone (calls of 1 row, calls of 8 rows): mean_cosine 1 against reference (needs >= 0.999)",
    "  shape class class_1 (calls of 9 rows): mean_cosine 0.995 against reference (needs >= 0.999) MISSED (not served)",
  ]);
});

Deno.test("in certification: warn, embed's human output notes that the lane is not certified and how to certify it; --json carries certified: false", async () => {
  const warn = JSON.stringify({ ...JSON.parse(CONFIG), certification: "warn" });
  const home = await isolatedEnv({ SYNAPSE_CONFIG_JSON: warn });
  try {
    const human = await cliIn(home, ["embed", "--model", "tiny-llama", "hello"]);
    assert.equal(human.code, 0, human.stderr);
    assert.match(human.stdout, /^model {8}tiny-llama/);
    assert.match(
      human.stderr,
      /note: tiny-llama is not certified on this machine; it served because certification is "warn" \(certify it: ck-synapse probe run --model tiny-llama\)/,
    );
    const json = await cliIn(home, ["embed", "--json", "--model", "tiny-llama", "hello"]);
    assert.equal(json.code, 0, json.stderr);
    assert.equal(JSON.parse(json.stdout).provenance.certified, false);
    assert.doesNotMatch(json.stderr, /not certified on this machine/);
  } finally {
    await Deno.remove(home.dir, { recursive: true });
  }
});
