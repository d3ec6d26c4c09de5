import assert from "node:assert";
import { join } from "node:path";
import {
  CATALOG_RESERVED_MODEL_IDS,
  DEFAULT_CONFIG,
  ENGINE_ALIASES,
  normalizeEngineName,
} from "../../lib/config/defaults.ts";
import { loadConfig } from "../../lib/config/loader.ts";
import type { SynapseConfig } from "../../lib/config/types.ts";
import { SynapseError } from "../../lib/contract/errors.ts";

/** A temp project dir and user config home, removed at the end of the test. */
async function fixture(): Promise<{
  cwd: string;
  configHome: string;
  projectFile: string;
  userFile: string;
  env: Record<string, string>;
  write: (path: string, text: string) => Promise<void>;
  [Symbol.asyncDispose]: () => Promise<void>;
}> {
  const root = await Deno.makeTempDir({ prefix: "synapse_config_test_" });
  const cwd = join(root, "project");
  const configHome = join(root, "config");
  await Deno.mkdir(cwd, { recursive: true });
  await Deno.mkdir(configHome, { recursive: true });
  return {
    cwd,
    configHome,
    projectFile: join(cwd, ".cortexkit", "synapse.jsonc"),
    userFile: join(configHome, "cortexkit", "synapse.jsonc"),
    env: { XDG_CONFIG_HOME: configHome },
    async write(path: string, text: string): Promise<void> {
      await Deno.mkdir(join(path, ".."), { recursive: true });
      await Deno.writeTextFile(path, text);
    },
    async [Symbol.asyncDispose](): Promise<void> {
      await Deno.remove(root, { recursive: true });
    },
  };
}

/** Asserts `fn` throws a config refusal whose message and details match. */
function assertRefused(
  fn: () => unknown,
  expected: { message: string | RegExp; file?: string; key?: string },
): SynapseError {
  let caught: unknown;
  try {
    fn();
  } catch (err) {
    caught = err;
  }
  assert.ok(caught instanceof SynapseError, `expected a SynapseError, got ${caught}`);
  assert.strictEqual(caught.code, "invalid_request");
  if (typeof expected.message === "string") assert.strictEqual(caught.message, expected.message);
  else assert.match(caught.message, expected.message);
  if (expected.file !== undefined) assert.strictEqual(caught.details?.file, expected.file);
  if (expected.key !== undefined) assert.strictEqual(caught.details?.key, expected.key);
  return caught;
}

const ENTRY = { engine: "ort", model_path: "/m/model.onnx", tokenizer_path: "/m/tokenizer.json" };

Deno.test("DEFAULT_CONFIG holds every key of contract §9 with its default", () => {
  const expected: SynapseConfig = {
    knob: "balanced",
    microllm_max_tokens: 512,
    grammar_enabled: false,
    decode_chain_k: 1,
    cache_max_bytes: 34_359_738_368,
    alias_admin_enabled: false,
    certify_observation: false,
    certification: "require",
    sidecar_spec: {},
    remote_providers: [],
    model_aliases: {},
    worker: { load_timeout_ms: 900_000, start_timeout_ms: 60_000, cancel_grace_ms: 5000 },
    log: { perf_interval_secs: 0, worker_forward_lines_per_sec: 50 },
    inline: {
      max_items: 64,
      max_tokens: 8192,
      byte_budget: 67_108_864,
      max_queue_ms: 5000,
      deadline_ms: 30_000,
      estimated_execution_ms: 25,
      max_concurrent_workers: 2,
    },
    http: {
      max_body_bytes: 67_108_864,
      header_timeout_ms: 10_000,
      body_timeout_ms: 30_000,
      idle_timeout_ms: 30_000,
      require_key_for_queries: false,
    },
    tokenize: { workers: 0, inline_max_chars: 256 },
    jobs: {
      execution_ttl_ms: 86_400_000,
      result_retention_ttl_ms: 86_400_000,
      resume_deadline_ms: 86_400_000,
      result_page_bytes: 524_288,
      bulk_quantum_tokens: 3072,
    },
    probe: {
      mean_cosine_threshold: 0.999,
      worst_decile_rank_overlap_threshold: 0.9,
      ane_placement_threshold: 0.9,
    },
    preload_models: [],
  };
  assert.deepStrictEqual(DEFAULT_CONFIG, expected);
  assert.ok(Object.isFrozen(DEFAULT_CONFIG));
  assert.ok(Object.isFrozen(DEFAULT_CONFIG.inline));
});

Deno.test("loadConfig() returns the defaults when nothing is configured", async () => {
  await using f = await fixture();
  const { config, sources } = loadConfig({ env: f.env, cwd: f.cwd });
  assert.deepStrictEqual(config, DEFAULT_CONFIG);
  assert.deepStrictEqual(sources, []);
  config.inline.max_items = 1; // the result is a fresh, mutable object
  assert.strictEqual(DEFAULT_CONFIG.inline.max_items, 64);
});

Deno.test("loadConfig() reads the project file with comments and trailing commas", async () => {
  await using f = await fixture();
  await f.write(
    f.projectFile,
    `// project config
    {
      "knob": "quiet", /* block comment */
      "inline": { "max_items": 10, },
      "hf_endpoint": "https://hf.example",
      "sidecar_spec": {},
    }`,
  );
  const { config, sources } = loadConfig({ env: f.env, cwd: f.cwd });
  assert.strictEqual(config.knob, "quiet");
  assert.strictEqual(config.inline.max_items, 10);
  assert.strictEqual(config.inline.max_tokens, 8192);
  assert.strictEqual(config.hf_endpoint, "https://hf.example");
  assert.deepStrictEqual(config.sidecar_spec, {});
  assert.deepStrictEqual(sources, [f.projectFile]);
});

Deno.test("loadConfig() reads the user file under XDG_CONFIG_HOME or ~/.config", async () => {
  await using f = await fixture();
  await f.write(f.userFile, `{"knob": "performance", "decode_chain_k": 1}`);
  const viaXdg = loadConfig({ env: f.env, cwd: f.cwd });
  assert.strictEqual(viaXdg.config.knob, "performance");
  assert.strictEqual(viaXdg.config.decode_chain_k, 1);
  assert.deepStrictEqual(viaXdg.sources, [f.userFile]);

  const home = join(f.cwd, "..", "home");
  await f.write(join(home, ".config", "cortexkit", "synapse.jsonc"), `{"knob": "quiet"}`);
  const viaHome = loadConfig({ env: { HOME: home, XDG_CONFIG_HOME: "" }, cwd: f.cwd, os: "linux" });
  assert.strictEqual(viaHome.config.knob, "quiet");
});

Deno.test("loadConfig() lets the project file win as a whole over the user file", async () => {
  await using f = await fixture();
  await f.write(
    f.userFile,
    `{"knob": "performance", "grammar_enabled": true, "remote_providers": []}`,
  );
  await f.write(f.projectFile, `{"knob": "quiet", "remote_providers": []}`);
  const { config, sources } = loadConfig({ env: f.env, cwd: f.cwd });
  assert.strictEqual(config.knob, "quiet");
  assert.strictEqual(config.grammar_enabled, false, "the project file wins as a whole");
  assert.deepStrictEqual(config.remote_providers, []);
  assert.deepStrictEqual(sources, [f.userFile, f.projectFile]);
});

Deno.test("loadConfig() takes remote_providers from the user file only, and refuses a malformed or repeated provider", async () => {
  await using f = await fixture();
  const peer = {
    id: "peer",
    kind: "synapse",
    base_url: "http://127.0.0.1:8080",
    allow_loopback: true,
  };
  await f.write(f.userFile, JSON.stringify({ remote_providers: [peer] }));
  await f.write(
    f.projectFile,
    `{"remote_providers": [{"id": "project", "kind": "tei", "base_url": "http://x"}]}`,
  );
  const { config } = loadConfig({ env: f.env, cwd: f.cwd });
  assert.deepStrictEqual(
    config.remote_providers,
    [peer],
    "the project file's providers are dropped",
  );
  await f.write(f.projectFile, `{}`);
  await f.write(f.userFile, `{"remote_providers": [{"name": "user"}]}`);
  assertRefused(() => loadConfig({ env: f.env, cwd: f.cwd }), {
    message: /remote_providers\[0\]/,
    file: f.userFile,
    key: "remote_providers[0].name",
  });
  await f.write(f.userFile, JSON.stringify({ remote_providers: [peer, peer] }));
  assertRefused(() => loadConfig({ env: f.env, cwd: f.cwd }), {
    message: /repeats provider id 'peer'/,
    file: f.userFile,
    key: "remote_providers[1].id",
  });
  await f.write(
    f.userFile,
    JSON.stringify({ remote_providers: [{ ...peer, api_key_env: "K", api_key_file: "/k" }] }),
  );
  assertRefused(() => loadConfig({ env: f.env, cwd: f.cwd }), {
    message: /both api_key_env and api_key_file/,
    file: f.userFile,
    key: "remote_providers[0]",
  });
});

Deno.test("loadConfig() refuses decode_chain_k in a project file", async () => {
  await using f = await fixture();
  await f.write(f.projectFile, `{"decode_chain_k": 4}`);
  const err = assertRefused(() => loadConfig({ env: f.env, cwd: f.cwd }), {
    message: /decode_chain_k' is honoured only from the user config; move it to /,
    file: f.projectFile,
    key: "decode_chain_k",
  });
  assert.ok(err.message.startsWith(`Cannot load config ${f.projectFile}: `));
  assert.ok(err.message.includes(f.userFile));
});

Deno.test("loadConfig() takes decode_chain_k from the user file when the project file wins", async () => {
  await using f = await fixture();
  await f.write(f.userFile, `{"decode_chain_k": 1}`);
  await f.write(f.projectFile, `{"knob": "quiet"}`);
  const { config } = loadConfig({ env: f.env, cwd: f.cwd });
  assert.strictEqual(config.decode_chain_k, 1);
  assert.strictEqual(config.knob, "quiet");
});

Deno.test("loadConfig() uses only SYNAPSE_CONFIG_PATH when it is set", async () => {
  await using f = await fixture();
  await f.write(f.userFile, `{"knob": "performance"}`);
  await f.write(f.projectFile, `{"knob": "quiet"}`);
  const explicit = join(f.cwd, "custom.jsonc");
  await f.write(explicit, `{"microllm_max_tokens": 100, "decode_chain_k": 1}`);
  const abs = loadConfig({ env: { ...f.env, SYNAPSE_CONFIG_PATH: explicit }, cwd: f.cwd });
  assert.strictEqual(abs.config.knob, "balanced");
  assert.strictEqual(abs.config.microllm_max_tokens, 100);
  assert.strictEqual(abs.config.decode_chain_k, 1);
  assert.deepStrictEqual(abs.sources, [explicit]);
  const rel = loadConfig({ env: { ...f.env, SYNAPSE_CONFIG_PATH: "custom.jsonc" }, cwd: f.cwd });
  assert.deepStrictEqual(rel.sources, [explicit]);
});

Deno.test("loadConfig() treats legacy SYNAPSE_CONFIG as a path below SYNAPSE_CONFIG_PATH", async () => {
  await using f = await fixture();
  const legacy = join(f.cwd, "legacy.jsonc");
  const modern = join(f.cwd, "modern.jsonc");
  await f.write(legacy, `{"knob": "quiet"}`);
  await f.write(modern, `{"knob": "performance"}`);
  assert.strictEqual(
    loadConfig({ env: { ...f.env, SYNAPSE_CONFIG: legacy }, cwd: f.cwd }).config.knob,
    "quiet",
  );
  assert.strictEqual(
    loadConfig({
      env: { ...f.env, SYNAPSE_CONFIG: legacy, SYNAPSE_CONFIG_PATH: modern },
      cwd: f.cwd,
    })
      .config.knob,
    "performance",
  );
  assert.strictEqual(
    loadConfig({ env: { ...f.env, SYNAPSE_CONFIG: legacy, SYNAPSE_CONFIG_PATH: "" }, cwd: f.cwd })
      .config.knob,
    "quiet",
    "an empty SYNAPSE_CONFIG_PATH counts as unset",
  );
});

Deno.test("loadConfig() refuses a missing SYNAPSE_CONFIG_PATH file", async () => {
  await using f = await fixture();
  const missing = join(f.cwd, "missing.jsonc");
  assertRefused(() => loadConfig({ env: { ...f.env, SYNAPSE_CONFIG_PATH: missing }, cwd: f.cwd }), {
    message: `Cannot load config ${missing}: file not found`,
    file: missing,
  });
});

Deno.test("loadConfig() layers SYNAPSE_CONFIG_JSON on top of the file", async () => {
  await using f = await fixture();
  await f.write(
    f.projectFile,
    `{"knob": "quiet", "inline": {"max_items": 10}, "grammar_enabled": true}`,
  );
  const { config, sources } = loadConfig({
    env: {
      ...f.env,
      SYNAPSE_CONFIG_JSON:
        `{"knob": "performance", "inline": {"deadline_ms": 1000}, "decode_chain_k": 1}`,
    },
    cwd: f.cwd,
  });
  assert.strictEqual(config.knob, "performance");
  assert.strictEqual(config.inline.max_items, 10);
  assert.strictEqual(config.inline.deadline_ms, 1000);
  assert.strictEqual(config.grammar_enabled, true);
  assert.strictEqual(config.decode_chain_k, 1);
  assert.deepStrictEqual(sources, [f.projectFile, "env:SYNAPSE_CONFIG_JSON"]);
});

Deno.test("loadConfig() reads worker.start_timeout_ms beside worker.load_timeout_ms", async () => {
  await using f = await fixture();
  await f.write(f.projectFile, `{"worker": {"start_timeout_ms": 120000}}`);
  const { config } = loadConfig({ env: f.env, cwd: f.cwd });
  assert.deepStrictEqual(config.worker, {
    load_timeout_ms: 900_000,
    start_timeout_ms: 120_000,
    cancel_grace_ms: 5000,
  });
  const layered = loadConfig({
    env: { ...f.env, SYNAPSE_CONFIG_JSON: `{"worker": {"load_timeout_ms": 1000}}` },
    cwd: f.cwd,
  });
  assert.deepStrictEqual(layered.config.worker, {
    load_timeout_ms: 1000,
    start_timeout_ms: 120_000,
    cancel_grace_ms: 5000,
  });
});

Deno.test("loadConfig() reads http and tokenize, merging them key by key across layers", async () => {
  await using f = await fixture();
  await f.write(f.projectFile, `{"http": {"max_body_bytes": 1048576}, "tokenize": {"workers": 2}}`);
  const { config } = loadConfig({
    env: { ...f.env, SYNAPSE_CONFIG_JSON: `{"tokenize": {"inline_max_chars": 0}}` },
    cwd: f.cwd,
  });
  assert.deepStrictEqual(config.http, {
    max_body_bytes: 1_048_576,
    require_key_for_queries: false,
    header_timeout_ms: 10_000,
    body_timeout_ms: 30_000,
    idle_timeout_ms: 30_000,
  });
  assert.deepStrictEqual(config.tokenize, { workers: 2, inline_max_chars: 0 });
  await f.write(f.projectFile, `{"http": {"max_body_size": 1}}`);
  assertRefused(() => loadConfig({ env: f.env, cwd: f.cwd }), {
    message: /unknown key 'http\.max_body_size'/,
    key: "http.max_body_size",
  });
});

Deno.test("loadConfig() refuses an unknown key in SYNAPSE_CONFIG_JSON naming the variable", () => {
  assertRefused(
    () =>
      loadConfig({
        env: { SYNAPSE_CONFIG_JSON: `{"bogus": 1}` },
        cwd: "/nowhere",
        readFile: () => undefined,
      }),
    {
      message: "Cannot load config env:SYNAPSE_CONFIG_JSON: unknown key 'bogus'",
      file: "env:SYNAPSE_CONFIG_JSON",
      key: "bogus",
    },
  );
});

Deno.test("loadConfig() replaces preload_models with SYNAPSE_PRELOAD_MODELS", async () => {
  await using f = await fixture();
  await f.write(
    f.projectFile,
    JSON.stringify({ preload_models: [{ ...ENTRY, model_id: "file" }] }),
  );
  const { config, sources } = loadConfig({
    env: {
      ...f.env,
      SYNAPSE_PRELOAD_MODELS: JSON.stringify([{ ...ENTRY, model_id: "env", engine: "onnx" }]),
    },
    cwd: f.cwd,
  });
  assert.deepStrictEqual(config.preload_models.map((m) => [m.model_id, m.engine]), [[
    "env",
    "ort",
  ]]);
  assert.deepStrictEqual(sources, [f.projectFile, "env:SYNAPSE_PRELOAD_MODELS"]);
});

Deno.test("loadConfig() refuses a SYNAPSE_PRELOAD_MODELS that is not an array or has a bad entry", () => {
  const base = { cwd: "/nowhere", readFile: () => undefined };
  assertRefused(() => loadConfig({ ...base, env: { SYNAPSE_PRELOAD_MODELS: `{"a": 1}` } }), {
    message: /expected a JSON array, received an object/,
    file: "env:SYNAPSE_PRELOAD_MODELS",
  });
  assertRefused(
    () =>
      loadConfig({
        ...base,
        env: { SYNAPSE_PRELOAD_MODELS: JSON.stringify([ENTRY, { ...ENTRY, engine: 5 }]) },
      }),
    {
      message: /invalid value for 'preload_models\[1\]\.engine'/,
      file: "env:SYNAPSE_PRELOAD_MODELS",
      key: "preload_models[1].engine",
    },
  );
  assertRefused(() => loadConfig({ ...base, env: { SYNAPSE_PRELOAD_MODELS: `[` } }), {
    message: /JSONC syntax error/,
    file: "env:SYNAPSE_PRELOAD_MODELS",
  });
});

Deno.test("loadConfig() refuses a JSONC syntax error naming file, line and column", async () => {
  await using f = await fixture();
  await f.write(f.projectFile, `{\n  "knob": "quiet",\n  "inline": {"max_items": }\n}`);
  const err = assertRefused(() => loadConfig({ env: f.env, cwd: f.cwd }), {
    message: new RegExp(
      `^Cannot load config ${
        f.projectFile.replaceAll("/", "\\/")
      }: JSONC syntax error ValueExpected at line 3, column 27 \\(offset \\d+\\)$`,
    ),
    file: f.projectFile,
  });
  assert.strictEqual(err.details?.line, 3);
  assert.strictEqual(err.details?.column, 27);
  assert.strictEqual(typeof err.details?.offset, "number");
});

Deno.test("loadConfig() refuses an empty file", async () => {
  await using f = await fixture();
  await f.write(f.projectFile, ``);
  assertRefused(() => loadConfig({ env: f.env, cwd: f.cwd }), { message: /JSONC syntax error/ });
});

Deno.test("loadConfig() refuses a top level that is not an object", async () => {
  await using f = await fixture();
  await f.write(f.userFile, `[1]`);
  assertRefused(() => loadConfig({ env: f.env, cwd: f.cwd }), {
    message:
      `Cannot load config ${f.userFile}: expected a JSON object at the top level, received an array`,
  });
});

Deno.test("loadConfig() refuses an unknown key naming its path and file", async () => {
  await using f = await fixture();
  await f.write(f.projectFile, `{"inline": {"max_itemz": 3}}`);
  assertRefused(() => loadConfig({ env: f.env, cwd: f.cwd }), {
    message: `Cannot load config ${f.projectFile}: unknown key 'inline.max_itemz'`,
    file: f.projectFile,
    key: "inline.max_itemz",
  });
  await f.write(f.projectFile, `{"knobb": "quiet"}`);
  assertRefused(() => loadConfig({ env: f.env, cwd: f.cwd }), {
    key: "knobb",
    message: /unknown key 'knobb'/,
  });
  await f.write(
    f.projectFile,
    JSON.stringify({ preload_models: [{ ...ENTRY, pooling_mode: "cls" }] }),
  );
  assertRefused(() => loadConfig({ env: f.env, cwd: f.cwd }), {
    key: "preload_models[0].pooling_mode",
    message: /unknown key 'preload_models\[0\]\.pooling_mode'/,
  });
  await f.write(f.projectFile, `{"dev": {"other": true}}`);
  assertRefused(() => loadConfig({ env: f.env, cwd: f.cwd }), {
    key: "dev.other",
    message: /unknown key/,
  });
});

Deno.test("loadConfig() refuses a mistyped or out-of-range value naming the key", async () => {
  await using f = await fixture();
  const cases: [string, string][] = [
    [`{"inline": {"max_items": "64"}}`, "inline.max_items"],
    [`{"inline": {"max_items": 0}}`, "inline.max_items"],
    [`{"jobs": {"result_page_bytes": 1.5}}`, "jobs.result_page_bytes"],
    [`{"knob": "turbo"}`, "knob"],
    [`{"grammar_enabled": "yes"}`, "grammar_enabled"],
    [`{"probe": {"mean_cosine_threshold": 1.5}}`, "probe.mean_cosine_threshold"],
    [`{"log": {"perf_interval_secs": -1}}`, "log.perf_interval_secs"],
    [`{"worker": {"load_timeout_ms": null}}`, "worker.load_timeout_ms"],
    [`{"worker": {"start_timeout_ms": 0}}`, "worker.start_timeout_ms"],
    [`{"worker": {"start_timeout_ms": 1.5}}`, "worker.start_timeout_ms"],
    [`{"worker": {"start_timeout_ms": "60s"}}`, "worker.start_timeout_ms"],
    [`{"http": {"max_body_bytes": 0}}`, "http.max_body_bytes"],
    [`{"http": {"max_body_bytes": "64MiB"}}`, "http.max_body_bytes"],
    [`{"tokenize": {"workers": -1}}`, "tokenize.workers"],
    [`{"tokenize": {"inline_max_chars": 1.5}}`, "tokenize.inline_max_chars"],
    [`{"remote_providers": {}}`, "remote_providers"],
    [
      `{"preload_models": [{"engine": "ort", "model_path": "/m"}]}`,
      "preload_models[0].tokenizer_path",
    ],
    [
      `{"preload_models": [${JSON.stringify({ ...ENTRY, task: "classify" })}]}`,
      "preload_models[0].task",
    ],
  ];
  for (const [text, key] of cases) {
    await f.write(f.projectFile, text);
    assertRefused(() => loadConfig({ env: f.env, cwd: f.cwd }), {
      message: new RegExp(
        `^Cannot load config .*: invalid value for '${key.replace(/[.[\]]/g, "\\$&")}': `,
      ),
      file: f.projectFile,
      key,
    });
  }
  await f.write(f.userFile, `{"decode_chain_k": 17}`);
  await Deno.remove(f.projectFile);
  assertRefused(() => loadConfig({ env: f.env, cwd: f.cwd }), {
    key: "decode_chain_k",
    file: f.userFile,
    message: /invalid value/,
  });
});

Deno.test("loadConfig() reads alias_admin_enabled under its own name and its two older names", () => {
  const load = (text: string): boolean =>
    loadConfig({ env: { SYNAPSE_CONFIG_JSON: text }, cwd: "/nowhere", readFile: () => undefined })
      .config.alias_admin_enabled;
  assert.strictEqual(load(`{}`), false);
  assert.strictEqual(load(`{"dev_alias_admin": false}`), false);
  assert.strictEqual(load(`{"dev": {"alias_admin_enabled": false}}`), false);
  assert.strictEqual(load(`{"alias_admin_enabled": false}`), false);
  assert.strictEqual(load(`{"alias_admin_enabled": true}`), true);
  assert.strictEqual(load(`{"dev_alias_admin": true}`), true);
  assert.strictEqual(load(`{"dev": {"alias_admin_enabled": true}}`), true);
  // The key's own name wins over its older names.
  assert.strictEqual(load(`{"alias_admin_enabled": false, "dev_alias_admin": true}`), false);
  assert.strictEqual(load(`{"alias_admin_enabled": true, "dev_alias_admin": false}`), true);
});

Deno.test("loadConfig() maps the older jobs.ttl_ms onto the three TTLs", () => {
  const load = (text: string): SynapseConfig["jobs"] =>
    loadConfig({ env: { SYNAPSE_CONFIG_JSON: text }, cwd: "/nowhere", readFile: () => undefined })
      .config.jobs;
  const jobs = load(`{"jobs": {"ttl_ms": 1000}}`);
  assert.strictEqual(jobs.execution_ttl_ms, 1000);
  assert.strictEqual(jobs.result_retention_ttl_ms, 1000);
  assert.strictEqual(jobs.resume_deadline_ms, 1000);
  assert.strictEqual(jobs.result_page_bytes, 524_288);
  const mixed = load(`{"jobs": {"ttl_ms": 1000, "resume_deadline_ms": 5}}`);
  assert.strictEqual(mixed.execution_ttl_ms, 1000);
  assert.strictEqual(mixed.resume_deadline_ms, 5);
  assert.ok(!("ttl_ms" in mixed));
});

Deno.test("loadConfig() applies preload_models defaults", () => {
  const { config } = loadConfig({
    env: {
      SYNAPSE_PRELOAD_MODELS: JSON.stringify([
        ENTRY,
        { ...ENTRY, profile: "gte", model_id: "m2", config_path: "/m/config.json" },
        { ...ENTRY, pooling: "cls", normalize: false, max_tokens: 128, task: "rerank" },
      ]),
    },
    cwd: "/nowhere",
    readFile: () => undefined,
  });
  const [a, b, c] = config.preload_models;
  // max_tokens stays absent: the load applies 512 (8192 with a profile) capped at the model's own
  // limit (tests/ops/models_test.ts).
  assert.deepStrictEqual(a, { ...ENTRY, pooling: "mean", normalize: true });
  assert.strictEqual(b?.max_tokens, undefined);
  assert.strictEqual(b?.config_path, "/m/config.json");
  assert.deepStrictEqual([c?.pooling, c?.normalize, c?.max_tokens, c?.task], [
    "cls",
    false,
    128,
    "rerank",
  ]);
});

Deno.test("loadConfig() normalizes engine-name aliases", () => {
  const expected: Record<string, string> = {
    onnx: "ort",
    "llama.cpp": "llama",
    coreml: "ane",
    metal: "owned-metal",
    cuda: "owned-cuda",
    "owned-decode": "owned-metal-decode",
    ort: "ort",
    llama: "llama",
  };
  assert.deepStrictEqual(
    Object.fromEntries(Object.entries(ENGINE_ALIASES)),
    Object.fromEntries(Object.entries(expected).slice(0, 6)),
  );
  const names = Object.keys(expected);
  const { config } = loadConfig({
    env: { SYNAPSE_PRELOAD_MODELS: JSON.stringify(names.map((engine) => ({ ...ENTRY, engine }))) },
    cwd: "/nowhere",
    readFile: () => undefined,
  });
  assert.deepStrictEqual(config.preload_models.map((m) => m.engine), names.map((n) => expected[n]));
  assert.strictEqual(normalizeEngineName("toString"), "toString");
});

Deno.test("loadConfig() lets tokenizer_path out for engine llama only", () => {
  const load = (entry: Record<string, unknown>) =>
    loadConfig({
      env: { SYNAPSE_PRELOAD_MODELS: JSON.stringify([entry]) },
      cwd: "/nowhere",
      readFile: () => undefined,
    }).config.preload_models[0]!;
  for (const engine of ["llama", "llama.cpp"]) {
    const entry = load({ engine, model_path: "/m/model.gguf" });
    assert.strictEqual(entry.engine, "llama");
    assert.strictEqual(entry.tokenizer_path, undefined);
    assert.ok(!("tokenizer_path" in entry));
  }
  for (const engine of ["ort", "onnx", "owned-cuda"]) {
    assertRefused(() => load({ engine, model_path: "/m/model.onnx" }), {
      key: "preload_models[0].tokenizer_path",
      file: "env:SYNAPSE_PRELOAD_MODELS",
      message: /invalid value for 'preload_models\[0\]\.tokenizer_path': required for engine/,
    });
  }
});

Deno.test("loadConfig() refuses catalog-reserved preload model ids", () => {
  assert.strictEqual(CATALOG_RESERVED_MODEL_IDS.size, 4);
  for (const id of CATALOG_RESERVED_MODEL_IDS) {
    const err = assertRefused(
      () =>
        loadConfig({
          env: {
            SYNAPSE_CONFIG_JSON: JSON.stringify({
              preload_models: [ENTRY, { ...ENTRY, model_id: id }],
            }),
          },
          cwd: "/nowhere",
          readFile: () => undefined,
        }),
      {
        message: /reserved for the catalog/,
        key: "preload_models[1].model_id",
        file: "env:SYNAPSE_CONFIG_JSON",
      },
    );
    assert.strictEqual(err.details?.model_id, id);
  }
});

Deno.test("loadConfig() reads through an injected readFile", () => {
  const files: Record<string, string> = {
    "/proj/.cortexkit/synapse.jsonc": `{"knob": "quiet"}`,
    "/cfg/cortexkit/synapse.jsonc": `{"knob": "performance", "remote_providers": []}`,
  };
  const { config, sources } = loadConfig({
    env: { XDG_CONFIG_HOME: "/cfg" },
    cwd: "/proj",
    readFile: (path) => files[path],
  });
  assert.strictEqual(config.knob, "quiet");
  assert.deepStrictEqual(config.remote_providers, []);
  assert.deepStrictEqual(sources, [
    "/cfg/cortexkit/synapse.jsonc",
    "/proj/.cortexkit/synapse.jsonc",
  ]);
});

Deno.test("loadConfig() refuses a file it cannot read", () => {
  assertRefused(
    () =>
      loadConfig({
        env: {},
        cwd: "/proj",
        os: "linux",
        readFile: (path) => {
          if (path === "/proj/.cortexkit/synapse.jsonc") throw new Error("permission denied");
          return undefined;
        },
      }),
    {
      message: "Cannot load config /proj/.cortexkit/synapse.jsonc: permission denied",
      file: "/proj/.cortexkit/synapse.jsonc",
    },
  );
});

Deno.test("loadConfig() reads certification (require by default, warn when set) and refuses another value", async () => {
  await using f = await fixture();
  assert.strictEqual(loadConfig({ env: f.env, cwd: f.cwd }).config.certification, "require");
  await f.write(f.projectFile, `{"certification": "warn"}`);
  assert.strictEqual(loadConfig({ env: f.env, cwd: f.cwd }).config.certification, "warn");
  const env = { ...f.env, SYNAPSE_CONFIG_JSON: `{"certification": "require"}` };
  assert.strictEqual(loadConfig({ env, cwd: f.cwd }).config.certification, "require");
  const caught = assertRefused(
    () =>
      loadConfig({
        env: { SYNAPSE_CONFIG_JSON: `{"certification": "off"}` },
        cwd: "/nowhere",
        readFile: () => undefined,
      }),
    { message: /certification/, file: "env:SYNAPSE_CONFIG_JSON", key: "certification" },
  );
  assert.match(caught.message, /require|warn/);
});
