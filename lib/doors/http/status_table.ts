/**
 * The transport tables of the HTTP doors (STYLE rule 7): one stable error code → one HTTP
 * status, one stable error code → one OpenAI error `type` (the `/v1/embeddings` door), and one
 * stable error code → one TEI `error_type`. Nothing else in the code base picks a status or a
 * type (the CLI's exit codes are in lib/cli/exit_codes.ts).
 *
 * ## How the HTTP statuses were chosen
 *
 * Measured against TEI's mapping (router/src/http/server.rs: Empty → 400, Validation and
 * Tokenizer → 422, Overloaded → 429, Backend → 424, Unhealthy → 503) and against what clients and
 * proxies do with a status: SDKs (OpenAI's, most HTTP retry middlewares) retry 408, 409, 429 and
 * every 5xx on their own; proxies and load balancers treat 502/503/504 as "this upstream is
 * unwell, try again or elsewhere"; 500 reads as "a bug in the server"; 501 means "this server
 * does not implement the request method" and is cacheable by default (RFC 9110 §15.6.2). So a
 * 5xx is used only where a retry may help or the module itself is at fault, and a permanent
 * refusal that no retry can fix is a 4xx.
 *
 * | status | meaning here | codes |
 * |---|---|---|
 * | 400 | the request is malformed: fix its shape | `invalid_request` |
 * | 401 | the caller did not show the owner's local key (HTTP door only) | `unauthorized` |
 * | 403 | refused by module policy, not by the caller's identity | `flow_scope_refused`, `certify_observation_disabled`, `grammar_disabled` |
 * | 404 | the named thing does not exist here | `unknown_method`, `unknown_model`, `model_not_installed` |
 * | 409 | well formed, but conflicts with the state of what it names (a key, a certification, an alias, a model in use, the store's schema) | `not_certified`, `migration_required`, `idempotency_conflict`, `model_in_use`, `remote_identity_drift`, `remote_deployment_changed` |
 * | 422 | parses, but cannot be served as asked: change the request (truncate, another text, accept a declared identity, another model) | `sequence_too_long`, `substitution_rejected`, `declared_identity_not_accepted`, `engine_output_invalid`, `op_not_supported_for_remote`, `sentinel_calibration_refused` |
 * | 424 | the request depends on something that failed and needs the operator: the model's artifact, its backend, its worker, a provider's credentials (TEI answers its backend errors 424) | `artifact_invalid`, `self_check_failed`, `backend_unavailable`, `owned_cuda_unsupported`, `probe_required`, `needs_reauth`, `needs_reauth_expired`, `credential_config_invalid` |
 * | 429 | over the admission budget; retry after the hint (TEI: Overloaded) | `queue_full` |
 * | 500 | a bug in the module: it could not finish or encode its answer | `internal_error`, `encode_failed` |
 * | 502 | an upstream (download host, remote provider) failed or misbehaved | `download_failed`, `provider_protocol_violation` |
 * | 503 | temporarily unable to serve; retry after the hint (TEI: Unhealthy) | `model_loading`, `engine_crashed`, `provider_unavailable`, `module_restarted`, `module_not_initialized`, `store_failure`, `disposed` |
 * | 504 | the request's deadline or queue-time budget ran out before the engine answered | `deadline_exceeded` |
 *
 * Per code, where the choice is not obvious from the group:
 *
 * - `invalid_request` 400 and `sequence_too_long` 422: TEI answers an empty input 400 and an
 *   input over its limit 422; a malformed body or an unknown field is a 400 in every
 *   OpenAI-compatible server.
 * - `engine_output_invalid` 422: the model produced NaN/Inf for this input (field report F6). It
 *   is permanent for that input (the same text always fails, another text does not), so neither
 *   a bug (500) nor worth a retry (5xx).
 * - `artifact_invalid` 424 (was 500): the model's files are broken or are not what its config
 *   says. Synapse is not at fault and no retry helps; the operator must fix the model. A 500
 *   would page whoever watches for Synapse bugs and make SDKs retry.
 * - `backend_unavailable`, `owned_cuda_unsupported` 424 (were 501): no backend on this machine
 *   or build can run the model (or the worker refused the work, e.g. out of memory). 501 tells
 *   clients the server lacks the HTTP method itself, and caches may keep it; this is a fact
 *   about one model that the operator can change.
 * - `self_check_failed` 424 (was 500): a model failed its load-time self-check, the same kind of
 *   fault as `artifact_invalid`.
 * - `probe_required` 424 (was 409): the model's worker broke its crash budget and is
 *   quarantined, or its load failed for good; only the operator (a probe, a restart) clears it.
 *   TEI answers an unhealthy backend 503, but 503 invites retries that cannot succeed for the
 *   life of the process; 409 made SDKs retry too.
 * - `needs_reauth`, `needs_reauth_expired`, `credential_config_invalid` 424: a remote
 *   provider's credentials (the operator's, not the HTTP caller's, so not 401).
 * - `store_failure` 503 (was 500): transient by the contract (a locked or busy SQLite store), so
 *   it answers the "retry later" status with its `Retry-After`.
 * - `disposed` 503: the instance is shutting down; a client should go elsewhere or retry later.
 * - `deadline_exceeded` 504: the engine (behind the door, as an upstream is behind a gateway) did
 *   not answer within the request's `deadline_ms` / `max_queue_ms`. Not 408, which means the
 *   client was too slow to send its request.
 *
 * Transport conditions that are not a code of their own keep the code `invalid_request` but
 * answer a status of their own, set by the server: 413 for a body over the size cap, 405 for a
 * wrong HTTP method, 403 for a refused Host or Origin, 400 with `details.reason` for a body that
 * ended early (the client closed it before its Content-Length, or an unterminated chunked body).
 *
 * @module
 */
import type { ErrorCode } from "../../contract/errors.ts";

/** HTTP status of every stable code; typed as a full record, so a new code fails to compile. */
export const HTTP_STATUS: Readonly<Record<ErrorCode, number>> = Object.freeze({
  invalid_request: 400,
  unauthorized: 401,
  flow_scope_refused: 403,
  certify_observation_disabled: 403,
  unknown_method: 404,
  unknown_model: 404,
  model_not_installed: 404,
  grammar_disabled: 403,
  not_certified: 409,
  migration_required: 409,
  idempotency_conflict: 409,
  model_in_use: 409,
  remote_identity_drift: 409,
  remote_deployment_changed: 409,
  sequence_too_long: 422,
  substitution_rejected: 422,
  declared_identity_not_accepted: 422,
  engine_output_invalid: 422,
  op_not_supported_for_remote: 422,
  sentinel_calibration_refused: 422,
  artifact_invalid: 424,
  self_check_failed: 424,
  backend_unavailable: 424,
  owned_cuda_unsupported: 424,
  probe_required: 424,
  needs_reauth: 424,
  needs_reauth_expired: 424,
  credential_config_invalid: 424,
  queue_full: 429,
  internal_error: 500,
  encode_failed: 500,
  download_failed: 502,
  provider_protocol_violation: 502,
  model_loading: 503,
  engine_crashed: 503,
  provider_unavailable: 503,
  module_restarted: 503,
  module_not_initialized: 503,
  store_failure: 503,
  disposed: 503,
  deadline_exceeded: 504,
});

/**
 * The HTTP status of a stable error code.
 *
 * @param code A stable code or a channel code (docs/errors.md, "Codes Synapse returns").
 * @returns An HTTP status in 400–599.
 * @throws {Error} "… This is a bug" when the code has no row (only reachable through a cast).
 */
export function httpStatusFor(code: ErrorCode): number {
  const status = Object.hasOwn(HTTP_STATUS, code) ? HTTP_STATUS[code] : undefined;
  if (status === undefined) {
    throw new Error(`No HTTP status for error code '${code}'. This is a bug`);
  }
  return status;
}

/**
 * The `type` of an OpenAI-shaped error body (`POST /v1/embeddings`, `GET /v1/models`). OpenAI's
 * own vocabulary where it has a word (`invalid_request_error`, `rate_limit_error`,
 * `server_error`), and llama-server's for what OpenAI has none (`not_found_error`,
 * `permission_error`, `unavailable_error`, `not_supported_error`). Clients branch on the HTTP
 * status and on `code` (the Synapse stable code); `type` says whose fault it is.
 */
export type OpenAiErrorType =
  | "invalid_request_error"
  | "authentication_error"
  | "not_found_error"
  | "permission_error"
  | "rate_limit_error"
  | "unavailable_error"
  | "not_supported_error"
  | "server_error";

/**
 * OpenAI error `type` of every stable code; a full record, so a new code fails to compile.
 *
 * - `invalid_request_error`: the caller's request is at fault (malformed, too long, conflicts
 *   with a key or a required identity): change it.
 * - `authentication_error`: the caller did not show the owner's local key (HTTP 401, as OpenAI
 *   answers a missing or wrong API key).
 * - `not_found_error`: the method or model named does not exist here (vLLM: `NotFoundError`).
 * - `permission_error`: module policy refuses it.
 * - `rate_limit_error`: over the admission budget (HTTP 429), retry after the hint.
 * - `unavailable_error`: every other transient code (loading, a crashed engine restarting, a
 *   failed download, a deadline the queue could not meet, shutting down): retry after the hint.
 * - `not_supported_error`: no backend here can run the model.
 * - `server_error`: the fault is on the serving side and no retry fixes it — a bug, the model's
 *   artifact, a quarantined worker, a misbehaving upstream or the operator's provider credentials
 *   (not the caller's, so never `authentication_error`). `engine_output_invalid` is here: the
 *   model produced NaN/Inf for a well-formed input; the request is not malformed.
 */
export const OPENAI_ERROR_TYPE: Readonly<Record<ErrorCode, OpenAiErrorType>> = Object.freeze({
  invalid_request: "invalid_request_error",
  sequence_too_long: "invalid_request_error",
  substitution_rejected: "invalid_request_error",
  declared_identity_not_accepted: "invalid_request_error",
  sentinel_calibration_refused: "invalid_request_error",
  idempotency_conflict: "invalid_request_error",
  not_certified: "invalid_request_error",
  migration_required: "server_error",
  model_in_use: "invalid_request_error",
  remote_identity_drift: "server_error",
  remote_deployment_changed: "server_error",
  unknown_method: "not_found_error",
  unknown_model: "not_found_error",
  model_not_installed: "not_found_error",
  unauthorized: "authentication_error",
  flow_scope_refused: "permission_error",
  certify_observation_disabled: "permission_error",
  grammar_disabled: "permission_error",
  queue_full: "rate_limit_error",
  model_loading: "unavailable_error",
  engine_crashed: "unavailable_error",
  provider_unavailable: "unavailable_error",
  module_restarted: "unavailable_error",
  module_not_initialized: "unavailable_error",
  store_failure: "unavailable_error",
  disposed: "unavailable_error",
  deadline_exceeded: "unavailable_error",
  backend_unavailable: "not_supported_error",
  owned_cuda_unsupported: "not_supported_error",
  op_not_supported_for_remote: "not_supported_error",
  engine_output_invalid: "server_error",
  artifact_invalid: "server_error",
  self_check_failed: "server_error",
  probe_required: "server_error",
  needs_reauth: "server_error",
  needs_reauth_expired: "server_error",
  credential_config_invalid: "server_error",
  internal_error: "server_error",
  encode_failed: "server_error",
  download_failed: "unavailable_error",
  provider_protocol_violation: "server_error",
});

/**
 * The OpenAI error `type` of a stable code.
 *
 * @param code A stable or channel code.
 * @returns The type for the `error.type` field.
 * @throws {Error} "… This is a bug" when the code has no row (only reachable through a cast).
 */
export function openAiErrorTypeFor(code: ErrorCode): OpenAiErrorType {
  const type = Object.hasOwn(OPENAI_ERROR_TYPE, code) ? OPENAI_ERROR_TYPE[code] : undefined;
  if (type === undefined) {
    throw new Error(`No OpenAI error type for error code '${code}'. This is a bug`);
  }
  return type;
}

/**
 * The `error_type` of a TEI-shaped error body `{error, error_type}` (`POST /embed`, `GET /info`,
 * `POST /rerank` with `texts`): TEI's own vocabulary (router/src/lib.rs `ErrorType`). TEI clients
 * read `error` and branch on the HTTP status, which is {@link httpStatusFor} of the code, as on
 * every door.
 */
export type TeiErrorType = "Validation" | "Overloaded" | "Unhealthy" | "Backend";

/**
 * TEI `error_type` of every stable code; a full record, so a new code fails to compile.
 *
 * - `Validation`: the request is at fault or names what is not here (malformed, empty, too long,
 *   unknown model, refused by policy or by a key): change it.
 * - `Overloaded`: over the admission budget or the queue-time budget: retry after the hint.
 * - `Unhealthy`: loading, restarting, shutting down, the store busy: retry after the hint.
 * - `Backend`: the model, its engine or worker, or an upstream failed; a retry does not help.
 */
export const TEI_ERROR_TYPE: Readonly<Record<ErrorCode, TeiErrorType>> = Object.freeze({
  invalid_request: "Validation",
  sequence_too_long: "Validation",
  substitution_rejected: "Validation",
  declared_identity_not_accepted: "Validation",
  sentinel_calibration_refused: "Validation",
  idempotency_conflict: "Validation",
  not_certified: "Validation",
  model_in_use: "Validation",
  unknown_method: "Validation",
  unknown_model: "Validation",
  model_not_installed: "Validation",
  unauthorized: "Validation",
  flow_scope_refused: "Validation",
  certify_observation_disabled: "Validation",
  grammar_disabled: "Validation",
  op_not_supported_for_remote: "Validation",
  queue_full: "Overloaded",
  deadline_exceeded: "Overloaded",
  model_loading: "Unhealthy",
  engine_crashed: "Unhealthy",
  provider_unavailable: "Unhealthy",
  module_restarted: "Unhealthy",
  module_not_initialized: "Unhealthy",
  store_failure: "Unhealthy",
  disposed: "Unhealthy",
  migration_required: "Backend",
  remote_identity_drift: "Backend",
  remote_deployment_changed: "Backend",
  backend_unavailable: "Backend",
  owned_cuda_unsupported: "Backend",
  engine_output_invalid: "Backend",
  artifact_invalid: "Backend",
  self_check_failed: "Backend",
  probe_required: "Backend",
  needs_reauth: "Backend",
  needs_reauth_expired: "Backend",
  credential_config_invalid: "Backend",
  internal_error: "Backend",
  encode_failed: "Backend",
  download_failed: "Backend",
  provider_protocol_violation: "Backend",
});

/**
 * The TEI `error_type` of a stable code.
 *
 * @param code A stable or channel code.
 * @returns The type for the `error_type` field.
 * @throws {Error} "… This is a bug" when the code has no row (only reachable through a cast).
 */
export function teiErrorTypeFor(code: ErrorCode): TeiErrorType {
  const type = Object.hasOwn(TEI_ERROR_TYPE, code) ? TEI_ERROR_TYPE[code] : undefined;
  if (type === undefined) {
    throw new Error(`No TEI error type for error code '${code}'. This is a bug`);
  }
  return type;
}
