/**
 * What a request log line says about one call, read from its params and its outcome: the model,
 * how many items, how many tokens, the queue and engine time, and the outcome code. Never a text,
 * an id or a key: only counts, the model id and codes. Every door's request log uses it.
 *
 * @module
 */
import type { CallOptions, RequestFacts } from "./context.ts";
import type { OpOutcome } from "./dispatcher.ts";

export type { RequestFacts } from "./context.ts";

/** How the door answered the call, for {@link requestFacts}. */
export interface FactsOptions {
  /**
   * The door refuses the whole request when any item is refused (the API-shaped embeddings
   * doors): a result with `item_errors` is counted as the first refused item's code, 0 tokens.
   */
  allOrNothing?: boolean;
  /** The caller's signal: aborted when the call ends means the caller went away (`cancelled`). */
  signal?: AbortSignal | undefined;
}

/**
 * The {@link FactsOptions} of a call's options (`embed.allOrNothing`, `signal`).
 *
 * @param options The call options the door passed to `Synapse.call`.
 */
export function factsOptions(
  options: { signal?: AbortSignal | undefined; embed?: { allOrNothing?: boolean } } | undefined,
): FactsOptions {
  return {
    ...(options?.embed?.allOrNothing ? { allOrNothing: true } : {}),
    signal: options?.signal,
  };
}

/**
 * True when an outcome is the caller's hang-up: its signal aborted, or the operation's own
 * `deadline_exceeded` with `details.reason: "cancelled"`.
 */
function cancelledBy(outcome: OpOutcome, signal: AbortSignal | undefined): boolean {
  if (signal?.aborted) return true;
  return outcome.kind !== "result" && outcome.error.code === "deadline_exceeded" &&
    outcome.error.details?.reason === "cancelled";
}

type Obj = Record<string, unknown>;

/**
 * The facts of a call.
 *
 * @param params The params the operation got (after any door mapping); anything.
 * @param outcome Its outcome.
 * @param options How the door answered it (all or nothing) and the caller's signal.
 * @returns The facts; never throws.
 */
export function requestFacts(
  params: unknown,
  outcome: OpOutcome,
  options: FactsOptions = {},
): RequestFacts {
  const p = isObj(params) ? params : {};
  const facts: RequestFacts = {
    outcome: outcome.kind === "result" ? "ok" : outcome.error.code,
  };
  const cancelled = cancelledBy(outcome, options.signal);
  if (cancelled) facts.outcome = "cancelled";
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
  const refused = Array.isArray(result.item_errors) ? result.item_errors[0] : undefined;
  if (options.allOrNothing && isObj(refused) && isObj(refused.error)) {
    // The door answers the whole request with this item's error: nothing was served.
    if (!cancelled) facts.outcome = str(refused.error.code) ?? "invalid_request";
    facts.tokens = 0;
  }
  if (cancelled) facts.tokens = 0;
  return facts;
}

/** Items a request asks for, from its params. */
function requestedItems(p: Obj): number | undefined {
  for (const key of ["items", "texts", "candidates"]) {
    const v = p[key];
    if (Array.isArray(v)) return v.length;
  }
  for (const key of ["text", "prompt"]) if (typeof p[key] === "string") return 1;
  // A generation from chat messages is one item, as one from a prompt.
  if (Array.isArray(p.messages)) return 1;
  return undefined;
}

function isObj(v: unknown): v is Obj {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function str(v: unknown): string | undefined {
  return typeof v === "string" ? v : undefined;
}

/** What {@link callWithFacts} calls: an instance, or a door's view of one. */
export interface FactsBackend {
  call(method: string, params: unknown, options?: CallOptions): Promise<OpOutcome>;
}

/**
 * Calls an operation and answers its outcome with its request facts, worked out once: by the
 * instance for its metrics (`CallOptions.onFacts`, which `Synapse.call` calls before it resolves),
 * and only when the backend hands none over (a stand-in) by {@link requestFacts} here. Every door's
 * request log reads its facts from this.
 *
 * @param backend The instance or a door's view of it.
 * @param method The operation.
 * @param params Its params.
 * @param options Call options (a caller's own `onFacts` still gets the facts).
 * @returns The outcome and its facts.
 */
export async function callWithFacts(
  backend: FactsBackend,
  method: string,
  params: unknown,
  options: CallOptions = {},
): Promise<{ outcome: OpOutcome; facts: RequestFacts }> {
  let facts: RequestFacts | undefined;
  const outcome = await backend.call(method, params, {
    ...options,
    onFacts: (f) => {
      facts = f;
      options.onFacts?.(f);
    },
  });
  return { outcome, facts: facts ?? requestFacts(params, outcome, factsOptions(options)) };
}
