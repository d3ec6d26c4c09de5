/**
 * The llama.cpp worker process (docs/internals.md "§7 Worker protocol"): node-llama-cpp 3.21.1 behind the worker
 * protocol, served by the shared worker loop (`workers/_serve.ts`: launch flags, handshake,
 * CANCEL, test hooks, exit with the module). It announces its engine identity
 * (`llama.cpp-worker`, the node-llama-cpp version, build flags naming the GPU backend, so a CUDA
 * or Metal build has its own fingerprint) and answers LOAD, EMBED_BATCH, GENERATE, TOKENIZE,
 * UNLOAD, PING. A GENERATE with `stream: true` also sends one TEXT_PART per generated token (not
 * the end token) as it comes, before its TEXT. Token ids in, vectors or token ids out: the module
 * owns tokenization (TOKENIZE only lets it check a tokenizer it built from the GGUF against
 * llama.cpp's).
 *
 * A cancelled request stops at its next token (GENERATE answers TEXT with `finish_reason:
 * "cancelled"` and the tokens so far) or item (EMBED_BATCH answers ERR `cancelled`).
 *
 * It runs in its own process because llama.cpp asserts abort the process; the module survives
 * that and reports `engine_crashed`. Generation workers run at `--nice 5` so the module's
 * interactive embedding lanes go first on shared cores.
 *
 * @module
 */
import {
  getLlama,
  type Llama,
  type LlamaContext,
  type LlamaContextSequence,
  type LlamaEmbeddingContext,
  type LlamaGrammar,
  LlamaGrammarEvaluationState,
  LlamaLogLevel,
  type LlamaModel,
  type SequenceEvaluateOptions,
  type Token,
  TokenBias,
} from "node-llama-cpp";
import {
  type FinishReason,
  type GenerateMessage,
  type ModuleToWorkerMessage,
} from "../lib/workers/messages.ts";
import { decodeI32LE, encodeF32LE } from "../lib/workers/codec.ts";
import {
  LLAMA_WORKER_ENGINE,
  LLAMA_WORKER_VERSION,
  llamaBuildFlags,
} from "../lib/engines/llama/identity.ts";
import { refused, rssMb, serveWorker, type WorkerIo } from "./_serve.ts";

interface Loaded {
  model: LlamaModel;
  mode: "embed" | "generate";
  embedding?: LlamaEmbeddingContext;
  context?: LlamaContext;
  sequence?: LlamaContextSequence;
  /** GGUF pooling as the worker wire spells it. */
  pooling: "mean" | "cls" | "last";
}

let llama: Llama;
const models = new Map<string, Loaded>();
const grammars = new Map<string, LlamaGrammar>();
let nextRef = 1;

await serveWorker({
  name: "llama worker",
  kind: "llama",
  start: async () => {
    llama = await getLlama({
      gpu: "auto",
      build: "never",
      logLevel: LlamaLogLevel.warn,
      logger: (level, message) => {
        const m = message.trimEnd();
        if (m !== "") console.error(`llama.cpp ${LlamaLogLevel[level] ?? level}: ${m}`);
      },
    });
    return {
      backend: { handle, modelsLoaded: () => models.size },
      identity: {
        engine: LLAMA_WORKER_ENGINE,
        version: LLAMA_WORKER_VERSION,
        build_flags: llamaBuildFlags(llama.gpu, llama.llamaCppRelease.release),
      },
    };
  },
});

async function handle(
  msg: ModuleToWorkerMessage,
  tensor: Uint8Array | undefined,
  io: WorkerIo,
): Promise<void> {
  const send = io.send;
  switch (msg.type) {
    case "LOAD":
      return await load(msg, io);
    case "EMBED_BATCH":
      return await embed(msg, tensor!, io);
    case "GENERATE":
      return await generate(msg, tensor!, io);
    case "TOKENIZE": {
      const m = models.get(msg.model_ref);
      if (m === undefined) throw refused("unknown_model", `no model '${msg.model_ref}' is loaded`);
      // Special-token strings are parsed unless `special: false`; no BOS/EOS is added
      // (node-llama-cpp never adds them).
      const special = msg.special !== false;
      const ids = msg.texts.map((text) => Array.from(m.model.tokenize(text, special), Number));
      return await send({ type: "TOKENS", req_id: msg.req_id, ids });
    }
    case "UNLOAD": {
      const m = models.get(msg.model_ref);
      models.delete(msg.model_ref);
      await m?.embedding?.dispose();
      await m?.context?.dispose();
      await m?.model.dispose();
      return await send({ type: "UNLOADED", req_id: msg.req_id });
    }
    case "PING":
      return await send({
        type: "PONG",
        req_id: msg.req_id,
        rss_mb: rssMb(),
        models_loaded: models.size,
      });
    case "RERANK":
    case "RERANK_SEQUENCES":
      throw refused("unsupported_request", `${msg.type} is not served by the llama worker`);
    default:
      throw refused("unknown_type", `unexpected ${msg.type}`);
  }
}

async function load(
  msg: Extract<ModuleToWorkerMessage, { type: "LOAD" }>,
  io: WorkerIo,
): Promise<void> {
  if (msg.format !== "gguf") throw refused("config_invalid", `format '${msg.format}' is not gguf`);
  const rc = msg.runtime_config;
  const mode = rc.mode;
  const contextSize = rc.context_size;
  const threads = rc.threads;
  if (mode !== "embed" && mode !== "generate") {
    throw refused("config_invalid", "runtime_config.mode must be 'embed' or 'generate'");
  }
  if (typeof contextSize !== "number" || !Number.isInteger(contextSize) || contextSize < 8) {
    throw refused("config_invalid", "runtime_config.context_size must be an integer >= 8");
  }
  if (typeof threads !== "number" || !Number.isInteger(threads) || threads < 1) {
    throw refused("config_invalid", "runtime_config.threads must be a positive integer");
  }
  const t0 = performance.now();
  let model: LlamaModel;
  try {
    model = await llama.loadModel({
      modelPath: msg.artifact_path,
      gpuLayers: llama.gpu === false ? 0 : "auto",
    });
  } catch (err) {
    throw refused(
      "artifact_invalid",
      `cannot load ${msg.artifact_path}: ${(err as Error).message}`,
    );
  }
  const loaded: Loaded = { model, mode, pooling: ggufPooling(model) };
  try {
    if (mode === "embed") {
      // node-llama-cpp refuses an input of `contextSize` tokens or more (its check is `>=`),
      // while the module certifies sequences of up to `context_size` tokens: one more slot makes
      // a sequence of exactly `context_size` tokens run (field report F22). Positions stay below
      // context_size, so the numbers are those of the certified context.
      loaded.embedding = await model.createEmbeddingContext({
        contextSize: contextSize + 1,
        threads,
      });
    } else {
      loaded.context = await model.createContext({ contextSize, threads, sequences: 1 });
      loaded.sequence = loaded.context.getSequence();
    }
  } catch (err) {
    await model.dispose();
    throw refused("oom", `cannot create a context: ${(err as Error).message}`);
  }
  const ref = `m${nextRef++}`;
  models.set(ref, loaded);
  await io.send({
    type: "LOADED",
    req_id: msg.req_id,
    model_ref: ref,
    dims: model.embeddingVectorSize,
    cold_load_ms: Math.round((performance.now() - t0) * 1000) / 1000,
  });
}

function ggufPooling(model: LlamaModel): "mean" | "cls" | "last" {
  const meta = model.fileInfo.metadata as Record<string, unknown>;
  const arch = (meta.general as { architecture?: string } | undefined)?.architecture ?? "";
  const p = (meta[arch] as { pooling_type?: number } | undefined)?.pooling_type;
  return p === 1 ? "mean" : p === 2 ? "cls" : "last";
}

function modelFor(ref: string, mode: "embed" | "generate"): Loaded {
  const m = models.get(ref);
  if (m === undefined) throw refused("unknown_model", `no model '${ref}' is loaded`);
  if (m.mode !== mode) throw refused("config_invalid", `model '${ref}' was loaded for ${m.mode}`);
  return m;
}

async function embed(
  msg: Extract<ModuleToWorkerMessage, { type: "EMBED_BATCH" }>,
  tensor: Uint8Array,
  io: WorkerIo,
): Promise<void> {
  const m = modelFor(msg.model_ref, "embed");
  if (msg.pooling !== m.pooling) {
    throw refused(
      "config_invalid",
      `pooling '${msg.pooling}' requested, the GGUF pools with '${m.pooling}'`,
    );
  }
  let total = 0;
  for (const it of msg.items) total += it.n_tokens;
  const ids = decodeI32LE(tensor, total);
  const dims = m.model.embeddingVectorSize;
  const out = new Float32Array(msg.items.length * dims);
  let o = 0;
  for (let i = 0; i < msg.items.length; i++) {
    await io.maybeWaitForCancel(msg.req_id, i, "items");
    if (io.stopRequested(msg.req_id)) {
      throw refused("cancelled", `EMBED_BATCH cancelled after ${i} of ${msg.items.length} items`);
    }
    const n = msg.items[i]!.n_tokens;
    const tokens = Array.from(ids.subarray(o, o + n)) as Token[];
    o += n;
    const v = (await m.embedding!.getEmbeddingFor(tokens)).vector;
    if (v.length !== dims) throw refused("engine_error", `embedding of length ${v.length}`);
    let norm = 0;
    for (let d = 0; d < dims; d++) norm += v[d]! * v[d]!;
    const scale = msg.normalize && norm > 0 ? 1 / Math.sqrt(norm) : 1;
    for (let d = 0; d < dims; d++) out[i * dims + d] = v[d]! * scale;
  }
  await io.send(
    { type: "VECTORS", req_id: msg.req_id, dims, n: msg.items.length },
    encodeF32LE(out),
  );
}

async function generate(
  msg: Extract<ModuleToWorkerMessage, { type: "GENERATE" }>,
  tensor: Uint8Array,
  io: WorkerIo,
): Promise<void> {
  const m = modelFor(msg.model_ref, "generate");
  const prompt = Array.from(decodeI32LE(tensor)) as Token[];
  if (prompt.length === 0) throw refused("config_invalid", "empty prompt");
  let state: LlamaGrammarEvaluationState | undefined;
  if (msg.grammar !== undefined) {
    let g = grammars.get(msg.grammar);
    if (g === undefined) {
      try {
        g = await llama.createGrammar({ grammar: msg.grammar });
      } catch (err) {
        throw refused("grammar_invalid", `grammar refused by llama.cpp: ${(err as Error).message}`);
      }
      if (grammars.size >= 32) grammars.delete(grammars.keys().next().value!);
      grammars.set(msg.grammar, g);
    }
    state = new LlamaGrammarEvaluationState({ model: m.model, grammar: g });
  }
  const seq = m.sequence!;
  await seq.clearHistory();
  const generated: number[] = [];
  const logprobs: { logprob: number; top: [number, number][] }[] = [];
  let finish: FinishReason = "max_tokens";
  if (io.stopRequested(msg.req_id)) finish = "cancelled";
  else {
    const options = {
      ...samplingOptions(msg.sampling, prompt, generated),
      ...(msg.logit_bias === undefined ? {} : { tokenBias: tokenBiasOf(m.model, msg.logit_bias) }),
      yieldEogToken: true,
      ...(state === undefined ? {} : { grammarEvaluationState: state }),
    };
    // With `logprobs`: each token with the probabilities node-llama-cpp's sampler saw (the
    // module asks only for greedy decoding without penalties or a grammar, where they are the
    // softmax of the model's own logits over the whole vocabulary); the same tokens either way.
    const k = msg.logprobs;
    const it = k === undefined ? seq.evaluate(prompt, options) : tokensWithLogprobs(
      seq.evaluateWithMetadata(prompt, { confidence: true, probabilities: k > 0 }, options),
      k,
      (lp) => logprobs.push(lp),
    );
    // Precedence at a token boundary (docs/internals.md §6): natural completion, then cancel. Under a
    // grammar, the end token means llama.cpp's sampler let it through; the module checks the
    // text against the grammar before it calls the answer complete (and finds completions that
    // fall on exactly the max_tokens-th token, which this loop reports as max_tokens).
    for await (const tok of it) {
      if (m.model.isEogToken(tok)) {
        finish = state === undefined ? "stop_token" : "grammar_complete";
        break;
      }
      generated.push(tok);
      // Streamed: one TEXT_PART per token, as it comes (a frame of a few bytes against a
      // token's whole evaluation; the client sees each token at once).
      if (msg.stream === true) {
        if (io.flags["test-stray-part"] && generated.length === 1) {
          await io.send({ type: "TEXT_PART", req_id: msg.req_id + 1_000_000, token_ids: [tok] });
        }
        await io.send({ type: "TEXT_PART", req_id: msg.req_id, token_ids: [tok] });
      }
      if (generated.length >= msg.max_tokens) break;
      await io.maybeWaitForCancel(msg.req_id, generated.length, "tokens");
      if (io.stopRequested(msg.req_id)) {
        finish = "cancelled";
        break;
      }
    }
  }
  await io.send({
    type: "TEXT",
    req_id: msg.req_id,
    text: m.model.detokenize(generated as Token[]),
    n_prompt: prompt.length,
    n_gen: generated.length,
    finish_reason: finish,
    generated_token_ids: generated,
    // One per generated token (the end token's is not one of them).
    ...(msg.logprobs === undefined ? {} : { logprobs: logprobs.slice(0, generated.length) }),
  });
}

/**
 * A GENERATE's `logit_bias` as node-llama-cpp's TokenBias: each id's bias added to its logit
 * before the sampler picks (llama.cpp's logit-bias sampler, first in the chain, greedy or
 * sampled). `TokenBias.set` skips end-of-generation tokens, the ones clients bias most, so the
 * table is filled directly: every id gets exactly its bias.
 */
function tokenBiasOf(model: LlamaModel, biases: [number, number][]): TokenBias {
  const bias = new TokenBias(model.tokenizer);
  const table = (bias as unknown as { _biases?: unknown })._biases;
  if (!(table instanceof Map)) {
    throw new Error("node-llama-cpp's TokenBias has no bias table. This is a bug");
  }
  for (const [id, b] of biases) table.set(id as Token, b);
  return bias;
}

/**
 * `ln p`, floored at −9999 (OpenAI's floor): a probability that underflowed to 0. (A function,
 * not a module constant: the message loop runs before the constants below it are initialised.)
 */
function logOf(p: number): number {
  return p > 0 ? Math.max(Math.log(p), -9999) : -9999;
}

/**
 * The tokens of an `evaluateWithMetadata` run, handing each one's log-probability and the `k`
 * most likely tokens' to `onLogprob` before the token is yielded.
 */
async function* tokensWithLogprobs(
  it: AsyncGenerator<{ token: Token; confidence: number; probabilities?: Map<Token, number> }>,
  k: number,
  onLogprob: (lp: { logprob: number; top: [number, number][] }) => void,
): AsyncGenerator<Token> {
  for await (const out of it) {
    const top: [number, number][] = [];
    if (k > 0 && out.probabilities !== undefined) {
      // The map is sorted, most likely first.
      for (const [id, p] of out.probabilities) {
        if (top.length >= k) break;
        top.push([id, logOf(p)]);
      }
    }
    onLogprob({ logprob: logOf(out.confidence), top });
    yield out.token;
  }
}

/**
 * node-llama-cpp's evaluate options of a GENERATE's sampling: exactly the module's values (the
 * library's own defaults, top_k 40 and top_p 0.95, never apply), the penalties over the last
 * `repeat_last_n` ids of the prompt and the generation so far. Absent: greedy, no penalties.
 *
 * @param sampling The GENERATE's `sampling`.
 * @param prompt The prompt ids.
 * @param generated The ids generated so far (grows as the generation runs).
 */
function samplingOptions(
  sampling: GenerateMessage["sampling"],
  prompt: readonly Token[],
  generated: readonly number[],
): SequenceEvaluateOptions {
  if (sampling === undefined) return { temperature: 0 };
  const lastN = sampling.repeat_last_n;
  const penalised = sampling.repeat_penalty !== 1 || sampling.frequency_penalty !== 0 ||
    sampling.presence_penalty !== 0;
  return {
    temperature: sampling.temperature,
    topK: sampling.top_k,
    topP: sampling.top_p,
    minP: sampling.min_p,
    seed: sampling.seed,
    ...(lastN === 0 || !penalised ? {} : {
      repeatPenalty: {
        punishTokens: () => {
          const fromGenerated = generated.slice(-lastN) as Token[];
          const more = lastN - fromGenerated.length;
          return more > 0 ? [...prompt.slice(-more), ...fromGenerated] : fromGenerated;
        },
        maxPunishTokens: lastN,
        penalty: sampling.repeat_penalty,
        frequencyPenalty: sampling.frequency_penalty,
        presencePenalty: sampling.presence_penalty,
      },
    }),
  };
}
