/**
 * The llama.cpp worker process (docs/internals.md "§7 Worker protocol"): node-llama-cpp 3.21.1 behind the worker
 * protocol. The module spawns it with `--socket PATH` and the nonce in `SYNAPSE_WORKER_NONCE`
 * (or `--nonce HEX`); it connects, sends HELLO with
 * its engine identity (`llama.cpp-worker`, the node-llama-cpp version, build flags naming the GPU
 * backend, so a CUDA or Metal build has its own fingerprint), waits for ACK and then answers one
 * request at a time: LOAD, EMBED_BATCH, GENERATE, TOKENIZE, UNLOAD, PING, SHUTDOWN. A GENERATE
 * with `stream: true` also sends one TEXT_PART per generated token (not the end token) as it
 * comes, before its TEXT. Token ids in,
 * vectors or token ids out: the module owns tokenization (TOKENIZE only lets it check a tokenizer
 * it built from the GGUF against llama.cpp's).
 *
 * CANCEL `{req_id}` may arrive while a request runs: the reader takes it out of the frame queue
 * (the other frames keep their order) and the request stops at its next token (GENERATE answers
 * TEXT with `finish_reason: "cancelled"` and the tokens so far) or item (EMBED_BATCH answers ERR
 * `cancelled`). A CANCEL for a request that is neither running nor queued is ignored.
 *
 * When the module goes away (EOF on the socket) the worker stops what it runs and SIGKILLs its
 * own process group, itself included, when it leads one (the host spawns it detached), so
 * nothing it started outlives the module. On Linux the worker also arms a parent-death signal
 * (`prctl(PR_SET_PDEATHSIG, SIGKILL)`, ffi/parent_death.ts) at start: the kernel kills it when
 * the module's process exits, even mid native call or while stopped (SIGSTOP), where no EOF is
 * read.
 *
 * It runs in its own process because llama.cpp asserts abort the process; the module survives
 * that and reports `engine_crashed`.
 *
 * Hidden flags for tests make a real worker misbehave (never used in production):
 * `--test-abort-after N` (libc `abort()` on request N+1), `--test-hang-after N` (never answer
 * request N+1), `--test-ping-uncounted` (PINGs are answered and not counted by those two), `--test-garbage-frame` (answer the first request with a non-JSON frame),
 * `--test-oversize-frame` (announce a frame over the negotiated max), `--test-truncated-frame`
 * (write half a frame, then exit), `--test-no-hello`, `--test-wrong-nonce`,
 * `--test-protocol-version V`, `--test-engine NAME`, `--test-log-burst N` (print N lines at
 * start), `--test-exit-before-connect`, `--test-connect-after-file PATH` (connect only once PATH
 * exists), `--test-wait-cancel-after N` (after N generated tokens or embedded items, wait for
 * the CANCEL of that request; only the first request that gets that far), `--test-spawn-child`
 * (start a helper process that shares the worker's stderr and process group and runs until
 * killed), `--test-stray-part` (a streamed GENERATE first sends a TEXT_PART for another req_id).
 *
 * `--nice N` (0…19) lowers the CPU priority of the worker's whole process group, every thread of
 * it and those created later (generation workers run at 5 so the module's interactive embedding
 * lanes go first on shared cores). The worker must lead its group (the host spawns it detached);
 * when the kernel refuses, it says "llama worker: cannot set nice …" on stderr and exits 2.
 *
 * @module
 */
import { parseArgs } from "node:util";
import process from "node:process";
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
import { encodeFrame, FrameDecoder } from "../lib/workers/frame.ts";
import {
  type FinishReason,
  type GenerateMessage,
  type ModuleToWorkerMessage,
  type WorkerToModuleMessage,
} from "../lib/workers/messages.ts";
import { decodeFromModule, decodeI32LE, encodeControl, encodeF32LE } from "../lib/workers/codec.ts";
import { WORKER_PROTOCOL_VERSION } from "../lib/workers/handshake.ts";
import { setProcessGroupNice } from "../ffi/priority.ts";
import { killOwnProcessGroup } from "../ffi/process_group.ts";
import { killWithParent } from "../ffi/parent_death.ts";
import {
  LLAMA_WORKER_ENGINE,
  LLAMA_WORKER_VERSION,
  llamaBuildFlags,
} from "../lib/engines/llama/identity.ts";

const MAX_FRAME = 64 * 1024 * 1024;

interface Loaded {
  model: LlamaModel;
  mode: "embed" | "generate";
  embedding?: LlamaEmbeddingContext;
  context?: LlamaContext;
  sequence?: LlamaContextSequence;
  /** GGUF pooling as the worker wire spells it. */
  pooling: "mean" | "cls" | "last";
}

const { values: flags } = parseArgs({
  // `main.ts worker llama …` passes its own two words first.
  args: Deno.args[0] === "worker" && Deno.args[1] === "llama" ? Deno.args.slice(2) : Deno.args,
  options: {
    socket: { type: "string" },
    nonce: { type: "string" },
    "test-abort-after": { type: "string" },
    "test-ping-uncounted": { type: "boolean" },
    "test-hang-after": { type: "string" },
    "test-garbage-frame": { type: "boolean" },
    "test-oversize-frame": { type: "boolean" },
    "test-truncated-frame": { type: "boolean" },
    "test-no-hello": { type: "boolean" },
    "test-wrong-nonce": { type: "boolean" },
    "test-protocol-version": { type: "string" },
    "test-engine": { type: "string" },
    "test-log-burst": { type: "string" },
    "test-exit-before-connect": { type: "boolean" },
    "test-connect-after-file": { type: "string" },
    "test-wait-cancel-after": { type: "string" },
    "test-spawn-child": { type: "boolean" },
    "test-stray-part": { type: "boolean" },
    nice: { type: "string" },
  },
  strict: true,
});

// The module hands the nonce over in the environment (never on the command line, which `ps`
// shows every local user); `--nonce` (docs/internals.md §7) is still accepted. Removed from the
// environment at once, so no child process of this worker inherits it.
const launchNonce = flags.nonce ?? Deno.env.get("SYNAPSE_WORKER_NONCE");
Deno.env.delete("SYNAPSE_WORKER_NONCE");
if (flags.socket === undefined || launchNonce === undefined) {
  console.error("llama worker: --socket PATH and the nonce (SYNAPSE_WORKER_NONCE) are required");
  Deno.exit(2);
}

// Never outlive the module: the kernel SIGKILLs this worker when its parent (the module that
// spawned it, whose pid the host passes in SYNAPSE_WORKER_PARENT_PID) exits, even in the middle
// of a native call or while stopped. Off Linux the EOF watch on the socket does it.
{
  const parent = Number(Deno.env.get("SYNAPSE_WORKER_PARENT_PID") ?? "");
  Deno.env.delete("SYNAPSE_WORKER_PARENT_PID");
  try {
    if (
      killWithParent(Number.isSafeInteger(parent) && parent > 0 ? parent : undefined) ===
        "parent_gone"
    ) {
      console.error("llama worker: the module that started it is gone; exiting");
      Deno.exit(0);
    }
  } catch (err) {
    console.error(`llama worker: ${(err as Error).message}; relying on the socket's EOF`);
  }
}

const burst = Number(flags["test-log-burst"] ?? 0);
for (let i = 0; i < burst; i++) console.error(`llama worker: test log line ${i}`);
if (flags["test-exit-before-connect"]) {
  console.error("llama worker: exiting before connecting (test hook)");
  Deno.exit(3);
}

// `--nice N`: lower the CPU priority of the whole process group (this process leads it): every
// thread that exists now (Deno's), and, by inheritance, llama.cpp's threads and node-llama-cpp's
// binary-test child, so all of them yield to the module's interactive lanes.
if (flags.nice !== undefined) {
  const nice = Number(flags.nice);
  if (!Number.isInteger(nice) || nice < 0 || nice > 19) {
    console.error(`llama worker: --nice must be an integer in 0..19: received '${flags.nice}'`);
    Deno.exit(2);
  }
  try {
    setProcessGroupNice(Deno.pid, nice);
  } catch (err) {
    console.error(`llama worker: cannot set nice ${nice}: ${(err as Error).message}`);
    Deno.exit(2);
  }
}

if (flags["test-spawn-child"]) {
  const helper = new Deno.Command(Deno.execPath(), {
    args: ["eval", "setInterval(() => {}, 1 << 30)"],
    stdin: "null",
    stdout: "null",
    stderr: "inherit",
  }).spawn();
  helper.unref();
  console.error(`llama worker: test child ${helper.pid} (test hook)`);
}

const llama: Llama = await getLlama({
  gpu: "auto",
  build: "never",
  logLevel: LlamaLogLevel.warn,
  logger: (level, message) => {
    const m = message.trimEnd();
    if (m !== "") console.error(`llama.cpp ${LlamaLogLevel[level] ?? level}: ${m}`);
  },
});

const barrier = flags["test-connect-after-file"];
if (barrier !== undefined) {
  console.error(`llama worker: waiting for ${barrier} before connecting (test hook)`);
  while (!(await exists(barrier))) await new Promise((r) => setTimeout(r, 10));
}

const conn = await Deno.connect({ transport: "unix", path: flags.socket });
const decoder = new FrameDecoder({ maxFrameBytes: MAX_FRAME });
/**
 * Frames read and not yet taken, in order: control messages (decoded once, here), the tensor
 * frame after a request that has one, and frames that did not decode (the main loop fails on
 * them in turn).
 */
type Inbound =
  | { kind: "control"; msg: ModuleToWorkerMessage }
  | { kind: "tensor"; frame: Uint8Array }
  | { kind: "invalid"; error: unknown };
const inbox: Inbound[] = [];
let wake: (() => void) | undefined;
let closed = false;
/** req_ids read and not yet answered: a CANCEL for one of them counts. */
const pending = new Set<number>();
/** req_ids cancelled while pending. */
const cancelled = new Set<number>();
/** Woken when a CANCEL is taken or the connection closes. */
let cancelWake: (() => void) | undefined;
let tensorNext = false;

async function writeAll(bytes: Uint8Array): Promise<void> {
  let off = 0;
  while (off < bytes.byteLength) off += await conn.write(bytes.subarray(off));
}

async function send(msg: WorkerToModuleMessage, tensor?: Uint8Array): Promise<void> {
  await writeAll(encodeFrame(encodeControl(msg), { maxFrameBytes: negotiated }));
  if (tensor !== undefined) await writeAll(encodeFrame(tensor, { maxFrameBytes: negotiated }));
}

async function readLoop(): Promise<void> {
  const buf = new Uint8Array(256 * 1024);
  try {
    while (true) {
      const n = await conn.read(buf);
      if (n === null) break;
      for (const f of decoder.push(buf.subarray(0, n))) take(f);
      wake?.();
    }
  } catch (err) {
    console.error(`llama worker: connection failed: ${(err as Error).message}`);
  }
  closed = true;
  wake?.();
  cancelWake?.();
}

/** Sorts one frame: a CANCEL is applied at once, everything else queues in order. */
function take(frame: Uint8Array): void {
  if (tensorNext) {
    tensorNext = false;
    inbox.push({ kind: "tensor", frame });
    return;
  }
  let msg: ModuleToWorkerMessage;
  try {
    msg = decodeFromModule(frame);
  } catch (error) {
    inbox.push({ kind: "invalid", error });
    return;
  }
  if (msg.type === "CANCEL") {
    if (pending.has(msg.req_id)) {
      cancelled.add(msg.req_id);
      cancelWake?.();
    }
    return;
  }
  if ("req_id" in msg) pending.add(msg.req_id);
  tensorNext = needsTensor(msg);
  inbox.push({ kind: "control", msg });
}

function next(): Promise<Inbound | undefined> {
  return new Promise((resolve) => {
    const check = () => {
      const f = inbox.shift();
      if (f !== undefined || closed) {
        wake = undefined;
        resolve(f);
      } else wake = check;
    };
    check();
  });
}

/** The next control message; undefined once the connection is closed. */
async function nextControl(): Promise<ModuleToWorkerMessage | undefined> {
  const f = await next();
  if (f === undefined) return undefined;
  if (f.kind === "invalid") throw f.error;
  if (f.kind === "tensor") throw new Error("llama worker: a tensor frame without its request");
  return f.msg;
}

/** True once request `reqId` is cancelled or the module has gone away. */
function stopRequested(reqId: number): boolean {
  return closed || cancelled.has(reqId);
}

/** Test hook `--test-wait-cancel-after`: waits until request `reqId` is cancelled (once). */
async function waitForCancel(reqId: number, done: number, unit: string): Promise<void> {
  waitCancelAfter = Infinity;
  console.error(`llama worker: waiting for CANCEL after ${done} ${unit} (test hook)`);
  while (!stopRequested(reqId)) await new Promise<void>((r) => cancelWake = r);
  cancelWake = undefined;
}

/** The module has gone away: SIGKILLs this worker's group when it leads one, else exits 0. */
function exitModuleGone(): never {
  try {
    conn.close();
  } catch { /* closed */ }
  killOwnProcessGroup();
  Deno.exit(0);
}

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.stat(path);
    return true;
  } catch {
    return false;
  }
}

let negotiated = MAX_FRAME;
void readLoop();

if (flags["test-no-hello"]) {
  console.error("llama worker: not sending HELLO (test hook)");
  setInterval(() => {}, 1 << 30);
  await new Promise(() => {});
}

await send({
  type: "HELLO",
  v: flags["test-protocol-version"] !== undefined
    ? Number(flags["test-protocol-version"])
    : WORKER_PROTOCOL_VERSION,
  nonce: flags["test-wrong-nonce"] ? "0000000000000000" : launchNonce,
  engine: {
    engine: flags["test-engine"] ?? LLAMA_WORKER_ENGINE,
    version: LLAMA_WORKER_VERSION,
    build_flags: llamaBuildFlags(llama.gpu, llama.llamaCppRelease.release),
  },
  pid: Deno.pid,
  max_frame: MAX_FRAME,
});

const ack = await nextControl();
if (ack === undefined) exitModuleGone();
if (ack.type !== "ACK" || !ack.accept) {
  console.error(`llama worker: expected ACK, got ${ack.type}`);
  Deno.exit(2);
}
negotiated = ack.max_frame;
decoder.setMaxFrameBytes(negotiated);

const models = new Map<string, Loaded>();
const grammars = new Map<string, LlamaGrammar>();
let nextRef = 1;
let handled = 0;
const abortAfter = flags["test-abort-after"] === undefined
  ? Infinity
  : Number(flags["test-abort-after"]);
const hangAfter = flags["test-hang-after"] === undefined
  ? Infinity
  : Number(flags["test-hang-after"]);
/** `--test-wait-cancel-after`: holds one request only, the first to get that far. */
let waitCancelAfter = flags["test-wait-cancel-after"] === undefined
  ? Infinity
  : Number(flags["test-wait-cancel-after"]);

while (true) {
  const msg = await nextControl();
  if (msg === undefined) exitModuleGone();
  if (msg.type === "SHUTDOWN") break;
  if (msg.type === "ACK") continue;
  // `--test-ping-uncounted`: a PING (the module reading this worker's RSS for models.list) is
  // answered and not counted by the hooks below, so a test scripting "request N misbehaves"
  // through the whole service stays tied to its work requests. A hung worker still hangs.
  if (flags["test-ping-uncounted"] && msg.type === "PING" && handled < hangAfter) {
    await send({
      type: "PONG",
      req_id: msg.req_id,
      rss_mb: Math.round(process.memoryUsage().rss / 1048576),
      models_loaded: models.size,
    });
    continue;
  }
  if (handled >= abortAfter) {
    console.error("llama worker: GGML_ASSERT-style abort (test hook --test-abort-after)");
    abortProcess();
  }
  if (handled >= hangAfter) {
    console.error("llama worker: hanging (test hook --test-hang-after)");
    setInterval(() => {}, 1 << 30);
    await new Promise(() => {});
  }
  handled++;
  if (flags["test-garbage-frame"]) {
    await writeAll(encodeFrame(new TextEncoder().encode("\u0000not json{")));
    continue;
  }
  if (flags["test-oversize-frame"]) {
    const header = new Uint8Array(4);
    new DataView(header.buffer).setUint32(0, negotiated + 1, true);
    await writeAll(header);
    continue;
  }
  if (flags["test-truncated-frame"]) {
    const whole = encodeFrame(
      encodeControl({ type: "PONG", req_id: 0, rss_mb: 1, models_loaded: 0 }),
    );
    await writeAll(whole.subarray(0, Math.floor(whole.byteLength / 2)));
    conn.close();
    Deno.exit(0);
  }
  let tensor: Uint8Array | undefined;
  if (needsTensor(msg)) {
    const t = await next();
    if (t === undefined) exitModuleGone();
    if (t.kind !== "tensor") throw new Error(`llama worker: ${msg.type} without its tensor`);
    tensor = t.frame;
  }
  const reqId = (msg as { req_id?: number }).req_id;
  try {
    await handle(msg, tensor);
  } catch (err) {
    try {
      await send({
        type: "ERR",
        ...(reqId === undefined ? {} : { req_id: reqId }),
        code: (err as { workerCode?: string }).workerCode ?? "engine_error",
        msg: (err as Error).message ?? String(err),
      });
    } catch {
      exitModuleGone(); // the answer cannot be written: the module is gone
    }
  } finally {
    if (reqId !== undefined) {
      pending.delete(reqId);
      cancelled.delete(reqId);
    }
  }
}
try {
  conn.close();
} catch { /* closed */ }
Deno.exit(0);

function needsTensor(msg: ModuleToWorkerMessage): boolean {
  return msg.type === "EMBED_BATCH" || msg.type === "GENERATE" || msg.type === "RERANK" ||
    msg.type === "RERANK_SEQUENCES";
}

function refused(code: string, message: string): Error {
  return Object.assign(new Error(message), { workerCode: code });
}

async function handle(msg: ModuleToWorkerMessage, tensor: Uint8Array | undefined): Promise<void> {
  switch (msg.type) {
    case "LOAD":
      return await load(msg);
    case "EMBED_BATCH":
      return await embed(msg, tensor!);
    case "GENERATE":
      return await generate(msg, tensor!);
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
        rss_mb: Math.round(process.memoryUsage().rss / 1048576),
        models_loaded: models.size,
      });
    case "RERANK":
    case "RERANK_SEQUENCES":
      throw refused("unsupported_request", `${msg.type} is not served by the llama worker`);
    default:
      throw refused("unknown_type", `unexpected ${msg.type}`);
  }
}

async function load(msg: Extract<ModuleToWorkerMessage, { type: "LOAD" }>): Promise<void> {
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
  await send({
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
    if (i >= waitCancelAfter) await waitForCancel(msg.req_id, i, "items");
    if (stopRequested(msg.req_id)) {
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
  await send({ type: "VECTORS", req_id: msg.req_id, dims, n: msg.items.length }, encodeF32LE(out));
}

async function generate(
  msg: Extract<ModuleToWorkerMessage, { type: "GENERATE" }>,
  tensor: Uint8Array,
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
  if (stopRequested(msg.req_id)) finish = "cancelled";
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
        if (flags["test-stray-part"] && generated.length === 1) {
          await send({ type: "TEXT_PART", req_id: msg.req_id + 1_000_000, token_ids: [tok] });
        }
        await send({ type: "TEXT_PART", req_id: msg.req_id, token_ids: [tok] });
      }
      if (generated.length >= msg.max_tokens) break;
      if (generated.length === waitCancelAfter) {
        await waitForCancel(msg.req_id, generated.length, "tokens");
      }
      if (stopRequested(msg.req_id)) {
        finish = "cancelled";
        break;
      }
    }
  }
  await send({
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

function abortProcess(): never {
  const libc = Deno.dlopen(Deno.build.os === "darwin" ? "libc.dylib" : "libc.so.6", {
    abort: { parameters: [], result: "void" },
  });
  libc.symbols.abort();
  Deno.exit(134);
}
