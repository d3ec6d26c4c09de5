/**
 * A provider's latency estimator: exponentially weighted moving averages of the per-request
 * overhead and the per-token time, fitted from each answered request's (tokens, ms). It gives
 * the remote lane's expected run time of a call (which seeds its scheduler's start-delay
 * estimate, so deadline admission and `queue_full` work as for local lanes) and the provider's
 * estimated throughput (status rows).
 *
 * The fit is an exponentially weighted least-squares line through the samples (n tokens, t ms):
 * EWMAs of n, t, n² and n·t (weight `alpha` 0.1: the last ~20 requests dominate) give
 * `perToken = cov(n, t) / var(n)` and `overhead = mean(t) − perToken·mean(n)`, both clamped at
 * 0. While the token counts seen barely vary (var(n) below 1 token²), the slope keeps its last
 * value and the overhead absorbs the rest. On exact linear samples this recovers the line.
 *
 * @module
 */

/** Weight of a new sample. */
export const ESTIMATOR_ALPHA = 0.1;

/** What the estimator knows. */
export interface LatencySnapshot {
  /** Answered requests observed. */
  samples: number;
  /** Estimated fixed cost of a request, ms. */
  overheadMs: number;
  /** Estimated cost per token, ms. */
  perTokenMs: number;
}

/** Exponentially weighted least squares of per-request overhead and per-token time. */
export class LatencyEstimator {
  #samples = 0;
  #n = 0;
  #t = 0;
  #nn = 0;
  #nt = 0;
  #overhead = 0;
  #perToken = 0;

  /**
   * Records an answered request.
   *
   * @param tokens Tokens it carried (≥ 0).
   * @param ms Its wall time, ms (≥ 0).
   */
  observe(tokens: number, ms: number): void {
    if (!(ms >= 0) || !(tokens >= 0) || !Number.isFinite(ms) || !Number.isFinite(tokens)) return;
    const a = this.#samples === 0 ? 1 : ESTIMATOR_ALPHA;
    this.#n = (1 - a) * this.#n + a * tokens;
    this.#t = (1 - a) * this.#t + a * ms;
    this.#nn = (1 - a) * this.#nn + a * tokens * tokens;
    this.#nt = (1 - a) * this.#nt + a * tokens * ms;
    this.#samples++;
    const varN = this.#nn - this.#n * this.#n;
    if (varN >= 1) this.#perToken = Math.max(0, (this.#nt - this.#n * this.#t) / varN);
    this.#overhead = Math.max(0, this.#t - this.#perToken * this.#n);
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
