/**
 * The content-addressed model cache (docs/internals.md §8.5).
 *
 * **Root:** `$CORTEXKIT_MODEL_CACHE`, else `$SYNAPSE_MODEL_CACHE_DIR`, else
 * `<data_home>/cortexkit/models` ({@link modelCacheRoot}).
 *
 * **Layout:** `blobs/<hex>` (the bytes of `sha256:<hex>`), `meta/<hex>.json` ({@link BlobMeta}),
 * `tmp/` (`<hex>.partial` downloads and files being written, only while a call runs),
 * `leases/` (`<hex>.lock` shared leases, `<hex>.meta.lock` meta update locks,
 * `<hex>.download.lock` download locks). Every file is
 * written to `tmp/`, fsynced and renamed into place, and a blob is renamed into `blobs/` only
 * after its digest was verified: nothing partial or unverified is ever visible there.
 *
 * **Downloads** ({@link ModelCache.download}): see {@link ./download.ts} for the transfer, the
 * redirect policy and the failures. Two calls for one digest in a process share one transfer;
 * across processes an exclusive flock on `leases/<hex>.download.lock` lets one process download
 * while the others poll until the blob appears. Transport faults are retried inside the call
 * (3 retries, 0.5/1/2 s ±25 %, resuming with `Range`; see {@link ./download.ts}); a call that
 * ends — served, failed or cancelled — leaves nothing in `tmp/`. Only a partial left by a
 * killed process is resumed by the next download of its digest.
 *
 * **Validation** happens before any engine sees a file ({@link ./validate.ts}); its outcome is
 * recorded in the meta (`validation_state`, `validation_error`, `sanitized_tokenizer_digest`).
 *
 * **Verification on load** ({@link ModelCache.verifyBlob}, F28): every load checks each blob
 * against its digest before an engine reads it. A blob is hashed once per cache instance (one
 * boot) and the result reused while its size, mtime, inode and ctime are unchanged; a blob
 * written by this instance (download, import) counts as verified. A damaged blob — a size other
 * than the recorded one, or bytes that hash to another digest — is `artifact_invalid {reason:
 * "blob_digest_mismatch"}` naming the blob's digest; {@link ModelCache.healBlob} fetches it again
 * from a recorded source (a pinned URL, a local file that still hashes to the digest), moving the
 * damaged bytes aside meanwhile and back when no source heals it.
 *
 * **Leases and GC** ({@link ModelCache.gc}): loads and validation hold a shared lease
 * ({@link ModelCache.acquireShared}); GC is two-phase — it tombstones an unleased, unpinned
 * blob, and a later GC deletes it once the grace period has passed, under an exclusive lease.
 * A blob that is leased or pinned again loses its tombstone. GC never touches pins; a pin is
 * removed only by its owner ({@link ModelCache.unpin}).
 *
 * @module
 */
import { sha256FileHex } from "../identity/sha256.ts";
import { SynapseError } from "../contract/errors.ts";
import { type LogSink, nullLog } from "../log/log.ts";
import { dataHome, envLookup, type EnvSource } from "../paths.ts";
import { SharedFlights } from "./_flights.ts";
import { collectGarbage } from "./_gc.ts";
import { downloadInto, importInto, type IngestContext } from "./_ingest.ts";
import {
  blobPathOf,
  changeMetaSync,
  digestOf,
  ensureLayoutSync,
  ensureMetaSync,
  hexOf,
  type Layout,
  layoutOf,
  leasePathOf,
  readMeta,
  readMetaSync,
  sizeIfPresentSync,
  standInMeta,
} from "./_store.ts";
import { type CacheLease, cacheLease, lockLeaseShared } from "./leases.ts";
import type { ArtifactFormat, BlobMeta, Digest, DownloadProgress, GcRow } from "./types.ts";
import { sniffFormat, validateArtifact } from "./validate.ts";

export type { CacheLease } from "./leases.ts";

/** `cache_max_bytes` default: 32 GiB (docs/config.md). */
export const DEFAULT_CACHE_MAX_BYTES = 32 * 1024 ** 3;

/** Default idle-body timeout of a download, ms. */
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
  root?: string | undefined;
  /** `cache_max_bytes`: the GC watermark when `cache.gc` names no digest (bytes). @default {32 GiB} */
  maxBytes?: number | undefined;
  /**
   * Hard cap on blob plus tmp bytes: a write past it fails `download_failed {reason:
   * "storage_full"}` (a real ENOSPC fails the same way). @default {no cap}
   */
  storageCapBytes?: number | undefined;
  /** Idle-body timeout of downloads (ms). @default {60000} */
  idleTimeoutMs?: number | undefined;
  /** Owner of pins taken without an owner. @default {"synapse"} */
  moduleId?: string | undefined;
  /** @default {globalThis.fetch} */
  fetch?: typeof fetch | undefined;
  /** Clock (ms since the epoch). @default {Date.now} */
  now?: (() => number) | undefined;
  /** How often a download waiting for another process's download looks again (ms). @default {200} */
  lockPollMs?: number | undefined;
  /** @default {nullLog} */
  log?: LogSink | undefined;
  /**
   * Waits before the retries of a transient download fault (ms, jittered ±25 %); its length is
   * the number of retries. @default {[500, 1000, 2000]}
   */
  downloadRetryDelaysMs?: readonly number[] | undefined;
}

/** Who a blob check is for, named in its errors (never a caller's path). */
export interface BlobLabel {
  /** The model that loads it. */
  model_id?: string;
  /** Its role or logical file name (`model`, `tokenizer`, `config`). */
  file?: string;
}

/** What {@link ModelCache.verifyBlob} did. */
export interface BlobCheck {
  digest: Digest;
  /** False when an earlier check of this instance still held (same size, mtime, inode, ctime). */
  hashed: boolean;
  /** Bytes hashed (0 when not hashed). */
  bytes: number;
  /** Time spent hashing, ms. */
  ms: number;
}

/** What {@link ModelCache.healBlob} did. */
export interface BlobHeal {
  digest: Digest;
  /** The kind of source that healed it. */
  from: "url" | "file";
  /** The source (a URL, or `file://` path). */
  source: string;
}

/** Options of {@link ModelCache.importFile}. */
export interface ImportFileOptions {
  /** The file's expected digest: a mismatch is `artifact_invalid {reason: "digest_mismatch"}`. */
  expectedDigest?: Digest | string | undefined;
  /** Validate as this format; sniffed when absent. */
  format?: ArtifactFormat | undefined;
  /** Logical name for errors. @default {the file's base name} */
  file?: string | undefined;
  signal?: AbortSignal | undefined;
}

/** Options of {@link ModelCache.download}. */
export interface DownloadOptions {
  /** Pinned digest (`sha256:<hex>` or 64 hex digits); required. */
  sha256: Digest | string;
  /** Pinned size (bytes). */
  size?: number | undefined;
  /** Validate as this format; sniffed when absent. */
  format?: ArtifactFormat | undefined;
  /** Logical name for errors (`details.file`). @default {the URL's last path segment} */
  file?: string | undefined;
  /** Aborting rejects this call with `signal.reason`; the transfer goes on while another caller waits for it. */
  signal?: AbortSignal | undefined;
  /** Called as bytes arrive (each caller of a shared transfer gets every report). */
  onProgress?: ((p: DownloadProgress) => void) | undefined;
}

/** Options of {@link ModelCache.gc}. */
export interface GcOptions {
  /** Collect this blob only; else every blob beyond the `maxBytes` watermark, oldest first. */
  digest?: Digest | string | undefined;
  /** Grace period between tombstone and delete (ms). @default {60000} */
  graceMs?: number | undefined;
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
  #flights = new SharedFlights<BlobMeta, DownloadProgress>();
  #laidOut = false;
  #retryDelaysMs: readonly number[] | undefined;
  /** hex → stat key of the blob when it last hashed right. */
  #verified = new Map<string, string>();
  #checking = new Map<string, Promise<BlobCheck>>();
  #healing = new Map<string, Promise<BlobHeal>>();

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
    this.#retryDelaysMs = opts.downloadRetryDelaysMs;
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

  /** Bytes on disk: every blob plus the files in `tmp/` (partials; lock files not counted). */
  async usedBytes(): Promise<number> {
    let total = 0;
    for (const dir of [this.#l.blobs, this.#l.tmp]) {
      try {
        for await (const e of Deno.readDir(dir)) {
          if (e.isFile && !e.name.endsWith(".lock")) {
            total += sizeIfPresentSync(`${dir}/${e.name}`) ?? 0;
          }
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
    const expectedHex = opts.expectedDigest === undefined
      ? undefined
      : hexOf(opts.expectedDigest, "expected_digest");
    this.#layout();
    return await importInto(this.#ingest(), path, {
      expectedHex,
      format: opts.format,
      signal: opts.signal,
      file: opts.file ?? path.slice(path.lastIndexOf("/") + 1),
    });
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
    const file = opts.file ?? (lastSegment(parsed) || url);
    this.#layout();
    const fileOpts = {
      file,
      size: opts.size,
      format: opts.format,
    };
    return this.#flights.join(
      hex,
      (signal, report) => downloadInto(this.#ingest(), url, hex, fileOpts, signal, report),
      { signal: opts.signal, onProgress: opts.onProgress },
    );
  }

  /**
   * Sniffs (when `format` is absent and the blob was never validated) and validates a blob, recording
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
    const meta = readMetaSync(this.#l, hex) ?? ensureMetaSync(this.#l, hex, "", this.#now());
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
   * Checks that a blob holds the bytes of its digest (the verification on load of the module
   * doc): hashed unless an earlier check of this instance holds for the file as it is now
   * (size, mtime, inode, ctime); a size other than the recorded one fails without hashing.
   * Concurrent checks of one blob share one hash.
   *
   * @param digest The blob.
   * @param label Model and file named in the error.
   * @returns What was done.
   * @throws {SynapseError} `artifact_invalid {reason: "blob_digest_mismatch", digest, model_id,
   *   file, size, expected_size}` for a damaged blob; `model_not_installed {digest, reason:
   *   "not_in_cache"}` when it is not there; `invalid_request` for a malformed digest.
   */
  verifyBlob(digest: Digest | string, label: BlobLabel = {}): Promise<BlobCheck> {
    let hex: string;
    try {
      hex = hexOf(digest, "digest");
    } catch (err) {
      return Promise.reject(err);
    }
    const running = this.#checking.get(hex);
    if (running !== undefined) return running.catch((err) => Promise.reject(relabel(err, label)));
    const p = this.#check(hex, label).finally(() => this.#checking.delete(hex));
    this.#checking.set(hex, p);
    return p;
  }

  /**
   * Heals a damaged or missing blob from the first of `sources` that yields its bytes: an
   * http(s) URL is downloaded against the digest (and the recorded size), a `file://` path is
   * imported and must hash to the digest. The damaged bytes are moved aside in `tmp/` meanwhile,
   * and put back when no source heals (so the next load reports the same damage); `tmp/` keeps
   * nothing afterwards. Concurrent heals of one blob share one.
   *
   * @param digest The blob.
   * @param sources Candidate sources, tried in order (others are skipped).
   * @param label Model and file named in logs and errors.
   * @returns Which source healed it.
   * @throws {SynapseError} the last source's failure (a `download_failed` stays transient), or
   *   `artifact_invalid {reason: "no_source"}` when no source is usable.
   */
  healBlob(
    digest: Digest | string,
    sources: readonly string[],
    label: BlobLabel = {},
  ): Promise<BlobHeal> {
    let hex: string;
    try {
      hex = hexOf(digest, "digest");
    } catch (err) {
      return Promise.reject(err);
    }
    const running = this.#healing.get(hex);
    if (running !== undefined) return running;
    const p = this.#heal(hex, sources, label).finally(() => this.#healing.delete(hex));
    this.#healing.set(hex, p);
    return p;
  }

  async #check(hex: string, label: BlobLabel): Promise<BlobCheck> {
    const path = blobPathOf(this.#l, hex);
    const digest = digestOf(hex);
    let st: Deno.FileInfo;
    try {
      st = await Deno.stat(path);
    } catch (err) {
      if (err instanceof Deno.errors.NotFound) throw relabel(this.#notInCache(hex), label);
      throw err;
    }
    const key = statKey(st);
    if (this.#verified.get(hex) === key) return { digest, hashed: false, bytes: 0, ms: 0 };
    this.#verified.delete(hex);
    const recorded = readMetaSync(this.#l, hex)?.size;
    if (recorded !== undefined && recorded > 0 && recorded !== st.size) {
      throw this.#damaged(hex, label, st.size, recorded);
    }
    const t0 = performance.now();
    const got = await sha256FileHex(path);
    const ms = performance.now() - t0;
    if (got !== hex) throw this.#damaged(hex, label, st.size, recorded);
    // Trusted only for the file as it was before the hash (a change meanwhile hashes again).
    const after = await Deno.stat(path).catch(() => undefined);
    if (after !== undefined && statKey(after) === key) this.#verified.set(hex, key);
    this.#log("debug", "synapse.models", "verified a blob against its digest", {
      digest,
      bytes: st.size,
      ms: Math.round(ms),
      ...label,
    });
    return { digest, hashed: true, bytes: st.size, ms };
  }

  async #heal(hex: string, sources: readonly string[], label: BlobLabel): Promise<BlobHeal> {
    this.#layout();
    const digest = digestOf(hex);
    const usable = [...new Set(sources)].filter((s) => /^(https?|file):\/\//i.test(s));
    if (usable.length === 0) {
      throw new SynapseError(
        "artifact_invalid",
        `Cannot heal blob ${digest}: no recorded source (pinned URL or local file) is known`,
        { details: { ...label, digest, reason: "no_source" } },
      );
    }
    const meta = readMetaSync(this.#l, hex);
    const blob = blobPathOf(this.#l, hex);
    const aside = `${this.#l.tmp}/damaged-${hex}-${crypto.randomUUID()}`;
    let moved = false;
    try {
      Deno.renameSync(blob, aside);
      moved = true;
    } catch (err) {
      if (!(err instanceof Deno.errors.NotFound)) throw err;
    }
    this.#verified.delete(hex);
    let last: unknown;
    try {
      for (const source of usable) {
        const from = source.startsWith("file:") ? "file" as const : "url" as const;
        try {
          if (from === "file") {
            await this.importFile(decodeURIComponent(new URL(source).pathname), {
              expectedDigest: digest,
              file: label.file,
            });
          } else {
            await this.download(source, {
              sha256: digest,
              ...(meta?.size ? { size: meta.size } : {}),
              file: label.file,
            });
          }
          this.#log("warn", "synapse.models", "healed a damaged model blob from its source", {
            ...label,
            digest,
            from,
          });
          return { digest, from, source };
        } catch (err) {
          last = err;
          this.#log("warn", "synapse.models", "a source could not heal a damaged blob", {
            ...label,
            digest,
            from,
            code: String((err as SynapseError).code ?? "error"),
            reason: String((err as SynapseError).details?.reason ?? ""),
          });
        }
      }
      throw last;
    } finally {
      if (moved) {
        if (sizeIfPresentSync(blob) === undefined) {
          // Nothing healed it: the damaged bytes go back, so the next load reports them again.
          try {
            Deno.renameSync(aside, blob);
          } catch { /* gone: the next load reports a missing blob */ }
        } else {
          try {
            Deno.removeSync(aside);
          } catch { /* already gone */ }
        }
      }
    }
  }

  #damaged(
    hex: string,
    label: BlobLabel,
    size: number,
    recorded: number | undefined,
  ): SynapseError {
    const what = label.model_id === undefined
      ? `blob sha256:${hex}`
      : `model '${label.model_id}': its ${label.file ?? "model"} file (blob sha256:${hex})`;
    const why = recorded !== undefined && recorded !== size
      ? `has ${size} bytes, not the recorded ${recorded}`
      : "no longer hashes to its digest";
    return new SynapseError(
      "artifact_invalid",
      `Cannot load ${what} in the model cache at ${this.root}: it is damaged (it ${why}); pull ` +
        "the model again, or remove it and pull it, to fetch its bytes again",
      {
        details: {
          ...label,
          reason: "blob_digest_mismatch",
          digest: digestOf(hex),
          size,
          ...(recorded === undefined ? {} : { expected_size: recorded }),
        },
      },
    );
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
   * Two-phase GC (docs/internals.md §8.5): a named blob, or — with no digest — blobs beyond the
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
      hex,
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

  #ingest(): IngestContext {
    return {
      layout: this.#l,
      now: this.#now,
      log: this.#log,
      cap: this.#cap,
      idleTimeoutMs: this.#idleTimeoutMs,
      pollMs: this.#pollMs,
      retryDelaysMs: this.#retryDelaysMs,
      fetch: this.#fetch,
      usedBytes: () => this.usedBytes(),
      validate: (hex, format, file) => this.validate(digestOf(hex), format, file),
      markVerified: (hex) => {
        try {
          this.#verified.set(hex, statKey(Deno.statSync(blobPathOf(this.#l, hex))));
        } catch { /* gone already: the next check hashes */ }
      },
    };
  }

  #setMeta(hex: string, change: (m: BlobMeta) => void): BlobMeta {
    return changeMetaSync(this.#l, hex, this.#now(), change);
  }

  #standIn(hex: string): BlobMeta {
    return standInMeta(this.#l, hex, this.#now());
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

/** What identifies a file's current bytes without reading them: size, mtime, inode, ctime. */
function statKey(st: Deno.FileInfo): string {
  return [st.size, st.mtime?.getTime() ?? "", st.ino ?? "", st.ctime?.getTime() ?? ""].join(":");
}

/** `err` with the model and file of `label` added to its details (a shared check's error). */
function relabel(err: unknown, label: BlobLabel): unknown {
  if (!(err instanceof SynapseError)) return err;
  return new SynapseError(err.code, err.message, {
    cause: err.cause,
    details: { ...err.details, ...label },
  });
}

function positive(v: number, name: string, integer = false): number {
  if (!(Number.isFinite(v) && v > 0) || (integer && !Number.isSafeInteger(v))) {
    throw new RangeError(
      `Cannot create the model cache as '${name}' must be a positive number: received ${v}`,
    );
  }
  return v;
}

/** The decoded last path segment of a URL ("" when there is none or it does not decode). */
function lastSegment(url: URL): string {
  const raw = url.pathname.split("/").pop() ?? "";
  try {
    return decodeURIComponent(raw);
  } catch {
    return raw;
  }
}
