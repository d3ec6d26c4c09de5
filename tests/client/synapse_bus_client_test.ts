/**
 * SynapseBusClient (mod.ts) against a scripted daemon: what it sends, and how each answer becomes
 * a result, a SynapseError or a SubcCallError. Against the real module through the test peer:
 * tests/subc/consumer_peer_test.ts.
 */
import assert from "node:assert/strict";
import { SubcCallError, SynapseBusClient, SynapseError } from "../../mod.ts";
import type { OpParams, OpResult, SynapseMethod } from "../../mod.ts";
import { OPERATIONS } from "../../lib/ops/dispatcher.ts";
import { FrameType } from "../../lib/subc/bus_envelope.ts";
import { bodyJson, startScriptedDaemon } from "../subc/_scripted_daemon.ts";

/** Every method of the table, checked by the compiler to be exactly its keys. */
const TYPED_METHODS = {
  "embed.query": true,
  "embed.batch": true,
  "embed.result": true,
  "job.resume": true,
  "rerank.score": true,
  "microllm.oneshot": true,
  "models.list": true,
  "admission.status": true,
  "model.load": true,
  "model.status": true,
  "model.info": true,
  "model.unload": true,
  "models.catalog": true,
  "models.download": true,
  "models.download.cancel": true,
  "models.remove": true,
  "cache.pin": true,
  "cache.gc": true,
  "probe.start": true,
  "probe.status": true,
  "probe.report": true,
  "aliases.check_index": true,
  "alias.declare": true,
  "alias.retract": true,
  "tokenize": true,
  "detokenize": true,
} satisfies Record<SynapseMethod, true>;

Deno.test("SynapseOperations has a row for exactly the dispatcher's operations", () => {
  assert.deepEqual(Object.keys(TYPED_METHODS).sort(), Object.keys(OPERATIONS).sort());
});

Deno.test("the typed params and results are the operations' own types (compile-time checks)", () => {
  // A params field that does not exist, and a result field that does not exist, do not compile.
  // @ts-expect-error 'txt' is not a field of embed.query's params
  const bad: OpParams<"embed.query"> = { txt: "x" };
  const good: OpParams<"rerank.score"> = { query: "q", candidates: ["a"], truncate: true };
  type Vec = OpResult<"embed.query">["vectors"][number]["vector"];
  const v: Vec = [0.5];
  // @ts-expect-error models.list has no 'vectors'
  type NoVectors = OpResult<"models.list">["vectors"];
  const batch = null as unknown as OpResult<"embed.batch">;
  const narrowed = batch !== null && "job_id" in batch ? batch.pages_available : 0;
  assert.deepEqual([bad, good.query, v, narrowed], [{ txt: "x" }, "q", [0.5], 0]);
  assert.equal(null as NoVectors | null, null);
});

Deno.test("SynapseBusClient: methods send {method, params} on one route and resolve with the result payload", async () => {
  const seen: unknown[] = [];
  await using daemon = await startScriptedDaemon((f, _c, reply) => {
    if (f.channel === 0) return reply.routeOpened(f.corr, 1, 1);
    if (f.type !== FrameType.Request) return;
    const req = bodyJson(f) as { method: string; params: unknown };
    seen.push(req);
    return reply.json(f, { result: { method: req.method, module_generation: 3 } });
  });
  await using synapse = await SynapseBusClient.connect({ connectionFile: daemon.connectionFile });
  const r = await synapse.embedQuery({ text: "hi" });
  assert.deepEqual(r as unknown, { method: "embed.query", module_generation: 3 });
  await synapse.embedBatch({ texts: ["a"] });
  await synapse.embedResult({ job_id: "job_1", page: 0 });
  await synapse.rerankScore({ query: "q", candidates: ["c"] });
  await synapse.microllmOneshot({ prompt: "p", max_tokens: 4 });
  await synapse.modelsList();
  await synapse.admissionStatus();
  assert.deepEqual(seen, [
    { method: "embed.query", params: { text: "hi" } },
    { method: "embed.batch", params: { texts: ["a"] } },
    { method: "embed.result", params: { job_id: "job_1", page: 0 } },
    { method: "rerank.score", params: { query: "q", candidates: ["c"] } },
    { method: "microllm.oneshot", params: { prompt: "p", max_tokens: 4 } },
    { method: "models.list", params: {} },
    { method: "admission.status", params: {} },
  ]);
  const opens = daemon.received.filter((r) => r.frame.channel === 0);
  assert.equal(opens.length, 1, "one route for every call");
  const open = bodyJson(opens[0]!.frame) as { target: unknown };
  assert.deepEqual(open.target, { kind: "management_surface", module_id: "synapse" });
});

Deno.test("SynapseBusClient: a semantic error is a SynapseError with its class facts; a channel code is a SynapseError; a bus code a SubcCallError", async () => {
  await using daemon = await startScriptedDaemon((f, _c, reply) => {
    if (f.channel === 0) return reply.routeOpened(f.corr, 1, 1);
    if (f.type !== FrameType.Request) return;
    const { method } = bodyJson(f) as { method: string };
    if (method === "embed.query") {
      return reply.json(f, {
        result: {
          module_generation: 2,
          error: {
            code: "queue_full",
            class: "transient",
            retry_after_ms: 250,
            safe_to_retry_same_request: true,
            message: "Cannot admit: the queue is full",
            details: { lane: "interactive" },
          },
        },
      });
    }
    if (method === "no.such") {
      return reply.error(f, "unknown_method", { detail: { method, known: ["embed.query"] } });
    }
    return reply.error(f, "cancelled");
  });
  await using synapse = await SynapseBusClient.connect({ connectionFile: daemon.connectionFile });
  await assert.rejects(synapse.embedQuery({ text: "x" }), (e) => {
    assert.ok(e instanceof SynapseError);
    assert.deepEqual([e.code, e.channel, e.retryAfterMs, e.errorClass, e.details], [
      "queue_full",
      false,
      250,
      "transient",
      { lane: "interactive" },
    ]);
    assert.equal(e.message, "Cannot admit: the queue is full");
    return true;
  });
  await assert.rejects(synapse.callWire("no.such"), (e) => {
    assert.ok(e instanceof SynapseError);
    assert.deepEqual([e.code, e.channel, e.details], ["unknown_method", true, {
      method: "no.such",
      known: ["embed.query"],
    }]);
    assert.equal(e.message, "scripted unknown_method");
    return true;
  });
  await assert.rejects(synapse.microllmOneshot({ prompt: "p", max_tokens: 2 }), (e) => {
    assert.ok(e instanceof SubcCallError);
    assert.deepEqual([e.code, e.origin, e.phase], ["cancelled", "module", "request"]);
    return true;
  });
});

Deno.test("SynapseBusClient.connect: moduleId picks the target; a refused route is thrown as a SubcCallError (phase open)", async () => {
  await using daemon = await startScriptedDaemon((f, _c, reply) => {
    if (f.channel === 0) {
      const { target } = bodyJson(f) as { target: { module_id: string } };
      return target.module_id === "synapse-b"
        ? reply.routeOpened(f.corr, 2, 1)
        : reply.controlError(f.corr, "route_rejected");
    }
  });
  await using b = await SynapseBusClient.connect({
    connectionFile: daemon.connectionFile,
    moduleId: "synapse-b",
  });
  assert.equal(b.route.channel, 2);
  await assert.rejects(
    SynapseBusClient.connect({ connectionFile: daemon.connectionFile }),
    (e) => e instanceof SubcCallError && e.code === "route_rejected" && e.phase === "open",
  );
  await daemon.until(() => daemon.connections.length === 2, "two connections");
});
