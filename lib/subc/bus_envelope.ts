/**
 * The subc v2 envelope (subc §1): a fixed 21-byte little-endian header, then `len` body bytes.
 *
 * ```text
 * off sz field    notes
 *  0  4  len      u32, body bytes only; at most 64 MiB (67108864), checked before allocating
 *  4  1  ver      2; `len` + `ver` are the frozen 5-byte prefix
 *  5  1  type     0 Request … 11 Goodbye ({@link FrameType})
 *  6  1  flags    b0 BINARY, b1-2 PRIORITY, b3 LAST, b4-5 ADMISSION, b6 DAEMON_ORIGIN,
 *                 b7 SUBSCRIPTION
 *  7  2  channel  u16; 0 = control, else the sender-local route slot
 *  9  4  epoch    u32; per-slot bind epoch, 0 on channel 0
 * 13  8  corr     u64 correlation id (a bigint here)
 * ```
 *
 * Pure code, no I/O: {@link encodeFrame} builds one frame, {@link decodeHeader} checks one
 * header, {@link FrameDecoder} cuts a byte stream (any chunking) back into frames. Every rule of
 * subc §1 is enforced on both sides (a frame this module would refuse is never built), and every
 * refusal is a {@link SubcWireError} with a {@link FrameRejectReason}.
 *
 * @module
 */
import { SubcWireError } from "./errors.ts";
import type { FrameRejectReason } from "./errors.ts";

/** The envelope version this build speaks; checked exactly, no negotiation (subc §1). */
export const WIRE_VERSION = 2;
/** Bytes of the v2 header. */
export const HEADER_BYTES = 21;
/** Bytes of the frozen prefix (`len` u32 + `ver` u8) every envelope version keeps. */
export const PREFIX_BYTES = 5;
/** Largest body, in bytes: 64 MiB (subc §1). */
export const MAX_BODY_BYTES = 67_108_864;

/** Frame types, by name (subc §1, byte 5). */
export const FrameType = {
  Request: 0,
  Response: 1,
  Push: 2,
  StreamData: 3,
  StreamEnd: 4,
  Error: 5,
  Cancel: 6,
  Ping: 7,
  Pong: 8,
  Hello: 9,
  HelloAck: 10,
  Goodbye: 11,
} as const;

/** A frame type code, 0–11. */
export type FrameType = (typeof FrameType)[keyof typeof FrameType];

const TYPE_NAMES: readonly string[] = Object.keys(FrameType);

/**
 * The name of a frame type code (`"Request"` for 0), for messages and logs.
 *
 * @param type A type byte.
 * @returns Its name, or `"type <n>"` for an unknown byte.
 */
export function frameTypeName(type: number): string {
  return TYPE_NAMES[type] ?? `type ${type}`;
}

/**
 * Whether `type` is a known frame type (0–11).
 *
 * @param type A type byte.
 */
export function isFrameType(type: number): type is FrameType {
  return Number.isInteger(type) && type >= 0 && type < TYPE_NAMES.length;
}

/**
 * Whether frames of `type` are pure headers that must carry no body: Cancel, Ping, Pong and
 * Goodbye (subc §1).
 *
 * @param type A frame type.
 */
export function isPureHeaderType(type: number): boolean {
  return type === FrameType.Cancel || type === FrameType.Ping || type === FrameType.Pong ||
    type === FrameType.Goodbye;
}

/** Flag bit 0: the body is binary (informational; data bodies are opaque either way). */
export const FLAG_BINARY = 0x01;
/** Flag bit 3: LAST. */
export const FLAG_LAST = 0x08;
/** Flag bit 6: the daemon itself produced this frame (e.g. a route-open Error). */
export const FLAG_DAEMON_ORIGIN = 0x40;
/** Flag bit 7: a client marks a held-open (subscription) Request; the daemon relays it. */
export const FLAG_SUBSCRIPTION = 0x80;

const PRIORITY_SHIFT = 1;
const PRIORITY_MASK = 0b11 << PRIORITY_SHIFT;
const ADMISSION_SHIFT = 4;
const ADMISSION_MASK = 0b11 << ADMISSION_SHIFT;

/** Priority values of flag bits 1–2; 3 is invalid (subc §1). */
export const Priority = { Passive: 0, Interactive: 1, Background: 2 } as const;
/** A valid priority, 0–2. */
export type Priority = (typeof Priority)[keyof typeof Priority];

/** Admission classes of flag bits 4–5; 3 is invalid (subc §1). */
export const Admission = { Normal: 0, Expedite: 1, Sheddable: 2 } as const;
/** A valid admission class, 0–2. */
export type Admission = (typeof Admission)[keyof typeof Admission];

/**
 * Flags the SDKs put on control frames (Hello, channel-0 replies, Goodbye): all clear
 * (subc §1 "Flags the SDKs send").
 */
export const CONTROL_FLAGS = 0x00;
/** Flags the SDKs put on data replies and StreamData: priority interactive (`0x02`). */
export const DATA_FLAGS = 0x02;

/** The flag byte, field by field. */
export interface FlagFields {
  /** Bit 0. */
  binary: boolean;
  /** Bits 1–2; 3 only when decoding a byte that breaks the rules. */
  priority: number;
  /** Bit 3. */
  last: boolean;
  /** Bits 4–5; 3 only when decoding a byte that breaks the rules. */
  admission: number;
  /** Bit 6. */
  daemonOrigin: boolean;
  /** Bit 7. */
  subscription: boolean;
}

/**
 * Builds a flag byte from its fields; absent fields are clear / 0.
 *
 * @param fields The fields to set.
 * @returns The flag byte, 0–255.
 * @throws {RangeError} when `priority` or `admission` is not 0, 1 or 2.
 *
 * @example A subscription Request at interactive priority
 * ```ts
 * import { makeFlags, Priority } from "./bus_envelope.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(makeFlags({ priority: Priority.Interactive, subscription: true }), 0x82);
 * ```
 */
export function makeFlags(fields: Partial<FlagFields> = {}): number {
  const priority = fields.priority ?? 0;
  const admission = fields.admission ?? 0;
  if (!isTwoBitValue(priority)) {
    throw new RangeError(
      `Cannot build flags as 'priority' must be 0, 1 or 2: received ${priority}`,
    );
  }
  if (!isTwoBitValue(admission)) {
    throw new RangeError(
      `Cannot build flags as 'admission' must be 0, 1 or 2: received ${admission}`,
    );
  }
  return (fields.binary ? FLAG_BINARY : 0) | (priority << PRIORITY_SHIFT) |
    (fields.last ? FLAG_LAST : 0) | (admission << ADMISSION_SHIFT) |
    (fields.daemonOrigin ? FLAG_DAEMON_ORIGIN : 0) | (fields.subscription ? FLAG_SUBSCRIPTION : 0);
}

/**
 * Splits a flag byte into its fields. Does not validate: a priority or admission of 3 comes
 * back as 3 (the decoder refuses such frames before anyone sees them).
 *
 * @param flags A flag byte.
 * @returns Its fields.
 */
export function parseFlags(flags: number): FlagFields {
  return {
    binary: (flags & FLAG_BINARY) !== 0,
    priority: flagPriority(flags),
    last: (flags & FLAG_LAST) !== 0,
    admission: flagAdmission(flags),
    daemonOrigin: (flags & FLAG_DAEMON_ORIGIN) !== 0,
    subscription: (flags & FLAG_SUBSCRIPTION) !== 0,
  };
}

/**
 * The priority of a flag byte (bits 1–2).
 *
 * @param flags A flag byte.
 * @returns 0 passive, 1 interactive, 2 background, 3 invalid.
 */
export function flagPriority(flags: number): number {
  return (flags & PRIORITY_MASK) >> PRIORITY_SHIFT;
}

/**
 * The admission class of a flag byte (bits 4–5).
 *
 * @param flags A flag byte.
 * @returns 0 normal, 1 expedite, 2 sheddable, 3 invalid.
 */
export function flagAdmission(flags: number): number {
  return (flags & ADMISSION_MASK) >> ADMISSION_SHIFT;
}

/** A decoded header (subc §1). `ver` is always {@link WIRE_VERSION} once decoded. */
export interface FrameHeader {
  /** Body length in bytes. */
  len: number;
  /** Envelope version (2). */
  ver: number;
  /** Frame type. */
  type: FrameType;
  /** Flag byte. */
  flags: number;
  /** Route slot; 0 = control. */
  channel: number;
  /** Bind epoch; 0 on channel 0. */
  epoch: number;
  /** Correlation id, u64. */
  corr: bigint;
}

/** One whole frame: its header fields and its body. */
export interface SubcFrame {
  /** Frame type. */
  type: FrameType;
  /** Flag byte. */
  flags: number;
  /** Route slot (u16); 0 = control. */
  channel: number;
  /** Bind epoch (u32); 0 on channel 0. */
  epoch: number;
  /** Correlation id (u64). */
  corr: bigint;
  /** Body bytes (`len` of them); empty for pure-header frames. */
  body: Uint8Array;
}

/** What {@link encodeFrame} takes: a frame whose omitted fields are 0 / empty. */
export interface FrameInit {
  /** Frame type. */
  type: FrameType;
  /** Flag byte. @default {CONTROL_FLAGS} */
  flags?: number;
  /** Route slot, 0–65535. @default 0 */
  channel?: number;
  /** Bind epoch, 0–2^32-1. @default 0 */
  epoch?: number;
  /** Correlation id, 0–2^64-1. @default 0n */
  corr?: bigint;
  /** Body bytes. @default empty */
  body?: Uint8Array;
}

/** Options of {@link encodeFrame}, {@link decodeHeader} and {@link FrameDecoder}. */
export interface EnvelopeOptions {
  /**
   * Largest body, in bytes: a larger `len` is refused (`frame_too_large`), when decoding as
   * soon as the 5-byte prefix is in, before anything is allocated. At most
   * {@link MAX_BODY_BYTES}.
   *
   * @default {MAX_BODY_BYTES}
   */
  maxBodyBytes?: number;
}

const U64_MAX = (1n << 64n) - 1n;

/**
 * Encodes one frame: the 21-byte little-endian header, then the body. The header is held to
 * the same rules as a decoded one, so this never builds a frame a peer would refuse.
 *
 * @param frame The frame; omitted fields are 0 / empty.
 * @param options The body cap.
 * @returns A new buffer of `21 + body.byteLength` bytes (the body is copied).
 * @throws {SubcWireError} with the {@link FrameRejectReason} of the broken rule: a body over the
 *   cap (`frame_too_large`), an unknown type, a priority or admission of 3, SHEDDABLE on a type
 *   other than Push/StreamData, a body on Cancel/Ping/Pong/Goodbye, a nonzero epoch on channel 0.
 * @throws {RangeError} when `type`, `flags`, `channel`, `epoch` or `corr` is not an integer in
 *   the range of its field (u8, u8, u16, u32, u64).
 *
 * @example The Goodbye of the vectors (subc §7)
 * ```ts
 * import { encodeFrame, FrameType } from "./bus_envelope.ts";
 * import assert from "node:assert/strict";
 *
 * const bytes = encodeFrame({ type: FrameType.Goodbye, corr: 7n });
 * assert.equal(bytes.toHex(), "00000000020b000000000000000700000000000000");
 * ```
 */
export function encodeFrame(frame: FrameInit, options: EnvelopeOptions = {}): Uint8Array {
  const body = frame.body ?? new Uint8Array(0);
  const flags = frame.flags ?? CONTROL_FLAGS;
  const channel = frame.channel ?? 0;
  const epoch = frame.epoch ?? 0;
  const corr = frame.corr ?? 0n;
  checkInteger("type", frame.type, 0xff);
  checkInteger("flags", flags, 0xff);
  checkInteger("channel", channel, 0xffff);
  checkInteger("epoch", epoch, 0xffff_ffff);
  if (typeof corr !== "bigint" || corr < 0n || corr > U64_MAX) {
    throw new RangeError(`Cannot encode frame as 'corr' must be a u64 bigint: received ${corr}`);
  }
  const max = maxBody(options);
  if (body.byteLength > max) {
    throw reject("frame_too_large", `length ${body.byteLength} exceeds max ${max}`, {
      len: body.byteLength,
      max,
    }, "encode");
  }
  const out = new Uint8Array(HEADER_BYTES + body.byteLength);
  const view = new DataView(out.buffer);
  view.setUint32(0, body.byteLength, true);
  out[4] = WIRE_VERSION;
  out[5] = frame.type;
  out[6] = flags;
  view.setUint16(7, channel, true);
  view.setUint32(9, epoch, true);
  view.setBigUint64(13, corr, true);
  checkHeaderRules(out, "encode");
  out.set(body, HEADER_BYTES);
  return out;
}

/**
 * Decodes and checks one 21-byte header, in the order of the reference decoder: the version
 * and the body cap on the 5-byte prefix, then type, priority, admission, SHEDDABLE, pure-header
 * length and the control-channel epoch.
 *
 * @param bytes At least {@link HEADER_BYTES} bytes; only the first 21 are read.
 * @param options The body cap.
 * @returns The header.
 * @throws {SubcWireError} with the {@link FrameRejectReason} of the first broken rule.
 * @throws {RangeError} when fewer than 21 bytes are given.
 */
export function decodeHeader(bytes: Uint8Array, options: EnvelopeOptions = {}): FrameHeader {
  if (bytes.byteLength < HEADER_BYTES) {
    throw new RangeError(
      `Cannot decode header as it needs ${HEADER_BYTES} bytes: received ${bytes.byteLength}`,
    );
  }
  checkPrefix(bytes, maxBody(options));
  checkHeaderRules(bytes, "decode");
  return readHeader(bytes);
}

/**
 * Incremental decoder of a subc byte stream (subc §1 "Reading a frame"). Push chunks as they
 * arrive, in any chunking; each push returns the frames it completed.
 *
 * For each frame it buffers the 5-byte prefix and refuses `ver != 2` before reading more, then
 * refuses a `len` over the cap, then takes the other 16 header bytes and checks every header
 * rule, and only then allocates the body. After a {@link SubcWireError} the decoder is failed
 * (a byte stream cannot be resynchronised): every later {@link FrameDecoder.push} rethrows the
 * same error, and the caller closes the connection.
 *
 * @example Frames split across chunks
 * ```ts
 * import { encodeFrame, FrameDecoder, FrameType } from "./bus_envelope.ts";
 * import assert from "node:assert/strict";
 *
 * const bytes = encodeFrame({ type: FrameType.Ping, corr: 3n });
 * const decoder = new FrameDecoder();
 * assert.deepEqual(decoder.push(bytes.subarray(0, 4)), []);
 * assert.equal(decoder.pending, 4);
 * const [ping] = decoder.push(bytes.subarray(4));
 * assert.equal(ping?.corr, 3n);
 * decoder.end();
 * ```
 */
export class FrameDecoder {
  readonly #maxBody: number;
  readonly #header = new Uint8Array(HEADER_BYTES);
  #headerFill = 0;
  /** Header of the frame whose body is being read; set once every rule passed. */
  #current: FrameHeader | undefined;
  /** Its body; allocated only after the header passed. */
  #body: Uint8Array | undefined;
  #bodyFill = 0;
  #failed: SubcWireError | undefined;

  /**
   * @param options The body cap.
   * @throws {RangeError} when `maxBodyBytes` is not an integer in 0..{@link MAX_BODY_BYTES}.
   */
  constructor(options: EnvelopeOptions = {}) {
    this.#maxBody = maxBody(options);
  }

  /** Bytes received of the frame in progress (header and body), 0 between frames. */
  get pending(): number {
    return this.#headerFill + this.#bodyFill;
  }

  /**
   * Bytes allocated for the body of the frame in progress: 0 until its header passed every
   * rule, then its `len` (never more than the cap).
   */
  get allocatedBodyBytes(): number {
    return this.#body?.byteLength ?? 0;
  }

  /** The error that failed the decoder, or undefined while it is healthy. */
  get failed(): SubcWireError | undefined {
    return this.#failed;
  }

  /**
   * Feeds bytes.
   *
   * @param chunk The next bytes of the stream (not retained; bodies are copies).
   * @returns The frames this chunk completed, in order (possibly none).
   * @throws {SubcWireError} the first broken rule of subc §1; the decoder is failed from then
   *   on, and every later call throws the same error.
   */
  push(chunk: Uint8Array): SubcFrame[] {
    if (this.#failed !== undefined) throw this.#failed;
    try {
      return this.#consume(chunk);
    } catch (err) {
      if (err instanceof SubcWireError) {
        this.#failed = err;
        this.#body = undefined;
      }
      throw err;
    }
  }

  /**
   * Declares the end of the stream.
   *
   * @throws {SubcWireError} `truncated_frame` when the stream ended inside a frame (the
   *   decoder is failed), or the error that already failed it.
   */
  end(): void {
    if (this.#failed !== undefined) throw this.#failed;
    if (this.pending > 0) {
      this.#failed = reject(
        "truncated_frame",
        `the stream ended after ${this.pending} bytes of a frame`,
        { pending: this.pending },
        "decode",
      );
      this.#body = undefined;
      throw this.#failed;
    }
  }

  #consume(chunk: Uint8Array): SubcFrame[] {
    const frames: SubcFrame[] = [];
    let at = 0;
    while (at < chunk.byteLength) {
      if (this.#current === undefined) {
        // Header: the prefix first (checked alone), then the other 16 bytes.
        const want = (this.#headerFill < PREFIX_BYTES ? PREFIX_BYTES : HEADER_BYTES) -
          this.#headerFill;
        const take = Math.min(want, chunk.byteLength - at);
        this.#header.set(chunk.subarray(at, at + take), this.#headerFill);
        this.#headerFill += take;
        at += take;
        if (this.#headerFill === PREFIX_BYTES) checkPrefix(this.#header, this.#maxBody);
        if (this.#headerFill < HEADER_BYTES) continue;
        checkHeaderRules(this.#header, "decode");
        this.#current = readHeader(this.#header);
        this.#body = new Uint8Array(this.#current.len);
        this.#bodyFill = 0;
      } else {
        const body = this.#body!;
        const take = Math.min(body.byteLength - this.#bodyFill, chunk.byteLength - at);
        body.set(chunk.subarray(at, at + take), this.#bodyFill);
        this.#bodyFill += take;
        at += take;
      }
      if (this.#current !== undefined && this.#bodyFill === this.#current.len) {
        const h = this.#current;
        frames.push({
          type: h.type,
          flags: h.flags,
          channel: h.channel,
          epoch: h.epoch,
          corr: h.corr,
          body: this.#body!,
        });
        this.#current = undefined;
        this.#body = undefined;
        this.#headerFill = 0;
        this.#bodyFill = 0;
      }
    }
    return frames;
  }
}

/**
 * The Pong answering a Ping: the Ping's header with type Pong, echoing `ver`, `flags` and
 * `corr` (subc §3), and its channel and epoch, with no body.
 *
 * @param ping The Ping received.
 * @returns The Pong to send.
 * @throws {TypeError} when `ping` is not a Ping.
 */
export function pongFor(ping: SubcFrame): SubcFrame {
  if (ping.type !== FrameType.Ping) {
    throw new TypeError(`Cannot answer with a Pong: the frame is a ${frameTypeName(ping.type)}`);
  }
  return { ...ping, type: FrameType.Pong, body: new Uint8Array(0) };
}

/**
 * A one-line description of a frame for logs: `Request ch=3 ep=1 corr=5 flags=0x82 len=41`.
 * Never includes the body.
 *
 * @param frame A frame or header.
 * @returns The description.
 */
export function describeFrame(frame: SubcFrame | FrameHeader): string {
  const len = "body" in frame ? frame.body.byteLength : frame.len;
  return `${frameTypeName(frame.type)} ch=${frame.channel} ep=${frame.epoch} corr=${frame.corr} ` +
    `flags=0x${frame.flags.toString(16).padStart(2, "0")} len=${len}`;
}

function maxBody(options: EnvelopeOptions): number {
  const max = options.maxBodyBytes ?? MAX_BODY_BYTES;
  if (!Number.isInteger(max) || max < 0 || max > MAX_BODY_BYTES) {
    throw new RangeError(
      `Cannot use 'maxBodyBytes' as it must be an integer in 0..${MAX_BODY_BYTES}: received ${max}`,
    );
  }
  return max;
}

function checkInteger(field: string, value: number, max: number): void {
  if (!Number.isInteger(value) || value < 0 || value > max) {
    throw new RangeError(
      `Cannot encode frame as '${field}' must be an integer in 0..${max}: received ${value}`,
    );
  }
}

function isTwoBitValue(value: number): boolean {
  return value === 0 || value === 1 || value === 2;
}

/** The prefix rules: the version first, then the body cap (before any allocation). */
function checkPrefix(bytes: Uint8Array, max: number): void {
  const ver = bytes[4]!;
  if (ver !== WIRE_VERSION) {
    throw reject(
      "unsupported_version",
      `envelope version ${ver} is not ${WIRE_VERSION}`,
      { ver },
      "decode",
    );
  }
  const len = readU32LE(bytes, 0);
  if (len > max) {
    throw reject("frame_too_large", `length ${len} exceeds max ${max}`, { len, max }, "decode");
  }
}

/** The rules on bytes 5–20 (and `len` of pure-header types), in the reference order. */
function checkHeaderRules(bytes: Uint8Array, side: "encode" | "decode"): void {
  const type = bytes[5]!;
  const flags = bytes[6]!;
  const hexFlags = `0x${flags.toString(16).padStart(2, "0")}`;
  if (!isFrameType(type)) {
    throw reject("unknown_frame_type", `unknown frame type ${type}`, { type }, side);
  }
  if (flagPriority(flags) === 3) {
    throw reject(
      "reserved_priority_bits",
      `priority bits are 3 (reserved) in flags ${hexFlags}`,
      { flags },
      side,
    );
  }
  const admission = flagAdmission(flags);
  if (admission === 3) {
    throw reject(
      "reserved_admission_class",
      `admission bits are 3 (reserved) in flags ${hexFlags}`,
      { flags },
      side,
    );
  }
  if (
    admission === Admission.Sheddable && type !== FrameType.Push && type !== FrameType.StreamData
  ) {
    throw reject(
      "sheddable_illegal_frame_type",
      `SHEDDABLE is only allowed on Push and StreamData, not on ${frameTypeName(type)}`,
      { type, flags },
      side,
    );
  }
  const len = readU32LE(bytes, 0);
  if (isPureHeaderType(type) && len !== 0) {
    throw reject(
      "pure_header_frame_with_body",
      `a ${frameTypeName(type)} frame must have no body: length ${len}`,
      { type, len },
      side,
    );
  }
  const channel = bytes[7]! | (bytes[8]! << 8);
  const epoch = readU32LE(bytes, 9);
  if (channel === 0 && epoch !== 0) {
    throw reject(
      "nonzero_epoch_on_control_channel",
      `channel 0 (control) carries epoch ${epoch}, which must be 0`,
      { epoch },
      side,
    );
  }
}

function readHeader(bytes: Uint8Array): FrameHeader {
  const view = new DataView(bytes.buffer, bytes.byteOffset, HEADER_BYTES);
  return {
    len: view.getUint32(0, true),
    ver: bytes[4]!,
    type: bytes[5]! as FrameType,
    flags: bytes[6]!,
    channel: view.getUint16(7, true),
    epoch: view.getUint32(9, true),
    corr: view.getBigUint64(13, true),
  };
}

function readU32LE(bytes: Uint8Array, at: number): number {
  return (bytes[at]! | (bytes[at + 1]! << 8) | (bytes[at + 2]! << 16)) +
    bytes[at + 3]! * 0x100_0000;
}

function reject(
  reason: FrameRejectReason,
  what: string,
  details: Record<string, unknown>,
  side: "encode" | "decode",
): SubcWireError {
  const action = side === "encode"
    ? "fix the frame before sending it"
    : "the peer broke subc wire v2, so the connection must be closed";
  return new SubcWireError(reason, `Cannot ${side} frame: ${what}; ${action}`, { details });
}
