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
  // flock(1) from util-linux holds the lock (-o: not inherited by its command); we SIGKILL it.
  const child = new Deno.Command("flock", { args: ["-o", "-x", path, "sleep", "30"] }).spawn();
  let held = false;
  for (let i = 0; i < 50 && !held; i++) {
    await new Promise((r) => setTimeout(r, 50));
    try {
      (await acquireLease(dir, "y.lease", "singleton")).release();
    } catch {
      held = true;
    }
  }
  assert.ok(held, "the child took the lock");
  child.kill("SIGKILL");
  await child.status;
  (await acquireLease(dir, "y.lease", "singleton")).release();
  await Deno.remove(dir, { recursive: true });
});
