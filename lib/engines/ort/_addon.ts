/**
 * The onnxruntime-node native addon: the one place it is imported (STYLE 2). Loaded only inside
 * the ORT Worker thread (ort_thread.ts), never on the main thread.
 *
 * The first session libonnxruntime 1.30 creates in a process makes an empty
 * `$TMPDIR/mat-debug-<pid>.log` (`/tmp` when TMPDIR is unset) that nothing removes: one per
 * process, piling up in /tmp. The Worker removes it after creating a session, when it is
 * still empty ({@link removeOrtDebugLog}).
 *
 * @module
 */
import * as ort from "onnxruntime-node";

export { ort };

/**
 * Removes this process's empty `mat-debug-<pid>.log` that libonnxruntime creates at load. A file
 * with content is left for whoever wants it; a file that cannot be removed (permissions) is left.
 *
 * @param tmp The temp directory libonnxruntime writes to. @default $TMPDIR, else /tmp
 * @returns True when a file was removed.
 */
export function removeOrtDebugLog(tmp?: string): boolean {
  let dir = tmp;
  try {
    dir ??= Deno.env.get("TMPDIR") || "/tmp";
  } catch {
    dir ??= "/tmp";
  }
  const path = `${dir.replace(/\/+$/, "")}/mat-debug-${Deno.pid}.log`;
  try {
    if (Deno.statSync(path).size !== 0) return false;
    Deno.removeSync(path);
    return true;
  } catch {
    return false;
  }
}
