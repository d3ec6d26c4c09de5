/**
 * The module log: one r2 fleet line per event ({@link ./line.ts}), filtered by `CK_LOG` and
 * redacted ({@link ./redact.ts}) before it is formatted. {@link stderrLog} writes to stderr;
 * `ck-synapse serve` writes the same lines to the module's day file as well
 * ({@link ./fleet_log.ts}).
 *
 * `CK_LOG` follows the RUST_LOG grammar over the logger hierarchy: comma-separated directives,
 * each a level (the default for every logger) or `<logger>=<level>` — `debug`,
 * `warn,synapse.http=info`, `info,synapse.perf=debug`. Levels are `off`, `error`, `warn`, `info`
 * (the default when unset or empty) and `debug`, case-insensitive (`trace` reads as `debug`:
 * Synapse writes no trace lines). A directive names a logger prefix on whole segments
 * (`synapse.http` covers `synapse.http` and `synapse.http.x`, not `synapse.httpx`) and the most
 * specific match wins. Logger names are full: `perf=debug` names a logger `perf`, not
 * `synapse.perf` (the subc daemon expands a bare key `k` of its `log` block to `<module>.k`
 * before it sets `CK_LOG`). A malformed value is refused at boot by the HTTP door and the CLI
 * (`onInvalid: "refuse"`), and means `info` plus one stderr warning under the bus
 * (`onInvalid: "warn"`; docs/subc.md "Serving as the `synapse` module"); the sink itself never
 * throws.
 *
 * Worker log lines arrive here through {@link LineRateLimiter} so a chatty worker cannot flood
 * it.
 *
 * @module
 */
import { envLookup, type EnvSource } from "../paths.ts";
import { formatLogLine, type LogFields, loggerFor, type LogLevel } from "./line.ts";
import { redactFields, redactText } from "./redact.ts";

export type { LogFields, LogLevel } from "./line.ts";

/** A level of `CK_LOG`: a {@link LogLevel} or `off`. */
export type LogThreshold = LogLevel | "off";

const RANK: Record<LogThreshold, number> = { off: -1, error: 0, warn: 1, info: 2, debug: 3 };

/**
 * Where log lines go: `(level, target, message, fields, bound)`. `target` is the logger
 * (`synapse.http`; see {@link loggerFor} for other names); `bound` is the context written in
 * the bracket (`session`, `harness`, `agent`, `root`), usually added by {@link withBound}.
 */
export type LogSink = (
  level: LogLevel,
  target: string,
  message: string,
  fields?: LogFields,
  bound?: LogFields,
) => void;

/** The module id every logger is rooted at. */
export const MODULE_ID = "synapse";

/**
 * The loggers Synapse writes (docs/observability.md "Logging"): `synapse` (process start and stop),
 * `synapse.http` (one line per request), `synapse.ops` (operation internals and bugs),
 * `synapse.jobs` (durable jobs), `synapse.models` (model loads), `synapse.worker` (engine
 * workers: forwarded worker output, crashes), `synapse.perf` (the perf sampler), `synapse.log`
 * (the log itself: a malformed `CK_LOG`, a file it cannot write), `synapse.panic` (an uncaught
 * error, one line per line of its stack), `synapse.subc` (the subc bus: registration, routes,
 * one line per request, how the session ended), `synapse.probe` (probes and catalog
 * self-checks), `synapse.alias` (alias rows declared and retracted, by an operator or the probe).
 */
export const LOGGERS = [
  "synapse",
  "synapse.http",
  "synapse.ops",
  "synapse.jobs",
  "synapse.models",
  "synapse.worker",
  "synapse.perf",
  "synapse.log",
  "synapse.panic",
  "synapse.subc",
  "synapse.probe",
  "synapse.alias",
] as const;

/** What to do with a malformed `CK_LOG*` value. */
export type InvalidLogEnv = "refuse" | "warn";

/** Options of {@link parseLogFilter}, {@link readLogFilter} and {@link readLogSettings}. */
export interface LogEnvOptions {
  /**
   * `refuse`: throw {@link LogEnvError} (boot of `serve --http` and the CLI; docs/config.md
   * "Environment variables"); `warn`: use the default and report the problem in `invalid` /
   * `warnings` (under the bus; docs/observability.md "Logging").
   *
   * @default {"refuse"}
   */
  onInvalid?: InvalidLogEnv;
}

/** A malformed `CK_LOG`, `CK_LOG_MAX_AGE_DAYS` or `CK_LOG_ALARM_SEGMENT_MB`. */
export class LogEnvError extends SyntaxError {
  /** The variable. */
  readonly variable: string;

  /**
   * @param variable The variable, e.g. `CK_LOG`.
   * @param message "Cannot use CK_LOG '…': …; use …".
   */
  constructor(variable: string, message: string) {
    super(message);
    this.name = "LogEnvError";
    this.variable = variable;
  }
}

/** A parsed `CK_LOG`: which lines are written. */
export interface LogFilter {
  /** Level of loggers no directive names. */
  readonly defaultLevel: LogThreshold;
  /** Per-logger levels (`synapse.http` → `debug`). */
  readonly targets: ReadonlyMap<string, LogThreshold>;
  /** With `onInvalid: "warn"`, why the value was replaced by `info`. */
  readonly invalid?: string;
  /** True when a line of `level` from `logger` is written. */
  enabled(level: LogLevel, logger: string): boolean;
}

const LOGGER = /^[a-z][a-z0-9-]*(\.[a-z][a-z0-9-]*)*$/;

/**
 * Parses a `CK_LOG` value (RUST_LOG grammar over the logger hierarchy): comma-separated
 * directives, each a level (the default) or `logger=level`, the logger dot-separated segments
 * `[a-z][a-z0-9-]*`. Levels are case-insensitive; `trace` reads as `debug`; blank directives are
 * skipped; a later directive for the same logger wins.
 *
 * @param spec The value; undefined or blank means `info`.
 * @param options What a malformed value does. @default {onInvalid: "refuse"}
 * @returns The filter; with `onInvalid: "warn"`, a malformed value gives `info` with `invalid`
 *   set.
 * @throws {LogEnvError} (a SyntaxError) "Cannot use CK_LOG '…': …; use …" naming the bad
 *   directive, unless `onInvalid` is `"warn"`.
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
 * assert.strictEqual(parseLogFilter("verbose", { onInvalid: "warn" }).defaultLevel, "info");
 * ```
 */
export function parseLogFilter(spec: string | undefined, options: LogEnvOptions = {}): LogFilter {
  try {
    return parseStrict(spec);
  } catch (err) {
    if (options.onInvalid !== "warn" || !(err instanceof LogEnvError)) throw err;
    return makeFilter("info", new Map(), `${err.message}; logging at info`);
  }
}

function parseStrict(spec: string | undefined): LogFilter {
  let defaultLevel: LogThreshold = "info";
  const targets = new Map<string, LogThreshold>();
  for (const raw of (spec ?? "").split(",")) {
    const directive = raw.trim();
    if (directive === "") continue;
    const eq = directive.indexOf("=");
    const target = eq < 0 ? undefined : directive.slice(0, eq).trim();
    const level = levelOf(eq < 0 ? directive : directive.slice(eq + 1).trim());
    if (level === undefined) {
      throw new LogEnvError(
        "CK_LOG",
        `Cannot use CK_LOG '${spec}': '${directive}' is not a level; use off, error, warn, info or debug, optionally per logger (e.g. info,synapse.http=debug)`,
      );
    }
    if (target === undefined) defaultLevel = level;
    else if (LOGGER.test(target)) targets.set(target, level);
    else {
      throw new LogEnvError(
        "CK_LOG",
        `Cannot use CK_LOG '${spec}': '${target}' is not a log target; a logger is dot-separated segments of lowercase letters, digits and '-' (e.g. synapse.http)`,
      );
    }
  }
  return makeFilter(defaultLevel, targets, undefined);
}

function makeFilter(
  defaultLevel: LogThreshold,
  targets: Map<string, LogThreshold>,
  invalid: string | undefined,
): LogFilter {
  // Loggers are few; their thresholds are cached.
  const cache = new Map<string, number>();
  const threshold = (logger: string): number => {
    let rank = cache.get(logger);
    if (rank !== undefined) return rank;
    let best: string | undefined;
    for (const t of targets.keys()) {
      if ((logger === t || logger.startsWith(t + ".")) && t.length > (best?.length ?? -1)) {
        best = t;
      }
    }
    rank = RANK[best === undefined ? defaultLevel : targets.get(best)!];
    if (cache.size < 1024) cache.set(logger, rank);
    return rank;
  };
  return {
    defaultLevel,
    targets,
    ...(invalid === undefined ? {} : { invalid }),
    enabled(level: LogLevel, logger: string): boolean {
      return RANK[level] <= threshold(logger);
    },
  };
}

function levelOf(word: string): LogThreshold | undefined {
  const w = word.toLowerCase();
  if (w === "trace") return "debug";
  return Object.hasOwn(RANK, w) ? w as LogThreshold : undefined;
}

/**
 * The log filter of an environment's `CK_LOG`.
 *
 * @param env Where to read `CK_LOG` (a `get` method, or an {@link EnvSource}). @default Deno.env
 * @param options What a malformed value does. @default {onInvalid: "refuse"}
 * @returns The filter (`info` when unset).
 * @throws {LogEnvError} for a malformed value, as {@link parseLogFilter}.
 */
export function readLogFilter(
  env: { get(key: string): string | undefined } | EnvSource = Deno.env,
  options: LogEnvOptions = {},
): LogFilter {
  return parseLogFilter(readVar(env, "CK_LOG"), options);
}

/**
 * Log settings of the environment (docs/observability.md "Logging"; under the bus the daemon sets
 * them from its `log` block, docs/subc.md "Serving as the `synapse` module").
 */
export interface LogSettings {
  /** `CK_LOG`. */
  filter: LogFilter;
  /** `CK_LOG_MAX_AGE_DAYS`: day files older than today minus this are pruned. @default 14 */
  maxAgeDays: number;
  /** `CK_LOG_ALARM_SEGMENT_MB`: one stderr alarm when today's file grows past it. @default 256 */
  alarmSegmentMb: number;
  /** With `onInvalid: "warn"`: one message per malformed variable (its default was used). */
  warnings: string[];
}

/** Default of `CK_LOG_MAX_AGE_DAYS`. */
export const DEFAULT_LOG_MAX_AGE_DAYS = 14;
/** Default of `CK_LOG_ALARM_SEGMENT_MB`. */
export const DEFAULT_LOG_ALARM_SEGMENT_MB = 256;

/**
 * Reads `CK_LOG`, `CK_LOG_MAX_AGE_DAYS` (whole days, 0–36500; 0 keeps today's file only) and
 * `CK_LOG_ALARM_SEGMENT_MB` (whole MiB, 0–1048576). Empty counts as unset.
 *
 * @param env Where to read them. @default Deno.env
 * @param options What a malformed value does. @default {onInvalid: "refuse"}
 * @returns The settings.
 * @throws {LogEnvError} naming the first malformed variable, unless `onInvalid` is `"warn"`.
 */
export function readLogSettings(
  env: { get(key: string): string | undefined } | EnvSource = Deno.env,
  options: LogEnvOptions = {},
): LogSettings {
  const warnings: string[] = [];
  const filter = readLogFilter(env, options);
  if (filter.invalid !== undefined) warnings.push(filter.invalid);
  const whole = (name: string, fallback: number, max: number, unit: string): number => {
    const v = readVar(env, name);
    if (v === undefined) return fallback;
    if (/^\d+$/.test(v) && Number(v) <= max) return Number(v);
    const e = new LogEnvError(
      name,
      `Cannot use ${name} '${v}': not a whole number of ${unit} from 0 to ${max}; unset it for the default (${fallback})`,
    );
    if (options.onInvalid !== "warn") throw e;
    warnings.push(`${e.message}; using ${fallback}`);
    return fallback;
  };
  return {
    filter,
    maxAgeDays: whole("CK_LOG_MAX_AGE_DAYS", DEFAULT_LOG_MAX_AGE_DAYS, 36_500, "days"),
    alarmSegmentMb: whole(
      "CK_LOG_ALARM_SEGMENT_MB",
      DEFAULT_LOG_ALARM_SEGMENT_MB,
      1_048_576,
      "MiB",
    ),
    warnings,
  };
}

function readVar(
  env: { get(key: string): string | undefined } | EnvSource,
  name: string,
): string | undefined {
  try {
    const get = typeof env === "object" && typeof env.get === "function"
      ? (n: string) => (env as { get(key: string): string | undefined }).get(n)
      : envLookup(env as EnvSource);
    const v = get(name);
    return v === "" ? undefined : v;
  } catch {
    return undefined; // no env permission: the default
  }
}

/**
 * A sink that adds bound context to every line it passes on (the bracket of the r2 line):
 * `session=<issuer>:<id>`, `harness=`, `agent=`, `root=`. Context bound later (closer to the
 * call) comes after, and wins for the same key.
 *
 * @param log The sink to write to.
 * @param bound The context, e.g. `{session: "claude:abc"}`.
 * @returns A sink.
 */
export function withBound(log: LogSink, bound: LogFields): LogSink {
  return function boundLog(level, target, message, fields, more) {
    log(level, target, message, fields, more === undefined ? bound : { ...bound, ...more });
  };
}

/**
 * A sink that writes every line under one logger, with `fields` first: how engine output is
 * logged under `synapse.worker` (`retarget(log, "synapse.worker", {engine: "llama", model})`)
 * whatever target the engine uses.
 *
 * @param log The sink to write to.
 * @param logger The logger, e.g. `synapse.worker`.
 * @param fields Fields put before each line's own.
 * @returns A sink.
 */
export function retarget(log: LogSink, logger: string, fields: LogFields = {}): LogSink {
  return function retargeted(level, _target, message, own, bound) {
    log(level, logger, message, own === undefined ? fields : { ...fields, ...own }, bound);
  };
}

/**
 * One event as its r2 line: the logger from the target ({@link loggerFor}; an unusable target
 * is kept in a `target=` field), the message and every value redacted, then formatted.
 *
 * @param level Its level.
 * @param target The target the caller logged with.
 * @param message The message.
 * @param fields Event fields.
 * @param bound Bound context.
 * @param at When. @default now
 * @returns The line, without its newline.
 */
export function renderLogEvent(
  level: LogLevel,
  target: string,
  message: string,
  fields?: LogFields,
  bound?: LogFields,
  at: Date | number = Date.now(),
): string {
  const { logger, lost } = loggerFor(MODULE_ID, target);
  const all = lost === undefined ? fields : { target: lost, ...fields };
  return formatLogLine({
    at,
    level,
    logger,
    message: redactText(message),
    fields: all === undefined ? undefined : redactFields(all),
    bound: bound === undefined ? undefined : redactFields(bound),
  });
}

/**
 * Logs an uncaught error the fleet's way (docs/observability.md "Logging"): one `synapse.panic`
 * line at `error` per line of its text (the stack, or the message), trimmed, blank lines skipped.
 * `serve` calls it from its `error` and `unhandledrejection` listeners; the process then dies as
 * it would have.
 *
 * @param log Where to write.
 * @param err What was thrown.
 */
export function logPanic(log: LogSink, err: unknown): void {
  const text = err instanceof Error
    ? err.stack ?? `${err.name}: ${err.message}`
    : typeof err === "string"
    ? err
    : Deno.inspect(err);
  for (const line of text.split(/\r?\n/)) {
    const t = line.trim();
    if (t !== "") log("error", "synapse.panic", t);
  }
}

/** The logger an event of `target` is filtered and written under. */
export function loggerOf(target: string): string {
  return loggerFor(MODULE_ID, target).logger;
}

/**
 * The default sink: r2 lines on stderr, filtered by `CK_LOG` (read once, at the first call). A
 * malformed `CK_LOG` that boot did not refuse (an embedder's process) means `info`, with one
 * warning.
 *
 * @example
 * ```ts
 * import { stderrLog } from "./log.ts";
 * stderrLog("debug", "synapse.ops", "not shown unless CK_LOG=debug");
 * ```
 */
export const stderrLog: LogSink = (level, target, message, fields, bound) => {
  filter ??= defaultFilter();
  if (!filter.enabled(level, loggerOf(target))) return;
  writeStderrLine(renderLogEvent(level, target, message, fields, bound));
};

/** A sink that drops everything (tests that assert nothing about logs). */
export const nullLog: LogSink = () => {};

const encoder = new TextEncoder();
let filter: LogFilter | undefined;

function defaultFilter(): LogFilter {
  const f = readLogFilter(Deno.env, { onInvalid: "warn" });
  if (f.invalid !== undefined) writeStderrLine(renderLogEvent("warn", "synapse.log", f.invalid));
  return f;
}

/**
 * Writes one line and its newline to stderr in one write; never throws (a closed stderr must not
 * take the service down).
 *
 * @param line The line, without its newline.
 */
export function writeStderrLine(line: string): void {
  try {
    const bytes = encoder.encode(line + "\n");
    let off = 0;
    while (off < bytes.length) off += Deno.stderr.writeSync(bytes.subarray(off));
  } catch {
    // stderr closed: logging must never take the service down.
  }
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
