/**
 * Getting bytes into the cache: a local file copied while hashed ({@link importInto}), a URL
 * downloaded under the cross-process download lock ({@link downloadInto}). Both publish the
 * verified bytes as a blob ({@link publishBlobSync}), record it as verified for this boot
 * (`markVerified`: a load then does not hash it again) and end with the cache's validation.
 * Whatever the outcome (done, failed, cancelled), nothing of theirs is left in `tmp/`: a
 * download's partial lives only while its call runs (its retries resume from it); a partial is
 * left only by a process that died mid-download, and the next download of that digest resumes
 * it (or `cache gc` removes it once idle).
 *
 * @module
 */
import { sha256FileHex } from "../identity/sha256.ts";
import { sleep } from "../async.ts";
import { tryLockExclusive } from "../../ffi/flock.ts";
import { SynapseError } from "../contract/errors.ts";
import type { LogSink } from "../log/log.ts";
import {
  blobPathOf,
  digestOf,
  downloadLockPathOf,
  ensureMetaSync,
  isDiskFull,
  type Layout,
  publishBlobSync,
  removeIfPresentSync,
  sizeIfPresentSync,
} from "./_store.ts";
import { downloadFailed, fetchToPartial } from "./download.ts";
import type { ArtifactFormat, BlobMeta, DownloadProgress } from "./types.ts";

/** What ingestion needs of the cache. */
export interface IngestContext {
  layout: Layout;
  now(): number;
  log: LogSink;
  /** Storage cap (bytes), or undefined. */
  cap: number | undefined;
  /** ms. */
  idleTimeoutMs: number;
  /** ms between looks while another process downloads the same digest. */
  pollMs: number;
  /** Waits before the retries of a transient transport fault (ms), or undefined for the default. */
  retryDelaysMs: readonly number[] | undefined;
  fetch: typeof fetch;
  usedBytes(): Promise<number>;
  validate(hex: string, format: ArtifactFormat | undefined, file: string): Promise<BlobMeta>;
  /** Records that `blobs/<hex>` holds the bytes of its digest as it is now (hashed while written). */
  markVerified(hex: string): void;
}

/**
 * Copies `path` into the cache while hashing it (only hashes it when `expectedHex` names a blob
 * already there), checks the expected digest, publishes, validates.
 *
 * @throws {SynapseError} see `ModelCache.importFile`.
 */
export async function importInto(
  ctx: IngestContext,
  path: string,
  opts: {
    expectedHex?: string | undefined;
    format?: ArtifactFormat | undefined;
    file: string;
    signal?: AbortSignal | undefined;
  },
): Promise<BlobMeta> {
  const { file, expectedHex: expected } = opts;
  let abs: string;
  let src: Deno.FsFile;
  try {
    abs = await Deno.realPath(path);
    src = await Deno.open(abs, { read: true });
  } catch (err) {
    throw new SynapseError(
      "artifact_invalid",
      `Cannot import ${path}: ${(err as Error).message}; check the path and its permissions`,
      { cause: err, details: { file, reason: "unreadable" } },
    );
  }
  const l = ctx.layout;
  const source = `file://${abs}`;
  const have = expected !== undefined && sizeIfPresentSync(blobPathOf(l, expected)) !== undefined;
  const copyTo = have ? undefined : `${l.tmp}/import-${crypto.randomUUID()}.partial`;
  let hex: string;
  try {
    const cap = ctx.cap === undefined || copyTo === undefined
      ? undefined
      : Math.max(0, ctx.cap - await ctx.usedBytes());
    hex = await copyHashing(src, copyTo, cap, { file, url: source }, opts.signal);
  } catch (err) {
    if (copyTo !== undefined) removeIfPresentSync(copyTo);
    throw err;
  } finally {
    src.close();
  }
  if (expected !== undefined && hex !== expected) {
    if (copyTo !== undefined) removeIfPresentSync(copyTo);
    throw new SynapseError(
      "artifact_invalid",
      `Cannot import ${file}: its SHA-256 is sha256:${hex}, not the expected sha256:${expected}; ` +
        "check the file and the expected digest",
      {
        details: {
          file,
          reason: "digest_mismatch",
          expected: digestOf(expected),
          digest: digestOf(hex),
        },
      },
    );
  }
  if (copyTo !== undefined) {
    publishBlobSync(l, copyTo, hex, source, ctx.now());
    ctx.markVerified(hex);
  } else ensureMetaSync(l, hex, source, ctx.now());
  return await ctx.validate(hex, opts.format, file);
}

/**
 * Downloads `url` as blob `hex` unless it is there: under the exclusive download lock
 * `leases/<hex>.download.lock` (polling while another process holds it, until its blob appears
 * or the lock is free), into `tmp/<hex>.partial` ({@link fetchToPartial}), then publishes and
 * validates. The partial is removed when the transfer fails or is cancelled.
 *
 * @throws {SynapseError} see `ModelCache.download`; `signal.reason` on abort.
 */
export async function downloadInto(
  ctx: IngestContext,
  url: string,
  hex: string,
  opts: { size?: number | undefined; format?: ArtifactFormat | undefined; file: string },
  signal: AbortSignal,
  report: (p: DownloadProgress) => void,
): Promise<BlobMeta> {
  const l = ctx.layout;
  const digest = digestOf(hex);
  const validateExisting = async (): Promise<BlobMeta | undefined> => {
    if (sizeIfPresentSync(blobPathOf(l, hex)) === undefined) return undefined;
    try {
      ensureMetaSync(l, hex, url, ctx.now());
      return await ctx.validate(hex, opts.format, opts.file);
    } catch (err) {
      // Deleted by a GC between the look and the lease: download it again.
      if (err instanceof SynapseError && err.code === "model_not_installed") return undefined;
      throw err;
    }
  };
  const have = await validateExisting();
  if (have !== undefined) return have;
  const lockPath = downloadLockPathOf(l, hex);
  let lock = tryLockExclusive(lockPath);
  while (lock === undefined) {
    // Another process is downloading this digest: wait for its blob or its lock.
    await sleep(ctx.pollMs, signal);
    const theirs = await validateExisting();
    if (theirs !== undefined) return theirs;
    lock = tryLockExclusive(lockPath);
  }
  const partialPath = `${l.tmp}/${hex}.partial`;
  try {
    const done = await validateExisting();
    if (done !== undefined) return done;
    const partial = sizeIfPresentSync(partialPath) ?? 0;
    const capBytes = ctx.cap === undefined
      ? undefined
      : Math.max(0, ctx.cap - ((await ctx.usedBytes()) - partial));
    ctx.log("info", "synapse.models", "downloading into the model cache", {
      file: opts.file,
      digest,
      resume_from: partial,
    });
    const fetched = await fetchToPartial({
      url,
      partialPath,
      sha256Hex: hex,
      size: opts.size,
      file: opts.file,
      idleTimeoutMs: ctx.idleTimeoutMs,
      capBytes,
      fetch: ctx.fetch,
      signal,
      onProgress: report,
      log: ctx.log,
      retryDelaysMs: ctx.retryDelaysMs,
    });
    publishBlobSync(l, partialPath, hex, url, ctx.now());
    ctx.markVerified(hex);
    ctx.log("info", "synapse.models", "downloaded into the model cache", {
      file: opts.file,
      digest,
      bytes: fetched.size,
      resumed: fetched.resumed,
    });
  } catch (err) {
    // The call ends: tmp/ keeps nothing of it (see the module doc).
    try {
      if (Deno.lstatSync(partialPath).isFile || Deno.lstatSync(partialPath).isSymlink) {
        removeIfPresentSync(partialPath);
      }
    } catch { /* absent, or not ours to remove */ }
    throw err;
  } finally {
    lock.release();
  }
  return await ctx.validate(hex, opts.format, opts.file);
}

/** Streams `src` into `dest` (when given) while hashing; returns the hex digest. */
async function copyHashing(
  src: Deno.FsFile,
  dest: string | undefined,
  capBytes: number | undefined,
  names: { file: string; url: string },
  signal: AbortSignal | undefined,
): Promise<string> {
  using out = dest === undefined
    ? undefined
    : await Deno.open(dest, { create: true, write: true, truncate: true, mode: 0o600 });
  const hex = await sha256FileHex(src, {
    chunkBytes: 4 * 1024 * 1024,
    signal,
    onChunk: async (chunk, done) => {
      if (out === undefined) return;
      if (capBytes !== undefined && done > capBytes) {
        throw downloadFailed(
          names,
          "storage_full",
          `${done} bytes would exceed the cache's storage cap (${capBytes} bytes left)`,
        );
      }
      try {
        let off = 0;
        while (off < chunk.length) off += await out.write(chunk.subarray(off));
      } catch (err) {
        if (isDiskFull(err)) {
          throw downloadFailed(names, "storage_full", "the disk is full", {}, err);
        }
        throw err;
      }
    },
  });
  await out?.sync();
  return hex;
}
