/**
 * Messages between {@link TokenizerPool} and its worker threads, and the (de)serialization of
 * encode outcomes: id arrays travel as transferable `Int32Array`s, errors as their code,
 * message and details.
 *
 * @module
 */
import { SynapseError } from "../contract/errors.ts";
import type { ErrorCode } from "../contract/errors.ts";
import type {
  EncodedSequence,
  EncodeOutcome,
  EncodePlan,
  SpecialSpan,
  TokenizedText,
} from "./tokenizer.ts";

/** Main thread → worker. */
export type PoolRequest =
  | {
    type: "load";
    /** Tokenizer key: digest of the sanitized tokenizer.json and of its config. */
    key: string;
    /** The sanitized tokenizer.json, as JSON text. */
    json: string;
    config: Record<string, unknown>;
    /** The rerank template pairs are encoded in (`SanitizedTokenizer.withRerankTemplate`). */
    rerankTemplate?: string;
  }
  | {
    type: "encode";
    id: number;
    key: string;
    /** Texts (documents with `pairQuery`); a `prefix` plan's text is already cut. */
    texts: string[];
    plans: EncodePlan[];
    itemIds: (string | undefined)[];
    maxTokens: number;
    truncate: boolean;
    fullTokenizeMaxChars?: number;
    pairQuery?: string;
    /** Hash each text (then every text travels whole, even with a `prefix` plan). */
    hash: boolean;
    /** Special-token spans of each text (a chat template's scaffolding); absent: none. */
    specialSpans?: (SpecialSpan[] | undefined)[];
  }
  | {
    /** `SanitizedTokenizer.tokenizeText` of each text (the `tokenize` operation). */
    type: "tokenize_text";
    id: number;
    key: string;
    texts: string[];
    addSpecial: boolean;
  };

/** Worker → main thread. */
export type PoolResponse =
  | { type: "loaded"; key: string; error?: WireFailure }
  | { type: "encoded"; id: number; outcomes: WireOutcome[] }
  | { type: "tokenized"; id: number; items: TokenizedText[] }
  | { type: "failed"; id: number; error: WireFailure };

/** An error as it crosses the thread boundary. */
export interface WireFailure {
  name: string;
  message: string;
  code?: ErrorCode;
  details?: Record<string, unknown>;
  channel?: boolean;
}

/** One outcome as it crosses the thread boundary. */
export type WireOutcome =
  | {
    ok: true;
    ids: Int32Array;
    typeIds: Int32Array;
    kept: Int32Array;
    submitted: number;
    effective: number;
    truncated: boolean;
    lowerBound: boolean;
    sha?: string;
    keptEnd?: number;
    keptChars?: number;
  }
  | { ok: false; error: WireFailure };

/**
 * Serializes outcomes for `postMessage`, collecting the buffers to transfer.
 *
 * @param outcomes The worker's outcomes.
 * @returns The wire outcomes and their transferable buffers.
 */
export function toWireOutcomes(
  outcomes: readonly EncodeOutcome[],
): { outcomes: WireOutcome[]; transfer: ArrayBuffer[] } {
  const transfer: ArrayBuffer[] = [];
  const wire = outcomes.map((o): WireOutcome => {
    if (!o.ok) return { ok: false, error: toWireFailure(o.error) };
    const s = o.seq;
    const kept = Int32Array.from(s.keptContentIds);
    transfer.push(s.ids.buffer as ArrayBuffer, s.typeIds.buffer as ArrayBuffer, kept.buffer);
    return {
      ok: true,
      ids: s.ids,
      typeIds: s.typeIds,
      kept,
      submitted: s.submittedTokens,
      effective: s.effectiveTokens,
      truncated: s.truncated,
      lowerBound: s.submittedTokensIsLowerBound === true,
      ...(o.submittedSha256 === undefined ? {} : { sha: o.submittedSha256 }),
      ...(s.keptTextEnd === undefined ? {} : { keptEnd: s.keptTextEnd }),
      ...(s.keptChars === undefined ? {} : { keptChars: s.keptChars }),
    };
  });
  return { outcomes: wire, transfer };
}

/** Rebuilds an outcome from the wire. */
export function fromWireOutcome(o: WireOutcome): EncodeOutcome {
  if (!o.ok) return { ok: false, error: fromWireFailure(o.error) };
  const seq: EncodedSequence = {
    ids: o.ids,
    typeIds: o.typeIds,
    submittedTokens: o.submitted,
    effectiveTokens: o.effective,
    truncated: o.truncated,
    keptContentIds: Array.from(o.kept),
    submittedTokensIsLowerBound: o.lowerBound,
  };
  if (o.keptEnd !== undefined) seq.keptTextEnd = o.keptEnd;
  if (o.keptChars !== undefined) seq.keptChars = o.keptChars;
  return o.sha === undefined ? { ok: true, seq } : { ok: true, seq, submittedSha256: o.sha };
}

/** An error as a plain object. */
export function toWireFailure(err: unknown): WireFailure {
  if (err instanceof SynapseError) {
    const out: WireFailure = {
      name: err.name,
      message: err.message,
      code: err.code,
      channel: err.channel,
    };
    if (err.details !== undefined) out.details = err.details;
    return out;
  }
  if (err instanceof Error) return { name: err.name, message: err.message };
  return { name: "Error", message: String(err) };
}

/** Rebuilds an error: a {@link SynapseError} when it had a code, else an Error of that name. */
export function fromWireFailure(f: WireFailure): Error {
  if (f.code !== undefined) {
    return new SynapseError(f.code, f.message, {
      ...(f.details === undefined ? {} : { details: f.details }),
      ...(f.channel === undefined ? {} : { channel: f.channel }),
    });
  }
  const e = f.name === "RangeError"
    ? new RangeError(f.message)
    : f.name === "TypeError"
    ? new TypeError(f.message)
    : new Error(f.message);
  if (e.name !== f.name) e.name = f.name;
  return e;
}
