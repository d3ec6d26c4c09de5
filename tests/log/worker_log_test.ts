/**
 * Worker output reaches the module log under `synapse.worker` (with `engine` and `model`), not
 * under the engine's own target: a real llama worker prints lines before it connects, and
 * Synapse forwards them; the r2 line they become is rooted at `synapse.worker`.
 */
import assert from "node:assert/strict";
import type { LogFields, LogLevel } from "../../lib/log/log.ts";
import { renderLogEvent } from "../../lib/log/log.ts";
import { parseLogLine } from "../../lib/log/line.ts";
import { createSynapse } from "../../lib/synapse.ts";
import { MODELS } from "../_helpers.ts";

const GEN = `${MODELS}/synapse-tiny-llama`;

Deno.test("a llama worker's own lines are logged under synapse.worker with engine and model", async () => {
  const dir = await Deno.makeTempDir({ prefix: "synapse-workerlog-" });
  const lines: { level: LogLevel; target: string; message: string; fields: LogFields }[] = [];
  const env = {
    XDG_DATA_HOME: `${dir}/data`,
    XDG_CONFIG_HOME: `${dir}/config`,
    HOME: dir,
    SYNAPSE_CONFIG_JSON: JSON.stringify({
      certification: "warn",
      preload_models: [{
        engine: "llama",
        model_path: GEN,
        tokenizer_path: `${GEN}/tokenizer.json`,
        task: "generate",
        model_id: "gen",
      }],
    }),
  };
  const syn = await createSynapse({
    env,
    cwd: dir,
    log: (level, target, message, fields) =>
      lines.push({ level, target, message, fields: fields ?? {} }),
    llamaWorkerArgs: ["--test-log-burst", "3"],
  });
  try {
    const gen = (await syn.modelsSettled).find((m) => m.modelId === "gen");
    assert.equal(gen?.state, "ready", JSON.stringify(gen?.error));
    // The lines come through the worker's stderr pipe; wait for them.
    for (const hungAt = Date.now() + 120_000;;) { // a hang guard, not a speed limit
      if (lines.filter((l) => l.message.startsWith("llama worker: test log line")).length >= 3) {
        break;
      }
      assert.ok(Date.now() < hungAt, "the worker's lines never arrived");
      await new Promise((r) => setTimeout(r, 20));
    }
    const burst = lines.filter((l) => l.message.startsWith("llama worker: test log line"));
    assert.deepEqual(
      burst.map((l) => [l.level, l.target, l.message, l.fields]),
      [0, 1, 2].map((i) => [
        "info",
        "synapse.worker",
        `llama worker: test log line ${i}`,
        { engine: "llama", model: "gen", stream: "stderr" },
      ]),
    );
    assert.equal(lines.filter((l) => l.target.startsWith("worker.")).length, 0);
    const p = parseLogLine(
      renderLogEvent("info", burst[0]!.target, burst[0]!.message, burst[0]!.fields),
    );
    assert.equal(p.logger, "synapse.worker");
    assert.deepEqual(p.fields, [["engine", "llama"], ["model", "gen"], ["stream", "stderr"]]);
  } finally {
    await syn.dispose();
    await Deno.remove(dir, { recursive: true });
  }
});
