/**
 * One in-flight operation per key, joined by every caller that asks for the same key while it
 * runs (two downloads of one digest share one transfer). Each caller has its own signal and
 * progress listener: a caller that aborts leaves (its promise rejects with its `signal.reason`),
 * and the operation itself is aborted only when every caller has left — the last one's promise
 * then rejects once the operation has wound down (so a cancelled download has cleaned `tmp/`
 * when its caller hears of it).
 *
 * @module
 */

/** How a caller joins. */
export interface JoinOptions<P> {
  signal?: AbortSignal | undefined;
  onProgress?: ((p: P) => void) | undefined;
}

interface Flight<T, P> {
  promise: Promise<T>;
  listeners: Set<(p: P) => void>;
  /** Callers that have not left. */
  callers: number;
  abort: AbortController;
}

/** Shared in-flight operations by key. */
export class SharedFlights<T, P> {
  #flights = new Map<string, Flight<T, P>>();

  /**
   * Joins the operation running for `key`, or starts it with `start(signal, report)`.
   *
   * @param key What makes two calls the same operation.
   * @param start Runs the operation; `signal` aborts when every caller left; `report` reaches
   *   every caller's listener (a listener that throws is ignored).
   * @param opts This caller's signal and listener.
   * @returns The operation's outcome, or this caller's `signal.reason` when it aborts first.
   */
  join(
    key: string,
    start: (signal: AbortSignal, report: (p: P) => void) => Promise<T>,
    opts: JoinOptions<P> = {},
  ): Promise<T> {
    const { signal, onProgress } = opts;
    if (signal?.aborted) return Promise.reject(signal.reason);
    let flight = this.#flights.get(key);
    if (flight === undefined) {
      const abort = new AbortController();
      const listeners = new Set<(p: P) => void>();
      const report = (p: P): void => {
        for (const l of listeners) {
          try {
            l(p);
          } catch { /* a listener's fault is its own */ }
        }
      };
      const started: Flight<T, P> = {
        promise: start(abort.signal, report),
        listeners,
        callers: 0,
        abort,
      };
      const forget = (): void => {
        if (this.#flights.get(key) === started) this.#flights.delete(key);
      };
      started.promise.then(forget, forget);
      this.#flights.set(key, started);
      flight = started;
    }
    const f = flight;
    f.callers++;
    if (onProgress !== undefined) f.listeners.add(onProgress);
    const leave = (): void => {
      if (onProgress !== undefined) f.listeners.delete(onProgress);
    };
    if (signal === undefined) return f.promise.finally(leave);
    return new Promise<T>((resolve, reject) => {
      const onAbort = (): void => {
        leave();
        if (--f.callers === 0) {
          // Nobody waits any more: stop, and let the next caller start afresh.
          if (this.#flights.get(key) === f) this.#flights.delete(key);
          f.abort.abort(signal.reason);
          f.promise.then(() => reject(signal.reason), () => reject(signal.reason));
          return;
        }
        reject(signal.reason);
      };
      signal.addEventListener("abort", onAbort, { once: true });
      f.promise.then(resolve, reject).finally(() => {
        signal.removeEventListener("abort", onAbort);
        leave();
      });
    });
  }
}
