/**
 * A Lane (docs/internals.md §11): one model's engine plus the scheduler, queue class,
 * micro-batch policy, admission and deadline/permit signals its work runs under. Operations ask a
 * ready model for its lane and call {@link Lane.admit} then {@link Lane.run}; they never touch a
 * scheduler, a runner or a worker.
 *
 * The sequence every request follows here, in one place (STYLE 11, docs/internals.md §6):
 * validate (the op) → {@link Lane.admit} (byte budget, predicted start delay, deadline: start now
 * or a typed refusal) → tokenize (the op, after admission) → {@link Lane.run}: the request signal
 * (caller + deadline + `max_queue_ms` until started) → the scheduler's queue → micro-batches on
 * the engine, each call carrying the signal, so a cancelled request stops at the next
 * micro-batch or, for a generation, within one token (the engine sends CANCEL).
 *
 * @module
 */
import { SynapseError } from "../contract/errors.ts";
import type { Admission, AdmissionPermit } from "../sched/admission.ts";
import type { LaneScheduler, LaneStats } from "../sched/lane_scheduler.ts";
import type { WorkClass } from "../sched/pick_next.ts";
import { planMicroBatches } from "../sched/micro_batch.ts";
import { runPipelined } from "../sched/pipeline.ts";
import { requestSignal } from "../sched/request_signal.ts";
import { noteLane } from "../log/call_scope.ts";
import { markStage } from "../log/stage_marks.ts";
import type {
  Engine,
  EngineBatchOutput,
  EngineRow,
  GenerateOutput,
  GenerateRequest,
} from "../engines/engine.ts";

/** Work for a lane. */
export type LaneWork =
  | { kind: "embed"; rows: readonly EngineRow[] }
  | { kind: "score"; rows: readonly EngineRow[] }
  | { kind: "generate"; request: GenerateRequest };

/** What one row of an embed or score run gave. */
export type RowOutput =
  /** The row's values: a view of `dims` floats (a vector, or one raw score). */
  | { kind: "ok"; values: Float32Array }
  /** The engine produced NaN or ±Infinity for the row (field report F6). */
  | { kind: "non_finite" }
  /** The engine could not take this row; the rest of the work was served. */
  | { kind: "error"; error: SynapseError };

/** Timing every lane answer carries (STYLE 11: `queue_time_ms`, `inference_time_ms`). */
export interface LaneTiming {
  /** ms from admission (or submit, without a permit) to the start on the engine. */
  queueTimeMs: number;
  /** ms of engine work. */
  inferenceMs: number;
}

/** Result of an embed or score run: one output per row, in row order. */
export interface LaneBatchResult extends LaneTiming {
  rows: RowOutput[];
  /** Remote lanes: the provider request ids of the engine calls, in call order. */
  providerRequestIds?: string[];
}

/** Result of a generate run. */
export interface LaneGenerateResult extends LaneTiming {
  output: GenerateOutput;
}

/** Result type of {@link Lane.run} for a work kind. */
export type LaneResult<W extends LaneWork> = W extends { kind: "generate" } ? LaneGenerateResult
  : LaneBatchResult;

/** What {@link Lane.admit} checks (docs/internals.md §6). */
export interface LaneAdmitRequest {
  /** UTF-8 bytes of the request's texts. */
  bytes: number;
  /** Relative deadline, ms. */
  deadlineMs: number;
  /** Longest acceptable wait before the work starts, ms. */
  maxQueueMs: number;
}

/** An admitted request: hold it (`using`) until the answer is built. */
export interface LanePermit extends Disposable {
  /** ms since the epoch when admitted. */
  readonly admittedAtMs: number;
  /** Absolute deadline, ms since the epoch. */
  readonly deadlineAtMs: number;
  /** The request's `max_queue_ms`. */
  readonly maxQueueMs: number;
  release(): void;
}

/** Options of {@link Lane.run}. */
export interface LaneRunOptions {
  /**
   * The request's admission: its deadline and `max_queue_ms` bound the run. Without one (a
   * durable job's quantum, admitted once for the whole job) only `signal` stops the work.
   */
  permit?: LanePermit | undefined;
  /** The caller's signal (an HTTP client disconnect, a bus Cancel, a job's cancellation). */
  signal?: AbortSignal | undefined;
  /** Label for logs. */
  label?: string | undefined;
  /**
   * Generate work only: receives the generated ids as the engine streams them
   * (`EngineCallOptions.onTokens`), before the run resolves.
   */
  onTokens?: ((ids: number[]) => void) | undefined;
  /**
   * Generate work only: aborting it ends the generation early (the engine's CANCEL: the worker
   * stops within a token) and the run resolves with what was generated so far
   * (`finishReason: "cancelled"`). Unlike `signal` it is not a failure: a stop string matched.
   */
  stop?: AbortSignal | undefined;
}

/** Options of {@link Lane}. */
export interface LaneOptions {
  /** Lane name in status rows, e.g. `ort-interactive`, `llama-<model>`. */
  name: string;
  engine: Engine;
  /** The scheduler of the engine's runtime (shared by lanes on the same thread or worker). */
  scheduler: LaneScheduler;
  /** Queue class of this lane's work. */
  cls: WorkClass;
  /** The module's admission (byte budget, refusal counters). */
  admission: Admission;
  /** Asked before each engine call: true runs it so it shares the cores well. @default never */
  quiet?: (() => boolean) | undefined;
  /** Engine calls in flight per request (keeps the engine fed between calls). @default 2 */
  pipelineDepth?: number | undefined;
  /** Wall clock, ms. @default Date.now */
  now?: (() => number) | undefined;
}

/** One model's engine under one queue class. */
export class Lane {
  readonly name: string;
  readonly engine: Engine;
  readonly cls: WorkClass;
  #scheduler: LaneScheduler;
  #admission: Admission;
  #quiet: () => boolean;
  #depth: number;
  #now: () => number;
  #active = 0;
  #lastUsedMs: number | undefined;
  #maxCallRows: number | undefined;

  constructor(options: LaneOptions) {
    this.name = options.name;
    this.engine = options.engine;
    this.cls = options.cls;
    this.#scheduler = options.scheduler;
    this.#admission = options.admission;
    this.#quiet = options.quiet ?? (() => false);
    this.#depth = options.pipelineDepth ?? 2;
    this.#now = options.now ?? Date.now;
  }

  /**
   * The most rows one engine call of this lane holds, below the engine's own `maxSequences`: the
   * **shape cap** of a lane the probe found not shape-invariant (lib/probe/run_probe.ts): its
   * calls stay in the shape class that matches a row alone, so every vector it serves is the
   * row-alone vector. Undefined: the engine's limit.
   */
  get maxCallRows(): number | undefined {
    return this.#maxCallRows;
  }

  /**
   * Sets {@link maxCallRows} (the registry does, from the probe's `shape_cap`).
   *
   * @throws {RangeError} unless undefined or a positive integer.
   */
  set maxCallRows(n: number | undefined) {
    if (n !== undefined && !(Number.isInteger(n) && n >= 1)) {
      throw new RangeError(`Lane.maxCallRows must be a positive integer: received ${n}`);
    }
    this.#maxCallRows = n;
  }

  /** Per-slot throughput of this lane's class over recent runs, tokens/s (0 before any). */
  get tokensPerSecond(): number {
    return this.#scheduler.classStats(this.cls).tokensPerSecond;
  }

  /**
   * Requests of this lane (this model, this class) between {@link admit} and the permit's
   * release, or inside {@link run}: what holds the model (`model_in_use`).
   */
  get activeRequests(): number {
    return this.#active;
  }

  /** Tasks queued or running on this lane's scheduler (all classes). */
  get busy(): boolean {
    return this.#scheduler.waiters > 0 || this.#scheduler.inFlight > 0;
  }

  /** Scheduler snapshot, for status rows. */
  stats(): LaneStats {
    return this.#scheduler.stats();
  }

  /**
   * Takes one engine slot of this lane's scheduler without engine work, queued like any task of
   * the lane's class, and holds it until released — to drain a lane, or to make a test's lane
   * busy without racing a timer.
   *
   * @returns Resolves once the slot is held.
   * @throws {SynapseError} `disposed` when the scheduler is gone.
   */
  async reserve(): Promise<Disposable & { release(): void }> {
    const { promise: held, resolve: onHeld } = Promise.withResolvers<void>();
    const { promise: gate, resolve: release } = Promise.withResolvers<void>();
    void this.#scheduler.submit({
      cls: this.cls,
      tokens: 0,
      label: "reserve",
      run: () => {
        onHeld();
        return gate;
      },
    }).catch(() => {});
    await held;
    return { release: () => release(), [Symbol.dispose]: () => release() };
  }

  /**
   * Admits a request or refuses it at once (docs/internals.md §6): over the byte budget →
   * `queue_full`; predicted start delay (from this lane's scheduler) over `maxQueueMs`, or
   * predicted finish past the deadline → `deadline_exceeded`. Cheap: call it before tokenizing.
   *
   * @throws {SynapseError} `queue_full`, `deadline_exceeded` (transient, retry hint).
   */
  admit(req: LaneAdmitRequest): LanePermit {
    // The call's metrics carry the lane it was admitted on, refused or not.
    noteLane(this.name, this.cls);
    // A runtime that would refuse now (a remote provider's open breaker) refuses before queueing.
    const refusal = this.engine.admissionRefusal?.();
    if (refusal !== undefined) throw refusal;
    const permit: AdmissionPermit = this.#admission.admit({
      bytes: req.bytes,
      deadlineMs: req.deadlineMs,
      maxQueueMs: req.maxQueueMs,
      queueClass: this.cls,
      predictedDelayMs: this.#scheduler.predictedStartDelayMs(this.cls),
    });
    this.#active++;
    let held = true;
    const release = (): void => {
      permit.release();
      if (held) {
        held = false;
        this.#active--;
      }
    };
    return {
      admittedAtMs: permit.admittedAtMs,
      deadlineAtMs: permit.deadlineAtMs,
      maxQueueMs: req.maxQueueMs,
      release,
      [Symbol.dispose]: release,
    };
  }

  /**
   * Runs work on the engine under this lane's class.
   *
   * Embed and score work is cut into length-sorted micro-batches within the engine's limits and
   * pipelined; a row the engine cannot take (a single-row call refused with a permanent error)
   * becomes that row's `error` and the rest is served. A generation is answered as soon as the
   * signal aborts (the caller is not kept waiting), while the engine stops within one token and
   * the lane's slot frees then.
   *
   * @returns Per-row outputs in row order (embed, score), or the generation, with timing.
   * @throws the request signal's reason: the caller's reason, a `TimeoutError` DOMException at
   *   the deadline, or `deadline_exceeded` when not started within `max_queue_ms`.
   * @throws {SynapseError} what the engine throws for the whole work (`engine_crashed`,
   *   `probe_required` …); `disposed` when the lane's scheduler is gone.
   */
  async run<W extends LaneWork>(work: W, options: LaneRunOptions = {}): Promise<LaneResult<W>> {
    noteLane(this.name, this.cls);
    // A request admitted here already counts from admit() to its permit's release.
    const counted = options.permit === undefined;
    if (counted) this.#active++;
    try {
      return await this.#run(work, options);
    } finally {
      if (counted) this.#active--;
      this.#lastUsedMs = this.#now();
    }
  }

  /** When a {@link run} of this lane last ended, ms since the epoch; undefined before any. */
  get lastUsedMs(): number | undefined {
    return this.#lastUsedMs;
  }

  async #run<W extends LaneWork>(work: W, options: LaneRunOptions): Promise<LaneResult<W>> {
    const { permit } = options;
    using req = permit === undefined ? undefined : requestSignal({
      callerSignal: options.signal,
      deadlineMs: permit.deadlineAtMs - this.#now(),
      maxQueueMs: permit.maxQueueMs,
    });
    const signal = req?.signal ?? options.signal;
    const submittedMs = permit?.admittedAtMs ?? this.#now();
    let startedMs = submittedMs;
    const tokens = work.kind === "generate"
      ? work.request.ids.length + work.request.maxTokens
      : work.rows.reduce((a, r) => a + r.ids.length, 0);
    const task = this.#scheduler.submit<
      { inferenceMs: number; output?: GenerateOutput; rows?: RowOutput[]; ids?: string[] }
    >({
      cls: this.cls,
      tokens,
      maxQueueMs: permit?.maxQueueMs,
      signal,
      label: options.label,
      run: (grant) => {
        markStage("schedule");
        req?.started();
        startedMs = this.#now();
        return work.kind === "generate"
          ? this.#generate(work.request, grant.signal, options.onTokens, options.stop)
          : this.#batch(work.kind, work.rows, grant.signal);
      },
    });
    const out = work.kind === "generate" && signal !== undefined
      ? await untilAborted(signal, task)
      : await task;
    markStage("settle");
    const timing = { queueTimeMs: startedMs - submittedMs, inferenceMs: out.inferenceMs };
    return (work.kind === "generate" ? { ...timing, output: out.output! } : {
      ...timing,
      rows: out.rows!,
      ...(out.ids === undefined || out.ids.length === 0 ? {} : { providerRequestIds: out.ids }),
    }) as LaneResult<W>;
  }

  async #generate(
    request: GenerateRequest,
    signal: AbortSignal | undefined,
    onTokens: ((ids: number[]) => void) | undefined,
    stop: AbortSignal | undefined,
  ): Promise<{ output: GenerateOutput; inferenceMs: number }> {
    const ends = stop === undefined ? signal : signal === undefined ? stop : AbortSignal.any([
      signal,
      stop,
    ]);
    const output = await this.engine.generate(request, { signal: ends, onTokens });
    return { output, inferenceMs: output.runMs };
  }

  async #batch(
    kind: "embed" | "score",
    rows: readonly EngineRow[],
    signal: AbortSignal | undefined,
  ): Promise<{ rows: RowOutput[]; inferenceMs: number; ids?: string[] }> {
    const limits = this.engine.limits;
    const ids: string[] = [];
    const out = new Array<RowOutput>(rows.length);
    const runnable: number[] = [];
    rows.forEach((r, i) => {
      if (r.ids.length > limits.maxSequenceTokens) {
        out[i] = {
          kind: "error",
          error: new SynapseError(
            "sequence_too_long",
            `Cannot run row ${i}: ${r.ids.length} tokens exceed the engine's ${limits.maxSequenceTokens}`,
            { details: { tokens: r.ids.length, max_tokens: limits.maxSequenceTokens } },
          ),
        };
      } else runnable.push(i);
    });
    const plan = planMicroBatches(runnable.map((i) => rows[i]!.ids.length), {
      maxBatchTokens: limits.maxMicroBatchTokens,
      maxSequences: Math.min(limits.maxSequences, this.#maxCallRows ?? Infinity),
    }).map((batch) => batch.map((k) => runnable[k]!));
    let inferenceMs = 0;
    markStage("plan");
    await runPipelined(plan, async (idx) => {
      const callRows = idx.map((i) => rows[i]!);
      const callOpts = { quiet: this.#quiet(), signal };
      let res: EngineBatchOutput;
      try {
        res = kind === "embed"
          ? await this.engine.embed(callRows, callOpts)
          : await this.engine.score(callRows, callOpts);
      } catch (err) {
        // One row the engine refuses for good is that row's error; a crash, a transient failure
        // or an abort ends the whole work.
        if (
          idx.length === 1 && err instanceof SynapseError && err.errorClass === "permanent" &&
          !WHOLE_WORK_CODES.has(err.code)
        ) {
          out[idx[0]!] = { kind: "error", error: err };
          return;
        }
        throw err;
      }
      inferenceMs += res.runMs;
      if (res.providerRequestIds !== undefined) ids.push(...res.providerRequestIds);
      idx.forEach((i, r) => {
        const rowError = res.rowErrors?.[r];
        out[i] = rowError !== undefined
          ? { kind: "error", error: rowError }
          : res.nonFinite[r] === 1
          ? { kind: "non_finite" }
          : { kind: "ok", values: res.data.subarray(r * res.dims, (r + 1) * res.dims) };
      });
    }, { depth: this.#depth, signal });
    markStage("collect");
    return { rows: out, inferenceMs, ids };
  }
}

/**
 * Permanent errors that end the whole work even from a one-row call: they say nothing of the row
 * (a quarantined or disposed engine; a remote provider refusing the credentials, changing its
 * deployment, breaking its API, or a configuration that cannot work).
 */
const WHOLE_WORK_CODES: ReadonlySet<string> = new Set([
  "probe_required",
  "disposed",
  "needs_reauth",
  "credential_config_invalid",
  "remote_deployment_changed",
  "remote_identity_drift",
  "provider_protocol_violation",
  "op_not_supported_for_remote",
]);

/** Settles with `p`, or rejects with `signal.reason` as soon as `signal` aborts. */
function untilAborted<T>(signal: AbortSignal, p: Promise<T>): Promise<T> {
  if (signal.aborted) {
    p.catch(() => {});
    return Promise.reject(signal.reason);
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => {
      p.catch(() => {});
      reject(signal.reason);
    };
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}
