import assert from "node:assert/strict";
import { SynapseError } from "../../lib/contract/errors.ts";
import { CONFIG_PATH, filesIn, ONNX_PATH, tempCache, TOKENIZER_PATH } from "./_helpers.ts";

function notInstalled(err: unknown): boolean {
  assert.ok(err instanceof SynapseError, String(err));
  assert.equal(err.code, "model_not_installed");
  assert.equal(err.details?.reason, "not_in_cache");
  return true;
}

Deno.test("cache.gc racing a load: a leased blob is kept; released, it is marked, then deleted", async () => {
  await using t = await tempCache();
  const { digest, size } = await t.cache.importFile(ONNX_PATH);
  const hex = digest.slice(7);
  {
    using lease = t.cache.acquireShared(digest);
    assert.equal(lease.path, t.cache.blobPath(digest));
    assert.deepEqual(await t.cache.gc({ digest, graceMs: 0 }), [{
      digest,
      state: "kept",
      reason: "leased",
    }]);
    // A second lease of this process, released, does not free the first.
    t.cache.acquireShared(digest).release();
    assert.deepEqual(await t.cache.gc({ digest, graceMs: 0 }), [{
      digest,
      state: "kept",
      reason: "leased",
    }]);
    assert.equal((await Deno.stat(lease.path)).size, size, "the loading blob survives");
    assert.equal((await t.cache.meta(digest))?.tombstone, undefined);
  }
  const [marked] = await t.cache.gc({ digest, graceMs: 0 });
  assert.equal(marked?.state, "marked");
  assert.ok((await t.cache.meta(digest))?.tombstone !== undefined);
  assert.deepEqual(await t.cache.gc({ digest, graceMs: 0 }), [{
    digest,
    state: "deleted",
    freed_bytes: size,
  }]);
  assert.deepEqual(filesIn(`${t.root}/blobs`), []);
  assert.deepEqual(filesIn(`${t.root}/meta`), []);
  assert.equal(await t.cache.meta(digest), undefined);
  assert.throws(() => t.cache.acquireShared(digest), notInstalled);
  await assert.rejects(t.cache.gc({ digest }), notInstalled);
  assert.ok(filesIn(`${t.root}/leases`).includes(`${hex}.lock`));
});

Deno.test("a shared lease held by another process keeps the blob from GC", async () => {
  await using t = await tempCache();
  const { digest } = await t.cache.importFile(CONFIG_PATH);
  const leasePath = `${t.root}/leases/${digest.slice(7)}.lock`;
  // flock(1) takes a shared lock and holds it while `sleep` runs (it prints its pid once held).
  const child = new Deno.Command("flock", {
    args: ["-o", "-s", leasePath, "sh", "-c", "echo $$; exec sleep 30"],
    stdout: "piped",
  }).spawn();
  try {
    const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
    let printed = "";
    while (!printed.includes("\n")) {
      const { value, done } = await reader.read();
      if (done) break;
      printed += value;
    }
    await reader.cancel();
    assert.deepEqual(await t.cache.gc({ digest, graceMs: 0 }), [{
      digest,
      state: "kept",
      reason: "leased",
    }]);
  } finally {
    child.kill("SIGKILL");
    await child.status;
  }
  assert.equal((await t.cache.gc({ digest, graceMs: 0 }))[0]?.state, "marked");
});

Deno.test("a pinned blob is kept; unpinning another owner's pin leaves it; GC never edits pins", async () => {
  await using t = await tempCache({ now: () => 500 });
  const { digest } = await t.cache.importFile(CONFIG_PATH);
  const pinned = await t.cache.pin(digest, "other:model:x");
  assert.deepEqual(pinned.pins, [{ owner: "other:model:x", since_ms: 500 }]);
  assert.deepEqual((await t.cache.pin(digest, "other:model:x")).pins.length, 1, "idempotent");
  const keptPinned = [{ digest, state: "kept", reason: "pinned", pinned_by: ["other:model:x"] }];
  assert.deepEqual(await t.cache.gc({ digest, graceMs: 0 }), keptPinned);
  // Our own (default owner "synapse") unpin does not touch the other module's pin.
  assert.deepEqual((await t.cache.unpin(digest)).pins, [{ owner: "other:model:x", since_ms: 500 }]);
  assert.deepEqual(await t.cache.gc({ digest, graceMs: 0 }), keptPinned);
  assert.deepEqual(await t.cache.gc({ graceMs: 0 }), [{
    digest,
    state: "kept",
    reason: "under_watermark",
  }]);
  assert.deepEqual((await t.cache.meta(digest))?.pins, [{ owner: "other:model:x", since_ms: 500 }]);
  await t.cache.pin(digest);
  assert.deepEqual((await t.cache.unpin(digest, "other:model:x")).pins, [{
    owner: "synapse",
    since_ms: 500,
  }]);
  assert.deepEqual(await t.cache.gc({ digest, graceMs: 0 }), [{
    ...keptPinned[0],
    pinned_by: ["synapse"],
  }]);
  await t.cache.unpin(digest);
  assert.equal((await t.cache.gc({ digest, graceMs: 0 }))[0]?.state, "marked");
  await assert.rejects(t.cache.pin(`sha256:${"2".repeat(64)}`), notInstalled);
  await assert.rejects(t.cache.unpin(`sha256:${"2".repeat(64)}`), notInstalled);
});

Deno.test("a tombstoned blob that is leased or pinned again loses its tombstone", async () => {
  await using t = await tempCache();
  const { digest } = await t.cache.importFile(CONFIG_PATH);
  assert.equal((await t.cache.gc({ digest, graceMs: 0 }))[0]?.state, "marked");
  t.cache.acquireShared(digest).release();
  assert.equal((await t.cache.meta(digest))?.tombstone, undefined);
  assert.equal(
    (await t.cache.gc({ digest, graceMs: 0 }))[0]?.state,
    "marked",
    "marked afresh, not deleted",
  );
  await t.cache.pin(digest, "m");
  await t.cache.unpin(digest, "m");
  assert.equal((await t.cache.meta(digest))?.tombstone, undefined);
  assert.equal((await t.cache.gc({ digest, graceMs: 0 }))[0]?.state, "marked");
  assert.equal((await t.cache.gc({ digest, graceMs: 0 }))[0]?.state, "deleted");
});

Deno.test("a marked blob is deleted only once the grace period has passed", async () => {
  let clock = 10_000;
  await using t = await tempCache({ now: () => clock });
  const { digest, size } = await t.cache.importFile(CONFIG_PATH);
  assert.deepEqual(await t.cache.gc({ digest, graceMs: 1000 }), [{
    digest,
    state: "marked",
    delete_after_ms: 11_000,
  }]);
  assert.deepEqual((await t.cache.meta(digest))?.tombstone, { marked_ms: 10_000, grace_ms: 1000 });
  clock = 10_999;
  assert.deepEqual(await t.cache.gc({ digest, graceMs: 1000 }), [
    { digest, state: "marked", reason: "in_grace", delete_after_ms: 11_000 },
  ]);
  clock = 11_000;
  assert.deepEqual(await t.cache.gc({ digest, graceMs: 1000 }), [{
    digest,
    state: "deleted",
    freed_bytes: size,
  }]);
});

Deno.test("cache.gc with no digest collects the least recently created blobs beyond maxBytes", async () => {
  let clock = 1;
  const sizes = await Promise.all(
    [CONFIG_PATH, TOKENIZER_PATH, ONNX_PATH].map(async (p) => (await Deno.stat(p)).size),
  );
  await using t = await tempCache({ now: () => clock++, maxBytes: sizes[1]! + sizes[2]! });
  const config = await t.cache.importFile(CONFIG_PATH);
  const tok = await t.cache.importFile(TOKENIZER_PATH);
  const onnx = await t.cache.importFile(ONNX_PATH);
  assert.deepEqual((await t.cache.list()).map((m) => m.digest), [
    config.digest,
    tok.digest,
    onnx.digest,
  ]);
  assert.equal(await t.cache.usedBytes(), sizes[0]! + sizes[1]! + sizes[2]!);
  const rows = await t.cache.gc({ graceMs: 0 });
  assert.deepEqual(rows.map((r) => [r.digest, r.state, r.reason]), [
    [config.digest, "marked", undefined],
    [tok.digest, "kept", "under_watermark"],
    [onnx.digest, "kept", "under_watermark"],
  ]);
  // The oldest is pinned now: it is kept (its tombstone cleared) and the next oldest goes instead.
  await t.cache.pin(config.digest);
  const again = await t.cache.gc({ graceMs: 0 });
  assert.deepEqual(again.map((r) => [r.digest, r.state, r.reason]), [
    [config.digest, "kept", "pinned"],
    [tok.digest, "marked", undefined],
    [onnx.digest, "kept", "under_watermark"],
  ]);
  const third = await t.cache.gc({ graceMs: 0 });
  assert.deepEqual(third.map((r) => [r.digest, r.state]), [
    [config.digest, "kept"],
    [tok.digest, "deleted"],
    [onnx.digest, "kept"],
  ]);
  assert.equal(await t.cache.usedBytes(), sizes[0]! + sizes[2]!);
});

Deno.test("cache.gc with no digest removes idle partial downloads nobody is writing", async () => {
  await using t = await tempCache();
  await t.cache.importFile(CONFIG_PATH); // lays the cache out
  const idle = "a".repeat(64);
  const busy = "b".repeat(64);
  await Deno.writeFile(`${t.root}/tmp/${idle}.partial`, new Uint8Array(100));
  await Deno.writeFile(`${t.root}/tmp/${busy}.partial`, new Uint8Array(50));
  const { tryLockExclusive } = await import("../../ffi/flock.ts");
  using _downloading = tryLockExclusive(`${t.root}/leases/${busy}.download.lock`)!;
  const rows = await t.cache.gc({ graceMs: 0 });
  assert.deepEqual(rows.filter((r) => r.reason === "partial"), [
    { digest: `sha256:${idle}`, state: "deleted", reason: "partial", freed_bytes: 100 },
  ]);
  assert.ok(filesIn(`${t.root}/tmp`).includes(`${busy}.partial`));
  assert.ok(!filesIn(`${t.root}/tmp`).includes(`${idle}.partial`));
});

Deno.test("cache.gc refuses a negative grace and a malformed digest with invalid_request", async () => {
  await using t = await tempCache();
  const invalid = (field: string) => (err: unknown) => {
    assert.ok(err instanceof SynapseError);
    assert.equal(err.code, "invalid_request");
    assert.equal(err.details?.field, field);
    return true;
  };
  await assert.rejects(t.cache.gc({ graceMs: -1 }), invalid("grace_ms"));
  await assert.rejects(t.cache.gc({ digest: "sha256:xyz" }), invalid("digest"));
  assert.throws(() => t.cache.acquireShared("nope"), invalid("digest"));
});
