/**
 * Payload codecs of the worker protocol (docs/internals.md §7); the length-prefixed framing around
 * them is `frame.ts`, the messages themselves `messages.ts`.
 *
 * A control frame is UTF-8 JSON with a SCREAMING_SNAKE `type` tag; {@link decodeControl} checks
 * it strictly (unknown fields included) so a confused or hostile worker is a typed
 * {@link WorkerProtocolError}, never a half-valid object. Tensors travel as separate raw
 * little-endian frames: `i32` token ids after EMBED_BATCH / RERANK / RERANK_SEQUENCES / GENERATE,
 * `f32` outputs after VECTORS / SCORES.
 *
 * @module
 */
import type { z } from "zod";
import { WorkerProtocolError } from "./frame.ts";
import {
  type ControlMessage,
  controlSchema,
  type ControlSender,
  controlSender,
  type ControlType,
  type ModuleToWorkerMessage,
  type WorkerToModuleMessage,
} from "./messages.ts";

const utf8Encoder = new TextEncoder();
const utf8Decoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false });

/**
 * Serializes a control message as compact UTF-8 JSON (the frame payload, without the length
 * header; wrap it with `encodeFrame`). The message is checked against its schema first, so a bug
 * (a NaN count, a missing field) fails here rather than at the peer.
 *
 * @param msg The message.
 * @returns UTF-8 JSON bytes.
 * @throws {TypeError} when `msg` does not match the schema of its `type` (a bug in the caller).
 *
 * @example Encode a PING
 * ```ts
 * import { encodeControl } from "./codec.ts";
 * import assert from "node:assert";
 *
 * const bytes = encodeControl({ type: "PING", req_id: 7 });
 * assert.strictEqual(new TextDecoder().decode(bytes), '{"type":"PING","req_id":7}');
 * ```
 */
export function encodeControl(msg: ControlMessage): Uint8Array {
  const schema = controlSchema(msg.type);
  const parsed = schema?.safeParse(msg);
  if (parsed === undefined || !parsed.success) {
    const why = parsed === undefined
      ? `unknown type '${String(msg.type)}'`
      : describe(parsed.error);
    throw new TypeError(`Cannot encode control message: ${why}`);
  }
  return utf8Encoder.encode(JSON.stringify(msg));
}

/**
 * Decodes and validates one control frame, whichever side sent it.
 *
 * @param frame Frame payload (UTF-8 JSON object with a `type`).
 * @returns The message, typed by its `type`.
 * @throws {WorkerProtocolError} `bad_json` when the payload is not UTF-8 JSON; `unknown_type`
 *   when `type` is not a §7 message; `bad_message` (naming the field) when a field is missing,
 *   extra or of the wrong type.
 *
 * @example Decode a PONG
 * ```ts
 * import { decodeControl } from "./codec.ts";
 * import assert from "node:assert";
 *
 * const frame = new TextEncoder().encode('{"type":"PONG","req_id":1,"rss_mb":12,"models_loaded":0}');
 * assert.strictEqual(decodeControl(frame).type, "PONG");
 * ```
 */
export function decodeControl(frame: Uint8Array): ControlMessage {
  return decodeWith(frame, undefined);
}

/**
 * Decodes a control frame on the module side: only messages a worker may send.
 *
 * @param frame Frame payload read from the worker.
 * @returns A worker → module message.
 * @throws {WorkerProtocolError} as {@link decodeControl}; `unknown_type` also for a message only
 *   the module sends.
 */
export function decodeFromWorker(frame: Uint8Array): WorkerToModuleMessage {
  return decodeWith(frame, "worker") as WorkerToModuleMessage;
}

/**
 * Decodes a control frame on the worker side: only messages the module may send.
 *
 * @param frame Frame payload read from the module.
 * @returns A module → worker message.
 * @throws {WorkerProtocolError} as {@link decodeControl}; `unknown_type` also for a message only
 *   a worker sends.
 */
export function decodeFromModule(frame: Uint8Array): ModuleToWorkerMessage {
  return decodeWith(frame, "module") as ModuleToWorkerMessage;
}

/**
 * Encodes token ids as a raw little-endian i32 tensor frame payload.
 *
 * @param ids Token ids.
 * @returns A new buffer of `4 × ids.length` bytes.
 *
 * @example Golden bytes
 * ```ts
 * import { encodeI32LE } from "./codec.ts";
 * import assert from "node:assert";
 *
 * assert.deepStrictEqual(
 *   encodeI32LE(Int32Array.of(1, -2)),
 *   Uint8Array.of(0x01, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff),
 * );
 * ```
 */
export function encodeI32LE(ids: Int32Array): Uint8Array {
  if (PLATFORM_LE) return new Uint8Array(ids.buffer, ids.byteOffset, ids.byteLength).slice();
  const out = new Uint8Array(ids.byteLength);
  const view = new DataView(out.buffer);
  for (let i = 0; i < ids.length; i++) view.setInt32(i * 4, ids[i]!, true);
  return out;
}

/**
 * Decodes a raw little-endian i32 tensor frame.
 *
 * @param frame Frame payload.
 * @param expectedCount Number of i32 values the preceding control message announced; when
 *   omitted, any whole number of values is accepted.
 * @returns A new `Int32Array` (does not share memory with `frame`).
 * @throws {WorkerProtocolError} `bad_message` when the frame is not exactly `4 × expectedCount`
 *   bytes (or not a multiple of 4).
 * @throws {RangeError} when `expectedCount` is not a non-negative safe integer.
 */
export function decodeI32LE(frame: Uint8Array, expectedCount?: number): Int32Array {
  const n = tensorCount(frame, expectedCount, "i32");
  if (PLATFORM_LE) return new Int32Array(frame.slice().buffer, 0, n);
  const out = new Int32Array(n);
  const view = new DataView(frame.buffer, frame.byteOffset, frame.byteLength);
  for (let i = 0; i < n; i++) out[i] = view.getInt32(i * 4, true);
  return out;
}

/**
 * Encodes floats as a raw little-endian f32 tensor frame payload.
 *
 * @param values Floats (vectors row-major, or scores).
 * @returns A new buffer of `4 × values.length` bytes.
 *
 * @example Golden bytes
 * ```ts
 * import { encodeF32LE } from "./codec.ts";
 * import assert from "node:assert";
 *
 * assert.deepStrictEqual(encodeF32LE(Float32Array.of(1, -2)), Uint8Array.of(0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0));
 * ```
 */
export function encodeF32LE(values: Float32Array): Uint8Array {
  if (PLATFORM_LE) {
    return new Uint8Array(values.buffer, values.byteOffset, values.byteLength).slice();
  }
  const out = new Uint8Array(values.byteLength);
  const view = new DataView(out.buffer);
  for (let i = 0; i < values.length; i++) view.setFloat32(i * 4, values[i]!, true);
  return out;
}

/**
 * Decodes a raw little-endian f32 tensor frame. NaN and ±Inf pass through unchanged (they are
 * judged per item by the caller: `engine_output_invalid`).
 *
 * @param frame Frame payload.
 * @param expectedCount Number of f32 values announced (`n × dims` after VECTORS, `n` after
 *   SCORES); when omitted, any whole number of values is accepted.
 * @returns A new `Float32Array` (does not share memory with `frame`).
 * @throws {WorkerProtocolError} `bad_message` when the frame is not exactly `4 × expectedCount`
 *   bytes (or not a multiple of 4).
 * @throws {RangeError} when `expectedCount` is not a non-negative safe integer.
 */
export function decodeF32LE(frame: Uint8Array, expectedCount?: number): Float32Array {
  const n = tensorCount(frame, expectedCount, "f32");
  if (PLATFORM_LE) return new Float32Array(frame.slice().buffer, 0, n);
  const out = new Float32Array(n);
  const view = new DataView(frame.buffer, frame.byteOffset, frame.byteLength);
  for (let i = 0; i < n; i++) out[i] = view.getFloat32(i * 4, true);
  return out;
}

/** True when typed arrays are little-endian here, so LE frames are plain copies. */
const PLATFORM_LE: boolean = new Uint8Array(Uint16Array.of(1).buffer)[0] === 1;

function tensorCount(frame: Uint8Array, expectedCount: number | undefined, kind: string): number {
  if (expectedCount === undefined) {
    if (frame.byteLength % 4 !== 0) {
      throw new WorkerProtocolError(
        "bad_message",
        `Cannot decode ${kind} tensor: ${frame.byteLength} bytes is not a multiple of 4`,
      );
    }
    return frame.byteLength / 4;
  }
  if (!Number.isSafeInteger(expectedCount) || expectedCount < 0) {
    throw new RangeError(
      `Cannot decode ${kind} tensor as 'expectedCount' must be a non-negative safe integer: received ${expectedCount}`,
    );
  }
  if (frame.byteLength !== expectedCount * 4) {
    throw new WorkerProtocolError(
      "bad_message",
      `Cannot decode ${kind} tensor: ${frame.byteLength} bytes, expected ${expectedCount} values (${
        expectedCount * 4
      } bytes)`,
    );
  }
  return expectedCount;
}

function decodeWith(frame: Uint8Array, sender: ControlSender | undefined): ControlMessage {
  let value: unknown;
  try {
    value = JSON.parse(utf8Decoder.decode(frame));
  } catch (cause) {
    throw new WorkerProtocolError(
      "bad_json",
      `Cannot decode control frame: not UTF-8 JSON (${frame.byteLength} bytes)`,
      { cause },
    );
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new WorkerProtocolError(
      "bad_message",
      "Cannot decode control frame: payload is not a JSON object",
    );
  }
  const type = (value as Record<string, unknown>).type;
  if (typeof type !== "string") {
    throw new WorkerProtocolError(
      "bad_message",
      "Cannot decode control frame: field 'type' must be a string",
    );
  }
  const schema = controlSchema(type);
  if (schema === undefined) {
    throw new WorkerProtocolError(
      "unknown_type",
      `Cannot decode control frame: unknown type '${clip(type)}'`,
    );
  }
  if (sender !== undefined && controlSender(type as ControlType) !== sender) {
    throw new WorkerProtocolError(
      "unknown_type",
      `Cannot decode control frame: type '${type}' is not sent by the ${sender}`,
    );
  }
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    throw new WorkerProtocolError(
      "bad_message",
      `Cannot decode ${type}: ${describe(parsed.error)}`,
      { cause: parsed.error },
    );
  }
  return parsed.data as ControlMessage;
}

/** "field 'items.0.n_tokens' …" from the first zod issue. */
function describe(error: z.ZodError): string {
  const issue = error.issues[0];
  if (issue === undefined) return "invalid message";
  if (issue.code === "unrecognized_keys") {
    const at = issue.path.length > 0 ? ` in '${issue.path.join(".")}'` : "";
    return `unknown field '${clip(issue.keys.join("', '"))}'${at}`;
  }
  const field = issue.path.length > 0 ? issue.path.join(".") : "(root)";
  return `field '${clip(field)}' ${issue.message}`;
}

function clip(s: string): string {
  return s.length > 64 ? `${s.slice(0, 64)}…` : s;
}
