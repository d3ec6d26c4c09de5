/**
 * Plain-text tables and relative times for the listing commands (`models list`, `models
 * catalog`, `ps`, `cache gc`).
 *
 * @module
 */

/**
 * Lays out a table: columns padded to their widest cell and separated by two spaces; no line
 * ends in spaces (the last column is not padded, empty trailing cells are dropped).
 *
 * @param header Column titles.
 * @param rows Cells, one array per row, as many as `header`.
 * @returns The lines: the header, then one per row.
 */
export function formatTable(header: readonly string[], rows: readonly string[][]): string[] {
  const widths = header.map((h, c) => Math.max(h.length, ...rows.map((r) => (r[c] ?? "").length)));
  return [header, ...rows].map((r) =>
    r.map((cell, c) => c === r.length - 1 ? cell : cell.padEnd(widths[c]!)).join("  ").trimEnd()
  );
}

/**
 * Formats how long ago a moment was: `just now` (under a second), `42s ago`, `2m ago`, `3h ago`,
 * `5d ago`; `never` for null.
 *
 * @param ms The moment, ms since the epoch, or null for never.
 * @param now The present, ms since the epoch.
 * @returns The text.
 */
export function formatAgo(ms: number | null | undefined, now: number): string {
  if (ms === null || ms === undefined) return "never";
  const s = Math.max(0, Math.floor((now - ms) / 1000));
  if (s < 1) return "just now";
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86_400) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86_400)}d ago`;
}
