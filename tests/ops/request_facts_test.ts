/**
 * Request facts are worked out once per call (lib/ops/request_facts.ts `callWithFacts`): the
 * instance computes them for its metrics and hands them to the door (`CallOptions.onFacts`); a
 * backend that hands none (a stand-in) gets them computed from the outcome.
 */
import assert from "node:assert/strict";
import { callWithFacts, type RequestFacts } from "../../lib/ops/request_facts.ts";
import type { CallOptions } from "../../lib/ops/context.ts";
import type { OpOutcome } from "../../lib/ops/dispatcher.ts";
import { SynapseError } from "../../lib/contract/errors.ts";
import { startSynapse } from "../_helpers.ts";

Deno.test("callWithFacts answers the instance's own facts, handed over once, and a caller's onFacts still gets them", async () => {
  await using t = await startSynapse();
  const seen: RequestFacts[] = [];
  const { outcome, facts } = await callWithFacts(
    t.syn,
    "embed.batch",
    { texts: ["apple pie", "banana"] },
    { onFacts: (f) => seen.push(f) },
  );
  assert.equal(outcome.kind, "result");
  assert.equal(seen.length, 1, "the instance hands its facts over exactly once");
  assert.equal(facts, seen[0], "the very object the instance worked out, not a second one");
  assert.equal(facts.outcome, "ok");
  assert.equal(facts.items, 2);
  assert.equal(facts.model, "synapse-tiny-embed");
  assert.ok((facts.tokens ?? 0) > 2);
  const refused = await callWithFacts(t.syn, "embed.query", { text: "" });
  assert.equal(refused.facts.outcome, "invalid_request");
  assert.equal(refused.facts.tokens, undefined);
});

Deno.test("callWithFacts computes the facts itself for a backend that hands none over", async () => {
  const error = new SynapseError("unknown_method", "no such method", { channel: true });
  const outcome: OpOutcome = { kind: "channel", body: error.toChannel(), error };
  const standIn = {
    call(_m: string, _p: unknown, _o?: CallOptions): Promise<OpOutcome> {
      return Promise.resolve(outcome);
    },
  };
  const { facts } = await callWithFacts(standIn, "nope", {});
  assert.equal(facts.outcome, "unknown_method");
});
