/**
 * Config `model_aliases` (docs/config.md "Model aliases"): the model names clients default to
 * (`text-embedding-3-small`, `text-embedding-ada-002`, `nomic-embed-text`) mapped onto the ids of
 * models this service serves. Not the fingerprint aliases of `alias.declare` (lib/ops/aliases.ts),
 * which say two numeric profiles are equivalent; a model alias only names a model.
 *
 * The rules, checked at boot against the configured models ({@link checkModelAliases}), so a
 * table that cannot serve refuses to start naming the key:
 * - a name never shadows a model id: a configured model's id (a `preload_models` entry, or a
 *   generated test model when none is listed) or a catalog id is refused as a name;
 * - each target is a configured model's id or a catalog id (a catalog model serves once it is
 *   pulled; until then a request naming the alias is refused as for the target, naming both);
 * - aliases do not chain and no name maps to itself (the schema, lib/config/schema.ts).
 *
 * At call time ({@link modelAliasTarget}) a model loaded later with an id equal to a name (a
 * `model.load {model_id}`) is that id: a real model id always wins over an alias.
 *
 * @module
 */
import { SynapseError } from "../contract/errors.ts";
import type { ModelAliases } from "../config/types.ts";

/** What {@link checkModelAliases} checks the table against. */
export interface ModelAliasIds {
  /** Ids of the models the config serves (preload entries, or the test models). */
  configured: readonly string[];
  /** Ids of the catalog (lib/models/catalog.ts), served once pulled. */
  catalog: readonly string[];
}

/**
 * Checks config `model_aliases` against the models the config serves.
 *
 * @param aliases The table (already well formed: lib/config/schema.ts).
 * @param ids The configured model ids and the catalog ids.
 * @throws {SynapseError} `invalid_request` `{key: "model_aliases.<name>", model_alias, reason}`:
 *   `shadows_model_id` when the name is a configured or catalog model id (`model_id` names it),
 *   `unknown_target` when the target is neither (`model_id` is the target, `served` the ids).
 */
export function checkModelAliases(aliases: ModelAliases, ids: ModelAliasIds): void {
  const configured = new Set(ids.configured);
  const catalog = new Set(ids.catalog);
  for (const [name, target] of Object.entries(aliases)) {
    const key = `model_aliases.${name}`;
    if (configured.has(name) || catalog.has(name)) {
      throw new SynapseError(
        "invalid_request",
        `Cannot load config: '${key}' names the ${
          configured.has(name) ? "configured" : "catalog"
        } model '${name}'; a model alias never shadows a model id, so remove the entry`,
        { details: { key, model_alias: name, model_id: name, reason: "shadows_model_id" } },
      );
    }
    if (!configured.has(target) && !catalog.has(target)) {
      const list = ids.configured.join(", ") || "none";
      throw new SynapseError(
        "invalid_request",
        `Cannot load config: '${key}' maps to '${target}', which is no configured model (serving: ${list}) and no catalog id; map it to one of those`,
        {
          details: {
            key,
            model_alias: name,
            model_id: target,
            reason: "unknown_target",
            served: [...ids.configured],
          },
        },
      );
    }
  }
}

/**
 * The model id a requested name stands for: the name itself when a model has that id (a real
 * id wins) or the table has no such name, else its target.
 *
 * @param aliases Config `model_aliases`.
 * @param name The requested model name.
 * @param isModelId Whether a model (loaded, loading, or being loaded) has this id.
 * @returns The id to resolve, and the alias when one was taken.
 */
export function modelAliasTarget(
  aliases: ModelAliases,
  name: string,
  isModelId: (id: string) => boolean,
): { modelId: string; alias?: string } {
  if (!Object.hasOwn(aliases, name) || isModelId(name)) return { modelId: name };
  return { modelId: aliases[name]!, alias: name };
}
