/**
 * The `remote_canaries` table (store migration 5; docs/remote.md "Canary"): one baseline per
 * canary key (a remote lane's model digest, tokenizer, task, token limit and canary revision;
 * lib/models/load_remote.ts), written the first time the lane serves and read at every later
 * load, so a restart compares the provider's answers with the same recorded numbers.
 *
 * @module
 */
import type { DatabaseSync } from "node:sqlite";
import { SynapseError } from "../contract/errors.ts";
import type { CanaryBaseline } from "../engines/remote/canary.ts";
import { storeFailure } from "../store/_store_faults.ts";

/** What {@link RemoteCanaryStore} needs of the store (lib/store/store.ts `Store`). */
export interface RemoteCanaryDatabase {
  /** The open connection. @throws {SynapseError} `disposed` once the store is closed. */
  readonly database: DatabaseSync;
  /** The store file, for error messages. */
  readonly path: string;
}

/** Reads and writes `remote_canaries` rows. */
export class RemoteCanaryStore {
  #store: RemoteCanaryDatabase;

  constructor(store: RemoteCanaryDatabase) {
    this.#store = store;
  }

  /**
   * The baseline of a key.
   *
   * @param key `sha256:<hex>` of the lane's canary identity.
   * @returns The baseline, or undefined when none was recorded.
   * @throws {SynapseError} `store_failure`; `internal_error {reason: "store_corrupt"}` for an
   *   unreadable row; `disposed`.
   */
  get(key: string): CanaryBaseline | undefined {
    return this.#wrap(`read remote canary ${key}`, (db) => {
      const r = db.prepare(
        `SELECT dims, values_json, recorded_at_ms FROM remote_canaries WHERE canary_key = ?`,
      ).get(key) as { dims: number; values_json: string; recorded_at_ms: number } | undefined;
      if (r === undefined) return undefined;
      let values: unknown;
      try {
        values = JSON.parse(r.values_json);
      } catch { /* below */ }
      if (!Array.isArray(values) || values.some((v) => typeof v !== "number")) {
        throw new SynapseError(
          "internal_error",
          `Cannot read the remote canary baseline ${key}: its values are not a list of numbers`,
          { details: { reason: "store_corrupt" } },
        );
      }
      return { dims: r.dims, values: values as number[], recordedAtMs: r.recorded_at_ms };
    });
  }

  /**
   * Records a baseline; a key already recorded keeps its first baseline (two loads racing both
   * compare against the one written first).
   *
   * @throws {SynapseError} `store_failure`; `disposed`.
   */
  put(key: string, modelId: string, baseline: CanaryBaseline): void {
    this.#wrap(`write remote canary ${key}`, (db) => {
      db.prepare(
        `INSERT OR IGNORE INTO remote_canaries (canary_key, model_id, dims, values_json,
           recorded_at_ms) VALUES (?, ?, ?, ?, ?)`,
      ).run(key, modelId, baseline.dims, JSON.stringify(baseline.values), baseline.recordedAtMs);
    });
  }

  #wrap<T>(action: string, fn: (db: DatabaseSync) => T): T {
    try {
      return fn(this.#store.database);
    } catch (err) {
      if (err instanceof SynapseError) throw err;
      throw storeFailure(`Cannot ${action} in store ${this.#store.path}`, err, this.#store.path);
    }
  }
}
