/**
 * The sanitized tokenizer: a Hugging Face `tokenizer.json` with its padding and truncation
 * stripped (contract.md §3 — Synapse truncates, never the tokenizer), its digest, and encoding
 * with per-item truncation facts.
 *
 * @module
 */
import { Tokenizer } from "@huggingface/tokenizers";
import { SynapseError } from "../contract/errors.ts";
import { sha256Hex } from "../identity/sha256.ts";
import { TokenBytes } from "./token_bytes.ts";

/** One encoded sequence, ready for an engine. */
export interface EncodedSequence {
  /** Token ids including special tokens, after truncation. */
  ids: Int32Array;
  /** Segment ids (0 for the first text, 1 for the pair), same length as `ids`. */
  typeIds: Int32Array;
  /** Tokens the full input had, special tokens included (before truncation). */
  submittedTokens: number;
  /** Tokens kept (`ids.length`). */
  effectiveTokens: number;
  /** True when tokens were cut. */
  truncated: boolean;
  /** Content token ids kept for the (last) text, without specials — for `content_sha256`. */
  keptContentIds: number[];
}

/** Options of {@link SanitizedTokenizer.encode}. */
export interface EncodeOptions {
  /** Largest sequence the model accepts, special tokens included. */
  maxTokens: number;
  /** Cut to `maxTokens` instead of refusing with `sequence_too_long`. @default false */
  truncate?: boolean;
  /** Item id named in a `sequence_too_long` refusal. */
  itemId?: string;
}

interface PostProcessed {
  tokens: string[];
  token_type_ids?: number[];
}

type PostProcessor = (a: string[], b: string[] | null, addSpecial: boolean) => PostProcessed;

/**
 * A tokenizer.json loaded and sanitized. Encoding adds the model's special tokens; truncation,
 * when asked for, cuts content tokens (of the second text, for pairs) so the special tokens stay.
 */
export class SanitizedTokenizer {
  /** `"sha256:" + hex` of the re-serialized sanitized tokenizer.json. */
  readonly digest: string;
  #tok: Tokenizer;
  #vocab: Map<string, number>;
  #unkId: number;
  #post: PostProcessor | null;
  #singleSpecials: number;
  #pairSpecials: number;

  private constructor(json: Record<string, unknown>, config: Record<string, unknown>) {
    const sanitized = { ...json, padding: null, truncation: null };
    this.digest = "sha256:" + sha256Hex(JSON.stringify(sanitized));
    this.#tok = new Tokenizer(sanitized, config);
    this.#vocab = this.#tok.get_vocab(true);
    // deno-lint-ignore no-explicit-any
    const model = (this.#tok as any).model as { unk_token_id?: number } | null;
    this.#unkId = model?.unk_token_id ?? 0;
    const pp = this.#tok.post_processor as unknown as PostProcessor | null;
    this.#post = pp;
    this.#singleSpecials = pp ? pp([], null, true).tokens.length : 0;
    this.#pairSpecials = pp ? pp([], [], true).tokens.length : 0;
  }

  /**
   * Loads a tokenizer.json (and optionally its tokenizer_config.json).
   *
   * @param path Path of tokenizer.json.
   * @returns The sanitized tokenizer.
   * @throws {SynapseError} `artifact_invalid` when the file is missing or not a tokenizer.
   */
  static async fromFile(path: string): Promise<SanitizedTokenizer> {
    let json: Record<string, unknown>;
    try {
      json = JSON.parse(await Deno.readTextFile(path));
    } catch (err) {
      throw new SynapseError("artifact_invalid", `Cannot load tokenizer ${path}: ${msg(err)}`, {
        cause: err,
        details: { file: path },
      });
    }
    let config: Record<string, unknown> = {};
    const cfgPath = path.replace(/tokenizer\.json$/, "tokenizer_config.json");
    if (cfgPath !== path) {
      try {
        config = JSON.parse(await Deno.readTextFile(cfgPath));
      } catch { /* optional */ }
    }
    return SanitizedTokenizer.fromJson(json, config, path);
  }

  /**
   * Builds from parsed JSON.
   *
   * @throws {SynapseError} `artifact_invalid` when the tokenizer cannot be constructed.
   */
  static fromJson(
    json: Record<string, unknown>,
    config: Record<string, unknown> = {},
    source = "tokenizer.json",
  ): SanitizedTokenizer {
    try {
      return new SanitizedTokenizer(json, config);
    } catch (err) {
      throw new SynapseError("artifact_invalid", `Cannot load tokenizer ${source}: ${msg(err)}`, {
        cause: err,
        details: { file: source },
      });
    }
  }

  /**
   * The vocabulary as an array: index = token id, value = the token's piece (added tokens
   * included); a hole (an id no token has) is `undefined`. Built on each call.
   */
  idToToken(): (string | undefined)[] {
    const out: (string | undefined)[] = [];
    for (const [piece, id] of this.#vocab) out[id] = piece;
    return out;
  }

  /** Number of special tokens added around one text. */
  get singleSpecialTokens(): number {
    return this.#singleSpecials;
  }

  /**
   * Encodes one text with special tokens.
   *
   * @throws {SynapseError} `sequence_too_long` `{tokens, max_tokens, item_id}` when the text
   *   needs more than `maxTokens` and truncation was not asked for.
   */
  encode(text: string, options: EncodeOptions): EncodedSequence {
    const content = this.#tok.tokenize(text, { add_special_tokens: false });
    return this.#finish(null, content, options);
  }

  /**
   * Encodes a (query, document) pair for a cross-encoder. Truncation cuts the document only.
   *
   * @throws {SynapseError} `sequence_too_long` as {@link encode}; also when the query alone
   *   leaves no room for a document token.
   */
  encodePair(query: string, doc: string, options: EncodeOptions): EncodedSequence {
    const q = this.#tok.tokenize(query, { add_special_tokens: false });
    const d = this.#tok.tokenize(doc, { add_special_tokens: false });
    return this.#finish(q, d, options);
  }

  /** Tokenizes without specials (token strings). */
  tokenize(text: string): string[] {
    return this.#tok.tokenize(text, { add_special_tokens: false });
  }

  /**
   * The bytes each token id contributes to generated text, for turning generated ids into
   * valid text (`decodeGenerated`). Built on first use from the sanitized tokenizer.json and
   * cached with it.
   *
   * @throws {SynapseError} `artifact_invalid` `{reason: "unsupported_decoder", decoder}` when the
   *   tokenizer's decoder is not one {@link TokenBytes} supports (the model cannot generate).
   */
  get tokenBytes(): TokenBytes {
    // The library keeps the tokenizer.json it was built from (the sanitized copy) as `tokenizer`.
    // deno-lint-ignore no-explicit-any
    const json = (this.#tok as any).tokenizer as Record<string, unknown> | undefined;
    if (typeof json !== "object" || json === null) {
      throw new Error("Cannot build token bytes: the tokenizer lost its JSON. This is a bug");
    }
    return TokenBytes.fromTokenizerJson(json);
  }

  /** Decodes ids back to text, skipping special tokens. Empty input gives "". */
  decode(ids: number[]): string {
    if (ids.length === 0) return "";
    return this.#tok.decode(ids, { skip_special_tokens: true });
  }

  #finish(first: string[] | null, last: string[], options: EncodeOptions): EncodedSequence {
    const specials = first === null ? this.#singleSpecials : this.#pairSpecials;
    const fixed = (first?.length ?? 0) + specials;
    const submitted = fixed + last.length;
    let kept = last;
    let truncated = false;
    if (submitted > options.maxTokens) {
      const room = options.maxTokens - fixed;
      if (!options.truncate || room < 1) {
        const details: Record<string, unknown> = {
          tokens: submitted,
          max_tokens: options.maxTokens,
        };
        if (options.itemId !== undefined) details.item_id = options.itemId;
        throw new SynapseError(
          "sequence_too_long",
          `Cannot encode item${
            options.itemId === undefined ? "" : ` '${options.itemId}'`
          }: ${submitted} tokens exceed max_tokens ${options.maxTokens}` +
            (options.truncate ? " even after truncating the document" : ""),
          { details },
        );
      }
      kept = last.slice(0, room);
      truncated = true;
    }
    let tokens: string[];
    let types: number[] | undefined;
    if (this.#post) {
      const out = first === null ? this.#post(kept, null, true) : this.#post(first, kept, true);
      tokens = out.tokens;
      types = out.token_type_ids;
    } else {
      tokens = first === null ? kept : [...first, ...kept];
    }
    const ids = new Int32Array(tokens.length);
    for (let i = 0; i < tokens.length; i++) ids[i] = this.#vocab.get(tokens[i]!) ?? this.#unkId;
    const typeIds = new Int32Array(tokens.length);
    if (types) typeIds.set(types);
    const keptContentIds = new Array<number>(kept.length);
    for (let i = 0; i < kept.length; i++) {
      keptContentIds[i] = this.#vocab.get(kept[i]!) ?? this.#unkId;
    }
    return {
      ids,
      typeIds,
      submittedTokens: submitted,
      effectiveTokens: ids.length,
      truncated,
      keptContentIds,
    };
  }
}

function msg(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
