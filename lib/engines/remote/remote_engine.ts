/**
 * The remote engine (docs/remote.md): the {@link Engine} interface over a provider's HTTP API.
 * Rows arrive as token ids like every engine's; the provider takes text, so each row is decoded
 * with the model's own tokenizer (special tokens left out: the provider adds its own) and the
 * provider tokenizes it again; a truncated row sends exactly its kept tokens. A row holding the
 * unknown token is refused on its own (`op_not_supported_for_remote`, `unknown_tokens`): its
 * decoded text would silently drop what the token stood for.
 *
 * | task | `openai` | `tei` | `synapse` |
 * |---|---|---|---|
 * | embed | `POST /v1/embeddings` | `POST /embed` | `POST /v1/embeddings` |
 * | rerank | `POST /v1/rerank` (`relevance_score`, turned back into its logit) | `POST /rerank` (`raw_scores: true`) | `POST /rerank` (`raw_scores: true`) |
 * | generate | refused: `op_not_supported_for_remote` | same | same |
 *
 * A `synapse` provider is asked for the fingerprint recorded at load on every request
 * (`x-synapse-required-fingerprint`) and must answer it (`x-synapse-fingerprint`); anything else
 * is `remote_deployment_changed`. Answers of the wrong count or width are
 * `provider_protocol_violation`.
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
import type { RemoteProvider } from "./provider.ts";
import {
  type CanaryBaseline,
  canaryDriftError,
  type CanaryVerdict,
  compareCanary,
} from "./canary.ts";

/** Rows one remote call holds (TEI's default `max_client_batch_size`). */
export const REMOTE_MAX_SEQUENCES = 32;

/** Turns token ids back into the text the provider tokenizes (special tokens left out). */
export type RowDecoder = (ids: readonly number[]) => string;

/** What a remote engine is made of. */
export interface RemoteEngineOptions {
  provider: RemoteProvider;
  /** The model's name at the provider. */
  model: string;
  task: ModelTask;
  identity: EngineIdentity;
  limits: EngineLimits;
  /** Output width (embed), 1 (rerank). */
  dims: number;
  /** The embed model normalises (sent to a TEI provider as `normalize`). */
  normalize: boolean;
  decode: RowDecoder;
  /**
   * A `synapse` provider's fingerprint of the model, recorded at load: required on every request
   * and checked on every answer.
   */
  deployedFingerprint?: string | undefined;
  /**
   * The tokenizer's unknown-token id, when it has one: a row holding it is refused (its decoded
   * text would drop what the token stood for).
   */
  unkId?: number | undefined;
}

/** The canary a loaded lane keeps checking (lib/engines/remote/canary.ts; docs/remote.md). */
export interface CanarySetup {
  /** The canary's inputs, encoded (embed: texts; rerank: pairs). */
  rows: EngineRow[];
  /** The recorded answers they are held to. */
  baseline: CanaryBaseline;
  /** Embedding bar: cosine per input. */
  minCosine: number;
  /** Between periodic checks, ms; 0: none (the load's check only). */
  intervalMs: number;
  /** The deployment recorded at load. */
  deployment: string;
  /** What the provider reports deploying now (asked before each periodic check). */
  deploymentNow: () => Promise<string>;
  /** Told once when a check halts the lane (the refusal every call gets from then on). */
  onHalt?: (e: SynapseError) => void;
}

/** What `admission.status` shows of a lane's canary. */
export interface CanaryView {
  /** `ok`, `drift` (remote_identity_drift), `deployment_changed`, or `off` (no canary armed). */
  state: "ok" | "drift" | "deployment_changed" | "off";
  interval_ms: number;
  /** The last check that reached the provider, ms since the epoch. */
  checked_at_ms?: number;
  /** Its worst input's measure (`metric`) and the bar. */
  metric?: CanaryVerdict["metric"];
  measured?: number;
  bar?: number;
  baseline_recorded_at_ms?: number;
}

/** The remote engine of one model at one provider. */
export class RemoteEngine implements Engine {
  readonly kind = "remote";
  readonly task: ModelTask;
  readonly identity: EngineIdentity;
  readonly limits: EngineLimits;
  readonly dims: number;
  readonly provider: RemoteProvider;
  readonly model: string;
  #o: RemoteEngineOptions;
  #inFlight = 0;
  #busySince = 0;
  #disposed = false;
  /** Set when the canary found the provider's numbers or deployment moved: every call refuses. */
  #halt: SynapseError | undefined;
  #canary: CanarySetup | undefined;
  #canaryTimer: ReturnType<typeof setInterval> | undefined;
  #canaryView: CanaryView = { state: "off", interval_ms: 0 };
  #checking = false;

  constructor(o: RemoteEngineOptions) {
    this.#o = o;
    this.provider = o.provider;
    this.model = o.model;
    this.task = o.task;
    this.identity = o.identity;
    this.limits = o.limits;
    this.dims = o.dims;
  }

  get inFlight(): number {
    return this.#inFlight;
  }

  health(): EngineHealth {
    const snap = this.provider.snapshot();
    return {
      state: this.#disposed ? "disposed" : "ready",
      inFlight: this.#inFlight,
      busyMs: this.#inFlight > 0 ? Date.now() - this.#busySince : 0,
      busyLimitMs: this.provider.timeoutMs * 2,
      worker: { remote: { ...snap, canary: { ...this.#canaryView } } },
    };
  }

  /**
   * The refusal admission gives now: the canary found the provider's numbers or deployment moved
   * (`remote_identity_drift`, `remote_deployment_changed`), or the provider's breaker is open
   * (`provider_unavailable`).
   */
  admissionRefusal(): SynapseError | undefined {
    return this.#halt ?? this.provider.refusalNow();
  }

  embed(rows: readonly EngineRow[], options: EngineCallOptions = {}): Promise<EngineBatchOutput> {
    if (this.#halt !== undefined) return Promise.reject(this.#halt);
    return this.#embed(rows, options);
  }

  score(rows: readonly EngineRow[], options: EngineCallOptions = {}): Promise<EngineBatchOutput> {
    if (this.#halt !== undefined) return Promise.reject(this.#halt);
    return this.#score(rows, options);
  }

  /**
   * The canary's answers now, row-major (`dims` values per row; 1 for rerank), through the same
   * requests traffic uses (provider slots, breaker, retries), and whatever the halt says.
   *
   * @throws {SynapseError} the provider's errors; `provider_protocol_violation` when it refuses
   *   or cannot answer a canary input (`reason: "canary_input_refused"`).
   */
  async canaryAnswers(rows: readonly EngineRow[]): Promise<Float32Array> {
    const out = this.task === "rerank" ? await this.#score(rows) : await this.#embed(rows);
    const refused = out.rowErrors?.findIndex((e) => e !== undefined) ?? -1;
    if (refused >= 0) {
      throw this.provider.violation(
        `it refused canary input ${refused}: ${out.rowErrors![refused]!.message}`,
        "canary_input_refused",
        { input: refused },
      );
    }
    return out.data;
  }

  /**
   * Arms the canary: from now on {@link checkCanary} compares with `setup.baseline`, and every
   * `setup.intervalMs` (when positive) a check runs by itself (an unref'd timer, stopped by
   * dispose).
   */
  armCanary(setup: CanarySetup): void {
    this.#canary = setup;
    this.#canaryView = {
      state: "ok",
      interval_ms: setup.intervalMs,
      baseline_recorded_at_ms: setup.baseline.recordedAtMs,
    };
    if (setup.intervalMs > 0) {
      const timer = setInterval(() => void this.checkCanary(), setup.intervalMs);
      Deno.unrefTimer(timer);
      this.#canaryTimer = timer;
    }
  }

  /**
   * One canary check: asks the provider what it deploys (another answer than at load halts the
   * lane `remote_deployment_changed`), sends the canary inputs and compares their answers with
   * the baseline (outside the bar halts it `remote_identity_drift`). A provider that cannot be
   * reached now gives no verdict (its breaker already speaks for it). Overlapping calls, a
   * halted lane and an unarmed one do nothing.
   *
   * @returns The verdict, or undefined when no comparison was made.
   */
  async checkCanary(): Promise<CanaryVerdict | undefined> {
    const c = this.#canary;
    if (c === undefined || this.#halt !== undefined || this.#disposed || this.#checking) {
      return undefined;
    }
    this.#checking = true;
    try {
      const now = await c.deploymentNow();
      if (now !== c.deployment) {
        this.#haltWith(
          new SynapseError(
            "remote_deployment_changed",
            `Remote provider '${this.provider.id}' now reports deployment '${now}' for model '${this.model}', not '${c.deployment}' recorded when the lane loaded; reload the model to take it as a new vector space`,
            { details: { provider: this.provider.id, deployment: c.deployment, reported: now } },
          ),
        );
        this.#canaryView = { ...this.#canaryView, state: "deployment_changed" };
        return undefined;
      }
      const answers = await this.canaryAnswers(c.rows);
      const verdict = compareCanary(
        this.task === "rerank" ? "rerank" : "embed",
        c.baseline,
        answers,
        c.minCosine,
      );
      this.#canaryView = {
        ...this.#canaryView,
        state: verdict.ok ? "ok" : "drift",
        checked_at_ms: Date.now(),
        metric: verdict.metric,
        measured: verdict.measured,
        bar: verdict.bar,
      };
      if (!verdict.ok) {
        this.#haltWith(canaryDriftError(
          this.provider.id,
          this.model,
          c.deployment,
          verdict,
          c.baseline.recordedAtMs,
        ));
      }
      return verdict;
    } catch (e) {
      if (e instanceof SynapseError && e.code === "remote_deployment_changed") {
        this.#haltWith(e);
        this.#canaryView = { ...this.#canaryView, state: "deployment_changed" };
      }
      return undefined;
    } finally {
      this.#checking = false;
    }
  }

  #haltWith(e: SynapseError): void {
    this.#halt = e;
    this.#canary?.onHalt?.(e);
  }

  #embed(rows: readonly EngineRow[], options: EngineCallOptions = {}): Promise<EngineBatchOutput> {
    if (this.task !== "embed") return Promise.reject(this.#notTask("embed"));
    const texts = rows.map((r) => this.#o.decode(Array.from(r.ids)));
    return this.#serve(
      rows,
      this.dims,
      (idx) => this.#embedTexts(idx.map((i) => texts[i]!), options.signal, tokensOf(rows, idx)),
    );
  }

  #score(rows: readonly EngineRow[], options: EngineCallOptions = {}): Promise<EngineBatchOutput> {
    if (this.task !== "rerank") return Promise.reject(this.#notTask("rerank"));
    const pairs = rows.map((r) => splitPair(r, this.#o.decode));
    return this.#serve(rows, 1, async (idx) => {
      // Rows of one call may hold several queries: one provider request per query.
      const groups = new Map<string, number[]>();
      idx.forEach((i, k) => {
        const q = pairs[i]![0];
        groups.set(q, [...groups.get(q) ?? [], k]);
      });
      const data = new Float32Array(idx.length);
      const ids: string[] = [];
      await Promise.all([...groups].map(async ([query, ks]) => {
        const r = await this.#rerankTexts(
          query,
          ks.map((k) => pairs[idx[k]!]![1]),
          options.signal,
          tokensOf(rows, ks.map((k) => idx[k]!)),
        );
        ks.forEach((k, n) => (data[k] = r.scores[n]!));
        ids.push(r.id);
      }));
      return { data, ids };
    });
  }

  generate(): Promise<GenerateOutput> {
    return Promise.reject(
      new SynapseError(
        "op_not_supported_for_remote",
        `Cannot generate on remote model '${this.model}': generation is not served by remote lanes in this build`,
        { details: { provider: this.provider.id, op: "generate" } },
      ),
    );
  }

  dispose(): Promise<void> {
    this.#disposed = true;
    if (this.#canaryTimer !== undefined) clearInterval(this.#canaryTimer);
    return Promise.resolve();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.dispose();
  }

  /** The headers a `synapse` provider is sent: the fingerprint recorded at load. */
  get #headers(): Record<string, string> {
    const fp = this.#o.deployedFingerprint;
    return fp === undefined ? {} : { "x-synapse-required-fingerprint": fp };
  }

  /**
   * Serves rows through `send` (one provider call for the rows it is given, `dims` values each,
   * row-major): a row holding the unknown token is that row's error and is not sent (its decoded
   * text would lose what the token stood for); when the provider refuses a request of several
   * rows, each is sent alone, so one input it refuses is that row's error and the rest is served
   * (field reports F1, F6). A refusal for the recorded fingerprint is `remote_deployment_changed`.
   */
  async #serve(
    rows: readonly EngineRow[],
    dims: number,
    send: (idx: number[]) => Promise<{ data: Float32Array; ids: string[] }>,
  ): Promise<EngineBatchOutput> {
    this.#checkUsable();
    if (this.#inFlight++ === 0) this.#busySince = Date.now();
    const t0 = performance.now();
    try {
      const n = rows.length;
      const data = new Float32Array(n * dims);
      const ids: string[] = [];
      const rowErrors = new Array<SynapseError | undefined>(n);
      const unk = this.#o.unkId;
      const sendable: number[] = [];
      rows.forEach((r, i) => {
        if (unk !== undefined && r.ids.includes(unk)) rowErrors[i] = this.#unknownTokens();
        else sendable.push(i);
      });
      const run = async (idx: number[]): Promise<void> => {
        const out = await send(idx);
        idx.forEach((i, k) => data.set(out.data.subarray(k * dims, (k + 1) * dims), i * dims));
        ids.push(...out.ids);
      };
      if (sendable.length > 0) {
        try {
          await run(sendable);
        } catch (e) {
          if (!isItemRefusal(e)) throw this.#deploymentChanged(e) ?? e;
          for (const i of sendable) {
            try {
              await (sendable.length === 1 ? Promise.reject(e) : run([i]));
            } catch (alone) {
              if (!isItemRefusal(alone)) throw this.#deploymentChanged(alone) ?? alone;
              rowErrors[i] = this.#rowError(alone);
            }
          }
        }
      }
      const nonFinite = new Uint8Array(n);
      for (let r = 0; r < n; r++) {
        if (rowErrors[r] !== undefined) continue;
        for (let k = r * dims; k < (r + 1) * dims; k++) {
          if (!Number.isFinite(data[k]!)) {
            nonFinite[r] = 1;
            break;
          }
        }
      }
      return {
        data,
        dims,
        nonFinite,
        runMs: performance.now() - t0,
        providerRequestIds: ids,
        ...(rowErrors.some((x) => x !== undefined) ? { rowErrors } : {}),
      };
    } finally {
      this.#inFlight--;
    }
  }

  /** A row with the unknown token: its text cannot be sent faithfully. */
  #unknownTokens(): SynapseError {
    return new SynapseError(
      "op_not_supported_for_remote",
      `Cannot send this input to remote provider '${this.provider.id}': the model's tokenizer maps some of its characters to the unknown token, and a remote lane sends the tokens as text, which would leave them out; serve it on a local lane, or remove those characters`,
      { details: { provider: this.provider.id, reason: "unknown_tokens" } },
    );
  }

  /**
   * The error of one input the provider refused: the provider's own code when it is one of the
   * stable per-item codes (another Synapse's `invalid_request`, `engine_output_invalid`,
   * `sequence_too_long`), else its `provider_protocol_violation`.
   */
  #rowError(e: SynapseError): SynapseError {
    const code = e.details?.provider_code;
    if (
      code !== "invalid_request" && code !== "engine_output_invalid" && code !== "sequence_too_long"
    ) {
      return e;
    }
    return new SynapseError(
      code,
      `Remote provider '${this.provider.id}' refused this input: ${
        String(e.details?.provider_message ?? e.message)
      }`,
      { details: { ...e.details } },
    );
  }

  /**
   * `remote_deployment_changed` for a `synapse` provider that refused the fingerprint recorded at
   * load (it answers `substitution_rejected` to `x-synapse-required-fingerprint`), else undefined.
   */
  #deploymentChanged(e: unknown): SynapseError | undefined {
    const want = this.#o.deployedFingerprint;
    if (
      want === undefined || !(e instanceof SynapseError) ||
      e.details?.provider_code !== "substitution_rejected"
    ) return undefined;
    return new SynapseError(
      "remote_deployment_changed",
      `Remote provider '${this.provider.id}' no longer serves model '${this.model}' under fingerprint ${want}, recorded when the lane loaded; reload the model to take the new deployment as a new vector space`,
      {
        details: {
          provider: this.provider.id,
          expected_fingerprint: want,
          fingerprint: null,
          provider_request_id: e.details?.provider_request_id ?? null,
        },
      },
    );
  }

  /**
   * One provider request embedding `texts`: the vectors as the provider answered them, one per
   * text in order (their width is not checked here: the load learns it from them).
   *
   * @throws {SynapseError} `provider_protocol_violation` (`bad_shape`, `wrong_count`), the
   *   provider's errors, `remote_deployment_changed`.
   */
  async vectorsOf(
    texts: string[],
    signal?: AbortSignal,
    tokens = 0,
  ): Promise<{ vectors: unknown[]; requestId: string }> {
    const p = this.provider;
    const tei = p.kind === "tei";
    const a = await p.request(
      "POST",
      tei ? "/embed" : "/v1/embeddings",
      tei
        ? { inputs: texts, truncate: false, normalize: this.#o.normalize }
        : { model: this.model, input: texts, encoding_format: "float" },
      { signal, tokens, idempotent: true, headers: this.#headers },
    );
    this.#checkDeployment(a.headers, a.requestId);
    let vectors: unknown[] | undefined;
    if (tei) vectors = Array.isArray(a.body) ? a.body : undefined;
    else {
      const data = (a.body as { data?: unknown })?.data;
      if (Array.isArray(data)) {
        vectors = new Array(data.length);
        for (const d of data) {
          const i = (d as { index?: unknown })?.index;
          if (typeof i !== "number" || !Number.isInteger(i) || i < 0 || i >= data.length) {
            throw p.violation(
              "an embeddings answer has an item without a valid index",
              "bad_shape",
            );
          }
          vectors[i] = (d as { embedding?: unknown }).embedding;
        }
      }
    }
    if (vectors === undefined) {
      throw p.violation(
        `its ${tei ? "/embed" : "/v1/embeddings"} answer is not the API's shape`,
        "bad_shape",
        {
          provider_request_id: a.requestId,
        },
      );
    }
    if (vectors.length !== texts.length) {
      throw p.violation(
        `it answered ${vectors.length} vectors for ${texts.length} inputs`,
        "wrong_count",
        {
          provider_request_id: a.requestId,
        },
      );
    }
    return { vectors, requestId: a.requestId };
  }

  async #embedTexts(
    texts: string[],
    signal: AbortSignal | undefined,
    tokens: number,
  ): Promise<{ data: Float32Array; ids: string[] }> {
    const p = this.provider;
    const { vectors, requestId } = await this.vectorsOf(texts, signal, tokens);
    const dims = this.dims;
    const out = new Float32Array(texts.length * dims);
    vectors.forEach((v, r) => {
      if (!Array.isArray(v) || v.length !== dims) {
        throw p.violation(
          `it answered a vector of ${
            Array.isArray(v) ? v.length : "no"
          } dimensions where the lane has ${dims}`,
          "wrong_dims",
          {
            expected_dims: dims,
            got_dims: Array.isArray(v) ? v.length : null,
            provider_request_id: requestId,
          },
        );
      }
      for (let k = 0; k < dims; k++) {
        const x = v[k];
        out[r * dims + k] = typeof x === "number" ? x : NaN;
      }
    });
    return { data: out, ids: [requestId] };
  }

  async #rerankTexts(
    query: string,
    docs: string[],
    signal: AbortSignal | undefined,
    tokens: number,
  ): Promise<{ scores: number[]; id: string }> {
    const p = this.provider;
    const openai = p.kind === "openai";
    const a = await p.request(
      "POST",
      openai ? "/v1/rerank" : "/rerank",
      openai
        ? { model: this.model, query, documents: docs, top_n: docs.length }
        : { query, texts: docs, raw_scores: true, truncate: false },
      { signal, tokens, idempotent: true, headers: this.#headers },
    );
    this.#checkDeployment(a.headers, a.requestId);
    const list = openai ? (a.body as { results?: unknown })?.results : a.body;
    if (!Array.isArray(list) || list.length !== docs.length) {
      throw p.violation(
        `its rerank answer does not score each of the ${docs.length} documents once`,
        Array.isArray(list) ? "wrong_count" : "bad_shape",
        { provider_request_id: a.requestId },
      );
    }
    const scores = new Array<number>(docs.length).fill(NaN);
    const seen = new Uint8Array(docs.length);
    for (const item of list) {
      const i = (item as { index?: unknown })?.index;
      const s = openai
        ? (item as { relevance_score?: unknown })?.relevance_score
        : (item as { score?: unknown })?.score;
      if (typeof i !== "number" || !Number.isInteger(i) || i < 0 || i >= docs.length || seen[i]) {
        throw p.violation(
          "its rerank answer has an item without a valid, unique index",
          "bad_shape",
          {
            provider_request_id: a.requestId,
          },
        );
      }
      seen[i] = 1;
      scores[i] = typeof s !== "number" ? NaN : openai ? rawScoreOf(s) : s;
    }
    return { scores, id: a.requestId };
  }

  #checkDeployment(headers: Headers, requestId: string): void {
    const want = this.#o.deployedFingerprint;
    if (want === undefined) return;
    const got = headers.get("x-synapse-fingerprint");
    if (got !== want) {
      throw new SynapseError(
        "remote_deployment_changed",
        `Remote provider '${this.provider.id}' now serves model '${this.model}' under fingerprint ${
          got ?? "(none)"
        }, not ${want} recorded when the lane loaded; reload the model to take the new deployment as a new vector space`,
        {
          details: {
            provider: this.provider.id,
            expected_fingerprint: want,
            fingerprint: got,
            provider_request_id: requestId,
          },
        },
      );
    }
  }

  #checkUsable(): void {
    if (this.#disposed) {
      throw new SynapseError(
        "disposed",
        `Cannot use remote model '${this.model}': it was unloaded`,
      );
    }
  }

  #notTask(op: string): SynapseError {
    return new SynapseError(
      "backend_unavailable",
      `Remote model '${this.model}' does not ${op} (its task is ${this.task})`,
      {
        details: {
          provider: this.provider.id,
          backends: [{ backend: "remote", reason: "wrong_task" }],
        },
      },
    );
  }
}

/** Tokens of the rows `idx`. */
function tokensOf(rows: readonly EngineRow[], idx: readonly number[]): number {
  let n = 0;
  for (const i of idx) n += rows[i]!.ids.length;
  return n;
}

/** A provider's refusal of the request's content (a 4xx answer), not of the deployment. */
function isItemRefusal(e: unknown): e is SynapseError {
  return e instanceof SynapseError && e.code === "provider_protocol_violation" &&
    e.details?.reason === "provider_refused" &&
    e.details?.provider_code !== "substitution_rejected";
}

/**
 * The raw logit of an OpenAI-shaped `relevance_score`: such providers (vLLM, Jina, another
 * Synapse's `/v1/rerank`) answer the logistic of a cross-encoder's logit, so a score strictly
 * inside (0, 1) is turned back with `ln(s / (1 − s))` (exact up to float rounding, which grows for
 * |logit| above ~30); a score outside it is already raw and kept.
 */
export function rawScoreOf(s: number): number {
  return s > 0 && s < 1 ? Math.log(s / (1 - s)) : s;
}

/**
 * A cross-encoder pair row's (query, document) texts: segment 0 and segment 1 of its type ids,
 * each decoded without special tokens.
 *
 * @throws {SynapseError} `op_not_supported_for_remote` for a row without a second segment.
 */
export function splitPair(row: EngineRow, decode: RowDecoder): [string, string] {
  const q: number[] = [];
  const d: number[] = [];
  for (let i = 0; i < row.ids.length; i++) (row.typeIds[i] === 1 ? d : q).push(row.ids[i]!);
  if (d.length === 0) {
    throw new SynapseError(
      "op_not_supported_for_remote",
      "Cannot send this pair to a remote reranker: its tokenizer marks no document segment (token type ids)",
      { details: { reason: "pair_segments_unknown" } },
    );
  }
  return [decode(q), decode(d)];
}
