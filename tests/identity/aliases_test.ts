import assert from "node:assert";
import {
  activeRowOf,
  type AliasRow,
  checkIndex,
  equivalentsOf,
  isActive,
  isFingerprint,
  orderPair,
} from "../../lib/identity/aliases.ts";

const A = "a".repeat(64);
const B = "b".repeat(64);
const C = "c".repeat(64);
const D = "d".repeat(64);

function row(
  a: string,
  b: string,
  from: number,
  to: number | null,
  source: "declared" | "probe" = "declared",
): AliasRow {
  const [x, y] = orderPair(a, b);
  return {
    fingerprint_a: x,
    fingerprint_b: y,
    valid_from_ms: from,
    valid_to_ms: to,
    evidence: source === "declared" ? { source } : {
      source,
      machine_profile_hash: "0".repeat(64),
      lane_id: "l",
      model_id: "m",
      reference_lane_id: "r",
      reference_model_id: "rm",
      mean_cosine: 1,
      min_cosine: 1,
      mean_cosine_threshold: 0.9999,
      min_cosine_threshold: 0.999,
      probe_job_id: null,
    },
  };
}

Deno.test("orderPair puts the smaller fingerprint first, whatever the argument order", () => {
  assert.deepStrictEqual(orderPair(B, A), [A, B]);
  assert.deepStrictEqual(orderPair(A, B), [A, B]);
});

Deno.test("isFingerprint takes 64 lowercase hex only", () => {
  assert.ok(isFingerprint(A));
  assert.ok(!isFingerprint("A".repeat(64)));
  assert.ok(!isFingerprint("a".repeat(63)));
  assert.ok(!isFingerprint(42));
});

Deno.test("isActive is from ≤ t < to, open-ended while valid_to is null", () => {
  const r = row(A, B, 100, 200);
  assert.ok(!isActive(r, 99));
  assert.ok(isActive(r, 100));
  assert.ok(isActive(r, 199));
  assert.ok(!isActive(r, 200));
  assert.ok(isActive(row(A, B, 100, null), 1e15));
});

Deno.test("equivalentsOf lists live pairs only, not transitively, probe over declared", () => {
  const rows = [
    row(A, B, 0, null),
    row(B, C, 0, null),
    row(A, D, 0, 15),
    row(A, B, 10, null, "probe"),
  ];
  assert.deepStrictEqual(equivalentsOf(rows, A, 20), [{ fingerprint: B, source: "probe" }]);
  assert.deepStrictEqual(equivalentsOf(rows, A, 5), [
    { fingerprint: B, source: "declared" },
    { fingerprint: D, source: "declared" },
  ]);
  assert.deepStrictEqual(equivalentsOf(rows, B, 20), [
    { fingerprint: A, source: "probe" },
    { fingerprint: C, source: "declared" },
  ]);
  assert.deepStrictEqual(equivalentsOf(rows, D, 60), []);
  assert.strictEqual(activeRowOf(rows, B, A, 20)?.evidence.source, "probe");
  assert.strictEqual(activeRowOf(rows, A, D, 60), undefined);
});

Deno.test("checkIndex: valid while every fingerprint it mixes is the index's or live-equivalent to it", () => {
  const rows = [row(A, B, 0, null), row(C, D, 0, 10), row(A, C, 0, null)];
  assert.deepStrictEqual(checkIndex(rows, A, [A, B], 20), { status: "valid" });
  assert.deepStrictEqual(checkIndex(rows, A, [A], 20), { status: "valid" });
  assert.deepStrictEqual(checkIndex(rows, A, [], 20), { status: "valid" });
  // C~D is retracted, but the index does not mix them (and A~C is live).
  assert.deepStrictEqual(checkIndex(rows, A, [A, C], 20), { status: "valid" });
  // Before the retraction time the pair was live.
  assert.deepStrictEqual(checkIndex(rows, C, [C, D], 5), { status: "valid" });
});

Deno.test("checkIndex: a fingerprint never equivalent to the index's is not_equivalent (equivalence is not transitive)", () => {
  const rows = [row(A, B, 0, null), row(B, C, 0, null)];
  // D was never aliased with anything: another space mixed in.
  assert.deepStrictEqual(checkIndex(rows, A, [A, D, B], 20), {
    status: "migration_required",
    not_equivalent: [D],
    rebuild_target: A,
    rebuild_target_served: false,
  });
  // A~B and B~C do not make C equivalent to A.
  assert.deepStrictEqual(checkIndex(rows, A, [C, B], 20).not_equivalent, [C]);
  // Seen from B, both are live.
  assert.deepStrictEqual(checkIndex(rows, B, [A, C], 20), { status: "valid" });
});

Deno.test("checkIndex: migration_required names the retracted pair and a rebuild target", () => {
  const rows = [row(B, A, 0, 10), row(A, C, 0, null, "probe")];
  const served = new Set([C]);
  const out = checkIndex(rows, A, [B], 20, { served: (f) => served.has(f) });
  assert.deepStrictEqual(out, {
    status: "migration_required",
    retracted_pair: { fingerprint_a: A, fingerprint_b: B, valid_to_ms: 10 },
    rebuild_target: C,
    rebuild_target_served: true,
  });
  // The index fingerprint itself is served: it is the target.
  served.add(A);
  assert.strictEqual(
    checkIndex(rows, A, [A, B], 20, { served: (f) => served.has(f) }).rebuild_target,
    A,
  );
  // Nothing serves either: the index fingerprint, said to be unserved.
  const bare = checkIndex(rows, A, [A, B], 20);
  assert.strictEqual(bare.rebuild_target, A);
  assert.strictEqual(bare.rebuild_target_served, false);
});

Deno.test("checkIndex: a pair declared again after its retraction is valid again", () => {
  const rows = [row(A, B, 0, 10), row(A, B, 30, null)];
  assert.strictEqual(checkIndex(rows, A, [A, B], 20).status, "migration_required");
  assert.strictEqual(checkIndex(rows, A, [A, B], 30).status, "valid");
});

Deno.test("checkIndex: the first retracted pair in (a, b) order is named", () => {
  const rows = [row(C, D, 0, 5), row(A, C, 0, 7)];
  const out = checkIndex(rows, D, [A, C, D], 9);
  assert.deepStrictEqual(out.retracted_pair, {
    fingerprint_a: A,
    fingerprint_b: C,
    valid_to_ms: 7,
  });
});
