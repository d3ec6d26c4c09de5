/**
 * Tokenization off the main thread (field report F21): a pool of Deno Worker threads, each
 * holding the same sanitized tokenizers, that encode batches exactly as
 * {@link SanitizedTokenizer.encodeMany} does on the calling thread.
 *
 * The calling thread keeps only the cheap work: {@link SanitizedTokenizer.planMany} (length
 * bounds, a scan of at most `scanLimit` code units per text) refuses provably over-long texts at
 * once and finds truncation cuts, so only a proven prefix of a long text travels to a worker.
 * Calls whose texts are small together run on the calling thread (see
 * {@link TokenizerPoolOptions.inlineMaxChars}).
 *
 * @module
 */
import { SynapseError } from "../contract/errors.ts";
import { sha256Hex } from "../identity/sha256.ts";
import { fromWireFailure, fromWireOutcome } from "./_pool_protocol.ts";
import type { PoolRequest, PoolResponse } from "./_pool_protocol.ts";
import type {
  EncodeOutcome,
  EncodePlan,
  SanitizedTokenizer,
  SpecialSpan,
  TokenizedText,
} from "./tokenizer.ts";

/** Options of {@link TokenizerPool}. */
export interface TokenizerPoolOptions {
  /**
   * Worker threads, started on first use.
   *
   * @default {min(4, max(1, floor(navigator.hardwareConcurrency / 2)))}
   */
  size?: number;
  /**
   * A call whose texts (after planning: a prefix counts its cut length) total at most this many
   * UTF-16 code units is encoded on the calling thread. `deno task bench:tokenize-pool`
   * measured, per call: handing a batch to a worker and reading the answer back costs the
   * calling thread about 0.1 ms whatever the size, and the answer comes 0.5 ms later; encoding
   * inline costs about 4 µs per item plus 0.3 µs (WordPiece) to 0.8 µs (llama BPE) per code
   * unit. Up to about 256 code units (a query, a short sentence) inline is as cheap for the
   * event loop and faster to answer; above, the pool keeps the event loop free.
   *
   * @default {256}
   */
  inlineMaxChars?: number;
  /**
   * Code units the calling thread scans per call when planning, shared by its texts (each gets
   * at least 65536); a text it cannot decide within its share goes to a worker whole, which
   * plans it again without a limit. Only texts over `fullTokenizeMaxChars` are scanned at all.
   *
   * @default {1048576}
   */
  scanLimit?: number;
}

/** Options of {@link TokenizerPool.encodeItems} and {@link TokenizerPool.encodePairs}. */
export interface PoolEncodeOptions {
  /** Largest sequence the model accepts, special tokens included. */
  maxTokens: number;
  /** Cut to `maxTokens` instead of refusing with `sequence_too_long`. @default false */
  truncate?: boolean | undefined;
  /** Item id of each text, named in its `sequence_too_long` refusal. */
  itemIds?: readonly (string | undefined)[] | undefined;
  /** See {@link EncodeOptions.fullTokenizeMaxChars}. @default {max(65536, 32 × maxTokens)} */
  fullTokenizeMaxChars?: number | undefined;
  /**
   * Also compute each served item's `submittedSha256` (hex SHA-256 of its UTF-8 text, the
   * envelope's `submitted_sha256`) where the tokenizing happens, so hashing a 50 MiB text does
   * not hold the calling thread either. Texts then travel whole to the worker.
   *
   * @default {false}
   */
  submittedSha256?: boolean | undefined;
  /**
   * {@link EncodeOptions.specialSpans} of each text: the spans that are special tokens (a chat
   * template's scaffolding). Texts are plain text everywhere else, and entirely without it.
   */
  specialSpans?: readonly (readonly SpecialSpan[] | undefined)[] | undefined;
  /**
   * Aborts the call: a queued batch is dropped; a running one stops its worker (which is
   * replaced). The promise rejects with `signal.reason`.
   */
  signal?: AbortSignal | undefined;
}

/** Default worker count: half the cores, at least 1, at most 4. */
export function defaultPoolSize(): number {
  return Math.min(4, Math.max(1, Math.floor((navigator.hardwareConcurrency ?? 2) / 2)));
}

interface Source {
  key: string;
  json: string;
  config: Record<string, unknown>;
  rerankTemplate?: string;
}

interface Task {
  source: Source;
  request: Extract<PoolRequest, { type: "encode" | "tokenize_text" }>;
  resolve(outcomes: EncodeOutcome[] | TokenizedText[]): void;
  reject(reason: unknown): void;
  signal: AbortSignal | undefined;
  onAbort: (() => void) | undefined;
  slot?: Slot;
}

interface Slot {
  worker: Worker;
  loaded: Set<string>;
  task: Task | undefined;
  loadWaiters: Map<string, { resolve(): void; reject(e: unknown): void }[]>;
}

const sources = new WeakMap<SanitizedTokenizer, Source>();

/**
 * A pool of tokenizer worker threads.
 *
 * @example Encode a batch off the main thread
 * ```ts ignore
 * await using pool = new TokenizerPool();
 * const outcomes = await pool.encodeItems(tokenizer, ["a text", "another"], { maxTokens: 512 });
 * for (const o of outcomes) if (!o.ok) console.log(o.error.message);
 * ```
 */
export class TokenizerPool implements AsyncDisposable {
  /** Worker threads the pool may run. */
  readonly size: number;
  /** See {@link TokenizerPoolOptions.inlineMaxChars}. */
  readonly inlineMaxChars: number;
  /** See {@link TokenizerPoolOptions.scanLimit}. */
  readonly scanLimit: number;
  #slots: Slot[] = [];
  #queue: Task[] = [];
  #nextId = 1;
  #disposed = false;

  /**
   * @param options Worker count, inline threshold, scan limit.
   * @throws {RangeError} when `size` is not a positive integer or a limit is negative.
   */
  constructor(options: TokenizerPoolOptions = {}) {
    const size = options.size ?? defaultPoolSize();
    if (!Number.isInteger(size) || size < 1) {
      throw new RangeError(
        `Cannot create tokenizer pool as 'size' must be a positive integer: received ${size}`,
      );
    }
    const inline = options.inlineMaxChars ?? 256;
    const scan = options.scanLimit ?? 1 << 20;
    for (const [name, v] of [["inlineMaxChars", inline], ["scanLimit", scan]] as const) {
      if (!(v >= 0)) {
        throw new RangeError(
          `Cannot create tokenizer pool as '${name}' must be a non-negative number: received ${v}`,
        );
      }
    }
    this.size = size;
    this.inlineMaxChars = inline;
    this.scanLimit = scan;
  }

  /** True once {@link dispose} was called. */
  get disposed(): boolean {
    return this.#disposed;
  }

  /** Batches waiting for a worker. */
  get queued(): number {
    return this.#queue.length;
  }

  /** Batches a worker is encoding now. */
  get running(): number {
    return this.#slots.filter((s) => s.task !== undefined).length;
  }

  /**
   * Encodes texts; each outcome equals what `tokenizer.encode(text, {maxTokens, truncate,
   * itemId, fullTokenizeMaxChars})` returns, or the error it throws (`sequence_too_long`, or
   * whatever the tokenizer threw for that item).
   *
   * @param tokenizer The model's tokenizer.
   * @param texts The texts.
   * @param options Limit, truncation, item ids, signal.
   * @returns One outcome per text, in order.
   * @throws {RangeError} when `maxTokens` is not a positive integer.
   * @throws {SynapseError} `disposed` after {@link dispose}.
   * @throws {unknown} `signal.reason` when aborted.
   * @throws {Error} when the worker thread itself failed (not an item's error).
   */
  encodeItems(
    tokenizer: SanitizedTokenizer,
    texts: readonly string[],
    options: PoolEncodeOptions,
  ): Promise<EncodeOutcome[]> {
    return this.#encode(tokenizer, texts, options, undefined);
  }

  /**
   * Encodes (query, document) pairs for a cross-encoder, the query tokenized once per batch;
   * each outcome equals what `tokenizer.encodePair(query, doc, …)` returns or throws.
   *
   * @param tokenizer The model's tokenizer.
   * @param query The query (first segment, never truncated).
   * @param docs The documents (second segment, truncated when asked).
   * @param options Limit, truncation, item ids, signal.
   * @returns One outcome per document, in order.
   * @throws As {@link encodeItems}.
   */
  encodePairs(
    tokenizer: SanitizedTokenizer,
    query: string,
    docs: readonly string[],
    options: PoolEncodeOptions,
  ): Promise<EncodeOutcome[]> {
    return this.#encode(tokenizer, docs, options, query);
  }

  /**
   * Starts every worker and loads `tokenizer` into each, so the first batch does not pay for
   * it (call it when a model is loaded).
   *
   * @throws {SynapseError} `disposed` after {@link dispose}; `artifact_invalid` when a worker
   *   cannot build the tokenizer.
   */
  async warm(tokenizer: SanitizedTokenizer): Promise<void> {
    this.#ensureNotDisposed();
    const source = sourceOf(tokenizer);
    while (this.#slots.length < this.size) this.#slots.push(this.#spawn());
    await Promise.all(this.#slots.map((slot) => this.#load(slot, source)));
  }

  /**
   * Stops every worker; queued and running batches reject with `disposed`. Idempotent.
   */
  dispose(): Promise<void> {
    if (this.#disposed) return Promise.resolve();
    this.#disposed = true;
    const reason = new SynapseError("disposed", "Cannot tokenize: the tokenizer pool was disposed");
    const tasks = [...this.#queue, ...this.#slots.flatMap((s) => s.task ? [s.task] : [])];
    this.#queue = [];
    for (const slot of this.#slots) {
      slot.worker.terminate();
      for (const waiters of slot.loadWaiters.values()) for (const w of waiters) w.reject(reason);
    }
    this.#slots = [];
    for (const t of tasks) this.#settle(t, () => t.reject(reason));
    return Promise.resolve();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.dispose();
  }

  async #encode(
    tokenizer: SanitizedTokenizer,
    texts: readonly string[],
    options: PoolEncodeOptions,
    pairQuery: string | undefined,
  ): Promise<EncodeOutcome[]> {
    this.#ensureNotDisposed();
    options.signal?.throwIfAborted();
    const common = {
      maxTokens: options.maxTokens,
      truncate: options.truncate ?? false,
      ...(options.fullTokenizeMaxChars === undefined
        ? {}
        : { fullTokenizeMaxChars: options.fullTokenizeMaxChars }),
      ...(pairQuery === undefined ? {} : { pairQuery }),
    };
    // Cheap and bounded: refusals by length, truncation cuts.
    const planned = tokenizer.planMany(texts, {
      ...common,
      itemIds: options.itemIds,
      specialSpans: options.specialSpans,
      scanLimit: Math.max(1 << 16, Math.floor(this.scanLimit / Math.max(1, texts.length))),
    });
    const hash = options.submittedSha256 === true;
    const outcomes = new Array<EncodeOutcome>(texts.length);
    const index: number[] = [];
    const shipTexts: string[] = [];
    const plans: EncodePlan[] = [];
    const itemIds: (string | undefined)[] = [];
    const spans: (SpecialSpan[] | undefined)[] = [];
    let chars = pairQuery?.length ?? 0;
    planned.forEach((p, i) => {
      if (!p.ok) {
        outcomes[i] = p;
        return;
      }
      const text = texts[i]!;
      const shipped = p.plan.kind === "prefix" && !hash ? text.slice(0, p.plan.cut) : text;
      chars += shipped.length;
      index.push(i);
      shipTexts.push(shipped);
      plans.push(p.plan);
      itemIds.push(options.itemIds?.[i]);
      const sp = options.specialSpans?.[i];
      spans.push(sp === undefined ? undefined : sp.map(([a, b]) => [a, b] as const));
    });
    const withSpans = spans.some((sp) => sp !== undefined) ? { specialSpans: spans } : {};
    if (index.length === 0) return outcomes;
    let results: EncodeOutcome[];
    if (chars <= this.inlineMaxChars) {
      results = tokenizer.encodeMany(shipTexts, { ...common, plans, itemIds, ...withSpans });
      if (hash) {
        results.forEach((o, k) => {
          if (o.ok) o.submittedSha256 = sha256Hex(shipTexts[k]!);
        });
      }
    } else {
      results = await this.#submit(sourceOf(tokenizer), {
        type: "encode",
        id: this.#nextId++,
        key: "",
        texts: shipTexts,
        plans,
        itemIds,
        hash,
        ...common,
        ...withSpans,
      }, options.signal);
    }
    index.forEach((i, k) => outcomes[i] = results[k]!);
    return outcomes;
  }

  /**
   * {@link SanitizedTokenizer.tokenizeText} of each text (ids, pieces, spans: the `tokenize`
   * operation), on a worker thread when the texts are longer than `inlineMaxChars` in all.
   *
   * @throws the signal's reason when it aborts; `disposed` when the pool is gone.
   */
  async tokenizeTexts(
    tokenizer: SanitizedTokenizer,
    texts: readonly string[],
    options: { addSpecial: boolean; signal?: AbortSignal | undefined },
  ): Promise<TokenizedText[]> {
    this.#ensureNotDisposed();
    options.signal?.throwIfAborted();
    let chars = 0;
    for (const t of texts) chars += t.length;
    if (chars <= this.inlineMaxChars) {
      return texts.map((t) => tokenizer.tokenizeText(t, options.addSpecial));
    }
    return await this.#submit(sourceOf(tokenizer), {
      type: "tokenize_text",
      id: this.#nextId++,
      key: "",
      texts: [...texts],
      addSpecial: options.addSpecial,
    }, options.signal) as TokenizedText[];
  }

  #submit(
    source: Source,
    request: Extract<PoolRequest, { type: "encode" }>,
    signal: AbortSignal | undefined,
  ): Promise<EncodeOutcome[]>;
  #submit(
    source: Source,
    request: Extract<PoolRequest, { type: "encode" | "tokenize_text" }>,
    signal: AbortSignal | undefined,
  ): Promise<EncodeOutcome[] | TokenizedText[]>;
  #submit(
    source: Source,
    request: Extract<PoolRequest, { type: "encode" | "tokenize_text" }>,
    signal: AbortSignal | undefined,
  ): Promise<EncodeOutcome[] | TokenizedText[]> {
    request.key = source.key;
    return new Promise<EncodeOutcome[] | TokenizedText[]>((resolve, reject) => {
      const task: Task = { source, request, resolve, reject, signal, onAbort: undefined };
      if (signal !== undefined) {
        task.onAbort = () => this.#abort(task);
        signal.addEventListener("abort", task.onAbort, { once: true });
      }
      this.#queue.push(task);
      this.#dispatch();
    });
  }

  #dispatch(): void {
    while (this.#queue.length > 0) {
      let slot = this.#slots.find((s) => s.task === undefined);
      if (slot === undefined) {
        if (this.#slots.length >= this.size) return;
        slot = this.#spawn();
        this.#slots.push(slot);
      }
      const task = this.#queue.shift()!;
      task.slot = slot;
      slot.task = task;
      if (!slot.loaded.has(task.source.key)) {
        slot.worker.postMessage(loadRequest(task.source));
        slot.loaded.add(task.source.key);
      }
      slot.worker.postMessage(task.request);
    }
  }

  #spawn(): Slot {
    const worker = new Worker(new URL("./_tokenizer_worker.ts", import.meta.url), {
      type: "module",
    });
    const slot: Slot = { worker, loaded: new Set(), task: undefined, loadWaiters: new Map() };
    worker.onmessage = (ev: MessageEvent<PoolResponse>) => this.#onMessage(slot, ev.data);
    worker.onerror = (ev: ErrorEvent) => {
      ev.preventDefault();
      this.#replace(slot, new Error(`Tokenizer worker failed: ${ev.message}`));
    };
    worker.onmessageerror = () => {
      this.#replace(slot, new Error("Tokenizer worker sent an unreadable message"));
    };
    return slot;
  }

  #onMessage(slot: Slot, msg: PoolResponse): void {
    if (msg.type === "loaded") {
      const waiters = slot.loadWaiters.get(msg.key) ?? [];
      slot.loadWaiters.delete(msg.key);
      for (const w of waiters) {
        if (msg.error === undefined) w.resolve();
        else {
          w.reject(
            new SynapseError(
              "artifact_invalid",
              `Cannot load tokenizer in a worker: ${msg.error.message}`,
            ),
          );
        }
      }
      return;
    }
    const task = slot.task;
    if (task === undefined || task.request.id !== msg.id) return;
    slot.task = undefined;
    this.#settle(task, () => {
      if (msg.type === "encoded") task.resolve(msg.outcomes.map(fromWireOutcome));
      else if (msg.type === "tokenized") task.resolve(msg.items);
      else task.reject(fromWireFailure(msg.error));
    });
    this.#dispatch();
  }

  #load(slot: Slot, source: Source): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const list = slot.loadWaiters.get(source.key) ?? [];
      list.push({ resolve, reject });
      slot.loadWaiters.set(source.key, list);
      // Loading twice is harmless: the worker keeps the first and answers again.
      slot.worker.postMessage(loadRequest(source));
      slot.loaded.add(source.key);
    });
  }

  /** Terminates a slot's worker, fails its batch with `reason` and starts a fresh one. */
  #replace(slot: Slot, reason: unknown): void {
    slot.worker.terminate();
    const i = this.#slots.indexOf(slot);
    if (i >= 0) this.#slots.splice(i, 1);
    for (const waiters of slot.loadWaiters.values()) for (const w of waiters) w.reject(reason);
    const task = slot.task;
    slot.task = undefined;
    if (task !== undefined) this.#settle(task, () => task.reject(reason));
    if (!this.#disposed) this.#dispatch();
  }

  #abort(task: Task): void {
    const reason = task.signal?.reason;
    const queued = this.#queue.indexOf(task);
    if (queued >= 0) {
      this.#queue.splice(queued, 1);
      this.#settle(task, () => task.reject(reason));
      return;
    }
    // Running: synchronous tokenization cannot be interrupted, so the worker goes.
    if (task.slot !== undefined && task.slot.task === task) this.#replace(task.slot, reason);
  }

  #settle(task: Task, settle: () => void): void {
    if (task.onAbort !== undefined) task.signal?.removeEventListener("abort", task.onAbort);
    task.onAbort = undefined;
    settle();
  }

  #ensureNotDisposed(): void {
    if (this.#disposed) {
      throw new SynapseError("disposed", "Cannot tokenize: the tokenizer pool was disposed");
    }
  }
}

function loadRequest(source: Source): PoolRequest {
  return {
    type: "load",
    key: source.key,
    json: source.json,
    config: source.config,
    ...(source.rerankTemplate === undefined ? {} : { rerankTemplate: source.rerankTemplate }),
  };
}

/** The key and JSON text a worker builds the tokenizer from, computed once per tokenizer. */
function sourceOf(tokenizer: SanitizedTokenizer): Source {
  let s = sources.get(tokenizer);
  if (s === undefined) {
    const { json, config, rerankTemplate } = tokenizer.source;
    const configText = JSON.stringify(config);
    s = {
      key: `${tokenizer.digest}|${sha256Hex(configText)}`,
      json: JSON.stringify(json),
      config,
      ...(rerankTemplate === undefined ? {} : { rerankTemplate }),
    };
    sources.set(tokenizer, s);
  }
  return s;
}
