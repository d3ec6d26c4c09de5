/**
 * `ck-synapse version [--json]` (also `ck-synapse --version`).
 *
 * @module
 */
import { type BuildInfo, readBuildInfo, SYNAPSE_VERSION } from "../../version.ts";
import { parseCommandArgs, UsageError } from "../_command.ts";
import type { CliIO, Command } from "../_command.ts";

/** The line `version` prints from a checkout: `ck-synapse 0.1.0`. */
export const VERSION_LINE = `ck-synapse ${SYNAPSE_VERSION}`;

/**
 * The line `version` prints: {@link VERSION_LINE}, and for a single executable its build:
 * `ck-synapse 0.1.0 (archive, payload sha256:HEX, commit HEX)`.
 */
export function versionLine(build: BuildInfo | null): string {
  if (build === null) return VERSION_LINE;
  const parts = [build.format];
  if (build.payload_sha256 !== null) parts.push(`payload sha256:${build.payload_sha256}`);
  if (build.commit !== null) {
    parts.push(`commit ${build.commit.slice(0, 12)}${build.dirty ? "+dirty" : ""}`);
  }
  return `${VERSION_LINE} (${parts.join(", ")})`;
}

const USAGE = `usage: ck-synapse version [--json]

Prints the version, e.g. 'ck-synapse 0.1.0'; a single executable (scripts/build) adds its build:
'ck-synapse 0.1.0 (archive, payload sha256:HEX, commit HEX)'.

  --json        print {"name": "ck-synapse", "version": "0.1.0"}, with "build": {format, commit,
                dirty, payload_sha256} for a single executable`;

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
  const build = readBuildInfo();
  io.out(
    values.json
      ? JSON.stringify(
        { name: "ck-synapse", version: SYNAPSE_VERSION, ...(build === null ? {} : { build }) },
        null,
        2,
      )
      : versionLine(build),
  );
  return Promise.resolve(0);
}
