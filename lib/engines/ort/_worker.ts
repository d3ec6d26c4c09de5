/**
 * Worker-thread entry of OrtThread (ort_thread.ts): owns the onnxruntime-node sessions, pads,
 * runs, pools.
 * `session.run` holds this thread's JavaScript for the whole run, which is why it lives here
 * and not on the main thread (docs/internals.md §11).
 *
 * @module
 */
/// <reference lib="deno.worker" />
import { ort, removeOrtDebugLog } from "./_addon.ts";
import { poolHiddenStates } from "./pooling.ts";
import { setCallingThreadNice } from "../../../ffi/priority.ts";
import { mallocTrim } from "../../../ffi/malloc_trim.ts";
import type { OrtRequest, OrtResponse, OrtTask } from "./_protocol.ts";
import type { Pooling } from "./pooling.ts";

interface Loaded {
  session: ort.InferenceSession;
  /** model.onnx, for the quiet twin created later. */
  path: string;
  /** Whether quiet runs get a twin session (created by the first of them). */
  quietTwin: boolean;
  /** The twin: one thread, so nothing spins; runs while another thread is busy on the cores. */
  quiet?: ort.InferenceSession | undefined;
  task: OrtTask;
  pooling: Pooling;
  normalize: boolean;
  dims: number;
  hasTypeIds: boolean;
  hasMask: boolean;
  output: string;
}

const sessions = new Map<string, Loaded>();

/** Nice value this thread runs at (0 until a load asks for more and the kernel agrees). */
let threadNice = 0;

/**
 * Lowers this Worker thread to `nice` before any session exists: onnxruntime creates a session's
 * intra-op threads from the thread that creates the session, and on Linux a new thread starts
 * with its creator's nice value, so the pools inherit it while the main thread keeps its own.
 *
 * @returns Why the value could not be set, or undefined when this thread now runs at `nice`.
 */
function lowerThisThread(nice: number): string | undefined {
  if (nice <= threadNice) return undefined;
  try {
    setCallingThreadNice(nice);
    threadNice = nice;
    return undefined;
  } catch (err) {
    return err instanceof Error ? err.message : String(err);
  }
}

function post(msg: OrtResponse, transfer: Transferable[] = []): void {
  self.postMessage(msg, transfer);
}

/** onnxruntime sessions alive in this worker (main sessions and quiet twins). */
function sessionCount(): number {
  let n = 0;
  for (const m of sessions.values()) n += m.quiet ? 2 : 1;
  return n;
}

async function release(m: Loaded | undefined): Promise<void> {
  await m?.session.release();
  await m?.quiet?.release();
}

/**
 * After sessions are released: glibc keeps much of what onnxruntime freed (arena chunks,
 * weights) in its heaps, still in RSS; hand it back. Best effort: memory, not correctness.
 */
function trimHeap(): void {
  try {
    mallocTrim();
  } catch {
    // No FFI or no glibc: the memory is reused by later sessions instead.
  }
}

async function createSession(
  path: string,
  spin: boolean,
  threads: number,
): Promise<ort.InferenceSession> {
  const session = await ort.InferenceSession.create(path, {
    executionProviders: ["cpu"],
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    graphOptimizationLevel: "all",
    executionMode: "sequential",
    extra: {
      session: {
        // A spinning session spins inside a run (its parallel sections start at once) and stops
        // when the run returns, instead of spinning on for its spin window: between two queries
        // the main thread and this worker need both cores (the reply, the next request), and
        // onnxruntime's idle spinner was a third runnable thread on a 2-core machine.
        force_spinning_stop: spin ? "1" : "0",
        intra_op: { allow_spinning: spin ? "1" : "0" },
        inter_op: { allow_spinning: spin ? "1" : "0" },
      },
    },
  });
  // The first session of the process makes libonnxruntime create its empty debug log.
  removeOrtDebugLog();
  return session;
}

async function load(req: Extract<OrtRequest, { type: "load" }>): Promise<void> {
  const t0 = performance.now();
  const priorityError = lowerThisThread(req.niceness);
  const session = await createSession(req.path, req.allowSpinning, req.intraOpThreads);
  const inputs = session.inputNames;
  if (!inputs.includes("input_ids")) {
    throw Object.assign(new Error(`model has no input_ids input (inputs: ${inputs.join(", ")})`), {
      code: "artifact_invalid",
    });
  }
  const output = req.task === "embed"
    ? (session.outputNames.includes("last_hidden_state")
      ? "last_hidden_state"
      : session.outputNames[0]!)
    : (session.outputNames.includes("logits") ? "logits" : session.outputNames[0]!);
  const loaded: Loaded = {
    session,
    path: req.path,
    quietTwin: req.quietTwin,
    task: req.task,
    pooling: req.pooling,
    normalize: req.normalize,
    dims: 0,
    hasTypeIds: inputs.includes("token_type_ids"),
    hasMask: inputs.includes("attention_mask"),
    output,
  };
  // Probe run (two rows of two tokens): learns the output width and checks the output's shape
  // fits the task, so a cross-encoder loaded as an embedder (or the reverse) is refused instead
  // of serving meaningless numbers.
  const probeOut = await loaded.session.run(probeFeeds(loaded), [output]);
  const shape = probeOut[output]!.dims;
  for (const t of Object.values(probeOut)) t.dispose?.();
  checkOutputShape(req.task, output, shape);
  const probe = await run(loaded, Int32Array.of(0), Int32Array.of(0), Int32Array.of(1));
  loaded.dims = probe.dims;
  // Warm-up at the micro-batch budget's extreme shapes, so the first real request does not pay
  // for growing onnxruntime's memory arena. The quiet twin is not created here (ort_thread.ts,
  // "Memory"): the first quiet run creates it, and its arena grows to what quiet runs need.
  for (const [rows, len] of req.warmupShapes) {
    await run(
      loaded,
      new Int32Array(rows * len),
      new Int32Array(rows * len),
      new Int32Array(rows).fill(len),
    );
  }
  const previous = sessions.get(req.modelRef);
  sessions.set(req.modelRef, loaded);
  await release(previous);
  // Creating a session parses the whole model file (its bytes, the protobuf, graph copies) on
  // this thread's glibc heap and frees it again; hand that back too (a quiet thread's first
  // session kept about 60 MB of it: bench/README.md "ORT sessions and memory").
  trimHeap();
  post({
    type: "loaded",
    reqId: req.reqId,
    dims: loaded.dims,
    inputNames: inputs.slice(),
    outputNames: session.outputNames.slice(),
    coldLoadMs: performance.now() - t0,
    sessions: sessionCount(),
    niceness: threadNice,
    ...(priorityError === undefined ? {} : { priorityError }),
  });
}

function probeFeeds(m: Loaded): Record<string, ort.Tensor> {
  const t = () => new ort.Tensor("int64", new BigInt64Array([0n, 0n, 0n, 0n]), [2, 2]);
  const feeds: Record<string, ort.Tensor> = { input_ids: t() };
  if (m.hasMask) {
    feeds.attention_mask = new ort.Tensor("int64", BigInt64Array.of(1n, 1n, 1n, 1n), [2, 2]);
  }
  if (m.hasTypeIds) feeds.token_type_ids = t();
  return feeds;
}

/**
 * An embedder must output `[batch, seq, hidden]` hidden states (or `[batch, hidden]` pooled
 * sentence embeddings named `*embedding*`); a cross-encoder `[batch, labels]` logits.
 */
function checkOutputShape(task: OrtTask, output: string, shape: readonly number[]): void {
  const ok = task === "embed"
    ? (shape.length === 3 && shape[0] === 2 && shape[1] === 2 && shape[2]! > 1) ||
      (shape.length === 2 && shape[0] === 2 && shape[1]! > 1 && /embedding/i.test(output))
    : (shape.length === 2 && shape[0] === 2 && shape[1]! >= 1 && shape[1]! <= 2) ||
      (shape.length === 1 && shape[0] === 2);
  if (!ok) {
    const want = task === "embed"
      ? "last_hidden_state [batch, seq, hidden] (or a pooled [batch, hidden] sentence embedding)"
      : "logits [batch, 1]";
    throw Object.assign(
      new Error(
        `model output '${output}' has shape [${
          shape.join(", ")
        }] for a [2, 2] input, but task '${task}' needs ${want}; check the preload entry's task`,
      ),
      { code: "artifact_invalid" },
    );
  }
}

async function run(
  m: Loaded,
  ids: Int32Array,
  typeIds: Int32Array,
  lengths: Int32Array,
  quiet = false,
  stagesMs?: [number, number, number],
): Promise<{ data: Float32Array; dims: number; nonFinite: Uint8Array }> {
  const t0 = performance.now();
  const rows = lengths.length;
  let seq = 0;
  for (let r = 0; r < rows; r++) seq = Math.max(seq, lengths[r]!);
  const n = rows * seq;
  const idT = new BigInt64Array(n);
  const maskT = new BigInt64Array(n);
  const typeT = new BigInt64Array(n);
  let src = 0;
  for (let r = 0; r < rows; r++) {
    const len = lengths[r]!;
    const o = r * seq;
    for (let t = 0; t < len; t++) {
      idT[o + t] = BigInt(ids[src]!);
      typeT[o + t] = BigInt(typeIds[src]!);
      maskT[o + t] = 1n;
      src++;
    }
  }
  const dims2 = [rows, seq];
  const feeds: Record<string, ort.Tensor> = {
    input_ids: new ort.Tensor("int64", idT, dims2),
  };
  if (m.hasMask) feeds.attention_mask = new ort.Tensor("int64", maskT, dims2);
  if (m.hasTypeIds) feeds.token_type_ids = new ort.Tensor("int64", typeT, dims2);
  // The quiet twin runs single-threaded: beside a busy thread, a query's parallel sections would
  // wait on sibling threads the OS has not scheduled (2 cores: loaded p95 16 ms → 12 ms).
  if (quiet && m.quietTwin) m.quiet ??= await createSession(m.path, false, 1);
  const session = quiet && m.quiet ? m.quiet : m.session;
  const t1 = performance.now();
  const out = await session.run(feeds, [m.output]);
  const t2 = performance.now();
  if (stagesMs !== undefined) {
    stagesMs[0] = t1 - t0;
    stagesMs[1] = t2 - t1;
  }
  const tensor = out[m.output]!;
  const values = tensor.data as Float32Array;
  try {
    if (m.task === "embed") {
      const shape = tensor.dims;
      if (shape.length === 2) {
        // Already pooled [rows, dims] (sentence-embedding exports).
        const dims = shape[1]!;
        const data = new Float32Array(values);
        const pooled = poolHiddenStates(
          data,
          new Int32Array(rows).fill(1),
          1,
          dims,
          "cls",
          m.normalize,
        );
        return { data: pooled.data, dims, nonFinite: pooled.nonFinite };
      }
      const dims = shape[2]!;
      const pooled = poolHiddenStates(values, lengths, seq, dims, m.pooling, m.normalize);
      return { data: pooled.data, dims, nonFinite: pooled.nonFinite };
    }
    // Rerank: logits [rows, labels]; a cross-encoder with one label gives its raw score.
    const labels = tensor.dims.length === 2 ? tensor.dims[1]! : 1;
    const data = new Float32Array(rows);
    const nonFinite = new Uint8Array(rows);
    for (let r = 0; r < rows; r++) {
      const v = values[r * labels + (labels - 1)]!;
      data[r] = v;
      if (!Number.isFinite(v)) nonFinite[r] = 1;
    }
    return { data, dims: 1, nonFinite };
  } finally {
    for (const t of Object.values(out)) t.dispose?.();
    if (stagesMs !== undefined) stagesMs[2] = performance.now() - t2;
  }
}

async function handle(req: OrtRequest): Promise<void> {
  switch (req.type) {
    case "load":
      await load(req);
      return;
    case "run": {
      const m = sessions.get(req.modelRef);
      if (!m) {
        post({
          type: "error",
          reqId: req.reqId,
          code: "unknown_model",
          message: `model ${req.modelRef} is not loaded in this lane`,
        });
        return;
      }
      const t0 = performance.now();
      const stagesMs: [number, number, number] = [0, 0, 0];
      const r = await run(m, req.ids, req.typeIds, req.lengths, req.quiet, stagesMs);
      post({
        type: "result",
        reqId: req.reqId,
        data: r.data,
        dims: r.dims,
        nonFinite: r.nonFinite,
        runMs: performance.now() - t0,
        stagesMs,
        sessions: sessionCount(),
      }, [r.data.buffer as ArrayBuffer, r.nonFinite.buffer as ArrayBuffer]);
      return;
    }
    case "unload": {
      const m = sessions.get(req.modelRef);
      sessions.delete(req.modelRef);
      await release(m);
      trimHeap();
      post({ type: "unloaded", reqId: req.reqId, sessions: sessionCount() });
      return;
    }
    case "releaseQuiet": {
      for (const m of sessions.values()) {
        const twin = m.quiet;
        m.quiet = undefined;
        await twin?.release();
      }
      trimHeap();
      post({ type: "unloaded", reqId: req.reqId, sessions: sessionCount() });
      return;
    }
    case "shutdown":
      for (const m of sessions.values()) await release(m);
      sessions.clear();
      self.close();
      return;
    default:
      throw new Error(`Unknown request ${(req satisfies never as OrtRequest).type}. This is a bug`);
  }
}

// Requests are handled strictly one at a time, in arrival order.
let chain: Promise<void> = Promise.resolve();
self.onmessage = (ev: MessageEvent<OrtRequest>) => {
  const req = ev.data;
  chain = chain.then(() => handle(req)).catch((err: unknown) => {
    const code = (err as { code?: string })?.code ?? "engine_crashed";
    post({
      type: "error",
      reqId: req.reqId,
      code: typeof code === "string" ? code : "engine_crashed",
      message: err instanceof Error ? err.message : String(err),
    });
  });
};
