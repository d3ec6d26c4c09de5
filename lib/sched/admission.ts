/**
 * Admission (docs/internals.md §6): a request starts now or is refused at once with a typed error
 * and a retry hint — never an unbounded wait. Checks, in order:
 *
 * 1. queued + in-flight + request bytes > `byte_budget` → `queue_full`;
 * 2. predicted start delay > `max_queue_ms` → `deadline_exceeded`;
 * 3. now + delay + estimated execution > deadline → `deadline_exceeded`.
 *
 * The predicted delay is 25 ms when no execution permit is free, else 0 (docs/internals.md §6).
 * `embed.query`, inline `embed.batch`, `/v1/embeddings` with a string or a list, and
 * `rerank.score` all pass through {@link Admission.admit} (field report F5).
 *
 * @module
 */
import { SynapseError } from "../contract/errors.ts";

/** Limits from config `inline`. */
export interface AdmissionLimits {
  /** Bytes of request text queued and in flight. @default 67108864 */
  byteBudget: number;
  /** @default 5000 */
  maxQueueMs: number;
  /** @default 25 */
  estimatedExecutionMs: number;
  /** Execution permits. @default 2 */
  maxConcurrentWorkers: number;
}

/** Queue class (docs/internals.md §6). */
export type QueueClass = "interactive" | "bulk" | "control" | "decode";

/** Per-request admission inputs. */
export interface AdmitRequest {
  /** UTF-8 bytes of the request's texts. */
  bytes: number;
  /** Relative deadline in ms. */
  deadlineMs: number;
  /** Longest acceptable queue wait in ms. */
  maxQueueMs: number;
  queueClass: QueueClass;
  /**
   * Predicted start delay in ms from the lane's scheduler. When absent, docs/internals.md §6's
   * rule: 25 ms when no execution permit is free, else 0.
   */
  predictedDelayMs?: number;
}

/** Held while a request runs; releasing returns its bytes and permit. */
export interface AdmissionPermit extends Disposable {
  /** Milliseconds since the epoch when admitted. */
  readonly admittedAtMs: number;
  /** Absolute deadline (ms since the epoch). */
  readonly deadlineAtMs: number;
  release(): void;
}

/** Refusal counters by reason, for `admission.status`. */
export interface RefusalStats {
  count: number;
  last_at_ms: number;
}

/** Options of {@link Admission}. */
export interface AdmissionOptions {
  /** Wall clock in ms. @default Date.now */
  now?: () => number;
}

/** The retry hint of an admission refusal (`queue_full`, `deadline_exceeded`), ms. */
export const ADMISSION_RETRY_AFTER_MS = 100;

/** Byte-budget and deadline admission with in-flight accounting. */
export class Admission {
  readonly limits: AdmissionLimits;
  #bytes = 0;
  #inFlight: Record<QueueClass, number> = {
    interactive: 0,
    bulk: 0,
    control: 0,
    decode: 0,
  };
  #refusals = new Map<string, RefusalStats>();
  #now: () => number;

  constructor(limits: AdmissionLimits, options: AdmissionOptions = {}) {
    this.limits = limits;
    this.#now = options.now ?? Date.now;
  }

  /** Bytes admitted and not yet released. */
  get bytesInFlight(): number {
    return this.#bytes;
  }

  /** Requests running, per class. */
  get inFlight(): Readonly<Record<QueueClass, number>> {
    return this.#inFlight;
  }

  /** Refusals by code. */
  get refusals(): ReadonlyMap<string, RefusalStats> {
    return this.#refusals;
  }

  /**
   * Admits a request or refuses it at once.
   *
   * @throws {SynapseError} `queue_full` (retry 100 ms) over the byte budget; `deadline_exceeded`
   *   when the predicted start or finish misses `max_queue_ms` or the deadline.
   */
  admit(req: AdmitRequest): AdmissionPermit {
    const now = this.#now();
    const { byteBudget, estimatedExecutionMs, maxConcurrentWorkers } = this.limits;
    if (this.#bytes + req.bytes > byteBudget) {
      throw this.#refuse(
        "queue_full",
        now,
        `Cannot admit request: ${this.#bytes} bytes queued and in flight plus ${req.bytes} exceed byte_budget ${byteBudget}`,
        {
          bytes_in_flight: this.#bytes,
          request_bytes: req.bytes,
          byte_budget: byteBudget,
        },
      );
    }
    const running = this.#inFlight.interactive + this.#inFlight.bulk + this.#inFlight.control;
    const delay = req.predictedDelayMs ?? (running >= maxConcurrentWorkers ? 25 : 0);
    if (delay > req.maxQueueMs) {
      throw this.#refuse(
        "deadline_exceeded",
        now,
        `Cannot admit request: predicted start delay ${delay} ms exceeds max_queue_ms ${req.maxQueueMs}`,
        {
          predicted_delay_ms: delay,
          max_queue_ms: req.maxQueueMs,
        },
      );
    }
    if (delay + estimatedExecutionMs > req.deadlineMs) {
      throw this.#refuse(
        "deadline_exceeded",
        now,
        `Cannot admit request: predicted finish ${
          delay + estimatedExecutionMs
        } ms exceeds deadline_ms ${req.deadlineMs}`,
        {
          predicted_finish_ms: delay + estimatedExecutionMs,
          deadline_ms: req.deadlineMs,
        },
      );
    }
    this.#bytes += req.bytes;
    this.#inFlight[req.queueClass]++;
    let released = false;
    const release = (): void => {
      if (released) return;
      released = true;
      this.#bytes -= req.bytes;
      this.#inFlight[req.queueClass]--;
    };
    return {
      admittedAtMs: now,
      deadlineAtMs: now + req.deadlineMs,
      release,
      [Symbol.dispose]: release,
    };
  }

  #refuse(
    code: "queue_full" | "deadline_exceeded",
    now: number,
    message: string,
    details: Record<string, unknown>,
  ): SynapseError {
    const stats = this.#refusals.get(code) ?? { count: 0, last_at_ms: 0 };
    stats.count++;
    stats.last_at_ms = now;
    this.#refusals.set(code, stats);
    return new SynapseError(code, message, {
      details,
      // Both refusals retry after the default transient delay: what frees budget or queue
      // room is other requests finishing, which no estimate here predicts better.
      retryAfterMs: ADMISSION_RETRY_AFTER_MS,
    });
  }
}
