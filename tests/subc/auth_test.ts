import assert from "node:assert/strict";
import {
  answerClientHello,
  checkClientAuth,
  CLIENT_AUTH_DOMAIN,
  clientHandshake,
  computeProof,
  constantTimeEqual,
  encodeAuthMessage,
  finishClientAuth,
  MAX_AUTH_MESSAGE_BYTES,
  SERVER_PROOF_DOMAIN,
  serverHandshake,
  startClientAuth,
} from "../../lib/subc/auth.ts";
import type { AuthConn } from "../../lib/subc/auth.ts";
import { encodeFrame, FrameDecoder, FrameType } from "../../lib/subc/bus_envelope.ts";
import { SubcWireError } from "../../lib/subc/errors.ts";
import type { SubcWireReason } from "../../lib/subc/errors.ts";

const auth: Record<string, string> = JSON.parse(
  await Deno.readTextFile(new URL("../vectors/subc_wire.json", import.meta.url)),
).auth;
const KEY = Uint8Array.fromHex(auth.key_hex!);
const CLIENT_NONCE = Uint8Array.fromHex(auth.client_nonce_hex!);
const SERVER_NONCE = Uint8Array.fromHex(auth.server_nonce_hex!);
const DAEMON_ID = Uint8Array.fromHex(auth.daemon_id_hex!);

/** Generous hang guard for handshakes that must succeed or fail on their own. */
const GUARD_MS = 60_000;

function isReason(reason: SubcWireReason): (e: unknown) => boolean {
  return (e: unknown) => {
    assert.ok(e instanceof SubcWireError, `expected SubcWireError, got ${e}`);
    assert.equal(e.reason, reason, e.message);
    return true;
  };
}

/** A connected loopback TCP pair; disposing closes all three ends (errors of closed ones ignored). */
async function tcpPair(): Promise<
  { client: Deno.TcpConn; server: Deno.TcpConn } & AsyncDisposable
> {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const [client, server] = await Promise.all([
    Deno.connect({ hostname: "127.0.0.1", port: listener.addr.port }),
    listener.accept(),
  ]);
  listener.close();
  return {
    client,
    server,
    [Symbol.asyncDispose](): Promise<void> {
      for (const c of [client, server]) {
        try {
          c.close();
        } catch { /* already closed by a failed handshake */ }
      }
      return Promise.resolve();
    },
  };
}

async function readAuthMessage(conn: Deno.Conn): Promise<unknown> {
  const prefix = await readExact(conn, 4);
  const len = new DataView(prefix.buffer).getUint32(0, true);
  return JSON.parse(new TextDecoder().decode(await readExact(conn, len)));
}

async function readExact(conn: Deno.Conn, n: number): Promise<Uint8Array> {
  const buf = new Uint8Array(n);
  let at = 0;
  while (at < n) {
    const got = await conn.read(buf.subarray(at));
    if (got === null) throw new Error("EOF");
    at += got;
  }
  return buf;
}

async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  let at = 0;
  while (at < bytes.byteLength) at += await conn.write(bytes.subarray(at));
}

Deno.test("computeProof() reproduces both HMAC proofs of subc_wire.json", async () => {
  const server = await computeProof(
    KEY,
    SERVER_PROOF_DOMAIN,
    CLIENT_NONCE,
    SERVER_NONCE,
    DAEMON_ID,
  );
  const client = await computeProof(KEY, CLIENT_AUTH_DOMAIN, CLIENT_NONCE, SERVER_NONCE, DAEMON_ID);
  assert.equal(server.toHex(), auth.server_proof_hex);
  assert.equal(client.toHex(), auth.client_proof_hex);
  assert.ok(auth.server_proof_hex!.startsWith("ea06076a"));
});

Deno.test("the pure handshake steps, driven with the vectors' nonces, produce the vectors' proofs", async () => {
  const { clientNonce, hello } = startClientAuth({ clientNonce: CLIENT_NONCE });
  assert.deepEqual(Object.keys(hello), ["client_nonce", "role"]);
  assert.equal(hello.role, "client");
  const answer = await answerClientHello({
    key: KEY,
    daemonId: DAEMON_ID,
    daemonVer: "subc-test",
    hello: JSON.parse(JSON.stringify(hello)),
    serverNonce: SERVER_NONCE,
  });
  assert.deepEqual(Object.keys(answer.proof), [
    "daemon_id",
    "server_nonce",
    "daemon_ver",
    "server_proof",
  ]);
  assert.equal(Uint8Array.from(answer.proof.server_proof).toHex(), auth.server_proof_hex);
  const finished = await finishClientAuth({
    key: KEY,
    daemonId: DAEMON_ID,
    clientNonce,
    serverProof: JSON.parse(JSON.stringify(answer.proof)),
  });
  assert.equal(finished.daemonVer, "subc-test");
  assert.equal(Uint8Array.from(finished.auth.client_auth).toHex(), auth.client_proof_hex);
  await checkClientAuth({
    key: KEY,
    daemonId: DAEMON_ID,
    clientNonce: answer.clientNonce,
    serverNonce: answer.serverNonce,
    auth: finished.auth,
  });
});

Deno.test("the pure steps refuse a proof off by one bit, either way, and a foreign daemon id", async () => {
  const answer = await answerClientHello({
    key: KEY,
    daemonId: DAEMON_ID,
    daemonVer: "v",
    hello: startClientAuth({ clientNonce: CLIENT_NONCE }).hello,
    serverNonce: SERVER_NONCE,
  });
  const badProof = { ...answer.proof, server_proof: [...answer.proof.server_proof] };
  badProof.server_proof[31] = badProof.server_proof[31]! ^ 1;
  await assert.rejects(
    finishClientAuth({
      key: KEY,
      daemonId: DAEMON_ID,
      clientNonce: CLIENT_NONCE,
      serverProof: badProof,
    }),
    isReason("invalid_server_proof"),
  );
  const otherId = DAEMON_ID.slice();
  otherId[0] = otherId[0]! ^ 0xff;
  await assert.rejects(
    finishClientAuth({
      key: KEY,
      daemonId: otherId,
      clientNonce: CLIENT_NONCE,
      serverProof: answer.proof,
    }),
    isReason("daemon_id_mismatch"),
  );
  const clientAuth = Uint8Array.fromHex(auth.client_proof_hex!);
  clientAuth[0] = clientAuth[0]! ^ 0x80;
  await assert.rejects(
    checkClientAuth({
      key: KEY,
      daemonId: DAEMON_ID,
      clientNonce: CLIENT_NONCE,
      serverNonce: SERVER_NONCE,
      auth: { client_auth: [...clientAuth] },
    }),
    isReason("invalid_client_auth"),
  );
});

Deno.test("the message parsers name the offending field", async () => {
  const cases: [unknown, string][] = [
    [{ client_nonce: [1, 2], role: "client" }, "client_nonce"],
    [{ client_nonce: [...CLIENT_NONCE.slice(0, 31), 256], role: "client" }, "client_nonce.31"],
    [{ client_nonce: [...CLIENT_NONCE] }, "role"],
  ];
  for (const [hello, field] of cases) {
    await assert.rejects(
      answerClientHello({ key: KEY, daemonId: DAEMON_ID, daemonVer: "v", hello }),
      (e: unknown) => {
        assert.ok(e instanceof SubcWireError);
        assert.equal(e.reason, "auth_invalid_message");
        assert.equal(e.details?.field, field);
        return true;
      },
    );
  }
  await assert.rejects(
    answerClientHello({ key: KEY, daemonId: DAEMON_ID, daemonVer: "v", hello: [1] }),
    isReason("auth_invalid_message"),
  );
  // Unknown fields are ignored, as serde does.
  const extra = { client_nonce: [...CLIENT_NONCE], role: "watchdog", future: true };
  const answer = await answerClientHello({
    key: KEY,
    daemonId: DAEMON_ID,
    daemonVer: "v",
    hello: extra,
  });
  assert.equal(answer.role, "watchdog");
});

Deno.test("constantTimeEqual() compares bytes and lengths", () => {
  assert.equal(constantTimeEqual(Uint8Array.of(1, 2), Uint8Array.of(1, 2)), true);
  assert.equal(constantTimeEqual(Uint8Array.of(1, 2), Uint8Array.of(1, 3)), false);
  assert.equal(constantTimeEqual(Uint8Array.of(1, 2), Uint8Array.of(1)), false);
  assert.equal(constantTimeEqual(new Uint8Array(0), new Uint8Array(0)), true);
});

Deno.test("clientHandshake() and serverHandshake() authenticate over loopback TCP; frames follow at once", async () => {
  await using pair = await tcpPair();
  const noDelay: boolean[] = [];
  const spied: AuthConn = {
    read: (p) => pair.client.read(p),
    write: (p) => pair.client.write(p),
    close: () => pair.client.close(),
    setNoDelay: (on) => {
      noDelay.push(on ?? true);
      pair.client.setNoDelay(on);
    },
  };
  const [client, server] = await Promise.all([
    clientHandshake(spied, { key: KEY, daemonId: DAEMON_ID, role: "module", deadlineMs: GUARD_MS }),
    serverHandshake(pair.server, {
      key: KEY,
      daemonId: DAEMON_ID,
      daemonVer: "0.26.0-test",
      deadlineMs: GUARD_MS,
    }),
  ]);
  assert.deepEqual(client, { daemonVer: "0.26.0-test" });
  assert.deepEqual(server, { role: "module" });
  assert.deepEqual(noDelay, [true]);
  // No "ok" message: the first bytes after the handshake are a frame, in both directions.
  await writeAll(pair.client, encodeFrame({ type: FrameType.Ping, corr: 9n }));
  await writeAll(pair.server, encodeFrame({ type: FrameType.Pong, corr: 9n }));
  const atServer = new FrameDecoder().push(await readExact(pair.server, 21));
  const atClient = new FrameDecoder().push(await readExact(pair.client, 21));
  assert.deepEqual(atServer.map((f) => [f.type, f.corr]), [[FrameType.Ping, 9n]]);
  assert.deepEqual(atClient.map((f) => [f.type, f.corr]), [[FrameType.Pong, 9n]]);
});

Deno.test("a server with another key fails the handshake on both sides (invalid_server_proof)", async () => {
  await using pair = await tcpPair();
  const otherKey = KEY.slice();
  otherKey[5] = otherKey[5]! ^ 1;
  const [client, server] = await Promise.allSettled([
    clientHandshake(pair.client, { key: KEY, daemonId: DAEMON_ID, deadlineMs: GUARD_MS }),
    serverHandshake(pair.server, {
      key: otherKey,
      daemonId: DAEMON_ID,
      daemonVer: "v",
      deadlineMs: GUARD_MS,
    }),
  ]);
  assert.equal(client.status, "rejected");
  isReason("invalid_server_proof")((client as PromiseRejectedResult).reason);
  // The client closed without sending its proof: the server never authenticates it.
  assert.equal(server.status, "rejected");
  assert.ok((server as PromiseRejectedResult).reason instanceof SubcWireError);
});

Deno.test("a client proof under another key is refused by serverHandshake (invalid_client_auth)", async () => {
  await using pair = await tcpPair();
  const serving = serverHandshake(pair.server, {
    key: KEY,
    daemonId: DAEMON_ID,
    daemonVer: "v",
    deadlineMs: GUARD_MS,
  });
  // A client that checks the server honestly, then proves with a wrong key.
  const { clientNonce, hello } = startClientAuth();
  await writeAll(pair.client, encodeAuthMessage(hello));
  const proof = await readAuthMessage(pair.client) as { server_nonce: number[] };
  await finishClientAuth({ key: KEY, daemonId: DAEMON_ID, clientNonce, serverProof: proof });
  const wrongKey = new Uint8Array(32).fill(7);
  const forged = await computeProof(
    wrongKey,
    CLIENT_AUTH_DOMAIN,
    clientNonce,
    Uint8Array.from(proof.server_nonce),
    DAEMON_ID,
  );
  await writeAll(pair.client, encodeAuthMessage({ client_auth: [...forged] }));
  await assert.rejects(serving, isReason("invalid_client_auth"));
  // The server closed the connection on failure.
  assert.equal(await pair.client.read(new Uint8Array(1)), null);
});

Deno.test("clientHandshake() refuses a daemon whose id is not the connection file's", async () => {
  await using pair = await tcpPair();
  const otherId = new Uint8Array(16).fill(9);
  const [client] = await Promise.allSettled([
    clientHandshake(pair.client, { key: KEY, daemonId: DAEMON_ID, deadlineMs: GUARD_MS }),
    serverHandshake(pair.server, {
      key: KEY,
      daemonId: otherId,
      daemonVer: "v",
      deadlineMs: GUARD_MS,
    }),
  ]);
  isReason("daemon_id_mismatch")((client as PromiseRejectedResult).reason);
});

Deno.test("an auth message declared over 4096 bytes is refused on its length, before its body", async () => {
  // Server side: only the 4-byte prefix is ever sent. Were the body awaited, the handshake would
  // wait for bytes that never come (the guard is a minute); it fails on the length instead.
  {
    await using pair = await tcpPair();
    const serving = serverHandshake(pair.server, {
      key: KEY,
      daemonId: DAEMON_ID,
      daemonVer: "v",
      deadlineMs: GUARD_MS,
    });
    const prefix = new Uint8Array(4);
    new DataView(prefix.buffer).setUint32(0, MAX_AUTH_MESSAGE_BYTES + 1, true);
    await writeAll(pair.client, prefix);
    await assert.rejects(serving, (e: unknown) => {
      isReason("auth_message_too_large")(e);
      assert.deepEqual((e as SubcWireError).details, { len: 4097, max: 4096 });
      return true;
    });
  }
  // Client side: the "server" answers the hello with a 4 GiB length.
  {
    await using pair = await tcpPair();
    const connecting = clientHandshake(pair.client, {
      key: KEY,
      daemonId: DAEMON_ID,
      deadlineMs: GUARD_MS,
    });
    await readAuthMessage(pair.server);
    await writeAll(pair.server, Uint8Array.of(0xff, 0xff, 0xff, 0xff));
    await assert.rejects(connecting, isReason("auth_message_too_large"));
  }
  // A message of exactly 4096 bytes is still a message (here not valid JSON of the shape).
  {
    await using pair = await tcpPair();
    const serving = serverHandshake(pair.server, {
      key: KEY,
      daemonId: DAEMON_ID,
      daemonVer: "v",
      deadlineMs: GUARD_MS,
    });
    const json = JSON.stringify({ pad: "x".repeat(MAX_AUTH_MESSAGE_BYTES - 10) });
    assert.equal(json.length, MAX_AUTH_MESSAGE_BYTES);
    await writeAll(pair.client, encodeAuthMessage(JSON.parse(json)));
    await assert.rejects(serving, isReason("auth_invalid_message"));
  }
});

Deno.test("encodeAuthMessage() refuses to send a message over 4096 bytes", async () => {
  assert.throws(
    () => encodeAuthMessage({ role: "r".repeat(MAX_AUTH_MESSAGE_BYTES) }),
    isReason("auth_message_too_large"),
  );
  await using pair = await tcpPair();
  await assert.rejects(
    clientHandshake(pair.client, {
      key: KEY,
      daemonId: DAEMON_ID,
      role: "r".repeat(MAX_AUTH_MESSAGE_BYTES),
      deadlineMs: GUARD_MS,
    }),
    isReason("auth_message_too_large"),
  );
  // Nothing was written before the refusal: the peer sees only the close.
  assert.equal(await pair.server.read(new Uint8Array(1)), null);
});

Deno.test("a stalled peer hits the one deadline, on either side", async () => {
  {
    await using pair = await tcpPair();
    // The server reads the hello and then says nothing.
    const connecting = clientHandshake(pair.client, {
      key: KEY,
      daemonId: DAEMON_ID,
      deadlineMs: 200,
    });
    await readAuthMessage(pair.server);
    await assert.rejects(connecting, (e: unknown) => {
      isReason("auth_timeout")(e);
      assert.deepEqual((e as SubcWireError).details, { deadline_ms: 200 });
      return true;
    });
    // The failed side closed its socket.
    assert.equal(await pair.server.read(new Uint8Array(1)), null);
  }
  {
    await using pair = await tcpPair();
    // A client that connects and never sends a byte.
    await assert.rejects(
      serverHandshake(pair.server, {
        key: KEY,
        daemonId: DAEMON_ID,
        daemonVer: "v",
        deadlineMs: 200,
      }),
      isReason("auth_timeout"),
    );
  }
});

Deno.test("a peer that closes mid-handshake or sends garbage fails the handshake with its reason", async () => {
  {
    await using pair = await tcpPair();
    const connecting = clientHandshake(pair.client, {
      key: KEY,
      daemonId: DAEMON_ID,
      deadlineMs: GUARD_MS,
    });
    await readAuthMessage(pair.server);
    await writeAll(pair.server, Uint8Array.of(10, 0, 0, 0, 0x7b)); // 10 bytes announced, 1 sent
    pair.server.close();
    await assert.rejects(connecting, isReason("auth_closed"));
  }
  {
    await using pair = await tcpPair();
    const serving = serverHandshake(pair.server, {
      key: KEY,
      daemonId: DAEMON_ID,
      daemonVer: "v",
      deadlineMs: GUARD_MS,
    });
    await writeAll(pair.client, Uint8Array.of(3, 0, 0, 0, 0xff, 0xfe, 0x00));
    await assert.rejects(serving, isReason("auth_invalid_message"));
  }
});

Deno.test("a handshake is aborted by its signal, with the signal's reason", async () => {
  await using pair = await tcpPair();
  const controller = new AbortController();
  const connecting = clientHandshake(pair.client, {
    key: KEY,
    daemonId: DAEMON_ID,
    deadlineMs: GUARD_MS,
    signal: controller.signal,
  });
  await readAuthMessage(pair.server);
  const reason = new Error("shutting down");
  controller.abort(reason);
  await assert.rejects(connecting, (e) => e === reason);
});

Deno.test("a handshake refuses a key under 32 bytes before sending anything", async () => {
  await using pair = await tcpPair();
  await assert.rejects(
    clientHandshake(pair.client, {
      key: new Uint8Array(31),
      daemonId: DAEMON_ID,
      deadlineMs: GUARD_MS,
    }),
    isReason("auth_key_too_short"),
  );
  assert.equal(await pair.server.read(new Uint8Array(1)), null);
});
