import assert from "node:assert/strict";
import { ERROR_CODES } from "../../../lib/contract/errors.ts";
import type { ErrorCode } from "../../../lib/contract/errors.ts";
import {
  HTTP_STATUS,
  httpStatusFor,
  OPENAI_ERROR_TYPE,
  openAiErrorTypeFor,
  TEI_ERROR_TYPE,
  teiErrorTypeFor,
} from "../../../lib/doors/http/status_table.ts";

Deno.test("httpStatusFor() has a row for every error code, each an error status", () => {
  for (const code of Object.keys(ERROR_CODES) as ErrorCode[]) {
    assert.ok(Object.hasOwn(HTTP_STATUS, code), `no HTTP status for '${code}'`);
    const status = httpStatusFor(code);
    assert.ok(Number.isInteger(status) && status >= 400 && status <= 599, `${code} → ${status}`);
  }
  // And no row for a code that does not exist.
  assert.deepEqual(Object.keys(HTTP_STATUS).sort(), Object.keys(ERROR_CODES).sort());
});

/** The whole table, as lib/doors/http/status_table.ts documents it: changing a row is a decision. */
const EXPECTED: Record<ErrorCode, number> = {
  invalid_request: 400,
  unauthorized: 401,
  flow_scope_refused: 403,
  certify_observation_disabled: 403,
  grammar_disabled: 403,
  unknown_method: 404,
  unknown_model: 404,
  model_not_installed: 404,
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
};

Deno.test("httpStatusFor() answers the documented status for every code", () => {
  assert.deepEqual({ ...HTTP_STATUS }, EXPECTED);
  for (const [code, status] of Object.entries(EXPECTED) as [ErrorCode, number][]) {
    assert.equal(httpStatusFor(code), status, code);
  }
});

Deno.test("httpStatusFor() never answers 501, and 500 only for Synapse's own faults", () => {
  // 501 says the server lacks the HTTP method (and caches keep it); a model without a backend
  // is a failed dependency (424, as TEI answers backend errors).
  assert.equal(httpStatusFor("backend_unavailable"), 424);
  assert.equal(httpStatusFor("artifact_invalid"), 424);
  for (const code of Object.keys(ERROR_CODES) as ErrorCode[]) {
    assert.notEqual(httpStatusFor(code), 501, code);
    if (httpStatusFor(code) === 500) assert.ok(["internal_error", "encode_failed"].includes(code));
  }
});

Deno.test("httpStatusFor(): a permanent code answers 4xx, unless it is a bug, an upstream or a shutdown", () => {
  const serverSide = new Set<ErrorCode>([
    "internal_error",
    "encode_failed",
    "provider_protocol_violation",
    "disposed",
  ]);
  for (const [code, info] of Object.entries(ERROR_CODES) as [ErrorCode, { class: string }][]) {
    if (info.class !== "permanent" || serverSide.has(code)) continue;
    const status = httpStatusFor(code);
    assert.ok(status >= 400 && status < 500, `permanent ${code} → ${status}`);
  }
});

Deno.test("openAiErrorTypeFor() has a type for every code; engine_output_invalid is the server's", () => {
  assert.deepEqual(Object.keys(OPENAI_ERROR_TYPE).sort(), Object.keys(ERROR_CODES).sort());
  const expected: [ErrorCode, string][] = [
    ["invalid_request", "invalid_request_error"],
    ["sequence_too_long", "invalid_request_error"],
    ["unknown_model", "not_found_error"],
    ["unknown_method", "not_found_error"],
    ["queue_full", "rate_limit_error"],
    ["model_loading", "unavailable_error"],
    ["engine_crashed", "unavailable_error"],
    ["deadline_exceeded", "unavailable_error"],
    ["module_not_initialized", "unavailable_error"],
    ["engine_output_invalid", "server_error"],
    ["artifact_invalid", "server_error"],
    ["probe_required", "server_error"],
    ["internal_error", "server_error"],
    ["backend_unavailable", "not_supported_error"],
    ["grammar_disabled", "permission_error"],
    ["unauthorized", "authentication_error"],
  ];
  for (const [code, type] of expected) assert.equal(openAiErrorTypeFor(code), type, code);
  // Every transient code but queue_full is "retry later"; no permanent code is, but `disposed`
  // (this instance is shutting down: another one may serve).
  for (const [code, info] of Object.entries(ERROR_CODES) as [ErrorCode, { class: string }][]) {
    const type = openAiErrorTypeFor(code);
    if (code === "queue_full" || code === "disposed") continue;
    assert.equal(type === "unavailable_error", info.class === "transient", `${code} → ${type}`);
  }
  assert.throws(() => openAiErrorTypeFor("nope" as ErrorCode), /This is a bug/);
});

Deno.test("teiErrorTypeFor() has TEI's type for every code, agreeing with the code's status", () => {
  assert.deepEqual(Object.keys(TEI_ERROR_TYPE).sort(), Object.keys(ERROR_CODES).sort());
  for (const code of Object.keys(ERROR_CODES) as ErrorCode[]) {
    const type = teiErrorTypeFor(code);
    const status = httpStatusFor(code);
    // TEI: Validation is the caller's 4xx, Overloaded 429 (and a queue deadline), Unhealthy 503,
    // Backend the serving side (424, 5xx, and the 409/422 faults no request change fixes).
    if (type === "Overloaded") assert.ok(status === 429 || status === 504, code);
    else if (type === "Unhealthy") assert.equal(status, 503, code);
    else if (type === "Validation") assert.ok(status >= 400 && status < 424, `${code} ${status}`);
    else assert.ok(status >= 409, `${code} ${status}`);
  }
  const expected: [ErrorCode, string][] = [
    ["invalid_request", "Validation"],
    ["sequence_too_long", "Validation"],
    ["unknown_model", "Validation"],
    ["queue_full", "Overloaded"],
    ["deadline_exceeded", "Overloaded"],
    ["model_loading", "Unhealthy"],
    ["module_not_initialized", "Unhealthy"],
    ["backend_unavailable", "Backend"],
    ["engine_output_invalid", "Backend"],
    ["internal_error", "Backend"],
  ];
  for (const [code, type] of expected) assert.equal(teiErrorTypeFor(code), type, code);
  assert.throws(() => teiErrorTypeFor("nope" as ErrorCode), /This is a bug/);
});

Deno.test("httpStatusFor() throws for a code without a row", () => {
  assert.throws(() => httpStatusFor("no_such_code" as ErrorCode), /This is a bug/);
});
