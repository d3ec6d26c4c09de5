/**
 * Certification, performance and knob-assignment rows (docs/internals.md §5, §8.1 tables
 * `cert_rows`, `perf_rows`, `knob_assignments`), over the {@link Store} (migration 4).
 *
 * A certification row is keyed by (machine_profile_hash, numeric_profile_id,
 * runtime_config_digest): the same lane probed again on the same machine under the same settings
 * replaces its row. Performance rows are keyed by (machine_profile_hash, numeric_profile_id, knob,
 * batch_rows); a knob assignment by (machine_profile_hash, numeric_profile_id, knob).
 * {@link CertificationStore.putProbeResult} writes the three in one transaction, so a reader never
 * sees a certificate without the performance it was measured with.
 *
 * {@link CertificationStore.changeCount} counts the writes of this instance (one per
 * `putProbeResult`), so callers may cache what they derive from the rows and recompute only when
 * it moves (serving admission does, so the hot path pays no SQL per request).
 *
 * Faults: every SQLite failure surfaces as {@link SynapseError} `store_failure` (details
 * `reason: "storage_full"` on a full disk, `"io_error"`), a corrupt page or an unreadable stored
 * JSON column as `internal_error` `{reason: "store_corrupt"}`; a disposed store as `disposed`.
 *
 * @module
 */

import type { SQLOutputValue } from "node:sqlite";
import { SynapseError } from "../contract/errors.ts";
import type { EngineIdentity } from "../identity/numeric_profile.ts";
import type { CertClass, CertRow, KnobAssignment, PerfRow, ProbeLaneResult } from "./types.ts";
import type { Store } from "../store/store.ts";
import { storeFailure } from "../store/_store_faults.ts";

/** The facts of this machine and this module a probe result is recorded under. */
export interface ProbeFacts {
  /** Hash of the machine profile (docs/internals.md §5) the probe ran on. */
  machine_profile_hash: string;
  /** sha256 (JCS) of the lane's runtime settings outside the numeric profile (lib/probe/certification.ts). */
  runtime_config_digest: string;
  /** OS build string of the machine profile. */
  os_build: string;
  /** The engines of the lane, as in its numeric profile. */
  engine_identities: EngineIdentity[];
  /** Digest of the model's weights (its fingerprint's weights part, or the model digest). */
  model_digest: string;
  /** Module generation of the process that probed. */
  module_generation: number;
  /** Durable job the probe ran under; null when it ran outside a job. */
  probe_job_id: string | null;
  /** When the probe finished, unix ms. */
  now_ms: number;
}

/** A stored performance row: a {@link PerfRow} with its keys and measurement time. */
export interface StoredPerfRow extends PerfRow {
  machine_profile_hash: string;
  numeric_profile_id: string;
  /** Unix ms. */
  measured_at_ms: number;
}

/** A stored knob assignment: a {@link KnobAssignment} with its keys and assignment time. */
export interface StoredKnobAssignment {
  machine_profile_hash: string;
  numeric_profile_id: string;
  knob: string;
  assignment: KnobAssignment;
  /** Unix ms. */
  assigned_at_ms: number;
}

const CERT_COLUMNS = `machine_profile_hash, numeric_profile_id, runtime_config_digest, fingerprint,
  model_id, lane_id, class, status, os_build, engine_identities_json, model_digest,
  module_generation, probed_at_ms, evidence_json`;

/** Reads and writes the certification tables of a {@link Store}. */
export class CertificationStore {
  #store: Store;
  #changes = 0;

  /**
   * @param store The open store (migration 4 applied).
   */
  constructor(store: Store) {
    this.#store = store;
  }

  /**
   * Writes of this instance so far (each {@link CertificationStore.putProbeResult} adds one);
   * a cache of derived status is valid while this number stays the same.
   */
  get changeCount(): number {
    return this.#changes;
  }

  /**
   * Records a probe's result for a lane: its certification row (status `certified` iff
   * `result.passed`, replacing any row with the same keys), its performance rows and its knob
   * assignment, in one transaction.
   *
   * @param result What the probe found for the lane.
   * @param facts The machine, runtime and module facts the row is keyed and labelled by.
   * @returns The certification row written.
   * @throws {SynapseError} `disposed`, `store_failure` (nothing is written), `internal_error`
   * `{reason: "store_corrupt"}`.
   */
  putProbeResult(result: ProbeLaneResult, facts: ProbeFacts): CertRow {
    const row: CertRow = {
      machine_profile_hash: facts.machine_profile_hash,
      numeric_profile_id: result.numeric_profile_id,
      runtime_config_digest: facts.runtime_config_digest,
      fingerprint: result.fingerprint,
      model_id: result.model_id,
      lane_id: result.lane_id,
      cert_class: result.cert_class,
      status: result.passed ? "certified" : "uncertified",
      os_build: facts.os_build,
      engine_identities: facts.engine_identities,
      model_digest: facts.model_digest,
      module_generation: facts.module_generation,
      probed_at_ms: facts.now_ms,
      evidence: {
        checks: result.checks,
        checks_lacking: result.checks_lacking,
        reference_model_id: result.reference_model_id,
        query_path: result.query_path,
        ...(result.shape_classes === undefined ? {} : { shape_classes: result.shape_classes }),
        ...(result.shape_cap === undefined ? {} : { shape_cap: result.shape_cap }),
        probe_job_id: facts.probe_job_id,
        duration_ms: result.duration_ms,
      },
    };
    this.#store.transaction((db) => {
      db.prepare(
        `INSERT OR REPLACE INTO cert_rows (${CERT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      ).run(
        row.machine_profile_hash,
        row.numeric_profile_id,
        row.runtime_config_digest,
        row.fingerprint,
        row.model_id,
        row.lane_id,
        row.cert_class,
        row.status,
        row.os_build,
        JSON.stringify(row.engine_identities),
        row.model_digest,
        row.module_generation,
        row.probed_at_ms,
        JSON.stringify(row.evidence),
      );
      const perf = db.prepare(
        `INSERT OR REPLACE INTO perf_rows (machine_profile_hash, numeric_profile_id, knob, batch_rows,
           tokens_per_second, start_delay_p50_ms, call_ms_p50, measured_at_ms)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
      );
      for (const p of result.perf) {
        perf.run(
          facts.machine_profile_hash,
          result.numeric_profile_id,
          p.knob,
          p.batch_rows,
          p.tokens_per_second,
          p.start_delay_p50_ms,
          p.call_ms_p50,
          facts.now_ms,
        );
      }
      db.prepare(
        `INSERT OR REPLACE INTO knob_assignments (machine_profile_hash, numeric_profile_id, knob,
           assignment_json, assigned_at_ms) VALUES (?, ?, ?, ?, ?)`,
      ).run(
        facts.machine_profile_hash,
        result.numeric_profile_id,
        result.knob_assignment.knob,
        JSON.stringify(result.knob_assignment),
        facts.now_ms,
      );
    });
    this.#changes++;
    return row;
  }

  /**
   * The certification row with exactly these keys.
   *
   * @param machineHash Machine profile hash.
   * @param numericProfileId Numeric profile id of the lane.
   * @param runtimeConfigDigest Runtime config digest of the lane.
   * @returns The row, or undefined when there is none.
   * @throws {SynapseError} `disposed`, `store_failure`, `internal_error` `{reason: "store_corrupt"}`.
   */
  row(
    machineHash: string,
    numericProfileId: string,
    runtimeConfigDigest: string,
  ): CertRow | undefined {
    const r = this.#read("read a certification row", (db) =>
      db.prepare(
        `SELECT ${CERT_COLUMNS} FROM cert_rows
         WHERE machine_profile_hash = ? AND numeric_profile_id = ? AND runtime_config_digest = ?`,
      ).get(machineHash, numericProfileId, runtimeConfigDigest));
    return r === undefined ? undefined : this.#certRow(r);
  }

  /**
   * Every certification row of a lane (any machine profile, numeric profile or runtime config),
   * newest first.
   *
   * @param laneId Lane id (`<catalog_id>-<backend>` or the model id).
   * @returns The rows.
   * @throws {SynapseError} `disposed`, `store_failure`, `internal_error` `{reason: "store_corrupt"}`.
   */
  rowsForLane(laneId: string): CertRow[] {
    return this.#read("read a lane's certification rows", (db) =>
      db.prepare(
        `SELECT ${CERT_COLUMNS} FROM cert_rows WHERE lane_id = ? ORDER BY probed_at_ms DESC, rowid DESC`,
      ).all(laneId)).map((r) => this.#certRow(r));
  }

  /**
   * Every certification row, ordered by lane id, then newest first.
   *
   * @returns The rows.
   * @throws {SynapseError} `disposed`, `store_failure`, `internal_error` `{reason: "store_corrupt"}`.
   */
  allCertRows(): CertRow[] {
    return this.#read("list certification rows", (db) =>
      db.prepare(
        `SELECT ${CERT_COLUMNS} FROM cert_rows ORDER BY lane_id, probed_at_ms DESC, rowid DESC`,
      ).all()).map((r) => this.#certRow(r));
  }

  /**
   * Every performance row, ordered by machine profile, numeric profile, knob and batch rows.
   *
   * @returns The rows.
   * @throws {SynapseError} `disposed`, `store_failure`.
   */
  perfRows(): StoredPerfRow[] {
    return this.#read("list performance rows", (db) =>
      db.prepare(
        `SELECT machine_profile_hash, numeric_profile_id, knob, batch_rows, tokens_per_second,
           start_delay_p50_ms, call_ms_p50, measured_at_ms FROM perf_rows
         ORDER BY machine_profile_hash, numeric_profile_id, knob, batch_rows`,
      ).all()).map((r) => ({
        machine_profile_hash: String(r.machine_profile_hash),
        numeric_profile_id: String(r.numeric_profile_id),
        knob: String(r.knob),
        batch_rows: Number(r.batch_rows),
        tokens_per_second: Number(r.tokens_per_second),
        start_delay_p50_ms: Number(r.start_delay_p50_ms),
        call_ms_p50: Number(r.call_ms_p50),
        measured_at_ms: Number(r.measured_at_ms),
      }));
  }

  /**
   * The knob assignment for (machine profile, numeric profile, knob).
   *
   * @param machineHash Machine profile hash.
   * @param numericProfileId Numeric profile id of the lane.
   * @param knob Thread-policy knob, e.g. `auto`.
   * @returns The assignment, or undefined when there is none.
   * @throws {SynapseError} `disposed`, `store_failure`, `internal_error` `{reason: "store_corrupt"}`.
   */
  knobAssignment(
    machineHash: string,
    numericProfileId: string,
    knob: string,
  ): KnobAssignment | undefined {
    const r = this.#read("read a knob assignment", (db) =>
      db.prepare(
        `SELECT assignment_json FROM knob_assignments
         WHERE machine_profile_hash = ? AND numeric_profile_id = ? AND knob = ?`,
      ).get(machineHash, numericProfileId, knob));
    return r === undefined
      ? undefined
      : this.#json<KnobAssignment>(r.assignment_json, "knob_assignments.assignment_json");
  }

  /**
   * Every knob assignment, ordered by machine profile, numeric profile and knob.
   *
   * @returns The assignments.
   * @throws {SynapseError} `disposed`, `store_failure`, `internal_error` `{reason: "store_corrupt"}`.
   */
  allKnobAssignments(): StoredKnobAssignment[] {
    return this.#read("list knob assignments", (db) =>
      db.prepare(
        `SELECT machine_profile_hash, numeric_profile_id, knob, assignment_json, assigned_at_ms
         FROM knob_assignments ORDER BY machine_profile_hash, numeric_profile_id, knob`,
      ).all()).map((r) => ({
        machine_profile_hash: String(r.machine_profile_hash),
        numeric_profile_id: String(r.numeric_profile_id),
        knob: String(r.knob),
        assignment: this.#json<KnobAssignment>(
          r.assignment_json,
          "knob_assignments.assignment_json",
        ),
        assigned_at_ms: Number(r.assigned_at_ms),
      }));
  }

  #read<T>(action: string, fn: (db: Store["database"]) => T): T {
    const db = this.#store.database;
    try {
      return fn(db);
    } catch (err) {
      throw storeFailure(`Cannot ${action} in store ${this.#store.path}`, err, this.#store.path);
    }
  }

  #certRow(r: Record<string, SQLOutputValue>): CertRow {
    return {
      machine_profile_hash: String(r.machine_profile_hash),
      numeric_profile_id: String(r.numeric_profile_id),
      runtime_config_digest: String(r.runtime_config_digest),
      fingerprint: String(r.fingerprint),
      model_id: String(r.model_id),
      lane_id: String(r.lane_id),
      cert_class: String(r.class) as CertClass,
      status: String(r.status) === "certified" ? "certified" : "uncertified",
      os_build: String(r.os_build),
      engine_identities: this.#json<EngineIdentity[]>(
        r.engine_identities_json,
        "cert_rows.engine_identities_json",
      ),
      model_digest: String(r.model_digest),
      module_generation: Number(r.module_generation),
      probed_at_ms: Number(r.probed_at_ms),
      evidence: this.#json<CertRow["evidence"]>(r.evidence_json, "cert_rows.evidence_json"),
    };
  }

  #json<T>(v: SQLOutputValue | undefined, column: string): T {
    try {
      return JSON.parse(String(v)) as T;
    } catch (err) {
      throw new SynapseError(
        "internal_error",
        `Cannot read ${column} in store ${this.#store.path}: the stored JSON is unreadable`,
        { details: { path: this.#store.path, reason: "store_corrupt" }, cause: err },
      );
    }
  }
}
