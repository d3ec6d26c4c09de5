/**
 * The pure rules of lib/models/matryoshka.ts: the derived profile and its identity, the cut and
 * its normalisation, the load-time check of `matryoshka_dims`, and the preload key.
 */
import assert from "node:assert/strict";
import { loadConfig } from "../../lib/config/loader.ts";
import { SynapseError } from "../../lib/contract/errors.ts";
import { fingerprint, type NumericProfile } from "../../lib/identity/numeric_profile.ts";
import {
  checkMatryoshkaDims,
  matryoshkaOperation,
  matryoshkaVariant,
  matryoshkaVariants,
  servedVariant,
  truncateVector,
} from "../../lib/models/matryoshka.ts";
import { identityOf } from "../../lib/models/load_ort.ts";
import { CATALOG } from "../../lib/models/catalog.ts";
import { sourceFromPreload } from "../../lib/models/sources.ts";
import { MODELS, preload } from "../_helpers.ts";

const PROFILE: NumericProfile = {
  model_digest: "sha256:m",
  quant: "f32",
  engine: { engine: "ort", version: "1" },
  sanitized_tokenizer_digest: "sha256:t",
  pooling: "mean",
  normalization: "l2",
  dtype: "f32",
  flash_attention: "disabled",
  certified_shape: {
    max_context_tokens: 8,
    max_batch_tokens: 8,
    max_micro_batch_tokens: 8,
    max_sequences: 1,
  },
  thread_policy: "balanced",
  operation: "embed",
};

function model(matryoshkaDims?: number[]) {
  return {
    modelId: "m",
    profile: PROFILE,
    ...identityOf(PROFILE),
    dims: 32,
    ...(matryoshkaDims === undefined ? {} : { matryoshkaDims }),
  };
}

Deno.test("a Matryoshka width is the profile with operation synapse-matryoshka-v1:dims=<n>; the full width is the model's own", () => {
  assert.equal(matryoshkaOperation(16), "synapse-matryoshka-v1:dims=16");
  const m = model([8, 16, 32]);
  const v16 = matryoshkaVariant(m, 16)!;
  assert.equal(v16.fingerprint, fingerprint({ ...PROFILE, operation: matryoshkaOperation(16) }));
  assert.notEqual(v16.fingerprint, m.fingerprint);
  assert.notEqual(v16.fingerprint, matryoshkaVariant(m, 8)!.fingerprint);
  assert.deepEqual(matryoshkaVariant(m, 32), {
    dims: 32,
    fingerprint: m.fingerprint,
    numericProfileId: m.numericProfileId,
  });
  assert.equal(matryoshkaVariant(m, 24), undefined);
  assert.equal(matryoshkaVariant(model(), 16), undefined);
  // The full width is not a derived space.
  assert.deepEqual(matryoshkaVariants(m).map((v) => v.dims), [8, 16]);
  assert.deepEqual(matryoshkaVariants(model()), []);
  // Memoised values are copies: a caller cannot change the next answer.
  (matryoshkaVariant(m, 16) as { dims: number }).dims = 99;
  assert.equal(matryoshkaVariant(m, 16)!.dims, 16);
  // servedVariant: the cut is set only below the full width.
  assert.equal(servedVariant(m, undefined).truncate, undefined);
  assert.equal(servedVariant(m, 32).truncate, undefined);
  assert.equal(servedVariant(m, 16).truncate, 16);
  assert.throws(
    () => servedVariant(model(), 16),
    (e: unknown) =>
      e instanceof SynapseError && e.code === "invalid_request" && !e.channel &&
      e.details?.field === "dimensions" && Array.isArray(e.details.allowed_dims) &&
      e.details.allowed_dims.length === 0,
  );
});

Deno.test("truncateVector normalises the kept values when the profile does, and only then", () => {
  const u = [3, 4, 12, 0];
  const unit = u.map((x) => x / 13);
  // The engine's unit vector, cut and normalised again, is the cut pooled vector normalised.
  const cut = truncateVector(Float32Array.from(unit), 2, true);
  assert.equal(cut.length, 2);
  assert.ok(Math.abs(cut[0]! - 0.6) < 1e-7 && Math.abs(cut[1]! - 0.8) < 1e-7, String(cut));
  assert.deepEqual(Array.from(truncateVector(u, 2, false)), [3, 4]);
  assert.deepEqual(Array.from(truncateVector([0, 0, 1], 2, true)), [0, 0]);
});

Deno.test("checkMatryoshkaDims refuses by reason, naming the field", () => {
  const reason = (dims: number[], task: "embed" | "rerank" = "embed", width = 32) => {
    try {
      checkMatryoshkaDims({ modelId: "m", task, matryoshkaDims: dims }, width);
    } catch (e) {
      assert.ok(e instanceof SynapseError && e.code === "invalid_request");
      assert.equal(e.details?.field, "matryoshka_dims");
      assert.equal(e.details?.model_id, "m");
      return e.details?.reason;
    }
    return "ok";
  };
  assert.equal(reason([16, 32]), "ok");
  assert.equal(reason([8]), "ok");
  assert.equal(reason([16, 64]), "exceeds_dims");
  assert.equal(reason([16, 16]), "not_ascending");
  assert.equal(reason([16, 8]), "not_ascending");
  assert.equal(reason([0]), "not_positive_integer");
  assert.equal(reason([1.5]), "not_positive_integer");
  assert.equal(reason([]), "empty");
  assert.equal(reason([1], "rerank", 1), "not_embed");
  checkMatryoshkaDims({ modelId: "m", task: "embed" }, 32);
  // Before a load (model.load checks the order before a job exists) the width is unknown: any
  // width passes, and a refusal says dims null rather than a made-up number.
  checkMatryoshkaDims({ modelId: "m", task: "embed", matryoshkaDims: [16, 1 << 20] }, undefined);
  assert.throws(
    () => checkMatryoshkaDims({ modelId: "m", task: "embed", matryoshkaDims: [32, 16] }, undefined),
    (e: unknown) =>
      e instanceof SynapseError && e.details?.reason === "not_ascending" &&
      e.details?.dims === null && !/9007199254740991/.test(e.message),
  );
});

Deno.test("a preload entry's matryoshka_dims becomes the source's; the catalog declares qwen3-embedding's", () => {
  const { config } = loadConfig({
    env: {
      SYNAPSE_CONFIG_JSON: JSON.stringify({
        preload_models: [
          preload(`${MODELS}/synapse-tiny-embed`, "a", { matryoshka_dims: [8, 16] }),
          preload(`${MODELS}/synapse-tiny-embed`, "b"),
        ],
      }),
    },
    cwd: "/nonexistent",
  });
  assert.deepEqual(sourceFromPreload(config.preload_models[0]!).matryoshkaDims, [8, 16]);
  assert.equal(sourceFromPreload(config.preload_models[1]!).matryoshkaDims, undefined);
  const qwen = CATALOG.find((m) => m.id === "qwen3-embedding-0.6b")!;
  assert.deepEqual(qwen.matryoshka_dims, [32, 64, 128, 256, 512, 768, 1024]);
  checkMatryoshkaDims(
    { modelId: qwen.id, task: qwen.task, matryoshkaDims: qwen.matryoshka_dims! },
    qwen.dims,
  );
  for (const m of CATALOG) {
    if (m.matryoshka_dims === undefined) continue;
    assert.equal(m.task, "embed", m.id);
    checkMatryoshkaDims({ modelId: m.id, task: m.task, matryoshkaDims: m.matryoshka_dims }, m.dims);
  }
});
