import assert from "node:assert/strict";
import { ERROR_CODES } from "../../lib/contract/errors.ts";
import type { ErrorCode } from "../../lib/contract/errors.ts";
import { CLI_EXIT, cliExitFor, HTTP_STATUS, httpStatusFor } from "../../lib/http/status_table.ts";

Deno.test("httpStatusFor() has a row for every error code, each an error status", () => {
  for (const code of Object.keys(ERROR_CODES) as ErrorCode[]) {
    assert.ok(Object.hasOwn(HTTP_STATUS, code), `no HTTP status for '${code}'`);
    const status = httpStatusFor(code);
    assert.ok(Number.isInteger(status) && status >= 400 && status <= 599, `${code} → ${status}`);
  }
  // And no row for a code that does not exist.
  assert.deepEqual(Object.keys(HTTP_STATUS).sort(), Object.keys(ERROR_CODES).sort());
});

Deno.test("httpStatusFor() maps the codes clients branch on", () => {
  const expected: [ErrorCode, number][] = [
    ["invalid_request", 400],
    ["unknown_method", 404],
    ["unknown_model", 404],
    ["sequence_too_long", 422],
    ["engine_output_invalid", 422],
    ["substitution_rejected", 422],
    ["queue_full", 429],
    ["store_failure", 500],
    ["encode_failed", 500],
    ["model_loading", 503],
    ["engine_crashed", 503],
    ["module_not_initialized", 503],
    ["disposed", 503],
    ["deadline_exceeded", 504],
  ];
  for (const [code, status] of expected) assert.equal(httpStatusFor(code), status, code);
});

Deno.test("httpStatusFor() answers 5xx with a retry hint for every transient code but queue_full", () => {
  for (const [code, info] of Object.entries(ERROR_CODES) as [ErrorCode, { class: string }][]) {
    if (info.class !== "transient" || code === "queue_full") continue;
    assert.ok(httpStatusFor(code) >= 500, `transient ${code} → ${httpStatusFor(code)}`);
  }
});

Deno.test("httpStatusFor() throws for a code without a row", () => {
  assert.throws(() => httpStatusFor("no_such_code" as ErrorCode), /This is a bug/);
});

Deno.test("cliExitFor() has a row for every outcome kind: 0 result, 1 semantic, 2 channel or usage", () => {
  assert.deepEqual(CLI_EXIT, { result: 0, semantic: 1, channel: 2, usage: 2 });
  assert.equal(cliExitFor("result"), 0);
  assert.equal(cliExitFor("semantic"), 1);
  assert.equal(cliExitFor("channel"), 2);
  assert.equal(cliExitFor("usage"), 2);
});
