/**
 * Memory per model: RSS of Synapse's two ORT threads, built as the model registry builds, next to
 * a bare onnxruntime-node process holding the same model. Every figure comes from its own child
 * process, all in one run, for the tiny fixture (fixtures/models/synapse-tiny-embed) and the
 * MiniLM-shaped encoder (fixtures/bench/minilm-shaped).
 *
 *   deno task bench:memory [--model tiny|minilm|all] [--threads N] [--idle-ms 500]
 *
 * Each child reports its RSS (`Deno.memoryUsage().rss`, after a full GC of its main isolate) at
 * each step; a step's cost is the RSS it added:
 *
 *   bare      one session with onnxruntime-node's defaults (arena, memory pattern) on the main
 *             thread, the lanes' thread count, serving what the lanes serve: the load-time
 *             warm-up shapes (lib/engines/ort/ort_engine.ts warmupShapes), one query and one bulk micro-batch
 *   synapse   the threads of lib/engines/ort/ort_threads.ts createOrtThreads(), whose workers start
 *             first (a load that fails starts a worker without a model); then `loaded`:
 *             lane.load() plus a query, as the registry does at boot; `+bulk`: one micro-batch
 *             on the bulk lane (`shared`: on the same session; `separate`: its own session loads
 *             on first use); `+quiet`: one query on the quiet session (what a query does while a
 *             bulk job runs). Both bulk layouts are measured, each in its own child; each child
 *             also times `--bulk-runs` bulk micro-batches (alternating [32,128], [16,256],
 *             [64,64]) for the shared layout's bulk throughput against the separate one's.
 *   near-max  a whole Synapse (tiny model) serving 300 embed.batch calls of 8 near-max-length
 *             texts; RSS (after a GC of the main isolate and malloc_trim) at call 50 and 300
 *
 * Both then load the same model again under a second name ("each further entry": what one more
 * configured model of that size costs). A third child repeats the synapse steps with the lanes'
 * idle times cut to `--idle-ms` and reports RSS once the lanes have released what idles (bulk
 * sessions, quiet sessions): what a model costs between bursts of work. Ratios divide figures
 * measured in this run, Synapse's over bare's; the target is synapse / bare <= 1.3 per entry
 * while a job runs beside queries (issue 22), bulk throughput shared / separate >= 0.95, and near-max
 * growth <= 5 %.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import type { OrtLoadSpec, OrtRow } from "../lib/engines/ort/ort_thread.ts";
import { createOrtThreads } from "../lib/engines/ort/ort_threads.ts";
import type { OrtBulkSession } from "../lib/engines/ort/ort_threads.ts";
import { threadsForKnob } from "../lib/models/model_registry.ts";
import { warmupShapes } from "../lib/engines/ort/ort_engine.ts";
import { nearMaxTexts } from "./corpus.ts";
import { V8_FLAGS } from "../scripts/v8_flags.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url)).replace(/\/$/, "");
const MODELS: Record<string, string> = {
  tiny: `${ROOT}/fixtures/models/synapse-tiny-embed`,
  minilm: `${ROOT}/fixtures/bench/minilm-shaped`,
};
const MAX_TOKENS = 512;
/** One query: 16 tokens. */
const QUERY: [number, number] = [1, 16];
/** One bulk micro-batch: 32 rows of 128 tokens (4096 tokens, the micro-batch budget). */
const BULK: [number, number] = [32, 128];

const { values: args } = parseArgs({
  args: Deno.args,
  options: {
    model: { type: "string", default: "all" },
    threads: { type: "string" },
    "idle-ms": { type: "string", default: "500" },
    "bulk-runs": { type: "string", default: "24" },
    "bulk-session": { type: "string", default: "shared" },
    child: { type: "string" },
    path: { type: "string" },
  },
  strict: true,
});
const threads = Number(args.threads ?? threadsForKnob("balanced"));
const idleMs = Number(args["idle-ms"]);
const bulkRuns = Number(args["bulk-runs"]);
/** Bulk micro-batches timed for throughput: the budget's shapes, alternating. */
const BULK_SHAPES: [number, number][] = [[32, 128], [16, 256], [64, 64]];

/** RSS in MB after a full GC of this isolate (children run with --expose-gc). */
function rssMb(): number {
  (globalThis as { gc?: () => void }).gc?.();
  return Deno.memoryUsage().rss / 2 ** 20;
}

function rows([n, len]: [number, number]): OrtRow[] {
  return Array.from({ length: n }, () => ({
    ids: new Int32Array(len).fill(7),
    typeIds: new Int32Array(len),
  }));
}

/** Steps of one child: name → RSS in MB after it. */
type Steps = Record<string, number>;

async function bareChild(path: string): Promise<Steps> {
  const steps: Steps = { start: rssMb() };
  const ort = await import("onnxruntime-node");
  // Initialise onnxruntime as the lanes' workers do before their first model (a failing load).
  await ort.InferenceSession.create(new Uint8Array(16)).catch(() => {});
  steps.runtime = rssMb();
  function feeds([n, len]: [number, number]): Record<string, InstanceType<typeof ort.Tensor>> {
    const size = n * len;
    return {
      input_ids: new ort.Tensor("int64", new BigInt64Array(size).fill(7n), [n, len]),
      attention_mask: new ort.Tensor("int64", new BigInt64Array(size).fill(1n), [n, len]),
      token_type_ids: new ort.Tensor("int64", new BigInt64Array(size), [n, len]),
    };
  }
  for (const entry of ["entry1", "entry2"]) {
    const session = await ort.InferenceSession.create(path, {
      executionProviders: ["cpu"],
      intraOpNumThreads: threads,
      interOpNumThreads: 1,
      graphOptimizationLevel: "all",
    });
    for (const shape of [...warmupShapes(MAX_TOKENS), QUERY, BULK]) {
      const out = await session.run(feeds(shape));
      for (const t of Object.values(out)) t.dispose();
    }
    steps[entry] = rssMb();
  }
  return steps;
}

async function synapseChild(
  path: string,
  idle: boolean,
  bulkSession: OrtBulkSession,
): Promise<Steps> {
  const steps: Steps = { start: rssMb() };
  const lanes = createOrtThreads({
    intraOpThreads: threads,
    bulkSession,
    ...(idle ? { quietTwinIdleMs: idleMs, bulkIdleUnloadMs: idleMs } : {}),
  });
  using lane = lanes.interactive;
  using bulkLane = lanes.bulk;
  const none = { modelRef: "none", path: `${ROOT}/bench/memory.ts` } as const;
  for (const l of [lane, bulkLane]) {
    await l.load({ ...none, task: "embed", pooling: "mean", normalize: true }).catch(() => {});
  }
  steps.runtime = rssMb();
  for (const entry of ["entry1", "entry2"]) {
    const spec: OrtLoadSpec = {
      modelRef: entry,
      path,
      task: "embed",
      pooling: "mean",
      normalize: true,
      warmupShapes: warmupShapes(MAX_TOKENS),
    };
    await lane.load(spec);
    bulkLane.register(spec);
    await lane.run(entry, rows(QUERY));
    steps[`${entry}.loaded`] = rssMb();
    await bulkLane.run(entry, rows(BULK));
    steps[`${entry}.bulk`] = rssMb();
    await lane.run(entry, rows(QUERY), { quiet: true });
    steps[`${entry}.quiet`] = rssMb();
  }
  if (idle) {
    // Wait for the releases: one session per entry left on the interactive lane, none on bulk.
    for (let i = 0; i < 600; i++) {
      if (lane.residentSessions === 2 && bulkLane.residentSessions === 0) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    steps.idle = rssMb();
  }
  return steps;
}

/**
 * Bulk throughput of both layouts in one process, their micro-batches interleaved (shared, then
 * separate, then shared …) so a change in the machine's load falls on both alike.
 */
async function throughputChild(path: string): Promise<Steps> {
  const layouts = (["shared", "separate"] as const).map((bulkSession) => ({
    bulkSession,
    threads: createOrtThreads({ intraOpThreads: threads, bulkSession }),
    ms: 0,
  }));
  const spec: OrtLoadSpec = {
    modelRef: "m",
    path,
    task: "embed",
    pooling: "mean",
    normalize: true,
    warmupShapes: warmupShapes(MAX_TOKENS),
  };
  const batches = BULK_SHAPES.map(rows);
  for (const l of layouts) {
    await l.threads.interactive.load(spec);
    l.threads.bulk.register(spec);
    for (const b of batches) await l.threads.bulk.run("m", b);
  }
  let tokens = 0;
  for (let i = 0; i < bulkRuns; i++) {
    const shape = BULK_SHAPES[i % BULK_SHAPES.length]!;
    for (const l of layouts) {
      const t0 = performance.now();
      await l.threads.bulk.run("m", batches[i % batches.length]!);
      l.ms += performance.now() - t0;
    }
    tokens += shape[0] * shape[1];
  }
  for (const l of layouts) {
    l.threads.bulk.dispose();
    l.threads.interactive.dispose();
  }
  return {
    shared: tokens / (layouts[0]!.ms / 1000),
    separate: tokens / (layouts[1]!.ms / 1000),
  };
}

/** Near-max batches (issue 22): RSS at call 50 and 300 of 8 near-max-length texts per embed.batch, on a whole Synapse. */
async function nearMaxChild(dir: string): Promise<Steps> {
  const { loadConfig } = await import("../lib/config/loader.ts");
  const { createSynapse } = await import("../lib/synapse.ts");
  const { mallocTrim } = await import("../ffi/malloc_trim.ts");
  const tmp = await Deno.makeTempDir({ prefix: "synapse-nearmax-" });
  const env = {
    XDG_DATA_HOME: `${tmp}/data`,
    XDG_CONFIG_HOME: `${tmp}/config`,
    HOME: tmp,
    SYNAPSE_CONFIG_JSON: JSON.stringify({
      preload_models: [{
        engine: "ort",
        model_path: `${dir}/model.onnx`,
        tokenizer_path: `${dir}/tokenizer.json`,
        config_path: `${dir}/config.json`,
        model_id: "m",
      }],
    }),
  };
  const { config } = loadConfig({ env, cwd: tmp });
  const syn = await createSynapse({ config, env, log: () => {} });
  const steps: Steps = {};
  try {
    const texts = nearMaxTexts();
    for (let call = 1; call <= 300; call++) {
      const o = await syn.call("embed.batch", { texts: texts(), truncate: true });
      if (o.kind !== "result") throw new Error(JSON.stringify(o.body).slice(0, 300));
      if (call === 50 || call === 300) {
        (globalThis as { gc?: () => void }).gc?.();
        mallocTrim();
        steps[`call${call}`] = Deno.memoryUsage().rss / 2 ** 20;
      }
    }
  } finally {
    await syn.dispose();
    await Deno.remove(tmp, { recursive: true });
  }
  return steps;
}

if (args.child !== undefined) {
  const bulkSession = args["bulk-session"] === "separate" ? "separate" : "shared";
  const steps = args.child === "bare"
    ? await bareChild(args.path!)
    : args.child === "nearmax"
    ? await nearMaxChild(args.path!)
    : args.child === "throughput"
    ? await throughputChild(args.path!)
    : await synapseChild(args.path!, args.child === "synapse-idle", bulkSession);
  console.log(JSON.stringify(steps));
  Deno.exit(0);
}

async function runChild(
  kind: "bare" | "synapse" | "synapse-idle" | "nearmax" | "throughput",
  path: string,
  bulkSession: OrtBulkSession = "shared",
): Promise<Steps> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--quiet",
      // The launcher's V8 flags (ck-synapse, field report F37), so the children
      // measure what the service runs.
      `--v8-flags=--expose-gc,${V8_FLAGS}`,
      "--allow-read",
      "--allow-write",
      "--allow-env",
      "--allow-ffi",
      "--allow-sys",
      // The near-max child boots a whole Synapse (its machine profile runs uname).
      "--allow-run",
      fileURLToPath(import.meta.url),
      "--child",
      kind,
      "--path",
      path,
      "--threads",
      String(threads),
      "--idle-ms",
      String(idleMs),
      "--bulk-runs",
      String(bulkRuns),
      "--bulk-session",
      bulkSession,
    ],
    stdout: "piped",
    stderr: "inherit",
  }).output();
  if (!out.success) throw new Error(`${kind} child failed (exit ${out.code})`);
  return JSON.parse(new TextDecoder().decode(out.stdout).trim().split("\n").at(-1)!);
}

const mb = (x: number): string => `${x.toFixed(1).padStart(7)} MB`;
const ratio = (a: number, b: number): string => `${(a / b).toFixed(2)}x`;

console.log(`intra-op threads ${threads}; RSS added per step, MB (2^20 bytes)`);
const wanted = args.model === "all" ? Object.keys(MODELS) : [args.model!];
for (const name of wanted) {
  const dir = MODELS[name];
  if (dir === undefined) throw new RangeError(`Unknown --model '${name}': use tiny, minilm or all`);
  const path = `${dir}/model.onnx`;
  try {
    await Deno.stat(path);
  } catch {
    console.log(`\n${name}: missing ${path} (run ./scripts/setup --bench); skipped`);
    continue;
  }
  const bare = await runChild("bare", path);
  const bareFirst = bare.entry1! - bare.runtime!;
  const bareNext = bare.entry2! - bare.entry1!;
  const bareBoth = bare.entry2! - bare.runtime!;
  console.log(`\n${name} (${(Deno.statSync(path).size / 2 ** 20).toFixed(1)} MB model file)`);
  for (const layout of ["shared", "separate"] as const) {
    const syn = await runChild("synapse", path, layout);
    const synIdle = await runChild("synapse-idle", path, layout);
    console.log(`  bulk session ${layout}`);
    console.log(
      `    runtime (no model)   bare ${mb(bare.runtime! - bare.start!)}   synapse lanes ${
        mb(syn.runtime! - syn.start!)
      }`,
    );
    for (
      const [label, from, at, bareCost] of [
        ["first entry", "runtime", "entry1", bareFirst],
        ["each further entry", "entry1.quiet", "entry2", bareNext],
      ] as const
    ) {
      console.log(`    ${label}: bare ${mb(bareCost)}`);
      let prev = syn[from]!;
      for (const step of ["loaded", "bulk", "quiet"]) {
        const v = syn[`${at}.${step}`]!;
        const total = v - syn[from]!;
        const what = step === "loaded"
          ? "loaded"
          : step === "bulk"
          ? "+bulk"
          : "+quiet (job + queries)";
        console.log(
          `      synapse ${what.padEnd(22)} ${mb(v - prev)}` +
            `   total ${mb(total)}   synapse / bare ${ratio(total, bareCost)}`,
        );
        prev = v;
      }
    }
    const idleTotal = synIdle.idle! - synIdle.runtime!;
    console.log(
      `    both entries, after the idle release (idle times ${idleMs} ms): bare ${mb(bareBoth)}` +
        `   synapse ${mb(idleTotal)}   synapse / bare ${ratio(idleTotal, bareBoth)}`,
    );
  }
  if (bulkRuns > 0) {
    const rate = await runChild("throughput", path);
    console.log(
      `  bulk throughput (${bulkRuns} micro-batches per layout, interleaved, nothing beside): shared ${
        rate.shared!.toFixed(0)
      } tok/s, separate ${rate.separate!.toFixed(0)} tok/s, shared / separate ${
        (rate.shared! / rate.separate!).toFixed(3)
      }  (target >= 0.95)`,
    );
  }
}

// Issue 22 (field report 37): repeated near-max batches must not grow RSS.
const nearMax = await runChild("nearmax", MODELS.tiny!);
console.log(
  `\nnear-max batches (tiny model, 300 embed.batch calls of 8 near-max texts): RSS call 50 ${
    mb(nearMax.call50!)
  }, call 300 ${mb(nearMax.call300!)}, growth ${
    ((nearMax.call300! / nearMax.call50! - 1) * 100).toFixed(1)
  } %  (target <= 5 %)`,
);
