/**
 * Per-stage timing marks of one call on the hot path (bench/query_stages.ts prints them as the
 * "per-stage query breakdown" of `deno task bench:embed`). Off by default: every mark is a call
 * that reads one module variable and returns, so the serving path pays nothing measurable; a
 * benchmark installs a sink with {@link setStageSink} and reads the marks in arrival order.
 *
 * Marks are points in time on `performance.now()`'s clock; a stage's length is the time between
 * its mark and the previous one. Work done on another thread (the ORT Worker's tensor building,
 * `session.run` and pooling) is reported as {@link StageSink.span} durations measured there.
 *
 * @module
 */

/** Receives marks while installed. */
export interface StageSink {
  /**
   * A stage ended now.
   *
   * @param stage Stage name, e.g. `"tokenize"`.
   * @param atMs `performance.now()` when it ended, ms.
   */
  mark(stage: string, atMs: number): void;
  /**
   * A stage measured elsewhere (another thread) took `ms`.
   *
   * @param stage Stage name, e.g. `"worker.session_run"`.
   * @param ms Its duration, ms.
   */
  span(stage: string, ms: number): void;
}

let sink: StageSink | undefined;

/**
 * Installs (or, with `undefined`, removes) the sink that receives marks. One at a time: a
 * benchmark's, never the server's.
 */
export function setStageSink(next: StageSink | undefined): void {
  sink = next;
}

/** True while a sink is installed (skip work done only to feed it). */
export function stageMarksOn(): boolean {
  return sink !== undefined;
}

/**
 * Marks the end of `stage` now; nothing when no sink is installed.
 *
 * @param stage Stage name.
 */
export function markStage(stage: string): void {
  if (sink !== undefined) sink.mark(stage, performance.now());
}

/**
 * Reports a stage measured elsewhere; nothing when no sink is installed.
 *
 * @param stage Stage name.
 * @param ms Its duration, ms.
 */
export function spanStage(stage: string, ms: number): void {
  if (sink !== undefined) sink.span(stage, ms);
}
