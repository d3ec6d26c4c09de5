import assert from "node:assert";
import { join } from "node:path";
import { SynapseError } from "../../lib/contract/errors.ts";
import type { ProbeLaneResult } from "../../lib/probe/types.ts";
import { CertificationStore, type ProbeFacts } from "../../lib/probe/certification_store.ts";
import { Store } from "../../lib/store/store.ts";

const T0 = 1_700_000_000_000;

function result(overrides: Partial<ProbeLaneResult> = {}): ProbeLaneResult {
  return {
    model_id: "synapse-tiny-llama",
    lane_id: "synapse-tiny-llama",
    task: "embed",
    cert_class: "embedding",
    numeric_profile_id: "np_1",
    fingerprint: "fp_1",
    reference_model_id: null,
    passed: true,
    checks: [{ id: "determinism", passed: true, value: 1, threshold: 1, comparison: "==" }],
    checks_lacking: [{ id: "reference_parity", reason: "no_reference_lane" }],
    query_path: "enabled",
    perf: [
      {
        knob: "auto",
        batch_rows: 1,
        tokens_per_second: 100,
        start_delay_p50_ms: 1,
        call_ms_p50: 2,
      },
      {
        knob: "auto",
        batch_rows: 8,
        tokens_per_second: 400,
        start_delay_p50_ms: 1.5,
        call_ms_p50: 9,
      },
    ],
    knob_assignment: {
      knob: "auto",
      recommended_batch: { rows: 8, token_budget: 4096 },
      estimated_execution_ms: 9,
      tokens_per_second: 400,
    },
    duration_ms: 1234,
    ...overrides,
  };
}

function facts(overrides: Partial<ProbeFacts> = {}): ProbeFacts {
  return {
    machine_profile_hash: "mp_1",
    runtime_config_digest: "rc_1",
    os_build: "linux 6.1",
    engine_identities: [{ engine: "llama.cpp", version: "b1" }],
    model_digest: "sha256:abc",
    module_generation: 3,
    probe_job_id: "job_1",
    now_ms: T0,
    ...overrides,
  };
}

async function withDir(fn: (dir: string) => void | Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "synapse_cert_store_test_" });
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("putProbeResult writes the cert row, perf rows and knob assignment; they survive a reopen", async () => {
  await withDir((dir) => {
    const path = join(dir, "synapse.db");
    {
      using store = Store.open(path);
      const certs = new CertificationStore(store);
      assert.strictEqual(certs.changeCount, 0);
      const written = certs.putProbeResult(result(), facts());
      assert.strictEqual(certs.changeCount, 1);
      assert.strictEqual(written.status, "certified");
      assert.deepStrictEqual(certs.row("mp_1", "np_1", "rc_1"), written);
    }
    using store = Store.open(path);
    const certs = new CertificationStore(store);
    const row = certs.row("mp_1", "np_1", "rc_1");
    assert.ok(row);
    assert.deepStrictEqual(row, {
      machine_profile_hash: "mp_1",
      numeric_profile_id: "np_1",
      runtime_config_digest: "rc_1",
      fingerprint: "fp_1",
      model_id: "synapse-tiny-llama",
      lane_id: "synapse-tiny-llama",
      cert_class: "embedding",
      status: "certified",
      os_build: "linux 6.1",
      engine_identities: [{ engine: "llama.cpp", version: "b1" }],
      model_digest: "sha256:abc",
      module_generation: 3,
      probed_at_ms: T0,
      evidence: {
        checks: [{ id: "determinism", passed: true, value: 1, threshold: 1, comparison: "==" }],
        checks_lacking: [{ id: "reference_parity", reason: "no_reference_lane" }],
        reference_model_id: null,
        query_path: "enabled",
        probe_job_id: "job_1",
        duration_ms: 1234,
      },
    });
    assert.strictEqual(certs.row("mp_2", "np_1", "rc_1"), undefined);
    assert.strictEqual(certs.row("mp_1", "np_1", "rc_2"), undefined);
    assert.deepStrictEqual(certs.perfRows().map((p) => [p.knob, p.batch_rows, p.call_ms_p50]), [
      ["auto", 1, 2],
      ["auto", 8, 9],
    ]);
    assert.strictEqual(certs.perfRows()[0]?.measured_at_ms, T0);
    assert.deepStrictEqual(certs.knobAssignment("mp_1", "np_1", "auto"), result().knob_assignment);
    assert.strictEqual(certs.knobAssignment("mp_1", "np_1", "physical"), undefined);
    assert.strictEqual(certs.knobAssignment("mp_2", "np_1", "auto"), undefined);
    assert.deepStrictEqual(certs.allKnobAssignments(), [{
      machine_profile_hash: "mp_1",
      numeric_profile_id: "np_1",
      knob: "auto",
      assignment: result().knob_assignment,
      assigned_at_ms: T0,
    }]);
  });
});

Deno.test("a failing result is stored uncertified; the same keys replace the row; rowsForLane spans machine profiles", async () => {
  await withDir((dir) => {
    using store = Store.open(join(dir, "synapse.db"));
    const certs = new CertificationStore(store);
    certs.putProbeResult(
      result({
        passed: false,
        checks: [{ id: "determinism", passed: false, value: 0.5, threshold: 1, comparison: "==" }],
      }),
      facts(),
    );
    assert.strictEqual(certs.row("mp_1", "np_1", "rc_1")?.status, "uncertified");
    certs.putProbeResult(result(), facts({ now_ms: T0 + 10 }));
    assert.strictEqual(certs.row("mp_1", "np_1", "rc_1")?.status, "certified");
    assert.strictEqual(certs.rowsForLane("synapse-tiny-llama").length, 1);
    certs.putProbeResult(result(), facts({ machine_profile_hash: "mp_2", now_ms: T0 + 20 }));
    certs.putProbeResult(
      result({ model_id: "other", lane_id: "other", numeric_profile_id: "np_9" }),
      facts({ now_ms: T0 + 30 }),
    );
    assert.deepStrictEqual(
      certs.rowsForLane("synapse-tiny-llama").map((r) => r.machine_profile_hash),
      ["mp_2", "mp_1"],
    );
    assert.deepStrictEqual(certs.allCertRows().map((r) => r.lane_id), [
      "other",
      "synapse-tiny-llama",
      "synapse-tiny-llama",
    ]);
    assert.strictEqual(certs.changeCount, 4);
    assert.deepStrictEqual(certs.rowsForLane("nobody"), []);
  });
});

Deno.test("a write that fails inside the transaction leaves nothing behind; a disposed store refuses", async () => {
  await withDir((dir) => {
    const store = Store.open(join(dir, "synapse.db"));
    const certs = new CertificationStore(store);
    // cert_class outside the CHECK constraint: the cert row insert fails, so nothing is written.
    assert.throws(
      () => certs.putProbeResult(result({ cert_class: "bogus" as never }), facts()),
      (err) => err instanceof SynapseError && err.code === "store_failure",
    );
    assert.deepStrictEqual(certs.allCertRows(), []);
    assert.deepStrictEqual(certs.perfRows(), []);
    assert.deepStrictEqual(certs.allKnobAssignments(), []);
    assert.strictEqual(certs.changeCount, 0);
    // perf row with a NOT NULL column missing: the cert row written before it rolls back too.
    assert.throws(
      () =>
        certs.putProbeResult(
          result({
            perf: [{
              knob: "auto",
              batch_rows: null as never,
              tokens_per_second: 1,
              start_delay_p50_ms: 1,
              call_ms_p50: 1,
            }],
          }),
          facts(),
        ),
      (err) => err instanceof SynapseError && err.code === "store_failure",
    );
    assert.deepStrictEqual(certs.allCertRows(), []);
    store.dispose();
    assert.throws(
      () => certs.allCertRows(),
      (err) => err instanceof SynapseError && err.code === "disposed",
    );
  });
});

Deno.test("an unreadable stored JSON column is internal_error store_corrupt", async () => {
  await withDir((dir) => {
    using store = Store.open(join(dir, "synapse.db"));
    const certs = new CertificationStore(store);
    certs.putProbeResult(result(), facts());
    store.database.prepare("UPDATE knob_assignments SET assignment_json = '{not json'").run();
    assert.throws(
      () => certs.knobAssignment("mp_1", "np_1", "auto"),
      (err) =>
        err instanceof SynapseError && err.code === "internal_error" &&
        (err.details as { reason?: string }).reason === "store_corrupt",
    );
  });
});
