/**
 * Tokenizer doors in three API shapes over the `tokenize` and `detokenize` operations:
 *
 * - TEI: `POST /tokenize {inputs: string | string[], add_special_tokens? = true, prompt_name?}` →
 *   `[[{id, text, special, start, stop}, …], …]` (one list per input; `start`/`stop` are UTF-8
 *   byte offsets into the input and `text` its bytes there, as TEI; a special token has `text`
 *   its piece and `start`/`stop` null); `POST /decode {ids: number[] | number[][],
 *   skip_special_tokens? = true}` → `[text, …]` (TEI answers a list even for one id list).
 * - llama.cpp server: `POST /tokenize {content, add_special? = false, parse_special?,
 *   with_pieces? = false}` → `{tokens: [id, …]}` or, with pieces, `{tokens: [{id, piece}, …]}`
 *   (`piece` a string, or its bytes as a number array when they are not valid UTF-8 alone);
 *   `POST /detokenize {tokens}` → `{content}`. `parse_special: true` (llama.cpp's default) is
 *   accepted and means what Synapse always does for a caller's text: special-token strings in
 *   it are text (F25); it is disclosed as `synapse.parse_special: false`.
 * - Cohere: `POST /v1/tokenize {text, model}` → `{tokens, token_strings, meta}` (no special
 *   tokens added, as Cohere; `token_strings[i]` the text token `i` covers with the text before it
 *   since the previous token, so that joined they give the text, up to what follows the last
 *   token; a token that shares its characters with the one before it, a byte of a split
 *   character, has `""`); `POST /v1/detokenize {tokens, model}` → `{text, meta}` (special tokens
 *   kept: the text of exactly the tokens given). Both add Synapse's facts under `synapse`
 *   (`model_id`, `fingerprint`, and the prompt chosen), and answer Cohere's error body
 *   `{message, code, field?}`.
 *
 * `POST /tokenize` is both: a body with `inputs` is TEI's, one with `content` llama.cpp's.
 * `model` (Synapse's) picks a model; the default embed model otherwise; the routing headers
 * (`x-synapse-target-fingerprint`, …; lib/doors/http/routing_headers.ts) choose as on every
 * model-serving door. The prompt is chosen as TEI /embed chooses it (the model's default prompt
 * applies without `prompt_name`; on a model with no prompt table `prompt_name` applies nothing),
 * disclosed in `x-synapse-prompt`.
 *
 * @module
 */
import { z } from "zod";
import { SynapseError } from "../../contract/errors.ts";
import { parseDoorParams, wellFormedName } from "../../contract/schemas.ts";
import type { DetokenizeResult, TokenizeResult } from "../../ops/tokenize.ts";
import { type AdapterAnswer, type AdapterIo, type AdapterRoute, callOp } from "./_adapter.ts";
import { cohereError } from "./rerank_shapes.ts";
import { teiError } from "./tei.ts";

const TeiTokenizeRequest = z.strictObject({
  inputs: z.union([z.string(), z.array(z.string())]),
  add_special_tokens: z.boolean().nullish(),
  prompt_name: z.string().nullish(),
  model: wellFormedName().nullish(),
});

const TeiDecodeRequest = z.strictObject({
  ids: z.union([z.array(z.number().int()), z.array(z.array(z.number().int()))]),
  skip_special_tokens: z.boolean().nullish(),
  model: wellFormedName().nullish(),
});

const LlamaTokenizeRequest = z.strictObject({
  content: z.string(),
  add_special: z.boolean().nullish(),
  parse_special: z.boolean().nullish(),
  with_pieces: z.boolean().nullish(),
  model: wellFormedName().nullish(),
});

const LlamaDetokenizeRequest = z.strictObject({
  tokens: z.array(z.number().int()),
  model: wellFormedName().nullish(),
});

/** Cohere's `POST /v1/tokenize` request; `model` (required by Cohere) picks the model here too. */
const CohereTokenizeRequest = z.strictObject({
  text: z.string(),
  model: wellFormedName().optional(),
});

/** Cohere's `POST /v1/detokenize` request. */
const CohereDetokenizeRequest = z.strictObject({
  tokens: z.array(z.number().int()),
  model: wellFormedName().optional(),
});

/**
 * The route of a tokenizer path (`/tokenize`, `/decode`, `/detokenize`, `/v1/tokenize`,
 * `/v1/detokenize`), or undefined.
 *
 * @param path The request path.
 */
export function tokenizeRoute(path: string): AdapterRoute | undefined {
  if (path === "/tokenize") {
    return { op: "tokenize", method: "POST", serve: serveTokenize, error: teiError };
  }
  if (path === "/decode") {
    return { op: "detokenize", method: "POST", serve: teiDecode, error: teiError };
  }
  if (path === "/detokenize") {
    return { op: "detokenize", method: "POST", serve: llamaDetokenize, error: llamaError };
  }
  if (path === "/v1/tokenize") {
    return { op: "tokenize", method: "POST", serve: cohereTokenize, error: cohereError };
  }
  if (path === "/v1/detokenize") {
    return { op: "detokenize", method: "POST", serve: cohereDetokenize, error: cohereError };
  }
  return undefined;
}

/** Cohere's `meta` of a tokenizer answer. */
const COHERE_META = { api_version: { version: "1" } };

async function cohereTokenize(io: AdapterIo): Promise<AdapterAnswer> {
  const p = parseDoorParams("/v1/tokenize", CohereTokenizeRequest, await io.body(), ["text"]);
  const r = await tokenizeCall(io, {
    texts: [p.text],
    add_special_tokens: false,
    ...(p.model === undefined ? {} : { model: p.model }),
  });
  if ("error" in r) return cohereError(fieldAs(r.error, "texts.0", "text"));
  const item = r.result.items[0]!;
  return {
    status: 200,
    body: {
      tokens: item.ids,
      token_strings: tokenStrings(item.tokenized_text ?? p.text, item),
      meta: COHERE_META,
      synapse: {
        model_id: r.result.model_id,
        fingerprint: r.result.fingerprint,
        ...(item.prefix_chars === undefined ? {} : { prefix_chars: item.prefix_chars }),
        ...(r.result.prompt === undefined ? {} : { prompt: r.result.prompt }),
      },
    },
    fingerprint: r.result.fingerprint,
    prompt: r.result.prompt,
  };
}

async function cohereDetokenize(io: AdapterIo): Promise<AdapterAnswer> {
  const p = parseDoorParams("/v1/detokenize", CohereDetokenizeRequest, await io.body());
  const r = await detokenizeCall(io, {
    ids: p.tokens,
    skip_special_tokens: false,
    ...(p.model === undefined ? {} : { model: p.model }),
  });
  if ("error" in r) return cohereError(fieldAs(r.error, "ids", "tokens"));
  return {
    status: 200,
    body: {
      text: r.result.text,
      meta: COHERE_META,
      synapse: { model_id: r.result.model_id, fingerprint: r.result.fingerprint },
    },
    fingerprint: r.result.fingerprint,
  };
}

/**
 * An operation's error with its field in the door's terms: `from` (and `from.<rest>`) renamed
 * `to` (`ids.3` → `tokens[3]`, `texts.0` → `text`).
 */
function fieldAs(e: SynapseError, from: string, to: string): SynapseError {
  const field = e.details?.field;
  if (typeof field !== "string" || !(field === from || field.startsWith(`${from}.`))) return e;
  const rest = field.slice(from.length + 1);
  const renamed = rest === "" ? to : /^\d+$/.test(rest) ? `${to}[${rest}]` : `${to}.${rest}`;
  return new SynapseError(e.code, e.message, {
    channel: e.channel,
    details: { ...e.details, field: renamed },
    cause: e,
    ...(e.retryAfterMs === undefined ? {} : { retryAfterMs: e.retryAfterMs }),
  });
}

/**
 * Cohere's `token_strings` of a tokenized text: each token's text with what comes before it since
 * the previous token's end (so they join to the text up to the last token's end); a token whose
 * span ends where an earlier one's did (a byte of a split character) is `""`; a special token is
 * its piece.
 */
function tokenStrings(text: string, item: TokenizeResult["items"][number]): string[] {
  const chars = [...text];
  let cursor = 0;
  return item.ids.map((_, i) => {
    if (item.special[i]) return item.pieces[i]!;
    const end = Math.max(cursor, item.offsets[i]![1]);
    const s = chars.slice(cursor, end).join("");
    cursor = end;
    return s;
  });
}

/** `POST /tokenize`: TEI's with `inputs`, llama.cpp's with `content`. */
async function serveTokenize(io: AdapterIo): Promise<AdapterAnswer> {
  const body = await io.body();
  if (typeof body === "object" && body !== null && !Array.isArray(body) && "content" in body) {
    try {
      return await llamaTokenize(io, body);
    } catch (err) {
      if (err instanceof SynapseError) return llamaError(err);
      throw err;
    }
  }
  return await teiTokenize(io, body);
}

async function teiTokenize(io: AdapterIo, body: unknown): Promise<AdapterAnswer> {
  const p = parseDoorParams("/tokenize", TeiTokenizeRequest, body, ["inputs", "inputs.*"]);
  const texts = typeof p.inputs === "string" ? [p.inputs] : p.inputs;
  if (texts.length === 0) {
    throw new SynapseError("invalid_request", "Cannot tokenize: `inputs` cannot be empty", {
      channel: true,
      details: { field: "inputs", reason: "empty" },
    });
  }
  const r = await tokenizeCall(io, {
    texts,
    add_special_tokens: p.add_special_tokens ?? true,
    ...(p.prompt_name === undefined || p.prompt_name === null
      ? {}
      : { prompt_name: p.prompt_name }),
    ...(p.model === undefined || p.model === null ? {} : { model: p.model }),
  });
  if ("error" in r) return teiError(r.error);
  const enc = new TextEncoder();
  const dec = new TextDecoder();
  const out = r.result.items.map((item, k) => {
    // With a prompt the offsets index the prompted text (TEI's offsets do too).
    const text = item.tokenized_text ?? texts[k]!;
    const bytes = enc.encode(text);
    const byteAt = codePointByteOffsets(text);
    return item.ids.map((id, i) => {
      if (item.special[i]) {
        return { id, text: item.pieces[i]!, special: true, start: null, stop: null };
      }
      const [s, e] = item.offsets[i]!;
      const start = byteAt[s]!;
      const stop = byteAt[e]!;
      return { id, text: dec.decode(bytes.subarray(start, stop)), special: false, start, stop };
    });
  });
  return {
    status: 200,
    body: out,
    fingerprint: r.result.fingerprint,
    // The prompt chosen, in x-synapse-prompt, as TEI /embed discloses it.
    prompt: r.result.prompt,
  };
}

async function teiDecode(io: AdapterIo): Promise<AdapterAnswer> {
  const p = parseDoorParams("/decode", TeiDecodeRequest, await io.body());
  const lists = p.ids.length > 0 && Array.isArray(p.ids[0])
    ? p.ids as number[][]
    : [p.ids as number[]];
  const texts: string[] = [];
  let fingerprint: string | undefined;
  for (const ids of lists) {
    const r = await detokenizeCall(io, {
      ids,
      skip_special_tokens: p.skip_special_tokens ?? true,
      ...(p.model === undefined || p.model === null ? {} : { model: p.model }),
    });
    if ("error" in r) return teiError(r.error);
    texts.push(r.result.text);
    fingerprint = r.result.fingerprint;
  }
  return {
    status: 200,
    body: texts,
    fingerprint,
  };
}

async function llamaTokenize(io: AdapterIo, body: unknown): Promise<AdapterAnswer> {
  const p = parseDoorParams("/tokenize", LlamaTokenizeRequest, body, ["content"]);
  const r = await tokenizeCall(io, {
    texts: [p.content],
    add_special_tokens: p.add_special ?? false,
    ...(p.model === undefined || p.model === null ? {} : { model: p.model }),
  });
  if ("error" in r) return llamaError(r.error);
  const item = r.result.items[0]!;
  const tokens = p.with_pieces
    ? item.ids.map((id, i) => ({ id, piece: pieceOf(p.content, item, i) }))
    : item.ids;
  return {
    status: 200,
    body: { tokens, synapse: { parse_special: false, model_id: r.result.model_id } },
    fingerprint: r.result.fingerprint,
  };
}

/** llama.cpp's piece: the text the token stands for (its span), the piece of a special token. */
function pieceOf(
  content: string,
  item: TokenizeResult["items"][number],
  i: number,
): string | number[] {
  if (item.special[i]) return item.pieces[i]!;
  const [s, e] = item.offsets[i]!;
  const same = item.offsets.filter(([a, b]) => a === s && b === e).length;
  const text = [...content].slice(s, e).join("");
  if (same <= 1) return text;
  // Several tokens share one span (the bytes of one character): each is one byte of it.
  const m = /^<0x([0-9A-Fa-f]{2})>$/.exec(item.pieces[i]!);
  return m ? [parseInt(m[1]!, 16)] : text;
}

async function llamaDetokenize(io: AdapterIo): Promise<AdapterAnswer> {
  const p = parseDoorParams("/detokenize", LlamaDetokenizeRequest, await io.body());
  const r = await detokenizeCall(io, {
    ids: p.tokens,
    skip_special_tokens: false,
    ...(p.model === undefined || p.model === null ? {} : { model: p.model }),
  });
  if ("error" in r) return llamaError(r.error);
  return { status: 200, body: { content: r.result.text }, fingerprint: r.result.fingerprint };
}

async function tokenizeCall(
  io: AdapterIo,
  params: Record<string, unknown>,
): Promise<{ result: TokenizeResult } | { error: SynapseError }> {
  const outcome = await callOp(io, "tokenize", params);
  if (outcome.kind !== "result") return { error: outcome.error };
  return { result: outcome.body.result as TokenizeResult };
}

async function detokenizeCall(
  io: AdapterIo,
  params: Record<string, unknown>,
): Promise<{ result: DetokenizeResult } | { error: SynapseError }> {
  const outcome = await callOp(io, "detokenize", params);
  if (outcome.kind !== "result") return { error: outcome.error };
  return { result: outcome.body.result as DetokenizeResult };
}

/** The UTF-8 byte offset of each code point offset of a text (index = code points). */
function codePointByteOffsets(text: string): number[] {
  const out = [0];
  let b = 0;
  for (const ch of text) {
    const cp = ch.codePointAt(0)!;
    b += cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    out.push(b);
  }
  return out;
}

/**
 * llama.cpp server's error body `{error: {code, message, type}}` (plus Synapse's `code` in
 * `error.synapse_code`), with the status of the one status table.
 */
function llamaError(e: SynapseError): AdapterAnswer {
  const t = teiError(e);
  return {
    status: t.status,
    error: e,
    body: {
      error: {
        code: t.status,
        message: (t.body as { error: string }).error,
        type: t.status >= 500 ? "server_error" : "invalid_request_error",
        synapse_code: e.code,
        ...((t.body as { field?: string }).field === undefined
          ? {}
          : { field: (t.body as { field?: string }).field }),
      },
    },
  };
}
