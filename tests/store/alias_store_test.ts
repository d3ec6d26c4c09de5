import assert from "node:assert";
import { join } from "node:path";
import { SynapseError } from "../../lib/contract/errors.ts";
import { Store } from "../../lib/store/store.ts";
import { AliasStore } from "../../lib/store/alias_store.ts";

const A = "a".repeat(64);
const B = "b".repeat(64);
const C = "c".repeat(64);

async function tempDir(): Promise<{ dir: string; [Symbol.asyncDispose]: () => Promise<void> }> {
  const dir = await Deno.makeTempDir({ prefix: "synapse_alias_store_test_" });
  return {
    dir,
    async [Symbol.asyncDispose](): Promise<void> {
      await Deno.remove(dir, { recursive: true });
    },
  };
}

function code(c: string) {
  return (e: unknown) => e instanceof SynapseError && e.code === c;
}

Deno.test("AliasStore: declare bumps the epoch once; declaring an active pair changes nothing", () => {
  using store = Store.open(":memory:");
  const aliases = new AliasStore(store);
  assert.strictEqual(aliases.tableEpoch(), 0);
  assert.deepStrictEqual(aliases.declare(B, A, { source: "declared", note: "same" }, 1000), {
    changed: true,
    table_epoch: 1,
  });
  assert.deepStrictEqual(aliases.declare(A, B, { source: "declared" }, 1001), {
    changed: false,
    table_epoch: 1,
  });
  assert.strictEqual(store.tableEpoch, 1);
  assert.deepStrictEqual(aliases.rows(), [{
    fingerprint_a: A,
    fingerprint_b: B,
    valid_from_ms: 1000,
    valid_to_ms: null,
    evidence: { source: "declared", note: "same" },
  }]);
  assert.deepStrictEqual(aliases.equivalentsOf(A, 1000), [{ fingerprint: B, source: "declared" }]);
  assert.deepStrictEqual(aliases.equivalentsOf(B, 1000), [{ fingerprint: A, source: "declared" }]);
  assert.deepStrictEqual(aliases.equivalentsOf(A, 999), []);
});

Deno.test("AliasStore: retract sets valid_to, never deletes; a retracted pair is declared anew", () => {
  using store = Store.open(":memory:");
  const aliases = new AliasStore(store);
  aliases.declare(A, B, { source: "declared" }, 1000);
  assert.deepStrictEqual(aliases.retract(B, A, 2000), { changed: true, table_epoch: 2 });
  assert.deepStrictEqual(aliases.retract(A, B, 2001), { changed: false, table_epoch: 2 });
  assert.deepStrictEqual(aliases.equivalentsOf(A, 2000), []);
  assert.deepStrictEqual(aliases.equivalentsOf(A, 1999), [{ fingerprint: B, source: "declared" }]);
  assert.deepStrictEqual(aliases.declare(A, B, { source: "declared" }, 3000), {
    changed: true,
    table_epoch: 3,
  });
  assert.deepStrictEqual(
    aliases.rows().map((r) => [r.valid_from_ms, r.valid_to_ms]),
    [[1000, 2000], [3000, null]],
  );
});

Deno.test("AliasStore: declare and retract in one millisecond, then declare again", () => {
  using store = Store.open(":memory:");
  const aliases = new AliasStore(store);
  aliases.declare(A, B, { source: "declared" }, 5);
  aliases.retract(A, B, 5);
  assert.deepStrictEqual(aliases.equivalentsOf(A, 5), []);
  assert.deepStrictEqual(aliases.declare(A, B, { source: "declared", again: true }, 5), {
    changed: true,
    table_epoch: 3,
  });
  assert.deepStrictEqual(aliases.equivalentsOf(A, 5), [{ fingerprint: B, source: "declared" }]);
});

Deno.test("AliasStore: a probe row replaces a declared one; the probe retracts only its own", () => {
  using store = Store.open(":memory:");
  const aliases = new AliasStore(store);
  aliases.declare(A, B, { source: "declared" }, 10);
  aliases.declare(A, C, { source: "declared" }, 10);
  assert.deepStrictEqual(aliases.retract(A, C, 15, { onlySource: "probe" }), {
    changed: false,
    table_epoch: 2,
  });
  const probe = {
    source: "probe" as const,
    machine_profile_hash: "0".repeat(64),
    lane_id: "l",
    model_id: "m",
    reference_lane_id: "r",
    reference_model_id: "rm",
    mean_cosine: 0.99999,
    min_cosine: 0.9999,
    mean_cosine_threshold: 0.9999,
    min_cosine_threshold: 0.999,
    probe_job_id: null,
  };
  assert.deepStrictEqual(aliases.declare(A, B, probe, 20), { changed: true, table_epoch: 3 });
  assert.deepStrictEqual(aliases.declare(A, B, probe, 21), { changed: false, table_epoch: 3 });
  assert.deepStrictEqual(aliases.equivalentsOf(A, 20), [
    { fingerprint: B, source: "probe" },
    { fingerprint: C, source: "declared" },
  ]);
  // The pair stayed live across the replacement: check_index sees no retracted pair.
  assert.strictEqual(aliases.checkIndex(A, [A, B], 25).status, "valid");
  assert.deepStrictEqual(aliases.retract(A, B, 30, { onlySource: "probe" }), {
    changed: true,
    table_epoch: 4,
  });
  assert.deepStrictEqual(
    aliases.rows().filter((r) => r.fingerprint_b === B).map((r) => [
      r.evidence.source,
      r.valid_from_ms,
      r.valid_to_ms,
    ]),
    [["declared", 10, 20], ["probe", 20, 30]],
  );
});

Deno.test("AliasStore: bad fingerprints and self-aliases are invalid_request naming the field", () => {
  using store = Store.open(":memory:");
  const aliases = new AliasStore(store);
  const field = (f: string) => (e: unknown) =>
    e instanceof SynapseError && e.code === "invalid_request" &&
    (e.details as { field?: string }).field === f;
  assert.throws(() => aliases.declare("xyz", B, { source: "declared" }, 1), field("fingerprint_a"));
  assert.throws(
    () => aliases.declare(A, B.toUpperCase(), { source: "declared" }, 1),
    field("fingerprint_b"),
  );
  assert.throws(() => aliases.declare(A, A, { source: "declared" }, 1), field("fingerprint_b"));
  assert.throws(() => aliases.retract(A, "", 1), field("fingerprint_b"));
  assert.strictEqual(store.tableEpoch, 0);
});

Deno.test("AliasStore: checkIndex flips to migration_required on retraction, with the epoch read", () => {
  using store = Store.open(":memory:");
  const aliases = new AliasStore(store);
  aliases.declare(A, B, { source: "declared" }, 100);
  const before = aliases.checkIndex(A, [A, B], 150);
  assert.deepStrictEqual(before, { status: "valid", table_epoch: 1 });
  aliases.retract(A, B, 200);
  const after = aliases.checkIndex(A, [B], 250, { served: (f) => f === A });
  assert.deepStrictEqual(after, {
    status: "migration_required",
    retracted_pair: { fingerprint_a: A, fingerprint_b: B, valid_to_ms: 200 },
    rebuild_target: A,
    rebuild_target_served: true,
    table_epoch: 2,
  });
});

Deno.test("AliasStore: rows and epoch survive a restart; a second connection sees changes", async () => {
  await using t = await tempDir();
  const path = join(t.dir, "store.db");
  {
    using store = Store.open(path);
    const aliases = new AliasStore(store);
    aliases.declare(A, B, { source: "declared" }, 100);
    aliases.declare(A, C, { source: "declared" }, 100);
    aliases.retract(A, C, 200);
  }
  using s1 = Store.open(path);
  using s2 = Store.open(path);
  const one = new AliasStore(s1);
  const two = new AliasStore(s2);
  assert.strictEqual(one.tableEpoch(), 3);
  assert.strictEqual(one.rows().length, 2);
  assert.deepStrictEqual(one.equivalentsOf(A, 300), [{ fingerprint: B, source: "declared" }]);
  // A change through the other connection is seen on the next read (the epoch moved).
  two.retract(A, B, 400);
  assert.deepStrictEqual(one.equivalentsOf(A, 500), []);
  assert.strictEqual(one.tableEpoch(), 4);
});

Deno.test("AliasStore: interleaved declares and retracts over two connections keep the epoch monotonic", async () => {
  await using t = await tempDir();
  const path = join(t.dir, "store.db");
  using s1 = Store.open(path);
  using s2 = Store.open(path);
  const stores = [new AliasStore(s1), new AliasStore(s2)];
  const seen: number[] = [];
  let changes = 0;
  for (let i = 0; i < 60; i++) {
    const s = stores[i % 2]!;
    const other = [B, C][(i >> 1) % 2]!;
    const out = i % 3 === 0
      ? s.retract(A, other, 1000 + i)
      : s.declare(A, other, { source: "declared", i }, 1000 + i);
    if (out.changed) changes++;
    seen.push(out.table_epoch);
  }
  for (let i = 1; i < seen.length; i++) {
    assert.ok(seen[i]! >= seen[i - 1]!, `epoch went back at ${i}`);
  }
  assert.strictEqual(s1.tableEpoch, changes);
  assert.ok(changes > 10);
});

Deno.test("AliasStore: disposed store answers disposed; corrupt evidence answers store_corrupt", () => {
  const store = Store.open(":memory:");
  const aliases = new AliasStore(store);
  store.database.prepare(
    "INSERT INTO alias_rows VALUES (?, ?, 1, NULL, 'not json')",
  ).run(A, B);
  assert.throws(
    () => aliases.rows(),
    (e: unknown) =>
      e instanceof SynapseError && e.code === "internal_error" &&
      (e.details as { reason?: string }).reason === "store_corrupt",
  );
  store.dispose();
  assert.throws(() => aliases.declare(A, C, { source: "declared" }, 1), code("disposed"));
  assert.throws(() => aliases.equivalentsOf(A, 1), code("disposed"));
});
