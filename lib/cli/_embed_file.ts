/**
 * `ck-synapse embed --file PATH --request-key KEY`: embeds a JSONL file with one `embed.batch`.
 * An answer under the inline limits is written at once; a durable job is followed with
 * `embed.result` until it ends (a progress display on stderr), then every item is written as a
 * JSONL line, in file order. Works embedded (the job runs in this process, which waits for it)
 * and with `--url`.
 *
 * @module
 */
import { cliExitFor, EXIT_INTERRUPTED } from "./exit_codes.ts";
import { openClient, reportRefusal } from "./_command.ts";
import type { CliIO } from "./_command.ts";
import type { SynapseClient } from "./client.ts";
import { readItemsFile } from "./_items_jsonl.ts";
import type { FileItem } from "./_items_jsonl.ts";
import { followJob, resultRecords, stopOnInterrupt } from "./_job_results.ts";
import type { JobAccepted, JobStatus, ResultItems, WireErrorLike } from "./_job_results.ts";
import { formatDuration, ProgressReporter } from "./_progress.ts";
import { openResultSink } from "./_result_sink.ts";
import type { ResultSink } from "./_result_sink.ts";

/** Options of {@link runEmbedFile}: the command's flags. */
export interface EmbedFileOptions {
  /** The JSONL file. */
  file: string;
  /** `request_key` of the batch (makes it a job over the inline limits). */
  requestKey: string;
  /** Model id. @default the first embed model */
  model?: string | undefined;
  /** Cut over-long texts instead of refusing them. @default false */
  truncate?: boolean | undefined;
  /** Vector width (`embed.batch` `dimensions`: the model's own or one of its Matryoshka widths). */
  dimensions?: number | undefined;
  /** The routing params (`target_fingerprint`, …) of the batch. @default none */
  routing?: Record<string, unknown> | undefined;
  /** Output path. @default stdout */
  out?: string | undefined;
  /** Server URL. @default an embedded instance */
  url?: string | undefined;
  /** `--subc` connection file (`""` for the ladder): call over the subc bus. */
  subc?: string | undefined;
  /** Show progress on stderr. @default true */
  progress?: boolean | undefined;
  /** Pause between polls, in milliseconds. @default 200 */
  pollMs?: number | undefined;
  /** Print a refusal of the batch as JSON on stdout (`--json`). @default false */
  json?: boolean | undefined;
}

/** The inline `embed.batch` result fields used here. */
interface InlineResult extends ResultItems {
  model_id: string;
  fingerprint: string;
}

/**
 * Runs `embed --file`.
 *
 * @param opts The flags.
 * @param io Output, signal and embedded-instance options.
 * @returns 0 when every item was embedded; 1 when the job failed or items were refused; 2 for a
 *   channel error; 130 when Ctrl-C (or `io.signal`) stopped the polling.
 * @throws {UsageError} for an unreadable file, a bad line (naming it) or an unwritable `--out`.
 * @throws {SynapseError} when the embedded instance cannot start.
 */
export async function runEmbedFile(opts: EmbedFileOptions, io: CliIO): Promise<number> {
  const items = await readItemsFile(opts.file);
  const sink = await openResultSink(opts.out, io);
  try {
    const client = await openClient({ url: opts.url, subc: opts.subc }, io);
    try {
      return await embedItems(client, items, opts, io, sink);
    } finally {
      await client.close();
    }
  } finally {
    await sink.close();
  }
}

async function embedItems(
  client: SynapseClient,
  items: FileItem[],
  opts: EmbedFileOptions,
  io: CliIO,
  sink: ResultSink,
): Promise<number> {
  const started = Date.now();
  const params: Record<string, unknown> = {
    ...opts.routing,
    items: items.map((it) => ({ id: it.id, text: it.text })),
    request_key: opts.requestKey,
  };
  if (opts.model !== undefined) params.model = opts.model;
  if (opts.truncate) params.truncate = true;
  if (opts.dimensions !== undefined) params.dimensions = opts.dimensions;
  const outcome = await client.call("embed.batch", params);
  if (outcome.kind !== "result") return reportRefusal(outcome, io, opts.json ?? false);
  const res = (outcome.body as { result: InlineResult | JobAccepted }).result;
  const collected = new Collector(items);
  if ("vectors" in res) {
    collected.add(res);
    await sink.write(collected.records());
    const refused = collected.refused;
    io.err(
      `embedded ${collected.count}/${items.length} items inline (no job), ${refused} refused, ` +
        `${elapsed(started)}, fingerprint ${res.fingerprint}`,
    );
    return refused > 0 ? cliExitFor("semantic") : cliExitFor("result");
  }
  return await followToEnd(client, res, collected, { opts, io, sink, started });
}

async function followToEnd(
  client: SynapseClient,
  job: JobAccepted,
  collected: Collector,
  ctx: { opts: EmbedFileOptions; io: CliIO; sink: ResultSink; started: number },
): Promise<number> {
  const { opts, io, sink, started } = ctx;
  io.err(
    `job ${job.job_id} ${job.attached ? "attached (same request key and items)" : "submitted"}: ` +
      `${job.items_total} items, ${job.state}, model ${job.model_id}`,
  );
  const progress = new ProgressReporter({
    mode: opts.progress === false ? "off" : Deno.stderr.isTerminal() ? "bar" : "lines",
    line: io.err,
  });
  const stop = new AbortController();
  let result;
  try {
    using _interrupt = stopOnInterrupt(io, stop);
    result = await followJob(client, job, {
      signal: stop.signal,
      intervalMs: opts.pollMs ?? 200,
      onPage: (page) => collected.add(page),
      onStatus: (s) => progress.update(Math.max(s.itemsDone, collected.count), s.itemsTotal),
    });
  } finally {
    progress.finish();
  }
  const s = result.status;
  if (result.kind === "interrupted") {
    io.err(
      `interrupted: stopped following job ${s.jobId} (${s.state}, ` +
        `${Math.max(s.itemsDone, collected.count)}/${s.itemsTotal} items done); nothing written`,
    );
    for (const line of interruptHints(s.jobId, client.serverFlag)) io.err(line);
    return EXIT_INTERRUPTED;
  }
  if (result.kind === "error") {
    const code = reportRefusal(result.outcome, io, opts.json ?? false);
    io.err(`error: stopped following job ${s.jobId}; nothing written`);
    return code;
  }
  await sink.write(collected.records());
  const missing = s.itemsTotal - collected.count;
  io.err(
    `job ${s.jobId} ${s.state}: ${collected.count}/${s.itemsTotal} items written to ` +
      `${sink.target}, ${collected.refused} refused, ${elapsed(started)}, ` +
      `fingerprint ${job.fingerprint}`,
  );
  for (const e of collected.errors.slice(0, 5)) {
    io.err(`error: item ${e.id}: ${e.code}: ${e.message}`);
  }
  if (collected.errors.length > 5) io.err(`error: … and ${collected.errors.length - 5} more`);
  if (s.state !== "done") {
    for (const line of failureLines(s)) io.err(line);
    return cliExitFor("semantic");
  }
  if (missing > 0) {
    io.err(`error: ${missing} item(s) of job ${s.jobId} have neither a vector nor an error`);
    return cliExitFor("semantic");
  }
  return collected.refused > 0 ? cliExitFor("semantic") : cliExitFor("result");
}

/** What to tell the user after Ctrl-C. */
function interruptHints(jobId: string, serverFlag: string | undefined): string[] {
  if (serverFlag === undefined) {
    return [
      "The job ran inside this process and stops with it; re-run the same command (same",
      "--request-key) to run it again as a fresh job.",
    ];
  }
  return [
    `The job keeps running on the server. Follow it with: ck-synapse job status ${jobId} ${serverFlag}`,
    `read its results with: ck-synapse job pages ${jobId} ${serverFlag} --out PATH`,
    "or re-run the same command (same --request-key), which attaches to the job.",
  ];
}

/**
 * The lines explaining a failed job; a `module_restarted` one says how to resume.
 *
 * @param s The job's final status.
 * @returns Lines for stderr.
 */
export function failureLines(s: Pick<JobStatus, "jobId" | "state" | "error">): string[] {
  const e: WireErrorLike = s.error ?? { code: "unknown", message: "no error recorded" };
  const lines = [`error: job ${s.jobId} ${s.state}: ${e.code}: ${e.message}`];
  if (e.code === "module_restarted") {
    lines.push(
      "The process that ran the job stopped before the job ended (module_restarted). Re-running " +
        "the same embed --file command (same --request-key) resumes with a fresh job.",
    );
  } else if (s.state === "failed_transient") {
    lines.push("The failure is transient: re-running the same command starts a fresh job.");
  }
  return lines;
}

function elapsed(startedMs: number): string {
  const s = (Date.now() - startedMs) / 1000;
  return s < 60 ? `${s.toFixed(1)}s` : formatDuration(s);
}

/** Result lines gathered page by page, put back in file order. */
class Collector {
  #index = new Map<string, number>();
  #slots: (Record<string, unknown> | undefined)[];
  #extra: Record<string, unknown>[] = [];
  /** Items with a line (vector or error). */
  count = 0;
  /** Refused items. */
  errors: { id: string; code: string; message: string }[] = [];

  constructor(items: FileItem[]) {
    items.forEach((it, i) => this.#index.set(it.id, i));
    this.#slots = new Array(items.length);
  }

  get refused(): number {
    return this.errors.length;
  }

  add(items: ResultItems): void {
    for (const r of resultRecords(items)) {
      const i = this.#index.get(r.id);
      if (i === undefined) this.#extra.push(r.line);
      else if (this.#slots[i] === undefined) this.#slots[i] = r.line;
      else continue;
      this.count++;
      const err = r.line.error as { code: string; message: string } | undefined;
      if (err !== undefined) this.errors.push({ id: r.id, code: err.code, message: err.message });
    }
  }

  records(): { id: string; line: Record<string, unknown> }[] {
    const out: { id: string; line: Record<string, unknown> }[] = [];
    for (const line of this.#slots) if (line !== undefined) out.push({ id: String(line.id), line });
    for (const line of this.#extra) out.push({ id: String(line.id), line });
    return out;
  }
}
