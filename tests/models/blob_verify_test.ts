/**
 * F28: every load checks its blobs against their recorded digests before an engine reads them.
 * Between two restarts (a new Synapse instance over the same data home and model cache) a blob
 * of an ONNX and of a GGUF model gets one byte flipped, or is cut short: a recorded source that
 * still verifies (the local file, the pinned URL) heals it and the model serves with its recorded
 * fingerprint; with no such source the load is refused naming the blob, and the rest serves.
 * Fixtures are copied into temp directories first; only the copies are damaged.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { loadConfig } from "../../lib/config/loader.ts";
import type { LogSink } from "../../lib/log/log.ts";
import { createSynapse, type Synapse } from "../../lib/synapse.ts";
import { MODELS, resultOf, semanticError } from "../_helpers.ts";

const EMBED_DIR = `${MODELS}/synapse-tiny-embed`;
const LLAMA_DIR = `${MODELS}/synapse-tiny-llama`;

function sha256(path: string): string {
  return createHash("sha256").update(Deno.readFileSync(path)).digest("hex");
}

/** Flips one byte in the middle of a file (keeping its size). */
function flipByte(path: string): void {
  const bytes = Deno.readFileSync(path);
  bytes[bytes.length >> 1]! ^= 0x5a;
  Deno.writeFileSync(path, bytes);
}

/** Copies the files of a fixture directory into `to`. */
function copyDir(from: string, to: string): void {
  Deno.mkdirSync(to, { recursive: true });
  for (const e of Deno.readDirSync(from)) {
    if (e.isFile) Deno.copyFileSync(`${from}/${e.name}`, `${to}/${e.name}`);
  }
}

interface LogLine {
  level: string;
  message: string;
  fields: Record<string, unknown>;
}

/** A data home (and model cache) that outlives one instance. */
async function home() {
  const dir = await Deno.makeTempDir({ prefix: "synapse-blob-" });
  const env = { XDG_DATA_HOME: `${dir}/data`, XDG_CONFIG_HOME: `${dir}/config`, HOME: dir };
  const cacheRoot = `${dir}/data/cortexkit/models`;
  return {
    dir,
    cacheRoot,
    blob: (hex: string) => `${cacheRoot}/blobs/${hex}`,
    tmpEntries: () => [...Deno.readDirSync(`${cacheRoot}/tmp`)].map((e) => e.name),
    async start(lines: LogLine[] = []): Promise<Synapse> {
      const { config } = loadConfig({
        env: { ...env, SYNAPSE_CONFIG_JSON: JSON.stringify({ certification: "warn" }) },
        cwd: dir,
      });
      const log: LogSink = (level, _target, message, fields) =>
        void lines.push({ level, message, fields: { ...(fields ?? {}) } });
      return await createSynapse({ config, env, log });
    },
    async [Symbol.asyncDispose]() {
      await Deno.remove(dir, { recursive: true });
    },
  };
}

async function loadReady(syn: Synapse, params: Record<string, unknown>) {
  const job = resultOf(await syn.call("model.load", params));
  const done = await syn.loads.settled(job.job_id);
  assert.equal(done.state, "ready", JSON.stringify(done));
  return done;
}

async function status(syn: Synapse, modelId: string) {
  return resultOf(await syn.call("model.status", { model_id: modelId }));
}

/** A loopback file server counting requests per path. */
function serveFiles(files: Record<string, string>) {
  const hits = new Map<string, number>();
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    const path = new URL(req.url).pathname;
    hits.set(path, (hits.get(path) ?? 0) + 1);
    const file = files[path];
    if (file === undefined) return new Response("not found", { status: 404 });
    return new Response(await Deno.readFile(file));
  });
  return {
    base: `http://127.0.0.1:${server.addr.port}`,
    hits,
    [Symbol.asyncDispose]: () => server.shutdown(),
  };
}

Deno.test("F28: an ONNX and a GGUF blob with one byte flipped between restarts are healed from their local source and serve with their recorded fingerprints", async () => {
  await using h = await home();
  const embedSrc = `${h.dir}/src/embed`;
  const llamaSrc = `${h.dir}/src/llama`;
  copyDir(EMBED_DIR, embedSrc);
  copyDir(LLAMA_DIR, llamaSrc);
  const onnxHex = sha256(`${embedSrc}/model.onnx`);
  const ggufHex = sha256(`${llamaSrc}/model.gguf`);
  let prints: string[];
  {
    const syn = await h.start();
    try {
      await loadReady(syn, { path: embedSrc, model_id: "my-embed" });
      await loadReady(syn, { path: llamaSrc, model_id: "my-llama", task: "generate" });
      prints = [
        (await status(syn, "my-embed")).fingerprint,
        (await status(syn, "my-llama")).fingerprint,
      ];
    } finally {
      await syn.dispose();
    }
  }
  flipByte(h.blob(onnxHex));
  flipByte(h.blob(ggufHex));
  assert.notEqual(sha256(h.blob(onnxHex)), onnxHex);
  const lines: LogLine[] = [];
  const syn = await h.start(lines);
  try {
    const embed = await status(syn, "my-embed");
    const llama = await status(syn, "my-llama");
    assert.deepEqual(
      [embed.state, llama.state],
      ["ready", "ready"],
      JSON.stringify([embed, llama]),
    );
    assert.deepEqual([embed.fingerprint, llama.fingerprint], prints, "the recorded bytes serve");
    assert.equal(sha256(h.blob(onnxHex)), onnxHex, "the ONNX blob holds its bytes again");
    assert.equal(sha256(h.blob(ggufHex)), ggufHex, "the GGUF blob holds its bytes again");
    const healed = lines.filter((l) => /^healed the damaged/.test(l.message));
    assert.deepEqual(
      healed.map((l) => [l.fields.model_id, l.fields.file, l.fields.digest, l.fields.from]).sort(),
      [
        ["my-embed", "model", `sha256:${onnxHex}`, "file"],
        ["my-llama", "model", `sha256:${ggufHex}`, "file"],
      ],
    );
    resultOf(await syn.call("embed.query", { text: "hello", model: "my-embed" }));
    const out = resultOf(
      await syn.call("microllm.oneshot", { prompt: "hi", max_tokens: 2, model: "my-llama" }),
    );
    assert.equal(out.n_gen, 2);
    assert.deepEqual(h.tmpEntries(), [], "tmp/ keeps nothing of the heal");
    // Hashed once per boot: the blob as it is now is not hashed again.
    const again = await syn.cache.verifyBlob(`sha256:${onnxHex}`);
    assert.equal(again.hashed, false);
  } finally {
    await syn.dispose();
  }
});

Deno.test("F28: a truncated blob whose pinned URL is intact is downloaded again at boot and serves with the right fingerprint", async () => {
  await using h = await home();
  await using srv = serveFiles({
    "/m/model.onnx": `${EMBED_DIR}/model.onnx`,
    "/m/tokenizer.json": `${EMBED_DIR}/tokenizer.json`,
  });
  const onnxHex = sha256(`${EMBED_DIR}/model.onnx`);
  let fingerprint: string;
  {
    const syn = await h.start();
    try {
      await loadReady(syn, {
        url: `${srv.base}/m/model.onnx`,
        expected_digest: onnxHex,
        files: {
          tokenizer: {
            url: `${srv.base}/m/tokenizer.json`,
            sha256: sha256(`${EMBED_DIR}/tokenizer.json`),
          },
        },
        model_id: "from-url",
      });
      fingerprint = (await status(syn, "from-url")).fingerprint;
    } finally {
      await syn.dispose();
    }
  }
  assert.equal(srv.hits.get("/m/model.onnx"), 1);
  const blob = h.blob(onnxHex);
  Deno.truncateSync(blob, Deno.statSync(blob).size >> 1);
  const lines: LogLine[] = [];
  const syn = await h.start(lines);
  try {
    const st = await status(syn, "from-url");
    assert.equal(st.state, "ready", JSON.stringify(st));
    assert.equal(st.fingerprint, fingerprint);
    assert.equal(srv.hits.get("/m/model.onnx"), 2, "fetched again from its pinned URL");
    assert.equal(sha256(blob), onnxHex);
    assert.ok(
      lines.some((l) => /^healed the damaged model file of model 'from-url'/.test(l.message)),
    );
    resultOf(await syn.call("embed.query", { text: "hi", model: "from-url" }));
    assert.deepEqual(h.tmpEntries(), []);
  } finally {
    await syn.dispose();
  }
});

Deno.test("F28: a damaged blob whose source no longer verifies is refused naming the blob; the service stays up and other models serve", async () => {
  await using h = await home();
  const embedSrc = `${h.dir}/src/private-embed`;
  copyDir(EMBED_DIR, embedSrc);
  const onnxHex = sha256(`${embedSrc}/model.onnx`);
  {
    const syn = await h.start();
    try {
      await loadReady(syn, { path: embedSrc, model_id: "my-embed" });
    } finally {
      await syn.dispose();
    }
  }
  // The blob and its source are both damaged: nothing can heal it.
  flipByte(h.blob(onnxHex));
  flipByte(`${embedSrc}/model.onnx`);
  const damaged = Deno.readFileSync(h.blob(onnxHex));
  const syn = await h.start();
  try {
    const st = await status(syn, "my-embed");
    assert.equal(st.state, "failed", JSON.stringify(st));
    const err = st.error;
    assert.equal(err.code, "artifact_invalid", JSON.stringify(err));
    assert.equal(err.details.reason, "blob_digest_mismatch");
    assert.equal(err.details.digest, `sha256:${onnxHex}`);
    assert.equal(err.details.model_id, "my-embed");
    assert.equal(err.details.file, "model");
    assert.match(err.message, new RegExp(`my-embed.*sha256:${onnxHex}.*damaged`));
    assert.ok(!JSON.stringify(err).includes(embedSrc), "no caller path in the error");
    // Refused, not served, and not thrown away: the bytes stay for the next look.
    const refused = semanticError(await syn.call("embed.query", { text: "x", model: "my-embed" }));
    assert.equal(refused.code, "artifact_invalid");
    assert.deepEqual(Deno.readFileSync(h.blob(onnxHex)), damaged);
    assert.deepEqual(h.tmpEntries(), []);
    // The rest serves.
    const other = resultOf(await syn.call("embed.query", { text: "still up" }));
    assert.equal(other.vectors.length, 1);
    const health = resultOf(await syn.call("models.list", {}));
    assert.equal(health.served_by.embed, "synapse-tiny-embed");
  } finally {
    await syn.dispose();
  }
});

Deno.test("F28: a pull that finds its cached blob damaged heals it in the job and says so", async () => {
  await using h = await home();
  const embedSrc = `${h.dir}/src/embed`;
  copyDir(EMBED_DIR, embedSrc);
  const onnxHex = sha256(`${embedSrc}/model.onnx`);
  const syn = await h.start();
  try {
    await loadReady(syn, { path: embedSrc, model_id: "first", pin: false });
    await syn.loads.unload("first");
    flipByte(h.blob(onnxHex));
    // With its digest given, the import hashes the source and keeps the blob there: the load's
    // own check finds it damaged and heals it from the source.
    const done = await loadReady(syn, {
      path: embedSrc,
      expected_digest: onnxHex,
      model_id: "second",
    });
    assert.deepEqual(done.healed, [{ file: "model", digest: `sha256:${onnxHex}`, from: "file" }]);
    assert.equal(sha256(h.blob(onnxHex)), onnxHex);
    resultOf(await syn.call("embed.query", { text: "hi", model: "second" }));
  } finally {
    await syn.dispose();
  }
});
