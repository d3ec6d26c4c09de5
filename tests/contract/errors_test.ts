import assert from "node:assert/strict";
import {
  CHANNEL_CODES,
  ERROR_CODES,
  SynapseError,
  toSynapseError,
} from "../../lib/contract/errors.ts";

Deno.test("ERROR_CODES matches the frozen classes of contract §2", () => {
  const transient = [
    "queue_full",
    "deadline_exceeded",
    "model_loading",
    "engine_crashed",
    "provider_unavailable",
    "download_failed",
    "module_restarted",
  ];
  for (const c of transient) {
    assert.equal(ERROR_CODES[c as keyof typeof ERROR_CODES].class, "transient", c);
  }
  for (
    const c of [
      "sequence_too_long",
      "invalid_request",
      "unknown_model",
      "idempotency_conflict",
      "model_in_use",
    ]
  ) {
    assert.equal(ERROR_CODES[c as keyof typeof ERROR_CODES].class, "permanent", c);
  }
  assert.equal(ERROR_CODES.deadline_exceeded.safeToRetrySameRequest, false);
  assert.equal(ERROR_CODES.queue_full.safeToRetrySameRequest, true);
  assert.equal(ERROR_CODES.module_restarted.safeToRetrySameRequest, true);
  assert.equal(ERROR_CODES.download_failed.retryAfterMs, 1000);
  assert.ok(Object.isFrozen(ERROR_CODES));
});

Deno.test("SynapseError.toWire() gives transient errors a retry hint and permanent ones none", () => {
  const t = new SynapseError("queue_full", "full").toWire();
  assert.deepEqual(t, {
    code: "queue_full",
    class: "transient",
    safe_to_retry_same_request: true,
    message: "full",
    retry_after_ms: 100,
  });
  const m = new SynapseError("model_loading", "loading", { retryAfterMs: 250 }).toWire();
  assert.equal(m.retry_after_ms, 250);
  const p = new SynapseError("sequence_too_long", "long", {
    details: { tokens: 513, max_tokens: 512, item_id: "a" },
    retryAfterMs: 5,
  }).toWire();
  assert.equal(p.retry_after_ms, undefined);
  assert.equal(p.class, "permanent");
  assert.equal(p.safe_to_retry_same_request, false);
  assert.deepEqual(p.details, { tokens: 513, max_tokens: 512, item_id: "a" });
});

Deno.test("SynapseError picks the channel shape for channel codes", () => {
  for (const c of CHANNEL_CODES) assert.equal(new SynapseError(c, "x").channel, true);
  assert.equal(new SynapseError("invalid_request", "x").channel, false);
  assert.equal(new SynapseError("invalid_request", "x", { channel: true }).channel, true);
  assert.deepEqual(new SynapseError("unknown_method", "no").toChannel(), {
    code: "unknown_method",
    message: "no",
  });
});

Deno.test("toSynapseError() keeps SynapseErrors and wraps the rest with the fallback code", () => {
  const e = new SynapseError("unknown_model", "x");
  assert.equal(toSynapseError(e, "engine_crashed"), e);
  const w = toSynapseError(new TypeError("boom"), "store_failure");
  assert.equal(w.code, "store_failure");
  assert.equal(w.message, "boom");
  assert.ok(w.cause instanceof TypeError);
});
