/**
 * Leases (docs/internals.md §8.3, §8.4): the singleton lease (a second Synapse instance refuses to
 * start) and the store lease (taken in the store's directory before the store is opened).
 * Lease files are named `<fnv1a64 hex of module_id U+001F backend U+001F scope>.lease`
 * (vectors/subc_wire.json `lease_names`).
 *
 * A serving instance (`ck-synapse serve`) also records its HTTP address beside its singleton
 * lease ({@link recordServerAddress}), so CLI commands find it ({@link findServerAddress}) the way
 * the Docker and Ollama CLIs find their daemon. The record is trusted only when the lease is held
 * by the very process that wrote it, and the file is the user's own, 0600, in a directory no one
 * else can write.
 *
 * @module
 */
import { SynapseError } from "../contract/errors.ts";
import { isLockHeld, tryLockExclusive } from "../../ffi/flock.ts";
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

/** File name of the singleton lease: `leaseFileName("synapse", "file", "singleton")`. */
export const SINGLETON_LEASE_NAME: string = leaseFileName("synapse", "file", "singleton");

/** Where an instance's singleton lease lives (the fields of `SynapseOptions` that decide it). */
export interface SingletonLeaseOptions {
  /** Directory of the singleton lease, as given. */
  leaseRoot?: string;
  /** A store path given explicitly: the lease then lives in the store's directory. */
  storePath?: string;
  /** Environment for the data home and `CORTEXKIT_LEASE_ROOT`. @default Deno.env */
  env?: EnvSource;
}

/**
 * Directory of an instance's singleton lease: `leaseRoot` when given, else the directory of an
 * explicit `storePath`, else {@link leaseRoot}.
 */
export function singletonLeaseDir(options: SingletonLeaseOptions = {}): string {
  if (options.leaseRoot !== undefined) return options.leaseRoot;
  if (options.storePath !== undefined) return parentDir(options.storePath);
  return leaseRoot(options.env);
}

function parentDir(path: string): string {
  return path.slice(0, Math.max(0, path.lastIndexOf("/"))) || ".";
}

/**
 * Takes a lease file in `dir` or refuses.
 *
 * @throws {SynapseError} `module_not_initialized` naming the lease and the holder's pid when
 *   another process holds it, and the holder's HTTP address when it serves one.
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
  const served = await findServerAddress(path).catch(() => undefined);
  const url = served?.kind === "live" ? served.url : undefined;
  const who = `another Synapse instance${holder ? ` (pid ${holder})` : ""}`;
  throw new SynapseError(
    "module_not_initialized",
    url === undefined
      ? `Cannot start: ${who} holds the ${what} lease ${path}; wait for it to finish or stop it (CLI commands find a 'ck-synapse serve' by themselves once it listens, or give --url)`
      : `Cannot start: ${who} holds the ${what} lease ${path} and serves ${url}; CLI commands talk to it by themselves (or give --url ${url}), or stop it first`,
    {
      details: {
        lease: path,
        ...(holder ? { holder_pid: Number(holder) } : {}),
        ...(url === undefined ? {} : { url }),
      },
    },
  );
}

/** What a serving instance records beside its singleton lease (JSON, mode 0600). */
export interface ServerAddressRecord {
  /** The serving process; it holds the lease (the lease file holds the same pid). */
  pid: number;
  /** Its HTTP base URL, e.g. `http://127.0.0.1:8080`, or `unix:PATH` for a unix socket. */
  url: string;
  /**
   * The owner key file the server checks mutating calls against (lib/doors/http/owner_key.ts);
   * `ck-synapse` commands send that key to this server, and to no other.
   */
  key_file?: string;
}

/**
 * Path of the address record beside a lease: `<name>.http.json` for `<name>.lease`.
 *
 * @param leasePath The lease file.
 */
export function serverAddressPath(leasePath: string): string {
  return `${leasePath.replace(/\.lease$/, "")}.http.json`;
}

/**
 * Records this process's HTTP address beside the lease it holds: written to a temp file with
 * mode 0600, then renamed over the record (a reader sees the old record or the new one, never a
 * partial one).
 *
 * @param lease The singleton lease this process holds.
 * @param url The HTTP base URL it serves, e.g. `http://127.0.0.1:8080`.
 * @param keyFile The owner key file its HTTP door checks (recorded as `key_file`).
 * @throws {Deno.errors.PermissionDenied} and other file-system errors of the write.
 */
export async function recordServerAddress(
  lease: FileLock,
  url: string,
  keyFile?: string,
): Promise<void> {
  const target = serverAddressPath(lease.path);
  const tmp = `${target}.${Deno.pid}.tmp`;
  const record: ServerAddressRecord = {
    pid: Deno.pid,
    url,
    ...(keyFile === undefined ? {} : { key_file: keyFile }),
  };
  try {
    await Deno.remove(tmp);
  } catch { /* none left over */ }
  await Deno.writeTextFile(tmp, JSON.stringify(record) + "\n", { createNew: true, mode: 0o600 });
  // The mode of a created file is masked by the umask; make sure no other bit survives either.
  await Deno.chmod(tmp, 0o600);
  await Deno.rename(tmp, target);
}

/**
 * Removes the address record beside the lease, if this process wrote it. Never throws.
 *
 * @param lease The singleton lease this process holds (or held).
 */
export function removeServerAddress(lease: FileLock): void {
  const target = serverAddressPath(lease.path);
  try {
    const record = JSON.parse(Deno.readTextFileSync(target)) as Partial<ServerAddressRecord>;
    if (record.pid === Deno.pid) Deno.removeSync(target);
  } catch { /* absent or unreadable: nothing of ours to remove */ }
}

/**
 * What {@link findServerAddress} found:
 * - `live`: the lease holder recorded this address;
 * - `none`: no record (or no lease holder: the record is stale and ignored);
 * - `untrusted`: a record exists but cannot be trusted (`reason` says why); it is ignored.
 */
export type ServerAddressLookup =
  | { kind: "live"; url: string; pid: number; record: string; keyFile?: string }
  | { kind: "none" }
  | { kind: "untrusted"; reason: string; record: string };

/**
 * Finds the HTTP address of the instance holding a singleton lease. The record is believed only
 * when all of these hold: it is a regular file (not a link) of this user with no group or other
 * permission bits, in a directory of this user that no one else may write; the lease is held
 * right now (a non-blocking lock probe; a dead holder's lock is gone with it); and the pid in the
 * record is the pid the holder wrote into the lease file.
 *
 * @param leasePath The singleton lease file.
 * @returns The lookup; never throws for a missing, stale or malformed record.
 */
export async function findServerAddress(leasePath: string): Promise<ServerAddressLookup> {
  const record = serverAddressPath(leasePath);
  let info: Deno.FileInfo;
  try {
    info = await Deno.lstat(record);
  } catch {
    return { kind: "none" };
  }
  const untrusted = (reason: string): ServerAddressLookup => ({
    kind: "untrusted",
    reason,
    record,
  });
  if (!info.isFile) return untrusted("it is not a regular file");
  const uid = Deno.build.os === "windows" ? null : Deno.uid();
  if (uid !== null) {
    if (info.uid !== uid) return untrusted(`it belongs to uid ${info.uid}, not to you (${uid})`);
    if (info.mode !== null && (info.mode & 0o077) !== 0) {
      return untrusted(`its mode is ${(info.mode & 0o777).toString(8)}, not 600`);
    }
    try {
      const dir = await Deno.stat(parentDir(record));
      if (dir.uid !== uid) return untrusted(`its directory belongs to uid ${dir.uid}`);
      if (dir.mode !== null && (dir.mode & 0o022) !== 0) {
        return untrusted(
          `its directory is writable by others (mode ${(dir.mode & 0o777).toString(8)})`,
        );
      }
    } catch {
      return { kind: "none" };
    }
  }
  if (!isLockHeld(leasePath)) return { kind: "none" }; // the holder is gone: a stale record
  let parsed: Partial<ServerAddressRecord>;
  let holder: number;
  try {
    parsed = JSON.parse(await Deno.readTextFile(record));
    holder = Number((await Deno.readTextFile(leasePath)).trim());
  } catch {
    return { kind: "none" }; // removed meanwhile, or half-written by an older build
  }
  if (
    typeof parsed !== "object" || parsed === null || typeof parsed.url !== "string" ||
    !Number.isSafeInteger(parsed.pid)
  ) {
    return untrusted("it is not a {pid, url} record");
  }
  // A record of an earlier holder, left by a crash, while another process holds the lease now.
  if (parsed.pid !== holder) return { kind: "none" };
  return {
    kind: "live",
    url: parsed.url,
    pid: parsed.pid!,
    record,
    ...(typeof parsed.key_file === "string" ? { keyFile: parsed.key_file } : {}),
  };
}
