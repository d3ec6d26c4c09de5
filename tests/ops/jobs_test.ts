import assert from "node:assert/strict";
import {
  channelError,
  cosine,
  MINILM,
  preload,
  resultOf,
  semanticError,
  startSynapse,
} from "../_helpers.ts";
import type { Synapse } from "../../lib/synapse.ts";
import { createSynapse } from "../../lib/synapse.ts";

/**
 * Waits for the job to end, however long the machine takes; only a job still open after 10
 * minutes (hung, not slow) fails the test.
 */
// deno-lint-ignore no-explicit-any
async function waitJob(syn: Synapse, jobId: string): Promise<any> {
  const hungAt = Date.now() + 600_000;
  while (Date.now() < hungAt) {
    const r = resultOf(await syn.call("embed.result", { job_id: jobId }));
    if (r.state !== "queued" && r.state !== "running") return r;
    await new Promise((res) => setTimeout(res, 20));
  }
  throw new Error("job did not finish within 10 minutes: hung");
}

// deno-lint-ignore no-explicit-any
async function allPages(syn: Synapse, jobId: string): Promise<any[]> {
  const first = resultOf(await syn.call("embed.result", { job_id: jobId }));
  const pages = [first];
  for (let p = 1; p < first.page_count; p++) {
    pages.push(resultOf(await syn.call("embed.result", { job_id: jobId, page: p })));
  }
  return pages;
}

const TEXTS = Array.from(
  { length: 100 },
  (_, i) => `passage number ${i} ` + "word ".repeat(i % 17),
);

Deno.test("F7: a batch over the inline limits needs a request_key and becomes a paged durable job", async () => {
  await using t = await startSynapse({
    inline: { max_items: 8 },
    jobs: { result_page_bytes: 4096 },
  });
  const refused = semanticError(await t.syn.call("embed.batch", { texts: TEXTS }));
  assert.equal(refused.code, "invalid_request");
  assert.equal(refused.details.limit, "inline.max_items");
  assert.equal(refused.details.field, "request_key");
  const items = [...TEXTS.map((text, i) => ({ id: `p${i}`, text })), { id: "empty", text: "" }];
  const job = resultOf(await t.syn.call("embed.batch", { items, request_key: "index-1" }));
  assert.match(job.job_id, /^job_/);
  assert.equal(job.request_key, "index-1");
  assert.equal(job.attached, false);
  assert.ok(["queued", "running"].includes(job.state));
  assert.equal(typeof job.pages_available, "number");
  assert.equal(job.module_generation, t.syn.moduleGeneration);
  const done = await waitJob(t.syn, job.job_id);
  assert.equal(done.state, "done");
  assert.ok(done.page_count > 1, `${done.page_count} pages`);
  assert.equal(done.pages_available, done.page_count);
  const pages = await allPages(t.syn, job.job_id);
  const vectors = pages.flatMap((p) => p.vectors);
  const errors = pages.flatMap((p) => p.item_errors ?? []);
  assert.equal(vectors.length, 100);
  assert.deepEqual(errors.map((e) => [e.id, e.error.code]), [["empty", "invalid_request"]]);
  assert.deepEqual(
    new Set(vectors.map((v) => v.id)),
    new Set(items.slice(0, 100).map((x) => x.id)),
  );
  for (const p of pages) {
    assert.ok(JSON.stringify(p.vectors).length <= 4096 || p.vectors.length === 1);
    assert.equal(p.vectors.length, p.real_token_counts.length);
    assert.equal(p.fingerprint, job.fingerprint);
  }
  const one = resultOf(await t.syn.call("embed.query", { text: TEXTS[42] }));
  const v42 = vectors.find((v) => v.id === "p42");
  assert.ok(cosine(one.vectors[0].vector, v42.vector) >= 0.99999);
  assert.equal(v42.submitted_sha256, one.vectors[0].submitted_sha256);
  const status = resultOf(await t.syn.call("admission.status", {}));
  assert.equal(status.inline.max_items, 8);
  assert.equal(status.jobs_minted, 1);
  assert.equal(status.jobs_completed, 1);
  assert.equal(status.jobs_open, 0);
});

Deno.test("embed.batch jobs: same key and digest attach, another digest is idempotency_conflict", async () => {
  await using t = await startSynapse({ inline: { max_items: 8 } });
  const a = resultOf(await t.syn.call("embed.batch", { texts: TEXTS, request_key: "k" }));
  const b = resultOf(await t.syn.call("embed.batch", { texts: TEXTS, request_key: "k" }));
  assert.equal(b.job_id, a.job_id);
  assert.equal(b.attached, true);
  const c = semanticError(
    await t.syn.call("embed.batch", { texts: [...TEXTS, "one more"], request_key: "k" }),
  );
  assert.equal(c.code, "idempotency_conflict");
  assert.equal(c.class, "permanent");
  // Another caller reusing a key learns no job id to read the first caller's results with (F39).
  assert.deepEqual(c.details, { request_key: "k" });
  assert.ok(!c.message.includes(a.job_id), c.message);
  // 258 UTF-8 bytes: refused at the door, before any job (the store's limit is the door's).
  const long = channelError(
    await t.syn.call("embed.batch", { texts: TEXTS, request_key: "é".repeat(129) }),
  );
  assert.equal(long.code, "invalid_request");
  assert.match(long.message, /field 'request_key': is longer than 256 UTF-8 bytes/);
  await waitJob(t.syn, a.job_id);
  const status = resultOf(await t.syn.call("admission.status", {}));
  assert.equal(status.jobs_minted, 1);
});

Deno.test("embed.result refuses an unknown job and a page out of range", async () => {
  await using t = await startSynapse({ inline: { max_items: 8 } });
  let e = semanticError(await t.syn.call("embed.result", { job_id: "job_nope" }));
  assert.equal(e.code, "invalid_request");
  assert.equal(e.details.job_id, "job_nope");
  const job = resultOf(await t.syn.call("embed.batch", { texts: TEXTS, request_key: "r" }));
  const done = await waitJob(t.syn, job.job_id);
  e = semanticError(
    await t.syn.call("embed.result", { job_id: job.job_id, page: done.page_count }),
  );
  assert.equal(e.code, "invalid_request");
  assert.equal(e.details.pages_available, done.page_count);
});

Deno.test("F8: single embeds during a bulk job start within max_queue_ms or are refused at once", async () => {
  await using t = await startSynapse({
    inline: { max_items: 8 },
    preload_models: [preload(MINILM, "minilm")],
  });
  const bulk = Array.from({ length: 400 }, (_, i) => `bulk passage ${i} ` + "text ".repeat(40));
  const job = resultOf(await t.syn.call("embed.batch", { texts: bulk, request_key: "bulk" }));
  const state = () => t.syn.jobStore.get(job.job_id)!;
  // Wait (on the store's state, not a clock) until the job runs on the bulk lane.
  while (state().state === "queued") await new Promise((res) => setTimeout(res, 5));
  // Hold the bulk lane's next quantum until every query has been answered: the job is running
  // (one quantum on the engine or queued) the whole time, so the queries really compete with it.
  const bulkLane = t.syn.registry.resolve("minilm", "embed").bulk;
  const hold = bulkLane.reserve();
  const outcomes = await Promise.all(
    Array.from(
      { length: 80 },
      (_, i) =>
        t.syn.call("embed.query", { text: `query ${i}`, max_queue_ms: 500 }).then((o) => ({
          o,
          jobState: state().state,
        })),
    ),
  );
  (await hold).release();
  let served = 0;
  for (const { o, jobState } of outcomes) {
    assert.equal(jobState, "running", "every query was answered while the job ran");
    if (o.kind === "result") {
      served++;
      // Started within max_queue_ms (the module's own start-time measurement; timers may fire
      // a little late on a busy machine).
      // deno-lint-ignore no-explicit-any
      assert.ok((o.body.result as any).queue_time_ms <= 500 + 250);
    } else {
      const e = semanticError(o);
      assert.ok(["queue_full", "deadline_exceeded"].includes(e.code), e.code);
      assert.ok(e.retry_after_ms > 0);
    }
  }
  assert.ok(served > 0, "interactive queries are served while a bulk job runs");
  const status = resultOf(await t.syn.call("admission.status", {}));
  assert.ok(status.lanes.some((l: { lane: string }) => l.lane === "ort-bulk"));
  assert.equal((await waitJob(t.syn, job.job_id)).state, "done");
});

Deno.test("F10: a cancelled inline request stops at the next micro-batch and releases its budget", async () => {
  await using t = await startSynapse({
    inline: { max_tokens: 65536 },
    preload_models: [preload(MINILM, "minilm")],
  });
  // 64 texts of ~300 tokens: five micro-batches of ~4096 tokens, two in flight at a time.
  const texts = Array.from({ length: 64 }, (_, i) => `long passage ${i} ` + "token ".repeat(300));
  // Count the engine calls; the caller goes away as soon as the first call has answered.
  const engine = t.syn.registry.resolve(undefined, "embed").interactive.engine;
  const embed = engine.embed.bind(engine);
  const ac = new AbortController();
  let calls = 0;
  engine.embed = async (rows, options) => {
    calls++;
    const out = await embed(rows, options);
    ac.abort(new DOMException("client went away", "AbortError"));
    return out;
  };
  const e = semanticError(await t.syn.call("embed.batch", { texts }, { signal: ac.signal }));
  assert.equal(e.code, "deadline_exceeded");
  assert.equal(e.details.reason, "cancelled");
  // Five micro-batches planned; after the abort no new call starts (the one already in flight
  // when the first answered may finish).
  assert.ok(calls >= 1 && calls <= 2, `${calls} engine calls of 5`);
  engine.embed = embed;
  assert.equal(t.syn.admission.bytesInFlight, 0);
  assert.equal(t.syn.registry.resolve(undefined, "embed").interactive.stats().inFlight, 0);
  resultOf(await t.syn.call("embed.query", { text: "still serving" }));
});

Deno.test("a job refused at admission (queue_full) ends, so the same key mints a fresh job later", async () => {
  await using t = await startSynapse({ inline: { max_items: 8, byte_budget: 100_000 } });
  const held = t.syn.admission.admit({
    bytes: 99_000,
    deadlineMs: 60_000,
    maxQueueMs: 60_000,
    queueClass: "bulk",
  });
  const e = semanticError(await t.syn.call("embed.batch", { texts: TEXTS, request_key: "full" }));
  assert.equal(e.code, "queue_full");
  assert.equal(e.retry_after_ms, 100);
  held.release();
  const job = resultOf(await t.syn.call("embed.batch", { texts: TEXTS, request_key: "full" }));
  assert.equal(job.attached, false);
  assert.equal((await waitJob(t.syn, job.job_id)).state, "done");
});

Deno.test("F8: a query still queued at max_queue_ms is refused with deadline_exceeded and counted as missed", async () => {
  await using t = await startSynapse();
  // Occupy both interactive permits with long-running fake work.
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const lane = t.syn.registry.resolve(undefined, "embed").interactive;
  const blockers = await Promise.all([0, 1].map(() => lane.reserve()));
  gate.then(() => blockers.forEach((b) => b.release()));
  const t0 = performance.now();
  const e = semanticError(
    await t.syn.call("embed.query", { text: "waits too long", max_queue_ms: 100 }),
  );
  const took = performance.now() - t0;
  assert.equal(e.code, "deadline_exceeded");
  assert.equal(e.details.reason, "max_queue_ms");
  assert.equal(e.retry_after_ms, 100);
  assert.ok(took < 1000, `refused after ${took.toFixed(0)} ms`);
  release();
  await gate;
  const status = resultOf(await t.syn.call("admission.status", {}));
  assert.ok(status.lanes[0].meeting_deadlines.interactive < 1);
  assert.equal(t.syn.admission.bytesInFlight, 0);
});

Deno.test("a job cut short by shutdown is not failed `disposed`: it stays running in the store, and the next boot fails it module_restarted", async () => {
  await using t = await startSynapse({
    inline: { max_items: 8 },
    jobs: { result_page_bytes: 4096 },
  });
  await t.syn.modelsSettled;
  const items = Array.from({ length: 20_000 }, (_, i) => `shutdown passage ${i}`);
  const job = resultOf(await t.syn.call("embed.batch", { items, request_key: "shutdown-1" }));
  // Running, with a page committed and most of the work still to go.
  for (let r = job; r.pages_available === 0;) {
    // A turn of the event loop between polls: the job's quanta come back as worker messages.
    await new Promise((res) => setTimeout(res, 10));
    r = resultOf(await t.syn.call("embed.result", { job_id: job.job_id }));
    assert.equal(r.state, "running");
  }
  const run = t.syn.context.jobs.running.get(job.job_id);
  assert.ok(run !== undefined);
  // The lanes stop first at dispose (the store is still open): the job hears `disposed`.
  await t.syn.registry.dispose();
  await run;
  assert.equal(t.syn.jobStore.get(job.job_id)?.state, "running");
  await t.syn.dispose();
  const env = { XDG_DATA_HOME: `${t.dir}/data`, XDG_CONFIG_HOME: `${t.dir}/config`, HOME: t.dir };
  const next = await createSynapse({ config: t.syn.config, env, waitForModels: false });
  try {
    assert.equal(next.inheritedJobs, 1);
    const after = resultOf(await next.call("embed.result", { job_id: job.job_id }));
    assert.equal(after.state, "failed_transient");
    assert.equal(after.error.code, "module_restarted");
    assert.ok(after.pages_available >= 1);
  } finally {
    await next.dispose();
  }
});
