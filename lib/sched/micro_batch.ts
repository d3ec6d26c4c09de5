/**
 * Length-sorted micro-batching under a token budget (a pure policy, STYLE 13).
 *
 * Sequences are sorted by length so that a micro-batch pads little; a micro-batch holds at most
 * `maxSequences` rows and at most `maxBatchTokens` padded tokens (rows × longest row). A
 * sequence longer than the budget on its own still gets a micro-batch of one.
 *
 * @module
 */

/** Limits of one micro-batch. */
export interface MicroBatchLimits {
  /** Padded tokens (rows × longest row) one engine call may hold. */
  maxBatchTokens: number;
  /** Rows one engine call may hold. */
  maxSequences: number;
}

/**
 * Plans micro-batches.
 *
 * @param lengths Token count of each sequence, by input index.
 * @param limits The budget.
 * @returns Lists of input indices; each list is sorted by ascending length, lists in ascending
 *   order of their longest row. Every index appears exactly once.
 * @throws {RangeError} when a limit is not a positive integer.
 */
export function planMicroBatches(
  lengths: ArrayLike<number>,
  limits: MicroBatchLimits,
): number[][] {
  const { maxBatchTokens, maxSequences } = limits;
  if (!Number.isInteger(maxBatchTokens) || maxBatchTokens < 1) {
    throw new RangeError(
      `Cannot plan micro-batches: maxBatchTokens must be a positive integer: received ${maxBatchTokens}`,
    );
  }
  if (!Number.isInteger(maxSequences) || maxSequences < 1) {
    throw new RangeError(
      `Cannot plan micro-batches: maxSequences must be a positive integer: received ${maxSequences}`,
    );
  }
  const order = Array.from({ length: lengths.length }, (_, i) => i);
  // Stable: equal lengths keep input order.
  order.sort((a, b) => (lengths[a]! - lengths[b]!) || (a - b));
  const batches: number[][] = [];
  let current: number[] = [];
  for (const idx of order) {
    const len = lengths[idx]!;
    // Sorted ascending, so `len` is the longest row if idx joins.
    if (
      current.length > 0 &&
      (current.length + 1 > maxSequences || (current.length + 1) * len > maxBatchTokens)
    ) {
      batches.push(current);
      current = [];
    }
    current.push(idx);
  }
  if (current.length > 0) batches.push(current);
  return batches;
}
