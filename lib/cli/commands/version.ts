/**
 * `ck-synapse version [--json]` (also `ck-synapse --version`).
 *
 * @module
 */
import { SYNAPSE_VERSION } from "../../version.ts";
import { parseCommandArgs, UsageError } from "../_command.ts";
import type { CliIO, Command } from "../_command.ts";

/** The line `version` prints: `ck-synapse 0.1.0`. */
export const VERSION_LINE = `ck-synapse ${SYNAPSE_VERSION}`;

const USAGE = `usage: ck-synapse version [--json]

Prints the version, e.g. 'ck-synapse 0.1.0'.

  --json        print {"name": "ck-synapse", "version": "0.1.0"}`;

/** The `version` command. */
export const versionCommand: Command = {
  name: "version",
  describe: "Print the version",
  usage: USAGE,
  run: runVersion,
};

function runVersion(args: string[], io: CliIO): Promise<number> {
  const { values, positionals } = parseCommandArgs(args, { json: { type: "boolean" } });
  if (positionals.length > 0) {
    throw new UsageError(`Cannot print the version: unexpected '${positionals[0]}'`);
  }
  io.out(
    values.json
      ? JSON.stringify({ name: "ck-synapse", version: SYNAPSE_VERSION }, null, 2)
      : VERSION_LINE,
  );
  return Promise.resolve(0);
}
