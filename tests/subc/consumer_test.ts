/**
 * The bus consumer (lib/subc/consumer.ts) against a scripted daemon: what it sends, byte for
 * byte, and how it takes each answer (route.open retries, re-open on a stale route, Cancel, Ping,
 * a daemon that goes away). The end-to-end tests through the test peer to the real module are in
 * consumer_peer_test.ts.
 */
import assert from "node:assert/strict";
import {
  CONSUMER_HARNESS,
  defaultLaunchIdentity,
  RETRYABLE_OPEN_CODES,
  SubcCallError,
  SubcConsumer,
} from "../../lib/subc/consumer.ts";
import { CONTROL_FLAGS, DATA_FLAGS, FrameType } from "../../lib/subc/bus_envelope.ts";
import type { SubcFrame } from "../../lib/subc/bus_envelope.ts";
import { SubcWireError } from "../../lib/subc/errors.ts";
import { writeConnectionFile } from "../../lib/subc/connection_file.ts";
import { bodyJson, startScriptedDaemon } from "./_scripted_daemon.ts";
import type { Reply, ScriptedConn } from "./_scripted_daemon.ts";

const NONCE = "ab".repeat(32);

function isCode(code: string, phase?: string): (e: unknown) => boolean {
  return (e: unknown) => {
    assert.ok(e instanceof SubcCallError, `expected SubcCallError, got ${e}`);
    assert.equal(e.code, code, e.message);
    if (phase !== undefined) assert.equal(e.phase, phase);
    return true;
  };
}

/** A daemon that opens every route on channel 7 epoch 1 and echoes each request's params. */
function echoDaemon(
  extra?: (f: SubcFrame, conn: ScriptedConn, reply: Reply) => boolean | Promise<boolean>,
) {
  return startScriptedDaemon(async (f, conn, reply) => {
    if (extra !== undefined && await extra(f, conn, reply)) return;
    if (f.channel === 0 && f.type === FrameType.Request) return reply.routeOpened(f.corr, 7, 1);
    if (f.type === FrameType.Request) {
      const { method, params } = bodyJson(f) as { method: string; params: unknown };
      return reply.json(f, { result: { method, params } });
    }
  });
}

Deno.test("SubcConsumer sends route.open as subc §4 says: corr 1, channel 0, flags 0, the default identity, config []", async () => {
  await using daemon = await echoDaemon();
  await using consumer = await SubcConsumer.connect({
    connectionFile: daemon.connectionFile,
    env: {},
  });
  const route = await consumer.openRoute("synapse");
  assert.deepEqual([route.channel, route.epoch], [7, 1]);
  const open = daemon.received[0]!.frame;
  assert.deepEqual(
    [open.type, open.channel, open.epoch, open.corr, open.flags],
    [FrameType.Request, 0, 0, 1n, CONTROL_FLAGS],
  );
  assert.deepEqual(bodyJson(open), {
    op: "route.open",
    target: { kind: "management_surface", module_id: "synapse" },
    identity: {
      project_root: Deno.cwd(),
      harness: CONSUMER_HARNESS,
      session: `ck-synapse-${Deno.pid}`,
    },
    config: [],
  });
  assert.equal(consumer.attested, false);
});

Deno.test("SubcConsumer echoes SUBC_MODULE_ID and the launch nonce as consumer_identity when it runs under the daemon", async () => {
  await using daemon = await echoDaemon();
  const env = { SUBC_MODULE_ID: "caller-mod", SUBC_LAUNCH_NONCE: NONCE };
  await using consumer = await SubcConsumer.connect({
    connectionFile: daemon.connectionFile,
    env,
  });
  await consumer.openRoute("synapse");
  const body = bodyJson(daemon.received[0]!.frame) as Record<string, unknown>;
  assert.deepEqual(body.consumer_identity, { module_id: "caller-mod", launch_nonce: NONCE });
  assert.equal(consumer.attested, true);
  // An inherited descriptor that is not ours is no proof: the route opens unattested.
  assert.equal(defaultLaunchIdentity({ SUBC_LAUNCH_NONCE_FD: "3:x" }), undefined);
  assert.equal(defaultLaunchIdentity({ SUBC_LAUNCH_NONCE: "not-hex" }), undefined);
});

Deno.test("SubcRoute.call sends {method, params} with fresh corrs and flags 0x02; concurrent calls get their own answers", async () => {
  const held: { f: SubcFrame; reply: Reply }[] = [];
  await using daemon = await echoDaemon((f, _conn, reply) => {
    if (f.channel !== 0 && f.type === FrameType.Request) {
      held.push({ f, reply });
      if (held.length === 3) {
        // Answer in reverse order: the consumer matches terminals by corr.
        for (const { f, reply } of held.toReversed()) {
          const { params } = bodyJson(f) as { params: { text: string } };
          void reply.json(f, { result: { echo: params.text } });
        }
      }
      return true;
    }
    return false;
  });
  await using consumer = await SubcConsumer.connect({ connectionFile: daemon.connectionFile });
  const route = await consumer.openRoute();
  const answers = await Promise.all(
    ["a", "b", "c"].map((text) => route.call("embed.query", { text })),
  );
  assert.deepEqual(answers, [
    { result: { echo: "a" } },
    { result: { echo: "b" } },
    { result: { echo: "c" } },
  ]);
  const requests = daemon.received.filter((r) => r.frame.channel !== 0).map((r) => r.frame);
  assert.deepEqual(requests.map((f) => f.corr), [2n, 3n, 4n]);
  for (const f of requests) {
    assert.deepEqual([f.type, f.channel, f.epoch, f.flags], [FrameType.Request, 7, 1, DATA_FLAGS]);
  }
  assert.deepEqual(bodyJson(requests[0]!), { method: "embed.query", params: { text: "a" } });
  assert.equal(consumer.stats.terminals.response, 3);
  assert.equal(consumer.inFlight, 0);
});

Deno.test("SubcRoute.call: an Error terminal rejects with its code, detail and origin; params default to {}", async () => {
  await using daemon = await echoDaemon((f, _c, reply) => {
    if (f.channel !== 0 && f.type === FrameType.Request) {
      const { method, params } = bodyJson(f) as { method: string; params: unknown };
      assert.deepEqual(params, {});
      void reply.error(f, method === "nope" ? "unknown_method" : "module_reloading", {
        daemon: method !== "nope",
        detail: { method },
      });
      return true;
    }
    return false;
  });
  await using consumer = await SubcConsumer.connect({ connectionFile: daemon.connectionFile });
  const route = await consumer.openRoute();
  await assert.rejects(route.call("nope"), (e) => {
    assert.ok(e instanceof SubcCallError);
    assert.deepEqual([e.code, e.origin, e.phase, e.detail], [
      "unknown_method",
      "module",
      "request",
      { method: "nope" },
    ]);
    assert.equal(e.remoteMessage, "scripted unknown_method");
    return true;
  });
  await assert.rejects(route.call("models.list"), (e) => {
    assert.ok(e instanceof SubcCallError);
    assert.deepEqual([e.code, e.origin], ["module_reloading", "daemon"]);
    return true;
  });
  assert.deepEqual(consumer.stats.errorsByCode, { unknown_method: 1, module_reloading: 1 });
});

Deno.test("openRoute retries each retryable refusal with backoff until the route opens", async () => {
  for (const code of RETRYABLE_OPEN_CODES) {
    let opens = 0;
    await using daemon = await startScriptedDaemon((f, _c, reply) => {
      if (f.channel === 0 && f.type === FrameType.Request) {
        opens++;
        return opens < 3 ? reply.controlError(f.corr, code) : reply.routeOpened(f.corr, 2, 9);
      }
    });
    await using consumer = await SubcConsumer.connect({
      connectionFile: daemon.connectionFile,
      openRetryBaseMs: 1,
      openRetryMaxMs: 4,
    });
    const route = await consumer.openRoute();
    assert.deepEqual([route.channel, route.epoch, opens], [2, 9, 3], code);
    // Each retry is a fresh corr of the connection's counter.
    assert.deepEqual(daemon.received.map((r) => r.frame.corr), [1n, 2n, 3n], code);
    assert.equal(consumer.stats.opensSent, 3);
  }
});

Deno.test("openRoute: a final code (or an unknown one) is thrown at once, without a retry", async () => {
  for (const code of ["route_rejected", "reserved_module", "some_future_code"]) {
    await using daemon = await startScriptedDaemon((f, _c, reply) => {
      if (f.channel === 0) return reply.controlError(f.corr, code, { why: code });
    });
    await using consumer = await SubcConsumer.connect({ connectionFile: daemon.connectionFile });
    await assert.rejects(consumer.openRoute("synapse"), (e) => {
      assert.ok(e instanceof SubcCallError);
      assert.deepEqual([e.code, e.phase, e.origin, e.attempts, e.detail], [
        code,
        "open",
        "daemon",
        1,
        { why: code },
      ]);
      assert.equal(e.retryable, false);
      return true;
    });
    assert.equal(consumer.stats.opensSent, 1);
  }
});

Deno.test("openRoute: a retryable refusal that lasts past the deadline is thrown with the number of tries", async () => {
  await using daemon = await startScriptedDaemon((f, _c, reply) => {
    if (f.channel === 0) return reply.controlError(f.corr, "module_warming");
  });
  await using consumer = await SubcConsumer.connect({
    connectionFile: daemon.connectionFile,
    openRetryBaseMs: 5,
    openRetryMaxMs: 20,
    openDeadlineMs: 300,
  });
  await assert.rejects(consumer.openRoute(), (e) => {
    assert.ok(e instanceof SubcCallError);
    assert.equal(e.code, "module_warming");
    assert.ok(e.attempts > 1, `attempts ${e.attempts}`);
    assert.equal(e.attempts, consumer.stats.opensSent);
    assert.match(e.message, /after \d+ tries/);
    return true;
  });
});

Deno.test("openRoute: no reply within the deadline is route_open_timeout; an abort rejects with its reason", async () => {
  await using daemon = await startScriptedDaemon(() => {}); // never answers
  await using consumer = await SubcConsumer.connect({
    connectionFile: daemon.connectionFile,
    openDeadlineMs: 50,
  });
  await assert.rejects(consumer.openRoute(), isCode("route_open_timeout", "open"));
  const ac = new AbortController();
  const opening = consumer.openRoute("synapse", { signal: ac.signal, deadlineMs: 60_000 });
  await daemon.until(() => daemon.received.length === 2, "the second route.open");
  ac.abort(new Error("stop"));
  await assert.rejects(opening, /stop/);
});

for (const code of ["stale_route_epoch", "unknown_channel"]) {
  Deno.test(`SubcRoute: ${code} re-opens the route once and resends the request once`, async () => {
    let opens = 0;
    await using daemon = await startScriptedDaemon((f, _c, reply) => {
      if (f.channel === 0 && f.type === FrameType.Request) {
        opens++;
        return reply.routeOpened(f.corr, opens === 1 ? 3 : 4, opens); // (3,1), then (4,2)
      }
      if (f.type === FrameType.Request) {
        if (f.channel === 3) return reply.error(f, code, { daemon: true });
        return reply.json(f, { result: { on: [f.channel, f.epoch] } });
      }
    });
    await using consumer = await SubcConsumer.connect({ connectionFile: daemon.connectionFile });
    const route = await consumer.openRoute();
    // Two concurrent calls hit the stale route: they share ONE re-open.
    const answers = await Promise.all([route.call("a"), route.call("b")]);
    assert.deepEqual(answers, [{ result: { on: [4, 2] } }, { result: { on: [4, 2] } }]);
    assert.deepEqual([route.channel, route.epoch], [4, 2]);
    assert.equal(opens, 2);
    assert.equal(consumer.stats.reopens, 1);
    assert.equal(consumer.stats.requestsSent, 4);
  });
}

Deno.test("SubcRoute: a second stale answer after the re-open is returned, not retried again", async () => {
  let opens = 0;
  await using daemon = await startScriptedDaemon((f, _c, reply) => {
    if (f.channel === 0) return reply.routeOpened(f.corr, 3, ++opens);
    if (f.type === FrameType.Request) return reply.error(f, "stale_route_epoch", { daemon: true });
  });
  await using consumer = await SubcConsumer.connect({ connectionFile: daemon.connectionFile });
  const route = await consumer.openRoute();
  await assert.rejects(route.call("x"), isCode("stale_route_epoch", "request"));
  assert.equal(opens, 2);
  assert.equal(consumer.stats.requestsSent, 2);
});

Deno.test("SubcRoute: an aborted call sends Cancel (corr = the request's), waits for the terminal, then rejects with the reason", async () => {
  await using daemon = await echoDaemon((f, _c, reply) => {
    if (f.type === FrameType.Cancel) {
      const req = daemon.received.find((r) =>
        r.frame.type === FrameType.Request && r.frame.corr === f.corr
      );
      void reply.error(req!.frame, "cancelled");
      return true;
    }
    return f.channel !== 0 && f.type === FrameType.Request; // hold requests: no answer
  });
  await using consumer = await SubcConsumer.connect({ connectionFile: daemon.connectionFile });
  const route = await consumer.openRoute();
  const ac = new AbortController();
  const call = route.call("microllm.oneshot", { prompt: "x", max_tokens: 8 }, {
    signal: ac.signal,
  });
  await daemon.until(() => daemon.received.length === 2, "the request");
  ac.abort(new DOMException("user stop", "AbortError"));
  await assert.rejects(call, (e) => e instanceof DOMException && e.message === "user stop");
  const cancel = daemon.received[2]!.frame;
  assert.deepEqual(
    [cancel.type, cancel.channel, cancel.epoch, cancel.corr, cancel.body.byteLength],
    [FrameType.Cancel, 7, 1, 2n, 0],
  );
  // The terminal was awaited (it is what frees the module's slot and the daemon's credit).
  assert.deepEqual(consumer.stats.errorsByCode, { cancelled: 1 });
  assert.equal(consumer.stats.unmatchedTerminals, 0);
  assert.equal(consumer.inFlight, 0);
});

Deno.test("SubcRoute: timeoutMs cancels like an abort; a terminal that never comes is given up after the grace", async () => {
  await using daemon = await echoDaemon((f) => f.channel !== 0); // holds requests, ignores Cancel
  await using consumer = await SubcConsumer.connect({
    connectionFile: daemon.connectionFile,
    cancelGraceMs: 20,
  });
  const route = await consumer.openRoute();
  await assert.rejects(route.call("x", {}, { timeoutMs: 30 }), (e) => {
    assert.ok(e instanceof DOMException, String(e));
    assert.equal(e.name, "TimeoutError");
    return true;
  });
  assert.equal(consumer.stats.cancelsSent, 1);
  assert.equal(consumer.inFlight, 0);
});

Deno.test("SubcConsumer answers a Ping with a Pong echoing its flags and corr", async () => {
  await using daemon = await echoDaemon();
  await using consumer = await SubcConsumer.connect({ connectionFile: daemon.connectionFile });
  await consumer.openRoute();
  await daemon.connections[0]!.send({ type: FrameType.Ping, corr: 77n, flags: 0x02 });
  await daemon.until(() => daemon.received.some((r) => r.frame.type === FrameType.Pong), "a Pong");
  const pong = daemon.received.find((r) => r.frame.type === FrameType.Pong)!.frame;
  assert.deepEqual([pong.corr, pong.flags, pong.channel, pong.body.byteLength], [77n, 0x02, 0, 0]);
});

Deno.test("SubcConsumer.close says Goodbye on each open route (no body, corr 0, flags 0), once", async () => {
  await using daemon = await echoDaemon();
  const consumer = await SubcConsumer.connect({ connectionFile: daemon.connectionFile });
  await consumer.openRoute();
  await consumer.close();
  await consumer.close();
  await daemon.until(() => daemon.received.length === 2, "the Goodbye");
  const bye = daemon.received[1]!.frame;
  assert.deepEqual(
    [bye.type, bye.channel, bye.epoch, bye.corr, bye.flags, bye.body.byteLength],
    [FrameType.Goodbye, 7, 1, 0n, 0, 0],
  );
  assert.equal(consumer.closed, true);
});

Deno.test("SubcRoute.close sends its Goodbye; the route cannot be used after", async () => {
  await using daemon = await echoDaemon();
  await using consumer = await SubcConsumer.connect({ connectionFile: daemon.connectionFile });
  const route = await consumer.openRoute();
  await route.close();
  await daemon.until(() => daemon.received.length === 2, "the Goodbye");
  assert.equal(daemon.received[1]!.frame.type, FrameType.Goodbye);
  await assert.rejects(route.call("x"), isCode("consumer_closed"));
  await consumer.close();
  assert.equal(daemon.received.filter((r) => r.frame.type === FrameType.Goodbye).length, 1);
});

Deno.test("SubcRoute.close while a call waits: Goodbye sent, the call rejects with route_closed (no terminal will come)", async () => {
  await using daemon = await echoDaemon((f) => f.channel !== 0); // holds requests
  await using consumer = await SubcConsumer.connect({ connectionFile: daemon.connectionFile });
  const route = await consumer.openRoute();
  const call = route.call("x");
  await daemon.until(
    () => daemon.received.some((r) => r.frame.channel === 7 && r.frame.type === FrameType.Request),
    "the request",
  );
  await route.close();
  await assert.rejects(call, isCode("route_closed", "request"));
  assert.equal(consumer.inFlight, 0);
});

Deno.test("SubcConsumer: a daemon that goes away fails waiting calls with connection_lost, and later calls too", async () => {
  await using daemon = await echoDaemon((f) => f.channel !== 0);
  await using consumer = await SubcConsumer.connect({ connectionFile: daemon.connectionFile });
  const route = await consumer.openRoute();
  const call = route.call("x");
  await daemon.until(() => daemon.received.length === 2, "the request");
  daemon.connections[0]!.close();
  await assert.rejects(call, isCode("connection_lost"));
  assert.equal(consumer.closed, true);
  await assert.rejects(route.call("y"), isCode("connection_lost", "request"));
  await assert.rejects(consumer.openRoute(), isCode("connection_lost", "open"));
});

Deno.test("SubcConsumer: the daemon's Goodbye on a route fails its waiting call with route_closed; the next call re-opens", async () => {
  let opens = 0;
  await using daemon = await startScriptedDaemon((f, conn, reply) => {
    if (f.channel === 0) return reply.routeOpened(f.corr, 5, ++opens);
    if (f.type === FrameType.Request && opens === 1) {
      return conn.send({ type: FrameType.Goodbye, channel: 5, epoch: 1 });
    }
    if (f.type === FrameType.Request) return reply.json(f, { result: "ok" });
  });
  await using consumer = await SubcConsumer.connect({ connectionFile: daemon.connectionFile });
  const route = await consumer.openRoute();
  await assert.rejects(route.call("x"), isCode("route_closed"));
  assert.equal(route.state, "gone");
  assert.deepEqual(await route.call("y"), { result: "ok" });
  assert.deepEqual([route.state, route.epoch, opens], ["open", 2, 2]);
});

Deno.test("SubcConsumer.connect: nothing listening is daemon_unreachable naming the endpoint and file", async () => {
  const dir = await Deno.makeTempDir({ prefix: "subc-dead-" });
  try {
    // A file whose endpoint nobody listens on (what a crashed daemon leaves behind).
    const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    const port = listener.addr.port;
    listener.close();
    const file = `${dir}/subc-connection.json`;
    await writeConnectionFile(file, {
      schema: 1,
      endpoints: [{ host: "127.0.0.1", port }],
      key: new Uint8Array(32).fill(1),
      daemonId: new Uint8Array(16).fill(2),
      pid: 1,
      daemonVer: "gone",
    });
    await assert.rejects(SubcConsumer.connect({ connectionFile: file }), (e) => {
      assert.ok(e instanceof SubcCallError);
      assert.deepEqual([e.code, e.phase], ["daemon_unreachable", "connect"]);
      assert.ok(e.message.includes(`127.0.0.1:${port}`) && e.message.includes(file), e.message);
      return true;
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("SubcConsumer.connect: the connection file is found by the ladder, and refused as the wire layer refuses it", async () => {
  await using daemon = await echoDaemon();
  // SUBC_CONNECTION_FILE, exclusive.
  await using viaEnv = await SubcConsumer.connect({
    env: { SUBC_CONNECTION_FILE: daemon.connectionFile },
  });
  assert.equal(viaEnv.connectionFile, daemon.connectionFile);
  await Deno.chmod(daemon.connectionFile, 0o644);
  await assert.rejects(
    SubcConsumer.connect({ connectionFile: daemon.connectionFile }),
    (e) => e instanceof SubcWireError && e.reason === "connection_file_insecure_mode",
  );
});
