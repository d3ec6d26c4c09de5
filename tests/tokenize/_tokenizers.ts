/**
 * Tokenizers and random texts for the bound and pool tests: every fixture tokenizer, plus small
 * synthetic byte-level and Metaspace BPEs (the shapes of the catalog's Qwen3 / ModernBERT
 * tokenizers, which are not in the repository) trained here on the committed corpus.
 */
import { SanitizedTokenizer } from "../../lib/tokenize/tokenizer.ts";
import { ROOT } from "../_helpers.ts";
import { MODELS } from "../_helpers.ts";

/** A named tokenizer and the bound kind it must get. */
export interface NamedTokenizer {
  name: string;
  tok: SanitizedTokenizer;
  kind: "pre_tokens" | "units" | "none";
  canCut: boolean;
}

/** Every fixture tokenizer and the synthetic ones. */
export async function allTokenizers(): Promise<NamedTokenizer[]> {
  const out: NamedTokenizer[] = [];
  for (const name of ["synapse-tiny-embed", "synapse-tiny-rerank", "synapse-tiny-embed-nan"]) {
    const tok = await SanitizedTokenizer.fromFile(`${MODELS}/${name}/tokenizer.json`);
    out.push({ name, tok, kind: "pre_tokens", canCut: true });
  }
  for (const name of ["synapse-tiny-llama", "synapse-tiny-llama-bytes"]) {
    const tok = await SanitizedTokenizer.fromFile(`${MODELS}/${name}/tokenizer.json`);
    out.push({ name, tok, kind: "units", canCut: true });
  }
  const corpus = await corpusText();
  out.push({
    name: "synthetic byte-level BPE (NFC, ByteLevel regex)",
    tok: SanitizedTokenizer.fromJson(byteLevelBpe(corpus, {
      normalizer: { type: "NFC" },
      preTokenizer: { type: "ByteLevel", add_prefix_space: false, use_regex: true },
    })),
    kind: "units",
    canCut: false,
  });
  out.push({
    name: "synthetic byte-level BPE (Split + ByteLevel, NFKC + Lowercase)",
    tok: SanitizedTokenizer.fromJson(byteLevelBpe(corpus, {
      normalizer: { type: "Sequence", normalizers: [{ type: "NFKC" }, { type: "Lowercase" }] },
      preTokenizer: {
        type: "Sequence",
        pretokenizers: [
          {
            type: "Split",
            pattern: { Regex: "\\s+|[^\\s\\p{L}]+|\\p{L}+" },
            behavior: "Isolated",
            invert: false,
          },
          { type: "ByteLevel", add_prefix_space: false, use_regex: false },
        ],
      },
    })),
    kind: "units",
    canCut: false,
  });
  out.push({
    name: "synthetic WordPiece (Sequence NFD, Lowercase, StripAccents)",
    tok: wordPieceVariant(
      await readJson(`${MODELS}/synapse-tiny-embed/tokenizer.json`),
      {
        type: "Sequence",
        normalizers: [{ type: "NFD" }, { type: "Lowercase" }, { type: "StripAccents" }],
      },
    ),
    kind: "pre_tokens",
    canCut: true,
  });
  return out;
}

async function readJson(path: string): Promise<Record<string, unknown>> {
  return JSON.parse(await Deno.readTextFile(path));
}

/** The committed prose corpus, comment lines dropped. */
export async function corpusText(): Promise<string> {
  const text = await Deno.readTextFile(`${ROOT}/scripts/data/vocab_corpus.txt`);
  return text.split("\n").filter((l) => !l.startsWith("#")).join("\n");
}

function wordPieceVariant(
  json: Record<string, unknown>,
  normalizer: Record<string, unknown>,
): SanitizedTokenizer {
  return SanitizedTokenizer.fromJson({ ...json, normalizer });
}

/** GPT-2's byte → character table. */
export const BYTE_CHARS: readonly string[] = (() => {
  const bs: number[] = [];
  for (let b = 0x21; b <= 0x7e; b++) bs.push(b);
  for (let b = 0xa1; b <= 0xac; b++) bs.push(b);
  for (let b = 0xae; b <= 0xff; b++) bs.push(b);
  const out = new Array<string>(256);
  for (const b of bs) out[b] = String.fromCharCode(b);
  let n = 0;
  for (let b = 0; b < 256; b++) if (out[b] === undefined) out[b] = String.fromCharCode(256 + n++);
  return out;
})();

/**
 * A byte-level BPE trained on `corpus` (300 merges, plus a 48-space piece so the longest piece is
 * long), with the given normalizer and pre-tokenizer and a `<|endoftext|>` added token.
 */
export function byteLevelBpe(
  corpus: string,
  shape: { normalizer: unknown; preTokenizer: unknown },
): Record<string, unknown> {
  const enc = new TextEncoder();
  const gpt2 = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;
  const words = new Map<string, number>();
  for (const w of corpus.match(gpt2) ?? []) {
    const mapped = Array.from(enc.encode(w), (b) => BYTE_CHARS[b]!).join("");
    words.set(mapped, (words.get(mapped) ?? 0) + 1);
  }
  let split = [...words].map(([w, n]) => ({ syms: [...w], n }));
  const vocab: Record<string, number> = {};
  let next = 0;
  for (const c of BYTE_CHARS) vocab[c] = next++;
  const merges: [string, string][] = [];
  for (let k = 0; k < 300; k++) {
    const pairs = new Map<string, number>();
    for (const { syms, n } of split) {
      for (let i = 0; i + 1 < syms.length; i++) {
        const key = syms[i] + "\u0000" + syms[i + 1];
        pairs.set(key, (pairs.get(key) ?? 0) + n);
      }
    }
    let best = "";
    let bestN = 0;
    for (const [key, n] of pairs) {
      if (n > bestN || (n === bestN && key < best)) {
        best = key;
        bestN = n;
      }
    }
    if (bestN < 2) break;
    const [a, b] = best.split("\u0000") as [string, string];
    merges.push([a, b]);
    vocab[a + b] ??= next++;
    split = split.map(({ syms, n }) => {
      const out: string[] = [];
      for (let i = 0; i < syms.length; i++) {
        if (i + 1 < syms.length && syms[i] === a && syms[i + 1] === b) {
          out.push(a + b);
          i++;
        } else out.push(syms[i]!);
      }
      return { syms: out, n };
    });
  }
  // A long piece: 48 spaces, built by doubling merges.
  const sp = BYTE_CHARS[0x20]!;
  for (let len = 1; len < 48; len *= 2) {
    const piece = sp.repeat(len);
    const target = len * 2 > 48 ? 48 - len : len;
    const right = sp.repeat(target);
    if (!merges.some(([l, r]) => l === piece && r === right)) merges.push([piece, right]);
    vocab[piece + right] ??= next++;
  }
  const eot = next++;
  return {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: [{
      id: eot,
      content: "<|endoftext|>",
      single_word: false,
      lstrip: false,
      rstrip: false,
      normalized: false,
      special: true,
    }],
    normalizer: shape.normalizer,
    pre_tokenizer: shape.preTokenizer,
    post_processor: null,
    decoder: { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true },
    model: {
      type: "BPE",
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      vocab,
      merges,
    },
  };
}

/** Pieces random texts are made of: the cases each proof must survive. */
const PIECES: readonly string[] = [
  // Plain words, numbers, mixed case.
  "the",
  "Quick",
  "brown",
  "FOX",
  "tokenization",
  "embedding",
  "synapse",
  "2024",
  "3.14",
  "don't",
  "e-mail",
  "a",
  "I",
  // Punctuation.
  ".",
  ",",
  "!",
  "?",
  "...",
  "(",
  ")",
  "[",
  "]",
  "{",
  "}",
  "-",
  "_",
  "/",
  "\\",
  "@",
  "#",
  "$",
  "%",
  "^",
  "&",
  "*",
  "~",
  "`",
  "'",
  '"',
  "«",
  "»",
  "—",
  "¿",
  "…",
  // Whitespace of every kind (some are control or format characters the BERT cleaner drops).
  " ",
  "  ",
  "   ",
  "\t",
  "\n",
  "\r\n",
  "\u00a0",
  "\u3000",
  "\u2028",
  "\u2029",
  "\u000b",
  "\u000c",
  "\u0085",
  "\u1680",
  "\u2009",
  "\u200b",
  "\u200d",
  "\ufeff",
  "\u00ad",
  // Control, replacement, private use.
  "\u0000",
  "\u0001",
  "\u001f",
  "\u007f",
  "\ufffd",
  "\ue000",
  // Accents, decompositions, case oddities.
  "café",
  "naïve",
  "e\u0301",
  "\u0301",
  "\u0338",
  "=\u0338",
  "\u1f8f",
  "\u1e9e",
  "İ",
  "ß",
  "\u212a",
  "\u2126",
  "\u212b",
  "ﬁ",
  "Ａ",
  "𝐀",
  "ΣΑΣ",
  "ΌΣΟΣ.",
  "Ǆ",
  // Scripts.
  "北京",
  "日本語",
  "한국어",
  "\u1100\u1161\u11a8",
  "𠀀",
  "العربية",
  "עברית",
  "क्षि",
  "ภาษาไทย",
  "Привет",
  // Emoji and astral.
  "😀",
  "👍🏽",
  "🇫🇷",
  // Special tokens' text, whole and broken.
  "[CLS]",
  "[SEP]",
  "[MASK]",
  "[UNK]",
  "[PAD]",
  "[SE",
  "P]",
  "<s>",
  "</s>",
  "<unk>",
  "<|endoftext|>",
  "<|end",
  // SentencePiece marks and byte pieces as text.
  "\u2581",
  "\u2581\u2581",
  "<0x41>",
  // Long words.
  "a".repeat(99),
  "a".repeat(101),
  "supercalifragilisticexpialidocious",
  "x".repeat(300),
  // Lone surrogates (callers refuse them first; the bounds must hold anyway).
  "\ud800",
  "\udc00",
];

/**
 * A random text of up to `maxPieces` pieces, joined by nothing or by a random separator.
 *
 * @param rand A PRNG in [0, 1).
 */
export function randomText(rand: () => number, maxPieces: number): string {
  const n = Math.floor(rand() * (maxPieces + 1));
  let s = "";
  for (let i = 0; i < n; i++) {
    const r = rand();
    if (r < 0.05) {
      // Any code point at all.
      let cp = Math.floor(rand() * 0x110000);
      if (cp >= 0xd800 && cp <= 0xdfff) cp = 0x20;
      s += String.fromCodePoint(cp);
    } else s += PIECES[Math.floor(rand() * PIECES.length)]!;
    const sep = rand();
    if (sep < 0.55) s += " ";
    else if (sep < 0.6) s += "\n";
  }
  return s;
}
