/**
 * Control messages of the worker protocol (docs/internals.md §7): one strict zod schema per `type`
 * (SCREAMING_SNAKE tag), the message types inferred from them, and who sends each. How they
 * travel is in `codec.ts` (control frames as UTF-8 JSON, checked strictly against these schemas;
 * tensors as raw little-endian frames: `i32` token ids after EMBED_BATCH / RERANK /
 * RERANK_SEQUENCES / GENERATE, `f32` outputs after VECTORS / SCORES).
 *
 * Choices where §7 leaves a field unspecified (one request in flight per connection, so ids only
 * guard against a confused peer): every request but SHUTDOWN carries `req_id` (a non-negative
 * safe integer) and every answer echoes it; `model_ref` is the worker's opaque string handle from LOADED and is
 * also sent by RERANK, RERANK_SEQUENCES, GENERATE and UNLOAD; SCORES carries `n`, the number of
 * f32 scores that follow. ANE_ADMIT_SHAPE / ADMITTED / ANE_EVICT_SHAPE / EVICTED are left out
 * until the ANE worker defines their fields.
 *
 * Additions to the reference's worker protocol (docs/internals.md §7 "Messages"):
 * `CANCEL {req_id}` (F19), module → worker, sent while that request is in flight and never
 * answered itself ({@link CancelMessage}); and TOKENIZE / TOKENS, the module asking llama.cpp how
 * it tokenizes a few texts, to check a tokenizer built from a GGUF's own vocabulary against it
 * ({@link TokenizeMessage}); and TEXT_PART, worker → module, the ids a GENERATE sent with `stream:
 * true` has generated so far, sent while it runs and never an answer ({@link TextPartMessage}).
 *
 * @module
 */
import { z } from "zod";
import { U32_MAX } from "./frame.ts";

const reqId = z.int().min(0);
const count = z.int().min(0);
const modelRef = z.string().min(1);
/** i32 token id. */
const tokenId = z.int().min(-0x8000_0000).max(0x7fff_ffff);
/** Finite non-negative number (ms, MiB, shares). */
const amount = z.number().min(0);
const maxFrame = z.int().min(1).max(U32_MAX);

/** Engine identity `{engine, version, build_flags?}` as in docs/internals.md §3. */
const engineIdentity = z.strictObject({
  engine: z.string().min(1),
  version: z.string(),
  build_flags: z.record(z.string(), z.string()).exactOptional(),
});

/** Pooling as the worker wire spells it (docs/internals.md §7; `last` = last token). */
export type WorkerPooling = "mean" | "cls" | "last";

/** Why a GENERATE stopped (docs/internals.md §7 TEXT). */
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
/** How a GENERATE picks tokens (lib/engines/engine.ts `SamplingConfig`); absent: greedy. */
const SAMPLING = z.strictObject({
  temperature: z.number().min(0).max(2),
  top_k: z.int().min(0),
  top_p: z.number().gt(0).max(1),
  min_p: z.number().min(0).max(1),
  seed: z.int().min(0).max(0xffff_fffe),
  repeat_penalty: z.number().gt(0).max(10),
  repeat_last_n: z.int().min(0),
  frequency_penalty: z.number().min(-2).max(2),
  presence_penalty: z.number().min(-2).max(2),
});
const GENERATE = z.strictObject({
  type: z.literal("GENERATE"),
  req_id: reqId,
  model_ref: modelRef,
  max_tokens: z.int().min(1),
  grammar: z.string().optional(),
  stream: z.literal(true).optional(),
  sampling: SAMPLING.optional(),
  /**
   * Answer each generated token's log-probability and the `logprobs` most likely tokens' (0–20);
   * absent: none. Greedy only (the module refuses it otherwise).
   */
  logprobs: z.int().min(0).max(20).optional(),
  /** `[token id, bias]`: the bias (−100–100) added to that token's logit before each pick. */
  logit_bias: z.array(z.tuple([z.int().min(0), z.number().min(-100).max(100)])).optional(),
});
/** One generated token's log-probability and the most likely tokens' at its step. */
const TOKEN_LOGPROB = z.strictObject({
  logprob: z.number(),
  top: z.array(z.tuple([tokenId, z.number()])),
});
const TEXT_PART = z.strictObject({
  type: z.literal("TEXT_PART"),
  req_id: reqId,
  token_ids: z.array(tokenId),
});
const TEXT = z.strictObject({
  type: z.literal("TEXT"),
  req_id: reqId,
  text: z.string(),
  n_prompt: count,
  n_gen: count,
  finish_reason: z.enum(["stop_token", "max_tokens", "grammar_complete", "cancelled"]),
  generated_token_ids: z.array(tokenId).optional(),
  /** With GENERATE `logprobs`: one entry per generated token, in order. */
  logprobs: z.array(TOKEN_LOGPROB).optional(),
});
const TOKENIZE = z.strictObject({
  type: z.literal("TOKENIZE"),
  req_id: reqId,
  model_ref: modelRef,
  texts: z.array(z.string()),
  /** Parse special-token strings in the texts (llama.cpp `parse_special`); absent: true. */
  special: z.boolean().optional(),
});
const TOKENS = z.strictObject({
  type: z.literal("TOKENS"),
  req_id: reqId,
  ids: z.array(z.array(tokenId)),
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
  TOKENIZE,
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
  TOKENS,
  TEXT_PART,
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
/**
 * GENERATE `{max_tokens, grammar?, stream?, sampling?, logprobs?, logit_bias?}`; followed by one i32 frame of
 * prompt ids. With
 * `stream: true` the worker also sends TEXT_PART frames while it generates (then TEXT, as ever).
 */
export type GenerateMessage = z.infer<typeof GENERATE>;
/** TEXT `{text, n_prompt, n_gen, finish_reason, generated_token_ids?}` (counts in tokens). */
export type TextMessage = z.infer<typeof TEXT>;
/**
 * TEXT_PART `{req_id, token_ids}`: the ids generated since the previous part of a GENERATE sent
 * with `stream: true`, in order, sent while it runs. Never an answer: the request's one answer
 * is still its TEXT (whose `generated_token_ids` holds every id, those of the parts included).
 */
export type TextPartMessage = z.infer<typeof TEXT_PART>;
/**
 * TOKENIZE `{model_ref, texts}`: llama.cpp's tokenization of each text, special-token strings
 * parsed, no BOS or EOS added (`llama_tokenize(…, add_special = false, parse_special = true)`).
 * Answered by TOKENS.
 */
export type TokenizeMessage = z.infer<typeof TOKENIZE>;
/** TOKENS `{ids}`: one id list per text of the TOKENIZE, in order. */
export type TokensMessage = z.infer<typeof TOKENS>;
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
  | CancelMessage
  | TokenizeMessage;

/** A message a worker sends to the module. */
export type WorkerToModuleMessage =
  | HelloMessage
  | LoadedMessage
  | VectorsMessage
  | ScoresMessage
  | TextMessage
  | UnloadedMessage
  | PongMessage
  | ErrMessage
  | TokensMessage
  | TextPartMessage;

/** Any control message of docs/internals.md §7, discriminated on `type`. */
export type ControlMessage = ModuleToWorkerMessage | WorkerToModuleMessage;

/** The `type` tag of a control message. */
export type ControlType = ControlMessage["type"];

/** Who may send a message. */
export type ControlSender = "module" | "worker";

/** Every `type` the module sends, in §7 order, then CANCEL (F19) and TOKENIZE (our additions). */
export const MODULE_TO_WORKER_TYPES: readonly ModuleToWorkerMessage["type"][] = Object.freeze(
  Object.keys(MODULE_SCHEMAS) as ModuleToWorkerMessage["type"][],
);

/** Every `type` a worker sends, in §7 order, then TOKENS and TEXT_PART (our additions). */
export const WORKER_TO_MODULE_TYPES: readonly WorkerToModuleMessage["type"][] = Object.freeze(
  Object.keys(WORKER_SCHEMAS) as WorkerToModuleMessage["type"][],
);

/**
 * Who sends a given message type.
 *
 * @param type A control `type`.
 * @returns `"module"` for ACK, requests (TOKENIZE included) and CANCEL, `"worker"` for HELLO,
 *   answers (TOKENS included), TEXT_PART and ERR.
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
    case "TOKENIZE":
      return "module";
    case "HELLO":
    case "LOADED":
    case "VECTORS":
    case "SCORES":
    case "TEXT":
    case "UNLOADED":
    case "PONG":
    case "ERR":
    case "TOKENS":
    case "TEXT_PART":
      return "worker";
    default:
      throw new Error(`Unhandled control type ${String(type satisfies never)}. This is a bug.`);
  }
}

// deno-lint-ignore no-explicit-any
type AnySchema = z.ZodType<any>;

/**
 * The schema of a control `type`, whichever side sends it.
 *
 * @param type A `type` tag as received (any value).
 * @returns The strict schema, or `undefined` when `type` is not a string naming a §7 message.
 */
export function controlSchema(type: unknown): AnySchema | undefined {
  if (typeof type !== "string") return undefined;
  if (Object.hasOwn(MODULE_SCHEMAS, type)) {
    return MODULE_SCHEMAS[type as keyof typeof MODULE_SCHEMAS];
  }
  if (Object.hasOwn(WORKER_SCHEMAS, type)) {
    return WORKER_SCHEMAS[type as keyof typeof WORKER_SCHEMAS];
  }
  return undefined;
}
