/**
 * The protobuf wire format, as much of it as the ONNX quantizer needs: a message is read as its
 * list of fields, each kept as the exact bytes it had, and written back field by field, so a
 * field the quantizer does not touch keeps its bytes (https://protobuf.dev/programming-guides/encoding/).
 *
 * @module
 */

/** Wire types: varint, 64-bit, length-delimited, 32-bit (groups are refused). */
export type WireType = 0 | 1 | 2 | 5;

/** One field of a message, as read. */
export interface Field {
  /** Field number. */
  no: number;
  wire: WireType;
  /** Varint value (wire 0), as a bigint-safe number (ONNX varints fit 2^53). */
  varint: number;
  /** The value's bytes: the payload of a length-delimited field, the 4/8 bytes of a fixed one. */
  value: Uint8Array;
  /** The whole field (tag included), as it was in the message. */
  raw: Uint8Array;
}

/** Reads a varint at `at`; throws RangeError on a cut-off or over-long one. */
function readVarint(buf: Uint8Array, at: number): { value: number; next: number } {
  let value = 0;
  let mul = 1;
  for (let i = 0; i < 10; i++) {
    if (at + i >= buf.length) throw new RangeError(`varint cut off at byte ${at}`);
    const b = buf[at + i]!;
    value += (b & 0x7f) * mul;
    mul *= 128;
    if ((b & 0x80) === 0) return { value, next: at + i + 1 };
  }
  throw new RangeError(`varint over 10 bytes at byte ${at}`);
}

/**
 * The fields of one message, in order.
 *
 * @throws {RangeError} A message that is not well-formed protobuf (cut-off field, group, unknown
 *   wire type).
 */
export function readFields(buf: Uint8Array): Field[] {
  const fields: Field[] = [];
  let at = 0;
  while (at < buf.length) {
    const start = at;
    const tag = readVarint(buf, at);
    at = tag.next;
    const no = Math.floor(tag.value / 8);
    const wire = tag.value % 8;
    let varint = 0;
    let value: Uint8Array;
    if (wire === 0) {
      const v = readVarint(buf, at);
      varint = v.value;
      value = buf.subarray(at, v.next);
      at = v.next;
    } else if (wire === 2) {
      const len = readVarint(buf, at);
      if (len.next + len.value > buf.length) throw new RangeError(`field ${no} cut off`);
      value = buf.subarray(len.next, len.next + len.value);
      at = len.next + len.value;
    } else if (wire === 1 || wire === 5) {
      const n = wire === 1 ? 8 : 4;
      if (at + n > buf.length) throw new RangeError(`field ${no} cut off`);
      value = buf.subarray(at, at + n);
      at += n;
    } else {
      throw new RangeError(`wire type ${wire} (field ${no}) is not used by ONNX`);
    }
    fields.push({ no, wire: wire as WireType, varint, value, raw: buf.subarray(start, at) });
  }
  return fields;
}

/** The varints of a packed (wire 2) or unpacked (wire 0) repeated integer field. */
export function varintsOf(f: Field): number[] {
  if (f.wire === 0) return [f.varint];
  const out: number[] = [];
  for (let at = 0; at < f.value.length;) {
    const v = readVarint(f.value, at);
    out.push(v.value);
    at = v.next;
  }
  return out;
}

const DECODER = new TextDecoder("utf-8", { fatal: true });

/** A length-delimited field as UTF-8 text. */
export function textOf(f: Field): string {
  return DECODER.decode(f.value);
}

/** Appends protobuf fields to a growing byte list; {@link Writer.finish} joins them. */
export class Writer {
  #parts: Uint8Array[] = [];
  #length = 0;

  /** Bytes written so far. */
  get length(): number {
    return this.#length;
  }

  #push(b: Uint8Array): this {
    this.#parts.push(b);
    this.#length += b.length;
    return this;
  }

  #varintBytes(v: number): Uint8Array {
    if (!Number.isSafeInteger(v) || v < 0) throw new RangeError(`varint ${v} out of range`);
    const out: number[] = [];
    while (v >= 128) {
      out.push((v % 128) | 0x80);
      v = Math.floor(v / 128);
    }
    out.push(v);
    return Uint8Array.from(out);
  }

  /** A field exactly as read. */
  raw(b: Uint8Array): this {
    return this.#push(b);
  }

  /** A varint field (wire 0); negative int64 values are written as 10-byte two's complement. */
  varint(no: number, v: number): this {
    this.#push(this.#varintBytes(no * 8));
    if (v >= 0) return this.#push(this.#varintBytes(v));
    const out = new Uint8Array(10);
    let x = BigInt.asUintN(64, BigInt(v));
    for (let i = 0; i < 10; i++) {
      out[i] = Number(x & 0x7fn) | (i < 9 ? 0x80 : 0);
      x >>= 7n;
    }
    return this.#push(out);
  }

  /** A length-delimited field (wire 2) of bytes. */
  bytes(no: number, b: Uint8Array): this {
    this.#push(this.#varintBytes(no * 8 + 2));
    this.#push(this.#varintBytes(b.length));
    return this.#push(b);
  }

  /** A length-delimited field of UTF-8 text. */
  text(no: number, s: string): this {
    return this.bytes(no, new TextEncoder().encode(s));
  }

  /** A 32-bit float field (wire 5). */
  float(no: number, f: number): this {
    this.#push(this.#varintBytes(no * 8 + 5));
    const b = new Uint8Array(4);
    new DataView(b.buffer).setFloat32(0, f, true);
    return this.#push(b);
  }

  /** A packed repeated varint field. */
  packed(no: number, vs: readonly number[]): this {
    const w = new Writer();
    for (const v of vs) w.#push(w.#varintBytes(v));
    return this.bytes(no, w.finish());
  }

  /** A sub-message field. */
  message(no: number, w: Writer): this {
    return this.bytes(no, w.finish());
  }

  /** The bytes written, joined. */
  finish(): Uint8Array {
    const out = new Uint8Array(this.#length);
    let at = 0;
    for (const p of this.#parts) {
      out.set(p, at);
      at += p.length;
    }
    return out;
  }
}
