import assert from "node:assert";
import { join } from "node:path";
import { SynapseError } from "../../lib/contract/errors.ts";
import { requestDigest } from "../../lib/identity/request_digest.ts";
import { JobStore } from "../../lib/store/job_store.ts";
import { type AdmitJobInput, MAX_REQUEST_KEY_BYTES } from "../../lib/store/job_types.ts";
import { Store } from "../../lib/store/store.ts";

const DAY_MS = 86_400_000;
const T0 = 1_700_000_000_000;

async function tempDir(): Promise<{ dir: string; [Symbol.asyncDispose]: () => Promise<void> }> {
  const dir = await Deno.makeTempDir({ prefix: "synapse_job_store_test_" });
  return {
    dir,
    async [Symbol.asyncDispose](): Promise<void> {
      await Deno.remove(dir, { recursive: true });
    },
  };
}

/** A settable clock and sequential ids, so rows are predictable. */
interface Harness {
  store: Store;
  jobs: JobStore;
  clock: { now: number };
}

function open(path: string, clock: { now: number } = { now: T0 }, firstId = 1): Harness {
  const store = Store.open(path, { clock: () => clock.now });
  let n = firstId;
  const jobs = new JobStore(store, { clock: () => clock.now, newId: () => `job_${n++}` });
  return { store, jobs, clock };
}

function digestOf(texts: string[]): string {
  return requestDigest({
    op: "embed.batch",
    modelId: "synapse-tiny-embed",
    constraints: {},
    items: texts.map((t, i) => ({ id: String(i), contentSha256: t })),
  });
}

const D1 = digestOf(["a", "b"]);
const D2 = digestOf(["a", "c"]);

function admission(overrides: Partial<AdmitJobInput> = {}): AdmitJobInput {
  return {
    requestKey: "key-1",
    requestDigest: D1,
    kind: "embed.batch",
    moduleGeneration: 1,
    params: { model: "synapse-tiny-embed", texts: ["a", "b"] },
    itemsTotal: 2,
    tokensTotal: 7,
    ttls: { executionMs: DAY_MS, retentionMs: DAY_MS, resumeMs: DAY_MS },
    ...overrides,
  };
}

function isCode(code: string): (err: unknown) => boolean {
  return (err: unknown) => err instanceof SynapseError && err.code === code;
}

Deno.test("JobStore.admit() mints a queued job with its TTLs, params and totals", async () => {
  await using t = await tempDir();
  const { store, jobs } = open(join(t.dir, "store.db"));
  using _store = store;
  const { job, attached } = jobs.admit(admission({ logicalHandle: "h" }));
  assert.strictEqual(attached, false);
  assert.deepStrictEqual(job, {
    jobId: "job_1",
    requestKey: "key-1",
    requestDigest: D1,
    kind: "embed.batch",
    moduleGeneration: 1,
    state: "queued",
    createdMs: T0,
    updatedMs: T0,
    executionExpiresMs: T0 + DAY_MS,
    resultRetentionTtlMs: DAY_MS,
    terminalAtMs: null,
    activeAttemptId: null,
    logicalHandle: "h",
    pausedAtMs: null,
    resumeDeadlineMs: null,
    resumeTtlMs: DAY_MS,
    params: { model: "synapse-tiny-embed", texts: ["a", "b"] },
    result: null,
    error: null,
    pageCount: 0,
    itemsTotal: 2,
    itemsDone: 0,
    tokensTotal: 7,
    tokensDone: 0,
  });
  assert.deepStrictEqual(jobs.get("job_1"), job);
  assert.strictEqual(jobs.get("job_nope"), undefined);
  assert.deepStrictEqual(jobs.counters(), {
    minted: 1,
    completed: 0,
    failed: 0,
    inherited: 0,
    open: 1,
  });
});

Deno.test("JobStore.admit() uses job_<uuid hex> ids by default", async () => {
  await using t = await tempDir();
  using store = Store.open(join(t.dir, "store.db"));
  const jobs = new JobStore(store);
  const a = jobs.admit(admission()).job.jobId;
  const b = jobs.admit(admission({ requestKey: "key-2" })).job.jobId;
  assert.match(a, /^job_[0-9a-f]{32}$/);
  assert.notStrictEqual(a, b);
});

Deno.test("JobStore.admit() attaches the same key and digest, in every state", async () => {
  await using t = await tempDir();
  const { store, jobs, clock } = open(join(t.dir, "store.db"));
  using _store = store;
  const first = jobs.admit(admission()).job;
  clock.now += 10;
  const again = jobs.admit(admission({ params: { different: "params do not matter" } }));
  assert.strictEqual(again.attached, true);
  assert.deepStrictEqual(again.job, first);
  jobs.markRunning(first.jobId);
  assert.strictEqual(jobs.admit(admission()).job.state, "running");
  jobs.finish(first.jobId, "done");
  const done = jobs.admit(admission());
  assert.strictEqual(done.attached, true);
  assert.strictEqual(done.job.state, "done");
  // A permanent failure, or a transient one that is not safe to retry, is attached too.
  jobs.admit(admission({ requestKey: "p" }));
  jobs.markRunning("job_2");
  jobs.finish(
    "job_2",
    "failed_permanent",
    new SynapseError("sequence_too_long", "too long").toWire(),
  );
  assert.deepStrictEqual(jobs.admit(admission({ requestKey: "p" })).job.jobId, "job_2");
  jobs.admit(admission({ requestKey: "d" }));
  jobs.finish(
    "job_3",
    "failed_transient",
    new SynapseError("deadline_exceeded", "late").toWire(),
  );
  assert.strictEqual(jobs.admit(admission({ requestKey: "d" })).attached, true);
  const c = jobs.counters();
  assert.deepStrictEqual(c, { minted: 3, completed: 1, failed: 2, inherited: 0, open: 0 });
});

Deno.test("JobStore.admit() refuses another digest under a retained key", async () => {
  await using t = await tempDir();
  const { store, jobs, clock } = open(join(t.dir, "store.db"));
  using _store = store;
  jobs.admit(admission());
  let caught: unknown;
  try {
    jobs.admit(admission({ requestDigest: D2 }));
  } catch (err) {
    caught = err;
  }
  assert.ok(caught instanceof SynapseError);
  assert.strictEqual(caught.code, "idempotency_conflict");
  // A query's job id is the capability that reads its results: the conflict never names it (F39).
  assert.deepStrictEqual(caught.details, { request_key: "key-1" });
  assert.doesNotMatch(caught.message, /job_1/);
  assert.strictEqual(caught.toWire().class, "permanent");
  // The owner's operations (probe.start) ask for the job that holds the key.
  assert.throws(
    () => jobs.admit(admission({ requestDigest: D2, revealConflictingJob: true })),
    (e: unknown) =>
      e instanceof SynapseError &&
      JSON.stringify(e.details) === JSON.stringify({ request_key: "key-1", job_id: "job_1" }),
  );
  // Still a conflict once the job ended, until its retention is over.
  jobs.finish("job_1", "done");
  clock.now += DAY_MS;
  assert.throws(() => jobs.admit(admission({ requestDigest: D2 })), isCode("idempotency_conflict"));
  // After retention, the key is free again (even before a sweep deletes the old row).
  clock.now += 1;
  const fresh = jobs.admit(admission({ requestDigest: D2 }));
  assert.strictEqual(fresh.attached, false);
  assert.strictEqual(fresh.job.jobId, "job_2");
  // The same digest as the expired job now sees the fresh job: a conflict.
  assert.throws(() => jobs.admit(admission()), isCode("idempotency_conflict"));
  assert.strictEqual(
    Number(store.database.prepare("SELECT COUNT(*) AS n FROM jobs").get()?.n),
    2,
  );
  assert.strictEqual(jobs.counters().minted, 2);
});

Deno.test("JobStore.admit() mints a fresh job after module_restarted; old pages stay", async () => {
  await using t = await tempDir();
  const path = join(t.dir, "store.db");
  const clock = { now: T0 };
  {
    const { store, jobs } = open(path, clock);
    using _store = store;
    jobs.admit(admission());
    jobs.markRunning("job_1");
    jobs.commitPage("job_1", 0, 1, `{"vectors":["old"]}`, { itemsDone: 1, tokensDone: 3 });
  }
  clock.now += 1000;
  const { store, jobs } = open(path, clock, 100);
  using _store = store;
  assert.strictEqual(store.moduleGeneration, 2);
  assert.strictEqual(jobs.inheritEarlierGenerations(store.moduleGeneration), 1);
  const fresh = jobs.admit(admission({ moduleGeneration: 2 }));
  assert.strictEqual(fresh.attached, false);
  assert.strictEqual(fresh.job.jobId, "job_100");
  assert.strictEqual(fresh.job.moduleGeneration, 2);
  assert.strictEqual(fresh.job.pageCount, 0);
  jobs.markRunning("job_100");
  jobs.commitPage("job_100", 0, 2, `{"vectors":["new"]}`, { itemsDone: 2, tokensDone: 7 });
  assert.deepStrictEqual(jobs.readPage("job_1", 0), {
    pageJson: `{"vectors":["old"]}`,
    itemCount: 1,
  });
  assert.deepStrictEqual(jobs.readPage("job_100", 0), {
    pageJson: `{"vectors":["new"]}`,
    itemCount: 2,
  });
  // The fresh job is now the key's newest: the same request attaches to it.
  assert.strictEqual(jobs.admit(admission({ moduleGeneration: 2 })).job.jobId, "job_100");
  assert.deepStrictEqual(jobs.counters(), {
    minted: 1,
    completed: 0,
    failed: 1,
    inherited: 1,
    open: 1,
  });
});

Deno.test("JobStore.admit() mints afresh after any transient failure safe to retry", async () => {
  await using t = await tempDir();
  const { store, jobs } = open(join(t.dir, "store.db"));
  using _store = store;
  jobs.admit(admission());
  jobs.markRunning("job_1");
  jobs.finish("job_1", "failed_transient", new SynapseError("engine_crashed", "boom").toWire());
  const again = jobs.admit(admission());
  assert.strictEqual(again.attached, false);
  assert.strictEqual(again.job.jobId, "job_2");
});

Deno.test("JobStore.inheritEarlierGenerations() fails queued, running and paused jobs of a reopened store (a paused job's inputs died with its process)", async () => {
  await using t = await tempDir();
  const path = join(t.dir, "store.db");
  const clock = { now: T0 };
  {
    const { store, jobs } = open(path, clock);
    using _store = store;
    assert.strictEqual(store.moduleGeneration, 1);
    jobs.admit(admission({ requestKey: "queued" }));
    jobs.admit(admission({ requestKey: "running" }));
    jobs.markRunning("job_2");
    jobs.commitPage("job_2", 0, 1, `{"p":0}`, { itemsDone: 1, tokensDone: 4 });
    jobs.admit(admission({ requestKey: "done" }));
    jobs.markRunning("job_3");
    jobs.finish("job_3", "done");
    jobs.admit(admission({ requestKey: "paused" }));
    store.database.prepare(
      `UPDATE jobs SET state = 'paused_needs_reauth', paused_at_ms = ?, resume_deadline_ms = ?
       WHERE job_id = 'job_4'`,
    ).run(T0, T0 + DAY_MS);
  }
  clock.now = T0 + 5000;
  const { store, jobs } = open(path, clock, 100);
  using _store = store;
  assert.strictEqual(store.moduleGeneration, 2);
  // A job of the current generation is not touched.
  jobs.admit(admission({ requestKey: "current", moduleGeneration: 2 }));
  assert.strictEqual(jobs.inheritEarlierGenerations(2), 3);
  for (const id of ["job_1", "job_2", "job_4"]) {
    const job = jobs.get(id);
    assert.strictEqual(job?.state, "failed_transient", id);
    assert.strictEqual(job.terminalAtMs, T0 + 5000);
    assert.strictEqual(job.updatedMs, T0 + 5000);
    const { message, ...rest } = job.error ?? { message: undefined };
    assert.deepStrictEqual(rest, {
      code: "module_restarted",
      class: "transient",
      retry_after_ms: 100,
      safe_to_retry_same_request: true,
    });
    assert.match(String(message), /restart/);
  }
  assert.strictEqual(jobs.get("job_3")?.state, "done");
  assert.strictEqual(jobs.get("job_3")?.error, null);
  assert.strictEqual(jobs.get("job_100")?.state, "queued");
  // Pages and progress of the inherited running job are intact.
  assert.strictEqual(jobs.pageCount("job_2"), 1);
  assert.strictEqual(jobs.get("job_2")?.itemsDone, 1);
  assert.deepStrictEqual(jobs.readPage("job_2", 0), { pageJson: `{"p":0}`, itemCount: 1 });
  // Idempotent.
  assert.strictEqual(jobs.inheritEarlierGenerations(2), 0);
  assert.deepStrictEqual(jobs.counters(), {
    minted: 1,
    completed: 0,
    failed: 3,
    inherited: 3,
    open: 1,
  });
});

Deno.test("JobStore.commitPage() appends pages in order and records progress", async () => {
  await using t = await tempDir();
  const { store, jobs, clock } = open(join(t.dir, "store.db"));
  using _store = store;
  jobs.admit(admission({ itemsTotal: 3 }));
  assert.throws(
    () => jobs.commitPage("job_1", 0, 1, "{}", { itemsDone: 1, tokensDone: 1 }),
    (err: unknown) =>
      isCode("invalid_request")(err) && (err as SynapseError).details?.state === "queued",
    "a queued job takes no pages",
  );
  jobs.markRunning("job_1");
  clock.now += 5;
  const after0 = jobs.commitPage("job_1", 0, 2, `{"i":0}`, { itemsDone: 2, tokensDone: 5 });
  assert.strictEqual(after0.pageCount, 1);
  assert.strictEqual(after0.itemsDone, 2);
  assert.strictEqual(after0.tokensDone, 5);
  assert.strictEqual(after0.updatedMs, T0 + 5);
  for (const pageNo of [0, 2]) {
    assert.throws(
      () => jobs.commitPage("job_1", pageNo, 1, "{}", { itemsDone: 3, tokensDone: 7 }),
      (err: unknown) =>
        isCode("invalid_request")(err) && (err as SynapseError).details?.page_count === 1,
      `page ${pageNo} is out of order`,
    );
  }
  jobs.commitPage("job_1", 1, 1, `{"i":1}`, { itemsDone: 3, tokensDone: 7 });
  assert.strictEqual(jobs.pageCount("job_1"), 2);
  assert.deepStrictEqual(jobs.readPage("job_1", 0), { pageJson: `{"i":0}`, itemCount: 2 });
  assert.deepStrictEqual(jobs.readPage("job_1", 1), { pageJson: `{"i":1}`, itemCount: 1 });
  assert.strictEqual(jobs.readPage("job_1", 2), undefined);
  assert.strictEqual(jobs.readPage("job_nope", 0), undefined);
  assert.strictEqual(jobs.pageCount("job_nope"), undefined);
  const committed = store.database.prepare(
    "SELECT committed_at_ms FROM job_pages WHERE job_id = 'job_1' ORDER BY page_no",
  ).all().map((r) => r.committed_at_ms);
  assert.deepStrictEqual(committed, [T0 + 5, T0 + 5]);
  // Pages stay readable once the job ended, and no page can be added then.
  jobs.finish("job_1", "done");
  assert.deepStrictEqual(jobs.readPage("job_1", 1), { pageJson: `{"i":1}`, itemCount: 1 });
  assert.throws(
    () => jobs.commitPage("job_1", 2, 1, "{}", { itemsDone: 3, tokensDone: 7 }),
    isCode("invalid_request"),
  );
  assert.throws(
    () => jobs.commitPage("job_nope", 0, 1, "{}", { itemsDone: 1, tokensDone: 1 }),
    (err: unknown) =>
      isCode("invalid_request")(err) && (err as SynapseError).details?.job_id === "job_nope",
  );
  assert.throws(
    () => jobs.commitPage("job_1", -1, 1, "{}", { itemsDone: 1, tokensDone: 1 }),
    RangeError,
  );
});

Deno.test("JobStore.finish() ends a job once, with an error of the matching class", async () => {
  await using t = await tempDir();
  const { store, jobs, clock } = open(join(t.dir, "store.db"));
  using _store = store;
  jobs.admit(admission());
  jobs.markRunning("job_1");
  const crashed = new SynapseError("engine_crashed", "worker died").toWire();
  assert.throws(() => jobs.finish("job_1", "done", crashed), TypeError);
  assert.throws(() => jobs.finish("job_1", "failed_transient"), TypeError);
  assert.throws(() => jobs.finish("job_1", "failed_permanent", crashed), TypeError);
  assert.throws(() => jobs.finish("job_1", "running" as never), TypeError);
  clock.now += 42;
  const failed = jobs.finish("job_1", "failed_transient", crashed);
  assert.strictEqual(failed.state, "failed_transient");
  assert.strictEqual(failed.terminalAtMs, T0 + 42);
  assert.deepStrictEqual(failed.error, crashed);
  assert.throws(() => jobs.finish("job_1", "done"), isCode("invalid_request"));
  assert.throws(() => jobs.markRunning("job_1"), isCode("invalid_request"));
  assert.throws(() => jobs.finish("job_nope", "done"), isCode("invalid_request"));
  assert.throws(() => jobs.markRunning("job_nope"), isCode("invalid_request"));
  assert.deepStrictEqual(jobs.counters(), {
    minted: 1,
    completed: 0,
    failed: 1,
    inherited: 0,
    open: 0,
  });
});

Deno.test("JobStore.sweepExpired() fails overdue jobs and deletes expired ones with pages", async () => {
  await using t = await tempDir();
  const { store, jobs, clock } = open(join(t.dir, "store.db"));
  using _store = store;
  const ttls = { executionMs: 1000, retentionMs: 500, resumeMs: 100 };
  jobs.admit(admission({ requestKey: "done-early", ttls })); // job_1
  jobs.markRunning("job_1");
  jobs.commitPage("job_1", 0, 1, "{}", { itemsDone: 1, tokensDone: 1 });
  jobs.commitPage("job_1", 1, 1, "{}", { itemsDone: 2, tokensDone: 2 });
  jobs.finish("job_1", "done"); // terminal at T0, retained until T0 + 500
  jobs.admit(admission({ requestKey: "overdue", ttls })); // job_2, expires T0 + 1000
  jobs.markRunning("job_2");
  jobs.commitPage("job_2", 0, 1, "{}", { itemsDone: 1, tokensDone: 1 });
  jobs.admit(admission({ requestKey: "paused", ttls })); // job_3
  store.database.prepare(
    `UPDATE jobs SET state = 'paused_needs_reauth', paused_at_ms = ?, resume_deadline_ms = ?
     WHERE job_id = 'job_3'`,
  ).run(T0, T0 + 100);
  clock.now = T0 + 600;
  jobs.admit(admission({ requestKey: "young", ttls })); // job_4, expires T0 + 1600

  // At T0 + 500 exactly, job_1 is still retained and nothing is overdue but the pause.
  assert.deepStrictEqual(jobs.sweepExpired(T0 + 500), {
    expired: 1,
    deletedJobs: 0,
    deletedPages: 0,
  });
  const paused = jobs.get("job_3");
  assert.strictEqual(paused?.state, "failed_permanent");
  assert.strictEqual(paused.error?.code, "needs_reauth_expired");
  assert.strictEqual(paused.terminalAtMs, T0 + 500);

  // Later: job_1 is past retention; job_2 is past its execution TTL and fails first.
  clock.now = T0 + 1001;
  assert.deepStrictEqual(jobs.sweepExpired(), { expired: 1, deletedJobs: 2, deletedPages: 2 });
  assert.strictEqual(jobs.get("job_1"), undefined, "job_1 deleted");
  assert.strictEqual(jobs.readPage("job_1", 0), undefined);
  assert.strictEqual(jobs.get("job_3"), undefined, "job_3 deleted (terminal at T0+500)");
  const overdue = jobs.get("job_2");
  assert.strictEqual(overdue?.state, "failed_transient");
  assert.strictEqual(overdue.error?.code, "deadline_exceeded");
  assert.strictEqual(overdue.error?.safe_to_retry_same_request, false);
  assert.strictEqual(jobs.readPage("job_2", 0)?.itemCount, 1, "pages readable until retention");
  assert.strictEqual(jobs.get("job_4")?.state, "queued");
  // A failed-by-deadline job is attached, not re-run, while retained.
  assert.strictEqual(jobs.admit(admission({ requestKey: "overdue", ttls })).attached, true);

  clock.now = T0 + 1502;
  assert.deepStrictEqual(jobs.sweepExpired(), { expired: 0, deletedJobs: 1, deletedPages: 1 });
  assert.strictEqual(
    Number(store.database.prepare("SELECT COUNT(*) AS n FROM job_pages").get()?.n),
    0,
  );
  // The key of a swept job is free for any digest.
  assert.strictEqual(
    jobs.admit(admission({ requestKey: "done-early", requestDigest: D2, ttls })).attached,
    false,
  );
  assert.strictEqual(jobs.counters().failed, 2);
});

Deno.test("JobStore.admit() limits request_key to 256 UTF-8 bytes", async () => {
  await using t = await tempDir();
  const { store, jobs } = open(join(t.dir, "store.db"));
  using _store = store;
  assert.strictEqual(MAX_REQUEST_KEY_BYTES, 256);
  const accepted = ["k".repeat(256), "é".repeat(128), "\u{1f600}".repeat(64), "x"];
  for (const requestKey of accepted) {
    assert.strictEqual(jobs.admit(admission({ requestKey })).attached, false, requestKey);
  }
  const refused: [string, number][] = [
    ["k".repeat(257), 257],
    ["é".repeat(128) + "a", 257],
    ["é".repeat(129), 258],
    ["\u{1f600}".repeat(65), 260],
    ["", 0],
  ];
  for (const [requestKey, bytes] of refused) {
    let caught: unknown;
    try {
      jobs.admit(admission({ requestKey }));
    } catch (err) {
      caught = err;
    }
    assert.ok(caught instanceof SynapseError, `${bytes} bytes`);
    assert.strictEqual(caught.code, "invalid_request");
    assert.match(caught.message, /request_key/);
    assert.deepStrictEqual(caught.details, {
      field: "request_key",
      bytes,
      max_bytes: 256,
    });
  }
  assert.throws(() => jobs.admit(admission({ requestKey: 7 as never })), isCode("invalid_request"));
  assert.strictEqual(jobs.counters().minted, accepted.length);
});

Deno.test("JobStore.admit() validates counts, TTLs and params before any write", async () => {
  await using t = await tempDir();
  const { store, jobs } = open(join(t.dir, "store.db"));
  using _store = store;
  for (const bad of [-1, 1.5, NaN, Infinity]) {
    assert.throws(() => jobs.admit(admission({ itemsTotal: bad })), RangeError);
    assert.throws(
      () => jobs.admit(admission({ ttls: { executionMs: bad, retentionMs: 1, resumeMs: 1 } })),
      RangeError,
    );
  }
  assert.throws(() => jobs.admit(admission({ requestDigest: "" })), TypeError);
  assert.throws(() => jobs.admit(admission({ params: { n: 1n } })), TypeError);
  assert.strictEqual(jobs.get("job_1"), undefined);
});

Deno.test("JobStore wraps SQLite failures in store_failure and honours dispose", async () => {
  await using t = await tempDir();
  const { store, jobs } = open(join(t.dir, "store.db"));
  // An id collision fails the INSERT: store_failure, and the counters do not move.
  const colliding = new JobStore(store, { newId: () => "job_same" });
  colliding.admit(admission({ requestKey: "a" }));
  assert.throws(() => colliding.admit(admission({ requestKey: "b" })), isCode("store_failure"));
  assert.strictEqual(colliding.counters().minted, 1);
  // A corrupt JSON column is a corrupt store: permanent (F40), never a transient retried forever.
  store.database.exec("UPDATE jobs SET params_json = '{broken' WHERE job_id = 'job_same'");
  assert.throws(
    () => jobs.get("job_same"),
    (err: unknown) =>
      err instanceof SynapseError && err.code === "internal_error" &&
      err.details?.reason === "store_corrupt" && err.toWire().class === "permanent",
  );
  store.database.exec("DROP TABLE job_pages");
  assert.throws(() => jobs.readPage("job_same", 0), isCode("store_failure"));
  store.dispose();
  assert.throws(() => jobs.get("job_same"), isCode("disposed"));
  assert.throws(() => jobs.admit(admission()), isCode("disposed"));
  assert.throws(() => jobs.sweepExpired(), isCode("disposed"));
});

Deno.test("JobStore.pause() and resume(): running → paused_needs_reauth with its deadline and why → running, pages kept; past the deadline resume fails it needs_reauth_expired", async () => {
  await using t = await tempDir();
  const clock = { now: T0 };
  const { store, jobs } = open(join(t.dir, "store.db"), clock);
  using _store = store;
  const ttls = { executionMs: DAY_MS, retentionMs: DAY_MS, resumeMs: 1000 };
  jobs.admit(admission({ requestKey: "a", ttls }));
  assert.throws(() => jobs.pause("job_1", reauthError()), isCode("invalid_request"));
  jobs.markRunning("job_1");
  jobs.commitPage("job_1", 0, 1, `{"p":0}`, { itemsDone: 1, tokensDone: 4 });
  clock.now = T0 + 10;
  const paused = jobs.pause("job_1", reauthError());
  assert.strictEqual(paused.state, "paused_needs_reauth");
  assert.strictEqual(paused.pausedAtMs, T0 + 10);
  assert.strictEqual(paused.resumeDeadlineMs, T0 + 1010);
  assert.strictEqual(paused.error?.code, "needs_reauth");
  assert.throws(
    () => jobs.commitPage("job_1", 1, 1, `{"p":1}`, { itemsDone: 2, tokensDone: 8 }),
    isCode("invalid_request"),
    "a paused job takes no page",
  );
  clock.now = T0 + 500;
  const resumed = jobs.resume("job_1");
  assert.strictEqual(resumed.state, "running");
  assert.strictEqual(resumed.pausedAtMs, null);
  assert.strictEqual(resumed.resumeDeadlineMs, null);
  assert.strictEqual(resumed.error, null);
  assert.throws(() => jobs.resume("job_1"), isCode("invalid_request"), "not paused");
  jobs.commitPage("job_1", 1, 1, `{"p":1}`, { itemsDone: 2, tokensDone: 8 });
  // Paused again, and not resumed in time.
  jobs.pause("job_1", reauthError());
  clock.now = T0 + 500 + 1001;
  assert.throws(() => jobs.resume("job_1"), isCode("needs_reauth_expired"));
  const failed = jobs.get("job_1");
  assert.strictEqual(failed?.state, "failed_permanent");
  assert.strictEqual(failed.error?.code, "needs_reauth_expired");
  assert.strictEqual(jobs.pageCount("job_1"), 2, "pages stay readable");
  assert.throws(() => jobs.resume("nope"), isCode("invalid_request"));
});

function reauthError() {
  return new SynapseError("needs_reauth", "Remote provider 'p' refused the credentials").toWire();
}
