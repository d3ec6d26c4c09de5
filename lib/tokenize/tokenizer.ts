/**
 * The sanitized tokenizer: a Hugging Face `tokenizer.json` with its padding and truncation
 * stripped (docs/internals.md §3 — Synapse truncates, never the tokenizer), its digest, and
 * encoding with per-item truncation facts.
 *
 * **Text is text (field report F25).** A caller's text is tokenized without matching the
 * tokenizer's *special* added tokens (`special: true`: `[CLS]`, `[SEP]`, `<s>`, `<|im_end|>`,
 * …) in it: the string `[SEP]` in a text is the three pieces `[`, `sep`, `]`, never the SEP id —
 * what Hugging Face calls `split_special_tokens=True`, and llama.cpp `parse_special = false`.
 * Special ids come only from the post-processor (the model's own CLS/SEP/BOS/EOS placement) and
 * from spans a caller marks as special explicitly ({@link EncodeOptions.specialSpans}: a chat
 * template's scaffolding). Non-special added tokens (user-defined pieces) are still matched, as
 * both libraries do. A text with no special-token string tokenizes exactly as before: the
 * library splits text at the same places, so the digest (and every fingerprint) is unchanged.
 *
 * @module
 */
import { Tokenizer } from "@huggingface/tokenizers";
import { SynapseError } from "../contract/errors.ts";
import { sha256Hex } from "../identity/sha256.ts";
import { TokenBytes } from "./token_bytes.ts";
import { TokenBound } from "./token_bound.ts";
import type { LowerBound } from "./token_bound.ts";
import { tokenSpans } from "./token_offsets.ts";
import {
  parseRerankTemplate,
  RERANK_TEMPLATE_PROBES,
  type RerankTemplate,
  substituteRerankTemplate,
} from "./rerank_template.ts";

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
  /** Content token ids kept for the (last) text, without specials. */
  keptContentIds: number[];
  /**
   * When truncated: the UTF-16 length of the (last) text's prefix the kept tokens cover — the
   * end of the last kept token's span as {@link SanitizedTokenizer.tokenizeText} (the `tokenize`
   * operation) gives it (`token_offsets.ts`: the shortest prefix whose tokenization starts with
   * the tokens up to it), so it ends where the last kept token ends in the caller's own text
   * (field report F26: `content_sha256` hashes it).
   */
  keptTextEnd?: number;
  /** {@link keptTextEnd} in Unicode code points (the disclosed `kept_chars`). */
  keptChars?: number;
  /**
   * True when only a proven prefix of a long text was tokenized (see
   * {@link EncodeOptions.fullTokenizeMaxChars}): `submittedTokens` is then a lower bound of the
   * text's tokens (everything else is exact). Absent or false otherwise.
   */
  submittedTokensIsLowerBound?: boolean;
}

/**
 * One text tokenized for the `tokenize` operation: every token with its id, piece, whether it is
 * special, and its span in the caller's text. Content tokens are exactly those of
 * {@link SanitizedTokenizer.encode} (same ids, same count).
 */
export interface TokenizedText {
  /** Token ids, special tokens included when asked for. */
  ids: number[];
  /** Each token's vocabulary piece (`##ing`, `▁world`, `Ġworld`, `[CLS]`). */
  pieces: string[];
  /** Whether each token was added by the post-processor (CLS, SEP, BOS, EOS). */
  special: boolean[];
  /**
   * Each token's `[start, end)` in UTF-16 code units of the caller's text (the rule of
   * `token_offsets.ts`); a special token has the empty span where it sits.
   */
  spans: [number, number][];
}

/** Options of {@link SanitizedTokenizer.encode}. */
export interface EncodeOptions {
  /** Largest sequence the model accepts, special tokens included. */
  maxTokens: number;
  /** Cut to `maxTokens` instead of refusing with `sequence_too_long`. @default false */
  truncate?: boolean | undefined;
  /** Item id named in a `sequence_too_long` refusal. */
  itemId?: string | undefined;
  /**
   * Texts longer than this many UTF-16 code units (a pair's two texts together) are not
   * tokenized in full when a bound applies ({@link SanitizedTokenizer.bound}): one that
   * provably needs more than `maxTokens` is refused at once, with a lower bound as `tokens` and
   * `tokens_is_lower_bound: true`; one to truncate is tokenized only up to a proven cut, so
   * `submittedTokens` is a lower bound. Shorter texts get exact counts.
   *
   * @default {max(65536, 32 × maxTokens)}
   */
  fullTokenizeMaxChars?: number | undefined;
  /**
   * Spans of the text that are special tokens (see {@link SanitizedTokenizer.findSpecialTokens}):
   * each `text.slice(start, end)` is the content of one special added token and becomes its id;
   * the text between spans is tokenized as plain text, as everywhere else. Sorted, not
   * overlapping. For a chat template's scaffolding; a text with spans is always tokenized in
   * full (no length bound applies), and cannot be the document of a pair.
   */
  specialSpans?: readonly SpecialSpan[] | undefined;
}

/**
 * A special token inside a text: `[start, end)` in UTF-16 code units.
 */
export type SpecialSpan = readonly [start: number, end: number];

/** Options of {@link SanitizedTokenizer.encodeMany} and {@link SanitizedTokenizer.encodePairs}. */
export interface EncodeManyOptions extends Omit<EncodeOptions, "itemId" | "specialSpans"> {
  /** Item id of each text, named in its `sequence_too_long` refusal. */
  itemIds?: readonly (string | undefined)[] | undefined;
  /** {@link EncodeOptions.specialSpans} of each text (none where absent). */
  specialSpans?: readonly (readonly SpecialSpan[] | undefined)[] | undefined;
  /**
   * Plans from {@link SanitizedTokenizer.planMany} with the same options, one per text (a
   * missing one is planned here). The text of a `prefix` plan may already be cut.
   */
  plans?: readonly (EncodePlan | undefined)[] | undefined;
  /** The query of (query, document) pairs: every text is then a document. */
  pairQuery?: string | undefined;
}

/** Options of {@link SanitizedTokenizer.planMany}. */
export interface PlanManyOptions extends Omit<EncodeManyOptions, "plans"> {
  /**
   * Scan at most about this many UTF-16 code units per text; past it a plan is `undecided`.
   *
   * @default {Infinity}
   */
  scanLimit?: number | undefined;
}

/** Options of {@link SanitizedTokenizer.planEncode}. */
export interface PlanEncodeOptions extends EncodeOptions {
  /** The query of a (query, document) pair; `text` is then the document. */
  pairQuery?: string | undefined;
  /**
   * Scan at most about this many UTF-16 code units per text; past it the plan is `undecided`.
   *
   * @default {Infinity}
   */
  scanLimit?: number | undefined;
}

/**
 * How a text will be encoded, decided by cheap scans: tokenize it `full`, tokenize only
 * `text.slice(0, cut)` (a proven prefix; the text will be truncated), or `undecided` (the scan
 * limit came first: plan again without it).
 */
export type EncodePlan =
  | { kind: "full" }
  | { kind: "prefix"; cut: number }
  | { kind: "undecided" };

/**
 * One item's encoding, or the error that refused it. `submittedSha256` (hex SHA-256 of the
 * item's UTF-8 text) is set when the caller asked the tokenizer pool for it.
 */
export type EncodeOutcome =
  | { ok: true; seq: EncodedSequence; submittedSha256?: string }
  | { ok: false; error: Error };

/** One item's plan, or the error that refused it. */
export type PlanOutcome = { ok: true; plan: EncodePlan } | { ok: false; error: Error };

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
  #declaredUnkId: number | undefined;
  #post: PostProcessor | null;
  #singleSpecials: number;
  #pairSpecials: number;
  #json: Record<string, unknown>;
  #config: Record<string, unknown>;
  #bound: TokenBound | undefined;
  #specials: Map<string, SpecialToken>;
  #specialsByFirst: Map<number, string[]>;
  #pieceOf: (string | undefined)[] | undefined;
  #template: PairTemplate | undefined;

  private constructor(
    json: Record<string, unknown>,
    config: Record<string, unknown>,
    rerankTemplate?: string,
  ) {
    const sanitized = { ...json, padding: null, truncation: null };
    // A rerank template changes every pair's tokens, so it is part of the digest.
    this.digest = "sha256:" +
      sha256Hex(
        JSON.stringify(sanitized) +
          (rerankTemplate === undefined ? "" : `\u0000rerank_template\u0000${rerankTemplate}`),
      );
    this.#json = sanitized;
    this.#config = config;
    this.#tok = new Tokenizer(sanitized, config);
    this.#vocab = this.#tok.get_vocab(true);
    this.#specials = specialTokensOf(sanitized);
    this.#specialsByFirst = new Map();
    for (const content of this.#specials.keys()) {
      const first = content.charCodeAt(0);
      const list = this.#specialsByFirst.get(first) ?? [];
      list.push(content);
      this.#specialsByFirst.set(first, list);
    }
    for (const list of this.#specialsByFirst.values()) list.sort((a, b) => b.length - a.length);
    matchOnlyNonSpecialAddedTokens(this.#tok);
    // deno-lint-ignore no-explicit-any
    const model = (this.#tok as any).model as { unk_token_id?: number } | null;
    this.#unkId = model?.unk_token_id ?? 0;
    this.#declaredUnkId = model?.unk_token_id ?? undefined;
    const pp = this.#tok.post_processor as unknown as PostProcessor | null;
    this.#post = pp;
    this.#singleSpecials = pp ? pp([], null, true).tokens.length : 0;
    this.#pairSpecials = pp ? pp([], [], true).tokens.length : 0;
    if (rerankTemplate !== undefined) {
      const t = parseRerankTemplate(rerankTemplate);
      const literal = (s: string) => this.tokenizeWithSpecials(s, this.findSpecialTokens(s));
      const pieces = t.literals.map(literal) as [string[], string[], string[]];
      this.#template = { t, pieces };
      this.#pairSpecials = pieces[0].length + pieces[1].length + pieces[2].length;
    }
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
    rerankTemplate?: string,
  ): SanitizedTokenizer {
    try {
      return new SanitizedTokenizer(json, config, rerankTemplate);
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

  /** Contents of the special added tokens (`special: true`), in the tokenizer.json's order. */
  get specialTokens(): readonly string[] {
    return [...this.#specials.keys()];
  }

  /**
   * Where special-token strings occur in a text, as the library would match them if it parsed
   * special tokens: at each position the longest special token's content starting there, left
   * to right, not overlapping. For marking a chat template's scaffolding
   * ({@link EncodeOptions.specialSpans}); never applied to a caller's text.
   *
   * @param text The text.
   * @returns The spans, sorted.
   */
  findSpecialTokens(text: string): SpecialSpan[] {
    const out: SpecialSpan[] = [];
    if (this.#specialsByFirst.size === 0) return out;
    for (let i = 0; i < text.length;) {
      const list = this.#specialsByFirst.get(text.charCodeAt(i));
      const hit = list?.find((c) => text.startsWith(c, i));
      if (hit === undefined) {
        i++;
        continue;
      }
      out.push([i, i + hit.length]);
      i += hit.length;
    }
    return out;
  }

  /** Number of special tokens added around one text. */
  get singleSpecialTokens(): number {
    return this.#singleSpecials;
  }

  /** Number of special tokens added around a (query, document) pair. */
  get pairSpecialTokens(): number {
    return this.#pairSpecials;
  }

  /**
   * The provable token bound of this tokenizer (see `token_bound.ts`), built on first use.
   */
  get bound(): TokenBound {
    if (this.#bound === undefined) {
      // deno-lint-ignore no-explicit-any
      const tok = this.#tok as any;
      // Special added tokens are not matched in text: the bound sees only the others.
      const plain = {
        ...this.#json,
        added_tokens: addedTokenList(this.#json).filter((t) => t.special !== true),
      };
      this.#bound = TokenBound.analyze(plain, this.#config, {
        normalizer: tok.normalizer ?? null,
        preTokenizer: tok.pre_tokenizer ?? null,
      });
    }
    return this.#bound;
  }

  /**
   * The sanitized tokenizer.json and the tokenizer_config.json it was built from, for building
   * the same tokenizer in another thread ({@link SanitizedTokenizer.fromJson}).
   */
  get source(): {
    json: Record<string, unknown>;
    config: Record<string, unknown>;
    rerankTemplate?: string;
  } {
    return {
      json: this.#json,
      config: this.#config,
      ...(this.#template === undefined ? {} : { rerankTemplate: this.#template.t.source }),
    };
  }

  /** The rerank template pairs are encoded in (see {@link withRerankTemplate}), if any. */
  get rerankTemplate(): string | undefined {
    return this.#template?.t.source;
  }

  /**
   * This tokenizer with pairs encoded in a reranker's prompt template
   * (`lib/tokenize/rerank_template.ts`): a pair is the template's literal pieces (special tokens
   * parsed) around the query's and the document's tokens (never parsed as special), the
   * document truncated when asked. Single texts encode as before. Checked at once: on each of
   * {@link RERANK_TEMPLATE_PROBES} the pair's tokens must equal the whole substituted string's.
   *
   * @param template The template, `{query}` before `{document}`, once each.
   * @returns The new tokenizer (its digest covers the template).
   * @throws {RangeError} when the template is malformed, or a probe pair tokenizes differently
   *   in pieces than whole (the message names the pair and the first differing token).
   */
  withRerankTemplate(template: string): SanitizedTokenizer {
    const out = new SanitizedTokenizer(this.#json, this.#config, template);
    const t = out.#template!.t;
    for (const [query, doc] of RERANK_TEMPLATE_PROBES) {
      const whole = substituteRerankTemplate(t, query, doc);
      const expected = out.tokenizeWithSpecials(whole, out.findSpecialTokens(whole));
      const got = out.#execute(doc, { kind: "full" }, { maxTokens: Number.MAX_SAFE_INTEGER }, {
        query,
      });
      const ids = expected.map((p) => out.#vocab.get(p) ?? out.#unkId);
      const at = ids.findIndex((id, i) => got.ids[i] !== id);
      if (at >= 0 || got.ids.length !== ids.length) {
        const i = at >= 0 ? at : Math.min(ids.length, got.ids.length);
        throw new RangeError(
          `the rerank template tokenizes differently in pieces than whole for the pair ${
            JSON.stringify([query, doc])
          }: token ${i} is ${got.ids[i] ?? "absent"} in pieces, ${ids[i] ?? "absent"} whole`,
        );
      }
    }
    return out;
  }

  /**
   * Encodes one text with special tokens.
   *
   * A text longer than `fullTokenizeMaxChars` is first checked against {@link bound}: refused at
   * once when it provably cannot fit, or, when truncating, tokenized only up to a proven cut.
   *
   * @param text The text.
   * @param options Limit, truncation, item id.
   * @returns Ids with special tokens, segment ids, counts and the kept content ids.
   * @throws {SynapseError} `sequence_too_long` `{tokens, max_tokens, item_id}` (plus
   *   `tokens_is_lower_bound: true` when `tokens` is a proven lower bound of a long text) when
   *   the text needs more than `maxTokens` and truncation was not asked for.
   */
  encode(text: string, options: EncodeOptions): EncodedSequence {
    return this.encodeWithPlan(text, this.planEncode(text, options), options);
  }

  /**
   * Encodes a (query, document) pair for a cross-encoder. Truncation cuts the document only.
   *
   * @throws {SynapseError} `sequence_too_long` as {@link encode}; also when the query alone
   *   leaves no room for a document token.
   */
  encodePair(query: string, doc: string, options: EncodeOptions): EncodedSequence {
    const plan = this.planEncode(doc, { ...options, pairQuery: query });
    return this.encodeWithPlan(doc, plan, { ...options, pairQuery: query });
  }

  /**
   * Encodes many texts; each outcome is what {@link encode} returns for it (or
   * {@link encodePair} with `pairQuery`), or the error it throws. A pair's query is tokenized
   * once.
   *
   * @param texts The texts (documents, with `pairQuery`).
   * @param options Limit, truncation, item ids, plans.
   * @returns One outcome per text, in order.
   * @throws {RangeError} when `maxTokens` is not a positive integer.
   */
  encodeMany(texts: readonly string[], options: EncodeManyOptions): EncodeOutcome[] {
    checkMaxTokens(options.maxTokens);
    const memo: PairMemo = { query: options.pairQuery };
    return texts.map((text, i) => {
      const opts = itemOptions(options, i);
      try {
        const plan = options.plans?.[i];
        const p = plan === undefined || plan.kind === "undecided"
          ? this.#plan(text, opts, memo)
          : plan;
        return { ok: true, seq: this.#execute(text, p, opts, memo) };
      } catch (error) {
        return { ok: false, error: asError(error) };
      }
    });
  }

  /**
   * Encodes one query against many documents, tokenizing the query once:
   * `encodeMany(docs, {...options, pairQuery: query})`.
   */
  encodePairs(
    query: string,
    docs: readonly string[],
    options: EncodeManyOptions,
  ): EncodeOutcome[] {
    return this.encodeMany(docs, { ...options, pairQuery: query });
  }

  /**
   * {@link planEncode} for many texts (a pair's query bound computed once).
   *
   * @returns One plan or refusal per text, in order.
   * @throws {RangeError} when `maxTokens` is not a positive integer.
   */
  planMany(texts: readonly string[], options: PlanManyOptions): PlanOutcome[] {
    checkMaxTokens(options.maxTokens);
    const memo: PairMemo = { query: options.pairQuery };
    return texts.map((text, i) => {
      try {
        return { ok: true, plan: this.#plan(text, itemOptions(options, i), memo) };
      } catch (error) {
        return { ok: false, error: asError(error) };
      }
    });
  }

  /**
   * Decides, by cheap scans only, how {@link encode} (or {@link encodePair} with `pairQuery`)
   * will treat a text — or refuses it when it provably cannot fit. Pure: the same text and
   * options always give the same plan, whatever thread computes it.
   *
   * @param text The text (the document of a pair).
   * @param options As for {@link encode}, plus `pairQuery` and `scanLimit`.
   * @returns The plan.
   * @throws {SynapseError} `sequence_too_long` with `tokens_is_lower_bound: true` when the text
   *   is longer than `fullTokenizeMaxChars` and provably needs more than `maxTokens` (with
   *   truncation: when the query alone provably leaves no room).
   */
  planEncode(text: string, options: PlanEncodeOptions): EncodePlan {
    return this.#plan(text, options, { query: options.pairQuery });
  }

  /**
   * Encodes a text as {@link planEncode} decided. For a `prefix` plan, `text` may already be cut
   * to `plan.cut` code units. `encodeWithPlan(t, planEncode(t, o), o)` equals `encode(t, o)`.
   *
   * @throws {SynapseError} `sequence_too_long` as {@link encode}.
   */
  encodeWithPlan(text: string, plan: EncodePlan, options: PlanEncodeOptions): EncodedSequence {
    const memo: PairMemo = { query: options.pairQuery };
    const p = plan.kind === "undecided"
      ? this.#plan(text, { ...options, scanLimit: Infinity }, memo)
      : plan;
    return this.#execute(text, p, options, memo);
  }

  /**
   * Tokenizes as plain text, without adding special tokens (token strings). Special-token
   * strings in the text are text (see the module doc).
   */
  tokenize(text: string): string[] {
    return this.#tok.tokenize(text, { add_special_tokens: false });
  }

  /**
   * Tokenizes a text whose `spans` are special tokens: each span is its token, the text between
   * is plain text, trimmed next to a special token that strips (`lstrip` / `rstrip`) as the
   * library does.
   *
   * @throws {RangeError} when a span is out of order, out of range or not a special token.
   */
  tokenizeWithSpecials(text: string, spans: readonly SpecialSpan[]): string[] {
    const out: string[] = [];
    let at = 0;
    let strip = false;
    const flush = (section: string) => {
      if (section !== "") out.push(...this.tokenize(section));
    };
    for (const [start, end] of spans) {
      if (!(Number.isInteger(start) && start >= at && end > start && end <= text.length)) {
        throw new RangeError(
          `Cannot tokenize with special spans: span [${start}, ${end}) is out of order or range`,
        );
      }
      const content = text.slice(start, end);
      const token = this.#specials.get(content);
      if (token === undefined) {
        throw new RangeError(
          `Cannot tokenize with special spans: ${JSON.stringify(content)} is not a special token`,
        );
      }
      let section = text.slice(at, start);
      if (strip) section = section.trimStart();
      if (token.lstrip) section = section.trimEnd();
      flush(section);
      out.push(content);
      strip = token.rstrip;
      at = end;
    }
    let tail = text.slice(at);
    if (strip) tail = tail.trimStart();
    flush(tail);
    return out;
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

  /**
   * Decodes ids back to text.
   *
   * @param ids Token ids, each one the vocabulary has ({@link hasId}).
   * @param skipSpecialTokens Leave special tokens out. @default true
   * @returns The text ("" for no ids).
   */
  decodeIds(ids: readonly number[], skipSpecialTokens = true): string {
    if (ids.length === 0) return "";
    return this.#tok.decode([...ids], { skip_special_tokens: skipSpecialTokens });
  }

  /**
   * The id of the unknown token (`[UNK]`, `<unk>`) when the tokenizer's model declares one: what
   * a piece outside the vocabulary becomes. Undefined for a model without one (byte-level BPE,
   * where every text has tokens).
   */
  get unkTokenId(): number | undefined {
    return this.#declaredUnkId;
  }

  /** Whether `id` is a token id of the vocabulary (added tokens included). */
  hasId(id: number): boolean {
    this.#pieceOf ??= this.idToToken();
    return Number.isInteger(id) && id >= 0 && this.#pieceOf[id] !== undefined;
  }

  /** The vocabulary piece of an id, or undefined. */
  pieceOf(id: number): string | undefined {
    this.#pieceOf ??= this.idToToken();
    return this.#pieceOf[id];
  }

  /**
   * Tokenizes one text with each token's span in the text (the `tokenize` operation). The
   * content tokens and ids are exactly {@link encode}'s for the same text; with `addSpecial`
   * (the default) the special tokens are placed as {@link encode} places them, so
   * `ids.length` is the count every embedding operation reports for this text.
   *
   * @param text The caller's text.
   * @param addSpecial Add the model's special tokens. @default true
   * @returns Ids, pieces, special flags and spans (UTF-16 code units).
   */
  tokenizeText(text: string, addSpecial = true): TokenizedText {
    const content = this.#tokenizeLong(text);
    const { starts, ends } = tokenSpans((t) => this.tokenize(t), text, content);
    const idOf = (piece: string) => this.#vocab.get(piece) ?? this.#unkId;
    const out: TokenizedText = { ids: [], pieces: [], special: [], spans: [] };
    const placeholder = (i: number) => `\u0000${i}`;
    const sequence = addSpecial && this.#post !== null
      ? this.#post(content.map((_, i) => placeholder(i)), null, true).tokens
      : content.map((_, i) => placeholder(i));
    let at = 0;
    for (const token of sequence) {
      if (token.startsWith("\u0000")) {
        const i = Number(token.slice(1));
        out.ids.push(idOf(content[i]!));
        out.pieces.push(content[i]!);
        out.special.push(false);
        out.spans.push([starts[i]!, ends[i]!]);
        at = ends[i]!;
      } else {
        out.ids.push(idOf(token));
        out.pieces.push(token);
        out.special.push(true);
        out.spans.push([at, at]);
      }
    }
    return out;
  }

  #plan(text: string, options: PlanEncodeOptions, memo: PairMemo): EncodePlan {
    const { maxTokens } = options;
    checkMaxTokens(maxTokens);
    const query = this.#slot(memo.query, "query");
    const docBefore = memo.query === undefined ? "" : this.#template?.t.document[0] ?? "";
    if (memo.query !== undefined) text = this.#slot(text, "document")!;
    if (options.specialSpans !== undefined) {
      if (query !== undefined) {
        throw new RangeError("Cannot encode a pair's document with special spans");
      }
      return { kind: "full" };
    }
    const gate = options.fullTokenizeMaxChars ?? Math.max(65_536, 32 * maxTokens);
    const bound = this.bound;
    if ((query?.length ?? 0) + text.length <= gate || bound.kind === "none") {
      return { kind: "full" };
    }
    const scanLimit = options.scanLimit ?? Infinity;
    const fixed = query === undefined ? this.#singleSpecials : this.#pairSpecials;
    let first: LowerBound = { tokens: 0, exhausted: false };
    if (query !== undefined) {
      memo.queryBound ??= bound.lowerBound(query, { stopAbove: maxTokens, scanLimit });
      first = memo.queryBound;
      if (first.exhausted) return { kind: "undecided" };
    }
    const last = bound.lowerBound(text, {
      stopAbove: Math.max(0, maxTokens - fixed - first.tokens),
      scanLimit,
    });
    if (last.exhausted) return { kind: "undecided" };
    const total = fixed + first.tokens + last.tokens;
    if (total <= maxTokens) return { kind: "full" };
    if (!options.truncate || fixed + first.tokens + 1 > maxTokens) {
      throw tooLong(total, true, options);
    }
    // Truncation is certain. A prefix needs ≥ room + 1 tokens (so it is cut); room is at most
    // maxTokens - fixed - (query's lower bound).
    const cut = bound.safeCut(text, maxTokens - fixed - first.tokens + 1, { scanLimit });
    // (A cut inside the document slot's borrowed whitespace is no prefix of the caller's text.)
    if (cut.kind === "cut" && cut.at > docBefore.length) {
      return { kind: "prefix", cut: cut.at - docBefore.length };
    }
    return cut.kind === "exhausted" ? { kind: "undecided" } : { kind: "full" };
  }

  /**
   * A pair text as its template slot wraps it (`before + text + after`; the document's `after`
   * only when `whole`); the text itself without a template or outside a pair.
   */
  #slot(text: string, slot: "query" | "document", whole?: boolean): string;
  #slot(text: string | undefined, slot: "query" | "document"): string | undefined;
  #slot(text: string | undefined, slot: "query" | "document", whole = true): string | undefined {
    const t = this.#template?.t;
    if (t === undefined || text === undefined) return text;
    const [before, after] = t[slot];
    return before + text + (whole ? after : "");
  }

  #execute(
    text: string,
    plan: EncodePlan,
    options: EncodeOptions,
    memo: PairMemo,
  ): EncodedSequence {
    if (plan.kind === "undecided") {
      throw new Error("Cannot encode with an undecided plan. This is a bug");
    }
    const first = memo.query === undefined
      ? null
      : (memo.queryTokens ??= this.#tokenizeLong(this.#slot(memo.query, "query")));
    const pair = memo.query !== undefined;
    if (options.specialSpans !== undefined) {
      if (plan.kind !== "full") throw new Error("A text with special spans was cut. This is a bug");
      return this.#finish(
        first,
        this.tokenizeWithSpecials(text, options.specialSpans),
        options,
        false,
        undefined,
      );
    }
    if (plan.kind === "full") {
      const slotted = pair ? this.#slot(text, "document") : text;
      return this.#finish(first, this.#tokenizeLong(slotted), options, false, slotted, text.length);
    }
    // A proven prefix is cut, so the slot's `after` (which follows the whole text) is not added.
    const shipped = plan.cut < text.length ? text.slice(0, plan.cut) : text;
    const slotted = pair ? this.#slot(shipped, "document", false) : shipped;
    return this.#finish(first, this.#tokenizeLong(slotted), options, true, slotted, shipped.length);
  }

  /**
   * {@link tokenize}, on the compacted text when it is long (same tokens, see
   * `TokenBound.compact`): a multi-megabyte word costs a scan, not a tokenization.
   */
  #tokenizeLong(text: string): string[] {
    return this.tokenize(text.length > COMPACT_ABOVE_CHARS ? this.bound.compact(text) : text);
  }

  /**
   * Adds special tokens and truncates. `lastIsPrefix`: `last` holds only the tokens of a proven
   * prefix, more than fit, so counts of the whole are lower bounds. `lastText` is the text `last`
   * tokenizes (a pair's document in its template slot), `userLength` the caller's part of it.
   */
  #finish(
    first: string[] | null,
    last: string[],
    options: EncodeOptions,
    lastIsPrefix: boolean,
    lastText: string | undefined,
    userLength?: number,
  ): EncodedSequence {
    const specials = first === null ? this.#singleSpecials : this.#pairSpecials;
    const fixed = (first?.length ?? 0) + specials;
    const submitted = fixed + last.length;
    let kept = last;
    let truncated = false;
    if (submitted > options.maxTokens) {
      const room = options.maxTokens - fixed;
      if (!options.truncate || room < 1) throw tooLong(submitted, lastIsPrefix, options);
      kept = last.slice(0, room);
      truncated = true;
    } else if (lastIsPrefix) {
      throw new Error("A proven prefix fits max_tokens. This is a bug");
    }
    let tokens: string[];
    let types: number[] | undefined;
    if (first !== null && this.#template !== undefined) {
      const [p0, p1, p2] = this.#template.pieces;
      tokens = [...p0, ...first, ...p1, ...kept, ...p2];
    } else if (this.#post) {
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
    const seq: EncodedSequence = {
      ids,
      typeIds,
      submittedTokens: submitted,
      effectiveTokens: ids.length,
      truncated,
      keptContentIds,
      submittedTokensIsLowerBound: lastIsPrefix,
    };
    if (truncated && lastText !== undefined) {
      // The end of the last kept token's span, exactly as `tokenize` gives it (F26).
      const end = kept.length === 0
        ? 0
        : tokenSpans((t) => this.tokenize(t), lastText, last, { limit: kept.length }).ends[
          kept.length - 1
        ]!;
      // In the caller's text: a template slot's borrowed whitespace is not theirs.
      const from = first !== null && this.#template !== undefined
        ? this.#template.t.document[0].length
        : 0;
      const userEnd = Math.min(userLength ?? end, Math.max(0, end - from));
      seq.keptTextEnd = userEnd;
      let chars = 0;
      for (let i = from; i < from + userEnd; i++) {
        const c = lastText.charCodeAt(i);
        if (c < 0xdc00 || c > 0xdfff) chars++;
      }
      seq.keptChars = chars;
    }
    return seq;
  }
}

/** Texts longer than this many UTF-16 code units are compacted before tokenizing. */
const COMPACT_ABOVE_CHARS = 8192;

/** A rerank template and the tokens of its literal pieces. */
interface PairTemplate {
  t: RerankTemplate;
  pieces: [string[], string[], string[]];
}

/** What a pair's documents share: the query, its tokens and its bound, computed once. */
interface PairMemo {
  query: string | undefined;
  queryTokens?: string[];
  queryBound?: LowerBound;
}

function tooLong(tokens: number, lowerBound: boolean, options: EncodeOptions): SynapseError {
  const details: Record<string, unknown> = { tokens, max_tokens: options.maxTokens };
  if (options.itemId !== undefined) details.item_id = options.itemId;
  if (lowerBound) details.tokens_is_lower_bound = true;
  return new SynapseError(
    "sequence_too_long",
    `Cannot encode item${options.itemId === undefined ? "" : ` '${options.itemId}'`}: ${
      lowerBound ? "at least " : ""
    }${tokens} tokens exceed max_tokens ${options.maxTokens}` +
      (options.truncate ? " even after truncating the document" : ""),
    { details },
  );
}

function itemOptions(options: PlanManyOptions, i: number): PlanEncodeOptions {
  const { itemIds: _, specialSpans: __, ...rest } = options;
  const opts: PlanEncodeOptions & { plans?: unknown } = { ...rest };
  delete opts.plans;
  const itemId = options.itemIds?.[i];
  if (itemId !== undefined) opts.itemId = itemId;
  const spans = options.specialSpans?.[i];
  if (spans !== undefined) opts.specialSpans = spans;
  return opts;
}

/** A special added token: its id and whether it strips the whitespace beside it. */
interface SpecialToken {
  id: number;
  lstrip: boolean;
  rstrip: boolean;
}

function addedTokenList(json: Record<string, unknown>): Record<string, unknown>[] {
  const list = Array.isArray(json.added_tokens) ? json.added_tokens : [];
  return list.filter((t): t is Record<string, unknown> => typeof t === "object" && t !== null);
}

function specialTokensOf(json: Record<string, unknown>): Map<string, SpecialToken> {
  const out = new Map<string, SpecialToken>();
  for (const t of addedTokenList(json)) {
    if (t.special !== true || typeof t.content !== "string" || t.content === "") continue;
    out.set(t.content, {
      id: typeof t.id === "number" ? t.id : -1,
      lstrip: t.lstrip === true,
      rstrip: t.rstrip === true,
    });
  }
  return out;
}

/** The library's added-vocabulary parts this module narrows (`@huggingface/tokenizers` 0.2). */
interface AddedVocabularyParts {
  added_tokens: { content: string; special: boolean; normalized: boolean }[];
  added_tokens_map: Map<string, unknown>;
  splitter_unnormalized: { split(text: string): string[] };
  splitter_normalized: { split(text: string): string[] };
  normalizer: ((text: string) => string) | null;
}

/**
 * Makes the library match only the non-special added tokens in text (F25): rebuilds its two
 * added-token splitters and its added-token map from them, exactly as its constructor builds
 * them from all added tokens. Ids, the vocabulary, the post-processor and decoding are untouched
 * (they do not use these parts).
 *
 * @throws {Error} when the library does not have the parts this relies on (a changed version:
 *   fail loudly rather than parse special tokens in text).
 */
function matchOnlyNonSpecialAddedTokens(tok: Tokenizer): void {
  const t = tok as unknown as AddedVocabularyParts;
  const Splitter = (t.splitter_unnormalized as object | undefined)?.constructor as
    | (new (words: string[]) => { split(text: string): string[] })
    | undefined;
  if (
    !Array.isArray(t.added_tokens) || !(t.added_tokens_map instanceof Map) ||
    Splitter === undefined || typeof t.splitter_normalized?.split !== "function"
  ) {
    throw new Error(
      "Cannot keep special tokens out of text: @huggingface/tokenizers no longer has the added-vocabulary parts this module narrows. This is a bug",
    );
  }
  const unnormalized: string[] = [];
  const normalized: string[] = [];
  const map = new Map<string, unknown>();
  for (const token of t.added_tokens) {
    if (token.special) continue;
    map.set(token.content, token);
    if (token.normalized && t.normalizer !== null) {
      const n = t.normalizer(token.content);
      normalized.push(n);
      map.set(n, token);
    } else {
      unnormalized.push(token.content);
    }
  }
  t.added_tokens_map = map;
  t.splitter_unnormalized = new Splitter(unnormalized);
  t.splitter_normalized = new Splitter(normalized);
}

function checkMaxTokens(maxTokens: number): void {
  if (!Number.isInteger(maxTokens) || maxTokens < 1) {
    throw new RangeError(
      `Cannot encode as 'maxTokens' must be a positive integer: received ${maxTokens}`,
    );
  }
}

function asError(err: unknown): Error {
  return err instanceof Error ? err : new Error(String(err));
}

function msg(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
