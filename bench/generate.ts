/**
 * Generation and GGUF-embedding throughput through Synapse's llama worker versus node-llama-cpp
 * called directly in this process, on the ~135M-parameter llama-shaped GGUF
 * (`fixtures/bench/llama-135m-shaped`, random weights: speed does not depend on their values).
 *
 * ```
 * deno task bench:generate [--quick] [--rounds N] [--passages N]
 * ```
 *
 * - **generate**: 64-token generations of the same prompts (the same token ids) through
 *   `microllm.oneshot` and through `LlamaContextSequence.evaluate` with the same sampling values:
 *   greedy (`temperature: 0`), then sampled (`temperature 0.8, top_k 40, top_p 0.9, min_p 0.05`,
 *   a seed per prompt); each prompt runs on both paths back to back, in alternating order, so
 *   both see the same machine. Tokens/s = generated tokens / wall time. The generated ids must be
 *   identical (checked): the seeded sampled ids too.
 * - **embed**: `embed.batch` on the same GGUF loaded as an embedding model versus
 *   `LlamaEmbeddingContext.getEmbeddingFor` on the same ids, one passage at a time in both.
 *
 * Both paths use the same context size (2048) and thread count (the knob's, as the service).
 * Targets (issue step 3): generate ≥ 0.95× (greedy and sampled), embed ≥ 0.9×.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import { getLlama, LlamaLogLevel, type Token } from "node-llama-cpp";
import { buildCorpus } from "./corpus.ts";
import { createSynapse } from "../lib/synapse.ts";
import { loadConfig } from "../lib/config/loader.ts";
import { threadsForKnob } from "../lib/models/model_registry.ts";
import { SanitizedTokenizer } from "../lib/tokenize/tokenizer.ts";
import { nullLog } from "../lib/log/log.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url)).replace(/\/$/, "");
const MODEL_DIR = `${ROOT}/fixtures/bench/llama-135m-shaped`;

const { values: args } = parseArgs({
  args: Deno.args,
  options: {
    quick: { type: "boolean", default: false },
    rounds: { type: "string" },
    passages: { type: "string" },
    only: { type: "string" },
  },
});
/** `--only generate|embed|beside`: run one section. */
const only = args.only;
const rounds = Number(args.rounds ?? (args.quick ? 2 : 5));
const passages = Number(args.passages ?? (args.quick ? 40 : 200));
const GEN_TOKENS = 64;
const CONTEXT = 2048;
const threads = threadsForKnob("balanced");

const prompts = [
  "The quick brown fox",
  "Once upon a time, in a small village by the sea,",
  "Explain how a hash table works:",
  "def fibonacci(n):",
  "Les embeddings de texte sont",
  "Synapse serves embeddings to programs on one machine;",
  "List three prime numbers:",
  "In 1905, Albert Einstein published",
];
const tokenizer = await SanitizedTokenizer.fromFile(`${MODEL_DIR}/tokenizer.json`);
const promptIds = prompts.map((p) => tokenizer.encode(p, { maxTokens: 512, truncate: true }).ids);

/**
 * The benchmark's config: one llama model of the 135M-shaped GGUF (`entry` adds its id, task
 * and limits), inline limits raised for the run, and `certification: "warn"` — a speed
 * benchmark serves the llama lanes uncertified (bench:probe measures the probe).
 */
function benchConfig(entry: Record<string, unknown>): string {
  return JSON.stringify({
    knob: "balanced",
    certification: "warn",
    inline: { max_items: 1_000_000, max_tokens: 1_000_000_000, byte_budget: 1 << 30 },
    preload_models: [{
      engine: "llama",
      model_path: MODEL_DIR,
      tokenizer_path: `${MODEL_DIR}/tokenizer.json`,
      ...entry,
    }],
  });
}

const tmp = await Deno.makeTempDir({ prefix: "synapse-bench-" });
const env = {
  XDG_DATA_HOME: `${tmp}/data`,
  XDG_CONFIG_HOME: `${tmp}/config`,
  HOME: tmp,
  SYNAPSE_CONFIG_JSON: benchConfig({
    model_id: "llama-135m-gen",
    task: "generate",
    max_tokens: CONTEXT,
  }),
};
const corpus = await buildCorpus({ root: ROOT, size: passages });

// ---------- direct node-llama-cpp ----------
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath: `${MODEL_DIR}/model.gguf`, gpuLayers: 0 });
const context = await model.createContext({ contextSize: CONTEXT, threads, sequences: 1 });
const sequence = context.getSequence();

/** The sampling of a run: greedy, or sampled with a seed per prompt (index `i`). */
type Mode = "greedy" | "sampled";
const SAMPLED = { temperature: 0.8, top_k: 40, top_p: 0.9, min_p: 0.05 };
const seedOf = (i: number) => 1000 + i;

async function directGenerate(ids: Int32Array, mode: Mode, i: number): Promise<number[]> {
  await sequence.clearHistory();
  const out: number[] = [];
  const sampling = mode === "greedy" ? { temperature: 0 } : {
    temperature: SAMPLED.temperature,
    topK: SAMPLED.top_k,
    topP: SAMPLED.top_p,
    minP: SAMPLED.min_p,
    seed: seedOf(i),
  };
  for await (
    const tok of sequence.evaluate(Array.from(ids) as Token[], {
      ...sampling,
      yieldEogToken: true,
    })
  ) {
    if (model.isEogToken(tok)) break;
    out.push(tok);
    if (out.length >= GEN_TOKENS) break;
  }
  return out;
}

// ---------- Synapse ----------
if (only === undefined || only === "generate") {
  const { config } = loadConfig({ env, cwd: tmp });
  const syn = await createSynapse({ config, env, log: nullLog });
  const gen = (await syn.call("models.list", {})).body as {
    result: { models: { state: string; error?: unknown }[] };
  };
  if (gen.result.models[0]?.state !== "ready") {
    throw new Error(`bench model failed to load: ${JSON.stringify(gen.result.models[0])}`);
  }

  const synapseGenerate = async (i: number, mode: Mode): Promise<number[]> => {
    const out = await syn.call("microllm.oneshot", {
      prompt: prompts[i]!,
      max_tokens: GEN_TOKENS,
      deadline_ms: 600_000,
      ...(mode === "greedy" ? {} : { ...SAMPLED, seed: seedOf(i) }),
    });
    if (out.kind !== "result") throw new Error(JSON.stringify(out.body));
    const r = (out.body as { result: { generated_token_ids?: number[]; error?: unknown } }).result;
    if (r.error !== undefined) throw new Error(JSON.stringify(r.error));
    return r.generated_token_ids!;
  };

  // Warm both paths.
  await directGenerate(promptIds[0]!, "greedy", 0);
  await synapseGenerate(0, "greedy");

  console.log(
    `generate: ${rounds} rounds × ${prompts.length} prompts × ${GEN_TOKENS} tokens, threads ${threads}`,
  );
  for (const mode of ["greedy", "sampled"] as const) {
    const refCache = new Map<number, number[]>();
    const directGenerateOnceCached = async (i: number): Promise<number[]> => {
      let v = refCache.get(i);
      if (v === undefined) {
        // Reference ids, outside the timed sections.
        v = await directGenerate(promptIds[i]!, mode, i);
        refCache.set(i, v);
      }
      return v;
    };

    let directTokens = 0;
    let directMs = 0;
    let synTokens = 0;
    let synMs = 0;
    let identical = true;
    // Call for call: each prompt runs on both paths back to back, the order alternating, so
    // both see the same machine (this 2-core VM drifts by ±10% over a minute).
    for (let r = 0; r < rounds; r++) {
      for (let i = 0; i < prompts.length; i++) {
        const order = (r + i) % 2 === 0 ? ["direct", "synapse"] : ["synapse", "direct"];
        for (const path of order) {
          const t0 = performance.now();
          if (path === "direct") {
            const ids = await directGenerate(promptIds[i]!, mode, i);
            directMs += performance.now() - t0;
            directTokens += ids.length;
          } else {
            const ids = await synapseGenerate(i, mode);
            synMs += performance.now() - t0;
            synTokens += ids.length;
            const ref = await directGenerateOnceCached(i);
            if (ref.join(",") !== ids.join(",")) identical = false;
          }
        }
      }
    }

    const directTps = directTokens / (directMs / 1000);
    const synTps = synTokens / (synMs / 1000);
    console.log(
      `  ${mode}${mode === "sampled" ? ` ${JSON.stringify(SAMPLED)}, seed per prompt` : ""}:`,
    );
    console.log(
      `    node-llama-cpp direct   ${directTps.toFixed(1)} tokens/s (${directTokens} tokens)`,
    );
    console.log(`    microllm.oneshot        ${synTps.toFixed(1)} tokens/s (${synTokens} tokens)`);
    console.log(
      `    ratio synapse / direct  ${(synTps / directTps).toFixed(3)}  (target >= 0.95)`,
    );
    console.log(`    generated ids identical: ${identical ? "yes" : "NO"}`);
  }
  await syn.dispose();
  await context.dispose();
}

// ---------- GGUF embeddings ----------
if (only === undefined || only === "embed") {
  const embCtx = await model.createEmbeddingContext({ contextSize: CONTEXT, threads });
  const corpusIds = corpus.map((t) => tokenizer.encode(t, { maxTokens: 512, truncate: true }).ids);
  const totalTokens = corpusIds.reduce((a, x) => a + x.length, 0);
  const env2 = {
    ...env,
    XDG_DATA_HOME: `${tmp}/data2`,
    SYNAPSE_CONFIG_JSON: benchConfig({
      model_id: "llama-135m-embed",
      task: "embed",
      max_tokens: 512,
      normalize: true,
    }),
  };
  const syn2 = await createSynapse({
    config: loadConfig({ env: env2, cwd: tmp }).config,
    env: env2,
    log: nullLog,
  });
  await syn2.call("embed.query", { text: "warm up" });
  await embCtx.getEmbeddingFor(Array.from(corpusIds[0]!) as Token[]);
  let directEmbMs = 0;
  let synEmbMs = 0;
  for (let r = 0; r < 2; r++) {
    const order = r === 0 ? ["direct", "synapse"] : ["synapse", "direct"];
    for (const path of order) {
      const t0 = performance.now();
      if (path === "direct") {
        for (const ids of corpusIds) await embCtx.getEmbeddingFor(Array.from(ids) as Token[]);
        directEmbMs += performance.now() - t0;
      } else {
        const out = await syn2.call("embed.batch", {
          texts: corpus,
          truncate: true,
          deadline_ms: 3_600_000,
        });
        synEmbMs += performance.now() - t0;
        const res = (out.body as { result: { vectors?: unknown[]; error?: unknown } }).result;
        if (res.vectors?.length !== corpus.length) {
          throw new Error(JSON.stringify(res).slice(0, 500));
        }
      }
    }
  }
  const dEmb = (2 * totalTokens) / (directEmbMs / 1000);
  const sEmb = (2 * totalTokens) / (synEmbMs / 1000);
  console.log(
    `embed: ${corpus.length} passages, ${totalTokens} tokens, 2 rounds, threads ${threads}`,
  );
  console.log(`  node-llama-cpp direct   ${dEmb.toFixed(0)} tokens/s`);
  console.log(`  embed.batch (worker)    ${sEmb.toFixed(0)} tokens/s`);
  console.log(`  ratio synapse / direct  ${(sEmb / dEmb).toFixed(3)}  (target >= 0.9)`);
  await syn2.dispose();
  await embCtx.dispose();
}
await model.dispose();

// ---------- generation beside embeddings ----------
// embed.query latency on the MiniLM-shaped ONNX model, idle and while microllm.oneshot runs
// back to back on the GGUF model: generation has its own worker and queue class (decode), so it
// must not starve the embedding lane.
if (only === undefined || only === "beside") {
  const MINILM = `${ROOT}/fixtures/bench/minilm-shaped`;
  const env3 = {
    ...env,
    XDG_DATA_HOME: `${tmp}/data3`,
    SYNAPSE_CONFIG_JSON: JSON.stringify({
      knob: "balanced",
      preload_models: [
        {
          engine: "ort",
          model_path: `${MINILM}/model.onnx`,
          tokenizer_path: `${MINILM}/tokenizer.json`,
          config_path: `${MINILM}/config.json`,
          model_id: "minilm-shaped",
        },
        {
          engine: "llama",
          model_path: MODEL_DIR,
          tokenizer_path: `${MODEL_DIR}/tokenizer.json`,
          model_id: "llama-135m-gen",
          task: "generate",
          max_tokens: CONTEXT,
        },
      ],
    }),
  };
  const syn3 = await createSynapse({
    config: loadConfig({ env: env3, cwd: tmp }).config,
    env: env3,
    log: nullLog,
  });
  const queries = corpus.slice(0, 60).map((t) => t.split(" ").slice(0, 12).join(" "));
  const queryLatencies = async (): Promise<number[]> => {
    const out: number[] = [];
    for (const q of queries) {
      const t0 = performance.now();
      const r = await syn3.call("embed.query", { text: q, model: "minilm-shaped" });
      out.push(performance.now() - t0);
      if (r.kind !== "result") throw new Error(JSON.stringify(r.body));
      await new Promise((res) => setTimeout(res, 20));
    }
    return out.sort((a, b) => a - b);
  };
  await queryLatencies(); // warm
  const idle = await queryLatencies();
  let generating = true;
  let genTokens = 0;
  const genStart = performance.now();
  const loop = (async () => {
    while (generating) {
      const r = await syn3.call("microllm.oneshot", {
        model: "llama-135m-gen",
        prompt: prompts[genTokens % prompts.length]!,
        max_tokens: GEN_TOKENS,
        deadline_ms: 600_000,
      });
      genTokens += (r.body as { result: { n_gen?: number } }).result.n_gen ?? 0;
    }
  })();
  const loaded = await queryLatencies();
  generating = false;
  await loop;
  const genTps = genTokens / ((performance.now() - genStart) / 1000);
  const pct = (xs: number[], p: number) => xs[Math.min(xs.length - 1, Math.floor(p * xs.length))]!;
  console.log(`embed.query beside generation (${queries.length} queries each):`);
  console.log(
    `  idle p50 ${pct(idle, 0.5).toFixed(2)} ms, p95 ${pct(idle, 0.95).toFixed(2)} ms`,
  );
  console.log(
    `  while generating p50 ${pct(loaded, 0.5).toFixed(2)} ms, p95 ${
      pct(loaded, 0.95).toFixed(2)
    } ms (generation went on at ${genTps.toFixed(1)} tokens/s)`,
  );
  console.log(`  p95 loaded / p50 idle ${(pct(loaded, 0.95) / pct(idle, 0.5)).toFixed(2)}`);
  await syn3.dispose();
}
await Deno.remove(tmp, { recursive: true }).catch(() => {});
Deno.exit(0);
