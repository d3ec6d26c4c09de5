/**
 * The ORT engine: one ONNX model (an encoder or a cross-encoder) on one ORT Worker thread
 * ({@link OrtThread}). Several models may share a thread; each has its own engine object.
 *
 * @module
 */
import { SynapseError } from "../../contract/errors.ts";
import type {
  Engine,
  EngineBatchOutput,
  EngineCallOptions,
  EngineHealth,
  EngineIdentity,
  EngineLimits,
  EngineRow,
  GenerateOutput,
  ModelTask,
} from "../engine.ts";
import { ORT_ENGINE } from "./ort_thread.ts";
import type { OrtLoadSpec, OrtRunner } from "./ort_thread.ts";

/** Micro-batch shape the ORT engine certifies (part of every ORT profile). */
export const ORT_MICRO_BATCH = Object.freeze({
  /** Padded tokens per engine call. */
  maxMicroBatchTokens: 4096,
  /** Rows per engine call. */
  maxSequences: 64,
});

/**
 * Shapes a session runs once at load: the micro-batch budget at the longest sequence and at
 * many short rows, which sizes onnxruntime's memory arena for what requests will send.
 *
 * @param maxTokens The model's longest sequence.
 * @returns `[rows, seq]` pairs.
 */
export function warmupShapes(maxTokens: number): [number, number][] {
  const { maxMicroBatchTokens, maxSequences } = ORT_MICRO_BATCH;
  const long = Math.min(maxTokens, maxMicroBatchTokens);
  const shortLen = Math.max(1, Math.floor(maxMicroBatchTokens / maxSequences));
  return [[Math.max(1, Math.floor(maxMicroBatchTokens / long)), long], [maxSequences, shortLen]];
}

/** What an {@link OrtEngine} serves. */
export interface OrtEngineSpec {
  /** The model's ONNX file and how to pool it. */
  load: OrtLoadSpec;
  /** Longest sequence, specials included. */
  maxSequenceTokens: number;
}

/** One ONNX model on one ORT thread. */
export class OrtEngine implements Engine {
  readonly kind = "ort";
  readonly identity: EngineIdentity = ORT_ENGINE;
  readonly task: ModelTask;
  readonly limits: EngineLimits;
  #thread: OrtRunner;
  #ref: string;
  #dims: number;
  #disposed = false;

  private constructor(thread: OrtRunner, spec: OrtEngineSpec, dims: number) {
    this.#thread = thread;
    this.#ref = spec.load.modelRef;
    this.task = spec.load.task;
    this.#dims = dims;
    this.limits = {
      maxSequenceTokens: spec.maxSequenceTokens,
      maxMicroBatchTokens: ORT_MICRO_BATCH.maxMicroBatchTokens,
      maxSequences: ORT_MICRO_BATCH.maxSequences,
    };
  }

  /**
   * Loads the model into `thread` now.
   *
   * @returns The engine and the cold-load time in ms.
   * @throws {SynapseError} `artifact_invalid` when onnxruntime cannot open the file;
   *   `engine_crashed` when the thread dies.
   */
  static async load(
    thread: OrtRunner,
    spec: OrtEngineSpec,
  ): Promise<{ engine: OrtEngine; coldLoadMs: number }> {
    const { dims, coldLoadMs } = await thread.load(spec.load);
    return { engine: new OrtEngine(thread, spec, dims), coldLoadMs };
  }

  /**
   * Registers the model on `thread` without loading it: the first call loads it (a bulk thread
   * that serves only durable jobs costs nothing until a job arrives).
   *
   * @param dims The output width, known from a load elsewhere.
   */
  static lazy(thread: OrtRunner, spec: OrtEngineSpec, dims: number): OrtEngine {
    thread.register(spec.load);
    return new OrtEngine(thread, spec, dims);
  }

  /** Output width: hidden size (embed) or 1 (rerank). */
  get dims(): number {
    return this.#dims;
  }

  /** Calls this engine's thread has in flight (all its models). */
  get inFlight(): number {
    return this.#thread.inFlight;
  }

  /** onnxruntime intra-op threads of the thread this engine runs on. */
  get intraOpThreads(): number {
    return this.#thread.intraOpThreads;
  }

  health(): EngineHealth {
    return {
      state: this.#disposed || this.#thread.disposed ? "disposed" : "ready",
      inFlight: this.#thread.inFlight,
      busyMs: 0,
      busyLimitMs: Infinity,
    };
  }

  embed(rows: readonly EngineRow[], options: EngineCallOptions = {}): Promise<EngineBatchOutput> {
    return this.#run("embed", rows, options);
  }

  score(rows: readonly EngineRow[], options: EngineCallOptions = {}): Promise<EngineBatchOutput> {
    return this.#run("rerank", rows, options);
  }

  generate(): Promise<GenerateOutput> {
    return Promise.reject(
      new SynapseError(
        "backend_unavailable",
        `Cannot generate with model '${this.#ref}': the ORT engine serves embed and rerank`,
        { details: { model_id: this.#ref, backends: [{ backend: "ort", reason: "no_decoder" }] } },
      ),
    );
  }

  async dispose(): Promise<void> {
    if (this.#disposed) return;
    this.#disposed = true;
    if (!this.#thread.disposed) await this.#thread.unload(this.#ref).catch(() => {});
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.dispose();
  }

  async #run(
    task: ModelTask,
    rows: readonly EngineRow[],
    options: EngineCallOptions,
  ): Promise<EngineBatchOutput> {
    if (this.#disposed) {
      throw new SynapseError(
        "disposed",
        `Cannot run model '${this.#ref}': its engine was disposed`,
      );
    }
    if (task !== this.task) {
      throw new SynapseError(
        "backend_unavailable",
        `Cannot ${
          task === "rerank" ? "score" : "embed"
        } with model '${this.#ref}': it serves ${this.task}`,
        { details: { model_id: this.#ref, task: this.task } },
      );
    }
    options.signal?.throwIfAborted();
    return await this.#thread.run(this.#ref, rows, { quiet: options.quiet ?? false });
  }
}
