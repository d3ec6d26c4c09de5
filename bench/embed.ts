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
 * then the ratios, embed.query p50/p99 against a raw single-sequence run, and the per-stage query
 * breakdown of bench/query_stages.ts (`--skip stages` leaves it out).
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
    `${name.padEnd(13)} ${seconds.toFixed(2).padStart(7)} s  ${
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

async function rawBatch(batch: number[][]): Promise<Float32Array[]> {
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
  const out = await session.run({
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

if (!skip.has("raw-sorted")) {
  const t0 = performance.now();
  const all = corpus.map(rawIds);
  const order = all.map((_, i) => i).sort((a, b) => all[a]!.length - all[b]!.length);
  let batch: number[][] = [];
  for (const i of order) {
    const ids = all[i]!;
    if (
      batch.length > 0 &&
      (batch.length + 1 > ORT_MICRO_BATCH.maxSequences ||
        (batch.length + 1) * ids.length > ORT_MICRO_BATCH.maxMicroBatchTokens)
    ) {
      await rawBatch(batch);
      batch = [];
    }
    batch.push(ids);
  }
  if (batch.length) await rawBatch(batch);
  report("raw-sorted", (performance.now() - t0) / 1000, corpus.length, totalTokens);
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
  const settle = () => new Promise((r) => setTimeout(r, 50));
  for (let b = 0; b < Math.ceil(queryRuns / BLOCK); b++) {
    await settle();
    for (let i = 0; i < BLOCK + 5; i++) {
      const ids = rawIds(shortTexts[(b * BLOCK + i) % shortTexts.length]!);
      const t0 = performance.now();
      await rawBatch([ids]);
      if (i >= 5) rawAlone.push(performance.now() - t0);
    }
    await settle();
    for (let i = 0; i < BLOCK + 5; i++) {
      const text = shortTexts[(b * BLOCK + i) % shortTexts.length]!;
      const t0 = performance.now();
      const o = await syn.call("embed.query", { text });
      if (o.kind !== "result") throw new Error(JSON.stringify(o.body));
      if (i >= 5) synAlone.push(performance.now() - t0);
    }
  }
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
