/**
 * The abort signal of one admitted request: it fires when the caller goes away, when the
 * request's deadline passes, or when the request has not started within `max_queue_ms`
 * (docs/internals.md §6: a request starts within max_queue_ms or is refused — field report F8).
 * Once the request starts, only the caller and the deadline can stop it, at the next micro-batch.
 *
 * @module
 */
import { SynapseError } from "../contract/errors.ts";

/** Options of {@link requestSignal}. */
export interface RequestSignalOptions {
  /** The caller's signal (HTTP client disconnect, bus Cancel). */
  callerSignal?: AbortSignal | undefined;
  /** Milliseconds from now until the deadline. */
  deadlineMs: number;
  /** Longest wait in ms before the request must start. */
  maxQueueMs: number;
}

/** A request's signal and its lifecycle hooks. Dispose clears its timers. */
export interface RequestSignal extends Disposable {
  readonly signal: AbortSignal;
  /** Call when the request starts on the engine: the max_queue_ms timer stops. */
  started(): void;
}

/**
 * Builds the signal.
 *
 * @returns A signal aborted with the caller's reason, a `TimeoutError` DOMException at the
 *   deadline, or a `deadline_exceeded` SynapseError (retry hint 100 ms) when still queued at
 *   `maxQueueMs`.
 */
export function requestSignal(options: RequestSignalOptions): RequestSignal {
  const ctl = new AbortController();
  const onCaller = (): void => ctl.abort(options.callerSignal!.reason);
  if (options.callerSignal?.aborted) ctl.abort(options.callerSignal.reason);
  options.callerSignal?.addEventListener("abort", onCaller, { once: true });
  const deadline = setTimeout(() => {
    ctl.abort(new DOMException("The request's deadline passed", "TimeoutError"));
  }, timerMs(Math.max(1, options.deadlineMs)));
  let queue: ReturnType<typeof setTimeout> | undefined = setTimeout(() => {
    ctl.abort(
      new SynapseError(
        "deadline_exceeded",
        `Cannot start within max_queue_ms ${options.maxQueueMs}: the lane is busy`,
        {
          retryAfterMs: 100,
          details: { reason: "max_queue_ms", max_queue_ms: options.maxQueueMs },
        },
      ),
    );
  }, timerMs(Math.max(0, options.maxQueueMs)));
  const dispose = (): void => {
    clearTimeout(deadline);
    if (queue !== undefined) clearTimeout(queue);
    options.callerSignal?.removeEventListener("abort", onCaller);
  };
  return {
    signal: ctl.signal,
    started(): void {
      if (queue !== undefined) clearTimeout(queue);
      queue = undefined;
    },
    [Symbol.dispose]: dispose,
  };
}

/** Longest delay a timer keeps (2^31 − 1 ms, 24.8 days); a longer one would fire at once. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * A delay a timer honours: a `deadline_ms` or `max_queue_ms` past 24.8 days waits that long
 * (Node's timers fire after 1 ms for a delay over 2^31 − 1 and warn `TimeoutOverflowWarning`).
 */
function timerMs(ms: number): number {
  return Math.min(MAX_TIMER_MS, ms);
}
