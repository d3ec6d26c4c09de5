/**
 * F40, the store under faults, with real SQLite files: a page write the disk refuses (a real
 * tmpfs filled up, or SQLite's max_page_count where no tmpfs can be mounted), a failure the store
 * refuses to record, a data page overwritten between boots, a 0-byte store file, a boot on a full
 * disk.
 */
import assert from "node:assert/strict";
import { DatabaseSync } from "node:sqlite";
import { SynapseError } from "../../lib/contract/errors.ts";
import { JobStore } from "../../lib/store/job_store.ts";
import { Store } from "../../lib/store/store.ts";
import type { AdmitJobInput } from "../../lib/store/job_types.ts";
import { smallDisk } from "./_small_disk.ts";

const DAY_MS = 86_400_000;

function admission(key = "nightly"): AdmitJobInput {
  return {
    requestKey: key,
    requestDigest: "d".repeat(64),
    kind: "embed.batch",
    moduleGeneration: 1,
    params: {},
    itemsTotal: 10,
    tokensTotal: 0,
    ttls: { executionMs: DAY_MS, retentionMs: DAY_MS, resumeMs: DAY_MS },
  };
}

function thrown(fn: () => unknown): SynapseError {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof SynapseError, `a SynapseError, got ${String(err)}`);
    return err;
  }
  throw new Error("expected a throw");
}

const BIG_PAGE = JSON.stringify({ vectors: "x".repeat(1 << 20) });

Deno.test("JobStore: a page write on a full disk is store_failure storage_full; the job ends failed_transient and its key mints a fresh job", async () => {
  await using disk = await smallDisk(8 << 20);
  const dir = disk?.dir ?? await Deno.makeTempDir({ prefix: "synapse-faults-" });
  try {
    const store = Store.open(`${dir}/store.db`);
    let n = 0;
    const jobs = new JobStore(store, { newId: () => `job_${++n}` });
    const { job } = jobs.admit(admission());
    jobs.markRunning(job.jobId);
    jobs.commitPage(job.jobId, 0, 1, JSON.stringify({ small: true }), {
      itemsDone: 1,
      tokensDone: 1,
    });
    if (disk) disk.fill(64 << 10);
    else {
      const pages = Number(store.database.prepare("PRAGMA page_count").get()?.page_count);
      store.database.exec(`PRAGMA max_page_count = ${pages + 2}`);
    }
    const err = thrown(() =>
      jobs.commitPage(job.jobId, 1, 5, BIG_PAGE, { itemsDone: 6, tokensDone: 6 })
    );
    assert.equal(err.code, "store_failure", err.message);
    assert.equal(err.details?.reason, "storage_full");
    assert.match(err.message, /the disk is full/);
    // What the job runner does with it (lib/ops/jobs.ts endFailedJob): fail the job with it.
    try {
      jobs.finish(job.jobId, "failed_transient", err.toWire());
    } catch (e) {
      // Where even the failure cannot be written, it is held in memory (next test).
      assert.ok(e instanceof SynapseError && e.code === "store_failure", String(e));
    }
    const failed = jobs.get(job.jobId)!;
    assert.equal(failed.state, "failed_transient");
    assert.equal(failed.error?.code, "store_failure");
    assert.equal(failed.error?.safe_to_retry_same_request, true);
    assert.equal(failed.pageCount, 1, "the page committed before stays");
    assert.equal(jobs.readPage(job.jobId, 0)?.pageJson, JSON.stringify({ small: true }));
    // Room again: the same key mints a fresh job (it does not attach to the failed one).
    if (disk) disk.free();
    else store.database.exec("PRAGMA max_page_count = 1073741823");
    const again = jobs.admit(admission());
    assert.equal(again.attached, false);
    assert.notEqual(again.job.jobId, job.jobId);
    store.dispose();
    // The failure is in the file, not only in memory.
    const reopened = Store.open(`${dir}/store.db`);
    assert.equal(new JobStore(reopened).get(job.jobId)?.state, "failed_transient");
    reopened.dispose();
  } finally {
    if (!disk) await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("JobStore: a failure the store refuses to write is held in memory: the job reads failed, its key mints fresh, and it is written once the store takes writes", async () => {
  const dir = await Deno.makeTempDir({ prefix: "synapse-faults-" });
  try {
    const store = Store.open(`${dir}/store.db`);
    let n = 0;
    const jobs = new JobStore(store, { newId: () => `job_${++n}` });
    const { job } = jobs.admit(admission());
    jobs.markRunning(job.jobId);
    // A real refusal of every write by SQLite itself.
    store.database.exec("PRAGMA query_only = ON");
    const cause = new SynapseError("store_failure", "Cannot commit page: the disk is full", {
      details: { reason: "storage_full" },
    });
    const refused = thrown(() => jobs.finish(job.jobId, "failed_transient", cause.toWire()));
    assert.equal(refused.code, "store_failure");
    assert.match(refused.message, /readonly|read-only/i);
    const seen = jobs.get(job.jobId)!;
    assert.equal(seen.state, "failed_transient");
    assert.equal(seen.error?.details?.reason, "storage_full");
    assert.equal(jobs.counters().failed, 1);
    assert.equal(jobs.counters().open, 0);
    // While the store refuses writes, a resubmit is refused with the store's error, not attached.
    const stillRefused = thrown(() => jobs.admit(admission()));
    assert.equal(stillRefused.code, "store_failure");
    store.database.exec("PRAGMA query_only = OFF");
    const fresh = jobs.admit(admission());
    assert.equal(fresh.attached, false);
    assert.equal(fresh.job.jobId, "job_2");
    const raw = new DatabaseSync(`${dir}/store.db`, { readOnly: true });
    const row = raw.prepare("SELECT state, error_json FROM jobs WHERE job_id = ?").get(job.jobId);
    raw.close();
    assert.equal(row?.state, "failed_transient");
    assert.equal(JSON.parse(String(row?.error_json)).details.reason, "storage_full");
    store.dispose();
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("Store.open() refuses a store whose data page was overwritten, naming the file and what to do", async () => {
  const dir = await Deno.makeTempDir({ prefix: "synapse-faults-" });
  const path = `${dir}/store.db`;
  try {
    const store = Store.open(path);
    const jobs = new JobStore(store);
    const { job } = jobs.admit(admission());
    jobs.markRunning(job.jobId);
    for (let p = 0; p < 4; p++) {
      jobs.commitPage(job.jobId, p, 1, JSON.stringify({ p, pad: "v".repeat(3000) }), {
        itemsDone: p + 1,
        tokensDone: 0,
      });
    }
    const root = Number(
      store.database.prepare("SELECT rootpage FROM sqlite_master WHERE name = 'job_pages'").get()
        ?.rootpage,
    );
    const pageSize = Number(store.database.prepare("PRAGMA page_size").get()?.page_size);
    store.dispose(); // the last connection checkpoints the WAL into the file
    assert.ok(root > 1, "a table page, not the header page");
    // Overwrite the table's root page after its 8-byte b-tree header: cell pointers and cells.
    const f = await Deno.open(path, { write: true });
    await f.seek((root - 1) * pageSize + 8, Deno.SeekMode.Start);
    await f.write(new Uint8Array(pageSize - 16).fill(0xa5));
    f.close();
    const err = thrown(() => Store.open(path));
    assert.equal(err.code, "internal_error");
    assert.equal(err.toWire().class, "permanent");
    assert.equal(err.toWire().safe_to_retry_same_request, false);
    assert.equal(err.details?.reason, "store_corrupt");
    assert.ok(err.message.includes(path), err.message);
    assert.match(err.message, /corrupt/);
    assert.match(err.message, /move .* aside/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("Store.open() reports a 0-byte store file and leaves it as it is", async () => {
  const dir = await Deno.makeTempDir({ prefix: "synapse-faults-" });
  const path = `${dir}/store.db`;
  try {
    Deno.writeFileSync(path, new Uint8Array());
    const err = thrown(() => Store.open(path));
    assert.equal(err.code, "internal_error");
    assert.equal(err.details?.reason, "store_empty");
    assert.ok(err.message.includes(path), err.message);
    assert.match(err.message, /empty \(0 bytes\)/);
    assert.equal(Deno.statSync(path).size, 0, "not replaced by a fresh store");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("Store.open() refuses a file that is not a database as corrupt, permanently", async () => {
  const dir = await Deno.makeTempDir({ prefix: "synapse-faults-" });
  const path = `${dir}/store.db`;
  try {
    Deno.writeFileSync(path, new Uint8Array(8192).fill(7));
    const err = thrown(() => Store.open(path));
    assert.equal(err.code, "internal_error");
    assert.equal(err.details?.reason, "store_corrupt");
    assert.ok(err.message.includes(path), err.message);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("Store.open() on a full disk says the disk is full", async (t) => {
  await using disk = await smallDisk(1 << 20);
  if (!disk) {
    // max_page_count cannot bound a store that is not open yet: only a real full disk shows this.
    console.log("skipped: needs a tmpfs (root on Linux) to boot on a full disk");
    return;
  }
  disk.fill(0);
  const err = thrown(() => Store.open(`${disk.dir}/synapse/store.db`));
  assert.equal(err.code, "store_failure");
  assert.equal(err.details?.reason, "storage_full");
  assert.match(err.message, /disk is full/);
  await t.step("and boots once there is room", () => {
    disk.free();
    const store = Store.open(`${disk.dir}/synapse/store.db`);
    assert.equal(store.moduleGeneration, 1);
    store.dispose();
  });
});
