/**
 * `ck-synapse rm ID [--json]`: `models.remove {catalog_id: ID}`: unloads a catalog model or a
 * model pulled from a URL or path, drops its pins and deletes its files from the model cache
 * that nothing else pins or holds.
 *
 * @module
 */
import {
  parseCommandArgs,
  reportError,
  runOp,
  serverFlagsUsage,
  SUBC_CLIENT_FLAG,
  UsageError,
} from "../_command.ts";
import type { CliIO, Command } from "../_command.ts";
import type { ClientOutcome } from "../client.ts";
import { formatBytes } from "../_progress.ts";

const USAGE = `usage: ck-synapse rm ID [--json] [--url URL | --subc [FILE]]

Removes a model (models.remove): ID is a catalog id ('pull ID') or the id of a model pulled
from a URL or a path. It stops serving, its cache pins are dropped and its files are deleted
unless another model or module pins them; prints the bytes freed. A model that requests or jobs
still hold is refused with model_in_use, naming them. A model from the config's preload_models
is not removed (remove it from the config).

  --json        print the result (or the error) as JSON
${serverFlagsUsage(14)}

Exit status: 0 removed, 1 refused (model_in_use, unknown_model), 2 channel error, unreachable
server, or usage error.`;

/** The `rm` command. */
export const rmCommand: Command = {
  name: "rm",
  describe: "Remove a model and free its files in the model cache",
  usage: USAGE,
  run: runRm,
};

/**
 * The holders of a `model_in_use` refusal as one line: `held by: request (2), job job_1`.
 *
 * @param details The error's details (`holders: [{kind, count?, job_id?}]`).
 * @returns The line, or undefined when the details name no holder.
 */
export function holdersLine(details: unknown): string | undefined {
  const holders = (details as { holders?: unknown } | undefined)?.holders;
  if (!Array.isArray(holders) || holders.length === 0) return undefined;
  const parts = holders.map((h: { kind?: string; count?: number; job_id?: string }) =>
    `${h.kind ?? "unknown"}${
      h.job_id !== undefined ? ` ${h.job_id}` : h.count !== undefined ? ` (${h.count})` : ""
    }`
  );
  return `held by: ${parts.join(", ")}`;
}

/**
 * Prints a refusal as {@link reportError} does, and for `model_in_use` the holders on a second
 * line.
 *
 * @returns The exit code of the outcome.
 */
export function reportWithHolders(outcome: ClientOutcome, io: CliIO): number {
  const code = reportError(outcome, io);
  if (outcome.kind === "semantic") {
    const e = (outcome.body as { result: { error: { code: string; details?: unknown } } }).result
      .error;
    const line = e.code === "model_in_use" ? holdersLine(e.details) : undefined;
    if (line !== undefined) io.err(line);
  }
  return code;
}

async function runRm(args: string[], io: CliIO): Promise<number> {
  const { values, positionals } = parseCommandArgs(args, {
    json: { type: "boolean" },
    url: { type: "string" },
    subc: SUBC_CLIENT_FLAG,
  });
  const [id, ...extra] = positionals;
  if (id === undefined) throw new UsageError("Cannot remove: give the model ID");
  if (extra.length > 0) throw new UsageError(`Cannot remove: unexpected '${extra[0]}'`);
  return await runOp(values, io, "models.remove", { catalog_id: id }, (r) => {
    io.out(`removed ${r.catalog_id}: freed ${formatBytes(r.freed_bytes)}`);
  }, { refused: reportWithHolders });
}
