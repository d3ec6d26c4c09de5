/**
 * Per-stage query breakdown: where one in-process `embed.query` on the MiniLM-shaped model spends
 * its time, beside a raw single-sequence onnxruntime-node run measured in the same process.
 *
 *   deno task bench:query [--runs N]
 *
 * (also printed by `deno task bench:embed`, which imports {@link runQueryStages}). The stages are
 * the marks of lib/log/stage_marks.ts, off in a server and switched on here:
 *
 *   params     envelope params validated (zod)
 *   resolve    model resolution, space, prompt, item checks
 *   admit      admission (byte budget, predicted start delay)
 *   tokenize   tokenizing (inline under `tokenize.inline_max_chars`, else the pool) and hashing
 *   schedule   scheduler submit → dispatch (a microtask; no timer window)
 *   plan       micro-batch plan
 *   pack       packing ids into transferable buffers
 *   hop        postMessage to the ORT Worker and back, both event-loop turns (round trip minus
 *              the worker's own time)
 *   tensors    worker: Int32 → BigInt64 tensors
 *   session    worker: session.run
 *   pool       worker: pooling and normalising
 *   collect    row outputs on the lane, pipeline settle
 *   settle     scheduler settle, back in the op
 *   envelope   vector line, hashes, envelope (fingerprint, provenance)
 *   dispatch   back through the dispatcher and the call scope
 *   metrics    the call's metrics row
 *   json       JSON.stringify of the answer body (what a door sends)
 *
 * Each path runs alone, in alternating blocks with a pause between them (onnxruntime's spinning
 * threads of one path are idle when the other runs). Ratios of one run only.
 *
 * @module
 */
import { parseArgs } from "node:util";
import process from "node:process";
import { fileURLToPath } from "node:url";
import * as ort from "onnxruntime-node";
import { Tokenizer } from "@huggingface/tokenizers";
import { createSynapse } from "../lib/synapse.ts";
import { loadConfig } from "../lib/config/loader.ts";
import { threadsForKnob } from "../lib/models/model_registry.ts";
import { setStageSink } from "../lib/log/stage_marks.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url)).replace(/\/$/, "");
const MODEL_DIR = `${ROOT}/fixtures/bench/minilm-shaped`;

/** Stages in call order (see the module header). */
const STAGES = [
  "params",
  "resolve",
  "admit",
  "tokenize",
  "schedule",
  "plan",
  "pack",
  "hop",
  "tensors",
  "session",
  "pool",
  "collect",
  "settle",
  "envelope",
  "dispatch",
  "metrics",
  "json",
] as const;

/** Worker spans, by their stage_marks names. */
const SPANS: Record<string, (typeof STAGES)[number]> = {
  "worker.tensors": "tensors",
  "worker.session_run": "session",
  "worker.pool": "pool",
};

/** Options of {@link runQueryStages}. */
export interface QueryStagesOptions {
  /** Measured calls per path. @default 400 */
  runs?: number;
  /** Calls per alternating block. @default 50 */
  block?: number;
  /** Texts to embed, cycled. @default 16 short texts of 8–16 tokens */
  texts?: readonly string[];
}

/** What {@link runQueryStages} measured, ms. */
export interface QueryStagesResult {
  /** p50 and p99 per stage. */
  stages: Record<string, { p50: number; p99: number }>;
  /** The whole in-process embed.query (without `json`). */
  total: { p50: number; p99: number };
  /** The raw single-sequence run (tensors + session.run + pooling). */
  raw: { p50: number; p99: number };
  /** Process CPU time per call (all threads, user + system), ms. */
  cpuMs: { query: number; raw: number };
}

function percentile(xs: readonly number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))] ?? NaN;
}

const DEFAULT_TEXTS = [
  "how do I reset my password",
  "the quick brown fox jumps over the lazy dog",
  "permission is hereby granted free of charge to any person",
  "what is the capital of France and why",
  "terms and conditions for copying distribution and modification",
  "a short query about vector search",
  "licensed under the Apache License version two",
  "embedding models map text to vectors of numbers",
  "where can I find the source code of this program",
  "redistribution and use in source and binary forms",
  "best practices for local inference on a laptop",
  "the software is provided as is without warranty",
  "tokenize this sentence into word pieces please",
  "mean pooling over the last hidden state",
  "how many tokens does this text have",
  "you should have received a copy of the license",
];

/**
 * Measures the breakdown and prints it as a table.
 *
 * @returns The p50/p99 per stage, the total and the raw run, ms.
 */
export async function runQueryStages(options: QueryStagesOptions = {}): Promise<QueryStagesResult> {
  const runs = options.runs ?? 400;
  const block = options.block ?? 50;
  const texts = options.texts ?? DEFAULT_TEXTS;
  const threads = threadsForKnob("balanced");
  const tok = new Tokenizer(
    JSON.parse(await Deno.readTextFile(`${MODEL_DIR}/tokenizer.json`)),
    JSON.parse(await Deno.readTextFile(`${MODEL_DIR}/tokenizer_config.json`)),
  );
  const session = await ort.InferenceSession.create(`${MODEL_DIR}/model.onnx`, {
    executionProviders: ["cpu"],
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    graphOptimizationLevel: "all",
  });
  /** The raw path: one sequence, int64 tensors, session.run, mean pooling + L2. */
  async function rawRun(ids: number[]): Promise<Float32Array> {
    const seq = ids.length;
    const idT = new BigInt64Array(seq);
    const mask = new BigInt64Array(seq);
    for (let t = 0; t < seq; t++) {
      idT[t] = BigInt(ids[t]!);
      mask[t] = 1n;
    }
    const out = await session.run({
      input_ids: new ort.Tensor("int64", idT, [1, seq]),
      attention_mask: new ort.Tensor("int64", mask, [1, seq]),
      token_type_ids: new ort.Tensor("int64", new BigInt64Array(seq), [1, seq]),
    });
    const h = out.last_hidden_state!.data as Float32Array;
    const dims = h.length / seq;
    const v = new Float32Array(dims);
    for (let t = 0; t < seq; t++) for (let d = 0; d < dims; d++) v[d]! += h[t * dims + d]!;
    let n = 0;
    for (let d = 0; d < dims; d++) n += (v[d]! /= seq) ** 2;
    n = Math.sqrt(n);
    for (let d = 0; d < dims; d++) v[d]! /= n;
    return v;
  }
  const rawIds = texts.map((t) => tok.encode(t).ids);

  const tmp = await Deno.makeTempDir({ prefix: "synapse-bench-stages-" });
  const env = {
    XDG_DATA_HOME: `${tmp}/data`,
    XDG_CONFIG_HOME: `${tmp}/config`,
    HOME: tmp,
    SYNAPSE_CONFIG_JSON: JSON.stringify({
      knob: "balanced",
      preload_models: [{
        engine: "ort",
        model_path: `${MODEL_DIR}/model.onnx`,
        tokenizer_path: `${MODEL_DIR}/tokenizer.json`,
        config_path: `${MODEL_DIR}/config.json`,
        model_id: "minilm-shaped",
        pooling: "mean",
        normalize: true,
      }],
    }),
  };
  const per: Record<string, number[]> = Object.fromEntries(STAGES.map((s) => [s, []]));
  const totals: number[] = [];
  const raws: number[] = [];
  // Process CPU time (all threads, user + system) per call of each path, ms: spinning threads
  // show here even when wall time hides them.
  let rawCpuUs = 0;
  let synCpuUs = 0;
  const cpuUs = () => {
    const u = process.cpuUsage();
    return u.user + u.system;
  };
  try {
    const { config } = loadConfig({ env, cwd: tmp });
    await using syn = await createSynapse({ config, env, log: () => {} });
    for (let i = 0; i < 20; i++) {
      await rawRun(rawIds[i % rawIds.length]!);
      const o = await syn.call("embed.query", { text: texts[i % texts.length]! });
      if (o.kind !== "result") throw new Error(JSON.stringify(o.body));
    }
    let marks: [string, number][] = [];
    const spans: [string, number][] = [];
    setStageSink({
      mark: (stage, at) => void marks.push([stage, at]),
      span: (stage, ms) => void spans.push([stage, ms]),
    });
    const settle = () => new Promise((r) => setTimeout(r, 50));
    try {
      for (let b = 0; b < Math.ceil(runs / block); b++) {
        await settle();
        let c0 = cpuUs();
        for (let i = 0; i < block + 5; i++) {
          if (i === 5) c0 = cpuUs();
          const ids = rawIds[(b * block + i) % rawIds.length]!;
          const t0 = performance.now();
          await rawRun(ids);
          if (i >= 5) raws.push(performance.now() - t0);
        }
        // The block's spinning threads keep burning after its last call: counted to the settle.
        await settle();
        rawCpuUs += cpuUs() - c0;
        c0 = cpuUs();
        for (let i = 0; i < block + 5; i++) {
          if (i === 5) c0 = cpuUs();
          const text = texts[(b * block + i) % texts.length]!;
          marks = [];
          spans.length = 0;
          const t0 = performance.now();
          const o = await syn.call("embed.query", { text });
          const t1 = performance.now();
          JSON.stringify(o.body);
          const t2 = performance.now();
          if (o.kind !== "result") throw new Error(JSON.stringify(o.body));
          if (i < 5) continue;
          totals.push(t1 - t0);
          const got = new Map<string, number>();
          let prev = t0;
          for (const [stage, at] of marks) {
            got.set(stage, (got.get(stage) ?? 0) + at - prev);
            prev = at;
          }
          got.set("json", t2 - t1);
          let worker = 0;
          for (const [name, ms] of spans) {
            const stage = SPANS[name];
            if (stage === undefined) continue;
            got.set(stage, (got.get(stage) ?? 0) + ms);
            worker += ms;
          }
          // The "reply" mark closes the round trip; the hop is what the worker did not spend.
          got.set("hop", (got.get("reply") ?? 0) - worker);
          for (const s of STAGES) per[s]!.push(got.get(s) ?? 0);
        }
        await settle();
        synCpuUs += cpuUs() - c0;
      }
    } finally {
      setStageSink(undefined);
    }
  } finally {
    await session.release();
    await Deno.remove(tmp, { recursive: true });
  }

  const stages: QueryStagesResult["stages"] = {};
  console.log(
    `\nper-stage query breakdown (embed.query in-process, ${totals.length} calls; each path alone):`,
  );
  console.log(`  ${"stage".padEnd(10)} ${"p50 ms".padStart(8)} ${"p99 ms".padStart(8)}`);
  for (const s of STAGES) {
    const xs = per[s]!;
    stages[s] = { p50: percentile(xs, 0.5), p99: percentile(xs, 0.99) };
    console.log(
      `  ${s.padEnd(10)} ${stages[s].p50.toFixed(3).padStart(8)} ${
        stages[s].p99.toFixed(3).padStart(8)
      }`,
    );
  }
  const total = { p50: percentile(totals, 0.5), p99: percentile(totals, 0.99) };
  const raw = { p50: percentile(raws, 0.5), p99: percentile(raws, 0.99) };
  const line = (name: string, x: { p50: number; p99: number }) =>
    console.log(
      `  ${name.padEnd(10)} ${x.p50.toFixed(3).padStart(8)} ${x.p99.toFixed(3).padStart(8)}`,
    );
  line("total", total);
  line("raw run", raw);
  const cpuPerCall = (us: number, n: number) => (us / 1000 / n).toFixed(2);
  console.log(
    `  process CPU per call (all threads, incl. ${50} ms after each block): embed.query ${
      cpuPerCall(synCpuUs, totals.length)
    } ms, raw run ${cpuPerCall(rawCpuUs, raws.length)} ms`,
  );
  console.log(
    `  overhead p50 ${
      (total.p50 - raw.p50).toFixed(3)
    } ms (target <= 0.5 ms); embed.query p99/p50 ${
      (total.p99 / total.p50).toFixed(2)
    } (target <= 2); raw p99/p50 ${(raw.p99 / raw.p50).toFixed(2)}`,
  );
  return {
    stages,
    total,
    raw,
    cpuMs: { query: synCpuUs / 1000 / totals.length, raw: rawCpuUs / 1000 / raws.length },
  };
}

if (import.meta.main) {
  const { values: args } = parseArgs({
    args: Deno.args,
    options: { runs: { type: "string", default: "400" } },
    strict: true,
  });
  try {
    await Deno.stat(`${MODEL_DIR}/model.onnx`);
  } catch {
    console.error(`missing ${MODEL_DIR}: run ./scripts/setup --bench first`);
    Deno.exit(2);
  }
  await runQueryStages({ runs: Number(args.runs) });
}
