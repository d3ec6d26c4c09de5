/**
 * A real server process, SIGKILLed in the middle of a durable job, then restarted on the same
 * store (docs/internals.md §8: module_restarted is transient and safe to retry).
 *
 * The kill must land while the job runs. Rather than race a poll against the job, the test
 * freezes the server (SIGSTOP) once two pages are in and reads the job from the store itself:
 * what the SIGKILL interrupts is then known, whatever the machine's load.
 */
import assert from "node:assert/strict";
import { DatabaseSync } from "node:sqlite";
import { serve } from "../cli/_launcher.ts";
import { cosine, MINILM } from "../_helpers.ts";

interface Server {
  child: Deno.ChildProcess;
  base: string;
}

/** A `ck-synapse serve` child on `env`'s home, once up (`until: "healthy"`, tests/cli/_launcher.ts). */
async function startServer(env: Record<string, string>): Promise<Server> {
  const served = await serve({ env, dir: env.HOME! }, { until: "healthy" });
  return { child: served.child, base: served.url };
}

// deno-lint-ignore no-explicit-any
async function call(base: string, method: string, params: unknown): Promise<any> {
  const res = await fetch(`${base}/v1/ops/${method}`, {
    method: "POST",
    body: JSON.stringify(params),
  });
  const body = await res.json();
  if (!body.result) throw new Error(JSON.stringify(body));
  return body.result;
}

// deno-lint-ignore no-explicit-any
async function waitDone(base: string, jobId: string): Promise<any> {
  for (const hungAt = Date.now() + 600_000; Date.now() < hungAt;) {
    const r = await call(base, "embed.result", { job_id: jobId });
    if (r.error && !r.job_id) throw new Error(JSON.stringify(r));
    if (r.state !== "queued" && r.state !== "running") return r;
    await new Promise((res) => setTimeout(res, 20));
  }
  throw new Error("job did not finish");
}

// deno-lint-ignore no-explicit-any
async function pages(base: string, jobId: string, count: number): Promise<any[]> {
  const out = [];
  for (let p = 0; p < count; p++) {
    out.push(await call(base, "embed.result", { job_id: jobId, page: p }));
  }
  return out;
}

interface FrozenJob {
  jobId: string;
  state: string;
  /** Committed pages, `vectors` as `embed.result` serves them. */
  // deno-lint-ignore no-explicit-any
  pages: any[][];
}

/** Reads a job and its committed pages straight from the store file (read-only). */
function readJob(storeFile: string, jobId: string): FrozenJob {
  const db = new DatabaseSync(storeFile, { readOnly: true });
  try {
    const job = db.prepare("SELECT state FROM jobs WHERE job_id = ?").get(jobId);
    const rows = db.prepare(
      "SELECT page_json FROM job_pages WHERE job_id = ? ORDER BY page_no",
    ).all(jobId);
    return {
      jobId,
      state: String(job?.state),
      pages: rows.map((r) => JSON.parse(String(r.page_json)).vectors),
    };
  } finally {
    db.close();
  }
}

/**
 * Starts an `embed.batch` job, waits until `minPages` pages are committed, then freezes the
 * server (SIGSTOP) and reads the job from the store: the state the coming SIGKILL interrupts.
 * If the job was already over when frozen (it ran to its end between a poll and the stop), the
 * server resumes and a job twice as large is tried under a new key.
 */
async function freezeMidJob(
  server: Server,
  storeFile: string,
  minPages: number,
): Promise<FrozenJob & { key: string; items: { id: string; text: string }[] }> {
  for (let attempt = 0, n = 240; attempt < 4; attempt++, n *= 2) {
    const items = Array.from({ length: n }, (_, i) => ({
      id: `doc-${i}`,
      text: `document ${i} ` + "about the licence terms ".repeat(4 + (i % 9)),
    }));
    const key = attempt === 0 ? "nightly-index" : `nightly-index-${attempt}`;
    const job = await call(server.base, "embed.batch", { items, request_key: key });
    while (true) {
      const r = await call(server.base, "embed.result", { job_id: job.job_id });
      if (r.page_count >= minPages || (r.state !== "queued" && r.state !== "running")) break;
      await new Promise((res) => setTimeout(res, 10));
    }
    server.child.kill("SIGSTOP");
    const frozen = readJob(storeFile, job.job_id);
    if (frozen.state === "running" && frozen.pages.length >= minPages) {
      return { ...frozen, key, items };
    }
    server.child.kill("SIGCONT");
  }
  throw new Error(`no job could be frozen while running with ${minPages} pages committed`);
}

Deno.test("a job killed with SIGKILL is module_restarted after restart; its pages survive; the same key runs once more", async () => {
  const dir = await Deno.makeTempDir({ prefix: "synapse-restart-" });
  const env = {
    PATH: Deno.env.get("PATH") ?? "/usr/bin:/bin",
    HOME: dir,
    XDG_DATA_HOME: `${dir}/data`,
    XDG_CONFIG_HOME: `${dir}/config`,
    SYNAPSE_CONFIG_JSON: JSON.stringify({
      inline: { max_items: 8 },
      jobs: { result_page_bytes: 65536 },
      preload_models: [{
        engine: "ort",
        model_path: MINILM,
        tokenizer_path: `${MINILM}/tokenizer.json`,
        model_id: "minilm",
      }],
    }),
  };
  const storeFile = `${dir}/data/cortexkit/synapse/store.db`;
  let server = await startServer(env);
  try {
    const gen1 = (await call(server.base, "admission.status", {})).module_generation;
    // Killed while running with at least two pages committed (read from the frozen store).
    const frozen = await freezeMidJob(server, storeFile, 2);
    const { key, items } = frozen;
    const job = { job_id: frozen.jobId };
    const committed = frozen.pages;
    assert.equal(frozen.state, "running");
    server.child.kill("SIGKILL");
    await server.child.status;

    server = await startServer(env);
    const status = await call(server.base, "admission.status", {});
    assert.equal(status.module_generation, gen1 + 1);
    assert.equal(status.jobs_inherited, 1);
    const old = await call(server.base, "embed.result", { job_id: job.job_id });
    assert.equal(old.state, "failed_transient");
    assert.equal(old.error.code, "module_restarted");
    assert.equal(old.error.class, "transient");
    assert.equal(old.error.safe_to_retry_same_request, true);
    assert.ok(old.page_count >= committed.length);
    const after = await pages(server.base, job.job_id, committed.length);
    for (let p = 0; p < committed.length; p++) {
      assert.deepEqual(after[p].vectors, committed[p], `page ${p} intact`);
    }

    // Same key, same items: exactly one new job, and its results are complete.
    const again = await call(server.base, "embed.batch", { items, request_key: key });
    assert.notEqual(again.job_id, job.job_id);
    assert.equal(again.attached, false);
    const third = await call(server.base, "embed.batch", { items, request_key: key });
    assert.equal(third.job_id, again.job_id);
    assert.equal(third.attached, true);
    const done = await waitDone(server.base, again.job_id);
    assert.equal(done.state, "done");
    const resumed = (await pages(server.base, again.job_id, done.page_count)).flatMap((p) =>
      p.vectors
    );
    assert.equal(resumed.length, items.length);
    // Equal to a clean run of the same items under another key.
    const clean = await call(server.base, "embed.batch", { items, request_key: "clean-run" });
    const cleanDone = await waitDone(server.base, clean.job_id);
    const cleanVectors = new Map(
      (await pages(server.base, clean.job_id, cleanDone.page_count)).flatMap((p) => p.vectors)
        // deno-lint-ignore no-explicit-any
        .map((v: any) => [v.id, v.vector]),
    );
    for (const v of resumed) assert.ok(cosine(v.vector, cleanVectors.get(v.id)!) >= 0.99999);
    // And the pages committed before the kill agree with the clean run too.
    for (const v of committed.flat()) {
      assert.ok(cosine(v.vector, cleanVectors.get(v.id)!) >= 0.99999);
    }
  } finally {
    server.child.kill("SIGKILL");
    await server.child.status;
    await Deno.remove(dir, { recursive: true });
  }
});
