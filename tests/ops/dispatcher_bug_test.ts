/**
 * A bug is not an engine crash: an exception that is not a SynapseError is logged with its stack
 * and answered `internal_error`, permanent and not safe to retry (a transient `engine_crashed`
 * would have a client retry a bug forever). Durable jobs end `failed_permanent` with it.
 */
import assert from "node:assert/strict";
import { resultOf, semanticError, startSynapse } from "../_helpers.ts";

Deno.test("a thrown bug in an op is internal_error, permanent, logged with its stack; serving goes on", async () => {
  const lines: { level: string; message: string; fields?: Record<string, unknown> }[] = [];
  await using t = await startSynapse({}, {
    log: (level, _target, message, fields) =>
      lines.push({ level, message, ...(fields ? { fields } : {}) }),
  });
  const engine = t.syn.registry.resolve(undefined, "embed").interactive.engine;
  const embed = engine.embed.bind(engine);
  engine.embed = () => {
    throw new TypeError("Cannot read properties of undefined (reading 'dims')");
  };
  const e = semanticError(await t.syn.call("embed.query", { text: "hello" }));
  assert.equal(e.code, "internal_error");
  assert.equal(e.class, "permanent");
  assert.equal(e.safe_to_retry_same_request, false);
  assert.equal(e.retry_after_ms, undefined);
  const logged = lines.find((l) => l.level === "error");
  assert.ok(logged, "the bug is logged");
  assert.match(String(logged.fields?.stack), /TypeError: Cannot read properties/);
  engine.embed = embed;
  resultOf(await t.syn.call("embed.query", { text: "hello" }));
});
