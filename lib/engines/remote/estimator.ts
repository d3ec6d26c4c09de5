/**
 * A provider's latency estimator: exponentially weighted moving averages of the per-request
 * overhead and the per-token time, fitted from each answered request's (tokens, ms). It gives
 * the remote lane's expected run time of a call (which seeds its scheduler's start-delay
 * estimate, so deadline admission and `queue_full` work as for local lanes) and the provider's
 * estimated throughput (status rows).
 *
 * The fit: each sample (n tokens, t ms) updates the per-token time with the marginal cost against
 * the current overhead, `(t − overhead) / n`, and the overhead with what the per-token model
 * leaves, `t − perToken·n`, both clamped at 0, with weight `alpha` (0.2: the last ~10 requests
 * dominate). Two parameters from one stream of samples is a standard online approximation of a
 * linear fit (as latency-aware load balancers do, e.g. Finagle's peak-EWMA); exact is not needed,
 * a bias of a few ms changes nothing an admission decides.
 *
 * @module
 */

/** Weight of a new sample. */
export const ESTIMATOR_ALPHA = 0.2;

/** What the estimator knows. */
export interface LatencySnapshot {
  /** Answered requests observed. */
  samples: number;
  /** Estimated fixed cost of a request, ms. */
  overheadMs: number;
  /** Estimated cost per token, ms. */
  perTokenMs: number;
}

/** EWMA of per-request overhead and per-token time. */
export class LatencyEstimator {
  #samples = 0;
  #overhead = 0;
  #perToken = 0;

  /**
   * Records an answered request.
   *
   * @param tokens Tokens it carried (≥ 0).
   * @param ms Its wall time, ms (≥ 0).
   */
  observe(tokens: number, ms: number): void {
    if (!(ms >= 0) || !(tokens >= 0)) return;
    if (this.#samples === 0) {
      // One sample cannot split the two: call it all overhead until tokens vary.
      this.#overhead = ms;
      this.#perToken = 0;
    } else {
      const a = ESTIMATOR_ALPHA;
      if (tokens > 0) {
        const marginal = Math.max(0, (ms - this.#overhead) / tokens);
        this.#perToken = (1 - a) * this.#perToken + a * marginal;
      }
      const rest = Math.max(0, ms - this.#perToken * tokens);
      this.#overhead = (1 - a) * this.#overhead + a * rest;
    }
    this.#samples++;
  }

  /** Expected ms of a request of `tokens` tokens (undefined before any sample). */
  expectedMs(tokens: number): number | undefined {
    if (this.#samples === 0) return undefined;
    return this.#overhead + this.#perToken * Math.max(0, tokens);
  }

  /** A snapshot for status rows. */
  snapshot(): LatencySnapshot {
    return { samples: this.#samples, overheadMs: this.#overhead, perTokenMs: this.#perToken };
  }
}
