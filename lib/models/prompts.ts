/**
 * Prompt tables (docs/operations.md "Prompts (query / document)", field report F35): an asymmetric
 * embedding model embeds a query with an instruction prefix (`"query: "`, `"Represent this sentence
 * for searching relevant passages: "`) and a document bare or with its own prefix. A model source
 * may carry a table `{prompts: {name: prefix}, default_prompt_name?}` (preload `prompts`,
 * `model.load` `prompts`, a catalog entry, or the model directory's
 * `config_sentence_transformers.json`).
 *
 * The table is part of the numeric profile: `prompt_template = "synapse-prompt-table-v1:" +
 * sha256(JCS({default_prompt_name?, prompts}))` ({@link promptTableIdentity}), so the query and
 * the document vectors of one model share one fingerprint while a changed table changes it.
 *
 * The rules here are pure: parse and check a table ({@link parsePromptTable}), choose the prompt
 * of a request ({@link selectPrompt}) and apply it to one text ({@link applyPrompt}).
 *
 * @module
 */
import { SynapseError } from "../contract/errors.ts";
import { canonicalJson } from "../identity/jcs.ts";
import { sha256Hex } from "../identity/sha256.ts";

/** Prefix of a prompt table's identity in the numeric profile's `prompt_template`. */
export const PROMPT_TABLE_PREFIX = "synapse-prompt-table-v1:";

/** A model's prompt table: prompt name → the prefix put before each text. */
export interface PromptTable {
  /** Prompt name → prefix (an empty prefix is allowed: "embed bare, under this name"). */
  prompts: Record<string, string>;
  /** The prompt applied when a request selects none; must name one of `prompts`. */
  default_prompt_name?: string;
}

/**
 * How a request selects a prompt. `input_type` maps to a prompt by role ({@link selectPrompt});
 * `prompt_name` names one exactly.
 */
export interface PromptSelector {
  /**
   * `query` → the prompt named `query`; `document` → `document`, else `passage`, else none (the
   * text is embedded bare). Any other value (a compat door's role, e.g. Cohere's
   * `classification`) → the prompt of that name when the table has one, else none.
   */
  input_type?: string;
  /** A prompt name of the model's table; unknown → `invalid_request` naming the known ones. */
  prompt_name?: string;
}

/** The prompt a request resolved to. */
export interface PromptChoice {
  /** Prompt name. */
  name: string;
  /** Its prefix (may be empty). */
  prefix: string;
}

/**
 * The answer-level prompt disclosure (`prompt` in the envelope of embed answers): present when
 * the request carried a selector or the model has a prompt table.
 */
export interface PromptDisclosure {
  /** The selector's value as requested (`input_type` or `prompt_name`), or null for none. */
  requested: string | null;
  /** Which selector `requested` came from; absent when none was given. */
  selector?: "input_type" | "prompt_name";
  /** The prompt name applied to every item, or null when the texts were embedded as given. */
  applied: string | null;
  /**
   * Why `applied` is not simply the requested prompt: `no_prompt_table` (the model has none; the
   * texts were embedded as given), `no_prompt_for_input_type` (the table has no prompt for that role:
   * embedded bare), `default_prompt_name` (nothing requested; the table's default applied),
   * `none_requested` (nothing requested, no default: embedded bare).
   */
  reason?:
    | "no_prompt_table"
    | "no_prompt_for_input_type"
    | "default_prompt_name"
    | "none_requested";
}

/** What {@link applyPrompt} did to one text. */
export type PrefixOutcome = "applied" | "already_present" | "empty";

/** Result of {@link applyPrompt}. */
export interface AppliedPrompt {
  /** The text to tokenize: `prefix + text`, or `text` when no prefix was added. */
  text: string;
  /**
   * UTF-16 code units of the prefix added in front of the caller's text: `prefix.length` when
   * the prefix was added, 0 when it was already there or empty. Offsets into {@link text} minus
   * this are offsets into the caller's text.
   */
  prefixChars: number;
  /** {@link prefixChars} in Unicode code points (the unit of `kept_chars`). */
  prefixCodePoints: number;
  /** `applied` (prefix added), `already_present` (the text starts with it), `empty` (prefix ""). */
  prefix: PrefixOutcome;
}

/**
 * Applies a prompt prefix to one text. The documented rule against double prefixing: a text
 * that already starts with the prefix (exactly, code unit by code unit) is left as it is, so a
 * client that prefixes its queries itself gets the same vector as one that asks for the prompt.
 * Reused by `tokenize {prompt_name}` so its counts and offsets are the embed ops'.
 *
 * @param text The caller's text.
 * @param prefix The prompt's prefix (may be empty).
 * @returns The text to tokenize, the prefix's length (UTF-16 code units and code points), and
 *   what was done.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { applyPrompt } from "./prompts.ts";
 * assert.deepEqual(applyPrompt("cats", "query: "), {
 *   text: "query: cats",
 *   prefixChars: 7,
 *   prefixCodePoints: 7,
 *   prefix: "applied",
 * });
 * assert.equal(applyPrompt("query: cats", "query: ").prefix, "already_present");
 * ```
 */
export function applyPrompt(text: string, prefix: string): AppliedPrompt {
  if (prefix === "") return { text, prefixChars: 0, prefixCodePoints: 0, prefix: "empty" };
  if (text.startsWith(prefix)) {
    return { text, prefixChars: 0, prefixCodePoints: 0, prefix: "already_present" };
  }
  return {
    text: prefix + text,
    prefixChars: prefix.length,
    prefixCodePoints: [...prefix].length,
    prefix: "applied",
  };
}

/**
 * Checks a prompt table as a source declares it.
 *
 * @param prompts The declared `prompts` (undefined or null: no table).
 * @param defaultName The declared `default_prompt_name` (undefined or null: none).
 * @param field Field path named in refusals, e.g. `preload_models.prompts`, `prompts`,
 *   `config_sentence_transformers.json prompts`; the default's field is its sibling
 *   (`…default_prompt_name`).
 * @param modelId The model's id, for the message.
 * @returns The table, or undefined when `prompts` is absent or empty with no default (an empty
 *   table is no table: the model's profile and fingerprint are the plain ones).
 * @throws {SynapseError} `invalid_request {model_id, field, reason}`: `prompts` not an object of
 *   string prefixes (`not_a_table`, `prefix_not_a_string`), an empty name (`empty_name`), a
 *   default that is not a string (`default_not_a_string`), names no prompt
 *   (`unknown_default_prompt`), or is given without a table (`default_without_prompts`).
 */
export function parsePromptTable(
  prompts: unknown,
  defaultName: unknown,
  field: string,
  modelId: string,
): PromptTable | undefined {
  const defaultField = field.replace(/prompts$/, "default_prompt_name");
  const refuse = (f: string, reason: string, why: string, extra: Record<string, unknown> = {}) =>
    new SynapseError(
      "invalid_request",
      `Cannot load model '${modelId}': ${f} ${why}`,
      { details: { model_id: modelId, field: f, reason, ...extra } },
    );
  const hasDefault = defaultName !== undefined && defaultName !== null;
  if (prompts === undefined || prompts === null) {
    if (hasDefault) {
      throw refuse(
        defaultField,
        "default_without_prompts",
        "names a default prompt, but the model has no prompts table; give prompts too",
      );
    }
    return undefined;
  }
  if (typeof prompts !== "object" || Array.isArray(prompts)) {
    throw refuse(field, "not_a_table", "must be an object of prompt name → prefix string");
  }
  const table: Record<string, string> = {};
  for (const [name, prefix] of Object.entries(prompts as Record<string, unknown>)) {
    if (name === "") throw refuse(field, "empty_name", "has an empty prompt name");
    if (typeof prefix !== "string") {
      throw refuse(
        `${field}.${name}`,
        "prefix_not_a_string",
        `must be a prefix string, received ${typeof prefix}`,
        { prompt_name: name },
      );
    }
    table[name] = prefix;
  }
  const out: PromptTable = { prompts: table };
  if (Object.keys(table).length === 0 && !hasDefault) return undefined;
  if (hasDefault) {
    if (typeof defaultName !== "string") {
      throw refuse(defaultField, "default_not_a_string", "must be a prompt name (a string)");
    }
    if (!Object.hasOwn(table, defaultName)) {
      throw refuse(
        defaultField,
        "unknown_default_prompt",
        `names '${defaultName}', which is not in the prompts table (${knownNames(out)})`,
        { default_prompt_name: defaultName, known: Object.keys(table).sort() },
      );
    }
    out.default_prompt_name = defaultName;
  }
  return out;
}

/**
 * The prompt table's identity in the numeric profile: `"synapse-prompt-table-v1:" +
 * sha256(JCS({default_prompt_name?, prompts}))` (hex, no `sha256:` prefix; JCS is RFC 8785).
 *
 * @param table A table as {@link parsePromptTable} returns it.
 * @returns The `prompt_template` value.
 */
export function promptTableIdentity(table: PromptTable): string {
  const value: { prompts: Record<string, string>; default_prompt_name?: string } = {
    prompts: table.prompts,
  };
  if (table.default_prompt_name !== undefined) {
    value.default_prompt_name = table.default_prompt_name;
  }
  return PROMPT_TABLE_PREFIX + sha256Hex(canonicalJson(value));
}

/**
 * Chooses the prompt of a request.
 *
 * - A model with no table: no prompt; a selector given is disclosed with `reason:
 *   "no_prompt_table"` (clients send it generically; nothing is applied).
 * - `prompt_name`: that prompt; unknown → refused.
 * - `input_type`: `query` → `query`; `document` → `document`, else `passage`; other roles → the
 *   prompt of that name; none found → embedded bare (`no_prompt_for_input_type`).
 * - Nothing selected: `default_prompt_name` when set, else bare (`none_requested`).
 *
 * @param table The model's table, if any.
 * @param selector The request's selector.
 * @param modelId The model's id, for the message.
 * @returns The prompt to apply (absent: none) and the disclosure (absent when the request had
 *   no selector and the model has no table).
 * @throws {SynapseError} semantic `invalid_request`: both selectors given (`field:
 *   "prompt_name", reason: "conflicting_selectors"`), or an unknown `prompt_name` (`reason:
 *   "unknown_prompt_name", known`).
 */
export function selectPrompt(
  table: PromptTable | undefined,
  selector: PromptSelector,
  modelId: string,
): { choice?: PromptChoice; disclosure?: PromptDisclosure } {
  const { input_type, prompt_name } = selector;
  if (input_type !== undefined && prompt_name !== undefined) {
    throw new SynapseError(
      "invalid_request",
      `Cannot select a prompt: give input_type or prompt_name, not both (input_type '${input_type}', prompt_name '${prompt_name}')`,
      {
        details: { field: "prompt_name", reason: "conflicting_selectors", input_type, prompt_name },
      },
    );
  }
  const requested = prompt_name ?? input_type ?? null;
  const asked: Pick<PromptDisclosure, "requested" | "selector"> = requested === null
    ? { requested: null }
    : { requested, selector: prompt_name !== undefined ? "prompt_name" : "input_type" };
  if (table === undefined) {
    if (requested === null) return {};
    return { disclosure: { ...asked, applied: null, reason: "no_prompt_table" } };
  }
  const choose = (name: string): PromptChoice => ({ name, prefix: table.prompts[name]! });
  if (prompt_name !== undefined) {
    if (!Object.hasOwn(table.prompts, prompt_name)) {
      throw new SynapseError(
        "invalid_request",
        `Cannot apply prompt '${prompt_name}': model '${modelId}' has no prompt of that name (${
          knownNames(table)
        })`,
        {
          details: {
            field: "prompt_name",
            reason: "unknown_prompt_name",
            prompt_name,
            model_id: modelId,
            known: Object.keys(table.prompts).sort(),
          },
        },
      );
    }
    return { choice: choose(prompt_name), disclosure: { ...asked, applied: prompt_name } };
  }
  if (input_type !== undefined) {
    const candidates = input_type === "document" ? ["document", "passage"] : [input_type];
    const name = candidates.find((n) => Object.hasOwn(table.prompts, n));
    if (name === undefined) {
      return { disclosure: { ...asked, applied: null, reason: "no_prompt_for_input_type" } };
    }
    return { choice: choose(name), disclosure: { ...asked, applied: name } };
  }
  const d = table.default_prompt_name;
  if (d === undefined) return { disclosure: { ...asked, applied: null, reason: "none_requested" } };
  return { choice: choose(d), disclosure: { ...asked, applied: d, reason: "default_prompt_name" } };
}

function knownNames(table: PromptTable): string {
  const names = Object.keys(table.prompts).sort();
  return names.length === 0
    ? "the table is empty"
    : `known: ${names.map((n) => `'${n}'`).join(", ")}`;
}

/** File name of a sentence-transformers model's own settings, beside its weights. */
export const ST_CONFIG_FILE = "config_sentence_transformers.json";

/**
 * Reads the prompt table of a model directory's `config_sentence_transformers.json` (its
 * `prompts` and `default_prompt_name`). A missing file, or one whose `prompts` is absent or empty
 * with no default (what sentence-transformers writes for a symmetric model), is no table.
 *
 * @param path The file's path.
 * @param modelId The model's id, for refusals.
 * @returns The table, or undefined.
 * @throws {SynapseError} `artifact_invalid {model_id, file, reason: "bad_json"}` for a file that
 *   is not a JSON object; `invalid_request` naming `config_sentence_transformers.json:prompts`
 *   (or `:default_prompt_name`) for a bad table (see {@link parsePromptTable}).
 */
export async function readSentenceTransformersPrompts(
  path: string,
  modelId: string,
): Promise<PromptTable | undefined> {
  let text: string;
  try {
    text = await Deno.readTextFile(path);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return undefined;
    throw new SynapseError(
      "artifact_invalid",
      `Cannot load model '${modelId}': cannot read ${path}: ${(err as Error).message}`,
      { cause: err, details: { model_id: modelId, file: path } },
    );
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch { /* refused below */ }
  if (typeof json !== "object" || json === null || Array.isArray(json)) {
    throw new SynapseError(
      "artifact_invalid",
      `Cannot load model '${modelId}': ${path} is not a JSON object`,
      { details: { model_id: modelId, file: path, reason: "bad_json" } },
    );
  }
  const o = json as Record<string, unknown>;
  return parsePromptTable(o.prompts, o.default_prompt_name, `${ST_CONFIG_FILE}:prompts`, modelId);
}

/**
 * The prompt table a load serves: the source's declared table, else its
 * `config_sentence_transformers.json` (embed models only).
 *
 * @param src The model source's task, id and prompt fields.
 * @returns The table, or undefined.
 * @throws {SynapseError} `invalid_request {field: "prompts", reason: "not_an_embed_model"}` for a
 *   declared table on a rerank or generation model; as {@link readSentenceTransformersPrompts}.
 */
export async function loadPromptTable(src: {
  modelId: string;
  task: string;
  prompts?: PromptTable;
  promptsConfigPath?: string;
}): Promise<PromptTable | undefined> {
  if (src.prompts !== undefined) {
    if (src.task !== "embed") {
      throw new SynapseError(
        "invalid_request",
        `Cannot load model '${src.modelId}': a prompts table serves embed models, and this one is a ${src.task} model; drop prompts`,
        {
          details: {
            model_id: src.modelId,
            field: "prompts",
            reason: "not_an_embed_model",
            task: src.task,
          },
        },
      );
    }
    return src.prompts;
  }
  if (src.task !== "embed" || src.promptsConfigPath === undefined) return undefined;
  return await readSentenceTransformersPrompts(src.promptsConfigPath, src.modelId);
}

/**
 * The profile field of a prompt table: `{prompt_template}` with its identity, or `{}` without a
 * table. Spread it into an embed model's numeric profile.
 */
export function promptProfileField(table: PromptTable | undefined): { prompt_template?: string } {
  return table === undefined ? {} : { prompt_template: promptTableIdentity(table) };
}
