/**
 * The in-test subc daemon (tests/subc/_peer.ts) against the same vectors as the module side, and
 * against a scripted module written here with the wire library, frame by frame. No timing asserts:
 * every wait is on an event, with a hang guard.
 */
import assert from "node:assert/strict";
import { encodeAuthMessage } from "../../lib/subc/auth.ts";
import { readConnectionFile } from "../../lib/subc/connection_file.ts";
import {
  encodeControlBody,
  parseErrorBody,
  parseHelloAck,
  parseRouteBind,
} from "../../lib/subc/control.ts";
import type { RouteBind } from "../../lib/subc/control.ts";
import {
  DATA_FLAGS,
  encodeFrame,
  FLAG_DAEMON_ORIGIN,
  FrameType,
  pongFor,
} from "../../lib/subc/bus_envelope.ts";
import type { SubcFrame } from "../../lib/subc/bus_envelope.ts";
import { SubcWireError } from "../../lib/subc/errors.ts";
import {
  connectEndpoint,
  CreditWindow,
  EndpointError,
  jsonBody,
  PeerError,
  startPeer,
  testManifest,
} from "./_peer.ts";
import type { Endpoint, Peer, PeerFrameEvent } from "./_peer.ts";

interface FrameVector {
  name: string;
  type: number;
  channel: number;
  epoch: number;
  corr: number;
  flags: number;
  body_utf8: string;
  hex: string;
}

const VECTORS: {
  auth: Record<string, string>;
  frames: FrameVector[];
  must_reject: { why: string; hex: string }[];
} = JSON.parse(await Deno.readTextFile(new URL("../vectors/subc_wire.json", import.meta.url)));

function frameVector(name: string): FrameVector {
  const v = VECTORS.frames.find((f) => f.name === name);
  assert.ok(v, `vector ${name}`);
  return v;
}

/** The reason each `must_reject` vector is refused with (as tests/subc/bus_envelope_test.ts). */
const REJECT_REASON: Record<string, string> = {
  "ver != 2": "unsupported_version",
  "unknown type 12": "unknown_frame_type",
  "priority bits = 3": "reserved_priority_bits",
  "channel 0 with epoch != 0": "nonzero_epoch_on_control_channel",
  "Ping with non-empty body": "pure_header_frame_with_body",
  "len over 64 MiB": "frame_too_large",
};

const hex = (bytes: Uint8Array): string => bytes.toHex();
const json = (body: unknown): Uint8Array => encodeControlBody(body as object);

function isControlRequest(op: string): (f: SubcFrame) => boolean {
  return (f) => f.type === FrameType.Request && f.channel === 0 && opOf(f) === op;
}

function opOf(f: SubcFrame): unknown {
  try {
    return (jsonBody(f) as { op?: unknown }).op;
  } catch {
    return undefined;
  }
}

function assertNoViolations(peer: Peer): void {
  assert.deepEqual(peer.stats().violations, []);
}

/** A scripted module, registered with `testManifest(options)`. */
async function registeredModule(
  peer: Peer,
  options: Parameters<typeof testManifest>[0] = {},
  helloOptions: Parameters<Endpoint["hello"]>[1] = {},
): Promise<Endpoint> {
  const module = await connectEndpoint(peer, { role: "module" });
  const { frame } = await module.hello(testManifest(options), helloOptions);
  assert.equal(frame.type, FrameType.HelloAck);
  return module;
}

/** The scripted module claims the next route.bind and acks it. */
async function ackNextBind(module: Endpoint): Promise<RouteBind & { corr: bigint }> {
  const f = await module.next(isControlRequest("route.bind"), { what: "route.bind" });
  assert.equal(f.flags, 0);
  await module.send({ type: FrameType.Response, corr: f.corr, body: json({ op: "route.bind" }) });
  return { ...parseRouteBind(f.body), corr: f.corr };
}

/** A client opens a route that the scripted module binds. */
async function openBound(
  client: Endpoint,
  module: Endpoint,
): Promise<{ route: { channel: number; epoch: number }; bind: RouteBind & { corr: bigint } }> {
  const opening = client.openRoute();
  const bind = await ackNextBind(module);
  return { route: await opening, bind };
}

/** Reads exactly `n` bytes of a raw socket, or null at end of stream. */
async function readExact(conn: Deno.Conn, n: number): Promise<Uint8Array | null> {
  const buf = new Uint8Array(n);
  let at = 0;
  while (at < n) {
    const got = await conn.read(buf.subarray(at));
    if (got === null) return null;
    at += got;
  }
  return buf;
}

async function readAuthMessage(conn: Deno.Conn): Promise<Record<string, unknown>> {
  const prefix = await readExact(conn, 4);
  assert.ok(prefix, "an auth message");
  const len = new DataView(prefix.buffer).getUint32(0, true);
  return JSON.parse(new TextDecoder().decode((await readExact(conn, len))!));
}

async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  let at = 0;
  while (at < bytes.byteLength) at += await conn.write(bytes.subarray(at));
}

// ---------------------------------------------------------------------------------------------
// Connection file and the vectors
// ---------------------------------------------------------------------------------------------

Deno.test("startPeer() publishes its connection file 0600 in a 0700 directory under <dataHome>/cortexkit/run", async () => {
  const peer = await startPeer();
  const file = peer.connectionFile;
  assert.equal(file, `${peer.dataHome}/cortexkit/run/subc-connection.json`);
  assert.equal((await Deno.stat(file)).mode! & 0o777, 0o600);
  assert.equal((await Deno.stat(`${peer.dataHome}/cortexkit/run`)).mode! & 0o777, 0o700);
  const info = await readConnectionFile(file);
  assert.deepEqual(info.endpoints, [{ host: "127.0.0.1", port: peer.port }]);
  assert.equal(info.wireVersion, 2);
  assert.equal(info.key.byteLength, 32);
  assert.deepEqual(info.key, peer.info.key);
  assert.deepEqual(info.daemonId, peer.info.daemonId);
  assert.equal(info.pid, Deno.pid);
  await peer.close();
  await assert.rejects(Deno.stat(peer.dataHome), Deno.errors.NotFound);
});

Deno.test("two peers publish different keys and daemon ids", async () => {
  await using a = await startPeer();
  await using b = await startPeer();
  assert.notDeepEqual(a.info.key, b.info.key);
  assert.notDeepEqual(a.info.daemonId, b.info.daemonId);
});

Deno.test("the peer's serverHandshake reproduces the auth vectors, accepts their client proof, and frames follow (Ping vector → Pong)", async () => {
  const a = VECTORS.auth;
  await using peer = await startPeer({
    key: Uint8Array.fromHex(a.key_hex!),
    daemonId: Uint8Array.fromHex(a.daemon_id_hex!),
    serverNonce: Uint8Array.fromHex(a.server_nonce_hex!),
  });
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: peer.port });
  try {
    await writeAll(
      conn,
      encodeAuthMessage({
        client_nonce: [...Uint8Array.fromHex(a.client_nonce_hex!)],
        role: "client",
      }),
    );
    const proof = await readAuthMessage(conn);
    assert.equal(hex(Uint8Array.from(proof.server_proof as number[])), a.server_proof_hex);
    assert.equal(hex(Uint8Array.from(proof.daemon_id as number[])), a.daemon_id_hex);
    assert.equal(hex(Uint8Array.from(proof.server_nonce as number[])), a.server_nonce_hex);
    await writeAll(
      conn,
      encodeAuthMessage({ client_auth: [...Uint8Array.fromHex(a.client_proof_hex!)] }),
    );
    const ping = frameVector("ping_corr3");
    await writeAll(conn, Uint8Array.fromHex(ping.hex));
    const pong = await readExact(conn, 21);
    const expected = Uint8Array.fromHex(ping.hex);
    expected[5] = FrameType.Pong; // the Ping's header with type Pong: ver, flags, corr echoed
    assert.equal(hex(pong!), hex(expected));
    assert.deepEqual(peer.stats().authFailures, []);
  } finally {
    conn.close();
  }
});

Deno.test("the peer refuses the vectors' client proof off by one bit (invalid_client_auth) and closes the socket", async () => {
  const a = VECTORS.auth;
  await using peer = await startPeer({
    key: Uint8Array.fromHex(a.key_hex!),
    daemonId: Uint8Array.fromHex(a.daemon_id_hex!),
    serverNonce: Uint8Array.fromHex(a.server_nonce_hex!),
  });
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: peer.port });
  try {
    await writeAll(
      conn,
      encodeAuthMessage({
        client_nonce: [...Uint8Array.fromHex(a.client_nonce_hex!)],
        role: "client",
      }),
    );
    await readAuthMessage(conn);
    const wrong = Uint8Array.fromHex(a.client_proof_hex!);
    wrong[31]! ^= 0x01;
    await writeAll(conn, encodeAuthMessage({ client_auth: [...wrong] }));
    assert.equal(await readExact(conn, 1), null, "the peer closes the connection");
    await peer.until(() => peer.stats().authFailures.length === 1);
    assert.deepEqual(peer.stats().authFailures, [{ connId: 1, reason: "invalid_client_auth" }]);
  } finally {
    conn.close();
  }
});

Deno.test("every must_reject vector closes the connection that sent it, client or module, with its reason", async () => {
  assert.equal(VECTORS.must_reject.length, Object.keys(REJECT_REASON).length);
  await using peer = await startPeer({ modules: [] });
  for (const v of VECTORS.must_reject) {
    // A client (known as one after its first frame, a Ping).
    await using client = await connectEndpoint(peer);
    await client.send({ type: FrameType.Ping, corr: 1n });
    await client.next((f) => f.type === FrameType.Pong);
    await client.sendRaw(Uint8Array.fromHex(v.hex));
    assert.equal((await client.ended).reason, "eof", v.why);
    // A registered module.
    await using module = await registeredModule(peer, { moduleId: "m" });
    await module.sendRaw(Uint8Array.fromHex(v.hex));
    assert.equal((await module.ended).reason, "eof", v.why);
    await peer.waitModuleGone("m");
    const rejections = peer.stats().wireRejections.slice(-2);
    assert.deepEqual(rejections.map((r) => [r.kind, r.reason]), [
      ["client", REJECT_REASON[v.why]],
      ["module", REJECT_REASON[v.why]],
    ], v.why);
  }
  assertNoViolations(peer);
});

Deno.test("hello_min (a manifest of module_id alone) is refused with invalid_manifest on corr 1, channel 0, flags 0, and the connection closed", async () => {
  await using peer = await startPeer();
  await using module = await connectEndpoint(peer);
  await module.sendRaw(Uint8Array.fromHex(frameVector("hello_min").hex));
  const err = await module.next();
  assert.equal(err.type, FrameType.Error);
  assert.deepEqual([err.channel, err.epoch, err.corr, err.flags], [0, 0, 1n, 0]);
  const body = parseErrorBody(err.body);
  assert.equal(body.code, "invalid_manifest");
  assert.equal((await module.ended).reason, "eof");
  assert.equal(peer.module("synapse"), undefined);
  assert.deepEqual(peer.stats().helloRefusals, { invalid_manifest: 1 });
});

Deno.test("frame vectors travel both ways through routes byte for byte: the subscription Request, and Cancel and Response at channel 5 epoch 9", async () => {
  await using peer = await startPeer();
  await using module = await registeredModule(peer);
  await using client = await connectEndpoint(peer);
  // Slots 1-4 at epoch 1, then slot 5 opened and closed eight times: the ninth bind is (5, 9),
  // on the module connection and on the client connection alike.
  for (let i = 1; i <= 4; i++) {
    const { route, bind } = await openBound(client, module);
    assert.deepEqual([route.channel, route.epoch, bind.route_channel, bind.epoch], [i, 1, i, 1]);
  }
  for (let epoch = 1; epoch <= 8; epoch++) {
    const { route, bind } = await openBound(client, module);
    assert.deepEqual([route.channel, route.epoch, bind.route_channel, bind.epoch], [
      5,
      epoch,
      5,
      epoch,
    ]);
    await client.send({ type: FrameType.Goodbye, channel: 5, epoch });
    const bye = await module.next((f) => f.type === FrameType.Goodbye);
    assert.deepEqual([bye.channel, bye.epoch, bye.corr, bye.flags], [5, epoch, 0n, 0]);
  }
  const { route, bind } = await openBound(client, module);
  assert.deepEqual([route.channel, route.epoch, bind.route_channel, bind.epoch], [5, 9, 5, 9]);
  // The daemon's corr is monotonic per endpoint from 1: 13 binds so far.
  assert.equal(bind.corr, 13n);

  const sub = frameVector("request_subscription_bit");
  await client.sendRaw(Uint8Array.fromHex(sub.hex));
  const relayed = await module.next((f) => f.type === FrameType.Request && f.channel === 3);
  assert.equal(hex(encodeFrame(relayed)), sub.hex);
  await module.send({ ...relayed, type: FrameType.Response, flags: DATA_FLAGS, body: json({}) });
  const subReply = await client.next((f) => f.channel === 3 && f.corr === 5n);
  assert.equal(subReply.type, FrameType.Response);

  await client.send({
    type: FrameType.Request,
    channel: 5,
    epoch: 9,
    corr: 42n,
    flags: DATA_FLAGS,
    body: json({ method: "echo", params: {} }),
  });
  await module.next((f) => f.type === FrameType.Request && f.corr === 42n);
  await client.sendRaw(Uint8Array.fromHex(frameVector("cancel_ch5_ep9_corr42").hex));
  const cancel = await module.next((f) => f.type === FrameType.Cancel);
  assert.equal(hex(encodeFrame(cancel)), frameVector("cancel_ch5_ep9_corr42").hex);
  const r5 = () => peer.routes().find((r) => r.clientChannel === 5)!;
  assert.equal(r5().creditsInUse, 1, "Cancel releases nothing");
  await module.sendRaw(Uint8Array.fromHex(frameVector("response_ch5_ep9_corr42").hex));
  const response = await client.next((f) => f.channel === 5 && f.corr === 42n);
  assert.equal(hex(encodeFrame(response)), frameVector("response_ch5_ep9_corr42").hex);
  assert.equal(r5().creditsInUse, 0);
  assert.equal(r5().terminalsByCorr.get(42n), 1);

  // The Goodbye vector (channel 0, corr 7) from the client: every route is closed at the module.
  await client.sendRaw(Uint8Array.fromHex(frameVector("goodbye_control_corr7").hex));
  const byes: number[] = [];
  for (let i = 0; i < 5; i++) {
    byes.push((await module.next((f) => f.type === FrameType.Goodbye)).channel);
  }
  assert.deepEqual(byes.sort(), [1, 2, 3, 4, 5]);
  assert.equal((await client.ended).reason, "eof");
  assert.deepEqual(peer.routes(), []);
  assert.equal(peer.stats().creditsLeaked, 0);
  assertNoViolations(peer);
});

// ---------------------------------------------------------------------------------------------
// HELLO / HELLO_ACK
// ---------------------------------------------------------------------------------------------

Deno.test("HELLO → HELLO_ACK: the first frame the module sees, echoing corr 1 on channel 0 with flags 0; storage, subc_ops and capabilities; the manifest is recorded", async () => {
  const events: PeerFrameEvent[] = [];
  await using peer = await startPeer({ onFrame: (e) => events.push(e) });
  await using module = await connectEndpoint(peer, { role: "module" });
  const nonce = "ab".repeat(32);
  const { frame, body } = await module.hello(testManifest(), { launchNonce: nonce });
  assert.equal(module.received[0], frame, "HELLO_ACK is the first frame the module sees");
  assert.deepEqual([frame.type, frame.channel, frame.epoch, frame.corr, frame.flags], [
    FrameType.HelloAck,
    0,
    0,
    1n,
    0,
  ]);
  const ack = parseHelloAck(body);
  assert.deepEqual(body, {
    negotiated_ver: 2,
    subc_ops: ["catalog.update", "route.status"],
    subc_capabilities: ["manifest_registration_v1"],
    storage: {
      module_id: "synapse",
      storage_namespace: "default",
      isolation: { kind: "module" },
      backend: { backend: "sqlite", path: `${peer.dataHome}/cortexkit/synapse/store.db` },
    },
  });
  assert.equal(ack.negotiated_ver, 2);
  const info = await peer.waitModule();
  assert.deepEqual(info.manifest, testManifest());
  assert.equal(info.state, "registered");
  assert.equal(info.concurrency, "module_managed");
  assert.equal(info.window, 32);
  assert.deepEqual(info.controlOps, ["health.check"]);
  assert.equal(info.launchNonce, nonce);
  // The frame tap saw the HELLO come in and the ack go out, tagged with the connection's kind.
  assert.deepEqual(
    events.map((e) => [e.direction, e.frame.type]),
    [["in", FrameType.Hello], ["out", FrameType.HelloAck]],
  );
  assertNoViolations(peer);
});

Deno.test("HELLO_ACK options: no storage section, a machine id, and negotiated_ver 1 (which a module must refuse)", async () => {
  {
    await using peer = await startPeer({ storage: false, machineId: "machine-1" });
    await using module = await connectEndpoint(peer);
    const { body } = await module.hello(testManifest());
    assert.equal((body as Record<string, unknown>).storage, undefined);
    assert.equal((body as Record<string, unknown>).machine_id, "machine-1");
  }
  {
    await using peer = await startPeer({ negotiatedVer: 1 });
    await using module = await connectEndpoint(peer);
    const { frame, body } = await module.hello(testManifest());
    assert.equal(frame.type, FrameType.HelloAck);
    assert.equal((body as Record<string, unknown>).negotiated_ver, 1);
    assert.throws(
      () => parseHelloAck(body),
      (e) => e instanceof SubcWireError && e.reason === "unsupported_negotiated_version",
    );
  }
});

Deno.test("HELLO refusals as the daemon answers them: version_unsupported, invalid_hello, invalid_manifest naming the field, duplicate_module_id", async () => {
  await using peer = await startPeer();
  const refusal = async (send: (e: Endpoint) => Promise<unknown>) => {
    await using e = await connectEndpoint(peer);
    await send(e);
    // hello() claims the answer itself; a raw send leaves it for us.
    const f = e.received.find((f) => f.channel === 0 && f.corr === 1n) ??
      await e.next((f) => f.channel === 0 && f.corr === 1n);
    assert.equal(f.type, FrameType.Error);
    assert.equal(f.flags, 0);
    assert.equal((await e.ended).reason, "eof");
    return parseErrorBody(f.body);
  };
  assert.equal(
    (await refusal((e) => e.hello(testManifest(), { protocolVer: 3 }))).code,
    "version_unsupported",
  );
  assert.equal(
    (await refusal((e) => e.send({ type: FrameType.Hello, corr: 1n, body: json([1, 2]) }))).code,
    "invalid_hello",
  );
  const bad = { ...testManifest(), trust_tier: "trusted" };
  const body = await refusal((e) => e.hello(bad));
  assert.equal(body.code, "invalid_manifest");
  assert.deepEqual(body.detail, { field: "manifest.trust_tier" });
  await using _first = await registeredModule(peer);
  assert.equal((await refusal((e) => e.hello(testManifest()))).code, "duplicate_module_id");
  assert.equal(peer.module()?.connId, (await peer.waitModule()).connId);
  assert.deepEqual(peer.stats().helloRefusals, {
    version_unsupported: 1,
    invalid_hello: 1,
    invalid_manifest: 1,
    duplicate_module_id: 1,
  });
});

Deno.test("the credit window is sized by the management surface's concurrency: serial 1, module_managed 32 (also when absent), stateless_parallel 1024", async () => {
  await using peer = await startPeer({ modules: [] });
  const cases = [
    ["a", "serial", 1],
    ["b", "module_managed", 32],
    ["c", undefined, 32],
    ["d", "stateless_parallel", 1024],
  ] as const;
  for (const [moduleId, concurrency, window] of cases) {
    await using _m = await registeredModule(peer, {
      moduleId,
      ...(concurrency === undefined ? {} : { concurrency }),
    });
    assert.equal(peer.module(moduleId)?.window, window, moduleId);
  }
});

// ---------------------------------------------------------------------------------------------
// route.open → route.bind, relay
// ---------------------------------------------------------------------------------------------

Deno.test("route.open → route.bind (channel 0, flags 0, corr 1 then 2) with target, identity and principal; the opener gets its channel and epoch", async () => {
  await using peer = await startPeer();
  await using module = await registeredModule(peer);
  await using client = await connectEndpoint(peer);
  const identity = { project_root: "/p", harness: "h", session: "s" };
  const opening = client.openRoute({ identity, consumerCapabilities: ["embedding/v1"] });
  const bindFrame = await module.next(isControlRequest("route.bind"));
  assert.deepEqual([bindFrame.channel, bindFrame.epoch, bindFrame.corr, bindFrame.flags], [
    0,
    0,
    1n,
    0,
  ]);
  assert.deepEqual(jsonBody(bindFrame), {
    op: "route.bind",
    route_channel: 1,
    epoch: 1,
    target: { kind: "management_surface", module_id: "synapse" },
    identity,
    principal: { kind: "direct" },
    consumer_capabilities: ["embedding/v1"],
  });
  await module.send({ type: FrameType.Response, corr: 1n, body: json({ op: "route.bind" }) });
  assert.deepEqual(await opening, { channel: 1, epoch: 1 });
  const open = client.received.at(-1)!;
  assert.deepEqual(jsonBody(open), { op: "route.open", route_channel: 1, route_epoch: 1 });
  assert.deepEqual([open.type, open.channel, open.flags], [FrameType.Response, 0, 0]);
  // A second route, from another client connection: module slot 2, client slot 1.
  await using other = await connectEndpoint(peer);
  const { route, bind } = await openBound(other, module);
  assert.equal(bind.corr, 2n);
  assert.deepEqual([bind.route_channel, bind.epoch, route.channel, route.epoch], [2, 1, 1, 1]);
  const routes = peer.routes();
  assert.deepEqual(routes.map((r) => [r.moduleChannel, r.clientChannel, r.window]), [
    [1, 1, 32],
    [2, 1, 32],
  ]);
  assertNoViolations(peer);
});

Deno.test("route.open principal: reserved for a launch nonce the peer minted for that module, unverified for another consumer identity", async () => {
  await using peer = await startPeer({ modules: ["synapse", "caller"] });
  await using module = await registeredModule(peer);
  await using client = await connectEndpoint(peer);
  const env = peer.launchEnv("caller");
  assert.equal(env.SUBC_MODULE_ID, "caller");
  assert.match(env.SUBC_LAUNCH_NONCE!, /^[0-9a-f]{64}$/);
  assert.equal(env.XDG_DATA_HOME, peer.dataHome);
  const opening = client.openRoute({
    consumerIdentity: { module_id: "caller", launch_nonce: env.SUBC_LAUNCH_NONCE! },
  });
  assert.deepEqual((await ackNextBind(module)).principal, {
    kind: "reserved",
    module_id: "caller",
  });
  await opening;
  const opening2 = client.openRoute({
    consumerIdentity: { module_id: "caller", launch_nonce: "00".repeat(32) },
  });
  assert.deepEqual((await ackNextBind(module)).principal, { kind: "unverified" });
  await opening2;
});

Deno.test("requests, responses, StreamData, StreamEnd and pushes relay between the client's route and the module's, corr and flags intact", async () => {
  await using peer = await startPeer();
  await using module = await registeredModule(peer);
  await using client = await connectEndpoint(peer);
  // Make the two sides' slots differ: a first route from another client takes module slot 1.
  await using first = await connectEndpoint(peer);
  await openBound(first, module);
  const { route, bind } = await openBound(client, module);
  assert.deepEqual([route.channel, bind.route_channel], [1, 2]);

  const calling = client.call(route, { method: "echo", params: { x: 1 } }, { corr: 7n });
  const req = await module.next((f) => f.type === FrameType.Request && f.channel !== 0);
  assert.deepEqual([req.channel, req.epoch, req.corr, req.flags], [2, 1, 7n, DATA_FLAGS]);
  assert.deepEqual(jsonBody(req), { method: "echo", params: { x: 1 } });
  await module.send({ ...req, type: FrameType.Response, body: json({ result: { x: 1 } }) });
  const res = await calling;
  assert.deepEqual([res.type, res.channel, res.epoch, res.corr, res.flags], [
    FrameType.Response,
    1,
    1,
    7n,
    DATA_FLAGS,
  ]);
  assert.deepEqual(jsonBody(res), { result: { x: 1 } });

  // A stream: StreamData twice, then StreamEnd (the terminal).
  const streaming = client.call(route, { method: "echo", params: {} }, { corr: 8n });
  const sreq = await module.next((f) => f.type === FrameType.Request && f.corr === 8n);
  for (const part of ["a", "b"]) {
    await module.send({ ...sreq, type: FrameType.StreamData, body: json({ part }) });
  }
  await module.send({ ...sreq, type: FrameType.StreamEnd, body: new Uint8Array(0) });
  assert.equal((await streaming).type, FrameType.StreamEnd);
  assert.deepEqual(
    client.received.filter((f) => f.corr === 8n).map((f) => [f.type, f.channel]),
    [[FrameType.StreamData, 1], [FrameType.StreamData, 1], [FrameType.StreamEnd, 1]],
  );
  // A module push (corr 0) reaches the client on its route.
  await module.send({
    type: FrameType.Push,
    channel: 2,
    epoch: 1,
    flags: DATA_FLAGS,
    body: json({ e: 1 }),
  });
  const push = await client.next((f) => f.type === FrameType.Push);
  assert.deepEqual([push.channel, push.epoch, push.corr], [1, 1, 0n]);

  const info = peer.routes().find((r) => r.moduleChannel === 2)!;
  assert.deepEqual([info.requests, info.terminals, info.creditsInUse], [2, 2, 0]);
  assert.deepEqual([...info.terminalsByCorr], [[7n, 1], [8n, 1]]);
  assert.equal(peer.stats().streamDataRelayed, 2);
  assertNoViolations(peer);
});

Deno.test("a reverse request (module → client) is relayed with its own corr and takes no credit; the client's terminal goes back", async () => {
  await using peer = await startPeer();
  await using module = await registeredModule(peer, { concurrency: "serial" });
  await using client = await connectEndpoint(peer);
  const { route, bind } = await openBound(client, module);
  await module.send({
    type: FrameType.Request,
    channel: bind.route_channel,
    epoch: bind.epoch,
    corr: 100n,
    flags: DATA_FLAGS,
    body: json({ ask: 1 }),
  });
  const ask = await client.next((f) => f.type === FrameType.Request);
  assert.deepEqual([ask.channel, ask.epoch, ask.corr], [route.channel, route.epoch, 100n]);
  assert.equal(peer.routes()[0]!.creditsInUse, 0);
  await client.send({ ...ask, type: FrameType.Response, body: json({ ok: 1 }) });
  const back = await module.next((f) => f.type === FrameType.Response && f.channel !== 0);
  assert.equal(back.corr, 100n);
  // A client terminal that answers nothing is dropped, as a violation.
  await client.send({ ...ask, type: FrameType.Response, corr: 101n, body: json({}) });
  await peer.until(() => peer.stats().violations.length === 1);
  assert.equal(peer.stats().violations[0]!.code, "reverse_terminal_unknown_corr");
});

Deno.test("serial window (1): the second request waits for the first terminal, stalling that client's reader", async () => {
  await using peer = await startPeer();
  await using module = await registeredModule(peer, { concurrency: "serial" });
  await using client = await connectEndpoint(peer);
  const { route } = await openBound(client, module);
  const request = (corr: bigint) => ({
    type: FrameType.Request,
    channel: route.channel,
    epoch: route.epoch,
    corr,
    flags: DATA_FLAGS,
    body: json({ method: "echo", params: { corr: Number(corr) } }),
  });
  await client.send(request(1n));
  await client.send(request(2n));
  await client.send({ type: FrameType.Ping, corr: 9n }); // read only once the stall ends
  const a = await module.next((f) => f.type === FrameType.Request && f.channel !== 0);
  assert.equal(a.corr, 1n);
  await peer.until(() => peer.routes()[0]!.creditWaiters === 1, { what: "request 2 to wait" });
  assert.deepEqual(
    module.pending((f) => f.type === FrameType.Request),
    [],
    "request 2 is not relayed while request 1 holds the only credit",
  );
  assert.deepEqual([peer.routes()[0]!.creditsInUse, peer.stats().creditWaits], [1, 1]);
  await module.send({ ...a, type: FrameType.Response, body: json({ r: 1 }) });
  const b = await module.next((f) => f.type === FrameType.Request && f.channel !== 0);
  assert.equal(b.corr, 2n);
  await module.send({ ...b, type: FrameType.Response, body: json({ r: 2 }) });
  await client.next((f) => f.type === FrameType.Response && f.corr === 2n);
  await client.next((f) => f.type === FrameType.Pong);
  const order = client.received.filter((f) => f.channel !== 0 || f.type === FrameType.Pong)
    .map((f) => [f.type, f.corr]);
  // The Ping queued behind request 2 was read only after request 1's terminal freed the credit.
  assert.ok(
    order.findIndex(([t, c]) => t === FrameType.Response && c === 1n) <
      order.findIndex(([t]) => t === FrameType.Pong),
    JSON.stringify(order, (_, v) => typeof v === "bigint" ? Number(v) : v),
  );
  const info = peer.routes()[0]!;
  assert.deepEqual([info.requests, info.terminals, info.creditsInUse, info.creditWaiters], [
    2,
    2,
    0,
    0,
  ]);
  assertNoViolations(peer);
});

Deno.test("Cancel is relayed to the module on its (channel, epoch) and releases nothing; the module's terminal does", async () => {
  await using peer = await startPeer();
  await using module = await registeredModule(peer);
  await using client = await connectEndpoint(peer);
  const { route, bind } = await openBound(client, module);
  const calling = client.call(route, { method: "slow", params: {} }, { corr: 5n });
  await module.next((f) => f.type === FrameType.Request && f.corr === 5n);
  await client.send({
    type: FrameType.Cancel,
    channel: route.channel,
    epoch: route.epoch,
    corr: 5n,
  });
  const cancel = await module.next((f) => f.type === FrameType.Cancel);
  assert.deepEqual([cancel.channel, cancel.epoch, cancel.corr, cancel.body.byteLength], [
    bind.route_channel,
    bind.epoch,
    5n,
    0,
  ]);
  assert.deepEqual([peer.routes()[0]!.creditsInUse, peer.routes()[0]!.cancels], [1, 1]);
  await module.send({
    ...cancel,
    type: FrameType.Error,
    flags: DATA_FLAGS,
    body: json({ code: "cancelled", message: "cancelled by the caller" }),
  });
  const terminal = await calling;
  assert.equal(terminal.type, FrameType.Error);
  assert.equal(parseErrorBody(terminal.body).code, "cancelled");
  assert.equal(peer.routes()[0]!.creditsInUse, 0);
  assert.equal(peer.stats().cancelsRelayed, 1);
  assertNoViolations(peer);
});

Deno.test("a client Goodbye on (N, E) sends the module a route Goodbye and drops the route; frames there then get unknown_channel, a wrong epoch stale_route_epoch", async () => {
  await using peer = await startPeer();
  await using module = await registeredModule(peer);
  await using client = await connectEndpoint(peer);
  const r1 = await openBound(client, module);
  const r2 = await openBound(client, module);
  await client.send({ type: FrameType.Goodbye, channel: r1.route.channel, epoch: r1.route.epoch });
  const bye = await module.next((f) => f.type === FrameType.Goodbye);
  assert.deepEqual([bye.channel, bye.epoch, bye.corr, bye.flags, bye.body.byteLength], [
    r1.bind.route_channel,
    r1.bind.epoch,
    0n,
    0,
    0,
  ]);
  await peer.until(() => peer.routes().length === 1);
  const closed = peer.routes({ includeClosed: true })[0]!;
  assert.deepEqual([closed.open, closed.closedBy, closed.leakedCredits], [
    false,
    "client_goodbye",
    0,
  ]);

  const unknown = await client.call(r1.route, { method: "echo" }, { corr: 11n });
  assert.equal(unknown.type, FrameType.Error);
  assert.equal(unknown.flags, DATA_FLAGS | FLAG_DAEMON_ORIGIN);
  assert.equal(parseErrorBody(unknown.body).code, "unknown_channel");
  const stale = await client.call({ channel: r2.route.channel, epoch: r2.route.epoch + 1 }, {
    method: "echo",
  }, { corr: 12n });
  assert.equal(parseErrorBody(stale.body).code, "stale_route_epoch");
  assert.equal(peer.stats().framesDropped, 2);
  assert.deepEqual(module.pending((f) => f.type === FrameType.Request), []);
  // The module's frames on a (channel, epoch) it no longer owns are dropped silently.
  await module.send({
    type: FrameType.Response,
    channel: r1.bind.route_channel,
    epoch: r1.bind.epoch,
    corr: 3n,
    flags: DATA_FLAGS,
    body: json({}),
  });
  await peer.until(() => peer.stats().framesDropped === 3);
  assertNoViolations(peer);
});

Deno.test("bindEpochMode equal and lower: the module's refusal of the bind is relayed verbatim to the opener; the installed route keeps working", async () => {
  for (const mode of ["equal", "lower"] as const) {
    await using peer = await startPeer({ bindEpochMode: mode });
    await using module = await registeredModule(peer);
    await using client = await connectEndpoint(peer);
    const first = await openBound(client, module); // no live route yet: fresh (1, 1)
    assert.deepEqual([first.bind.route_channel, first.bind.epoch], [1, 1]);
    const opening = client.openRoute();
    const rebind = await module.next(isControlRequest("route.bind"));
    const body = parseRouteBind(rebind.body);
    assert.deepEqual([body.route_channel, body.epoch], [1, mode === "equal" ? 1 : 0], mode);
    const refusal = encodeControlBody({
      code: "route_rejected",
      message: `epoch ${body.epoch} is not above the installed 1`,
      detail: { route_channel: 1, epoch: body.epoch },
    });
    await module.send({ type: FrameType.Error, corr: rebind.corr, body: refusal });
    const err = await opening.then(() => undefined, (e) => e);
    assert.ok(err instanceof EndpointError, String(err));
    assert.equal(hex(err.frame.body), hex(refusal), "relayed verbatim");
    assert.deepEqual([err.frame.channel, err.frame.flags], [0, 0]);
    const calling = client.call(first.route, { method: "echo" });
    const req = await module.next((f) => f.type === FrameType.Request && f.channel === 1);
    await module.send({ ...req, type: FrameType.Response, body: json({ ok: true }) });
    assert.equal((await calling).type, FrameType.Response);
    assert.deepEqual(peer.stats().routeOpenRefusals, { route_rejected: 1 });
    assertNoViolations(peer);
  }
});

Deno.test("a module that accepts a bind with an equal epoch is a violation; the route it replaced is closed for its client", async () => {
  await using peer = await startPeer({ bindEpochMode: "equal" });
  await using module = await registeredModule(peer);
  await using client = await connectEndpoint(peer);
  const first = await openBound(client, module);
  const second = await openBound(client, module);
  assert.deepEqual([second.bind.route_channel, second.bind.epoch], [1, 1]);
  const bye = await client.next((f) => f.type === FrameType.Goodbye);
  assert.deepEqual([bye.channel, bye.epoch], [first.route.channel, first.route.epoch]);
  assert.deepEqual(peer.stats().violations.map((v) => v.code), ["bind_not_higher_accepted"]);
  assert.equal(peer.routes({ includeClosed: true })[0]!.closedBy, "replaced");
});

Deno.test("route.open refusals: unknown module target_unavailable, configured but unregistered module_warming, a malformed open or a body that is not JSON invalid_request, another op unknown_control_op", async () => {
  await using peer = await startPeer();
  await using client = await connectEndpoint(peer);
  const code = async (init: Parameters<Endpoint["openRoute"]>[0]) => {
    const err = await client.openRoute(init).then(() => undefined, (e) => e);
    assert.ok(err instanceof EndpointError, String(err));
    return [err.body.code, err.body.detail];
  };
  assert.deepEqual(await code({ moduleId: "nosuch" }), ["target_unavailable", undefined]);
  assert.deepEqual(await code({}), ["module_warming", { reason: "not_registered" }]);
  await client.send({ type: FrameType.Request, corr: 50n, body: json({ op: "route.open" }) });
  const bad = await client.next((f) => f.corr === 50n);
  assert.deepEqual([bad.type, parseErrorBody(bad.body).code], [FrameType.Error, "invalid_request"]);
  await client.send({
    type: FrameType.Request,
    corr: 52n,
    body: new TextEncoder().encode("{not json"),
  });
  const notJson = await client.next((f) => f.corr === 52n);
  assert.deepEqual([notJson.type, parseErrorBody(notJson.body).code], [
    FrameType.Error,
    "invalid_request",
  ]);
  await client.send({ type: FrameType.Request, corr: 51n, body: json({ op: "route.poll" }) });
  const other = await client.next((f) => f.corr === 51n);
  assert.equal(parseErrorBody(other.body).code, "unknown_control_op");
});

Deno.test("a module declared not ready answers module_warming (declared_not_ready) until its catalog.update flips it", async () => {
  await using peer = await startPeer();
  await using module = await registeredModule(peer, { ready: false });
  await using client = await connectEndpoint(peer);
  const err = await client.openRoute().then(() => undefined, (e) => e);
  assert.ok(err instanceof EndpointError);
  assert.deepEqual([err.body.code, err.body.detail], ["module_warming", {
    reason: "declared_not_ready",
  }]);
  const corr = module.corr();
  assert.equal(corr, 2n, "the module's corr counter starts at 2");
  await module.send({
    type: FrameType.Request,
    corr,
    body: json({ op: "catalog.update", provides: testManifest().provides, ready: true }),
  });
  const ack = await module.next((f) => f.corr === corr);
  assert.deepEqual([ack.type, ack.channel, ack.flags], [FrameType.Response, 0, 0]);
  assert.deepEqual(jsonBody(ack), { op: "catalog.update" });
  assert.equal(peer.module()?.ready, true);
  assert.equal(peer.module()?.catalogUpdates, 1);
  await openBound(client, module);
  assertNoViolations(peer);
});

Deno.test("no route.bind ack in time → module_timeout to the opener; the late ack is counted, not a violation", async () => {
  await using peer = await startPeer({ bindTimeoutMs: 100 });
  await using module = await registeredModule(peer);
  await using client = await connectEndpoint(peer);
  const err = await client.openRoute().then(() => undefined, (e) => e);
  assert.ok(err instanceof EndpointError);
  assert.equal(err.body.code, "module_timeout");
  assert.equal(peer.stats().bindTimeouts, 1);
  const bind = await module.next(isControlRequest("route.bind"));
  await module.send({
    type: FrameType.Response,
    corr: bind.corr,
    body: json({ op: "route.bind" }),
  });
  await peer.until(() => peer.stats().lateControlReplies === 1);
  // The slot's epoch moved on: the next bind of slot 1 carries epoch 2.
  const { bind: next } = await openBound(client, module);
  assert.deepEqual([next.route_channel, next.epoch], [1, 2]);
  assertNoViolations(peer);
});

// ---------------------------------------------------------------------------------------------
// Control traffic from the module
// ---------------------------------------------------------------------------------------------

Deno.test("catalog.update replaces provides; a reused corr is a violation; unoffered catalog.update and unknown ops get unknown_control_op; route.status pushes are cached", async () => {
  {
    await using peer = await startPeer();
    await using module = await registeredModule(peer);
    const provides = testManifest({ operations: [{ name: "new.op", kind: "mutate" }] }).provides;
    await module.send({
      type: FrameType.Request,
      corr: 2n,
      body: json({ op: "catalog.update", provides }),
    });
    assert.equal((await module.next((f) => f.corr === 2n)).type, FrameType.Response);
    assert.deepEqual(peer.module()?.manifest.provides, provides);
    await module.send({
      type: FrameType.Request,
      corr: 2n,
      body: json({ op: "catalog.update", provides }),
    });
    await module.next((f) => f.corr === 2n);
    await module.send({
      type: FrameType.Request,
      corr: 3n,
      body: json({ op: "catalog.update", provides: [{ role: "nope" }] }),
    });
    const invalid = await module.next((f) => f.corr === 3n);
    assert.equal(parseErrorBody(invalid.body).code, "invalid_manifest");
    await module.send({ type: FrameType.Request, corr: 4n, body: json({ op: "frobnicate" }) });
    assert.equal(
      parseErrorBody((await module.next((f) => f.corr === 4n)).body).code,
      "unknown_control_op",
    );
    const status = { op: "route.status", route_channel: 1, route_epoch: 1, status: "busy" };
    await module.send({ type: FrameType.Push, body: json(status) });
    await peer.until(() => peer.module()!.routeStatuses.length === 1);
    assert.deepEqual(peer.module()!.routeStatuses, [status]);
    assert.deepEqual(peer.stats().violations.map((v) => v.code), ["control_corr_reused"]);
  }
  {
    await using peer = await startPeer({ subcOps: [] });
    await using module = await registeredModule(peer);
    await module.send({
      type: FrameType.Request,
      corr: 2n,
      body: json({ op: "catalog.update", provides: testManifest().provides }),
    });
    const refused = await module.next((f) => f.corr === 2n);
    assert.equal(parseErrorBody(refused.body).code, "unknown_control_op");
    assert.deepEqual(peer.stats().violations.map((v) => v.code), ["catalog_update_not_offered"]);
  }
});

Deno.test("healthCheck() probes the module on channel 0 and returns its Response body; Error, no answer and no advertisement are PeerErrors", async () => {
  await using peer = await startPeer({ healthDeadlineMs: 100 });
  await using module = await registeredModule(peer);
  const probing = peer.healthCheck();
  const probe = await module.next(isControlRequest("health.check"));
  assert.deepEqual([probe.channel, probe.epoch, probe.flags], [0, 0, 0]);
  assert.deepEqual(jsonBody(probe), { op: "health.check" });
  const reply = { op: "health.check", status: "degraded", detail: "warming", metrics: { q: 1 } };
  await module.send({ type: FrameType.Response, corr: probe.corr, body: json(reply) });
  assert.deepEqual(await probing, reply);

  const failing = peer.healthCheck();
  const p2 = await module.next(isControlRequest("health.check"));
  await module.send({
    type: FrameType.Error,
    corr: p2.corr,
    body: json({ code: "x", message: "y" }),
  });
  const e2 = await failing.then(() => undefined, (e) => e);
  assert.ok(e2 instanceof PeerError);
  assert.deepEqual([e2.code, e2.body?.code], ["error_reply", "x"]);

  const missed = await peer.healthCheck().then(() => undefined, (e) => e);
  assert.ok(missed instanceof PeerError);
  assert.equal(missed.code, "timeout");
  await module.next(isControlRequest("health.check")); // it did arrive; nobody answered

  await using quiet = await registeredModule(peer, { moduleId: "quiet" }, { controlOps: null });
  const na = await peer.healthCheck({ moduleId: "quiet" }).then(() => undefined, (e) => e);
  assert.ok(na instanceof PeerError);
  assert.equal(na.code, "not_advertised");
  assert.deepEqual(quiet.pending((f) => f.type === FrameType.Request), []);
});

Deno.test("Ping/Pong on channel 0 both ways: the Pong echoes ver, flags and corr", async () => {
  await using peer = await startPeer();
  await using module = await registeredModule(peer);
  const pinging = peer.pingModule({ flags: DATA_FLAGS });
  const ping = await module.next((f) => f.type === FrameType.Ping);
  await module.send(pongFor(ping));
  const pong = await pinging;
  assert.deepEqual([pong.type, pong.flags, pong.corr], [FrameType.Pong, DATA_FLAGS, ping.corr]);
  await module.send({ type: FrameType.Ping, corr: 77n, flags: 0x02 });
  const back = await module.next((f) => f.type === FrameType.Pong);
  assert.equal(
    hex(encodeFrame(back)),
    hex(encodeFrame({ type: FrameType.Pong, corr: 77n, flags: 0x02 })),
  );
});

// ---------------------------------------------------------------------------------------------
// Exactly-once accounting and faults
// ---------------------------------------------------------------------------------------------

Deno.test("exactly-once accounting: a second terminal for a corr, or one for a corr never sent, is a violation and an ignored over-release", async () => {
  await using peer = await startPeer();
  await using module = await registeredModule(peer);
  await using client = await connectEndpoint(peer);
  const { route } = await openBound(client, module);
  const calling = client.call(route, { method: "echo" }, { corr: 3n });
  const req = await module.next((f) => f.type === FrameType.Request && f.corr === 3n);
  await module.send({ ...req, type: FrameType.Response, body: json({ n: 1 }) });
  await calling;
  await module.send({ ...req, type: FrameType.Response, body: json({ n: 2 }) });
  await module.send({
    ...req,
    type: FrameType.Error,
    corr: 999n,
    body: json({ code: "x", message: "y" }),
  });
  await peer.until(() => peer.stats().violations.length === 2);
  assert.deepEqual(peer.stats().violations.map((v) => [v.side, v.code]), [
    ["module", "terminal_after_terminal"],
    ["module", "terminal_unknown_corr"],
  ]);
  const info = peer.routes()[0]!;
  assert.equal(info.terminalsByCorr.get(3n), 2);
  assert.deepEqual([info.terminals, info.creditsInUse, peer.stats().overReleases], [1, 0, 2]);
});

Deno.test("goodbyeModule(): route Goodbyes, then a channel-0 Goodbye; in-flight requests get target_unavailable; route.open answers module_reloading until the module leaves, then module_warming", async () => {
  await using peer = await startPeer();
  await using module = await registeredModule(peer);
  await using client = await connectEndpoint(peer);
  const { route, bind } = await openBound(client, module);
  const calling = client.call(route, { method: "slow" }, { corr: 4n });
  await module.next((f) => f.type === FrameType.Request && f.corr === 4n);
  await peer.goodbyeModule();
  const byes = [
    await module.next((f) => f.type === FrameType.Goodbye),
    await module.next((f) => f.type === FrameType.Goodbye),
  ];
  assert.deepEqual(byes.map((f) => [f.channel, f.epoch, f.corr]), [
    [bind.route_channel, bind.epoch, 0n],
    [0, 0, 0n],
  ]);
  const terminal = await calling;
  assert.deepEqual([terminal.type, parseErrorBody(terminal.body).code], [
    FrameType.Error,
    "target_unavailable",
  ]);
  const clientBye = await client.next((f) => f.type === FrameType.Goodbye);
  assert.deepEqual([clientBye.channel, clientBye.epoch], [route.channel, route.epoch]);
  assert.equal(peer.routes({ includeClosed: true })[0]!.leakedCredits, 1);
  const reloading = await client.openRoute().then(() => undefined, (e) => e);
  assert.equal((reloading as EndpointError).body.code, "module_reloading");
  module.close();
  await peer.waitModuleGone();
  const warming = await client.openRoute().then(() => undefined, (e) => e);
  assert.equal((warming as EndpointError).body.code, "module_warming");
});

Deno.test("a module that vanishes mid-request: the client gets target_unavailable and a route Goodbye; the credit is counted leaked", async () => {
  await using peer = await startPeer();
  await using module = await registeredModule(peer);
  await using client = await connectEndpoint(peer);
  const { route } = await openBound(client, module);
  const calling = client.call(route, { method: "slow" }, { corr: 4n });
  await module.next((f) => f.type === FrameType.Request);
  module.close();
  const terminal = await calling;
  assert.equal(parseErrorBody(terminal.body).code, "target_unavailable");
  await client.next((f) => f.type === FrameType.Goodbye);
  assert.equal(peer.stats().creditsLeaked, 1);
  assert.equal(peer.routes({ includeClosed: true })[0]!.closedBy, "module_gone");
});

Deno.test("kill(): every socket closes at once with no Goodbye, like a daemon crash; the connection file stays until close()", async () => {
  const peer = await startPeer();
  await using module = await registeredModule(peer);
  await using client = await connectEndpoint(peer);
  await openBound(client, module);
  peer.kill();
  assert.equal((await module.ended).reason, "eof");
  assert.equal((await client.ended).reason, "eof");
  assert.deepEqual(module.pending((f) => f.type === FrameType.Goodbye), []);
  assert.ok((await Deno.stat(peer.connectionFile)).isFile);
  await assert.rejects(Deno.connect({ hostname: "127.0.0.1", port: peer.port }));
  await peer.close();
  await assert.rejects(Deno.stat(peer.connectionFile), Deno.errors.NotFound);
});

Deno.test("rawToModule() writes bytes verbatim: a Request on a channel the module never bound, a body that is not JSON", async () => {
  await using peer = await startPeer();
  await using module = await registeredModule(peer);
  const bytes = encodeFrame({
    type: FrameType.Request,
    channel: 9,
    epoch: 1,
    corr: 1n,
    flags: DATA_FLAGS,
    body: new TextEncoder().encode("not json"),
  });
  assert.equal(await peer.rawToModule(bytes), true);
  const f = await module.next((f) => f.channel === 9);
  assert.equal(hex(encodeFrame(f)), hex(bytes));
  assert.equal(
    await peer.rawToModule(new Uint8Array(0), { moduleId: "synapse" }),
    true,
  );
  assert.throws(() => peer.rawToModule(bytes, { moduleId: "nosuch" }), PeerError);
});

Deno.test("a client connection that closes drops its routes: the module gets their route Goodbyes", async () => {
  await using peer = await startPeer();
  await using module = await registeredModule(peer);
  const client = await connectEndpoint(peer);
  const { bind } = await openBound(client, module);
  await client[Symbol.asyncDispose]();
  const bye = await module.next((f) => f.type === FrameType.Goodbye);
  assert.deepEqual([bye.channel, bye.epoch], [bind.route_channel, bind.epoch]);
  assert.equal(peer.routes({ includeClosed: true })[0]!.closedBy, "client_gone");
});

// ---------------------------------------------------------------------------------------------
// CreditWindow
// ---------------------------------------------------------------------------------------------

Deno.test("CreditWindow: holds credits by corr, queues waiters first come first served, ignores over-release, hands held corrs back on close", async () => {
  assert.throws(() => new CreditWindow(0), RangeError);
  let changes = 0;
  const w = new CreditWindow(2, () => changes++);
  assert.equal(await w.acquire(1n), true);
  assert.equal(await w.acquire(2n), true);
  const order: bigint[] = [];
  const third = w.acquire(3n).then((g) => (order.push(3n), g));
  const fourth = w.acquire(4n).then((g) => (order.push(4n), g));
  assert.deepEqual([w.inUse, w.waiting], [2, 2]);
  assert.equal(w.release(9n), false, "over-release changes nothing");
  assert.deepEqual([w.inUse, w.waiting], [2, 2]);
  assert.equal(w.release(1n), true);
  assert.equal(await third, true);
  assert.deepEqual([w.inUse, w.waiting, w.holds(3n), w.holds(1n)], [2, 1, true, false]);
  assert.deepEqual(w.close().sort(), [2n, 3n]);
  assert.equal(await fourth, false, "a waiter of a closed window is refused");
  assert.deepEqual(order, [3n, 4n]);
  assert.equal(await w.acquire(5n), false);
  assert.ok(changes > 0);
});

Deno.test("under load the window holds: 32 routes × 200 pipelined requests, never more than 32 in flight per route, exactly one terminal each, no credit leaked", async () => {
  const ROUTES = 32;
  const PER_ROUTE = 200;
  await using peer = await startPeer();
  await using module = await registeredModule(peer); // module_managed: 32
  const clients: Endpoint[] = [];
  for (let i = 0; i < 4; i++) clients.push(await connectEndpoint(peer));
  const routes: { client: Endpoint; route: { channel: number; epoch: number } }[] = [];
  for (let i = 0; i < ROUTES; i++) {
    const client = clients[i % clients.length]!;
    routes.push({ client, route: (await openBound(client, module)).route });
  }
  // The scripted module holds a route's requests until it has 32 in flight; then it waits until
  // the peer holds the 33rd back (a credit waiter), checks that no 33rd reached it, and answers
  // the 32 in reverse order. A route's last request (corr 200) flushes the rest.
  const inFlight = new Map<number, SubcFrame[]>();
  let maxInFlight = 0;
  let pingCorr = 100n;
  const serving = (async () => {
    for (let n = 0; n < ROUTES * PER_ROUTE; n++) {
      const req = await module.next((f) => f.type === FrameType.Request && f.channel !== 0);
      const held = inFlight.get(req.channel) ?? [];
      held.push(req);
      inFlight.set(req.channel, held);
      maxInFlight = Math.max(maxInFlight, held.length);
      if (held.length === 32) {
        await peer.until(
          () => peer.routes().find((r) => r.moduleChannel === req.channel)!.creditWaiters === 1,
          { what: `the 33rd request of module channel ${req.channel} to wait` },
        );
        // Whatever the peer forwarded before that wait was queued before this Pong.
        await module.send({ type: FrameType.Ping, corr: ++pingCorr });
        await module.next((f) => f.type === FrameType.Pong);
        assert.deepEqual(
          module.pending((f) => f.type === FrameType.Request && f.channel === req.channel),
          [],
          "a 33rd request reached the module while 32 were in flight",
        );
      }
      if (held.length === 32 || req.corr === BigInt(PER_ROUTE)) {
        for (const r of held.reverse()) {
          await module.send({
            ...r,
            type: FrameType.Response,
            body: json({ corr: Number(r.corr) }),
          });
        }
        inFlight.set(req.channel, []);
      }
    }
  })();
  for (const { client, route } of routes) {
    for (let corr = 1n; corr <= BigInt(PER_ROUTE); corr++) {
      void client.send({
        type: FrameType.Request,
        ...route,
        corr,
        flags: DATA_FLAGS,
        body: json({ method: "embed.query", params: { corr: Number(corr) } }),
      });
    }
  }
  await serving;
  await peer.until(() => peer.stats().terminals === ROUTES * PER_ROUTE, { what: "every terminal" });
  assert.equal(maxInFlight, 32);
  for (const { client, route } of routes) {
    for (let corr = 1n; corr <= BigInt(PER_ROUTE); corr++) {
      const t = await client.next((f) => f.channel === route.channel && f.corr === corr);
      assert.equal(t.type, FrameType.Response);
      assert.deepEqual(jsonBody(t), { corr: Number(corr) });
    }
  }
  await module.send({ type: FrameType.Ping, corr: 1n }); // a last round trip: nothing else comes
  await module.next((f) => f.type === FrameType.Pong);
  for (const client of clients) {
    // Relayed frames were queued before this Pong: once it is in, nothing else is on its way.
    await client.send({ type: FrameType.Ping, corr: 999n });
    await client.next((f) => f.type === FrameType.Pong);
    assert.deepEqual(client.pending((f) => f.channel !== 0), []);
  }
  for (const info of peer.routes()) {
    assert.deepEqual([info.requests, info.terminals, info.creditsInUse], [PER_ROUTE, PER_ROUTE, 0]);
    assert.ok([...info.terminalsByCorr.values()].every((n) => n === 1));
  }
  for (const client of clients) await client[Symbol.asyncDispose]();
  await peer.until(() => peer.routes().length === 0);
  const stats = peer.stats();
  assert.deepEqual([stats.creditsLeaked, stats.overReleases, stats.framesDropped], [0, 0, 0]);
  assert.ok(stats.creditWaits > 0, "requests did wait for credits");
  assertNoViolations(peer);
});

Deno.test("closeRoute(): silently for the client, whose next request gets unknown_channel and, once the slot is re-opened, stale_route_epoch; silently for the module, whose route Goodbye never comes", async () => {
  await using peer = await startPeer();
  await using module = await registeredModule(peer);
  await using client = await connectEndpoint(peer);
  const first = await openBound(client, module);
  const id = peer.routes()[0]!.id;
  assert.equal(peer.closeRoute(id, { goodbyeToClient: false }), true);
  assert.equal(peer.closeRoute(id), false, "already closed");
  const bye = await module.next((f) => f.type === FrameType.Goodbye);
  assert.deepEqual([bye.channel, bye.epoch], [first.bind.route_channel, first.bind.epoch]);
  const unknown = await client.call(first.route, { method: "echo" });
  assert.equal(parseErrorBody(unknown.body).code, "unknown_channel");
  const second = await openBound(client, module);
  assert.deepEqual([second.route.channel, second.route.epoch], [1, 2]);
  const stale = await client.call(first.route, { method: "echo" });
  assert.equal(parseErrorBody(stale.body).code, "stale_route_epoch");
  assert.equal(peer.closeRoute(peer.routes()[0]!.id, { goodbyeToModule: false }), true);
  const clientBye = await client.next((f) => f.type === FrameType.Goodbye);
  assert.deepEqual([clientBye.channel, clientBye.epoch], [1, 2]);
  // Only the first close reached the module.
  await module.send({ type: FrameType.Ping, corr: 1n });
  await module.next((f) => f.type === FrameType.Pong);
  assert.deepEqual(module.pending((f) => f.type === FrameType.Goodbye), []);
  assert.deepEqual(
    peer.routes({ includeClosed: true }).map((r) => r.closedBy),
    ["peer_closed", "peer_closed"],
  );
  assertNoViolations(peer);
});

Deno.test("route traffic a module sends right behind its route.bind ack (same TCP segment) finds the route installed", async () => {
  await using peer = await startPeer();
  await using module = await registeredModule(peer);
  await using client = await connectEndpoint(peer);
  const opening = client.openRoute();
  const bind = await module.next(isControlRequest("route.bind"));
  const b = parseRouteBind(bind.body);
  const ack = encodeFrame({
    type: FrameType.Response,
    corr: bind.corr,
    body: json({ op: "route.bind" }),
  });
  const push = encodeFrame({
    type: FrameType.Push,
    channel: b.route_channel,
    epoch: b.epoch,
    flags: DATA_FLAGS,
    body: json({ event: "ready" }),
  });
  const both = new Uint8Array(ack.byteLength + push.byteLength);
  both.set(ack);
  both.set(push, ack.byteLength);
  await module.sendRaw(both);
  const route = await opening;
  const got = await client.next((f) => f.type === FrameType.Push);
  assert.deepEqual([got.channel, got.epoch, jsonBody(got)], [route.channel, route.epoch, {
    event: "ready",
  }]);
  assert.equal(peer.stats().framesDropped, 0);
});
