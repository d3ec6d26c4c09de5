/**
 * Control messages and tensor frames of the worker protocol (contract.md §7).
 *
 * A control frame is UTF-8 JSON with a SCREAMING_SNAKE `type` tag; {@link decodeControl} checks
 * it strictly (unknown fields included) so a confused or hostile worker is a typed
 * {@link WorkerProtocolError}, never a half-valid object. Tensors travel as separate raw
 * little-endian frames: `i32` token ids after EMBED_BATCH / RERANK / RERANK_SEQUENCES / GENERATE,
 * `f32` outputs after VECTORS / SCORES.
 *
 * Choices where §7 leaves a field unspecified (one request in flight per connection, so ids only
 * guard against a confused peer): every request but SHUTDOWN carries `req_id` (a non-negative
 * safe integer) and every answer echoes it; `model_ref` is the worker's opaque string handle from LOADED and is
 * also sent by RERANK, RERANK_SEQUENCES, GENERATE and UNLOAD; SCORES carries `n`, the number of
 * f32 scores that follow. ANE_ADMIT_SHAPE / ADMITTED / ANE_EVICT_SHAPE / EVICTED are left out
 * until the ANE worker defines their fields.
 *
 * One addition to §7 (F19): `CANCEL {req_id}`, module → worker, sent while that request is in
 * flight and never answered itself ({@link CancelMessage}).
 *
 * @module
 */
import { z } from "zod";
import { U32_MAX, WorkerProtocolError } from "./frame.ts";

const reqId = z.int().min(0);
const count = z.int().min(0);
const modelRef = z.string().min(1);
/** i32 token id. */
const tokenId = z.int().min(-0x8000_0000).max(0x7fff_ffff);
/** Finite non-negative number (ms, MiB, shares). */
const amount = z.number().min(0);
const maxFrame = z.int().min(1).max(U32_MAX);

/** Engine identity `{engine, version, build_flags?}` as in contract.md §3. */
const engineIdentity = z.strictObject({
  engine: z.string().min(1),
  version: z.string(),
  build_flags: z.record(z.string(), z.string()).optional(),
});

/** Pooling as the worker wire spells it (contract.md §7; `last` = last token). */
export type WorkerPooling = "mean" | "cls" | "last";

/** Why a GENERATE stopped (contract.md §7 TEXT). */
export type FinishReason = "stop_token" | "max_tokens" | "grammar_complete" | "cancelled";

const HELLO = z.strictObject({
  type: z.literal("HELLO"),
  v: z.int().min(0).max(255),
  nonce: z.string().max(256),
  engine: engineIdentity,
  pid: z.int().min(1),
  max_frame: maxFrame,
  manifest_digest: z.string().optional(),
  kernel_revision: z.string().optional(),
  protocol_version: z.int().optional(),
});
const ACK = z.strictObject({
  type: z.literal("ACK"),
  v: z.int().min(0).max(255),
  accept: z.boolean(),
  max_frame: maxFrame,
});
const LOAD = z.strictObject({
  type: z.literal("LOAD"),
  req_id: reqId,
  artifact_path: z.string().min(1),
  artifact_digest: z.string().min(1),
  format: z.string().min(1),
  runtime_config: z.record(z.string(), z.unknown()),
});
const LOADED = z.strictObject({
  type: z.literal("LOADED"),
  req_id: reqId,
  model_ref: modelRef,
  dims: count,
  cold_load_ms: amount,
  buckets: z.array(count).optional(),
});
const EMBED_BATCH = z.strictObject({
  type: z.literal("EMBED_BATCH"),
  req_id: reqId,
  model_ref: modelRef,
  pooling: z.enum(["mean", "cls", "last"]),
  normalize: z.boolean(),
  items: z.array(z.strictObject({ id: z.union([z.string(), z.int()]), n_tokens: count })),
});
const VECTORS = z.strictObject({
  type: z.literal("VECTORS"),
  req_id: reqId,
  dims: count,
  n: count,
});
const RERANK = z.strictObject({
  type: z.literal("RERANK"),
  req_id: reqId,
  model_ref: modelRef,
  query_n_tokens: count,
  candidates: z.array(z.strictObject({ n_tokens: count })),
});
const RERANK_SEQUENCES = z.strictObject({
  type: z.literal("RERANK_SEQUENCES"),
  req_id: reqId,
  model_ref: modelRef,
  sequences: z.array(z.strictObject({ n_tokens: count })),
});
const SCORES = z.strictObject({
  type: z.literal("SCORES"),
  req_id: reqId,
  n: count,
});
const GENERATE = z.strictObject({
  type: z.literal("GENERATE"),
  req_id: reqId,
  model_ref: modelRef,
  max_tokens: z.int().min(1),
  grammar: z.string().optional(),
});
const TEXT = z.strictObject({
  type: z.literal("TEXT"),
  req_id: reqId,
  text: z.string(),
  n_prompt: count,
  n_gen: count,
  finish_reason: z.enum(["stop_token", "max_tokens", "grammar_complete", "cancelled"]),
  generated_token_ids: z.array(tokenId).optional(),
});
const UNLOAD = z.strictObject({ type: z.literal("UNLOAD"), req_id: reqId, model_ref: modelRef });
const UNLOADED = z.strictObject({ type: z.literal("UNLOADED"), req_id: reqId });
const PING = z.strictObject({ type: z.literal("PING"), req_id: reqId });
const PONG = z.strictObject({
  type: z.literal("PONG"),
  req_id: reqId,
  rss_mb: amount,
  models_loaded: count,
  placement_share: amount.optional(),
  buckets: z.array(count).optional(),
});
const SHUTDOWN = z.strictObject({ type: z.literal("SHUTDOWN") });
const CANCEL = z.strictObject({ type: z.literal("CANCEL"), req_id: reqId });
const ERR = z.strictObject({
  type: z.literal("ERR"),
  req_id: reqId.optional(),
  code: z.string().min(1),
  msg: z.string(),
});

/** Module → worker requests and the ACK; one schema per `type`. */
const MODULE_SCHEMAS = {
  ACK,
  LOAD,
  EMBED_BATCH,
  RERANK,
  RERANK_SEQUENCES,
  GENERATE,
  UNLOAD,
  PING,
  SHUTDOWN,
  CANCEL,
} as const;

/** Worker → module HELLO, answers and ERR; one schema per `type`. */
const WORKER_SCHEMAS = {
  HELLO,
  LOADED,
  VECTORS,
  SCORES,
  TEXT,
  UNLOADED,
  PONG,
  ERR,
} as const;

/** HELLO: the worker's first frame `{v, nonce, engine, pid, max_frame, …}` (max_frame in bytes). */
export type HelloMessage = z.infer<typeof HELLO>;
/** ACK `{v, accept, max_frame}`: the module accepts the worker; max_frame is the negotiated max. */
export type AckMessage = z.infer<typeof ACK>;
/** LOAD an artifact; `runtime_config` is the canonical config the crash budget is keyed on. */
export type LoadMessage = z.infer<typeof LOAD>;
/** LOADED `{model_ref, dims, cold_load_ms, buckets?}`; `cold_load_ms` in milliseconds. */
export type LoadedMessage = z.infer<typeof LOADED>;
/** EMBED_BATCH; followed by one i32 frame of Σ `items[].n_tokens` token ids. */
export type EmbedBatchMessage = z.infer<typeof EMBED_BATCH>;
/** VECTORS `{dims, n}`; followed by one f32 frame of `n × dims` floats, row-major. */
export type VectorsMessage = z.infer<typeof VECTORS>;
/** RERANK `{query_n_tokens, candidates[{n_tokens}]}`; followed by one i32 frame of ids. */
export type RerankMessage = z.infer<typeof RERANK>;
/** RERANK_SEQUENCES `{sequences[{n_tokens}]}`; followed by one i32 frame of ids. */
export type RerankSequencesMessage = z.infer<typeof RERANK_SEQUENCES>;
/** SCORES `{n}`; followed by one f32 frame of `n` scores. */
export type ScoresMessage = z.infer<typeof SCORES>;
/** GENERATE `{max_tokens, grammar?}`; followed by one i32 frame of prompt ids. */
export type GenerateMessage = z.infer<typeof GENERATE>;
/** TEXT `{text, n_prompt, n_gen, finish_reason, generated_token_ids?}` (counts in tokens). */
export type TextMessage = z.infer<typeof TEXT>;
/** UNLOAD a model by its `model_ref`. */
export type UnloadMessage = z.infer<typeof UNLOAD>;
/** UNLOADED: the model is gone. */
export type UnloadedMessage = z.infer<typeof UNLOADED>;
/** PING: liveness and resource probe. */
export type PingMessage = z.infer<typeof PING>;
/** PONG `{rss_mb, models_loaded, placement_share?, buckets?}`; `rss_mb` in MiB. */
export type PongMessage = z.infer<typeof PONG>;
/** SHUTDOWN: the worker exits; no answer. */
export type ShutdownMessage = z.infer<typeof SHUTDOWN>;
/**
 * CANCEL `{req_id}`: a control message, not a request, sent while request `req_id` is in flight
 * and never answered itself. The worker checks for it between generated tokens (GENERATE answers
 * TEXT with `finish_reason: "cancelled"` and the tokens so far) and between items (EMBED_BATCH
 * answers ERR `cancelled`); a CANCEL for a request that is not running is ignored.
 */
export type CancelMessage = z.infer<typeof CANCEL>;
/** ERR `{req_id?, code, msg}`: a refused request; an answer, not a crash. */
export type ErrMessage = z.infer<typeof ERR>;

/** A message the module sends to a worker. */
export type ModuleToWorkerMessage =
  | AckMessage
  | LoadMessage
  | EmbedBatchMessage
  | RerankMessage
  | RerankSequencesMessage
  | GenerateMessage
  | UnloadMessage
  | PingMessage
  | ShutdownMessage
  | CancelMessage;

/** A message a worker sends to the module. */
export type WorkerToModuleMessage =
  | HelloMessage
  | LoadedMessage
  | VectorsMessage
  | ScoresMessage
  | TextMessage
  | UnloadedMessage
  | PongMessage
  | ErrMessage;

/** Any control message of contract.md §7, discriminated on `type`. */
export type ControlMessage = ModuleToWorkerMessage | WorkerToModuleMessage;

/** The `type` tag of a control message. */
export type ControlType = ControlMessage["type"];

/** Who may send a message. */
export type ControlSender = "module" | "worker";

/** Every `type` the module sends, in §7 order, then CANCEL (our addition to §7, F19). */
export const MODULE_TO_WORKER_TYPES: readonly ModuleToWorkerMessage["type"][] = Object.freeze(
  Object.keys(MODULE_SCHEMAS) as ModuleToWorkerMessage["type"][],
);

/** Every `type` a worker sends, in §7 order. */
export const WORKER_TO_MODULE_TYPES: readonly WorkerToModuleMessage["type"][] = Object.freeze(
  Object.keys(WORKER_SCHEMAS) as WorkerToModuleMessage["type"][],
);

/**
 * Who sends a given message type.
 *
 * @param type A control `type`.
 * @returns `"module"` for ACK, requests and CANCEL, `"worker"` for HELLO, answers and ERR.
 */
export function controlSender(type: ControlType): ControlSender {
  switch (type) {
    case "ACK":
    case "LOAD":
    case "EMBED_BATCH":
    case "RERANK":
    case "RERANK_SEQUENCES":
    case "GENERATE":
    case "UNLOAD":
    case "PING":
    case "SHUTDOWN":
    case "CANCEL":
      return "module";
    case "HELLO":
    case "LOADED":
    case "VECTORS":
    case "SCORES":
    case "TEXT":
    case "UNLOADED":
    case "PONG":
    case "ERR":
      return "worker";
    default:
      throw new Error(`Unhandled control type ${String(type satisfies never)}. This is a bug.`);
  }
}

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
 * import { encodeControl } from "./messages.ts";
 * import assert from "node:assert";
 *
 * const bytes = encodeControl({ type: "PING", req_id: 7 });
 * assert.strictEqual(new TextDecoder().decode(bytes), '{"type":"PING","req_id":7}');
 * ```
 */
export function encodeControl(msg: ControlMessage): Uint8Array {
  const schema = schemaOf(msg.type);
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
 * import { decodeControl } from "./messages.ts";
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
 * import { encodeI32LE } from "./messages.ts";
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
 * import { encodeF32LE } from "./messages.ts";
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

// deno-lint-ignore no-explicit-any
type AnySchema = z.ZodType<any>;

function schemaOf(type: unknown): AnySchema | undefined {
  if (typeof type !== "string") return undefined;
  if (Object.hasOwn(MODULE_SCHEMAS, type)) {
    return MODULE_SCHEMAS[type as keyof typeof MODULE_SCHEMAS];
  }
  if (Object.hasOwn(WORKER_SCHEMAS, type)) {
    return WORKER_SCHEMAS[type as keyof typeof WORKER_SCHEMAS];
  }
  return undefined;
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
  const schema = schemaOf(type);
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
