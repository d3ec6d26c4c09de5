/**
 * `ck-synapse version` (also `ck-synapse --version`).
 *
 * @module
 */
import { SYNAPSE_VERSION } from "../../synapse.ts";
import { parseCommandArgs, UsageError } from "../_command.ts";
import type { CliIO, Command } from "../_command.ts";

/** The line `version` prints: `ck-synapse 0.1.0`. */
export const VERSION_LINE = `ck-synapse ${SYNAPSE_VERSION}`;

/** The `version` command. */
export const versionCommand: Command = {
  name: "version",
  describe: "Print the version",
  usage: "usage: ck-synapse version\n\nPrints the version, e.g. 'ck-synapse 0.1.0'.",
  run: runVersion,
};

function runVersion(args: string[], io: CliIO): Promise<number> {
  const { positionals } = parseCommandArgs(args, {});
  if (positionals.length > 0) {
    throw new UsageError(`Cannot print the version: unexpected '${positionals[0]}'`);
  }
  io.out(VERSION_LINE);
  return Promise.resolve(0);
}
