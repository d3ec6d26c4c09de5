/**
 * The alias table in the store (docs/internals.md §8.1 `alias_rows`, `module_meta.table_epoch`; the
 * rules are lib/identity/aliases.ts), over the {@link Store} (migration 2 made the table, migration
 * 1 the epoch column: no new migration).
 *
 * Every change — a row declared, a row retracted, a declared row replaced by a probe-measured
 * one — bumps `module_meta.table_epoch` by one **in the same transaction** as the row it
 * writes, so a reader that sees epoch `e` sees exactly the rows of `e`. Rows are never deleted:
 * a retraction sets `valid_to_ms` of the active row, and declaring the pair again inserts a new
 * row. Asking for what is already so (declaring an active pair, retracting a pair with no active
 * row) changes nothing and does not bump the epoch.
 *
 * {@link AliasStore.checkIndex} reads the rows and the epoch in one transaction, so its answer is
 * the table of the epoch it reports, atomic against a retraction in flight. The hot path
 * ({@link AliasStore.equivalentsOf}, once per envelope) reads only the epoch (one primary-key
 * row) and keeps the rows of that epoch in memory, re-read in one transaction when the epoch
 * moved (a write of this instance or of another connection to the same file).
 *
 * Faults: SQLite failures answer {@link SynapseError} `store_failure` (details `reason:
 * "storage_full"` on a full disk, `"io_error"`), a corrupt page or an unreadable `evidence_json`
 * `internal_error` `{reason: "store_corrupt"}`, a disposed store `disposed`; nothing is written
 * when a change fails.
 *
 * @module
 */

import type { DatabaseSync, StatementSync } from "node:sqlite";
import { SynapseError } from "../contract/errors.ts";
import {
  activeRowOf,
  type AliasEquivalent,
  type AliasEvidence,
  type AliasRow,
  checkIndex,
  type CheckIndexResult,
  equivalentsOf,
  isFingerprint,
  orderPair,
} from "../identity/aliases.ts";
import type { Store } from "./store.ts";
import { storeFailure } from "./_store_faults.ts";

/** What a declare or a retract did. */
export interface AliasChange {
  /** False when the table already said so (nothing written, epoch unchanged). */
  changed: boolean;
  /** The table epoch after the call (u64; bumped by one when `changed`). */
  table_epoch: number;
}

/** {@link CheckIndexResult} with the epoch of the table it was read from. */
export interface CheckIndexAnswer extends CheckIndexResult {
  /** The table epoch the rows were read at (same transaction). */
  table_epoch: number;
}

/** Options of {@link AliasStore.retract}. */
export interface RetractOptions {
  /**
   * Retract only when the active row has this source (the probe retracts its own rows and
   * leaves an operator's declaration alone). @default any source
   */
  onlySource?: AliasEvidence["source"];
  /**
   * Why it was retracted (JSON values), kept on the retracted row as `evidence.retraction`.
   * @default none (the row's evidence is left as it was)
   */
  retraction?: Record<string, unknown>;
}

/** Options of {@link AliasStore.checkIndex}. */
export interface AliasCheckOptions {
  /** Whether a loaded model serves a fingerprint now (picks `rebuild_target`). */
  served?: (fingerprint: string) => boolean;
}

const COLUMNS = "fingerprint_a, fingerprint_b, valid_from_ms, valid_to_ms, evidence_json";

/** Reads and writes the alias table and the table epoch of a {@link Store}. */
export class AliasStore {
  #store: Store;
  #cache: { epoch: number; rows: AliasRow[] } | undefined;
  /** `SELECT table_epoch`, prepared once: read on every envelope. */
  #epochStatement: StatementSync | undefined;

  /**
   * @param store The open store (migrations 1 and 2 applied).
   */
  constructor(store: Store) {
    this.#store = store;
  }

  /**
   * The table epoch now (u64; 0 on a fresh store, +1 per change).
   *
   * @throws {SynapseError} `disposed`, `store_failure`.
   */
  tableEpoch(): number {
    if (this.#store.disposed) {
      throw new SynapseError("disposed", `Cannot use store ${this.#store.path}: it is disposed`);
    }
    try {
      this.#epochStatement ??= this.#store.database.prepare(
        "SELECT table_epoch FROM module_meta WHERE id = 0",
      );
      return Number(this.#epochStatement.get()?.table_epoch ?? 0);
    } catch (err) {
      throw storeFailure(
        `Cannot read table_epoch in store ${this.#store.path}`,
        err,
        this.#store.path,
      );
    }
  }

  /**
   * Every row, ordered by `(fingerprint_a, fingerprint_b, valid_from_ms)`.
   *
   * @returns Fresh copies of the rows of the current epoch.
   * @throws {SynapseError} `disposed`, `store_failure`, `internal_error` `{reason: "store_corrupt"}`.
   */
  rows(): AliasRow[] {
    return this.#current().rows.map(copyRow);
  }

  /**
   * The rows and the epoch, read in one transaction.
   *
   * @throws {SynapseError} `disposed`, `store_failure`, `internal_error` `{reason: "store_corrupt"}`.
   */
  snapshot(): { table_epoch: number; rows: AliasRow[] } {
    const c = this.#current();
    return { table_epoch: c.epoch, rows: c.rows.map(copyRow) };
  }

  /**
   * The fingerprints equivalent to `fp` at `nowMs` (lib/identity/aliases.ts `equivalentsOf`:
   * direct pairs only, `source: "probe"` when a probe row makes the pair).
   *
   * @param fp A fingerprint.
   * @param nowMs Unix ms.
   * @throws {SynapseError} `disposed`, `store_failure`, `internal_error` `{reason: "store_corrupt"}`.
   */
  equivalentsOf(fp: string, nowMs: number): AliasEquivalent[] {
    return equivalentsOf(this.#current().rows, fp, nowMs);
  }

  /**
   * Declares `a` and `b` equivalent from `nowMs` on. An active row of the pair already says so
   * (`changed: false`), except that a `probe` declaration replaces an active `declared` row (the
   * pair stays active; its evidence becomes the measurement). A pair retracted earlier gets a new
   * row.
   *
   * @param a One fingerprint (64 lowercase hex).
   * @param b The other; order does not matter.
   * @param evidence Why (`source` `declared` or `probe`).
   * @param nowMs Unix ms the row is active from.
   * @returns Whether a row was written, and the epoch after.
   * @throws {SynapseError} `invalid_request` (details `{field}`) for a malformed fingerprint or
   * `a === b`; `disposed`, `store_failure`.
   */
  declare(a: string, b: string, evidence: AliasEvidence, nowMs: number): AliasChange {
    const [x, y] = checkedPair(a, b);
    const json = JSON.stringify(evidence);
    return this.#change(`declare alias ${x}~${y}`, (db, rows) => {
      const active = activeRowOf(rows, x, y, nowMs);
      if (active !== undefined) {
        if (!(evidence.source === "probe" && active.evidence.source !== "probe")) return false;
        if (active.valid_from_ms === nowMs) {
          db.prepare(
            `UPDATE alias_rows SET evidence_json = ?
             WHERE fingerprint_a = ? AND fingerprint_b = ? AND valid_from_ms = ?`,
          ).run(json, x, y, nowMs);
          return true;
        }
        closeRow(db, active, nowMs);
      }
      // A row [nowMs, nowMs) retracted in the very millisecond it was made was never active:
      // it is reopened rather than colliding with the new row's key.
      db.prepare(
        `INSERT INTO alias_rows (${COLUMNS}) VALUES (?, ?, ?, NULL, ?)
         ON CONFLICT (fingerprint_a, fingerprint_b, valid_from_ms)
         DO UPDATE SET valid_to_ms = NULL, evidence_json = excluded.evidence_json`,
      ).run(x, y, nowMs, json);
      return true;
    });
  }

  /**
   * Retracts the pair at `nowMs`: sets `valid_to_ms = nowMs` on its active row (never deletes).
   * No active row (or, with `onlySource`, an active row of another source): `changed: false`.
   *
   * @param a One fingerprint (64 lowercase hex).
   * @param b The other; order does not matter.
   * @param nowMs Unix ms the pair stops being equivalent at.
   * @param options Retract only a row of one source; why.
   * @returns Whether a row was retracted, and the epoch after.
   * @throws {SynapseError} `invalid_request` (details `{field}`) for a malformed fingerprint or
   * `a === b`; `disposed`, `store_failure`.
   */
  retract(a: string, b: string, nowMs: number, options: RetractOptions = {}): AliasChange {
    const [x, y] = checkedPair(a, b);
    return this.#change(`retract alias ${x}~${y}`, (db, rows) => {
      const active = activeRowOf(rows, x, y, nowMs);
      if (active === undefined) return false;
      if (options.onlySource !== undefined && active.evidence.source !== options.onlySource) {
        return false;
      }
      closeRow(db, active, nowMs);
      if (options.retraction !== undefined) {
        db.prepare(
          `UPDATE alias_rows SET evidence_json = ?
           WHERE fingerprint_a = ? AND fingerprint_b = ? AND valid_from_ms = ?`,
        ).run(
          JSON.stringify({ ...active.evidence, retraction: options.retraction }),
          x,
          y,
          active.valid_from_ms,
        );
      }
      return true;
    });
  }

  /**
   * `aliases.check_index` (lib/identity/aliases.ts `checkIndex`) over the rows and the epoch read
   * in one transaction.
   *
   * @param indexFingerprint The fingerprint the index is kept under.
   * @param provenanceSet The fingerprints of its vectors.
   * @param nowMs Unix ms.
   * @param options Which fingerprints are served.
   * @throws {SynapseError} `disposed`, `store_failure`, `internal_error` `{reason: "store_corrupt"}`.
   */
  checkIndex(
    indexFingerprint: string,
    provenanceSet: readonly string[],
    nowMs: number,
    options: AliasCheckOptions = {},
  ): CheckIndexAnswer {
    const { epoch, rows } = this.#store.transaction((db) => readAll(db));
    this.#cache = { epoch, rows };
    return {
      ...checkIndex(rows, indexFingerprint, provenanceSet, nowMs, options),
      table_epoch: epoch,
    };
  }

  /** The rows of the current epoch, re-read (with the epoch, in one transaction) when it moved. */
  #current(): { epoch: number; rows: AliasRow[] } {
    const epoch = this.tableEpoch();
    if (this.#cache !== undefined && this.#cache.epoch === epoch) return this.#cache;
    this.#cache = this.#store.transaction((db) => readAll(db));
    return this.#cache;
  }

  #change(
    what: string,
    fn: (db: DatabaseSync, rows: AliasRow[]) => boolean,
  ): AliasChange {
    const out = this.#store.transaction((db) => {
      try {
        const before = readAll(db);
        if (!fn(db, before.rows)) return { changed: false, ...before };
        db.prepare("UPDATE module_meta SET table_epoch = table_epoch + 1 WHERE id = 0").run();
        return { changed: true, ...readAll(db) };
      } catch (err) {
        throw storeFailure(`Cannot ${what} in store ${this.#store.path}`, err, this.#store.path);
      }
    });
    this.#cache = { epoch: out.epoch, rows: out.rows };
    return { changed: out.changed, table_epoch: out.epoch };
  }
}

function checkedPair(a: string, b: string): [string, string] {
  if (!isFingerprint(a)) throw badFingerprint("fingerprint_a", a);
  if (!isFingerprint(b)) throw badFingerprint("fingerprint_b", b);
  if (a === b) {
    throw new SynapseError(
      "invalid_request",
      `Cannot alias fingerprint ${a} with itself: an alias names two different fingerprints`,
      { details: { field: "fingerprint_b" } },
    );
  }
  return orderPair(a, b);
}

function badFingerprint(field: string, value: unknown): SynapseError {
  const shown = typeof value === "string" ? `'${value.slice(0, 80)}'` : typeof value;
  return new SynapseError(
    "invalid_request",
    `Invalid ${field}: ${shown} is not a fingerprint (64 lowercase hex characters)`,
    { details: { field } },
  );
}

function closeRow(db: DatabaseSync, row: AliasRow, nowMs: number): void {
  db.prepare(
    `UPDATE alias_rows SET valid_to_ms = ?
     WHERE fingerprint_a = ? AND fingerprint_b = ? AND valid_from_ms = ?`,
  ).run(nowMs, row.fingerprint_a, row.fingerprint_b, row.valid_from_ms);
}

function readAll(db: DatabaseSync): { epoch: number; rows: AliasRow[] } {
  const meta = db.prepare("SELECT table_epoch FROM module_meta WHERE id = 0").get();
  const rows = db.prepare(
    `SELECT ${COLUMNS} FROM alias_rows ORDER BY fingerprint_a, fingerprint_b, valid_from_ms`,
  ).all().map((r): AliasRow => ({
    fingerprint_a: String(r.fingerprint_a),
    fingerprint_b: String(r.fingerprint_b),
    valid_from_ms: Number(r.valid_from_ms),
    valid_to_ms: r.valid_to_ms === null ? null : Number(r.valid_to_ms),
    evidence: parseEvidence(r.evidence_json),
  }));
  return { epoch: Number(meta?.table_epoch ?? 0), rows };
}

function parseEvidence(v: unknown): AliasEvidence {
  if (v === null || v === undefined) return { source: "declared" };
  const parsed = JSON.parse(String(v)) as unknown;
  if (
    typeof parsed !== "object" || parsed === null || Array.isArray(parsed) ||
    ((parsed as { source?: unknown }).source !== "declared" &&
      (parsed as { source?: unknown }).source !== "probe")
  ) {
    // storeFailure classes a SyntaxError as a corrupt store.
    throw new SyntaxError(
      `alias_rows.evidence_json is not alias evidence: ${String(v).slice(0, 80)}`,
    );
  }
  return parsed as AliasEvidence;
}

function copyRow(r: AliasRow): AliasRow {
  return { ...r, evidence: structuredClone(r.evidence) };
}
