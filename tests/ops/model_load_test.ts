/**
 * Models loaded at run time (issue 11): `model.load` from a local directory and from a pinned
 * loopback URL, serving at once and again after a restart; refusals of unpinned sources; a wrong
 * digest; `model.unload` while a request holds the model; `models.download` of a catalog model
 * served from a loopback "Hugging Face"; `models.catalog`; `models.remove`.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { loadConfig } from "../../lib/config/loader.ts";
import { createSynapse, type Synapse } from "../../lib/synapse.ts";
import type { CatalogModel } from "../../lib/models/catalog.ts";
import { channelError, MODELS, resultOf, semanticError } from "../_helpers.ts";

const EMBED_DIR = `${MODELS}/synapse-tiny-embed`;

function sha256(path: string): string {
  return createHash("sha256").update(Deno.readFileSync(path)).digest("hex");
}

/** A loopback file server: `path → file`, counting requests per path. */
function serveFiles(files: Record<string, string>) {
  const hits = new Map<string, number>();
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    const path = new URL(req.url).pathname;
    hits.set(path, (hits.get(path) ?? 0) + 1);
    const file = files[path];
    if (file === undefined) return new Response("not found", { status: 404 });
    return new Response(await Deno.readFile(file));
  });
  const base = `http://127.0.0.1:${server.addr.port}`;
  return { base, hits, [Symbol.asyncDispose]: () => server.shutdown() };
}

interface Home {
  dir: string;
  env: Record<string, string>;
  start(extra?: { catalog?: CatalogModel[]; config?: Record<string, unknown> }): Promise<Synapse>;
  [Symbol.asyncDispose](): Promise<void>;
}

/** A data home that outlives one instance (restart tests). */
async function home(): Promise<Home> {
  const dir = await Deno.makeTempDir({ prefix: "synapse-load-" });
  const env = { XDG_DATA_HOME: `${dir}/data`, XDG_CONFIG_HOME: `${dir}/config`, HOME: dir };
  return {
    dir,
    env,
    async start(extra = {}) {
      const { config } = loadConfig({
        env: {
          ...env,
          SYNAPSE_CONFIG_JSON: JSON.stringify({ certification: "warn", ...extra.config }),
        },
        cwd: dir,
      });
      return await createSynapse({
        config,
        env,
        ...(extra.catalog === undefined ? {} : { catalog: extra.catalog }),
      });
    },
    async [Symbol.asyncDispose]() {
      await Deno.remove(dir, { recursive: true });
    },
  };
}

async function settle(syn: Synapse, jobId: string) {
  return await syn.loads.settled(jobId);
}

Deno.test("model.load from a local directory serves at once, is recorded, and serves again after a restart", async () => {
  await using h = await home();
  let fingerprint: string;
  {
    const syn = await h.start();
    try {
      const job = resultOf(await syn.call("model.load", { path: EMBED_DIR, model_id: "my-embed" }));
      assert.equal(job.kind, "model.load");
      assert.match(job.job_id, /^load_/);
      const done = await settle(syn, job.job_id);
      assert.equal(done.state, "ready", JSON.stringify(done));
      assert.equal(done.model_id, "my-embed");
      const out = resultOf(await syn.call("embed.query", { text: "hello", model: "my-embed" }));
      fingerprint = out.fingerprint;
      assert.equal(out.vectors.length, 1);
      const row = resultOf(await syn.call("models.list", {})).models.find((
        m: { model_id: string },
      ) => m.model_id === "my-embed");
      assert.equal(row.origin, "runtime");
      assert.equal(row.artifact_bytes, Deno.statSync(`${EMBED_DIR}/model.onnx`).size);
      const st = resultOf(await syn.call("model.status", { model_id: "my-embed" }));
      assert.deepEqual([st.state, st.engine, st.task, st.fingerprint], [
        "ready",
        "ort",
        "embed",
        fingerprint,
      ]);
      // Content-addressed: the blob is in the cache under its digest, pinned for the model.
      const meta = await syn.cache.meta(`sha256:${sha256(`${EMBED_DIR}/model.onnx`)}`);
      assert.equal(meta?.format, "onnx");
      assert.deepEqual(meta?.pins.map((p) => p.owner), ["synapse:model:my-embed"]);
    } finally {
      await syn.dispose();
    }
  }
  const syn = await h.start();
  try {
    const out = resultOf(await syn.call("embed.query", { text: "hello", model: "my-embed" }));
    assert.equal(out.fingerprint, fingerprint, "same files, same fingerprint after a restart");
  } finally {
    await syn.dispose();
  }
});

Deno.test("model.load refuses unpinned sources before any job: a URL without a digest, an hf branch, a missing path", async () => {
  await using h = await home();
  const syn = await h.start();
  try {
    const noDigest = semanticError(
      await syn.call("model.load", { url: "http://127.0.0.1:9/m.gguf" }),
    );
    assert.equal(noDigest.code, "invalid_request");
    assert.equal(noDigest.details.field, "expected_digest");
    assert.match(noDigest.message, /not pinned: give expected_digest/);
    const branch = semanticError(
      await syn.call("model.load", {
        repo: "Qwen/Qwen3-0.6B-GGUF",
        revision: "main",
        files: { model: { path: "Qwen3-0.6B-Q8_0.gguf", sha256: "0".repeat(64) } },
      }),
    );
    assert.equal(branch.code, "invalid_request");
    assert.match(branch.message, /40-hex commit/);
    const missing = semanticError(await syn.call("model.load", { path: `${h.dir}/nope` }));
    assert.equal(missing.code, "invalid_request");
    const catalogId = semanticError(
      await syn.call("model.load", { path: EMBED_DIR, model_id: "all-minilm-l6-v2" }),
    );
    assert.match(catalogId.message, /catalog id/);
    // A malformed field is a channel error, like every other operation's.
    const typo = channelError(await syn.call("model.load", { path: EMBED_DIR, pth: 1 }));
    assert.equal(typo.code, "invalid_request");
  } finally {
    await syn.dispose();
  }
});

Deno.test("model.load from a pinned loopback URL; a wrong digest fails the job with artifact_invalid", async () => {
  await using h = await home();
  await using srv = serveFiles({
    "/m/model.onnx": `${EMBED_DIR}/model.onnx`,
    "/m/tokenizer.json": `${EMBED_DIR}/tokenizer.json`,
  });
  const syn = await h.start();
  try {
    const tok = {
      url: `${srv.base}/m/tokenizer.json`,
      sha256: sha256(`${EMBED_DIR}/tokenizer.json`),
    };
    const job = resultOf(
      await syn.call("model.load", {
        url: `${srv.base}/m/model.onnx`,
        expected_digest: sha256(`${EMBED_DIR}/model.onnx`),
        files: { tokenizer: tok },
        model_id: "from-url",
      }),
    );
    const done = await settle(syn, job.job_id);
    assert.equal(done.state, "ready", JSON.stringify(done));
    assert.equal(
      done.bytes_done,
      Deno.statSync(`${EMBED_DIR}/model.onnx`).size +
        Deno.statSync(`${EMBED_DIR}/tokenizer.json`).size,
    );
    resultOf(await syn.call("embed.query", { text: "hi", model: "from-url" }));

    const bad = resultOf(
      await syn.call("model.load", {
        url: `${srv.base}/m/model.onnx`,
        expected_digest: "ab".repeat(32),
        files: { tokenizer: tok },
        model_id: "bad-digest",
      }),
    );
    const failed = await settle(syn, bad.job_id);
    assert.equal(failed.state, "failed");
    assert.equal(failed.error?.code, "artifact_invalid");
    assert.equal(failed.error?.class, "permanent");
    // Nothing of the failed load is served.
    assert.equal(
      semanticError(await syn.call("embed.query", { text: "x", model: "bad-digest" })).code,
      "unknown_model",
    );
  } finally {
    await syn.dispose();
  }
});

Deno.test("model.unload refuses while a request holds the model, then unloads; the unload survives a restart", async () => {
  await using h = await home();
  {
    const syn = await h.start();
    try {
      const job = resultOf(await syn.call("model.load", { path: EMBED_DIR, model_id: "held" }));
      assert.equal((await settle(syn, job.job_id)).state, "ready");
      const model = await syn.registry.ready("held");
      // A request admitted on the model's lane holds it until its permit is released.
      const permit = model.interactive.admit({ bytes: 1, deadlineMs: 60_000, maxQueueMs: 60_000 });
      const inUse = semanticError(await syn.call("model.unload", { model_id: "held" }));
      assert.equal(inUse.code, "model_in_use");
      assert.deepEqual(inUse.details.holders, [{ kind: "request", count: 1 }]);
      permit.release();
      const gone = resultOf(await syn.call("model.unload", { model_id: "held" }));
      assert.equal(gone.state, "unloaded");
      assert.equal(
        semanticError(await syn.call("embed.query", { text: "x", model: "held" })).code,
        "unknown_model",
      );
    } finally {
      await syn.dispose();
    }
  }
  const syn = await h.start();
  try {
    assert.equal(
      semanticError(await syn.call("embed.query", { text: "x", model: "held" })).code,
      "unknown_model",
    );
  } finally {
    await syn.dispose();
  }
});

/** A catalog of one model whose files the loopback server holds at Hugging Face's paths. */
function testCatalog(): CatalogModel[] {
  const rev = "0123456789abcdef0123456789abcdef01234567";
  const file = (path: string, local: string) => ({
    hf_repo: "synapse/tiny-embed",
    revision: rev,
    path,
    sha256: sha256(local),
    size: Deno.statSync(local).size,
    digest_source: "tests/ops/model_load_test.ts",
  });
  return [{
    id: "tiny-embed",
    task: "embed",
    name: "tiny",
    description: "test",
    default_for_task: false,
    upstream: { hf_repo: "synapse/tiny-embed", revision: rev },
    dims: 32,
    backends: [{
      backend: "ort",
      files: {
        model: file("model.onnx", `${EMBED_DIR}/model.onnx`),
        tokenizer: file("tokenizer.json", `${EMBED_DIR}/tokenizer.json`),
        config: file("config.json", `${EMBED_DIR}/config.json`),
      },
      pooling: "mean",
      normalize: true,
      max_tokens: 128,
    }],
  }, {
    id: "unpinned",
    task: "embed",
    name: "unpinned",
    description: "a model whose digest no source states",
    default_for_task: false,
    upstream: { hf_repo: "synapse/unpinned", revision: rev },
    dims: 32,
    backends: [{
      backend: "ort",
      files: {
        model: {
          ...file("model.onnx", `${EMBED_DIR}/model.onnx`),
          sha256: null,
          digest_source: null,
        },
      },
      pooling: "mean",
      normalize: true,
      max_tokens: 128,
    }],
  }];
}

Deno.test("models.download of a catalog model from a loopback hf_endpoint: one job per key, installed, served, removed", async () => {
  await using h = await home();
  const rev = "0123456789abcdef0123456789abcdef01234567";
  await using srv = serveFiles({
    [`/synapse/tiny-embed/resolve/${rev}/model.onnx`]: `${EMBED_DIR}/model.onnx`,
    [`/synapse/tiny-embed/resolve/${rev}/tokenizer.json`]: `${EMBED_DIR}/tokenizer.json`,
    [`/synapse/tiny-embed/resolve/${rev}/config.json`]: `${EMBED_DIR}/config.json`,
  });
  const catalog = testCatalog();
  const syn = await h.start({ catalog, config: { hf_endpoint: srv.base } });
  try {
    const before = resultOf(await syn.call("models.catalog", {}));
    const row = before.models.find((m: { id: string }) => m.id === "tiny-embed");
    assert.equal(row.install_state, "not_installed");
    assert.deepEqual(
      row.backends.map((b: { lane_id: string; runnable: boolean }) => [b.lane_id, b.runnable]),
      [["tiny-embed-ort", true]],
    );
    const unpinned = before.models.find((m: { id: string }) => m.id === "unpinned");
    assert.equal(unpinned.backends[0].reason, "digest_unverified");
    assert.equal(
      semanticError(await syn.call("models.download", { catalog_id: "unpinned" })).code,
      "backend_unavailable",
    );

    // Two concurrent downloads of the same catalog id: one job, one fetch per file.
    const [a, b] = await Promise.all([
      syn.call("models.download", { catalog_id: "tiny-embed" }),
      syn.call("models.download", { catalog_id: "tiny-embed" }),
    ]);
    assert.equal(resultOf(a).job_id, resultOf(b).job_id);
    assert.match(resultOf(a).request_key, /^models\.download:tiny-embed:sha256:/);
    const done = await settle(syn, resultOf(a).job_id);
    assert.equal(done.state, "committed", JSON.stringify(done));
    assert.equal(srv.hits.get(`/synapse/tiny-embed/resolve/${rev}/model.onnx`), 1);
    await syn.registry.ready("tiny-embed");
    const out = resultOf(await syn.call("embed.query", { text: "hi", model: "tiny-embed" }));
    assert.equal(out.vectors.length, 1);
    const listed = resultOf(await syn.call("models.list", {})).models.find((
      m: { model_id: string },
    ) => m.model_id === "tiny-embed");
    assert.deepEqual([listed.origin, listed.catalog_id, listed.lane_id], [
      "catalog",
      "tiny-embed",
      "tiny-embed-ort",
    ]);
    const after = resultOf(await syn.call("models.catalog", { installed: true }));
    assert.deepEqual(after.models.map((m: { id: string }) => m.id), ["tiny-embed"]);
    assert.equal(after.models[0].backends[0].fingerprint, out.fingerprint);

    const removed = resultOf(await syn.call("models.remove", { catalog_id: "tiny-embed" }));
    assert.equal(removed.catalog_id, "tiny-embed");
    assert.equal(removed.removed_manifests.length, 1);
    const expected = ["model.onnx", "tokenizer.json", "config.json"].reduce(
      (a, f) => a + Deno.statSync(`${EMBED_DIR}/${f}`).size,
      0,
    );
    assert.equal(removed.freed_bytes, expected);
    const gone = resultOf(await syn.call("models.catalog", { installed: true }));
    assert.deepEqual(gone.models, []);

    // Downloading it again under the same default key installs it again: the committed job of
    // the removed install is not answered as if the model were there.
    const again = resultOf(await syn.call("models.download", { catalog_id: "tiny-embed" }));
    assert.notEqual(again.job_id, resultOf(a).job_id);
    assert.equal((await settle(syn, again.job_id)).state, "committed");
    await syn.registry.ready("tiny-embed");
    const back = resultOf(await syn.call("embed.query", { text: "hi", model: "tiny-embed" }));
    assert.equal(back.fingerprint, out.fingerprint);
  } finally {
    await syn.dispose();
  }
});

Deno.test("a GGUF alone, pulled from a pinned loopback URL, generates text at once (no tokenizer.json, no restart)", async () => {
  await using h = await home();
  const gguf = `${MODELS}/synapse-tiny-qwen/model.gguf`;
  await using srv = serveFiles({ "/tiny-qwen.gguf": gguf });
  const syn = await h.start();
  try {
    const before = semanticError(
      await syn.call("microllm.oneshot", { prompt: "hi", max_tokens: 3 }),
    );
    assert.equal(before.code, "unknown_model");
    const job = resultOf(
      await syn.call("model.load", {
        url: `${srv.base}/tiny-qwen.gguf`,
        expected_digest: `sha256:${sha256(gguf)}`,
        task: "generate",
      }),
    );
    const done = await settle(syn, job.job_id);
    assert.equal(done.state, "ready", JSON.stringify(done));
    // The id comes from the file name, the engine from the GGUF magic.
    assert.equal(done.model_id, "tiny-qwen");
    assert.equal(done.bytes_done, Deno.statSync(gguf).size);
    const st = resultOf(await syn.call("model.status", { model_id: "tiny-qwen" }));
    assert.deepEqual([st.engine, st.task], ["llama", "generate"]);
    const out = resultOf(
      await syn.call("microllm.oneshot", { prompt: "hello", max_tokens: 3 }),
    );
    assert.equal(out.n_gen, 3);
    // The worker reports its own resident memory (PONG): no /proc access needed.
    const row = resultOf(await syn.call("models.list", {})).models.find((
      m: { model_id: string },
    ) => m.model_id === "tiny-qwen");
    assert.ok(row.worker_rss_bytes > 1024 * 1024, JSON.stringify(row.worker_rss_bytes));
    assert.equal(out.generated_token_ids.length, 3);
    assert.equal(typeof out.text, "string");
  } finally {
    await syn.dispose();
  }
});

Deno.test("F36: the task comes from what the file is: decoders with a pooling type generate, embedding-only architectures embed, an ONNX classifier reranks", async () => {
  const { inferTask, ggufTask } = await import("../../lib/models/_load_infer.ts");
  // The project's own test decoders (scripts/gen_gguf.ts) carry llama.pooling_type: decoders.
  for (const name of ["synapse-tiny-qwen", "synapse-tiny-llama", "synapse-tiny-llama-bytes"]) {
    const got = await inferTask("llama", `${MODELS}/${name}/model.gguf`, undefined);
    assert.equal(got.task, "generate", name);
    assert.match(got.surprise ?? "", /pooling_type.*pass --task embed to override/, name);
  }
  const tensors = ["token_embd.weight", "output_norm.weight"];
  assert.equal(ggufTask({ "general.architecture": "bert" }, tensors).task, "embed");
  assert.equal(ggufTask({ "general.architecture": "nomic-bert" }, tensors).task, "embed");
  // A decoder with no output head that says it embeds (a converted Qwen3-Embedding).
  const qwenEmbed = ggufTask({
    "general.architecture": "qwen3",
    "general.name": "Qwen3 Embedding 0.6B",
    "qwen3.pooling_type": 3,
  }, tensors);
  assert.equal(qwenEmbed.task, "embed");
  assert.match(qwenEmbed.surprise!, /^loaded as embed because .*pass --task generate to override$/);
  // The same with an output head, or with a chat template and no pooling type: a generator.
  assert.equal(
    ggufTask({
      "general.architecture": "qwen3",
      "general.name": "Qwen3 Embedding 0.6B",
      "qwen3.pooling_type": 3,
    }, [...tensors, "output.weight"]).task,
    "generate",
  );
  const chat = ggufTask(
    { "general.architecture": "qwen3", "tokenizer.chat_template": "{{x}}" },
    [],
  );
  assert.deepEqual([chat.task, chat.surprise], ["generate", undefined]);
  // An explicit task in the metadata wins.
  assert.equal(
    ggufTask({ "general.architecture": "llama", "general.type": "embedding" }, tensors).task,
    "embed",
  );
  const rr = `${MODELS}/synapse-tiny-rerank`;
  assert.equal((await inferTask("ort", `${rr}/model.onnx`, `${rr}/config.json`)).task, "rerank");
  assert.equal(
    (await inferTask("ort", `${EMBED_DIR}/model.onnx`, `${EMBED_DIR}/config.json`)).task,
    "embed",
  );
});

Deno.test("F36: a GGUF decoder with pooling metadata pulls as generate, says why, and leaves the default embed model alone", async () => {
  await using h = await home();
  const syn = await h.start();
  try {
    const before = resultOf(await syn.call("models.list", {}));
    assert.equal(before.served_by.embed, "synapse-tiny-embed");
    // The GGUF alone (no config.json to name its task): its metadata decides.
    const alone = `${h.dir}/qwen-alone`;
    await Deno.mkdir(alone);
    await Deno.copyFile(`${MODELS}/synapse-tiny-qwen/model.gguf`, `${alone}/model.gguf`);
    const job = resultOf(await syn.call("model.load", { path: alone, model_id: "qwen-dec" }));
    const done = await settle(syn, job.job_id);
    assert.equal(done.state, "ready", JSON.stringify(done));
    assert.equal(done.task, "generate");
    assert.match(done.task_reason ?? "", /architecture 'llama' is a decoder/);
    assert.ok(
      done.notes?.some((n) =>
        /^loaded as generate though .*pass --task embed to override$/.test(n)
      ),
      JSON.stringify(done.notes),
    );
    // It became the default of its own task, and said so; the embed default is unchanged.
    assert.equal(done.default_for, "generate");
    assert.equal(done.replaced_default, null);
    assert.ok(done.notes?.includes("now the default generate model"), JSON.stringify(done.notes));
    const after = resultOf(await syn.call("models.list", {}));
    assert.equal(after.served_by.embed, "synapse-tiny-embed");
    assert.equal(after.served_by.generate, "qwen-dec");
    const st = resultOf(await syn.call("model.status", { model_id: "qwen-dec" }));
    assert.deepEqual([st.engine, st.task], ["llama", "generate"]);
    const out = resultOf(await syn.call("microllm.oneshot", { prompt: "hi", max_tokens: 2 }));
    assert.equal(out.n_gen, 2);
    // With its config.json beside it (scripts/gen_gguf.ts writes synapse_task), the config says.
    const withConfig = await settle(
      syn,
      resultOf(
        await syn.call("model.load", {
          path: `${MODELS}/synapse-tiny-llama`,
          model_id: "llama-dec",
        }),
      ).job_id,
    );
    assert.equal(withConfig.state, "ready", JSON.stringify(withConfig));
    assert.deepEqual([withConfig.task, withConfig.task_reason], [
      "generate",
      "its config.json says task 'generate'",
    ]);
    assert.equal(resultOf(await syn.call("models.list", {})).served_by.embed, "synapse-tiny-embed");
  } finally {
    await syn.dispose();
  }
});

Deno.test("F36: a GGUF inferred as embed against mixed signals does not take over the default embed model, across a restart", async () => {
  await using h = await home();
  const { llamaVocab, TINY_SPECS, writeLlamaGguf } = await import("../../scripts/gen_gguf.ts");
  const dir = `${h.dir}/tiny-embedder`;
  await Deno.mkdir(dir);
  // A llama decoder with tied embeddings (no output.weight), a pooling type and "embed" in its
  // name: read as an embedder, a surprising choice.
  const vocab = llamaVocab(await Deno.readTextFile(`${MODELS}/synapse-tiny-llama/tokenizer.json`));
  await writeLlamaGguf(`${dir}/model.gguf`, {
    ...TINY_SPECS[0]!,
    name: "synapse-tiny-embedder",
    tiedEmbeddings: true,
  }, vocab);
  {
    const syn = await h.start();
    try {
      const job = resultOf(await syn.call("model.load", { path: dir }));
      const done = await settle(syn, job.job_id);
      assert.equal(done.state, "ready", JSON.stringify(done));
      assert.equal(done.task, "embed");
      assert.ok(
        done.notes?.some((n) => /^loaded as embed because .*--task generate to override$/.test(n)),
        JSON.stringify(done.notes),
      );
      assert.ok(
        done.notes?.some((n) =>
          /^not made the default embed model: synapse-tiny-embed stays; name it with model: tiny-embedder/
            .test(n)
        ),
        JSON.stringify(done.notes),
      );
      assert.equal(done.default_for, undefined);
      const list = resultOf(await syn.call("models.list", {}));
      assert.equal(list.served_by.embed, "synapse-tiny-embed");
      const mine = resultOf(await syn.call("embed.query", { text: "x", model: "tiny-embedder" }));
      assert.equal(mine.vectors.length, 1);
    } finally {
      await syn.dispose();
    }
  }
  const syn = await h.start();
  try {
    const list = resultOf(await syn.call("models.list", {}));
    assert.equal(
      list.served_by.embed,
      "synapse-tiny-embed",
      "still not the default after a restart",
    );
  } finally {
    await syn.dispose();
  }
});

Deno.test("models.remove of a model a durable job holds is model_in_use naming the job; once it ends the files go", async () => {
  await using h = await home();
  const syn = await h.start();
  try {
    const job = resultOf(await syn.call("model.load", { path: EMBED_DIR, model_id: "jobbed" }));
    assert.equal((await settle(syn, job.job_id)).state, "ready");
    const model = await syn.registry.ready("jobbed");
    // Hold the bulk lane so the job is admitted and waits, deterministically.
    const slot = await model.bulk.reserve();
    let released = false;
    try {
      const texts = Array.from({ length: 80 }, (_, i) => `text ${i}`);
      const accepted = resultOf(
        await syn.call("embed.batch", { texts, model: "jobbed", request_key: "hold-1" }),
      );
      assert.ok(accepted.job_id);
      const inUse = semanticError(await syn.call("models.remove", { catalog_id: "jobbed" }));
      assert.equal(inUse.code, "model_in_use");
      assert.equal(inUse.details.catalog_id, "jobbed");
      assert.deepEqual(
        inUse.details.holders.filter((x: { kind: string }) => x.kind === "job"),
        [{ kind: "job", job_id: accepted.job_id }],
      );
      // Still served: the refusal took nothing away.
      resultOf(await syn.call("embed.query", { text: "still here", model: "jobbed" }));
      slot.release();
      released = true;
      await syn.context.jobs.running.get(accepted.job_id);
      const removed = resultOf(await syn.call("models.remove", { catalog_id: "jobbed" }));
      assert.ok(removed.freed_bytes >= Deno.statSync(`${EMBED_DIR}/model.onnx`).size);
      assert.equal(
        await syn.cache.meta(`sha256:${sha256(`${EMBED_DIR}/model.onnx`)}`),
        undefined,
      );
    } finally {
      if (!released) slot.release();
    }
  } finally {
    await syn.dispose();
  }
});

Deno.test("pulling the same files again under the same id is answered ready at once; other files under that id are refused", async () => {
  await using h = await home();
  const syn = await h.start();
  try {
    const first = resultOf(await syn.call("model.load", { path: EMBED_DIR, model_id: "twice" }));
    assert.equal((await settle(syn, first.job_id)).state, "ready");
    const again = await settle(
      syn,
      resultOf(await syn.call("model.load", { path: EMBED_DIR, model_id: "twice" })).job_id,
    );
    assert.deepEqual([again.state, again.already_loaded], ["ready", true]);
    const other = await settle(
      syn,
      resultOf(
        await syn.call("model.load", { path: `${MODELS}/synapse-tiny-rerank`, model_id: "twice" }),
      ).job_id,
    );
    assert.equal(other.state, "failed");
    assert.equal(other.error?.code, "invalid_request");
    assert.match(other.error?.message ?? "", /already loaded from other files/);
    // The model that holds the id is untouched.
    resultOf(await syn.call("embed.query", { text: "x", model: "twice" }));
  } finally {
    await syn.dispose();
  }
});

Deno.test("a pulled model that is not a test model serves requests that name none, ahead of the test models", async () => {
  await using h = await home();
  // The generated encoder without its config.json (which labels it a test model).
  const dir = `${h.dir}/plain-embed`;
  await Deno.mkdir(dir);
  await Deno.copyFile(`${EMBED_DIR}/model.onnx`, `${dir}/model.onnx`);
  await Deno.copyFile(`${EMBED_DIR}/tokenizer.json`, `${dir}/tokenizer.json`);
  const syn = await h.start();
  try {
    const before = resultOf(await syn.call("models.list", {}));
    assert.equal(before.served_by.embed, "synapse-tiny-embed");
    const job = resultOf(await syn.call("model.load", { path: dir }));
    assert.equal((await settle(syn, job.job_id)).state, "ready");
    const after = resultOf(await syn.call("models.list", {}));
    assert.equal(after.served_by.embed, "plain-embed");
    const out = resultOf(await syn.call("embed.query", { text: "who serves?" }));
    const mine = resultOf(
      await syn.call("embed.query", { text: "who serves?", model: "plain-embed" }),
    );
    assert.equal(out.fingerprint, mine.fingerprint);
    assert.equal(out.test_model, undefined);
  } finally {
    await syn.dispose();
  }
});

Deno.test("a file that is neither ONNX nor GGUF is artifact_invalid not_a_model, and its blob does not stay in the cache", async () => {
  await using h = await home();
  const path = `${h.dir}/x.gguf`;
  await Deno.writeTextFile(path, "hello, not a model\n");
  const syn = await h.start();
  try {
    const job = resultOf(await syn.call("model.load", { path }));
    const done = await settle(syn, job.job_id);
    assert.equal(done.state, "failed");
    assert.equal(done.error?.code, "artifact_invalid");
    assert.equal(done.error?.details?.reason, "not_a_model");
    assert.equal(await syn.cache.meta(`sha256:${sha256(path)}`), undefined);
  } finally {
    await syn.dispose();
  }
});

Deno.test("models.catalog of the shipped catalog: sizes are exact where every size is pinned, a lower bound otherwise", async () => {
  await using h = await home();
  const syn = await h.start();
  try {
    const rows = resultOf(await syn.call("models.catalog", {})).models;
    const gte = rows.find((m: { id: string }) => m.id === "gte-modernbert-base");
    assert.deepEqual([gte.download_bytes, gte.download_bytes_exact], [596392315, false]);
    const minilm = rows.find((m: { id: string }) => m.id === "all-minilm-l6-v2");
    assert.deepEqual([minilm.download_bytes, minilm.download_bytes_exact], [
      90405214 + 466247 + 612,
      true,
    ]);
    assert.equal(minilm.install_state, "not_installed");
    assert.deepEqual(minilm.backends[0].files.map((f: { role: string }) => f.role), [
      "model",
      "tokenizer",
      "config",
    ]);
    // What shapes a lane's vectors beyond its files is in the row: prompts and Matryoshka widths.
    assert.equal(minilm.matryoshka_dims, null);
    assert.equal(minilm.backends[0].prompts, null);
    const qwen = rows.find((m: { id: string }) => m.id === "qwen3-embedding-0.6b");
    assert.deepEqual(qwen.matryoshka_dims, [32, 64, 128, 256, 512, 768, 1024]);
    assert.deepEqual(Object.keys(qwen.backends[0].prompts.prompts), ["query", "document"]);
    assert.match(qwen.backends[0].prompts.prompts.query, /^Instruct: .*\nQuery:$/);
    const gen = resultOf(
      await syn.call("models.catalog", { task: "generate", runnable_here: true }),
    );
    assert.deepEqual(gen.models.map((m: { id: string }) => m.id), [
      "qwen2.5-0.5b-instruct",
      "qwen3-0.6b",
      "smollm2-360m-instruct",
    ]);
  } finally {
    await syn.dispose();
  }
});

Deno.test("cache.pin pins and unpins per module, and cannot drop the pins of a loaded model", async () => {
  await using h = await home();
  const syn = await h.start();
  try {
    const job = resultOf(await syn.call("model.load", { path: EMBED_DIR, model_id: "pinned" }));
    assert.equal((await settle(syn, job.job_id)).state, "ready");
    const digest = `sha256:${sha256(`${EMBED_DIR}/model.onnx`)}`;
    const mine = resultOf(await syn.call("cache.pin", { digest, module_id: "indexer" }));
    assert.deepEqual(mine.pins.map((p: { owner: string }) => p.owner).sort(), [
      "indexer",
      "synapse:model:pinned",
    ]);
    const off = resultOf(
      await syn.call("cache.pin", { digest, module_id: "indexer", unpin: true }),
    );
    assert.deepEqual(off.pins.map((p: { owner: string }) => p.owner), ["synapse:model:pinned"]);
    const refused = channelError(
      await syn.call("cache.pin", { digest, module_id: "synapse:model:pinned", unpin: true }),
    );
    assert.equal(refused.code, "invalid_request");
    assert.match(refused.message, /module_id/);
    // The loaded model's pin keeps its blob through a GC with no grace.
    const gc = resultOf(await syn.call("cache.gc", { digest, grace_ms: 0 }));
    assert.deepEqual(gc.rows.map((r: { state: string; reason?: string }) => [r.state, r.reason]), [
      ["kept", "pinned"],
    ]);
  } finally {
    await syn.dispose();
  }
});

Deno.test("a request naming a model right after model.load answered its job gets model_loading with a retry hint, never unknown_model", async () => {
  await using h = await home();
  const syn = await h.start();
  try {
    const job = resultOf(await syn.call("model.load", { path: EMBED_DIR, model_id: "e2" }));
    // No wait beyond the call: the id is known as loading from the moment the job is answered.
    const e = semanticError(await syn.call("embed.query", { model: "e2", text: "hello" }));
    assert.equal(e.code, "model_loading", JSON.stringify(e));
    assert.equal(e.retry_after_ms, 250);
    assert.equal(e.details.model_id, "e2");
    const done = await settle(syn, job.job_id);
    assert.equal(done.state, "ready", JSON.stringify(done));
    const out = resultOf(await syn.call("embed.query", { model: "e2", text: "hello" }));
    assert.equal(out.model_id, "e2");
  } finally {
    await syn.dispose();
  }
});

Deno.test("a model.load that fails leaves its id unknown: model_loading while it runs, unknown_model after", async () => {
  await using h = await home();
  const syn = await h.start();
  const dir = await Deno.makeTempDir({ prefix: "synapse-bad-" });
  try {
    // A file that is no model: validation refuses it once the job runs.
    await Deno.writeTextFile(`${dir}/model.onnx`, "not an onnx model");
    await Deno.copyFile(`${EMBED_DIR}/tokenizer.json`, `${dir}/tokenizer.json`);
    const job = resultOf(await syn.call("model.load", { path: dir, model_id: "bad" }));
    const e = semanticError(await syn.call("embed.query", { model: "bad", text: "hello" }));
    assert.equal(e.code, "model_loading", JSON.stringify(e));
    const done = await settle(syn, job.job_id);
    assert.equal(done.state, "failed", JSON.stringify(done));
    const after = semanticError(await syn.call("embed.query", { model: "bad", text: "hello" }));
    assert.equal(after.code, "unknown_model", JSON.stringify(after));
  } finally {
    await syn.dispose();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a fixture loaded at run time is flagged test_model alike for ONNX and GGUF", async () => {
  await using h = await home();
  const syn = await h.start();
  try {
    for (
      const [path, id] of [[EMBED_DIR, "te"], [`${MODELS}/synapse-tiny-llama`, "tl"]] as const
    ) {
      const job = resultOf(await syn.call("model.load", { path, model_id: id }));
      const done = await settle(syn, job.job_id);
      assert.equal(done.state, "ready", JSON.stringify(done));
      const row = resultOf(await syn.call("models.list", {})).models.find((
        m: { model_id: string },
      ) => m.model_id === id);
      assert.equal(row.test_model, true, id);
    }
  } finally {
    await syn.dispose();
  }
});
