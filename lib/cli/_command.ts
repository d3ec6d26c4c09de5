/**
 * What every CLI subcommand shares: the command shape, the I/O it writes to, strict argument
 * parsing, opening a client, and printing outcomes and errors the same way.
 *
 * This module and every command module import only light modules at start, so `ck-synapse
 * version` and `--help` never load the engines, the store or the HTTP door: a command loads
 * them (dynamic `import()`) when it runs.
 *
 * @module
 */
import type { OpParams, OpResult, SynapseMethod } from "../ops/op_types.ts";
import { parseArgs } from "node:util";
import type { ParseArgsConfig } from "node:util";
import { cliExitFor } from "./exit_codes.ts";
import type { ClientOutcome, SynapseClient } from "./client.ts";
import type { CliIO } from "./cli_io.ts";
import { findServer } from "./_find_server.ts";

export type { CliIO } from "./cli_io.ts";

/** One subcommand (STYLE rule 17). */
export interface Command {
  /** The word after `ck-synapse`. */
  readonly name: string;
  /** One line for the command list. */
  readonly describe: string;
  /** Usage text, printed for `--help`. */
  readonly usage: string;
  /**
   * Runs the command.
   *
   * @param args Arguments after the command name.
   * @param io Output and injected options.
   * @returns The exit code (0 result, 1 semantic error or refused item, 2 channel or usage
   *   error).
   * @throws {UsageError} for bad arguments (the caller prints one line and a hint, exit 2).
   */
  run(args: string[], io: CliIO): Promise<number>;
}

/** Bad command-line arguments: an unknown flag, a missing value, a bad PARAMS_JSON. */
export class UsageError extends Error {
  /** True for an unknown flag (the message then gets ` for 'COMMAND'`). */
  readonly flag: boolean;

  /**
   * @param message One line, e.g. `Cannot embed: give at least one TEXT`.
   * @param options `flag`: the error is an unknown flag (`unknown flag --foo`). @default false
   */
  constructor(message: string, options: { flag?: boolean } = {}) {
    super(message);
    this.name = "UsageError";
    this.flag = options.flag ?? false;
  }
}

/**
 * `node:util` parseArgs, forced strict (an unknown flag is an error) with positionals allowed;
 * its errors become one-line {@link UsageError}s (`unknown flag --foo`, `flag --model needs a
 * value`, `flag --json takes no value`).
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
  if (options.subc === SUBC_CLIENT_FLAG) args = bareSubc(args);
  try {
    return parseArgs({ args, options, strict: true, allowPositionals: true });
  } catch (err) {
    const message = parseArgsMessage(err);
    throw new UsageError(message, { flag: message.startsWith("unknown flag") });
  }
}

/**
 * The `--subc [FILE]` flag of the commands that call a server: with this very definition,
 * {@link parseCommandArgs} takes `--subc` without a path (see {@link bareSubc}). `serve --subc`
 * (the module side) defines its own, which needs a path.
 */
export const SUBC_CLIENT_FLAG: { readonly type: "string" } = Object.freeze({ type: "string" });

/**
 * The routing flags of the commands that choose a model (`embed`, `tokenize`): the routing params
 * of docs/operations.md "Routing by fingerprint", as flags. Spread into a command's
 * `parseCommandArgs` options; {@link routingParams} reads them back.
 */
export const ROUTING_FLAGS = Object.freeze(
  {
    "target-fingerprint": { type: "string" },
    "required-fingerprint": { type: "string" },
    "allow-equivalent": { type: "boolean" },
    "accept-declared": { type: "boolean" },
    "required-epoch": { type: "string" },
  } as const,
);

/** The usage lines of {@link ROUTING_FLAGS}, the flag column `width` wide. */
export function routingFlagsUsage(width: number): string {
  const flag = (name: string, what: string): string => `  ${name.padEnd(width)}${what}`;
  return [
    flag(
      "--target-fingerprint FP",
      "serve with the model whose fingerprint is FP (target_fingerprint)",
    ),
    flag("--required-fingerprint FP", "refuse unless the model serves FP (required_fingerprint)"),
    flag("--allow-equivalent", "a probe-measured alias of FP satisfies it (allow_equivalent)"),
    flag(
      "--accept-declared",
      "accept a remote lane's declared identity; with --allow-equivalent, a declared alias too (accept_declared)",
    ),
    flag("--required-epoch N", "refuse unless the alias table epoch is at least N"),
  ].join("\n");
}

/**
 * The routing params a command's {@link ROUTING_FLAGS} set (none when no flag is given). The
 * values are checked by the operation (a malformed fingerprint is its `invalid_request`).
 *
 * @throws {UsageError} for a `--required-epoch` that is not a whole number ≥ 0.
 */
export function routingParams(values: {
  "target-fingerprint"?: string | undefined;
  "required-fingerprint"?: string | undefined;
  "allow-equivalent"?: boolean | undefined;
  "accept-declared"?: boolean | undefined;
  "required-epoch"?: string | undefined;
}): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (values["target-fingerprint"] !== undefined) {
    out.target_fingerprint = values["target-fingerprint"];
  }
  if (values["required-fingerprint"] !== undefined) {
    out.required_fingerprint = values["required-fingerprint"];
  }
  if (values["allow-equivalent"]) out.allow_equivalent = true;
  if (values["accept-declared"]) out.accept_declared = true;
  const epoch = values["required-epoch"];
  if (epoch !== undefined) {
    const n = Number(epoch);
    if (!/^\d+$/.test(epoch) || !Number.isSafeInteger(n)) {
      throw new UsageError(`Cannot use --required-epoch ${epoch}: give a whole number >= 0`);
    }
    out.required_epoch = n;
  }
  return out;
}

/**
 * `--subc` without a path becomes `--subc=`: the empty path, which means "find the connection
 * file by the ladder" (`SUBC_CONNECTION_FILE`, …). The next argument is the connection file only
 * when it is one: it ends in `.json` or names an existing file; anything else (another flag, a
 * TEXT, a QUERY) stays a positional, so `embed --subc "some text"` embeds the text over the bus
 * (F32). `--subc=FILE` gives any other name. `node:util` parseArgs has no optional values, so
 * this is done before it runs.
 */
function bareSubc(args: string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (a === "--") return [...out, ...args.slice(i)];
    const next = args[i + 1];
    out.push(a === "--subc" && (next === undefined || !isConnectionFile(next)) ? "--subc=" : a);
  }
  return out;
}

/** True when an argument after `--subc` is its connection file (see {@link bareSubc}). */
function isConnectionFile(arg: string): boolean {
  if (arg.startsWith("-")) return false;
  if (arg.endsWith(".json")) return true;
  try {
    return Deno.statSync(arg).isFile;
  } catch {
    return false;
  }
}

/** Flag definitions of {@link parseCommandArgs}. */
export type ArgOptions = NonNullable<ParseArgsConfig["options"]>;

/** One short line for a `node:util` parseArgs error (its own messages run to three sentences). */
function parseArgsMessage(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  const code = (err as { code?: string }).code;
  const flag = /'(-[^' ]+)/.exec(message)?.[1];
  if (code === "ERR_PARSE_ARGS_UNKNOWN_OPTION" && flag) return `unknown flag ${flag}`;
  if (code === "ERR_PARSE_ARGS_INVALID_OPTION_VALUE" && flag) {
    return /does not take an argument/.test(message)
      ? `flag ${flag} takes no value`
      : `flag ${flag} needs a value`;
  }
  return message.split(". ")[0]!;
}

/** True when `--json` comes before any `--` terminator. */
export function wantsJson(args: readonly string[]): boolean {
  for (const a of args) {
    if (a === "--") return false;
    if (a === "--json") return true;
  }
  return false;
}

/** The flags that choose a command's server: `--url` and `--subc` (parseArgs values). */
export interface ServerFlags {
  /** `--url URL`. */
  url?: string | undefined;
  /** `--subc [FILE]`; the empty string for `--subc` without a path (the ladder). */
  subc?: string | undefined;
}

/**
 * The usage lines of `--url` and `--subc`, shared by every command that talks to a server.
 *
 * @param width Width of the flag column (the description starts at column `2 + width`).
 * @returns The lines, without a final newline.
 */
export function serverFlagsUsage(width: number): string {
  const pad = " ".repeat(2 + width);
  const flag = (name: string): string => `  ${name.padEnd(width)}`;
  return [
    `${
      flag("--url URL")
    }call this server (http://127.0.0.1:PORT, unix:PATH); default: $SYNAPSE_URL,`,
    `${pad}else the running 'ck-synapse serve', else an embedded instance`,
    `${flag("--subc FILE")}call the synapse module ($SUBC_MODULE_ID) through the subc daemon`,
    `${pad}of this connection file; '--subc' alone: $SUBC_CONNECTION_FILE, else`,
    `${pad}where the daemon publishes it. An unreachable daemon is an error, never`,
    `${pad}a fallback to another server. FILE is the next argument when it ends in`,
    `${pad}.json or is an existing file (else it is a TEXT); --subc=FILE for any name`,
  ].join("\n");
}

/**
 * Opens the client a command uses. The server is, in this order: the subc bus when `--subc` is
 * given (with or without a path); `--url`; the `SYNAPSE_URL` environment variable; the address
 * recorded by a live `ck-synapse serve` beside its singleton lease; with none of them, an
 * embedded instance in this process. `--url` and `--subc` together are a usage error. A bus
 * client connects at its first call, and an unreachable daemon is answered `connection_failed`
 * there: it never falls back to another door.
 *
 * @param flags `--url` and `--subc`, if given.
 * @param io Supplies the environment, lease location and the embedded instance's options.
 * @param use `store` for a command that only reads or tidies the store (jobs, the cache): an
 *   embedded instance then loads no model and starts no engine or worker
 *   (`SynapseOptions.loadModels: false`). @default "models"
 * @throws {UsageError} for `--url` with `--subc`.
 * @throws {SynapseError} channel `invalid_request` for a URL that is not loopback http (naming
 *   `--url` or `SYNAPSE_URL`); createSynapse's errors for the embedded instance.
 */
export async function openClient(
  flags: ServerFlags,
  io: CliIO,
  use: "models" | "store" = "models",
): Promise<SynapseClient> {
  if (flags.subc !== undefined) {
    if (flags.url !== undefined) {
      throw new UsageError("Cannot use --url and --subc together: give one server");
    }
    const { BusClient } = await import("./client.ts");
    const env = io.synapseOptions?.env;
    return new BusClient(flags.subc, {
      env,
      signal: io.signal,
    });
  }
  const target = await findServer(flags.url, io);
  const { HttpClient, InProcessClient } = await import("./client.ts");
  if (target !== undefined) {
    return await HttpClient.open(target.url, {
      source: target.source,
      key: target.key,
    });
  }
  const options = io.synapseOptions ?? {};
  return await InProcessClient.create(
    use === "store" ? { ...options, loadModels: false } : options,
  );
}

/**
 * The exit code of an outcome: 2 for a channel error (or an unreachable server), 1 for a
 * semantic error or a result in which any item was refused (`item_errors` not empty), else 0.
 * Every command that prints an outcome exits with this code, so `call` and the typed commands
 * agree.
 *
 * @param outcome The outcome.
 * @returns 0, 1 or 2.
 */
export function exitCodeOf(outcome: ClientOutcome): number {
  if (outcome.kind !== "result") return cliExitFor(outcome.kind);
  const refused = refusedItems(outcome);
  return refused.length > 0 ? cliExitFor("semantic") : cliExitFor("result");
}

/**
 * The refused items of a result (`result.item_errors`), or none.
 *
 * @param outcome A result outcome (any other kind has none).
 */
export function refusedItems(
  outcome: ClientOutcome,
): { id: string; index?: number; error: { code: string; message: string } }[] {
  if (outcome.kind !== "result") return [];
  const r = (outcome.body as { result?: { item_errors?: unknown } }).result;
  return Array.isArray(r?.item_errors) ? r.item_errors : [];
}

/**
 * Prints an outcome as indented JSON on stdout: the result payload (or its semantic error inside
 * `result`), or the channel error body. Commands call it for `--json`.
 *
 * @returns The exit code of the outcome ({@link exitCodeOf}).
 */
export function printJsonOutcome(outcome: ClientOutcome, io: CliIO): number {
  io.out(JSON.stringify(
    outcome.kind === "channel" ? outcome.body : (outcome.body as { result: unknown }).result,
    null,
    2,
  ));
  return exitCodeOf(outcome);
}

/**
 * Says on stderr that an answer came from a lane not certified on this machine (its
 * `provenance.certified` is false: it served only because the config says
 * `certification: "warn"`), and how to certify it; for a remote lane, that its identity is the
 * provider's declaration, accepted by the caller. Prints nothing for a certified answer or
 * one without provenance. The human output of `embed`, `rerank` and `generate` calls it; `--json`
 * carries the field itself.
 *
 * @param result The result payload (`{model_id, provenance?: {certified}}`).
 * @param io Where to print.
 */
export function noteUncertified(
  result: {
    model_id?: string;
    provenance?: { certified?: boolean; remote?: { provider: string; assurance: string } };
  },
  io: CliIO,
): void {
  if (result.provenance?.certified !== false) return;
  const id = result.model_id ?? "the model";
  const remote = result.provenance.remote;
  if (remote !== undefined) {
    // A remote lane serves uncertified only to a caller who accepted its declared identity.
    io.err(
      `note: ${id} ran on remote provider '${remote.provider}', whose identity is ${remote.assurance} by the provider, not proven here (you accepted it with --accept-declared)`,
    );
    return;
  }
  io.err(
    `note: ${id} is not certified on this machine; it served because certification is "warn" (certify it: ck-synapse probe run --model ${id})`,
  );
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

/** Options of {@link runOp}. */
export interface RunOpOptions {
  /** What the embedded instance is for, as {@link openClient}'s `use`. @default "models" */
  use?: "models" | "store";
  /** Prints a refusal without `--json` and returns its exit code. @default reportError */
  refused?: (outcome: ClientOutcome, io: CliIO) => number;
}

/**
 * The one-call command skeleton — open, call, print, close: opens the client the flags name
 * ({@link openClient}), then {@link printOp}, then closes the client. The one-call commands
 * (`rerank`, `tokenize`, `generate`, `ps`, `rm`, `cache`, `alias`, `embed` TEXT…) are this with
 * their own `print`.
 *
 * @param flags `--json`, `--url` and `--subc`, as parsed.
 * @param io Where to print.
 * @param method The operation (`rerank.score`).
 * @param params Its params (as the command built them; the operation validates them).
 * @param print Prints the result payload (human output), typed by the operation table.
 * @param options The embedded instance's use; the refusal printer.
 * @returns The exit code of the outcome ({@link exitCodeOf}).
 * @throws as {@link openClient}.
 */
export async function runOp<M extends SynapseMethod>(
  flags: ServerFlags & { json?: boolean | undefined },
  io: CliIO,
  method: M,
  params: OpParams<M>,
  print: (result: OpResult<M>, outcome: ClientOutcome) => void,
  options: RunOpOptions = {},
): Promise<number> {
  const client = await openClient(flags, io, options.use);
  try {
    return await printOp(client, flags.json ?? false, io, method, params, print, options.refused);
  } finally {
    await client.close();
  }
}

/**
 * One operation call on an open client, printed: the JSON payload with `json`
 * ({@link printJsonOutcome}), else a refusal through `refused` (one `error:` line,
 * {@link reportError}) or a result through `print`, which gets the result payload typed by the
 * operation table ({@link SynapseOperations}: method → params, result) and the outcome.
 *
 * @param client Where to call.
 * @param json `--json`.
 * @param io Where to print.
 * @param method The operation.
 * @param params Its params.
 * @param print Prints the result payload (human output).
 * @param refused Prints a refusal without `--json`. @default reportError
 * @returns The exit code of the outcome ({@link exitCodeOf}).
 */
export async function printOp<M extends SynapseMethod>(
  client: SynapseClient,
  json: boolean,
  io: CliIO,
  method: M,
  params: OpParams<M>,
  print: (result: OpResult<M>, outcome: ClientOutcome) => void,
  refused: (outcome: ClientOutcome, io: CliIO) => number = reportError,
): Promise<number> {
  const outcome = await client.call(method, params);
  if (json) return printJsonOutcome(outcome, io);
  if (outcome.kind !== "result") return refused(outcome, io);
  print((outcome.body as { result: OpResult<M> }).result, outcome);
  return exitCodeOf(outcome);
}

/**
 * Prints a refusal: as JSON on stdout with `--json` ({@link printJsonOutcome}), else as one
 * `error:` line on stderr ({@link reportError}).
 *
 * @returns The exit code of the outcome.
 */
export function reportRefusal(outcome: ClientOutcome, io: CliIO, json: boolean): number {
  return json ? printJsonOutcome(outcome, io) : reportError(outcome, io);
}
