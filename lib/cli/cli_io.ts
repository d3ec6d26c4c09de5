/**
 * Where a CLI command writes, and what a caller (a test) may inject: the one interface every
 * command module and the server finder share (re-exported by lib/cli/_command.ts and
 * lib/cli/main.ts).
 *
 * @module
 */
import type { SynapseOptions } from "../synapse.ts";

/** Where a command writes, and what a caller (a test) may inject. */
export interface CliIO {
  /** Writes one line to standard output (the newline is added). */
  out(line: string): void;
  /** Writes one line to standard error (the newline is added). */
  err(line: string): void;
  /** Stops long-running commands (`serve`) when aborted, besides SIGINT and SIGTERM. */
  signal?: AbortSignal;
  /**
   * Options of the embedded instance when no server is found; `env` (also read for
   * `SYNAPSE_URL`) and the lease options also say where to look for a running server.
   * @default {}
   */
  synapseOptions?: SynapseOptions;
}
