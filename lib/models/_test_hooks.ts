/**
 * Test hooks of the model registry: ways to make a lane misbehave on purpose so the probe's
 * gate can be seen to fail (tests/probe/gate_fails_test.ts). They are reachable only
 * through the TypeScript options of {@link ModelRegistryOptions} and `SynapseOptions` — never
 * from the config, the environment or the wire.
 *
 * @module
 */
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
} from "../engines/engine.ts";

/**
 * Test hooks of a registry. **For tests only**: no config key, environment variable or op
 * reaches them.
 */
export interface RegistryTestHooks {
  /**
   * Model ids whose interactive-runtime engine (the query path) is wrapped so every embed row it
   * returns is nudged by a small deterministic perturbation ({@link SKEW_EPSILON}) and
   * renormalised to its norm: the query path then differs from the batch path (the bulk
   * runtime), which the probe must catch and answer with `query_path: "disabled"`.
   */
  skewQueryPath?: readonly string[];
  /**
   * Models whose engines (both runtimes) nudge the embed rows of every call of at least
   * `minRows` rows by `epsilon` (as {@link SkewedEngine}): the lane is then not shape-invariant,
   * which the probe must answer by splitting it into shape classes and capping its calls at the
   * shapes that match a row alone (`shape_cap`).
   */
  skewBatchShapes?: readonly { modelId: string; minRows: number; epsilon: number }[];
}

/** Size of the nudge {@link SkewedEngine} adds, relative to the row's norm (cosine ≈ 0.995). */
export const SKEW_EPSILON = 0.1;

/**
 * An engine whose embed outputs are nudged: for a row `v` of norm `n`, `v + ε·n·u` rescaled to
 * norm `n`, with `u` a fixed unit direction (the same for every row); the cosine to `v` is
 * about 1 − ε²/2. Finite rows only, in calls of at least `minRows` rows; scores and generations
 * pass through.
 */
export class SkewedEngine implements Engine {
  readonly #inner: Engine;
  readonly #epsilon: number;
  readonly #minRows: number;

  /**
   * @param inner The engine to wrap (its lifecycle stays the owner's; dispose passes through).
   * @param options `epsilon` (default {@link SKEW_EPSILON}); `minRows`: calls with fewer rows
   *   pass through (default 1: every call).
   */
  constructor(inner: Engine, options: { epsilon?: number; minRows?: number } = {}) {
    this.#inner = inner;
    this.#epsilon = options.epsilon ?? SKEW_EPSILON;
    this.#minRows = options.minRows ?? 1;
  }

  get kind(): string {
    return this.#inner.kind;
  }
  get task(): ModelTask {
    return this.#inner.task;
  }
  get identity(): EngineIdentity {
    return this.#inner.identity;
  }
  get limits(): EngineLimits {
    return this.#inner.limits;
  }
  get dims(): number {
    return this.#inner.dims;
  }
  get inFlight(): number {
    return this.#inner.inFlight;
  }

  health(): EngineHealth {
    return this.#inner.health();
  }

  async embed(rows: readonly EngineRow[], options?: EngineCallOptions): Promise<EngineBatchOutput> {
    const out = await this.#inner.embed(rows, options);
    if (rows.length < this.#minRows) return out;
    const eps = this.#epsilon;
    const dims = out.dims;
    const data = out.data.slice();
    const dir = skewDirection(dims);
    for (let r = 0; r < data.length / dims; r++) {
      if (out.nonFinite[r] === 1) continue;
      const v = data.subarray(r * dims, (r + 1) * dims);
      let norm = 0;
      for (let d = 0; d < dims; d++) norm += v[d]! * v[d]!;
      norm = Math.sqrt(norm);
      if (norm === 0) continue;
      let after = 0;
      for (let d = 0; d < dims; d++) {
        v[d] = v[d]! + eps * norm * dir[d]!;
        after += v[d]! * v[d]!;
      }
      const scale = norm / Math.sqrt(after);
      for (let d = 0; d < dims; d++) v[d] = v[d]! * scale;
    }
    return { ...out, data };
  }

  score(rows: readonly EngineRow[], options?: EngineCallOptions): Promise<EngineBatchOutput> {
    return this.#inner.score(rows, options);
  }

  generate(request: GenerateRequest, options?: EngineCallOptions): Promise<GenerateOutput> {
    return this.#inner.generate(request, options);
  }

  residentBytes(): Promise<number | undefined> {
    return this.#inner.residentBytes?.() ?? Promise.resolve(undefined);
  }

  dispose(): Promise<void> {
    return this.#inner.dispose();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.dispose();
  }
}

/** A fixed unit vector of `dims` values (alternating, uneven weights). */
function skewDirection(dims: number): Float32Array {
  const u = new Float32Array(dims);
  let n = 0;
  for (let d = 0; d < dims; d++) {
    u[d] = (d % 2 === 0 ? 1 : -1) * (1 + (d % 5));
    n += u[d]! * u[d]!;
  }
  n = Math.sqrt(n);
  for (let d = 0; d < dims; d++) u[d] = u[d]! / n;
  return u;
}
