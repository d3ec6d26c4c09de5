/**
 * Verification on load (F28) at the cache: `verifyBlob` hashes a blob once per cache instance and
 * reuses the result while the file is unchanged, refuses a damaged blob naming its digest, and
 * `healBlob` fetches it again from a source that verifies, putting the damaged bytes back when
 * none does. Only copies in a temp cache are damaged.
 */
import assert from "node:assert/strict";
import { SynapseError } from "../../lib/contract/errors.ts";
import { ModelCache } from "../../lib/cache/model_cache.ts";
import { TestServer } from "./_server.ts";
import { digestOfBytes, ONNX_PATH, tempCache, tmpLeftovers, writeScratch } from "./_helpers.ts";

const ONNX = await Deno.readFile(ONNX_PATH);
const DIGEST = digestOfBytes(ONNX);

function damaged(err: unknown): boolean {
  assert.ok(err instanceof SynapseError, String(err));
  assert.equal(err.code, "artifact_invalid", err.message);
  assert.equal(err.details?.reason, "blob_digest_mismatch");
  assert.equal(err.details?.digest, DIGEST);
  assert.equal(err.details?.model_id, "m");
  assert.equal(err.details?.file, "model");
  return true;
}

Deno.test("verifyBlob hashes once per instance while the file is unchanged; a new instance hashes again", async () => {
  await using t = await tempCache();
  const src = await writeScratch(t.scratch, "model.onnx", ONNX);
  await t.cache.importFile(src);
  // Written (and hashed) by this instance: trusted as it is.
  assert.equal((await t.cache.verifyBlob(DIGEST)).hashed, false);
  const fresh = new ModelCache({ root: t.root });
  const first = await fresh.verifyBlob(DIGEST);
  assert.deepEqual([first.hashed, first.bytes], [true, ONNX.length]);
  assert.equal((await fresh.verifyBlob(DIGEST)).hashed, false);
  // A changed mtime is a changed file: hashed again (and still right).
  await Deno.utime(t.cache.blobPath(DIGEST), new Date(), new Date(Date.now() + 5000));
  assert.equal((await fresh.verifyBlob(DIGEST)).hashed, true);
});

Deno.test("verifyBlob refuses a flipped byte and a truncation naming the blob; healBlob restores it from a file that verifies", async () => {
  await using t = await tempCache();
  const src = await writeScratch(t.scratch, "model.onnx", ONNX);
  await t.cache.importFile(src);
  const blob = t.cache.blobPath(DIGEST);
  const flipped = ONNX.slice();
  flipped[flipped.length >> 1]! ^= 1;
  await Deno.writeFile(blob, flipped);
  const label = { model_id: "m", file: "model" };
  await assert.rejects(t.cache.verifyBlob(DIGEST, label), damaged);
  const healed = await t.cache.healBlob(DIGEST, [`file://${src}`], label);
  assert.equal(healed.from, "file");
  assert.deepEqual(await Deno.readFile(blob), ONNX);
  assert.equal((await t.cache.verifyBlob(DIGEST, label)).hashed, false, "healed bytes are trusted");
  // Truncated: refused on its size alone.
  await Deno.truncate(blob, 1000);
  await assert.rejects(t.cache.verifyBlob(DIGEST, label), (err) => {
    damaged(err);
    assert.deepEqual(
      [(err as SynapseError).details?.size, (err as SynapseError).details?.expected_size],
      [1000, ONNX.length],
    );
    return true;
  });
  assert.deepEqual(tmpLeftovers(t.root), []);
});

Deno.test("healBlob from a pinned URL; a source that no longer verifies puts the damaged bytes back; no source is no_source", async () => {
  await using srv = new TestServer();
  await using t = await tempCache();
  srv.routes.set("/model.onnx", { kind: "file", bytes: ONNX });
  const src = await writeScratch(t.scratch, "model.onnx", ONNX);
  await t.cache.importFile(src);
  const blob = t.cache.blobPath(DIGEST);
  await Deno.truncate(blob, 5000);
  const viaUrl = await t.cache.healBlob(DIGEST, [`${srv.base}/model.onnx`]);
  assert.equal(viaUrl.from, "url");
  assert.deepEqual(await Deno.readFile(blob), ONNX);
  // The local source changed too: nothing heals it, and the damaged bytes stay for the next look.
  await Deno.truncate(blob, 5000);
  const bad = ONNX.slice();
  bad[7]! ^= 1;
  await Deno.writeFile(src, bad);
  await assert.rejects(t.cache.healBlob(DIGEST, [`file://${src}`]), (err) => {
    assert.ok(err instanceof SynapseError);
    assert.equal(err.code, "artifact_invalid");
    assert.equal(err.details?.reason, "digest_mismatch");
    return true;
  });
  assert.equal((await Deno.stat(blob)).size, 5000);
  await assert.rejects(t.cache.healBlob(DIGEST, ["", "s3://x"]), (err) => {
    assert.equal((err as SynapseError).details?.reason, "no_source");
    return true;
  });
  assert.deepEqual(tmpLeftovers(t.root), []);
  // A blob that is not there is model_not_installed.
  await Deno.remove(blob);
  await assert.rejects(t.cache.verifyBlob(DIGEST), (err) => {
    assert.equal((err as SynapseError).code, "model_not_installed");
    return true;
  });
});
