/**
 * Where an offset falls in a text, as an editor counts it (the lowest layer of
 * `tests/layering_test.ts`: the config loader and the HTTP body reader both name syntax errors
 * this way).
 *
 * @module
 */

/**
 * The 1-based line and column of a 0-based UTF-16 `offset` in `text`.
 *
 * Lines end at LF (a CR before it counts as a column of the line); the column counts UTF-16 code
 * units from the line's start, so an astral character takes two. An offset past the end keeps
 * counting columns on the last line.
 *
 * @param text The text the offset points into.
 * @param offset A 0-based UTF-16 offset (0 is line 1, column 1).
 * @returns `{line, column}`, both 1-based.
 */
export function lineColumn(text: string, offset: number): { line: number; column: number } {
  let line = 1;
  let lineStart = 0;
  for (let i = 0; i < offset && i < text.length; i++) {
    if (text.charCodeAt(i) === 0x0a) {
      line++;
      lineStart = i + 1;
    }
  }
  return { line, column: offset - lineStart + 1 };
}
