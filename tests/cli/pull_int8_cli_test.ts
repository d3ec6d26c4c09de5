/**
 * `ck-synapse pull --quant int8 ./dir` and `ck-synapse quantize` through the real launcher: the
 * fp32 fixture directory is quantized (into the model cache, a second run a cache hit), served by
 * a running server as `NAME-int8` with `quant: "int8"` and its own fingerprint, probed against
 * the fp32 model it names as reference and then certified; an unknown `--quant` is refused by
 * name before anything runs, and so is a URL with `--quant int8`.
 */
import assert from "node:assert/strict";
import { cliIn, type Home, isolatedEnv, serve } from "./_launcher.ts";
import { MODELS } from "../_helpers.ts";
import { sha256Hex } from "../../lib/identity/sha256.ts";
import { planInt8Pull, stageCatalogInt8 } from "../../lib/cli/commands/_pull_int8.ts";
import { UsageError } from "../../lib/cli/_command.ts";
import { CATALOG_INT8_FILES, catalogModel, fileUrl } from "../../lib/models/catalog.ts";

async function cacheHome(): Promise<Home & { cache: string }> {
  const home = await isolatedEnv();
  const cache = `${home.dir}/model-cache`;
  home.env.CORTEXKIT_MODEL_CACHE = cache;
  return { ...home, cache };
}

Deno.test("pull --quant int8 ./dir: quantized into the cache, served as NAME-int8 (quant int8, own fingerprint), certified against its fp32 reference", async () => {
  const home = await cacheHome();
  try {
    // A copy of the fp32 fixture under a name of its own.
    const dir = `${home.dir}/tiny`;
    await Deno.mkdir(dir);
    for (const f of ["model.onnx", "tokenizer.json", "tokenizer_config.json", "config.json"]) {
      await Deno.copyFile(`${MODELS}/synapse-tiny-embed/${f}`, `${dir}/${f}`);
    }
    await using _server = await serve(home);
    const fp32 = await cliIn(home, ["pull", dir]);
    assert.equal(fp32.code, 0, fp32.stderr);
    assert.match(fp32.stdout, /^ready: tiny {2}[0-9a-f]{64}\n$/);
    const pulled = await cliIn(home, [
      "pull",
      "--quant",
      "int8",
      "--reference-model",
      "tiny",
      "--probe",
      dir,
    ]);
    assert.equal(pulled.code, 0, pulled.stderr);
    // Loaded, not certified yet; --probe then certifies it against its reference.
    assert.match(pulled.stdout, /^loaded: tiny-int8 {2}[0-9a-f]{64} {2}\(not certified\)\n/);
    assert.match(pulled.stdout, /\npassed {2}tiny-int8 /);
    assert.match(pulled.stdout, /\nserves {2}tiny-int8: certified\n/);
    assert.match(
      pulled.stderr,
      /^quantized: sha256:[0-9a-f]{64} .* -> sha256:[0-9a-f]{64} .*, 12 MatMuls int8\n/m,
    );
    const int8Fp = /^loaded: tiny-int8 {2}([0-9a-f]{64})/.exec(pulled.stdout)![1];
    const fp32Fp = /^ready: tiny {2}([0-9a-f]{64})/.exec(fp32.stdout)![1];
    assert.notEqual(int8Fp, fp32Fp);

    // The int8 file is the quantizer's output of the fp32 file: the fixture's bytes.
    const fixture = await Deno.readFile(`${MODELS}/synapse-tiny-embed-int8/model.onnx`);
    const blob = `${home.cache}/blobs/${sha256Hex(fixture)}`;
    assert.ok((await Deno.stat(blob)).isFile, "the int8 blob is in the model cache");

    const list = await cliIn(home, ["models", "list", "--json"]);
    assert.equal(list.code, 0, list.stderr);
    const row = JSON.parse(list.stdout).models.find((m: { model_id: string }) =>
      m.model_id === "tiny-int8"
    );
    assert.equal(row.quant, "int8");
    assert.equal(row.dtype, "f32");
    assert.equal(row.certified, true, JSON.stringify(row.certification));
    const embed = await cliIn(home, ["embed", "--model", "tiny-int8", "--json", "hello"]);
    assert.equal(embed.code, 0, embed.stderr);
    assert.equal(JSON.parse(embed.stdout).fingerprint, int8Fp);

    // Quantizing the same file again is a cache hit; --out writes a model directory.
    const again = await cliIn(home, ["quantize", dir, "--out", `${home.dir}/out`, "--json"]);
    assert.equal(again.code, 0, again.stderr);
    const q = JSON.parse(again.stdout);
    assert.equal(q.cache_hit, true);
    assert.equal(q.digest, `sha256:${sha256Hex(fixture)}`);
    assert.deepEqual(await Deno.readFile(`${home.dir}/out/model.onnx`), fixture);
    assert.deepEqual(q.files, [
      "model.onnx",
      "tokenizer.json",
      "tokenizer_config.json",
      "config.json",
    ]);
  } finally {
    await Deno.remove(home.dir, { recursive: true });
  }
});

Deno.test("an unknown --quant is refused by name (exit 2), and so is --quant int8 with a URL", async () => {
  const home = await cacheHome();
  try {
    for (
      const args of [["pull", "--quant", "int4", "./x"], ["quantize", "--quant", "fp8", "./x"]]
    ) {
      const r = await cliIn(home, args);
      assert.equal(r.code, 2, r.stderr);
      assert.match(r.stderr, new RegExp(`unknown quantization '${args[2]}' \\(accepted: int8\\)`));
    }
    const url = await cliIn(home, [
      "pull",
      "--quant",
      "int8",
      "https://example.invalid/model.onnx",
      "--sha256",
      "0".repeat(64),
    ]);
    assert.equal(url.code, 2, url.stderr);
    assert.match(url.stderr, /with --quant int8: a URL is not quantized on the way/);
    // What cannot be quantized is a semantic refusal (exit 1), naming why.
    const already = await cliIn(home, ["quantize", `${MODELS}/synapse-tiny-embed-int8`]);
    assert.equal(already.code, 1, already.stderr);
    assert.match(
      already.stderr,
      /^error: artifact_invalid: Cannot quantize: the model already holds integer MatMuls/,
    );
    // Nothing was written to the model cache by the refusals but that one's read.
    await assert.rejects(Deno.stat(`${home.cache}/quantized`), Deno.errors.NotFound);
  } finally {
    await Deno.remove(home.dir, { recursive: true });
  }
});

Deno.test("planInt8Pull of a catalog id: the pinned upstream int8 file, else the fp32 pull first; a GGUF-only model is refused", async () => {
  const io = { out: () => {}, err: () => {} };
  const pinned = await planInt8Pull("all-minilm-l6-v2", {}, "/", io, false);
  assert.ok(typeof pinned !== "number");
  const file = CATALOG_INT8_FILES["all-minilm-l6-v2"]!;
  assert.equal(file.path, "onnx/model_qint8_avx512_vnni.onnx");
  assert.equal(pinned.plan.method, "model.load");
  assert.equal(pinned.plan.params.url, fileUrl(file));
  assert.equal(pinned.plan.params.expected_digest, file.sha256);
  assert.equal(pinned.plan.params.model_id, "all-minilm-l6-v2-int8");
  assert.equal(pinned.plan.params.reference_model, "all-minilm-l6-v2");
  assert.equal(pinned.fp32First, undefined);
  // The tokenizer and config are the fp32 backend's pinned files.
  const ort = catalogModel("all-minilm-l6-v2")!.backends[0]!;
  assert.deepEqual(pinned.plan.params.files, {
    tokenizer: { url: fileUrl(ort.files.tokenizer!), sha256: ort.files.tokenizer!.sha256 },
    config: { url: fileUrl(ort.files.config!), sha256: ort.files.config!.sha256 },
  });
  // No upstream int8 file: the fp32 catalog pull runs first, then its file is quantized.
  const unpinned = await planInt8Pull("gte-modernbert-base", {}, "/", io, false);
  assert.ok(typeof unpinned !== "number");
  assert.deepEqual(unpinned.fp32First, {
    kind: "catalog",
    method: "models.download",
    params: { catalog_id: "gte-modernbert-base" },
  });
  await assert.rejects(
    planInt8Pull("qwen3-embedding-0.6b", {}, "/", io, false),
    (e: unknown) => e instanceof UsageError && /no ONNX \(ort\) backend/.test(e.message),
  );
  // Its model blob not in this process's cache: refused, naming why (exit 1).
  const lines: string[] = [];
  const home = await cacheHome();
  const prev = Deno.env.get("CORTEXKIT_MODEL_CACHE");
  Deno.env.set("CORTEXKIT_MODEL_CACHE", home.cache);
  try {
    const code = await stageCatalogInt8("gte-modernbert-base", {
      out: () => {},
      err: (l: string) => lines.push(l),
    }, false);
    assert.equal(code, 1);
    assert.match(
      lines[0]!,
      /^error: artifact_invalid: Cannot quantize gte-modernbert-base: its model file is not in this process's model cache/,
    );
  } finally {
    if (prev === undefined) Deno.env.delete("CORTEXKIT_MODEL_CACHE");
    else Deno.env.set("CORTEXKIT_MODEL_CACHE", prev);
    await Deno.remove(home.dir, { recursive: true });
  }
});
