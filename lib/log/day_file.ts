/**
 * The module's day files (fleet-logging r2; docs/observability.md "Logging"):
 * `<module data dir>/logs/<module_id>.<YYYY-MM-DD>.log`, one per UTC day, shared by every
 * process of the module.
 *
 * - Opened `O_APPEND|O_CREAT`, file mode 0600, directory 0700; each line (with its newline) is
 *   one `write(2)`, so writers in several processes never interleave inside a line and need no
 *   lock.
 * - The name follows the clock: the first write of a new UTC day reopens on the new name. Files
 *   are never renamed and have no size cap; past `CK_LOG_ALARM_SEGMENT_MB` the current file is
 *   reported once on stderr (a module writing that much has a defect worth seeing; truncating
 *   would hide it).
 * - At open and at each roll, files named `<module_id>.<date>.log` with a date older than today
 *   minus `CK_LOG_MAX_AGE_DAYS` are deleted, decided by the name alone; other names are left
 *   alone.
 *
 * @module
 */

/** Options of {@link LogDayFile}. */
export interface LogDayFileOptions {
  /** Files dated before today minus this many days are pruned; 0 keeps today's only. @default 14 */
  maxAgeDays?: number;
  /** Size in MiB past which the current file is reported once. @default 256 */
  alarmSegmentMb?: number;
  /** Wall clock, Unix ms (tests roll the day with it). @default Date.now */
  now?: () => number;
  /**
   * Called once per file when it grows past `alarmSegmentMb`, with a message naming it. The
   * caller writes it to stderr.
   */
  onAlarm?: (message: string) => void;
}

const DAY_MS = 86_400_000;

/**
 * The file name of `moduleId`'s log on the UTC day of `atMs`.
 *
 * @example
 * ```ts
 * import assert from "node:assert";
 * import { segmentName } from "./day_file.ts";
 *
 * assert.strictEqual(segmentName("synapse", Date.UTC(2026, 0, 2, 23, 59)), "synapse.2026-01-02.log");
 * ```
 */
export function segmentName(moduleId: string, atMs: number): string {
  return `${moduleId}.${utcDay(atMs)}.log`;
}

/**
 * The date of a day file's name, or undefined for any other name (another module's, a date that
 * does not exist, `synapse.log`, `synapse.2026-01-02.log.bak`).
 *
 * @param moduleId The module id.
 * @param fileName A file name (no directory).
 * @returns `YYYY-MM-DD`, or undefined.
 */
export function segmentDay(moduleId: string, fileName: string): string | undefined {
  const prefix = `${moduleId}.`;
  if (!fileName.startsWith(prefix) || !fileName.endsWith(".log")) return undefined;
  const day = fileName.slice(prefix.length, -4);
  if (!/^\d{4}-\d{2}-\d{2}$/.test(day)) return undefined;
  const t = Date.parse(`${day}T00:00:00.000Z`);
  return Number.isNaN(t) || utcDay(t) !== day ? undefined : day;
}

/**
 * Deletes `moduleId`'s day files in `dir` dated before `today` minus `maxAgeDays`. A file
 * another writer removed first is not an error.
 *
 * @param dir The logs directory.
 * @param moduleId The module id.
 * @param todayMs A time on the current UTC day.
 * @param maxAgeDays Days kept before today.
 * @returns The names removed.
 * @throws {Deno.errors.NotFound} and other file-system errors of reading `dir` or removing a file.
 */
export function pruneSegments(
  dir: string,
  moduleId: string,
  todayMs: number,
  maxAgeDays: number,
): string[] {
  const boundary = utcDay(Date.parse(`${utcDay(todayMs)}T00:00:00.000Z`) - maxAgeDays * DAY_MS);
  const removed: string[] = [];
  for (const e of Deno.readDirSync(dir)) {
    const day = segmentDay(moduleId, e.name);
    // YYYY-MM-DD compares as text.
    if (day === undefined || day >= boundary || !e.isFile) continue;
    try {
      Deno.removeSync(`${dir}/${e.name}`);
      removed.push(e.name);
    } catch (err) {
      if (!(err instanceof Deno.errors.NotFound)) throw err;
    }
  }
  return removed;
}

/**
 * Appends lines to the day file of the current UTC day (module doc). Not safe to share across
 * threads; any number of processes may append to the same files.
 *
 * @example
 * ```ts ignore
 * using f = new LogDayFile("/home/me/.local/share/cortexkit/synapse/logs", "synapse");
 * f.write("2026-01-02T03:04:05.006Z INFO  synapse: started");
 * ```
 */
export class LogDayFile implements Disposable {
  /** The logs directory. */
  readonly dir: string;
  /** The module id (the file name's prefix). */
  readonly moduleId: string;
  #maxAgeDays: number;
  #alarmBytes: number;
  #now: () => number;
  #onAlarm: ((message: string) => void) | undefined;
  #file: Deno.FsFile | undefined;
  #path: string | undefined;
  #dayStart = 0;
  #dayEnd = 0;
  #size = 0;
  #sinceStat = 0;
  #alarmed = false;
  #disposed = false;
  #encoder = new TextEncoder();

  /**
   * @param dir The logs directory (`<module data dir>/logs`); created 0700 at the first open.
   * @param moduleId The module id, e.g. `synapse`.
   * @param options Retention, clock, alarm callback.
   */
  constructor(dir: string, moduleId: string, options: LogDayFileOptions = {}) {
    this.dir = dir;
    this.moduleId = moduleId;
    this.#maxAgeDays = options.maxAgeDays ?? 14;
    this.#alarmBytes = (options.alarmSegmentMb ?? 256) * 1024 * 1024;
    this.#now = options.now ?? Date.now;
    this.#onAlarm = options.onAlarm;
  }

  /** The file being written, once open. */
  get path(): string | undefined {
    return this.#path;
  }

  /** True after {@link dispose}. */
  get disposed(): boolean {
    return this.#disposed;
  }

  /**
   * Opens the current day's file now (creating the directory 0700 and the file 0600) and
   * prunes; a no-op when it is already open and the day has not changed.
   *
   * @returns The names pruned.
   * @throws {Error} `disposed`-style Error after {@link dispose}; file-system errors (the caller
   *   decides what a log that cannot be written means).
   */
  open(): string[] {
    const now = this.#now();
    if (this.#file !== undefined && now >= this.#dayStart && now < this.#dayEnd) return [];
    return this.#roll(now);
  }

  /**
   * Appends one line and its newline in one write, reopening first on a new UTC day.
   *
   * @param line The line, without its newline.
   * @throws {Error} after {@link dispose}; file-system errors of opening or writing.
   */
  write(line: string): void {
    const now = this.#now();
    if (this.#file === undefined || now < this.#dayStart || now >= this.#dayEnd) this.#roll(now);
    const bytes = this.#encoder.encode(line + "\n");
    const file = this.#file!;
    let off = 0;
    // One write(2) for the whole line; a short write (a full disk) writes the rest after it.
    while (off < bytes.length) off += file.writeSync(bytes.subarray(off));
    this.#size += bytes.length;
    if (this.#alarmed) return;
    // Other processes append too: the size is read back now and then, and before alarming.
    if (++this.#sinceStat >= 256 || this.#size > this.#alarmBytes) {
      this.#sinceStat = 0;
      this.#size = file.statSync().size;
      if (this.#size > this.#alarmBytes) {
        this.#alarmed = true;
        this.#onAlarm?.(
          `log file ${this.#path} is ${this.#size} bytes, past CK_LOG_ALARM_SEGMENT_MB (${
            this.#alarmBytes / 1024 / 1024
          } MiB); it is not truncated: find what logs this much`,
        );
      }
    }
  }

  /** Closes the file. Idempotent; later writes throw. */
  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    this.#close();
  }

  [Symbol.dispose](): void {
    this.dispose();
  }

  #roll(now: number): string[] {
    if (this.#disposed) throw new Error("Cannot write the log file: it was closed");
    this.#close();
    Deno.mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    if (Deno.build.os !== "windows") Deno.chmodSync(this.dir, 0o700);
    const pruned = pruneSegments(this.dir, this.moduleId, now, this.#maxAgeDays);
    const path = `${this.dir}/${segmentName(this.moduleId, now)}`;
    const file = Deno.openSync(path, { append: true, create: true, mode: 0o600 });
    try {
      const st = file.statSync();
      if (Deno.build.os !== "windows" && st.isFile && ((st.mode ?? 0) & 0o777) !== 0o600) {
        Deno.chmodSync(path, 0o600);
      }
      this.#size = st.size;
    } catch (err) {
      file.close();
      throw err;
    }
    this.#file = file;
    this.#path = path;
    this.#dayStart = Math.floor(now / DAY_MS) * DAY_MS;
    this.#dayEnd = this.#dayStart + DAY_MS;
    this.#sinceStat = 0;
    this.#alarmed = false;
    return pruned;
  }

  #close(): void {
    try {
      this.#file?.close();
    } catch { /* already closed */ }
    this.#file = undefined;
  }
}

function utcDay(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10);
}
