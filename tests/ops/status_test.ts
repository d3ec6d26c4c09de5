/**
 * One status function below the doors (lib/ops/status.ts): a failed or a quarantined model shows
 * the same state and reason through `GET /health`, `models.list` over HTTP, and
 * `ck-synapse models list --url` — never `ready` for a model that refuses every request.
 */
import assert from "node:assert/strict";
import { serveHttp } from "../../lib/doors/http/server.ts";
import { nullLog } from "../../lib/log/log.ts";
import { main } from "../../lib/cli/main.ts";
import { createSynapse } from "../../lib/synapse.ts";
import type { Synapse } from "../../lib/synapse.ts";
import { MINILM, MODELS, preload, semanticError } from "../_helpers.ts";

const GEN = `${MODELS}/synapse-tiny-llama`;

/** A Synapse configured as an operator would (SYNAPSE_CONFIG_JSON), logs dropped. */
async function start(
  preloads: Record<string, unknown>[],
  llamaWorkerArgs: string[] = [],
): Promise<{ syn: Synapse; dir: string }> {
  const dir = await Deno.makeTempDir({ prefix: "synapse-status-" });
  const env = {
    XDG_DATA_HOME: `${dir}/data`,
    XDG_CONFIG_HOME: `${dir}/config`,
    HOME: dir,
    SYNAPSE_CONFIG_JSON: JSON.stringify({
      certification: "warn",
      preload_models: preloads,
    }),
  };
  // The config is layered from SYNAPSE_CONFIG_JSON, as an operator's would be.
  const syn = await createSynapse({ env, cwd: dir, log: nullLog, llamaWorkerArgs });
  return { syn, dir };
}

interface Seen {
  health: { status: number; body: Record<string, unknown> };
  // deno-lint-ignore no-explicit-any
  healthRow: any;
  // deno-lint-ignore no-explicit-any
  listRow: any;
  cliLine: string;
}

/** The model's row as /health, models.list over HTTP and the CLI's models list show it. */
async function seenThrough(syn: Synapse, modelId: string): Promise<Seen> {
  const server = serveHttp(syn, { log: nullLog });
  const url = `http://127.0.0.1:${server.port}`;
  try {
    const res = await fetch(`${url}/health`);
    const body = await res.json();
    const list = await (await fetch(`${url}/v1/ops/models.list`, { method: "POST" })).json();
    const out: string[] = [];
    const err: string[] = [];
    const code = await main(["models", "list", "--url", url], {
      out: (l) => out.push(l),
      err: (l) => err.push(l),
    });
    assert.equal(code, 0, err.join("\n"));
    const cliLine = out.find((l) => l.startsWith(`${modelId} `));
    assert.ok(cliLine, `no CLI row for ${modelId}: ${out.join("\n")}`);
    return {
      health: { status: res.status, body },
      healthRow: body.models.find((m: { model_id: string }) => m.model_id === modelId),
      listRow: list.result.models.find((m: { model_id: string }) => m.model_id === modelId),
      cliLine,
    };
  } finally {
    await server.shutdown();
  }
}

/** The three doors agree on the state and reason of `modelId`. */
function assertSameStateAndReason(seen: Seen, state: string, code: string, reason: string): void {
  const { healthRow, listRow, cliLine } = seen;
  assert.equal(healthRow.state, state, JSON.stringify(healthRow));
  assert.equal(listRow.state, state, JSON.stringify(listRow));
  assert.deepEqual(listRow.state_reason, healthRow.state_reason);
  assert.equal(healthRow.state_reason.reason, reason);
  assert.equal(healthRow.state_reason.code, code);
  const message: string = healthRow.state_reason.message;
  assert.ok(message.includes(`'${healthRow.model_id}'`), message);
  // The CLI prints the same state word in its STATE column, and the same code and message.
  const cells = cliLine.split(/ {2,}/);
  assert.equal(cells[2], state, cliLine);
  assert.ok(cliLine.endsWith(`${code}: ${message}`), cliLine);
  assert.ok(!/\bready\b/.test(cliLine.replace(message, "")), cliLine);
}

Deno.test("a model that failed to load: /health, models.list and the CLI say failed, and why", async () => {
  const { syn, dir } = await start([
    preload(`${MODELS}/synapse-tiny-embed`, "good"),
    // More positions than the model has: the load fails with artifact_invalid.
    {
      engine: "ort",
      model_path: MINILM,
      tokenizer_path: `${MINILM}/tokenizer.json`,
      model_id: "broken",
      max_tokens: 100000,
    },
  ]);
  try {
    const seen = await seenThrough(syn, "broken");
    assertSameStateAndReason(seen, "failed", "artifact_invalid", "load_failed");
    assert.match(seen.healthRow.state_reason.message, /max_tokens/);
    // The service is degraded and says which model and why, for the life of the process.
    assert.equal(seen.health.status, 200);
    assert.equal(seen.health.body.status, "degraded");
    assert.equal(
      seen.health.body.reason,
      "1 of 2 models not ready: 'broken' failed (artifact_invalid)",
    );
    const good = await seenThrough(syn, "good");
    assert.equal(good.healthRow.state, "ready");
    assert.equal(good.healthRow.state_reason, undefined);
    assert.equal(good.listRow.state, "ready");
    assert.equal(good.cliLine.split(/ {2,}/)[2], "ready");
  } finally {
    await syn.dispose();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a quarantined model: /health, models.list and the CLI say quarantined (not ready), and why", async () => {
  const { syn, dir } = await start([
    preload(`${MODELS}/synapse-tiny-embed`, "emb"),
    {
      engine: "llama",
      model_path: GEN,
      tokenizer_path: `${GEN}/tokenizer.json`,
      task: "generate",
      model_id: "gen",
    },
  ], ["--test-abort-after", "1", "--test-ping-uncounted"]); // LOAD is request 1: every GENERATE aborts the worker
  try {
    const before = await seenThrough(syn, "gen");
    assert.equal(before.healthRow.state, "ready");
    assert.equal(before.listRow.serving_admission, "serving");
    // Three crashes break the budget of 2 per 60 s: the worker is quarantined.
    for (let i = 0; i < 3; i++) {
      const e = semanticError(
        await syn.call("microllm.oneshot", { model: "gen", prompt: "Hi", max_tokens: 4 }),
      );
      assert.equal(e.code, "engine_crashed", JSON.stringify(e));
    }
    const refused = semanticError(
      await syn.call("microllm.oneshot", { model: "gen", prompt: "Hi", max_tokens: 4 }),
    );
    assert.equal(refused.code, "probe_required");

    const seen = await seenThrough(syn, "gen");
    assertSameStateAndReason(seen, "quarantined", "probe_required", "worker_quarantined");
    assert.match(seen.healthRow.state_reason.message, /3 crashes within 60000 ms/);
    assert.equal(seen.healthRow.state_reason.details.crashes.length, 3);
    // The contract's serving_admission says the same, on both.
    assert.equal(seen.healthRow.serving_admission, "quarantined");
    assert.equal(seen.listRow.serving_admission, "quarantined");
    assert.equal(seen.health.status, 200);
    assert.equal(seen.health.body.status, "degraded");
    assert.equal(
      seen.health.body.reason,
      "1 of 2 models not ready: 'gen' quarantined (probe_required)",
    );
  } finally {
    await syn.dispose();
    await Deno.remove(dir, { recursive: true });
  }
});
