/**
 * Matryoshka dimensions as vector spaces of their own (docs/operations.md "Matryoshka dimensions").
 *
 * A Matryoshka-trained embedding model (its source declares `matryoshka_dims`) may be served at a
 * shorter width `n`: the first `n` values of the pooled vector, then L2-normalised when the
 * model's profile normalises. Those vectors are a space of their own, so they are served under a
 * **derived numeric profile**: the model's profile with `operation` set to
 * `"synapse-matryoshka-v1:dims=<n>"` ({@link matryoshkaOperation}), hence a distinct numeric
 * profile id and fingerprint (docs/internals.md §4), stable across restarts because it derives from
 * the model's own stable profile. `n` equal to the model's full width is the plain profile.
 *
 * Normalisation order. The engine L2-normalises the full pooled vector `u` (`u / |u|`) when the
 * profile normalises; {@link truncateVector} takes the first `n` values of that and normalises
 * again. A positive scale commutes with truncation, so the result is exactly
 * `u[:n] / |u[:n]|` — the truncated pooled vector, normalised — up to float32 rounding of the
 * engine's values (relative error of order 1e-7); it is never the full vector's first `n` values
 * left at their full-vector scale (those are not unit vectors). A profile that does not normalise
 * serves `u[:n]` as is.
 *
 * Certification: a derived space is the certified lane's own vectors, cut by a deterministic,
 * engine-independent function (a prefix and one division); it inherits the lane's certification
 * (the same lane, machine and numeric profile id are what was probed). Query ≡ batch holds for
 * the truncated vectors because it holds for the full ones.
 *
 * @module
 */
import { SynapseError } from "../contract/errors.ts";
import { fingerprint, numericProfileId } from "../identity/numeric_profile.ts";
import type { NumericProfile } from "../identity/numeric_profile.ts";
import type { ModelSource, ReadyModel } from "./model.ts";

/** Prefix of a derived Matryoshka profile's `operation`. */
export const MATRYOSHKA_OPERATION_PREFIX = "synapse-matryoshka-v1:dims=";

/** One Matryoshka width of a model, as a space of its own. */
export interface MatryoshkaVariant {
  /** Vector width of the space, in values. */
  dims: number;
  /** Fingerprint of the derived profile (64 hex); the model's own when `dims` is its full width. */
  fingerprint: string;
  /** Numeric profile id of the derived profile (64 hex). */
  numericProfileId: string;
}

/** What the functions here read of a ready model. */
export type MatryoshkaModel = Pick<
  ReadyModel,
  "modelId" | "profile" | "fingerprint" | "numericProfileId" | "dims" | "matryoshkaDims"
>;

/**
 * The `operation` of the derived profile at width `n`: `"synapse-matryoshka-v1:dims=<n>"`.
 *
 * @param n Width in values (a positive integer).
 */
export function matryoshkaOperation(n: number): string {
  return `${MATRYOSHKA_OPERATION_PREFIX}${n}`;
}

/**
 * The derived numeric profile at width `n`: the model's profile with `operation` replaced by
 * {@link matryoshkaOperation} (every other field, `prompt_template` included, kept).
 *
 * @param profile The model's own profile.
 * @param n Width in values.
 */
export function matryoshkaProfile(profile: NumericProfile, n: number): NumericProfile {
  return { ...profile, operation: matryoshkaOperation(n) };
}

const variantCache = new WeakMap<NumericProfile, Map<number, MatryoshkaVariant>>();

/**
 * The space a model serves at `dims` values: `{fingerprint, numericProfileId, dims}` of the
 * derived profile, or the model's own identity when `dims` is its full width. Pure and memoised
 * per profile object; a routing helper may call it for any declared width.
 *
 * Routing (`target_fingerprint` / `required_fingerprint` naming a derived fingerprint): a model
 * matches fingerprint `f` at width `n` when `matryoshkaVariant(model, n)?.fingerprint === f` for
 * `n` in `[model.dims, ...(model.matryoshkaDims ?? [])]`; {@link matryoshkaVariants} lists them.
 *
 * @param model The ready model (its profile, identity, width and declared widths).
 * @param dims Requested width in values.
 * @returns The variant, or `undefined` when `dims` is neither the full width nor declared.
 */
export function matryoshkaVariant(
  model: MatryoshkaModel,
  dims: number,
): MatryoshkaVariant | undefined {
  if (dims === model.dims) {
    return { dims, fingerprint: model.fingerprint, numericProfileId: model.numericProfileId };
  }
  if (!(model.matryoshkaDims ?? []).includes(dims)) return undefined;
  let byDims = variantCache.get(model.profile);
  if (byDims === undefined) variantCache.set(model.profile, byDims = new Map());
  let v = byDims.get(dims);
  if (v === undefined) {
    const profile = matryoshkaProfile(model.profile, dims);
    v = { dims, fingerprint: fingerprint(profile), numericProfileId: numericProfileId(profile) };
    byDims.set(dims, v);
  }
  return { ...v };
}

/**
 * The derived spaces of a model, one per declared width below its full width, ascending (the
 * full width is the model's own profile and is not listed). Empty for a model without
 * `matryoshka_dims`.
 *
 * @param model The ready model.
 */
export function matryoshkaVariants(model: MatryoshkaModel): MatryoshkaVariant[] {
  return (model.matryoshkaDims ?? [])
    .filter((n) => n !== model.dims)
    .map((n) => matryoshkaVariant(model, n)!);
}

/**
 * The width at which a model serves fingerprint `fp`: its full width for its own fingerprint, a
 * declared Matryoshka width for a derived one, else `undefined`. What routing by fingerprint
 * (`target_fingerprint`, `required_fingerprint`) asks of a candidate model: it matches `fp` when
 * this is defined, and is then served at that width.
 *
 * @param model The ready model.
 * @param fp A fingerprint (64 hex).
 * @returns The width in values, or `undefined` when no space of the model has that fingerprint.
 */
export function matryoshkaWidthOf(model: MatryoshkaModel, fp: string): number | undefined {
  if (fp === model.fingerprint) return model.dims;
  return matryoshkaVariants(model).find((v) => v.fingerprint === fp)?.dims;
}

/**
 * The space a request is served in ({@link servedVariant}): `truncate` is set when the vectors are
 * cut to a Matryoshka width.
 */
export type ServedSpace = MatryoshkaVariant & { truncate?: number };

/**
 * The space a request's `dimensions` selects, or refuses it.
 *
 * @param model The ready model.
 * @param dimensions The request's `dimensions`; absent: the full width.
 * @returns The variant to serve; `truncate` is set when the vectors must be cut.
 * @throws {SynapseError} semantic `invalid_request {field: "dimensions", dimensions, dims,
 *   allowed_dims, model_id}` when `dimensions` is neither the model's width nor one of its
 *   declared `matryoshka_dims` (`allowed_dims` is the declared list, empty when undeclared).
 */
export function servedVariant(
  model: MatryoshkaModel,
  dimensions: number | undefined,
): ServedSpace {
  if (dimensions === undefined) return matryoshkaVariant(model, model.dims)!;
  const v = matryoshkaVariant(model, dimensions);
  if (v !== undefined) return dimensions === model.dims ? v : { ...v, truncate: dimensions };
  const allowed = [...(model.matryoshkaDims ?? [])];
  const why = allowed.length === 0
    ? `model '${model.modelId}' declares no matryoshka_dims, so it serves only its full ${model.dims}-dimensional vectors (Synapse never shortens vectors a model was not trained to shorten); omit dimensions or give ${model.dims}`
    : `model '${model.modelId}' serves ${model.dims} dimensions or one of its matryoshka_dims [${
      allowed.join(", ")
    }]`;
  throw new SynapseError(
    "invalid_request",
    `Cannot embed with dimensions ${dimensions}: ${why}`,
    {
      details: {
        field: "dimensions",
        dimensions,
        dims: model.dims,
        allowed_dims: allowed,
        model_id: model.modelId,
      },
    },
  );
}

/**
 * The first `n` values of a served vector, L2-normalised again when `l2` (see the module doc: the
 * result is the truncated pooled vector, normalised). A zero prefix stays zero.
 *
 * @param values The model's vector (full width).
 * @param n Width to keep, `1 ≤ n ≤ values.length`.
 * @param l2 The profile normalises (`normalization: "l2"`).
 * @returns A new array of `n` float32 values (the engine's precision).
 */
export function truncateVector(values: ArrayLike<number>, n: number, l2: boolean): Float32Array {
  const out = new Float32Array(n);
  let sq = 0;
  for (let i = 0; i < n; i++) {
    const v = values[i]!;
    sq += v * v;
  }
  const inv = l2 && sq > 0 && Number.isFinite(sq) ? 1 / Math.sqrt(sq) : 1;
  for (let i = 0; i < n; i++) out[i] = values[i]! * inv;
  return out;
}

/**
 * A lane row's vector in the served space: the model's own, or its first `space.truncate` values
 * L2-normalised again when the profile normalises ({@link truncateVector}).
 *
 * @param model The ready model (its profile's `normalization`).
 * @param space The served space.
 * @param values The lane's vector (full width).
 */
export function servedValues(
  model: Pick<ReadyModel, "profile">,
  space: Pick<ServedSpace, "truncate">,
  values: Float32Array,
): Float32Array {
  return space.truncate === undefined
    ? values
    : truncateVector(values, space.truncate, model.profile.normalization === "l2");
}

/**
 * Checks a source's `matryoshka_dims` against the loaded model: an embed model only, ascending
 * distinct positive integers, each at most the model's width.
 *
 * @param src The source (its `modelId`, `task` and `matryoshkaDims`).
 * @param dims The model's vector width, known once the engine loaded it; `undefined` before the
 *   load (`model.load` checks the task and the order before a job exists): the width check is
 *   then left to the load, and `details.dims` is null.
 * @param field The field to name (`matryoshka_dims`, `preload_models.matryoshka_dims`).
 *   @default "matryoshka_dims"
 * @throws {SynapseError} `invalid_request {model_id, field, matryoshka_dims, dims, reason}` with
 *   `reason` `not_embed`, `not_ascending`, `not_positive_integer` or `exceeds_dims`.
 */
export function checkMatryoshkaDims(
  src: Pick<ModelSource, "modelId" | "task" | "matryoshkaDims">,
  dims: number | undefined,
  field = "matryoshka_dims",
): void {
  const list = src.matryoshkaDims;
  if (list === undefined) return;
  const refuse = (reason: string, why: string): never => {
    throw new SynapseError(
      "invalid_request",
      `Cannot load model '${src.modelId}': matryoshka_dims [${list.join(", ")}] ${why}`,
      {
        details: {
          model_id: src.modelId,
          field,
          matryoshka_dims: [...list],
          dims: dims ?? null,
          reason,
        },
      },
    );
  };
  if (src.task !== "embed") {
    refuse("not_embed", `applies to embed models only, and this one serves ${src.task}`);
  }
  if (list.length === 0) refuse("empty", "is empty; list at least one width, or drop it");
  for (let i = 0; i < list.length; i++) {
    const n = list[i]!;
    if (!Number.isSafeInteger(n) || n < 1) {
      refuse("not_positive_integer", `holds ${n}, which is not a positive integer`);
    }
    if (i > 0 && n <= list[i - 1]!) {
      refuse("not_ascending", "must be strictly ascending (each width once)");
    }
    if (dims !== undefined && n > dims) {
      refuse("exceeds_dims", `holds ${n}, wider than the model's ${dims}-dimensional vectors`);
    }
  }
}
