/**
 * `tokenize` and `detokenize` (docs/operations.md "tokenize", "detokenize"): the served model's own
 * tokenizer — the sanitized tokenizer.json, or the one built from a GGUF's vocabulary — so a
 * chunker cuts with exactly the tokens the embedding operations count. Query operations; they run
 * no engine.
 *
 * **Offsets are Unicode code points** of the caller's text, the unit of `kept_chars` (F26):
 * `[...text].slice(start, end).join("")` in JS, `text[start:end]` in Python. How spans are found
 * is `lib/tokenize/token_offsets.ts`.
 *
 * @module
 */
import { z } from "zod";
import { SynapseError } from "../contract/errors.ts";
import {
  parseParams,
  PROMPT_SELECTOR,
  requestedModel,
  ROUTING_PARAMS,
  wellFormedName,
} from "../contract/schemas.ts";
import type { ModelTask, ReadyModel } from "../models/model.ts";
import {
  applyPrompt,
  type PrefixOutcome,
  type PromptDisclosure,
  selectPrompt,
} from "../models/prompts.ts";
import { toCodePointOffsets } from "../tokenize/token_offsets.ts";
import type { TokenizedText } from "../tokenize/tokenizer.ts";
import type { CallOptions, OpContext } from "./context.ts";
import { modelNamed, resolveModel, routingOf, type RoutingParams } from "./_resolve_model.ts";

/** Most texts one `tokenize` call takes. */
export const TOKENIZE_MAX_TEXTS = 1000;

/** Most UTF-16 code units of text one `tokenize` call takes, all texts together. */
export const TOKENIZE_MAX_CHARS = 262_144;

/** Most ids one `detokenize` call takes. */
export const DETOKENIZE_MAX_IDS = 262_144;

/**
 * `tokenize {model?, texts[], input_type?, prompt_name?, add_special_tokens?, <routing>}`: the
 * prompt selector and the routing params as embed takes them.
 */
export const TokenizeParams = z.strictObject({
  model: wellFormedName().optional(),
  model_id: wellFormedName().optional(),
  texts: z.array(z.string()).min(1, { message: "must not be empty" }).max(TOKENIZE_MAX_TEXTS, {
    message: `has more than ${TOKENIZE_MAX_TEXTS} texts`,
  }),
  ...PROMPT_SELECTOR,
  ...ROUTING_PARAMS,
  /** Add the model's special tokens (CLS/SEP, BOS/EOS) as the embedding ops do. @default true */
  add_special_tokens: z.boolean().optional(),
});
export type TokenizeParams = z.infer<typeof TokenizeParams>;

/** `detokenize {model?, ids[], skip_special_tokens?, <routing>}`. */
export const DetokenizeParams = z.strictObject({
  model: wellFormedName().optional(),
  model_id: wellFormedName().optional(),
  ...ROUTING_PARAMS,
  ids: z.array(z.number().int()).max(DETOKENIZE_MAX_IDS, {
    message: `has more than ${DETOKENIZE_MAX_IDS} ids`,
  }),
  /** Leave special tokens out of the text. @default true */
  skip_special_tokens: z.boolean().optional(),
});
export type DetokenizeParams = z.infer<typeof DetokenizeParams>;

/** One tokenized text. */
export interface TokenizeItem {
  /** Token ids, special tokens included unless `add_special_tokens: false`. */
  ids: number[];
  /**
   * `ids.length`: with special tokens, the `real_token_counts` entry embed.query, embed.batch
   * and microllm report for this text when it fits.
   */
  count: number;
  /**
   * `[start, end)` of each token in Unicode code points of the text tokenized — the caller's
   * text, or when a prompt was applied the prompted text given in {@link tokenized_text} (the prefix's
   * tokens first, then the caller's text shifted by {@link prefix_chars}); a special token has
   * the empty span where it sits.
   */
  offsets: [number, number][];
  /** When a prompt was applied: the text tokenized (the prefix, then the caller's text). */
  tokenized_text?: string;
  /**
   * When a prompt was applied: code points of the prefix put before the caller's text (0 when it was
   * already there or empty); subtract it from an offset to index the caller's text.
   */
  prefix_chars?: number;
  /**
   * When a prompt was chosen: what was done to this text, as embed's truncation disclosure
   * says it — `applied` (the prefix put first), `already_present` (the text starts with it, so it
   * was not put twice), `empty` (the prompt's prefix is "").
   */
  prompt_prefix?: PrefixOutcome;
  /** Each token's vocabulary piece (`##ing`, `▁world`, `Ġworld`, `[CLS]`). */
  pieces: string[];
  /** Whether each token is a special token the model adds. */
  special: boolean[];
  /** `count > max_tokens`: the embedding ops refuse this text, or cut it with `truncate`. */
  exceeds_max_tokens: boolean;
}

/** `tokenize` result. */
export interface TokenizeResult {
  module_generation: number;
  model_id: string;
  /** The model alias the request named, when it named one (config `model_aliases`). */
  requested_model?: string;
  fingerprint: string;
  sanitized_tokenizer_digest: string;
  /** The model's longest sequence in tokens, special tokens included. */
  max_tokens: number;
  items: TokenizeItem[];
  /**
   * The prompt chosen, exactly as embed's `prompt` disclosure (present when the request carried
   * a selector or the model has a prompt table); when one was applied the ids and offsets are of
   * the prompted text.
   */
  prompt?: PromptDisclosure;
}

/** `detokenize` result. */
export interface DetokenizeResult {
  module_generation: number;
  model_id: string;
  /** The model alias the request named, when it named one (config `model_aliases`). */
  requested_model?: string;
  fingerprint: string;
  text: string;
}

/**
 * `tokenize {model?, texts[], input_type?, prompt_name?, add_special_tokens?, <routing>}` → per
 * text its ids, count, code-point offsets, pieces and whether it exceeds `max_tokens`, with the
 * model's fingerprint and sanitized tokenizer digest. Any loaded model (embed, rerank or
 * generate) serves; without `model`, the default embed model, or the one the routing params
 * choose ({@link modelFor}). The prompt is chosen as embed chooses it (a selector, else the
 * model's `default_prompt_name`; a selector on a model with no table is disclosed with `reason:
 * "no_prompt_table"` and applies nothing), so `count` is what embed counts for the same request.
 *
 * @throws {SynapseError} channel `invalid_request` for malformed params, a text with a lone
 *   surrogate (`{field: "texts.<i>"}`) or more than {@link TOKENIZE_MAX_CHARS} code units in
 *   all (`{field: "texts", reason: "too_long"}`); semantic `invalid_request {field:
 *   "prompt_name", reason: "unknown_prompt_name", known}` for a prompt name the model's table
 *   lacks, `reason: "conflicting_selectors"` for both selectors; `substitution_rejected` as the
 *   routing rules; `unknown_model`, `model_loading` as the registry.
 */
export async function tokenizeOp(
  ctx: OpContext,
  rawParams: unknown,
  options: CallOptions = {},
): Promise<TokenizeResult> {
  const p = parseParams("tokenize", TokenizeParams, rawParams);
  let chars = 0;
  p.texts.forEach((text, i) => {
    chars += text.length;
    if (!text.isWellFormed()) {
      throw new SynapseError(
        "invalid_request",
        `Cannot tokenize texts[${i}]: it has a lone UTF-16 surrogate, so it is not valid Unicode`,
        { channel: true, details: { field: `texts.${i}`, reason: "lone_surrogate" } },
      );
    }
  });
  if (chars > TOKENIZE_MAX_CHARS) {
    throw new SynapseError(
      "invalid_request",
      `Cannot tokenize ${chars} UTF-16 code units in one call: at most ${TOKENIZE_MAX_CHARS}; split the texts over several calls`,
      {
        channel: true,
        details: { field: "texts", reason: "too_long", chars, max: TOKENIZE_MAX_CHARS },
      },
    );
  }
  const model = modelFor(ctx, requestedModel(p), routingOf(p));
  // The prompt is chosen and put before each text exactly as embed does (lib/models/prompts.ts
  // `selectPrompt`: a selector, else the model's default_prompt_name), so the counts are the
  // ones embed reports; the offsets then index the prompted text, as TEI's do.
  let texts = p.texts;
  let prefixChars: number[] | undefined;
  let outcomes: PrefixOutcome[] | undefined;
  const selector = {
    ...(p.input_type === undefined ? {} : { input_type: p.input_type }),
    ...(p.prompt_name === undefined ? {} : { prompt_name: p.prompt_name }),
  };
  const { choice, disclosure: prompt } = selectPrompt(model.prompts, selector, model.modelId);
  if (choice !== undefined) {
    const applied = texts.map((t) => applyPrompt(t, choice.prefix));
    texts = applied.map((a) => a.text);
    prefixChars = applied.map((a) => a.prefixCodePoints);
    outcomes = applied.map((a) => a.prefix);
  }
  const addSpecial = p.add_special_tokens ?? true;
  // Off the event loop past a few hundred characters (the tokenizer pool's Worker threads).
  const tokenized = await ctx.tokenizers.tokenizeTexts(model.tokenizer, texts, {
    addSpecial,
    signal: options.signal,
  });
  return {
    module_generation: ctx.moduleGeneration,
    model_id: model.modelId,
    ...requestedOf(requestedModel(p), model),
    fingerprint: model.fingerprint,
    sanitized_tokenizer_digest: model.profile.sanitized_tokenizer_digest,
    max_tokens: model.maxTokens,
    items: texts.map((text, i) => {
      const item = itemOf(model, text, tokenized[i]!);
      return prefixChars === undefined ? item : {
        ...item,
        tokenized_text: text,
        prefix_chars: prefixChars[i]!,
        prompt_prefix: outcomes![i]!,
      };
    }),
    ...(prompt === undefined ? {} : { prompt }),
  };
}

function itemOf(model: ReadyModel, text: string, t: TokenizedText): TokenizeItem {
  const flat = t.spans.flat();
  const cp = toCodePointOffsets(text, flat);
  const offsets: [number, number][] = t.spans.map((_, i) => [cp[2 * i]!, cp[2 * i + 1]!]);
  return {
    ids: t.ids,
    count: t.ids.length,
    offsets,
    pieces: t.pieces,
    special: t.special,
    exceeds_max_tokens: t.ids.length > model.maxTokens,
  };
}

/**
 * `detokenize {model?, ids[], skip_special_tokens?}` → `{model_id, fingerprint, text}`: the
 * model's tokenizer decoding the ids.
 *
 * @throws {SynapseError} channel `invalid_request` for malformed params; semantic
 *   `invalid_request {field: "ids.<i>", index, id, vocab_size, model_id}` for an id the
 *   vocabulary does not have; `unknown_model`, `model_loading` as the registry.
 */
export function detokenizeOp(ctx: OpContext, rawParams: unknown): DetokenizeResult {
  const p = parseParams("detokenize", DetokenizeParams, rawParams);
  const model = modelFor(ctx, requestedModel(p), routingOf(p));
  const tok = model.tokenizer;
  p.ids.forEach((id, i) => {
    if (!tok.hasId(id)) {
      throw new SynapseError(
        "invalid_request",
        `Cannot detokenize ids[${i}]: ${id} is not a token id of model '${model.modelId}'`,
        {
          details: {
            field: `ids.${i}`,
            index: i,
            id,
            vocab_size: tok.idToToken().length,
            model_id: model.modelId,
          },
        },
      );
    }
  });
  return {
    module_generation: ctx.moduleGeneration,
    model_id: model.modelId,
    ...requestedOf(requestedModel(p), model),
    fingerprint: model.fingerprint,
    text: tok.decodeIds(p.ids, p.skip_special_tokens ?? true),
  };
}

/** `requested_model` when the request named a model alias (its name is not the served id). */
function requestedOf(
  requested: string | undefined,
  model: ReadyModel,
): { requested_model?: string } {
  return requested === undefined || requested === model.modelId
    ? {}
    : { requested_model: requested };
}

/** Tasks a routed target is looked for in, in order, when the request names no model. */
const ROUTED_TASKS: readonly ModelTask[] = ["embed", "rerank", "generate"];

/**
 * The model whose tokenizer answers: the named one, whatever its task, or the default embed
 * model; with routing params (`target_fingerprint`, `required_fingerprint`, `allow_equivalent`,
 * `accept_declared`, `required_epoch`), the model they choose by the rules of embed
 * (lib/ops/_resolve_model.ts), a target without `model` being looked for among the embed, then
 * rerank, then generate models. No certification gate: a tokenizer runs no engine, so it is the
 * same whether its lane is certified or not (a certified candidate is still preferred).
 *
 * @throws {SynapseError} as `ModelRegistry.resolve`; `substitution_rejected` as
 *   {@link resolveModel} (for a target no model of any task serves: the embed task's refusal).
 */
export function modelFor(
  ctx: Parameters<typeof resolveModel>[0],
  modelId: string | undefined,
  routing: RoutingParams = {},
): ReadyModel {
  // A config `model_aliases` name is resolved (and refused) as the model resolution does.
  const named = modelId === undefined ? undefined : modelNamed(ctx, modelId);
  if (named?.alias !== undefined) {
    const target = named.modelId;
    const task = ctx.registry.list().find((m) => m.modelId === target)?.task ?? "embed";
    return resolveModel(ctx, modelId, task, routing, { certificationGate: false });
  }
  const entry = modelId === undefined
    ? undefined
    : ctx.registry.list().find((m) => m.modelId === modelId);
  const task = entry?.task ?? "embed";
  const routed = Object.keys(routing).length > 0;
  if (!routed) return ctx.registry.resolve(modelId, task);
  const gate = { certificationGate: false };
  if (modelId !== undefined || routing.target_fingerprint === undefined) {
    return resolveModel(ctx, modelId, task, routing, gate);
  }
  let first: unknown;
  for (const t of ROUTED_TASKS) {
    try {
      return resolveModel(ctx, undefined, t, routing, gate);
    } catch (err) {
      const noMatch = err instanceof SynapseError && err.code === "substitution_rejected" &&
        err.details?.reason === "no_match";
      if (!noMatch) throw err;
      first ??= err;
    }
  }
  throw first;
}
