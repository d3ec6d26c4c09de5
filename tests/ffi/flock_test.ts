import assert from "node:assert/strict";
import { isLockHeld, tryLockExclusive, tryLockShared, waitLockShared } from "../../ffi/flock.ts";

/** Starts `flock -o -x path sh -c '<cmd>'` and waits until it holds the lock (it prints its pid). */
async function holdExclusive(path: string, cmd: string): Promise<Deno.ChildProcess> {
  const child = new Deno.Command("flock", {
    args: ["-o", "-x", path, "sh", "-c", `echo $$; ${cmd}`],
    stdout: "piped",
  }).spawn();
  const lines = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let printed = "";
  while (!printed.includes("\n")) {
    const { value, done } = await lines.read();
    if (done) break;
    printed += value;
  }
  await lines.cancel();
  return child;
}

Deno.test("tryLockShared() coexists with other shared locks and excludes an exclusive one", async () => {
  const dir = await Deno.makeTempDir();
  const path = `${dir}/a.lock`;
  const a = tryLockShared(path);
  const b = tryLockShared(path);
  assert.ok(a !== undefined && b !== undefined);
  assert.equal(tryLockExclusive(path), undefined);
  assert.equal(await Deno.readTextFile(path), "", "a shared lock never writes the file");
  a.release();
  a.release();
  assert.equal(tryLockExclusive(path), undefined, "b still holds it");
  b[Symbol.dispose]();
  const x = tryLockExclusive(path);
  assert.ok(x !== undefined);
  assert.equal(tryLockShared(path), undefined, "an exclusive lock excludes shared ones");
  x.release();
  tryLockShared(path)!.release();
  await Deno.remove(dir, { recursive: true });
});

Deno.test("tryLockShared() is refused while another process holds the lock exclusively", async () => {
  const dir = await Deno.makeTempDir();
  const path = `${dir}/b.lock`;
  const child = await holdExclusive(path, "exec sleep 30");
  try {
    assert.equal(tryLockShared(path), undefined);
    assert.ok(isLockHeld(path));
  } finally {
    child.kill("SIGKILL");
    await child.status;
  }
  // The kernel dropped the dead holder's lock.
  tryLockShared(path)!.release();
  await Deno.remove(dir, { recursive: true });
});

Deno.test("waitLockShared() waits for another process's exclusive lock to end", async () => {
  const dir = await Deno.makeTempDir();
  const path = `${dir}/c.lock`;
  // The holder lets go on its own after a second; this thread blocks in flock(2) meanwhile.
  const child = await holdExclusive(path, "exec sleep 1");
  const lock = waitLockShared(path);
  // Granted only once the holder is gone: its exit status is already there.
  const status = await child.status;
  assert.equal(status.success, true);
  assert.equal(tryLockExclusive(path), undefined);
  lock.release();
  await Deno.remove(dir, { recursive: true });
});
