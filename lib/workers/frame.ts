/**
 * Framing of the worker protocol (docs/internals.md §7): every frame is a u32 **little-endian**
 * byte length followed by that many payload bytes. The largest frame is 64 MiB unless the handshake
 * negotiates less (the min of both sides' `max_frame`).
 *
 * Pure code, no I/O: {@link encodeFrame} builds one frame, {@link FrameDecoder} cuts a byte
 * stream (any chunking) back into frames and checks the limit as soon as a length arrives, before
 * anything is allocated (STYLE 14). Every protocol fault throws {@link WorkerProtocolError}; the
 * host maps it to `engine_crashed` when it wires the socket.
 *
 * @module
 */

/** Largest frame payload, in bytes, before negotiation: 64 MiB (docs/internals.md §7). */
export const DEFAULT_MAX_FRAME_BYTES: number = 64 * 1024 * 1024;

/** Largest length a u32 header can declare, in bytes. */
export const U32_MAX: number = 0xffff_ffff;

/** Bytes of the length header in front of every frame. */
export const FRAME_HEADER_BYTES = 4;

/**
 * Why a worker connection broke the protocol.
 *
 * - `frame_too_large`: a declared or encoded length exceeds the negotiated max;
 * - `truncated`: the stream ended inside a frame;
 * - `bad_json`: a control frame is not UTF-8 JSON;
 * - `bad_message`: a control message or tensor frame has the wrong shape;
 * - `version_mismatch`, `nonce_mismatch`, `engine_mismatch`: HELLO refused;
 * - `unknown_type`: a control `type` that is unknown, or not valid from that sender.
 */
export type WorkerProtocolErrorCode =
  | "frame_too_large"
  | "truncated"
  | "bad_json"
  | "bad_message"
  | "version_mismatch"
  | "nonce_mismatch"
  | "engine_mismatch"
  | "unknown_type";

/**
 * A worker connection broke the protocol of docs/internals.md §7. Protocol-level: the connection
 * cannot be trusted afterwards, so the host closes it, kills the worker and reports
 * `engine_crashed`. A worker's `ERR` message is *not* this error (it is an answer, not a fault).
 *
 * @example Refuse an oversize frame
 * ```ts
 * import { WorkerProtocolError } from "./frame.ts";
 * import assert from "node:assert";
 *
 * const err = new WorkerProtocolError("frame_too_large", "Cannot decode frame: length 9 exceeds max 8");
 * assert.strictEqual(err.code, "frame_too_large");
 * ```
 */
export class WorkerProtocolError extends Error {
  /** What was broken. */
  readonly code: WorkerProtocolErrorCode;

  /**
   * @param code What was broken.
   * @param message std-style message: "Cannot …: …", no final period.
   * @param options `cause`: the underlying error, if any.
   */
  constructor(code: WorkerProtocolErrorCode, message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "WorkerProtocolError";
    this.code = code;
  }
}

/** Options of {@link encodeFrame}. */
export interface EncodeFrameOptions {
  /**
   * Largest payload allowed, in bytes (the negotiated max).
   * @default {DEFAULT_MAX_FRAME_BYTES}
   */
  maxFrameBytes?: number;
}

/**
 * Wraps `payload` in one frame: u32 little-endian length, then the payload bytes (copied).
 *
 * @param payload Frame payload (a UTF-8 JSON control message or a raw LE tensor).
 * @param options The negotiated max frame size.
 * @returns A new buffer of `4 + payload.byteLength` bytes.
 * @throws {WorkerProtocolError} `frame_too_large` when the payload exceeds `maxFrameBytes`.
 * @throws {RangeError} when `maxFrameBytes` is not an integer in 1..2^32-1.
 *
 * @example Golden bytes
 * ```ts
 * import { encodeFrame } from "./frame.ts";
 * import assert from "node:assert";
 *
 * assert.deepStrictEqual(encodeFrame(Uint8Array.of(0xaa, 0xbb)), Uint8Array.of(2, 0, 0, 0, 0xaa, 0xbb));
 * ```
 */
export function encodeFrame(payload: Uint8Array, options: EncodeFrameOptions = {}): Uint8Array {
  const max = checkMaxFrameBytes(options.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES);
  if (payload.byteLength > max) {
    throw new WorkerProtocolError(
      "frame_too_large",
      `Cannot encode frame: length ${payload.byteLength} exceeds max ${max}`,
    );
  }
  const out = new Uint8Array(FRAME_HEADER_BYTES + payload.byteLength);
  writeU32LE(out, 0, payload.byteLength);
  out.set(payload, FRAME_HEADER_BYTES);
  return out;
}

/** Options of {@link FrameDecoder}. */
export interface FrameDecoderOptions {
  /**
   * Largest payload accepted, in bytes; a larger declared length throws before allocation.
   * @default {DEFAULT_MAX_FRAME_BYTES}
   */
  maxFrameBytes?: number;
}

/**
 * Incremental decoder of a framed byte stream (docs/internals.md §7). Feed it chunks as they
 * arrive; it returns each frame once complete, whatever the chunking (a frame split over many
 * chunks, many frames in one chunk).
 *
 * The length header is checked against the max as soon as its 4 bytes are in, before the body
 * buffer is allocated. After a {@link WorkerProtocolError} the decoder is failed: the stream
 * cannot be resynchronised, and every later {@link FrameDecoder.push} rethrows the same error.
 *
 * @example Decode a stream chunked at random
 * ```ts
 * import { encodeFrame, FrameDecoder } from "./frame.ts";
 * import assert from "node:assert";
 *
 * const stream = encodeFrame(Uint8Array.of(1, 2, 3));
 * const decoder = new FrameDecoder();
 * assert.deepStrictEqual(decoder.push(stream.subarray(0, 5)), []);
 * assert.strictEqual(decoder.pending, 5);
 * assert.deepStrictEqual(decoder.push(stream.subarray(5)), [Uint8Array.of(1, 2, 3)]);
 * decoder.end();
 * ```
 */
export class FrameDecoder {
  #maxFrameBytes: number;
  readonly #header = new Uint8Array(FRAME_HEADER_BYTES);
  #headerFill = 0;
  /** Body of the frame in progress; allocated only after its length passed the check. */
  #body: Uint8Array | undefined;
  #bodyFill = 0;
  #failure: WorkerProtocolError | undefined;

  /**
   * @param options The max frame size before negotiation.
   * @throws {RangeError} when `maxFrameBytes` is not an integer in 1..2^32-1.
   */
  constructor(options: FrameDecoderOptions = {}) {
    this.#maxFrameBytes = checkMaxFrameBytes(options.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES);
  }

  /** Largest payload accepted now, in bytes. */
  get maxFrameBytes(): number {
    return this.#maxFrameBytes;
  }

  /** Bytes received but not yet returned as a frame (header and body of the frame in progress). */
  get pending(): number {
    return this.#body === undefined ? this.#headerFill : FRAME_HEADER_BYTES + this.#bodyFill;
  }

  /**
   * Sets the max after the handshake (the min of both sides). Applies from the next length
   * header on; a frame already in progress was declared under the old limit.
   *
   * @param maxFrameBytes Largest payload accepted, in bytes.
   * @throws {RangeError} when `maxFrameBytes` is not an integer in 1..2^32-1.
   */
  setMaxFrameBytes(maxFrameBytes: number): void {
    this.#maxFrameBytes = checkMaxFrameBytes(maxFrameBytes);
  }

  /**
   * Consumes one chunk of the stream.
   *
   * @param chunk Bytes as read from the connection; copied, so the caller may reuse the buffer.
   * @returns The frames completed by this chunk, in order; each owns its own buffer (may be empty).
   * @throws {WorkerProtocolError} `frame_too_large` when a declared length exceeds the max
   *   (frames completed earlier in the same chunk are dropped with the connection).
   */
  push(chunk: Uint8Array): Uint8Array[] {
    if (this.#failure !== undefined) throw this.#failure;
    const frames: Uint8Array[] = [];
    let offset = 0;
    while (offset < chunk.byteLength) {
      if (this.#body === undefined) {
        const take = Math.min(FRAME_HEADER_BYTES - this.#headerFill, chunk.byteLength - offset);
        this.#header.set(chunk.subarray(offset, offset + take), this.#headerFill);
        this.#headerFill += take;
        offset += take;
        if (this.#headerFill < FRAME_HEADER_BYTES) break;
        const length = readU32LE(this.#header, 0);
        if (length > this.#maxFrameBytes) {
          this.#failure = new WorkerProtocolError(
            "frame_too_large",
            `Cannot decode frame: length ${length} exceeds max ${this.#maxFrameBytes}`,
          );
          throw this.#failure;
        }
        this.#headerFill = 0;
        if (length === 0) {
          frames.push(new Uint8Array(0));
          continue;
        }
        this.#body = new Uint8Array(length);
        this.#bodyFill = 0;
      }
      const body: Uint8Array = this.#body;
      const take = Math.min(body.byteLength - this.#bodyFill, chunk.byteLength - offset);
      body.set(chunk.subarray(offset, offset + take), this.#bodyFill);
      this.#bodyFill += take;
      offset += take;
      if (this.#bodyFill === body.byteLength) {
        frames.push(body);
        this.#body = undefined;
        this.#bodyFill = 0;
      }
    }
    return frames;
  }

  /**
   * Declares the end of the stream (EOF).
   *
   * @throws {WorkerProtocolError} `truncated` when the stream ended inside a frame
   *   ({@link FrameDecoder.pending} > 0), or the error the decoder already failed with.
   */
  end(): void {
    if (this.#failure !== undefined) throw this.#failure;
    if (this.pending > 0) {
      const expected = this.#body === undefined
        ? "a 4-byte length header"
        : `${this.#body.byteLength} payload bytes`;
      throw new WorkerProtocolError(
        "truncated",
        `Cannot decode frame: stream ended after ${this.pending} bytes of a frame, expected ${expected}`,
      );
    }
  }
}

/**
 * Checks a max frame size: an integer in 1..2^32-1 bytes.
 *
 * @param maxFrameBytes Candidate max, in bytes.
 * @returns `maxFrameBytes` unchanged.
 * @throws {RangeError} when out of range or not an integer.
 */
export function checkMaxFrameBytes(maxFrameBytes: number): number {
  if (!Number.isInteger(maxFrameBytes) || maxFrameBytes < 1 || maxFrameBytes > U32_MAX) {
    throw new RangeError(
      `Cannot use max frame size as it must be an integer in 1..${U32_MAX}: received ${maxFrameBytes}`,
    );
  }
  return maxFrameBytes;
}

function readU32LE(bytes: Uint8Array, offset: number): number {
  return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getUint32(offset, true);
}

function writeU32LE(bytes: Uint8Array, offset: number, value: number): void {
  new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).setUint32(offset, value, true);
}
