/**
 * Supervision of one worker key (docs/internals.md §7 "Timeouts, crashes, quarantine"): start the
 * worker lazily, count its crashes against a budget of 2 per 60 s, restart it within the budget,
 * and quarantine the key for the host's lifetime beyond it. A quarantined key answers every call
 * with a typed permanent `probe_required` whose `details.reason` is `worker_quarantined`, and its
 * status is shown by `models.list`, `admission.status` and `/health`.
 *
 * A worker `ERR` is an answer, never a crash; a failed handshake is a crash (the spawned program
 * is not a worker we can use).
 *
 * @module
 */
import { SynapseError } from "../contract/errors.ts";
import {
  type TextPartHandler,
  WorkerConnection,
  type WorkerConnection as WorkerConnectionType,
  type WorkerReply,
} from "./host.ts";
import type { WorkerEngineIdentity, WorkerStartOptions } from "./spawn.ts";
import type { ModuleToWorkerMessage, WorkerToModuleMessage } from "./messages.ts";

/** Crash budget of a worker key (docs/internals.md §7: 2 crashes per 60 s). */
export interface CrashBudget {
  /** Crashes allowed inside the window; one more quarantines. @default 2 */
  maxCrashes: number;
  /** Window, ms. @default 60000 */
  windowMs: number;
}

/** Default crash budget (docs/internals.md §7). */
export const DEFAULT_CRASH_BUDGET: Readonly<CrashBudget> = Object.freeze({
  maxCrashes: 2,
  windowMs: 60_000,
});

/** Why a key is quarantined. */
export interface Quarantine {
  /** Always `worker_quarantined`. */
  reason: "worker_quarantined";
  /** Human-readable cause, naming the budget. */
  message: string;
  /** Wall clock ms when the key was quarantined. */
  since_ms: number;
  /** Crashes inside the window that broke the budget, oldest first. */
  crashes: { at_ms: number; reason: string }[];
}

/** State of a supervised worker, for status endpoints. */
export interface SupervisorStatus {
  state: "idle" | "starting" | "ready" | "quarantined";
  pid?: number;
  /** Workers started so far (1 after the first start). */
  generation: number;
  /** Crashes inside the current window. */
  recent_crashes: number;
  /** Crashes since the host started. */
  total_crashes: number;
  last_crash?: { at_ms: number; reason: string };
  quarantine?: Quarantine;
}

/** Options of {@link SupervisedWorker}. */
export interface SupervisedWorkerOptions {
  /** How to start (and restart) the worker. */
  start: WorkerStartOptions;
  /** Crash budget key: the canonical runtime config. */
  key: string;
  /** @default {DEFAULT_CRASH_BUDGET} */
  budget?: CrashBudget | undefined;
  /** Wall clock, ms. @default Date.now */
  now?: (() => number) | undefined;
  /** Called after each crash (already counted) with the crash error. */
  onCrash?: ((err: SynapseError, status: SupervisorStatus) => void) | undefined;
  /** Called after each worker start that succeeded (`status.generation` counts starts). */
  onStart?: ((status: SupervisorStatus) => void) | undefined;
}

/**
 * One worker key under supervision. Calls are serialized by the underlying connection (one
 * request in flight); the first call starts the worker, and a call after a crash starts a fresh
 * one (its {@link SupervisedWorker.generation} goes up, so the owner reloads its models lazily).
 */
export class SupervisedWorker {
  #opts: SupervisedWorkerOptions;
  #budget: CrashBudget;
  #now: () => number;
  #conn: WorkerConnectionType | undefined;
  #starting: Promise<WorkerConnectionType> | undefined;
  #generation = 0;
  #crashes: { at_ms: number; reason: string }[] = [];
  #totalCrashes = 0;
  #lastCrash: { at_ms: number; reason: string } | undefined;
  #quarantine: Quarantine | undefined;
  #identity: WorkerEngineIdentity | undefined;
  #closed = false;

  constructor(options: SupervisedWorkerOptions) {
    this.#opts = options;
    this.#budget = options.budget ?? DEFAULT_CRASH_BUDGET;
    this.#now = options.now ?? Date.now;
  }

  /** Worker starts so far; changes when a restarted worker must have its models reloaded. */
  get generation(): number {
    return this.#generation;
  }

  /** Set when the key is quarantined. */
  get quarantine(): Quarantine | undefined {
    return this.#quarantine;
  }

  /** Engine identity of the first accepted worker (later workers must match it). */
  get identity(): WorkerEngineIdentity | undefined {
    return this.#identity;
  }

  /** Process id of the live worker. */
  get pid(): number | undefined {
    return this.#conn?.dead === undefined ? this.#conn?.pid : undefined;
  }

  /** Status snapshot. */
  status(): SupervisorStatus {
    this.#prune();
    const live = this.#conn !== undefined && this.#conn.dead === undefined;
    return {
      state: this.#quarantine
        ? "quarantined"
        : live
        ? "ready"
        : this.#starting
        ? "starting"
        : "idle",
      ...(live ? { pid: this.#conn!.pid } : {}),
      generation: this.#generation,
      recent_crashes: this.#crashes.length,
      total_crashes: this.#totalCrashes,
      ...(this.#lastCrash ? { last_crash: { ...this.#lastCrash } } : {}),
      ...(this.#quarantine ? { quarantine: structuredClone(this.#quarantine) } : {}),
    };
  }

  /**
   * The live connection, starting a worker when there is none.
   *
   * @returns The connection and whether it was started by this call's generation.
   * @throws {SynapseError} `probe_required` when quarantined; `engine_crashed` when the start
   *   failed (counted as a crash).
   */
  async connection(): Promise<WorkerConnectionType> {
    this.#checkUsable();
    if (this.#conn !== undefined && this.#conn.dead === undefined) return this.#conn;
    this.#starting ??= this.#start().finally(() => this.#starting = undefined);
    return await this.#starting;
  }

  /**
   * Sends one request to the worker (starting it when needed).
   *
   * @param signal When it aborts while the request is queued or in flight, the worker is sent
   *   CANCEL for the request's `req_id` (see {@link cancel}); the request still gets its answer.
   *   Already aborted when the connection is ready: nothing is sent, and the call rejects with
   *   `signal.reason`.
   * @param onPart Receives the request's TEXT_PART frames (a GENERATE with `stream: true`) while
   *   it runs; see `WorkerConnection.request`.
   * @throws {SynapseError} `probe_required` when quarantined; `engine_crashed` (counted) when
   *   the worker dies or times out.
   * @throws {import("./host.ts").WorkerErrReply} when the worker answers ERR.
   */
  async call<M extends WorkerToModuleMessage>(
    msg: ModuleToWorkerMessage,
    tensor: Uint8Array | undefined,
    timeoutMs: number,
    signal?: AbortSignal,
    onPart?: TextPartHandler,
  ): Promise<WorkerReply<M>> {
    const conn = await this.connection();
    // No await between this check and the request's registration: a cancel can never fall in a
    // gap where the connection does not know the request yet.
    signal?.throwIfAborted();
    const reqId = (msg as { req_id?: number }).req_id;
    const reply = conn.request<M>(msg, tensor, timeoutMs, onPart);
    if (signal === undefined || reqId === undefined) return await reply;
    const onAbort = (): void => void conn.cancel(reqId);
    signal.addEventListener("abort", onAbort, { once: true });
    try {
      return await reply;
    } finally {
      signal.removeEventListener("abort", onAbort);
    }
  }

  /**
   * Asks the live worker to stop request `reqId` (CANCEL, see `WorkerConnection.cancel`): a
   * GENERATE then answers TEXT with `finish_reason: "cancelled"` and the tokens so far, an
   * EMBED_BATCH an ERR `cancelled`. Does nothing when no worker is live (idle, starting,
   * quarantined, closed) or the id is not queued or in flight.
   *
   * @param reqId `req_id` of a request passed to {@link call}.
   * @returns Resolves once the CANCEL is written (or ignored); never rejects.
   */
  async cancel(reqId: number): Promise<void> {
    const conn = this.#conn;
    if (conn === undefined || conn.dead !== undefined) return;
    await conn.cancel(reqId);
  }

  /** Kills the live worker (tests and operators: SIGKILL, counted as a crash). */
  killForTest(): number | undefined {
    const pid = this.pid;
    this.#conn?.kill();
    return pid;
  }

  /** Shuts the worker down (SHUTDOWN, then kill after a grace period). Idempotent. */
  async close(): Promise<void> {
    this.#closed = true;
    const c = this.#conn;
    this.#conn = undefined;
    await this.#starting?.catch(() => {});
    const late = this.#conn as WorkerConnectionType | undefined;
    if (late !== undefined && late !== c) await late.shutdown();
    if (c !== undefined) await c.shutdown();
  }

  async #start(): Promise<WorkerConnectionType> {
    this.#generation++;
    const start: WorkerStartOptions = this.#identity === undefined ? this.#opts.start : {
      ...this.#opts.start,
      expectedVersion: this.#identity.version,
      expectedBuildFlags: this.#identity.build_flags ?? {},
    };
    let conn: WorkerConnectionType;
    try {
      conn = await WorkerConnection.start(start);
    } catch (err) {
      if (err instanceof SynapseError && err.code === "engine_crashed") this.#recordCrash(err);
      throw err;
    }
    if (this.#closed) {
      await conn.shutdown();
      throw new SynapseError("disposed", "Cannot use the worker: it was closed");
    }
    this.#identity ??= conn.engine;
    conn.onDeath = (err) => this.#recordCrash(err);
    this.#conn = conn;
    try {
      this.#opts.onStart?.(this.status());
    } catch { /* observers must not break supervision */ }
    return conn;
  }

  #recordCrash(err: SynapseError): void {
    if (this.#closed) return;
    const at = this.#now();
    const reason = String((err.details as Record<string, unknown> | undefined)?.reason ?? "crash");
    this.#crashes.push({ at_ms: at, reason });
    this.#totalCrashes++;
    this.#lastCrash = { at_ms: at, reason };
    this.#prune();
    if (this.#crashes.length > this.#budget.maxCrashes && this.#quarantine === undefined) {
      this.#quarantine = {
        reason: "worker_quarantined",
        message: `${this.#crashes.length} crashes within ${this.#budget.windowMs} ms exceed the ` +
          `budget of ${this.#budget.maxCrashes}; quarantined until the service restarts`,
        since_ms: at,
        crashes: this.#crashes.map((c) => ({ ...c })),
      };
    }
    try {
      this.#opts.onCrash?.(err, this.status());
    } catch { /* observers must not break supervision */ }
  }

  #prune(): void {
    if (this.#quarantine) return;
    const from = this.#now() - this.#budget.windowMs;
    while (this.#crashes.length > 0 && this.#crashes[0]!.at_ms <= from) this.#crashes.shift();
  }

  #checkUsable(): void {
    if (this.#closed) throw new SynapseError("disposed", "Cannot use the worker: it was closed");
    const q = this.#quarantine;
    if (q !== undefined) {
      throw new SynapseError(
        "probe_required",
        `Cannot use engine worker '${this.#opts.start.workerId}': ${q.message}`,
        {
          details: {
            reason: q.reason,
            worker_id: this.#opts.start.workerId,
            since_ms: q.since_ms,
            crashes: q.crashes,
          },
        },
      );
    }
  }
}
