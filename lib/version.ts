/**
 * The version of this build, in a module of its own so that `ck-synapse version` and `--help`
 * load nothing else (the engines load only where a command needs them).
 *
 * @module
 */

/** Version of this build, printed by `ck-synapse version` and served in `/health`. */
export const SYNAPSE_VERSION = "0.1.0";

/** The build a single executable was made from (scripts/build), as `version` reports it. */
export interface BuildInfo {
  /** `archive` (self-extracting) or `compile` (`deno compile`). */
  format: string;
  /** Git commit of the checkout it was built from, or null. */
  commit: string | null;
  /** Whether that checkout had uncommitted changes. */
  dirty: boolean;
  /**
   * SHA-256 of the archive's payload (the name of the directory it unpacked into, checked against
   * the stamp written at unpack); null for a compiled build.
   */
  payload_sha256: string | null;
}

/**
 * The build this program runs from: `build.json` at the program's root (written by scripts/build
 * into the runtime tree) and, for an archive, the payload digest from the unpack stamp `.stamp`
 * beside it. Null when run from a checkout (no `build.json`).
 *
 * @param root The program's root directory URL. @default the directory above lib/
 * @returns The build, or null; never throws (an unreadable file reads as absent).
 */
export function readBuildInfo(root: URL = new URL("../", import.meta.url)): BuildInfo | null {
  let build: { format?: unknown; commit?: unknown; dirty?: unknown };
  try {
    build = JSON.parse(Deno.readTextFileSync(new URL("build.json", root)));
  } catch {
    return null;
  }
  let payload: string | null = null;
  try {
    const stamp = Deno.readTextFileSync(new URL(".stamp", root));
    payload = /^payload_sha256=([0-9a-f]{64})$/m.exec(stamp)?.[1] ?? null;
  } catch { /* compiled, or no stamp: no payload digest */ }
  return {
    format: typeof build.format === "string" ? build.format : "unknown",
    commit: typeof build.commit === "string" ? build.commit : null,
    dirty: build.dirty === true,
    payload_sha256: payload,
  };
}
