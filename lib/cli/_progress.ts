/**
 * Job progress on stderr: a bar redrawn in place on a terminal, else a plain line at most every
 * 2 s, with items (or bytes) done / total, rate and ETA.
 *
 * @module
 */

/** A snapshot to draw. */
export interface ProgressSnapshot {
  /** Items done. */
  done: number;
  /** Items in the job. */
  total: number;
  /** Items per second, or undefined while unknown. */
  rate?: number | undefined;
}

/**
 * Formats a duration for humans: `42s`, `3m04s`, `1h02m`.
 *
 * @param seconds Duration in seconds (rounded up to whole seconds).
 * @returns The text.
 */
export function formatDuration(seconds: number): string {
  const s = Math.max(0, Math.ceil(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
}

/**
 * Formats one progress line: `[#####.....]  50/100 items  50%  12.5 items/s  ETA 4s`, without
 * the bar when `width` is 0.
 *
 * @param p What to draw.
 * @param width Bar width in characters; 0 for no bar.
 * @returns The line, without a newline.
 */
export function formatProgress(p: ProgressSnapshot, width: number): string {
  const frac = p.total > 0 ? Math.min(1, p.done / p.total) : 0;
  const parts: string[] = [];
  if (width > 0) {
    const fill = Math.round(frac * width);
    parts.push(`[${"#".repeat(fill)}${".".repeat(width - fill)}]`);
  }
  parts.push(`${p.done}/${p.total} items`, `${Math.floor(frac * 100)}%`);
  const rate = p.rate;
  if (rate === undefined || !(rate > 0)) {
    parts.push("-- items/s", "ETA --");
  } else {
    parts.push(`${rate >= 100 ? rate.toFixed(0) : rate.toFixed(1)} items/s`);
    parts.push(`ETA ${formatDuration(Math.max(0, p.total - p.done) / rate)}`);
  }
  return parts.join("  ");
}

const KIB = 1024;
const BYTE_UNITS = ["KiB", "MiB", "GiB", "TiB"] as const;

/**
 * Formats a byte count for humans in binary units: `512 B`, `1.5 KiB`, `312.4 MiB`, `1.21 GiB`
 * (one decimal below a GiB, two from a GiB up).
 *
 * @param bytes Byte count (negative and non-finite counts print as `0 B`).
 * @returns The text.
 */
export function formatBytes(bytes: number): string {
  if (!Number.isFinite(bytes) || bytes < KIB) {
    return `${Number.isFinite(bytes) && bytes > 0 ? Math.round(bytes) : 0} B`;
  }
  let value = bytes / KIB;
  let unit = 0;
  while (value >= KIB && unit < BYTE_UNITS.length - 1) {
    value /= KIB;
    unit++;
  }
  return `${value.toFixed(unit >= 2 ? 2 : 1)} ${BYTE_UNITS[unit]}`;
}

/**
 * Formats a transfer rate: `21.3 MiB/s`.
 *
 * @param bytesPerSecond Rate in bytes per second.
 * @returns The text.
 */
export function formatRate(bytesPerSecond: number): string {
  return `${formatBytes(bytesPerSecond)}/s`;
}

/** A byte-transfer snapshot to draw. */
export interface BytesSnapshot {
  /** Bytes done. */
  done: number;
  /** Bytes expected, or null while unknown (no length announced, no size pinned). */
  total: number | null;
  /** Bytes per second, or undefined while unknown. */
  rate?: number | undefined;
}

/**
 * Formats one download line:
 * `[#####.....]  312.4 MiB / 639.2 MiB  49%  21.3 MiB/s  ETA 15s`. Without a known total there is
 * no bar, percentage or ETA: `312.4 MiB  21.3 MiB/s`.
 *
 * @param p What to draw.
 * @param width Bar width in characters; 0 for no bar.
 * @returns The line, without a newline.
 */
export function formatBytesProgress(p: BytesSnapshot, width: number): string {
  const rate = p.rate !== undefined && p.rate > 0 ? p.rate : undefined;
  if (p.total === null) {
    return [formatBytes(p.done), rate === undefined ? "-- /s" : formatRate(rate)].join("  ");
  }
  const frac = p.total > 0 ? Math.min(1, p.done / p.total) : 1;
  const parts: string[] = [];
  if (width > 0) {
    const fill = Math.round(frac * width);
    parts.push(`[${"#".repeat(fill)}${".".repeat(width - fill)}]`);
  }
  parts.push(`${formatBytes(p.done)} / ${formatBytes(p.total)}`, `${Math.floor(frac * 100)}%`);
  if (rate === undefined) parts.push("-- /s", "ETA --");
  else {
    parts.push(formatRate(rate), `ETA ${formatDuration(Math.max(0, p.total - p.done) / rate)}`);
  }
  return parts.join("  ");
}

/** Options of {@link ProgressReporter}. */
export interface ProgressReporterOptions {
  /** `bar`: redraw in place; `lines`: a plain line at most every `lineEveryMs`; `off`. */
  mode: "bar" | "lines" | "off";
  /** What `done` and `total` count: items (`50/100 items`) or bytes (`1.2 MiB / 4.0 MiB`). @default "items" */
  unit?: "items" | "bytes";
  /** Writes raw text to stderr (bar mode). @default writes to Deno.stderr */
  write?: (text: string) => void;
  /** Writes one line to stderr (lines mode). */
  line: (text: string) => void;
  /** Clock in milliseconds. @default Date.now */
  now?: () => number;
  /** Shortest time between two plain lines, in ms. @default 2000 */
  lineEveryMs?: number;
}

/**
 * Draws job progress; the rate is measured from the first update. In `lines` mode the first line
 * comes `lineEveryMs` after the first update.
 */
export class ProgressReporter {
  #opts: ProgressReporterOptions;
  #now: () => number;
  #write: (text: string) => void;
  #start: { at: number; done: number } | undefined;
  #lastLineAt = -Infinity;
  #lastDrawAt = -Infinity;
  #drawn = false;

  /** @param options Mode, writers and clock. */
  constructor(options: ProgressReporterOptions) {
    this.#opts = options;
    this.#now = options.now ?? Date.now;
    this.#write = options.write ?? writeStderr;
  }

  /**
   * Records progress and draws it when due.
   *
   * @param done Items (or bytes) done.
   * @param total Items in the job (or bytes expected; null while unknown, bytes only).
   */
  update(done: number, total: number | null): void {
    if (this.#opts.mode === "off") return;
    const t = this.#now();
    if (this.#start === undefined) {
      this.#start = { at: t, done };
      this.#lastLineAt = t; // the first plain line comes after lineEveryMs: quick jobs print none
    }
    const elapsed = (t - this.#start.at) / 1000;
    const rate = elapsed >= 0.5 && done > this.#start.done
      ? (done - this.#start.done) / elapsed
      : undefined;
    const format = (width: number): string =>
      this.#opts.unit === "bytes"
        ? formatBytesProgress({ done, total, rate }, width)
        : formatProgress(
          { done, total: total ?? 0, rate },
          width,
        );
    if (this.#opts.mode === "bar") {
      if (t - this.#lastDrawAt < 100 && (total === null || done < total)) return;
      this.#lastDrawAt = t;
      this.#write(`\r\x1b[2K${format(barWidth())}`);
      this.#drawn = true;
      return;
    }
    if (t - this.#lastLineAt < (this.#opts.lineEveryMs ?? 2000)) return;
    this.#lastLineAt = t;
    this.#opts.line(`progress: ${format(0)}`);
  }

  /**
   * Prints one line (a phase: `verifying…`) on stderr, clearing the bar first; the next
   * {@link update} draws the bar again below it. Nothing in `off` mode.
   *
   * @param text The line, without a newline.
   */
  note(text: string): void {
    if (this.#opts.mode === "off") return;
    this.finish();
    this.#opts.line(text);
  }

  /** Clears the bar (bar mode), so the next stderr line starts clean. */
  finish(): void {
    if (this.#drawn) this.#write("\r\x1b[2K");
    this.#drawn = false;
  }
}

function barWidth(): number {
  let columns = 80;
  try {
    columns = Deno.consoleSize().columns;
  } catch { /* not a terminal */ }
  return Math.max(10, Math.min(40, columns - 60));
}

function writeStderr(text: string): void {
  const bytes = new TextEncoder().encode(text);
  let off = 0;
  while (off < bytes.length) off += Deno.stderr.writeSync(bytes.subarray(off));
}
