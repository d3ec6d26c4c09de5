/**
 * The route credit window of the subc daemon (subc §3 "Route credit window"), as the test peer
 * keeps it: a per-route semaphore whose credits are held by request corr.
 *
 * @module
 */
import type { Concurrency } from "../../../lib/subc/control.ts";

/** The window of each `concurrency` (subc §3): serial 1, module_managed 32, stateless_parallel 1024. */
export const CREDIT_WINDOW: Readonly<Record<Concurrency, number>> = {
  serial: 1,
  module_managed: 32,
  stateless_parallel: 1024,
};

/**
 * The credit window of a module that declares `concurrency` (absent means `module_managed`).
 *
 * @param concurrency The management surface's `concurrency`.
 * @returns 1, 32 or 1024.
 */
export function creditWindowOf(concurrency: Concurrency | undefined): number {
  return CREDIT_WINDOW[concurrency ?? "module_managed"];
}

/**
 * A route's credits. Each client→module Request takes one, keyed by its corr
 * ({@link CreditWindow.acquire}; it waits while none is free); the module's terminal releases it
 * by corr ({@link CreditWindow.release}); Cancel releases nothing. Releasing a corr that holds no
 * credit (over-release) changes nothing and is reported, never thrown.
 */
export class CreditWindow {
  /** Credits in all. */
  readonly size: number;
  readonly #held = new Map<bigint, number>();
  #inUse = 0;
  readonly #waiters: { corr: bigint; resolve: (granted: boolean) => void }[] = [];
  #closed = false;
  readonly #onChange: () => void;

  /**
   * @param size Credits in all, an integer ≥ 1.
   * @param onChange Called after every change of credits or waiters (the peer's event hook).
   * @throws {RangeError} when `size` is not an integer ≥ 1.
   */
  constructor(size: number, onChange: () => void = () => {}) {
    if (!Number.isInteger(size) || size < 1) {
      throw new RangeError(
        `Cannot create credit window as 'size' must be an integer >= 1: received ${size}`,
      );
    }
    this.size = size;
    this.#onChange = onChange;
  }

  /** Credits held now. */
  get inUse(): number {
    return this.#inUse;
  }

  /** Requests waiting for a credit now. */
  get waiting(): number {
    return this.#waiters.length;
  }

  /** Whether {@link CreditWindow.close} ran. */
  get closed(): boolean {
    return this.#closed;
  }

  /** Whether `corr` holds a credit (its request is in flight). */
  holds(corr: bigint): boolean {
    return this.#held.has(corr);
  }

  /** The corrs holding credits, each as often as it holds one. */
  heldCorrs(): bigint[] {
    return [...this.#held].flatMap(([corr, n]) => Array<bigint>(n).fill(corr));
  }

  /**
   * Takes a credit for `corr`, waiting (first come, first served) while none is free.
   *
   * @param corr The request's corr.
   * @returns `true` once the credit is held; `false` when the window closed first (the route is
   *   gone).
   */
  acquire(corr: bigint): Promise<boolean> {
    if (this.#closed) return Promise.resolve(false);
    if (this.#inUse < this.size) {
      this.#take(corr);
      this.#onChange();
      return Promise.resolve(true);
    }
    const granted = new Promise<boolean>((resolve) => this.#waiters.push({ corr, resolve }));
    this.#onChange();
    return granted;
  }

  /**
   * Releases the credit of `corr` and hands it to the first waiter.
   *
   * @param corr The corr of a terminal.
   * @returns `true` when `corr` held a credit; `false` for an over-release (nothing changes).
   */
  release(corr: bigint): boolean {
    const n = this.#held.get(corr);
    if (n === undefined) return false;
    if (n === 1) this.#held.delete(corr);
    else this.#held.set(corr, n - 1);
    this.#inUse--;
    const next = this.#waiters.shift();
    if (next !== undefined) {
      this.#take(next.corr);
      next.resolve(true);
    }
    this.#onChange();
    return true;
  }

  /**
   * Closes the window (the route is gone): every waiter gets `false`, every held credit is
   * dropped.
   *
   * @returns The corrs that still held credits (requests that never saw a terminal).
   */
  close(): bigint[] {
    if (this.#closed) return [];
    this.#closed = true;
    const held = this.heldCorrs();
    this.#held.clear();
    this.#inUse = 0;
    for (const w of this.#waiters.splice(0)) w.resolve(false);
    this.#onChange();
    return held;
  }

  #take(corr: bigint): void {
    this.#held.set(corr, (this.#held.get(corr) ?? 0) + 1);
    this.#inUse++;
  }
}
