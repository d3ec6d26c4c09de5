/**
 * microllm.oneshot keeps its deadline while the worker generates: a worker that hangs mid
 * generation answers deadline_exceeded at `deadline_ms`, not at the 180 s GENERATE timeout, and
 * disposing the instance kills the hung worker at once.
 */
import assert from "node:assert/strict";
import { loadConfig } from "../../lib/config/config.ts";
import { nullLog } from "../../lib/log/log.ts";
import { createSynapse } from "../../lib/synapse.ts";
import { MODELS, semanticError } from "../_helpers.ts";

const GEN = `${MODELS}/synapse-tiny-llama`;

Deno.test("microllm.oneshot answers deadline_exceeded on time while a hung worker generates", async () => {
  const dir = await Deno.makeTempDir({ prefix: "synapse-deadline-" });
  const env = {
    XDG_DATA_HOME: `${dir}/data`,
    XDG_CONFIG_HOME: `${dir}/config`,
    HOME: dir,
    SYNAPSE_CONFIG_JSON: JSON.stringify({
      preload_models: [{
        engine: "llama",
        model_path: GEN,
        tokenizer_path: `${GEN}/tokenizer.json`,
        task: "generate",
        model_id: "gen",
      }],
    }),
  };
  const { config } = loadConfig({ env, cwd: dir });
  // LOAD is request 1; the worker hangs on the first GENERATE.
  const syn = await createSynapse({
    config,
    env,
    log: nullLog,
    llamaWorkerArgs: ["--test-hang-after", "1"],
  });
  try {
    const t0 = performance.now();
    const out = await syn.call("microllm.oneshot", {
      prompt: "hello",
      max_tokens: 8,
      deadline_ms: 1500,
    });
    const ms = performance.now() - t0;
    const err = semanticError(out);
    assert.equal(err.code, "deadline_exceeded");
    assert.ok(ms >= 1400 && ms < 5000, `answered after ${ms.toFixed(0)} ms`);
    // The slot stays held by the hung generation: the next request is refused at admission or
    // waits its max_queue_ms, never runs on top of it.
    const next = await syn.call("microllm.oneshot", {
      prompt: "hello",
      max_tokens: 8,
      deadline_ms: 2000,
      max_queue_ms: 300,
    });
    assert.equal(semanticError(next).code, "deadline_exceeded");
  } finally {
    const t1 = performance.now();
    await syn.dispose();
    assert.ok(performance.now() - t1 < 5000, "dispose kills the hung worker without waiting");
    await Deno.remove(dir, { recursive: true });
  }
});
