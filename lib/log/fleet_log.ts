/**
 * The log of a serving process (fleet-logging r2): every event, filtered by `CK_LOG` and
 * redacted, goes as one r2 line to the module's day file ({@link LogDayFile}) and to stderr.
 * `ck-synapse serve` opens one; an embedded instance logs to stderr only ({@link stderrLog}).
 *
 * A file that cannot be opened or written never stops the service: the first failure is
 * reported once on stderr, later ones are counted ({@link FleetLog.swallowedWrites}), and the
 * lines still reach stderr. The file is tried again a minute ({@link FILE_RETRY_MS}) later.
 *
 * @module
 */
import { type EnvSource, synapseDataDir } from "../paths.ts";
import { LogDayFile } from "./day_file.ts";
import {
  type LogEnvOptions,
  type LogFilter,
  loggerOf,
  type LogSettings,
  type LogSink,
  MODULE_ID,
  readLogSettings,
  renderLogEvent,
  writeStderrLine,
} from "./log.ts";

/** How long the log waits after a failed file write before it tries the file again, ms. */
export const FILE_RETRY_MS = 60_000;

/** Options of {@link createFleetLog}. */
export interface FleetLogOptions extends LogEnvOptions {
  /** Environment of `CK_LOG*` and the data home. @default Deno.env */
  env?: EnvSource | undefined;
  /**
   * The logs directory; undefined with `file: false`.
   * @default `<data_home>/cortexkit/synapse/logs`
   */
  logsDir?: string;
  /** Write the day file. @default true */
  file?: boolean;
  /** Write stderr too. @default true */
  stderr?: boolean;
  /** Wall clock, Unix ms (line times and the day file's day). @default Date.now */
  now?: () => number;
  /** Where stderr lines go (tests). @default one write to the process's stderr */
  writeStderr?: (line: string) => void;
}

/** A serving process's log; dispose closes the file. */
export interface FleetLog extends Disposable {
  /** The sink to hand to {@link createSynapse} and the doors. */
  readonly log: LogSink;
  /** The `CK_LOG*` settings in force. */
  readonly settings: LogSettings;
  /** `settings.filter`. */
  readonly filter: LogFilter;
  /** The day file, when `file` is on. */
  readonly dayFile: LogDayFile | undefined;
  /** Lines the day file failed to take (each also went to stderr when `stderr` is on). */
  readonly swallowedWrites: number;
  /** True after {@link dispose}. */
  readonly disposed: boolean;
  /**
   * Opens today's file now (directory, pruning) instead of at the first line; a failure is
   * reported like a failed write.
   */
  open(): void;
  /** Closes the day file; later lines go to stderr only. Idempotent. */
  dispose(): void;
}

/**
 * Reads the `CK_LOG*` settings and makes the log (module doc). The file is opened at the first
 * line or {@link FleetLog.open}, so a boot refused later creates nothing.
 *
 * With `onInvalid: "warn"` each malformed variable is reported as one `synapse.log` warning on
 * stderr, now.
 *
 * @param options Environment, directory, sinks, clock.
 * @returns The log.
 * @throws {LogEnvError} for a malformed `CK_LOG`, `CK_LOG_MAX_AGE_DAYS` or
 *   `CK_LOG_ALARM_SEGMENT_MB` (unless `onInvalid` is `"warn"`).
 */
export function createFleetLog(options: FleetLogOptions = {}): FleetLog {
  const env = options.env ?? ((name: string) => Deno.env.get(name));
  const settings = readLogSettings(env, options);
  const now = options.now ?? Date.now;
  const toStderr = options.writeStderr ?? writeStderrLine;
  const stderr = options.stderr ?? true;
  const dayFile = options.file === false ? undefined : new LogDayFile(
    options.logsDir ?? `${synapseDataDir(env)}/logs`,
    MODULE_ID,
    {
      maxAgeDays: settings.maxAgeDays,
      alarmSegmentMb: settings.alarmSegmentMb,
      now,
      onAlarm: (message) => toStderr(renderLogEvent("warn", "synapse.log", message, {}, {}, now())),
    },
  );
  let swallowed = 0;
  let disposed = false;
  let reported = false;
  // After a failure the file is tried again a minute later, not at every line.
  let retryAt = -Infinity;
  const fileFailed = (err: unknown, line = true): void => {
    if (line) swallowed++;
    retryAt = now() + FILE_RETRY_MS;
    if (reported) return;
    reported = true;
    toStderr(renderLogEvent(
      "error",
      "synapse.log",
      `Cannot write the log file in ${dayFile?.dir}: ${
        (err as Error)?.message ?? String(err)
      }; logging to stderr only, later failures are not reported`,
      undefined,
      undefined,
      now(),
    ));
  };
  for (const w of settings.warnings) {
    toStderr(renderLogEvent("warn", "synapse.log", w, undefined, undefined, now()));
  }
  const filter = settings.filter;
  const log: LogSink = function fleetLog(level, target, message, fields, bound) {
    if (!filter.enabled(level, loggerOf(target))) return;
    const line = renderLogEvent(level, target, message, fields, bound, now());
    if (dayFile !== undefined && !dayFile.disposed) {
      if (now() < retryAt) swallowed++;
      else {
        try {
          dayFile.write(line);
        } catch (err) {
          fileFailed(err);
        }
      }
    }
    if (stderr) toStderr(line);
  };
  return {
    log,
    settings,
    filter,
    dayFile,
    get swallowedWrites(): number {
      return swallowed;
    },
    get disposed(): boolean {
      return dayFile?.disposed ?? disposed;
    },
    open(): void {
      if (dayFile === undefined || dayFile.disposed) return;
      try {
        dayFile.open();
      } catch (err) {
        fileFailed(err, false);
      }
    },
    dispose(): void {
      disposed = true;
      dayFile?.dispose();
    },
    [Symbol.dispose](): void {
      this.dispose();
    },
  };
}
