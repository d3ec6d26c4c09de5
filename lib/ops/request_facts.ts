/**
 * What a request log line says about one call, read from its params and its outcome: the model,
 * how many items, how many tokens, the queue and engine time, and the outcome code. Never a text,
 * an id or a key: only counts, the model id and codes. Every door's request log uses it.
 *
 * @module
 */
import type { OpOutcome } from "./dispatcher.ts";

/** The facts of one call for the request log; a fact that is not known is absent. */
export interface RequestFacts {
  /** The model that served it (the result's `model_id`), or the one asked for. */
  model?: string;
  /** Items in the request: batch items, rerank candidates, 1 for a query or a generation. */
  items?: number;
  /** Items refused inside a served result (`item_errors`). */
  item_errors?: number;
  /** Tokens the engine read (`real_token_counts`), plus those it generated (`n_gen`). */
  tokens?: number;
  /** ms from admission to the start on the engine (`queue_time_ms`). */
  queue_ms?: number;
  /** ms of engine work (`inference_time_ms`). */
  inference_ms?: number;
  /** `ok`, or the stable error code. */
  outcome: string;
}

type Obj = Record<string, unknown>;

/**
 * The facts of a call.
 *
 * @param params The params the operation got (after any door mapping); anything.
 * @param outcome Its outcome.
 * @returns The facts; never throws.
 */
export function requestFacts(params: unknown, outcome: OpOutcome): RequestFacts {
  const p = isObj(params) ? params : {};
  const facts: RequestFacts = {
    outcome: outcome.kind === "result" ? "ok" : outcome.error.code,
  };
  const result = outcome.kind === "result" && isObj(outcome.body.result)
    ? outcome.body.result
    : undefined;
  const model = str(result?.model_id) ??
    str(outcome.kind === "result" ? undefined : outcome.error.details?.model_id) ?? str(p.model) ??
    str(p.model_id);
  if (model !== undefined) facts.model = model;
  const items = requestedItems(p);
  if (items !== undefined) facts.items = items;
  if (result === undefined) return facts;
  if (Array.isArray(result.item_errors)) facts.item_errors = result.item_errors.length;
  else if (Array.isArray(result.vectors)) facts.item_errors = 0;
  const counts = result.real_token_counts;
  if (Array.isArray(counts)) {
    let tokens = 0;
    for (const c of counts) if (typeof c === "number") tokens += c;
    if (typeof result.n_gen === "number") tokens += result.n_gen;
    facts.tokens = tokens;
  }
  if (typeof result.queue_time_ms === "number") facts.queue_ms = result.queue_time_ms;
  if (typeof result.inference_time_ms === "number") facts.inference_ms = result.inference_time_ms;
  return facts;
}

/** Items a request asks for, from its params. */
function requestedItems(p: Obj): number | undefined {
  for (const key of ["items", "texts", "candidates"]) {
    const v = p[key];
    if (Array.isArray(v)) return v.length;
  }
  for (const key of ["text", "prompt"]) if (typeof p[key] === "string") return 1;
  return undefined;
}

function isObj(v: unknown): v is Obj {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function str(v: unknown): string | undefined {
  return typeof v === "string" ? v : undefined;
}
