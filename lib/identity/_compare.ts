/**
 * String order shared by the identity encoders.
 *
 * @module
 */

/** Orders strings by Unicode code point, which is the UTF-8 byte order Rust's `String` uses. */
export function compareCodePoints(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const x = a.codePointAt(i) as number;
    const y = b.codePointAt(i) as number;
    if (x !== y) return x < y ? -1 : 1;
  }
  return a.length - b.length;
}
