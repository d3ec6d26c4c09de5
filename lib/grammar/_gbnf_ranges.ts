/**
 * GBNF expressions of numeric intervals, for the JSON-schema compiler: every canonical decimal
 * integer in `[lo, hi]` (no leading zeros, no `-0`), and decimals in a real interval with integer
 * ends. Exact where it says so, else a stated subset; every text an expression admits parses to a
 * value in the interval.
 *
 * @module
 */

/** The largest safe integer, 2^53 − 1, as a bigint. */
export const SAFE_INTEGER = BigInt(Number.MAX_SAFE_INTEGER);

/**
 * The GBNF expression of exactly the canonical decimal integers in `[lo, hi]`.
 *
 * @param lo The least integer.
 * @param hi The greatest integer (at least `lo`).
 * @returns An expression (a group of alternatives).
 * @throws {RangeError} when `hi < lo`.
 */
export function integerRange(lo: bigint, hi: bigint): string {
  if (hi < lo) throw new RangeError(`Cannot spell an empty integer range: ${lo} > ${hi}`);
  const alts: string[] = [];
  if (lo < 0n) {
    const top = -lo;
    const bottom = hi < 0n ? -hi : 1n;
    alts.push(`"-" ${group(unsignedRange(bottom, top))}`);
  }
  if (hi >= 0n) alts.push(...unsignedRange(lo < 0n ? 0n : lo, hi));
  return group(alts);
}

/**
 * A GBNF expression of decimals in an interval with integer ends, `lo` and `hi` each open or
 * closed: the integers in it, and numbers with a fraction of 1 to 16 digits and no exponent
 * whose value is in it. A subset of the interval's numbers (no exponent, bounded digits), every
 * one of them inside it.
 *
 * @param lo The lower end.
 * @param loOpen True when `lo` itself is excluded.
 * @param hi The upper end (at least `lo`).
 * @param hiOpen True when `hi` itself is excluded.
 * @returns An expression, or undefined when the interval holds none of those numbers.
 */
export function decimalRange(
  lo: bigint,
  loOpen: boolean,
  hi: bigint,
  hiOpen: boolean,
): string | undefined {
  const FRAC = `"." [0-9]{1,16}`;
  /** A fraction that is not zero: its last digit is not 0. */
  const NONZERO = `"." [0-9]{0,15} [1-9]`;
  const alts: string[] = [];
  const iLo = loOpen ? lo + 1n : lo;
  const iHi = hiOpen ? hi - 1n : hi;
  if (iLo <= iHi) alts.push(integerRange(iLo, iHi));
  // k.f, k >= 0, value in [k, k + 1): above lo when k >= lo (k = lo open: f not zero), below hi
  // when k + 1 <= hi.
  const kLo = max(0n, loOpen ? lo + 1n : lo);
  const kHi = hi - 1n;
  if (kLo <= kHi) alts.push(`${group(unsignedRange(kLo, kHi))} ${FRAC}`);
  if (loOpen && lo >= 0n && lo <= kHi) alts.push(`${literal(lo)} ${NONZERO}`);
  // -m.f, m >= 0, value in (-(m + 1), -m]: above lo when m + 1 <= -lo, below hi when -m <= hi
  // (hi open: -m < hi, or -m = hi with f not zero).
  const mLo = max(0n, hiOpen ? -hi + 1n : -hi);
  const mHi = -lo - 1n;
  if (mLo <= mHi) alts.push(`"-" ${group(unsignedRange(mLo, mHi))} ${FRAC}`);
  if (hiOpen && hi <= 0n && -hi <= mHi) alts.push(`"-" ${literal(-hi)} ${NONZERO}`);
  return alts.length === 0 ? undefined : group(alts);
}

/** Alternatives spelling exactly the canonical integers in `[lo, hi]`, `0 <= lo <= hi`. */
function unsignedRange(lo: bigint, hi: bigint): string[] {
  const a = lo.toString();
  const b = hi.toString();
  const alts: string[] = [];
  /** A run of lengths whose every number is in range: one alternative, `[1-9] [0-9]{m,n}`. */
  let run: [number, number] | undefined;
  const flush = (): void => {
    if (run === undefined) return;
    const [from, to] = run;
    alts.push(
      to === 1
        ? "[1-9]"
        : from === to
        ? `[1-9] [0-9]{${from - 1}}`
        : `[1-9] [0-9]{${from - 1},${to - 1}}`,
    );
    run = undefined;
  };
  for (let len = a.length; len <= b.length; len++) {
    const l = len === a.length ? a : "1" + "0".repeat(len - 1);
    const h = len === b.length ? b : "9".repeat(len);
    if (len > 1 && l === "1" + "0".repeat(len - 1) && h === "9".repeat(len)) {
      run = run === undefined ? [len, len] : [run[0], len];
      continue;
    }
    flush();
    alts.push(...sameLength(l, h));
  }
  flush();
  return alts;
}

/** Alternatives spelling the digit strings from `l` to `h`, both of the same length. */
function sameLength(l: string, h: string): string[] {
  if (l.length === 0) return [];
  if (l === h) return [`"${l}"`];
  const n = l.length - 1;
  if (l[0] === h[0]) return [`"${l[0]}" ${group(sameLength(l.slice(1), h.slice(1)))}`];
  const lowAllZero = /^0*$/.test(l.slice(1));
  const highAllNine = /^9*$/.test(h.slice(1));
  const loD = Number(l[0]);
  const hiD = Number(h[0]);
  const out: string[] = [];
  if (!lowAllZero) out.push(`"${loD}" ${group(sameLength(l.slice(1), "9".repeat(n)))}`);
  const from = lowAllZero ? loD : loD + 1;
  const to = highAllNine ? hiD : hiD - 1;
  if (from <= to) {
    const digit = from === to ? `"${from}"` : `[${from}-${to}]`;
    out.push(n === 0 ? digit : `${digit} [0-9]{${n}}`);
  }
  if (!highAllNine) out.push(`"${hiD}" ${group(sameLength("0".repeat(n), h.slice(1)))}`);
  return out;
}

function group(alts: string[]): string {
  return alts.length === 1 ? alts[0]! : `(${alts.join(" | ")})`;
}

function literal(v: bigint): string {
  return `"${v.toString()}"`;
}

function max(a: bigint, b: bigint): bigint {
  return a > b ? a : b;
}
