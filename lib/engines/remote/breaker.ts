/**
 * A provider's circuit breaker: a dead provider becomes an immediate `provider_unavailable` with
 * `retry_after_ms` instead of a pile of timeouts (docs/remote.md "Breaker").
 *
 * States, as in the usual three-state breaker (Nygard, *Release It!*, "Circuit Breaker"):
 * - **closed**: requests go through; `failureThreshold` consecutive failures open it;
 * - **open**: requests are refused at admission until `openMs` has passed since it opened;
 * - **half_open**: one trial request goes through (others are refused); its success closes the
 *   breaker, its failure opens it again for twice the previous time, up to {@link MAX_OPEN_MS}.
 *
 * A failure is a connection error, a timeout or a 5xx (the caller decides); a provider's 4xx is
 * an answer and counts as a success for the breaker.
 *
 * @module
 */

/** Longest open period after repeated failed trials, ms. */
export const MAX_OPEN_MS = 60_000;

/** Breaker state. */
export type BreakerState = "closed" | "open" | "half_open";

/** A snapshot for status rows. */
export interface BreakerSnapshot {
  state: BreakerState;
  /** Consecutive failures counted so far. */
  consecutiveFailures: number;
  /** ms until a trial is let through (0 unless open). */
  retryAfterMs: number;
  /** Times the breaker opened since start. */
  opened: number;
}

/** One provider's breaker; the clock is injectable for tests. */
export class CircuitBreaker {
  readonly failureThreshold: number;
  readonly baseOpenMs: number;
  #now: () => number;
  #state: BreakerState = "closed";
  #failures = 0;
  #openedAt = 0;
  #openMs: number;
  #trialInFlight = false;
  #opened = 0;

  /**
   * @param failureThreshold Consecutive failures that open it (≥ 1).
   * @param openMs First open period, ms (≥ 1).
   * @param now Clock, ms. @default Date.now
   * @throws {RangeError} for a threshold or period out of range.
   */
  constructor(failureThreshold: number, openMs: number, now: () => number = Date.now) {
    if (!Number.isInteger(failureThreshold) || failureThreshold < 1) {
      throw new RangeError(
        `failureThreshold must be a positive integer: received ${failureThreshold}`,
      );
    }
    if (!(openMs >= 1)) throw new RangeError(`openMs must be ≥ 1: received ${openMs}`);
    this.failureThreshold = failureThreshold;
    this.baseOpenMs = openMs;
    this.#openMs = openMs;
    this.#now = now;
  }

  /** The state now (an open breaker whose period ended reads `half_open`). */
  get state(): BreakerState {
    if (this.#state === "open" && this.#now() - this.#openedAt >= this.#openMs) return "half_open";
    return this.#state;
  }

  /**
   * ms a caller should wait before trying again, or 0 when a request may go now. Pure: use
   * {@link tryAcquire} to actually take the half-open trial.
   */
  retryAfterMs(): number {
    const s = this.state;
    if (s === "closed") return 0;
    if (s === "open") return Math.max(1, this.#openMs - (this.#now() - this.#openedAt));
    return this.#trialInFlight ? Math.max(1, Math.min(this.#openMs, 1000)) : 0;
  }

  /**
   * Asks to send one request.
   *
   * @returns `true` when it may go (closed, or the half-open trial, now taken); `false` when the
   *   breaker refuses it ({@link retryAfterMs} says for how long).
   */
  tryAcquire(): boolean {
    const s = this.state;
    if (s === "closed") return true;
    if (s === "open" || this.#trialInFlight) return false;
    this.#state = "half_open";
    this.#trialInFlight = true;
    return true;
  }

  /** Records a request that got an answer. Closes a half-open breaker. */
  onSuccess(): void {
    this.#failures = 0;
    if (this.#state !== "closed") {
      this.#state = "closed";
      this.#openMs = this.baseOpenMs;
    }
    this.#trialInFlight = false;
  }

  /** Records a failed request (connection error, timeout, 5xx). */
  onFailure(): void {
    this.#failures++;
    if (this.#state === "half_open") {
      this.#trialInFlight = false;
      this.#open(Math.min(this.#openMs * 2, MAX_OPEN_MS));
      return;
    }
    if (this.#state === "closed" && this.#failures >= this.failureThreshold) {
      this.#open(this.baseOpenMs);
    }
  }

  /** Releases a half-open trial that ended neither way (the caller cancelled it). */
  onAbandoned(): void {
    this.#trialInFlight = false;
  }

  /** A snapshot for status rows. */
  snapshot(): BreakerSnapshot {
    return {
      state: this.state,
      consecutiveFailures: this.#failures,
      retryAfterMs: this.state === "closed" ? 0 : this.retryAfterMs(),
      opened: this.#opened,
    };
  }

  #open(ms: number): void {
    this.#state = "open";
    this.#openedAt = this.#now();
    this.#openMs = ms;
    this.#opened++;
  }
}
