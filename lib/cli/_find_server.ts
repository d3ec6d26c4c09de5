/**
 * Which server a CLI command talks to, as the Docker and Ollama CLIs find their daemon:
 * `--url`, else `SYNAPSE_URL`, else the address a live `ck-synapse serve` recorded beside its
 * singleton lease in this data home, else none (the command runs an embedded instance).
 *
 * @module
 */
import { envLookup } from "../paths.ts";
import { findServerAddress, SINGLETON_LEASE_NAME, singletonLeaseDir } from "../lease/lease.ts";
import type { CliIO } from "./_command.ts";

/** Where a server URL came from (named in error messages). */
export type ServerSource = "--url" | "SYNAPSE_URL" | { record: string; pid: number };

/** A server to talk to. */
export interface ServerTarget {
  /** Its HTTP base URL, as given (checked to be loopback http when the client opens). */
  url: string;
  /** Where the URL came from. */
  source: ServerSource;
}

/**
 * Finds the server of a command.
 *
 * @param flagUrl The `--url` value, if given.
 * @param io Supplies `synapseOptions` (env, lease root, store path); warns on stderr about an
 *   address record that cannot be trusted (then ignored).
 * @returns The target, or `undefined` for an embedded instance.
 */
export async function findServer(
  flagUrl: string | undefined,
  io: CliIO,
): Promise<ServerTarget | undefined> {
  if (flagUrl !== undefined) return { url: flagUrl, source: "--url" };
  const options = io.synapseOptions ?? {};
  const fromEnv = envLookup(options.env)("SYNAPSE_URL");
  if (fromEnv !== undefined) return { url: fromEnv, source: "SYNAPSE_URL" };
  const lease = `${singletonLeaseDir(options)}/${SINGLETON_LEASE_NAME}`;
  const found = await findServerAddress(lease);
  if (found.kind === "live") {
    return { url: found.url, source: { record: found.record, pid: found.pid } };
  }
  if (found.kind === "untrusted") {
    io.err(`warning: ignoring the server address in ${found.record}: ${found.reason}`);
  }
  return undefined;
}

/**
 * Names a source for messages: `--url`, `SYNAPSE_URL`, or `the address recorded by ck-synapse
 * serve (pid N) in FILE`.
 */
export function describeSource(source: ServerSource): string {
  return typeof source === "string"
    ? source
    : `the address recorded by ck-synapse serve (pid ${source.pid}) in ${source.record}`;
}
