import assert from "node:assert/strict";
import {
  acquireLease,
  findServerAddress,
  leaseFileName,
  recordServerAddress,
  removeServerAddress,
  serverAddressPath,
} from "../../lib/lease/lease.ts";
import { isLockHeld } from "../../ffi/flock.ts";
import { SynapseError } from "../../lib/contract/errors.ts";

const vectors = JSON.parse(
  await Deno.readTextFile(new URL("../vectors/subc_wire.json", import.meta.url)),
).lease_names;

Deno.test("leaseFileName() reproduces the lease names of subc_wire.json", () => {
  for (const v of [vectors.synapse_singleton, vectors.synapse_store]) {
    const [m, b, s] = v.key;
    assert.equal(leaseFileName(m, b, s), v.file);
  }
});

Deno.test("acquireLease() refuses a second holder with module_not_initialized naming the pid", async () => {
  const dir = await Deno.makeTempDir();
  const first = await acquireLease(dir, "x.lease", "singleton");
  await assert.rejects(acquireLease(dir, "x.lease", "singleton"), (e: unknown) => {
    assert.ok(e instanceof SynapseError);
    assert.equal(e.code, "module_not_initialized");
    assert.equal(e.details?.holder_pid, Deno.pid);
    return true;
  });
  first.release();
  first.release();
  (await acquireLease(dir, "x.lease", "singleton")).release();
  await Deno.remove(dir, { recursive: true });
});

Deno.test("a lease held by a killed process is free again", async () => {
  const dir = await Deno.makeTempDir();
  const path = `${dir}/y.lease`;
  // flock(1) from util-linux takes the lock, then runs `sh`, which prints its pid: once that line
  // arrives the lock is held, no polling. -o: the lock is flock's alone, not inherited by the
  // command, so killing flock frees it while `sleep` (the same pid as `sh`) lives on.
  const child = new Deno.Command("flock", {
    args: ["-o", "-x", path, "sh", "-c", "echo $$; exec sleep 30"],
    stdout: "piped",
  }).spawn();
  let childExited = false;
  const lines = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let printed = "";
  while (!printed.includes("\n")) {
    const { value, done } = await lines.read();
    if (done) break;
    printed += value;
  }
  await lines.cancel();
  const sleeper = Number(printed.trim());
  try {
    assert.ok(Number.isInteger(sleeper) && sleeper > 0, `flock's command printed ${printed}`);
    await assert.rejects(
      acquireLease(dir, "y.lease", "singleton"),
      SynapseError,
      "flock holds the lease",
    );
    child.kill("SIGKILL");
    await child.status;
    childExited = true;
    (await acquireLease(dir, "y.lease", "singleton")).release();
  } finally {
    if (!childExited) {
      try {
        child.kill("SIGKILL");
      } catch { /* it already exited */ }
      await child.status;
    }
    if (sleeper > 0) Deno.kill(sleeper, "SIGKILL");
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("isLockHeld() sees a held lease, a free one, and a missing file, and creates nothing", async () => {
  const dir = await Deno.makeTempDir();
  try {
    assert.equal(isLockHeld(`${dir}/none.lease`), false);
    await assert.rejects(Deno.lstat(`${dir}/none.lease`), Deno.errors.NotFound);
    const lease = await acquireLease(dir, "z.lease", "singleton");
    assert.equal(isLockHeld(lease.path), true);
    // The probe does not take the lock: the holder keeps it, nobody else gets it.
    await assert.rejects(acquireLease(dir, "z.lease", "singleton"), SynapseError);
    lease.release();
    assert.equal(isLockHeld(lease.path), false);
    (await acquireLease(dir, "z.lease", "singleton")).release();
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("findServerAddress() believes only the live holder's own 0600 record", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const lease = await acquireLease(dir, "s.lease", "singleton");
    const record = serverAddressPath(lease.path);
    assert.equal(record, `${dir}/s.http.json`);
    assert.deepEqual(await findServerAddress(lease.path), { kind: "none" });

    await recordServerAddress(lease, "http://127.0.0.1:8080");
    assert.equal((await Deno.stat(record)).mode! & 0o777, 0o600);
    assert.deepEqual(await findServerAddress(lease.path), {
      kind: "live",
      url: "http://127.0.0.1:8080",
      pid: Deno.pid,
      record,
    });

    // Group or other bits: anyone in the group could have written it.
    await Deno.chmod(record, 0o640);
    const loose = await findServerAddress(lease.path);
    assert.equal(loose.kind, "untrusted");
    assert.match((loose as { reason: string }).reason, /mode is 640/);
    await Deno.chmod(record, 0o600);

    // A directory others may write: they could swap the record.
    await Deno.chmod(dir, 0o777);
    const open = await findServerAddress(lease.path);
    assert.equal(open.kind, "untrusted");
    assert.match((open as { reason: string }).reason, /directory is writable by others/);
    await Deno.chmod(dir, 0o700);

    // A symlink is not followed.
    await Deno.rename(record, `${dir}/elsewhere.json`);
    await Deno.symlink(`${dir}/elsewhere.json`, record);
    const link = await findServerAddress(lease.path);
    assert.equal(link.kind, "untrusted");
    assert.match((link as { reason: string }).reason, /not a regular file/);
    await Deno.remove(record);

    // A record of another pid (an earlier holder's, left by a crash) is not this holder's.
    await Deno.writeTextFile(record, JSON.stringify({ pid: 1, url: "http://127.0.0.1:1" }), {
      mode: 0o600,
    });
    assert.deepEqual(await findServerAddress(lease.path), { kind: "none" });
    // removeServerAddress() leaves a record that is not this process's alone.
    removeServerAddress(lease);
    assert.ok((await Deno.stat(record)).isFile);

    await recordServerAddress(lease, "http://127.0.0.1:8081");
    assert.equal((await findServerAddress(lease.path)).kind, "live");
    // The holder is gone: the record is stale, whatever it says.
    lease.release();
    assert.deepEqual(await findServerAddress(lease.path), { kind: "none" });

    const again = await acquireLease(dir, "s.lease", "singleton");
    await recordServerAddress(again, "http://127.0.0.1:8082");
    removeServerAddress(again);
    await assert.rejects(Deno.lstat(record), Deno.errors.NotFound);
    again.release();
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("acquireLease() names the address a serving holder recorded", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const lease = await acquireLease(dir, "a.lease", "singleton");
    await recordServerAddress(lease, "http://127.0.0.1:8080");
    await assert.rejects(acquireLease(dir, "a.lease", "singleton"), (e: unknown) => {
      assert.ok(e instanceof SynapseError);
      assert.match(e.message, /serves http:\/\/127\.0\.0\.1:8080; CLI commands talk to it/);
      assert.equal(e.details?.url, "http://127.0.0.1:8080");
      return true;
    });
    lease.release();
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
