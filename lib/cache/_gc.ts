/**
 * The two GC phases of the model cache (docs/internals.md §8.5), per blob:
 *
 * 1. an unleased, unpinned blob without a tombstone gets one (`marked`, with `delete_after_ms`);
 * 2. a tombstoned blob whose tombstone is at least `graceMs` old (the grace of the GC call that
 *    deletes) is deleted (`deleted`, with `freed_bytes`) — under an exclusive lease, taken
 *    without waiting, so a blob any process holds a shared lease on is `kept {reason: "leased"}`.
 *
 * A pinned blob is `kept {reason: "pinned", pinned_by}` (its tombstone, if any, is cleared); a
 * tombstoned blob still in its grace is `marked {reason: "in_grace"}`. Each blob is judged in
 * one synchronous section under its exclusive lease, so a lease or pin taken in this process
 * cannot interleave, and one taken in another process waits for the section to end.
 *
 * @module
 */
import { tryLockExclusive } from "../../ffi/flock.ts";
import type { LogSink } from "../log/log.ts";
import {
  blobPathOf,
  digestOf,
  downloadLockPathOf,
  type Layout,
  leasePathOf,
  metaPathOf,
  readMetaSync,
  removeIfPresentSync,
  sizeIfPresentSync,
  syncDirSync,
  updateMetaSync,
} from "./_store.ts";
import { tryLockLeaseExclusive } from "./leases.ts";
import type { BlobMeta, GcRow } from "./types.ts";

/** What {@link collectGarbage} needs of the cache. */
export interface GcInput {
  layout: Layout;
  /** Collect only this blob (it exists). */
  hex?: string | undefined;
  /** ms. */
  graceMs: number;
  /** Watermark (bytes) when no `hex` is named. */
  maxBytes: number;
  /** ms since the epoch. */
  now: number;
  list(): Promise<BlobMeta[]>;
  usedBytes(): Promise<number>;
  standIn(hex: string): BlobMeta;
  log: LogSink;
}

/**
 * Runs one GC pass (see the module doc). With no `hex`: first removes partial downloads that no
 * process is writing (their `leases/<hex>.download.lock` is free) and that were not touched for `graceMs`
 * (rows `deleted {reason: "partial"}`); then walks the blobs least recently created first while
 * the bytes not yet marked or deleted exceed `maxBytes`; the rest are `kept {reason:
 * "under_watermark"}` (a tombstone on them is cleared).
 *
 * @returns One row per blob (or partial) considered.
 */
export async function collectGarbage(input: GcInput): Promise<GcRow[]> {
  if (input.hex !== undefined) return [collectOne(input, input.hex)];
  const rows: GcRow[] = [];
  rows.push(...removeIdlePartials(input));
  let planned = await input.usedBytes();
  for (const meta of await input.list()) {
    const hex = meta.digest.slice("sha256:".length);
    if (planned <= input.maxBytes) {
      if (meta.tombstone !== undefined) clearTombstone(input.layout, hex);
      rows.push({ digest: meta.digest, state: "kept", reason: "under_watermark" });
      continue;
    }
    const row = collectOne(input, hex);
    if (row.state !== "kept") planned -= meta.size;
    rows.push(row);
  }
  return rows;
}

/** Judges one blob under its exclusive lease, in one synchronous section. */
function collectOne(input: GcInput, hex: string): GcRow {
  const l = input.layout;
  const digest = digestOf(hex);
  const lease = tryLockLeaseExclusive(leasePathOf(l, hex));
  if (lease === undefined) return { digest, state: "kept", reason: "leased" };
  try {
    const blob = blobPathOf(l, hex);
    const size = sizeIfPresentSync(blob);
    if (size === undefined) return { digest, state: "deleted", freed_bytes: 0 };
    const meta = readMetaSync(l, hex) ?? input.standIn(hex);
    if (meta.pins.length > 0) {
      if (meta.tombstone !== undefined) clearTombstone(l, hex);
      return { digest, state: "kept", reason: "pinned", pinned_by: meta.pins.map((p) => p.owner) };
    }
    if (meta.tombstone === undefined) {
      updateMetaSync(l, hex, (m) => ({
        ...(m ?? input.standIn(hex)),
        tombstone: { marked_ms: input.now, grace_ms: input.graceMs },
      }));
      return { digest, state: "marked", delete_after_ms: input.now + input.graceMs };
    }
    const deleteAfter = meta.tombstone.marked_ms + input.graceMs;
    if (input.now < deleteAfter) {
      return { digest, state: "marked", reason: "in_grace", delete_after_ms: deleteAfter };
    }
    removeIfPresentSync(blob);
    syncDirSync(l.blobs);
    removeIfPresentSync(metaPathOf(l, hex));
    syncDirSync(l.meta);
    input.log("info", "synapse.models", "deleted a blob from the model cache", {
      digest,
      bytes: size,
    });
    return { digest, state: "deleted", freed_bytes: size };
  } finally {
    lease.release();
  }
}

function clearTombstone(l: Layout, hex: string): void {
  updateMetaSync(l, hex, (m) => {
    if (m?.tombstone === undefined) return undefined;
    delete m.tombstone;
    return m;
  });
}

/** Removes partials nobody is downloading that were idle for the grace period. */
function removeIdlePartials(input: GcInput): GcRow[] {
  const rows: GcRow[] = [];
  const l = input.layout;
  let names: string[];
  try {
    names = [...Deno.readDirSync(l.tmp)].filter((e) => e.isFile).map((e) => e.name);
  } catch {
    return rows;
  }
  for (const name of names) {
    const m = /^([0-9a-f]{64})\.partial$/.exec(name);
    if (m === null) continue;
    const lock = tryLockExclusive(downloadLockPathOf(l, m[1]!));
    if (lock === undefined) continue; // being downloaded right now
    try {
      const path = `${l.tmp}/${name}`;
      let st: Deno.FileInfo;
      try {
        st = Deno.statSync(path);
      } catch {
        continue;
      }
      if ((st.mtime?.getTime() ?? 0) + input.graceMs > input.now) continue;
      removeIfPresentSync(path);
      rows.push({
        digest: digestOf(m[1]!),
        state: "deleted",
        reason: "partial",
        freed_bytes: st.size,
      });
    } finally {
      lock.release();
    }
  }
  return rows;
}
