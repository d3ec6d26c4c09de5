/**
 * `ck-synapse job status ID [--json] [--url URL]`, `ck-synapse job pages ID [--out PATH]
 * [--json] [--url URL]` and `ck-synapse job resume ID [--json] [--url URL]`: a durable embed
 * job's state and its committed result pages as JSONL (both read with `embed.result`), and
 * `job.resume` of a job paused because a remote provider refused its credentials.
 *
 * @module
 */
import { cliExitFor } from "../exit_codes.ts";
import {
  openClient,
  parseCommandArgs,
  reportRefusal,
  serverFlagsUsage,
  SUBC_CLIENT_FLAG,
  UsageError,
} from "../_command.ts";
import type { CliIO, Command, ServerFlags } from "../_command.ts";
import { failureLines } from "../_embed_file.ts";
import {
  isTerminal,
  readCommittedPages,
  readPage,
  resultRecords,
  statusOf,
} from "../_job_results.ts";
import type { ResultPage } from "../_job_results.ts";
import type { JobResumed } from "../../ops/jobs.ts";
import { openResultSink } from "../_result_sink.ts";

const USAGE = `usage: ck-synapse job status ID [--json] [--url URL | --subc [FILE]]
       ck-synapse job pages ID [--out PATH] [--json] [--url URL | --subc [FILE]]
       ck-synapse job resume ID [--json] [--url URL | --subc [FILE]]

status  prints a durable embed job's state, items done / total, committed pages and error;
        --json prints them as one JSON object (and a refusal as JSON).
pages   writes the items of every committed page as JSONL (stdout, or --out PATH), one line per
        item: {"id","vector","content_sha256","submitted_sha256","tokens","truncated"}, or
        {"id","error":{"code","message"}} for a refused item; pages in commit order. The lines
        are JSONL anyway; --json prints a refusal (unknown job …) as JSON on stdout.
resume  continues a job paused_needs_reauth (a remote provider refused its key: fix the key
        first; a key file is read again, a key variable needs a restart, which ends the pause).

Jobs live in the store of the instance that ran them: a server's (--url, --subc, $SYNAPSE_URL, or
the running 'ck-synapse serve' of this data home, found by itself); without one, the embedded
instance's store in this data home, which holds the jobs of earlier embedded runs (a job whose
process died reads failed_transient, module_restarted).

  --json        print the status, or a refusal, as JSON
  --out PATH    write the result lines to PATH instead of stdout
${serverFlagsUsage(14)}

Exit status: 0 read or resumed (job done, queued, running or paused, and for pages no refused
item), 1 the job failed, an item was refused, the job is unknown or cannot be resumed, 2 channel
error, unreachable server, or usage error.`;

/** The `job` command group: `status`, `pages` and `resume`. */
export const jobCommand: Command = {
  name: "job",
  describe:
    "Show a durable embed job's status, write its result pages as JSONL, or resume a paused job",
  usage: USAGE,
  run: runJob,
};

async function runJob(args: string[], io: CliIO): Promise<number> {
  const { values, positionals } = parseCommandArgs(args, {
    json: { type: "boolean" },
    out: { type: "string" },
    url: { type: "string" },
    subc: SUBC_CLIENT_FLAG,
  });
  const [sub, id, ...extra] = positionals;
  if (sub !== "status" && sub !== "pages" && sub !== "resume") {
    throw new UsageError(
      sub === undefined
        ? "Cannot run 'job': give a subcommand (status, pages or resume)"
        : `Cannot run 'job ${sub}': unknown subcommand (use status, pages or resume)`,
    );
  }
  if (id === undefined || id === "") throw new UsageError(`Cannot run 'job ${sub}': give a job ID`);
  if (extra.length > 0) throw new UsageError(`Cannot run 'job ${sub}': unexpected '${extra[0]}'`);
  if (sub !== "pages" && values.out !== undefined) {
    throw new UsageError(`Cannot use --out with 'job ${sub}' (it is for 'job pages')`);
  }
  if (sub === "resume") return await resume(id, values.json ?? false, values, io);
  return sub === "status" ? await status(id, values.json ?? false, values, io) : await pages(
    id,
    values.out,
    values,
    values.json ?? false,
    io,
  );
}

async function status(
  id: string,
  json: boolean,
  server: ServerFlags,
  io: CliIO,
): Promise<number> {
  const client = await openClient(server, io, "store");
  try {
    const first = await readPage(client, id, 0);
    if (first.kind !== "page") {
      if (first.kind === "error") return reportRefusal(first.outcome, io, json);
      throw new Error(`Page 0 of job '${id}' read as pending. This is a bug`);
    }
    // Page 0 carries the status; the state may have moved on since, so re-read the last page.
    let page: ResultPage = first.page;
    if (page.page_count > 1) {
      const last = await readPage(client, id, page.page_count - 1);
      if (last.kind === "page") page = last.page;
    }
    const failed = page.state === "failed_transient" || page.state === "failed_permanent";
    if (json) {
      const out: Record<string, unknown> = {
        job_id: page.job_id,
        state: page.state,
        request_key: page.request_key,
        model_id: page.model_id,
        fingerprint: page.fingerprint,
        items_total: page.items_total,
        items_done: page.items_done,
        page_count: page.page_count,
        pages_available: page.pages_available,
      };
      if (page.error !== undefined) out.error = page.error;
      if (page.paused_at_ms !== undefined) out.paused_at_ms = page.paused_at_ms;
      if (page.resume_deadline_ms !== undefined) out.resume_deadline_ms = page.resume_deadline_ms;
      io.out(JSON.stringify(out, null, 2));
    } else {
      const rows: [string, string][] = [
        ["job", page.job_id],
        ["state", page.state],
        ["request key", page.request_key],
        ["model", page.model_id],
        ["fingerprint", page.fingerprint],
        ["items", `${page.items_done}/${page.items_total} done`],
        ["pages", `${page.page_count} committed`],
      ];
      if (page.error !== undefined) {
        rows.push([
          page.state === "paused_needs_reauth" ? "paused" : "error",
          `${page.error.code}: ${page.error.message}`,
        ]);
      }
      if (page.resume_deadline_ms !== undefined) {
        rows.push([
          "resume by",
          `${
            new Date(page.resume_deadline_ms).toISOString()
          } (ck-synapse job resume ${page.job_id})`,
        ]);
      }
      for (const [k, v] of rows) io.out(`${k.padEnd(12)} ${v}`);
      if (failed) { for (const line of failureLines(statusOf(page)).slice(1)) io.err(line); }
    }
    return failed ? cliExitFor("semantic") : cliExitFor("result");
  } finally {
    await client.close();
  }
}

async function resume(
  id: string,
  json: boolean,
  server: ServerFlags,
  io: CliIO,
): Promise<number> {
  const client = await openClient(server, io, "store");
  try {
    const outcome = await client.call("job.resume", { job_id: id });
    if (outcome.kind !== "result") return reportRefusal(outcome, io, json);
    const r = (outcome.body as { result: JobResumed }).result;
    if (json) io.out(JSON.stringify(r, null, 2));
    else {
      io.out(
        r.resumed
          ? `job ${r.job_id} resumed: running, ${r.items_done}/${r.items_total} items done`
          : `job ${r.job_id} was not paused: ${r.state}, ${r.items_done}/${r.items_total} items done`,
      );
    }
    return cliExitFor("result");
  } finally {
    await client.close();
  }
}

async function pages(
  id: string,
  out: string | undefined,
  server: ServerFlags,
  json: boolean,
  io: CliIO,
): Promise<number> {
  const sink = await openResultSink(out, io);
  try {
    const client = await openClient(server, io, "store");
    try {
      let items = 0;
      let refused = 0;
      let pageCount = 0;
      const read = await readCommittedPages(client, id, async (page) => {
        const records = resultRecords(page);
        items += records.length;
        refused += page.item_errors?.length ?? 0;
        pageCount++;
        await sink.write(records);
      });
      if (read.kind === "error") return reportRefusal(read.outcome, io, json);
      const s = read.status;
      io.err(
        `job ${s.jobId} ${s.state}: ${pageCount} page(s), ${items}/${s.itemsTotal} items written ` +
          `to ${sink.target}, ${refused} refused`,
      );
      if (!isTerminal(s.state)) {
        io.err(`note: the job is ${s.state}; later pages are not committed yet`);
      }
      if (s.state === "failed_transient" || s.state === "failed_permanent") {
        for (const line of failureLines(s)) io.err(line);
        return cliExitFor("semantic");
      }
      return refused > 0 ? cliExitFor("semantic") : cliExitFor("result");
    } finally {
      await client.close();
    }
  } finally {
    await sink.close();
  }
}
