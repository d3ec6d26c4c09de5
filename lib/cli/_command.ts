/**
 * What every CLI subcommand shares: the command shape, the I/O it writes to, strict argument
 * parsing, opening a client, and printing errors the same way.
 *
 * @module
 */
import { parseArgs } from "node:util";
import type { ParseArgsConfig } from "node:util";
import type { SynapseOptions } from "../synapse.ts";
import { cliExitFor } from "../http/status_table.ts";
import { HttpClient, InProcessClient } from "./client.ts";
import type { ClientOutcome, SynapseClient } from "./client.ts";

/** Where a command writes, and what a caller (a test) may inject. */
export interface CliIO {
  /** Writes one line to standard output (the newline is added). */
  out(line: string): void;
  /** Writes one line to standard error (the newline is added). */
  err(line: string): void;
  /** Stops long-running commands (`serve`) when aborted, besides SIGINT and SIGTERM. */
  signal?: AbortSignal;
  /** Options of the embedded instance when no `--url` is given. @default {} */
  synapseOptions?: SynapseOptions;
}

/** One subcommand (STYLE rule 17). */
export interface Command {
  /** The word after `ck-synapse`. */
  readonly name: string;
  /** One line for the command list. */
  readonly describe: string;
  /** Usage text, printed for `--help` and after a usage error. */
  readonly usage: string;
  /**
   * Runs the command.
   *
   * @param args Arguments after the command name.
   * @param io Output and injected options.
   * @returns The exit code (0 result, 1 semantic error, 2 channel or usage error).
   * @throws {UsageError} for bad arguments (the caller prints the usage and exits 2).
   */
  run(args: string[], io: CliIO): Promise<number>;
}

/** Bad command-line arguments: an unknown flag, a missing value, a bad PARAMS_JSON. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}

/**
 * `node:util` parseArgs, forced strict (an unknown flag is an error) with positionals allowed;
 * its errors become {@link UsageError}s.
 *
 * @param args Arguments after the command name.
 * @param options Flag definitions.
 * @returns Flag values and positionals.
 * @throws {UsageError} for an unknown flag or a flag without its value.
 */
export function parseCommandArgs<O extends ArgOptions>(
  args: string[],
  options: O,
): ReturnType<
  typeof parseArgs<{ args: string[]; options: O; strict: true; allowPositionals: true }>
> {
  try {
    return parseArgs({ args, options, strict: true, allowPositionals: true });
  } catch (err) {
    throw new UsageError(err instanceof Error ? err.message : String(err));
  }
}

/** Flag definitions of {@link parseCommandArgs}. */
export type ArgOptions = NonNullable<ParseArgsConfig["options"]>;

/**
 * Opens the client a command uses: HTTP when `url` is given, else an embedded instance.
 *
 * @param url The `--url` value, if any.
 * @param io Supplies the embedded instance's options.
 * @throws {SynapseError} channel `invalid_request` for a non-loopback URL; createSynapse's
 *   errors for the embedded instance.
 */
export async function openClient(url: string | undefined, io: CliIO): Promise<SynapseClient> {
  if (url !== undefined) return new HttpClient(url);
  return await InProcessClient.create(io.synapseOptions ?? {});
}

/**
 * Prints an outcome as indented JSON on stdout: the result payload (or its semantic error inside
 * `result`), or the channel error body. Commands call it for `--json`.
 *
 * @returns The exit code of the outcome (0 result, 1 semantic error, 2 channel error).
 */
export function printJsonOutcome(outcome: ClientOutcome, io: CliIO): number {
  io.out(JSON.stringify(
    outcome.kind === "channel" ? outcome.body : (outcome.body as { result: unknown }).result,
    null,
    2,
  ));
  return cliExitFor(outcome.kind);
}

/**
 * Prints a refusal as `error: <code>: <message>` on stderr and returns its exit code.
 *
 * @param outcome A semantic or channel outcome.
 * @param io Where to print.
 * @returns 1 for a semantic error, 2 for a channel error.
 */
export function reportError(outcome: ClientOutcome, io: CliIO): number {
  const e = outcome.kind === "channel"
    ? outcome.body as { code?: string; message?: string }
    : (outcome.body as { result?: { error?: { code?: string; message?: string } } }).result
      ?.error ?? {};
  io.err(`error: ${e.code ?? "unknown"}: ${e.message ?? "no message"}`);
  return cliExitFor(outcome.kind);
}
