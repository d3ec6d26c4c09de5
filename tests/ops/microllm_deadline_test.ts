/**
 * Worker faults and cancellation as a caller of microllm.oneshot sees them: a worker that hangs
 * mid generation answers deadline_exceeded at `deadline_ms` (not at the 180 s GENERATE timeout)
 * and /health says the worker is unresponsive; a deadline, an HTTP disconnect or the caller's own
 * cancel stops a generation within a token (CANCEL) and frees the slot (F10, F19); a model whose
 * worker fails at start is retried in the background, then refused permanently (F20). Nothing
 * here waits on a wall-clock limit: the worker's test hooks park it until the cancel arrives.
 */
import assert from "node:assert/strict";
import { loadConfig } from "../../lib/config/loader.ts";
import { nullLog } from "../../lib/log/log.ts";
import { serveHttp } from "../../lib/doors/http/server.ts";
import { createSynapse } from "../../lib/synapse.ts";
import { parkedWorker, watchGenerations } from "../_generation.ts";
import { MODELS, resultOf, semanticError } from "../_helpers.ts";

const GEN = `${MODELS}/synapse-tiny-llama`;

/** A Synapse serving the tiny generation model, its workers started with `workerArgs`. */
async function start(
  workerArgs: string[],
  more: Partial<Parameters<typeof createSynapse>[0]> = {},
  overrides: Record<string, unknown> = {},
): Promise<{ syn: Awaited<ReturnType<typeof createSynapse>>; dir: string }> {
  const dir = await Deno.makeTempDir({ prefix: "synapse-deadline-" });
  const env = {
    XDG_DATA_HOME: `${dir}/data`,
    XDG_CONFIG_HOME: `${dir}/config`,
    HOME: dir,
    SYNAPSE_CONFIG_JSON: JSON.stringify({
      certification: "warn",
      ...overrides,
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

Deno.test("microllm.oneshot answers deadline_exceeded at its deadline while a hung worker generates; /health says unresponsive", async () => {
  // LOAD is request 1; the worker hangs on the first GENERATE (and never reads a CANCEL).
  // The CANCEL grace is long here: this test is about the hung worker while it still holds
  // the slot (a short grace kills it: tests/workers/worker_lifetime_test.ts).
  const { syn, dir } = await start(["--test-hang-after", "1", "--test-ping-uncounted"], {
    workerRequestTimeoutMs: 1000,
  }, { worker: { cancel_grace_ms: 600_000 } });
  const server = serveHttp(syn, { hostname: "127.0.0.1", port: 0 });
  try {
    const before = await (await fetch(`http://127.0.0.1:${server.port}/health`)).json();
    assert.equal(before.status, "ok");
    const out = await syn.call("microllm.oneshot", {
      prompt: "hello",
      max_tokens: 8,
      deadline_ms: 1500,
    });
    const err = semanticError(out);
    assert.equal(err.code, "deadline_exceeded");
    assert.equal(err.details.reason, "deadline");
    // The slot stays held by the hung generation: the next request is refused at admission or
    // waits its max_queue_ms, never runs on top of it.
    const next = await syn.call("microllm.oneshot", {
      prompt: "hello",
      max_tokens: 8,
      deadline_ms: 2000,
      max_queue_ms: 300,
    });
    assert.equal(semanticError(next).code, "deadline_exceeded");
    // Busy past the request timeout (1 s) without a pause: /health says so instead of "ok" (503
    // unavailable here: the only model cannot serve). The busy time is the module's own clock.
    const engine = syn.registry.resolve("gen", "generate").interactive.engine;
    while (engine.health().busyMs <= 1000) await new Promise((r) => setTimeout(r, 50));
    const res = await fetch(`http://127.0.0.1:${server.port}/health`);
    const health = await res.json();
    assert.equal(res.status, 503);
    assert.equal(health.status, "unavailable");
    const row = health.models.find((m: { model_id: string }) => m.model_id === "gen");
    assert.equal(row.serving_admission, "unresponsive");
    assert.equal(row.serving_admission_reason.reason, "worker_busy");
    assert.ok(row.serving_admission_reason.busy_ms > 1000);
    // admission.status's lane row says the same: one status function, not a second copy.
    const lanes = resultOf(await syn.call("admission.status", {})).lanes;
    const lane = lanes.find((l: { models: string[] }) => l.models.includes("gen"));
    assert.equal(lane.serving_admission, "unresponsive", JSON.stringify(lane));
    assert.equal(lane.serving_admission_reason.reason, "worker_busy");
  } finally {
    await server.shutdown();
    // Disposing kills the hung worker (a SHUTDOWN it never reads, then the kill): it returns.
    await syn.dispose();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("F19: a deadline passing mid-generation cancels it: the worker stops, the slot is free for the next request", async () => {
  // The worker generates 1 token of the first GENERATE, then waits for its CANCEL; the deadline
  // (5 s, far more than one token takes) passes while it waits.
  const worker = parkedWorker();
  const { syn, dir } = await start(["--test-wait-cancel-after", "1"], { log: worker.log });
  try {
    const watch = watchGenerations(syn);
    const out = await syn.call("microllm.oneshot", {
      prompt: "hello",
      max_tokens: 400,
      deadline_ms: 5000,
    });
    const err = semanticError(out);
    assert.equal(err.code, "deadline_exceeded");
    assert.equal(err.details.reason, "deadline");
    // The engine was told to stop, and stopped: its generation ended "cancelled" mid-way.
    await worker.parked;
    const ended = await watch.ended;
    assert.equal(ended.finishReason, "cancelled");
    assert.equal(ended.generatedIds.length, 1, "stopped where it was parked, within a token");
    // The lane's slot is free: the next request runs, and runs to its own limit.
    const next = resultOf(
      await syn.call("microllm.oneshot", { prompt: "hello", max_tokens: 8, max_queue_ms: 5000 }),
    );
    assert.equal(next.finish_reason, "max_tokens");
    assert.equal(next.n_gen, 8);
  } finally {
    await syn.dispose();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("F10/F19: an HTTP client that disconnects mid-generation cancels it; the next request is served", async () => {
  const worker = parkedWorker();
  const { syn, dir } = await start(["--test-wait-cancel-after", "3"], { log: worker.log });
  const server = serveHttp(syn, { hostname: "127.0.0.1", port: 0 });
  try {
    const watch = watchGenerations(syn);
    const client = new AbortController();
    const pending = fetch(`http://127.0.0.1:${server.port}/v1/ops/microllm.oneshot`, {
      method: "POST",
      body: JSON.stringify({ prompt: "hello", max_tokens: 400, deadline_ms: 120_000 }),
      signal: client.signal,
    }).catch((e) => e);
    // The generation runs (the worker is parked after 3 tokens); the client goes away.
    await worker.parked;
    client.abort();
    assert.equal((await pending).name, "AbortError");
    const ended = await watch.ended;
    assert.equal(ended.finishReason, "cancelled");
    assert.equal(ended.generatedIds.length, 3, "stopped where it was parked, within a token");
    const res = await fetch(`http://127.0.0.1:${server.port}/v1/ops/microllm.oneshot`, {
      method: "POST",
      body: JSON.stringify({ prompt: "hello", max_tokens: 8 }),
    });
    const body = await res.json();
    assert.equal(res.status, 200, JSON.stringify(body));
    assert.equal(body.result.finish_reason, "max_tokens");
    assert.equal(syn.admission.bytesInFlight, 0);
  } finally {
    await server.shutdown();
    await syn.dispose();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("F19: a caller's own cancel (its signal) stops the generation within a token", async () => {
  const worker = parkedWorker();
  const { syn, dir } = await start(["--test-wait-cancel-after", "3"], { log: worker.log });
  try {
    const watch = watchGenerations(syn);
    const caller = new AbortController();
    const call = syn.call("microllm.oneshot", { prompt: "hello", max_tokens: 400 }, {
      signal: caller.signal,
    });
    await worker.parked;
    caller.abort(new DOMException("the caller cancelled", "AbortError"));
    const err = semanticError(await call);
    assert.equal(err.code, "deadline_exceeded");
    assert.equal(err.details.reason, "cancelled");
    const ended = await watch.ended;
    assert.equal(ended.finishReason, "cancelled");
    assert.equal(ended.generatedIds.length, 3);
    const next = resultOf(await syn.call("microllm.oneshot", { prompt: "hi", max_tokens: 4 }));
    assert.equal(next.n_gen, 4);
  } finally {
    await syn.dispose();
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
