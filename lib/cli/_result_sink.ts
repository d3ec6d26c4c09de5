/**
 * Where result lines go: `--out PATH` (opened, and truncated, before any work, so a path that
 * cannot be written fails at once) or standard output.
 *
 * @module
 */
import { UsageError } from "./_command.ts";
import type { CliIO } from "./_command.ts";
import type { ResultRecord } from "./_job_results.ts";

/** A destination for JSONL result lines. */
export interface ResultSink {
  /** `stdout` or the path. */
  readonly target: string;
  /** Writes one line per record. */
  write(records: ResultRecord[]): Promise<void>;
  /** Flushes and closes a file; idempotent. */
  close(): Promise<void>;
}

/**
 * Opens the sink.
 *
 * @param out The `--out` path; stdout when undefined.
 * @param io Standard output for the stdout sink.
 * @returns The sink.
 * @throws {UsageError} when the path cannot be opened for writing.
 */
export async function openResultSink(out: string | undefined, io: CliIO): Promise<ResultSink> {
  if (out === undefined) {
    return {
      target: "stdout",
      write(records: ResultRecord[]): Promise<void> {
        for (const r of records) io.out(JSON.stringify(r.line));
        return Promise.resolve();
      },
      close(): Promise<void> {
        return Promise.resolve();
      },
    };
  }
  let file: Deno.FsFile;
  try {
    file = await Deno.open(out, { write: true, create: true, truncate: true });
  } catch (err) {
    const denied = err instanceof Deno.errors.NotCapable ||
      err instanceof Deno.errors.PermissionDenied;
    const why = denied
      ? "no write permission (the ck-synapse launcher writes only under $TMPDIR and the data " +
        "home; omit --out and redirect stdout instead)"
      : err instanceof Error
      ? err.message
      : String(err);
    throw new UsageError(`Cannot write --out '${out}': ${why}`);
  }
  const writer = file.writable.getWriter();
  const enc = new TextEncoder();
  let closed = false;
  return {
    target: out,
    async write(records: ResultRecord[]): Promise<void> {
      let chunk = "";
      for (const r of records) {
        chunk += JSON.stringify(r.line) + "\n";
        if (chunk.length >= 1 << 20) {
          await writer.write(enc.encode(chunk));
          chunk = "";
        }
      }
      if (chunk !== "") await writer.write(enc.encode(chunk));
    },
    async close(): Promise<void> {
      if (closed) return;
      closed = true;
      await writer.close();
    },
  };
}
