import assert from "node:assert";
import { sha256Hex } from "../../lib/identity/sha256.ts";

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
