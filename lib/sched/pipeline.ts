/**
 * Bounded pipelining of engine calls: at most `depth` calls in flight, so the engine thread
 * always has the next micro-batch queued (no idle gap between calls) while a cancelled request
 * stops at the next micro-batch boundary instead of leaving its whole batch queued in the
 * engine (field report F10).
 *
 * @module
 */

/** Options of {@link runPipelined}. */
export interface PipelineOptions {
  /** Calls in flight at once. @default 2 */
  depth?: number | undefined;
  /** Checked before each call starts; once aborted no further call starts. */
  signal?: AbortSignal | undefined;
}

/**
 * Runs `fn` on every element, in order of start, with at most `depth` calls in flight.
 *
 * @returns The results in element order.
 * @throws the signal's reason when it aborts (after the calls in flight settle), or the first
 *   error a call throws (no further call starts).
 */
export async function runPipelined<T, R>(
  elements: readonly T[],
  fn: (element: T, index: number) => Promise<R>,
  options: PipelineOptions = {},
): Promise<R[]> {
  const depth = Math.max(1, options.depth ?? 2);
  const signal = options.signal;
  const results = new Array<R>(elements.length);
  let next = 0;
  let failure: { error: unknown } | undefined;
  async function worker(): Promise<void> {
    while (next < elements.length && failure === undefined) {
      if (signal?.aborted) {
        failure ??= { error: signal.reason };
        return;
      }
      const i = next++;
      try {
        results[i] = await fn(elements[i]!, i);
      } catch (error) {
        failure ??= { error };
      }
    }
  }
  await Promise.all(Array.from({ length: Math.min(depth, elements.length) }, worker));
  if (failure !== undefined) throw failure.error;
  return results;
}
