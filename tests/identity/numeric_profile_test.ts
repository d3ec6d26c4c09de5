import assert from "node:assert";
import {
  engineIdentityStableBytes,
  fingerprint,
  inputGrammarIdentity,
  type NumericProfile,
  numericProfileId,
  numericProfileStableBytes,
} from "../../lib/identity/numeric_profile.ts";
import { sha256Hex } from "../../lib/identity/sha256.ts";
import vectors from "../vectors/identity.json" with { type: "json" };

/** Rebuilds an object with its keys (recursively) in reverse order. */
function reverseKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(reverseKeys);
  if (typeof value === "object" && value !== null) {
    const out: Record<string, unknown> = {};
    for (const key of Object.keys(value).reverse()) {
      out[key] = reverseKeys((value as Record<string, unknown>)[key]);
    }
    return out;
  }
  return value;
}

function vector(name: string): (typeof vectors.numeric_profiles)[number] {
  const v = vectors.numeric_profiles.find((p) => p.name === name);
  if (v === undefined) throw new Error(`missing vector ${name}`);
  return v;
}

function profileOf(name: string): NumericProfile {
  return JSON.parse(vector(name).stable_bytes) as NumericProfile;
}

for (const v of vectors.numeric_profiles) {
  Deno.test(`numericProfileStableBytes() reproduces ${v.name}`, () => {
    const profile = JSON.parse(v.stable_bytes) as NumericProfile;
    assert.strictEqual(numericProfileStableBytes(profile), v.stable_bytes);
  });

  Deno.test(`numericProfileStableBytes() ignores input key order for ${v.name}`, () => {
    const shuffled = reverseKeys(JSON.parse(v.stable_bytes)) as NumericProfile;
    assert.notStrictEqual(JSON.stringify(shuffled), v.stable_bytes);
    assert.strictEqual(numericProfileStableBytes(shuffled), v.stable_bytes);
  });

  Deno.test(`numericProfileId() reproduces ${v.name}`, () => {
    const profile = reverseKeys(JSON.parse(v.stable_bytes)) as NumericProfile;
    assert.strictEqual(numericProfileId(profile), v.numeric_profile_id);
    assert.strictEqual(sha256Hex(v.stable_bytes), v.numeric_profile_id);
  });

  Deno.test(`fingerprint() reproduces ${v.name}`, () => {
    const profile = reverseKeys(JSON.parse(v.stable_bytes)) as NumericProfile;
    assert.strictEqual(fingerprint(profile), v.fingerprint);
  });
}

Deno.test("fingerprint() matches the metal_embed interop pin", () => {
  assert.strictEqual(
    fingerprint(profileOf("interop_metal_embed")),
    vectors.interop_pins.metal_embed,
  );
});

Deno.test("fingerprint() matches the metal_rerank interop pin", () => {
  assert.strictEqual(
    fingerprint(profileOf("interop_metal_rerank")),
    vectors.interop_pins.metal_rerank,
  );
});

Deno.test("fingerprint() hashes the JSON array [model_digest, quant, numeric_profile_id]", () => {
  const profile = profileOf("sample");
  const id = numericProfileId(profile);
  assert.strictEqual(
    fingerprint(profile),
    sha256Hex(JSON.stringify([profile.model_digest, profile.quant, id])),
  );
});

Deno.test("inputGrammarIdentity() reproduces the identity of {}", () => {
  assert.strictEqual(
    inputGrammarIdentity(vectors.input_grammar.canonical_entry),
    vectors.input_grammar.identity,
  );
});

Deno.test("inputGrammarIdentity() refuses a non-string entry", () => {
  assert.throws(() => inputGrammarIdentity({} as unknown as string), TypeError);
});

Deno.test("numericProfileStableBytes() sorts build_flags keys", () => {
  const profile = profileOf("sample");
  profile.engine.build_flags = { simd: "neon", backend: "metal" };
  assert.strictEqual(numericProfileStableBytes(profile), vector("sample").stable_bytes);
});

Deno.test("numericProfileStableBytes() omits empty, undefined and null build_flags", () => {
  const expected = vector("sample_empty_build_flags").stable_bytes;
  for (const build_flags of [{}, undefined, null]) {
    const profile = profileOf("sample_empty_build_flags");
    (profile.engine as unknown as Record<string, unknown>).build_flags = build_flags;
    assert.strictEqual(numericProfileStableBytes(profile), expected);
  }
});

Deno.test("numericProfileStableBytes() omits undefined and null optional fields", () => {
  const profile = profileOf("interop_metal_embed") as unknown as Record<string, unknown>;
  profile.prompt_template = undefined;
  profile.rotation = null;
  profile.manifest_profile_digest = undefined;
  assert.strictEqual(
    numericProfileStableBytes(profile as unknown as NumericProfile),
    vector("interop_metal_embed").stable_bytes,
  );
});

Deno.test("numericProfileStableBytes() writes every optional field in declaration order", () => {
  const profile: NumericProfile = {
    ...profileOf("sample"),
    manifest_profile_digest: "mp",
    converted_package_digest: "cp",
    rotation: "r",
    kernel_revision: "k",
    input_grammar: "g",
    operation: "o",
  };
  const keys = Object.keys(JSON.parse(numericProfileStableBytes(profile)));
  assert.deepStrictEqual(keys, [
    "model_digest",
    "quant",
    "engine",
    "sanitized_tokenizer_digest",
    "pooling",
    "normalization",
    "dtype",
    "flash_attention",
    "certified_shape",
    "prompt_template",
    "prefix_template",
    "thread_policy",
    "operation",
    "input_grammar",
    "kernel_revision",
    "rotation",
    "converted_package_digest",
    "manifest_profile_digest",
  ]);
});

Deno.test("numericProfileStableBytes() serializes custom enum variants", () => {
  const profile: NumericProfile = {
    ...profileOf("sample"),
    pooling: { custom: "weighted" },
    normalization: { custom: "l1" },
    dtype: { custom: "q8" },
    flash_attention: { custom: "x" },
    thread_policy: { custom: "pinned" },
  };
  const bytes = numericProfileStableBytes(profile);
  assert.ok(bytes.includes(`"pooling":{"custom":"weighted"}`));
  assert.ok(bytes.includes(`"thread_policy":{"custom":"pinned"}`));
});

Deno.test("numericProfileStableBytes() throws TypeError naming an invalid enum field", () => {
  const cases: [keyof NumericProfile, unknown][] = [
    ["pooling", "max"],
    ["normalization", "L2"],
    ["dtype", "fp16"],
    ["flash_attention", true],
    ["thread_policy", { custom: 1 }],
    ["pooling", { custom: "a", extra: 1 }],
  ];
  for (const [field, value] of cases) {
    const profile = { ...profileOf("sample"), [field]: value } as NumericProfile;
    assert.throws(
      () => numericProfileStableBytes(profile),
      (err: unknown) => err instanceof TypeError && err.message.includes(`'${field}'`),
      `${field}=${JSON.stringify(value)}`,
    );
  }
});

Deno.test("numericProfileStableBytes() refuses missing, mistyped and unknown fields", () => {
  const missing = profileOf("sample") as unknown as Record<string, unknown>;
  delete missing.quant;
  assert.throws(() => numericProfileStableBytes(missing as unknown as NumericProfile), /'quant'/);
  const extra = { ...profileOf("sample"), surprise: 1 } as unknown as NumericProfile;
  assert.throws(() => numericProfileStableBytes(extra), /unknown field 'surprise'/);
  const flag = profileOf("sample");
  (flag.engine.build_flags as Record<string, unknown>).simd = 1;
  assert.throws(() => numericProfileStableBytes(flag), /'engine\.build_flags\.simd'/);
});

Deno.test("numericProfileStableBytes() refuses a non-integer certified_shape count", () => {
  for (const n of [-1, 1.5, Number.NaN, 2 ** 60]) {
    const profile = profileOf("sample");
    profile.certified_shape.max_sequences = n;
    assert.throws(() => numericProfileStableBytes(profile), RangeError);
  }
});

Deno.test("numericProfileId() changes when any single field changes", () => {
  const base = profileOf("sample");
  const baseId = numericProfileId(base);
  const baseFingerprint = fingerprint(base);
  const variants: [string, (p: NumericProfile) => void][] = [
    ["model_digest", (p) => p.model_digest = "sha256:other"],
    ["quant", (p) => p.quant = "q8_0"],
    ["engine.engine", (p) => p.engine.engine = "ort"],
    ["engine.version", (p) => p.engine.version = "1.2.4"],
    ["engine.build_flags value", (p) => p.engine.build_flags = { backend: "cuda", simd: "neon" }],
    ["engine.build_flags key", (p) => p.engine.build_flags = { backend: "metal" }],
    ["sanitized_tokenizer_digest", (p) => p.sanitized_tokenizer_digest = "sha256:tok2"],
    ["pooling", (p) => p.pooling = "cls"],
    ["normalization", (p) => p.normalization = "none"],
    ["dtype", (p) => p.dtype = "f16"],
    ["flash_attention", (p) => p.flash_attention = "auto"],
    ["certified_shape.max_context_tokens", (p) => p.certified_shape.max_context_tokens = 8191],
    ["certified_shape.max_batch_tokens", (p) => p.certified_shape.max_batch_tokens = 2047],
    ["certified_shape.max_micro_batch_tokens", (p) => p.certified_shape.max_micro_batch_tokens = 1],
    ["certified_shape.max_sequences", (p) => p.certified_shape.max_sequences = 15],
    ["prompt_template", (p) => p.prompt_template = "query:{{text}}"],
    ["prompt_template removed", (p) => delete p.prompt_template],
    ["prefix_template", (p) => p.prefix_template = "passage:"],
    ["thread_policy", (p) => p.thread_policy = "quiet"],
    ["operation", (p) => p.operation = "embed"],
    ["input_grammar", (p) => p.input_grammar = inputGrammarIdentity("{}")],
    ["kernel_revision", (p) => p.kernel_revision = "1"],
    ["rotation", (p) => p.rotation = "r1"],
    ["converted_package_digest", (p) => p.converted_package_digest = "sha256:c"],
    ["manifest_profile_digest", (p) => p.manifest_profile_digest = "sha256:m"],
  ];
  const seen = new Set([baseId]);
  for (const [name, mutate] of variants) {
    const profile = profileOf("sample");
    mutate(profile);
    const id = numericProfileId(profile);
    assert.notStrictEqual(id, baseId, name);
    assert.notStrictEqual(fingerprint(profile), baseFingerprint, name);
    assert.ok(!seen.has(id), `${name} collides with another variant`);
    seen.add(id);
  }
});

Deno.test("engineIdentityStableBytes() sorts flags and omits empty ones", () => {
  assert.strictEqual(
    engineIdentityStableBytes({ version: "1", engine: "e", build_flags: { b: "2", a: "1" } }),
    `{"engine":"e","version":"1","build_flags":{"a":"1","b":"2"}}`,
  );
  assert.strictEqual(
    engineIdentityStableBytes({ engine: "e", version: "1", build_flags: {} }),
    `{"engine":"e","version":"1"}`,
  );
});

Deno.test("engineIdentityStableBytes() orders flag keys by code point, not UTF-16 unit", () => {
  // U+FF61 sorts before U+1F600 by code point (UTF-8 bytes) but after it by UTF-16 unit.
  const bytes = engineIdentityStableBytes({
    engine: "e",
    version: "1",
    build_flags: { "\u{1F600}": "b", "\uFF61": "a" },
  });
  assert.strictEqual(
    bytes,
    `{"engine":"e","version":"1","build_flags":{"\uFF61":"a","\u{1F600}":"b"}}`,
  );
});
