/**
 * `reference_model` (step 10 "reference pairing"): declared by a preload entry or the
 * `model.load` param, carried on the `ModelSource` as `referenceModel`, shown in `models.list`
 * as `reference_model`, recorded with a run-time load so it holds after a restart. A reference
 * naming the model itself is `invalid_request`; a reference to a model not loaded is allowed.
 */
import assert from "node:assert/strict";
import { loadConfig } from "../../lib/config/loader.ts";
import { SynapseError } from "../../lib/contract/errors.ts";
import { sourceFromPreload } from "../../lib/models/sources.ts";
import { createSynapse, type Synapse } from "../../lib/synapse.ts";
import { MODELS, preload, resultOf, semanticError } from "../_helpers.ts";

const EMBED = `${MODELS}/synapse-tiny-embed`;
const F16 = `${MODELS}/synapse-tiny-embed-f16`;

// deno-lint-ignore no-explicit-any
async function rows(syn: Synapse): Promise<Record<string, any>> {
  const list = resultOf(await syn.call("models.list", {})).models;
  return Object.fromEntries(list.map((m: { model_id: string }) => [m.model_id, m]));
}

function entry(extra: Record<string, unknown>) {
  const { config } = loadConfig({
    env: { SYNAPSE_CONFIG_JSON: JSON.stringify({ preload_models: [preload(F16, "half", extra)] }) },
    cwd: "/nonexistent",
  });
  return config.preload_models[0]!;
}

Deno.test("a preload entry's reference_model becomes the source's referenceModel; naming itself is refused", () => {
  assert.equal(sourceFromPreload(entry({ reference_model: "base" })).referenceModel, "base");
  assert.equal(sourceFromPreload(entry({})).referenceModel, undefined);
  assert.equal(
    sourceFromPreload({ ...entry({ reference_model: "base" }), engine: "llama" }).referenceModel,
    "base",
  );
  assert.throws(
    () => sourceFromPreload(entry({ reference_model: "half" })),
    (e: unknown) =>
      e instanceof SynapseError && e.code === "invalid_request" &&
      e.details?.field === "preload_models.reference_model" &&
      e.details?.reason === "self_reference" && e.details?.model_id === "half",
  );
});

/** A data home that outlives one instance. */
async function home() {
  const dir = await Deno.makeTempDir({ prefix: "synapse-reference-" });
  const env = { XDG_DATA_HOME: `${dir}/data`, XDG_CONFIG_HOME: `${dir}/config`, HOME: dir };
  return {
    dir,
    async start(config: Record<string, unknown>): Promise<Synapse> {
      const loaded = loadConfig({
        // Serving admission is not what these tests are about: lanes that declare a reference
        // need a certificate, and `warn` serves them uncertified.
        env: { ...env, SYNAPSE_CONFIG_JSON: JSON.stringify({ certification: "warn", ...config }) },
        cwd: dir,
      });
      return await createSynapse({ config: loaded.config, env });
    },
    async [Symbol.asyncDispose]() {
      await Deno.remove(dir, { recursive: true });
    },
  };
}

Deno.test("models.list shows reference_model for preloads and run-time loads; a run-time load keeps it after a restart", async () => {
  await using h = await home();
  const config = {
    preload_models: [
      preload(EMBED, "base"),
      preload(F16, "half", { reference_model: "base" }),
      // A reference that is not loaded is allowed (the probe reports it lacking).
      preload(F16, "half-orphan", { reference_model: "not-loaded-anywhere" }),
    ],
  };
  {
    const syn = await h.start(config);
    try {
      let r = await rows(syn);
      assert.equal(r.half.state, "ready");
      assert.equal(r.half.reference_model, "base");
      assert.equal(r["half-orphan"].state, "ready");
      assert.equal(r["half-orphan"].reference_model, "not-loaded-anywhere");
      assert.equal("reference_model" in r.base, false);

      // model.load naming itself is refused before any job.
      const self = semanticError(
        await syn.call("model.load", { path: F16, model_id: "pulled", reference_model: "pulled" }),
      );
      assert.equal(self.code, "invalid_request");
      assert.equal(self.details.reason, "self_reference");
      assert.equal(self.details.field, "reference_model");

      const job = resultOf(
        await syn.call("model.load", { path: F16, model_id: "pulled", reference_model: "base" }),
      );
      const done = await syn.loads.settled(job.job_id);
      assert.equal(done.state, "ready", JSON.stringify(done));
      r = await rows(syn);
      assert.equal(r.pulled.reference_model, "base");
      assert.equal(r.pulled.dtype, "f16");
      assert.equal(
        syn.registry.list().find((m) => m.modelId === "pulled")?.source.referenceModel,
        "base",
      );

      // The same files under the same id with another reference are another load: refused.
      const other = resultOf(
        await syn.call("model.load", { path: F16, model_id: "pulled", reference_model: "half" }),
      );
      const refused = await syn.loads.settled(other.job_id);
      assert.equal(refused.state, "failed");
      assert.equal(refused.error?.code, "invalid_request");
    } finally {
      await syn.dispose();
    }
  }
  {
    const syn = await h.start(config);
    try {
      const r = await rows(syn);
      assert.equal(r.pulled.state, "ready");
      assert.equal(r.pulled.origin, "runtime");
      assert.equal(r.pulled.reference_model, "base");
    } finally {
      await syn.dispose();
    }
  }
});

Deno.test("model.load with a derived id equal to its reference_model fails the job with invalid_request", async () => {
  await using h = await home();
  const syn = await h.start({ preload_models: [preload(EMBED, "base")] });
  try {
    // No model_id: the id comes from the directory's name.
    const job = resultOf(
      await syn.call("model.load", { path: F16, reference_model: "synapse-tiny-embed-f16" }),
    );
    const done = await syn.loads.settled(job.job_id);
    assert.equal(done.state, "failed");
    assert.equal(done.error?.code, "invalid_request");
    assert.equal(done.error?.details?.reason, "self_reference");
    assert.equal((await rows(syn))["synapse-tiny-embed-f16"], undefined);
  } finally {
    await syn.dispose();
  }
});
