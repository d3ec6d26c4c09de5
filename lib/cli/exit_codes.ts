/**
 * The CLI's exit codes (STYLE rule 7): one outcome kind → one process exit code, and the status
 * of an interrupted command. Nothing else in the CLI picks an exit code (docs/errors.md "CLI exit
 * status").
 *
 * @module
 */

/**
 * How a CLI command ended: an operation result, a semantic refusal inside `result`, a channel
 * error, or a usage error found before any call (bad flag, bad PARAMS_JSON).
 */
export type OutcomeKind = "result" | "semantic" | "channel" | "usage";

/** CLI exit code of every outcome kind. */
export const CLI_EXIT: Readonly<Record<OutcomeKind, number>> = Object.freeze({
  result: 0,
  semantic: 1,
  channel: 2,
  usage: 2,
});

/** Exit status after Ctrl-C (128 + SIGINT), as shells report it (`embed --file`, `pull`). */
export const EXIT_INTERRUPTED = 130;

/**
 * The process exit code of a CLI outcome: 0 result, 1 semantic error, 2 channel or usage error.
 *
 * @param kind How the command ended.
 * @returns The exit code.
 */
export function cliExitFor(kind: OutcomeKind): number {
  return CLI_EXIT[kind];
}
