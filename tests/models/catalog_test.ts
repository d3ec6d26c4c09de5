/**
 * The shipped catalog is well formed: every file pinned by a 40-hex commit and a SHA-256 with
 * the public Hugging Face URL that states it (the LFS pointer of an LFS file, else the file), one default per task, unique ids and lane ids, and a
 * manifest digest that changes with any pinned fact.
 */
import assert from "node:assert/strict";
import {
  backendFiles,
  backendUnrunnableReason,
  CATALOG,
  catalogLaneId,
  digestSourceUrl,
  fileUrl,
  manifestDigest,
} from "../../lib/models/catalog.ts";

Deno.test("every catalog file is pinned: 40-hex commit, 64-hex SHA-256 and the URL that states it", () => {
  for (const m of CATALOG) {
    assert.match(m.upstream.revision, /^[0-9a-f]{40}$/, m.id);
    for (const b of m.backends) {
      for (const [role, f] of backendFiles(b)) {
        const where = `${m.id} ${b.backend} ${role}`;
        assert.match(f.revision, /^[0-9a-f]{40}$/, where);
        assert.match(f.sha256 ?? "", /^[0-9a-f]{64}$/, where);
        // The source names the pin's own repository, revision and path: an LFS pointer (`raw`)
        // for what Hugging Face keeps in Git LFS, else the file itself (`resolve`).
        const lfs = /\.(onnx|gguf|safetensors|bin)$/.test(f.path) ||
          (f.size !== null && f.size > 10 * 1024 * 1024);
        assert.equal(
          f.digest_source,
          `https://huggingface.co/${f.hf_repo}/${lfs ? "raw" : "resolve"}/${f.revision}/${f.path}`,
          where,
        );
        if (f.size !== null) assert.ok(Number.isSafeInteger(f.size) && f.size > 0, where);
      }
      assert.equal(backendUnrunnableReason(b, { llama: true }), undefined, m.id);
    }
  }
});

Deno.test("catalog ids and lane ids are unique; each task has exactly one default", () => {
  const ids = CATALOG.map((m) => m.id);
  assert.equal(new Set(ids).size, ids.length);
  const lanes = CATALOG.flatMap((m) => m.backends.map((b) => catalogLaneId(m, b.backend)));
  assert.equal(new Set(lanes).size, lanes.length);
  for (const task of ["embed", "rerank", "generate"]) {
    assert.equal(CATALOG.filter((m) => m.task === task && m.default_for_task).length, 1, task);
  }
  // The reference's four models keep their ids (fingerprints compare across the fleet).
  for (
    const id of [
      "gte-modernbert-base",
      "gte-reranker-modernbert-base",
      "qwen3-embedding-0.6b",
      "qwen3-reranker-0.6b",
    ]
  ) {
    assert.ok(ids.includes(id), id);
  }
});

Deno.test("a model with no backend says why; a llama lane is not runnable without the llama engine", () => {
  const qr = CATALOG.find((m) => m.id === "qwen3-reranker-0.6b")!;
  assert.deepEqual(qr.backends, []);
  assert.match(qr.no_backend_reason ?? "", /yes\/no/);
  const gen = CATALOG.find((m) => m.id === "qwen2.5-0.5b-instruct")!;
  assert.equal(
    backendUnrunnableReason(gen.backends[0]!, { llama: false }),
    "llama_engine_unavailable",
  );
});

Deno.test("manifest_digest changes with any pinned fact, and file URLs use Hugging Face's resolve layout", () => {
  const m = CATALOG.find((x) => x.id === "all-minilm-l6-v2")!;
  const d = manifestDigest(m);
  assert.match(d, /^sha256:[0-9a-f]{64}$/);
  assert.equal(manifestDigest(structuredClone(m)), d);
  const changed = structuredClone(m);
  changed.backends[0]!.files.model.sha256 = "0".repeat(64);
  assert.notEqual(manifestDigest(changed), d);
  assert.equal(
    fileUrl(m.backends[0]!.files.model),
    "https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2/resolve/c9745ed1d9f207416be6d2e6f8de32d1f16199bf/onnx/model.onnx",
  );
  assert.equal(
    fileUrl(m.backends[0]!.files.model, "http://127.0.0.1:8080/"),
    "http://127.0.0.1:8080/sentence-transformers/all-MiniLM-L6-v2/resolve/c9745ed1d9f207416be6d2e6f8de32d1f16199bf/onnx/model.onnx",
  );
});

Deno.test("digestSourceUrl: an LFS file's pointer by name or size, a small regular file itself", () => {
  const pin = { hf_repo: "org/repo", revision: "a".repeat(40) };
  assert.equal(
    digestSourceUrl({ ...pin, path: "onnx/model.onnx", size: 1000 }),
    `https://huggingface.co/org/repo/raw/${"a".repeat(40)}/onnx/model.onnx`,
  );
  assert.equal(
    digestSourceUrl({ ...pin, path: "m.gguf", size: null }),
    `https://huggingface.co/org/repo/raw/${"a".repeat(40)}/m.gguf`,
  );
  assert.equal(
    digestSourceUrl({ ...pin, path: "tokenizer.json", size: 11 * 1024 * 1024 }),
    `https://huggingface.co/org/repo/raw/${"a".repeat(40)}/tokenizer.json`,
  );
  assert.equal(
    digestSourceUrl({ ...pin, path: "tokenizer.json", size: 711396 }),
    `https://huggingface.co/org/repo/resolve/${"a".repeat(40)}/tokenizer.json`,
  );
  assert.equal(
    digestSourceUrl({ ...pin, path: "config.json", size: null }),
    `https://huggingface.co/org/repo/resolve/${"a".repeat(40)}/config.json`,
  );
  // Every shipped pin names its source by this rule, and the catalog's files are the pins.
  const gte = CATALOG.find((m) => m.id === "gte-modernbert-base")!.backends[0]!.files;
  assert.equal(
    gte.model.digest_source,
    "https://huggingface.co/Alibaba-NLP/gte-modernbert-base/raw/e7f32e3c00f91d699e8c43b53106206bcc72bb22/onnx/model.onnx",
  );
  assert.equal(
    gte.tokenizer!.digest_source,
    "https://huggingface.co/Alibaba-NLP/gte-modernbert-base/resolve/e7f32e3c00f91d699e8c43b53106206bcc72bb22/tokenizer.json",
  );
});
