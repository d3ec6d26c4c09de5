import assert from "node:assert/strict";
import { SynapseError } from "../../lib/contract/errors.ts";
import { modelCacheRoot } from "../../lib/cache/model_cache.ts";
import { sniffFormat, validateArtifact } from "../../lib/cache/validate.ts";
import { SanitizedTokenizer } from "../../lib/tokenize/tokenizer.ts";
import {
  CONFIG_PATH,
  digestOfBytes,
  filesIn,
  GGUF_PATH,
  ONNX_PATH,
  tempCache,
  tmpLeftovers,
  TOKENIZER_PATH,
  writeScratch,
} from "./_helpers.ts";

/** Asserts `err` is an `artifact_invalid` with `reason`; returns its details. */
function artifactInvalid(reason: string): (err: unknown) => boolean {
  return (err: unknown) => {
    assert.ok(err instanceof SynapseError, String(err));
    assert.equal(err.code, "artifact_invalid", err.message);
    assert.equal(err.errorClass, "permanent");
    assert.equal(err.details?.reason, reason, err.message);
    return true;
  };
}

Deno.test("modelCacheRoot() prefers CORTEXKIT_MODEL_CACHE, then SYNAPSE_MODEL_CACHE_DIR, then the data home", () => {
  assert.equal(
    modelCacheRoot({ CORTEXKIT_MODEL_CACHE: "/a", SYNAPSE_MODEL_CACHE_DIR: "/b", HOME: "/h" }),
    "/a",
  );
  assert.equal(modelCacheRoot({ CORTEXKIT_MODEL_CACHE: "", SYNAPSE_MODEL_CACHE_DIR: "/b" }), "/b");
  assert.equal(modelCacheRoot({ XDG_DATA_HOME: "/x/", HOME: "/h" }), "/x/cortexkit/models");
  assert.equal(modelCacheRoot({ HOME: "/h" }), "/h/.local/share/cortexkit/models");
});

Deno.test("importFile() copies an ONNX model into blobs/<hex>, validated, with its meta", async () => {
  await using t = await tempCache({ now: () => 1234 });
  const bytes = await Deno.readFile(ONNX_PATH);
  const digest = digestOfBytes(bytes);
  const meta = await t.cache.importFile(ONNX_PATH);
  assert.equal(meta.digest, digest);
  assert.equal(meta.format, "onnx");
  assert.equal(meta.validation_state, "valid");
  assert.equal(meta.size, bytes.length);
  assert.equal(meta.source, `file://${Deno.realPathSync(ONNX_PATH)}`);
  assert.equal(meta.created_ms, 1234);
  assert.deepEqual(meta.pins, []);
  const hex = digest.slice(7);
  assert.equal(t.cache.blobPath(digest), `${t.root}/blobs/${hex}`);
  assert.deepEqual(await Deno.readFile(t.cache.blobPath(digest)), bytes);
  assert.deepEqual(filesIn(`${t.root}/blobs`), [hex]);
  assert.deepEqual(filesIn(`${t.root}/meta`), [`${hex}.json`]);
  assert.deepEqual(JSON.parse(await Deno.readTextFile(`${t.root}/meta/${hex}.json`)), meta);
  assert.deepEqual(tmpLeftovers(t.root), []);
  assert.deepEqual(await t.cache.meta(digest), meta);
  assert.deepEqual(await t.cache.list(), [meta]);
  assert.equal(await t.cache.usedBytes(), bytes.length + 0 /* tmp holds only empty locks */);
  // Again: the same blob, the meta kept (created_ms from the first import).
  const again = await t.cache.importFile(ONNX_PATH, { expectedDigest: digest });
  assert.deepEqual(again, meta);
});

Deno.test("importFile() refuses a file whose digest is not the expected one, leaving no blob", async () => {
  await using t = await tempCache();
  const wrong = `sha256:${"0".repeat(64)}`;
  await assert.rejects(t.cache.importFile(ONNX_PATH, { expectedDigest: wrong }), (err) => {
    artifactInvalid("digest_mismatch")(err);
    const d = (err as SynapseError).details!;
    assert.equal(d.expected, wrong);
    assert.equal(d.digest, digestOfBytes(Deno.readFileSync(ONNX_PATH)));
    assert.equal(d.file, "model.onnx");
    return true;
  });
  assert.deepEqual(filesIn(`${t.root}/blobs`), []);
  assert.deepEqual(tmpLeftovers(t.root), []);
  // The same with the blob already present: the source is hashed, not trusted.
  const meta = await t.cache.importFile(CONFIG_PATH);
  await assert.rejects(
    t.cache.importFile(ONNX_PATH, { expectedDigest: meta.digest }),
    artifactInvalid("digest_mismatch"),
  );
});

Deno.test("importFile() of a tokenizer.json records the sanitized tokenizer digest", async () => {
  await using t = await tempCache();
  const meta = await t.cache.importFile(TOKENIZER_PATH);
  assert.equal(meta.format, "tokenizer_json");
  assert.equal(meta.validation_state, "valid");
  assert.equal(
    meta.sanitized_tokenizer_digest,
    (await SanitizedTokenizer.fromFile(TOKENIZER_PATH)).digest,
  );
  const cfg = await t.cache.importFile(CONFIG_PATH);
  assert.equal(cfg.format, "config_json");
  const gguf = await t.cache.importFile(GGUF_PATH);
  assert.equal(gguf.format, "gguf");
  assert.equal(gguf.validation_state, "valid");
});

Deno.test("importFile() of a missing file is artifact_invalid {reason: unreadable}", async () => {
  await using t = await tempCache();
  await assert.rejects(t.cache.importFile(`${t.scratch}/nope.onnx`), artifactInvalid("unreadable"));
});

Deno.test("importFile() past the storage cap fails download_failed {reason: storage_full} and leaves nothing", async () => {
  const size = (await Deno.stat(ONNX_PATH)).size;
  await using t = await tempCache({ storageCapBytes: size - 1 });
  await assert.rejects(t.cache.importFile(ONNX_PATH), (err) => {
    assert.ok(err instanceof SynapseError);
    assert.equal(err.code, "download_failed");
    assert.equal(err.retryAfterMs, 1000);
    assert.equal(err.details?.reason, "storage_full");
    assert.equal(err.details?.file, "model.onnx");
    return true;
  });
  assert.deepEqual(filesIn(`${t.root}/blobs`), []);
  assert.deepEqual(tmpLeftovers(t.root), []);
});

Deno.test("a corrupt ONNX header is artifact_invalid {reason: not_onnx}, recorded in the meta", async () => {
  await using t = await tempCache();
  const bytes = await Deno.readFile(ONNX_PATH);
  const corrupt = bytes.slice();
  corrupt.set(new TextEncoder().encode("GARBAGE!"), 0);
  const path = await writeScratch(t.scratch, "model.onnx", corrupt);
  await assert.rejects(t.cache.importFile(path, { format: "onnx" }), (err) => {
    artifactInvalid("not_onnx")(err);
    assert.equal((err as SynapseError).details?.digest, digestOfBytes(corrupt));
    return true;
  });
  const meta = (await t.cache.meta(digestOfBytes(corrupt)))!;
  assert.equal(meta.validation_state, "invalid");
  assert.equal(meta.validation_error?.code, "artifact_invalid");
  assert.equal(meta.validation_error?.details?.reason, "not_onnx");
  // Validating again answers the recorded failure.
  await assert.rejects(t.cache.validate(meta.digest, "onnx"), artifactInvalid("not_onnx"));
  // Truncated: a length runs past the end.
  const cut = await writeScratch(t.scratch, "cut.onnx", bytes.subarray(0, bytes.length >> 1));
  await assert.rejects(validateArtifact(cut, "onnx", "cut.onnx"), artifactInvalid("not_onnx"));
  // A JSON file is no ONNX model.
  await assert.rejects(
    validateArtifact(CONFIG_PATH, "onnx", "config.json"),
    artifactInvalid("not_onnx"),
  );
});

Deno.test("a corrupt or cut GGUF (magic, version, metadata, tensor data) is artifact_invalid {reason: not_gguf}", async () => {
  await using t = await tempCache();
  const bytes = await Deno.readFile(GGUF_PATH);
  const badMagic = bytes.slice();
  badMagic.set(new TextEncoder().encode("GGUX"), 0);
  const badVersion = bytes.slice();
  new DataView(badVersion.buffer).setUint32(4, 9, true);
  const cut = bytes.slice(0, 64);
  const cutData = bytes.slice(0, bytes.length - 100);
  const cases = [["magic", badMagic], ["version", badVersion], ["cut", cut], ["cut-data", cutData]];
  for (const [name, b] of cases as [string, Uint8Array][]) {
    const path = await writeScratch(t.scratch, `${name}.gguf`, b);
    await assert.rejects(
      t.cache.importFile(path, { format: "gguf" }),
      (err) =>
        artifactInvalid("not_gguf")(err) && (err as SynapseError).details?.file === `${name}.gguf`,
      name,
    );
  }
});

Deno.test("a tokenizer.json that does not parse or load is artifact_invalid {reason: bad_tokenizer}", async () => {
  await using t = await tempCache();
  const text = await Deno.readTextFile(TOKENIZER_PATH);
  const cases = {
    "cut.json": text.slice(0, text.length >> 1),
    "array.json": "[1, 2]",
    "model-not-a-model.json": JSON.stringify({ model: { type: "NoSuchModel" } }),
  };
  for (const [name, body] of Object.entries(cases)) {
    const path = await writeScratch(t.scratch, name, body);
    await assert.rejects(
      t.cache.importFile(path, { format: "tokenizer_json" }),
      artifactInvalid("bad_tokenizer"),
      name,
    );
  }
});

Deno.test("a config.json that is not a JSON object is artifact_invalid {reason: bad_config}", async () => {
  await using t = await tempCache();
  for (const [name, body] of [["a.json", "{"], ["b.json", "[]"], ["c.json", "12"]]) {
    const path = await writeScratch(t.scratch, name!, body!);
    await assert.rejects(
      t.cache.importFile(path!, { format: "config_json" }),
      artifactInvalid("bad_config"),
      name,
    );
  }
});

Deno.test("sniffFormat() tells the fixture files apart", async () => {
  await using t = await tempCache();
  assert.equal(await sniffFormat(ONNX_PATH), "onnx");
  assert.equal(await sniffFormat(GGUF_PATH), "gguf");
  assert.equal(await sniffFormat(TOKENIZER_PATH), "tokenizer_json");
  assert.equal(await sniffFormat(CONFIG_PATH), "config_json");
  assert.equal(await sniffFormat(await writeScratch(t.scratch, "x.bin", "hello")), "other");
  const other = await t.cache.importFile(await writeScratch(t.scratch, "notes.txt", "hello"));
  assert.equal(other.format, "other");
  assert.equal(other.validation_state, "valid");
});
