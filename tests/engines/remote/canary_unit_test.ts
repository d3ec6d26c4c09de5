/**
 * The canary's comparison (lib/engines/remote/canary.ts): the embedding bar is the lowest
 * cosine per input, the rerank bar |Δ| ≤ 1e-3 × max(1, |score|); NaN and a changed shape never
 * pass; the drift error names the worst input and what it measured.
 */
import assert from "node:assert/strict";
import {
  CANARY_DEFAULT_MIN_COSINE,
  canaryDriftError,
  compareCanary,
} from "../../../lib/engines/remote/canary.ts";

const base = { dims: 2, values: [1, 0, 0, 1, 0.6, 0.8], recordedAtMs: 0 };

Deno.test("compareCanary (embed): the worst input's cosine against the bar", () => {
  const same = compareCanary("embed", base, [1, 0, 0, 1, 0.6, 0.8], CANARY_DEFAULT_MIN_COSINE);
  assert.equal(same.ok, true);
  assert.ok(Math.abs(same.measured - 1) < 1e-12);
  // Input 1 turned by ~0.8°: cosine 0.99990 just passes 0.9999 only when above it.
  const a = 0.014;
  const turned = [1, 0, Math.sin(a), Math.cos(a), 0.6, 0.8];
  const v = compareCanary("embed", base, turned, CANARY_DEFAULT_MIN_COSINE);
  assert.equal(v.worstInput, 1);
  assert.ok(Math.abs(v.measured - Math.cos(a)) < 1e-12);
  assert.equal(v.ok, Math.cos(a) >= CANARY_DEFAULT_MIN_COSINE);
  assert.equal(compareCanary("embed", base, [1, 0, 0, 1, 0.6, 0.8], 1).ok, true);
  // Scaled is the same direction; NaN or another width never passes.
  assert.equal(compareCanary("embed", base, [2, 0, 0, 3, 1.2, 1.6], 0.9999).ok, true);
  const nan = compareCanary("embed", base, [1, 0, NaN, 1, 0.6, 0.8], 0.5);
  assert.equal(nan.ok, false);
  assert.equal(nan.worstInput, 1);
  const shape = compareCanary("embed", base, [1, 0, 0, 1], 0.5);
  assert.equal(shape.ok, false);
  assert.ok(Number.isNaN(shape.measured));
});

Deno.test("compareCanary (rerank): |Δscore| within 1e-3 × max(1, |score|)", () => {
  const scores = { dims: 1, values: [-4, 0.5, 12], recordedAtMs: 0 };
  assert.equal(compareCanary("rerank", scores, [-4.0009, 0.5009, 12.011], 0).ok, true);
  const v = compareCanary("rerank", scores, [-4, 0.5, 12.02], 0);
  assert.equal(v.ok, false);
  assert.equal(v.worstInput, 2);
  assert.equal(v.metric, "score_delta");
  assert.ok(Math.abs(v.measured - 0.02 / 0.012) < 1e-9);
  assert.equal(compareCanary("rerank", scores, [-4, NaN, 12], 0).ok, false);
});

Deno.test("canaryDriftError names the provider, deployment, worst input and measure", () => {
  const e = canaryDriftError("peer", "tiny", "tiny;owned_by=x", {
    ok: false,
    worstInput: 2,
    measured: 0.85,
    bar: 0.9999,
    metric: "cosine",
  }, Date.UTC(2026, 11, 6));
  assert.equal(e.code, "remote_identity_drift");
  assert.deepEqual(e.details, {
    provider: "peer",
    deployment: "tiny;owned_by=x",
    input: 2,
    metric: "cosine",
    measured: 0.85,
    bar: 0.9999,
    baseline_recorded_at_ms: Date.UTC(2026, 11, 6),
  });
  assert.match(e.message, /canary input 2 moved \(cosine 0\.850000 < 0\.9999\)/);
  assert.match(e.message, /2026-12-06T00:00:00\.000Z/);
  assert.match(e.message, /"revision"/);
  assert.match(e.message, /refuses until the server restarts/);
});
