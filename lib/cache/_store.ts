/**
 * The cache's files: layout, digest names, atomic writes and the meta read-modify-write.
 *
 * Layout under the root: `blobs/<hex>` (the bytes), `meta/<hex>.json` ({@link BlobMeta}),
 * `tmp/` (partials `<hex>.partial` and files being written, none once a download or import
 * ends) and `leases/` (`<hex>.lock`: shared by readers, exclusive while GC deletes;
 * `<hex>.meta.lock`: exclusive around a meta update; `<hex>.download.lock`: exclusive while a
 * process downloads the blob). `<hex>` is the 64 lowercase hex digits of the digest.
 *
 * A meta update is one synchronous section (lock, read, change, write a temp file, fsync,
 * rename, unlock): nothing in this process can interleave with it, and other processes wait on
 * the flock, so concurrent pins by two processes never lose one.
 *
 * @module
 */
import { invalidRequest } from "../contract/errors.ts";
import type { BlobMeta, Digest } from "./types.ts";

/** Paths of a cache root. */
export interface Layout {
  root: string;
  blobs: string;
  meta: string;
  tmp: string;
  leases: string;
}

/** The layout of `root`. */
export function layoutOf(root: string): Layout {
  const r = root.replace(/\/+$/, "") || "/";
  return {
    root: r,
    blobs: `${r}/blobs`,
    meta: `${r}/meta`,
    tmp: `${r}/tmp`,
    leases: `${r}/leases`,
  };
}

/**
 * Creates the root and its four directories (idempotent), each 0700: the cache holds copies of
 * files only its owner may read (a `model.load` of a private path), so no one else may list or
 * read it. A directory that exists and is ours with any group or other bit is tightened to 0700;
 * one of another user is left as it is (its owner decides).
 */
export function ensureLayoutSync(l: Layout): void {
  for (const d of [l.root, l.blobs, l.meta, l.tmp, l.leases]) {
    Deno.mkdirSync(d, { recursive: true, mode: 0o700 });
    privateDirSync(d);
  }
}

/**
 * Tightens a directory of this user to 0700 (POSIX only; a no-op for another user's). Without
 * the permission to read its own uid (Deno's `--allow-sys=uid`), the chmod is tried and a refusal
 * (not ours) ignored.
 */
function privateDirSync(dir: string): void {
  if (Deno.build.os === "windows") return;
  const st = Deno.statSync(dir);
  if (((st.mode ?? 0) & 0o077) === 0) return;
  let uid: number | null | undefined;
  try {
    uid = Deno.uid();
  } catch {
    uid = undefined; // not permitted to ask
  }
  if (uid !== undefined && st.uid !== uid) return;
  try {
    Deno.chmodSync(dir, 0o700);
  } catch (err) {
    if (!(err instanceof Deno.errors.PermissionDenied)) throw err;
  }
}

const HEX64 = /^[0-9a-f]{64}$/;

/**
 * The hex of a digest: `sha256:<64 hex>` or bare 64 hex, any case.
 *
 * @throws {SynapseError} `invalid_request` `{field, reason: "bad_digest"}` otherwise.
 */
export function hexOf(digest: string, field: string): string {
  const raw = typeof digest === "string" ? digest.replace(/^sha256:/i, "").toLowerCase() : "";
  if (!HEX64.test(raw)) {
    throw invalidRequest(
      `Cannot use ${field} '${String(digest).slice(0, 80)}': a digest is sha256:<64 hex digits>`,
      { field, reason: "bad_digest" },
      false,
    );
  }
  return raw;
}

/** `sha256:<hex>`. */
export function digestOf(hex: string): Digest {
  return `sha256:${hex}`;
}

/** Path of a blob. */
export function blobPathOf(l: Layout, hex: string): string {
  return `${l.blobs}/${hex}`;
}

/** Path of a blob's meta. */
export function metaPathOf(l: Layout, hex: string): string {
  return `${l.meta}/${hex}.json`;
}

/** Path of a blob's lease lock (shared: readers; exclusive: GC deleting). */
export function leasePathOf(l: Layout, hex: string): string {
  return `${l.leases}/${hex}.lock`;
}

/** Path of a blob's download lock (exclusive while one process downloads it). */
export function downloadLockPathOf(l: Layout, hex: string): string {
  return `${l.leases}/${hex}.download.lock`;
}

/** Reads a meta file; `undefined` when absent or not a meta (a torn write never happens). */
export function readMetaSync(l: Layout, hex: string): BlobMeta | undefined {
  try {
    return parseMeta(Deno.readTextFileSync(metaPathOf(l, hex)));
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return undefined;
    throw err;
  }
}

/** Async {@link readMetaSync}. */
export async function readMeta(l: Layout, hex: string): Promise<BlobMeta | undefined> {
  try {
    return parseMeta(await Deno.readTextFile(metaPathOf(l, hex)));
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return undefined;
    throw err;
  }
}

function parseMeta(text: string): BlobMeta | undefined {
  try {
    const m = JSON.parse(text);
    if (typeof m !== "object" || m === null || typeof m.digest !== "string") return undefined;
    if (!Array.isArray(m.pins)) m.pins = [];
    return m as BlobMeta;
  } catch {
    return undefined;
  }
}

/**
 * Changes a blob's meta under its meta lock, synchronously (see the module doc). `change` gets
 * the current meta (or `undefined`) and returns the new one, or `undefined` to leave the file as
 * it is.
 *
 * @returns The meta on disk afterwards.
 */
export function updateMetaSync(
  l: Layout,
  hex: string,
  change: (current: BlobMeta | undefined) => BlobMeta | undefined,
): BlobMeta | undefined {
  using lock = Deno.openSync(`${l.leases}/${hex}.meta.lock`, {
    create: true,
    write: true,
    mode: 0o600,
  });
  lock.lockSync(true);
  const current = readMetaSync(l, hex);
  const next = change(current === undefined ? undefined : structuredClone(current));
  if (next === undefined) return current;
  writeFileAtomicSync(
    l,
    metaPathOf(l, hex),
    new TextEncoder().encode(JSON.stringify(next, null, 2) + "\n"),
  );
  return next;
}

/** Removes a blob's meta under its meta lock. */
export function removeMetaSync(l: Layout, hex: string): void {
  using lock = Deno.openSync(`${l.leases}/${hex}.meta.lock`, {
    create: true,
    write: true,
    mode: 0o600,
  });
  lock.lockSync(true);
  removeIfPresentSync(metaPathOf(l, hex));
}

/** Writes `bytes` to a temp file in `tmp/`, fsyncs it, renames it onto `path`, fsyncs the directory. */
export function writeFileAtomicSync(l: Layout, path: string, bytes: Uint8Array): void {
  const tmp = `${l.tmp}/write-${crypto.randomUUID()}.tmp`;
  try {
    using f = Deno.openSync(tmp, { create: true, write: true, truncate: true, mode: 0o600 });
    let off = 0;
    while (off < bytes.length) off += f.writeSync(bytes.subarray(off));
    f.syncSync();
    Deno.renameSync(tmp, path);
  } catch (err) {
    removeIfPresentSync(tmp);
    throw err;
  }
  syncDirSync(path.slice(0, path.lastIndexOf("/")));
}

/** fsync of a directory, so a rename in it is durable; errors are ignored (not every OS allows it). */
export function syncDirSync(dir: string): void {
  try {
    using d = Deno.openSync(dir, { read: true });
    d.syncSync();
  } catch {
    // Best effort.
  }
}

/** Removes a file; absent is fine. */
export function removeIfPresentSync(path: string): void {
  try {
    Deno.removeSync(path);
  } catch (err) {
    if (!(err instanceof Deno.errors.NotFound)) throw err;
  }
}

/** Size of a file in bytes, or `undefined` when it does not exist. */
export function sizeIfPresentSync(path: string): number | undefined {
  try {
    return Deno.statSync(path).size;
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return undefined;
    throw err;
  }
}

/** True for a disk-full error (ENOSPC, or EDQUOT: over quota). */
export function isDiskFull(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  if (code === "ENOSPC" || code === "EDQUOT") return true;
  return err instanceof Error && /os error (28|122)\b|No space left on device/.test(err.message);
}

/** The meta of a blob that has none (a crash between the two renames): format `other`, unvalidated, created at its mtime. */
export function standInMeta(l: Layout, hex: string, now: number): BlobMeta {
  let size = 0;
  let created = now;
  try {
    const st = Deno.statSync(blobPathOf(l, hex));
    size = st.size;
    created = st.mtime?.getTime() ?? created;
  } catch { /* absent: zeros */ }
  return {
    digest: digestOf(hex),
    source: "",
    format: "other",
    size,
    validation_state: "unvalidated",
    pins: [],
    created_ms: created,
  };
}

/** Changes a meta in place under its lock (a missing meta starts as a stand-in); returns it. */
export function changeMetaSync(
  l: Layout,
  hex: string,
  now: number,
  change: (m: BlobMeta) => void,
): BlobMeta {
  return updateMetaSync(l, hex, (m) => {
    const next = m ?? standInMeta(l, hex, now);
    change(next);
    return next;
  })!;
}

/** The meta of a present blob, written as a stand-in (with `source`) when it is missing. */
export function ensureMetaSync(l: Layout, hex: string, source: string, now: number): BlobMeta {
  return updateMetaSync(
    l,
    hex,
    (m) => m !== undefined ? undefined : { ...standInMeta(l, hex, now), source },
  )!;
}

/**
 * Renames a verified temp file into `blobs/<hex>` — over the blob when one is there already, so
 * a damaged blob is replaced by the verified bytes (a reader that has the old file open keeps
 * its bytes) — fsyncs the directory and writes the meta: a fresh one, keeping the pins and
 * creation time of a meta already there (and its validation outcome, which is about the same
 * bytes).
 */
export function publishBlobSync(
  l: Layout,
  tmpPath: string,
  hex: string,
  source: string,
  now: number,
): void {
  const blob = blobPathOf(l, hex);
  Deno.renameSync(tmpPath, blob);
  syncDirSync(l.blobs);
  const size = sizeIfPresentSync(blob) ?? 0;
  updateMetaSync(l, hex, (m) => {
    const same = m?.size === size;
    return {
      digest: digestOf(hex),
      source,
      format: m?.format ?? "other",
      size,
      validation_state: same ? m!.validation_state : "unvalidated",
      ...(same && m!.validation_error ? { validation_error: m!.validation_error } : {}),
      ...(same && m!.sanitized_tokenizer_digest
        ? { sanitized_tokenizer_digest: m!.sanitized_tokenizer_digest }
        : {}),
      pins: m?.pins ?? [],
      created_ms: m?.created_ms ?? now,
    };
  });
}
