/**
 * Loading a model on a remote lane (docs/remote.md): the model entry names a provider of
 * `remote_providers` and the model's name there; Synapse keeps the tokenizer (the entry's
 * `tokenizer_path`: token counts, truncation, `content_sha256` and the fingerprint's tokenizer
 * digest are computed here exactly as for a local lane), asks the provider what it deploys under
 * that name, checks its answers' shape and width with one call, and builds the numeric profile:
 *
 * - `model_digest`: `remote:` + sha256(JCS `{provider, kind, model, deployment}`);
 * - `engine`: `{engine: "remote", version: <kind>, build_flags: {provider, deployment, assurance}}`
 *   — so the fingerprint changes with the provider, with what it deploys, and with the assurance;
 * - `quant` `remote`, `dtype` `f32` (what the wire carries), pooling `{custom: "remote:<kind>"}`
 *   (the provider pools), and the entry's `normalize`, checked against the provider's vectors at
 *   load (`normalization_mismatch`).
 *
 * The deployment is what the provider reports: a `synapse` provider's fingerprint of the model
 * (`GET /v1/models/{model}`), a TEI provider's `model_id@model_sha` (`GET /info`), an OpenAI
 * provider's `id` with vLLM's `root` and `owned_by` (`GET /v1/models`). The assurance is
 * `declared` (every request must say `accept_declared: true`, else
 * `declared_identity_not_accepted`) until a probe of the lane against its `reference_model`
 * passes on this machine; the lane then serves as `proven` ({@link withRemoteAssurance}): another
 * fingerprint, no `accept_declared` needed.
 *
 * @module
 */
import { SynapseError } from "../contract/errors.ts";
import { jcsSha256 } from "../identity/jcs.ts";
import type { NumericProfile, ThreadPolicy } from "../identity/numeric_profile.ts";
import { REMOTE_MAX_SEQUENCES, RemoteEngine } from "../engines/remote/remote_engine.ts";
import {
  CANARY_DEFAULT_INTERVAL_MS,
  CANARY_DEFAULT_MIN_COSINE,
  CANARY_QUERY,
  CANARY_REVISION,
  CANARY_TEXTS,
  type CanaryBaseline,
  canaryDriftError,
  compareCanary,
} from "../engines/remote/canary.ts";
import type { RemoteProvider } from "../engines/remote/provider.ts";
import { Lane } from "../lanes/lane.ts";
import type { LogSink } from "../log/log.ts";
import type { Admission } from "../sched/admission.ts";
import { LaneScheduler } from "../sched/lane_scheduler.ts";
import { SanitizedTokenizer } from "../tokenize/tokenizer.ts";
import { identityOf, RERANK_PAIR_TEMPLATE } from "./load_ort.ts";
import type { ModelSource, ReadyModel, RemoteProvenance } from "./model.ts";

/** Most tokens per input of a remote lane when the entry names none. */
export const REMOTE_DEFAULT_MAX_TOKENS = 512;

/** How far from 1 an L2 norm may be and count as normalised (float32 over the wire). */
const NORM_TOLERANCE = 1e-3;

/** Text of the load-time call that checks the provider's answers and learns the width. */
const CHECK_TEXT = "Synapse checks this remote lane.";

/** What {@link loadRemoteModel} needs from the registry. */
export interface RemoteLoadContext {
  /** The configured providers by id. */
  providers: ReadonlyMap<string, RemoteProvider>;
  threadPolicy: ThreadPolicy;
  /** `inline.max_tokens`: the batch-token budget. */
  maxBatchTokens: number;
  admission: Admission;
  now: () => number;
  /** Module log (the canary's halt is logged here). */
  log?: LogSink;
  /**
   * Where canary baselines are kept across restarts (lib/models/remote_canary_store.ts); absent:
   * each load records its own.
   */
  canaries?: {
    get(key: string): CanaryBaseline | undefined;
    put(key: string, modelId: string, baseline: CanaryBaseline): void;
  };
}

/**
 * Loads a model on its remote lane and serves it on two lanes (`remote-<model id>`) over a
 * scheduler of `max_concurrency` slots.
 *
 * @throws {SynapseError} `invalid_request` for an unknown provider, a refused base URL, or a
 *   model the provider does not serve (`details.reason: "model_not_served"`, `served`);
 *   `credential_config_invalid`; `op_not_supported_for_remote` for task `generate` or a reranker
 *   whose tokenizer marks no document segment; `provider_unavailable`, `needs_reauth`,
 *   `provider_protocol_violation` (`wrong_dims` against the entry's `dims` …)
 *   from the provider.
 */
export async function loadRemoteModel(
  src: ModelSource,
  ctx: RemoteLoadContext,
): Promise<{ ready: ReadyModel; engine: RemoteEngine; scheduler: LaneScheduler }> {
  try {
    return await loadRemote(src, ctx);
  } catch (e) {
    const provider = src.remote === undefined ? undefined : ctx.providers.get(src.remote.provider);
    if (!(e instanceof SynapseError) || e.code !== "needs_reauth" || provider === undefined) {
      throw e;
    }
    // Refused at load, the model is not served at all: no request or job.resume brings it back.
    throw new SynapseError(
      "needs_reauth",
      `Cannot load model '${src.modelId}': remote provider '${provider.id}' refused the credentials (HTTP ${
        String(e.details?.http_status ?? "401")
      }) from ${provider.keySource}; fix the key, then restart the server (the model stays failed until it loads again)`,
      { details: { ...e.details, model_id: src.modelId }, cause: e },
    );
  }
}

async function loadRemote(
  src: ModelSource,
  ctx: RemoteLoadContext,
): Promise<{ ready: ReadyModel; engine: RemoteEngine; scheduler: LaneScheduler }> {
  const modelId = src.modelId;
  const remote = src.remote;
  if (remote === undefined) {
    throw new Error("loadRemoteModel() needs a remote source. This is a bug");
  }
  const provider = ctx.providers.get(remote.provider);
  if (provider === undefined) {
    throw new SynapseError(
      "invalid_request",
      `Cannot load model '${modelId}': remote provider '${remote.provider}' is not in remote_providers`,
      {
        details: { model_id: modelId, field: "preload_models.provider", provider: remote.provider },
      },
    );
  }
  if (src.task === "generate") {
    throw new SynapseError(
      "op_not_supported_for_remote",
      `Cannot load model '${modelId}': remote lanes serve embed and rerank in this build, not generate`,
      { details: { model_id: modelId, provider: provider.id, op: "generate" } },
    );
  }
  if (src.tokenizerPath === undefined) {
    throw new SynapseError(
      "invalid_request",
      `Cannot load model '${modelId}': a remote model needs its tokenizer.json (tokenizer_path)`,
      { details: { model_id: modelId, field: "tokenizer_path", engine: "remote" } },
    );
  }
  await provider.open();
  const tokenizer = await SanitizedTokenizer.fromFile(src.tokenizerPath);
  const maxTokens = src.maxTokens ?? src.maxTokensDefault ?? REMOTE_DEFAULT_MAX_TOKENS;
  if (src.task === "rerank" && !tokenizer.encodePair("a", "b", { maxTokens }).typeIds.includes(1)) {
    throw new SynapseError(
      "op_not_supported_for_remote",
      `Cannot load model '${modelId}': its tokenizer marks no document segment in a pair, so a pair cannot be sent to a rerank API as (query, document)`,
      { details: { model_id: modelId, provider: provider.id, reason: "pair_segments_unknown" } },
    );
  }
  const { deployment, fingerprint: deployedFingerprint, testModel } = await describeDeployment(
    provider,
    remote.model,
  );
  const assurance: RemoteProvenance["assurance"] = "declared";
  const identity = {
    engine: "remote",
    version: provider.kind,
    build_flags: { assurance, deployment, provider: provider.id },
  };
  const decode = (ids: readonly number[]) => tokenizer.decodeIds(ids, true);
  const limits = {
    maxSequenceTokens: maxTokens,
    maxMicroBatchTokens: Math.max(maxTokens, ctx.maxBatchTokens),
    maxSequences: REMOTE_MAX_SEQUENCES,
  };
  // One call learns the width (embed) and checks the answers' shape, before anything is served.
  const probeEngine = (dims: number) =>
    new RemoteEngine({
      provider,
      model: remote.model,
      task: src.task,
      identity,
      limits,
      dims,
      normalize: src.normalize,
      decode,
      deployedFingerprint,
      unkId: tokenizer.unkTokenId,
    });
  let dims = src.task === "rerank" ? 1 : remote.dims ?? 0;
  if (src.task === "embed") {
    // One call learns the width and whether the provider normalises, before anything is served.
    const seq = tokenizer.encode(CHECK_TEXT, { maxTokens, truncate: true });
    const { vectors, requestId } = await probeEngine(0).vectorsOf([decode(Array.from(seq.ids))]);
    const v = vectors[0];
    if (!Array.isArray(v) || v.length === 0 || v.some((x) => typeof x !== "number")) {
      throw provider.violation("its embeddings answer holds no vector", "bad_shape", {
        provider_request_id: requestId,
      });
    }
    const width = v.length;
    if (remote.dims !== undefined && width !== remote.dims) {
      throw provider.violation(
        `model '${remote.model}' answers vectors of ${width} dimensions, and the entry declares dims ${remote.dims}`,
        "wrong_dims",
        { model_id: modelId, expected_dims: remote.dims, got_dims: width },
      );
    }
    const norm = Math.hypot(...(v as number[]));
    const unit = Math.abs(norm - 1) <= NORM_TOLERANCE;
    if (unit !== src.normalize) {
      throw provider.violation(
        `model '${remote.model}' answers vectors of L2 norm ${
          norm.toPrecision(6)
        }, and the entry says normalize: ${src.normalize}; set "normalize": ${unit} on the entry to match the provider`,
        "normalization_mismatch",
        { model_id: modelId, normalize: src.normalize, norm },
      );
    }
    dims = width;
  } else {
    await probeEngine(1).score([
      tokenizer.encodePair(CHECK_TEXT, CHECK_TEXT, { maxTokens, truncate: true }),
    ]);
  }
  const engine = probeEngine(dims);
  const profile: NumericProfile = {
    model_digest: `remote:${
      jcsSha256({
        provider: provider.id,
        kind: provider.kind,
        model: remote.model,
        deployment,
        ...(remote.revision === undefined ? {} : { revision: remote.revision }),
      })
    }`,
    quant: "remote",
    engine: identity,
    sanitized_tokenizer_digest: tokenizer.digest,
    // The provider pools: the profile says so rather than naming a pooling this side never ran.
    pooling: { custom: `remote:${provider.kind}` },
    normalization: src.task === "embed" && src.normalize ? "l2" : "none",
    dtype: "f32",
    flash_attention: "disabled",
    certified_shape: {
      max_context_tokens: maxTokens,
      max_batch_tokens: ctx.maxBatchTokens,
      max_micro_batch_tokens: limits.maxMicroBatchTokens,
      max_sequences: limits.maxSequences,
    },
    ...(src.task === "rerank" ? { prompt_template: RERANK_PAIR_TEMPLATE } : {}),
    thread_policy: ctx.threadPolicy,
    operation: src.task,
  };
  await armCanary(
    engine,
    src,
    tokenizer,
    profile,
    deployment,
    maxTokens,
    ctx,
    () => describeDeployment(provider, remote.model).then((d) => d.deployment),
  );
  const expected = provider.latency.expectedMs(limits.maxSequences * 16);
  const scheduler = new LaneScheduler({
    permits: provider.maxConcurrency,
    ...(expected === undefined ? {} : { defaultRunMs: Math.max(1, expected) }),
  });
  const name = `remote-${modelId}`;
  const base = { name, engine, scheduler, admission: ctx.admission, now: ctx.now };
  const provenance: RemoteProvenance = { provider: provider.id, deployment, assurance };
  const ready: ReadyModel = {
    modelId,
    task: src.task,
    engineKind: "remote",
    tokenizer,
    profile,
    ...identityOf(profile),
    dims,
    maxTokens,
    testModel: src.testModel === true || testModel === true,
    identity,
    remote: provenance,
    interactive: new Lane({ ...base, cls: "interactive" }),
    bulk: new Lane({ ...base, cls: "bulk" }),
  };
  return { ready, engine, scheduler };
}

/**
 * A remote lane's ready model under another assurance: the engine identity's
 * `build_flags.assurance`, the profile, its id and fingerprint, and `provenance.remote.assurance`
 * all say it, so a proven lane's vectors carry another fingerprint than its declared ones
 * (docs/remote.md "Identity"). The lanes, tokenizer and engine are the same objects.
 *
 * @param ready A remote lane's ready model (another model is returned as it is).
 * @param assurance `declared`, or `proven` once a probe against its reference passed here.
 * @returns The model under that assurance (the same object when it already has it).
 */
export function withRemoteAssurance(
  ready: ReadyModel,
  assurance: RemoteProvenance["assurance"],
): ReadyModel {
  if (ready.remote === undefined || ready.remote.assurance === assurance) return ready;
  const identity = {
    ...ready.identity,
    build_flags: { ...ready.identity.build_flags, assurance },
  };
  const profile: NumericProfile = { ...ready.profile, engine: identity };
  return {
    ...ready,
    profile,
    ...identityOf(profile),
    identity,
    remote: { ...ready.remote, assurance },
  };
}

/**
 * The canary of a loaded lane (lib/engines/remote/canary.ts): its inputs answered now are
 * compared with the baseline recorded for this lane's canary key (model digest, tokenizer,
 * task, token limit, normalisation, canary revision), or recorded as the baseline when there is
 * none; then the engine keeps checking every `canary.interval_ms`.
 *
 * @throws {SynapseError} `remote_identity_drift` when the answers moved past the bar since the
 *   baseline; the provider's errors; `store_failure`.
 */
async function armCanary(
  engine: RemoteEngine,
  src: ModelSource,
  tokenizer: SanitizedTokenizer,
  profile: NumericProfile,
  deployment: string,
  maxTokens: number,
  ctx: RemoteLoadContext,
  deploymentNow: () => Promise<string>,
): Promise<void> {
  const settings = src.remote?.canary ?? {};
  const minCosine = settings.min_cosine ?? CANARY_DEFAULT_MIN_COSINE;
  const intervalMs = settings.interval_ms ?? CANARY_DEFAULT_INTERVAL_MS;
  const rows = CANARY_TEXTS.map((text) =>
    src.task === "rerank"
      ? tokenizer.encodePair(CANARY_QUERY, text, { maxTokens, truncate: true })
      : tokenizer.encode(text, { maxTokens, truncate: true })
  );
  const answers = await engine.canaryAnswers(rows);
  const key = `sha256:${
    jcsSha256({
      model_digest: profile.model_digest,
      tokenizer: profile.sanitized_tokenizer_digest,
      task: src.task,
      max_tokens: maxTokens,
      normalize: src.normalize,
      canary_revision: CANARY_REVISION,
    })
  }`;
  const dims = src.task === "rerank" ? 1 : engine.dims;
  let baseline = ctx.canaries?.get(key);
  if (baseline !== undefined) {
    const verdict = compareCanary(
      src.task === "rerank" ? "rerank" : "embed",
      baseline,
      answers,
      minCosine,
    );
    if (!verdict.ok) {
      throw canaryDriftError(
        engine.provider.id,
        engine.model,
        deployment,
        verdict,
        baseline.recordedAtMs,
      );
    }
  } else {
    baseline = { dims, values: Array.from(answers), recordedAtMs: ctx.now() };
    ctx.canaries?.put(key, src.modelId, baseline);
  }
  engine.armCanary({
    rows,
    baseline,
    minCosine,
    intervalMs,
    deployment,
    deploymentNow,
    onHalt: (e) =>
      ctx.log?.("error", "synapse.remote", `model '${src.modelId}' halted: ${e.message}`, {
        model: src.modelId,
        outcome: e.code,
      }),
  });
}

/**
 * What the provider deploys under `model`.
 *
 * @returns The deployment string, and a `synapse` provider's fingerprint.
 * @throws {SynapseError} `provider_protocol_violation` `{reason: "model_not_served"}` when the
 *   provider lists no such model; the provider's errors.
 */
async function describeDeployment(
  provider: RemoteProvider,
  model: string,
): Promise<{ deployment: string; fingerprint?: string; testModel?: boolean }> {
  const notServed = async (listed?: string[]) => {
    let served = listed;
    if (served === undefined) {
      try {
        const l = await provider.request("GET", "/v1/models", undefined, { idempotent: true });
        const data = (l.body as { data?: { id?: unknown }[] })?.data;
        served = Array.isArray(data)
          ? data.map((m) => m?.id).filter((id): id is string => typeof id === "string")
          : undefined;
      } catch { /* the list is a courtesy */ }
    }
    return new SynapseError(
      "invalid_request",
      `Cannot load the remote model: provider '${provider.id}' serves no model '${model}'${
        served === undefined ? "" : ` (it serves: ${served.slice(0, 20).join(", ") || "none"})`
      }; fix the entry's model`,
      {
        details: {
          field: "preload_models.model",
          provider: provider.id,
          model,
          reason: "model_not_served",
          ...(served === undefined ? {} : { served: served.slice(0, 100) }),
        },
      },
    );
  };
  if (provider.kind === "tei") {
    const a = await provider.request("GET", "/info", undefined, { idempotent: true });
    const info = a.body as { model_id?: unknown; model_sha?: unknown };
    if (typeof info?.model_id !== "string") {
      throw provider.violation("its /info names no model_id", "bad_shape");
    }
    const sha = typeof info.model_sha === "string" ? info.model_sha : "unpinned";
    return { deployment: `${info.model_id}@${sha}` };
  }
  if (provider.kind === "synapse") {
    let a;
    try {
      a = await provider.request("GET", `/v1/models/${encodeURIComponent(model)}`, undefined, {
        idempotent: true,
      });
    } catch (e) {
      if (e instanceof SynapseError && e.details?.http_status === 404) throw await notServed();
      throw e;
    }
    const facts = (a.body as {
      synapse?: { fingerprint?: unknown; state?: unknown; task?: unknown; test_model?: unknown };
    })
      ?.synapse;
    const fp = facts?.fingerprint;
    if (typeof fp !== "string" || !/^[0-9a-f]{64}$/.test(fp)) {
      if (facts?.state === "loading") {
        // Still loading there: a transient failure, retried by the registry.
        throw new SynapseError(
          "provider_unavailable",
          `Remote provider '${provider.id}' is still loading model '${model}'`,
          {
            retryAfterMs: 1000,
            details: { provider: provider.id, reason: "model_loading", model },
          },
        );
      }
      throw provider.violation(
        `its /v1/models/${model} names no fingerprint (state ${String(facts?.state ?? "unknown")})`,
        "model_not_served",
        { model },
      );
    }
    // A provider's test model stays labelled a test model here.
    return { deployment: fp, fingerprint: fp, testModel: facts?.test_model === true };
  }
  const a = await provider.request("GET", "/v1/models", undefined, { idempotent: true });
  const data = (a.body as { data?: unknown })?.data;
  if (!Array.isArray(data)) {
    throw provider.violation("its /v1/models is not a model list", "bad_shape");
  }
  const row = data.find((m) => (m as { id?: unknown })?.id === model) as
    | { id: string; root?: unknown; owned_by?: unknown }
    | undefined;
  if (row === undefined) {
    throw await notServed(
      data.map((m) => (m as { id?: unknown })?.id).filter((id): id is string =>
        typeof id === "string"
      ),
    );
  }
  const parts = [row.id];
  if (typeof row.root === "string" && row.root !== row.id) parts.push(`root=${row.root}`);
  if (typeof row.owned_by === "string") parts.push(`owned_by=${row.owned_by}`);
  return { deployment: parts.join(";") };
}
