import assert from "node:assert/strict";
import { acquireLease, leaseFileName } from "../../lib/lease/lease.ts";
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
