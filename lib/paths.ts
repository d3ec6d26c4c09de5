/**
 * Data and config homes, and the paths Synapse derives from them (docs/internals.md §8.4 "Homes,
 * leases and the server address"; tests/paths_test.ts).
 *
 * The ladders match the cortexkit resolvers byte for byte, so this module finds the same store
 * the reference binary uses:
 *
 * - data home: `XDG_DATA_HOME` as-is (even if relative); on Windows `APPDATA`, then
 *   `USERPROFILE\AppData\Roaming`; then `$HOME/.local/share`; then `.local/share` (relative);
 * - config home: the same ladder with `XDG_CONFIG_HOME` and `.config`.
 *
 * Empty variables count as unset; values are not trimmed.
 *
 * @module
 */

/**
 * Where environment variables come from: a lookup function (such as `Deno.env.get`) or a plain
 * record of names to values.
 */
export type EnvSource =
  | ((name: string) => string | undefined)
  | Readonly<Record<string, string | undefined>>;

/** Options of {@link dataHome} and {@link configHome}. */
export interface HomeOptions {
  /**
   * Operating system whose ladder to follow; only `"windows"` differs.
   *
   * @default {Deno.build.os}
   */
  os?: typeof Deno.build.os | undefined;
}

/**
 * Turns an {@link EnvSource} into a lookup that treats empty values as unset.
 *
 * @param env The source; defaults to the process environment (`Deno.env.get`).
 * @returns A function returning the variable's value, or `undefined` when unset or empty.
 */
export function envLookup(env?: EnvSource): (name: string) => string | undefined {
  const source = env ?? defaultEnv;
  return function lookup(name: string): string | undefined {
    const value = typeof source === "function" ? source(name) : source[name];
    return value === undefined || value === "" ? undefined : value;
  };
}

/**
 * Resolves the data home: the data-home ladder above.
 *
 * @param env Environment source; defaults to `Deno.env.get`.
 * @param options Which OS ladder to follow.
 * @returns The data home path, not trimmed and possibly relative.
 */
export function dataHome(env?: EnvSource, options: HomeOptions = {}): string {
  return resolveHome(env, options, "XDG_DATA_HOME", ".local/share");
}

/**
 * Resolves the config home: the data-home ladder with `XDG_CONFIG_HOME` and `.config`.
 *
 * @param env Environment source; defaults to `Deno.env.get`.
 * @param options Which OS ladder to follow.
 * @returns The config home path, not trimmed and possibly relative.
 */
export function configHome(env?: EnvSource, options: HomeOptions = {}): string {
  return resolveHome(env, options, "XDG_CONFIG_HOME", ".config");
}

/**
 * The Synapse module data directory: `<data_home>/cortexkit/synapse`, with trailing `/` of the
 * data home trimmed first.
 *
 * @param env Environment source; defaults to `Deno.env.get`.
 * @param options Which OS ladder to follow.
 * @returns The directory path (forward slashes are used for the appended segments).
 */
export function synapseDataDir(env?: EnvSource, options: HomeOptions = {}): string {
  return `${dataHome(env, options).replace(/\/+$/, "")}/cortexkit/synapse`;
}

/**
 * The SQLite store path of a module by id, the fallback when the subc daemon's HELLO_ACK carries
 * no storage descriptor (subc §5): `<data_home>/cortexkit/<module_id>/store.db`, with trailing `/`
 * of the data home trimmed first. For `synapse` it is {@link storePath}.
 *
 * @param moduleId The module id (`SUBC_MODULE_ID`, else `synapse`).
 * @param env Environment source; defaults to `Deno.env.get`.
 * @param options Which OS ladder to follow.
 * @returns The store file path.
 */
export function moduleStorePath(
  moduleId: string,
  env?: EnvSource,
  options: HomeOptions = {},
): string {
  return `${dataHome(env, options).replace(/\/+$/, "")}/cortexkit/${moduleId}/store.db`;
}

/**
 * The Synapse SQLite store path: `<data_home>/cortexkit/synapse/store.db`.
 *
 * @param env Environment source; defaults to `Deno.env.get`.
 * @param options Which OS ladder to follow.
 * @returns The store file path.
 */
export function storePath(env?: EnvSource, options: HomeOptions = {}): string {
  return `${synapseDataDir(env, options)}/store.db`;
}

/**
 * The owner's local key of the HTTP door: `<data_home>/cortexkit/synapse/owner.key`, mode 0600
 * (lib/doors/http/owner_key.ts). `ck-synapse serve` creates it at its first start; CLI commands of
 * the same user and data home read it to call mutating operations.
 *
 * @param env Environment source; defaults to `Deno.env.get`.
 * @param options Which OS ladder to follow.
 * @returns The key file path.
 */
export function ownerKeyPath(env?: EnvSource, options: HomeOptions = {}): string {
  return `${synapseDataDir(env, options)}/owner.key`;
}

function resolveHome(
  env: EnvSource | undefined,
  options: HomeOptions,
  xdgName: string,
  homeSuffix: string,
): string {
  const get = envLookup(env);
  const xdg = get(xdgName);
  if (xdg !== undefined) return xdg;
  if ((options.os ?? Deno.build.os) === "windows") {
    const appData = get("APPDATA");
    if (appData !== undefined) return appData;
    const profile = get("USERPROFILE");
    if (profile !== undefined) return joinPath(profile, "AppData\\Roaming", "\\");
  }
  const home = get("HOME");
  if (home !== undefined) return joinPath(home, homeSuffix, "/");
  return homeSuffix;
}

/** Joins like Rust's `PathBuf::join` for a relative tail: no doubled separator. */
function joinPath(base: string, tail: string, separator: string): string {
  return base.endsWith("/") || base.endsWith("\\") ? base + tail : base + separator + tail;
}

function defaultEnv(name: string): string | undefined {
  return Deno.env.get(name);
}
