/**
 * The pre-frame handshake of subc (subc §1 "Auth, before any frame"), both sides.
 *
 * Every message is a u32 little-endian length, then that many bytes of UTF-8 JSON, at most
 * {@link MAX_AUTH_MESSAGE_BYTES}; byte strings travel as JSON arrays of numbers (serde's form of
 * `[u8; N]`). The whole exchange runs under one deadline:
 *
 * 1. client → `{"client_nonce":[32],"role":"client"}`
 * 2. server → `{"daemon_id":[16],"server_nonce":[32],"daemon_ver":s,"server_proof":[32]}`
 * 3. the client checks, in constant time, `server_proof == HMAC_SHA256(key, "subc-server-v1" ‖
 *    cn ‖ sn ‖ daemon_id)`, then that `daemon_id` is the connection file's;
 * 4. client → `{"client_auth":[32]}`, the same HMAC under `"subc-client-v1"`; the server checks it
 *    in constant time.
 *
 * Frames follow at once; there is no "ok" message. `role` is an unverified label, for reports
 * only, never for authorization.
 *
 * The file has two layers. The **pure steps** ({@link startClientAuth}, {@link finishClientAuth},
 * {@link answerClientHello}, {@link checkClientAuth}, the parsers and {@link computeProof}) do no
 * I/O and take their nonces as arguments, so the golden vectors drive them directly. The
 * **drivers** ({@link clientHandshake}, {@link serverHandshake}) run those steps over a
 * `Deno.Conn`-like socket with the length-prefixed framing, the size cap and the deadline.
 *
 * @module
 */
import { SubcWireError } from "./errors.ts";
import type { AuthFailReason } from "./errors.ts";
import type { ConnectionInfo } from "./connection_file.ts";

/** Bytes of each nonce. */
export const NONCE_BYTES = 32;
/** Bytes of each proof (an HMAC-SHA256). */
export const PROOF_BYTES = 32;
/** Bytes of the daemon id. */
export const DAEMON_ID_BYTES = 16;
/** Fewest key bytes a handshake accepts (the connection file's rule). */
export const MIN_KEY_BYTES = 32;
/** Largest auth message body, in bytes; a larger declared length is refused before reading it. */
export const MAX_AUTH_MESSAGE_BYTES = 4096;
/** HMAC domain of the server's proof. */
export const SERVER_PROOF_DOMAIN = "subc-server-v1";
/** HMAC domain of the client's proof. */
export const CLIENT_AUTH_DOMAIN = "subc-client-v1";
/** The role a plain client sends (an unverified label). */
export const DEFAULT_CLIENT_ROLE = "client";
/** Default deadline of a whole handshake, in milliseconds (the TypeScript SDK's 10 s). */
export const DEFAULT_AUTH_DEADLINE_MS = 10_000;

/** Message 1, client → server, as it travels. */
export interface ClientHello {
  /** 32 random bytes. */
  client_nonce: number[];
  /** Unverified label, e.g. `"client"`. */
  role: string;
}

/** Message 2, server → client, as it travels. */
export interface ServerProof {
  /** The daemon's 16-byte id. */
  daemon_id: number[];
  /** 32 random bytes. */
  server_nonce: number[];
  /** The daemon's version string. */
  daemon_ver: string;
  /** `HMAC_SHA256(key, "subc-server-v1" ‖ client_nonce ‖ server_nonce ‖ daemon_id)`. */
  server_proof: number[];
}

/** Message 3, client → server, as it travels. */
export interface ClientAuth {
  /** `HMAC_SHA256(key, "subc-client-v1" ‖ client_nonce ‖ server_nonce ‖ daemon_id)`. */
  client_auth: number[];
}

/**
 * Computes a handshake proof: `HMAC_SHA256(key, domain ‖ clientNonce ‖ serverNonce ‖ daemonId)`,
 * the domain as its UTF-8 bytes (WebCrypto `crypto.subtle`).
 *
 * @param key The connection key (any non-empty length; handshakes require ≥ 32 bytes).
 * @param domain {@link SERVER_PROOF_DOMAIN} or {@link CLIENT_AUTH_DOMAIN}.
 * @param clientNonce The client's nonce.
 * @param serverNonce The server's nonce.
 * @param daemonId The daemon id.
 * @returns The 32-byte proof.
 *
 * @example The server proof of the vectors (subc §7)
 * ```ts
 * import { computeProof, SERVER_PROOF_DOMAIN } from "./auth.ts";
 * import assert from "node:assert/strict";
 *
 * const key = Uint8Array.from({ length: 32 }, (_, i) => i);
 * const proof = await computeProof(
 *   key,
 *   SERVER_PROOF_DOMAIN,
 *   new Uint8Array(32).fill(0xab),
 *   new Uint8Array(32).fill(0xcd),
 *   key.subarray(0, 16),
 * );
 * assert.equal(proof.toHex().slice(0, 8), "ea06076a");
 * ```
 */
export async function computeProof(
  key: Uint8Array,
  domain: string,
  clientNonce: Uint8Array,
  serverNonce: Uint8Array,
  daemonId: Uint8Array,
): Promise<Uint8Array> {
  const domainBytes = new TextEncoder().encode(domain);
  const data = new Uint8Array(
    domainBytes.byteLength + clientNonce.byteLength + serverNonce.byteLength +
      daemonId.byteLength,
  );
  let at = 0;
  for (const part of [domainBytes, clientNonce, serverNonce, daemonId]) {
    data.set(part, at);
    at += part.byteLength;
  }
  const hmacKey = await crypto.subtle.importKey(
    "raw",
    key.slice(),
    { name: "HMAC", hash: "SHA-256" },
    false,
    ["sign"],
  );
  return new Uint8Array(await crypto.subtle.sign("HMAC", hmacKey, data));
}

/**
 * Compares two byte strings in time that depends only on their lengths (lengths are public:
 * proofs are always 32 bytes).
 *
 * @param a First bytes.
 * @param b Second bytes.
 * @returns Whether they are equal.
 */
export function constantTimeEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a.byteLength !== b.byteLength) return false;
  let diff = 0;
  for (let i = 0; i < a.byteLength; i++) diff |= a[i]! ^ b[i]!;
  return diff === 0;
}

/**
 * `n` bytes from the platform CSPRNG (`crypto.getRandomValues`).
 *
 * @param n How many bytes. @default NONCE_BYTES
 * @returns Fresh random bytes.
 */
export function randomNonce(n: number = NONCE_BYTES): Uint8Array {
  return crypto.getRandomValues(new Uint8Array(n));
}

/**
 * Frames one auth message: u32 little-endian length, then the compact JSON of `message`.
 *
 * @param message A JSON-serialisable message.
 * @returns The bytes to write.
 * @throws {SubcWireError} `auth_message_too_large` when the JSON exceeds
 *   {@link MAX_AUTH_MESSAGE_BYTES}.
 */
export function encodeAuthMessage(message: object): Uint8Array {
  const json = new TextEncoder().encode(JSON.stringify(message));
  if (json.byteLength > MAX_AUTH_MESSAGE_BYTES) {
    throw authError(
      "auth_message_too_large",
      `Cannot send auth message: ${json.byteLength} bytes exceed max ${MAX_AUTH_MESSAGE_BYTES}`,
      { len: json.byteLength, max: MAX_AUTH_MESSAGE_BYTES },
    );
  }
  const out = new Uint8Array(4 + json.byteLength);
  new DataView(out.buffer).setUint32(0, json.byteLength, true);
  out.set(json, 4);
  return out;
}

/**
 * Checks a message 1 received by the server.
 *
 * @param value The parsed JSON.
 * @returns The client nonce and role (unknown fields are ignored, as serde does).
 * @throws {SubcWireError} `auth_invalid_message` naming the field.
 */
export function parseClientHello(value: unknown): { clientNonce: Uint8Array; role: string } {
  const obj = asObject(value, "ClientHello");
  return {
    clientNonce: bytesField(obj, "client_nonce", NONCE_BYTES, "ClientHello"),
    role: stringField(obj, "role", "ClientHello"),
  };
}

/**
 * Checks a message 2 received by the client.
 *
 * @param value The parsed JSON.
 * @returns Its fields as bytes (unknown fields are ignored).
 * @throws {SubcWireError} `auth_invalid_message` naming the field.
 */
export function parseServerProof(value: unknown): {
  daemonId: Uint8Array;
  serverNonce: Uint8Array;
  daemonVer: string;
  serverProof: Uint8Array;
} {
  const obj = asObject(value, "ServerProof");
  return {
    daemonId: bytesField(obj, "daemon_id", DAEMON_ID_BYTES, "ServerProof"),
    serverNonce: bytesField(obj, "server_nonce", NONCE_BYTES, "ServerProof"),
    daemonVer: stringField(obj, "daemon_ver", "ServerProof"),
    serverProof: bytesField(obj, "server_proof", PROOF_BYTES, "ServerProof"),
  };
}

/**
 * Checks a message 3 received by the server.
 *
 * @param value The parsed JSON.
 * @returns The client's proof (unknown fields are ignored).
 * @throws {SubcWireError} `auth_invalid_message` naming the field.
 */
export function parseClientAuth(value: unknown): { clientAuth: Uint8Array } {
  const obj = asObject(value, "ClientAuth");
  return { clientAuth: bytesField(obj, "client_auth", PROOF_BYTES, "ClientAuth") };
}

/** Options of {@link startClientAuth}. */
export interface StartClientAuthOptions {
  /** The unverified role label. @default {DEFAULT_CLIENT_ROLE} */
  role?: string | undefined;
  /** The client nonce (tests pass the vectors'). @default {randomNonce()} */
  clientNonce?: Uint8Array | undefined;
}

/**
 * Client step 1: picks the client nonce and builds message 1.
 *
 * @param options Role and nonce.
 * @returns The nonce to keep for step 3, and the message to send.
 * @throws {RangeError} when a given nonce is not 32 bytes.
 */
export function startClientAuth(
  options: StartClientAuthOptions = {},
): { clientNonce: Uint8Array; hello: ClientHello } {
  const clientNonce = options.clientNonce ?? randomNonce();
  checkLength("clientNonce", clientNonce, NONCE_BYTES);
  return {
    clientNonce,
    hello: { client_nonce: [...clientNonce], role: options.role ?? DEFAULT_CLIENT_ROLE },
  };
}

/** What {@link finishClientAuth} needs. */
export interface FinishClientAuthInput {
  /** The connection key (≥ 32 bytes). */
  key: Uint8Array;
  /** The daemon id of the connection file. */
  daemonId: Uint8Array;
  /** The nonce of step 1. */
  clientNonce: Uint8Array;
  /** Message 2 as parsed JSON. */
  serverProof: unknown;
}

/**
 * Client step 3: checks the server's proof (constant time), then the daemon id, and builds
 * message 3.
 *
 * @param input Key, expected daemon id, own nonce and the server's message.
 * @returns Message 3 to send, and the daemon's version string.
 * @throws {SubcWireError} `auth_invalid_message` (shape), `invalid_server_proof` (wrong key or
 *   impostor), `daemon_id_mismatch` (another daemon than the connection file's),
 *   `auth_key_too_short`.
 */
export async function finishClientAuth(
  input: FinishClientAuthInput,
): Promise<{ auth: ClientAuth; daemonVer: string }> {
  checkKey(input.key);
  const msg = parseServerProof(input.serverProof);
  const expected = await computeProof(
    input.key,
    SERVER_PROOF_DOMAIN,
    input.clientNonce,
    msg.serverNonce,
    msg.daemonId,
  );
  if (!constantTimeEqual(expected, msg.serverProof)) {
    throw authError(
      "invalid_server_proof",
      "Cannot authenticate to the subc daemon: its proof does not match the connection key; " +
        "the connection file is stale or another process answers on that port",
    );
  }
  if (!constantTimeEqual(msg.daemonId, input.daemonId)) {
    throw authError(
      "daemon_id_mismatch",
      "Cannot authenticate to the subc daemon: it is not the daemon the connection file names; " +
        "re-read the connection file",
    );
  }
  const clientAuth = await computeProof(
    input.key,
    CLIENT_AUTH_DOMAIN,
    input.clientNonce,
    msg.serverNonce,
    msg.daemonId,
  );
  return { auth: { client_auth: [...clientAuth] }, daemonVer: msg.daemonVer };
}

/** What {@link answerClientHello} needs. */
export interface AnswerClientHelloInput {
  /** The connection key (≥ 32 bytes). */
  key: Uint8Array;
  /** The daemon id (16 bytes). */
  daemonId: Uint8Array;
  /** The daemon's version string. */
  daemonVer: string;
  /** Message 1 as parsed JSON. */
  hello: unknown;
  /** The server nonce (tests pass the vectors'). @default {randomNonce()} */
  serverNonce?: Uint8Array | undefined;
}

/**
 * Server step 2: reads message 1 and builds message 2 with the server proof.
 *
 * @param input Key, daemon id and version, the client's message.
 * @returns Both nonces (kept for step 4), the client's role, and message 2 to send.
 * @throws {SubcWireError} `auth_invalid_message`, `auth_key_too_short`.
 * @throws {RangeError} when `daemonId` is not 16 bytes or a given nonce not 32.
 */
export async function answerClientHello(input: AnswerClientHelloInput): Promise<{
  clientNonce: Uint8Array;
  serverNonce: Uint8Array;
  role: string;
  proof: ServerProof;
}> {
  checkKey(input.key);
  checkLength("daemonId", input.daemonId, DAEMON_ID_BYTES);
  const { clientNonce, role } = parseClientHello(input.hello);
  const serverNonce = input.serverNonce ?? randomNonce();
  checkLength("serverNonce", serverNonce, NONCE_BYTES);
  const proof = await computeProof(
    input.key,
    SERVER_PROOF_DOMAIN,
    clientNonce,
    serverNonce,
    input.daemonId,
  );
  return {
    clientNonce,
    serverNonce,
    role,
    proof: {
      daemon_id: [...input.daemonId],
      server_nonce: [...serverNonce],
      daemon_ver: input.daemonVer,
      server_proof: [...proof],
    },
  };
}

/** What {@link checkClientAuth} needs. */
export interface CheckClientAuthInput {
  /** The connection key. */
  key: Uint8Array;
  /** The daemon id. */
  daemonId: Uint8Array;
  /** The client's nonce (from step 2). */
  clientNonce: Uint8Array;
  /** The server's nonce (from step 2). */
  serverNonce: Uint8Array;
  /** Message 3 as parsed JSON. */
  auth: unknown;
}

/**
 * Server step 4: checks the client's proof in constant time.
 *
 * @param input Key, daemon id, both nonces and the client's message.
 * @throws {SubcWireError} `auth_invalid_message`, `invalid_client_auth`, `auth_key_too_short`.
 */
export async function checkClientAuth(input: CheckClientAuthInput): Promise<void> {
  checkKey(input.key);
  const { clientAuth } = parseClientAuth(input.auth);
  const expected = await computeProof(
    input.key,
    CLIENT_AUTH_DOMAIN,
    input.clientNonce,
    input.serverNonce,
    input.daemonId,
  );
  if (!constantTimeEqual(expected, clientAuth)) {
    throw authError(
      "invalid_client_auth",
      "Cannot accept the subc client: its proof does not match the connection key; " +
        "it read another daemon's connection file",
    );
  }
}

/**
 * The socket a handshake runs over: the part of `Deno.Conn` it uses. `read` and `write` follow
 * `Deno.Conn` (read returns `null` at end of stream; write may write part of the buffer).
 */
export interface AuthConn {
  /** Reads up to `p.byteLength` bytes into `p`; `null` at end of stream. */
  read(p: Uint8Array): Promise<number | null>;
  /** Writes some of `p`; returns how many bytes. */
  write(p: Uint8Array): Promise<number>;
  /** Closes the socket (used when the handshake fails). */
  close(): void;
  /** Disables Nagle's algorithm (`Deno.TcpConn`); called with `true` when present. */
  setNoDelay?(noDelay?: boolean): void;
}

/** Options common to both drivers. */
export interface HandshakeOptions {
  /** The connection key (≥ 32 bytes). */
  key: Uint8Array;
  /** The daemon id: the connection file's (client) or the daemon's own (server); 16 bytes. */
  daemonId: Uint8Array;
  /**
   * The one deadline of the whole handshake, in milliseconds.
   * @default {DEFAULT_AUTH_DEADLINE_MS}
   */
  deadlineMs?: number | undefined;
  /** Aborts the handshake (the connection is closed; the signal's reason is thrown). */
  signal?: AbortSignal | undefined;
}

/** Options of {@link clientHandshake}. */
export interface ClientHandshakeOptions extends HandshakeOptions {
  /** The unverified role label. @default {DEFAULT_CLIENT_ROLE} */
  role?: string | undefined;
}

/** Options of {@link serverHandshake}. */
export interface ServerHandshakeOptions extends HandshakeOptions {
  /** The daemon's version string, sent in message 2. */
  daemonVer: string;
  /**
   * The server nonce (32 bytes). Only for golden tests (the in-test daemon passes the vectors'):
   * a fixed nonce lets a recorded client proof be replayed.
   * @default {randomNonce()}, fresh for each handshake
   */
  serverNonce?: Uint8Array | undefined;
}

/**
 * Runs the client side of the handshake over `conn` (a module or a consumer connecting to the
 * daemon). Sets TCP_NODELAY when the socket supports it. Reads exactly the bytes of each
 * message, so the first frame after the handshake is left unread in the socket.
 *
 * @param conn A connected socket.
 * @param options Key, expected daemon id, role, deadline, signal.
 * @returns The daemon's version string.
 * @throws {SubcWireError} with an {@link AuthFailReason}: `invalid_server_proof`,
 *   `daemon_id_mismatch`, `auth_timeout`, `auth_closed`, `auth_io`, `auth_message_too_large`,
 *   `auth_invalid_message`, `auth_key_too_short`. On any failure `conn` is closed.
 */
export async function clientHandshake(
  conn: AuthConn,
  options: ClientHandshakeOptions,
): Promise<{ daemonVer: string }> {
  return await underDeadline(conn, options, async (io) => {
    checkKey(options.key);
    const { clientNonce, hello } = startClientAuth({ role: options.role });
    await io.send(hello);
    const serverProof = await io.receive("ServerProof");
    const { auth, daemonVer } = await finishClientAuth({
      key: options.key,
      daemonId: options.daemonId,
      clientNonce,
      serverProof,
    });
    await io.send(auth);
    return { daemonVer };
  });
}

/**
 * Runs the server side of the handshake over `conn` (the in-test daemon accepting a module or a
 * consumer). Sets TCP_NODELAY when the socket supports it.
 *
 * @param conn An accepted socket.
 * @param options Key, daemon id and version, deadline, signal.
 * @returns The role the client declared (an unverified label).
 * @throws {SubcWireError} with an {@link AuthFailReason}: `invalid_client_auth`,
 *   `auth_timeout`, `auth_closed`, `auth_io`, `auth_message_too_large`, `auth_invalid_message`,
 *   `auth_key_too_short`. On any failure `conn` is closed.
 */
export async function serverHandshake(
  conn: AuthConn,
  options: ServerHandshakeOptions,
): Promise<{ role: string }> {
  return await underDeadline(conn, options, async (io) => {
    checkKey(options.key);
    const hello = await io.receive("ClientHello");
    const answer = await answerClientHello({
      key: options.key,
      daemonId: options.daemonId,
      daemonVer: options.daemonVer,
      hello,
      serverNonce: options.serverNonce,
    });
    await io.send(answer.proof);
    const auth = await io.receive("ClientAuth");
    await checkClientAuth({
      key: options.key,
      daemonId: options.daemonId,
      clientNonce: answer.clientNonce,
      serverNonce: answer.serverNonce,
      auth,
    });
    return { role: answer.role };
  });
}

/** Options of {@link connectAndAuthenticate}. */
export interface ConnectOptions {
  /** The unverified role label. @default {DEFAULT_CLIENT_ROLE} */
  role?: string | undefined;
  /**
   * Deadline of the handshake, in milliseconds (the TCP connect runs before it, under the
   * same `signal`).
   * @default {DEFAULT_AUTH_DEADLINE_MS}
   */
  deadlineMs?: number | undefined;
  /** Aborts the connect or the handshake. */
  signal?: AbortSignal | undefined;
}

/**
 * Connects to the first endpoint of a connection file over TCP and authenticates as a client.
 *
 * @param info A validated connection file ({@link readConnectionFile}).
 * @param options Role, deadline, signal.
 * @returns The authenticated socket (TCP_NODELAY set), ready for frames, and the daemon version.
 * @throws {SubcWireError} as {@link clientHandshake}.
 * @throws {Deno.errors.ConnectionRefused} (or another connect error) when nothing listens there:
 *   the daemon is not running.
 */
export async function connectAndAuthenticate(
  info: ConnectionInfo,
  options: ConnectOptions = {},
): Promise<{ conn: Deno.TcpConn; daemonVer: string }> {
  const endpoint = info.endpoints[0]!;
  options.signal?.throwIfAborted();
  const conn = await Deno.connect({ hostname: endpoint.host, port: endpoint.port });
  const { daemonVer } = await clientHandshake(conn, {
    key: info.key,
    daemonId: info.daemonId,
    role: options.role,
    deadlineMs: options.deadlineMs,
    signal: options.signal,
  });
  return { conn, daemonVer };
}

interface MessageIo {
  send(message: object): Promise<void>;
  receive(what: string): Promise<unknown>;
}

/**
 * Runs `steps` with message I/O over `conn`, all under one deadline: the first of the steps'
 * end, the deadline, and the signal wins. On failure the socket is closed, which also ends any
 * read still pending on it.
 */
async function underDeadline<T>(
  conn: AuthConn,
  options: HandshakeOptions,
  steps: (io: MessageIo) => Promise<T>,
): Promise<T> {
  const deadlineMs = options.deadlineMs ?? DEFAULT_AUTH_DEADLINE_MS;
  if (!Number.isFinite(deadlineMs) || deadlineMs <= 0) {
    throw new RangeError(
      `Cannot run the subc handshake as 'deadlineMs' must be a positive number: received ${deadlineMs}`,
    );
  }
  conn.setNoDelay?.(true);
  let timer: ReturnType<typeof setTimeout> | undefined;
  let onAbort: (() => void) | undefined;
  const stop = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      reject(authError(
        "auth_timeout",
        `Cannot complete the subc handshake: no answer within ${deadlineMs} ms; ` +
          "the peer is stalled or is not a subc endpoint",
        { deadline_ms: deadlineMs },
      ));
    }, deadlineMs);
    if (options.signal !== undefined) {
      onAbort = () => reject(options.signal!.reason);
      if (options.signal.aborted) onAbort();
      else options.signal.addEventListener("abort", onAbort, { once: true });
    }
  });
  try {
    return await Promise.race([steps(messageIo(conn)), stop]);
  } catch (err) {
    try {
      conn.close();
    } catch {
      // Already closed: nothing more to release.
    }
    throw err;
  } finally {
    clearTimeout(timer);
    if (onAbort !== undefined) options.signal?.removeEventListener("abort", onAbort);
  }
}

function messageIo(conn: AuthConn): MessageIo {
  return {
    async send(message: object): Promise<void> {
      const bytes = encodeAuthMessage(message);
      let at = 0;
      while (at < bytes.byteLength) {
        let n: number;
        try {
          n = await conn.write(bytes.subarray(at));
        } catch (err) {
          throw ioError("write", err);
        }
        at += n;
      }
    },
    async receive(what: string): Promise<unknown> {
      const prefix = await readExact(conn, 4, what);
      const len = new DataView(prefix.buffer).getUint32(0, true);
      if (len > MAX_AUTH_MESSAGE_BYTES) {
        throw authError(
          "auth_message_too_large",
          `Cannot read the subc ${what}: length ${len} exceeds max ${MAX_AUTH_MESSAGE_BYTES}; ` +
            "the peer is not a subc endpoint",
          { len, max: MAX_AUTH_MESSAGE_BYTES },
        );
      }
      const body = await readExact(conn, len, what);
      try {
        return JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(body));
      } catch (err) {
        throw authError(
          "auth_invalid_message",
          `Cannot read the subc ${what}: it is not UTF-8 JSON; the peer is not a subc endpoint`,
          { message: what },
          err,
        );
      }
    },
  };
}

async function readExact(conn: AuthConn, n: number, what: string): Promise<Uint8Array> {
  const buf = new Uint8Array(n);
  let at = 0;
  while (at < n) {
    let got: number | null;
    try {
      got = await conn.read(buf.subarray(at));
    } catch (err) {
      throw ioError("read", err);
    }
    if (got === null) {
      throw authError(
        "auth_closed",
        `Cannot read the subc ${what}: the peer closed the connection mid-handshake; ` +
          "check that the key and daemon match",
        { message: what, expected: n, received: at },
      );
    }
    at += got;
  }
  return buf;
}

function ioError(op: "read" | "write", err: unknown): SubcWireError {
  const text = err instanceof Error ? err.message : String(err);
  return authError(
    "auth_io",
    `Cannot ${op} the subc handshake: ${text}; the connection broke`,
    { op },
    err,
  );
}

function checkKey(key: Uint8Array): void {
  if (key.byteLength < MIN_KEY_BYTES) {
    throw authError(
      "auth_key_too_short",
      `Cannot run the subc handshake: the key has ${key.byteLength} bytes, fewer than ${MIN_KEY_BYTES}`,
      { len: key.byteLength, min: MIN_KEY_BYTES },
    );
  }
}

function checkLength(name: string, bytes: Uint8Array, n: number): void {
  if (bytes.byteLength !== n) {
    throw new RangeError(
      `Cannot use '${name}' as it must be ${n} bytes: received ${bytes.byteLength}`,
    );
  }
}

function asObject(value: unknown, what: string): Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw invalidMessage(what, "", "must be a JSON object");
  }
  return value as Record<string, unknown>;
}

function stringField(obj: Record<string, unknown>, field: string, what: string): string {
  const v = obj[field];
  if (typeof v !== "string") throw invalidMessage(what, field, "must be a string");
  return v;
}

function bytesField(
  obj: Record<string, unknown>,
  field: string,
  n: number,
  what: string,
): Uint8Array {
  const v = obj[field];
  if (!Array.isArray(v) || v.length !== n) {
    throw invalidMessage(what, field, `must be an array of ${n} numbers`);
  }
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) {
    const b = v[i];
    if (typeof b !== "number" || !Number.isInteger(b) || b < 0 || b > 255) {
      throw invalidMessage(what, `${field}.${i}`, "must be an integer 0-255");
    }
    out[i] = b;
  }
  return out;
}

function invalidMessage(what: string, field: string, problem: string): SubcWireError {
  const subject = field === "" ? what : `field '${field}' of the ${what}`;
  return authError(
    "auth_invalid_message",
    `Cannot read the subc ${what}: ${subject} ${problem}; the peer is not a subc v2 endpoint`,
    { message: what, ...(field === "" ? {} : { field }) },
  );
}

function authError(
  reason: AuthFailReason,
  message: string,
  details?: Record<string, unknown>,
  cause?: unknown,
): SubcWireError {
  return new SubcWireError(reason, message, {
    ...(details === undefined ? {} : { details }),
    ...(cause === undefined ? {} : { cause }),
  });
}
