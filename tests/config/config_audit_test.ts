/**
 * Issue 18 item 9: no config key is accepted and read nowhere. Every key a layer may set
 * (`LayerSchema`, aliases included) is either in {@link READ_BY} — with the file that reads it and
 * a fragment of the code that does, checked to be there — or in `UNSERVED_KEYS` (accepted only at
 * its default, refused otherwise; the refusals are asserted below). A key added to the schema
 * without either fails this test.
 *
 * `preload_models` is one key here: its entries' keys are the model source's fields
 * (`lib/models/sources.ts`, documented in docs/config.md's `preload_models` table).
 */

import assert from "node:assert";
import { join } from "node:path";
import { z } from "zod";
import { DEFAULT_CONFIG } from "../../lib/config/defaults.ts";
import { loadConfig } from "../../lib/config/loader.ts";
import { LayerSchema } from "../../lib/config/schema.ts";
import { UNSERVED_KEYS } from "../../lib/config/unserved.ts";
import { SynapseError } from "../../lib/contract/errors.ts";

const ROOT = new URL("../..", import.meta.url);

/** Key path → the file under the repository root that reads it, and a fragment of that code. */
const READ_BY: Readonly<Record<string, { file: string; code: string }>> = {
  knob: { file: "lib/synapse.ts", code: "threadPolicy: config.knob" },
  microllm_max_tokens: { file: "lib/ops/microllm.ts", code: "ctx.config.microllm_max_tokens" },
  grammar_enabled: { file: "lib/ops/microllm.ts", code: "ctx.config.grammar_enabled" },
  cache_max_bytes: { file: "lib/synapse.ts", code: "maxBytes: config.cache_max_bytes" },
  hf_endpoint: { file: "lib/synapse.ts", code: "hfEndpoint: config.hf_endpoint" },
  "worker.load_timeout_ms": { file: "lib/synapse.ts", code: "config.worker.load_timeout_ms" },
  "worker.start_timeout_ms": { file: "lib/synapse.ts", code: "config.worker.start_timeout_ms" },
  "worker.cancel_grace_ms": { file: "lib/synapse.ts", code: "config.worker.cancel_grace_ms" },
  "log.perf_interval_secs": { file: "lib/synapse.ts", code: "config.log.perf_interval_secs" },
  "log.worker_forward_lines_per_sec": {
    file: "lib/synapse.ts",
    code: "config.log.worker_forward_lines_per_sec",
  },
  "inline.max_items": { file: "lib/ops/embed.ts", code: "limits.max_items" },
  "inline.max_tokens": { file: "lib/ops/embed.ts", code: "limits.max_tokens" },
  "inline.byte_budget": { file: "lib/ops/embed.ts", code: "limits.byte_budget" },
  "inline.max_queue_ms": { file: "lib/ops/embed.ts", code: "limits.max_queue_ms" },
  "inline.deadline_ms": { file: "lib/ops/embed.ts", code: "limits.deadline_ms" },
  "inline.estimated_execution_ms": {
    file: "lib/synapse.ts",
    code: "config.inline.estimated_execution_ms",
  },
  "inline.max_concurrent_workers": {
    file: "lib/synapse.ts",
    code: "config.inline.max_concurrent_workers",
  },
  "http.max_body_bytes": { file: "lib/doors/http/server.ts", code: "?.http.max_body_bytes" },
  "http.require_key_for_queries": {
    file: "lib/doors/http/server.ts",
    code: "?.http.require_key_for_queries",
  },
  "http.header_timeout_ms": { file: "lib/doors/http/server.ts", code: "= http.header_timeout_ms" },
  "http.body_timeout_ms": { file: "lib/doors/http/server.ts", code: "= http.body_timeout_ms" },
  "http.idle_timeout_ms": { file: "lib/doors/http/server.ts", code: "= http.idle_timeout_ms" },
  "tokenize.workers": { file: "lib/synapse.ts", code: "config.tokenize.workers" },
  "tokenize.inline_max_chars": { file: "lib/synapse.ts", code: "config.tokenize.inline_max_chars" },
  "jobs.execution_ttl_ms": { file: "lib/ops/_durable_job.ts", code: "ttl.execution_ttl_ms" },
  "jobs.result_retention_ttl_ms": {
    file: "lib/ops/_durable_job.ts",
    code: "ttl.result_retention_ttl_ms",
  },
  "jobs.resume_deadline_ms": { file: "lib/ops/_durable_job.ts", code: "ttl.resume_deadline_ms" },
  // The older name: spread over the three TTLs above when the layer is made canonical.
  "jobs.ttl_ms": { file: "lib/config/_layer.ts", code: "named.execution_ttl_ms ?? ttl_ms" },
  "jobs.result_page_bytes": {
    file: "lib/ops/_durable_job.ts",
    code: "this.#ctx.config.jobs.result_page_bytes",
  },
  "jobs.bulk_quantum_tokens": {
    file: "lib/ops/_durable_job.ts",
    code: "ctx.config.jobs.bulk_quantum_tokens",
  },
  // probeThresholds(config.probe) turns them into the parity bars of probeLane.
  "probe.mean_cosine_threshold": {
    file: "lib/probe/run_probe.ts",
    code: "probe.mean_cosine_threshold ??",
  },
  "probe.worst_decile_rank_overlap_threshold": {
    file: "lib/probe/run_probe.ts",
    code: "probe.worst_decile_rank_overlap_threshold ??",
  },
  preload_models: { file: "lib/synapse.ts", code: "config.preload_models.map(sourceFromPreload)" },
  // alias.declare / alias.retract refuse unless it is true; the two older names resolve onto it.
  alias_admin_enabled: { file: "lib/ops/aliases.ts", code: "ctx.config.alias_admin_enabled" },
  dev_alias_admin: {
    file: "lib/config/_layer.ts",
    code: "dev?.alias_admin_enabled ?? dev_alias_admin",
  },
  "dev.alias_admin_enabled": {
    file: "lib/config/_layer.ts",
    code: "dev?.alias_admin_enabled ?? dev_alias_admin",
  },
  // A requested name is looked up in it by the model resolution; boot checks it (synapse.ts).
  model_aliases: { file: "lib/ops/_resolve_model.ts", code: "ctx.config.model_aliases" },
  // Each provider becomes a RemoteProvider the registry's remote lanes send work to.
  remote_providers: { file: "lib/synapse.ts", code: "config.remote_providers.map(" },
  certification: {
    file: "lib/probe/certification.ts",
    code: 'ctx.config.certification === "warn"',
  },
};

/** A value other than the default, per unserved key. */
const NON_DEFAULT: Readonly<Record<string, unknown>> = {
  decode_chain_k: 4,
  certify_observation: true,
  sidecar_spec: { command: "sidecar" },
  "probe.ane_placement_threshold": 0.5,
};

/** The key paths of a layer schema: sections descend, everything else is one key. */
function keyPaths(schema: z.ZodType, prefix = ""): string[] {
  let inner: z.ZodType = schema;
  while (inner instanceof z.ZodOptional) inner = inner.unwrap() as z.ZodType;
  if (!(inner instanceof z.ZodObject)) return [prefix];
  const out: string[] = [];
  for (const [key, child] of Object.entries(inner.shape as Record<string, z.ZodType>)) {
    out.push(...keyPaths(child, prefix === "" ? key : `${prefix}.${key}`));
  }
  return out;
}

/** `{a: {b: v}}` for `a.b`. */
function layerSetting(key: string, value: unknown): Record<string, unknown> {
  const parts = key.split(".");
  let out: unknown = value;
  for (const part of parts.reverse()) out = { [part]: out };
  return out as Record<string, unknown>;
}

function loadJson(layer: Record<string, unknown>) {
  return loadConfig({
    env: { SYNAPSE_CONFIG_JSON: JSON.stringify(layer) },
    cwd: "/nowhere",
    readFile: () => undefined,
  });
}

function refusal(fn: () => unknown): SynapseError {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof SynapseError, `expected a SynapseError, got ${err}`);
    return err;
  }
  assert.fail("expected a refusal");
}

Deno.test("config audit: every accepted key is read by a named file or refused away from its default", async () => {
  const keys = keyPaths(LayerSchema);
  assert.ok(keys.length >= 40, `enumerated only ${keys.length} keys: ${keys.join(", ")}`);
  const unserved = new Set(UNSERVED_KEYS.map((entry) => entry.key));
  const unaccounted = keys.filter((key) => !Object.hasOwn(READ_BY, key) && !unserved.has(key));
  assert.deepStrictEqual(
    unaccounted,
    [],
    "a key is accepted but neither read (READ_BY) nor refused (lib/config/unserved.ts)",
  );
  const both = keys.filter((key) => Object.hasOwn(READ_BY, key) && unserved.has(key));
  assert.deepStrictEqual(both, [], "a key is both read and refused");
  const stale = [...Object.keys(READ_BY), ...unserved].filter((key) => !keys.includes(key));
  assert.deepStrictEqual(stale, [], "the audit names a key the schema does not have");
  for (const [key, { file, code }] of Object.entries(READ_BY)) {
    const text = await Deno.readTextFile(new URL(file, ROOT));
    assert.ok(text.includes(code), `${key}: ${file} no longer contains '${code}'`);
  }
});

Deno.test("config audit: every unserved key refuses a non-default value naming the key, the file and why", async () => {
  assert.deepStrictEqual(
    UNSERVED_KEYS.map((entry) => entry.key).sort(),
    Object.keys(NON_DEFAULT).sort(),
  );
  const root = await Deno.makeTempDir({ prefix: "synapse_config_audit_" });
  try {
    const file = join(root, "synapse.jsonc");
    for (const entry of UNSERVED_KEYS) {
      const value = NON_DEFAULT[entry.key];
      const setting = layerSetting(entry.key, value);
      await Deno.writeTextFile(file, `// audit\n${JSON.stringify(setting)}\n`);
      const env = { SYNAPSE_CONFIG_PATH: file };
      const err = refusal(() => loadConfig({ env, cwd: root }));
      assert.strictEqual(err.code, "invalid_request", entry.key);
      assert.strictEqual(err.details?.key, entry.key);
      assert.strictEqual(err.details?.file, file);
      assert.deepStrictEqual(err.details?.value, value);
      assert.deepStrictEqual(err.details?.accepted, entry.accepted);
      assert.ok(err.message.startsWith(`Cannot load config ${file}: '${entry.key}' is `));
      assert.ok(err.message.includes(entry.reason), err.message);

      const viaEnv = refusal(() => loadJson(setting));
      assert.strictEqual(viaEnv.details?.key, entry.key);
      assert.strictEqual(viaEnv.details?.file, "env:SYNAPSE_CONFIG_JSON");

      // The default itself still loads, so a config written out in full keeps loading.
      const atDefault = loadJson(layerSetting(entry.key, entry.accepted)).config;
      assert.ok(atDefault !== undefined);
    }
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("config audit: the refusals say why in this build's terms", () => {
  const reason = (key: string): string => {
    const entry = UNSERVED_KEYS.find((e) => e.key === key);
    assert.ok(entry !== undefined, key);
    return entry.reason;
  };
  assert.match(reason("probe.ane_placement_threshold"), /macOS/);
  assert.match(reason("certify_observation"), /certify\.observations.*operations in scope/);
  assert.match(reason("decode_chain_k"), /owned_decode/);
  // The accepted value is the default, so the defaults written out load as they are.
  for (const entry of UNSERVED_KEYS) {
    let value: unknown = DEFAULT_CONFIG;
    for (const part of entry.key.split(".")) value = (value as Record<string, unknown>)[part];
    assert.deepStrictEqual(entry.accepted, value, entry.key);
  }
  const full = loadJson(structuredClone(DEFAULT_CONFIG) as unknown as Record<string, unknown>);
  assert.deepStrictEqual(full.config, structuredClone(DEFAULT_CONFIG));
});

Deno.test("config audit: the probe thresholds are accepted away from their defaults (the probe reads them)", () => {
  const { config } = loadJson({
    probe: { mean_cosine_threshold: 0.99, worst_decile_rank_overlap_threshold: 0.8 },
  });
  assert.strictEqual(config.probe.mean_cosine_threshold, 0.99);
  assert.strictEqual(config.probe.worst_decile_rank_overlap_threshold, 0.8);
  assert.strictEqual(config.probe.ane_placement_threshold, 0.9);
});
