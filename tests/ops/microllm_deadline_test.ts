/**
 * Worker faults as a caller of microllm.oneshot sees them: a worker that hangs mid generation
 * answers deadline_exceeded at `deadline_ms` (not at the 180 s GENERATE timeout), /health says
 * the worker is unresponsive, and disposing the instance kills it at once; a model whose worker
 * fails at start is retried lazily, then refused permanently.
 */
import assert from "node:assert/strict";
import { loadConfig } from "../../lib/config/config.ts";
import { nullLog } from "../../lib/log/log.ts";
import { serveHttp } from "../../lib/http/server.ts";
import { createSynapse } from "../../lib/synapse.ts";
import { MODELS, semanticError } from "../_helpers.ts";

const GEN = `${MODELS}/synapse-tiny-llama`;

/** A Synapse serving the tiny generation model, its workers started with `workerArgs`. */
async function start(
  workerArgs: string[],
  more: Partial<Parameters<typeof createSynapse>[0]> = {},
): Promise<{ syn: Awaited<ReturnType<typeof createSynapse>>; dir: string }> {
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
  const syn = await createSynapse({
    config,
    env,
    log: nullLog,
    llamaWorkerArgs: workerArgs,
    ...more,
  });
  return { syn, dir };
}

Deno.test("microllm.oneshot answers deadline_exceeded on time while a hung worker generates", async () => {
  // LOAD is request 1; the worker hangs on the first GENERATE.
  const { syn, dir } = await start(["--test-hang-after", "1"], { workerRequestTimeoutMs: 1000 });
  const server = serveHttp(syn, { hostname: "127.0.0.1", port: 0 });
  try {
    const before = await (await fetch(`http://127.0.0.1:${server.port}/health`)).json();
    assert.equal(before.status, "ok");
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
    // Busy past the request timeout without a pause: /health says so instead of "ok" (503
    // unavailable here: the only model cannot serve).
    const res = await fetch(`http://127.0.0.1:${server.port}/health`);
    const health = await res.json();
    assert.equal(res.status, 503);
    assert.equal(health.status, "unavailable");
    const row = health.models.find((m: { model_id: string }) => m.model_id === "gen");
    assert.equal(row.serving_admission, "unresponsive");
    assert.equal(row.serving_admission_reason.reason, "worker_busy");
    assert.ok(row.serving_admission_reason.busy_ms > 1000);
  } finally {
    await server.shutdown();
    const t1 = performance.now();
    await syn.dispose();
    assert.ok(performance.now() - t1 < 5000, "dispose kills the hung worker without waiting");
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a model whose worker fails at start is retried in the background twice, then refused permanently (F20)", async () => {
  const { syn, dir } = await start(["--test-exit-before-connect"], {
    waitForModels: false,
    loadRetryBaseMs: 20,
  });
  try {
    // No request drives the retries: the registry retries in the background with backoff.
    const first = semanticError(
      await syn.call("microllm.oneshot", { prompt: "hi", max_tokens: 4 }),
    );
    assert.equal(first.code, "model_loading");
    assert.ok(first.retry_after_ms > 0);
    const err = await syn.registry.ready("gen").then(
      () => assert.fail("a worker that never connects cannot load"),
      (e) => e,
    );
    assert.equal(err.code, "probe_required");
    assert.equal(err.details.reason, "load_failed_repeatedly");
    assert.equal(err.details.attempts, 3);
    assert.equal(err.details.last_error.code, "engine_crashed");
    const last = semanticError(await syn.call("microllm.oneshot", { prompt: "hi", max_tokens: 4 }));
    assert.equal(last.code, "probe_required");
    assert.equal(last.details?.attempts, 3);
  } finally {
    await syn.dispose();
    await Deno.remove(dir, { recursive: true });
  }
});
