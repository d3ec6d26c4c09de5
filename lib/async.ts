/**
 * Small async helpers every layer may use (the lowest layer of `tests/layering_test.ts`).
 *
 * @module
 */

/**
 * What {@link sleep} does when its signal aborts: `"reject"` rejects with `signal.reason`;
 * `"resolve"` resolves early, so a polling loop wakes at once and checks its own stop condition.
 */
export type SleepOnAbort = "reject" | "resolve";

/**
 * Waits `ms` milliseconds, or less when `signal` aborts.
 *
 * With `onAbort` `"reject"` (the default) the promise rejects with `signal.reason` when `signal`
 * is already aborted or aborts during the wait; with `"resolve"` it resolves at once instead.
 * Either way the timer is cleared and the abort listener removed, so nothing keeps the process
 * alive after the promise settles. Without a signal it is a plain timer.
 *
 * @param ms the wait in milliseconds (as `setTimeout`: negative or NaN waits 0)
 * @param signal cuts the wait short when it aborts
 * @param onAbort what an abort does: reject with `signal.reason` (default) or resolve
 * @throws {unknown} `signal.reason` (by rejection), only with `onAbort` `"reject"`
 */
export function sleep(
  ms: number,
  signal?: AbortSignal,
  onAbort: SleepOnAbort = "reject",
): Promise<void> {
  return new Promise((resolve, reject) => {
    const aborted = (): void => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", aborted);
      if (onAbort === "resolve") resolve();
      else reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", aborted);
      resolve();
    }, ms);
    if (signal === undefined) return;
    if (signal.aborted) return aborted();
    signal.addEventListener("abort", aborted, { once: true });
  });
}
