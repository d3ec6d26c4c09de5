/**
 * A GGUF's own vocabulary as a Hugging Face `tokenizer.json` (a GGUF alone is enough;
 * docs/internals.md §3 "Tokenizer from a GGUF").
 * The module tokenizes (the llama worker only sees ids), so a GGUF served without a tokenizer.json
 * gets one built from its `tokenizer.*` metadata, shaped to split text exactly as llama.cpp's own
 * tokenizer (`src/llama-vocab.cpp`) does for the two families most GGUFs use:
 *
 * - `tokenizer.ggml.model = "llama"` (SentencePiece BPE, llama.cpp's `llm_tokenizer_spm`): a BPE
 *   model with byte fallback whose merges are derived from the vocabulary — every split of a
 *   piece into two pieces, ranked by the merged piece's score, highest first (llama.cpp merges the
 *   adjacent pair whose concatenation scores highest, leftmost on ties; BPE picks the lowest rank,
 *   leftmost on ties); normalizer `Prepend("▁")` (with `add_space_prefix`, default true) then
 *   `Replace(" ", "▁")`; decoder `Replace("▁", " ")`, `ByteFallback`, `Fuse`, `Strip`. This is
 *   transformers' LlamaConverter (legacy) shape, and its GGUF converter's merge derivation.
 * - `tokenizer.ggml.model = "gpt2"` (byte-level BPE, `llm_tokenizer_bpe`): the GGUF's merges, a
 *   sequence of `Split` pre-tokenizers (the regexes llama.cpp applies for `tokenizer.ggml.pre`,
 *   each isolating matches and gaps as llama.cpp's `unicode_regex_split` does) then `ByteLevel`
 *   without its own regex; `ignore_merges` where llama.cpp sets it (llama3); decoder `ByteLevel`.
 *
 * In both, tokens of type control (3), unknown (2) and user-defined (4) are added tokens
 * (`special` for the first two), matched in raw text before anything else, as llama.cpp does when
 * it parses special tokens; like llama.cpp, pieces it recognises by text (`</s>`, `<|im_end|>`,
 * fill-in-the-middle markers, …) count as control tokens whatever their GGUF type. BOS and EOS are added by a `TemplateProcessing` post-processor
 * exactly when llama.cpp's `add_bos` / `add_eos` are set: the family's default (SPM: BOS; BPE: BOS
 * for the llama3 family only), overridden by `tokenizer.ggml.add_bos_token` / `add_eos_token`.
 *
 * The result is checked id by id against llama.cpp at load time (`lib/models/load_llama.ts`,
 * {@link TOKENIZER_CHECK_TEXTS}): a shape this file gets wrong for some GGUF fails that load
 * loudly; it is never served.
 *
 * @module
 */
import { SynapseError } from "../contract/errors.ts";

/** The tokenizer built from a GGUF's metadata, and the facts the load-time check needs. */
export interface GgufTokenizer {
  /** The tokenizer.json object (`@huggingface/tokenizers` loads it). */
  json: Record<string, unknown>;
  /** A tokenizer_config.json object to go with it. */
  config: Record<string, unknown>;
  /** `tokenizer.ggml.model`. */
  model: "llama" | "gpt2";
  /** `tokenizer.ggml.pre` as resolved (`default` when absent); undefined for SPM. */
  pre?: string;
  /** llama.cpp prepends BOS when it adds special tokens. */
  addBos: boolean;
  /** llama.cpp appends EOS when it adds special tokens. */
  addEos: boolean;
  /** BOS id, when the vocabulary has one. */
  bosId?: number;
  /** EOS id, when the vocabulary has one. */
  eosId?: number;
  /** Pieces of the control tokens (type 3), in id order. */
  controlPieces: string[];
}

/** Options of {@link ggufTokenizer}. */
export interface GgufTokenizerOptions {
  /** Named in error messages and details. */
  modelId?: string;
  /**
   * The tokenizer of a reranker: a (query, document) pair is laid out as llama.cpp's server lays
   * out a rerank prompt without a template (`format_prompt_rerank`, tools/server of the bundled
   * release): `[BOS] query [EOS] [SEP] document [EOS]`, each special only when the vocabulary adds
   * it (`add_bos_token`, `add_eos_token`, `add_sep_token`). Otherwise a pair repeats BOS and EOS
   * around the second text.
   * @default {false}
   */
  rerankPairs?: boolean;
}

/**
 * Fixed texts the load-time check tokenizes with both the built tokenizer and llama.cpp: ASCII,
 * leading and repeated spaces, digits, punctuation, accented Latin, CJK, emoji (ZWJ sequence,
 * skin tone, flag), newlines and tabs, code, and special-token strings of common families.
 * {@link tokenizerCheckTexts} adds one with the model's own control tokens.
 */
export const TOKENIZER_CHECK_TEXTS: readonly string[] = Object.freeze([
  "The quick brown fox jumps over the lazy dog.",
  " leading space,  two spaces and    four",
  "1234567890 3.14159 -42 0x7fff 1,000,000",
  "Punctuation!? (a) [b] {c} <d> \"e\" 'f' — g… h; i: j/k\\l @#$%^&*_+=~`|",
  "naïve café déjà vu — ÀÉÎÕÜ ñ ç ß œ æ ø å",
  "日本語のテキスト、中文文本、한국어 텍스트",
  "emoji 🦙🔥👍🏽 🇫🇷 👨‍👩‍👧‍👦",
  "tabs\tand\nnewlines\n\n  indented\r\nCRLF",
  "def f(x):\n    return x**2  # it's, we're, I'll, they've",
  "<s>hi</s> <|im_start|>user\nhello<|im_end|><|endoftext|>",
]);

/**
 * The texts of the load-time check for a tokenizer: {@link TOKENIZER_CHECK_TEXTS} plus one made
 * of the model's first four control tokens between words.
 */
export function tokenizerCheckTexts(tok: Pick<GgufTokenizer, "controlPieces">): string[] {
  const pieces = tok.controlPieces.slice(0, 4);
  const texts = [...TOKENIZER_CHECK_TEXTS];
  if (pieces.length > 0) texts.push(`a${pieces.join(" b")} c\n${pieces[0]}`);
  return texts;
}

/** GGUF `tokenizer.ggml.token_type` values (llama.cpp's `llama_token_type`). */
const TYPE = { undefined: 0, normal: 1, unknown: 2, control: 3, user: 4, unused: 5, byte: 6 };

/** llama.cpp's GPT-2 style split (no digit grouping). */
const GPT2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
const CONTRACTIONS = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])";
const LLAMA3 = CONTRACTIONS +
  "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN2 = CONTRACTIONS +
  "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN35 = CONTRACTIONS +
  "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/** How llama.cpp pre-tokenizes one `tokenizer.ggml.pre` family. */
interface PreRule {
  /** Regexes applied in turn, each splitting the pieces of the previous one. */
  splits: readonly string[];
  /** A pre-token that is a whole vocabulary piece is kept whole. */
  ignoreMerges?: boolean;
  /** llama.cpp's `add_bos` default for this family. */
  addBos?: boolean;
  /** llama.cpp's `add_sep` default for this family (`llama-vocab.cpp`). */
  addSep?: boolean;
}

const PRE_RULES: Record<string, PreRule> = {};
function family(names: readonly string[], rule: PreRule): void {
  for (const n of names) PRE_RULES[n] = rule;
}
family(["default"], {
  splits: ["[\\p{P}\\$\\+<=>\\^~\\|]+", GPT2, "\\p{N}+", "[0-9][0-9][0-9]"],
});
family([
  "gpt-2",
  "phi-2",
  "mpt",
  "olmo",
  "jais",
  "trillion",
  "granite-docling",
  "jina-es",
  "jina-de",
  "jina-v1-en",
  "jina-v2-es",
  "jina-v2-de",
  "gigachat",
  "a.x-4.0",
  "mellum",
  "modern-bert",
], { splits: [GPT2] });
family(["jina-v1-en", "jina-v2-code", "roberta-bpe"], { splits: [GPT2], addSep: true });
family(
  ["llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"],
  { splits: [LLAMA3], ignoreMerges: true, addBos: true },
);
family(["dbrx", "smaug-bpe"], { splits: [LLAMA3] });
family(
  [
    "starcoder",
    "refact",
    "command-r",
    "smollm",
    "codeshell",
    "exaone",
    "minerva-7b",
    "mellum2",
  ],
  { splits: ["\\p{N}", GPT2] },
);
family(
  [
    "qwen2",
    "deepseek-r1-qwen",
    "kormo",
    "f2llmv2",
    "megrez",
    "stablelm2",
    "hunyuan",
    "solar-open",
  ],
  { splits: [QWEN2] },
);
family(["qwen35"], { splits: [QWEN35] });
family(["deepseek-llm"], {
  // Non-ASCII as escapes: the ranges need these exact code points (an editor may normalize them).
  splits: [
    "[\r\n]",
    "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\u{10400}-\u{1044f}\u{104b0}-\u{104d3}\u{104d8}-\u{104fb}\u{10c80}-\u{10cb2}\u{10cc0}-\u{10cf2}\u{118a0}-\u{118df}\u{1e900}-\u{1e943}]+",
    "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
    "\\s+$",
    "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+",
    "\\p{N}+",
  ],
});

/** The `tokenizer.ggml.pre` values this module can build a tokenizer for, sorted. */
export const SUPPORTED_GGUF_PRE_TOKENIZERS: readonly string[] = Object.freeze(
  Object.keys(PRE_RULES).sort(),
);

/** Vocabulary types llama.cpp knows that this module does not build (a tokenizer.json can). */
const KNOWN_UNSUPPORTED_MODELS = new Set([
  "bert",
  "t5",
  "rwkv",
  "plamo2",
  "gemma4",
  "hybriddna",
  "whitespace",
  "no_vocab",
  "none",
]);

/**
 * Builds the tokenizer.json of a GGUF from its metadata (pure).
 *
 * @param meta GGUF metadata: at least `tokenizer.ggml.model` and `tokenizer.ggml.tokens`; for
 *   `llama` also `scores`, for `gpt2` also `merges`; `token_type`, the special ids and the add
 *   flags are optional (llama.cpp's defaults apply). Numbers may be bigints; arrays may be typed.
 * @param options Model id for messages.
 * @returns The tokenizer.json object.
 * @throws {SynapseError} `artifact_invalid` as {@link ggufTokenizer}.
 */
export function tokenizerJsonFromGguf(
  meta: Record<string, unknown>,
  options: GgufTokenizerOptions = {},
): Record<string, unknown> {
  return ggufTokenizer(meta, options).json;
}

/**
 * Builds the tokenizer of a GGUF from its metadata (pure), with the facts the load-time check
 * needs (add flags, special ids, control pieces).
 *
 * @param meta GGUF metadata, as for {@link tokenizerJsonFromGguf}.
 * @param options Model id for messages.
 * @returns The tokenizer.json and tokenizer_config.json objects and the facts.
 * @throws {SynapseError} `artifact_invalid` with `details.reason`:
 *   `bad_vocabulary` `{key, …}` when the metadata is inconsistent (a missing or non-string
 *   `tokens` list, a duplicate piece, `scores` / `token_type` of another length or type, an
 *   unknown token type, a special id out of range, missing or malformed `merges`, an unknown
 *   `tokenizer.ggml.model`); `unsupported_tokenizer` `{model, pre?, supported}` for a vocabulary
 *   type or `tokenizer.ggml.pre` llama.cpp knows and this module does not build (serve the model
 *   with its tokenizer.json instead).
 */
export function ggufTokenizer(
  meta: Record<string, unknown>,
  options: GgufTokenizerOptions = {},
): GgufTokenizer {
  const who = options.modelId === undefined ? "the GGUF" : `model '${options.modelId}'`;
  const idDetails = options.modelId === undefined ? {} : { model_id: options.modelId };
  const bad = (key: string, why: string, extra: Record<string, unknown> = {}) =>
    new SynapseError(
      "artifact_invalid",
      `Cannot build the tokenizer of ${who} from its GGUF metadata: '${key}' ${why}; fix the GGUF or give a tokenizer.json`,
      { details: { ...idDetails, reason: "bad_vocabulary", key, ...extra } },
    );
  const modelKey = "tokenizer.ggml.model";
  const model = meta[modelKey];
  if (typeof model !== "string") throw bad(modelKey, "is missing");
  if (model !== "llama" && model !== "gpt2") {
    if (KNOWN_UNSUPPORTED_MODELS.has(model)) {
      throw new SynapseError(
        "artifact_invalid",
        `Cannot build the tokenizer of ${who} from its GGUF metadata: vocabulary type '${model}' is not supported (supported: llama, gpt2); give the model's tokenizer.json instead`,
        {
          details: {
            ...idDetails,
            reason: "unsupported_tokenizer",
            model,
            supported: ["llama", "gpt2"],
          },
        },
      );
    }
    throw bad(modelKey, `is '${model}', not a vocabulary type llama.cpp knows`, { value: model });
  }

  const tokensKey = "tokenizer.ggml.tokens";
  const rawTokens = meta[tokensKey];
  if (!Array.isArray(rawTokens) || rawTokens.length === 0) {
    throw bad(tokensKey, "is missing or empty");
  }
  const n = rawTokens.length;
  const tokens = new Array<string>(n);
  const ids = new Map<string, number>();
  for (let i = 0; i < n; i++) {
    const t = rawTokens[i];
    if (typeof t !== "string") throw bad(tokensKey, `has a non-string at index ${i}`, { index: i });
    // llama.cpp names an empty piece "[EMPTY_<id>]".
    const piece = t === "" ? `[EMPTY_${i}]` : t;
    const prior = ids.get(piece);
    if (prior !== undefined) {
      throw bad(tokensKey, `has the piece ${JSON.stringify(piece)} twice (ids ${prior} and ${i})`, {
        index: i,
        duplicate_of: prior,
      });
    }
    ids.set(piece, i);
    tokens[i] = piece;
  }

  const numbers = (key: string, required: boolean): number[] | undefined => {
    const v = meta[key];
    if (v === undefined) {
      if (required) throw bad(key, "is missing");
      return undefined;
    }
    const arr = isNumberArrayLike(v) ? Array.from(v as ArrayLike<number | bigint>, Number) : null;
    if (arr === null || arr.some((x) => !Number.isFinite(x))) {
      throw bad(key, "is not an array of numbers");
    }
    if (arr.length !== n) {
      throw bad(key, `has ${arr.length} entries for ${n} tokens`, {
        length: arr.length,
        tokens: n,
      });
    }
    return arr;
  };
  const scores = numbers("tokenizer.ggml.scores", model === "llama");
  const types = numbers("tokenizer.ggml.token_type", false) ?? new Array<number>(n).fill(1);
  for (let i = 0; i < n; i++) {
    const t = types[i]!;
    if (!Number.isInteger(t) || t < 0 || t > 6) {
      throw bad("tokenizer.ggml.token_type", `has the unknown type ${t} at index ${i}`, {
        index: i,
        value: t,
      });
    }
  }

  const specialId = (name: string, fallback: number | undefined): number | undefined => {
    const key = `tokenizer.ggml.${name}`;
    const v = meta[key];
    if (v === undefined) return fallback !== undefined && fallback < n ? fallback : undefined;
    const id = typeof v === "bigint" ? Number(v) : v;
    if (typeof id !== "number" || !Number.isInteger(id) || id < 0 || id >= n) {
      throw bad(key, `is ${String(v)}, not a token id below ${n}`, { value: String(v), tokens: n });
    }
    return id;
  };
  const flag = (name: string, fallback: boolean): boolean => {
    const key = `tokenizer.ggml.${name}`;
    const v = meta[key];
    if (v === undefined) return fallback;
    if (typeof v !== "boolean") throw bad(key, "is not a boolean");
    return v;
  };

  let rule: PreRule | undefined;
  let pre: string | undefined;
  if (model === "gpt2") {
    const preKey = "tokenizer.ggml.pre";
    const p = meta[preKey];
    if (p !== undefined && typeof p !== "string") throw bad(preKey, "is not a string");
    // llama.cpp treats a missing pre-tokenizer as "default" (with a warning).
    pre = p === undefined || p === "" ? "default" : p;
    rule = PRE_RULES[pre];
    if (rule === undefined) {
      throw new SynapseError(
        "artifact_invalid",
        `Cannot build the tokenizer of ${who} from its GGUF metadata: pre-tokenizer '${pre}' (tokenizer.ggml.pre) is not supported (supported: ${
          SUPPORTED_GGUF_PRE_TOKENIZERS.join(", ")
        }); give the model's tokenizer.json instead`,
        {
          details: {
            ...idDetails,
            reason: "unsupported_tokenizer",
            model,
            pre,
            supported: SUPPORTED_GGUF_PRE_TOKENIZERS,
          },
        },
      );
    }
  }

  const spm = model === "llama";
  const bosId = specialId("bos_token_id", spm ? 1 : 11);
  const eosId = specialId("eos_token_id", spm ? 2 : 11);
  const unkId = specialId("unknown_token_id", spm ? 0 : undefined);
  const padId = specialId("padding_token_id", undefined);
  const addBos = flag("add_bos_token", spm ? true : rule?.addBos === true);
  const addEos = flag("add_eos_token", false);
  const addSep = flag("add_sep_token", rule?.addSep === true);
  const sepId = specialId("seperator_token_id", undefined); // llama.cpp's spelling of the key
  const addSpacePrefix = spm ? flag("add_space_prefix", true) : false;
  if (addBos && bosId === undefined) {
    throw bad("tokenizer.ggml.bos_token_id", "is missing while BOS is added");
  }
  if (addEos && eosId === undefined) {
    throw bad("tokenizer.ggml.eos_token_id", "is missing while EOS is added");
  }
  if (options.rerankPairs === true && addSep && sepId === undefined) {
    throw bad("tokenizer.ggml.seperator_token_id", "is missing while SEP is added");
  }

  adjustTypesByText(tokens, types, ids, meta);
  const addedTokens: Record<string, unknown>[] = [];
  const controlPieces: string[] = [];
  for (let i = 0; i < n; i++) {
    const t = types[i]!;
    if (t !== TYPE.control && t !== TYPE.unknown && t !== TYPE.user) continue;
    if (t === TYPE.control) controlPieces.push(tokens[i]!);
    addedTokens.push({
      id: i,
      content: tokens[i],
      single_word: false,
      lstrip: false,
      rstrip: false,
      normalized: false,
      special: t !== TYPE.user,
    });
  }

  const vocab = Object.fromEntries(tokens.map((t, i) => [t, i]));
  let modelJson: Record<string, unknown>;
  let normalizer: Record<string, unknown> | null = null;
  let preTokenizer: Record<string, unknown> | null = null;
  let decoder: Record<string, unknown>;
  if (spm) {
    modelJson = {
      type: "BPE",
      dropout: null,
      unk_token: unkId === undefined ? null : tokens[unkId],
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: true,
      byte_fallback: true,
      ignore_merges: false,
      vocab,
      merges: spmMerges(tokens, ids, scores!),
    };
    const replace = { type: "Replace", pattern: { String: " " }, content: "\u2581" };
    normalizer = addSpacePrefix
      ? { type: "Sequence", normalizers: [{ type: "Prepend", prepend: "\u2581" }, replace] }
      : replace;
    const steps: Record<string, unknown>[] = [
      { type: "Replace", pattern: { String: "\u2581" }, content: " " },
      { type: "ByteFallback" },
      { type: "Fuse" },
    ];
    if (addSpacePrefix) steps.push({ type: "Strip", content: " ", start: 1, stop: 0 });
    decoder = { type: "Sequence", decoders: steps };
  } else {
    modelJson = {
      type: "BPE",
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: "",
      end_of_word_suffix: "",
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: rule!.ignoreMerges === true,
      vocab,
      merges: bpeMerges(meta, bad),
    };
    preTokenizer = {
      type: "Sequence",
      pretokenizers: [
        ...rule!.splits.map((r) => ({
          type: "Split",
          pattern: { Regex: r },
          behavior: "Isolated",
          invert: false,
        })),
        { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false },
      ],
    };
    decoder = { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false };
  }

  const json: Record<string, unknown> = {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: addedTokens,
    normalizer,
    pre_tokenizer: preTokenizer,
    post_processor: options.rerankPairs === true
      ? rerankPostProcessor(
        tokens,
        addBos ? bosId : undefined,
        addEos ? eosId : undefined,
        addSep ? sepId : undefined,
      )
      : postProcessor(tokens, addBos ? bosId : undefined, addEos ? eosId : undefined),
    decoder,
    model: modelJson,
  };
  const config: Record<string, unknown> = {
    add_bos_token: addBos,
    add_eos_token: addEos,
    clean_up_tokenization_spaces: false,
    ...(bosId === undefined ? {} : { bos_token: tokens[bosId] }),
    ...(eosId === undefined ? {} : { eos_token: tokens[eosId] }),
    ...(unkId === undefined ? {} : { unk_token: tokens[unkId] }),
    ...(padId === undefined ? {} : { pad_token: tokens[padId] }),
  };
  return {
    json,
    config,
    model,
    ...(pre === undefined ? {} : { pre }),
    addBos,
    addEos,
    ...(bosId === undefined ? {} : { bosId }),
    ...(eosId === undefined ? {} : { eosId }),
    controlPieces,
  };
}

/** Pieces llama.cpp treats as end-of-generation, and so as control tokens, whatever their type. */
const EOG_PIECES = new Set([
  "<|eot_id|>",
  "<|im_end|>",
  "<|end|>",
  "<|return|>",
  "<|call|>",
  "<|flush|>",
  "<|calls|>",
  "<end_of_turn>",
  "<|endoftext|>",
  "</s>",
  "<|eom_id|>",
  "<EOT>",
  "_<EOT>",
  "[EOT]",
  "[EOS]",
  "<|end_of_text|>",
  "<end_of_utterance>",
  "<eos>",
  "<turn|>",
  "<|tool_response>",
  "<\uff5cend\u2581of\u2581sentence\uff5c>",
]);

/**
 * Fill-in-the-middle pieces llama.cpp makes a control token when the GGUF names no id for their
 * role (the first it meets; here the lowest id), with the metadata keys that name one.
 */
const FIM_ROLES: { keys: string[]; pieces: string[] }[] = [
  {
    keys: ["fim_pre_token_id", "prefix_token_id"],
    pieces: [
      "<|fim_prefix|>",
      "<fim-prefix>",
      "<fim_prefix>",
      "<\uff5cfim\u2581begin\uff5c>",
      "<PRE>",
      "\u2581<PRE>",
      "<|code_prefix|>",
      "<|prefix|>",
    ],
  },
  {
    keys: ["fim_suf_token_id", "suffix_token_id"],
    pieces: [
      "<|fim_suffix|>",
      "<fim-suffix>",
      "<fim_suffix>",
      "<\uff5cfim\u2581hole\uff5c>",
      "<SUF>",
      "\u2581<SUF>",
      "<|code_suffix|>",
      "<|suffix|>",
    ],
  },
  {
    keys: ["fim_mid_token_id", "middle_token_id"],
    pieces: [
      "<|fim_middle|>",
      "<fim-middle>",
      "<fim_middle>",
      "<\uff5cfim\u2581end\uff5c>",
      "<MID>",
      "\u2581<MID>",
      "<|code_middle|>",
      "<|middle|>",
    ],
  },
  {
    keys: ["fim_pad_token_id"],
    pieces: ["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"],
  },
  {
    keys: ["fim_rep_token_id"],
    pieces: ["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"],
  },
  { keys: ["fim_sep_token_id"], pieces: ["<|file_sep|>"] },
];

/** Pieces llama.cpp always makes user-defined (gpt-oss). */
const USER_PIECES = ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"];

/**
 * Applies llama.cpp's by-text token attributes (`llama_vocab::impl::load`: "auto-detect special
 * tokens by text"): end-of-generation pieces become control tokens whatever their GGUF type (a
 * byte-level vocabulary's normal `</s>` is then split out as a special token), so do unnamed
 * fill-in-the-middle pieces, and gpt-oss's channel pieces become user-defined.
 */
function adjustTypesByText(
  tokens: readonly string[],
  types: number[],
  ids: ReadonlyMap<string, number>,
  meta: Record<string, unknown>,
): void {
  for (let i = 0; i < tokens.length; i++) {
    if (EOG_PIECES.has(tokens[i]!)) types[i] = TYPE.control;
  }
  for (const role of FIM_ROLES) {
    if (role.keys.some((k) => meta[`tokenizer.ggml.${k}`] !== undefined)) continue;
    const found = role.pieces.map((p) => ids.get(p)).filter((id) => id !== undefined);
    if (found.length > 0) types[Math.min(...found)] = TYPE.control;
  }
  for (const p of USER_PIECES) {
    const id = ids.get(p);
    if (id !== undefined) types[id] = TYPE.user;
  }
}

function isNumberArrayLike(v: unknown): boolean {
  if (ArrayBuffer.isView(v) && !(v instanceof DataView)) return true;
  return Array.isArray(v) && v.every((x) => typeof x === "number" || typeof x === "bigint");
}

/**
 * SentencePiece merges from the vocabulary: every split of a piece into two pieces of the
 * vocabulary, ordered by the merged piece's score (highest first), then its id, then the split
 * position.
 */
function spmMerges(
  tokens: readonly string[],
  ids: ReadonlyMap<string, number>,
  scores: readonly number[],
): [string, string][] {
  const found: { left: string; right: string; id: number; at: number }[] = [];
  for (let id = 0; id < tokens.length; id++) {
    const cps = Array.from(tokens[id]!);
    let left = "";
    for (let at = 1; at < cps.length; at++) {
      left += cps[at - 1];
      if (!ids.has(left)) continue;
      const right = cps.slice(at).join("");
      if (ids.has(right)) found.push({ left, right, id, at });
    }
  }
  found.sort((a, b) => scores[b.id]! - scores[a.id]! || a.id - b.id || a.at - b.at);
  return found.map((m) => [m.left, m.right]);
}

/** The GGUF's `tokenizer.ggml.merges` ("a b", split at the first space after the first byte). */
function bpeMerges(
  meta: Record<string, unknown>,
  bad: (key: string, why: string, extra?: Record<string, unknown>) => SynapseError,
): [string, string][] {
  const key = "tokenizer.ggml.merges";
  const raw = meta[key];
  if (!Array.isArray(raw)) throw bad(key, "is missing");
  return raw.map((m, i) => {
    const at = typeof m === "string" ? m.indexOf(" ", 1) : -1;
    if (at < 0) {
      throw bad(key, `has no "left right" pair at index ${i}`, { index: i, value: String(m) });
    }
    const s = m as string;
    return [s.slice(0, at), s.slice(at + 1)];
  });
}

/**
 * TemplateProcessing of a reranker's pairs as llama.cpp lays them out without a rerank template:
 * `[BOS] A [EOS] [SEP] B [EOS]` (tools/server `format_prompt_rerank`; its EOS falls back to SEP);
 * a single text as {@link postProcessor} has it.
 */
function rerankPostProcessor(
  tokens: readonly string[],
  bos: number | undefined,
  eos: number | undefined,
  sep: number | undefined,
): Record<string, unknown> | null {
  if (bos === undefined && eos === undefined && sep === undefined) return null;
  const special = (id: number, typeId: number) => ({
    SpecialToken: { id: tokens[id], type_id: typeId },
  });
  const single: Record<string, unknown>[] = [];
  if (bos !== undefined) single.push(special(bos, 0));
  single.push({ Sequence: { id: "A", type_id: 0 } });
  if (eos !== undefined) single.push(special(eos, 0));
  const pair = [...single];
  if (sep !== undefined) pair.push(special(sep, 1));
  pair.push({ Sequence: { id: "B", type_id: 1 } });
  if (eos !== undefined) pair.push(special(eos, 1));
  const specials: Record<string, unknown> = {};
  for (const id of [bos, eos, sep]) {
    if (id !== undefined) {
      specials[tokens[id]!] = { id: tokens[id], ids: [id], tokens: [tokens[id]] };
    }
  }
  return { type: "TemplateProcessing", single, pair, special_tokens: specials };
}

/** TemplateProcessing adding BOS and EOS (a pair repeats them around the second text). */
function postProcessor(
  tokens: readonly string[],
  bos: number | undefined,
  eos: number | undefined,
): Record<string, unknown> | null {
  if (bos === undefined && eos === undefined) return null;
  const special = (id: number, typeId: number) => ({
    SpecialToken: { id: tokens[id], type_id: typeId },
  });
  const seq = (name: "A" | "B", typeId: number) => {
    const out: Record<string, unknown>[] = [];
    if (bos !== undefined) out.push(special(bos, typeId));
    out.push({ Sequence: { id: name, type_id: typeId } });
    if (eos !== undefined) out.push(special(eos, typeId));
    return out;
  };
  const specials: Record<string, unknown> = {};
  for (const id of [bos, eos]) {
    if (id !== undefined) {
      specials[tokens[id]!] = { id: tokens[id], ids: [id], tokens: [tokens[id]] };
    }
  }
  return {
    type: "TemplateProcessing",
    single: seq("A", 0),
    pair: [...seq("A", 0), ...seq("B", 1)],
    special_tokens: specials,
  };
}
