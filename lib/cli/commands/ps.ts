/**
 * `ck-synapse ps [--json]`: the models this instance serves, as `ollama ps` lists them
 * (`models.list`): state, engine, size on disk, worker memory, lanes, last use and origin.
 *
 * @module
 */
import {
  parseCommandArgs,
  runOp,
  serverFlagsUsage,
  SUBC_CLIENT_FLAG,
  UsageError,
} from "../_command.ts";
import type { CliIO, Command } from "../_command.ts";
import { formatBytes } from "../_progress.ts";
import { formatAgo, formatTable } from "../_table.ts";

const USAGE = `usage: ck-synapse ps [--json] [--url URL | --subc [FILE]]

Lists the loaded models (models.list): MODEL, TASK, ENGINE, STATE, CERTIFIED (yes; reference:
ORT f32 on the CPU, which needs no certificate; else why not: probe_required,
certification_stale, certification_failed), SIZE (the model file on
disk), RSS (resident memory of its worker process; - for in-process models), LANES, LAST USED
(when a request last ended on it) and ORIGIN (config: preload_models or the test models;
runtime: 'pull URL|PATH' or model.load; catalog: 'pull ID'). --json prints the models.list
result.

  --json        print the result (or the error) as JSON
${serverFlagsUsage(14)}

Exit status: 0 listed, 1 refused, 2 channel error, unreachable server, or usage error.`;

/** The `models.list` row fields `ps` prints. */
export interface PsRow {
  model_id: string;
  task: string;
  engine: string;
  state: string;
  artifact_bytes?: number;
  worker_rss_bytes?: number;
  lanes?: string[];
  last_used_ms?: number | null;
  origin?: string;
  test_model?: boolean;
  /** The lane's certification on this machine (`models.list` `certification`). */
  certification?: { status: string };
}

/** The `ps` command. */
export const psCommand: Command = {
  name: "ps",
  describe: "List loaded models: state, engine, memory, lanes, last use",
  usage: USAGE,
  run: runPs,
};

/**
 * The `ps` table.
 *
 * @param rows `models.list` rows.
 * @param now The present, ms since the epoch (for LAST USED).
 * @returns The lines: a header, then one per model.
 */
export function psTable(rows: readonly PsRow[], now: number): string[] {
  return formatTable(
    [
      "MODEL",
      "TASK",
      "ENGINE",
      "STATE",
      "CERTIFIED",
      "SIZE",
      "RSS",
      "LANES",
      "LAST USED",
      "ORIGIN",
    ],
    rows.map((m) => [
      m.model_id,
      m.task,
      m.engine,
      m.state,
      certifiedCell(m.certification?.status),
      m.artifact_bytes === undefined ? "-" : formatBytes(m.artifact_bytes),
      m.worker_rss_bytes === undefined ? "-" : formatBytes(m.worker_rss_bytes),
      m.lanes === undefined || m.lanes.length === 0 ? "-" : m.lanes.join(","),
      formatAgo(m.last_used_ms, now),
      (m.origin ?? "config") + (m.test_model ? " (test model)" : ""),
    ]),
  );
}

/** The CERTIFIED cell: `yes`, `reference`, the status that keeps it from serving, or `-`. */
function certifiedCell(status: string | undefined): string {
  if (status === undefined) return "-";
  return status === "certified" ? "yes" : status;
}

async function runPs(args: string[], io: CliIO): Promise<number> {
  const { values, positionals } = parseCommandArgs(args, {
    json: { type: "boolean" },
    url: { type: "string" },
    subc: SUBC_CLIENT_FLAG,
  });
  if (positionals.length > 0) {
    throw new UsageError(`Cannot list models: unexpected '${positionals[0]}'`);
  }
  return await runOp(values, io, "models.list", {}, (result) => {
    const rows: PsRow[] = result.models;
    for (const line of psTable(rows, Date.now())) io.out(line);
  });
}
