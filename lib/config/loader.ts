/**
 * Loads the layered `synapse.jsonc` configuration (docs/config.md).
 *
 * Resolution, lowest precedence first:
 *
 * 1. one file: `SYNAPSE_CONFIG_PATH` (or the legacy `SYNAPSE_CONFIG` when that is unset), else the
 *    project file `<cwd>/.cortexkit/synapse.jsonc`, else the user file
 *    `<config_home>/cortexkit/synapse.jsonc`. When both the project and the user file exist, the
 *    project file wins, except that `remote_providers` and `decode_chain_k` come from the user
 *    file. `decode_chain_k` is user-only: a project file that sets it refuses boot;
 * 2. `SYNAPSE_CONFIG_JSON` (legacy): an inline JSON object layered on top (sections merge
 *    key by key; arrays and scalars replace);
 * 3. `SYNAPSE_PRELOAD_MODELS` (legacy): a JSON array that replaces `preload_models`.
 *
 * Every layer is validated strictly (`schema.ts`): a JSONC syntax error, an unknown key or a
 * mistyped value refuses boot with `invalid_request` naming the source and the key path, and so
 * does a key this build accepts only at its default set to another value (`unserved.ts`).
 *
 * @module
 */

import { join, resolve } from "node:path";
import { SynapseError } from "../contract/errors.ts";
import { configHome, envLookup, type EnvSource } from "../paths.ts";
import {
  canonicalLayer,
  configError,
  type ConfigLayer,
  kindOf,
  mergeLayers,
  parseJsoncText,
  parseLayer,
  resolveConfig,
  validateLayer,
} from "./_layer.ts";
import type { SynapseConfig } from "./types.ts";

/** Result of {@link loadConfig}. */
export interface LoadedConfig {
  /** The resolved configuration. */
  config: SynapseConfig;
  /**
   * Inputs that contributed, lowest precedence first: absolute file paths, then
   * `env:SYNAPSE_CONFIG_JSON` and `env:SYNAPSE_PRELOAD_MODELS`.
   */
  sources: string[];
}

/** Options of {@link loadConfig}. */
export interface LoadConfigOptions {
  /**
   * Environment source.
   *
   * @default {Deno.env.get}
   */
  env?: EnvSource;
  /**
   * Directory holding the project config (`.cortexkit/synapse.jsonc`); relative config paths are
   * resolved against it.
   *
   * @default {Deno.cwd()}
   */
  cwd?: string;
  /**
   * Reads a file as UTF-8, returning `undefined` when it does not exist (other failures throw).
   *
   * @default {Deno.readTextFileSync, with NotFound mapped to undefined}
   */
  readFile?: (path: string) => string | undefined;
  /**
   * OS whose config-home ladder to follow.
   *
   * @default {Deno.build.os}
   */
  os?: typeof Deno.build.os;
}

const ENV_CONFIG_JSON = "env:SYNAPSE_CONFIG_JSON";
const ENV_PRELOAD_MODELS = "env:SYNAPSE_PRELOAD_MODELS";

/**
 * Loads the layered configuration (see the module docs for the resolution order).
 *
 * @param options Environment, project directory, file reader and OS.
 * @returns The resolved configuration and the inputs it came from.
 * @throws {SynapseError} Code `invalid_request` when boot must be refused: a config file named by
 * `SYNAPSE_CONFIG_PATH`/`SYNAPSE_CONFIG` is missing or unreadable, a JSONC syntax error (details
 * `{file, line, column, offset}`), an unknown or mistyped key (details `{file, key}` with a key
 * path such as `inline.max_items` or `preload_models[0].engine`), `decode_chain_k` in a project
 * file, a catalog-reserved `model_id` in `preload_models`, or a key this build accepts only at
 * its default (`unserved.ts`: `decode_chain_k`, `certify_observation`,
 * `sidecar_spec`, `remote_providers`, `probe.ane_placement_threshold`) set to another value
 * (details `{file, key, value, accepted}`).
 *
 * @example Defaults when nothing is configured
 * ```ts
 * import { loadConfig } from "./loader.ts";
 * import assert from "node:assert";
 *
 * const { config, sources } = loadConfig({ env: {}, cwd: "/nowhere", readFile: () => undefined });
 * assert.strictEqual(config.knob, "balanced");
 * assert.deepStrictEqual(sources, []);
 * ```
 */
export function loadConfig(options: LoadConfigOptions = {}): LoadedConfig {
  const get = envLookup(options.env);
  const cwd = options.cwd ?? Deno.cwd();
  const readFile = options.readFile ?? readTextFileIfExists;
  const sources: string[] = [];
  let layer: ConfigLayer = {};

  const explicit = get("SYNAPSE_CONFIG_PATH") ?? get("SYNAPSE_CONFIG");
  if (explicit !== undefined) {
    const path = resolve(cwd, explicit);
    const text = readConfigFile(readFile, path);
    if (text === undefined) {
      throw configError(path, "", "file not found");
    }
    layer = parseLayer(text, path, { userOnlyAllowed: true });
    sources.push(path);
  } else {
    const projectPath = resolve(cwd, ".cortexkit", "synapse.jsonc");
    const userPath = resolve(
      cwd,
      join(configHome(options.env, { os: options.os }), "cortexkit"),
      "synapse.jsonc",
    );
    const projectText = readConfigFile(readFile, projectPath);
    const userText = readConfigFile(readFile, userPath);
    const user = userText === undefined
      ? undefined
      : parseLayer(userText, userPath, { userOnlyAllowed: true });
    const project = projectText === undefined
      ? undefined
      : parseLayer(projectText, projectPath, { userOnlyAllowed: false, userPath });
    if (user !== undefined) sources.push(userPath);
    if (project !== undefined) sources.push(projectPath);
    if (project !== undefined) {
      layer = project;
      if (user !== undefined) {
        delete layer.remote_providers;
        if (user.remote_providers !== undefined) layer.remote_providers = user.remote_providers;
        if (user.decode_chain_k !== undefined) layer.decode_chain_k = user.decode_chain_k;
      }
    } else if (user !== undefined) {
      layer = user;
    }
  }

  const configJson = get("SYNAPSE_CONFIG_JSON");
  if (configJson !== undefined) {
    layer = mergeLayers(layer, parseLayer(configJson, ENV_CONFIG_JSON, { userOnlyAllowed: true }));
    sources.push(ENV_CONFIG_JSON);
  }

  const preloadJson = get("SYNAPSE_PRELOAD_MODELS");
  if (preloadJson !== undefined) {
    const value = parseJsoncText(preloadJson, ENV_PRELOAD_MODELS);
    if (!Array.isArray(value)) {
      throw configError(
        ENV_PRELOAD_MODELS,
        "preload_models",
        `expected a JSON array, received ${kindOf(value)}`,
      );
    }
    const parsed = validateLayer({ preload_models: value }, ENV_PRELOAD_MODELS);
    layer = mergeLayers(layer, canonicalLayer(parsed, ENV_PRELOAD_MODELS));
    sources.push(ENV_PRELOAD_MODELS);
  }

  return { config: resolveConfig(layer), sources };
}

function readConfigFile(
  readFile: (path: string) => string | undefined,
  path: string,
): string | undefined {
  try {
    return readFile(path);
  } catch (err) {
    const reason = err instanceof Error ? err.message : String(err);
    throw new SynapseError("invalid_request", `Cannot load config ${path}: ${reason}`, {
      details: { file: path },
      cause: err,
    });
  }
}

function readTextFileIfExists(path: string): string | undefined {
  try {
    return Deno.readTextFileSync(path);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return undefined;
    throw err;
  }
}
