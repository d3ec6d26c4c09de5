/**
 * `SelfCheckStore` over a real SQLite store (migration 4's `catalog_self_checks`): rows round-trip
 * with their failed input, a key is replaced rather than duplicated, a lane lists every key it
 * was checked under (newest first), and a closed store answers `disposed`.
 */
import assert from "node:assert/strict";
import { Store } from "../../lib/store/store.ts";
import { SelfCheckStore } from "../../lib/probe/self_check_store.ts";
import type { SelfCheckRow } from "../../lib/probe/types.ts";
import { SynapseError } from "../../lib/contract/errors.ts";

function row(over: Partial<SelfCheckRow> = {}): SelfCheckRow {
  return {
    check_id: "sha256:" + "a".repeat(64),
    catalog_id: "tiny-embed",
    backend: "ort",
    manifest_digest: "sha256:" + "b".repeat(64),
    fingerprint: "c".repeat(64),
    state: "passed",
    checked_at_ms: 1_000,
    duration_ms: 12,
    ...over,
  };
}

Deno.test("SelfCheckStore: rows round-trip, a key is replaced, a lane lists its keys newest first; the rows outlive the connection", async () => {
  const dir = await Deno.makeTempDir({ prefix: "synapse-selfcheck-store-" });
  try {
    const path = `${dir}/store.db`;
    {
      using store = Store.open(path);
      const checks = new SelfCheckStore(store);
      assert.equal(checks.get(row().check_id), undefined);
      checks.put(row());
      assert.deepEqual(checks.get(row().check_id), row());
      const failed = row({
        check_id: "sha256:" + "d".repeat(64),
        state: "failed",
        failed_input: { index: 5, reason: "non_finite", detail: "NaN" },
        checked_at_ms: 2_000,
      });
      checks.put(failed);
      assert.deepEqual(checks.get(failed.check_id), failed);
      // The same key again: replaced, not a second row.
      checks.put(row({ checked_at_ms: 500, duration_ms: 7.6 }));
      assert.deepEqual(
        checks.forLane("tiny-embed", "ort").map((
          r,
        ) => [r.check_id, r.checked_at_ms, r.duration_ms]),
        [[failed.check_id, 2_000, 12], [row().check_id, 500, 8]],
      );
      assert.deepEqual(checks.forLane("tiny-embed", "llama"), []);
    }
    using again = Store.open(path);
    const reread = new SelfCheckStore(again);
    assert.deepEqual(reread.get("sha256:" + "d".repeat(64))?.failed_input, {
      index: 5,
      reason: "non_finite",
      detail: "NaN",
    });
    again.dispose();
    assert.throws(
      () => reread.get(row().check_id),
      (e: unknown) => e instanceof SynapseError && e.code === "disposed",
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
