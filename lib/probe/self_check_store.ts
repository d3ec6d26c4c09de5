/**
 * The `catalog_self_checks` table (store migration 4, docs/internals.md §8.1 and §10): one row per
 * self-check key (`check_id`, see lib/probe/self_check.ts), written once when the check ends and
 * read at boot, so a restart on the same machine, engine and files reuses it instead of running
 * the check again.
 *
 * @module
 */
import type { DatabaseSync } from "node:sqlite";
import type { SelfCheckRow } from "./types.ts";
import { storeFailure } from "../store/_store_faults.ts";

/** What {@link SelfCheckStore} needs of the store (lib/store/store.ts `Store`). */
export interface SelfCheckDatabase {
  /** The open connection. @throws {SynapseError} `disposed` once the store is closed. */
  readonly database: DatabaseSync;
  /** The store file, for error messages. */
  readonly path: string;
}

/** Reads and writes `catalog_self_checks` rows. */
export class SelfCheckStore {
  #store: SelfCheckDatabase;

  constructor(store: SelfCheckDatabase) {
    this.#store = store;
  }

  /**
   * The row of a key.
   *
   * @param checkId `sha256:<hex>` (lib/probe/self_check.ts `selfCheckId`).
   * @returns The row, or undefined when this key was never checked.
   * @throws {SynapseError} `store_failure`, `internal_error {reason: "store_corrupt"}`, `disposed`.
   */
  get(checkId: string): SelfCheckRow | undefined {
    return this.#wrap(`read self-check ${checkId}`, (db) => {
      const r = db.prepare(
        `SELECT check_id, catalog_id, backend, manifest_digest, fingerprint, state,
                failed_input_json, checked_at_ms, duration_ms
         FROM catalog_self_checks WHERE check_id = ?`,
      ).get(checkId);
      return r === undefined ? undefined : rowOf(r);
    });
  }

  /**
   * The rows of one catalog lane, newest first (every key it was checked under).
   *
   * @throws {SynapseError} as {@link get}.
   */
  forLane(catalogId: string, backend: string): SelfCheckRow[] {
    return this.#wrap(`list self-checks of ${catalogId}-${backend}`, (db) =>
      db.prepare(
        `SELECT check_id, catalog_id, backend, manifest_digest, fingerprint, state,
                failed_input_json, checked_at_ms, duration_ms
         FROM catalog_self_checks WHERE catalog_id = ? AND backend = ?
         ORDER BY checked_at_ms DESC, check_id`,
      ).all(catalogId, backend).map(rowOf));
  }

  /**
   * Writes a row (replacing the row of the same key: a check is rerun only when its row is gone).
   *
   * @throws {SynapseError} as {@link get}.
   */
  put(row: SelfCheckRow): void {
    this.#wrap(`write self-check ${row.check_id}`, (db) => {
      db.prepare(
        `INSERT OR REPLACE INTO catalog_self_checks (check_id, catalog_id, backend,
           manifest_digest, fingerprint, state, failed_input_json, checked_at_ms, duration_ms)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      ).run(
        row.check_id,
        row.catalog_id,
        row.backend,
        row.manifest_digest,
        row.fingerprint,
        row.state,
        row.failed_input === undefined ? null : JSON.stringify(row.failed_input),
        Math.round(row.checked_at_ms),
        Math.round(row.duration_ms),
      );
    });
  }

  #wrap<T>(action: string, fn: (db: DatabaseSync) => T): T {
    let db: DatabaseSync;
    try {
      db = this.#store.database;
    } catch (err) {
      throw storeFailure(`Cannot ${action}`, err, this.#store.path);
    }
    try {
      return fn(db);
    } catch (err) {
      throw storeFailure(`Cannot ${action} in store ${this.#store.path}`, err, this.#store.path);
    }
  }
}

function rowOf(r: Record<string, unknown>): SelfCheckRow {
  const row: SelfCheckRow = {
    check_id: String(r.check_id),
    catalog_id: String(r.catalog_id),
    backend: String(r.backend),
    manifest_digest: String(r.manifest_digest),
    fingerprint: String(r.fingerprint),
    state: r.state === "passed" ? "passed" : "failed",
    checked_at_ms: Number(r.checked_at_ms),
    duration_ms: Number(r.duration_ms),
  };
  if (typeof r.failed_input_json === "string") {
    row.failed_input = JSON.parse(r.failed_input_json) as NonNullable<SelfCheckRow["failed_input"]>;
  }
  return row;
}
