/**
 * The module log: one line per event, `<ISO time> <LEVEL> <target> <message> k=v…`, on stderr,
 * filtered by `CK_LOG` (`error`, `warn`, `info` (default), `debug`, or `off`). Worker log lines
 * arrive here through {@link LineRateLimiter} so a chatty worker cannot flood it.
 *
 * @module
 */

/** Severity of a log line, most severe first. */
export type LogLevel = "error" | "warn" | "info" | "debug";

const RANK: Record<LogLevel | "off", number> = { off: -1, error: 0, warn: 1, info: 2, debug: 3 };

/** Where log lines go: `(level, target, message, fields)`. */
export type LogSink = (
  level: LogLevel,
  target: string,
  message: string,
  fields?: Record<string, string | number | boolean>,
) => void;

/**
 * The default sink: stderr, filtered by `CK_LOG` (read once, at the first call).
 *
 * @example
 * ```ts
 * import { stderrLog } from "./log.ts";
 * stderrLog("debug", "test", "not shown unless CK_LOG=debug");
 * ```
 */
export const stderrLog: LogSink = (level, target, message, fields) => {
  threshold ??= readThreshold();
  if (RANK[level] > threshold) return;
  let line = `${new Date().toISOString()} ${level.toUpperCase()} ${target} ${message}`;
  for (const [k, v] of Object.entries(fields ?? {})) line += ` ${k}=${formatValue(v)}`;
  try {
    Deno.stderr.writeSync(encoder.encode(line + "\n"));
  } catch {
    // stderr closed: logging must never take the service down.
  }
};

/** A sink that drops everything (tests that assert nothing about logs). */
export const nullLog: LogSink = () => {};

const encoder = new TextEncoder();
let threshold: number | undefined;

function readThreshold(): number {
  let v: string | undefined;
  try {
    v = Deno.env.get("CK_LOG")?.trim().toLowerCase();
  } catch {
    v = undefined;
  }
  return v !== undefined && v in RANK ? RANK[v as LogLevel | "off"] : RANK.info;
}

function formatValue(v: string | number | boolean): string {
  const s = String(v);
  return /^[^\s"=]*$/.test(s) && s !== "" ? s : JSON.stringify(s);
}

/**
 * Caps forwarded lines per second (config `log.worker_forward_lines_per_sec`). Lines over the
 * cap are dropped and counted; the next line let through carries the count, so the reader knows
 * what is missing (`dropped=N`).
 *
 * @example Ten lines in one second under a cap of 3
 * ```ts
 * import assert from "node:assert";
 * import { LineRateLimiter } from "./log.ts";
 *
 * let t = 0;
 * const rl = new LineRateLimiter(3, () => t);
 * const out = Array.from({ length: 10 }, () => rl.admit());
 * assert.deepStrictEqual(out.slice(0, 4), [0, 0, 0, undefined]);
 * t = 1000;
 * assert.strictEqual(rl.admit(), 7);
 * ```
 */
export class LineRateLimiter {
  #perSec: number;
  #now: () => number;
  #windowStart = -Infinity;
  #inWindow = 0;
  #dropped = 0;

  /**
   * @param linesPerSec Lines let through per one-second window; 0 drops every line.
   * @param now Monotonic clock in ms.
   */
  constructor(linesPerSec: number, now: () => number = () => performance.now()) {
    this.#perSec = Math.max(0, Math.floor(linesPerSec));
    this.#now = now;
  }

  /** Lines dropped and not yet reported. */
  get dropped(): number {
    return this.#dropped;
  }

  /**
   * Decides one line.
   *
   * @returns `undefined` when the line is dropped; otherwise the number of lines dropped since
   *   the last line let through (0 when none), which the caller appends as `dropped=N`.
   */
  admit(): number | undefined {
    const t = this.#now();
    if (t - this.#windowStart >= 1000) {
      this.#windowStart = t;
      this.#inWindow = 0;
    }
    if (this.#inWindow >= this.#perSec) {
      this.#dropped++;
      return undefined;
    }
    this.#inWindow++;
    const d = this.#dropped;
    this.#dropped = 0;
    return d;
  }
}
