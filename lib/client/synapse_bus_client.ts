/**
 * A typed client of Synapse over the subc bus, for Deno programs: one authenticated connection to
 * the daemon, one management-surface route to the `synapse` module, and a method per operation
 * whose params and result are the operations' own types ({@link SynapseOperations}, shared with
 * the in-process `Synapse.call`).
 *
 * @module
 */
import { ERROR_CODES, SynapseError } from "../contract/errors.ts";
import type { ErrorCode, WireError } from "../contract/errors.ts";
import type { OpParams, OpResult, SynapseMethod } from "../ops/op_types.ts";
import { SubcCallError, SubcConsumer } from "../subc/consumer.ts";
import type { SubcConsumerOptions, SubcRequestOptions, SubcRoute } from "../subc/consumer.ts";
import type { JsonValue } from "../subc/control.ts";
import { DEFAULT_MODULE_ID } from "../subc/launch.ts";

/** Options of {@link SynapseBusClient.connect}. */
export interface SynapseBusClientOptions extends SubcConsumerOptions {
  /** The module id Synapse registered under. @default "synapse" */
  moduleId?: string;
  /** Default deadline of each call, in milliseconds (a call's own `timeoutMs` wins). */
  timeoutMs?: number;
}

/** Options of one call. */
export interface BusCallOptions {
  /** Cancels the call: a Cancel goes to the module, then the call rejects with the reason. */
  signal?: AbortSignal;
  /** Deadline of the call, in milliseconds (cancelled past it, rejecting with a TimeoutError). */
  timeoutMs?: number;
}

/**
 * Synapse over the subc bus. Every method sends `{method, params}` on the route and resolves with
 * the operation's result payload (what `{"result": …}` holds on every door).
 *
 * Refusals reject:
 * - with a {@link SynapseError} when Synapse refused: a semantic error (`result.error`, with its
 *   class, `retryAfterMs` and details) or a channel error (`unknown_method`, `invalid_request`
 *   for an unknown params field, …; `channel` is true);
 * - with a {@link SubcCallError} when the bus did: a route.open refusal that outlived its retries
 *   (`module_warming`, `target_unavailable`, …), `cancelled` and other codes Synapse does not
 *   define, `connection_lost`, `route_closed`;
 * - with the signal's reason when cancelled or past `timeoutMs`.
 *
 * @example Embed a query over the bus
 * ```ts ignore
 * import { SynapseBusClient } from "./mod.ts";
 *
 * await using synapse = await SynapseBusClient.connect(); // $SUBC_CONNECTION_FILE, … (subc §1)
 * const { vectors, fingerprint } = await synapse.embedQuery({ text: "hello" });
 * ```
 */
export class SynapseBusClient implements AsyncDisposable {
  /** The connection to the daemon. */
  readonly consumer: SubcConsumer;
  /** The route to Synapse's management surface. */
  readonly route: SubcRoute;
  readonly #timeoutMs: number | undefined;

  /** @internal Use {@link SynapseBusClient.connect}. */
  constructor(consumer: SubcConsumer, route: SubcRoute, timeoutMs: number | undefined) {
    this.consumer = consumer;
    this.route = route;
    this.#timeoutMs = timeoutMs;
  }

  /**
   * Connects to the daemon (the connection file from `connectionFile`, else the ladder of
   * subc §1), authenticates, and opens a route to Synapse, retrying while it warms up.
   *
   * @param options Connection file, module id, identity, timings.
   * @returns The client.
   * @throws {SubcWireError} a refused connection file or handshake.
   * @throws {SubcCallError} `daemon_unreachable`; a route.open refusal (phase `open`).
   */
  static async connect(options: SynapseBusClientOptions = {}): Promise<SynapseBusClient> {
    const consumer = await SubcConsumer.connect(options);
    try {
      const route = await consumer.openRoute(options.moduleId ?? DEFAULT_MODULE_ID, {
        signal: options.signal,
      });
      return new SynapseBusClient(consumer, route, options.timeoutMs);
    } catch (err) {
      await consumer.close();
      throw err;
    }
  }

  /**
   * Calls any operation, typed by its method name.
   *
   * @param method A method the dispatcher serves.
   * @param params Its params.
   * @param options Signal, deadline.
   * @returns The result payload.
   * @throws {SynapseError} | {SubcCallError} as the class documents.
   */
  async call<M extends SynapseMethod>(
    method: M,
    params: OpParams<M>,
    options: BusCallOptions = {},
  ): Promise<OpResult<M>> {
    const body = await this.callWire(method, params, options);
    return resultOf(body, method) as OpResult<M>;
  }

  /**
   * Calls any method by name and resolves with the wire body as Synapse sent it: `{"result": …}`
   * for a result or a semantic error. Channel errors and bus refusals reject as in {@link call}.
   *
   * @param method Any method name.
   * @param params Its params (a JSON value). @default {}
   * @param options Signal, deadline.
   * @returns The parsed Response body.
   */
  async callWire(
    method: string,
    params: unknown = {},
    options: BusCallOptions = {},
  ): Promise<unknown> {
    const timeoutMs = options.timeoutMs ?? this.#timeoutMs;
    const opts: SubcRequestOptions = { signal: options.signal, timeoutMs };
    try {
      return await this.route.call(method, params, opts);
    } catch (err) {
      throw err instanceof SubcCallError ? asSynapseError(err) : err;
    }
  }

  /** `embed.query`: one text → one vector. */
  embedQuery(
    params: OpParams<"embed.query">,
    options?: BusCallOptions,
  ): Promise<OpResult<"embed.query">> {
    return this.call("embed.query", params, options);
  }

  /** `embed.batch`: vectors inline, or a durable job (`"job_id" in result`). */
  embedBatch(
    params: OpParams<"embed.batch">,
    options?: BusCallOptions,
  ): Promise<OpResult<"embed.batch">> {
    return this.call("embed.batch", params, options);
  }

  /** `embed.result`: one committed page of a durable job, and the job's state. */
  embedResult(
    params: OpParams<"embed.result">,
    options?: BusCallOptions,
  ): Promise<OpResult<"embed.result">> {
    return this.call("embed.result", params, options);
  }

  /** `job.resume`: continues a durable job paused `paused_needs_reauth`. */
  jobResume(
    params: OpParams<"job.resume">,
    options?: BusCallOptions,
  ): Promise<OpResult<"job.resume">> {
    return this.call("job.resume", params, options);
  }

  /** `rerank.score`: raw cross-encoder scores of candidates against a query. */
  rerankScore(
    params: OpParams<"rerank.score">,
    options?: BusCallOptions,
  ): Promise<OpResult<"rerank.score">> {
    return this.call("rerank.score", params, options);
  }

  /** `microllm.oneshot`: greedy generation; a Cancel stops it and frees its slot. */
  microllmOneshot(
    params: OpParams<"microllm.oneshot">,
    options?: BusCallOptions,
  ): Promise<OpResult<"microllm.oneshot">> {
    return this.call("microllm.oneshot", params, options);
  }

  /** `models.list`: every model with its state and fingerprint. */
  modelsList(options?: BusCallOptions): Promise<OpResult<"models.list">> {
    return this.call("models.list", {}, options);
  }

  /** `admission.status`: queues, lanes and admission. */
  admissionStatus(options?: BusCallOptions): Promise<OpResult<"admission.status">> {
    return this.call("admission.status", {}, options);
  }

  /** Closes the route (Goodbye) and the connection. Idempotent. */
  async close(): Promise<void> {
    await this.route.close();
    await this.consumer.close();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}

/**
 * The result payload of a wire body, or the SynapseError of its semantic error.
 *
 * @param body A parsed Response body.
 * @param method The method, for messages.
 * @returns `body.result`.
 * @throws {SynapseError} for a semantic error (`result.error`) or a body that is not `{result}`
 *   (`encode_failed`).
 */
export function resultOf(body: unknown, method: string): unknown {
  if (typeof body !== "object" || body === null || !("result" in body)) {
    throw new SynapseError(
      "encode_failed",
      `Cannot read the answer to '${method}': it is not a Synapse wire body {"result": …}`,
      { channel: true },
    );
  }
  const result = (body as { result: unknown }).result;
  if (isSemanticError(result)) {
    const e = result.error;
    return throwWire(e);
  }
  return result;
}

function throwWire(e: WireError): never {
  const known = Object.hasOwn(ERROR_CODES, e.code);
  throw new SynapseError(known ? e.code : "internal_error", e.message, {
    channel: false,
    ...(e.details === undefined ? {} : { details: e.details }),
    ...(e.retry_after_ms === undefined ? {} : { retryAfterMs: e.retry_after_ms }),
  });
}

function isSemanticError(r: unknown): r is { module_generation: number; error: WireError } {
  if (typeof r !== "object" || r === null || Array.isArray(r)) return false;
  const rec = r as Record<string, unknown>;
  return typeof rec.error === "object" && rec.error !== null &&
    typeof (rec.error as { code?: unknown }).code === "string" &&
    Object.keys(rec).every((k) => k === "error" || k === "module_generation");
}

/** An Error terminal with a code Synapse defines becomes that SynapseError (a channel error). */
function asSynapseError(err: SubcCallError): SynapseError | SubcCallError {
  if (err.phase !== "request" || err.origin !== "module") return err;
  if (!Object.hasOwn(ERROR_CODES, err.code)) return err;
  const details = isRecord(err.detail) ? err.detail : undefined;
  return new SynapseError(err.code as ErrorCode, err.remoteMessage ?? err.message, {
    channel: true,
    cause: err,
    ...(details === undefined ? {} : { details }),
  });
}

function isRecord(v: JsonValue | undefined): v is Record<string, JsonValue> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
