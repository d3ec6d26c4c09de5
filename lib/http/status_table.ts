/**
 * The transport tables of the front doors (STYLE rule 7): one stable error code → one HTTP
 * status, and one outcome kind → one CLI exit code. Nothing else in the code base picks a status
 * or an exit code.
 *
 * How the HTTP statuses were chosen, group by group:
 *
 * | status | meaning here | codes |
 * |---|---|---|
 * | 400 | the request is malformed: fix its shape | `invalid_request` |
 * | 403 | refused by module policy, not by the caller's identity | `flow_scope_refused`, `certify_observation_disabled`, `grammar_disabled` |
 * | 404 | the named thing does not exist here | `unknown_method`, `unknown_model`, `model_not_installed` |
 * | 409 | the request is well formed but conflicts with the module's state (certification, aliases, jobs, a model in use) | `not_certified`, `probe_required`, `migration_required`, `idempotency_conflict`, `model_in_use`, `remote_identity_drift`, `remote_deployment_changed` |
 * | 422 | the request parses but asks for something that cannot be served as asked: change the request (truncate, accept a declared identity, another model) | `sequence_too_long`, `substitution_rejected`, `declared_identity_not_accepted`, `engine_output_invalid`, `op_not_supported_for_remote`, `sentinel_calibration_refused` |
 * | 424 | a remote provider's credentials need the operator (not the HTTP caller's authentication, so not 401) | `needs_reauth`, `needs_reauth_expired`, `credential_config_invalid` |
 * | 429 | over the admission budget; retry after the hint | `queue_full` |
 * | 500 | the module failed (a bug), or holds an unusable artifact | `internal_error`, `store_failure`, `encode_failed`, `artifact_invalid`, `self_check_failed` |
 * | 501 | this machine or build has no backend for it | `backend_unavailable`, `owned_cuda_unsupported` |
 * | 502 | an upstream (download host, remote provider) failed or misbehaved | `download_failed`, `provider_protocol_violation` |
 * | 503 | temporarily unable to serve; retry after the hint | `model_loading`, `engine_crashed`, `provider_unavailable`, `module_restarted`, `module_not_initialized`, `disposed` |
 * | 504 | the deadline or queue-time budget cannot be met | `deadline_exceeded` |
 *
 * `engine_output_invalid` (a model produced NaN/Inf for an item, field report F6) is 422 rather
 * than 500: it is a permanent, per-input refusal — the same text will always fail, another text
 * will not. Transport conditions that are not a code of their own (a body over the size cap, a
 * wrong HTTP method) keep the code `invalid_request` but answer 413 and 405; the server sets
 * those explicitly.
 *
 * @module
 */
import type { ErrorCode } from "../contract/errors.ts";

/** HTTP status of every stable code; typed as a full record, so a new code fails to compile. */
export const HTTP_STATUS: Readonly<Record<ErrorCode, number>> = Object.freeze({
  invalid_request: 400,
  flow_scope_refused: 403,
  certify_observation_disabled: 403,
  unknown_method: 404,
  unknown_model: 404,
  model_not_installed: 404,
  not_certified: 409,
  probe_required: 409,
  grammar_disabled: 403,
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
  needs_reauth: 424,
  needs_reauth_expired: 424,
  credential_config_invalid: 424,
  queue_full: 429,
  internal_error: 500,
  store_failure: 500,
  encode_failed: 500,
  artifact_invalid: 500,
  self_check_failed: 500,
  backend_unavailable: 501,
  owned_cuda_unsupported: 501,
  download_failed: 502,
  provider_protocol_violation: 502,
  model_loading: 503,
  engine_crashed: 503,
  provider_unavailable: 503,
  module_restarted: 503,
  module_not_initialized: 503,
  disposed: 503,
  deadline_exceeded: 504,
});

/**
 * The HTTP status of a stable error code.
 *
 * @param code A stable code (contract.md §2) or channel code (§1).
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
 * How a CLI command ended: an operation result, a semantic refusal inside `result`, a channel
 * error, or a usage error found before any call (bad flag, bad PARAMS_JSON).
 */
export type OutcomeKind = "result" | "semantic" | "channel" | "usage";

/** CLI exit code of every outcome kind. */
export const CLI_EXIT: Readonly<Record<OutcomeKind, number>> = Object.freeze({
  result: 0,
  semantic: 1,
  channel: 2,
  usage: 2,
});

/**
 * The process exit code of a CLI outcome: 0 result, 1 semantic error, 2 channel or usage error.
 *
 * @param kind How the command ended.
 * @returns The exit code.
 */
export function cliExitFor(kind: OutcomeKind): number {
  return CLI_EXIT[kind];
}
