/**
 * The module session (lib/subc/module_session.ts) through the real door (`runSubcModule`): a
 * Synapse instance with the generated test models, registered with a hand-driven daemon built
 * from the wire library. Every assertion is on frames the module sent; nothing waits on a timer.
 */
import assert from "node:assert/strict";
import { OPERATIONS } from "../../lib/ops/dispatcher.ts";
import { type LogFields, nullLog } from "../../lib/log/log.ts";
import { createSynapse } from "../../lib/synapse.ts";
import { SubcWireError } from "../../lib/subc/errors.ts";
import { writeConnectionFile } from "../../lib/subc/connection_file.ts";
import { runSubcModule } from "../../lib/doors/bus.ts";
import { FrameType } from "../../lib/subc/bus_envelope.ts";
import { STORE_SCHEMA_VERSION } from "../../lib/store/store.ts";
import { SYNAPSE_VERSION } from "../../lib/version.ts";
import { bodyOf, json } from "./_hand_daemon.ts";
import { registerAndBind, startModule, storageFor } from "./_module.ts";

function isReason(reason: string): (e: unknown) => boolean {
  return (e: unknown) => {
    assert.ok(e instanceof SubcWireError, `expected SubcWireError, got ${e}`);
    assert.equal(e.reason, reason, e.message);
    return true;
  };
}

Deno.test("HELLO: type 9 on channel 0, corr 1, flags 0; the manifest lists every dispatcher operation with its kind", async () => {
  const nonce = "ab".repeat(32);
  await using m = await startModule({ launchNonce: { value: nonce, source: "env" } });
  const { frame, hello } = await m.link.hello();
  assert.equal(frame.type, FrameType.Hello);
  assert.equal(frame.channel, 0);
  assert.equal(frame.epoch, 0);
  assert.equal(frame.corr, 1n);
  assert.equal(frame.flags, 0);
  assert.equal(hello.protocol_ver, 2);
  assert.deepEqual(hello.control_ops, ["health.check"]);
  assert.equal(hello.launch_nonce, nonce);
  const raw = bodyOf(frame);
  const manifest = raw.manifest;
  assert.equal(manifest.module_id, "synapse");
  assert.equal(manifest.module_version, SYNAPSE_VERSION);
  assert.equal(manifest.protocol_ver, 2);
  assert.equal(manifest.trust_tier, "first_party");
  assert.deepEqual(manifest.consumes, []);
  assert.deepEqual(manifest.bindings, {
    storage: { kind: "sqlite", scope: "project", owns_schema: true },
    vault_grants: [],
    identity: { requires: [], optional: [] },
  });
  assert.deepEqual(manifest.provenance, { store_schema_version: String(STORE_SCHEMA_VERSION) });
  assert.equal(manifest.provides.length, 1);
  const surface = manifest.provides[0];
  assert.equal(surface.role, "management_surface");
  assert.deepEqual(surface.config_schema, {});
  assert.deepEqual(surface.observability, []);
  assert.deepEqual(surface.identity_scope, []);
  assert.equal(surface.concurrency, "module_managed");
  // Exactly the dispatcher's operations, each with its kind: none missing, none invented.
  assert.deepEqual(
    surface.operations,
    Object.entries(OPERATIONS).map(([name, op]) => ({ name, kind: op.kind })),
  );
  for (const name of ["embed.query", "embed.batch", "embed.result", "rerank.score"]) {
    assert.ok(surface.operations.some((o: { name: string }) => o.name === name), name);
  }
  // Serde form: no null anywhere in the body.
  assert.ok(!new TextDecoder().decode(frame.body).includes("null"));
});

Deno.test("HELLO without a launch nonce leaves launch_nonce out", async () => {
  await using m = await startModule();
  const { frame } = await m.link.hello();
  assert.ok(!("launch_nonce" in bodyOf(frame)));
});

Deno.test("HELLO_ACK with negotiated_ver 1: the module fails loudly, says Goodbye, frees the lease", async () => {
  await using m = await startModule();
  await m.link.hello();
  await m.link.send(m.link.ackFrame({ negotiated_ver: 1 }));
  await assert.rejects(m.running, (e) => {
    isReason("unsupported_negotiated_version")(e);
    assert.match((e as Error).message, /negotiated version 1/);
    return true;
  });
  const bye = await m.link.take((f) => f.type === FrameType.Goodbye, "the module's Goodbye");
  assert.equal(bye.channel, 0);
  assert.equal(bye.flags, 0);
  await m.link.closed;
  // No store was opened, and the singleton lease is free again.
  await assert.rejects(Deno.stat(m.storePath), Deno.errors.NotFound);
  const again = await createSynapse({
    env: { XDG_DATA_HOME: `${m.dir}/data`, HOME: m.dir },
    storePath: `${m.dir}/other/store.db`,
    leaseRoot: `${m.dir}/data/cortexkit/leases`,
    waitForModels: false,
    log: nullLog,
  });
  await again.dispose();
});

Deno.test("a channel-0 Error answering HELLO fails the module with hello_refused and the daemon's code", async () => {
  await using m = await startModule();
  await m.link.hello();
  await m.link.send({
    type: FrameType.Error,
    corr: 1n,
    body: json({ code: "invalid_manifest", message: "field 'provides' is missing" }),
  });
  await assert.rejects(m.running, (e) => {
    isReason("hello_refused")(e);
    assert.equal((e as SubcWireError).details?.code, "invalid_manifest");
    assert.match((e as Error).message, /refused HELLO with invalid_manifest/);
    return true;
  });
});

Deno.test("a first frame other than HELLO_ACK is a protocol error", async () => {
  await using m = await startModule();
  await m.link.hello();
  await m.link.send({ type: FrameType.Ping, corr: 5n });
  await assert.rejects(m.running, isReason("unexpected_frame"));
});

Deno.test("route.bind before the module is initialised is refused module_not_initialized; then acked", async () => {
  await using m = await startModule();
  await m.link.hello();
  // HELLO_ACK and a bind in one write: the bind is read while the store is still opening.
  await m.link.send(
    m.link.ackFrame({ storage: storageFor(m.storePath) }),
    m.link.bindFrame(7n, 1, 1),
  );
  const early = await m.link.reply(0, 7n);
  assert.equal(early.type, FrameType.Error);
  assert.equal(bodyOf(early).code, "module_not_initialized");
  await m.ready;
  const ack = await m.link.bindReady(m.corrs, 1, 1);
  assert.equal(ack.type, FrameType.Response);
  assert.equal(ack.channel, 0);
  assert.equal(ack.epoch, 0);
  assert.equal(ack.flags, 0);
  assert.deepEqual(bodyOf(ack), { op: "route.bind" });
  // The store is where the ack's descriptor said.
  assert.ok((await Deno.stat(m.storePath)).isFile);
});

Deno.test("route.bind epochs: equal or lower is stale_route_epoch, higher replaces; old-epoch frames are dropped", async () => {
  await using m = await startModule();
  await registerAndBind(m, 3, 5);
  for (const epoch of [5, 4]) {
    const corr = m.corrs.next();
    await m.link.send(m.link.bindFrame(corr, 3, epoch));
    const reply = await m.link.reply(0, corr);
    assert.equal(reply.type, FrameType.Error, `epoch ${epoch}`);
    assert.equal(bodyOf(reply).code, "stale_route_epoch");
  }
  // The route at epoch 5 still serves.
  await m.link.send(m.link.requestFrame(3, 5, 1n, { method: "models.list" }));
  assert.equal((await m.link.reply(3, 1n)).type, FrameType.Response);
  // A higher epoch replaces it: the old epoch's frames are dropped, the new one's served.
  await m.link.bindReady(m.corrs, 3, 6);
  await m.link.send(
    m.link.requestFrame(3, 5, 2n, { method: "models.list" }),
    m.link.requestFrame(3, 6, 3n, { method: "models.list" }),
  );
  const served = await m.link.reply(3, 3n);
  assert.equal(served.epoch, 6);
  assert.equal(m.session().stats.droppedFrames, 1);
  await m.link.ping(m.corrs.next());
  assert.ok(!m.link.seen.some((f) => f.corr === 2n && f.channel === 3), "no answer on epoch 5");
});

Deno.test("route.bind for another target, or of the wrong shape, is route_rejected; unknown fields are ignored", async () => {
  await using m = await startModule();
  await registerAndBind(m, 1, 1, { role_versions: { management_surface: 1 }, config: [] });
  const wrong = m.corrs.next();
  await m.link.send(m.link.bindFrame(wrong, 2, 1, {
    target: { kind: "management_surface", module_id: "someone-else" },
  }));
  assert.equal(bodyOf(await m.link.reply(0, wrong)).code, "route_rejected");
  const bad = m.corrs.next();
  await m.link.send(m.link.bindFrame(bad, 0, 1));
  const r = bodyOf(await m.link.reply(0, bad));
  assert.equal(r.code, "route_rejected");
  assert.equal(r.detail.field, "route_channel");
});

Deno.test("a Request on a channel that is not bound is dropped silently", async () => {
  await using m = await startModule();
  await registerAndBind(m, 1, 1);
  await m.link.send(m.link.requestFrame(9, 1, 50n, { method: "models.list" }));
  // The Pong comes after the module read (and dropped) the request.
  await m.link.ping(m.corrs.next());
  assert.equal(m.session().stats.droppedFrames, 1);
  // A later request on the bound route is served, and nothing ever answers corr 50.
  await m.link.send(m.link.requestFrame(1, 1, 51n, { method: "models.list" }));
  await m.link.reply(1, 51n);
  assert.ok(!m.link.seen.some((f) => f.corr === 50n));
});

Deno.test("data-plane refusals: a body that is not JSON, an unknown method, an unknown params field", async () => {
  await using m = await startModule();
  await registerAndBind(m, 2, 1);
  await m.link.send(
    m.link.requestFrame(2, 1, 1n, new TextEncoder().encode("{not json")),
    m.link.requestFrame(2, 1, 2n, { method: "embed.frobnicate", params: {} }),
    m.link.requestFrame(2, 1, 3n, { method: "embed.query", params: { text: "a", colour: 1 } }),
    m.link.requestFrame(2, 1, 4n, { params: { text: "a" } }),
    m.link.requestFrame(2, 1, 5n, new Uint8Array()),
  );
  const expect: [bigint, string, RegExp][] = [
    [1n, "invalid_request", /JSON/],
    [2n, "unknown_method", /embed\.frobnicate/],
    [3n, "invalid_request", /colour/],
    [4n, "invalid_request", /'method'/],
    [5n, "invalid_request", /empty/],
  ];
  for (const [corr, code, message] of expect) {
    const reply = await m.link.reply(2, corr);
    assert.equal(reply.type, FrameType.Error, `corr ${corr}`);
    assert.equal(reply.epoch, 1);
    assert.equal(reply.flags, 0x02);
    const body = bodyOf(reply);
    assert.equal(body.code, code, `corr ${corr}: ${body.message}`);
    assert.match(body.message, message);
    assert.deepEqual(Object.keys(body).sort(), ["code", "message"]);
  }
});

Deno.test("embed.query over the bus answers the same envelope as the in-process call, one terminal per request", async () => {
  await using m = await startModule();
  const syn = await registerAndBind(m, 4, 2);
  await syn.modelsSettled;
  const params = { text: "the quick brown fox", id: "q1" };
  await m.link.send(m.link.requestFrame(4, 2, 77n, { method: "embed.query", params }));
  const reply = await m.link.reply(4, 77n);
  assert.equal(reply.type, FrameType.Response);
  assert.equal(reply.flags, 0x02);
  assert.equal(reply.epoch, 2);
  const text = new TextDecoder().decode(reply.body);
  const local = await syn.call("embed.query", params);
  assert.equal(local.kind, "result");
  // Byte for byte, once the two calls' own timings are set equal.
  const viaBus = JSON.parse(text);
  for (const k of ["queue_time_ms", "inference_time_ms"]) {
    assert.equal(typeof viaBus.result[k], "number", k);
    viaBus.result[k] = (local.body.result as Record<string, unknown>)[k];
  }
  assert.equal(JSON.stringify(viaBus), JSON.stringify(local.body));
  assert.equal(text, JSON.stringify(JSON.parse(text)), "compact JSON, as JSON.stringify writes it");
  // A semantic refusal is a Response too, in the result envelope (not an Error frame).
  await m.link.send(
    m.link.requestFrame(4, 2, 78n, { method: "embed.query", params: { text: "  " } }),
  );
  const refused = await m.link.reply(4, 78n);
  assert.equal(refused.type, FrameType.Response);
  assert.equal(bodyOf(refused).result.error.code, "invalid_request");
  await m.link.ping(m.corrs.next());
  assert.equal(m.link.seen.filter((f) => f.channel === 4).length, 2, "exactly one terminal each");
});

Deno.test("the bus door writes one request line per request (the request log of every door) and counts its calls door=bus", async () => {
  const lines: { level: string; target: string; message: string; fields: LogFields }[] = [];
  await using m = await startModule({
    log: (level, target, message, fields) =>
      lines.push({ level, target, message, fields: fields ?? {} }),
  });
  const syn = await registerAndBind(m, 4, 2);
  await syn.modelsSettled;
  const requests = () => lines.filter((l) => l.message === "request");
  await m.link.send(
    m.link.requestFrame(4, 2, 90n, { method: "embed.batch", params: { texts: ["alpha", ""] } }),
  );
  const reply = await m.link.reply(4, 90n);
  assert.equal(reply.type, FrameType.Response);
  const r = bodyOf(reply).result;
  // The line is written before the reply goes out.
  const line = requests().at(-1)!;
  assert.equal(line.level, "info");
  assert.equal(line.target, "synapse.subc");
  assert.deepEqual(Object.keys(line.fields), [
    "op",
    "model",
    "items",
    "item_errors",
    "tokens",
    "queue_ms",
    "inference_ms",
    "outcome",
    "channel",
    "corr",
    "total_ms",
  ]);
  const f = line.fields;
  assert.equal(f.op, "embed.batch");
  assert.equal(f.model, "synapse-tiny-embed");
  assert.equal(f.items, 2);
  assert.equal(f.item_errors, 1);
  assert.equal(f.tokens, r.real_token_counts[0]);
  assert.equal(f.queue_ms, r.queue_time_ms);
  assert.equal(f.inference_ms, r.inference_time_ms);
  assert.equal(f.outcome, "ok");
  assert.equal(f.channel, 4);
  assert.equal(f.corr, "90");
  assert.ok(typeof f.total_ms === "number" && f.total_ms >= 0);
  // A method no operation serves: its code, and "-" for every fact it never reached.
  await m.link.send(m.link.requestFrame(4, 2, 91n, { method: "no.such", params: {} }));
  await m.link.reply(4, 91n);
  const unknown = requests().at(-1)!.fields;
  assert.equal(unknown.op, "no.such");
  assert.equal(unknown.outcome, "unknown_method");
  assert.equal(unknown.model, "-");
  assert.equal(unknown.tokens, "-");
  assert.equal(unknown.corr, "91");
  assert.equal(requests().length, 2, "one line per request");
  // Both calls were counted under the bus door's label.
  const bus = syn.metrics.requests.samples().filter((s) => s.labels.door === "bus");
  assert.deepEqual(
    bus.map((s) => [s.labels.op, s.labels.outcome, s.value]).sort(),
    [["embed.batch", "ok", 1], ["unknown", "unknown_method", 1]],
  );
});

Deno.test("health.check is answered from cached state; Ping gets a Pong echoing ver, flags and corr", async () => {
  await using m = await startModule();
  await registerAndBind(m, 1, 1);
  const corr = m.corrs.next();
  await m.link.send({ type: FrameType.Request, corr, body: json({ op: "health.check" }) });
  const reply = await m.link.reply(0, corr);
  assert.equal(reply.type, FrameType.Response);
  assert.equal(reply.flags, 0);
  const body = bodyOf(reply);
  assert.equal(body.op, "health.check");
  assert.ok(["ok", "degraded"].includes(body.status), JSON.stringify(body));
  assert.equal(body.metrics.routes, 1);
  assert.equal(body.metrics.in_flight, 0);
  assert.equal(typeof body.metrics.module_generation, "number");
  await m.link.send({ type: FrameType.Ping, corr: 0xfffffffffffffffen, flags: 0x08 });
  const pong = await m.link.take((f) => f.type === FrameType.Pong, "the Pong");
  assert.equal(pong.corr, 0xfffffffffffffffen);
  assert.equal(pong.flags, 0x08);
  assert.equal(pong.body.byteLength, 0);
});

Deno.test("an unknown channel-0 op is answered unknown_control_op", async () => {
  await using m = await startModule();
  await registerAndBind(m, 1, 1);
  const corr = m.corrs.next();
  await m.link.send({ type: FrameType.Request, corr, body: json({ op: "route.poll" }) });
  const reply = await m.link.reply(0, corr);
  assert.equal(reply.type, FrameType.Error);
  assert.equal(bodyOf(reply).code, "unknown_control_op");
});

Deno.test("a flow-scoped route serves query operations and refuses anything else with flow_scope_refused", async () => {
  await using m = await startModule();
  await registerAndBind(m, 5, 1, { scope: { attributes: { flow_id: "flow-42" } } });
  await m.link.bindReady(m.corrs, 6, 1);
  await m.link.send(
    m.link.requestFrame(5, 1, 1n, { method: "models.list" }),
    m.link.requestFrame(5, 1, 2n, { method: "model.load", params: {} }),
    m.link.requestFrame(6, 1, 3n, { method: "model.load", params: {} }),
  );
  assert.equal((await m.link.reply(5, 1n)).type, FrameType.Response);
  const refused = bodyOf(await m.link.reply(5, 2n));
  assert.equal(refused.code, "flow_scope_refused");
  assert.match(refused.message, /flow-42/);
  // The same mutate method on an ordinary route is served (here: refused for its empty params).
  const served = bodyOf(await m.link.reply(6, 3n));
  assert.equal(served.result.error.code, "invalid_request");
  assert.match(served.result.error.message, /give a source/);
});

Deno.test("route Goodbye drops the route: its later frames are dropped", async () => {
  await using m = await startModule();
  await registerAndBind(m, 8, 1);
  await m.link.send({ type: FrameType.Goodbye, channel: 8, epoch: 1 });
  await m.link.send(m.link.requestFrame(8, 1, 9n, { method: "models.list" }));
  await m.link.ping(m.corrs.next());
  assert.equal(m.session().stats.routes, 0);
  assert.equal(m.session().stats.droppedFrames, 1);
  assert.ok(!m.link.seen.some((f) => f.channel === 8));
});

Deno.test("an idle route is reaped and closed with the module's own Goodbye on its (channel, epoch)", async () => {
  await using m = await startModule({ session: { routeIdleMs: 0, reapIntervalMs: 10 } });
  await registerAndBind(m, 11, 3);
  const bye = await m.link.take(
    (f) => f.type === FrameType.Goodbye && f.channel === 11,
    "the module's route Goodbye",
  );
  assert.equal(bye.epoch, 3);
  assert.equal(bye.body.byteLength, 0);
  assert.equal(m.session().stats.routes, 0);
});

Deno.test("catalog.update: sent with corr 2, then 3 (never reused), resolved by the daemon's Response", async () => {
  await using m = await startModule();
  await registerAndBind(m, 1, 1);
  const provides = [{
    role: "management_surface" as const,
    operations: [{ name: "embed.query", kind: "query" as const }],
    config_schema: {},
    observability: [],
    identity_scope: [],
  }];
  for (const corr of [2n, 3n]) {
    const done = m.session().updateCatalog(provides);
    const req = await m.link.take(
      (f) => f.type === FrameType.Request && f.channel === 0 && f.corr === corr,
      `catalog.update corr ${corr}`,
    );
    assert.equal(bodyOf(req).op, "catalog.update");
    assert.equal(req.flags, 0);
    await m.link.send({ type: FrameType.Response, corr, body: json({ op: "catalog.update" }) });
    await done;
  }
  const refused = m.session().updateCatalog(provides);
  await m.link.take((f) => f.corr === 4n && f.channel === 0, "catalog.update corr 4");
  await m.link.send({
    type: FrameType.Error,
    corr: 4n,
    body: json({ code: "catalog_update_frozen_field", message: "module_id is frozen" }),
  });
  await assert.rejects(refused, (e) => {
    isReason("catalog_update_refused")(e);
    assert.equal((e as SubcWireError).details?.code, "catalog_update_frozen_field");
    return true;
  });
});

Deno.test("catalog.update is not sent when HELLO_ACK's subc_ops does not offer it", async () => {
  await using m = await startModule();
  await m.link.hello();
  await m.link.send(
    m.link.ackFrame({ subc_ops: ["route.bind"], storage: storageFor(m.storePath) }),
  );
  await m.ready;
  await assert.rejects(m.session().updateCatalog([]), isReason("catalog_update_unsupported"));
});

Deno.test("the daemon's channel-0 Goodbye drains: requests in flight get their terminals, then the module ends 0", async () => {
  await using m = await startModule();
  await registerAndBind(m, 1, 1);
  const texts = Array.from({ length: 40 }, (_, i) => `text number ${i}`);
  await m.link.send(
    m.link.requestFrame(1, 1, 1n, { method: "embed.batch", params: { items: texts } }),
    { type: FrameType.Goodbye },
  );
  assert.deepEqual(await m.running, { reason: "goodbye" });
  const reply = m.link.seen.find((f) => f.channel === 1 && f.corr === 1n);
  assert.ok(reply !== undefined, "the request in flight was answered before the close");
  assert.equal(reply.type, FrameType.Response);
  await m.link.closed;
  // Only the daemon's own Goodbye: the module does not send one back.
  assert.ok(!m.link.seen.some((f) => f.type === FrameType.Goodbye));
});

Deno.test("a stop signal drains and ends with the module's own channel-0 Goodbye", async () => {
  await using m = await startModule();
  await registerAndBind(m, 1, 1);
  m.stop.abort();
  assert.deepEqual(await m.running, { reason: "stopped" });
  const bye = await m.link.take((f) => f.type === FrameType.Goodbye, "the module's Goodbye");
  assert.equal(bye.channel, 0);
  await m.link.closed;
});

Deno.test("the daemon going away fails the module with daemon_gone; the store opens again afterwards", async () => {
  await using m = await startModule();
  const syn = await registerAndBind(m, 1, 1);
  const generation = syn.moduleGeneration;
  await m.link.send(
    m.link.requestFrame(1, 1, 1n, { method: "embed.query", params: { text: "gone" } }),
  );
  m.link.close();
  await assert.rejects(m.running, (e) => {
    isReason("daemon_gone")(e);
    assert.match((e as Error).message, /the subc daemon went away/);
    return true;
  });
  assert.ok(syn.disposed);
  const next = await createSynapse({
    env: { XDG_DATA_HOME: `${m.dir}/data`, HOME: m.dir },
    storePath: m.storePath,
    leaseRoot: `${m.dir}/data/cortexkit/leases`,
    waitForModels: false,
    log: nullLog,
  });
  try {
    assert.equal(next.moduleGeneration, generation + 1);
  } finally {
    await next.dispose();
  }
});

Deno.test("a second module while one runs exits at the singleton lease, before connecting", async () => {
  await using m = await startModule();
  await registerAndBind(m, 1, 1);
  const env = {
    XDG_DATA_HOME: `${m.dir}/data`,
    XDG_CONFIG_HOME: `${m.dir}/config`,
    HOME: m.dir,
  };
  await assert.rejects(
    runSubcModule({
      connectionFile: m.daemon.connectionFile,
      synapseOptions: { env },
      launchNonce: null,
    }),
    (e) => {
      assert.equal((e as { code?: string }).code, "module_not_initialized");
      assert.match((e as Error).message, /singleton lease/);
      return true;
    },
  );
  assert.equal(m.daemon.links.length, 1, "it never connected");
});

Deno.test("a job running when the daemon goes away is module_restarted at the next boot, its pages kept", async () => {
  await using m = await startModule({
    config: { inline: { max_items: 8 }, jobs: { result_page_bytes: 65536 } },
  });
  const syn = await registerAndBind(m, 1, 1);
  await syn.modelsSettled;
  const items = Array.from({ length: 20_000 }, (_, i) => `text number ${i} with some words`);
  await m.link.send(m.link.requestFrame(1, 1, 1n, {
    method: "embed.batch",
    params: { items, request_key: "eof-job" },
  }));
  const job = bodyOf(await m.link.reply(1, 1n)).result;
  assert.ok(job.job_id, JSON.stringify(job));
  // Running, with a page committed and most of the 20,000 items still to go.
  let pages = 0;
  for (let corr = 2n; pages === 0; corr++) {
    await m.link.send(
      m.link.requestFrame(1, 1, corr, { method: "embed.result", params: { job_id: job.job_id } }),
    );
    const status = bodyOf(await m.link.reply(1, corr)).result;
    assert.equal(status.state, "running", JSON.stringify(status).slice(0, 300));
    pages = status.pages_available;
  }
  m.link.close();
  await assert.rejects(m.running, isReason("daemon_gone"));
  const next = await createSynapse({
    config: syn.config,
    env: { XDG_DATA_HOME: `${m.dir}/data`, HOME: m.dir },
    storePath: m.storePath,
    leaseRoot: `${m.dir}/data/cortexkit/leases`,
    waitForModels: false,
    log: nullLog,
  });
  try {
    assert.equal(next.inheritedJobs, 1);
    const after = await next.call("embed.result", { job_id: job.job_id });
    assert.equal(after.kind, "result");
    const result = after.body.result as {
      state: string;
      error: { code: string };
      pages_available: number;
    };
    assert.equal(result.state, "failed_transient");
    assert.equal(result.error.code, "module_restarted");
    assert.ok(result.pages_available >= pages);
  } finally {
    await next.dispose();
  }
});

Deno.test("no daemon at the connection file's endpoint: daemon_unreachable, loudly, and the lease is free again", async () => {
  const dir = await Deno.makeTempDir({ prefix: "synapse-subc-" });
  try {
    const closed = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    const port = closed.addr.port;
    closed.close();
    const path = `${dir}/run/subc-connection.json`;
    await writeConnectionFile(path, {
      schema: 1,
      wireVersion: 2,
      endpoints: [{ host: "127.0.0.1", port }],
      key: new Uint8Array(32).fill(7),
      daemonId: new Uint8Array(16).fill(9),
      pid: 1,
      daemonVer: "gone",
    });
    const env = { XDG_DATA_HOME: `${dir}/data`, XDG_CONFIG_HOME: `${dir}/config`, HOME: dir };
    for (let i = 0; i < 2; i++) {
      await assert.rejects(
        runSubcModule({ connectionFile: path, synapseOptions: { env }, launchNonce: null }),
        (e) => {
          isReason("daemon_unreachable")(e);
          assert.match(
            (e as Error).message,
            new RegExp(`nothing answers at 127\\.0\\.0\\.1:${port}`),
          );
          return true;
        },
      );
    }
    await assert.rejects(Deno.stat(`${dir}/data/cortexkit/synapse/store.db`), Deno.errors.NotFound);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
