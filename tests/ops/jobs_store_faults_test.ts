/**
 * F40 through the real door: a durable embed.batch job on a store whose disk fills up while the
 * job writes its pages (a real tmpfs; SQLite's max_page_count where none can be mounted), and a
 * Synapse booted on a store with an overwritten data page.
 */
import assert from "node:assert/strict";
import { loadConfig } from "../../lib/config/loader.ts";
import { createSynapse, type Synapse } from "../../lib/synapse.ts";
import { SynapseError } from "../../lib/contract/errors.ts";
import { MINILM, resultOf } from "../_helpers.ts";
import { smallDisk } from "../store/_small_disk.ts";

const CONFIG = {
  inline: { max_items: 8 },
  jobs: { result_page_bytes: 262_144 },
  preload_models: [{
    engine: "ort",
    model_path: MINILM,
    tokenizer_path: `${MINILM}/tokenizer.json`,
    model_id: "minilm",
  }],
};

async function boot(dir: string, storePath: string): Promise<Synapse> {
  const env = {
    XDG_DATA_HOME: `${dir}/data`,
    XDG_CONFIG_HOME: `${dir}/config`,
    HOME: dir,
    SYNAPSE_CONFIG_JSON: JSON.stringify(CONFIG),
  };
  const { config } = loadConfig({ env, cwd: dir });
  return await createSynapse({ config, env, storePath });
}

// deno-lint-ignore no-explicit-any
async function waitJob(syn: Synapse, jobId: string): Promise<any> {
  for (const hungAt = Date.now() + 600_000; Date.now() < hungAt;) {
    const r = resultOf(await syn.call("embed.result", { job_id: jobId }));
    if (r.state !== "queued" && r.state !== "running") return r;
    await new Promise((res) => setTimeout(res, 20));
  }
  throw new Error("job still open after 10 minutes: hung");
}

const ITEMS = Array.from({ length: 600 }, (_, i) => ({
  id: `doc-${i}`,
  text: `document ${i} ` + "about the licence terms ".repeat(3 + (i % 5)),
}));

Deno.test("F40: a job whose page write hits a full disk ends failed (store_failure, storage_full) and a resubmit with its key starts fresh", async () => {
  await using disk = await smallDisk(16 << 20);
  const dir = await Deno.makeTempDir({ prefix: "synapse-f40-" });
  const storeDir = disk?.dir ?? dir;
  const syn = await boot(dir, `${storeDir}/store.db`);
  try {
    const job = resultOf(await syn.call("embed.batch", { items: ITEMS, request_key: "nightly" }));
    assert.equal(job.attached, false);
    // The job is admitted and runs (its first quantum takes far longer than this); now the disk
    // fills up to the last byte, so its page writes fail, and so does writing its failure.
    if (disk) disk.fill(0);
    else {
      const db = syn.store.database;
      const pages = Number(db.prepare("PRAGMA page_count").get()?.page_count);
      db.exec(`PRAGMA max_page_count = ${pages}`);
    }
    const failed = await waitJob(syn, job.job_id);
    assert.equal(failed.state, "failed_transient");
    assert.equal(failed.error.code, "store_failure");
    assert.equal(failed.error.details.reason, "storage_full");
    assert.match(failed.error.message, /disk is full/);
    assert.equal(failed.error.safe_to_retry_same_request, true);
    const status = resultOf(await syn.call("admission.status", {}));
    assert.equal(status.jobs_failed, 1);
    assert.equal(status.jobs_open, 0);
    // Still full: a resubmit is refused with the store's error, never attached to the failed job.
    if (disk) {
      const refused = await syn.call("embed.batch", { items: ITEMS, request_key: "nightly" });
      assert.notEqual(refused.kind, "result");
      assert.equal(
        JSON.stringify(refused.body).includes("storage_full") ||
          JSON.stringify(refused.body).includes("store_failure"),
        true,
        JSON.stringify(refused.body),
      );
    }
    // Room again: the same key and items start a fresh job, which completes.
    if (disk) disk.free();
    else syn.store.database.exec("PRAGMA max_page_count = 1073741823");
    const again = resultOf(await syn.call("embed.batch", { items: ITEMS, request_key: "nightly" }));
    assert.equal(again.attached, false);
    assert.notEqual(again.job_id, job.job_id);
    const done = await waitJob(syn, again.job_id);
    assert.equal(done.state, "done");
    assert.equal(done.items_done, ITEMS.length);
  } finally {
    await syn.dispose();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("F40: a Synapse on a store with an overwritten data page refuses to boot, naming the file and what to do", async () => {
  const dir = await Deno.makeTempDir({ prefix: "synapse-f40-" });
  const storePath = `${dir}/store.db`;
  try {
    const syn = await boot(dir, storePath);
    const job = resultOf(await syn.call("embed.batch", { items: ITEMS, request_key: "k" }));
    assert.equal((await waitJob(syn, job.job_id)).state, "done");
    const db = syn.store.database;
    const root = Number(
      db.prepare("SELECT rootpage FROM sqlite_master WHERE name = 'job_pages'").get()?.rootpage,
    );
    const pageSize = Number(db.prepare("PRAGMA page_size").get()?.page_size);
    await syn.dispose();
    const f = await Deno.open(storePath, { write: true });
    await f.seek((root - 1) * pageSize + 8, Deno.SeekMode.Start);
    await f.write(new Uint8Array(pageSize - 16).fill(0x5a));
    f.close();
    const err = await boot(dir, storePath).then(
      async (s) => {
        await s.dispose();
        throw new Error("booted on a corrupt store");
      },
      (e) => e,
    );
    assert.ok(err instanceof SynapseError, String(err));
    assert.equal(err.code, "internal_error");
    assert.equal(err.details?.reason, "store_corrupt");
    assert.ok(err.message.includes(storePath), err.message);
    assert.match(err.message, /aside/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
