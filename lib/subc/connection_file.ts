/**
 * The subc connection file (subc §1 "Connection file", "Finding the file"): the JSON record the
 * daemon publishes with its loopback endpoint and the shared key of the handshake.
 *
 * ```json
 * {"schema":1,"wire_version":2,"endpoints":[{"host":"127.0.0.1","port":8799}],
 *  "key":[…32+ numbers…],"daemon_id":[…16 numbers…],"pid":4242,"daemon_ver":"0.26.0"}
 * ```
 *
 * `wire_version` may be absent (older daemons). The key is a secret: it is never put in an error
 * message or a log line, and a file any other user could read (or that another user owns, who
 * could swap in their own key) is refused before its content is read.
 *
 * - {@link readConnectionFile}: open, check owner and mode on the opened file, parse, validate.
 * - {@link parseConnectionInfo}: the validation alone, on parsed JSON.
 * - {@link connectionFileCandidates} / {@link discoverConnectionFile}: the client ladder.
 * - {@link writeConnectionFile}: the daemon side (used by the in-test daemon): atomic, 0600.
 *
 * @module
 */
import { dataHome, envLookup } from "../paths.ts";
import type { EnvSource } from "../paths.ts";
import { SubcWireError } from "./errors.ts";
import type { ConnectionFileReason } from "./errors.ts";

/** The file name the daemon publishes. */
export const CONNECTION_FILE_NAME = "subc-connection.json";
/** The only schema this build reads. */
export const CONNECTION_FILE_SCHEMA = 1;
/** The only wire version this build speaks (when the file declares one). */
export const CONNECTION_FILE_WIRE_VERSION = 2;
/** Fewest key bytes accepted. */
export const MIN_CONNECTION_KEY_BYTES = 32;
/** Exact bytes of `daemon_id`. */
export const CONNECTION_DAEMON_ID_BYTES = 16;

/** One endpoint of the daemon. */
export interface Endpoint {
  /** Host to connect to (loopback). */
  host: string;
  /** TCP port, 0–65535. */
  port: number;
}

/**
 * A validated connection file, in memory. **`key` is a secret: never log this object.**
 */
export interface ConnectionInfo {
  /** Always 1. */
  schema: number;
  /** 2, or undefined when the file does not declare it. */
  wireVersion?: number;
  /** At least one endpoint; clients use `endpoints[0]`. */
  endpoints: Endpoint[];
  /** The shared handshake key, ≥ 32 bytes. */
  key: Uint8Array;
  /** The daemon's id, 16 bytes. */
  daemonId: Uint8Array;
  /** The daemon's pid (u32). */
  pid: number;
  /** The daemon's version string. */
  daemonVer: string;
}

/**
 * Validates the parsed JSON of a connection file. The schema and the wire version are checked
 * first (a file of another schema may have other fields, and "unsupported schema" is the
 * useful answer), then every field. Unknown fields are ignored, as the reference reader does.
 *
 * @param value The parsed JSON.
 * @param path The file's path, for messages. @default "connection file"
 * @returns The connection info.
 * @throws {SubcWireError} `connection_file_unsupported_schema` (schema ≠ 1),
 *   `connection_file_wire_version_mismatch` (wire_version present and ≠ 2),
 *   `connection_file_invalid_field` (`details.field`: the field path),
 *   `connection_file_no_endpoint`, `connection_file_key_too_short`.
 */
export function parseConnectionInfo(value: unknown, path = "connection file"): ConnectionInfo {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw invalidField(path, "", "must be a JSON object");
  }
  const obj = value as Record<string, unknown>;
  const schema = uint(obj, "schema", 0xffff_ffff, path);
  if (schema !== CONNECTION_FILE_SCHEMA) {
    throw refusal(
      "connection_file_unsupported_schema",
      path,
      `its schema is ${schema}, this build reads schema ${CONNECTION_FILE_SCHEMA}; ` +
        "upgrade ck-synapse to match the subc daemon",
      { field: "schema", schema, supported: CONNECTION_FILE_SCHEMA },
    );
  }
  let wireVersion: number | undefined;
  if (obj.wire_version !== undefined && obj.wire_version !== null) {
    wireVersion = uint(obj, "wire_version", 0xff, path);
    if (wireVersion !== CONNECTION_FILE_WIRE_VERSION) {
      throw refusal(
        "connection_file_wire_version_mismatch",
        path,
        `the daemon speaks wire version ${wireVersion}, this build speaks ` +
          `${CONNECTION_FILE_WIRE_VERSION}; upgrade ck-synapse or the subc daemon so they match`,
        {
          field: "wire_version",
          wire_version: wireVersion,
          supported: CONNECTION_FILE_WIRE_VERSION,
        },
      );
    }
  }
  const endpointsRaw = obj.endpoints;
  if (!Array.isArray(endpointsRaw)) {
    throw invalidField(path, "endpoints", "must be an array of {host, port}");
  }
  const endpoints = endpointsRaw.map((e, i): Endpoint => {
    if (typeof e !== "object" || e === null || Array.isArray(e)) {
      throw invalidField(path, `endpoints.${i}`, "must be an object {host, port}");
    }
    const ep = e as Record<string, unknown>;
    if (typeof ep.host !== "string") {
      throw invalidField(path, `endpoints.${i}.host`, "must be a string");
    }
    return { host: ep.host, port: uint(ep, "port", 0xffff, path, `endpoints.${i}.`) };
  });
  const key = byteArray(obj, "key", path);
  const daemonId = byteArray(obj, "daemon_id", path);
  if (daemonId.byteLength !== CONNECTION_DAEMON_ID_BYTES) {
    throw invalidField(
      path,
      "daemon_id",
      `must be ${CONNECTION_DAEMON_ID_BYTES} bytes, has ${daemonId.byteLength}`,
    );
  }
  const pid = uint(obj, "pid", 0xffff_ffff, path);
  if (typeof obj.daemon_ver !== "string") {
    throw invalidField(path, "daemon_ver", "must be a string");
  }
  if (endpoints.length === 0) {
    throw refusal(
      "connection_file_no_endpoint",
      path,
      "it lists no endpoint; restart the subc daemon",
      { field: "endpoints" },
    );
  }
  if (key.byteLength < MIN_CONNECTION_KEY_BYTES) {
    throw refusal(
      "connection_file_key_too_short",
      path,
      `its key has ${key.byteLength} bytes, fewer than ${MIN_CONNECTION_KEY_BYTES}; ` +
        "restart the subc daemon to mint a new one",
      { field: "key", len: key.byteLength, min: MIN_CONNECTION_KEY_BYTES },
    );
  }
  return {
    schema,
    ...(wireVersion === undefined ? {} : { wireVersion }),
    endpoints,
    key,
    daemonId,
    pid,
    daemonVer: obj.daemon_ver,
  };
}

/** Options of {@link readConnectionFile}. */
export interface ReadConnectionFileOptions {
  /**
   * The uid the file must belong to.
   * @default {Deno.uid()} — Deno exposes the real uid only; it is the effective uid of any
   *   process that is not set-uid, which a Deno program never is.
   */
  uid?: number | null;
}

/**
 * Reads and validates a connection file. Owner and mode are checked on the opened file (an
 * `fstat`, not a second path lookup), before its content is read.
 *
 * @param path The file.
 * @param options The expected owner.
 * @returns The connection info.
 * @throws {SubcWireError} `connection_file_not_found`, `connection_file_unreadable`,
 *   `connection_file_foreign_owner` (owned by another uid), `connection_file_insecure_mode`
 *   (`mode & 0o077 != 0`), `connection_file_invalid_json`, and every refusal of
 *   {@link parseConnectionInfo}.
 */
export async function readConnectionFile(
  path: string,
  options: ReadConnectionFileOptions = {},
): Promise<ConnectionInfo> {
  let file: Deno.FsFile;
  try {
    file = await Deno.open(path, { read: true });
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) {
      throw refusal(
        "connection_file_not_found",
        path,
        "no such file; is the subc daemon running?",
        {},
        err,
      );
    }
    throw refusal("connection_file_unreadable", path, errText(err), {}, err);
  }
  let bytes: Uint8Array;
  try {
    const info = await file.stat();
    const uid = options.uid === undefined ? Deno.uid() : options.uid;
    if (uid !== null && info.uid !== null && info.uid !== uid) {
      throw refusal(
        "connection_file_foreign_owner",
        path,
        `it belongs to uid ${info.uid}, not to you (uid ${uid}); another user could have ` +
          "written its key, so it is not trusted",
        { owner_uid: info.uid, uid },
      );
    }
    if (info.mode !== null && (info.mode & 0o077) !== 0) {
      const mode = (info.mode & 0o777).toString(8).padStart(3, "0");
      throw refusal(
        "connection_file_insecure_mode",
        path,
        `its mode is ${mode}, so others can read its key; it must be 600 (only the subc ` +
          "daemon should write it)",
        { mode },
      );
    }
    bytes = await readCapped(file, path);
  } catch (err) {
    if (err instanceof SubcWireError) throw err;
    throw refusal("connection_file_unreadable", path, errText(err), {}, err);
  } finally {
    file.close();
  }
  let value: unknown;
  try {
    value = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes));
  } catch (err) {
    throw refusal(
      "connection_file_invalid_json",
      path,
      "it is not UTF-8 JSON; restart the subc daemon to rewrite it",
      {},
      err,
    );
  }
  return parseConnectionInfo(value, path);
}

/** Options of {@link connectionFileCandidates} and {@link discoverConnectionFile}. */
export interface DiscoveryOptions {
  /** An explicit path (a `--subc` flag): the only candidate when given. */
  explicit?: string | undefined;
  /** Environment source. @default {Deno.env.get} */
  env?: EnvSource | undefined;
  /** The uid in the temp-dir file name. @default {Deno.uid()} */
  uid?: number | undefined;
}

/** The candidates of the ladder, and whether the first is exclusive. */
export interface Candidates {
  /** Paths to try, in order. */
  paths: string[];
  /**
   * True when the path came from the flag or from `SUBC_CONNECTION_FILE`: it is the only one,
   * and its failure is final (no fallback to another daemon's file).
   */
  exclusive: boolean;
}

/**
 * The connection-file ladder of a client (subc §1 "Finding the file"): an explicit flag; else
 * `SUBC_CONNECTION_FILE`, exclusive; else `$XDG_RUNTIME_DIR/subc-connection.json`,
 * `$HOME/.local/share/cortexkit/run/subc-connection.json` and
 * `$TMPDIR/subc-<uid>.connection.json` (`/tmp` when `TMPDIR` is unset). Empty variables count as
 * unset; duplicates are dropped.
 *
 * @param options Flag, environment, uid.
 * @returns The candidates.
 */
export function connectionFileCandidates(options: DiscoveryOptions = {}): Candidates {
  if (options.explicit !== undefined && options.explicit !== "") {
    return { paths: [options.explicit], exclusive: true };
  }
  const get = envLookup(options.env);
  const named = get("SUBC_CONNECTION_FILE");
  if (named !== undefined) return { paths: [named], exclusive: true };
  const paths: string[] = [];
  const push = (p: string): void => {
    if (!paths.includes(p)) paths.push(p);
  };
  const runtime = get("XDG_RUNTIME_DIR");
  if (runtime !== undefined) push(joinPath(runtime, CONNECTION_FILE_NAME));
  const home = get("HOME");
  if (home !== undefined) {
    push(joinPath(home, `.local/share/cortexkit/run/${CONNECTION_FILE_NAME}`));
  }
  const uid = options.uid ?? Deno.uid() ?? 0;
  push(joinPath(get("TMPDIR") ?? "/tmp", `subc-${uid}.connection.json`));
  return { paths, exclusive: false };
}

/**
 * Finds and reads the connection file along the client ladder
 * ({@link connectionFileCandidates}): the first candidate that reads and validates wins.
 *
 * @param options Flag, environment, uid.
 * @returns The path used and its connection info.
 * @throws {SubcWireError} for an exclusive candidate (flag or `SUBC_CONNECTION_FILE`), the
 *   refusal of that file itself; otherwise `connection_file_not_found` with `details.tried`:
 *   `[{path, reason}]` for every candidate.
 */
export async function discoverConnectionFile(
  options: DiscoveryOptions = {},
): Promise<{ path: string; info: ConnectionInfo }> {
  const { paths, exclusive } = connectionFileCandidates(options);
  if (exclusive) return { path: paths[0]!, info: await readConnectionFile(paths[0]!) };
  const tried: { path: string; reason: string }[] = [];
  for (const path of paths) {
    try {
      return { path, info: await readConnectionFile(path) };
    } catch (err) {
      if (!(err instanceof SubcWireError)) throw err;
      tried.push({ path, reason: err.reason });
    }
  }
  const list = tried.map((t) => `${t.path} (${t.reason})`).join(", ");
  throw new SubcWireError(
    "connection_file_not_found",
    `Cannot find a usable subc connection file: tried ${list}; start the subc daemon or pass ` +
      "--subc <connection-file>",
    { details: { tried } },
  );
}

/**
 * Where the daemon publishes its connection file: `<data_home>/cortexkit/run/subc-connection.json`
 * (subc §1), the data home resolved as in `lib/paths.ts` with trailing `/` trimmed.
 *
 * @param env Environment source. @default {Deno.env.get}
 * @returns The path.
 */
export function daemonConnectionFilePath(env?: EnvSource): string {
  return `${dataHome(env).replace(/\/+$/, "")}/cortexkit/run/${CONNECTION_FILE_NAME}`;
}

/**
 * Serialises connection info as the daemon writes it (snake_case; byte strings as arrays of
 * numbers; `wire_version` omitted when undefined).
 *
 * @param info The connection info.
 * @returns The JSON object.
 */
export function connectionInfoToJson(info: ConnectionInfo): Record<string, unknown> {
  return {
    schema: info.schema,
    ...(info.wireVersion === undefined ? {} : { wire_version: info.wireVersion }),
    endpoints: info.endpoints.map((e) => ({ host: e.host, port: e.port })),
    key: [...info.key],
    daemon_id: [...info.daemonId],
    pid: info.pid,
    daemon_ver: info.daemonVer,
  };
}

/**
 * Publishes a connection file as the daemon does: validates it, creates the parent directory
 * with mode 0700 when absent, writes a temporary sibling with mode 0600 and renames it over the
 * file (a reader sees the old file or the new one, never a part). Used by the in-test daemon.
 *
 * @param path Where to publish (e.g. {@link daemonConnectionFilePath}).
 * @param info The connection info.
 * @throws {SubcWireError} every refusal of {@link parseConnectionInfo} (nothing is written), or
 *   `connection_file_unwritable` when the directory or file cannot be written (the temporary
 *   file is removed).
 */
export async function writeConnectionFile(path: string, info: ConnectionInfo): Promise<void> {
  const json = connectionInfoToJson(info);
  parseConnectionInfo(json, path);
  const slash = path.lastIndexOf("/");
  const dir = slash <= 0 ? (slash === 0 ? "/" : ".") : path.slice(0, slash);
  const name = path.slice(slash + 1);
  const tmp = `${dir}/.${name}.${Deno.pid}.${
    crypto.getRandomValues(new Uint8Array(8)).toHex()
  }.tmp`;
  try {
    await Deno.mkdir(dir, { recursive: true, mode: 0o700 });
    await Deno.writeTextFile(tmp, JSON.stringify(json, null, 2) + "\n", {
      createNew: true,
      mode: 0o600,
    });
    // The created mode is masked by the umask; make sure no other bit survives either.
    if (Deno.build.os !== "windows") await Deno.chmod(tmp, 0o600);
    await Deno.rename(tmp, path);
  } catch (err) {
    await Deno.remove(tmp).catch(() => {});
    throw refusal("connection_file_unwritable", path, errText(err), {}, err);
  }
}

/** Largest connection file read, in bytes (a real one is under 1 KiB). */
const MAX_FILE_BYTES = 64 * 1024;

async function readCapped(file: Deno.FsFile, path: string): Promise<Uint8Array> {
  const buf = new Uint8Array(MAX_FILE_BYTES + 1);
  let at = 0;
  while (at < buf.byteLength) {
    const n = await file.read(buf.subarray(at));
    if (n === null) return buf.slice(0, at);
    at += n;
  }
  throw refusal(
    "connection_file_unreadable",
    path,
    `it is larger than ${MAX_FILE_BYTES} bytes, so it is not a subc connection file`,
    { max_bytes: MAX_FILE_BYTES },
  );
}

function uint(
  obj: Record<string, unknown>,
  field: string,
  max: number,
  path: string,
  prefix = "",
): number {
  const v = obj[field];
  if (typeof v !== "number" || !Number.isInteger(v) || v < 0 || v > max) {
    throw invalidField(path, prefix + field, `must be an integer 0-${max}`);
  }
  return v;
}

function byteArray(obj: Record<string, unknown>, field: string, path: string): Uint8Array {
  const v = obj[field];
  if (!Array.isArray(v)) throw invalidField(path, field, "must be a JSON array of numbers");
  const out = new Uint8Array(v.length);
  for (let i = 0; i < v.length; i++) {
    const b = v[i];
    if (typeof b !== "number" || !Number.isInteger(b) || b < 0 || b > 255) {
      throw invalidField(path, `${field}.${i}`, "must be an integer 0-255");
    }
    out[i] = b;
  }
  return out;
}

function invalidField(path: string, field: string, problem: string): SubcWireError {
  const subject = field === "" ? "its content" : `field '${field}'`;
  return refusal(
    "connection_file_invalid_field",
    path,
    `${subject} ${problem}; restart the subc daemon to rewrite it`,
    { field: field === "" ? "(root)" : field },
  );
}

function refusal(
  reason: ConnectionFileReason,
  path: string,
  why: string,
  details: Record<string, unknown>,
  cause?: unknown,
): SubcWireError {
  const verb = reason === "connection_file_unwritable" ? "write" : "use";
  return new SubcWireError(reason, `Cannot ${verb} subc connection file ${path}: ${why}`, {
    details: { path, ...details },
    ...(cause === undefined ? {} : { cause }),
  });
}

function errText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

function joinPath(base: string, tail: string): string {
  return base.endsWith("/") ? base + tail : `${base}/${tail}`;
}
