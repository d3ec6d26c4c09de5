/**
 * Bulk quanta (docs/internals.md §6): bulk work runs in quanta of `min(remaining, quantum)` tokens
 * and is requeued at the back after each, so a running quantum delays interactive work by at most
 * one quantum's engine time. Pure helpers (STYLE 13): size a quantum from a lane's measured
 * throughput, and cut the next quantum out of a list of item lengths.
 *
 * @module
 */

/** Options of {@link quantumTokensFor}. */
export interface QuantumOptions {
  /** Engine time one quantum should cost, in ms. @default 200 */
  targetMs?: number;
  /** Smallest quantum in tokens, so per-call overhead stays small. @default 256 */
  minTokens?: number;
  /**
   * Largest quantum in tokens: the module config `bulk_quantum_tokens` (default
   * 3072, about 156 ms at 19.7k tok/s; docs/internals.md §6 "Bulk quanta").
   *
   * @default 3072
   */
  maxTokens?: number;
}

/**
 * Sizes a bulk quantum so it costs about `targetMs` of engine work on this lane.
 *
 * Before a lane has measured its throughput, use the configured `bulk_quantum_tokens` instead.
 *
 * @param tokensPerSecond The lane's recent throughput in tokens per second (≥ 0; 0 gives
 *   `minTokens`).
 * @param options Target time and bounds.
 * @returns `round(tokensPerSecond × targetMs / 1000)` clamped to `[minTokens, maxTokens]`, an
 *   integer number of tokens.
 * @throws {RangeError} when `tokensPerSecond` is negative or not finite, `targetMs` is not a
 *   positive finite number, or the bounds are not positive integers with `minTokens ≤ maxTokens`.
 *
 * @example 19.7k tok/s for 100 ms
 * ```ts
 * import assert from "node:assert/strict";
 * import { quantumTokensFor } from "./quantum.ts";
 *
 * assert.equal(quantumTokensFor(19_700, { targetMs: 100 }), 1970);
 * assert.equal(quantumTokensFor(100_000), 3072);
 * ```
 */
export function quantumTokensFor(tokensPerSecond: number, options: QuantumOptions = {}): number {
  const { targetMs = 200, minTokens = 256, maxTokens = 3072 } = options;
  if (!Number.isFinite(tokensPerSecond) || tokensPerSecond < 0) {
    throw new RangeError(
      `Cannot size quantum as tokensPerSecond must be a non-negative finite number: received ${tokensPerSecond}`,
    );
  }
  if (!Number.isFinite(targetMs) || targetMs <= 0) {
    throw new RangeError(
      `Cannot size quantum as targetMs must be a positive finite number: received ${targetMs}`,
    );
  }
  if (!Number.isInteger(minTokens) || minTokens < 1) {
    throw new RangeError(
      `Cannot size quantum as minTokens must be a positive integer: received ${minTokens}`,
    );
  }
  if (!Number.isInteger(maxTokens) || maxTokens < minTokens) {
    throw new RangeError(
      `Cannot size quantum as maxTokens must be an integer ≥ minTokens ${minTokens}: received ${maxTokens}`,
    );
  }
  const tokens = Math.round(tokensPerSecond * targetMs / 1000);
  return Math.min(maxTokens, Math.max(minTokens, tokens));
}

/**
 * Cuts the next quantum: the items from `start` whose token lengths sum to at most
 * `quantumTokens`, and always at least one item (an item longer than the quantum runs alone).
 *
 * @param lengths Token count of each item, in submission order (each ≥ 0).
 * @param start Index of the first item not yet run, `0 ≤ start ≤ lengths.length`.
 * @param quantumTokens Token budget of the quantum (a positive integer).
 * @returns `end` such that items `[start, end)` form the quantum; `end > start` unless
 *   `start === lengths.length` (nothing left), then `end === start`.
 * @throws {RangeError} when `start` is not an integer in `[0, lengths.length]` or
 *   `quantumTokens` is not a positive integer.
 *
 * @example Three quanta of at most 100 tokens
 * ```ts
 * import assert from "node:assert/strict";
 * import { takeQuantum } from "./quantum.ts";
 *
 * const lengths = [40, 50, 20, 300, 10];
 * assert.equal(takeQuantum(lengths, 0, 100), 2);
 * assert.equal(takeQuantum(lengths, 2, 100), 3);
 * assert.equal(takeQuantum(lengths, 3, 100), 4);
 * assert.equal(takeQuantum(lengths, 4, 100), 5);
 * ```
 */
export function takeQuantum(
  lengths: ArrayLike<number>,
  start: number,
  quantumTokens: number,
): number {
  if (!Number.isInteger(start) || start < 0 || start > lengths.length) {
    throw new RangeError(
      `Cannot take quantum as start must be an integer in [0, ${lengths.length}]: received ${start}`,
    );
  }
  if (!Number.isInteger(quantumTokens) || quantumTokens < 1) {
    throw new RangeError(
      `Cannot take quantum as quantumTokens must be a positive integer: received ${quantumTokens}`,
    );
  }
  if (start === lengths.length) return start;
  let end = start + 1;
  let total = lengths[start]!;
  while (end < lengths.length && total + lengths[end]! <= quantumTokens) {
    total += lengths[end]!;
    end++;
  }
  return end;
}
