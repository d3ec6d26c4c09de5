/**
 * The worker runtime directory, where the module listens for its workers (docs/internals.md §7
 * "Process"). Whoever can write there, or can replace a directory on its path, can take a
 * worker's socket: answer in its place, or read what the module sends. So the directory is
 * created 0700 if missing and refused, before any socket is made in it, when it
 *
 * - is a symbolic link (`symlink`: the module would follow it and chmod its target),
 * - is not a directory (`not_directory`),
 * - belongs to another user (`foreign_owner`),
 * - is writable by the group or by everyone (`writable_by_others`), or
 * - lies under a directory that another user (not root) owns, or that others may write without
 *   the sticky bit, as `/tmp` has it (`unsafe_parent`): such a parent lets them swap the
 *   directory out. The same rule as OpenSSH's `safe_path`.
 *
 * On Windows (named pipes, no directory) the check does nothing.
 *
 * @module
 */
import { SynapseError } from "../contract/errors.ts";

/** Why a runtime directory was refused (`details.reason`). */
export type RuntimeDirFault =
  | "symlink"
  | "not_directory"
  | "foreign_owner"
  | "writable_by_others"
  | "unsafe_parent";

/**
 * Creates the worker runtime directory if it is missing (0700, each missing component in turn)
 * and checks that only this user can reach sockets in it (the rules above).
 *
 * @param dir The runtime directory (`worker_runtime_dir` or the default).
 * @returns The directory, ready for sockets.
 * @throws {SynapseError} `invalid_request` with `details {field: "worker_runtime_dir", path,
 *   reason: RuntimeDirFault, at}` (`at` is the offending path, the directory or a parent), and
 *   a message that says how to fix it; a filesystem error other than a missing component is
 *   rethrown as is.
 */
export function prepareRuntimeDir(dir: string): string {
  if (Deno.build.os === "windows") return dir;
  const absolute = dir.startsWith("/") ? dir : `${Deno.cwd()}/${dir}`;
  const refuse = (reason: RuntimeDirFault, at: string, why: string): never => {
    throw new SynapseError(
      "invalid_request",
      `Cannot use worker runtime dir '${dir}': ${why}; fix or remove it, or use another directory only you can write (SYNAPSE_WORKER_RUNTIME_DIR under the ck-synapse launcher)`,
      { details: { field: "worker_runtime_dir", path: dir, reason, at } },
    );
  };
  // Missing components are created one at a time, so none is created through a symlink that
  // appeared in between without lstat seeing it below. Existing ones are only looked at: a
  // process may read /run or /tmp without being allowed to write there (Deno checks the write
  // permission before the kernel says the directory exists).
  const parts = absolute.split("/").filter((p) => p !== "" && p !== ".");
  let path = "";
  for (const part of parts) {
    path = part === ".." ? path.replace(/\/[^/]*$/, "") : `${path}/${part}`;
    try {
      Deno.lstatSync(path);
      continue;
    } catch (err) {
      if (!(err instanceof Deno.errors.NotFound)) throw err;
    }
    try {
      Deno.mkdirSync(path, { mode: 0o700 });
    } catch (err) {
      if (!(err instanceof Deno.errors.AlreadyExists)) throw err;
    }
  }
  const fault = privateDirFault(absolute);
  if (fault !== undefined) refuse(fault.reason, fault.at === absolute ? dir : fault.at, fault.why);
  // Ours and private to us: tighten a 0750 or 0755 left by an older version.
  if (((Deno.lstatSync(absolute).mode ?? 0) & 0o777) !== 0o700) Deno.chmodSync(absolute, 0o700);
  return dir;
}

/** What makes a directory unsafe for private sockets or files ({@link privateDirFault}). */
export interface PrivateDirFault {
  reason: RuntimeDirFault;
  /** The offending path: the directory itself or one of its parents. */
  at: string;
  /** Why, as a clause for an error message ("it is a symbolic link"). */
  why: string;
}

/**
 * Checks an existing directory by the rules of this module's header: a real directory of this
 * user that no one else can write, under parents of root or this user that no one else can
 * write without the sticky bit. Shared by the worker runtime dir and the HTTP door's unix
 * socket. Nothing is created or changed.
 *
 * @param dir An absolute path to an existing directory.
 * @returns The first fault found, or undefined when the directory is private to this user.
 * @throws what `Deno.lstatSync` throws (`NotFound` for a missing directory).
 */
export function privateDirFault(dir: string): PrivateDirFault | undefined {
  if (Deno.build.os === "windows") return undefined;
  const uid = Deno.uid();
  const self = Deno.lstatSync(dir);
  if (self.isSymlink) return { reason: "symlink", at: dir, why: "it is a symbolic link" };
  if (!self.isDirectory) return { reason: "not_directory", at: dir, why: "it is not a directory" };
  if (uid !== null && self.uid !== uid) {
    return {
      reason: "foreign_owner",
      at: dir,
      why: `it belongs to uid ${self.uid}, not to this user (uid ${uid})`,
    };
  }
  if (((self.mode ?? 0) & 0o022) !== 0) {
    return {
      reason: "writable_by_others",
      at: dir,
      why: `it is writable by others (its mode ${octal(self.mode ?? 0)} lets others write in it)`,
    };
  }
  // Parents, as the kernel resolves them (a symlinked /var/run is fine when root owns it).
  let parent = Deno.realPathSync(`${dir}/..`);
  for (;;) {
    const st = Deno.statSync(parent);
    const mode = st.mode ?? 0;
    if (st.uid !== 0 && st.uid !== uid) {
      return {
        reason: "unsafe_parent",
        at: parent,
        why: `its parent '${parent}' belongs to uid ${st.uid}`,
      };
    }
    if ((mode & 0o022) !== 0 && (mode & 0o1000) === 0) {
      return {
        reason: "unsafe_parent",
        at: parent,
        why: `its parent '${parent}' (mode ${octal(mode)}) lets others replace what is in it`,
      };
    }
    if (parent === "/") return undefined;
    parent = parent.replace(/\/[^/]*$/, "") || "/";
  }
}

function octal(mode: number): string {
  return `0${(mode & 0o7777).toString(8)}`;
}
