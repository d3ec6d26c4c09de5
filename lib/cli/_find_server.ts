/**
 * Which server a CLI command talks to, as the Docker and Ollama CLIs find their daemon:
 * `--url`, else `SYNAPSE_URL`, else the address a live `ck-synapse serve` recorded beside its
 * singleton lease in this data home, else none (the command runs an embedded instance).
 *
 * The owner's key (lib/doors/http/owner_key.ts) goes along only to the server of that record, named
 * by the record itself or by a `--url` / `SYNAPSE_URL` equal to the recorded address: a key sent
 * to any other loopback port could land with another local user listening there.
 *
 * @module
 */
import { envLookup } from "../paths.ts";
import { readOwnerKey } from "../doors/http/owner_key.ts";
import { findServerAddress, SINGLETON_LEASE_NAME, singletonLeaseDir } from "../lease/lease.ts";
import type { CliIO } from "./cli_io.ts";

/** Where a server URL came from (named in error messages). */
export type ServerSource = "--url" | "SYNAPSE_URL" | { record: string; pid: number };

/** A server to talk to. */
export interface ServerTarget {
  /** Its HTTP base URL, as given (checked to be loopback http when the client opens). */
  url: string;
  /** Where the URL came from. */
  source: ServerSource;
  /** The owner key to send (the serve record's `key_file`), when this is the recorded server. */
  key?: string | undefined;
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
  const options = io.synapseOptions ?? {};
  const lease = `${singletonLeaseDir(options)}/${SINGLETON_LEASE_NAME}`;
  const given: ServerTarget | undefined = flagUrl !== undefined
    ? { url: flagUrl, source: "--url" }
    : envTarget(envLookup(options.env)("SYNAPSE_URL"));
  const found = await findServerAddress(lease);
  if (found.kind === "untrusted" && given === undefined) {
    io.err(`warning: ignoring the server address in ${found.record}: ${found.reason}`);
  }
  const key = found.kind === "live" && found.keyFile !== undefined
    ? readOwnerKey(found.keyFile)
    : undefined;
  if (given !== undefined) {
    const same = found.kind === "live" && sameAddress(given.url, found.url);
    return same && key !== undefined ? { ...given, key } : given;
  }
  if (found.kind === "live") {
    return {
      url: found.url,
      source: { record: found.record, pid: found.pid },
      key,
    };
  }
  return undefined;
}

function envTarget(url: string | undefined): ServerTarget | undefined {
  return url === undefined ? undefined : { url, source: "SYNAPSE_URL" };
}

/** Same server address: equal `unix:` paths, or equal `http:` origins (`localhost` ≠ `127.0.0.1`). */
function sameAddress(a: string, b: string): boolean {
  if (a.startsWith("unix:") || b.startsWith("unix:")) return a === b;
  try {
    return new URL(a).origin === new URL(b).origin;
  } catch {
    return false;
  }
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
