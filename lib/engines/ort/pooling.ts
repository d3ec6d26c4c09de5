/**
 * Pooling of a `[rows, seq, hidden]` hidden-state tensor into `[rows, hidden]` vectors.
 *
 * @module
 */

/** Pooling method (docs/internals.md §4 enum). */
export type Pooling = "mean" | "cls" | "last_token";

/** Result of {@link poolHiddenStates}. */
export interface PooledVectors {
  /** Row-major `[rows, hidden]` vectors. */
  data: Float32Array;
  /** 1 for a row whose vector holds NaN or ±Infinity (field report F6), else 0. */
  nonFinite: Uint8Array;
}

/**
 * Pools hidden states. Sequences are right-padded: row `r` has `lengths[r]` real tokens.
 *
 * @param hidden Row-major `[rows, seq, hidden]` float32 hidden states.
 * @param lengths Real tokens per row (≥ 1).
 * @param seq Padded sequence length.
 * @param dims Hidden size.
 * @param pooling `mean` averages the real tokens; `cls` takes position 0; `last_token` takes the
 *   last real token.
 * @param normalize L2-normalise each vector (a zero vector stays zero).
 * @returns Pooled vectors and a per-row non-finite flag.
 */
export function poolHiddenStates(
  hidden: Float32Array,
  lengths: ArrayLike<number>,
  seq: number,
  dims: number,
  pooling: Pooling,
  normalize: boolean,
): PooledVectors {
  const rows = lengths.length;
  const data = new Float32Array(rows * dims);
  const nonFinite = new Uint8Array(rows);
  const acc = new Float64Array(dims);
  for (let r = 0; r < rows; r++) {
    const len = lengths[r]!;
    const base = r * seq * dims;
    const out = r * dims;
    switch (pooling) {
      case "mean": {
        acc.fill(0);
        for (let t = 0; t < len; t++) {
          const o = base + t * dims;
          for (let d = 0; d < dims; d++) acc[d]! += hidden[o + d]!;
        }
        for (let d = 0; d < dims; d++) data[out + d] = acc[d]! / len;
        break;
      }
      case "cls":
        data.set(hidden.subarray(base, base + dims), out);
        break;
      case "last_token": {
        const o = base + (len - 1) * dims;
        data.set(hidden.subarray(o, o + dims), out);
        break;
      }
      default:
        throw new Error(`Unknown pooling ${pooling satisfies never}. This is a bug`);
    }
    finishRow(data, out, dims, normalize, nonFinite, r);
  }
  return { data, nonFinite };
}

function finishRow(
  data: Float32Array,
  out: number,
  dims: number,
  normalize: boolean,
  nonFinite: Uint8Array,
  r: number,
): void {
  let sq = 0;
  for (let d = 0; d < dims; d++) {
    const v = data[out + d]!;
    sq += v * v;
  }
  if (!Number.isFinite(sq)) {
    nonFinite[r] = 1;
    return;
  }
  if (normalize && sq > 0) {
    const inv = 1 / Math.sqrt(sq);
    for (let d = 0; d < dims; d++) data[out + d]! *= inv;
  }
}
