/**
 * The module log: one line per event, `<ISO time> <LEVEL> <target> <message> k=v…`, on stderr,
 * filtered by `CK_LOG`. `CK_LOG` follows the RUST_LOG grammar of the fleet log: a default level
 * and per-target levels, comma-separated — `debug`, `warn,synapse.http=info`,
 * `info,synapse.http=debug`; levels `off`, `error`, `warn`, `info` (the default when unset or
 * empty), `debug` (`trace` reads as `debug`: there are no trace lines). The most specific target
 * wins (`synapse.http=debug` covers `synapse.http` and `synapse.http.x`). An invalid value is
 * refused at boot ({@link readLogFilter}); the sink itself never throws. Worker log lines arrive
 * here through {@link LineRateLimiter} so a chatty worker cannot flood it.
 *
 * @module
 */

/** Severity of a log line, most severe first. */
export type LogLevel = "error" | "warn" | "info" | "debug";

/** A level of `CK_LOG`: a {@link LogLevel} or `off`. */
export type LogThreshold = LogLevel | "off";

const RANK: Record<LogThreshold, number> = { off: -1, error: 0, warn: 1, info: 2, debug: 3 };

/** Where log lines go: `(level, target, message, fields)`. */
export type LogSink = (
  level: LogLevel,
  target: string,
  message: string,
  fields?: Record<string, string | number | boolean>,
) => void;

/** A parsed `CK_LOG`: which lines are written. */
export interface LogFilter {
  /** Level of targets no directive names. */
  readonly defaultLevel: LogThreshold;
  /** Per-target levels (`synapse.http` → `debug`). */
  readonly targets: ReadonlyMap<string, LogThreshold>;
  /** True when a line of `level` from `target` is written. */
  enabled(level: LogLevel, target: string): boolean;
}

const TARGET = /^[a-z][a-z0-9_-]*(\.[a-z][a-z0-9_-]*)*$/;

/**
 * Parses a `CK_LOG` value (RUST_LOG grammar): comma-separated directives, each a level (the
 * default) or `target=level`. Levels are case-insensitive; `trace` reads as `debug`.
 *
 * @param spec The value; undefined or blank means `info`.
 * @returns The filter.
 * @throws {SyntaxError} "Cannot use CK_LOG '…': …; use …" naming the bad directive.
 *
 * @example
 * ```ts
 * import assert from "node:assert";
 * import { parseLogFilter } from "./log.ts";
 *
 * const f = parseLogFilter("warn,synapse.http=debug");
 * assert.ok(f.enabled("debug", "synapse.http"));
 * assert.ok(!f.enabled("info", "synapse.ops"));
 * assert.throws(() => parseLogFilter("verbose"), SyntaxError);
 * ```
 */
export function parseLogFilter(spec: string | undefined): LogFilter {
  let defaultLevel: LogThreshold = "info";
  const targets = new Map<string, LogThreshold>();
  for (const raw of (spec ?? "").split(",")) {
    const directive = raw.trim();
    if (directive === "") continue;
    const eq = directive.indexOf("=");
    const target = eq < 0 ? undefined : directive.slice(0, eq).trim();
    const level = levelOf(eq < 0 ? directive : directive.slice(eq + 1).trim());
    if (level === undefined) {
      throw new SyntaxError(
        `Cannot use CK_LOG '${spec}': '${directive}' is not a level; use off, error, warn, info or debug, optionally per target (e.g. info,synapse.http=debug)`,
      );
    }
    if (target === undefined) defaultLevel = level;
    else if (TARGET.test(target)) targets.set(target, level);
    else {
      throw new SyntaxError(
        `Cannot use CK_LOG '${spec}': '${target}' is not a log target; a target is dot-separated lowercase words (e.g. synapse.http)`,
      );
    }
  }
  return {
    defaultLevel,
    targets,
    enabled(level: LogLevel, target: string): boolean {
      let best: string | undefined;
      for (const t of targets.keys()) {
        if ((target === t || target.startsWith(t + ".")) && t.length > (best?.length ?? -1)) {
          best = t;
        }
      }
      const threshold = best === undefined ? defaultLevel : targets.get(best)!;
      return RANK[level] <= RANK[threshold];
    },
  };
}

function levelOf(word: string): LogThreshold | undefined {
  const w = word.toLowerCase();
  if (w === "trace") return "debug";
  return Object.hasOwn(RANK, w) ? w as LogThreshold : undefined;
}

/**
 * The log filter of an environment's `CK_LOG`. Boot calls it so an invalid value is refused
 * before anything starts, instead of silently meaning `info`.
 *
 * @param env Where to read `CK_LOG`. @default Deno.env
 * @returns The filter (`info` when unset).
 * @throws {SyntaxError} for an invalid value, as {@link parseLogFilter}.
 */
export function readLogFilter(env: { get(key: string): string | undefined } = Deno.env): LogFilter {
  let v: string | undefined;
  try {
    v = env.get("CK_LOG");
  } catch {
    v = undefined; // no env permission: the default
  }
  return parseLogFilter(v);
}

/**
 * One log line, without its newline: `<ISO time> <LEVEL> <target> <message> k=v…`. A value is
 * written bare when it is printable ASCII without spaces, quotes or `=`; otherwise as a JSON
 * string, so control characters, line breaks and lone surrogates are escaped and the line stays
 * one line.
 *
 * @param at The time of the event. @default now
 */
export function formatLogLine(
  level: LogLevel,
  target: string,
  message: string,
  fields?: Record<string, string | number | boolean>,
  at: Date = new Date(),
): string {
  let line = `${at.toISOString()} ${level.toUpperCase()} ${target} ${message}`;
  for (const [k, v] of Object.entries(fields ?? {})) line += ` ${k}=${formatValue(v)}`;
  return line;
}

/**
 * The default sink: stderr, filtered by `CK_LOG` (read once, at the first call). An invalid
 * `CK_LOG` that boot did not refuse (an embedder's process) means `info`, with one warning.
 *
 * @example
 * ```ts
 * import { stderrLog } from "./log.ts";
 * stderrLog("debug", "test", "not shown unless CK_LOG=debug");
 * ```
 */
export const stderrLog: LogSink = (level, target, message, fields) => {
  filter ??= defaultFilter();
  if (!filter.enabled(level, target)) return;
  writeLine(formatLogLine(level, target, message, fields));
};

/** A sink that drops everything (tests that assert nothing about logs). */
export const nullLog: LogSink = () => {};

const encoder = new TextEncoder();
let filter: LogFilter | undefined;

function defaultFilter(): LogFilter {
  try {
    return readLogFilter();
  } catch (err) {
    writeLine(formatLogLine("warn", "synapse.log", `${(err as Error).message}; logging at info`));
    return parseLogFilter("info");
  }
}

function writeLine(line: string): void {
  try {
    Deno.stderr.writeSync(encoder.encode(line + "\n"));
  } catch {
    // stderr closed: logging must never take the service down.
  }
}

function formatValue(v: string | number | boolean): string {
  const s = String(v);
  return /^[!#-<>-~]+$/.test(s) ? s : JSON.stringify(s);
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
