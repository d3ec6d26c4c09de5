/**
 * Leases on cached blobs (docs/internals.md §8.5): a load or a validation holds a
 * shared lease on the blob it reads, GC deletes a blob only under an exclusive lease, so a blob
 * in use is never deleted — across processes too, since the leases are flock(2) locks on
 * `leases/<hex>.lock` that the kernel drops when their holder dies.
 *
 * GC holds its exclusive lease only for one synchronous section (re-read the meta, unlink), so
 * a shared lease taken in the same process never waits for it, and one taken in another process
 * waits only for that section.
 *
 * @module
 */
import { tryLockExclusive, tryLockShared, waitLockShared } from "../../ffi/flock.ts";
import type { FileLock } from "../../ffi/flock.ts";
import type { Digest } from "./types.ts";

/** A shared lease on one blob: while held, GC keeps the blob. Release is idempotent. */
export interface CacheLease extends Disposable {
  /** The leased blob. */
  readonly digest: Digest;
  /** Path of the blob's bytes (`blobs/<hex>`), valid while the lease is held. */
  readonly path: string;
  /** True once released. */
  readonly released: boolean;
  /** Drops the lease (also `[Symbol.dispose]`). */
  release(): void;
}

/**
 * Takes the shared lease lock of `leasePath`, waiting while a GC in another process holds it
 * exclusively.
 *
 * @param leasePath `leases/<hex>.lock`.
 * @returns The held lock.
 * @throws {Error} when the lock file cannot be created or opened.
 */
export function lockLeaseShared(leasePath: string): FileLock {
  return tryLockShared(leasePath) ?? waitLockShared(leasePath);
}

/**
 * Takes the exclusive lease lock of `leasePath` without waiting.
 *
 * @returns The lock, or `undefined` while any shared lease (of any process) is held.
 */
export function tryLockLeaseExclusive(leasePath: string): FileLock | undefined {
  return tryLockExclusive(leasePath);
}

/**
 * Wraps a held lock as a {@link CacheLease}.
 *
 * @param digest The blob.
 * @param path The blob's path.
 * @param lock The held shared lock.
 * @returns The lease; releasing it releases the lock.
 */
export function cacheLease(digest: Digest, path: string, lock: FileLock): CacheLease {
  let released = false;
  const release = (): void => {
    if (released) return;
    released = true;
    lock.release();
  };
  return {
    digest,
    path,
    get released() {
      return released;
    },
    release,
    [Symbol.dispose]: release,
  };
}
