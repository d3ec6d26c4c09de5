/**
 * The model of a request, with a refusal that explains itself when no model serves the task.
 *
 * The generated test models serve only while `preload_models` lists no model (a configured
 * service never answers from random weights by surprise). So a config that lists, say, only a
 * generate model leaves `embed` with no model at all: the refusal says exactly that, and shows a
 * `preload_models` entry to add.
 *
 * @module
 */
import { SynapseError } from "../contract/errors.ts";
import { refuseFailedSelfCheck } from "../probe/self_check.ts";
import type { ModelEntry, ModelTask, ReadyModel } from "../models/model.ts";
import type { OpContext } from "./context.ts";
import type { AliasEquivalent } from "../identity/aliases.ts";
import { catalogLaneId } from "../models/catalog.ts";
import { defaultCandidatesOf, defaultModelOf } from "../models/model_registry.ts";
import { matryoshkaVariants } from "../models/matryoshka.ts";
import { admitCertified, servedCertified } from "../probe/certification.ts";
import { modelAliasTarget } from "../models/model_aliases.ts";

/** What {@link resolveModel} reads from the module context. */
export type ResolveContext = Pick<
  OpContext,
  | "registry"
  | "config"
  | "loads"
  | "certifications"
  | "machineProfile"
  | "machineProfileHash"
  | "startupKnobAssignments"
  | "moduleGeneration"
  | "tableEpoch"
  | "now"
  | "aliases"
>;

/**
 * A request's routing constraints (docs/operations.md "Common params"; the compat doors take them
 * as `x-synapse-*` request headers, lib/doors/http/routing_headers.ts). All optional; none given, the
 * model is the one named, or the task's default. (A type, not an interface, so params that
 * carry it stay plain records.)
 */
export type RoutingParams = {
  /**
   * Without `model`: serve with a ready model of the task whose fingerprint is this one (or,
   * with `allow_equivalent`, one currently equivalent to it). With `model`: that model must
   * serve it (or an equivalent, with `allow_equivalent`).
   */
  target_fingerprint?: string | undefined;
  /** The model chosen must serve exactly this fingerprint (or an equivalent, with `allow_equivalent`). */
  required_fingerprint?: string | undefined;
  /**
   * A fingerprint equivalent to the target or required one by a live alias row measured by the
   * probe (source `probe`) satisfies it; declared rows need `accept_declared` too. @default false
   */
  allow_equivalent?: boolean | undefined;
  /** Refuse unless this instance's alias `table_epoch` is at least this. */
  required_epoch?: number | undefined;
  /**
   * With `allow_equivalent`: declared-only alias rows (source `declared`) count as equivalence
   * too. @default false
   */
  accept_declared?: boolean | undefined;
};

/** The routing fields of a request's params (docs/operations.md "Common params"). */
export function routingOf(p: RoutingParams): RoutingParams {
  const r: RoutingParams = {};
  if (p.target_fingerprint !== undefined) r.target_fingerprint = p.target_fingerprint;
  if (p.required_fingerprint !== undefined) r.required_fingerprint = p.required_fingerprint;
  if (p.allow_equivalent !== undefined) r.allow_equivalent = p.allow_equivalent;
  if (p.required_epoch !== undefined) r.required_epoch = p.required_epoch;
  if (p.accept_declared !== undefined) r.accept_declared = p.accept_declared;
  return r;
}

/** A `preload_models[]` entry to copy, per task (paths to edit). */
export const PRELOAD_EXAMPLES: Readonly<Record<ModelTask, Readonly<Record<string, string>>>> =
  Object.freeze({
    embed: Object.freeze({
      engine: "ort",
      task: "embed",
      model_path: "/models/all-MiniLM-L6-v2",
      tokenizer_path: "/models/all-MiniLM-L6-v2/tokenizer.json",
    }),
    rerank: Object.freeze({
      engine: "ort",
      task: "rerank",
      model_path: "/models/ms-marco-MiniLM-L-6-v2",
      tokenizer_path: "/models/ms-marco-MiniLM-L-6-v2/tokenizer.json",
    }),
    generate: Object.freeze({
      engine: "llama",
      task: "generate",
      model_path: "/models/qwen2.5-0.5b-instruct.gguf",
      tokenizer_path: "/models/qwen2.5-0.5b-instruct/tokenizer.json",
    }),
  });

/**
 * The ready model for a request: `ctx.registry.resolve`, whose `unknown_model` for a request
 * without `model` (no model of the task at all) is replaced by one that says why there is none —
 * the test models are off because `preload_models` lists models, or the test models do not serve
 * this task — and which `preload_models` entry to add (`details.example`).
 *
 * Routing (docs/operations.md "Routing by fingerprint"; {@link RoutingParams}), all before any work
 * — no text is tokenized, nothing is admitted or queued for a refused request:
 * - `required_epoch` above this instance's `table_epoch` refuses first.
 * - `target_fingerprint` without `model` picks, among the ready models of the task, one that
 *   serves the target (its own fingerprint, or one of its Matryoshka widths' derived ones:
 *   lib/models/matryoshka.ts; the op then serves that width, checked by {@link requireSpace});
 *   failing that, with `allow_equivalent`, one whose fingerprint is
 *   currently equivalent to it (probe rows; declared rows only with `accept_declared`). Exact
 *   matches come first, then probe-equivalent, then declared-equivalent; within each, a model
 *   that passes the certification gate certified before one that does not. With `model`, that
 *   model must serve the target (or an allowed equivalent).
 * - `required_fingerprint`: the model chosen must serve exactly it, or an allowed equivalent.
 * - `allow_equivalent` and `accept_declared` modify the two fingerprint params and have no
 *   effect without them (`accept_declared` none without `allow_equivalent`).
 *
 * A `modelId` that config `model_aliases` lists, and that no model has as its id (a real id
 * wins), is resolved as its target (lib/models/model_aliases.ts); the op's answer then names both
 * (`model_id` the served model, `requested_model` the alias). A target that cannot serve is
 * refused as the target would be, the message and `details.model_alias` naming the alias.
 *
 * Then the serving gate (docs/internals.md §12; lib/probe/certification.ts `admitCertified`):
 * in config `certification: "require"` a lane that needs a certificate and has none for this
 * machine refuses `not_certified`. Every inference op and the completions doors resolve here; the
 * probe uses lanes directly and never passes this gate.
 *
 * @param ctx Module context (registry, config, certification rows, alias rows, table epoch).
 * @param modelId The requested model id, if any.
 * @param task The operation's task.
 * @param routing The request's routing constraints.
 * @throws {SynapseError} `substitution_rejected` (permanent): `{reason: "table_epoch_behind",
 *   table_epoch, required_epoch}`; `{target_fingerprint, task, served: [{model_id, fingerprint}],
 *   reason}` when no ready model serves the target; `{model_id, fingerprint,
 *   target_fingerprint | required_fingerprint, reason}` when the chosen model does not serve it.
 *   `reason` is `fingerprint_mismatch` / `no_match`, `equivalent_not_allowed` (an equivalent
 *   exists: send `allow_equivalent: true`) or `declared_only` (only a declared row: send
 *   `accept_declared: true` too).
 * @throws {SynapseError} `self_check_failed {model_id, backend, check_id, reason}` (permanent)
 *   for a catalog model that failed its self-check (lib/probe/self_check.ts).
 * @throws {SynapseError} as `ModelRegistry.resolve`; `unknown_model {model_id: null, task,
 *   serving, test_models, example}` when no model serves the task; `not_certified {model_id,
 *   lane_id, blocking_reason, probe_command, probe_op, stale_facts?}` (permanent) in `require`
 *   mode for an uncertified lane (for a routed target: when no candidate is certified);
 *   `store_failure` when the certification or alias rows cannot be read.
 */
export function resolveModel(
  ctx: ResolveContext,
  modelId: string | undefined,
  task: ModelTask,
  routing: RoutingParams = {},
  options: ResolveOptions = {},
): ReadyModel {
  const named = modelId === undefined ? undefined : modelNamed(ctx, modelId);
  if (named?.alias === undefined) return resolveNamed(ctx, modelId, task, routing, options);
  try {
    return resolveNamed(ctx, named.modelId, task, routing, options);
  } catch (err) {
    throw viaAlias(err, named.alias, named.modelId);
  }
}

/**
 * The model id a requested name stands for: the name, or config `model_aliases`' target of it
 * when no model (loaded, loading, or being loaded by `model.load`) has the name as its id
 * (lib/models/model_aliases.ts).
 *
 * @param ctx Module context (config, registry, loads).
 * @param name The requested model name.
 * @returns The id to resolve, and the alias when one was taken.
 */
export function modelNamed(
  ctx: Pick<ResolveContext, "config" | "registry" | "loads">,
  name: string,
): { modelId: string; alias?: string } {
  return modelAliasTarget(
    ctx.config.model_aliases,
    name,
    (id) =>
      ctx.registry.list().some((m) => m.modelId === id) ||
      ctx.loads?.pendingLoad(id) !== undefined,
  );
}

/** A refusal of an alias's target, its message and details naming the alias too. */
function viaAlias(err: unknown, alias: string, target: string): unknown {
  if (!(err instanceof SynapseError)) return err;
  return new SynapseError(
    err.code,
    `${err.message} (model '${alias}' is a model alias of '${target}', config model_aliases)`,
    {
      cause: err,
      channel: err.channel,
      details: { ...err.details, model_alias: alias },
      ...(err.retryAfterMs === undefined ? {} : { retryAfterMs: err.retryAfterMs }),
    },
  );
}

function resolveNamed(
  ctx: ResolveContext,
  modelId: string | undefined,
  task: ModelTask,
  routing: RoutingParams,
  options: ResolveOptions,
): ReadyModel {
  const gate = options.certificationGate ?? true;
  checkEpoch(ctx, routing);
  const target = routing.target_fingerprint;
  if (target !== undefined && modelId === undefined) {
    const model = routeToFingerprint(ctx, task, target, routing, gate);
    requireServes(ctx, model, "required_fingerprint", routing);
    return model;
  }
  const model = modelId === undefined
    ? resolveDefault(ctx, task, gate, routing.accept_declared === true)
    : resolveLoaded(ctx, modelId, task);
  requireServes(ctx, model, "target_fingerprint", routing);
  requireServes(ctx, model, "required_fingerprint", routing);
  if (gate && modelId !== undefined) admitCertified(ctx, model, routing.accept_declared === true);
  return model;
}

/**
 * The model of a request that names none: the first of `defaultCandidatesOf` (lib/models/
 * model_registry.ts: non-test models, then test models, then `notDefault` ones, each in load
 * order) that can serve it. A candidate whose load failed, whose self-check failed, that the
 * certification gate refuses in the current mode, or a remote lane refusing at admission (breaker
 * open, canary halt) is passed over for the next; a candidate still
 * loading answers `model_loading` (the choice never depends on which load finishes first). When
 * none can serve, the first candidate's refusal.
 *
 * @throws {SynapseError} the first candidate's refusal; `model_loading` for a loading one; as
 *   {@link resolveLoaded} when the task has no model.
 */
function resolveDefault(
  ctx: ResolveContext,
  task: ModelTask,
  gate: boolean,
  acceptDeclared: boolean,
): ReadyModel {
  const candidates = defaultCandidatesOf(ctx.registry.list(), task);
  if (candidates.length === 0) return resolveLoaded(ctx, undefined, task);
  let first: unknown;
  for (const entry of candidates) {
    try {
      const model = resolveLoaded(ctx, entry.modelId, task);
      if (gate) admitCertified(ctx, model, acceptDeclared);
      // A remote lane refusing every request now (its breaker open, its canary halted) is passed
      // over like a failed load.
      const refused = model.remote === undefined
        ? undefined
        : model.interactive.engine.admissionRefusal?.();
      if (refused !== undefined) throw refused;
      return model;
    } catch (err) {
      if (entry.state === "loading") throw err;
      if (err instanceof SynapseError && err.code === "store_failure") throw err;
      first ??= err;
    }
  }
  throw first;
}

/** Options of {@link resolveModel}. */
export interface ResolveOptions {
  /**
   * Pass the serving gate (`not_certified` for an uncertified lane in `require` mode). False
   * only for an operation that runs no engine, so no lane's numbers: `tokenize`, `detokenize`
   * (a tokenizer is the same whether its lane is certified or not). A routed target still
   * prefers a certified candidate. @default true
   */
  certificationGate?: boolean;
}

/** How a served fingerprint satisfies a wanted one. */
type Match = "exact" | "probe" | "declared";

const MATCH_RANK: Readonly<Record<Match, number>> = { exact: 0, probe: 1, declared: 2 };

/**
 * Every fingerprint a model serves: its own, then each Matryoshka width's derived one
 * (lib/models/matryoshka.ts; a request selects the width with `dimensions` or by naming it).
 */
function fingerprintsOf(model: ReadyModel): string[] {
  return [model.fingerprint, ...matryoshkaVariants(model).map((v) => v.fingerprint)];
}

/**
 * How a model serving `served` (one fingerprint, or all of a model's) matches `wanted`: the
 * same, equivalent by a live probe row, by a declared row.
 */
function matchOf(
  ctx: ResolveContext,
  served: string | readonly string[],
  wanted: string,
  equivalents?: readonly AliasEquivalent[],
): Match | undefined {
  const set = typeof served === "string" ? [served] : served;
  if (set.includes(wanted)) return "exact";
  let match: Match | undefined;
  for (const e of equivalents ?? ctx.aliases.equivalentsOf(wanted, ctx.now())) {
    if (!set.includes(e.fingerprint)) continue;
    if (e.source === "probe") return "probe";
    match = "declared";
  }
  return match;
}

/** Whether the request admits a match. */
function admits(match: Match, routing: RoutingParams): boolean {
  if (match === "exact") return true;
  if (routing.allow_equivalent !== true) return false;
  return match === "probe" || routing.accept_declared === true;
}

/** Why a match the request does not admit is refused (or `undefined` for none). */
function refusedWhy(match: Match | undefined, fallback: string): string {
  if (match === undefined || match === "exact") return fallback;
  return match === "declared" ? "declared_only" : "equivalent_not_allowed";
}

/** What to send to be served, by refusal reason. */
function hintOf(reason: string): string {
  if (reason === "equivalent_not_allowed") {
    return "; an equivalent fingerprint (a live alias measured by the probe) is served: send allow_equivalent: true to accept it";
  }
  if (reason === "declared_only") {
    return "; an equivalent fingerprint is served, but only by a declared alias row: send allow_equivalent: true and accept_declared: true to accept it";
  }
  return "";
}

/** @throws {SynapseError} `substitution_rejected {reason: "table_epoch_behind"}`. */
function checkEpoch(ctx: ResolveContext, routing: RoutingParams): void {
  const required = routing.required_epoch;
  if (required === undefined) return;
  const epoch = ctx.tableEpoch();
  if (epoch >= required) return;
  throw new SynapseError(
    "substitution_rejected",
    `Cannot serve: this instance's alias table is at epoch ${epoch}, older than the required_epoch ${required}; it has not seen the alias changes the caller relies on (send the request where table_epoch is at least ${required}, or lower required_epoch)`,
    { details: { reason: "table_epoch_behind", table_epoch: epoch, required_epoch: required } },
  );
}

/**
 * Refuses a model that does not serve the request's `field` fingerprint (or an equivalent the
 * request admits): Synapse never serves vectors of another numeric profile in its place.
 */
function requireServes(
  ctx: ResolveContext,
  model: ReadyModel,
  field: "target_fingerprint" | "required_fingerprint",
  routing: RoutingParams,
  space?: string,
): void {
  const wanted = routing[field];
  if (wanted === undefined) return;
  const served = space ?? fingerprintsOf(model);
  const match = matchOf(ctx, served, wanted);
  if (match !== undefined && admits(match, routing)) return;
  const reason = refusedWhy(match, "fingerprint_mismatch");
  const what = field === "required_fingerprint" ? "required" : "target";
  const fingerprint = space ?? model.fingerprint;
  throw new SynapseError(
    "substitution_rejected",
    `Cannot serve model '${model.modelId}': its fingerprint ${fingerprint} is not the ${what} ${wanted}${
      hintOf(reason)
    }`,
    {
      details: {
        model_id: model.modelId,
        fingerprint,
        [field]: wanted,
        reason,
      },
    },
  );
}

/**
 * Refuses a request whose `required_fingerprint` / `target_fingerprint` the space it is about to
 * be served in does not satisfy (exactly, or by an equivalent the request admits): once a model
 * serves several spaces (Matryoshka widths, lib/models/matryoshka.ts), {@link resolveModel}
 * checks that the model serves the fingerprint in some space, and the op checks the space it
 * chose (`dimensions`) with this, before any work.
 *
 * @param ctx Module context.
 * @param model The resolved model.
 * @param fingerprint The fingerprint of the space to be served.
 * @param routing The request's routing params.
 * @throws {SynapseError} `substitution_rejected {model_id, fingerprint, required_fingerprint |
 *   target_fingerprint, reason}`.
 */
export function requireSpace(
  ctx: ResolveContext,
  model: ReadyModel,
  fingerprint: string,
  routing: RoutingParams,
): void {
  requireServes(ctx, model, "required_fingerprint", routing, fingerprint);
  requireServes(ctx, model, "target_fingerprint", routing, fingerprint);
}

/**
 * The ready model of the task that serves `target` (see {@link resolveModel}), through the
 * certification gate.
 */
function routeToFingerprint(
  ctx: ResolveContext,
  task: ModelTask,
  target: string,
  routing: RoutingParams,
  gate = true,
): ReadyModel {
  const ready = ctx.registry.list().filter((e) =>
    e.task === task && e.state === "ready" && e.ready !== undefined
  );
  const candidates: { entry: ModelEntry; rank: number }[] = [];
  let refused: Match | undefined;
  let equivalents: readonly AliasEquivalent[] | undefined;
  let requiredMiss: ReadyModel | undefined;
  for (const entry of ready) {
    const its = fingerprintsOf(entry.ready!);
    // The alias table is read once, and only when some model does not serve the target itself.
    if (!its.includes(target)) equivalents ??= ctx.aliases.equivalentsOf(target, ctx.now());
    const match = matchOf(ctx, its, target, equivalents);
    if (match === undefined) continue;
    if (!admits(match, routing)) {
      if (refused === undefined || MATCH_RANK[match] < MATCH_RANK[refused]) refused = match;
      continue;
    }
    // With a required fingerprint too, a candidate must serve both.
    const required = routing.required_fingerprint;
    if (required !== undefined) {
      const m = matchOf(ctx, its, required);
      if (m === undefined || !admits(m, routing)) {
        requiredMiss ??= entry.ready!;
        continue;
      }
    }
    // Exact before equivalent; then a model that is a default before one that is not.
    const rank = MATCH_RANK[match] * 4 + (entry.source.notDefault ? 2 : 0) +
      (entry.testModel ? 1 : 0);
    candidates.push({ entry, rank });
  }
  candidates.sort((a, b) => a.rank - b.rank);
  let firstError: unknown;
  let uncertified: ReadyModel | undefined;
  for (const { entry } of candidates) {
    let model: ReadyModel;
    try {
      model = resolveLoaded(ctx, entry.modelId, task);
    } catch (err) {
      firstError ??= err;
      continue;
    }
    if (servedCertified(ctx, model)) return model;
    uncertified ??= model;
  }
  if (uncertified !== undefined) {
    if (gate) admitCertified(ctx, uncertified, routing.accept_declared === true);
    return uncertified;
  }
  if (firstError !== undefined) throw firstError;
  // A model serves the target but not the required fingerprint: refused naming it.
  if (requiredMiss !== undefined) requireServes(ctx, requiredMiss, "required_fingerprint", routing);
  const reason = refusedWhy(refused, "no_match");
  const served = ready.map((e) => ({ model_id: e.modelId, fingerprint: e.ready!.fingerprint }));
  const loading = ctx.registry.list().filter((e) => e.task === task && e.state === "loading")
    .map((e) => e.modelId);
  const list = served.map((m) => `${m.model_id} (${m.fingerprint})`).join(", ") || "none";
  throw new SynapseError(
    "substitution_rejected",
    `Cannot serve ${task} with fingerprint ${target}: no ready ${task} model serves it${
      routing.allow_equivalent === true ? " or a fingerprint equivalent to it" : ""
    } (serving: ${list}${loading.length > 0 ? `; loading: ${loading.join(", ")}` : ""})${
      hintOf(reason)
    }`,
    {
      details: {
        target_fingerprint: target,
        task,
        served,
        reason,
        ...(loading.length > 0 ? { loading } : {}),
      },
    },
  );
}

function resolveLoaded(
  ctx: ResolveContext,
  modelId: string | undefined,
  task: ModelTask,
): ReadyModel {
  try {
    return refuseFailedSelfCheck(ctx.registry.resolve(modelId, task));
  } catch (err) {
    const cat = modelId === undefined
      ? undefined
      : ctx.loads?.catalog.find((m) => m.id === modelId);
    const pending = modelId === undefined ? undefined : ctx.loads?.pendingLoad(modelId);
    if (pending !== undefined && err instanceof SynapseError && err.code === "unknown_model") {
      // A `model.load` answered its job for this id and is still fetching or validating it.
      throw new SynapseError(
        "model_loading",
        `Cannot serve ${task}: model '${modelId}' is loading`,
        { cause: err, retryAfterMs: 250, details: { model_id: modelId, attempt: 0 } },
      );
    }
    if (cat !== undefined && err instanceof SynapseError && err.code === "unknown_model") {
      throw new SynapseError(
        "model_not_installed",
        `Cannot serve ${task}: catalog model '${cat.id}' is not installed; download it with 'ck-synapse pull ${cat.id}' (models.download {catalog_id: "${cat.id}"})`,
        {
          cause: err,
          details: {
            catalog_id: cat.id,
            lane_id: cat.backends[0] ? catalogLaneId(cat, cat.backends[0].backend) : null,
            download_op: "models.download",
            download_job_id: null,
          },
        },
      );
    }
    if (modelId !== undefined && err instanceof SynapseError && err.code === "unknown_model") {
      throw unknownNamed(ctx, err, task);
    }
    if (
      modelId !== undefined || !(err instanceof SynapseError) || err.code !== "unknown_model" ||
      ctx.registry.list().some((m) => m.task === task)
    ) {
      throw err;
    }
    throw noModelFor(ctx, task, err);
  }
}

/**
 * Which model serves each task when a request names none (`models.list` `served_by`): the one
 * {@link resolveModel} picks for a request that names none and no routing params (the first of
 * `defaultCandidatesOf`, lib/models/model_registry.ts, that can serve, passing over failed ones
 * and ones the certification gate refuses); when none can serve now, the registry's choice
 * ({@link defaultModelOf}: the first that has not failed, a loading one included); `null` when
 * the task has no model.
 *
 * @param ctx Module context (registry, certification rows, config).
 * @returns A model id or null per task.
 */
export function servedByTask(ctx: ResolveContext): Record<ModelTask, string | null> {
  const list = ctx.registry.list();
  const pick = (task: ModelTask): string | null => {
    if (!list.some((m) => m.task === task)) return null;
    try {
      return resolveDefault(ctx, task, true, false).modelId;
    } catch {
      return defaultModelOf(list, task)?.modelId ?? null;
    }
  };
  return { embed: pick("embed"), rerank: pick("rerank"), generate: pick("generate") };
}

/**
 * The registry's `unknown_model` for a named model, its message listing what is served for the
 * task (`serving: …`) and config `model_aliases` when there are any (`details.model_aliases`:
 * name → target).
 */
function unknownNamed(
  ctx: Pick<OpContext, "registry" | "config">,
  err: SynapseError,
  task: ModelTask,
): SynapseError {
  const served = ctx.registry.list().filter((m) => m.task === task).map((m) => m.modelId);
  const aliases = Object.entries(ctx.config.model_aliases);
  const ofTask = aliases.filter(([, target]) => served.includes(target));
  const aliasText = ofTask.length === 0
    ? ""
    : `; model aliases: ${ofTask.map(([n, t]) => `${n} → ${t}`).join(", ")}`;
  return new SynapseError(
    err.code,
    `${err.message} (serving ${task}: ${served.join(", ") || "none"}${aliasText})`,
    {
      cause: err,
      details: {
        ...err.details,
        ...(aliases.length === 0 ? {} : { model_aliases: Object.fromEntries(aliases) }),
      },
    },
  );
}

function noModelFor(
  ctx: Pick<OpContext, "registry" | "config" | "loads">,
  task: ModelTask,
  cause: SynapseError,
): SynapseError {
  const serving = ctx.registry.list().map((m) => ({ model_id: m.modelId, task: m.task }));
  const configured = ctx.config.preload_models.length > 0;
  const list = serving.map((m) => `${m.model_id} (${m.task})`).join(", ") || "none";
  const why = configured
    ? `preload_models lists ${list}, and the test models are off whenever preload_models lists a model`
    : `the generated test models serve embed and rerank only`;
  const example = PRELOAD_EXAMPLES[task];
  const catalog = (ctx.loads?.catalog ?? []).filter((m) => m.task === task);
  const pick = catalog.find((m) => m.default_for_task) ?? catalog[0];
  const pull = pick === undefined
    ? "'ck-synapse pull PATH' (a local model directory or file)"
    : `'ck-synapse pull ${pick.id}' (more: 'ck-synapse models catalog --task ${task}')`;
  return new SynapseError(
    "unknown_model",
    `Cannot serve ${task}: no ${task} model is loaded (${why}); load one now with ${pull}, ` +
      `or add ${task === "embed" ? "an" : "a"} ${task} model to preload_models in the config, ` +
      `e.g. ${JSON.stringify(example)}`,
    {
      cause,
      details: {
        model_id: null,
        task,
        serving,
        test_models: !configured,
        example: { ...example },
        catalog: catalog.map((m) => m.id),
      },
    },
  );
}
