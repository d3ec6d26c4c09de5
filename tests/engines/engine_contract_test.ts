/**
 * The shared engine contract (tests/engines/_engine_contract.ts) against every engine this build
 * has: ORT (an encoder and a cross-encoder in a Worker thread), llama.cpp through node-llama-cpp
 * (GGUF embeddings and generation in a worker process) and llama.cpp through the native llama
 * shim (the ffi lane: the same, plus a yes/no-logit reranker, in an FFI worker process).
 */
import { OrtThread } from "../../lib/engines/ort/ort_thread.ts";
import { OrtEngine, warmupShapes } from "../../lib/engines/ort/ort_engine.ts";
import { LlamaEngine } from "../../lib/engines/llama/llama_engine.ts";
import { readGgufFacts, sha256File } from "../../lib/engines/llama/gguf.ts";
import { resolveLlamaWorkerLaunch } from "../../lib/engines/llama/launch.ts";
import type { Engine, EngineRow } from "../../lib/engines/engine.ts";
import { SanitizedTokenizer } from "../../lib/tokenize/tokenizer.ts";
import { nullLog } from "../../lib/log/log.ts";
import { MODELS } from "../_helpers.ts";
import { runEngineContract } from "./_engine_contract.ts";

const TEXTS = ["hello", "a somewhat longer sentence about engines", "short one", "x y z w v"];

async function rowsFor(tokenizerPath: string, pair: boolean): Promise<EngineRow[]> {
  const tok = await SanitizedTokenizer.fromFile(tokenizerPath);
  return TEXTS.map((t) =>
    pair ? tok.encodePair("which one", t, { maxTokens: 64 }) : tok.encode(t, { maxTokens: 64 })
  );
}

/** An ORT engine that owns its thread: disposing the engine stops the thread too. */
async function ortEngine(model: string, task: "embed" | "rerank"): Promise<Engine> {
  const thread = new OrtThread({ intraOpThreads: 1, allowSpinning: false });
  const { engine } = await OrtEngine.load(thread, {
    load: {
      modelRef: model,
      path: `${MODELS}/${model}/model.onnx`,
      task,
      pooling: task === "embed" ? "mean" : "cls",
      normalize: task === "embed",
      warmupShapes: warmupShapes(64),
    },
    maxSequenceTokens: 64,
  });
  const dispose = engine.dispose.bind(engine);
  return Object.assign(engine, {
    dispose: async () => {
      await dispose();
      thread.dispose();
    },
  });
}

async function llamaEngine(
  mode: "embed" | "generate" | "score",
  lane: "llama" | "ffi" = "llama",
  model = "synapse-tiny-llama",
): Promise<Engine> {
  const path = `${MODELS}/${model}/model.gguf`;
  const facts = await readGgufFacts(path, "tiny");
  const runtimeDir = await Deno.makeTempDir({ prefix: "synapse-contract-" });
  const engine = new LlamaEngine({
    modelId: `tiny-${lane}-${mode}`,
    ggufPath: path,
    ggufDigest: await sha256File(path, "tiny"),
    mode,
    contextSize: 256,
    threads: 1,
    pooling: facts.pooling,
    normalize: mode === "embed",
    ...(lane === "ffi" ? { lane, sequences: 4, readout: "yes_no" as const } : {}),
  }, {
    launch: resolveLlamaWorkerLaunch({ env: () => undefined, kind: lane }),
    runtimeDir,
    workerId: `contract-${lane}-${mode}`,
    log: nullLog,
  });
  await engine.load();
  const dispose = engine.dispose.bind(engine);
  return Object.assign(engine, {
    dispose: async () => {
      await dispose();
      await Deno.remove(runtimeDir, { recursive: true }).catch(() => {});
    },
  });
}

runEngineContract({
  name: "OrtEngine (embed)",
  newEngine: () => ortEngine("synapse-tiny-embed", "embed"),
  rows: await rowsFor(`${MODELS}/synapse-tiny-embed/tokenizer.json`, false),
});

runEngineContract({
  name: "OrtEngine (rerank)",
  newEngine: () => ortEngine("synapse-tiny-rerank", "rerank"),
  rows: await rowsFor(`${MODELS}/synapse-tiny-rerank/tokenizer.json`, true),
});

runEngineContract({
  name: "LlamaEngine (embed)",
  newEngine: () => llamaEngine("embed"),
  rows: await rowsFor(`${MODELS}/synapse-tiny-llama/tokenizer.json`, false),
  sanitize: false,
});

runEngineContract({
  name: "LlamaEngine (generate)",
  newEngine: () => llamaEngine("generate"),
  rows: await rowsFor(`${MODELS}/synapse-tiny-llama/tokenizer.json`, false),
  sanitize: false,
});

runEngineContract({
  name: "LlamaEngine ffi lane (embed)",
  newEngine: () => llamaEngine("embed", "ffi"),
  rows: await rowsFor(`${MODELS}/synapse-tiny-llama/tokenizer.json`, false),
  sanitize: false,
});

runEngineContract({
  name: "LlamaEngine ffi lane (generate)",
  newEngine: () => llamaEngine("generate", "ffi"),
  rows: await rowsFor(`${MODELS}/synapse-tiny-llama/tokenizer.json`, false),
  sanitize: false,
});

runEngineContract({
  name: "LlamaEngine ffi lane (rerank, yes/no readout)",
  newEngine: () => llamaEngine("score", "ffi", "synapse-tiny-qwen"),
  // The Qwen fixture has no tokenizer.json: any ids of its vocabulary make pair rows.
  rows: [[9693, 13], [2152, 11, 12, 13, 14], [100, 200, 300], [5, 6, 7, 8, 9, 10, 11]].map((
    ids,
  ) => ({
    ids: new Int32Array(ids),
    typeIds: new Int32Array(ids.length),
  })),
  sanitize: false,
});
