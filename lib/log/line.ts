/**
 * The fleet log line (fleet-logging r2), written and read:
 *
 * ```
 * <RFC 3339 UTC time, ms, Z> <LEVEL padded to 5> <logger>: [<bound k=v…>] <message> <k=v…>
 * 2026-11-30T09:48:23.739Z INFO  synapse.http: request method=POST status=200 total_ms=16.427
 * 2026-11-30T09:48:23.740Z WARN  synapse.worker: [session=cli:42] worker crashed reason=exit
 * ```
 *
 * - `logger` is `<module_id>[.<component>…]`, every segment `[a-z][a-z0-9-]*`, ended by `:`.
 * - The bracket holds the bound context (`session=<issuer>:<id>`, `harness=`, `agent=`, `root=`)
 *   and is omitted when nothing is bound.
 * - A value is quoted when it is empty or contains a space, `"`, `]`, CR, LF or another control
 *   character; inside quotes `\` `"` CR LF are escaped as `\\` `\"` `\r` `\n`, and every other
 *   C0 control, DEL and the Unicode line and paragraph separators (U+2028, U+2029) as `\u00XX`
 *   (`\u2028`). An unquoted value is verbatim.
 * - The message escapes `\`, CR, LF and those controls the same way (unquoted); an empty message
 *   is left out. So no character a caller sent (a model name, a path, a text echoed in an error)
 *   reaches a file raw, and every event is exactly one line for any reader.
 * - No ANSI: escape sequences (CSI, OSC, C1 controls) are stripped from messages, keys and
 *   values, so every event is exactly one line.
 *
 * Pure functions; the credential redactor ({@link ./redact.ts}) runs before
 * {@link formatLogLine}.
 *
 * @module
 */

/** Severity of a log line, most severe first. */
export type LogLevel = "error" | "warn" | "info" | "debug";

/** Fields of a line (`k=v`), in order; an `undefined` value is left out. */
export type LogFields = Readonly<Record<string, string | number | boolean>>;

/** One event, ready to format. */
export interface LogRecord {
  /** When it happened: a `Date` or Unix ms. */
  at: Date | number;
  level: LogLevel;
  /** The full logger name (`synapse.http`); see {@link loggerName}. */
  logger: string;
  message: string;
  /** Event fields, in order. */
  fields?: LogFields | undefined;
  /** Bound context (`session`, `harness`, `agent`, `root`), in order; the bracket. */
  bound?: LogFields | undefined;
}

/** True when `segment` is a logger segment: `[a-z][a-z0-9-]*`. */
export function isLoggerSegment(segment: string): boolean {
  return SEGMENT.test(segment);
}

const SEGMENT = /^[a-z][a-z0-9-]*$/;

/**
 * The logger a target is written under, rooted at the module: a target already rooted at
 * `moduleId` (`synapse`, `synapse.http`) stays; another valid dotted name becomes a component
 * (`perf` → `synapse.perf`); anything else (a segment outside `[a-z][a-z0-9-]*`, such as a
 * model id with `_`) is the bare module id, and {@link loggerFor} keeps the original target in a
 * `target=` field so nothing is lost.
 *
 * @param moduleId The module id, e.g. `synapse`.
 * @param target The target a caller logged with.
 * @returns The logger name.
 */
export function loggerName(moduleId: string, target: string): string {
  return loggerFor(moduleId, target).logger;
}

/**
 * {@link loggerName}, and whether the target was unusable (then `lost` is the original, for a
 * `target=` field).
 */
export function loggerFor(moduleId: string, target: string): { logger: string; lost?: string } {
  if (target === moduleId) return { logger: moduleId };
  const key = `${moduleId}\0${target}`;
  let found = loggerCache.get(key);
  if (found === undefined) {
    found = resolveLogger(moduleId, target);
    // Targets are few (they are written in code); the cache is bounded all the same.
    if (loggerCache.size < 4096) loggerCache.set(key, found);
  }
  return found;
}

const loggerCache = new Map<string, { logger: string; lost?: string }>();

function resolveLogger(moduleId: string, target: string): { logger: string; lost?: string } {
  const segments = target.split(".");
  if (target !== "" && segments.every(isLoggerSegment)) {
    return { logger: segments[0] === moduleId ? target : `${moduleId}.${target}` };
  }
  return target === "" ? { logger: moduleId } : { logger: moduleId, lost: target };
}

/**
 * Formats one event as one r2 line, without its newline.
 *
 * @param record The event; its message, keys and values are written as given (redact first).
 * @returns The line: never contains CR, LF or ESC.
 *
 * @example
 * ```ts
 * import assert from "node:assert";
 * import { formatLogLine } from "./line.ts";
 *
 * assert.strictEqual(
 *   formatLogLine({
 *     at: Date.UTC(2026, 0, 2, 3, 4, 5, 6),
 *     level: "info",
 *     logger: "synapse.http",
 *     message: "request",
 *     bound: { session: "cli:7" },
 *     fields: { path: "/v1/ops/embed.query", note: "two words", n: 3 },
 *   }),
 *   '2026-01-02T03:04:05.006Z INFO  synapse.http: [session=cli:7] request path=/v1/ops/embed.query note="two words" n=3',
 * );
 * ```
 */
export function formatLogLine(record: LogRecord): string {
  const at = typeof record.at === "number" ? new Date(record.at) : record.at;
  let line = `${at.toISOString()} ${LEVEL_COLUMN[record.level]} ${record.logger}:`;
  const bound = record.bound === undefined ? [] : pairs(record.bound);
  if (bound.length > 0) line += ` [${bound.join(" ")}]`;
  if (record.message !== "") line += ` ${escapeMessage(stripAnsi(record.message))}`;
  if (record.fields !== undefined) { for (const p of pairs(record.fields)) line += ` ${p}`; }
  return line;
}

/** The level column: upper case, left-aligned in 5 characters. */
const LEVEL_COLUMN: Record<LogLevel, string> = {
  error: "ERROR",
  warn: "WARN ",
  info: "INFO ",
  debug: "DEBUG",
};

function pairs(fields: LogFields): string[] {
  const out: string[] = [];
  for (const key in fields) {
    const v = fields[key];
    if (v === undefined) continue;
    out.push(`${formatKey(key)}=${formatLogValue(v)}`);
  }
  return out;
}

/** A key as written: ANSI stripped; anything but `[A-Za-z0-9_.-]` becomes `_` (never empty). */
function formatKey(key: string): string {
  if (/^[A-Za-z0-9_.-]+$/.test(key)) return key;
  const k = stripAnsi(key).replace(/[^A-Za-z0-9_.-]/g, "_");
  return k === "" ? "_" : k;
}

/**
 * One value as written: verbatim, or quoted when it is empty or contains a space, `"`, `]`, CR
 * or LF, with `\` `"` CR LF escaped inside the quotes. ANSI is stripped first.
 *
 * @param value A field value; numbers and booleans as `String()` writes them.
 * @returns The value text.
 *
 * @example
 * ```ts
 * import assert from "node:assert";
 * import { formatLogValue } from "./line.ts";
 *
 * assert.strictEqual(formatLogValue("a]b"), '"a]b"');
 * assert.strictEqual(formatLogValue(""), '""');
 * assert.strictEqual(formatLogValue("C:\\dir"), "C:\\dir");
 * ```
 */
export function formatLogValue(value: string | number | boolean): string {
  const s = typeof value === "string" ? stripAnsi(value) : String(value);
  if (s !== "" && !NEEDS_QUOTES.test(s)) return s;
  return `"${s.replace(VALUE_ESCAPED, escapeChar)}"`;
}

// Built from strings: the control characters are the point here (lint's no-control-regex).
const CONTROLS = "\\x00-\\x1f\\x7f\\u2028\\u2029";
const NEEDS_QUOTES = new RegExp(`[ "\\]${CONTROLS}]`);
const VALUE_ESCAPED = new RegExp(`[\\\\"${CONTROLS}]`, "g");
const MESSAGE_ESCAPED = new RegExp(`[\\\\${CONTROLS}]`, "g");
const MESSAGE_NEEDS_ESCAPE = new RegExp(`[\\\\${CONTROLS}]`);

/** One escaped character: `\\` `\"` `\r` `\n`, else `\uXXXX`. */
function escapeChar(c: string): string {
  return ESCAPES[c] ?? `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`;
}
const ESCAPES: Record<string, string> = { "\\": "\\\\", '"': '\\"', "\r": "\\r", "\n": "\\n" };

/**
 * The message escape: `\`, CR, LF and the other controls, so a literal `\n` cannot read as a
 * break and no control reaches the line raw.
 */
function escapeMessage(message: string): string {
  return MESSAGE_NEEDS_ESCAPE.test(message)
    ? message.replace(MESSAGE_ESCAPED, escapeChar)
    : message;
}

/**
 * Removes ANSI escape sequences: CSI (`ESC [` … final byte), OSC (`ESC ]` … BEL or `ESC \`),
 * any other `ESC x` pair, a lone ESC, C1 CSI/OSC (`U+009B`, `U+009D`) with their bodies, and
 * the other C1 controls.
 *
 * @param text Any text.
 * @returns The text without them (the same string when there were none).
 */
export function stripAnsi(text: string): string {
  if (!HAS_ESCAPE.test(text)) return text;
  return text.replace(ANSI, "").replace(C1, "");
}

// Built from strings: the escape characters are the point here (lint's no-control-regex).
// deno-lint-ignore no-control-regex
const HAS_ESCAPE = new RegExp("[\\x1b\\x80-\\x9f]");
const C1 = new RegExp("[\\x80-\\x9f]", "g");
const ANSI = new RegExp(
  [
    "\\x1b\\[[\\x20-\\x3f]*[\\x40-\\x7e]?", // CSI
    "\\x1b\\][^\\x07\\x1b]*(?:\\x07|\\x1b\\\\)?", // OSC, ended by BEL or ST
    "\\x1b[\\s\\S]?", // any other escape pair, or a lone ESC
    "\\x9b[\\x20-\\x3f]*[\\x40-\\x7e]?", // C1 CSI
    "\\x9d[^\\x07\\x9c]*[\\x07\\x9c]?", // C1 OSC
  ].join("|"),
  "g",
);
// deno-lint-ignore no-control-regex
const ANSI_START = new RegExp("[\\x1b\\x9b]");

/** A line read back by {@link parseLogLine}. */
export interface ParsedLogLine {
  /** The event time. */
  at: Date;
  /** The level (`trace` is valid in the fleet's files, though Synapse writes none). */
  level: LogLevel | "trace";
  /** The full logger name. */
  logger: string;
  /** Its first segment. */
  moduleId: string;
  /** The bound pairs, decoded, in order; absent when there was no bracket. */
  bound?: [key: string, value: string][];
  /** The message: the text before the first ` key=value` field, unescaped. */
  message: string;
  /** The fields after the message, decoded, in order. */
  fields: [key: string, value: string][];
}

/**
 * Reads one r2 line (a merge or filter tool's view; the tests use it to check what was
 * written).
 *
 * The message ends where the first ` key=value` token starts (key `[A-Za-z0-9_.-]+`), so a
 * message containing such a token reads as fields from there on.
 *
 * @param line One line, without its newline.
 * @returns The parsed columns.
 * @throws {SyntaxError} naming the rule broken: `ansi_forbidden`, `line_break`,
 *   `timestamp_not_utc_z`, `timestamp_precision`, `timestamp_invalid`, `level_invalid`,
 *   `level_column_width`, `logger_not_terminated`, `logger_segment_grammar`,
 *   `bound_unterminated`, `empty_bound_bracket`, `value_unterminated`.
 */
export function parseLogLine(line: string): ParsedLogLine {
  const fail = (reason: string): never => {
    throw new SyntaxError(
      `Cannot parse log line: ${reason}: ${JSON.stringify(line.slice(0, 120))}`,
    );
  };
  if (ANSI_START.test(line)) fail("ansi_forbidden");
  if (/[\r\n]/.test(line)) fail("line_break");
  const sp = line.indexOf(" ");
  if (sp < 0) fail("timestamp_missing");
  const ts = line.slice(0, sp);
  if (!ts.endsWith("Z")) fail("timestamp_not_utc_z");
  if (ts.length !== 24) fail("timestamp_precision");
  const at = new Date(ts);
  if (Number.isNaN(at.getTime()) || at.toISOString() !== ts) fail("timestamp_invalid");
  const rest = line.slice(sp + 1);
  const level = (["TRACE", "DEBUG", "INFO ", "WARN ", "ERROR"] as const).find((l) =>
    rest.startsWith(`${l} `)
  );
  if (level === undefined) {
    fail(/^(TRACE|DEBUG|INFO|WARN|ERROR)/.test(rest) ? "level_column_width" : "level_invalid");
  }
  const afterLevel = rest.slice(6);
  const lsp = afterLevel.indexOf(" ");
  const loggerToken = lsp < 0 ? afterLevel : afterLevel.slice(0, lsp);
  let body = lsp < 0 ? "" : afterLevel.slice(lsp + 1);
  if (!loggerToken.endsWith(":")) fail("logger_not_terminated");
  const logger = loggerToken.slice(0, -1);
  if (logger === "" || !logger.split(".").every(isLoggerSegment)) fail("logger_segment_grammar");
  const parsed: ParsedLogLine = {
    at,
    level: level!.trim().toLowerCase() as ParsedLogLine["level"],
    logger,
    moduleId: logger.split(".")[0]!,
    message: "",
    fields: [],
  };
  if (body.startsWith("[")) {
    const { tokens, end } = readPairs(body, 1, "]", fail);
    if (end >= body.length) fail("bound_unterminated");
    if (tokens.length === 0) fail("empty_bound_bracket");
    parsed.bound = tokens.map((t) => t.pair ?? fail("bound_not_key_value"));
    body = body.slice(end + 1).replace(/^ /, "");
  }
  const { tokens } = readPairs(body, 0, undefined, fail);
  const first = tokens.findIndex((t) => t.pair !== undefined);
  const messageEnd = first < 0 ? body.length : tokens[first]!.start;
  parsed.message = unescapeMessage(body.slice(0, messageEnd).replace(/ $/, ""));
  if (first >= 0) {
    parsed.fields = tokens.slice(first).map((t) => t.pair ?? fail("field_not_key_value"));
  }
  return parsed;
}

interface Token {
  start: number;
  pair?: [string, string];
}

/**
 * Splits `text` from `from` into space-separated tokens, honouring quoted values, until `close`
 * (outside quotes) or the end.
 */
function readPairs(
  text: string,
  from: number,
  close: string | undefined,
  fail: (reason: string) => never,
): { tokens: Token[]; end: number } {
  const tokens: Token[] = [];
  let i = from;
  while (i < text.length) {
    if (text[i] === " ") {
      i++;
      continue;
    }
    if (close !== undefined && text[i] === close) return { tokens, end: i };
    const start = i;
    const m = /^([A-Za-z0-9_.-]+)=/.exec(text.slice(i, i + 200));
    if (m !== null) {
      i += m[0].length;
      let value = "";
      if (text[i] === '"') {
        i++;
        for (;;) {
          if (i >= text.length) fail("value_unterminated");
          const c = text[i]!;
          if (c === '"') {
            i++;
            break;
          }
          if (c === "\\") {
            const n = text[i + 1];
            const hex = n === "u" ? /^[0-9a-fA-F]{4}/.exec(text.slice(i + 2, i + 6)) : null;
            if (hex !== null) {
              value += String.fromCharCode(parseInt(hex[0], 16));
              i += 6;
              continue;
            }
            value += n === "n" ? "\n" : n === "r" ? "\r" : n ?? "";
            i += 2;
            continue;
          }
          value += c;
          i++;
        }
      } else {
        while (i < text.length && text[i] !== " " && !(close !== undefined && text[i] === close)) {
          value += text[i];
          i++;
        }
      }
      tokens.push({ start, pair: [m[1]!, value] });
    } else {
      while (i < text.length && text[i] !== " " && !(close !== undefined && text[i] === close)) i++;
      tokens.push({ start });
    }
  }
  return { tokens, end: i };
}

function unescapeMessage(text: string): string {
  return text.replace(
    /\\(?:([\\rn])|u([0-9a-fA-F]{4}))/g,
    (_, c: string | undefined, hex: string | undefined) =>
      hex !== undefined
        ? String.fromCharCode(parseInt(hex, 16))
        : c === "n"
        ? "\n"
        : c === "r"
        ? "\r"
        : "\\",
  );
}
