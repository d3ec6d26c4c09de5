/**
 * Reading durable embed jobs from the CLI: the result-line format shared by `embed --file` and
 * `job pages`, one-page reads of `embed.result`, and {@link followJob}, which polls a job until it
 * ends while handing over each page as it is committed.
 *
 * @module
 */
import { sleep } from "../async.ts";
import type { CliIO } from "./_command.ts";
import type { ClientOutcome, SynapseClient } from "./client.ts";
import type { JobState } from "../store/job_types.ts";
import type { WireError } from "../contract/errors.ts";
import type { EmbedResultPage, JobAccepted } from "../ops/jobs.ts";
import type { EmbedResult } from "../ops/embed.ts";

/** Job states as the wire shows them. */
export type WireJobState = JobState;

/**
 * An error object as the wire shows it (job failure or item refusal), read loosely: a newer
 * server may send codes this client does not know.
 */
export type WireErrorLike = Omit<WireError, "code" | "class" | "safe_to_retry_same_request"> & {
  code: string;
  class?: string;
  safe_to_retry_same_request?: boolean;
};

/** The per-item fields of an inline `embed.batch` result and of an `embed.result` page. */
export type ResultItems = Pick<
  EmbedResult,
  "vectors" | "real_token_counts" | "truncation_disclosures" | "item_errors"
>;

/** `embed.result` payload. */
export type ResultPage = EmbedResultPage;

export type { JobAccepted };

/** One output line: the item id and the JSON object written for it. */
export interface ResultRecord {
  id: string;
  line: Record<string, unknown>;
}

/** What the CLI knows of a job between polls. */
export interface JobStatus {
  jobId: string;
  state: WireJobState;
  itemsTotal: number;
  itemsDone: number;
  pageCount: number;
  error?: WireErrorLike;
}

/**
 * True for the states a job never leaves.
 *
 * @param state A job state.
 * @returns Whether the job ended.
 */
export function isTerminal(state: WireJobState): boolean {
  return state === "done" || state === "failed_transient" || state === "failed_permanent";
}

/**
 * The output lines of a page (or of an inline result): one per vector,
 * `{id, vector, content_sha256, submitted_sha256, tokens, truncated}` (plus `kept_chars` when
 * truncated: the characters of the text `content_sha256` covers), then one per refused item,
 * `{id, error: {code, message}}`.
 *
 * @param items The page's per-item fields.
 * @returns The records, vectors first, each in the page's order.
 */
export function resultRecords(items: ResultItems): ResultRecord[] {
  const out: ResultRecord[] = items.vectors.map((v, k) => {
    const d = items.truncation_disclosures[k];
    return {
      id: v.id,
      line: {
        id: v.id,
        vector: v.vector,
        content_sha256: v.content_sha256,
        submitted_sha256: v.submitted_sha256,
        tokens: items.real_token_counts[k] ?? 0,
        truncated: d?.truncated ?? false,
        ...(d?.kept_chars === undefined ? {} : { kept_chars: d.kept_chars }),
      },
    };
  });
  for (const e of items.item_errors ?? []) {
    out.push({
      id: e.id,
      line: { id: e.id, error: { code: e.error.code, message: e.error.message } },
    });
  }
  return out;
}

/** Outcome of {@link readPage}. */
export type PageRead =
  | { kind: "page"; page: ResultPage }
  /** The page is not committed yet: the job's state and committed page count. */
  | { kind: "pending"; state: WireJobState; pageCount: number }
  /** Any other refusal (unknown job, channel error). */
  | { kind: "error"; outcome: ClientOutcome };

/**
 * Reads one page of a job with `embed.result`. A page past the committed ones is `pending`
 * (read from the refusal's details), not an error; page 0 of a job with no committed page is an
 * empty page.
 *
 * @param client Where to call.
 * @param jobId The job.
 * @param page 0-based page number.
 * @returns The page, `pending`, or the refusal.
 */
export async function readPage(
  client: SynapseClient,
  jobId: string,
  page: number,
): Promise<PageRead> {
  const outcome = await client.call("embed.result", { job_id: jobId, page });
  if (outcome.kind === "result") {
    return { kind: "page", page: (outcome.body as { result: ResultPage }).result };
  }
  if (outcome.kind === "semantic") {
    const e = (outcome.body as { result: { error: WireErrorLike } }).result.error;
    const d = e.details ?? {};
    if (
      e.code === "invalid_request" && d.field === "page" && typeof d.pages_available === "number" &&
      typeof d.state === "string"
    ) {
      return { kind: "pending", state: d.state as WireJobState, pageCount: d.pages_available };
    }
  }
  return { kind: "error", outcome };
}

/**
 * The status fields of a page.
 *
 * @param page An `embed.result` page.
 * @returns The job's status as of that read.
 */
export function statusOf(page: ResultPage): JobStatus {
  const s: JobStatus = {
    jobId: page.job_id,
    state: page.state,
    itemsTotal: page.items_total,
    itemsDone: page.items_done,
    pageCount: page.page_count,
  };
  if (page.error !== undefined) s.error = page.error;
  return s;
}

/**
 * Aborts `stop` on Ctrl-C (SIGINT) or when the command's own signal aborts (already aborted
 * included), until disposed: a follower stops following, the job itself goes on.
 *
 * @param io The command's IO (its `signal`, when it has one).
 * @param stop The controller the follower's polling and sleeps watch.
 * @returns Disposing it removes both listeners.
 */
export function stopOnInterrupt(io: CliIO, stop: AbortController): Disposable {
  const onSignal = (): void => stop.abort();
  io.signal?.addEventListener("abort", onSignal, { once: true });
  if (io.signal?.aborted) stop.abort();
  Deno.addSignalListener("SIGINT", onSignal);
  return {
    [Symbol.dispose]() {
      Deno.removeSignalListener("SIGINT", onSignal);
      io.signal?.removeEventListener("abort", onSignal);
    },
  };
}

/** Options of {@link followJob}. */
export interface FollowOptions {
  /** Called with each committed page, in order, exactly once. */
  onPage(page: ResultPage): void;
  /** Called after each poll with the latest status. */
  onStatus?(status: JobStatus): void;
  /** Stops following (the job itself is not cancelled). */
  signal?: AbortSignal;
  /** Pause between polls, in milliseconds. @default 200 */
  intervalMs?: number;
  /**
   * Shortest time between two re-reads of the last committed page for `items_done` while no new
   * page is committed, in milliseconds. @default 1000
   */
  statusEveryMs?: number;
  /** How long to keep polling through channel errors (a server restarting), in ms. @default 10000 */
  channelGraceMs?: number;
  /** Clock in milliseconds. @default Date.now */
  now?: () => number;
}

/** Outcome of {@link followJob}. */
export type FollowOutcome =
  /** The job ended and every committed page was handed over. */
  | { kind: "ended"; status: JobStatus }
  /** The signal stopped the polling. */
  | { kind: "interrupted"; status: JobStatus }
  /** A refusal or channel error that did not clear. */
  | { kind: "error"; status: JobStatus; outcome: ClientOutcome };

/**
 * Polls a job until it ends, handing over each page once `page_count` passes it (pages are
 * committed in order). Between pages it probes the next page (cheap while it is not committed)
 * and re-reads the last page at most every `statusEveryMs` to learn `items_done`.
 *
 * @param client Where to call.
 * @param accepted The job as `embed.batch` answered it.
 * @param options Page and status callbacks, signal, timings.
 * @returns How the following ended, with the last status.
 */
export async function followJob(
  client: SynapseClient,
  accepted: Pick<JobAccepted, "job_id" | "state" | "items_total" | "pages_available">,
  options: FollowOptions,
): Promise<FollowOutcome> {
  const now = options.now ?? Date.now;
  const intervalMs = options.intervalMs ?? 200;
  const statusEveryMs = options.statusEveryMs ?? 1000;
  const graceMs = options.channelGraceMs ?? 10_000;
  let status: JobStatus = {
    jobId: accepted.job_id,
    state: accepted.state,
    itemsTotal: accepted.items_total,
    itemsDone: 0,
    pageCount: accepted.pages_available,
  };
  let next = 0;
  let lastFullRead = now();
  let failingSince: number | undefined;
  const update = (s: JobStatus): void => {
    status = { ...s, itemsDone: Math.max(s.itemsDone, status.itemsDone) };
  };
  for (;;) {
    if (options.signal?.aborted) return { kind: "interrupted", status };
    const read = await readPage(client, accepted.job_id, next);
    if (read.kind === "error") {
      if (read.outcome.kind !== "channel") return { kind: "error", status, outcome: read.outcome };
      failingSince ??= now();
      if (now() - failingSince > graceMs) return { kind: "error", status, outcome: read.outcome };
      await sleep(intervalMs * 5, options.signal, "resolve");
      continue;
    }
    failingSince = undefined;
    if (read.kind === "page") {
      update(statusOf(read.page));
      lastFullRead = now();
      if (read.page.page < read.page.page_count) {
        options.onPage(read.page);
        next++;
        options.onStatus?.(status);
        continue;
      }
    } else {
      status = { ...status, state: read.state, pageCount: read.pageCount };
      if (read.pageCount > next) continue;
      if (isTerminal(read.state) || now() - lastFullRead >= statusEveryMs) {
        // The last committed page carries items_done and, once the job ended, its error.
        const last = await readPage(client, accepted.job_id, Math.max(0, read.pageCount - 1));
        if (last.kind === "page") update(statusOf(last.page));
        lastFullRead = now();
      }
    }
    options.onStatus?.(status);
    if (isTerminal(status.state) && next >= status.pageCount) return { kind: "ended", status };
    await sleep(intervalMs, options.signal, "resolve");
  }
}

/**
 * Reads every committed page of a job, in order, including pages committed while reading.
 *
 * @param client Where to call.
 * @param jobId The job.
 * @param onPage Called with each committed page.
 * @returns The status of the last read, or the refusal.
 */
export async function readCommittedPages(
  client: SynapseClient,
  jobId: string,
  onPage: (page: ResultPage) => void | Promise<void>,
): Promise<{ kind: "status"; status: JobStatus } | { kind: "error"; outcome: ClientOutcome }> {
  let status: JobStatus | undefined;
  for (let next = 0;; next++) {
    const read = await readPage(client, jobId, next);
    if (read.kind === "error") return read;
    if (read.kind === "pending") {
      // Only when the page count moved between reads: take the status from the last page.
      if (status === undefined) return { kind: "error", outcome: pendingAsError(jobId) };
      return {
        kind: "status",
        status: { ...status, state: read.state, pageCount: read.pageCount },
      };
    }
    status = statusOf(read.page);
    if (read.page.page >= read.page.page_count) return { kind: "status", status };
    await onPage(read.page);
    if (next + 1 >= read.page.page_count && isTerminal(read.page.state)) {
      return { kind: "status", status };
    }
  }
}

function pendingAsError(jobId: string): ClientOutcome {
  return {
    kind: "channel",
    body: { code: "encode_failed", message: `Cannot read page 0 of job '${jobId}'` },
  };
}
