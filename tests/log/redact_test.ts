/**
 * The credential redactor runs before a line is formatted: credential keys lose their value,
 * secrets are found by shape in messages and values, and ordinary facts (counts, ids, paths,
 * model names) survive.
 */
import assert from "node:assert/strict";
import { isCredentialKey, REDACTED, redactFields, redactText } from "../../lib/log/redact.ts";
import { renderLogEvent } from "../../lib/log/log.ts";

const AT = Date.UTC(2026, 10, 30, 9, 48, 23, 739);
const HEX64 = "9f".repeat(32);
const B64 = "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789+/Ab==";

Deno.test("isCredentialKey() matches the last word of the key, not a substring", () => {
  for (
    const k of [
      "key",
      "api_key",
      "apiKey",
      "apikey",
      "token",
      "access_token",
      "accessToken",
      "secret",
      "client_secret",
      "password",
      "db-password",
      "authorization",
      "Authorization",
      "cookie",
      "launch_nonce",
      "request_key",
      "credentials",
      "signature",
      "dsn",
    ]
  ) assert.ok(isCredentialKey(k), k);
  for (
    const k of ["tokens", "max_tokens", "token_count", "key_id", "keys", "monkey", "model", "items"]
  ) assert.ok(!isCredentialKey(k), k);
});

Deno.test("redactFields() replaces credential values whole and redacts other strings by shape", () => {
  const fields = { api_key: "abc", tokens: 12, nonce: 7, model: "minilm", url: "https://u:p@h/x" };
  assert.deepEqual(redactFields(fields), {
    api_key: REDACTED,
    tokens: 12,
    nonce: REDACTED,
    model: "minilm",
    url: `https://${REDACTED}@h/x`,
  });
  // Nothing to redact: the same object, not a copy.
  const clean = { method: "POST", items: 3 };
  assert.equal(redactFields(clean), clean);
});

Deno.test("redactText() finds secrets by shape", () => {
  const cases: [string, string][] = [
    ["auth with Bearer abc.def-123", `auth with Bearer ${REDACTED}`],
    ["Authorization: Basic dXNlcjpwYXNz", `Authorization: Basic ${REDACTED}`],
    ["authorization=opaque-value rest", `authorization=${REDACTED} rest`],
    ["jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl end", `jwt ${REDACTED} end`],
    ["key sk-proj1234567890abcdefXYZ here", `key ${REDACTED} here`],
    [`gh ghp_${"a1B2".repeat(9)}`, `gh ${REDACTED}`],
    ["handle ckh_abc-123", `handle ${REDACTED}`],
    ["aws AKIAABCDEFGHIJKLMNOP", `aws ${REDACTED}`],
    ["https://bob:hunter2@example.com/x", `https://${REDACTED}@example.com/x`],
    ["postgres://svc@db:5432/x", `postgres://${REDACTED}@db:5432/x`],
    ["/x?token=abc&n=1&api_key=zz#f", `/x?token=${REDACTED}&n=1&api_key=${REDACTED}#f`],
    [`nonce ${HEX64}.`, `nonce ${REDACTED}.`],
    // A content digest names bytes, not a secret; the same hex bare is redacted.
    [`sha256:${HEX64}`, `sha256:${HEX64}`],
    [`digest ${HEX64}`, `digest ${REDACTED}`],
    [`blob ${B64} end`, `blob ${REDACTED} end`],
  ];
  for (const [text, want] of cases) assert.equal(redactText(text), want, text);
});

Deno.test("redactText() leaves ordinary facts alone: job ids, uuids, paths, model names, counts", () => {
  for (
    const text of [
      `job_${"0123456789abcdef".repeat(2)}`,
      "3f2b8c1e-4a5d-4e6f-8a9b-0c1d2e3f4a5b",
      "/home/Alice/Models2024/SomeVeryLongDirectoryName/model.onnx",
      "/home/Alice/Models2024/SomeVeryLongDirectoryNameWithoutAnyDots2",
      "gte-reranker-modernbert-base-and-more-lowercase-words",
      "Qwen3-Embedding-0.6B",
      "file:///work/lib/ops/_errors.ts:43:3",
      "user@example.com",
      "deadbeef",
      "queue_ms=4 items=2",
      "no secrets here",
    ]
  ) assert.equal(redactText(text), text);
});

Deno.test("renderLogEvent() redacts before formatting, so a redacted value is quoted like any other", () => {
  const line = renderLogEvent(
    "info",
    "synapse.http",
    "auth with Bearer abc.def-123",
    {
      api_key: "sk-live-0000",
      url: "https://u:p@h/x?token=t1&n=1",
      launch: HEX64,
      job: `job_${"ab".repeat(16)}`,
      tokens: 12,
    },
    { session: "cli:1", agent: `k${B64}` },
    AT,
  );
  assert.equal(
    line,
    `2026-11-30T09:48:23.739Z INFO  synapse.http: [session=cli:1 agent="[REDACTED]"] auth with Bearer [REDACTED] api_key="[REDACTED]" url="https://[REDACTED]@h/x?token=[REDACTED]&n=1" launch="[REDACTED]" job=job_${
      "ab".repeat(16)
    } tokens=12`,
  );
});

Deno.test("redactText() keeps a path whose segment after a dot looks like base64 (a mktemp data home)", () => {
  const path = "/tmp/nc2.PA2X/data/cortexkit/synapse/logs/synapse.2026-12-01.log";
  assert.equal(redactText(`log_file="${path}"`), `log_file="${path}"`);
  assert.equal(
    redactText(`open ./nc2.PA2X/data/cortexkit/synapse/logs/x`),
    `open ./nc2.PA2X/data/cortexkit/synapse/logs/x`,
  );
  assert.equal(
    redactText(`~/nc2.PA2X/data/cortexkit/synapse/logs/x`),
    `~/nc2.PA2X/data/cortexkit/synapse/logs/x`,
  );
  // The same 40 characters outside a path are still a secret by shape.
  assert.equal(
    redactText("secret PA2X/data/cortexkit/synapse/logs/synapse"),
    `secret ${REDACTED}`,
  );
});
