/**
 * The numeric profile: everything that changes the numbers a lane produces, and the identities
 * derived from it (docs/internals.md §4).
 *
 * A profile serializes to its **stable bytes**: compact JSON with the fields in declaration order
 * (not the order of the input object), absent optional fields omitted and `build_flags` keys
 * sorted (omitted when empty). From those bytes:
 *
 * - `numeric_profile_id = sha256(stable_bytes)`;
 * - `fingerprint = sha256(JSON [model_digest, quant, numeric_profile_id])`.
 *
 * Both implementations of Synapse (the reference and this one) derive the same fingerprint from
 * the same profile, so vectors made by either share one identity.
 *
 * @module
 */

import { sha256Hex } from "./sha256.ts";
import { compareCodePoints } from "./_compare.ts";

/** The custom variant of a profile enum; serializes as `{"custom": value}`. */
export interface CustomVariant {
  /** Free-form name of the variant. */
  custom: string;
}

/** How token states become one vector. */
export type Pooling = "mean" | "cls" | "last_token" | CustomVariant;

/** Vector normalization after pooling. */
export type Normalization = "none" | "l2" | CustomVariant;

/** Compute dtype of the lane. */
export type Dtype = "f16" | "f32" | "bf16" | CustomVariant;

/** Flash attention setting of the lane. */
export type FlashAttention = "disabled" | "enabled" | "auto" | CustomVariant;

/** Thread policy (the scheduler knob) the lane was certified under. */
export type ThreadPolicy = "quiet" | "balanced" | "performance" | CustomVariant;

/**
 * Identity of an engine build, as carried in a numeric profile, a machine profile and the
 * response envelope's `provenance.engine`.
 */
export interface EngineIdentity {
  /** Engine name, e.g. `"llama.cpp"`, `"ort"`, `"owned-metal"`. */
  engine: string;
  /** Engine version string. */
  version: string;
  /** Build flags; keys are sorted when serialized and the object is omitted when empty. */
  build_flags?: Record<string, string>;
}

/** The batch shape a lane was certified for; all counts are non-negative integers. */
export interface CertifiedShape {
  /** Longest sequence, in tokens. */
  max_context_tokens: number;
  /** Most tokens in one batch. */
  max_batch_tokens: number;
  /** Most tokens in one micro-batch (one engine call). */
  max_micro_batch_tokens: number;
  /** Most sequences in one batch. */
  max_sequences: number;
}

/**
 * Numeric profile of docs/internals.md §4, with the reference's snake_case field names.
 *
 * Optional fields that are `undefined` or `null` are absent: they are omitted from the stable
 * bytes.
 */
export interface NumericProfile {
  /** Digest of the model weights, e.g. `"sha256:<hex>"`. */
  model_digest: string;
  /** Quantization (for catalog Metal lanes, equal to the dtype), e.g. `"f16"`. */
  quant: string;
  /** Engine identity. */
  engine: EngineIdentity;
  /** Digest of the sanitized tokenizer, e.g. `"sha256:<hex>"`. */
  sanitized_tokenizer_digest: string;
  /** Pooling. */
  pooling: Pooling;
  /** Normalization. */
  normalization: Normalization;
  /** Compute dtype. */
  dtype: Dtype;
  /** Flash attention. */
  flash_attention: FlashAttention;
  /** Certified batch shape. */
  certified_shape: CertifiedShape;
  /** Prompt template, e.g. `"query: {{text}}"` or the rerank template id. */
  prompt_template?: string;
  /** Prefix template, e.g. `"passage: "`. */
  prefix_template?: string;
  /** Thread policy. */
  thread_policy: ThreadPolicy;
  /** Operation name, when the profile is specific to one. */
  operation?: string;
  /** Input grammar identity (see {@link inputGrammarIdentity}). */
  input_grammar?: string;
  /** Kernel revision of an owned engine. */
  kernel_revision?: string;
  /** Rotation identity. */
  rotation?: string;
  /** Digest of a converted package. */
  converted_package_digest?: string;
  /** Digest of the manifest profile. */
  manifest_profile_digest?: string;
}

/** Prefix of an input grammar identity. */
const INPUT_GRAMMAR_PREFIX = "synapse-input-grammar-v1:";

const POOLING: readonly string[] = ["mean", "cls", "last_token"];
const NORMALIZATION: readonly string[] = ["none", "l2"];
const DTYPE: readonly string[] = ["f16", "f32", "bf16"];
const FLASH_ATTENTION: readonly string[] = ["disabled", "enabled", "auto"];
const THREAD_POLICY: readonly string[] = ["quiet", "balanced", "performance"];

const PROFILE_FIELDS: ReadonlySet<string> = new Set([
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
const ENGINE_FIELDS: ReadonlySet<string> = new Set(["engine", "version", "build_flags"]);
const SHAPE_FIELDS = [
  "max_context_tokens",
  "max_batch_tokens",
  "max_micro_batch_tokens",
  "max_sequences",
] as const;

/**
 * Serializes a numeric profile to its stable bytes (docs/internals.md §4).
 *
 * The input's key order does not matter: fields are written in declaration order. Optional fields
 * that are `undefined` or `null` are omitted; `engine.build_flags` keys are sorted by code point
 * (the reference's byte order) and the object is omitted when empty.
 *
 * @param profile The profile; extra fields are refused.
 * @returns Compact JSON text; hash its UTF-8 bytes for the profile id.
 * @throws {TypeError} When a field is missing, has the wrong type, is an unknown field, or holds a
 * value outside its enum (the message names the field).
 * @throws {RangeError} When a `certified_shape` count is not a non-negative safe integer.
 *
 * @example Key order of the input is irrelevant
 * ```ts
 * import { numericProfileStableBytes } from "./numeric_profile.ts";
 * import assert from "node:assert";
 *
 * const bytes = numericProfileStableBytes({
 *   thread_policy: "balanced",
 *   quant: "f16",
 *   model_digest: "sha256:m",
 *   engine: { version: "1", engine: "ort" },
 *   sanitized_tokenizer_digest: "sha256:t",
 *   pooling: "mean",
 *   normalization: "l2",
 *   dtype: "f32",
 *   flash_attention: "disabled",
 *   certified_shape: {
 *     max_sequences: 1,
 *     max_context_tokens: 8,
 *     max_batch_tokens: 8,
 *     max_micro_batch_tokens: 8,
 *   },
 * });
 * assert.ok(bytes.startsWith('{"model_digest":"sha256:m","quant":"f16","engine":{"engine":"ort"'));
 * ```
 */
export function numericProfileStableBytes(profile: NumericProfile): string {
  const where = "numeric profile";
  const p = asRecord(profile, where, "profile");
  rejectUnknownFields(p, PROFILE_FIELDS, where, "");
  const parts: string[] = [];
  const put = (name: string, json: string): void => {
    parts.push(`${JSON.stringify(name)}:${json}`);
  };
  const putString = (name: keyof NumericProfile): void => {
    put(name, JSON.stringify(requireString(p[name], where, name)));
  };
  const putOptionalString = (name: keyof NumericProfile): void => {
    const value = p[name];
    if (value === undefined || value === null) return;
    put(name, JSON.stringify(requireString(value, where, name)));
  };
  putString("model_digest");
  putString("quant");
  put("engine", engineIdentityStableJson(p.engine, where, "engine"));
  putString("sanitized_tokenizer_digest");
  put("pooling", enumJson(p.pooling, POOLING, where, "pooling"));
  put("normalization", enumJson(p.normalization, NORMALIZATION, where, "normalization"));
  put("dtype", enumJson(p.dtype, DTYPE, where, "dtype"));
  put("flash_attention", enumJson(p.flash_attention, FLASH_ATTENTION, where, "flash_attention"));
  put("certified_shape", shapeJson(p.certified_shape, where));
  putOptionalString("prompt_template");
  putOptionalString("prefix_template");
  put("thread_policy", enumJson(p.thread_policy, THREAD_POLICY, where, "thread_policy"));
  putOptionalString("operation");
  putOptionalString("input_grammar");
  putOptionalString("kernel_revision");
  putOptionalString("rotation");
  putOptionalString("converted_package_digest");
  putOptionalString("manifest_profile_digest");
  return `{${parts.join(",")}}`;
}

/**
 * Computes the numeric profile id: `sha256(stable_bytes)`.
 *
 * @param profile The profile.
 * @returns 64 lowercase hex characters.
 * @throws {TypeError} As {@link numericProfileStableBytes}.
 * @throws {RangeError} As {@link numericProfileStableBytes}.
 */
export function numericProfileId(profile: NumericProfile): string {
  return sha256Hex(numericProfileStableBytes(profile));
}

/**
 * Computes the fingerprint of a profile:
 * `sha256(JSON.stringify([model_digest, quant, numeric_profile_id]))`.
 *
 * Persist it verbatim; it is opaque to consumers.
 *
 * @param profile The profile.
 * @returns 64 lowercase hex characters.
 * @throws {TypeError} As {@link numericProfileStableBytes}.
 * @throws {RangeError} As {@link numericProfileStableBytes}.
 */
export function fingerprint(profile: NumericProfile): string {
  const id = numericProfileId(profile);
  return sha256Hex(JSON.stringify([profile.model_digest, profile.quant, id]));
}

/**
 * Computes the input grammar identity of a canonical grammar entry:
 * `"synapse-input-grammar-v1:" + sha256(canonicalEntry)`.
 *
 * @param canonicalEntry The canonical entry text, hashed as its UTF-8 bytes (the caller
 * canonicalizes; this function does not re-serialize).
 * @returns The identity, e.g. `"synapse-input-grammar-v1:44136fa3…"` for `"{}"`.
 * @throws {TypeError} When `canonicalEntry` is not a string.
 */
export function inputGrammarIdentity(canonicalEntry: string): string {
  if (typeof canonicalEntry !== "string") {
    throw new TypeError(
      `Cannot compute input grammar identity: canonical entry must be a string, received ${
        describe(canonicalEntry)
      }`,
    );
  }
  return INPUT_GRAMMAR_PREFIX + sha256Hex(canonicalEntry);
}

/**
 * Serializes an engine identity to compact JSON: `{engine, version, build_flags?}` with
 * `build_flags` keys sorted by code point and the object omitted when empty or absent.
 *
 * @param identity The engine identity; extra fields are refused.
 * @returns Compact JSON text.
 * @throws {TypeError} When a field is missing, of the wrong type, or unknown.
 */
export function engineIdentityStableBytes(identity: EngineIdentity): string {
  return engineIdentityStableJson(identity, "engine identity", "engine identity");
}

function engineIdentityStableJson(value: unknown, where: string, field: string): string {
  const e = asRecord(value, where, field);
  rejectUnknownFields(e, ENGINE_FIELDS, where, `${field}.`);
  const engine = requireString(e.engine, where, `${field}.engine`);
  const version = requireString(e.version, where, `${field}.version`);
  let json = `{"engine":${JSON.stringify(engine)},"version":${JSON.stringify(version)}`;
  if (e.build_flags !== undefined && e.build_flags !== null) {
    const flags = asRecord(e.build_flags, where, `${field}.build_flags`);
    const keys = Object.keys(flags).sort(compareCodePoints);
    if (keys.length > 0) {
      const entries = keys.map((k) => {
        const v = requireString(flags[k], where, `${field}.build_flags.${k}`);
        return `${JSON.stringify(k)}:${JSON.stringify(v)}`;
      });
      json += `,"build_flags":{${entries.join(",")}}`;
    }
  }
  return `${json}}`;
}

function enumJson(
  value: unknown,
  variants: readonly string[],
  where: string,
  field: string,
): string {
  if (typeof value === "string" && variants.includes(value)) return JSON.stringify(value);
  if (typeof value === "object" && value !== null && !Array.isArray(value)) {
    const keys = Object.keys(value);
    const custom = (value as Record<string, unknown>).custom;
    if (keys.length === 1 && keys[0] === "custom" && typeof custom === "string") {
      return `{"custom":${JSON.stringify(custom)}}`;
    }
  }
  const allowed = variants.map((v) => JSON.stringify(v)).join(", ");
  throw new TypeError(
    `Cannot serialize ${where}: invalid '${field}': expected one of ${allowed} or {"custom": string}, received ${
      describe(value)
    }`,
  );
}

function shapeJson(value: unknown, where: string): string {
  const s = asRecord(value, where, "certified_shape");
  rejectUnknownFields(s, new Set(SHAPE_FIELDS), where, "certified_shape.");
  const entries = SHAPE_FIELDS.map((name) => {
    const n = s[name];
    const field = `certified_shape.${name}`;
    if (typeof n !== "number") {
      throw new TypeError(
        `Cannot serialize ${where}: '${field}' must be a number, received ${describe(n)}`,
      );
    }
    if (!Number.isSafeInteger(n) || n < 0) {
      throw new RangeError(
        `Cannot serialize ${where}: '${field}' must be a non-negative integer, received ${n}`,
      );
    }
    return `${JSON.stringify(name)}:${n}`;
  });
  return `{${entries.join(",")}}`;
}

function asRecord(value: unknown, where: string, field: string): Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new TypeError(
      `Cannot serialize ${where}: '${field}' must be an object, received ${describe(value)}`,
    );
  }
  return value as Record<string, unknown>;
}

function requireString(value: unknown, where: string, field: string): string {
  if (typeof value !== "string") {
    throw new TypeError(
      `Cannot serialize ${where}: '${field}' must be a string, received ${describe(value)}`,
    );
  }
  return value;
}

function rejectUnknownFields(
  record: Record<string, unknown>,
  known: ReadonlySet<string>,
  where: string,
  prefix: string,
): void {
  for (const key of Object.keys(record)) {
    if (!known.has(key)) {
      throw new TypeError(`Cannot serialize ${where}: unknown field '${prefix}${key}'`);
    }
  }
}

function describe(value: unknown): string {
  if (value === undefined) return "undefined";
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}
