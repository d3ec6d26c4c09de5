/**
 * The Synapse SQLite store (docs/internals.md §8.1), over Deno's
 * built-in `node:sqlite`.
 *
 * Opening follows the cortexkit store procedure: `mkdir -p` the parent, open, set
 * `busy_timeout=5000`, `journal_mode=WAL` and `foreign_keys=ON`, run the numbered migrations of
 * namespace `synapse_module` (one transaction each, recorded in `cortexkit_schema_version`),
 * bump `module_generation`, and restrict the database files to mode 0600.
 *
 * Faults of the file (lib/store/_store_faults.ts): a 0-byte store file (with no write-ahead log
 * to recover from) and a store that fails `PRAGMA quick_check` are refused at open with
 * `internal_error` `{reason: "store_empty" | "store_corrupt", path}`, naming the file and what to
 * do — never opened (and so never silently replaced by an empty store). A corrupt page found
 * later answers the same permanent error; a full disk answers `store_failure` `{reason:
 * "storage_full"}` saying the disk is full; other I/O errors `store_failure` `{reason:
 * "io_error"}`.
 *
 * Not done here (yet): the exclusive store lease in the parent directory and fenced writes
 * (`cortexkit_fence`), which need a non-blocking `flock`.
 *
 * @module
 */

import { DatabaseSync } from "node:sqlite";
import { dirname } from "node:path";
import { SynapseError } from "../contract/errors.ts";
import { corruptStoreAdvice, storeFailure } from "./_store_faults.ts";

/** Migration namespace of this module in `cortexkit_schema_version`. */
export const STORE_NAMESPACE = "synapse_module";

/** One numbered migration: a batch of SQL run in its own transaction. */
interface Migration {
  readonly version: number;
  readonly sql: string;
}

const MIGRATIONS: readonly Migration[] = [
  {
    version: 1,
    sql: `
      CREATE TABLE module_meta (
        id INTEGER PRIMARY KEY CHECK (id = 0),
        module_generation INTEGER NOT NULL,
        table_epoch INTEGER NOT NULL
      );
      CREATE TABLE models (
        model_id TEXT PRIMARY KEY,
        engine TEXT,
        task TEXT,
        fingerprint TEXT,
        config_json TEXT,
        updated_ms INTEGER
      );
    `,
  },
  {
    version: 2,
    sql: `
      CREATE TABLE jobs (
        job_id TEXT PRIMARY KEY,
        request_key TEXT,
        request_digest TEXT,
        kind TEXT NOT NULL,
        module_generation INTEGER NOT NULL,
        state TEXT NOT NULL,
        created_ms INTEGER NOT NULL,
        updated_ms INTEGER NOT NULL,
        execution_expires_ms INTEGER,
        result_retention_ttl_ms INTEGER,
        terminal_at_ms INTEGER,
        active_attempt_id TEXT,
        logical_handle TEXT,
        paused_at_ms INTEGER,
        resume_deadline_ms INTEGER,
        params_json TEXT,
        result_json TEXT,
        error_json TEXT,
        page_count INTEGER NOT NULL DEFAULT 0
      );
      CREATE INDEX jobs_by_request_key ON jobs (request_key);
      CREATE INDEX jobs_by_state ON jobs (state);
      CREATE TABLE result_pages (
        request_digest TEXT NOT NULL,
        page_no INTEGER NOT NULL,
        page_json TEXT NOT NULL,
        provider_request_ids_json TEXT,
        committed_at INTEGER NOT NULL,
        PRIMARY KEY (request_digest, page_no)
      );
      CREATE TABLE alias_rows (
        fingerprint_a TEXT NOT NULL,
        fingerprint_b TEXT NOT NULL,
        valid_from_ms INTEGER NOT NULL,
        valid_to_ms INTEGER,
        evidence_json TEXT,
        PRIMARY KEY (fingerprint_a, fingerprint_b, valid_from_ms),
        CHECK (fingerprint_a <= fingerprint_b)
      );
    `,
  },
  {
    // Result pages are keyed per job, not per request digest: after a restart a fresh job with the
    // same key and digest must not collide with the old job's pages, which stay readable until
    // the old job's retention ends. `result_pages` (keyed by request_digest) was never written,
    // so it is dropped rather than left as a trap. Progress and the resume TTL get columns.
    version: 3,
    sql: `
      DROP TABLE result_pages;
      CREATE TABLE job_pages (
        job_id TEXT NOT NULL REFERENCES jobs (job_id) ON DELETE CASCADE,
        page_no INTEGER NOT NULL,
        item_count INTEGER NOT NULL,
        page_json TEXT NOT NULL,
        committed_at_ms INTEGER NOT NULL,
        PRIMARY KEY (job_id, page_no)
      );
      ALTER TABLE jobs ADD COLUMN items_total INTEGER NOT NULL DEFAULT 0;
      ALTER TABLE jobs ADD COLUMN items_done INTEGER NOT NULL DEFAULT 0;
      ALTER TABLE jobs ADD COLUMN tokens_total INTEGER NOT NULL DEFAULT 0;
      ALTER TABLE jobs ADD COLUMN tokens_done INTEGER NOT NULL DEFAULT 0;
      ALTER TABLE jobs ADD COLUMN resume_ttl_ms INTEGER;
      CREATE INDEX jobs_by_generation_state ON jobs (module_generation, state);
    `,
  },
  {
    // Certification and performance rows (docs/internals.md §12) keyed by the machine profile hash
    // and the lane's numeric profile id (docs/internals.md §5, §8.1), the knob assignments the
    // probe measured (read at startup), and the catalog self-checks (docs/internals.md §10).
    version: 4,
    sql: `
      CREATE TABLE cert_rows (
        machine_profile_hash TEXT NOT NULL,
        numeric_profile_id TEXT NOT NULL,
        runtime_config_digest TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        model_id TEXT NOT NULL,
        lane_id TEXT NOT NULL,
        class TEXT NOT NULL CHECK (class IN ('embedding', 'rerank', 'generation')),
        status TEXT NOT NULL CHECK (status IN ('certified', 'uncertified')),
        os_build TEXT NOT NULL,
        engine_identities_json TEXT NOT NULL,
        model_digest TEXT NOT NULL,
        module_generation INTEGER NOT NULL,
        probed_at_ms INTEGER NOT NULL,
        evidence_json TEXT NOT NULL,
        PRIMARY KEY (machine_profile_hash, numeric_profile_id, runtime_config_digest)
      );
      CREATE INDEX cert_rows_by_lane ON cert_rows (lane_id);
      CREATE TABLE perf_rows (
        machine_profile_hash TEXT NOT NULL,
        numeric_profile_id TEXT NOT NULL,
        knob TEXT NOT NULL,
        batch_rows INTEGER NOT NULL,
        tokens_per_second REAL NOT NULL,
        start_delay_p50_ms REAL NOT NULL,
        call_ms_p50 REAL NOT NULL,
        measured_at_ms INTEGER NOT NULL,
        PRIMARY KEY (machine_profile_hash, numeric_profile_id, knob, batch_rows)
      );
      CREATE TABLE knob_assignments (
        machine_profile_hash TEXT NOT NULL,
        numeric_profile_id TEXT NOT NULL,
        knob TEXT NOT NULL,
        assignment_json TEXT NOT NULL,
        assigned_at_ms INTEGER NOT NULL,
        PRIMARY KEY (machine_profile_hash, numeric_profile_id, knob)
      );
      CREATE TABLE catalog_self_checks (
        check_id TEXT PRIMARY KEY,
        catalog_id TEXT NOT NULL,
        backend TEXT NOT NULL,
        manifest_digest TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('passed', 'failed')),
        failed_input_json TEXT,
        checked_at_ms INTEGER NOT NULL,
        duration_ms INTEGER NOT NULL
      );
    `,
  },
  {
    // The canary baselines of remote lanes (docs/remote.md "Canary"; lib/models/
    // remote_canary_store.ts): the provider's answers to the canary inputs the first time a lane
    // served, so a restart compares against the same numbers.
    version: 5,
    sql: `
      CREATE TABLE remote_canaries (
        canary_key TEXT PRIMARY KEY,
        model_id TEXT NOT NULL,
        dims INTEGER NOT NULL,
        values_json TEXT NOT NULL,
        recorded_at_ms INTEGER NOT NULL
      );
    `,
  },
];

/** Highest schema version this binary knows. */
export const STORE_SCHEMA_VERSION: number = MIGRATIONS.length;

/** A row of the `models` table. */
export interface ModelRow {
  /** Model id. */
  model_id: string;
  /** Engine name, e.g. `ort`. */
  engine: string;
  /** Task: `embed`, `rerank` or `generate`. */
  task: string;
  /** Fingerprint of the loaded profile (64 hex). */
  fingerprint: string;
  /** The model's config, as JSON text. */
  config_json: string;
  /** Last update, in unix milliseconds. */
  updated_ms: number;
}

/** Input of {@link Store.upsertModel}; `updated_ms` defaults to the store clock. */
export type ModelRowInput = Omit<ModelRow, "updated_ms"> & { updated_ms?: number };

/** Options of {@link Store.open}. */
export interface StoreOpenOptions {
  /**
   * Wall clock in unix milliseconds (migration timestamps, `updated_ms` defaults).
   *
   * @default {Date.now}
   */
  clock?: () => number;
}

/**
 * The Synapse store: one SQLite database in WAL mode.
 *
 * Every method throws {@link SynapseError} `store_failure` when SQLite fails (details `reason`
 * `storage_full` or `io_error` when the disk is at fault), `internal_error` `{reason:
 * "store_corrupt"}` when the file is corrupt, and `disposed` after {@link Store.dispose}.
 *
 * @example Open, record a model, close
 * ```ts ignore
 * using store = Store.open("/tmp/synapse/store.db");
 * store.upsertModel({ model_id: "m", engine: "ort", task: "embed", fingerprint: "…", config_json: "{}" });
 * console.log(store.moduleGeneration, store.listModels());
 * ```
 */
export class Store {
  #db: DatabaseSync;
  #path: string;
  #clock: () => number;
  #moduleGeneration: number;
  #disposed = false;

  private constructor(
    db: DatabaseSync,
    path: string,
    moduleGeneration: number,
    clock: () => number,
  ) {
    this.#db = db;
    this.#path = path;
    this.#moduleGeneration = moduleGeneration;
    this.#clock = clock;
  }

  /**
   * Opens (creating when needed) the store at `path`, migrates it and starts a new module
   * generation.
   *
   * @param path Database file path (`<data_home>/cortexkit/synapse/store.db` in production), or
   * `":memory:"` for a private in-memory store (no directory, no chmod, journal mode `memory`).
   * @param options Clock.
   * @returns The open store; `moduleGeneration` is 1 on first boot and +1 on each later open.
   * @throws {SynapseError} `store_failure` when the directory, the database, a pragma, a migration
   * or the chmod fails, or when the stored schema is newer than this binary knows
   * (details `{stored, known}`); `store_failure` `{reason: "storage_full"}` when the disk is full;
   * `internal_error` `{reason: "store_empty" | "store_corrupt", path}` when the file is 0 bytes or
   * fails `quick_check`.
   */
  static open(path: string, options: StoreOpenOptions = {}): Store {
    const clock = options.clock ?? Date.now;
    const memory = path === ":memory:";
    if (!memory) {
      try {
        Deno.mkdirSync(dirname(path), { recursive: true });
      } catch (err) {
        throw storeFailure(`Cannot open store ${path}: cannot create its directory`, err, path);
      }
    }
    if (!memory) refuseEmptyFile(path);
    const created = !memory && sizeOf(path) === undefined;
    let db: DatabaseSync;
    try {
      db = new DatabaseSync(path);
    } catch (err) {
      throw storeFailure(`Cannot open store ${path}`, err, path);
    }
    try {
      db.exec("PRAGMA busy_timeout = 5000");
      const mode = db.prepare("PRAGMA journal_mode = WAL").get()?.journal_mode;
      if (mode !== (memory ? "memory" : "wal")) {
        throw new SynapseError(
          "store_failure",
          `Cannot open store ${path}: journal mode is '${String(mode)}', expected 'wal'`,
          { details: { path } },
        );
      }
      db.exec("PRAGMA foreign_keys = ON");
      if (!memory) checkIntegrity(db, path);
      migrate(db, path, clock);
      const generation = bumpModuleGeneration(db);
      if (!memory) restrictPermissions(path);
      return new Store(db, path, generation, clock);
    } catch (err) {
      try {
        db.close();
      } catch { /* already failing; keep the first error */ }
      // A store this open created and could not write (a full disk) is not left behind as a
      // 0-byte file that the next boot would have to refuse as a lost store.
      if (created && sizeOf(path) === 0) removeFresh(path);
      throw storeFailure(`Cannot open store ${path}`, err, path);
    }
  }

  /** Path the store was opened at. */
  get path(): string {
    return this.#path;
  }

  /** Module generation of this boot (≥ 1); readable after dispose. */
  get moduleGeneration(): number {
    return this.#moduleGeneration;
  }

  /**
   * Current table epoch (alias-table version), read from `module_meta`.
   *
   * @throws {SynapseError} `disposed` or `store_failure`.
   */
  get tableEpoch(): number {
    this.#ensureNotDisposed();
    return this.#wrap("read table_epoch", () => {
      const row = this.#db.prepare("SELECT table_epoch FROM module_meta WHERE id = 0").get();
      return Number(row?.table_epoch ?? 0);
    });
  }

  /** True once {@link Store.dispose} has run. */
  get disposed(): boolean {
    return this.#disposed;
  }

  /**
   * The underlying connection, for the store-backed modules (jobs, pages, aliases).
   *
   * @throws {SynapseError} `disposed`.
   */
  get database(): DatabaseSync {
    this.#ensureNotDisposed();
    return this.#db;
  }

  /**
   * Runs `fn` inside `BEGIN IMMEDIATE … COMMIT`, rolling back when it throws. Not reentrant.
   *
   * @typeParam T Result of `fn`.
   * @param fn Work to run with the connection; it must be synchronous.
   * @returns What `fn` returns.
   * @throws {SynapseError} `disposed`; a {@link SynapseError} thrown by `fn` passes through
   * unchanged; anything else (SQLite errors included) becomes `store_failure` with it as `cause`.
   */
  transaction<T>(fn: (db: DatabaseSync) => T): T {
    this.#ensureNotDisposed();
    return this.#wrap("run a transaction", () => inTransaction(this.#db, () => fn(this.#db)));
  }

  /**
   * Inserts or replaces the `models` row of `row.model_id`.
   *
   * @param row The row; `updated_ms` defaults to the clock (unix ms).
   * @throws {SynapseError} `disposed` or `store_failure`.
   */
  upsertModel(row: ModelRowInput): void {
    this.#ensureNotDisposed();
    this.#wrap(`upsert model '${row.model_id}'`, () => {
      this.#db.prepare(
        `INSERT INTO models (model_id, engine, task, fingerprint, config_json, updated_ms)
         VALUES (?, ?, ?, ?, ?, ?)
         ON CONFLICT (model_id) DO UPDATE SET
           engine = excluded.engine,
           task = excluded.task,
           fingerprint = excluded.fingerprint,
           config_json = excluded.config_json,
           updated_ms = excluded.updated_ms`,
      ).run(
        row.model_id,
        row.engine,
        row.task,
        row.fingerprint,
        row.config_json,
        row.updated_ms ?? this.#clock(),
      );
    });
  }

  /**
   * Deletes the `models` row of a model (no-op when absent).
   *
   * @throws {SynapseError} `disposed` or `store_failure`.
   */
  deleteModel(modelId: string): void {
    this.#ensureNotDisposed();
    this.#wrap(`delete model '${modelId}'`, () => {
      this.#db.prepare("DELETE FROM models WHERE model_id = ?").run(modelId);
    });
  }

  /**
   * Lists the `models` rows, ordered by `model_id`.
   *
   * @returns The rows.
   * @throws {SynapseError} `disposed` or `store_failure`.
   */
  listModels(): ModelRow[] {
    this.#ensureNotDisposed();
    return this.#wrap("list models", () =>
      this.#db.prepare(
        "SELECT model_id, engine, task, fingerprint, config_json, updated_ms FROM models ORDER BY model_id",
      ).all().map((r) => ({
        model_id: String(r.model_id),
        engine: String(r.engine),
        task: String(r.task),
        fingerprint: String(r.fingerprint),
        config_json: String(r.config_json),
        updated_ms: Number(r.updated_ms),
      })));
  }

  /** Closes the database. Idempotent. */
  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    try {
      this.#db.close();
    } catch { /* closing twice or with a broken handle changes nothing for the caller */ }
  }

  /** Same as {@link Store.dispose}, for `using`. */
  [Symbol.dispose](): void {
    this.dispose();
  }

  #ensureNotDisposed(): void {
    if (this.#disposed) {
      throw new SynapseError("disposed", `Cannot use store ${this.#path}: it is disposed`);
    }
  }

  #wrap<T>(action: string, fn: () => T): T {
    try {
      return fn();
    } catch (err) {
      throw storeFailure(`Cannot ${action} in store ${this.#path}`, err, this.#path);
    }
  }
}

function migrate(db: DatabaseSync, path: string, clock: () => number): void {
  db.exec(
    `CREATE TABLE IF NOT EXISTS cortexkit_schema_version (
      namespace TEXT,
      version INTEGER,
      applied_at_unix INTEGER,
      PRIMARY KEY (namespace, version)
    )`,
  );
  const stored = storedVersion(db);
  if (stored > STORE_SCHEMA_VERSION) {
    throw new SynapseError(
      "store_failure",
      `Cannot open store ${path}: schema ahead of binary (stored version ${stored}, this binary knows ${STORE_SCHEMA_VERSION})`,
      { details: { path, stored, known: STORE_SCHEMA_VERSION } },
    );
  }
  const isApplied = db.prepare(
    "SELECT 1 AS applied FROM cortexkit_schema_version WHERE namespace = ? AND version = ?",
  );
  const record = db.prepare(
    "INSERT INTO cortexkit_schema_version (namespace, version, applied_at_unix) VALUES (?, ?, ?)",
  );
  for (const migration of MIGRATIONS) {
    inTransaction(db, () => {
      // Checked inside the write lock: a peer may have applied it since we looked.
      if (isApplied.get(STORE_NAMESPACE, migration.version) !== undefined) return;
      db.exec(migration.sql);
      record.run(STORE_NAMESPACE, migration.version, Math.floor(clock() / 1000));
    });
  }
}

function storedVersion(db: DatabaseSync): number {
  const row = db.prepare(
    "SELECT MAX(version) AS version FROM cortexkit_schema_version WHERE namespace = ?",
  ).get(STORE_NAMESPACE);
  return Number(row?.version ?? 0);
}

function bumpModuleGeneration(db: DatabaseSync): number {
  return inTransaction(db, () => {
    db.exec(
      `INSERT INTO module_meta (id, module_generation, table_epoch) VALUES (0, 1, 0)
       ON CONFLICT (id) DO UPDATE SET module_generation = module_generation + 1`,
    );
    const row = db.prepare("SELECT module_generation FROM module_meta WHERE id = 0").get();
    return Number(row?.module_generation);
  });
}

function inTransaction<T>(db: DatabaseSync, fn: () => T): T {
  db.exec("BEGIN IMMEDIATE");
  try {
    const result = fn();
    db.exec("COMMIT");
    return result;
  } catch (err) {
    try {
      db.exec("ROLLBACK");
    } catch { /* the transaction may already be gone; the original error matters */ }
    throw err;
  }
}

/** chmod 0600 the database and its `-wal`/`-shm` companions when they are regular files. */
function restrictPermissions(path: string): void {
  if (Deno.build.os === "windows") return;
  for (const file of [path, `${path}-wal`, `${path}-shm`]) {
    let info: Deno.FileInfo;
    try {
      info = Deno.lstatSync(file);
    } catch (err) {
      if (err instanceof Deno.errors.NotFound) continue;
      throw err;
    }
    if (info.isFile) Deno.chmodSync(file, 0o600);
  }
}

/**
 * Refuses a store file of 0 bytes with no write-ahead log to recover from: the store that was
 * there (its jobs, models and module generation) was truncated, and opening it would silently
 * start an empty one in its place.
 */
function refuseEmptyFile(path: string): void {
  const size = sizeOf(path);
  if (size !== 0 || (sizeOf(`${path}-wal`) ?? 0) > 0) return;
  throw new SynapseError(
    "internal_error",
    `Cannot open store ${path}: the file is empty (0 bytes), so the store it held is lost; ${
      corruptStoreAdvice(path)
    }`,
    { details: { path, reason: "store_empty" } },
  );
}

function removeFresh(path: string): void {
  for (const file of [path, `${path}-wal`, `${path}-shm`]) {
    try {
      Deno.removeSync(file);
    } catch { /* absent, or already failing: the open's error is what matters */ }
  }
}

function sizeOf(path: string): number | undefined {
  try {
    return Deno.statSync(path).size;
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return undefined;
    throw err;
  }
}

/**
 * `PRAGMA quick_check` (b-tree pages, record formats, NOT NULL/CHECK; O(file size), no index
 * cross-check): a store with a damaged page is refused at boot rather than booting as `ok` and
 * failing the rows that live on it later.
 */
function checkIntegrity(db: DatabaseSync, path: string): void {
  const rows = db.prepare("PRAGMA quick_check(8)").all().map((r) => String(r.quick_check));
  if (rows.length === 1 && rows[0] === "ok") return;
  throw new SynapseError(
    "internal_error",
    `Cannot open store ${path}: the store file is corrupt (quick_check: ${
      rows.join("; ").slice(0, 400)
    }); ${corruptStoreAdvice(path)}`,
    { details: { path, reason: "store_corrupt", quick_check: rows } },
  );
}
