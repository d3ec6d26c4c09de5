/**
 * Types of the content-addressed model cache (docs/internals.md §8.5): what a
 * blob's meta file records, what a download reports, what `cache.gc` answers. The cache itself
 * is {@link ./model_cache.ts}.
 *
 * @module
 */

/** `sha256:<64 lowercase hex>`: the name of a blob. */
export type Digest = `sha256:${string}`;

/** Formats the cache sniffs and validates before any engine touches a file. */
export type ArtifactFormat = "onnx" | "gguf" | "tokenizer_json" | "config_json" | "other";

/** Validation state recorded in a blob's meta. */
export type ValidationState = "unvalidated" | "valid" | "invalid";

/** A pin: an owner (a module id plus what it pins for, e.g. `synapse:model:my-embed`) keeps a blob from GC. */
export interface BlobPin {
  /** Who holds the pin; `cache.pin` from module `m` pins as `m`, a runtime-loaded model as `m:model:<id>`. */
  owner: string;
  /** ms since the epoch. */
  since_ms: number;
}

/** `meta/<digest>.json` (docs/internals.md §8.5). */
export interface BlobMeta {
  digest: Digest;
  /** Where the bytes came from: an http(s) URL or `file://` path. */
  source: string;
  format: ArtifactFormat;
  /** Bytes. */
  size: number;
  /** `sha256:<hex>` of the sanitized tokenizer (tokenizer_json blobs). */
  sanitized_tokenizer_digest?: string;
  validation_state: ValidationState;
  /** `{code, message, details}` of the failed validation. */
  validation_error?: { code: string; message: string; details?: Record<string, unknown> };
  pins: BlobPin[];
  /** Set by the first GC phase; the blob is deleted once `marked_ms + grace_ms` has passed and nothing leases or pins it. */
  tombstone?: { marked_ms: number; grace_ms: number };
  /** ms since the epoch. */
  created_ms: number;
}

/** Progress of a download: bytes so far of the expected total (null when the server sends no length and no size was pinned). */
export interface DownloadProgress {
  bytes_done: number;
  bytes_total: number | null;
}

/** One row of `cache.gc`'s answer (docs/operations.md "cache.gc"). */
export interface GcRow {
  digest: Digest;
  state: "deleted" | "marked" | "kept";
  /**
   * Why: a kept blob is `pinned`, `leased` or `under_watermark`; a marked blob still in its grace
   * period is `in_grace`; a deleted `partial` was an abandoned partial download.
   */
  reason?: string;
  /** Bytes freed (deleted rows). */
  freed_bytes?: number;
  /** When a marked blob may be deleted (ms since the epoch), for a GC with the same grace. */
  delete_after_ms?: number;
  /** Owners of the pins that keep a `pinned` blob. */
  pinned_by?: string[];
}
