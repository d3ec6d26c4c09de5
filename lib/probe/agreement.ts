/**
 * The numbers the probe compares lanes with (docs/internals.md §12 "The bars"): cosine, norm,
 * mean/min cosine over aligned vector sets, top-k neighbour overlap and its worst decile,
 * Pearson correlation, max |Δ| and token-exact comparison of generations. Pure functions over
 * plain arrays; accumulation in float64.
 *
 * @module
 */

/** A vector: any array-like of numbers (`Float32Array`, `number[]`). */
export type Vec = ArrayLike<number>;

/**
 * Cosine similarity of two vectors of the same length.
 *
 * @returns `a·b / (|a| |b|)` in [-1, 1]; 1 when both are all zeros (the same vector), 0 when
 *   exactly one is.
 * @throws {RangeError} when the lengths differ.
 */
export function cosine(a: Vec, b: Vec): number {
  checkSameLength(a, b, "cosine");
  let dot = 0, na = 0, nb = 0;
  for (let i = 0; i < a.length; i++) {
    const x = a[i]!, y = b[i]!;
    dot += x * y;
    na += x * x;
    nb += y * y;
  }
  if (na === 0 && nb === 0) return 1;
  if (na === 0 || nb === 0) return 0;
  return dot / Math.sqrt(na * nb);
}

/** Euclidean (L2) norm. */
export function norm(a: Vec): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i]! * a[i]!;
  return Math.sqrt(s);
}

/** Mean and minimum of the pairwise cosines of two aligned vector lists. */
export interface CosineStats {
  mean: number;
  min: number;
  /** Index of the pair with the least cosine (-1 for empty lists). */
  minIndex: number;
  /** Every pair's cosine, by index. */
  values: number[];
}

/**
 * Cosines of aligned pairs `a[i]`, `b[i]`.
 *
 * @returns Mean and min; for empty lists mean and min are NaN and `minIndex` -1.
 * @throws {RangeError} when the lists (or a pair of vectors) differ in length.
 */
export function cosineStats(a: readonly Vec[], b: readonly Vec[]): CosineStats {
  if (a.length !== b.length) {
    throw new RangeError(
      `Cannot compare vector lists: lengths differ: ${a.length} and ${b.length}`,
    );
  }
  const values = a.map((v, i) => cosine(v, b[i]!));
  let min = Infinity, minIndex = -1, sum = 0;
  values.forEach((c, i) => {
    sum += c;
    if (c < min) {
      min = c;
      minIndex = i;
    }
  });
  return values.length === 0
    ? { mean: NaN, min: NaN, minIndex: -1, values }
    : { mean: sum / values.length, min, minIndex, values };
}

/**
 * Indices of the `k` nearest neighbours of `vectors[q]` among the other vectors, by cosine
 * (descending), ties broken by the lower index; the query itself is excluded.
 *
 * @throws {RangeError} when `k` is not a positive integer or `q` is out of range.
 */
export function topK(vectors: readonly Vec[], q: number, k: number): number[] {
  if (!Number.isInteger(k) || k < 1) {
    throw new RangeError(`Cannot take the top-k: k must be a positive integer: received ${k}`);
  }
  if (!Number.isInteger(q) || q < 0 || q >= vectors.length) {
    throw new RangeError(`Cannot take the top-k: query ${q} is outside 0..${vectors.length - 1}`);
  }
  const scored: [number, number][] = [];
  for (let j = 0; j < vectors.length; j++) {
    if (j !== q) scored.push([j, cosine(vectors[q]!, vectors[j]!)]);
  }
  scored.sort((x, y) => (y[1] - x[1]) || (x[0] - y[0]));
  return scored.slice(0, k).map(([j]) => j);
}

/**
 * Top-k neighbour overlap of two aligned vector sets (the lane's and the reference's vectors of
 * the same texts): for each query `i`, the share of its `k` nearest neighbours (among the other
 * vectors of its own set) that the two sets agree on. With fewer than `k + 1` vectors, `k` is
 * cut to `n - 1`.
 *
 * @returns Overlap per query, each in [0, 1] (multiples of 1/k); empty for fewer than 2 vectors.
 * @throws {RangeError} when the sets differ in length or `k` is not a positive integer.
 */
export function topKOverlap(lane: readonly Vec[], reference: readonly Vec[], k: number): number[] {
  if (lane.length !== reference.length) {
    throw new RangeError(
      `Cannot compare neighbours: set sizes differ: ${lane.length} and ${reference.length}`,
    );
  }
  if (!Number.isInteger(k) || k < 1) {
    throw new RangeError(`Cannot take the top-k: k must be a positive integer: received ${k}`);
  }
  const n = lane.length;
  if (n < 2) return [];
  const kk = Math.min(k, n - 1);
  const out: number[] = [];
  for (let q = 0; q < n; q++) {
    const a = new Set(topK(lane, q, kk));
    let shared = 0;
    for (const j of topK(reference, q, kk)) if (a.has(j)) shared++;
    out.push(shared / kk);
  }
  return out;
}

/**
 * The `p`-quantile of `values` by linear interpolation between order statistics (numpy's
 * default): position `p·(n−1)` in the sorted values.
 *
 * @param p In [0, 1].
 * @returns NaN for an empty list.
 * @throws {RangeError} when `p` is outside [0, 1].
 */
export function quantile(values: readonly number[], p: number): number {
  if (!(p >= 0 && p <= 1)) {
    throw new RangeError(`Cannot take a quantile: p must be in [0, 1]: received ${p}`);
  }
  if (values.length === 0) return NaN;
  const s = [...values].sort((a, b) => a - b);
  const pos = p * (s.length - 1);
  const lo = Math.floor(pos), hi = Math.ceil(pos);
  return s[lo]! + (s[hi]! - s[lo]!) * (pos - lo);
}

/**
 * The worst decile of per-query overlaps: their 10th percentile ({@link quantile} 0.1). 90 % of
 * the queries agree at least this well.
 */
export function worstDecile(values: readonly number[]): number {
  return quantile(values, 0.1);
}

/**
 * Pearson correlation of two aligned number lists.
 *
 * @returns In [-1, 1]; 1 when both lists are constant and equal, 0 when exactly one is
 *   constant (no linear relation measurable), NaN for fewer than 2 values.
 * @throws {RangeError} when the lengths differ.
 */
export function pearson(a: Vec, b: Vec): number {
  checkSameLength(a, b, "Pearson");
  const n = a.length;
  if (n < 2) return NaN;
  let ma = 0, mb = 0;
  for (let i = 0; i < n; i++) {
    ma += a[i]!;
    mb += b[i]!;
  }
  ma /= n;
  mb /= n;
  let sab = 0, saa = 0, sbb = 0;
  for (let i = 0; i < n; i++) {
    const x = a[i]! - ma, y = b[i]! - mb;
    sab += x * y;
    saa += x * x;
    sbb += y * y;
  }
  if (saa === 0 && sbb === 0) return maxAbsDelta(a, b) === 0 ? 1 : 0;
  if (saa === 0 || sbb === 0) return 0;
  return sab / Math.sqrt(saa * sbb);
}

/**
 * Largest absolute elementwise difference.
 *
 * @returns 0 for empty lists; Infinity when a pair is not finite and unequal.
 * @throws {RangeError} when the lengths differ.
 */
export function maxAbsDelta(a: Vec, b: Vec): number {
  checkSameLength(a, b, "max |Δ|");
  let m = 0;
  for (let i = 0; i < a.length; i++) {
    if (a[i] === b[i]) continue;
    const d = Math.abs(a[i]! - b[i]!);
    if (!(d <= m)) m = Number.isNaN(d) ? Infinity : d;
  }
  return m;
}

/** True when every value is finite. */
export function allFinite(a: Vec): boolean {
  for (let i = 0; i < a.length; i++) if (!Number.isFinite(a[i]!)) return false;
  return true;
}

/** Result of {@link compareTokens}. */
export interface TokenComparison {
  /** Every sequence identical, id for id, and as long. */
  equal: boolean;
  /** Sequences that matched. */
  matching: number;
  /** First sequence that differs and the first position where it does (its length when one is a prefix of the other). */
  firstMismatch?: { index: number; position: number };
}

/**
 * Token-exact comparison of two aligned lists of generated id sequences.
 *
 * @throws {RangeError} when the lists differ in length.
 */
export function compareTokens(
  a: readonly (readonly number[])[],
  b: readonly (readonly number[])[],
): TokenComparison {
  if (a.length !== b.length) {
    throw new RangeError(
      `Cannot compare generations: list lengths differ: ${a.length} and ${b.length}`,
    );
  }
  let matching = 0;
  let first: TokenComparison["firstMismatch"];
  a.forEach((x, i) => {
    const y = b[i]!;
    let pos = -1;
    const n = Math.min(x.length, y.length);
    for (let k = 0; k < n; k++) {
      if (x[k] !== y[k]) {
        pos = k;
        break;
      }
    }
    if (pos < 0 && x.length !== y.length) pos = n;
    if (pos < 0) matching++;
    else first ??= { index: i, position: pos };
  });
  return {
    equal: first === undefined,
    matching,
    ...(first === undefined ? {} : { firstMismatch: first }),
  };
}

function checkSameLength(a: Vec, b: Vec, what: string): void {
  if (a.length !== b.length) {
    throw new RangeError(`Cannot compute ${what}: lengths differ: ${a.length} and ${b.length}`);
  }
}
