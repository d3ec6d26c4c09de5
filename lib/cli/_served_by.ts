/**
 * `models list`'s "served by" lines: which model answers each task when a request names none
 * (`models.list` `served_by`), and, for a task nothing serves, why and what to configure.
 *
 * @module
 */

/** The `models.list` fields this reads. */
export interface ServedByInput {
  models: { model_id: string; task: string; state: string; test_model?: boolean }[];
  served_by?: Record<string, string | null>;
  default_test_models?: boolean;
}

/** The tasks, in print order. */
export const TASKS = ["embed", "rerank", "generate"] as const;

/**
 * One line per task: `MODEL_ID [(test model)][, STATE]`, with the other models of the task, or
 * `none (…); add a TASK model to preload_models`, saying why (the test models are off because
 * `preload_models` lists models, or they do not serve the task).
 *
 * @param res The `models.list` result.
 * @returns `[task, served by]` pairs, in {@link TASKS} order.
 */
export function servedBy(res: ServedByInput): [task: string, servedBy: string][] {
  return TASKS.map((task) => {
    const id = res.served_by?.[task] ?? null;
    const first = res.models.find((r) => r.model_id === id);
    if (first === undefined) {
      const why = res.default_test_models === false
        ? "the test models are off because preload_models lists models"
        : "the test models serve embed and rerank only";
      return [
        task,
        `none (${why}); add ${task === "embed" ? "an" : "a"} ${task} model to preload_models`,
      ];
    }
    const others = res.models.filter((r) => r.task === task && r !== first).map((r) => r.model_id);
    return [
      task,
      `${first.model_id}${first.test_model ? " (test model)" : ""}${
        first.state === "ready" ? "" : `, ${first.state}`
      }${others.length > 0 ? `; also ${others.join(", ")} (with --model)` : ""}`,
    ];
  });
}
