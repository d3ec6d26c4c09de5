/**
 * Worker-thread entry of {@link TokenizerPool}: holds sanitized tokenizers by key and encodes
 * batches with `SanitizedTokenizer.encodeMany`, so tokenizing megabytes never holds the main
 * thread. An item that throws becomes that item's error; the worker keeps serving.
 *
 * @module
 */
/// <reference lib="deno.worker" />
import { sha256Hex } from "../identity/sha256.ts";
import { SanitizedTokenizer } from "./tokenizer.ts";
import { toWireFailure, toWireOutcomes } from "./_pool_protocol.ts";
import type { PoolRequest, PoolResponse } from "./_pool_protocol.ts";

const tokenizers = new Map<string, SanitizedTokenizer | Error>();

function post(msg: PoolResponse, transfer: Transferable[] = []): void {
  self.postMessage(msg, transfer);
}

function handle(req: PoolRequest): void {
  if (req.type === "load") {
    if (!tokenizers.has(req.key)) {
      try {
        tokenizers.set(
          req.key,
          SanitizedTokenizer.fromJson(
            JSON.parse(req.json),
            req.config,
            "tokenizer.json",
            req.rerankTemplate,
          ),
        );
      } catch (err) {
        tokenizers.set(req.key, err instanceof Error ? err : new Error(String(err)));
      }
    }
    const t = tokenizers.get(req.key);
    post(
      t instanceof Error ? { type: "loaded", key: req.key, error: toWireFailure(t) } : {
        type: "loaded",
        key: req.key,
      },
    );
    return;
  }
  const tok = tokenizers.get(req.key);
  if (tok === undefined || tok instanceof Error) {
    post({
      type: "failed",
      id: req.id,
      error: toWireFailure(
        tok ?? new Error(`Tokenizer ${req.key} was never loaded. This is a bug`),
      ),
    });
    return;
  }
  if (req.type === "tokenize_text") {
    try {
      post({
        type: "tokenized",
        id: req.id,
        items: req.texts.map((t) => tok.tokenizeText(t, req.addSpecial)),
      });
    } catch (err) {
      post({ type: "failed", id: req.id, error: toWireFailure(err) });
    }
    return;
  }
  try {
    const outcomes = tok.encodeMany(req.texts, {
      maxTokens: req.maxTokens,
      truncate: req.truncate,
      plans: req.plans,
      itemIds: req.itemIds,
      fullTokenizeMaxChars: req.fullTokenizeMaxChars,
      pairQuery: req.pairQuery,
      specialSpans: req.specialSpans,
    });
    if (req.hash) {
      outcomes.forEach((o, i) => {
        if (o.ok) o.submittedSha256 = sha256Hex(req.texts[i]!);
      });
    }
    const wire = toWireOutcomes(outcomes);
    post({ type: "encoded", id: req.id, outcomes: wire.outcomes }, wire.transfer);
  } catch (err) {
    post({ type: "failed", id: req.id, error: toWireFailure(err) });
  }
}

self.onmessage = (ev: MessageEvent<PoolRequest>): void => handle(ev.data);
