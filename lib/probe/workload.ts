/**
 * The probe workload (docs/internals.md §12 "The workload"): the inputs a probe runs through a
 * lane, shipped in the repository and deterministic. Texts are made by code from a fixed word list
 * and a fixed seed (never the clock), so two probes of the same lane run the same inputs; texts
 * that must have an exact token length (micro-batch edges, the lane's max context and max+1) are
 * fitted to the lane's own tokenizer, so they depend only on the tokenizer, the lane's limits and
 * {@link PROBE_WORKLOAD_REVISION}.
 *
 * - embed lanes ({@link embedWorkload}): short texts, a batched set of varied lengths,
 *   shape-boundary texts (at the micro-batch edges of the lane: one row over `maxSequences`,
 *   rows of `maxMicroBatchTokens / maxSequences + 1` tokens, half the budget and one token
 *   more; {@link boundaryCases}), long texts, one text of exactly
 *   the lane's max tokens and one of max+1 (which the same length check the ops use must refuse
 *   with `sequence_too_long`);
 * - rerank lanes ({@link rerankWorkload}): queries with candidate sets that hold near-ties
 *   (near-duplicate candidates differing by one word), a pair of exactly max tokens and one of
 *   max+1;
 * - generation lanes ({@link generationWorkload}): 20 prompts for 64 greedy tokens.
 *
 * Sized so a MiniLM-shaped encoder probes in seconds of engine time on 2 cores (about 15k
 * tokens, a third of them at the micro-batch token edge).
 *
 * @module
 */
import type { SanitizedTokenizer } from "../tokenize/tokenizer.ts";

/**
 * Revision of the workload generator: bump it whenever a text, a size or the seed changes (it
 * is recorded with the probe's results, so results of two revisions are never compared as one).
 */
export const PROBE_WORKLOAD_REVISION = "probe-workload-v1";

/** Seed of the workload's generator (fixed; never the clock). */
export const PROBE_WORKLOAD_SEED = 0x18_10_5eed;

/** Greedy tokens per generation prompt (20 prompts × 64 tokens). */
export const GENERATION_MAX_TOKENS = 64;

/** Generation prompts. */
export const GENERATION_PROMPTS = 20;

/** The fixed word list texts are drawn from: plain lower-case English words. */
export const PROBE_WORDS: readonly string[] = Object.freeze([
  "the",
  "of",
  "and",
  "to",
  "in",
  "is",
  "was",
  "for",
  "on",
  "that",
  "with",
  "as",
  "by",
  "at",
  "from",
  "this",
  "it",
  "are",
  "be",
  "or",
  "an",
  "not",
  "which",
  "have",
  "one",
  "all",
  "new",
  "more",
  "time",
  "year",
  "world",
  "city",
  "river",
  "house",
  "music",
  "water",
  "light",
  "paper",
  "market",
  "school",
  "system",
  "model",
  "search",
  "vector",
  "number",
  "garden",
  "winter",
  "summer",
  "mountain",
  "language",
  "history",
  "science",
  "engine",
  "window",
  "station",
  "village",
  "company",
  "family",
  "country",
  "question",
  "answer",
  "story",
  "report",
  "game",
  "team",
  "road",
  "bridge",
  "island",
  "small",
  "large",
  "old",
  "young",
  "early",
  "late",
  "green",
  "blue",
  "red",
  "quick",
  "slow",
  "bright",
  "dark",
  "open",
  "close",
  "north",
  "south",
  "east",
  "west",
  "first",
  "second",
  "last",
  "under",
  "over",
  "between",
  "after",
  "before",
  "during",
  "near",
  "far",
]);

/** A small deterministic PRNG (mulberry32): the same seed gives the same sequence everywhere. */
export class ProbeRng {
  #state: number;

  constructor(seed: number = PROBE_WORKLOAD_SEED) {
    this.#state = seed >>> 0;
  }

  /** Next value in [0, 1). */
  next(): number {
    this.#state = (this.#state + 0x6d2b79f5) >>> 0;
    let t = this.#state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }

  /** Integer in [lo, hi], both inclusive. */
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo + 1));
  }

  /** One word of {@link PROBE_WORDS}. */
  word(): string {
    return PROBE_WORDS[this.int(0, PROBE_WORDS.length - 1)]!;
  }

  /** `n` words joined by spaces, the first capitalised. */
  sentence(n: number): string {
    const words = Array.from({ length: n }, () => this.word());
    words[0] = words[0]!.charAt(0).toUpperCase() + words[0]!.slice(1);
    return words.join(" ");
  }
}

/** The lane limits the workload is shaped to (the engine's `EngineLimits`, the model's max). */
export interface WorkloadLimits {
  /** Longest sequence in tokens, specials included (the model's `maxTokens`). */
  maxTokens: number;
  /** Padded tokens one engine call may hold. */
  maxMicroBatchTokens: number;
  /** Rows one engine call may hold. */
  maxSequences: number;
}

/** Texts at one micro-batch edge: `rows` rows of `tokens` tokens each (texts repeat). */
export interface BoundaryCase {
  /** Why this length: e.g. `budget/rows`, `budget/rows+1`, `budget/2`, `budget/2+1`. */
  edge: string;
  /** Tokens of every text, specials included. */
  tokens: number;
  /** Distinct texts of exactly `tokens` tokens. */
  texts: string[];
  /** Rows of the batch (texts cycled): the edge's micro-batch is full, or one row over. */
  rows: number;
}

/** The workload of an embed lane. */
export interface EmbedWorkload {
  revision: string;
  /** A few short texts (2–6 words). */
  short: string[];
  /**
   * The batched set, varied lengths (the short texts among them): query path vs batch path,
   * shape invariance, determinism, reference parity and top-k overlap run on it.
   */
  batched: string[];
  /** Texts at the micro-batch edges of the lane. */
  boundary: BoundaryCase[];
  /** Long texts (half and all but one of the lane's max tokens). */
  long: string[];
  /** A text of exactly `maxTokens` tokens: must be served. */
  maxContext: string;
  /** A text of exactly `maxTokens + 1` tokens: must be refused with `sequence_too_long`. */
  overMax: string;
  /** Token count of every text of the workload, specials included, by text. */
  tokens: Map<string, number>;
}

/** Options of {@link embedWorkload} and {@link rerankWorkload}. */
export interface WorkloadOptions {
  /** Texts in the batched set (at most 64). @default 32 */
  batched?: number;
  /** Distinct texts per micro-batch edge. @default 4 */
  boundaryTexts?: number;
}

/**
 * The workload of an embed lane, fitted to its tokenizer and limits.
 *
 * @param tokenizer The lane's tokenizer (exact lengths are counted with it, specials included).
 * @param limits The lane's limits.
 * @returns Texts; the same for the same tokenizer, limits and revision.
 * @throws {RangeError} when the limits are not positive integers or leave no room for a text.
 * @throws {Error} when the tokenizer cannot make a text of some exact length from the word
 *   list (a tokenizer with no one-token word; a bug of the workload).
 */
export function embedWorkload(
  tokenizer: SanitizedTokenizer,
  limits: WorkloadLimits,
  options: WorkloadOptions = {},
): EmbedWorkload {
  checkLimits(limits);
  const rng = new ProbeRng(PROBE_WORKLOAD_SEED);
  const fit = new TextFitter(tokenizer, (t) => tokenizer.encode(t, HUGE).ids.length);
  const tokens = new Map<string, number>();
  const note = (t: string): string => {
    tokens.set(t, fit.count(t));
    return t;
  };
  const min = fit.count("a");
  const max = limits.maxTokens;
  const short = Array.from({ length: 8 }, () => note(rng.sentence(rng.int(2, 6))));
  const nBatched = Math.min(64, Math.max(short.length, options.batched ?? 32));
  const batched = [...short];
  while (batched.length < nBatched) {
    // Lengths up to ~40 words, never over the lane's limit.
    const words = rng.int(6, 40);
    const text = fit.atMost(rng.sentence(words), max);
    batched.push(note(text));
  }
  const boundary = boundaryCases(limits, min).map(({ edge, tokens: n, rows }) => ({
    edge,
    tokens: n,
    rows,
    texts: Array.from(
      { length: Math.max(1, options.boundaryTexts ?? 4) },
      () => note(fit.exactly(n, rng)),
    ),
  }));
  const longLengths = [...new Set([Math.floor(max / 2), max - 1])]
    .filter((n) => n >= min);
  const long = longLengths.map((n) => note(fit.exactly(n, rng)));
  const maxContext = note(fit.exactly(max, rng));
  const overMax = note(fit.exactly(max + 1, rng));
  return {
    revision: PROBE_WORKLOAD_REVISION,
    short,
    batched,
    boundary,
    long,
    maxContext,
    overMax,
    tokens,
  };
}

/** A query and its candidates. */
export interface RerankGroup {
  query: string;
  /** Candidates; near-duplicates (one word changed) sit beside the text they copy. */
  candidates: string[];
}

/** The workload of a rerank lane. */
export interface RerankWorkload {
  revision: string;
  /** Query/candidate sets with near-ties. */
  groups: RerankGroup[];
  /** A pair of exactly `maxTokens` tokens: must be served. */
  maxContext: { query: string; candidate: string };
  /** A pair of exactly `maxTokens + 1` tokens: must be refused with `sequence_too_long`. */
  overMax: { query: string; candidate: string };
}

/**
 * The workload of a rerank lane: 4 queries with 12 candidates each (3 topical texts, each with
 * a near-duplicate, plus unrelated texts), and the max-context pairs.
 *
 * @param tokenizer The lane's tokenizer (pairs are counted with `encodePair`).
 * @param limits The lane's limits.
 * @throws {RangeError} as {@link embedWorkload}.
 * @throws {Error} as {@link embedWorkload}.
 */
export function rerankWorkload(
  tokenizer: SanitizedTokenizer,
  limits: WorkloadLimits,
): RerankWorkload {
  checkLimits(limits);
  const rng = new ProbeRng(PROBE_WORKLOAD_SEED ^ 0x7e7a);
  const groups: RerankGroup[] = [];
  for (let g = 0; g < 4; g++) {
    const query = rng.sentence(rng.int(3, 7));
    const qWords = query.toLowerCase().split(" ");
    const candidates: string[] = [];
    for (let k = 0; k < 3; k++) {
      // Topical: shares words with the query.
      const words = [
        ...qWords.slice(0, rng.int(1, qWords.length)),
        ...rng.sentence(rng.int(4, 12))
          .toLowerCase().split(" "),
      ];
      const text = words.join(" ");
      candidates.push(text);
      // Its near-duplicate: one word swapped for another.
      const dup = [...words];
      const at = rng.int(0, dup.length - 1);
      dup[at] = PROBE_WORDS[(PROBE_WORDS.indexOf(dup[at]!) + 1) % PROBE_WORDS.length]!;
      candidates.push(dup.join(" "));
    }
    while (candidates.length < 12) candidates.push(rng.sentence(rng.int(4, 20)));
    groups.push({ query, candidates });
  }
  const query = groups[0]!.query;
  const pairCount = (doc: string): number => tokenizer.encodePair(query, doc, HUGE).ids.length;
  const fit = new TextFitter(tokenizer, pairCount);
  return {
    revision: PROBE_WORKLOAD_REVISION,
    groups,
    maxContext: { query, candidate: fit.exactly(limits.maxTokens, rng) },
    overMax: { query, candidate: fit.exactly(limits.maxTokens + 1, rng) },
  };
}

/** The workload of a generation lane. */
export interface GenerationWorkload {
  revision: string;
  /** {@link GENERATION_PROMPTS} prompts. */
  prompts: string[];
  /** Greedy tokens per prompt ({@link GENERATION_MAX_TOKENS}). */
  maxTokens: number;
}

/** The workload of a generation lane: 20 prompts for 64 greedy tokens each. */
export function generationWorkload(): GenerationWorkload {
  const rng = new ProbeRng(PROBE_WORKLOAD_SEED ^ 0x6e6e);
  const prompts = Array.from(
    { length: GENERATION_PROMPTS },
    (_, i) => `${i + 1}. ${rng.sentence(rng.int(4, 14))}`,
  );
  return { revision: PROBE_WORKLOAD_REVISION, prompts, maxTokens: GENERATION_MAX_TOKENS };
}

/**
 * The micro-batch edges of a lane: one row more than a call may hold (short rows, so only the
 * row limit splits the batch), rows of one token more than `budget/rows` (the token budget
 * splits the batch: all but the last row fill a call to just under the budget), and two rows of
 * half the budget (they fill one call) and of one token more (each row a call of its own).
 * Lengths outside [min, maxTokens] are dropped (a lane whose calls hold one row has no edges).
 */
export function boundaryCases(
  limits: WorkloadLimits,
  min: number,
): { edge: string; tokens: number; rows: number }[] {
  const { maxMicroBatchTokens: budget, maxSequences: seqs, maxTokens } = limits;
  const out: { edge: string; tokens: number; rows: number }[] = [];
  const add = (edge: string, tokens: number, rows: number): void => {
    if (tokens < min || tokens > maxTokens || rows < 1) return;
    if (out.some((c) => c.tokens === tokens)) return;
    out.push({ edge, tokens, rows });
  };
  if (seqs > 1) {
    add("rows+1", Math.max(min, Math.min(min + 6, Math.floor(budget / (seqs + 1)))), seqs + 1);
    add("budget/rows+1", Math.floor(budget / seqs) + 1, seqs);
    const half = Math.floor(budget / 2);
    add("budget/2", half, 2);
    add("budget/2+1", half + 1, 2);
  }
  return out;
}

const HUGE = { maxTokens: 1 << 30 };

function checkLimits(limits: WorkloadLimits): void {
  for (const [k, v] of Object.entries(limits)) {
    if (!Number.isInteger(v) || v < 1) {
      throw new RangeError(
        `Cannot build the probe workload: ${k} must be a positive integer: received ${v}`,
      );
    }
  }
}

/** Fits texts to exact token counts under a counting function (a text, or a pair's document). */
class TextFitter {
  #count: (text: string) => number;
  #fillers: string[] | undefined;
  #tokenizer: SanitizedTokenizer;

  constructor(tokenizer: SanitizedTokenizer, count: (text: string) => number) {
    this.#tokenizer = tokenizer;
    this.#count = count;
  }

  count(text: string): number {
    return this.#count(text);
  }

  /** `text` cut (by words) to at most `max` tokens. */
  atMost(text: string, max: number): string {
    if (this.#count(text) <= max) return text;
    const words = text.split(" ");
    let lo = 1, hi = words.length;
    while (lo < hi) {
      const mid = Math.ceil((lo + hi) / 2);
      if (this.#count(words.slice(0, mid).join(" ")) <= max) lo = mid;
      else hi = mid - 1;
    }
    return words.slice(0, lo).join(" ");
  }

  /**
   * A text of exactly `n` tokens: random words up to the longest prefix within `n`, then
   * one-token filler words.
   */
  exactly(n: number, rng: ProbeRng): string {
    const base = this.#count("");
    if (n <= base) {
      throw new RangeError(
        `Cannot build a probe text of ${n} tokens: the specials alone take ${base}`,
      );
    }
    // Enough words for n tokens (a word is at least one token).
    const words = Array.from({ length: n }, () => rng.word());
    let lo = 0, hi = words.length;
    while (lo < hi) {
      const mid = Math.ceil((lo + hi) / 2);
      if (this.#count(words.slice(0, mid).join(" ")) <= n) lo = mid;
      else hi = mid - 1;
    }
    const kept = words.slice(0, lo);
    let count = this.#count(kept.join(" "));
    const fillers = this.#oneTokenWords();
    let guard = 0;
    while (count < n) {
      if (guard++ > 4 * n) break;
      let added = false;
      for (const f of fillers) {
        const next = this.#count([...kept, f].join(" "));
        if (next === count + 1) {
          kept.push(f);
          count = next;
          added = true;
          break;
        }
      }
      if (!added) break;
    }
    if (count !== n) {
      throw new Error(
        `Cannot build a probe text of exactly ${n} tokens with this tokenizer (reached ${count}). This is a bug of the probe workload`,
      );
    }
    return kept.join(" ");
  }

  /** Words of the list that are one token alone (tried in list order), single letters after. */
  #oneTokenWords(): string[] {
    if (this.#fillers !== undefined) return this.#fillers;
    const tok = this.#tokenizer;
    const candidates = [...PROBE_WORDS, ..."abcdefghijklmnopqrstuvwxyz".split("")];
    const ones = candidates.filter((w) => {
      try {
        return tok.tokenize(w).length === 1;
      } catch {
        return false;
      }
    });
    this.#fillers = ones.length > 0 ? ones : candidates;
    return this.#fillers;
  }
}
