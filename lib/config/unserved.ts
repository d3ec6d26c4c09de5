/**
 * Config keys this build accepts only at their default (docs/config.md lists them: no key is
 * accepted and read nowhere). Each serves an operation, a lane or a platform this
 * build does not have, so a value other than the default would be accepted and not honoured: a
 * layer that sets one refuses boot with `invalid_request` naming the key, the file and why
 * (`_layer.ts`). The default itself stays accepted, so a config written out in full still loads.
 *
 * @module
 */

/** One key accepted only at its default. */
export interface UnservedKey {
  /** Key path as written, e.g. `probe.ane_placement_threshold`. */
  key: string;
  /** The only value accepted (compared as JSON). */
  accepted: unknown;
  /** Why another value is refused: what the key serves and why this build has none. */
  reason: string;
}

/** The keys this build accepts only at their default, in schema order. */
export const UNSERVED_KEYS: readonly UnservedKey[] = Object.freeze(
  [
    {
      key: "decode_chain_k",
      accepted: 1,
      reason:
        "it chains the reference's own Metal decoder (owned_decode.*), which is not in this build (not among the operations in scope, docs/internals.md §1); only 1 is accepted",
    },
    {
      key: "certify_observation",
      accepted: false,
      reason:
        "it serves certify.observations, an operation of the reference's own Metal decoder that is not in this build (not among the operations in scope, docs/internals.md §1); only false is accepted",
    },
    {
      key: "sidecar_spec",
      accepted: {},
      reason:
        "this build runs no sidecar (its lanes are ort and llama workers it starts itself); only {} is accepted",
    },
    {
      key: "probe.ane_placement_threshold",
      accepted: 0.9,
      reason:
        "the Apple Neural Engine exists only on macOS and this build places no work on an ANE (macOS only, not in this build); only 0.9 is accepted",
    },
  ] satisfies UnservedKey[],
);

/**
 * The first unserved key a layer sets to a value other than its default.
 *
 * @param layer A layer as written and validated (aliases not yet resolved).
 * @returns The key, with the value written, or `undefined` when every unserved key is absent or
 * at its default.
 */
export function firstUnservedValue(
  layer: Readonly<Record<string, unknown>>,
): { entry: UnservedKey; value: unknown } | undefined {
  for (const entry of UNSERVED_KEYS) {
    let value: unknown = layer;
    for (const part of entry.key.split(".")) {
      value = typeof value === "object" && value !== null && !Array.isArray(value)
        ? (value as Record<string, unknown>)[part]
        : undefined;
    }
    if (value !== undefined && JSON.stringify(value) !== JSON.stringify(entry.accepted)) {
      return { entry, value };
    }
  }
  return undefined;
}
