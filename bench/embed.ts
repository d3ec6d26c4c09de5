/**
 * Embedding throughput and latency, Synapse against the raw libraries, all in one run on the
 * MiniLM-shaped encoder (fixtures/bench/minilm-shaped: the exact shape of all-MiniLM-L6-v2 with
 * random weights) and a corpus of real text with a realistic length mix (bench/corpus.ts).
 *
 *   deno task bench:embed [--quick] [--size N]
 *
 * Prints passages/s and tokens/s (real tokens, specials included) for:
 *   raw-b32      onnxruntime-node, batches of 32 in corpus order (padded to each batch's longest)
 *   raw-sorted   onnxruntime-node, length-sorted micro-batches under Synapse's token budget
 *   synapse      embed.batch in-process (one call; inline limits raised for the run, see below)
 *   synapse-http embed.batch over POST /v1/ops/embed.batch to a `ck-synapse serve` process
 *   tjs-b32      transformers.js feature-extraction pipeline, batch 32
 *   raw-sorted-rounds, raw-int8-sorted, synapse-int8: three rounds, each raw-sorted again (fp32),
 *                    onnxruntime-node on the int8 file (fixtures/bench/minilm-shaped-int8, the
 *                    quantizer's output) with the same length-sorted micro-batches, and
 *                    embed.batch in-process on the int8 lane (certified by the probe first);
 *                    each row the median round
 * then the ratios, embed.query p50/p99 against a raw single-sequence run, and the int8 lane's
 * probe mean cosine against fp32 and its embed.query p50 against the raw fp32 single run, and the
 * per-stage query breakdown of bench/query_stages.ts (`--skip stages` leaves it out).
 *
 * Jobs arrive in step 2; until then one inline call carries the corpus, so the run raises
 * `inline.max_items` / `inline.max_tokens` in its config (an operator's setting, not a code path).
 *
 * @module
 */
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import * as ort from "onnxruntime-node";
import { Tokenizer } from "@huggingface/tokenizers";
import { buildCorpus } from "./corpus.ts";
import { createSynapse } from "../lib/synapse.ts";
import { loadConfig } from "../lib/config/loader.ts";
import { threadsForKnob } from "../lib/models/model_registry.ts";
import { ORT_MICRO_BATCH } from "../lib/engines/ort/ort_engine.ts";
import { runQueryStages } from "./query_stages.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url)).replace(/\/$/, "");
const MODEL_DIR = `${ROOT}/fixtures/bench/minilm-shaped`;
const INT8_DIR = `${ROOT}/fixtures/bench/minilm-shaped-int8`;
const MAX_TOKENS = 512;

const { values: args } = parseArgs({
  args: Deno.args,
  options: {
    quick: { type: "boolean", default: false },
    size: { type: "string" },
    skip: { type: "string", default: "" },
  },
  strict: true,
});
const size = Number(args.size ?? (args.quick ? 120 : 2000));
const queryRuns = args.quick ? 80 : 400;
const skip = new Set(args.skip!.split(",").filter(Boolean));

interface Row {
  name: string;
  seconds: number;
  passages: number;
  tokens: number;
}

const rows: Row[] = [];
function report(name: string, seconds: number, passages: number, tokens: number): void {
  rows.push({ name, seconds, passages, tokens });
  console.log(
    `${name.padEnd(17)} ${seconds.toFixed(2).padStart(7)} s  ${
      (passages / seconds).toFixed(1).padStart(8)
    } passages/s  ${(tokens / seconds).toFixed(0).padStart(7)} tokens/s`,
  );
}

function percentile(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))]!;
}

// ---------- corpus and tokenization ----------
try {
  await Deno.stat(`${MODEL_DIR}/model.onnx`);
} catch {
  console.error(`missing ${MODEL_DIR}: run ./scripts/setup --bench first`);
  Deno.exit(2);
}
const corpus = await buildCorpus({ root: ROOT, size });
const tok = new Tokenizer(
  JSON.parse(await Deno.readTextFile(`${MODEL_DIR}/tokenizer.json`)),
  JSON.parse(await Deno.readTextFile(`${MODEL_DIR}/tokenizer_config.json`)),
);
/** Raw-path tokenization: with specials, cut to MAX_TOKENS keeping [SEP]. */
function rawIds(text: string): number[] {
  const ids = tok.encode(text).ids;
  if (ids.length <= MAX_TOKENS) return ids;
  return [...ids.slice(0, MAX_TOKENS - 1), ids[ids.length - 1]!];
}
const lengths = corpus.map((t) => rawIds(t).length);
const totalTokens = lengths.reduce((a, b) => a + b, 0);
const threads = threadsForKnob("balanced");
{
  const sorted = [...lengths].sort((a, b) => a - b);
  let padded32 = 0;
  for (let i = 0; i < lengths.length; i += 32) {
    const b = lengths.slice(i, i + 32);
    padded32 += Math.max(...b) * b.length;
  }
  console.log(
    `corpus: ${corpus.length} passages, ${totalTokens} tokens (p50 ${
      percentile(sorted, 0.5)
    }, p90 ${percentile(sorted, 0.9)}, max ${sorted.at(-1)}); batch-32 corpus order pads to ${
      (padded32 / totalTokens).toFixed(2)
    }x`,
  );
  console.log(`model: ${MODEL_DIR} (MiniLM-L6 shape, random weights); intra-op threads ${threads}`);
}

// ---------- raw onnxruntime-node ----------
const session = await ort.InferenceSession.create(`${MODEL_DIR}/model.onnx`, {
  executionProviders: ["cpu"],
  intraOpNumThreads: threads,
  interOpNumThreads: 1,
  graphOptimizationLevel: "all",
});

async function rawBatch(
  batch: number[][],
  s: ort.InferenceSession = session,
): Promise<Float32Array[]> {
  const rowsN = batch.length;
  const seq = Math.max(...batch.map((b) => b.length));
  const ids = new BigInt64Array(rowsN * seq);
  const mask = new BigInt64Array(rowsN * seq);
  batch.forEach((b, r) => {
    b.forEach((id, t) => {
      ids[r * seq + t] = BigInt(id);
      mask[r * seq + t] = 1n;
    });
  });
  const out = await s.run({
    input_ids: new ort.Tensor("int64", ids, [rowsN, seq]),
    attention_mask: new ort.Tensor("int64", mask, [rowsN, seq]),
    token_type_ids: new ort.Tensor("int64", new BigInt64Array(rowsN * seq), [rowsN, seq]),
  });
  const h = out.last_hidden_state!.data as Float32Array;
  const dims = h.length / (rowsN * seq);
  return batch.map((b, r) => {
    const v = new Float32Array(dims);
    for (let t = 0; t < b.length; t++) {
      for (let d = 0; d < dims; d++) v[d]! += h[(r * seq + t) * dims + d]!;
    }
    let n = 0;
    for (let d = 0; d < dims; d++) n += (v[d]! /= b.length) ** 2;
    n = Math.sqrt(n);
    for (let d = 0; d < dims; d++) v[d]! /= n;
    return v;
  });
}

await rawBatch([rawIds("warm up the session")]);

if (!skip.has("raw-b32")) {
  const t0 = performance.now();
  for (let i = 0; i < corpus.length; i += 32) {
    await rawBatch(corpus.slice(i, i + 32).map(rawIds));
  }
  report("raw-b32", (performance.now() - t0) / 1000, corpus.length, totalTokens);
}

/** The corpus in length-sorted micro-batches under Synapse's token budget; vectors in order. */
async function rawSorted(s: ort.InferenceSession): Promise<Float32Array[]> {
  const all = corpus.map(rawIds);
  const order = all.map((_, i) => i).sort((a, b) => all[a]!.length - all[b]!.length);
  const out: Float32Array[] = new Array(all.length);
  let batch: number[] = [];
  const flush = async () => {
    const vs = await rawBatch(batch.map((i) => all[i]!), s);
    batch.forEach((i, j) => out[i] = vs[j]!);
    batch = [];
  };
  for (const i of order) {
    const ids = all[i]!;
    if (
      batch.length > 0 &&
      (batch.length + 1 > ORT_MICRO_BATCH.maxSequences ||
        (batch.length + 1) * ids.length > ORT_MICRO_BATCH.maxMicroBatchTokens)
    ) {
      await flush();
    }
    batch.push(i);
  }
  if (batch.length) await flush();
  return out;
}

let fp32Vectors: Float32Array[] | undefined;
if (!skip.has("raw-sorted")) {
  const t0 = performance.now();
  fp32Vectors = await rawSorted(session);
  report("raw-sorted", (performance.now() - t0) / 1000, corpus.length, totalTokens);
}

// ---------- raw onnxruntime-node on the int8 file ----------
const int8 = !skip.has("int8");
if (int8) {
  try {
    await Deno.stat(`${INT8_DIR}/model.onnx`);
  } catch {
    console.error(`missing ${INT8_DIR}: run ./scripts/setup --bench first`);
    Deno.exit(2);
  }
}
let int8Session: ort.InferenceSession | undefined;
if (int8) {
  int8Session = await ort.InferenceSession.create(`${INT8_DIR}/model.onnx`, {
    executionProviders: ["cpu"],
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    graphOptimizationLevel: "all",
  });
  await rawBatch([rawIds("warm up the session")], int8Session);
}

const shortTexts = Array.from(
  { length: 16 },
  (_, i) => corpus[i * 7]!.split(" ").slice(0, 6 + (i % 6)).join(" "),
);

// ---------- Synapse in-process ----------
const benchConfig = {
  knob: "balanced",
  inline: { max_items: 1_000_000, max_tokens: 1_000_000_000, byte_budget: 1 << 30 },
  preload_models: [{
    engine: "ort",
    model_path: `${MODEL_DIR}/model.onnx`,
    tokenizer_path: `${MODEL_DIR}/tokenizer.json`,
    config_path: `${MODEL_DIR}/config.json`,
    model_id: "minilm-shaped",
    pooling: "mean",
    normalize: true,
  }],
};
const tmp = await Deno.makeTempDir({ prefix: "synapse-bench-" });
const env = {
  XDG_DATA_HOME: `${tmp}/data`,
  XDG_CONFIG_HOME: `${tmp}/config`,
  HOME: tmp,
  SYNAPSE_CONFIG_JSON: JSON.stringify(benchConfig),
};
// Latency: the raw single-sequence run and embed.query interleaved, call for call, so both see
// the same machine conditions.
const rawLat: number[] = [];
const synLat: number[] = [];
// And each path alone: alternating blocks of calls, so one path's spinning intra-op threads are
// idle (past their spin window) while the other runs — two spinning pools on 2 cores slow each
// other, which the interleaved numbers include.
const rawAlone: number[] = [];
const synAlone: number[] = [];
// Routing by fingerprint (issue 19): embed.query with and without target_fingerprint, call for
// call.
const plainLat: number[] = [];
const routedLat: number[] = [];
const BLOCK = 50;

/**
 * Times each path alone: alternating blocks of {@link BLOCK} calls per path (5 untimed warm-up
 * calls first, a 50 ms pause before each block, so onnxruntime's threads of one path are idle
 * while the other runs), until `runs` calls per path are timed. Each path's `prepare` runs untimed
 * (the raw paths tokenize there) and returns the call that is timed. Latencies (ms) go to each
 * path's array, in call order.
 */
async function alternatingBlocks(
  runs: number,
  ...paths: [number[], (text: string) => () => Promise<unknown>][]
): Promise<void> {
  const settle = () => new Promise((r) => setTimeout(r, 50));
  for (let b = 0; b < Math.ceil(runs / BLOCK); b++) {
    for (const [out, prepare] of paths) {
      await settle();
      for (let i = 0; i < BLOCK + 5; i++) {
        const call = prepare(shortTexts[(b * BLOCK + i) % shortTexts.length]!);
        const t0 = performance.now();
        await call();
        if (i >= 5) out.push(performance.now() - t0);
      }
    }
  }
}
{
  const { config } = loadConfig({ env, cwd: tmp });
  await using syn = await createSynapse({ config, env });
  const warm = await syn.call("embed.query", { text: "warm up" });
  if (warm.kind !== "result") throw new Error(JSON.stringify(warm.body));
  const served = (warm.body.result as { fingerprint: string }).fingerprint;
  if (!skip.has("synapse")) {
    const t0 = performance.now();
    const out = await syn.call("embed.batch", {
      texts: corpus,
      truncate: true,
      deadline_ms: 3_600_000,
    });
    const s = (performance.now() - t0) / 1000;
    if (out.kind !== "result") throw new Error(JSON.stringify(out.body));
    const r = out.body.result as { real_token_counts: number[] };
    report("synapse", s, corpus.length, r.real_token_counts.reduce((a, b) => a + b, 0));
  }
  for (let i = 0; i < queryRuns + 20; i++) {
    const text = shortTexts[i % shortTexts.length]!;
    let t0 = performance.now();
    await rawBatch([rawIds(text)]);
    const raw = performance.now() - t0;
    t0 = performance.now();
    const o = await syn.call("embed.query", { text });
    const viaSynapse = performance.now() - t0;
    if (o.kind !== "result") throw new Error(JSON.stringify(o.body));
    if (i >= 20) { // the first 20 pairs warm both paths
      rawLat.push(raw);
      synLat.push(viaSynapse);
    }
  }
  await alternatingBlocks(
    queryRuns,
    [rawAlone, (text) => {
      const ids = rawIds(text);
      return () => rawBatch([ids]);
    }],
    [synAlone, (text) => async () => {
      const o = await syn.call("embed.query", { text });
      if (o.kind !== "result") throw new Error(JSON.stringify(o.body));
    }],
  );
  for (let i = 0; i < queryRuns + 20; i++) {
    const text = shortTexts[i % shortTexts.length]!;
    // Alternate which goes first, so neither always follows the other.
    const order = i % 2 === 0 ? [false, true] : [true, false];
    for (const routed of order) {
      const t0 = performance.now();
      const o = await syn.call(
        "embed.query",
        routed ? { text, target_fingerprint: served } : { text },
      );
      const ms = performance.now() - t0;
      if (o.kind !== "result") throw new Error(JSON.stringify(o.body));
      if (i >= 20) (routed ? routedLat : plainLat).push(ms);
    }
  }
}
// ---------- Synapse in-process on the int8 lane ----------
// Its own instance: the fp32 model (the reference) and the int8 file declaring it; the probe
// certifies the int8 lane first (its mean cosine against fp32 is the figure printed below).
let int8Cosine: number | undefined;
let int8CorpusCosine: number | undefined;
const int8Alone: number[] = [];
const fp32AloneForInt8: number[] = [];
const rawInt8Alone: number[] = [];
if (int8) {
  const int8Config = {
    ...benchConfig,
    certification: "require",
    preload_models: [
      ...benchConfig.preload_models,
      {
        ...benchConfig.preload_models[0]!,
        model_id: "minilm-shaped-int8",
        model_path: `${INT8_DIR}/model.onnx`,
        reference_model: "minilm-shaped",
        quant: "int8",
      },
    ],
  };
  const int8Tmp = await Deno.makeTempDir({ prefix: "synapse-bench-int8-" });
  const int8Env = {
    XDG_DATA_HOME: `${int8Tmp}/data`,
    XDG_CONFIG_HOME: `${int8Tmp}/config`,
    HOME: int8Tmp,
    SYNAPSE_CONFIG_JSON: JSON.stringify(int8Config),
  };
  const { config } = loadConfig({ env: int8Env, cwd: int8Tmp });
  await using syn = await createSynapse({ config, env: int8Env });
  const job = await syn.call("probe.start", { models: ["minilm-shaped-int8"] });
  if (job.kind !== "result") throw new Error(JSON.stringify(job.body));
  const jobId = (job.body.result as { job_id: string }).job_id;
  for (;;) {
    const st = await syn.call("probe.status", { job_id: jobId });
    if (st.kind !== "result") throw new Error(JSON.stringify(st.body));
    const state = (st.body.result as { state: string }).state;
    if (state === "done" || state.startsWith("failed")) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const list = await syn.call("models.list", {});
  if (list.kind !== "result") throw new Error(JSON.stringify(list.body));
  // deno-lint-ignore no-explicit-any
  const row = (list.body.result as any).models.find((m: any) =>
    m.model_id === "minilm-shaped-int8"
  );
  const parity = row?.certification?.checks?.find((c: { id: string }) =>
    c.id === "reference_parity_mean_cosine"
  );
  int8Cosine = parity?.value;
  console.log(
    `int8 lane: ${row?.certification?.status} by the probe, mean cosine vs fp32 ${
      int8Cosine?.toFixed(6)
    } (bar 0.999), quant ${row?.quant}, dtype ${row?.dtype}`,
  );
  const warm = await syn.call("embed.query", { model: "minilm-shaped-int8", text: "warm up" });
  if (warm.kind !== "result") throw new Error(JSON.stringify(warm.body));
  // Rounds of raw fp32, raw int8 and Synapse int8 one after the other, each row its median
  // round: the machine's load moves between rows far apart in a run, less within a round.
  const ROUNDS = 3;
  const times: Record<"fp32" | "rawInt8" | "synInt8", number[]> = {
    fp32: [],
    rawInt8: [],
    synInt8: [],
  };
  let r: { real_token_counts: number[]; vectors: { vector: number[] }[] } | undefined;
  // A pause before each row lets the previous session's spinning intra-op threads go idle (past
  // their spin window): two spinning pools on 2 cores slow each other.
  const pause = () => new Promise((r) => setTimeout(r, 50));
  for (let round = 0; round < ROUNDS; round++) {
    await pause();
    let t0 = performance.now();
    await rawSorted(session);
    times.fp32.push((performance.now() - t0) / 1000);
    await pause();
    t0 = performance.now();
    await rawSorted(int8Session!);
    times.rawInt8.push((performance.now() - t0) / 1000);
    await pause();
    t0 = performance.now();
    const out = await syn.call("embed.batch", {
      model: "minilm-shaped-int8",
      texts: corpus,
      truncate: true,
      deadline_ms: 3_600_000,
    });
    times.synInt8.push((performance.now() - t0) / 1000);
    if (out.kind !== "result") throw new Error(JSON.stringify(out.body));
    r = out.body.result as typeof r;
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const realTokens = r!.real_token_counts.reduce((a, b) => a + b, 0);
  report("raw-sorted-rounds", median(times.fp32), corpus.length, totalTokens);
  report("raw-int8-sorted", median(times.rawInt8), corpus.length, totalTokens);
  report("synapse-int8", median(times.synInt8), corpus.length, realTokens);
  if (fp32Vectors !== undefined) {
    let sum = 0;
    r!.vectors.forEach((v, i) => {
      const f = fp32Vectors![i]!;
      let dot = 0, na = 0, nb = 0;
      for (let d = 0; d < f.length; d++) {
        dot += v.vector[d]! * f[d]!;
        na += v.vector[d]! ** 2;
        nb += f[d]! ** 2;
      }
      sum += dot / Math.sqrt(na * nb);
    });
    int8CorpusCosine = sum / r!.vectors.length;
  }
  // embed.query on the int8 lane against the raw fp32 single run, each alone (alternating blocks).
  await alternatingBlocks(
    queryRuns,
    [fp32AloneForInt8, (text) => {
      const ids = rawIds(text);
      return () => rawBatch([ids]);
    }],
    [rawInt8Alone, (text) => {
      const ids = rawIds(text);
      return () => rawBatch([ids], int8Session);
    }],
    [int8Alone, (text) => async () => {
      const o = await syn.call("embed.query", { model: "minilm-shaped-int8", text });
      if (o.kind !== "result") throw new Error(JSON.stringify(o.body));
    }],
  );
  await syn.dispose();
  await Deno.remove(int8Tmp, { recursive: true });
}
await int8Session?.release();
await session.release();

// ---------- Synapse over HTTP (a separate server process) ----------
if (!skip.has("synapse-http")) {
  const cfgPath = `${tmp}/synapse.jsonc`;
  await Deno.writeTextFile(cfgPath, JSON.stringify(benchConfig));
  const child = new Deno.Command(`${ROOT}/ck-synapse`, {
    args: ["serve", "--http", "127.0.0.1:0"],
    env: { ...env, SYNAPSE_CONFIG_JSON: "", SYNAPSE_CONFIG_PATH: cfgPath },
    stdout: "inherit",
    stderr: "piped",
  }).spawn();
  // "listening on …" comes on stderr with the log (one line per request at info): read it, then
  // keep draining so the child never blocks on a full pipe.
  const reader = child.stderr.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  let url = "";
  while (!url) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`server exited before listening: ${buf}`);
    buf += value;
    const m = buf.match(/listening on (http:\/\/\S+)/);
    if (m) url = m[1]!;
  }
  (async () => {
    while (!(await reader.read()).done) { /* drain */ }
  })();
  const post = async (method: string, params: unknown) => {
    const res = await fetch(`${url}/v1/ops/${method}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(params),
    });
    return await res.json();
  };
  // Wait for the model, then warm up.
  for (let i = 0; i < 600; i++) {
    const b = await post("embed.query", { text: "warm up" });
    if (!b.result?.error) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const t0 = performance.now();
  const body = await post("embed.batch", { texts: corpus, truncate: true, deadline_ms: 3_600_000 });
  const s = (performance.now() - t0) / 1000;
  if (!body.result?.vectors) throw new Error(JSON.stringify(body).slice(0, 500));
  report(
    "synapse-http",
    s,
    corpus.length,
    body.result.real_token_counts.reduce((a: number, b: number) => a + b, 0),
  );
  child.kill("SIGTERM");
  await child.status;
}
await Deno.remove(tmp, { recursive: true });

// ---------- transformers.js ----------
if (!skip.has("tjs-b32")) {
  const { env: tenv, pipeline } = await import("@huggingface/transformers");
  tenv.allowRemoteModels = false;
  tenv.localModelPath = `${ROOT}/fixtures/bench/`;
  const extractor = await pipeline("feature-extraction", "minilm-shaped", { dtype: "fp32" });
  await extractor(["warm up"], { pooling: "mean", normalize: true });
  const t0 = performance.now();
  for (let i = 0; i < corpus.length; i += 32) {
    await extractor(corpus.slice(i, i + 32), { pooling: "mean", normalize: true });
  }
  report("tjs-b32", (performance.now() - t0) / 1000, corpus.length, totalTokens);
  await extractor.dispose();
}

// ---------- ratios ----------
const rate = (n: string) => {
  const r = rows.find((x) => x.name === n);
  return r ? r.tokens / r.seconds : NaN;
};
const ratio = (a: string, b: string, target: string) => {
  const r = rate(a) / rate(b);
  // A row left out with --skip has no rate: its ratios say so instead of NaN.
  const value = Number.isFinite(r) ? `${r.toFixed(3)}x` : "skipped";
  console.log(`${`${a} / ${b}`.padEnd(28)} ${value}   (target ${target})`);
};
console.log("\nratios (tokens/s):");
ratio("synapse", "raw-sorted", ">= 0.95");
ratio("synapse", "tjs-b32", ">= 4.5");
ratio("synapse-http", "raw-sorted", ">= 0.9");
ratio("raw-sorted", "raw-b32", "info");
ratio("raw-b32", "tjs-b32", "info");
ratio("synapse-int8", "raw-sorted", ">= 2.0 on VNNI, >= 1.5 on AVX2");
ratio("raw-int8-sorted", "raw-sorted", "info");
// The same two against the raw fp32 run of the same rounds (alternating, median of 3).
ratio("synapse-int8", "raw-sorted-rounds", ">= 2.0 on VNNI, >= 1.5 on AVX2");
ratio("raw-int8-sorted", "raw-sorted-rounds", "info");
ratio("synapse-int8", "raw-int8-sorted", ">= 0.95");
const p50raw = percentile(rawLat, 0.5), p99raw = percentile(rawLat, 0.99);
const p50syn = percentile(synLat, 0.5), p99syn = percentile(synLat, 0.99);
console.log(`\nembed.query latency, ${shortTexts.length} texts of 8-16 tokens, ${queryRuns} runs:`);
console.log(`  raw single sequence  p50 ${p50raw.toFixed(2)} ms  p99 ${p99raw.toFixed(2)} ms`);
console.log(`  synapse embed.query  p50 ${p50syn.toFixed(2)} ms  p99 ${p99syn.toFixed(2)} ms`);
console.log(`  p50 overhead ${(p50syn - p50raw).toFixed(2)} ms (target <= 0.5 ms)  [interleaved]`);
const a50raw = percentile(rawAlone, 0.5), a99raw = percentile(rawAlone, 0.99);
const a50syn = percentile(synAlone, 0.5), a99syn = percentile(synAlone, 0.99);
console.log(`each path alone (alternating blocks of ${BLOCK}):`);
console.log(`  raw single sequence  p50 ${a50raw.toFixed(2)} ms  p99 ${a99raw.toFixed(2)} ms`);
console.log(`  synapse embed.query  p50 ${a50syn.toFixed(2)} ms  p99 ${a99syn.toFixed(2)} ms`);
console.log(
  `  p50 overhead ${(a50syn - a50raw).toFixed(2)} ms (target <= 0.5 ms); p99/p50 ${
    (a99syn / a50syn).toFixed(2)
  } (target <= 2)  [alone]`,
);
if (int8) {
  const f50 = percentile(fp32AloneForInt8, 0.5), q50 = percentile(int8Alone, 0.5);
  const q99 = percentile(int8Alone, 0.99);
  console.log(`int8 lane (each path alone, alternating blocks of ${BLOCK}):`);
  console.log(`  raw fp32 single sequence     p50 ${f50.toFixed(2)} ms`);
  console.log(
    `  raw int8 single sequence     p50 ${percentile(rawInt8Alone, 0.5).toFixed(2)} ms`,
  );
  console.log(`  synapse-int8 embed.query     p50 ${q50.toFixed(2)} ms  p99 ${q99.toFixed(2)} ms`);
  console.log(
    `  int8 embed.query / raw fp32 single p50  ${(q50 / f50).toFixed(3)}x (target <= 0.6)`,
  );
  console.log(
    `  int8 mean cosine vs fp32: probe ${int8Cosine?.toFixed(6) ?? "n/a"} (bar 0.999), corpus ${
      int8CorpusCosine?.toFixed(6) ?? "n/a"
    }`,
  );
}
{
  const p50plain = percentile(plainLat, 0.5), p50routed = percentile(routedLat, 0.5);
  console.log(`routing by fingerprint (interleaved, ${queryRuns} runs each):`);
  console.log(`  embed.query                       p50 ${p50plain.toFixed(2)} ms`);
  console.log(`  embed.query + target_fingerprint  p50 ${p50routed.toFixed(2)} ms`);
  console.log(
    `  p50 difference ${
      (p50routed - p50plain).toFixed(2)
    } ms (target: not measurable, |d| <= 0.1 ms)`,
  );
}

// ---------- per-stage query breakdown (bench/query_stages.ts; also `deno task bench:query`) ----------
if (!skip.has("stages")) await runQueryStages({ runs: queryRuns });
