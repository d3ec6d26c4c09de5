/**
 * The stable error contract and the channel codes (docs/errors.md, docs/internals.md §2).
 *
 * One error type, {@link SynapseError}, carries a stable code through the code base; the front
 * doors turn it into one of the two wire shapes:
 *
 * - a **channel error** `{code, message}` for codes in {@link CHANNEL_CODES} (the request never
 *   reached an operation: malformed JSON, unknown method, store failure …);
 * - a **semantic error** `{"result": {"module_generation", "error": WireError}}` for every other
 *   code (the operation ran and refused).
 *
 * @module
 */

/** Error class on the wire: may a retry later succeed? (docs/errors.md) */
export type ErrorClass = "transient" | "permanent";

/**
 * Stable codes (docs/errors.md "Codes Synapse returns", "Reserved codes"), plus
 * `engine_output_invalid` (field report F6: a model output with NaN/Inf for an item is a typed
 * permanent error for that item, never a vector).
 */
export type StableErrorCode =
  | "queue_full"
  | "deadline_exceeded"
  | "model_loading"
  | "engine_crashed"
  | "provider_unavailable"
  | "download_failed"
  | "module_restarted"
  | "sequence_too_long"
  | "not_certified"
  | "substitution_rejected"
  | "artifact_invalid"
  | "owned_cuda_unsupported"
  | "probe_required"
  | "migration_required"
  | "invalid_request"
  | "declared_identity_not_accepted"
  | "remote_identity_drift"
  | "provider_protocol_violation"
  | "idempotency_conflict"
  | "needs_reauth"
  | "needs_reauth_expired"
  | "remote_deployment_changed"
  | "credential_config_invalid"
  | "op_not_supported_for_remote"
  | "sentinel_calibration_refused"
  | "model_not_installed"
  | "unknown_model"
  | "self_check_failed"
  | "backend_unavailable"
  | "model_in_use"
  | "engine_output_invalid"
  /** microllm: a grammar was sent while `grammar_enabled` is false (owned-decode vocabulary). */
  | "grammar_disabled"
  /**
   * A bug in Synapse (an invariant broke, an unexpected exception): permanent and not safe to
   * retry, so a client does not retry a bug forever. No stable code of the reference fits; the
   * module logs the stack. Never used for engine faults (those are `engine_crashed`). Also a
   * store file damaged outside Synapse (details `reason: "store_corrupt" | "store_empty"`): only
   * a person can mend it, so it is permanent, never a transient `store_failure` retried forever.
   */
  | "internal_error";

/** Channel codes (docs/errors.md "Shapes"): the request never reached an operation's logic. */
export type ChannelErrorCode =
  | "invalid_request"
  | "unknown_method"
  | "store_failure"
  | "module_not_initialized"
  | "flow_scope_refused"
  | "certify_observation_disabled"
  /**
   * The HTTP door refused a call without the owner's local key (`Authorization: Bearer KEY` or
   * `X-Synapse-Key: KEY`): every mutating operation, and queries when
   * `http.require_key_for_queries` is set. Not a code of the reference (it has no local
   * key); permanent: resend with the key.
   */
  | "unauthorized"
  | "encode_failed";

/** Every code a {@link SynapseError} may carry. `disposed` is for use-after-dispose (STYLE 9). */
export type ErrorCode = StableErrorCode | ChannelErrorCode | "disposed";

/** Frozen class and retry facts of one code. */
export interface ErrorCodeInfo {
  /** transient: a later retry may succeed. */
  readonly class: ErrorClass;
  /** Default `retry_after_ms` for transient codes (any transient error without one gets 100 ms). */
  readonly retryAfterMs?: number;
  /** May the caller resend the very same request (same `request_key`)? */
  readonly safeToRetrySameRequest: boolean;
}

const T = (retryAfterMs: number, safe = true): ErrorCodeInfo => ({
  class: "transient",
  retryAfterMs,
  safeToRetrySameRequest: safe,
});
const P: ErrorCodeInfo = { class: "permanent", safeToRetrySameRequest: false };

/**
 * The frozen table of codes (docs/errors.md "Codes Synapse returns"). `module_restarted` is
 * transient and safe to retry (resubmitting with the same `request_key` admits a fresh job).
 */
export const ERROR_CODES: Readonly<Record<ErrorCode, ErrorCodeInfo>> = Object.freeze({
  queue_full: T(100),
  deadline_exceeded: T(100, false),
  model_loading: T(250),
  engine_crashed: T(250),
  provider_unavailable: T(1000),
  download_failed: T(1000),
  module_restarted: T(100),
  sequence_too_long: P,
  not_certified: P,
  substitution_rejected: P,
  artifact_invalid: P,
  owned_cuda_unsupported: P,
  probe_required: P,
  migration_required: P,
  invalid_request: P,
  declared_identity_not_accepted: P,
  remote_identity_drift: P,
  provider_protocol_violation: P,
  idempotency_conflict: P,
  needs_reauth: P,
  needs_reauth_expired: P,
  remote_deployment_changed: P,
  credential_config_invalid: P,
  op_not_supported_for_remote: P,
  sentinel_calibration_refused: P,
  model_not_installed: P,
  unknown_model: P,
  self_check_failed: P,
  backend_unavailable: P,
  model_in_use: P,
  engine_output_invalid: P,
  grammar_disabled: P,
  internal_error: P,
  unknown_method: P,
  store_failure: T(100),
  module_not_initialized: T(100),
  flow_scope_refused: P,
  certify_observation_disabled: P,
  unauthorized: P,
  encode_failed: P,
  disposed: P,
});

/**
 * Codes answered as a channel error `{code, message}` rather than inside `result`.
 * `invalid_request` is both: malformed bodies and unknown fields are channel errors (§1),
 * while an item the operation refuses (an empty text) is semantic. {@link SynapseError.channel}
 * decides for that code.
 */
export const CHANNEL_CODES: ReadonlySet<ErrorCode> = new Set<ErrorCode>([
  "unknown_method",
  "store_failure",
  "module_not_initialized",
  "flow_scope_refused",
  "certify_observation_disabled",
  "unauthorized",
  "encode_failed",
]);

/** Semantic error as it travels inside `result.error` (docs/errors.md). */
export interface WireError {
  code: ErrorCode;
  class: ErrorClass;
  retry_after_ms?: number;
  safe_to_retry_same_request: boolean;
  message: string;
  details?: Record<string, unknown>;
}

/** Channel error body `{code, message}` (docs/errors.md "Shapes"). */
export interface ChannelError {
  code: ErrorCode;
  message: string;
}

/** Options of {@link SynapseError}. */
export interface SynapseErrorOptions {
  /** Structured facts for the caller, e.g. `{tokens, max_tokens, item_id}`. */
  details?: Record<string, unknown>;
  /** Overrides the code's default retry hint (ms). Ignored for permanent codes. */
  retryAfterMs?: number;
  /** Answer as a channel error. Defaults to `true` for {@link CHANNEL_CODES}, else `false`. */
  channel?: boolean;
  /** The underlying error. */
  cause?: unknown;
}

/**
 * The one error type of Synapse: a stable code plus the class and retry facts of docs/errors.md.
 *
 * @example Refuse a too-long item
 * ```ts ignore
 * throw new SynapseError("sequence_too_long", "Cannot embed item 'a': 513 tokens exceed max 512", {
 *   details: { tokens: 513, max_tokens: 512, item_id: "a" },
 * });
 * ```
 */
export class SynapseError extends Error {
  /** Stable code. */
  readonly code: ErrorCode;
  /** Structured details, or undefined. */
  readonly details: Record<string, unknown> | undefined;
  /** Retry hint in ms for transient codes; undefined for permanent ones. */
  readonly retryAfterMs: number | undefined;
  /** True when the front door answers with a channel error. */
  readonly channel: boolean;

  constructor(code: ErrorCode, message: string, options: SynapseErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "SynapseError";
    this.code = code;
    this.details = options.details;
    const info = ERROR_CODES[code];
    this.retryAfterMs = info.class === "transient"
      ? (options.retryAfterMs ?? info.retryAfterMs ?? 100)
      : undefined;
    this.channel = options.channel ?? CHANNEL_CODES.has(code);
  }

  /** Error class of the code. */
  get errorClass(): ErrorClass {
    return ERROR_CODES[this.code].class;
  }

  /** The semantic wire shape (docs/errors.md). */
  toWire(): WireError {
    const info = ERROR_CODES[this.code];
    const wire: WireError = {
      code: this.code,
      class: info.class,
      safe_to_retry_same_request: info.safeToRetrySameRequest,
      message: this.message,
    };
    if (this.retryAfterMs !== undefined) wire.retry_after_ms = this.retryAfterMs;
    if (this.details !== undefined && Object.keys(this.details).length > 0) {
      wire.details = this.details;
    }
    return wire;
  }

  /** The channel wire shape `{code, message}`. */
  toChannel(): ChannelError {
    return { code: this.code, message: this.message };
  }
}

/**
 * Turns anything thrown into a {@link SynapseError}; errors that are not already one get the
 * `fallback` code (for example `engine_crashed` around engine calls, `store_failure` around the
 * store), with the original kept as `cause`.
 *
 * @param err Anything caught.
 * @param fallback Code for errors that are not {@link SynapseError}s.
 * @returns A SynapseError (the same object when it already is one).
 */
export function toSynapseError(err: unknown, fallback: ErrorCode): SynapseError {
  if (err instanceof SynapseError) return err;
  const message = err instanceof Error ? err.message : String(err);
  return new SynapseError(fallback, message, { cause: err });
}

/** Shorthand for a channel-level `invalid_request` naming what is wrong. */
export function invalidRequest(
  message: string,
  details?: Record<string, unknown>,
  channel = true,
): SynapseError {
  return new SynapseError("invalid_request", message, {
    channel,
    ...(details === undefined ? {} : { details }),
  });
}
