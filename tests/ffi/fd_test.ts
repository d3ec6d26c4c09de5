import assert from "node:assert/strict";
import { fdBindingsSupported, fstatFd, readFd } from "../../ffi/fd.ts";

// The FIFO and inode paths are exercised with real inherited pipes by tests/subc/launch_test.ts.

Deno.test("fstatFd() and readFd() report a descriptor number that is not open with EBADF", () => {
  if (!fdBindingsSupported()) return;
  assert.deepEqual(fstatFd(1_000_000), { open: false, errno: 9 });
  assert.deepEqual(readFd(1_000_000, new Uint8Array(4)), { errno: 9 });
});
