/**
 * What a certification probe (issue 18, lib/probe/run_probe.ts) costs, in-process:
 *
 * - **probe wall time** of the MiniLM-shaped encoder (`fixtures/bench/minilm-shaped`, probed
 *   against itself as its reference lane, so every check runs, parity included) and of the
 *   ~135M-shaped GGUF as a generation lane (`fixtures/bench/llama-135m-shaped`: no ONNX
 *   counterpart, so the self-consistency checks), each through `registry.controlLanes(id)` as the
 *   `probe.start` job does. Target: under 60 s each on 2 cores.
 * - **embed.query beside a probe**: `embed.query` p50/p95 on the encoder idle (half the queries
 *   before the probe, half after), and while a probe of the same model runs (one query every
 *   20 ms until the probe ends), and the beside / idle ratios. Target: loaded p95 within 3× idle p95 — the probe is control-class work under the
 *   model's own schedulers, so a query waits at most for the engine call in flight.
 *
 *   deno task bench:probe [--quick] [--only minilm|llama|beside] [--llama-dir DIR] [--progress]
 *
 * `--llama-dir` names another directory holding the 135M-shaped GGUF (e.g. one written by
 * `scripts/gen_gguf.ts --bench-only --bench-out DIR`); `--progress` prints each probe step to
 * stderr, with the seconds since the probe began. Ratios are of one run; absolute times depend on
 * the machine and its load.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import { buildCorpus } from "./corpus.ts";
import { loadConfig } from "../lib/config/loader.ts";
import { nullLog } from "../lib/log/log.ts";
import { probeLane } from "../lib/probe/run_probe.ts";
import type { ProbeLaneResult } from "../lib/probe/types.ts";
import { createSynapse, type Synapse } from "../lib/synapse.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url)).replace(/\/$/, "");

const { values: args } = parseArgs({
  args: Deno.args,
  options: {
    quick: { type: "boolean", default: false },
    only: { type: "string" },
    "llama-dir": { type: "string" },
    progress: { type: "boolean", default: false },
  },
  strict: true,
});
const only = args.only;
if (only !== undefined && !["minilm", "llama", "beside"].includes(only)) {
  throw new Error(`--only takes minilm, llama or beside, not ${only}`);
}
const MINILM_DIR = `${ROOT}/fixtures/bench/minilm-shaped`;
const LLAMA_DIR = args["llama-dir"] ?? `${ROOT}/fixtures/bench/llama-135m-shaped`;
const IDLE_QUERIES = args.quick ? 60 : 200;
const QUERY_GAP_MS = 20;
const MINILM = "minilm-shaped";
const LLAMA = "llama-135m-gen";
const CONTEXT = 2048;

function percentile(xs: readonly number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))] ?? NaN;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const wantLlama = only === undefined || only === "llama";
const wantMinilm = only === undefined || only === "minilm" || only === "beside";
const tmp = await Deno.makeTempDir({ prefix: "synapse-bench-probe-" });
const preload: Record<string, unknown>[] = [];
if (wantMinilm) {
  preload.push({
    engine: "ort",
    model_path: MINILM_DIR,
    tokenizer_path: `${MINILM_DIR}/tokenizer.json`,
    model_id: MINILM,
  });
}
if (wantLlama) {
  preload.push({
    engine: "llama",
    model_path: LLAMA_DIR,
    tokenizer_path: `${LLAMA_DIR}/tokenizer.json`,
    model_id: LLAMA,
    task: "generate",
    max_tokens: CONTEXT,
  });
}
const env = {
  XDG_DATA_HOME: `${tmp}/data`,
  XDG_CONFIG_HOME: `${tmp}/config`,
  HOME: tmp,
  SYNAPSE_WORKER_RUNTIME_DIR: `${tmp}/run`,
  SYNAPSE_CONFIG_JSON: JSON.stringify({ knob: "balanced", preload_models: preload }),
};
// The llama worker's launch check reads the process environment (as bench/front.ts sets it).
for (const [k, v] of Object.entries(env)) Deno.env.set(k, v);
const { config } = loadConfig({ env, cwd: tmp });
const syn = await createSynapse({ config, env, log: nullLog });

try {
  const listed = (await syn.call("models.list", {})).body as {
    result: { models: { model_id: string; state: string; error?: unknown }[] };
  };
  for (const m of listed.result.models) {
    // A lane that needs a certificate loads as `not_certified` until probed (config
    // certification: "require"): that probe is what this benchmark measures.
    if (m.state !== "ready" && m.state !== "not_certified") {
      throw new Error(`bench model failed to load: ${JSON.stringify(m)}`);
    }
  }

  /**
   * One probe of `modelId` on its control lanes, as the probe job runs it; `reference` names the
   * model whose lanes the parity checks run against.
   */
  const probe = (modelId: string, task: "embed" | "generate", reference?: string) => {
    const model = syn.registry.resolve(modelId, task);
    const input: Parameters<typeof probeLane>[0] = {
      model,
      laneId: modelId,
      lanes: syn.registry.controlLanes(modelId),
      // The two bars the config sets; the rest are the probe's own for the lane's dtype.
      thresholds: {
        mean_cosine: config.probe.mean_cosine_threshold,
        worst_decile_overlap: config.probe.worst_decile_rank_overlap_threshold,
      },
      knob: config.knob,
      tokenizers: syn.tokenizers,
    };
    if (args.progress) {
      const t0 = performance.now();
      input.onProgress = (step, done, total) =>
        console.error(
          `  [${
            ((performance.now() - t0) / 1000).toFixed(1)
          } s] ${modelId} ${step} ${done}/${total}`,
        );
    }
    if (reference !== undefined) {
      input.reference = {
        model: syn.registry.resolve(reference, task),
        lanes: syn.registry.controlLanes(reference),
      };
    }
    return probeLane(input);
  };

  const report = (label: string, r: ProbeLaneResult, wallMs: number): void => {
    const failed = r.checks.filter((c) => !c.passed).map((c) => `${c.id}=${c.value}`);
    const lacking = r.checks_lacking.map((c) => `${c.id}:${c.reason}`);
    console.log(
      `${label.padEnd(34)} ${(wallMs / 1000).toFixed(1).padStart(6)} s  (target < 60 s)  ` +
        `passed=${r.passed} checks=${r.checks.length} query_path=${r.query_path}` +
        (failed.length > 0 ? ` failed=[${failed.join(", ")}]` : "") +
        (lacking.length > 0 ? ` lacking=[${lacking.join(", ")}]` : ""),
    );
    const perf = r.perf[0];
    if (perf !== undefined) {
      console.log(
        `${"".padEnd(34)} perf: ${
          perf.tokens_per_second.toFixed(0)
        } tokens/s, batch ${perf.batch_rows} rows, ` +
          `call p50 ${perf.call_ms_p50.toFixed(1)} ms, start delay p50 ${
            perf.start_delay_p50_ms.toFixed(1)
          } ms`,
      );
    }
  };

  const timedProbe = async (
    label: string,
    modelId: string,
    task: "embed" | "generate",
    reference?: string,
  ): Promise<number> => {
    const t0 = performance.now();
    const r = await probe(modelId, task, reference);
    const wall = performance.now() - t0;
    report(label, r, wall);
    return wall;
  };

  // ---------- embed.query idle and beside a probe ----------
  const queries = (await buildCorpus({ root: ROOT, size: 64, seed: 99 })).map((t) =>
    t.split(" ").slice(0, 8).join(" ")
  );
  const query = async (s: Synapse, i: number): Promise<number> => {
    const t0 = performance.now();
    const o = await s.call("embed.query", { model: MINILM, text: queries[i % queries.length]! });
    if (o.kind !== "result") throw new Error(JSON.stringify(o.body).slice(0, 300));
    return performance.now() - t0;
  };

  if (wantMinilm) {
    // Warm both runtimes of the encoder (the bulk runtime loads on first use) and the query path.
    const warm = await syn.call("embed.batch", { model: MINILM, texts: queries.slice(0, 16) });
    if (warm.kind !== "result") throw new Error(JSON.stringify(warm.body).slice(0, 300));
    for (let i = 0; i < 10; i++) await query(syn, i);
  }

  if (only === undefined || only === "minilm") {
    await timedProbe("probe minilm-shaped (vs itself)", MINILM, "embed", MINILM);
  }
  if (wantLlama) {
    await timedProbe("probe llama-135m-shaped (generate)", LLAMA, "generate");
  }

  if (only === undefined || only === "beside") {
    // Idle: half the queries before the probe and half after, so a change of the machine's load
    // during the run falls on both sides alike.
    const idle: number[] = [];
    const idleRound = async (): Promise<void> => {
      for (let i = 0; i < IDLE_QUERIES / 2; i++) {
        idle.push(await query(syn, i));
        await sleep(QUERY_GAP_MS);
      }
    };
    await idleRound();
    const loaded: number[] = [];
    let done = false;
    const t0 = performance.now();
    const running = probe(MINILM, "embed", MINILM).finally(() => {
      done = true;
    });
    let i = 0;
    while (!done) {
      const started = performance.now();
      loaded.push(await query(syn, i++));
      const wait = QUERY_GAP_MS - (performance.now() - started);
      if (wait > 0) await sleep(wait);
    }
    const result = await running;
    const wall = performance.now() - t0;
    await idleRound();
    console.log("");
    report("probe minilm-shaped beside queries", result, wall);
    const idleP50 = percentile(idle, 0.5), idleP95 = percentile(idle, 0.95);
    const loadedP50 = percentile(loaded, 0.5), loadedP95 = percentile(loaded, 0.95);
    console.log(
      `embed.query idle p50/p95          ${idleP50.toFixed(2)} / ${
        idleP95.toFixed(2)
      } ms  (${idle.length} queries)`,
    );
    console.log(
      `embed.query beside probe p50/p95  ${loadedP50.toFixed(2)} / ${
        loadedP95.toFixed(2)
      } ms  (${loaded.length} queries)`,
    );
    console.log(
      `beside / idle                     p50 ${(loadedP50 / idleP50).toFixed(2)}x, p95 ${
        (loadedP95 / idleP95).toFixed(2)
      }x  (target p95 <= 3x)`,
    );
  }
} finally {
  await syn.dispose();
  await Deno.remove(tmp, { recursive: true });
}
