/**
 * Which queue a lane serves next (docs/internals.md §6 "Pick order"): a pure policy (STYLE 13)
 * over the heads of the three class queues and the position in the fair cycle.
 *
 * Pick order:
 *
 * 1. `control` whenever its queue is non-empty;
 * 2. `bulk` when its head has waited longer than `bulkAgingMs` (250 ms);
 * 3. the only non-empty class;
 * 4. otherwise the fair cycle: `weights.interactive` interactive turns, then `weights.bulk` bulk
 *    turns (default 3 / 1, i.e. `[I, I, I, B]`).
 *
 * `decode` (generation, `microllm.oneshot`) is its own class: it runs when interactive and bulk
 * are both empty, and before them once its head has waited longer than `bulkAgingMs` (so neither
 * side starves the other). A generation model has a lane of its own, so in practice decode
 * shares a lane only with control work; the rule keeps a shared lane fair all the same.
 *
 * @module
 */

/** Queue class of a piece of engine work (docs/internals.md §6). */
export type WorkClass = "control" | "interactive" | "bulk" | "decode";

/** Every {@link WorkClass}, in pick-precedence order. */
export const WORK_CLASSES: readonly WorkClass[] = Object.freeze(
  [
    "control",
    "interactive",
    "bulk",
    "decode",
  ] as const,
);

/** What the policy sees of a lane's queues. */
export interface PickState {
  /**
   * Enqueue time of each class's queue head, in ms on the same clock as `nowMs`; `undefined`
   * when that queue is empty.
   */
  readonly heads: Readonly<Record<Exclude<WorkClass, "decode">, number | undefined>> & {
    readonly decode?: number | undefined;
  };
  /**
   * Position in the fair cycle: `0 ≤ cycle < weights.interactive + weights.bulk`; positions below
   * `weights.interactive` are interactive turns, the rest bulk turns. Start at 0. A value out of
   * range (weights changed) is taken modulo the cycle length.
   */
  readonly cycle: number;
}

/** Weights of the fair cycle (docs/internals.md §6: interactive 3 / bulk 1). */
export interface PickWeights {
  /** Interactive turns per cycle; a positive integer. @default 3 */
  interactive: number;
  /** Bulk turns per cycle; a positive integer. @default 1 */
  bulk: number;
}

/** Options of {@link pickNext}. */
export interface PickOptions {
  /** Fair-cycle weights. @default {interactive: 3, bulk: 1} */
  weights?: PickWeights;
  /**
   * A bulk head that has waited longer than this many milliseconds goes before interactive
   * work. `Infinity` turns aging off.
   *
   * @default 250
   */
  bulkAgingMs?: number;
}

/** A decision of {@link pickNext}. */
export interface Pick {
  /** The class whose queue head runs next. */
  cls: WorkClass;
  /** The state after the pick: same `heads` (the caller refreshes them), new `cycle`. */
  state: PickState;
}

/** Default fair-cycle weights (docs/internals.md §6). */
export const DEFAULT_PICK_WEIGHTS: Readonly<PickWeights> = Object.freeze({
  interactive: 3,
  bulk: 1,
});

/** Default bulk aging in ms (docs/internals.md §6 `bulk_aging_ms`). */
export const DEFAULT_BULK_AGING_MS = 250;

/**
 * Picks the class a free engine slot serves next.
 *
 * How each rule moves the cycle:
 *
 * - a fair-cycle pick advances it by one (wrapping);
 * - a bulk pick by any other rule (aged head, or bulk alone) starts a new cycle (position 0), so
 *   interactive work that arrives while a bulk quantum runs goes right after that quantum;
 * - a control pick, or an interactive pick while bulk is empty, leaves it unchanged (bulk had
 *   no claim on that turn).
 *
 * @param state Queue heads and cycle position.
 * @param nowMs The current time on the clock of `state.heads`, in ms.
 * @param options Weights and aging.
 * @returns The class to serve and the next state, or `undefined` when every queue is empty.
 * @throws {RangeError} when a weight is not a positive integer, `bulkAgingMs` is negative or
 *   NaN, or `state.cycle` is not a non-negative integer.
 *
 * @example Fair cycle with both classes waiting
 * ```ts
 * import assert from "node:assert/strict";
 * import { pickNext } from "./pick_next.ts";
 *
 * const heads = { control: undefined, interactive: 0, bulk: 0 };
 * assert.equal(pickNext({ heads, cycle: 0 }, 10)?.cls, "interactive");
 * assert.equal(pickNext({ heads, cycle: 3 }, 10)?.cls, "bulk");
 * ```
 */
export function pickNext(
  state: PickState,
  nowMs: number,
  options: PickOptions = {},
): Pick | undefined {
  const weights = options.weights ?? DEFAULT_PICK_WEIGHTS;
  const agingMs = options.bulkAgingMs ?? DEFAULT_BULK_AGING_MS;
  for (const key of ["interactive", "bulk"] as const) {
    const w = weights[key];
    if (!Number.isInteger(w) || w < 1) {
      throw new RangeError(
        `Cannot pick next class as weights.${key} must be a positive integer: received ${w}`,
      );
    }
  }
  if (Number.isNaN(agingMs) || agingMs < 0) {
    throw new RangeError(
      `Cannot pick next class as bulkAgingMs must be non-negative: received ${agingMs}`,
    );
  }
  if (!Number.isInteger(state.cycle) || state.cycle < 0) {
    throw new RangeError(
      `Cannot pick next class as cycle must be a non-negative integer: received ${state.cycle}`,
    );
  }
  const { heads } = state;
  const length = weights.interactive + weights.bulk;
  const cycle = state.cycle % length;
  if (heads.control !== undefined) {
    return { cls: "control", state: { heads, cycle } };
  }
  const bulkHead = heads.bulk;
  if (bulkHead !== undefined && (heads.interactive === undefined || nowMs - bulkHead > agingMs)) {
    return { cls: "bulk", state: { heads, cycle: 0 } };
  }
  const decodeHead = heads.decode;
  if (decodeHead !== undefined) {
    if (
      nowMs - decodeHead > agingMs || (heads.interactive === undefined && bulkHead === undefined)
    ) {
      return { cls: "decode", state: { heads, cycle } };
    }
  }
  if (heads.interactive === undefined) return undefined;
  if (bulkHead === undefined) {
    return { cls: "interactive", state: { heads, cycle } };
  }
  const cls: WorkClass = cycle < weights.interactive ? "interactive" : "bulk";
  return { cls, state: { heads, cycle: (cycle + 1) % length } };
}
