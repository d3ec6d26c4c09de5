/**
 * The `ck-synapse` command line: one module per subcommand (STYLE rule 17), strict flags, and
 * exit codes from the one table ({@link cliExitFor}): 0 result, 1 semantic error, 2 channel or
 * usage error.
 *
 * Without `--url`, commands run an embedded instance in this process, wait for its models, and
 * dispose it at the end; with `--url http://127.0.0.1:PORT` they call a running server.
 *
 * @module
 */
import { SynapseError } from "../contract/errors.ts";
import { cliExitFor } from "../http/status_table.ts";
import { UsageError } from "./_command.ts";
import type { CliIO, Command } from "./_command.ts";
import { callCommand } from "./commands/call.ts";
import { embedCommand } from "./commands/embed.ts";
import { jobCommand } from "./commands/job.ts";
import { modelsCommand } from "./commands/models.ts";
import { rerankCommand } from "./commands/rerank.ts";
import { generateCommand } from "./commands/generate.ts";
import { serveCommand } from "./commands/serve.ts";
import { VERSION_LINE, versionCommand } from "./commands/version.ts";

export type { CliIO, Command } from "./_command.ts";

/** The registered subcommands, in help order. */
export const COMMANDS: readonly Command[] = Object.freeze([
  embedCommand,
  jobCommand,
  rerankCommand,
  generateCommand,
  modelsCommand,
  callCommand,
  serveCommand,
  versionCommand,
]);

/**
 * The top-level usage text.
 *
 * @returns The command list with one line per command.
 */
export function usageText(): string {
  const width = Math.max(...COMMANDS.map((c) => c.name.length), "help".length);
  const lines = COMMANDS.map((c) => `  ${c.name.padEnd(width)}  ${c.describe}`);
  lines.push(`  ${"help".padEnd(width)}  Show this help, or a command's usage (help COMMAND)`);
  return [
    `${VERSION_LINE}: a local inference service with fingerprinted vectors`,
    "",
    "usage: ck-synapse <command> [options]",
    "",
    "commands:",
    ...lines,
    "",
    "Run 'ck-synapse <command> --help' for a command's options. Without --url a command runs an",
    "embedded instance in this process.",
    "",
    "Exit status: 0 result, 1 semantic error, 2 channel or usage error.",
  ].join("\n");
}

/** The default I/O: lines to the process's stdout and stderr. */
export function processIO(): CliIO {
  return {
    out: function out(line: string): void {
      console.log(line);
    },
    err: function err(line: string): void {
      console.error(line);
    },
  };
}

/**
 * Runs the command line.
 *
 * @param args Arguments after the program name (`Deno.args`).
 * @param io Output and injected options. @default processIO()
 * @returns The exit code; never throws for bad input or refusals.
 */
export async function main(args: string[], io: CliIO = processIO()): Promise<number> {
  const [name, ...rest] = args;
  if (name === undefined) {
    io.err(usageText());
    return cliExitFor("usage");
  }
  if (name === "help" || name === "--help" || name === "-h") {
    const topic = rest[0] === undefined ? undefined : findCommand(rest[0]);
    if (rest[0] !== undefined && topic === undefined) {
      io.err(`error: unknown command '${rest[0]}'`);
      io.err(usageText());
      return cliExitFor("usage");
    }
    io.out(topic?.usage ?? usageText());
    return 0;
  }
  if (name === "--version" || name === "-V") return await versionCommand.run([], io);
  const command = findCommand(name);
  if (command === undefined) {
    io.err(`error: unknown command '${name}'`);
    io.err(usageText());
    return cliExitFor("usage");
  }
  if (wantsHelp(rest)) {
    io.out(command.usage);
    return 0;
  }
  try {
    return await command.run(rest, io);
  } catch (err) {
    if (err instanceof UsageError) {
      io.err(`error: ${err.message}`);
      io.err(command.usage);
      return cliExitFor("usage");
    }
    if (err instanceof SynapseError) {
      // Thrown, not answered: the instance could not start (config, lease) or be reached.
      io.err(`error: ${err.code}: ${err.message}`);
      return cliExitFor("channel");
    }
    io.err(`error: ${err instanceof Error ? err.message : String(err)}`);
    return cliExitFor("channel");
  }
}

function findCommand(name: string): Command | undefined {
  return COMMANDS.find((c) => c.name === name);
}

/** `--help` / `-h` before any `--` terminator. */
function wantsHelp(args: string[]): boolean {
  for (const a of args) {
    if (a === "--") return false;
    if (a === "--help" || a === "-h") return true;
  }
  return false;
}
