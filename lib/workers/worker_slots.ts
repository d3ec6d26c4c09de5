/**
 * Worker slots: small integers naming the workers of one process (`llama-<slot>@<pid>`), taken
 * lowest free first and given back when the worker's engine is disposed, so a service that loads
 * its 100th model uses the same few slots (and socket paths) as its first. The `ck-synapse`
 * launcher grants the sockets of slots 0–15 by exact path, since Deno names unix-socket
 * permissions exactly; a slot is reused only once its engine is disposed (its worker closed, its
 * socket unlinked).
 *
 * @module
 */

/** A taken slot; dispose gives it back (idempotent). */
export interface WorkerSlot extends Disposable {
  /** The slot number (≥ 0). */
  readonly slot: number;
  /** Gives the slot back; idempotent. */
  release(): void;
}

/**
 * A set of slots, lowest free first.
 *
 * @example
 * ```ts
 * import assert from "node:assert";
 * const slots = new WorkerSlots();
 * const a = slots.take(), b = slots.take();
 * a.release();
 * assert.equal(slots.take().slot, a.slot);
 * b.release();
 * ```
 */
export class WorkerSlots {
  #held = new Set<number>();

  /** Slots taken now, ascending. */
  get held(): number[] {
    return [...this.#held].sort((a, b) => a - b);
  }

  /**
   * Takes the lowest free slot.
   *
   * @returns The slot; dispose (or `release()`) gives it back.
   */
  take(): WorkerSlot {
    let slot = 0;
    while (this.#held.has(slot)) slot++;
    this.#held.add(slot);
    let released = false;
    const held = this.#held;
    return {
      slot,
      release(): void {
        if (released) return;
        released = true;
        held.delete(slot);
      },
      [Symbol.dispose](): void {
        this.release();
      },
    };
  }
}
