/**
 * Mixed load: a durable bulk job alone, then the same job while a client issues one embed.query
 * every 50 ms (field report F8), on the MiniLM-shaped encoder, in-process.
 *
 *   deno task bench:mixed [--quick] [--size N] [--bulk-session shared|shared_low_priority|separate]
 *
 * Prints: bulk passages/s solo and under load (and their ratio, issue 22 target ≥ 0.75), embed.query
 * p50 idle and p50/p95 under load (target: loaded p95 ≤ 2 × idle p50), and how long a `queue_full`
 * refusal takes to come back in-process (target ≤ 1 ms). `--bulk-session` picks where bulk ORT work
 * runs (lib/engines/ort/ort_threads.ts): on the session queries use (`shared`, the default) or on a
 * bulk thread of its own (`separate`, the layout before issue 22).
 *
 * @module
 */
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import { buildCorpus } from "./corpus.ts";
import { createSynapse } from "../lib/synapse.ts";
import type { Synapse } from "../lib/synapse.ts";
import { loadConfig } from "../lib/config/loader.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url)).replace(/\/$/, "");
const MODEL_DIR = `${ROOT}/fixtures/bench/minilm-shaped`;

const { values: args } = parseArgs({
  args: Deno.args,
  options: {
    quick: { type: "boolean", default: false },
    size: { type: "string" },
    "bulk-session": { type: "string", default: "shared" },
  },
  strict: true,
});
const size = Number(args.size ?? (args.quick ? 600 : 10_000));

function percentile(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))] ?? NaN;
}

const corpus = await buildCorpus({ root: ROOT, size });
const queries = (await buildCorpus({ root: ROOT, size: 64, seed: 99 })).map((t) =>
  t.split(" ").slice(0, 8).join(" ")
);
const tmp = await Deno.makeTempDir({ prefix: "synapse-mixed-" });
const env = {
  XDG_DATA_HOME: `${tmp}/data`,
  XDG_CONFIG_HOME: `${tmp}/config`,
  HOME: tmp,
  SYNAPSE_CONFIG_JSON: JSON.stringify({
    preload_models: [{
      engine: "ort",
      model_path: MODEL_DIR,
      tokenizer_path: `${MODEL_DIR}/tokenizer.json`,
      model_id: "minilm-shaped",
    }],
  }),
};
const { config } = loadConfig({ env, cwd: tmp });
const bulkSession = args["bulk-session"];
if (
  bulkSession !== "shared" && bulkSession !== "shared_low_priority" && bulkSession !== "separate"
) {
  throw new RangeError(
    `Unknown --bulk-session '${bulkSession}': use shared, shared_low_priority or separate`,
  );
}
const syn = await createSynapse({ config, env, ortBulkSession: bulkSession });

async function runJob(s: Synapse, key: string, texts = corpus): Promise<number> {
  const t0 = performance.now();
  const o = await s.call("embed.batch", { texts, request_key: key, truncate: true });
  if (o.kind !== "result") throw new Error(JSON.stringify(o.body).slice(0, 300));
  const jobId = (o.body.result as { job_id: string }).job_id;
  while (true) {
    const r = await s.call("embed.result", { job_id: jobId });
    const st = (r.body as { result: { state: string } }).result.state;
    if (st === "done") break;
    if (st !== "queued" && st !== "running") throw new Error(`job ended ${st}`);
    await new Promise((res) => setTimeout(res, 100));
  }
  return (performance.now() - t0) / 1000;
}

async function query(i: number): Promise<number> {
  const t0 = performance.now();
  const o = await syn.call("embed.query", { text: queries[i % queries.length]! });
  if (o.kind !== "result") throw new Error(JSON.stringify(o.body).slice(0, 300));
  return performance.now() - t0;
}

// Idle latency (warm both lanes first).
await runJob(syn, "warm-up-bulk-lane", corpus.slice(0, 100));
const idle: number[] = [];
for (let i = 0; i < 200; i++) {
  idle.push(await query(i));
  await new Promise((r) => setTimeout(r, 5));
}
const idleP50 = percentile(idle, 0.5);

const solo = await runJob(syn, "solo");
console.log(
  `corpus ${corpus.length} passages; bulk solo: ${solo.toFixed(1)} s, ${
    (corpus.length / solo).toFixed(1)
  } passages/s`,
);

// Loaded: one embed.query every 50 ms while the job runs.
const loaded: number[] = [];
let stop = false;
const client = (async () => {
  let i = 0;
  while (!stop) {
    const started = performance.now();
    loaded.push(await query(i++));
    const wait = 50 - (performance.now() - started);
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
  }
})();
const underLoad = await runJob(syn, "loaded");
stop = true;
await client;
console.log(
  `bulk under load: ${underLoad.toFixed(1)} s, ${
    (corpus.length / underLoad).toFixed(1)
  } passages/s`,
);

// queue_full round trip: the byte budget is held, so every call is refused at admission.
const held = syn.admission.admit({
  bytes: syn.admission.limits.byteBudget,
  deadlineMs: 60_000,
  maxQueueMs: 60_000,
  queueClass: "bulk",
});
const refusals: number[] = [];
for (let i = 0; i < 2000; i++) {
  const t0 = performance.now();
  const o = await syn.call("embed.query", { text: "refuse me" });
  refusals.push(performance.now() - t0);
  if (o.kind !== "semantic") throw new Error("expected queue_full");
}
held.release();
await syn.dispose();
await Deno.remove(tmp, { recursive: true });

const loadedP50 = percentile(loaded, 0.5), loadedP95 = percentile(loaded, 0.95);
console.log(`\nbulk session ${bulkSession}`);
console.log(`embed.query idle p50            ${idleP50.toFixed(2)} ms`);
console.log(
  `embed.query under load p50/p95  ${loadedP50.toFixed(2)} / ${
    loadedP95.toFixed(2)
  } ms  (${loaded.length} queries)`,
);
console.log(
  `loaded p95 / idle p50           ${(loadedP95 / idleP50).toFixed(2)}x  (target <= 2)`,
);
console.log(`bulk under load / solo          ${(solo / underLoad).toFixed(3)}  (target >= 0.75)`);
console.log(
  `queue_full refusal p50/p99      ${percentile(refusals, 0.5).toFixed(3)} / ${
    percentile(refusals, 0.99).toFixed(3)
  } ms  (target <= 1 ms)`,
);
