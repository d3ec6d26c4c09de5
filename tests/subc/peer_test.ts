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
} from "../../lib/subc/envelope.ts";
import type { SubcFrame } from "../../lib/subc/envelope.ts";
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

/** The reason each `must_reject` vector is refused with (as tests/subc/envelope_test.ts). */
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
