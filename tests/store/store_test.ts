import assert from "node:assert";
import { join } from "node:path";
import { DatabaseSync } from "node:sqlite";
import { SynapseError } from "../../lib/contract/errors.ts";
import { Store, STORE_NAMESPACE, STORE_SCHEMA_VERSION } from "../../lib/store/store.ts";

async function tempDir(): Promise<{ dir: string; [Symbol.asyncDispose]: () => Promise<void> }> {
  const dir = await Deno.makeTempDir({ prefix: "synapse_store_test_" });
  return {
    dir,
    async [Symbol.asyncDispose](): Promise<void> {
      await Deno.remove(dir, { recursive: true });
    },
  };
}

function columns(db: DatabaseSync, table: string): string[] {
  return db.prepare(`PRAGMA table_info(${table})`).all().map((r) => String(r.name));
}

Deno.test("Store.open() creates the parent directory and turns WAL on", async () => {
  await using t = await tempDir();
  const path = join(t.dir, "a", "b", "store.db");
  using store = Store.open(path);
  assert.strictEqual(store.path, path);
  assert.ok(Deno.statSync(path).isFile);
  const db = store.database;
  assert.strictEqual(db.prepare("PRAGMA journal_mode").get()?.journal_mode, "wal");
  assert.strictEqual(db.prepare("PRAGMA busy_timeout").get()?.timeout, 5000);
  assert.strictEqual(db.prepare("PRAGMA foreign_keys").get()?.foreign_keys, 1);
});

Deno.test("Store.open() increments module_generation across reopens", async () => {
  await using t = await tempDir();
  const path = join(t.dir, "store.db");
  const generations: number[] = [];
  for (let i = 0; i < 3; i++) {
    using store = Store.open(path);
    generations.push(store.moduleGeneration);
    assert.strictEqual(store.tableEpoch, 0);
  }
  assert.deepStrictEqual(generations, [1, 2, 3]);
});

Deno.test("Store.open() runs each migration once and records it", async () => {
  await using t = await tempDir();
  const path = join(t.dir, "store.db");
  const clock = (): number => 1_700_000_000_123;
  Store.open(path, { clock }).dispose();
  Store.open(path, { clock }).dispose();
  const db = new DatabaseSync(path);
  try {
    const rows = db.prepare(
      "SELECT namespace, version, applied_at_unix FROM cortexkit_schema_version ORDER BY version",
    ).all().map((r) => ({ ...r }));
    assert.deepStrictEqual(rows, [
      { namespace: STORE_NAMESPACE, version: 1, applied_at_unix: 1_700_000_000 },
      { namespace: STORE_NAMESPACE, version: 2, applied_at_unix: 1_700_000_000 },
      { namespace: STORE_NAMESPACE, version: 3, applied_at_unix: 1_700_000_000 },
      { namespace: STORE_NAMESPACE, version: 4, applied_at_unix: 1_700_000_000 },
      { namespace: STORE_NAMESPACE, version: 5, applied_at_unix: 1_700_000_000 },
    ]);
    assert.strictEqual(STORE_SCHEMA_VERSION, 5);
    assert.strictEqual(STORE_NAMESPACE, "synapse_module");
  } finally {
    db.close();
  }
});

Deno.test("Store.open() creates the tables of contract §8 with their columns", async () => {
  await using t = await tempDir();
  using store = Store.open(join(t.dir, "store.db"));
  const db = store.database;
  assert.deepStrictEqual(columns(db, "module_meta"), ["id", "module_generation", "table_epoch"]);
  assert.deepStrictEqual(columns(db, "models"), [
    "model_id",
    "engine",
    "task",
    "fingerprint",
    "config_json",
    "updated_ms",
  ]);
  assert.deepStrictEqual(columns(db, "jobs"), [
    "job_id",
    "request_key",
    "request_digest",
    "kind",
    "module_generation",
    "state",
    "created_ms",
    "updated_ms",
    "execution_expires_ms",
    "result_retention_ttl_ms",
    "terminal_at_ms",
    "active_attempt_id",
    "logical_handle",
    "paused_at_ms",
    "resume_deadline_ms",
    "params_json",
    "result_json",
    "error_json",
    "page_count",
    "items_total",
    "items_done",
    "tokens_total",
    "tokens_done",
    "resume_ttl_ms",
  ]);
  assert.deepStrictEqual(columns(db, "job_pages"), [
    "job_id",
    "page_no",
    "item_count",
    "page_json",
    "committed_at_ms",
  ]);
  assert.deepStrictEqual(columns(db, "result_pages"), [], "migration 3 drops result_pages");
  assert.deepStrictEqual(columns(db, "alias_rows"), [
    "fingerprint_a",
    "fingerprint_b",
    "valid_from_ms",
    "valid_to_ms",
    "evidence_json",
  ]);
  assert.throws(
    () => db.exec("INSERT INTO module_meta (id, module_generation, table_epoch) VALUES (1, 1, 1)"),
    /CHECK constraint failed/,
  );
});

Deno.test("Store.open() upgrades a version-2 store to job_pages, keeping its jobs", async () => {
  await using t = await tempDir();
  const path = join(t.dir, "store.db");
  Store.open(path).dispose();
  // Roll the file back to what a version-2 binary left behind, with one job in it.
  const db = new DatabaseSync(path);
  db.exec(`
    DROP TABLE job_pages;
    DROP INDEX jobs_by_generation_state;
    ALTER TABLE jobs DROP COLUMN items_total;
    ALTER TABLE jobs DROP COLUMN items_done;
    ALTER TABLE jobs DROP COLUMN tokens_total;
    ALTER TABLE jobs DROP COLUMN tokens_done;
    ALTER TABLE jobs DROP COLUMN resume_ttl_ms;
    CREATE TABLE result_pages (request_digest TEXT NOT NULL, page_no INTEGER NOT NULL,
      page_json TEXT NOT NULL, provider_request_ids_json TEXT, committed_at INTEGER NOT NULL,
      PRIMARY KEY (request_digest, page_no));
    DELETE FROM cortexkit_schema_version WHERE version = 3;
    INSERT INTO jobs (job_id, kind, module_generation, state, created_ms, updated_ms)
      VALUES ('job_old', 'embed.batch', 1, 'done', 1, 1);
  `);
  db.close();
  using store = Store.open(path);
  const row = store.database.prepare(
    "SELECT job_id, items_total, items_done, page_count FROM jobs",
  ).get();
  assert.deepStrictEqual({ ...row }, {
    job_id: "job_old",
    items_total: 0,
    items_done: 0,
    page_count: 0,
  });
  assert.deepStrictEqual(columns(store.database, "result_pages"), []);
  assert.strictEqual(columns(store.database, "job_pages").length, 5);
});

Deno.test("Store.open() refuses a schema ahead of the binary", async () => {
  await using t = await tempDir();
  const path = join(t.dir, "store.db");
  Store.open(path).dispose();
  const db = new DatabaseSync(path);
  db.prepare("INSERT INTO cortexkit_schema_version VALUES (?, ?, ?)").run(STORE_NAMESPACE, 99, 0);
  db.close();
  let caught: unknown;
  try {
    Store.open(path);
  } catch (err) {
    caught = err;
  }
  assert.ok(caught instanceof SynapseError);
  assert.strictEqual(caught.code, "store_failure");
  assert.match(caught.message, /schema ahead of binary/);
  assert.strictEqual(caught.details?.stored, 99);
  assert.strictEqual(caught.details?.known, STORE_SCHEMA_VERSION);
});

Deno.test("Store.open() ignores other namespaces' schema versions", async () => {
  await using t = await tempDir();
  const path = join(t.dir, "store.db");
  Store.open(path).dispose();
  const db = new DatabaseSync(path);
  db.prepare("INSERT INTO cortexkit_schema_version VALUES (?, ?, ?)").run("other_module", 99, 0);
  db.close();
  using store = Store.open(path);
  assert.strictEqual(store.moduleGeneration, 2);
});

Deno.test({
  name: "Store.open() restricts the database, -wal and -shm files to mode 0600",
  ignore: Deno.build.os === "windows",
  fn: async () => {
    await using t = await tempDir();
    const path = join(t.dir, "store.db");
    using _store = Store.open(path);
    for (const file of [path, `${path}-wal`, `${path}-shm`]) {
      const info = Deno.statSync(file);
      assert.strictEqual((info.mode ?? 0) & 0o777, 0o600, file);
    }
  },
});

Deno.test("Store.open() re-restricts a database whose mode was widened", {
  ignore: Deno.build.os === "windows",
}, async () => {
  await using t = await tempDir();
  const path = join(t.dir, "store.db");
  Store.open(path).dispose();
  Deno.chmodSync(path, 0o644);
  using _store = Store.open(path);
  assert.strictEqual((Deno.statSync(path).mode ?? 0) & 0o777, 0o600);
});

Deno.test("Store.open() wraps failures in store_failure", async () => {
  await using t = await tempDir();
  const blocker = join(t.dir, "file");
  Deno.writeTextFileSync(blocker, "x");
  assert.throws(
    () => Store.open(join(blocker, "store.db")),
    (err: unknown) => err instanceof SynapseError && err.code === "store_failure",
  );
  const notDb = join(t.dir, "garbage.db");
  Deno.writeTextFileSync(
    notDb,
    "this is not a database, just some text that is long enough".repeat(20),
  );
  // Not a database: a corrupt store, refused permanently (F40), naming the file.
  assert.throws(
    () => Store.open(notDb),
    (err: unknown) =>
      err instanceof SynapseError && err.code === "internal_error" &&
      err.details?.reason === "store_corrupt" && err.details?.path === notDb,
  );
});

Deno.test("Store.upsertModel() inserts, replaces and lists rows by model_id", async () => {
  await using t = await tempDir();
  let now = 1000;
  using store = Store.open(join(t.dir, "store.db"), { clock: () => now });
  store.upsertModel({
    model_id: "b",
    engine: "ort",
    task: "embed",
    fingerprint: "f1",
    config_json: "{}",
  });
  store.upsertModel({
    model_id: "a",
    engine: "llama",
    task: "generate",
    fingerprint: "f2",
    config_json: "{}",
    updated_ms: 5,
  });
  now = 2000;
  store.upsertModel({
    model_id: "b",
    engine: "ort",
    task: "rerank",
    fingerprint: "f3",
    config_json: `{"x":1}`,
  });
  assert.deepStrictEqual(store.listModels(), [
    {
      model_id: "a",
      engine: "llama",
      task: "generate",
      fingerprint: "f2",
      config_json: "{}",
      updated_ms: 5,
    },
    {
      model_id: "b",
      engine: "ort",
      task: "rerank",
      fingerprint: "f3",
      config_json: `{"x":1}`,
      updated_ms: 2000,
    },
  ]);
});

Deno.test("Store keeps models across reopen", async () => {
  await using t = await tempDir();
  const path = join(t.dir, "store.db");
  {
    using store = Store.open(path);
    store.upsertModel({
      model_id: "m",
      engine: "ort",
      task: "embed",
      fingerprint: "f",
      config_json: "{}",
    });
  }
  using store = Store.open(path);
  assert.deepStrictEqual(store.listModels().map((m) => m.model_id), ["m"]);
});

Deno.test("Store.transaction() commits, and rolls back when the callback throws", async () => {
  await using t = await tempDir();
  using store = Store.open(join(t.dir, "store.db"));
  const insert = (id: string): void => {
    store.database.prepare(
      "INSERT INTO alias_rows (fingerprint_a, fingerprint_b, valid_from_ms) VALUES (?, ?, 0)",
    ).run(id, "z");
  };
  store.transaction(() => insert("a"));
  assert.throws(
    () =>
      store.transaction(() => {
        insert("b");
        throw new SynapseError("invalid_request", "nope");
      }),
    (err: unknown) => err instanceof SynapseError && err.code === "invalid_request",
  );
  assert.throws(
    () => store.transaction(() => insert("z2")),
    (err: unknown) => err instanceof SynapseError && err.code === "store_failure",
    "the CHECK (fingerprint_a <= fingerprint_b) violation is a store_failure",
  );
  const rows = store.database.prepare("SELECT fingerprint_a FROM alias_rows").all();
  assert.deepStrictEqual(rows.map((r) => r.fingerprint_a), ["a"]);
});

Deno.test("Store.dispose() is idempotent and guards every use afterwards", async () => {
  await using t = await tempDir();
  const store = Store.open(join(t.dir, "store.db"));
  assert.strictEqual(store.disposed, false);
  store.dispose();
  store.dispose();
  store[Symbol.dispose]();
  assert.strictEqual(store.disposed, true);
  assert.strictEqual(store.moduleGeneration, 1);
  const isDisposed = (err: unknown): boolean =>
    err instanceof SynapseError && err.code === "disposed";
  assert.throws(() => store.listModels(), isDisposed);
  assert.throws(
    () =>
      store.upsertModel({
        model_id: "m",
        engine: "e",
        task: "t",
        fingerprint: "f",
        config_json: "{}",
      }),
    isDisposed,
  );
  assert.throws(() => store.tableEpoch, isDisposed);
  assert.throws(() => store.database, isDisposed);
  assert.throws(() => store.transaction(() => 1), isDisposed);
});

Deno.test("Store.open() supports a private in-memory store", () => {
  using store = Store.open(":memory:");
  assert.strictEqual(store.moduleGeneration, 1);
  assert.deepStrictEqual(store.listModels(), []);
});
