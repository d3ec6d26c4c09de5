/**
 * The content-addressed model cache (contract.md §8 "Model cache", issue 11 items 1, 2 and 4).
 *
 * **Root:** `$CORTEXKIT_MODEL_CACHE`, else `$SYNAPSE_MODEL_CACHE_DIR`, else
 * `<data_home>/cortexkit/models` ({@link modelCacheRoot}).
 *
 * **Layout:** `blobs/<hex>` (the bytes of `sha256:<hex>`), `meta/<hex>.json` ({@link BlobMeta}),
 * `tmp/` (`<hex>.partial` downloads, `<hex>.lock` download locks, files being written),
 * `leases/` (`<hex>.lock` shared leases, `<hex>.meta.lock` meta update locks). Every file is
 * written to `tmp/`, fsynced and renamed into place, and a blob is renamed into `blobs/` only
 * after its digest was verified: nothing partial or unverified is ever visible there.
 *
 * **Downloads** ({@link ModelCache.download}): see {@link ./download.ts} for the transfer, the
 * redirect policy and the failures. Two calls for one digest in a process share one transfer;
 * across processes an exclusive flock on `tmp/<hex>.lock` lets one process download while the
 * others poll until the blob appears. A partial left by a failed or killed download is resumed.
 *
 * **Validation** happens before any engine sees a file ({@link ./validate.ts}); its outcome is
 * recorded in the meta (`validation_state`, `validation_error`, `sanitized_tokenizer_digest`).
 *
 * **Leases and GC** ({@link ModelCache.gc}): loads and validation hold a shared lease
 * ({@link ModelCache.acquireShared}); GC is two-phase — it tombstones an unleased, unpinned
 * blob, and a later GC deletes it once the grace period has passed, under an exclusive lease.
 * A blob that is leased or pinned again loses its tombstone. GC never touches pins; a pin is
 * removed only by its owner ({@link ModelCache.unpin}).
 *
 * @module
 */
import { createHash } from "node:crypto";
import { SynapseError } from "../contract/errors.ts";
import { type LogSink, nullLog } from "../log/log.ts";
import { dataHome, envLookup, type EnvSource } from "../paths.ts";
import { tryLockExclusive } from "../../ffi/flock.ts";
import {
  blobPathOf,
  digestOf,
  ensureLayoutSync,
  hexOf,
  isDiskFull,
  type Layout,
  layoutOf,
  leasePathOf,
  readMeta,
  readMetaSync,
  removeIfPresentSync,
  sizeIfPresentSync,
  syncDirSync,
  updateMetaSync,
} from "./_store.ts";
import { collectGarbage } from "./_gc.ts";
import { downloadFailed, fetchToPartial } from "./download.ts";
import { type CacheLease, cacheLease, lockLeaseShared } from "./leases.ts";
import type { ArtifactFormat, BlobMeta, Digest, DownloadProgress, GcRow } from "./types.ts";
import { sniffFormat, validateArtifact } from "./validate.ts";

export type { CacheLease } from "./leases.ts";

/** `cache_max_bytes` default: 32 GiB (contract.md §9). */
export const DEFAULT_CACHE_MAX_BYTES = 32 * 1024 ** 3;

/** Default idle-body timeout of a download (ms, contract.md §1). */
export const DEFAULT_IDLE_TIMEOUT_MS = 60_000;

/** Default GC grace period between tombstone and delete (ms). */
export const DEFAULT_GC_GRACE_MS = 60_000;

/**
 * The cache root: `$CORTEXKIT_MODEL_CACHE`, else `$SYNAPSE_MODEL_CACHE_DIR`, else
 * `<data_home>/cortexkit/models` (empty variables count as unset; see {@link dataHome}).
 *
 * @param env Environment source; defaults to `Deno.env.get`.
 * @returns The root path (possibly relative, as the data home may be).
 */
export function modelCacheRoot(env?: EnvSource): string {
  const get = envLookup(env);
  return get("CORTEXKIT_MODEL_CACHE") ?? get("SYNAPSE_MODEL_CACHE_DIR") ??
    `${dataHome(env).replace(/\/+$/, "")}/cortexkit/models`;
}

/** Options of {@link ModelCache}. */
export interface ModelCacheOptions {
  /** @default {modelCacheRoot()} */
  root?: string;
  /** `cache_max_bytes`: the GC watermark when `cache.gc` names no digest (bytes). @default {32 GiB} */
  maxBytes?: number;
  /**
   * Hard cap on blob plus tmp bytes: a write past it fails `download_failed {reason:
   * "storage_full"}` (a real ENOSPC fails the same way). @default {no cap}
   */
  storageCapBytes?: number;
  /** Idle-body timeout of downloads (ms). @default {60000} */
  idleTimeoutMs?: number;
  /** Owner of pins taken without an owner. @default {"synapse"} */
  moduleId?: string;
  /** @default {globalThis.fetch} */
  fetch?: typeof fetch;
  /** Clock (ms since the epoch). @default {Date.now} */
  now?: () => number;
  /** How often a download waiting for another process's download looks again (ms). @default {200} */
  lockPollMs?: number;
  /** @default {nullLog} */
  log?: LogSink;
}

/** Options of {@link ModelCache.importFile}. */
export interface ImportFileOptions {
  /** The file's expected digest: a mismatch is `artifact_invalid {reason: "digest_mismatch"}`. */
  expectedDigest?: Digest | string;
  /** Validate as this format; sniffed when absent. */
  format?: ArtifactFormat;
  /** Logical name for errors. @default {the file's base name} */
  file?: string;
  signal?: AbortSignal;
}

/** Options of {@link ModelCache.download}. */
export interface DownloadOptions {
  /** Pinned digest (`sha256:<hex>` or 64 hex digits); required. */
  sha256: Digest | string;
  /** Pinned size (bytes). */
  size?: number;
  /** Validate as this format; sniffed when absent. */
  format?: ArtifactFormat;
  /** Logical name for errors (`details.file`). @default {the URL's last path segment} */
  file?: string;
  /** Aborting rejects this call with `signal.reason`; the transfer goes on while another caller waits for it. */
  signal?: AbortSignal;
  /** Called as bytes arrive (each caller of a shared transfer gets every report). */
  onProgress?: (p: DownloadProgress) => void;
}

/** Options of {@link ModelCache.gc}. */
export interface GcOptions {
  /** Collect this blob only; else every blob beyond the `maxBytes` watermark, oldest first. */
  digest?: Digest | string;
  /** Grace period between tombstone and delete (ms). @default {60000} */
  graceMs?: number;
}

interface InFlight {
  promise: Promise<BlobMeta>;
  listeners: Set<(p: DownloadProgress) => void>;
  callers: number;
  abort: AbortController;
}

/** The model cache of one root; see the module doc. Holds no open resources between calls. */
export class ModelCache {
  /** The root directory. */
  readonly root: string;
  #l: Layout;
  #maxBytes: number;
  #cap: number | undefined;
  #idleTimeoutMs: number;
  #moduleId: string;
  #fetch: typeof fetch;
  #now: () => number;
  #pollMs: number;
  #log: LogSink;
  #inflight = new Map<string, InFlight>();
  #laidOut = false;

  /**
   * @param opts Root, limits, clock, fetch, log.
   * @throws {RangeError} when a limit is not a positive number.
   */
  constructor(opts: ModelCacheOptions = {}) {
    this.#l = layoutOf(opts.root ?? modelCacheRoot());
    this.root = this.#l.root;
    this.#maxBytes = positive(opts.maxBytes ?? DEFAULT_CACHE_MAX_BYTES, "maxBytes", true);
    this.#cap = opts.storageCapBytes === undefined
      ? undefined
      : positive(opts.storageCapBytes, "storageCapBytes", true);
    this.#idleTimeoutMs = positive(opts.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS, "idleTimeoutMs");
    this.#pollMs = positive(opts.lockPollMs ?? 200, "lockPollMs");
    this.#moduleId = opts.moduleId ?? "synapse";
    this.#fetch = opts.fetch ?? globalThis.fetch;
    this.#now = opts.now ?? Date.now;
    this.#log = opts.log ?? nullLog;
  }

  /** Path of a blob's bytes: `<root>/blobs/<hex>` (whether or not it exists). */
  blobPath(digest: Digest | string): string {
    return blobPathOf(this.#l, hexOf(digest, "digest"));
  }

  /**
   * The meta of a blob in the cache; `undefined` when the blob is not there. A blob whose meta
   * file is missing (a crash between the two renames) gets a stand-in: format `other`,
   * `unvalidated`, created at the file's mtime.
   */
  async meta(digest: Digest | string): Promise<BlobMeta | undefined> {
    const hex = hexOf(digest, "digest");
    const size = sizeIfPresentSync(blobPathOf(this.#l, hex));
    if (size === undefined) return undefined;
    return (await readMeta(this.#l, hex)) ?? this.#standIn(hex);
  }

  /** Every blob's meta, least recently created first. */
  async list(): Promise<BlobMeta[]> {
    const out: BlobMeta[] = [];
    try {
      for await (const e of Deno.readDir(this.#l.blobs)) {
        if (!e.isFile || !/^[0-9a-f]{64}$/.test(e.name)) continue;
        const m = await this.meta(digestOf(e.name));
        if (m !== undefined) out.push(m);
      }
    } catch (err) {
      if (!(err instanceof Deno.errors.NotFound)) throw err;
    }
    return out.sort((a, b) => a.created_ms - b.created_ms || a.digest.localeCompare(b.digest));
  }

  /** Bytes on disk: every blob plus everything in `tmp/` (partials). */
  async usedBytes(): Promise<number> {
    let total = 0;
    for (const dir of [this.#l.blobs, this.#l.tmp]) {
      try {
        for await (const e of Deno.readDir(dir)) {
          if (e.isFile) total += sizeIfPresentSync(`${dir}/${e.name}`) ?? 0;
        }
      } catch (err) {
        if (!(err instanceof Deno.errors.NotFound)) throw err;
      }
    }
    return total;
  }

  /**
   * Copies a local file into the cache, computing its SHA-256 while copying, then validates it.
   * When the blob is already there only the source's digest is computed.
   *
   * @param path The file.
   * @param opts Expected digest, format, logical name, signal.
   * @returns The validated meta (`source` is `file://<absolute path>`).
   * @throws {SynapseError} `artifact_invalid` `{reason: "digest_mismatch", expected, digest,
   *   file}` or a validation reason (see {@link validateArtifact}), `{reason: "unreadable"}` when
   *   the file cannot be read; `download_failed {reason: "storage_full"}` past the storage cap
   *   or on a full disk; `invalid_request {field: "expected_digest"}` for a malformed digest.
   */
  async importFile(path: string, opts: ImportFileOptions = {}): Promise<BlobMeta> {
    const expected = opts.expectedDigest === undefined
      ? undefined
      : hexOf(opts.expectedDigest, "expected_digest");
    const file = opts.file ?? path.slice(path.lastIndexOf("/") + 1);
    this.#layout();
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
    const source = `file://${abs}`;
    const copyTo =
      expected !== undefined && sizeIfPresentSync(blobPathOf(this.#l, expected)) !== undefined
        ? undefined
        : `${this.#l.tmp}/import-${crypto.randomUUID()}.partial`;
    let hex: string;
    try {
      hex = await this.#copyHashing(src, copyTo, { file, url: source }, opts.signal);
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
    if (copyTo !== undefined) this.#publish(copyTo, hex, source);
    else this.#ensureMeta(hex, source);
    return await this.validate(digestOf(hex), opts.format, file);
  }

  /**
   * Downloads `url` into the cache, verified against the pinned `sha256` (and `size`), then
   * validates it. A blob already in the cache is only validated. See {@link ./download.ts} for
   * resume, redirects and failures.
   *
   * @param url http or https URL.
   * @param opts Pinned digest and size, format, logical name, signal, progress.
   * @returns The validated meta.
   * @throws {SynapseError} `invalid_request` `{field: "url" | "sha256" | "size"}` for bad
   *   arguments; `download_failed` `{file, reason: network | http_status | storage_full,
   *   http_status?}` (transient); `artifact_invalid` `{reason: digest_mismatch | size_mismatch |
   *   <validation reason>}` (permanent); `signal.reason` when the caller aborts.
   */
  download(url: string, opts: DownloadOptions): Promise<BlobMeta> {
    let hex: string;
    let parsed: URL | null;
    try {
      hex = hexOf(opts.sha256, "sha256");
      parsed = URL.parse(url);
      if (parsed === null || (parsed.protocol !== "http:" && parsed.protocol !== "https:")) {
        throw new SynapseError(
          "invalid_request",
          `Cannot download '${String(url).slice(0, 200)}': only http and https URLs are fetched`,
          { details: { field: "url", reason: "unsupported_url" } },
        );
      }
      if (opts.size !== undefined && !(Number.isSafeInteger(opts.size) && opts.size >= 0)) {
        throw new SynapseError(
          "invalid_request",
          `Cannot download ${url}: size ${opts.size} is not a byte count`,
          { details: { field: "size", reason: "bad_size" } },
        );
      }
    } catch (err) {
      return Promise.reject(err);
    }
    if (opts.signal?.aborted) return Promise.reject(opts.signal.reason);
    const file = opts.file ?? (decodeURIComponent(parsed.pathname.split("/").pop() ?? "") || url);
    let entry = this.#inflight.get(hex);
    if (entry === undefined) {
      const created: InFlight = {
        promise: undefined as unknown as Promise<BlobMeta>,
        listeners: new Set(),
        callers: 0,
        abort: new AbortController(),
      };
      created.promise = this.#downloadOnce(url, hex, { ...opts, file }, created)
        .finally(() => this.#inflight.delete(hex));
      created.promise.catch(() => {});
      this.#inflight.set(hex, created);
      entry = created;
    }
    const shared = entry;
    shared.callers++;
    const listener = opts.onProgress;
    if (listener !== undefined) shared.listeners.add(listener);
    const leave = (): void => {
      if (listener !== undefined) shared.listeners.delete(listener);
    };
    const signal = opts.signal;
    if (signal === undefined) return shared.promise.finally(leave);
    return new Promise<BlobMeta>((resolve, reject) => {
      const onAbort = (): void => {
        leave();
        if (--shared.callers === 0) shared.abort.abort(signal.reason);
        reject(signal.reason);
      };
      signal.addEventListener("abort", onAbort, { once: true });
      shared.promise.then(resolve, reject).finally(() => {
        signal.removeEventListener("abort", onAbort);
        leave();
      });
    });
  }

  /**
   * Sniffs (when `format` is absent and the meta records none) and validates a blob, recording
   * the outcome in its meta; idempotent — a blob already validated as `format` is not read again,
   * and one already found invalid as `format` fails again with the recorded error. Holds a shared
   * lease while it reads.
   *
   * @param digest The blob.
   * @param format Validate as this format.
   * @param file Logical name for errors. @default {the source's base name}
   * @returns The meta, `validation_state: "valid"`.
   * @throws {SynapseError} `artifact_invalid` with `details.reason` (see
   *   {@link validateArtifact}) and `details.digest`; `model_not_installed` when the blob is not
   *   in the cache.
   */
  async validate(
    digest: Digest | string,
    format?: ArtifactFormat,
    file?: string,
  ): Promise<BlobMeta> {
    const hex = hexOf(digest, "digest");
    using lease = this.acquireShared(digestOf(hex));
    const meta = readMetaSync(this.#l, hex) ?? this.#ensureMeta(hex, "");
    const label = file ?? (meta.source.split("/").pop() || digestOf(hex));
    // An unvalidated blob's recorded format is only a guess: sniff it.
    const fmt = format ??
      (meta.validation_state === "unvalidated" ? await sniffFormat(lease.path) : meta.format);
    if (meta.format === fmt && meta.validation_state === "valid") return meta;
    if (meta.format === fmt && meta.validation_state === "invalid" && meta.validation_error) {
      const e = meta.validation_error;
      throw new SynapseError("artifact_invalid", e.message, { details: e.details ?? {} });
    }
    try {
      const facts = await validateArtifact(lease.path, fmt, label);
      return this.#setMeta(hex, (m) => {
        m.format = fmt;
        m.validation_state = "valid";
        delete m.validation_error;
        if (facts.sanitizedTokenizerDigest !== undefined) {
          m.sanitized_tokenizer_digest = facts.sanitizedTokenizerDigest;
        } else delete m.sanitized_tokenizer_digest;
      });
    } catch (err) {
      if (!(err instanceof SynapseError) || err.code !== "artifact_invalid") throw err;
      const details = { ...err.details, digest: digestOf(hex) };
      this.#setMeta(hex, (m) => {
        m.format = fmt;
        m.validation_state = "invalid";
        m.validation_error = { code: err.code, message: err.message, details };
      });
      throw new SynapseError("artifact_invalid", err.message, { cause: err, details });
    }
  }

  /**
   * Takes a shared lease on a blob (see {@link ./leases.ts}): GC keeps it, in every process,
   * until the lease is released; a tombstone on it is cleared. Waits (briefly, synchronously)
   * while a GC in another process is deleting it.
   *
   * @param digest The blob.
   * @returns The lease; `using lease = cache.acquireShared(d)` releases it at scope end.
   * @throws {SynapseError} `model_not_installed` `{digest, reason: "not_in_cache"}` when the blob
   *   is not (or no longer) in the cache; `invalid_request` for a malformed digest.
   */
  acquireShared(digest: Digest | string): CacheLease {
    const hex = hexOf(digest, "digest");
    this.#layout();
    const lock = lockLeaseShared(leasePathOf(this.#l, hex));
    try {
      const path = blobPathOf(this.#l, hex);
      if (sizeIfPresentSync(path) === undefined) throw this.#notInCache(hex);
      if (readMetaSync(this.#l, hex)?.tombstone !== undefined) {
        this.#setMeta(hex, (m) => void delete m.tombstone);
      }
      return cacheLease(digestOf(hex), path, lock);
    } catch (err) {
      lock.release();
      throw err;
    }
  }

  /**
   * Pins a blob for `owner` (idempotent): GC keeps it until every owner unpinned it. Clears a
   * tombstone.
   *
   * @param digest The blob.
   * @param owner @default {the cache's moduleId}
   * @returns The meta after the change.
   * @throws {SynapseError} `model_not_installed` when the blob is not in the cache.
   */
  pin(digest: Digest | string, owner?: string): Promise<BlobMeta> {
    try {
      const who = owner ?? this.#moduleId;
      // The lease keeps a GC in another process from deleting the blob under the new pin.
      using lease = this.acquireShared(digest);
      const hex = hexOf(lease.digest, "digest");
      return Promise.resolve(this.#setMeta(hex, (m) => {
        if (!m.pins.some((p) => p.owner === who)) {
          m.pins.push({ owner: who, since_ms: this.#now() });
        }
        delete m.tombstone;
      }));
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /**
   * Removes `owner`'s pin (idempotent); other owners' pins stay.
   *
   * @param digest The blob.
   * @param owner @default {the cache's moduleId}
   * @returns The meta after the change.
   * @throws {SynapseError} `model_not_installed` when the blob is not in the cache.
   */
  unpin(digest: Digest | string, owner?: string): Promise<BlobMeta> {
    try {
      const who = owner ?? this.#moduleId;
      const hex = hexOf(digest, "digest");
      if (sizeIfPresentSync(blobPathOf(this.#l, hex)) === undefined) throw this.#notInCache(hex);
      return Promise.resolve(this.#setMeta(hex, (m) => {
        m.pins = m.pins.filter((p) => p.owner !== who);
      }));
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /**
   * Two-phase GC (contract.md §8): a named blob, or — with no digest — blobs beyond the
   * `maxBytes` watermark, least recently created first (plus partial downloads nobody is
   * writing, idle for `graceMs`). See {@link collectGarbage} for the rows.
   *
   * @param opts Digest, grace period.
   * @returns One row per blob considered.
   * @throws {SynapseError} `model_not_installed` for a named blob not in the cache;
   *   `invalid_request` for a malformed digest or a negative grace.
   */
  async gc(opts: GcOptions = {}): Promise<GcRow[]> {
    const graceMs = opts.graceMs ?? DEFAULT_GC_GRACE_MS;
    if (!(Number.isFinite(graceMs) && graceMs >= 0)) {
      throw new SynapseError(
        "invalid_request",
        `Cannot collect garbage: grace_ms ${graceMs} is not >= 0`,
        {
          details: { field: "grace_ms", reason: "out_of_range" },
        },
      );
    }
    const hex = opts.digest === undefined ? undefined : hexOf(opts.digest, "digest");
    this.#layout();
    if (hex !== undefined && sizeIfPresentSync(blobPathOf(this.#l, hex)) === undefined) {
      throw this.#notInCache(hex);
    }
    return await collectGarbage({
      layout: this.#l,
      ...(hex === undefined ? {} : { hex }),
      graceMs,
      maxBytes: this.#maxBytes,
      now: this.#now(),
      list: () => this.list(),
      usedBytes: () => this.usedBytes(),
      standIn: (h) => this.#standIn(h),
      log: this.#log,
    });
  }

  // --- internals ---

  async #downloadOnce(
    url: string,
    hex: string,
    opts: DownloadOptions & { file: string },
    shared: InFlight,
  ): Promise<BlobMeta> {
    const digest = digestOf(hex);
    const signal = shared.abort.signal;
    const validateExisting = async (): Promise<BlobMeta | undefined> => {
      if (sizeIfPresentSync(blobPathOf(this.#l, hex)) === undefined) return undefined;
      try {
        this.#ensureMeta(hex, url);
        return await this.validate(digest, opts.format, opts.file);
      } catch (err) {
        // Deleted by a GC between the look and the lease: download it again.
        if (err instanceof SynapseError && err.code === "model_not_installed") return undefined;
        throw err;
      }
    };
    this.#layout();
    const have = await validateExisting();
    if (have !== undefined) return have;
    const lockPath = `${this.#l.tmp}/${hex}.lock`;
    let lock = tryLockExclusive(lockPath);
    while (lock === undefined) {
      // Another process is downloading this digest: wait for its blob or its lock.
      await sleep(this.#pollMs, signal);
      const theirs = await validateExisting();
      if (theirs !== undefined) return theirs;
      lock = tryLockExclusive(lockPath);
    }
    try {
      const done = await validateExisting();
      if (done !== undefined) return done;
      const partialPath = `${this.#l.tmp}/${hex}.partial`;
      let capBytes: number | undefined;
      if (this.#cap !== undefined) {
        const others = (await this.usedBytes()) - (sizeIfPresentSync(partialPath) ?? 0);
        capBytes = Math.max(0, this.#cap - others);
      }
      this.#log("info", "synapse.models", "downloading into the model cache", {
        file: opts.file,
        digest,
        ...(sizeIfPresentSync(partialPath) ? { resume_from: sizeIfPresentSync(partialPath)! } : {}),
      });
      const fetched = await fetchToPartial({
        url,
        partialPath,
        sha256Hex: hex,
        ...(opts.size === undefined ? {} : { size: opts.size }),
        file: opts.file,
        idleTimeoutMs: this.#idleTimeoutMs,
        ...(capBytes === undefined ? {} : { capBytes }),
        fetch: this.#fetch,
        signal,
        onProgress: (p) => {
          for (const l of shared.listeners) {
            try {
              l(p);
            } catch { /* a listener's fault is its own */ }
          }
        },
        log: this.#log,
      });
      this.#publish(partialPath, hex, url);
      this.#log("info", "synapse.models", "downloaded into the model cache", {
        file: opts.file,
        digest,
        bytes: fetched.size,
        resumed: fetched.resumed,
      });
    } finally {
      lock.release();
    }
    return await this.validate(digest, opts.format, opts.file);
  }

  /** Streams `src` into `dest` (when given) while hashing; returns the hex digest. */
  async #copyHashing(
    src: Deno.FsFile,
    dest: string | undefined,
    names: { file: string; url: string },
    signal: AbortSignal | undefined,
  ): Promise<string> {
    const hash = createHash("sha256");
    const cap = this.#cap === undefined || dest === undefined
      ? undefined
      : Math.max(0, this.#cap - await this.usedBytes());
    using out = dest === undefined
      ? undefined
      : await Deno.open(dest, { create: true, write: true, truncate: true, mode: 0o644 });
    const buf = new Uint8Array(4 * 1024 * 1024);
    let done = 0;
    while (true) {
      signal?.throwIfAborted();
      const n = await src.read(buf);
      if (n === null) break;
      const chunk = buf.subarray(0, n);
      hash.update(chunk);
      done += n;
      if (out === undefined) continue;
      if (cap !== undefined && done > cap) {
        throw downloadFailed(
          names,
          "storage_full",
          `${done} bytes would exceed the cache's storage cap`,
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
    }
    await out?.sync();
    return hash.digest("hex");
  }

  /** Renames a verified temp file into `blobs/` and writes its meta (keeping any pins). */
  #publish(tmpPath: string, hex: string, source: string): void {
    const blob = blobPathOf(this.#l, hex);
    if (sizeIfPresentSync(blob) !== undefined) {
      removeIfPresentSync(tmpPath);
    } else {
      Deno.renameSync(tmpPath, blob);
      syncDirSync(this.#l.blobs);
    }
    const size = sizeIfPresentSync(blob) ?? 0;
    updateMetaSync(this.#l, hex, (m) => ({
      digest: digestOf(hex),
      source,
      format: m?.format ?? "other",
      size,
      validation_state: m?.size === size ? m.validation_state : "unvalidated",
      ...(m?.size === size && m.validation_error ? { validation_error: m.validation_error } : {}),
      ...(m?.size === size && m.sanitized_tokenizer_digest
        ? { sanitized_tokenizer_digest: m.sanitized_tokenizer_digest }
        : {}),
      pins: m?.pins ?? [],
      created_ms: m?.created_ms ?? this.#now(),
    }));
  }

  /** The meta of a present blob, written as a stand-in when it is missing. */
  #ensureMeta(hex: string, source: string): BlobMeta {
    return updateMetaSync(
      this.#l,
      hex,
      (m) => m !== undefined ? undefined : { ...this.#standIn(hex), source },
    )!;
  }

  /** Changes a meta in place under its lock (a missing meta starts as a stand-in). */
  #setMeta(hex: string, change: (m: BlobMeta) => void): BlobMeta {
    return updateMetaSync(this.#l, hex, (m) => {
      const next = m ?? this.#standIn(hex);
      change(next);
      return next;
    })!;
  }

  #standIn(hex: string): BlobMeta {
    let size = 0;
    let created = this.#now();
    try {
      const st = Deno.statSync(blobPathOf(this.#l, hex));
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

  #notInCache(hex: string): SynapseError {
    return new SynapseError(
      "model_not_installed",
      `Cannot use sha256:${hex}: it is not in the model cache at ${this.root}; download or ` +
        "import it first",
      { details: { digest: digestOf(hex), reason: "not_in_cache" } },
    );
  }

  #layout(): void {
    if (this.#laidOut) return;
    ensureLayoutSync(this.#l);
    this.#laidOut = true;
  }
}

function positive(v: number, name: string, integer = false): number {
  if (!(Number.isFinite(v) && v > 0) || (integer && !Number.isSafeInteger(v))) {
    throw new RangeError(
      `Cannot create the model cache as '${name}' must be a positive number: received ${v}`,
    );
  }
  return v;
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal.addEventListener("abort", onAbort, { once: true });
  });
}
