/**
 * Probe-derived alias rows (issue 19 item 1), end to end with the generated fixtures, a real
 * store, real onnxruntime and the real probe job:
 *
 * - `tiny-f16` (the reference's weights stored as fp16, `reference_model` the fp32 model: mean
 *   cosine 0.99999998, min 0.99999997 here) and `tiny-same` (the reference's own files under
 *   another id and another `max_tokens`, so another numeric profile and fingerprint) meet the
 *   alias bar: the probe writes a `probe` row between each one's fingerprint and the reference's,
 *   with the machine profile hash, both lanes, the values and the thresholds, and every envelope
 *   of either fingerprint names the other;
 * - `tiny-f16-perturbed` (perturbed weights) fails the probe: no row;
 * - after a restart on the same store where `tiny-f16`'s batch path is nudged (a cosine of about
 *   0.9998 to the reference: still within certification's 0.999, below the alias bar), a new
 *   probe certifies it again but retracts its probe row, and `aliases.check_index` of an index
 *   mixing the two says `migration_required`; `tiny-same`'s row and an operator's declared row
 *   are left alone.
 */
import assert from "node:assert/strict";
import { loadConfig } from "../../lib/config/loader.ts";
import { nullLog } from "../../lib/log/log.ts";
import type { RegistryTestHooks } from "../../lib/models/_test_hooks.ts";
import { createSynapse, type Synapse } from "../../lib/synapse.ts";
import { ALIAS_MEAN_COSINE_THRESHOLD, ALIAS_MIN_COSINE_THRESHOLD } from "../../lib/ops/aliases.ts";
import { sha256Hex } from "../../lib/identity/sha256.ts";
import { MODELS, preload, resultOf } from "../_helpers.ts";

const REF = "tiny";
const F16 = "tiny-f16";
const SAME = "tiny-same";
const BAD = "tiny-f16-perturbed";
const PRELOADS = [
  preload(`${MODELS}/synapse-tiny-embed`, REF),
  preload(`${MODELS}/synapse-tiny-embed-f16`, F16, { reference_model: REF }),
  preload(`${MODELS}/synapse-tiny-embed-f16-perturbed`, BAD, { reference_model: REF }),
  // The reference's files, another max_tokens: a numeric profile (and fingerprint) of its own,
  // the same numbers for every text of the probe corpus that fits.
  preload(`${MODELS}/synapse-tiny-embed`, SAME, { reference_model: REF, max_tokens: 256 }),
];
const TERMINAL = new Set(["done", "failed_transient", "failed_permanent"]);
const DECLARED = sha256Hex("an operator's other fingerprint");

async function start(dir: string, testHooks: RegistryTestHooks = {}): Promise<Synapse> {
  const env = {
    XDG_DATA_HOME: `${dir}/data`,
    XDG_CONFIG_HOME: `${dir}/config`,
    HOME: dir,
    SYNAPSE_CONFIG_JSON: JSON.stringify({
      certification: "require",
      alias_admin_enabled: true,
      preload_models: PRELOADS,
    }),
  };
  const { config } = loadConfig({ env, cwd: dir });
  const syn = await createSynapse({ config, env, log: nullLog, testHooks });
  for (const m of syn.registry.list()) {
    assert.equal(m.state, "ready", `${m.modelId}: ${m.error?.message}`);
  }
  return syn;
}

let probes = 0;

/** A fresh probe job (its own key: the default key would attach to an earlier probe's job). */
// deno-lint-ignore no-explicit-any
async function probe(syn: Synapse, models: string[]): Promise<any> {
  const request_key = `probe-alias-test-${++probes}`;
  const job = resultOf(await syn.call("probe.start", { models, request_key }));
  for (const hungAt = Date.now() + 600_000; Date.now() < hungAt;) {
    const s = resultOf(await syn.call("probe.status", { job_id: job.job_id }));
    if (TERMINAL.has(s.state)) return s;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`probe job ${job.job_id} did not end`);
}

/** The parity values a probe job recorded for a lane (its certification row's checks). */
async function parityOf(
  syn: Synapse,
  model: string,
  jobId: string,
): Promise<{ mean: number; min: number }> {
  const report = resultOf(await syn.call("probe.report", {}));
  const row = report.cert_rows.find(
    // deno-lint-ignore no-explicit-any
    (r: any) => r.model_id === model && r.evidence.probe_job_id === jobId,
  );
  assert.ok(row, `${model} has no cert row`);
  // deno-lint-ignore no-explicit-any
  const value = (id: string): number => row.evidence.checks.find((c: any) => c.id === id).value;
  return {
    mean: value("reference_parity_mean_cosine"),
    min: value("reference_parity_min_cosine"),
  };
}

function fingerprintOf(syn: Synapse, model: string): string {
  const fp = syn.registry.list().find((m) => m.modelId === model)?.ready?.fingerprint;
  assert.ok(fp);
  return fp;
}

Deno.test("a lane at the alias bar of its reference gets a probe alias row; a later probe below it retracts the row", async () => {
  const dir = await Deno.makeTempDir({ prefix: "synapse-probe-alias-" });
  try {
    let ref: string, same: string, f16: string;
    // deno-lint-ignore no-explicit-any
    const probeRowOf = (rows: any[], fp: string): any =>
      rows.find((r) =>
        r.evidence.source === "probe" && (r.fingerprint_a === fp || r.fingerprint_b === fp)
      );
    {
      const syn = await start(dir);
      try {
        ref = fingerprintOf(syn, REF);
        same = fingerprintOf(syn, SAME);
        f16 = fingerprintOf(syn, F16);
        const bad = fingerprintOf(syn, BAD);
        assert.notEqual(same, ref, "another max_tokens is another fingerprint");
        // An operator's declaration the probe must leave alone.
        resultOf(await syn.call("alias.declare", { left: ref, right: DECLARED }));
        const status = await probe(syn, [F16, SAME, BAD]);
        assert.equal(status.state, "done", JSON.stringify(status));
        // deno-lint-ignore no-explicit-any
        const laneStatus = (id: string) => status.lanes.find((l: any) => l.model_id === id).status;
        assert.equal(laneStatus(F16), "passed");
        assert.equal(laneStatus(SAME), "passed");
        assert.equal(laneStatus(BAD), "failed");

        const parity = {
          [F16]: await parityOf(syn, F16, status.job_id),
          [SAME]: await parityOf(syn, SAME, status.job_id),
        };
        console.log(`tiny-f16 vs the fp32 reference: ${JSON.stringify(parity[F16])}`);
        for (const p of Object.values(parity)) {
          assert.ok(p.mean >= ALIAS_MEAN_COSINE_THRESHOLD, JSON.stringify(p));
          assert.ok(p.min >= ALIAS_MIN_COSINE_THRESHOLD, JSON.stringify(p));
        }

        const list = resultOf(await syn.call("models.list", {}));
        assert.equal(list.table_epoch, 3, "the declaration and two probe rows");
        // deno-lint-ignore no-explicit-any
        assert.equal(list.alias_rows.filter((r: any) => r.evidence.source === "probe").length, 2);
        assert.equal(probeRowOf(list.alias_rows, bad), undefined, "a failed lane gets no row");
        for (const [model, fp] of [[F16, f16], [SAME, same]] as const) {
          const row = probeRowOf(list.alias_rows, fp);
          assert.deepEqual([row.fingerprint_a, row.fingerprint_b], [ref, fp].sort());
          assert.equal(row.valid_to_ms, null);
          assert.deepEqual(row.evidence, {
            source: "probe",
            machine_profile_hash: syn.machineProfileHash,
            lane_id: model,
            model_id: model,
            reference_lane_id: REF,
            reference_model_id: REF,
            mean_cosine: parity[model]!.mean,
            min_cosine: parity[model]!.min,
            mean_cosine_threshold: ALIAS_MEAN_COSINE_THRESHOLD,
            min_cosine_threshold: ALIAS_MIN_COSINE_THRESHOLD,
            probe_job_id: status.job_id,
          });
        }

        const q = resultOf(await syn.call("embed.query", { model: REF, text: "a calm river" }));
        assert.deepEqual(q.equivalent_to, [same, f16, DECLARED].sort());
        assert.equal(q.table_epoch, 3);
        const sources = syn.context.aliases.equivalentsOf(ref, syn.context.now());
        assert.deepEqual(
          Object.fromEntries(sources.map((e) => [e.fingerprint, e.source])),
          { [same]: "probe", [f16]: "probe", [DECLARED]: "declared" },
        );
        const qf = resultOf(await syn.call("embed.query", { model: F16, text: "a calm river" }));
        assert.deepEqual(qf.equivalent_to, [ref], "not transitive: F16 is not SAME's equivalent");

        // Probing again at the bar changes nothing.
        const again = await probe(syn, [F16]);
        assert.notEqual(again.job_id, status.job_id);
        assert.equal(again.lanes[0].status, "passed");
        assert.equal(syn.context.tableEpoch(), 3);
        const check = resultOf(
          await syn.call("aliases.check_index", {
            index_fingerprint: ref,
            provenance_set: [ref, f16],
          }),
        );
        assert.equal(check.status, "valid");
      } finally {
        await syn.dispose();
      }
    }
    // The same lane, its batch path nudged to a cosine of about 0.9998 to the reference.
    const syn = await start(dir, {
      skewBatchShapes: [{ modelId: F16, minRows: 1, epsilon: 0.02 }],
    });
    try {
      assert.equal(fingerprintOf(syn, F16), f16);
      const status = await probe(syn, [F16]);
      assert.equal(status.state, "done", JSON.stringify(status));
      assert.equal(status.lanes[0].status, "passed", "still within certification's bar");
      const parity = await parityOf(syn, F16, status.job_id);
      console.log(`tiny-f16, batch path nudged by 0.02: ${JSON.stringify(parity)}`);
      assert.ok(parity.mean < ALIAS_MEAN_COSINE_THRESHOLD, JSON.stringify(parity));
      const list = resultOf(await syn.call("models.list", {}));
      assert.equal(list.table_epoch, 4, "the retraction bumped the epoch");
      const retracted = probeRowOf(list.alias_rows, f16);
      assert.equal(typeof retracted.valid_to_ms, "number", "retracted, not deleted");
      assert.equal(probeRowOf(list.alias_rows, same).valid_to_ms, null);
      // deno-lint-ignore no-explicit-any
      const declared = list.alias_rows.find((r: any) => r.evidence.source === "declared");
      assert.equal(declared.valid_to_ms, null, "the probe leaves an operator's row alone");
      const q = resultOf(await syn.call("embed.query", { model: REF, text: "a calm river" }));
      assert.deepEqual(q.equivalent_to, [same, DECLARED].sort());
      const check = resultOf(
        await syn.call("aliases.check_index", {
          index_fingerprint: ref,
          provenance_set: [ref, f16],
        }),
      );
      assert.equal(check.status, "migration_required");
      assert.deepEqual(
        [check.retracted_pair.fingerprint_a, check.retracted_pair.fingerprint_b],
        [ref, f16].sort(),
      );
      assert.equal(check.rebuild_target, ref);
      assert.equal(check.table_epoch, 4);
    } finally {
      await syn.dispose();
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
