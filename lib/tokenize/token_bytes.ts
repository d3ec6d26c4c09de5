/**
 * Generated token ids → answer text, always valid UTF-8 (field report F14).
 *
 * A token does not always hold whole characters: byte-fallback tokens (`<0xE2>`) and byte-level
 * BPE pieces carry single bytes, so a generation cut at the token limit may end inside a
 * character, and a model may emit byte tokens that are not UTF-8 at all. String-level decoders
 * then produce lone surrogates or throw while serialising. Here the ids are turned into the exact
 * bytes the tokenizer's decoder would produce ({@link TokenBytes}) and those bytes are decoded
 * with WHATWG's UTF-8 rules ({@link Utf8StreamDecoder}): an incomplete character at the very end
 * is dropped, every other invalid sequence becomes U+FFFD, and both are counted
 * ({@link GeneratedText}).
 *
 * Supported decoders (anything else is `artifact_invalid`, so the model cannot serve generation
 * rather than serve wrong text):
 *
 * - **SentencePiece style** (Llama 2, Mistral, Gemma…): `Sequence` of `Replace` (string pattern,
 *   e.g. "▁" → " "), `ByteFallback`, `Fuse`, `Strip` (one ASCII character, `stop` 0), in that
 *   order, each optional but `Strip` only after `Fuse`; also the single `Metaspace` decoder.
 *   A `<0xNN>` token is the one raw byte NN; any other piece is the UTF-8 of the piece after the
 *   replacement.
 * - **Byte-level BPE** (GPT-2, Llama 3, Qwen): `ByteLevel`. Each piece's characters map through
 *   the inverse of GPT-2's `bytes_to_unicode` table to raw bytes; added tokens (whose content is
 *   raw text, never byte-mapped) and a piece holding a character outside the table contribute the
 *   UTF-8 of their text, as the Hugging Face decoders do.
 *
 * **The leading strip.** `Strip(content " ", start 1)` after `Fuse` removes a space from the start
 * of the whole decoded output, not of each token (the SentencePiece encoder prepended it).
 * {@link TokenBytes.stripLeading} carries `{byte, count}`; the id decoders skip up to `count`
 * copies of `byte` at the start of the byte stream they decode, i.e. of the bytes contributed by
 * the first tokens that contribute any (skipped special tokens contribute none, so the space of
 * the first content token after `<s>` is stripped, as `decode(ids, skip_special_tokens)` does).
 * The first contributed byte that is not `byte` ends the strip for good. `Metaspace` strips its
 * first token's leading space the same way unless `prepend_scheme` is `"never"` (or the older
 * `add_prefix_space` is `false`).
 *
 * @module
 */
import { SynapseError } from "../contract/errors.ts";

/** Which decoder family a {@link TokenBytes} table was built for. */
export type TokenDecoderKind = "sentencepiece" | "byte_level";

/** Leading bytes removed from the start of a decoded stream (see the module doc). */
export interface StripLeading {
  /** The byte removed (an ASCII character, 0x20 for the SentencePiece space). */
  readonly byte: number;
  /** At most this many copies of `byte` are removed. */
  readonly count: number;
}

/** Facts about one decode: what went in and what was dropped or replaced. */
export interface Utf8DecodeStats {
  /** Bytes decoded (after the leading strip, without skipped specials and unknown ids). */
  bytes: number;
  /**
   * Bytes of an incomplete character at the very end (a valid prefix of a 2–4 byte sequence,
   * 1–3 bytes) that were dropped rather than replaced. 0 when the stream ended on a boundary.
   */
  droppedTailBytes: number;
  /** U+FFFD written, one per maximal invalid subpart (as WHATWG `TextDecoder` replaces). */
  replacedSequences: number;
  /** Input bytes covered by those replacements. */
  replacedBytes: number;
}

/** The answer text of a generation and what was done to make it valid. */
export interface GeneratedText extends Utf8DecodeStats {
  /** Well-formed text: no lone surrogates, valid UTF-8 once encoded. */
  text: string;
  /** Ids with no token in the table (outside the vocabulary); they contribute nothing. */
  unknownIds: number;
}

/** Options of {@link decodeGenerated} and {@link GeneratedTextDecoder}. */
export interface DecodeGeneratedOptions {
  /** Let special tokens (`special: true` added tokens) contribute their text. @default false */
  includeSpecial?: boolean;
  /**
   * Apply the decoder's leading strip ({@link TokenBytes.stripLeading}). `false` keeps those
   * bytes: the text is then exactly the tokens' bytes, as llama.cpp's grammar sampler saw them
   * (it constrains the leading space of a SentencePiece piece like any other character).
   *
   * @default {true}
   */
  stripLeading?: boolean;
}

const FLAG_PRESENT = 1;
const FLAG_SPECIAL = 2;

type DecoderPlan =
  | { kind: "byte_level" }
  | {
    kind: "sentencepiece";
    replace: readonly [string, string] | null;
    byteFallback: boolean;
    strip: StripLeading | null;
  };

const cache = new WeakMap<object, TokenBytes | SynapseError>();

/**
 * The exact bytes each token id contributes to generated text, built from a tokenizer.json.
 * Build once per tokenizer (cheap: one pass over the vocabulary) and share.
 */
export class TokenBytes {
  /** Decoder family of the tokenizer. */
  readonly kind: TokenDecoderKind;
  /** Leading bytes the decoder strips from the start of the output, or null. */
  readonly stripLeading: StripLeading | null;
  /** One past the largest token id in the table. */
  readonly size: number;
  #pool: Uint8Array;
  #offsets: Uint32Array;
  #flags: Uint8Array;

  private constructor(
    kind: TokenDecoderKind,
    stripLeading: StripLeading | null,
    pool: Uint8Array,
    offsets: Uint32Array,
    flags: Uint8Array,
  ) {
    this.kind = kind;
    this.stripLeading = stripLeading;
    this.size = flags.length;
    this.#pool = pool;
    this.#offsets = offsets;
    this.#flags = flags;
  }

  /**
   * Builds the table for a parsed tokenizer.json. The result is cached per object (by
   * identity), so the object must not be mutated afterwards; a refusal is cached too.
   *
   * @param json The parsed tokenizer.json (`model`, `decoder`, `added_tokens`).
   * @returns The table.
   * @throws {SynapseError} `artifact_invalid` `{reason: "unsupported_decoder", decoder}` when the
   *   decoder is none of the supported families (`decoder` names it, e.g.
   *   `"Sequence[Replace,Strip]"`), or `{reason: "unsupported_model", model}` when the vocabulary
   *   cannot be read.
   *
   * @example Byte-level BPE
   * ```ts
   * import { TokenBytes } from "./token_bytes.ts";
   * import assert from "node:assert/strict";
   *
   * const table = TokenBytes.fromTokenizerJson({
   *   model: { type: "BPE", vocab: { "Ġhi": 0, "â": 1 } },
   *   decoder: { type: "ByteLevel" },
   *   added_tokens: [],
   * });
   * assert.deepEqual(table.bytesOf(0), Uint8Array.of(0x20, 0x68, 0x69));
   * assert.deepEqual(table.bytesOf(1), Uint8Array.of(0xe2));
   * ```
   */
  static fromTokenizerJson(json: Record<string, unknown>): TokenBytes {
    const hit = cache.get(json);
    if (hit instanceof TokenBytes) return hit;
    if (hit !== undefined) throw hit;
    let built: TokenBytes;
    try {
      const t = build(json);
      built = new TokenBytes(t.kind, t.strip, t.pool, t.offsets, t.flags);
    } catch (err) {
      if (err instanceof SynapseError) cache.set(json, err);
      throw err;
    }
    cache.set(json, built);
    return built;
  }

  /**
   * The bytes of one token, whatever `special` says; a view into the table, not to be mutated.
   *
   * @param id Token id.
   * @returns The token's bytes, or undefined when `id` has no token.
   */
  bytesOf(id: number): Uint8Array | undefined {
    if (!this.has(id)) return undefined;
    return this.#pool.subarray(this.#offsets[id]!, this.#offsets[id + 1]!);
  }

  /** True when `id` names a token of the table. */
  has(id: number): boolean {
    return Number.isInteger(id) && id >= 0 && id < this.size &&
      (this.#flags[id]! & FLAG_PRESENT) !== 0;
  }

  /** True when `id` is a special token (contributes nothing unless asked). */
  isSpecial(id: number): boolean {
    return this.has(id) && (this.#flags[id]! & FLAG_SPECIAL) !== 0;
  }
}

/**
 * Incremental UTF-8 → text with WHATWG's replacement rules, except that an incomplete character
 * at the end of the stream is dropped (and counted), not replaced. Text is emitted as soon as its
 * characters are complete; at most 3 bytes are held back.
 *
 * @example Golden bytes
 * ```ts
 * import { Utf8StreamDecoder } from "./token_bytes.ts";
 * import assert from "node:assert/strict";
 *
 * const dec = new Utf8StreamDecoder();
 * assert.equal(dec.push(Uint8Array.of(0x61, 0xe2, 0x82)), "a");
 * assert.equal(dec.push(Uint8Array.of(0xac, 0x80, 0xf0, 0x9f)), "€\uFFFD");
 * assert.deepEqual(dec.finish(), {
 *   bytes: 7,
 *   droppedTailBytes: 2,
 *   replacedSequences: 1,
 *   replacedBytes: 1,
 * });
 * ```
 */
export class Utf8StreamDecoder {
  #text = new TextDecoder("utf-8", { ignoreBOM: true });
  #pending = new Uint8Array(4);
  #pendingLen = 0;
  #needed = 0;
  #lower = 0x80;
  #upper = 0xbf;
  #bytes = 0;
  #replacedSequences = 0;
  #replacedBytes = 0;
  #finished = false;

  /** Bytes held back as the start of an incomplete character (0–3). */
  get pendingBytes(): number {
    return this.#pendingLen;
  }

  /**
   * Decodes the next chunk.
   *
   * @param chunk Bytes that follow the previous chunks.
   * @returns The text completed by this chunk (possibly "").
   * @throws {TypeError} when called after {@link finish}.
   */
  push(chunk: Uint8Array): string {
    if (this.#finished) throw new TypeError("Cannot push to Utf8StreamDecoder: already finished");
    this.#bytes += chunk.length;
    // Worst case: held bytes flushed + every byte a 3-byte U+FFFD.
    const out = new Uint8Array(chunk.length * 3 + 4);
    let o = 0;
    const pending = this.#pending;
    for (let i = 0; i < chunk.length; i++) {
      const b = chunk[i]!;
      if (this.#needed === 0) {
        if (b < 0x80) {
          out[o++] = b;
          continue;
        }
        if (b >= 0xc2 && b <= 0xdf) {
          this.#needed = 1;
        } else if (b >= 0xe0 && b <= 0xef) {
          if (b === 0xe0) this.#lower = 0xa0;
          else if (b === 0xed) this.#upper = 0x9f; // no UTF-16 surrogates
          this.#needed = 2;
        } else if (b >= 0xf0 && b <= 0xf4) {
          if (b === 0xf0) this.#lower = 0x90;
          else if (b === 0xf4) this.#upper = 0x8f; // nothing above U+10FFFF
          this.#needed = 3;
        } else {
          // Continuation byte without a lead, C0/C1 (overlong), F5..FF.
          o = replacement(out, o);
          this.#replacedSequences++;
          this.#replacedBytes++;
          continue;
        }
        pending[0] = b;
        this.#pendingLen = 1;
        continue;
      }
      if (b < this.#lower || b > this.#upper) {
        // The held bytes are one maximal invalid subpart; `b` starts afresh.
        o = replacement(out, o);
        this.#replacedSequences++;
        this.#replacedBytes += this.#pendingLen;
        this.#reset();
        i--;
        continue;
      }
      this.#lower = 0x80;
      this.#upper = 0xbf;
      pending[this.#pendingLen++] = b;
      if (this.#pendingLen === this.#needed + 1) {
        for (let k = 0; k < this.#pendingLen; k++) out[o++] = pending[k]!;
        this.#reset();
      }
    }
    return o === 0 ? "" : this.#text.decode(out.subarray(0, o));
  }

  /**
   * Ends the stream, dropping an incomplete final character. Idempotent.
   *
   * @returns What was decoded, dropped and replaced.
   */
  finish(): Utf8DecodeStats {
    this.#finished = true;
    return {
      bytes: this.#bytes,
      droppedTailBytes: this.#pendingLen,
      replacedSequences: this.#replacedSequences,
      replacedBytes: this.#replacedBytes,
    };
  }

  #reset(): void {
    this.#needed = 0;
    this.#pendingLen = 0;
    this.#lower = 0x80;
    this.#upper = 0xbf;
  }
}

/**
 * Incremental generated ids → text: push ids as the model produces them, get the text they
 * complete, then {@link finish} for the whole answer and its facts.
 *
 * @example Streaming
 * ```ts
 * import { GeneratedTextDecoder, TokenBytes } from "./token_bytes.ts";
 * import assert from "node:assert/strict";
 *
 * const table = TokenBytes.fromTokenizerJson({
 *   model: { type: "BPE", vocab: { "a": 0, "â": 1, "Ĥ": 2, "¬": 3 } },
 *   decoder: { type: "ByteLevel" },
 *   added_tokens: [],
 * });
 * const dec = new GeneratedTextDecoder(table);
 * assert.equal(dec.push([0, 1, 2]), "a"); // E2 82: half of "€"
 * assert.equal(dec.push(3), "€");
 * assert.equal(dec.finish().text, "a€");
 * ```
 */
export class GeneratedTextDecoder {
  #table: TokenBytes;
  #includeSpecial: boolean;
  #utf8 = new Utf8StreamDecoder();
  #stripLeft: number;
  #chunks: string[] = [];
  #unknownIds = 0;
  #result: GeneratedText | undefined;

  /**
   * @param table The tokenizer's bytes.
   * @param options Whether special tokens contribute, whether the leading strip applies.
   */
  constructor(table: TokenBytes, options: DecodeGeneratedOptions = {}) {
    this.#table = table;
    this.#includeSpecial = options.includeSpecial ?? false;
    this.#stripLeft = options.stripLeading === false ? 0 : table.stripLeading?.count ?? 0;
  }

  /**
   * Decodes the next ids.
   *
   * @param ids One id or several, in generation order.
   * @returns The text these ids complete (possibly "").
   * @throws {TypeError} when called after {@link finish}.
   */
  push(ids: number | ArrayLike<number>): string {
    if (this.#result) throw new TypeError("Cannot push to GeneratedTextDecoder: already finished");
    const list: ArrayLike<number> = typeof ids === "number" ? [ids] : ids;
    const text = this.#utf8.push(this.#collect(list));
    if (text !== "") this.#chunks.push(text);
    return text;
  }

  /**
   * Ends the generation, dropping an incomplete final character. Idempotent.
   *
   * @returns The whole answer text and what was done to it.
   */
  finish(): GeneratedText {
    if (!this.#result) {
      const stats = this.#utf8.finish();
      this.#result = { text: this.#chunks.join(""), ...stats, unknownIds: this.#unknownIds };
      this.#chunks = [];
    }
    return { ...this.#result };
  }

  #collect(ids: ArrayLike<number>): Uint8Array {
    const table = this.#table;
    const parts: Uint8Array[] = [];
    let total = 0;
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i]!;
      let b = table.bytesOf(id);
      if (b === undefined) {
        this.#unknownIds++;
        continue;
      }
      if (!this.#includeSpecial && table.isSpecial(id)) continue;
      if (this.#stripLeft > 0 && b.length > 0) {
        const strip = table.stripLeading!;
        let k = 0;
        while (k < b.length && this.#stripLeft > 0 && b[k] === strip.byte) {
          k++;
          this.#stripLeft--;
        }
        if (k < b.length) this.#stripLeft = 0; // a non-strip byte ends the strip for good
        b = b.subarray(k);
      }
      if (b.length === 0) continue;
      parts.push(b);
      total += b.length;
    }
    if (parts.length === 1) return parts[0]!;
    const out = new Uint8Array(total);
    let o = 0;
    for (const p of parts) {
      out.set(p, o);
      o += p.length;
    }
    return out;
  }
}

/**
 * Decodes generated ids into valid text in one go (see {@link GeneratedTextDecoder}).
 *
 * @param ids Generated token ids, in order.
 * @param table The tokenizer's bytes.
 * @param options Whether special tokens contribute, whether the leading strip applies.
 * @returns The answer text, well-formed, with the counts of what was dropped and replaced.
 *
 * @example Byte fallback cut inside "€"
 * ```ts
 * import { decodeGenerated, TokenBytes } from "./token_bytes.ts";
 * import assert from "node:assert/strict";
 *
 * const table = TokenBytes.fromTokenizerJson({
 *   model: { type: "BPE", vocab: { "▁a": 0, "<0xE2>": 1, "<0x82>": 2 } },
 *   decoder: {
 *     type: "Sequence",
 *     decoders: [
 *       { type: "Replace", pattern: { String: "▁" }, content: " " },
 *       { type: "ByteFallback" },
 *       { type: "Fuse" },
 *       { type: "Strip", content: " ", start: 1, stop: 0 },
 *     ],
 *   },
 *   added_tokens: [],
 * });
 * const out = decodeGenerated([0, 1, 2], table);
 * assert.equal(out.text, "a");
 * assert.equal(out.droppedTailBytes, 2);
 * ```
 */
export function decodeGenerated(
  ids: ArrayLike<number>,
  table: TokenBytes,
  options: DecodeGeneratedOptions = {},
): GeneratedText {
  const dec = new GeneratedTextDecoder(table, options);
  dec.push(ids);
  return dec.finish();
}

function replacement(out: Uint8Array, o: number): number {
  out[o] = 0xef;
  out[o + 1] = 0xbf;
  out[o + 2] = 0xbd;
  return o + 3;
}

// ---------------------------------------------------------------------------------------------
// Building the table.

interface Table {
  kind: TokenDecoderKind;
  strip: StripLeading | null;
  pool: Uint8Array;
  offsets: Uint32Array;
  flags: Uint8Array;
}

function build(json: Record<string, unknown>): Table {
  const plan = planDecoder(json.decoder);
  const pieces = readPieces(json.model);
  const added = new Set<number>();
  const special = new Set<number>();
  const addedTokens = Array.isArray(json.added_tokens) ? json.added_tokens : [];
  for (const t of addedTokens) {
    if (!isRecord(t) || !Number.isInteger(t.id) || typeof t.content !== "string") continue;
    const id = t.id as number;
    if (id < 0) continue;
    pieces[id] = t.content;
    added.add(id);
    if (t.special === true) special.add(id);
  }
  const size = pieces.length;
  const enc = new TextEncoder();
  const parts: Uint8Array[] = new Array(size);
  const flags = new Uint8Array(size);
  const empty = new Uint8Array(0);
  let total = 0;
  for (let id = 0; id < size; id++) {
    const piece = pieces[id];
    if (piece === undefined) {
      parts[id] = empty;
      continue;
    }
    flags[id] = FLAG_PRESENT | (special.has(id) ? FLAG_SPECIAL : 0);
    const b = plan.kind === "byte_level"
      ? byteLevelBytes(piece, added.has(id), enc)
      : sentencePieceBytes(piece, plan.replace, plan.byteFallback, enc);
    parts[id] = b;
    total += b.length;
  }
  const pool = new Uint8Array(total);
  const offsets = new Uint32Array(size + 1);
  let o = 0;
  for (let id = 0; id < size; id++) {
    offsets[id] = o;
    pool.set(parts[id]!, o);
    o += parts[id]!.length;
  }
  offsets[size] = o;
  const strip = plan.kind === "sentencepiece" ? plan.strip : null;
  return { kind: plan.kind, strip, pool, offsets, flags };
}

const BYTE_TOKEN = /^<0x([0-9A-Fa-f]{2})>$/;

function sentencePieceBytes(
  piece: string,
  replace: readonly [string, string] | null,
  byteFallback: boolean,
  enc: TextEncoder,
): Uint8Array {
  const text = replace ? piece.replaceAll(replace[0], replace[1]) : piece;
  if (byteFallback) {
    const m = BYTE_TOKEN.exec(text);
    if (m) return Uint8Array.of(parseInt(m[1]!, 16));
  }
  return enc.encode(text);
}

function byteLevelBytes(piece: string, added: boolean, enc: TextEncoder): Uint8Array {
  if (added) return enc.encode(piece);
  const out = new Uint8Array(piece.length);
  for (let i = 0; i < piece.length; i++) {
    const b = UNICODE_TO_BYTE.get(piece.charCodeAt(i));
    if (b === undefined) return enc.encode(piece); // not byte-mapped: the text itself
    out[i] = b;
  }
  return out;
}

/** Inverse of GPT-2's `bytes_to_unicode`: code unit → byte. */
const UNICODE_TO_BYTE: ReadonlyMap<number, number> = (() => {
  const map = new Map<number, number>();
  let n = 0;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) ||
      (b >= 0xae && b <= 0xff);
    map.set(printable ? b : 256 + n++, b);
  }
  return map;
})();

function readPieces(model: unknown): string[] {
  const type = isRecord(model) && typeof model.type === "string" ? model.type : String(model);
  const vocab = isRecord(model) ? model.vocab : undefined;
  const pieces: string[] = [];
  if (Array.isArray(vocab)) {
    // Unigram: [[piece, score], …], id = index.
    for (let id = 0; id < vocab.length; id++) {
      const entry = vocab[id];
      const piece = Array.isArray(entry) ? entry[0] : undefined;
      if (typeof piece !== "string") throw unsupportedModel(type);
      pieces[id] = piece;
    }
    return pieces;
  }
  if (isRecord(vocab)) {
    // BPE, WordPiece, WordLevel: {piece: id}.
    for (const [piece, id] of Object.entries(vocab)) {
      if (!Number.isInteger(id) || (id as number) < 0) throw unsupportedModel(type);
      pieces[id as number] = piece;
    }
    return pieces;
  }
  throw unsupportedModel(type);
}

function planDecoder(decoder: unknown): DecoderPlan {
  const name = describe(decoder);
  const refuse = (why: string): never => {
    throw new SynapseError(
      "artifact_invalid",
      `Cannot decode generated tokens: decoder ${name} is not supported (${why})`,
      { details: { reason: "unsupported_decoder", decoder: name } },
    );
  };
  if (!isRecord(decoder)) return refuse("no decoder");
  if (decoder.type === "ByteLevel") return { kind: "byte_level" };
  if (decoder.type === "Metaspace") {
    const replacement = decoder.replacement ?? "▁";
    if (typeof replacement !== "string" || replacement === "") return refuse("bad replacement");
    const strip = decoder.prepend_scheme !== undefined
      ? decoder.prepend_scheme !== "never"
      : decoder.add_prefix_space !== false;
    return {
      kind: "sentencepiece",
      replace: [replacement, " "],
      byteFallback: false,
      strip: strip ? { byte: 0x20, count: 1 } : null,
    };
  }
  if (decoder.type !== "Sequence" || !Array.isArray(decoder.decoders)) {
    return refuse(`type ${String(decoder.type)}`);
  }
  const steps: unknown[] = decoder.decoders;
  if (steps.length === 1 && isRecord(steps[0]) && steps[0].type === "ByteLevel") {
    return { kind: "byte_level" };
  }
  let replace: readonly [string, string] | null = null;
  let byteFallback = false;
  let fuse = false;
  let strip: StripLeading | null = null;
  let stripped = false;
  for (const step of steps) {
    const type = isRecord(step) ? step.type : undefined;
    if (stripped) return refuse("a step after Strip");
    if (type === "Replace" && isRecord(step)) {
      const pattern = isRecord(step.pattern) ? step.pattern.String : undefined;
      const content = step.content;
      if (typeof pattern !== "string" || pattern === "" || typeof content !== "string") {
        return refuse("Replace needs a string pattern");
      }
      if (replace || byteFallback || fuse) return refuse("Replace after ByteFallback or Fuse");
      replace = [pattern, content];
    } else if (type === "ByteFallback") {
      if (byteFallback || fuse) return refuse("ByteFallback after Fuse");
      byteFallback = true;
    } else if (type === "Fuse") {
      if (fuse) return refuse("two Fuse steps");
      fuse = true;
    } else if (type === "Strip" && isRecord(step)) {
      // Before Fuse it would strip every token; a trailing strip cannot stream.
      if (!fuse) return refuse("Strip before Fuse");
      const { content, start, stop } = step;
      if (
        typeof content !== "string" || content.length !== 1 || content.charCodeAt(0) > 0x7f ||
        !Number.isInteger(start) || (start as number) < 0 || (stop ?? 0) !== 0
      ) {
        return refuse("Strip needs one ASCII character and stop 0");
      }
      stripped = true;
      if ((start as number) > 0) strip = { byte: content.charCodeAt(0), count: start as number };
    } else {
      return refuse(`step ${String(type)}`);
    }
  }
  return { kind: "sentencepiece", replace, byteFallback, strip };
}

function describe(decoder: unknown): string {
  if (!isRecord(decoder)) return String(decoder);
  const type = String(decoder.type);
  if (type !== "Sequence" || !Array.isArray(decoder.decoders)) return type;
  return `Sequence[${
    decoder.decoders.map((d: unknown) => isRecord(d) ? String(d.type) : String(d)).join(",")
  }]`;
}

function unsupportedModel(type: string): SynapseError {
  return new SynapseError(
    "artifact_invalid",
    `Cannot decode generated tokens: the vocabulary of model ${type} cannot be read`,
    { details: { reason: "unsupported_model", model: type } },
  );
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
