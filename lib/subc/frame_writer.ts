/**
 * The one writer of a subc connection ({@link FrameWriter}): every frame a session sends goes
 * through one queue, so frames never interleave on the socket, whatever number of requests
 * answer at once.
 *
 * Sending never blocks the caller: {@link FrameWriter.send} encodes the frame at once (so a frame
 * the envelope rules refuse throws where it was built) and queues its bytes; one pump writes the
 * queue in order, several small frames per `write` when they are waiting together. The queue is
 * never trimmed (a terminal frame must not be lost), so backpressure goes the other way: while
 * more than the high-water mark is queued (the peer is not reading), the session stops reading
 * new frames ({@link FrameWriter.belowHighWater}) until the queue drains below the low-water mark.
 *
 * @module
 */
import { encodeFrame } from "./bus_envelope.ts";
import type { FrameInit } from "./bus_envelope.ts";

/** Where frames are written: the part of `Deno.Conn` the writer uses. */
export interface FrameSink {
  /** Writes some of `p`; returns how many bytes (as `Deno.Conn.write`). */
  write(p: Uint8Array): Promise<number>;
}

/** Default high-water mark of the queue: 8 MiB. */
export const DEFAULT_HIGH_WATER_BYTES = 8 * 1024 * 1024;
/** Most bytes coalesced into one `write` (frames are never split across two coalesced writes). */
const COALESCE_BYTES = 64 * 1024;

/** Options of {@link FrameWriter}. */
export interface FrameWriterOptions {
  /**
   * Queued bytes above which {@link FrameWriter.belowHighWater} waits.
   * @default {DEFAULT_HIGH_WATER_BYTES}
   */
  highWaterBytes?: number | undefined;
  /** Queued bytes at or below which it resolves again. @default highWaterBytes / 2 */
  lowWaterBytes?: number | undefined;
}

/**
 * A single-writer queue of frames over one socket.
 *
 * @example Frames go out whole and in order
 * ```ts
 * import { FrameWriter } from "./frame_writer.ts";
 * import { FrameDecoder, FrameType } from "./bus_envelope.ts";
 * import assert from "node:assert/strict";
 *
 * const written: Uint8Array[] = [];
 * const writer = new FrameWriter({
 *   write: (p) => {
 *     written.push(p.slice(0, 3)); // a slow peer: three bytes per write
 *     return Promise.resolve(Math.min(3, p.byteLength));
 *   },
 * });
 * writer.send({ type: FrameType.Ping, corr: 1n });
 * writer.send({ type: FrameType.Ping, corr: 2n });
 * await writer.flush();
 * const frames = new FrameDecoder().push(new Uint8Array(written.flatMap((c) => [...c])));
 * assert.deepEqual(frames.map((f) => f.corr), [1n, 2n]);
 * ```
 */
export class FrameWriter {
  readonly #sink: FrameSink;
  readonly #high: number;
  readonly #low: number;
  #queue: Uint8Array[] = [];
  #queuedBytes = 0;
  #pumping = false;
  #closed = false;
  #failed: unknown;
  #idleWaiters: (() => void)[] = [];
  #lowWaiters: (() => void)[] = [];

  /**
   * @param sink The socket.
   * @param options Water marks.
   * @throws {RangeError} when a water mark is not a positive integer, or low exceeds high.
   */
  constructor(sink: FrameSink, options: FrameWriterOptions = {}) {
    this.#sink = sink;
    this.#high = options.highWaterBytes ?? DEFAULT_HIGH_WATER_BYTES;
    this.#low = options.lowWaterBytes ?? Math.floor(this.#high / 2);
    if (!Number.isInteger(this.#high) || this.#high <= 0) {
      throw new RangeError(
        `Cannot create FrameWriter as 'highWaterBytes' must be a positive integer: received ${this.#high}`,
      );
    }
    if (!Number.isInteger(this.#low) || this.#low < 0 || this.#low > this.#high) {
      throw new RangeError(
        `Cannot create FrameWriter as 'lowWaterBytes' must be an integer in 0..highWaterBytes: received ${this.#low}`,
      );
    }
  }

  /** Bytes queued and not yet written. */
  get queuedBytes(): number {
    return this.#queuedBytes;
  }

  /** The error a write failed with (the writer drops everything after it), or undefined. */
  get failed(): unknown {
    return this.#failed;
  }

  /** True after {@link close} or a failed write: sends are dropped. */
  get closed(): boolean {
    return this.#closed || this.#failed !== undefined;
  }

  /**
   * Encodes a frame and queues it. Returns at once; the pump writes it after every frame queued
   * before it. After {@link close} or a failed write the frame is dropped (the connection is
   * gone, and whoever reads it learns so from the socket).
   *
   * @param frame The frame.
   * @returns Whether it was queued.
   * @throws {SubcWireError} or {RangeError} what {@link encodeFrame} throws (nothing is queued).
   */
  send(frame: FrameInit): boolean {
    const bytes = encodeFrame(frame);
    if (this.closed) return false;
    this.#queue.push(bytes);
    this.#queuedBytes += bytes.byteLength;
    if (!this.#pumping) void this.#pump();
    return true;
  }

  /**
   * Resolves once the queue is at or below the low-water mark, at once when it is not above the
   * high-water mark, or when the writer is closed or failed.
   */
  belowHighWater(): Promise<void> {
    if (this.#queuedBytes <= this.#high || this.closed) return Promise.resolve();
    return new Promise((resolve) => this.#lowWaiters.push(resolve));
  }

  /** Resolves once every queued frame is written, or the writer failed or closed. */
  flush(): Promise<void> {
    if (this.#queue.length === 0 && !this.#pumping) return Promise.resolve();
    if (this.closed && !this.#pumping) return Promise.resolve();
    return new Promise((resolve) => this.#idleWaiters.push(resolve));
  }

  /** Stops taking frames; frames already queued are still written. Idempotent. */
  close(): void {
    this.#closed = true;
    if (!this.#pumping) this.#wake();
  }

  async #pump(): Promise<void> {
    this.#pumping = true;
    try {
      while (this.#queue.length > 0 && this.#failed === undefined) {
        const chunk = this.#take();
        let at = 0;
        while (at < chunk.byteLength) at += await this.#sink.write(chunk.subarray(at));
        this.#queuedBytes -= chunk.byteLength;
        if (this.#queuedBytes <= this.#low) this.#releaseLow();
      }
    } catch (err) {
      this.#failed = err ?? new Error("write failed");
      this.#queue = [];
      this.#queuedBytes = 0;
    } finally {
      this.#pumping = false;
      this.#wake();
    }
  }

  /** The next frame, or several small ones joined, up to {@link COALESCE_BYTES}. */
  #take(): Uint8Array {
    const first = this.#queue.shift()!;
    if (first.byteLength >= COALESCE_BYTES || this.#queue.length === 0) return first;
    let total = first.byteLength;
    let n = 0;
    while (n < this.#queue.length && total + this.#queue[n]!.byteLength <= COALESCE_BYTES) {
      total += this.#queue[n]!.byteLength;
      n++;
    }
    if (n === 0) return first;
    const out = new Uint8Array(total);
    out.set(first, 0);
    let at = first.byteLength;
    for (const part of this.#queue.splice(0, n)) {
      out.set(part, at);
      at += part.byteLength;
    }
    return out;
  }

  #releaseLow(): void {
    const waiters = this.#lowWaiters;
    this.#lowWaiters = [];
    for (const w of waiters) w();
  }

  #wake(): void {
    this.#releaseLow();
    if (this.#queue.length === 0 || this.#failed !== undefined) {
      const waiters = this.#idleWaiters;
      this.#idleWaiters = [];
      for (const w of waiters) w();
    }
  }
}
