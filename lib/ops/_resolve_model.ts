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
import type { ModelTask, ReadyModel } from "../models/model.ts";
import type { OpContext } from "./context.ts";
import { catalogLaneId } from "../models/catalog.ts";
import { defaultModelOf } from "../models/model_registry.ts";
import { admitCertified } from "../probe/certification.ts";

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
>;

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
 * Then the serving gate (issue 18, design rule 5; lib/probe/certification.ts `admitCertified`):
 * in config `certification: "require"` a lane that needs a certificate and has none for this
 * machine refuses `not_certified`. Every inference op and the completions doors resolve here; the
 * probe uses lanes directly and never passes this gate.
 *
 * @param ctx Module context (registry, config, certification rows).
 * @param modelId The requested model id, if any.
 * @param task The operation's task.
 * @throws {SynapseError} as `ModelRegistry.resolve`; `unknown_model {model_id: null, task,
 *   serving, test_models, example}` when no model serves the task; `not_certified {model_id,
 *   lane_id, blocking_reason, probe_command, probe_op, stale_facts?}` (permanent) in `require`
 *   mode for an uncertified lane; `store_failure` when the certification rows cannot be read.
 */
export function resolveModel(
  ctx: ResolveContext,
  modelId: string | undefined,
  task: ModelTask,
): ReadyModel {
  const model = resolveLoaded(ctx, modelId, task);
  admitCertified(ctx, model);
  return model;
}

function resolveLoaded(
  ctx: ResolveContext,
  modelId: string | undefined,
  task: ModelTask,
): ReadyModel {
  try {
    return ctx.registry.resolve(modelId, task);
  } catch (err) {
    const cat = modelId === undefined
      ? undefined
      : ctx.loads?.catalog.find((m) => m.id === modelId);
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
 * Which model serves each task when a request names none (`models.list` `served_by`): the rule
 * of `ModelRegistry.resolve(undefined, task)` ({@link defaultModelOf}: the first model of the
 * task, in load order, that is not a test model and has not failed, …); `null` when no model
 * serves the task.
 *
 * @param ctx Module context (registry).
 * @returns A model id or null per task.
 */
export function servedByTask(
  ctx: Pick<OpContext, "registry">,
): Record<ModelTask, string | null> {
  const list = ctx.registry.list();
  const pick = (task: ModelTask): string | null => defaultModelOf(list, task)?.modelId ?? null;
  return { embed: pick("embed"), rerank: pick("rerank"), generate: pick("generate") };
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
