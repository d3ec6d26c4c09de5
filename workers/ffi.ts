/**
 * The FFI worker process (docs/internals.md "§7 Worker protocol"): a native shim of the C engine
 * ABI (`ffi/synapse_engine.h`), opened with `Deno.dlopen`, behind the worker protocol — served by
 * the same loop as the llama worker (`workers/_serve.ts`: nonce handshake, CANCEL, supervision,
 * test hooks). The crash domain stays a process: an `abort()` inside the shim kills this worker
 * and the module reports `engine_crashed`.
 *
 * Requests: LOAD (`format: "gguf"`, `runtime_config {mode: "embed" | "score" | "generate",
 * context_size, threads, sequences, readout?}`), EMBED_BATCH (all items in as few decodes as the
 * context allows), RERANK_SEQUENCES (mode `score`: the rank head, or the yes/no logits of a
 * causal-LM reranker), GENERATE (greedy or sampled, grammar, logit bias, streamed TEXT_PARTs),
 * TOKENIZE, UNLOAD, PING. A CANCEL sets the engine's cancel flag at once: the shim's abort
 * callback stops the decode step in flight, so a cancel lands within one step (a long prompt's
 * evaluation included), not at the next token. GENERATE `logprobs` is refused
 * (`unsupported_request`): the shim does not report them.
 *
 * Flags besides the shared ones: `--shim PATH` (the shim library; default
 * `node_modules/.synapse/libsynapse_llama.so` beside this program, where scripts/setup builds
 * it), and the test hooks `--test-shim-abort-after N` (request N+1 calls the shim's
 * `syn_test_abort()`, an `abort()` inside native code) and `--test-log-steps` (a GENERATE says
 * on stderr when its prompt starts decoding, and when the shim stopped a step for a CANCEL).
 *
 * @module
 */
import type { ModuleToWorkerMessage } from "../lib/workers/messages.ts";
import { decodeI32LE, encodeF32LE } from "../lib/workers/codec.ts";
import {
  defaultLlamaShimPath,
  openShim,
  ShimError,
  type ShimLibrary,
  ShimRefused,
} from "../lib/engines/ffi/abi.ts";
import { ShimEngine } from "../lib/engines/ffi/shim_engine.ts";
import { FFI_LLAMA_ENGINE, FFI_LLAMA_VERSION } from "../lib/engines/ffi/identity.ts";
import { refused, rssMb, serveWorker, type WorkerIo } from "./_serve.ts";

interface Loaded {
  engine: ShimEngine;
  mode: "embed" | "score" | "generate";
}

let lib: ShimLibrary | undefined;
let shimPath = "";
let shimRefusal: ShimRefused | undefined;
const models = new Map<string, Loaded>();
let nextRef = 1;
/** The engine running the request in flight (a CANCEL sets its flag). */
let running: { reqId: number; engine: ShimEngine } | undefined;
let handled = 0;
let shimAbortAfter = Infinity;

await serveWorker({
  name: "ffi worker",
  kind: "ffi",
  extraFlags: {
    shim: { type: "string" },
    "test-shim-abort-after": { type: "string" },
    "test-log-steps": { type: "boolean" },
  },
  start: (flags) => {
    shimPath = (flags.shim as string | undefined) ?? defaultLlamaShimPath();
    if (flags["test-shim-abort-after"] !== undefined) {
      shimAbortAfter = Number(flags["test-shim-abort-after"]);
    }
    // A shim that cannot be opened is not a crash: the worker starts and refuses every LOAD
    // with the reason, so the module reports it as the model's load failure.
    // (It announces the llama shim's name then, with no build flags: nothing it answers can
    // carry that identity into a fingerprint, since every LOAD is refused.)
    let identity: ShimIdentityJson = {
      engine: FFI_LLAMA_ENGINE,
      version: FFI_LLAMA_VERSION,
      build_flags: {},
    };
    try {
      lib = openShim(shimPath);
    } catch (err) {
      if (!(err instanceof ShimRefused)) throw err;
      shimRefusal = err;
      console.error(`ffi worker: ${err.message}`);
    }
    if (lib !== undefined) identity = shimIdentity(lib);
    return Promise.resolve({
      backend: {
        handle,
        modelsLoaded: () => models.size,
        onCancel: (reqId: number) => {
          if (running?.reqId === reqId) running.engine.cancel();
        },
      },
      identity,
    });
  },
});

/** What `syn_engine_identity` returns. */
interface ShimIdentityJson {
  engine: string;
  version: string;
  build_flags: Record<string, string>;
}

/**
 * The shim build's identity (`syn_engine_identity(NULL)`: the same for every engine of one
 * build), announced in HELLO before any model is loaded.
 */
function shimIdentity(l: ShimLibrary): ShimIdentityJson {
  const p = l.symbols.syn_engine_identity(null);
  return JSON.parse(p === null ? "{}" : Deno.UnsafePointerView.getCString(p)) as ShimIdentityJson;
}

async function handle(
  msg: ModuleToWorkerMessage,
  tensor: Uint8Array | undefined,
  io: WorkerIo,
): Promise<void> {
  if (handled++ >= shimAbortAfter) {
    console.error("ffi worker: abort() inside the shim (test hook --test-shim-abort-after)");
    lib!.symbols.syn_test_abort();
  }
  switch (msg.type) {
    case "LOAD":
      return await load(msg, io);
    case "EMBED_BATCH":
      return await embed(msg, tensor!, io);
    case "RERANK_SEQUENCES":
      return await score(msg, tensor!, io);
    case "GENERATE":
      return await generate(msg, tensor!, io);
    case "TOKENIZE": {
      const m = modelFor(msg.model_ref);
      const special = msg.special !== false;
      const ids = msg.texts.map((text) => m.engine.tokenize(text, special));
      return await io.send({ type: "TOKENS", req_id: msg.req_id, ids });
    }
    case "UNLOAD": {
      const m = models.get(msg.model_ref);
      models.delete(msg.model_ref);
      m?.engine.free();
      return await io.send({ type: "UNLOADED", req_id: msg.req_id });
    }
    case "PING":
      return await io.send({
        type: "PONG",
        req_id: msg.req_id,
        rss_mb: rssMb(),
        models_loaded: models.size,
      });
    case "RERANK":
      throw refused("unsupported_request", "RERANK is not served by the ffi worker");
    default:
      throw refused("unknown_type", `unexpected ${msg.type}`);
  }
}

async function load(
  msg: Extract<ModuleToWorkerMessage, { type: "LOAD" }>,
  io: WorkerIo,
): Promise<void> {
  if (lib === undefined) throw refused(shimRefusal?.reason ?? "shim_missing", shimRefusal!.message);
  if (msg.format !== "gguf") throw refused("config_invalid", `format '${msg.format}' is not gguf`);
  const rc = msg.runtime_config;
  const mode = rc.mode;
  if (mode !== "embed" && mode !== "generate" && mode !== "score") {
    throw refused("config_invalid", "runtime_config.mode must be 'embed', 'score' or 'generate'");
  }
  const int = (key: string, min: number, fallback?: number): number => {
    const v = rc[key] ?? fallback;
    if (typeof v !== "number" || !Number.isInteger(v) || v < min) {
      throw refused("config_invalid", `runtime_config.${key} must be an integer >= ${min}`);
    }
    return v;
  };
  const readout = rc.readout ?? "rank";
  if (readout !== "rank" && readout !== "yes_no") {
    throw refused("config_invalid", "runtime_config.readout must be 'rank' or 'yes_no'");
  }
  const t0 = performance.now();
  let engine: ShimEngine;
  try {
    engine = await ShimEngine.load(lib, msg.artifact_path, {
      mode,
      n_ctx: int("context_size", 8),
      n_seq_max: mode === "generate" ? 1 : int("sequences", 1, 1),
      n_threads: int("threads", 1),
      ...(mode === "score" ? { readout } : {}),
    });
  } catch (err) {
    if (!(err instanceof ShimError)) throw err;
    const code = err.status === "load_failed"
      ? "artifact_invalid"
      : err.status === "out_of_memory"
      ? "oom"
      : err.status === "unsupported"
      ? "unsupported_model"
      : "config_invalid";
    throw refused(code, `cannot load ${msg.artifact_path}: ${err.message}`);
  }
  const ref = `m${nextRef++}`;
  models.set(ref, { engine, mode });
  await io.send({
    type: "LOADED",
    req_id: msg.req_id,
    model_ref: ref,
    dims: engine.limits.dims,
    cold_load_ms: Math.round((performance.now() - t0) * 1000) / 1000,
  });
}

function modelFor(ref: string, mode?: Loaded["mode"]): Loaded {
  const m = models.get(ref);
  if (m === undefined) throw refused("unknown_model", `no model '${ref}' is loaded`);
  if (mode !== undefined && m.mode !== mode) {
    throw refused("config_invalid", `model '${ref}' was loaded for ${m.mode}`);
  }
  return m;
}

/** Runs one shim call as request `reqId`: a CANCEL meanwhile sets the engine's flag. */
async function run<T>(reqId: number, m: Loaded, io: WorkerIo, call: () => Promise<T>): Promise<T> {
  if (io.stopRequested(reqId)) throw new ShimError(4, "cancelled before it ran");
  running = { reqId, engine: m.engine };
  try {
    return await call();
  } finally {
    running = undefined;
  }
}

/** ERR codes of a shim failure. */
function shimRefusedAs(err: unknown, what: string): Error {
  if (!(err instanceof ShimError)) return err as Error;
  const code = err.status === "cancelled"
    ? "cancelled"
    : err.status === "context_full"
    ? "context_full"
    : err.status === "invalid_argument"
    ? "config_invalid"
    : err.status === "grammar_invalid"
    ? "grammar_invalid"
    : "engine_error";
  return refused(code, `${what}: ${err.message}`);
}

async function embed(
  msg: Extract<ModuleToWorkerMessage, { type: "EMBED_BATCH" }>,
  tensor: Uint8Array,
  io: WorkerIo,
): Promise<void> {
  const m = modelFor(msg.model_ref, "embed");
  const pooling = m.engine.limits.pooling;
  if (msg.pooling !== pooling) {
    throw refused(
      "config_invalid",
      `pooling '${msg.pooling}' requested, the GGUF pools with '${pooling}'`,
    );
  }
  const lens = new Int32Array(msg.items.length);
  let total = 0;
  msg.items.forEach((it, i) => {
    lens[i] = it.n_tokens;
    total += it.n_tokens;
  });
  const ids = decodeI32LE(tensor, total);
  await io.maybeWaitForCancel(msg.req_id, 0, "items");
  let out;
  try {
    out = await run(msg.req_id, m, io, () => m.engine.embed(ids, lens));
  } catch (err) {
    throw shimRefusedAs(err, "EMBED_BATCH");
  }
  checkRows(out.status, "EMBED_BATCH");
  const dims = out.dims;
  if (msg.normalize) {
    const data = out.data;
    for (let r = 0; r < msg.items.length; r++) {
      let norm = 0;
      for (let d = r * dims; d < (r + 1) * dims; d++) norm += data[d]! * data[d]!;
      const scale = norm > 0 ? 1 / Math.sqrt(norm) : 1;
      for (let d = r * dims; d < (r + 1) * dims; d++) data[d] = data[d]! * scale;
    }
  }
  await io.send(
    { type: "VECTORS", req_id: msg.req_id, dims, n: msg.items.length },
    encodeF32LE(out.data),
  );
}

async function score(
  msg: Extract<ModuleToWorkerMessage, { type: "RERANK_SEQUENCES" }>,
  tensor: Uint8Array,
  io: WorkerIo,
): Promise<void> {
  const m = modelFor(msg.model_ref, "score");
  const lens = new Int32Array(msg.sequences.length);
  let total = 0;
  msg.sequences.forEach((s, i) => {
    lens[i] = s.n_tokens;
    total += s.n_tokens;
  });
  const ids = decodeI32LE(tensor, total);
  let out;
  try {
    out = await run(msg.req_id, m, io, () => m.engine.score(ids, lens));
  } catch (err) {
    throw shimRefusedAs(err, "RERANK_SEQUENCES");
  }
  checkRows(out.status, "RERANK_SEQUENCES");
  await io.send(
    { type: "SCORES", req_id: msg.req_id, n: msg.sequences.length },
    encodeF32LE(out.data),
  );
}

function checkRows(status: Int32Array, what: string): void {
  const bad = status.findIndex((s) => s !== 0);
  if (bad >= 0) {
    throw refused("engine_error", `${what}: row ${bad} has no output (status ${status[bad]})`);
  }
}

async function generate(
  msg: Extract<ModuleToWorkerMessage, { type: "GENERATE" }>,
  tensor: Uint8Array,
  io: WorkerIo,
): Promise<void> {
  const m = modelFor(msg.model_ref, "generate");
  if (msg.logprobs !== undefined) {
    throw refused("unsupported_request", "the ffi worker does not report logprobs");
  }
  const prompt = decodeI32LE(tensor);
  if (prompt.length === 0) throw refused("config_invalid", "empty prompt");
  const generated: number[] = [];
  let finish: "stop_token" | "max_tokens" | "grammar_complete" | "cancelled" = "max_tokens";
  try {
    if (io.flags["test-log-steps"]) {
      console.error(`ffi worker: prompt of ${prompt.length} tokens decoding (test hook)`);
    }
    await run(
      msg.req_id,
      m,
      io,
      () => m.engine.generateBegin(prompt, msg.sampling, msg.grammar, msg.logit_bias ?? []),
    );
    // Streamed: one token per step, sent as it comes; otherwise a few per step (the per-call
    // cost is microseconds against a token's evaluation; CANCEL lands inside a step either way).
    const chunk = msg.stream === true ? 1 : 16;
    while (generated.length < msg.max_tokens) {
      if (io.stopRequested(msg.req_id)) {
        finish = "cancelled";
        break;
      }
      const step = await run(
        msg.req_id,
        m,
        io,
        () => m.engine.generateNext(Math.min(chunk, msg.max_tokens - generated.length)),
      );
      for (const tok of step.ids) {
        generated.push(tok);
        if (msg.stream === true) {
          if (io.flags["test-stray-part"] && generated.length === 1) {
            await io.send({ type: "TEXT_PART", req_id: msg.req_id + 1_000_000, token_ids: [tok] });
          }
          await io.send({ type: "TEXT_PART", req_id: msg.req_id, token_ids: [tok] });
        }
      }
      if (step.finished) {
        finish = msg.grammar === undefined ? "stop_token" : "grammar_complete";
        break;
      }
      if (generated.length < msg.max_tokens) {
        await io.maybeWaitForCancel(msg.req_id, generated.length, "tokens");
      }
    }
  } catch (err) {
    if (!(err instanceof ShimError) || err.status !== "cancelled") {
      throw shimRefusedAs(err, "GENERATE");
    }
    // The abort callback stopped a decode step (the prompt's or a token's) in flight.
    if (io.flags["test-log-steps"]) {
      console.error(`ffi worker: cancelled inside a decode step: ${err.message} (test hook)`);
    }
    finish = "cancelled";
  } finally {
    m.engine.generateEnd();
  }
  await io.send({
    type: "TEXT",
    req_id: msg.req_id,
    // The module detokenizes (it owns the tokenizer); the worker's text is informative only.
    text: "",
    n_prompt: prompt.length,
    n_gen: generated.length,
    finish_reason: finish,
    generated_token_ids: generated,
  });
}
