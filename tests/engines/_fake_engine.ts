/**
 * A deterministic in-memory {@link Engine} for tests of the logic above engines (the Lane): it
 * passes the shared contract suite (`tests/engines/fake_engine_test.ts`) and lets a test hold each
 * call open, make a row fail or yield NaN, crash the engine, and read back every call it got.
 * Nothing here waits on a timer: a held call runs when the test says so. A test double for lane
 * logic only; the real engines keep their own tests.
 *
 * Outputs: an embed row gives the unit vector along `[len, sum(ids), ids[0], ids[len-1]]` (plus
 * one, so it is never zero), a score row gives `sum(ids) / 1000`, a generation gives the ids
 * `last + 1, last + 2, …` and stops on its own after {@link FakeEngineOptions.stopAfter} tokens.
 *
 * @module
 */
import { SynapseError } from "../../lib/contract/errors.ts";
import type {
  Engine,
  EngineBatchOutput,
  EngineCallOptions,
  EngineHealth,
  EngineIdentity,
  EngineLimits,
  EngineRow,
  GenerateOutput,
  GenerateRequest,
  ModelTask,
} from "../../lib/engines/engine.ts";

/** Width of an embed row of the fake. */
export const FAKE_DIMS = 4;

/** One call the fake received, as it happened. */
export interface FakeCall {
  /** 0-based order of arrival. */
  readonly seq: number;
  readonly method: "embed" | "score" | "generate";
  /** The ids of each row of the call (the prompt, for a generation), copied. */
  readonly rows: readonly number[][];
  /** `options.quiet` of the call. */
  readonly quiet: boolean | undefined;
  /** The call's signal. */
  readonly signal: AbortSignal | undefined;
  /** `running` until it settles. */
  state: "running" | "done" | "failed";
  /** Lets a held call run (see {@link FakeEngine.hold}); a no-op otherwise. */
  proceed(): void;
  /** Settles once the call has. */
  readonly settled: Promise<void>;
}

/** Options of {@link FakeEngine}. */
export interface FakeEngineOptions {
  /** @default "embed" */
  task?: ModelTask;
  /** @default {maxSequenceTokens: 64, maxMicroBatchTokens: 256, maxSequences: 8} */
  limits?: Partial<EngineLimits>;
  /** A generation ends with `stop_token` after this many tokens. @default 3 */
  stopAfter?: number;
}

/** A deterministic engine in memory, with hooks a test sets (all off by default). */
export class FakeEngine implements Engine {
  readonly kind = "fake";
  readonly task: ModelTask;
  readonly identity: EngineIdentity = { engine: "fake", version: "1" };
  readonly limits: EngineLimits;
  readonly dims: number;
  /** Every call received, in order of arrival. */
  readonly calls: FakeCall[] = [];
  /**
   * When true, each call waits, once it has been recorded, until its {@link FakeCall.proceed}
   * (or {@link proceedAll}) — the test decides when engine work ends, no clock does.
   */
  hold = false;
  /**
   * When true (the default), aborting a held call's signal ends it at once: an embed or score
   * call rejects with the reason, a generation resolves `cancelled`. When false the call keeps
   * running until it proceeds (an engine that stops only at its next boundary).
   */
  abortEndsHeld = true;
  /** A row for which this returns an error makes any call holding it reject with that error. */
  failRow: ((row: EngineRow) => SynapseError | undefined) | undefined;
  /** A row for which this returns true comes back as NaN, flagged in `nonFinite`. */
  nanRow: ((row: EngineRow) => boolean) | undefined;
  /** When true, every call rejects with `engine_crashed` (after recording it). */
  crash = false;
  #stopAfter: number;
  #inFlight = 0;
  #maxInFlight = 0;
  #disposed = false;
  #waiters: { n: number; resolve: () => void }[] = [];

  constructor(options: FakeEngineOptions = {}) {
    this.task = options.task ?? "embed";
    this.limits = {
      maxSequenceTokens: 64,
      maxMicroBatchTokens: 256,
      maxSequences: 8,
      ...options.limits,
    };
    this.dims = this.task === "embed" ? FAKE_DIMS : this.task === "rerank" ? 1 : 0;
    this.#stopAfter = options.stopAfter ?? 3;
  }

  /** Calls sent and not answered. */
  get inFlight(): number {
    return this.#inFlight;
  }

  /** The most calls that were ever in flight at once. */
  get maxInFlight(): number {
    return this.#maxInFlight;
  }

  /** Calls still running (held or not). */
  running(): FakeCall[] {
    return this.calls.filter((c) => c.state === "running");
  }

  /** Resolves once at least `n` calls have arrived. */
  whenCalls(n: number): Promise<void> {
    if (this.calls.length >= n) return Promise.resolve();
    const { promise, resolve } = Promise.withResolvers<void>();
    this.#waiters.push({ n, resolve });
    return promise;
  }

  /** Lets every held call run. */
  proceedAll(): void {
    for (const c of this.calls) c.proceed();
  }

  health(): EngineHealth {
    return {
      state: this.#disposed ? "disposed" : "ready",
      inFlight: this.#inFlight,
      busyMs: 0,
      busyLimitMs: 60_000,
    };
  }

  embed(rows: readonly EngineRow[], options: EngineCallOptions = {}): Promise<EngineBatchOutput> {
    return this.#batch("embed", rows, options);
  }

  score(rows: readonly EngineRow[], options: EngineCallOptions = {}): Promise<EngineBatchOutput> {
    return this.#batch("score", rows, options);
  }

  async generate(
    request: GenerateRequest,
    options: EngineCallOptions = {},
  ): Promise<GenerateOutput> {
    this.#refuseEarly("generate", options.signal);
    const call = this.#record("generate", [request.ids], options);
    try {
      const aborted = await call.wait;
      if (this.crash) throw crashed();
      const last = request.ids.length > 0 ? request.ids[request.ids.length - 1]! : 0;
      const n = aborted ? 0 : Math.min(request.maxTokens, this.#stopAfter);
      const generatedIds = Array.from({ length: n }, (_, k) => last + 1 + k);
      if (generatedIds.length > 0) {
        try {
          options.onTokens?.(generatedIds);
        } catch { /* the interface swallows it */ }
      }
      call.end("done");
      return {
        finishReason: aborted ? "cancelled" : n === request.maxTokens ? "max_tokens" : "stop_token",
        generatedIds,
        nPrompt: request.ids.length,
        runMs: 0,
      };
    } catch (e) {
      call.end("failed");
      throw e;
    }
  }

  dispose(): Promise<void> {
    this.#disposed = true;
    return Promise.resolve();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.dispose();
  }

  async #batch(
    method: "embed" | "score",
    rows: readonly EngineRow[],
    options: EngineCallOptions,
  ): Promise<EngineBatchOutput> {
    this.#refuseEarly(method, options.signal);
    const call = this.#record(method, rows.map((r) => r.ids), options);
    try {
      const aborted = await call.wait;
      if (aborted) throw options.signal!.reason;
      if (this.crash) throw crashed();
      if (rows.length > this.limits.maxSequences) {
        throw new SynapseError(
          "invalid_request",
          `Cannot ${method} ${rows.length} rows: the fake engine takes ${this.limits.maxSequences}`,
        );
      }
      for (const row of rows) {
        if (row.ids.length > this.limits.maxSequenceTokens) {
          throw new SynapseError(
            "sequence_too_long",
            `Cannot ${method} a row of ${row.ids.length} tokens: the fake engine takes ${this.limits.maxSequenceTokens}`,
          );
        }
        const err = this.failRow?.(row);
        if (err !== undefined) throw err;
      }
      const dims = method === "embed" ? FAKE_DIMS : 1;
      const data = new Float32Array(rows.length * dims);
      const nonFinite = new Uint8Array(rows.length);
      rows.forEach((row, r) => {
        const out = data.subarray(r * dims, (r + 1) * dims);
        if (this.nanRow?.(row)) {
          out.fill(NaN);
          nonFinite[r] = 1;
        } else if (method === "embed") out.set(fakeVector(row.ids));
        else out[0] = fakeScore(row.ids);
      });
      call.end("done");
      return { data, dims, nonFinite, runMs: 0 };
    } catch (e) {
      call.end("failed");
      throw e;
    }
  }

  /** What every call refuses before it runs anything: disposal, a signal already aborted, a task. */
  #refuseEarly(method: FakeCall["method"], signal: AbortSignal | undefined): void {
    if (this.#disposed) {
      throw new SynapseError("disposed", `Cannot ${method}: the fake engine was disposed`);
    }
    if (signal?.aborted) throw signal.reason;
    const wanted = method === "embed" ? "embed" : method === "score" ? "rerank" : "generate";
    if (this.task !== wanted) {
      throw new SynapseError(
        "backend_unavailable",
        `Cannot ${method}: the fake engine's model does ${this.task}`,
      );
    }
  }

  #record(
    method: FakeCall["method"],
    rows: readonly Int32Array[],
    options: EngineCallOptions,
  ): FakeCall & { wait: Promise<boolean>; end(state: "done" | "failed"): void } {
    const { promise: gate, resolve: open } = Promise.withResolvers<boolean>();
    const { promise: settled, resolve: onSettled } = Promise.withResolvers<void>();
    const { signal } = options;
    const onAbort = (): void => {
      if (this.abortEndsHeld) open(true);
    };
    const call = {
      seq: this.calls.length,
      method,
      rows: rows.map((ids) => Array.from(ids)),
      quiet: options.quiet,
      signal,
      state: "running" as FakeCall["state"],
      proceed: () => open(false),
      settled,
      wait: this.hold ? gate : Promise.resolve(false),
      end: (state: "done" | "failed") => {
        if (call.state !== "running") return;
        call.state = state;
        signal?.removeEventListener("abort", onAbort);
        this.#inFlight--;
        onSettled();
      },
    };
    if (this.hold) signal?.addEventListener("abort", onAbort, { once: true });
    this.calls.push(call);
    this.#inFlight++;
    this.#maxInFlight = Math.max(this.#maxInFlight, this.#inFlight);
    this.#waiters = this.#waiters.filter((w) => {
      if (this.calls.length < w.n) return true;
      w.resolve();
      return false;
    });
    return call;
  }
}

/** The fake's vector for a row (unit length). */
export function fakeVector(ids: ArrayLike<number>): Float32Array {
  let sum = 0;
  for (let i = 0; i < ids.length; i++) sum += ids[i]!;
  const v = [ids.length, sum, ids[0] ?? 0, ids[ids.length - 1] ?? 0].map((x) => x + 1);
  const norm = Math.hypot(...v);
  return Float32Array.from(v, (x) => x / norm);
}

/** The fake's score for a row. */
export function fakeScore(ids: ArrayLike<number>): number {
  let sum = 0;
  for (let i = 0; i < ids.length; i++) sum += ids[i]!;
  return Math.fround(sum / 1000);
}

/** A row of `len` tokens, ids `base, base + 1, …`. */
export function fakeRow(len: number, base = 1): EngineRow {
  const ids = Int32Array.from({ length: len }, (_, i) => base + i);
  return { ids, typeIds: new Int32Array(len) };
}

function crashed(): SynapseError {
  return new SynapseError("engine_crashed", "The fake engine crashed (a test asked it to)");
}
