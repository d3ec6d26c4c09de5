/**
 * What an operation needs from the running module: models (and through them their lanes),
 * admission counters, durable jobs, identity counters, config and the log. One context per
 * Synapse instance; operations are plain functions of it.
 *
 * @module
 */
import type { ModelRegistry } from "../models/model_registry.ts";
import type { ModelLoads } from "../models/model_loads.ts";
import type { PromptSelector } from "../models/prompts.ts";
import type { Admission } from "../sched/admission.ts";
import type { SynapseConfig } from "../config/types.ts";
import type { JobStore } from "../store/job_store.ts";
import type { LogSink } from "../log/log.ts";
import type { TokenizerPool } from "../tokenize/tokenizer_pool.ts";
import type { CallDoor } from "../log/metrics.ts";
import type { CertificationStore } from "../probe/certification_store.ts";
import type { MachineProfile } from "../identity/machine_profile.ts";
import type { KnobAssignment } from "../probe/types.ts";
import type { AliasStore } from "../store/alias_store.ts";

/**
 * A durable job of this process paused for re-authentication (`paused_needs_reauth`): its run
 * waits, its inputs in memory, until `job.resume` or its resume deadline
 * (lib/ops/_durable_job.ts `runQuanta`).
 */
export interface PausedJob {
  /** Wakes the run: it sends the refused quantum again. */
  resume(): void;
  /** Ends the wait with `err` (the deadline passed, the instance is shutting down). */
  abandon(err: unknown): void;
}

/** Durable jobs: their store, the runs in flight and the runs paused. */
export interface JobsContext {
  readonly store: JobStore;
  /** Job runs in flight in this process, by job id (a paused one included). */
  readonly running: Map<string, Promise<void>>;
  /** Job runs of this process paused for re-authentication, by job id. */
  readonly paused: Map<string, PausedJob>;
}

/** Shared state handed to every operation. */
export interface OpContext {
  readonly config: SynapseConfig;
  /** Models; a ready model carries its lanes. */
  readonly registry: ModelRegistry;
  /**
   * Run-time loads, catalog downloads and the model cache (`model.load`, `models.*`, `cache.*`);
   * absent in an instance made without a cache (those operations then answer
   * `backend_unavailable`).
   */
  readonly loads?: ModelLoads;
  /** The module's admission (byte budget, refusal counters) for `admission.status`. */
  readonly admission: Admission;
  readonly jobs: JobsContext;
  /** Incremented at every boot (from the store). */
  readonly moduleGeneration: number;
  /** Alias-table epoch (u64, `module_meta.table_epoch`; +1 per alias change). */
  tableEpoch(): number;
  /**
   * The alias table (lib/store/alias_store.ts): `equivalentsOf(fp, nowMs)` tells declared-only
   * from probe-measured equivalence, `declare` / `retract` change it (each bumping the epoch in
   * the same transaction), `checkIndex` answers `aliases.check_index`.
   */
  readonly aliases: AliasStore;
  /**
   * The fingerprints equivalent to `fingerprint` now (live alias rows, direct pairs only, in
   * code-point order): every envelope's `equivalent_to`.
   *
   * @throws {SynapseError} `store_failure` when the store cannot be read.
   */
  equivalentTo(fingerprint: string): string[];
  /** Wall clock in ms. */
  now(): number;
  /** Hash of the machine profile this instance runs on (docs/internals.md §5). */
  readonly machineProfileHash: string;
  /** The machine profile itself (`os_build`, engine identities …), which keys certification rows. */
  readonly machineProfile: MachineProfile;
  /** Certification, performance and knob-assignment rows (lib/probe/certification.ts reads them). */
  readonly certifications: CertificationStore;
  /**
   * This machine profile's knob assignments as the store held them at startup, keyed by
   * `knobAssignmentKey(numeric_profile_id, knob)` (lib/probe/certification.ts): a row written
   * later applies after a restart.
   */
  readonly startupKnobAssignments: ReadonlyMap<string, KnobAssignment>;
  /** Module log (bugs are logged here with their stack). */
  readonly log: LogSink;
  /** Tokenizes off the event loop (every op tokenizes through it). */
  readonly tokenizers: TokenizerPool;
}

/** Per-call options every operation takes. */
export interface CallOptions {
  /** Aborts the call (client went away). */
  signal?: AbortSignal | undefined;
  /**
   * The door the call came through, for the `door` label of `synapse_requests_total`; set by a
   * door, never read from the wire. @default "embedded"
   */
  door?: CallDoor;
  /** How a door asks `embed.batch` to serve; set by a door, never read from the wire. */
  embed?: EmbedCallOptions;
  /** How a door asks `rerank.score` to serve; set by a door, never read from the wire. */
  rerank?: RerankCallOptions;
  /**
   * `microllm.oneshot` only: receives the generated token ids as the worker produces them (the
   * ids since the previous call, in order), before the call resolves; the result's
   * `generated_token_ids` still holds them all. Set by a door that streams (the OpenAI
   * completions doors with `stream: true`), never read from the wire.
   */
  onTokens?: (ids: number[]) => void;
  /**
   * `microllm.oneshot` only: receives the answer's text as it becomes final, in pieces whose
   * join is exactly the result's `text` (every piece arrives before the call resolves). Text
   * that could still be cut by a `stop` string, or an incomplete UTF-8 character, is held back
   * until the next tokens tell. Set by a door that streams, never read from the wire.
   */
  onText?: (text: string) => void;
  /**
   * `microllm.oneshot` only: told once, before any `onText`, which model generates (and, with
   * `messages`, which chat template made the prompt), so a door that streams can start its
   * answer. Set by a door, never read from the wire.
   */
  onStart?: (start: GenerationStart) => void;
  /**
   * Hears the call's request facts (lib/ops/request_facts.ts) once its outcome is known, as the
   * instance works them out for its metrics, so a door's request log reuses them instead of
   * working them out again. Set by a door, never read from the wire.
   */
  onFacts?: (facts: RequestFacts) => void;
}

/**
 * The facts of one call for the request log (`CallOptions.onFacts`; worked out by
 * lib/ops/request_facts.ts): never a text, an id or a key, only counts, the model id and codes. A
 * fact that is not known is absent.
 */
export interface RequestFacts {
  /** The model that served it (the result's `model_id`), or the one asked for. */
  model?: string;
  /** Items in the request: batch items, rerank candidates, 1 for a query or a generation. */
  items?: number;
  /** Items refused inside a served result (`item_errors`). */
  item_errors?: number;
  /** Tokens the engine read (`real_token_counts`), plus those it generated (`n_gen`). */
  tokens?: number;
  /** ms from admission to the start on the engine (`queue_time_ms`). */
  queue_ms?: number;
  /** ms of engine work (`inference_time_ms`). */
  inference_ms?: number;
  /**
   * What happened: `ok`; the stable error code of a refusal (a door that answers all or nothing
   * counts a result with a refused item as that item's code, with no tokens served); or
   * `cancelled` when the caller went away before the answer (an HTTP client hang-up, a bus
   * Cancel), whatever the operation then said (the wire error of that case stays
   * `deadline_exceeded` with `details.reason: "cancelled"`).
   */
  outcome: string;
}

/** What `microllm.oneshot` tells `onStart` as its generation starts. */
export interface GenerationStart {
  /** The model that generates (the result's `model_id`). */
  model_id: string;
  /** The model alias the request named, when it named one (the result's `requested_model`). */
  requested_model?: string;
  /** Its fingerprint (the result's `fingerprint`). */
  fingerprint: string;
  /** With `messages`: the chat template that made the prompt (the result's `chat_template`). */
  chat_template?: "gguf" | "fallback";
}

/**
 * How a door asks `rerank.score` to serve. The Cohere/Jina and TEI rerank doors set this: their
 * clients send up to 1,000 documents in one call and expect one answer.
 */
export interface RerankCallOptions {
  /**
   * Serve more candidates than `inline.max_items` as consecutive chunks of at most
   * `inline.max_items` — each admitted on the lane like one rerank request (its own `deadline_ms`
   * and `max_queue_ms`), so other requests take their turn between chunks — up to this many
   * candidates, instead of refusing them. Scores are per (query, candidate) pair, so a chunk's
   * scores are those the candidates get in any other batch.
   */
  inlineChunksUpTo?: number;
}

/**
 * How a door asks `embed.batch` to serve. The OpenAI door (`POST /v1/embeddings`) sets these: its
 * clients send up to 2,048 inputs in one call, expect one answer, and have no `request_key`.
 */
export interface EmbedCallOptions {
  /**
   * Serve the batch as consecutive inline chunks — each within `inline.max_items`,
   * `inline.byte_budget` and `inline.max_tokens`, each admitted on the model's interactive lane
   * exactly as an inline request is (its own `deadline_ms` and `max_queue_ms`) — instead of a
   * durable job or a refusal, up to this many items. Queries and other inline requests take
   * their turn between chunks. Ignored when the call has a `request_key`.
   */
  inlineChunksUpTo?: number | undefined;
  /**
   * The door's `dimensions` (OpenAI, TEI, Ollama): serve vectors this wide — the model's own
   * width, or one of its declared `matryoshka_dims` (a derived space with its own fingerprint,
   * lib/models/matryoshka.ts); any other width is refused with `invalid_request` naming
   * `dimensions` and the allowed widths.
   */
  requiredDims?: number | undefined;
  /**
   * Stop at the first refused item (its texts are checked before any engine work; later chunks
   * are not run) and answer what was refused: the caller refuses the whole request anyway.
   */
  allOrNothing?: boolean;
  /**
   * The request's prompt selector (`input_type` / `prompt_name`, or a door's mapping of its own
   * field: TEI `prompt_name`, Jina `task`, Cohere `input_type`); see lib/models/prompts.ts.
   */
  prompt?: PromptSelector | undefined;
  /**
   * Most tokens per input for this call (a door's per-call context: Ollama `options.num_ctx`),
   * honoured only below the model's `max_tokens` (at or above it nothing changes): an input over
   * it is cut to it when the call truncates (disclosed per item as any cut), else refused
   * `sequence_too_long` with `max_tokens` this cap. A positive integer. Not kept by a durable
   * job: a call with a `request_key` that would become one is refused `invalid_request`
   * `{field: "request_key", reason: "token_cap_in_job"}`.
   */
  maxTokens?: number | undefined;
  /**
   * Accept an empty input list (a door's warm-up call, Ollama `{model}` without `input`): the
   * model is resolved and checked exactly as for a call with inputs, and the answer has no
   * vectors. @default false
   */
  allowEmpty?: boolean;
}
