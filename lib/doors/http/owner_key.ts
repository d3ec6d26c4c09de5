/**
 * The owner's local key of the HTTP door (field report F39). Loopback is not a user boundary:
 * any local user can reach `127.0.0.1`, so the operations that change what every caller gets
 * (`model.load`, `models.remove`, `cache.gc`, …; the `access: "owner"` rows of the dispatcher's
 * `OPERATIONS`) are served over HTTP only to a caller that shows the key of the user running the
 * server:
 *
 * - it is 32 random bytes, base64url (43 characters), made at the first `ck-synapse serve` and
 *   kept in `<data_home>/cortexkit/synapse/owner.key` ({@link ownerKeyPath}), mode 0600 in a
 *   directory no one else can write;
 * - a caller sends it as `Authorization: Bearer KEY` or `X-Synapse-Key: KEY`
 *   ({@link keyOfRequest}); it is compared in constant time ({@link sameKey});
 * - `ck-synapse` commands of the owner read it through the serve record (`key_file`), and send it
 *   only to the server that record names (or to a unix socket of the owner's), never to another
 *   port, where another user could be listening to collect it.
 *
 * @module
 */
import { createHash, timingSafeEqual } from "node:crypto";
import { SynapseError } from "../../contract/errors.ts";

export { ownerKeyPath } from "../../paths.ts";

/** The header that carries the key besides `Authorization: Bearer` (lowercase). */
export const OWNER_KEY_HEADER = "x-synapse-key";

/** A key file the owner may trust: a regular file of this user, mode 0600, in a private directory. */
function untrustedReason(path: string, info: Deno.FileInfo): string | undefined {
  if (info.isSymlink) return "it is a symbolic link";
  if (!info.isFile) return "it is not a regular file";
  if (Deno.build.os === "windows") return undefined;
  const uid = Deno.uid();
  if (info.uid !== uid) return `it belongs to uid ${info.uid}, not to this user (uid ${uid})`;
  if (((info.mode ?? 0) & 0o077) !== 0) {
    return `its mode is 0${
      ((info.mode ?? 0) & 0o777).toString(8)
    }, not 0600 (others may have read it)`;
  }
  const dir = Deno.statSync(parentOf(path));
  if (dir.uid !== uid && dir.uid !== 0) return `its directory belongs to uid ${dir.uid}`;
  if (((dir.mode ?? 0) & 0o022) !== 0) {
    return `its directory is writable by others (mode 0${((dir.mode ?? 0) & 0o777).toString(8)})`;
  }
  return undefined;
}

/**
 * Reads the owner key at `path`, making it first when there is none: 32 bytes of
 * `crypto.getRandomValues`, base64url, written 0600 (a temp file linked into place, so a
 * concurrent first start keeps one key). The directory is created 0700 when missing.
 *
 * @param path The key file ({@link ownerKeyPath} of the server's data home).
 * @returns The key (43 base64url characters).
 * @throws {SynapseError} channel `invalid_request` `{field: "owner_key", path, reason}` when an
 *   existing file cannot be trusted (a link, another user's, readable by others: remove it and a
 *   new key is made) or is not a key; file-system errors of the write as they are.
 */
export function loadOwnerKey(path: string): string {
  const refuse = (reason: string, why: string): never => {
    throw new SynapseError(
      "invalid_request",
      `Cannot use the owner key file ${path}: ${why}; remove it (a new key is made at the next start)`,
      { channel: true, details: { field: "owner_key", path, reason } },
    );
  };
  for (let attempt = 0; attempt < 3; attempt++) {
    let info: Deno.FileInfo | undefined;
    try {
      info = Deno.lstatSync(path);
    } catch (err) {
      if (!(err instanceof Deno.errors.NotFound)) throw err;
    }
    if (info !== undefined) {
      const why = untrustedReason(path, info);
      if (why !== undefined) refuse("untrusted", why);
      const key = Deno.readTextFileSync(path).trim();
      if (!/^[A-Za-z0-9_-]{32,}$/.test(key)) refuse("malformed", "it does not hold a key");
      return key;
    }
    Deno.mkdirSync(parentOf(path), { recursive: true, mode: 0o700 });
    const key = newKey();
    const tmp = `${path}.${Deno.pid}.${crypto.randomUUID()}.tmp`;
    Deno.writeTextFileSync(tmp, key + "\n", { createNew: true, mode: 0o600 });
    try {
      Deno.chmodSync(tmp, 0o600); // the umask cannot widen it, but make sure
      Deno.linkSync(tmp, path); // fails if another start made one meanwhile: read that one
      return key;
    } catch (err) {
      if (!(err instanceof Deno.errors.AlreadyExists)) throw err;
    } finally {
      Deno.removeSync(tmp);
    }
  }
  throw new Error(
    `Cannot make the owner key ${path}: it keeps appearing and vanishing. This is a bug`,
  );
}

/**
 * Reads the owner key at `path` for a client (the CLI), if it is there and trustworthy.
 *
 * @param path The key file (the serve record's `key_file`).
 * @returns The key, or `undefined` when the file is missing, unreadable or cannot be trusted
 *   (the call then goes without a key, and a mutating one is answered 401).
 */
export function readOwnerKey(path: string): string | undefined {
  try {
    if (untrustedReason(path, Deno.lstatSync(path)) !== undefined) return undefined;
    const key = Deno.readTextFileSync(path).trim();
    return /^[A-Za-z0-9_-]{32,}$/.test(key) ? key : undefined;
  } catch {
    return undefined;
  }
}

/** A fresh key: 32 random bytes as base64url without padding. */
export function newKey(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(32));
  return btoa(String.fromCharCode(...bytes)).replaceAll("+", "-").replaceAll("/", "_")
    .replace(/=+$/, "");
}

/**
 * The key a request shows: `Authorization: Bearer KEY` (scheme case-insensitive), else
 * `X-Synapse-Key: KEY`.
 *
 * @param headers The request headers.
 * @returns The key as sent, or `undefined` when neither header carries one.
 */
export function keyOfRequest(headers: Headers): string | undefined {
  const auth = headers.get("authorization");
  if (auth !== null) {
    const m = /^\s*bearer\s+(\S+)\s*$/i.exec(auth);
    if (m) return m[1];
  }
  const raw = headers.get(OWNER_KEY_HEADER);
  return raw === null || raw.trim() === "" ? undefined : raw.trim();
}

/**
 * Compares a key a caller sent with the owner key in constant time: both are hashed with
 * SHA-256 first, so neither the time nor the length of the comparison says how much of the
 * key was right.
 *
 * @param given The key the caller sent (`undefined`: none).
 * @param key The owner key.
 * @returns True when they are the same string.
 */
export function sameKey(given: string | undefined, key: string): boolean {
  if (given === undefined) return false;
  const a = createHash("sha256").update(given, "utf8").digest();
  const b = createHash("sha256").update(key, "utf8").digest();
  return timingSafeEqual(a, b);
}

function parentOf(path: string): string {
  return path.slice(0, Math.max(0, path.lastIndexOf("/"))) || ".";
}
