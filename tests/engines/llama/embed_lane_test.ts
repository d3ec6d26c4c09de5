/**
 * The GGUF embedding lane end to end: the real llama worker on the generated fixture, checked
 * against node-llama-cpp called directly; durable jobs on the lane; and the artifact checks the
 * module runs before a worker sees a file.
 */
import assert from "node:assert/strict";
import type { LlamaEngine } from "../../../lib/engines/llama/llama_engine.ts";
import { getLlama, LlamaLogLevel, type Token } from "node-llama-cpp";
import { loadConfig } from "../../../lib/config/loader.ts";
import { nullLog } from "../../../lib/log/log.ts";
import { threadsForKnob } from "../../../lib/models/model_registry.ts";
import { SanitizedTokenizer } from "../../../lib/tokenize/tokenizer.ts";
import { createSynapse } from "../../../lib/synapse.ts";
import type { Synapse } from "../../../lib/synapse.ts";
import { cosine, MODELS, preload, resultOf, semanticError } from "../../_helpers.ts";
import type { TestSynapse } from "../../_helpers.ts";

const GEN = `${MODELS}/synapse-tiny-llama`;
const ORT = `${MODELS}/synapse-tiny-embed`;

function llamaEntry(modelId: string, task: "generate" | "embed", extra = {}) {
  return {
    engine: "llama",
    model_path: GEN,
    tokenizer_path: `${GEN}/tokenizer.json`,
    task,
    model_id: modelId,
    pooling: "mean",
    normalize: true,
    max_tokens: 512,
    ...extra,
  };
}

/** A Synapse configured as an operator would (SYNAPSE_CONFIG_JSON), worker logs dropped. */
async function start(overrides: Record<string, unknown>): Promise<TestSynapse> {
  const dir = await Deno.makeTempDir({ prefix: "synapse-embed-lane-" });
  const env = {
    XDG_DATA_HOME: `${dir}/data`,
    XDG_CONFIG_HOME: `${dir}/config`,
    HOME: dir,
    SYNAPSE_CONFIG_JSON: JSON.stringify({ certification: "warn", ...overrides }),
  };
  const { config } = loadConfig({ env, cwd: dir });
  const syn = await createSynapse({ config, env, log: nullLog });
  return {
    syn,
    dir,
    async [Symbol.asyncDispose]() {
      await syn.dispose();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

// deno-lint-ignore no-explicit-any
async function rows(syn: Synapse): Promise<Map<string, any>> {
  const list = resultOf(await syn.call("models.list", {}));
  // deno-lint-ignore no-explicit-any
  return new Map(list.models.map((m: any) => [m.model_id, m]));
}

function l2(v: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < v.length; i++) s += v[i]! * v[i]!;
  return Math.sqrt(s);
}

const TEXTS = [
  "hello world",
  "The quick brown fox jumps over the lazy dog.",
  "日本語のテキスト and émoji 🎉",
  "a",
  "word ".repeat(200),
];

Deno.test({
  name: "embed.query and embed.batch on a GGUF model equal node-llama-cpp's embeddings",
  // node-llama-cpp in the test process keeps native handles of its own.
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    await using s = await start({
      preload_models: [
        llamaEntry("gen", "generate"),
        llamaEntry("gguf-embed", "embed"),
        preload(ORT, "ort-embed"),
      ],
    });
    const m = s.syn.registry.resolve("gguf-embed", "embed");
    const threads = threadsForKnob(s.syn.config.knob);
    assert.equal((m.interactive.engine as LlamaEngine).spec.threads, threads);
    const contextSize = m.profile.certified_shape.max_context_tokens;
    assert.equal((m.interactive.engine as LlamaEngine).spec.contextSize, contextSize);

    const query = resultOf(
      await s.syn.call("embed.query", { model: "gguf-embed", text: TEXTS[0], id: "q" }),
    );
    const batch = resultOf(
      await s.syn.call("embed.batch", {
        model: "gguf-embed",
        items: TEXTS.map((text, i) => ({ id: `t${i}`, text })),
      }),
    );
    for (const r of [query, batch]) {
      assert.equal(r.dims, 64);
      assert.equal(r.fingerprint, m.fingerprint);
      assert.match(r.fingerprint, /^[0-9a-f]{64}$/);
      assert.equal(r.provenance.engine.engine, "llama.cpp-worker");
      assert.equal(r.provenance.engine.version, "3.21.1");
      assert.equal(r.provenance.engine.build_flags.backend, "cpu");
    }
    assert.equal(batch.vectors.length, TEXTS.length);
    assert.deepEqual(batch.vectors.map((v: { id: string }) => v.id), TEXTS.map((_, i) => `t${i}`));

    const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.disabled });
    try {
      const model = await llama.loadModel({ modelPath: `${GEN}/model.gguf` });
      const ctx = await model.createEmbeddingContext({ contextSize, threads });
      for (let i = 0; i < TEXTS.length; i++) {
        const ids = m.tokenizer!.encode(TEXTS[i]!, { maxTokens: m.maxTokens }).ids;
        assert.equal(ids[0], 1, "BOS first");
        const raw = (await ctx.getEmbeddingFor(Array.from(ids) as Token[])).vector;
        const norm = l2(raw);
        const want = raw.map((x) => x / norm);
        const got = batch.vectors[i].vector;
        assert.equal(got.length, 64);
        assert.ok(Math.abs(l2(got) - 1) < 1e-5, `norm ${l2(got)}`);
        const c = cosine(got, want);
        assert.ok(c >= 0.99999, `item ${i}: cosine ${c}`);
        assert.equal(batch.real_token_counts[i], ids.length);
        assert.deepEqual(batch.truncation_disclosures[i], {
          submitted_tokens: ids.length,
          effective_tokens: ids.length,
          truncated: false,
          kept_chars: [...TEXTS[i]!].length, // F26: an uncut item covers its whole text
        });
        if (i === 0) {
          assert.ok(cosine(query.vectors[0].vector, want) >= 0.99999);
          assert.deepEqual(query.real_token_counts, [ids.length]);
          assert.equal(query.vectors[0].id, "q");
        }
      }
      await ctx.dispose();
      await model.dispose();
    } finally {
      await llama.dispose();
    }

    // Same GGUF, another operation; and another engine: three fingerprints.
    const gen = s.syn.registry.resolve("gen", "generate");
    const ort = resultOf(await s.syn.call("embed.query", { model: "ort-embed", text: TEXTS[0] }));
    assert.notEqual(m.fingerprint, gen.fingerprint);
    assert.notEqual(m.fingerprint, ort.fingerprint);
    assert.notEqual(ort.provenance.engine.engine, "llama.cpp-worker");
    assert.equal(m.profile.model_digest, gen.profile.model_digest);
    assert.equal(m.profile.pooling, "last_token"); // the GGUF says pooling_type 3
    const list = await rows(s.syn);
    assert.equal(list.get("gguf-embed").dims, 64);
    assert.equal(list.get("gguf-embed").engine, "llama");
    assert.equal(list.get("gen").dims, 0);
  },
});

Deno.test("embed.batch over inline.max_items becomes a job on the GGUF lane with the inline vectors", async () => {
  await using s = await start({
    inline: { max_items: 4 },
    preload_models: [llamaEntry("gguf-embed", "embed")],
  });
  const items = Array.from({ length: 10 }, (_, i) => ({ id: `p${i}`, text: `passage ${i} ` }));
  const job = resultOf(
    await s.syn.call("embed.batch", { model: "gguf-embed", items, request_key: "gguf-1" }),
  );
  assert.match(job.job_id, /^job_/);
  assert.equal(job.fingerprint, s.syn.registry.resolve("gguf-embed", "embed").fingerprint);
  // deno-lint-ignore no-explicit-any
  let done: any;
  // However long the machine takes; 10 minutes means hung.
  for (const hungAt = Date.now() + 600_000; Date.now() < hungAt;) {
    done = resultOf(await s.syn.call("embed.result", { job_id: job.job_id }));
    if (done.state !== "queued" && done.state !== "running") break;
    await new Promise((r) => setTimeout(r, 10));
  }
  assert.equal(done.state, "done");
  const pages = [done];
  for (let p = 1; p < done.page_count; p++) {
    pages.push(resultOf(await s.syn.call("embed.result", { job_id: job.job_id, page: p })));
  }
  const vectors = new Map<string, number[]>(
    pages.flatMap((p) => p.vectors).map((v: { id: string; vector: number[] }) => [v.id, v.vector]),
  );
  assert.equal(vectors.size, items.length);
  for (const p of pages) assert.equal(p.fingerprint, job.fingerprint);
  for (let i = 0; i < items.length; i += 4) {
    const inline = resultOf(
      await s.syn.call("embed.batch", { model: "gguf-embed", items: items.slice(i, i + 4) }),
    );
    for (const v of inline.vectors) assert.deepEqual(vectors.get(v.id), v.vector, v.id);
  }
});

Deno.test("GGUF artifact checks refuse bad files with artifact_invalid; other models keep serving", async () => {
  const tmp = await Deno.makeTempDir({ prefix: "synapse-gguf-artifacts-" });
  try {
    // Not a GGUF: a JSON file with a .gguf name.
    await Deno.copyFile(`${GEN}/tokenizer.json`, `${tmp}/x.gguf`);
    // A GGUF whose metadata is intact but whose tensor data is cut: only llama.cpp sees that.
    const whole = await Deno.readFile(`${GEN}/model.gguf`);
    await Deno.writeFile(`${tmp}/cut.gguf`, whole.subarray(0, whole.length >> 1));
    const zeros = "sha256:" + "0".repeat(64);
    await using s = await start({
      preload_models: [
        llamaEntry("mismatch", "embed", { tokenizer_path: `${ORT}/tokenizer.json` }),
        llamaEntry("bad-digest", "embed", { artifact_digest: zeros }),
        llamaEntry("not-gguf", "embed", { model_path: `${tmp}/x.gguf` }),
        llamaEntry("missing", "embed", { model_path: `${tmp}/missing.gguf` }),
        llamaEntry("cut", "embed", { model_path: `${tmp}/cut.gguf` }),
        llamaEntry("good", "embed"),
        preload(ORT, "ort-embed"),
      ],
    });
    const refusal = async (modelId: string) => {
      const e = semanticError(await s.syn.call("embed.query", { model: modelId, text: "hi" }));
      assert.equal(e.code, "artifact_invalid", modelId);
      assert.equal(e.class, "permanent", modelId);
      assert.equal(e.details.model_id, modelId);
      return e;
    };
    let e = await refusal("mismatch");
    assert.equal(e.details.reason, "tokenizer_mismatch");
    assert.equal(e.details.gguf_tokens, 32000);
    assert.notEqual(e.details.tokenizer_tokens, 32000);
    e = await refusal("bad-digest");
    assert.equal(e.details.expected, zeros);
    assert.match(e.details.digest, /^sha256:[0-9a-f]{64}$/);
    assert.notEqual(e.details.digest, zeros);
    e = await refusal("not-gguf");
    assert.equal(e.details.reason, "not_gguf");
    e = await refusal("missing");
    assert.equal(e.details.file, `${tmp}/missing.gguf`);
    e = await refusal("cut");
    assert.equal(e.details.request, "LOAD");

    const list = await rows(s.syn);
    for (const id of ["mismatch", "bad-digest", "not-gguf", "missing", "cut"]) {
      const row = list.get(id);
      assert.equal(row.state, "failed", id);
      assert.equal(row.error.code, "artifact_invalid", id);
      assert.deepEqual(row.fingerprints, [], id);
      // No worker lingers behind a failed model, and it is not shown as serving.
      assert.equal(row.worker, undefined, id);
      assert.equal(row.serving_admission, undefined, id);
    }
    assert.equal(list.get("good").state, "ready");
    assert.equal(list.get("good").worker.state, "ready");
    assert.equal(list.get("good").worker.total_crashes, 0);
    const good = resultOf(await s.syn.call("embed.query", { model: "good", text: "still here" }));
    assert.equal(good.dims, 64);
    const ort = resultOf(await s.syn.call("embed.query", { model: "ort-embed", text: "hi" }));
    assert.equal(ort.vectors.length, 1);
  } finally {
    await Deno.remove(tmp, { recursive: true });
  }
});

Deno.test("preload_models accepts engine 'llama.cpp' as the llama engine", async () => {
  await using s = await start({
    preload_models: [{ ...llamaEntry("aliased", "embed"), engine: "llama.cpp" }],
  });
  assert.equal(s.syn.config.preload_models[0]!.engine, "llama");
  const row = (await rows(s.syn)).get("aliased");
  assert.equal(row.state, "ready");
  assert.equal(row.engine, "llama");
  const r = resultOf(await s.syn.call("embed.query", { model: "aliased", text: "hi" }));
  assert.equal(r.provenance.engine.engine, "llama.cpp-worker");
  assert.equal(r.dims, 64);
});

/** A text of exactly `n` tokens (specials included) for the tiny llama tokenizer. */
async function textOfTokens(n: number): Promise<string> {
  const tok = await SanitizedTokenizer.fromFile(`${GEN}/tokenizer.json`);
  const count = (t: string) => tok.encode(t, { maxTokens: 1 << 20 }).ids.length;
  // "a" and each " a" are one token; the BOS is the only special.
  const text = Array(n - 1).fill("a").join(" ");
  assert.equal(count(text), n);
  return text;
}

Deno.test({
  name: "F22: an item of exactly the lane's context is served; one over is that item's error only",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    // max_tokens at the lane's context: the GGUF's context_length (2048 for the fixture).
    await using s = await start({
      preload_models: [llamaEntry("gguf-embed", "embed", { max_tokens: 2048 })],
    });
    const model = s.syn.registry.resolve("gguf-embed", "embed");
    assert.equal(model.maxTokens, 2048);
    assert.equal(model.profile.certified_shape.max_context_tokens, 2048);
    const exact = await textOfTokens(2048);
    const over = exact + " a";
    const res = resultOf(
      await s.syn.call("embed.batch", {
        items: [{ id: "exact", text: exact }, { id: "over", text: over }, { id: "s", text: "hi" }],
      }),
    );
    assert.deepEqual(res.vectors.map((v: { id: string }) => v.id), ["exact", "s"]);
    assert.deepEqual(res.real_token_counts, [2048, 2]);
    assert.equal(res.truncation_disclosures[0].truncated, false);
    assert.equal(res.item_errors.length, 1);
    assert.equal(res.item_errors[0].id, "over");
    assert.equal(res.item_errors[0].error.code, "sequence_too_long");
    assert.deepEqual(
      {
        tokens: res.item_errors[0].error.details.tokens,
        max: res.item_errors[0].error.details.max_tokens,
      },
      { tokens: 2049, max: 2048 },
    );
    assert.ok(Math.abs(l2(res.vectors[0].vector) - 1) < 1e-4);
  },
});

Deno.test("F22: a configured max_tokens above the lane's context is refused at load, never clamped", async () => {
  await using s = await start({
    preload_models: [
      llamaEntry("too-long", "embed", { max_tokens: 8192 }),
      preload(ORT, "ort-embed"),
    ],
  });
  const err = semanticError(await s.syn.call("embed.query", { model: "too-long", text: "hi" }));
  assert.equal(err.code, "artifact_invalid");
  assert.equal(err.details.reason, "max_tokens_over_context");
  assert.equal(err.details.max_tokens, 8192);
  assert.equal(err.details.context_size, 2048);
  const list = await rows(s.syn);
  assert.equal(list.get("too-long").state, "failed");
  assert.equal(list.get("too-long").error.code, "artifact_invalid");
  assert.equal(list.get("too-long").error.details.reason, "max_tokens_over_context");
  // The other model serves.
  resultOf(await s.syn.call("embed.query", { model: "ort-embed", text: "hi" }));
});
