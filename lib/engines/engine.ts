/**
 * The engine interface (docs/internals.md §11): one loaded model on one runtime — ORT in
 * a Worker thread, a llama.cpp worker process, later a native FFI shim or a remote provider. An
 * engine takes token ids and gives vectors, scores or generated ids; it knows nothing of doors,
 * params, admission or envelopes. The shape follows TEI's backend trait (`health`, `embed`,
 * `predict`, identity), plus generation and cancellation.
 *
 * Every engine passes the shared contract suite `tests/engines/_engine_contract.ts`.
 *
 * @module
 */
import type { SynapseError } from "../contract/errors.ts";

/** Engine identity as it appears in envelopes and profiles (docs/internals.md §3, §4 `engine`). */
export interface EngineIdentity {
  engine: string;
  version: string;
  build_flags?: Readonly<Record<string, string>>;
}

/** What a model computes. */
export type ModelTask = "embed" | "rerank" | "generate";

/** One sequence for an engine: token ids with specials, already truncated. */
export interface EngineRow {
  ids: Int32Array;
  /** Segment ids (cross-encoder pairs); engines without them ignore it. */
  typeIds: Int32Array;
}

/**
 * What one engine call may hold and what one sequence may be (the certified shape of the
 * model's profile, docs/internals.md §4 `certified_shape`). The lane cuts micro-batches to these.
 */
export interface EngineLimits {
  /** Longest sequence in tokens, specials included. */
  maxSequenceTokens: number;
  /** Padded tokens (rows × longest row) one call may hold. */
  maxMicroBatchTokens: number;
  /** Rows one call may hold. */
  maxSequences: number;
}

/** Output of one {@link Engine.embed} or {@link Engine.score} call. */
export interface EngineBatchOutput {
  /** Row-major `[rows, dims]`: L2-normalised vectors when the profile says so, or raw scores. */
  data: Float32Array;
  /** Values per row (hidden size, or 1 for scores). */
  dims: number;
  /** 1 where the row's output held NaN or ±Infinity (field report F6). */
  nonFinite: Uint8Array;
  /** Engine time in ms. */
  runMs: number;
  /**
   * Remote engines: the provider's request id of each request the call made (contract §3
   * `provider_request_id`), in order.
   */
  providerRequestIds?: string[];
  /**
   * Per row: the error that row got while the others were served (a remote provider refusing one
   * input), undefined for a served row. Absent: every row was served.
   */
  rowErrors?: (SynapseError | undefined)[];
}

/**
 * How a generation picks each token, resolved by `microllm.oneshot` (docs/generation.md
 * "Sampling"): every value explicit, so the worker applies exactly what the answer reports.
 * `temperature: 0` is greedy (the most likely token after the penalties; `top_k`, `top_p`,
 * `min_p` and `seed` then change nothing). The penalties look at the last `repeat_last_n` tokens
 * of the prompt and the generation so far (llama.cpp's penalties sampler).
 */
export interface SamplingConfig {
  /** Softmax temperature, 0 (greedy) to 2. */
  temperature: number;
  /** Keep the k most likely tokens; 0 keeps all. */
  top_k: number;
  /** Keep the smallest set whose probability reaches p (nucleus sampling); 1 keeps all. */
  top_p: number;
  /** Drop tokens below `min_p` times the most likely one's probability; 0 keeps all. */
  min_p: number;
  /** The random generator's seed (u32 below 2^32 − 1); the same seed gives the same tokens. */
  seed: number;
  /** Divides (or multiplies) the logit of a recently seen token; 1 is off. */
  repeat_penalty: number;
  /** How many recent tokens the penalties look at; 0 turns them off. */
  repeat_last_n: number;
  /** Subtracted from a recent token's logit once per occurrence; 0 is off. */
  frequency_penalty: number;
  /** Subtracted once from the logit of any recent token; 0 is off. */
  presence_penalty: number;
}

/** One generation (`microllm.oneshot`, docs/operations.md): greedy unless `sampling` says otherwise. */
export interface GenerateRequest {
  /** Prompt token ids, specials included. */
  ids: Int32Array;
  /** Most tokens to generate (≥ 1). */
  maxTokens: number;
  /** GBNF source, already validated by the module. */
  grammar?: string;
  /** How each token is picked; absent: greedy, no penalties (what the probes certify). */
  sampling?: SamplingConfig;
  /**
   * Return each generated token's log-probability and the `logprobs` most likely tokens' at its
   * step (0–20); absent: none. Only with greedy decoding, no penalties and no grammar: then they
   * are the model's own (natural log, softmax of its logits over the whole vocabulary).
   */
  logprobs?: number;
  /** `[token id, bias]`: added to the token's logit before each pick (−100 bans, 100 forces). */
  logitBias?: [number, number][];
}

/** A generated token's log-probability (natural log) and the most likely tokens' at its step. */
export interface TokenLogprob {
  logprob: number;
  /** `[id, logprob]`, most likely first. */
  top: [number, number][];
}

/** Why a generation ended (`finish_reason` of `microllm.oneshot`). */
export type FinishReason = "stop_token" | "max_tokens" | "grammar_complete" | "cancelled";

/** Result of {@link Engine.generate}. */
export interface GenerateOutput {
  /**
   * Why the engine stopped, as the engine saw it. With a grammar, `grammar_complete` only says
   * that llama.cpp's grammar sampler let the end-of-generation token through, and `max_tokens`
   * does not say whether the grammar had just completed: `microllm.oneshot` settles the answer's
   * finish reason by checking the text against the grammar itself.
   */
  finishReason: FinishReason;
  generatedIds: number[];
  /** With `logprobs` in the request: one per generated id, in order. */
  logprobs?: TokenLogprob[];
  nPrompt: number;
  /** Engine time in ms. */
  runMs: number;
}

/** Options of one engine call. */
export interface EngineCallOptions {
  /**
   * Stops the call at its next boundary (between tokens of a generation, between items of a
   * worker batch). A generation that stops answers `finish_reason: "cancelled"`; other calls
   * reject with `signal.reason`.
   */
  signal?: AbortSignal | undefined;
  /** Run the call so that it shares the cores well (ORT: the non-spinning session). */
  quiet?: boolean | undefined;
  /**
   * Generation only: receives the ids generated since the previous call, in order, while the
   * generation runs (token-by-token streaming). Every id also comes back in the output's
   * `generatedIds`; the ids of the last few tokens may arrive only there (an engine batches
   * them). Given, the llama engine sends GENERATE with `stream: true`; absent, nothing is
   * streamed. An exception it throws is swallowed. Ignored by `embed` and `score`.
   */
  onTokens?: ((ids: number[]) => void) | undefined;
}

/** Health of an engine, read from cached state (never an engine call). */
export interface EngineHealth {
  /**
   * `ready`: serving; `idle`: not started yet (a worker starts on the first call); `starting`;
   * `quarantined`: past its crash budget (docs/internals.md §7), refusing with `probe_required`;
   * `disposed`.
   */
  state: "ready" | "idle" | "starting" | "quarantined" | "disposed";
  /** Calls sent and not answered. */
  inFlight: number;
  /** ms the engine has been busy without a pause (0 when idle). */
  busyMs: number;
  /** Busy longer than this many ms looks hung (`/health` says `unresponsive`). */
  busyLimitMs: number;
  /** Worker supervision facts of a worker-backed engine (pid, crashes, quarantine …). */
  worker?: Record<string, unknown>;
  /** Why it is quarantined, when it is. */
  quarantine?: Record<string, unknown>;
}

/**
 * One loaded model on one runtime. Calls may overlap; the engine serialises them as its runtime
 * needs (its lane's scheduler decides their order). Disposal releases the runtime's resources for
 * this model and is idempotent.
 */
export interface Engine extends AsyncDisposable {
  /** Runtime kind, e.g. `"ort"`, `"llama"`. */
  readonly kind: string;
  /** What the loaded model computes. */
  readonly task: ModelTask;
  /** Identity that enters the model's profile and every envelope. */
  readonly identity: EngineIdentity;
  /** Sequence and micro-batch limits of this engine for this model. */
  readonly limits: EngineLimits;
  /** Output width: hidden size (embed), 1 (rerank), 0 (generate). */
  readonly dims: number;
  /** Calls sent and not answered. */
  readonly inFlight: number;
  /** Cached health. */
  health(): EngineHealth;
  /**
   * Embeds rows in one call (≤ `limits.maxSequences` rows).
   *
   * @throws {SynapseError} `engine_crashed` (transient) when the runtime fails; `probe_required`
   *   when quarantined; `backend_unavailable` when the engine does not embed.
   */
  embed(rows: readonly EngineRow[], options?: EngineCallOptions): Promise<EngineBatchOutput>;
  /**
   * Scores cross-encoder pair rows in one call; `dims` is 1, raw logits.
   *
   * @throws {SynapseError} as {@link Engine.embed}.
   */
  score(rows: readonly EngineRow[], options?: EngineCallOptions): Promise<EngineBatchOutput>;
  /**
   * Greedy generation. Aborting `options.signal` stops it within one token and resolves with
   * `finishReason: "cancelled"` and the tokens generated so far.
   *
   * @throws {SynapseError} `engine_crashed`, `probe_required`, `invalid_request` (a grammar the
   *   engine refuses), `backend_unavailable` when the engine does not generate.
   */
  generate(request: GenerateRequest, options?: EngineCallOptions): Promise<GenerateOutput>;
  /**
   * Resident memory of the engine's own process, bytes, for engines that run in one (a worker
   * process); absent for engines sharing the service's process. Never starts anything; undefined
   * when it cannot tell now.
   */
  residentBytes?(): Promise<number | undefined>;
  /**
   * The refusal a call would get now without reaching the runtime (a remote provider whose
   * circuit breaker is open: `provider_unavailable` with `retry_after_ms`), checked by the lane's
   * admission before anything queues; absent or undefined: admit as usual.
   */
  admissionRefusal?(): SynapseError | undefined;
  /** Releases the model's runtime resources. Idempotent. */
  dispose(): Promise<void>;
}
