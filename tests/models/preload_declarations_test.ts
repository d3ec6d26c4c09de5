/**
 * The preload declarations that once were "accepted; no effect" (issue 19 item 8): `quant` and
 * `family` are checked at load against what the files say (the lane's served quantization; the
 * architecture named by `config.json` `model_type` or GGUF `general.architecture`) and a mismatch
 * fails that model by name; `format`, `revision` and `execution` are checked before any file is
 * read (lib/models/sources.ts `checkPreloadPlacement`) and a value this build cannot honour
 * refuses the entry by name. Real onnxruntime and the real llama worker on the fixtures.
 */
import assert from "node:assert/strict";
import { loadConfig } from "../../lib/config/loader.ts";
import { SynapseError } from "../../lib/contract/errors.ts";
import { sourceFromPreload } from "../../lib/models/sources.ts";
import type { Synapse } from "../../lib/synapse.ts";
import { MODELS, preload, resultOf, startSynapse } from "../_helpers.ts";

const EMBED = `${MODELS}/synapse-tiny-embed`;
const F16 = `${MODELS}/synapse-tiny-embed-f16`;
const INT8 = `${MODELS}/synapse-tiny-embed-int8`;
const LLAMA = `${MODELS}/synapse-tiny-llama`;

// deno-lint-ignore no-explicit-any
async function rows(syn: Synapse): Promise<Record<string, any>> {
  const list = resultOf(await syn.call("models.list", {})).models;
  return Object.fromEntries(list.map((m: { model_id: string }) => [m.model_id, m]));
}

/** A preload entry as the config loader validates it. */
function entry(raw: Record<string, unknown>) {
  const { config } = loadConfig({
    env: { SYNAPSE_CONFIG_JSON: JSON.stringify({ preload_models: [raw] }) },
    cwd: "/nonexistent",
  });
  return config.preload_models[0]!;
}

/** Asserts `fn` throws `invalid_request` whose details are exactly `details`. */
function refuses(fn: () => unknown, details: Record<string, unknown>, message: RegExp): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof SynapseError, String(e));
    assert.equal(e.code, "invalid_request");
    assert.deepEqual(e.details, details);
    assert.match(e.message, message);
    return true;
  });
}

Deno.test("format must be the engine's own file format; revision is refused; execution must be cpu", () => {
  const ort = (extra: Record<string, unknown>) => entry(preload(EMBED, "e", extra));
  const llama = (extra: Record<string, unknown>) =>
    entry({ engine: "llama", model_path: LLAMA, task: "generate", model_id: "g", ...extra });
  // What this build honours loads; the declaration leaves the source as it was.
  assert.equal(sourceFromPreload(ort({ format: "onnx" })).modelId, "e");
  assert.equal(sourceFromPreload(ort({ format: "ONNX", execution: "CPU" })).modelId, "e");
  assert.equal(sourceFromPreload(llama({ format: "gguf", execution: "cpu" })).modelId, "g");
  refuses(
    () => sourceFromPreload(ort({ format: "gguf" })),
    { model_id: "e", field: "preload_models.format", value: "gguf", format: "onnx" },
    /format 'gguf' is not what engine 'ort' reads \('onnx'\)/,
  );
  refuses(
    () => sourceFromPreload(llama({ format: "safetensors" })),
    { model_id: "g", field: "preload_models.format", value: "safetensors", format: "gguf" },
    /engine 'llama' reads \('gguf'\)/,
  );
  refuses(
    () => sourceFromPreload(ort({ revision: "main" })),
    { model_id: "e", field: "preload_models.revision", value: "main" },
    /has no revision to check.*model\.load \{source: "hf", repo, revision\}/,
  );
  refuses(
    () => sourceFromPreload(llama({ execution: "cuda" })),
    { model_id: "g", field: "preload_models.execution", value: "cuda", accepted: ["cpu"] },
    /execution 'cuda' is not available: every lane of this build runs on the CPU/,
  );
});

Deno.test("a preload entry with a refused declaration refuses boot by name", async () => {
  await assert.rejects(
    startSynapse({ preload_models: [preload(EMBED, "e", { execution: "cuda" })] }),
    (e: unknown) =>
      e instanceof SynapseError && e.code === "invalid_request" &&
      e.details?.field === "preload_models.execution",
  );
});

Deno.test("ONNX: quant is checked against the weights and family against config.json model_type", async () => {
  const tmp = await Deno.makeTempDir({ prefix: "synapse-preload-family-" });
  try {
    // The same model with a config.json that names no model_type.
    const cfg = JSON.parse(await Deno.readTextFile(`${EMBED}/config.json`));
    delete cfg.model_type;
    await Deno.writeTextFile(`${tmp}/config.json`, JSON.stringify(cfg));
    await using t = await startSynapse({
      preload_models: [
        preload(EMBED, "f32-ok", { quant: "f32", family: "bert" }),
        preload(EMBED, "case-ok", { quant: "F32", family: "BERT" }),
        preload(F16, "f16-ok", { quant: "f16" }),
        preload(EMBED, "as-q8", { quant: "q8_0" }),
        preload(F16, "half-as-f32", { quant: "f32" }),
        preload(INT8, "int8-ok", { quant: "INT8" }),
        preload(EMBED, "f32-as-int8", { quant: "int8" }),
        preload(INT8, "int8-as-f32", { quant: "f32" }),
        preload(EMBED, "as-llama", { family: "llama" }),
        { ...preload(EMBED, "no-type", { family: "bert" }), config_path: `${tmp}/config.json` },
      ],
    });
    const r = await rows(t.syn);
    for (const id of ["f32-ok", "case-ok", "f16-ok", "int8-ok"]) {
      assert.equal(r[id].state, "ready", id);
    }
    assert.equal(r["int8-ok"].quant, "int8");
    assert.equal(r["f32-ok"].fingerprint, r["case-ok"].fingerprint);
    const failed: [string, Record<string, unknown>, RegExp][] = [
      [
        "as-q8",
        { field: "quant", quant: "q8_0", served_quant: "f32", engine: "ort" },
        /declares quant 'q8_0', but the file is f32/,
      ],
      [
        "half-as-f32",
        { field: "quant", quant: "f32", served_quant: "f16", engine: "ort" },
        /declares quant 'f32', but the file is f16/,
      ],
      [
        "f32-as-int8",
        { field: "quant", quant: "int8", served_quant: "f32", engine: "ort" },
        /declares quant 'int8', but the file is f32 .*quantizes nothing at load/,
      ],
      [
        "int8-as-f32",
        { field: "quant", quant: "f32", served_quant: "int8", engine: "ort" },
        /declares quant 'f32', but the file is int8/,
      ],
      [
        "as-llama",
        { field: "family", family: "llama", model_family: "bert" },
        /declares family 'llama', but its config\.json model_type is 'bert'/,
      ],
      [
        "no-type",
        { field: "family", family: "bert", model_family: null },
        /its files name no architecture \(config\.json model_type\)/,
      ],
    ];
    for (const [id, details, message] of failed) {
      assert.equal(r[id].state, "failed", id);
      assert.equal(r[id].error.code, "invalid_request", id);
      assert.deepEqual(r[id].error.details, { model_id: id, ...details });
      assert.match(r[id].error.message, message);
    }
  } finally {
    await Deno.remove(tmp, { recursive: true });
  }
});

Deno.test("GGUF: quant is checked against general.file_type and family against general.architecture", async () => {
  const llama = (id: string, extra: Record<string, unknown>) => ({
    engine: "llama",
    model_path: LLAMA,
    task: "generate",
    model_id: id,
    max_tokens: 256,
    ...extra,
  });
  await using t = await startSynapse({
    certification: "warn",
    preload_models: [
      llama("ok", { quant: "F32", family: "llama", format: "gguf", execution: "cpu" }),
      llama("as-q4", { quant: "q4_k_m" }),
      llama("as-qwen", { family: "qwen3" }),
    ],
  });
  const r = await rows(t.syn);
  assert.equal(r.ok.state, "ready");
  assert.equal(t.syn.registry.resolve("ok", "generate").profile.quant, "f32");
  const failed: [string, Record<string, unknown>][] = [
    ["as-q4", { field: "quant", quant: "q4_k_m", served_quant: "f32", engine: "llama" }],
    ["as-qwen", { field: "family", family: "qwen3", model_family: "llama" }],
  ];
  for (const [id, details] of failed) {
    assert.equal(r[id].state, "failed", id);
    assert.deepEqual(r[id].error.details, { model_id: id, ...details });
  }
  assert.match(r["as-qwen"].error.message, /GGUF general\.architecture is 'llama'/);
});
