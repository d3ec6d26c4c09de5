/**
 * `ck-synapse models list [--json] [--url URL]`: `models.list`.
 *
 * @module
 */
import {
  exitCodeOf,
  openClient,
  parseCommandArgs,
  printJsonOutcome,
  reportError,
  serverFlagsUsage,
  SUBC_CLIENT_FLAG,
  UsageError,
} from "../_command.ts";
import type { CliIO, Command } from "../_command.ts";
import { servedBy } from "../_served_by.ts";

const USAGE = `usage: ck-synapse models list [--json] [--url URL | --subc [FILE]]

Lists the models with their task, state, dims and fingerprint, why a model is not ready (the
same state and reason as GET /health), then which model serves each task when a request names
none (and why none does); --json prints the whole models.list result.

  --json        print the result (or the error) as JSON
${serverFlagsUsage(14)}`;

interface ModelsPrintable {
  models: {
    model_id: string;
    task: string;
    state: string;
    dims?: number;
    fingerprints: string[];
    test_model?: boolean;
    /** Why the model is not ready (lib/ops/status.ts, the state and reason /health prints). */
    state_reason?: { reason: string; code?: string; message: string };
  }[];
  served_by?: Record<string, string | null>;
  default_test_models?: boolean;
}

/** The `models` command group (`list` only, for now). */
export const modelsCommand: Command = {
  name: "models",
  describe: "List models with their state and fingerprint",
  usage: USAGE,
  run: runModels,
};

async function runModels(args: string[], io: CliIO): Promise<number> {
  const { values, positionals } = parseCommandArgs(args, {
    json: { type: "boolean" },
    url: { type: "string" },
    subc: SUBC_CLIENT_FLAG,
  });
  const [sub, ...extra] = positionals;
  if (sub !== undefined && sub !== "list") {
    throw new UsageError(`Cannot run 'models ${sub}': unknown subcommand (use 'models list')`);
  }
  if (extra.length > 0) throw new UsageError(`Cannot list models: unexpected '${extra[0]}'`);
  const client = await openClient(values, io);
  try {
    const outcome = await client.call("models.list", {});
    if (values.json) return printJsonOutcome(outcome, io);
    if (outcome.kind !== "result") return reportError(outcome, io);
    const res = (outcome.body as { result: ModelsPrintable }).result;
    const rows = res.models.map((m) => [
      m.model_id,
      m.task,
      m.state,
      m.dims === undefined ? "-" : String(m.dims),
      (m.fingerprints[0] ?? "-") + (m.test_model ? "  (test model)" : "") +
      (m.state_reason
        ? `  ${m.state_reason.code ?? m.state_reason.reason}: ${m.state_reason.message}`
        : ""),
    ]);
    const header = ["MODEL", "TASK", "STATE", "DIMS", "FINGERPRINT"];
    const widths = header.map((h, c) => Math.max(h.length, ...rows.map((r) => r[c]!.length)));
    for (const r of [header, ...rows]) {
      io.out(r.map((cell, c) => c === r.length - 1 ? cell : cell.padEnd(widths[c]!)).join("  "));
    }
    io.out("");
    for (const [task, by] of [["TASK", "SERVED BY"], ...servedBy(res)]) {
      io.out(`${task!.padEnd(8)}  ${by}`);
    }
    return exitCodeOf(outcome);
  } finally {
    await client.close();
  }
}
