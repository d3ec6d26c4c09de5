/**
 * What a door (the HTTP door, the bus door) holds of a Synapse instance: one narrow interface,
 * {@link DoorBackend}, instead of the instance with its registry, context and metrics. A door
 * gets it from the instance once, at attach (`synapse.door("http")`, made by {@link doorBackend}),
 * with its own name bound in, so every call it makes is counted under its `door` label
 * (`synapse_requests_total`) and answers its request facts with its outcome: a door never works
 * out facts, a status or a metric itself, it maps shapes.
 *
 * What a door may do through it: call an operation ({@link DoorBackend.call}), read the service
 * status its health answer is built from ({@link DoorBackend.status}), read the few facts its
 * answers need (the module generation, the `http` config section, `microllm_max_tokens`, the
 * log) and serve the metrics text ({@link DoorBackend.metricsText}); the HTTP door also counts its
 * answers by status ({@link DoorBackend.countHttpResponse}).
 *
 * @module
 */
import type { HttpConfig } from "../config/types.ts";
import type { CallDoor, Metrics } from "../log/metrics.ts";
import type { LogSink } from "../log/log.ts";
import type { ModelRegistry } from "../models/model_registry.ts";
import type { CallOptions, OpContext } from "./context.ts";
import type { OpOutcome } from "./dispatcher.ts";
import { renderMetrics } from "./metrics_exposition.ts";
import { callWithFacts } from "./request_facts.ts";
import type { RequestFacts } from "./request_facts.ts";
import { serviceStatus } from "./status.ts";
import type { ServiceStatus } from "./status.ts";

export type { RequestFacts } from "./request_facts.ts";
export type { ServiceStatus } from "./status.ts";
export { METRICS_CONTENT_TYPE } from "./metrics_exposition.ts";

/**
 * The options a door passes with a call: the request's `signal`, the streaming hooks (`onText`,
 * `onStart`, `onTokens`) and how an API-shaped door asks an operation to serve (`embed`:
 * `allOrNothing`, `inlineChunksUpTo`, `requiredDims`, `prompt`; `rerank`). The `door` is the
 * backend's own; the request facts come back with the outcome.
 */
export type DoorCallOptions = Omit<CallOptions, "door" | "onFacts">;

/** One call through a door: its outcome and its request facts, worked out once. */
export interface DoorCallResult {
  /** The outcome in its wire shape. */
  outcome: OpOutcome;
  /**
   * The call's request facts (model, items, tokens, queue and engine time, outcome) as the
   * instance worked them out for its metrics: the door's request log writes these.
   */
  facts: RequestFacts;
}

/** An instance as a door sees it (module doc). */
export interface DoorBackend {
  /** The door's name: the `door` label of every call it makes. */
  readonly door: CallDoor;
  /**
   * Calls an operation through the dispatcher, counted under {@link DoorBackend.door}.
   *
   * @param method The operation, e.g. `"embed.query"` (any string: an unknown one is answered
   *   `unknown_method`).
   * @param params Its params.
   * @param options The request's signal, streaming hooks and serving options.
   * @returns The outcome and its facts; never throws (a refusal is an error outcome).
   */
  call(method: string, params: unknown, options?: DoorCallOptions): Promise<DoorCallResult>;
  /**
   * The service status (lib/ops/status.ts `serviceStatus`, the one status function): the overall
   * state, why it is not `ok`, every model's state. Cached state only; never touches an engine.
   */
  status(): ServiceStatus;
  /** The module generation of this boot (error envelopes and health answers carry it). */
  readonly moduleGeneration: number;
  /** The `http` config section (body cap, timeouts, `require_key_for_queries`). */
  readonly http: Readonly<HttpConfig>;
  /**
   * The service's `microllm_max_tokens`: the most tokens one generation may ask for (a door whose
   * API means "no limit", Ollama's `num_predict: -1`, asks for this many).
   */
  readonly microllmMaxTokens: number;
  /** The instance's log: a door's request log writes here unless it was given its own. */
  readonly log: LogSink;
  /**
   * The metrics in the Prometheus text exposition format (lib/ops/metrics_exposition.ts,
   * `Content-Type` {@link METRICS_CONTENT_TYPE}).
   *
   * @returns `\n`-terminated lines, each family's HELP and TYPE once.
   */
  metricsText(): Promise<string>;
  /**
   * Counts one answer of the HTTP door by status (`synapse_http_responses_total{code}`), its own
   * refusals and client hang-ups (499) included.
   *
   * @param status The HTTP status answered (or logged).
   */
  countHttpResponse(status: number): void;
}

/** What {@link doorBackend} reads from an instance (a `Synapse` is one). */
export interface DoorSource {
  /** The instance's dispatcher entry (`Synapse.call`): counts, times and hands over the facts. */
  call(method: string, params: unknown, options?: CallOptions): Promise<OpOutcome>;
  readonly registry: Pick<ModelRegistry, "list" | "laneStatus" | "engineCallsInFlight">;
  readonly context: OpContext;
  readonly metrics: Metrics;
  /** True once the instance is shutting down (the status is `unavailable`). */
  readonly disposed: boolean;
  readonly moduleGeneration: number;
}

/**
 * Makes the {@link DoorBackend} of one door over an instance; `Synapse.door(name)` calls this.
 * Everything is read from `source` when asked, so the status and the generation are live.
 *
 * @param source The instance.
 * @param door The door's name, bound into every call.
 * @returns The door's view of the instance.
 */
export function doorBackend(source: DoorSource, door: CallDoor): DoorBackend {
  const caller = { call: source.call.bind(source) };
  return {
    door,
    call(method, params, options = {}) {
      return callWithFacts(caller, method, params, { ...options, door });
    },
    status() {
      return serviceStatus(source.registry.list(), {
        disposed: source.disposed,
        certification: source.context,
      });
    },
    get moduleGeneration() {
      return source.moduleGeneration;
    },
    get http() {
      return source.context.config.http;
    },
    get microllmMaxTokens() {
      return source.context.config.microllm_max_tokens;
    },
    get log() {
      return source.context.log;
    },
    metricsText() {
      return renderMetrics(source);
    },
    countHttpResponse(status) {
      source.metrics.httpResponses.inc({ code: String(status) });
    },
  };
}
