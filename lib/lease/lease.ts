/**
 * Leases (contract.md §8, subc.md §5): the singleton lease (a second Synapse instance refuses to
 * start) and the store lease (taken in the store's directory before the store is opened).
 * Lease files are named `<fnv1a64 hex of module_id U+001F backend U+001F scope>.lease`
 * (vectors/subc_wire.json `lease_names`).
 *
 * @module
 */
import { SynapseError } from "../contract/errors.ts";
import { tryLockExclusive } from "../../ffi/flock.ts";
import type { FileLock } from "../../ffi/flock.ts";
import { dataHome, envLookup } from "../paths.ts";
import type { EnvSource } from "../paths.ts";

const FNV_BASIS = 0xcbf29ce484222325n;
const FNV_PRIME = 0x100000001b3n;
const MASK = 0xffffffffffffffffn;

/**
 * FNV-1a 64 of the UTF-8 bytes of `module_id ␟ backend ␟ scope`, as 16 lowercase hex digits,
 * plus `.lease`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { leaseFileName } from "./lease.ts";
 * assert.equal(leaseFileName("synapse", "sqlite", "default"), "80fe51cd5df17ab3.lease");
 * ```
 */
export function leaseFileName(moduleId: string, backend: string, scope: string): string {
  let h = FNV_BASIS;
  for (const b of new TextEncoder().encode(`${moduleId}\u001f${backend}\u001f${scope}`)) {
    h ^= BigInt(b);
    h = (h * FNV_PRIME) & MASK;
  }
  return `${h.toString(16).padStart(16, "0")}.lease`;
}

/** Directory of singleton leases: `$CORTEXKIT_LEASE_ROOT`, else `<data_home>/cortexkit/leases`. */
export function leaseRoot(env?: EnvSource): string {
  const root = envLookup(env)("CORTEXKIT_LEASE_ROOT");
  return root ?? `${dataHome(env).replace(/\/+$/, "")}/cortexkit/leases`;
}

/**
 * Takes a lease file in `dir` or refuses.
 *
 * @throws {SynapseError} `module_not_initialized` naming the lease and the holder's pid when
 *   another process holds it.
 */
export async function acquireLease(dir: string, name: string, what: string): Promise<FileLock> {
  await Deno.mkdir(dir, { recursive: true, mode: 0o700 });
  const path = `${dir}/${name}`;
  const lock = tryLockExclusive(path);
  if (lock) return lock;
  let holder = "";
  try {
    holder = (await Deno.readTextFile(path)).trim();
  } catch { /* unreadable: leave the pid out */ }
  throw new SynapseError(
    "module_not_initialized",
    `Cannot start: another Synapse instance${
      holder ? ` (pid ${holder})` : ""
    } holds the ${what} lease ${path}; talk to it with --url, or stop it first`,
    { details: { lease: path, ...(holder ? { holder_pid: Number(holder) } : {}) } },
  );
}
