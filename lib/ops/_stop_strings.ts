/**
 * Stop strings of a generation (`microllm.oneshot {stop}`, the completions doors' `stop`).
 *
 * The answer's text ends before the **earliest** occurrence of any stop string: the smallest
 * start position over every stop string in the whole generated text (with `["ab", "xaby"]`,
 * `"xaby"` cuts at the `x`, `"xabz"` at the `a`). {@link cutAtStop} is that rule for a whole
 * text. {@link StopStrings} applies it while the text grows, token by token, so that
 *
 * - the text it releases is always a prefix of the final answer's text (a streamed answer never
 *   sends a byte the whole answer cuts), and
 * - it says the cut is final ({@link StopStrings.done}) as soon as no later text can move it:
 *   a stop string has matched and no other stop string that began before that match is still
 *   open. The generation can end there.
 *
 * Why the release is a prefix: at any moment let `best` be the earliest complete match so far
 * and `open` the earliest position where the text's tail is a proper prefix of some stop string.
 * Any match in a longer text that starts before `min(best, open)` would either be complete now
 * (so not before `best`) or reach past the end of the text now (so its start is an `open`
 * position, not before `open`). Hence the final cut is at or after `min(best, open)`, and that
 * much may be released.
 *
 * @module
 */

/** Where a whole text is cut by stop strings. */
export interface StopCut {
  /** UTF-16 index of the cut: the start of the earliest match. */
  at: number;
  /**
   * The stop string matched there (the first listed, when two start at `at`; a stream waits for
   * an earlier-listed one that may still complete there before it ends).
   */
  stop: string;
}

/**
 * The earliest match of any stop string in `text`.
 *
 * @param text The whole text.
 * @param stops The stop strings (non-empty strings).
 * @returns The cut, or undefined when no stop string occurs.
 */
export function cutAtStop(text: string, stops: readonly string[]): StopCut | undefined {
  let cut: StopCut | undefined;
  for (const stop of stops) {
    const at = text.indexOf(stop);
    if (at >= 0 && (cut === undefined || at < cut.at)) cut = { at, stop };
  }
  return cut;
}

/**
 * Stop strings applied to a text that grows: which part of it is final, and whether the cut is
 * decided (see the module doc).
 */
export class StopStrings {
  #stops: string[];
  #text = "";
  #released = 0;
  #best: StopCut | undefined;
  #done = false;

  /** @param stops The stop strings (none: everything is released at once, never done). */
  constructor(stops: readonly string[]) {
    this.#stops = stops.filter((s) => s !== "");
  }

  /** The text released so far (always a prefix of the final text). */
  get released(): string {
    return this.#text.slice(0, this.#released);
  }

  /** The earliest complete match so far. */
  get match(): StopCut | undefined {
    return this.#best;
  }

  /**
   * True once the cut is decided: a stop string matched and no stop string that starts before
   * it is still open. Nothing more is released after that, whatever is pushed.
   */
  get done(): boolean {
    return this.#done;
  }

  /**
   * Takes the next text of the generation.
   *
   * @param text The text the latest tokens completed (possibly "").
   * @returns The text that is final now and was not released before (possibly "").
   */
  push(text: string): string {
    if (this.#done || text === "") return "";
    const before = this.#text.length;
    this.#text += text;
    const all = this.#text;
    // New complete matches end in the new text: they start at most |stop| - 1 before it. Two
    // matches at one start: the first listed, whichever completed first (field report replay:
    // `["旅 p", "旅"]` reported either, by how the tokens were chunked).
    this.#stops.forEach((stop, rank) => {
      const at = all.indexOf(stop, Math.max(0, before - stop.length + 1));
      if (at < 0) return;
      const best = this.#best;
      if (best === undefined || at < best.at || (at === best.at && rank < this.#rank(best.stop))) {
        this.#best = { at, stop };
      }
    });
    const limit = this.#best?.at ?? all.length;
    const open = this.#open(limit);
    if (this.#best !== undefined && open >= limit && !this.#tieOpen(this.#best)) this.#done = true;
    let safe = Math.min(limit, open);
    // Never split a surrogate pair (the rest comes with the final text).
    const c = all.charCodeAt(safe - 1);
    if (safe < all.length && c >= 0xd800 && c <= 0xdbff) safe--;
    if (safe <= this.#released) return "";
    const out = all.slice(this.#released, safe);
    this.#released = safe;
    return out;
  }

  #rank(stop: string): number {
    return this.#stops.indexOf(stop);
  }

  /**
   * True while a stop string listed before `best.stop` may still complete at `best.at` (the text
   * from there is a proper prefix of it): the match the cut reports is not decided yet.
   */
  #tieOpen(best: StopCut): boolean {
    const tail = this.#text.slice(best.at);
    const rank = this.#rank(best.stop);
    return this.#stops.some((s, r) => r < rank && s.length > tail.length && s.startsWith(tail));
  }

  /**
   * The earliest position before `limit` where the tail of the text is a proper prefix of a stop
   * string (a match that may still complete); `limit` when there is none.
   */
  #open(limit: number): number {
    const all = this.#text;
    let open = limit;
    for (const stop of this.#stops) {
      for (let q = Math.max(0, all.length - stop.length + 1); q < open; q++) {
        if (stop.startsWith(all.slice(q))) {
          open = q;
          break;
        }
      }
    }
    return open;
  }
}
