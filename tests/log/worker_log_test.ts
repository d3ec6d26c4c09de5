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
import { workerLineLevel } from "../../lib/engines/llama/llama_engine.ts";

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

Deno.test("workerLineLevel(): llama.cpp's lines at debug, its errors at warn, the worker's own at info", () => {
  assert.equal(
    workerLineLevel("llama.cpp warn: load: control token: 2 '</s>' is not marked as EOG"),
    "debug",
  );
  assert.equal(workerLineLevel("llama.cpp info: llama_context: n_ctx = 2304"), "debug");
  assert.equal(workerLineLevel("llama.cpp error: failed to allocate buffer"), "warn");
  assert.equal(workerLineLevel("llama worker: test log line 0"), "info");
  assert.equal(workerLineLevel("warn: llama.cpp error: not at the start"), "info");
});

Deno.test("llama.cpp's load-time warning for an embed model (its context over the training length) is logged at debug", async () => {
  const dir = await Deno.makeTempDir({ prefix: "synapse-workerlog-" });
  const lines: { level: LogLevel; message: string }[] = [];
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
        task: "embed",
        model_id: "emb",
        pooling: "mean",
        normalize: true,
        max_tokens: 512,
      }],
    }),
  };
  const syn = await createSynapse({
    env,
    cwd: dir,
    log: (level, _target, message) => lines.push({ level, message }),
  });
  try {
    const emb = (await syn.modelsSettled).find((m) => m.modelId === "emb");
    assert.equal(emb?.state, "ready", JSON.stringify(emb?.error));
    const cpp = () => lines.filter((l) => l.message.startsWith("llama.cpp "));
    for (const hungAt = Date.now() + 120_000; cpp().length === 0;) { // a hang guard
      assert.ok(Date.now() < hungAt, "llama.cpp said nothing while loading the embed model");
      await new Promise((r) => setTimeout(r, 20));
    }
    assert.ok(
      cpp().some((l) => /n_ctx_seq .* > n_ctx_train/.test(l.message)),
      JSON.stringify(cpp()),
    );
    for (const l of cpp()) assert.equal(l.level, "debug", l.message);
  } finally {
    await syn.dispose();
    await Deno.remove(dir, { recursive: true });
  }
});
