/**
 * The `ck-synapse` command line: one module per subcommand (STYLE rule 17), strict flags, and
 * exit codes from the one table ({@link cliExitFor}): 0 result, 1 semantic error or refused item,
 * 2 channel or usage error.
 *
 * Commands call the `synapse` module on the subc bus with `--subc`, else a running server when one
 * is found (`--url`, `SYNAPSE_URL`, or the address a live `ck-synapse serve` recorded beside its
 * lease); otherwise they run an embedded instance in this process, wait for its models, and
 * dispose it at the end.
 *
 * Only light modules load at start (the command modules import the engines, the store and the
 * HTTP door when they run), so `version` and `--help` stay fast: `deno task bench:startup`.
 *
 * @module
 */
import { SynapseError } from "../contract/errors.ts";
import { cliExitFor } from "./exit_codes.ts";
import { UsageError, wantsJson } from "./_command.ts";
import type { CliIO, Command } from "./_command.ts";
import { cacheCommand } from "./commands/cache.ts";
import { callCommand } from "./commands/call.ts";
import { embedCommand } from "./commands/embed.ts";
import { jobCommand } from "./commands/job.ts";
import { modelsCommand } from "./commands/models.ts";
import { psCommand } from "./commands/ps.ts";
import { probeCommand } from "./commands/probe.ts";
import { aliasCommand, aliasesCommand } from "./commands/aliases.ts";
import { pullCommand } from "./commands/pull.ts";
import { quantizeCommand } from "./commands/quantize.ts";
import { rerankCommand } from "./commands/rerank.ts";
import { rmCommand } from "./commands/rm.ts";
import { generateCommand } from "./commands/generate.ts";
import { tokenizeCommand } from "./commands/tokenize.ts";
import { serveCommand } from "./commands/serve.ts";
import { VERSION_LINE, versionCommand } from "./commands/version.ts";

export type { CliIO, Command } from "./_command.ts";

/** The registered subcommands, in help order. */
export const COMMANDS: readonly Command[] = Object.freeze([
  embedCommand,
  jobCommand,
  rerankCommand,
  generateCommand,
  tokenizeCommand,
  pullCommand,
  quantizeCommand,
  probeCommand,
  aliasesCommand,
  aliasCommand,
  psCommand,
  rmCommand,
  modelsCommand,
  cacheCommand,
  callCommand,
  serveCommand,
  versionCommand,
]);

/** Usage of `ck-synapse help`. */
export const HELP_USAGE = `usage: ck-synapse help [COMMAND]

Prints the command list, or a command's usage (the same as 'ck-synapse COMMAND --help').`;

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
    "Run 'ck-synapse <command> --help' for a command's options. Every command takes --json.",
    "",
    "Which instance a command talks to: --subc [FILE] (the synapse module on the subc bus),",
    "else --url URL, else $SYNAPSE_URL, else the running 'ck-synapse serve' of this data home",
    "(it records its address beside its lease), else an embedded instance started in this process.",
    "",
    "Exit status: 0 result; 1 refused: a semantic error, or any item refused (item_errors), the",
    "same for 'call' and the typed commands; 2 channel error, unreachable server, or usage error.",
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
 * Runs the command line. A usage error prints one line and a hint on stderr (exit 2); an
 * instance that cannot start prints its error (as `{code, message}` JSON on stdout with
 * `--json`, exit 2).
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
  if (name === "help" || name === "--help" || name === "-h") return help(name, rest, io);
  if (name === "--version" || name === "-V") return await versionCommand.run(rest, io);
  const command = findCommand(name);
  if (command === undefined) {
    io.err(`ck-synapse: unknown command '${name}'; run 'ck-synapse --help'`);
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
      const where = err.flag ? ` for '${command.name}'` : "";
      io.err(`ck-synapse: ${err.message}${where}; run 'ck-synapse ${command.name} --help'`);
      return cliExitFor("usage");
    }
    // Thrown, not answered: the instance could not start (config, lease), or a bug (an
    // unexpected throw is answered internal_error, as the doors answer a bug).
    const message = err instanceof Error ? err.message : String(err);
    // A start refusal's details (the runtime dir's `reason`, the field) go with it under --json.
    const body: { code: string; message: string; details?: Record<string, unknown> } =
      err instanceof SynapseError ? err.toChannel() : { code: "internal_error", message };
    if (err instanceof SynapseError && err.details !== undefined) body.details = err.details;
    if (wantsJson(rest)) io.out(JSON.stringify(body, null, 2));
    else {io.err(
        err instanceof SynapseError ? `error: ${body.code}: ${message}` : `error: ${message}`,
      );}
    return cliExitFor("channel");
  }
}

function help(name: string, rest: string[], io: CliIO): number {
  const [topic, ...extra] = rest;
  if (name === "help" && (topic === "--help" || topic === "-h" || topic === "help")) {
    io.out(HELP_USAGE);
    return 0;
  }
  if (topic === undefined) {
    io.out(usageText());
    return 0;
  }
  const command = findCommand(topic);
  if (command === undefined || extra.length > 0) {
    io.err(
      command === undefined
        ? `ck-synapse: unknown command '${topic}'; run 'ck-synapse --help'`
        : `ck-synapse: help takes one COMMAND, not '${extra[0]}'; run 'ck-synapse help --help'`,
    );
    return cliExitFor("usage");
  }
  io.out(command.usage);
  return 0;
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
