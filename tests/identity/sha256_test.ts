import assert from "node:assert";
import { sha256FileHash, sha256FileHex, sha256Hex } from "../../lib/identity/sha256.ts";

Deno.test("sha256Hex() hashes a string as UTF-8", () => {
  assert.strictEqual(
    sha256Hex("abc"),
    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
  );
  assert.strictEqual(sha256Hex("é"), sha256Hex(new TextEncoder().encode("é")));
});

Deno.test("sha256Hex() hashes bytes and the empty input", () => {
  assert.strictEqual(
    sha256Hex(new Uint8Array()),
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
  );
  assert.strictEqual(sha256Hex(Uint8Array.of(0x61, 0x62, 0x63)), sha256Hex("abc"));
});

Deno.test("sha256Hex() returns 64 lowercase hex characters", () => {
  assert.match(sha256Hex("x"), /^[0-9a-f]{64}$/);
});

/** A temporary file of `bytes`, removed by the caller. */
async function tempFile(bytes: Uint8Array): Promise<string> {
  const path = await Deno.makeTempFile({ prefix: "sha256_file_" });
  await Deno.writeFile(path, bytes);
  return path;
}

/** 3 MiB + 5 bytes of a repeating pattern: more than one chunk at small chunk sizes. */
const BIG = Uint8Array.from({ length: 3 * 1024 * 1024 + 5 }, (_, i) => (i * 31) & 0xff);

Deno.test("sha256FileHex() equals sha256Hex() of the bytes, across chunk sizes", async () => {
  const path = await tempFile(BIG);
  try {
    const want = sha256Hex(BIG);
    assert.strictEqual(await sha256FileHex(path), want);
    assert.strictEqual(await sha256FileHex(path, { chunkBytes: 1000 }), want);
    const empty = await tempFile(new Uint8Array());
    assert.strictEqual(await sha256FileHex(empty), sha256Hex(""));
    await Deno.remove(empty);
  } finally {
    await Deno.remove(path);
  }
});

Deno.test("sha256FileHash() stops at upTo and returns a hash that goes on", async () => {
  const path = await tempFile(BIG);
  try {
    const cut = 1_000_003;
    const h = await sha256FileHash(path, { upTo: cut, chunkBytes: 4096 });
    h.update(BIG.subarray(cut));
    assert.strictEqual(h.digest("hex"), sha256Hex(BIG));
    assert.strictEqual(await sha256FileHex(path, { upTo: 0 }), sha256Hex(""));
    // A limit past the end hashes the whole file.
    assert.strictEqual(await sha256FileHex(path, { upTo: BIG.length * 2 }), sha256Hex(BIG));
  } finally {
    await Deno.remove(path);
  }
});

Deno.test("sha256FileHex() of an open file reads from its position and leaves it open", async () => {
  const path = await tempFile(BIG);
  try {
    using f = await Deno.open(path, { read: true });
    await f.seek(10, Deno.SeekMode.Start);
    assert.strictEqual(await sha256FileHex(f, { chunkBytes: 65536 }), sha256Hex(BIG.subarray(10)));
    assert.strictEqual(await f.read(new Uint8Array(1)), null, "still open, at the end");
  } finally {
    await Deno.remove(path);
  }
});

Deno.test("sha256FileHex() hands each chunk, hashed, to onChunk with the running count", async () => {
  const path = await tempFile(BIG);
  try {
    const copy: Uint8Array[] = [];
    const counts: number[] = [];
    const hex = await sha256FileHex(path, {
      chunkBytes: 1024 * 1024,
      onChunk: (chunk, done) => {
        copy.push(chunk.slice());
        counts.push(done);
      },
    });
    assert.strictEqual(hex, sha256Hex(BIG));
    assert.deepStrictEqual(counts, [1, 2, 3].map((m) => m * 1024 * 1024).concat(BIG.length));
    const joined = new Uint8Array(BIG.length);
    let off = 0;
    for (const c of copy) joined.set(c, (off += c.length) - c.length);
    assert.deepStrictEqual(joined, BIG);
    // What onChunk throws ends the hash.
    const stop = new Error("cap");
    await assert.rejects(
      sha256FileHex(path, { chunkBytes: 1024, onChunk: () => Promise.reject(stop) }),
      (err) => err === stop,
    );
  } finally {
    await Deno.remove(path);
  }
});

Deno.test("sha256FileHex() rejects with the signal's reason and leaves open errors unwrapped", async () => {
  const path = await tempFile(BIG);
  try {
    const reason = new Error("stop");
    await assert.rejects(
      sha256FileHex(path, { signal: AbortSignal.abort(reason) }),
      (err) => err === reason,
    );
    const ac = new AbortController();
    await assert.rejects(
      sha256FileHex(path, {
        chunkBytes: 1024,
        onChunk: (_c, n) => void (n > 4096 && ac.abort(reason)),
        signal: ac.signal,
      }),
      (err) => err === reason,
    );
  } finally {
    await Deno.remove(path);
  }
  await assert.rejects(sha256FileHex(`${path}.absent`), Deno.errors.NotFound);
});
