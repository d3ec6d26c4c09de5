/**
 * The scope of one call through the dispatcher: which lane and queue class served it. A door's
 * call ({@link runInCallScope}, from `Synapse.call`) opens a scope; the lane a request is admitted
 * on or runs on notes itself in it ({@link noteLane}), so the request metrics of `GET /metrics`
 * carry `lane` and `class` labels without any operation passing them along. Work started inside a
 * call that outlives it (a durable job's quanta) notes into a scope already closed: ignored.
 *
 * @module
 */
import { AsyncLocalStorage } from "node:async_hooks";

/** Where one call ran; the first lane noted wins. */
export interface CallScope {
  /** Lane name (`ort-interactive`, `ort-bulk`, `llama-<model id>`), once one was used. */
  lane?: string;
  /** Queue class of that lane (`interactive`, `bulk`, `decode`, `control`). */
  cls?: string;
  /** Set when the call has returned; later notes are ignored. */
  closed?: boolean;
}

const storage = new AsyncLocalStorage<CallScope>();

/**
 * Runs `fn` with `scope` as the current call scope (for everything it awaits and starts), then
 * closes the scope.
 *
 * @param scope The scope to fill; read it after the returned promise settles.
 * @param fn The call.
 * @returns What `fn` resolves with (its rejection as it is).
 */
export async function runInCallScope<T>(scope: CallScope, fn: () => Promise<T>): Promise<T> {
  try {
    return await storage.run(scope, fn);
  } finally {
    scope.closed = true;
  }
}

/**
 * Notes the lane serving the current call, when there is an open scope and no lane was noted
 * yet. Never throws; a no-op outside a call.
 *
 * @param lane Lane name.
 * @param cls Its queue class.
 */
export function noteLane(lane: string, cls: string): void {
  const scope = storage.getStore();
  if (scope === undefined || scope.closed || scope.lane !== undefined) return;
  scope.lane = lane;
  scope.cls = cls;
}
