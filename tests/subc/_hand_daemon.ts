/**
 * A hand-driven daemon side for module-session tests, built only from the wire library: a
 * loopback listener, a 0600 connection file, the server half of the handshake, and a frame queue
 * each test reads and writes itself (HELLO, HELLO_ACK, route.bind, requests, Cancel, Goodbye).
 * It has no policy of its own, so every frame a test sees is one the module sent.
 */
import assert from "node:assert/strict";
import { serverHandshake } from "../../lib/subc/auth.ts";
import { writeConnectionFile } from "../../lib/subc/connection_file.ts";
import type { ConnectionInfo } from "../../lib/subc/connection_file.ts";
import { encodeFrame, FrameDecoder, FrameType } from "../../lib/subc/bus_envelope.ts";
import type { FrameInit, SubcFrame } from "../../lib/subc/bus_envelope.ts";
import { parseHello } from "../../lib/subc/control.ts";
import type { Hello } from "../../lib/subc/control.ts";

/** Hang guard of every wait: far longer than any step takes, so only a hang trips it. */
export const GUARD_MS = 120_000;

const enc = new TextEncoder();
const dec = new TextDecoder();

/** A JSON body. */
export function json(value: unknown): Uint8Array {
  return enc.encode(JSON.stringify(value));
}

/** The JSON of a frame body. */
// deno-lint-ignore no-explicit-any
export function bodyOf(frame: SubcFrame): any {
  return JSON.parse(dec.decode(frame.body));
}

/** The listener and connection file of the hand daemon. */
export class HandDaemon implements AsyncDisposable {
  readonly listener: Deno.TcpListener;
  readonly info: ConnectionInfo;
  readonly connectionFile: string;
  readonly links: DaemonLink[] = [];

  private constructor(listener: Deno.TcpListener, info: ConnectionInfo, path: string) {
    this.listener = listener;
    this.info = info;
    this.connectionFile = path;
  }

  /**
   * Listens on 127.0.0.1 and publishes `<dir>/run/subc-connection.json`.
   */
  static async start(dir: string): Promise<HandDaemon> {
    const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    const info: ConnectionInfo = {
      schema: 1,
      wireVersion: 2,
      endpoints: [{ host: "127.0.0.1", port: listener.addr.port }],
      key: crypto.getRandomValues(new Uint8Array(32)),
      daemonId: crypto.getRandomValues(new Uint8Array(16)),
      pid: Deno.pid,
      daemonVer: "hand-daemon 0",
    };
    const path = `${dir}/run/subc-connection.json`;
    await writeConnectionFile(path, info);
    return new HandDaemon(listener, info, path);
  }

  /** Accepts the next module connection and runs the server handshake. */
  async accept(): Promise<DaemonLink> {
    const conn = await guard(this.listener.accept(), "a module to connect");
    await serverHandshake(conn, {
      key: this.info.key,
      daemonId: this.info.daemonId,
      daemonVer: this.info.daemonVer,
    });
    const link = new DaemonLink(conn);
    this.links.push(link);
    return link;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    for (const l of this.links) l.close();
    try {
      this.listener.close();
    } catch { /* closed */ }
    await Promise.all(this.links.map((l) => l.closed));
  }
}

/** One authenticated module connection, seen from the daemon. */
export class DaemonLink {
  readonly conn: Deno.TcpConn;
  /** Every frame the module sent, in order. */
  readonly seen: SubcFrame[] = [];
  /** Resolves when the module closed the connection (or it broke). */
  readonly closed: Promise<void>;
  #queue: SubcFrame[] = [];
  #waiters: (() => void)[] = [];
  #ended = false;

  constructor(conn: Deno.TcpConn) {
    this.conn = conn;
    this.closed = this.#read();
  }

  async #read(): Promise<void> {
    const decoder = new FrameDecoder();
    const buf = new Uint8Array(64 * 1024);
    try {
      while (true) {
        const n = await this.conn.read(buf);
        if (n === null) break;
        for (const f of decoder.push(buf.subarray(0, n))) {
          this.seen.push(f);
          this.#queue.push(f);
        }
        this.#wake();
      }
    } catch { /* closed here, or reset */ }
    this.#ended = true;
    this.#wake();
  }

  #wake(): void {
    const w = this.#waiters;
    this.#waiters = [];
    for (const f of w) f();
  }

  /** True once the module's side ended. */
  get ended(): boolean {
    return this.#ended;
  }

  /** Writes frames, all in one write (so the module reads them together). */
  async send(...frames: FrameInit[]): Promise<void> {
    const parts = frames.map((f) => encodeFrame(f));
    const all = new Uint8Array(parts.reduce((n, p) => n + p.byteLength, 0));
    let at = 0;
    for (const p of parts) {
      all.set(p, at);
      at += p.byteLength;
    }
    let off = 0;
    while (off < all.byteLength) off += await this.conn.write(all.subarray(off));
  }

  /**
   * Takes the first frame (received or to come) that matches; frames before it stay queued.
   *
   * @throws {Error} when the module closes first, or after {@link GUARD_MS}.
   */
  async take(match: (f: SubcFrame) => boolean, what: string): Promise<SubcFrame> {
    const deadline = Date.now() + GUARD_MS;
    while (true) {
      const i = this.#queue.findIndex(match);
      if (i >= 0) return this.#queue.splice(i, 1)[0]!;
      if (this.#ended) throw new Error(`the module closed the connection before ${what}`);
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`hang guard: no ${what} within ${GUARD_MS} ms`);
      let timer: ReturnType<typeof setTimeout> | undefined;
      await new Promise<void>((resolve) => {
        this.#waiters.push(resolve);
        timer = setTimeout(resolve, left);
      });
      clearTimeout(timer);
    }
  }

  /** The next frame on `channel` answering `corr` (a Response or an Error, or any type given). */
  reply(channel: number, corr: bigint, what = `the reply to corr ${corr}`): Promise<SubcFrame> {
    return this.take(
      (f) =>
        f.channel === channel && f.corr === corr &&
        (f.type === FrameType.Response || f.type === FrameType.Error),
      what,
    );
  }

  /** Reads the HELLO (checked as the daemon would) and returns its frame and body. */
  async hello(): Promise<{ frame: SubcFrame; hello: Hello }> {
    const frame = await this.take((f) => f.type === FrameType.Hello, "HELLO");
    return { frame, hello: parseHello(frame.body) };
  }

  /** Sends HELLO_ACK (`negotiated_ver` 2 unless overridden), echoing HELLO's corr 1. */
  ackFrame(body: Record<string, unknown> = {}): FrameInit {
    return {
      type: FrameType.HelloAck,
      corr: 1n,
      body: json({
        negotiated_ver: 2,
        subc_ops: ["route.bind", "route.open", "catalog.update"],
        subc_capabilities: ["manifest_registration_v1"],
        ...body,
      }),
    };
  }

  /** A route.bind request for the synapse management surface. */
  bindFrame(
    corr: bigint,
    channel: number,
    epoch: number,
    extra: Record<string, unknown> = {},
  ): FrameInit {
    return {
      type: FrameType.Request,
      corr,
      body: json({
        op: "route.bind",
        route_channel: channel,
        epoch,
        target: { kind: "management_surface", module_id: "synapse" },
        identity: { project_root: "/tmp/project", harness: "test", session: "s1" },
        principal: { kind: "direct" },
        ...extra,
      }),
    };
  }

  /**
   * Binds a route and waits until the module is ready for it: retries while the answer is
   * `module_not_initialized` (the module opens its store after HELLO_ACK).
   *
   * @returns The ack frame.
   */
  async bindReady(
    corrs: { next(): bigint },
    channel: number,
    epoch: number,
    extra: Record<string, unknown> = {},
  ): Promise<SubcFrame> {
    while (true) {
      const corr = corrs.next();
      await this.send(this.bindFrame(corr, channel, epoch, extra));
      const reply = await this.reply(0, corr, `the route.bind reply (corr ${corr})`);
      if (reply.type === FrameType.Error && bodyOf(reply).code === "module_not_initialized") {
        // Not a timing assert: a pause before asking again while the module opens its store.
        await new Promise((r) => setTimeout(r, 20));
        continue;
      }
      assert.equal(reply.type, FrameType.Response, JSON.stringify(bodyOf(reply)));
      return reply;
    }
  }

  /** Sends a data Request `{method, params}` on a route. */
  requestFrame(
    channel: number,
    epoch: number,
    corr: bigint,
    body: unknown,
  ): FrameInit {
    return {
      type: FrameType.Request,
      channel,
      epoch,
      corr,
      flags: 0x02,
      body: body instanceof Uint8Array ? body : json(body),
    };
  }

  /** A Ping on channel 0 and its Pong. */
  async ping(corr: bigint): Promise<SubcFrame> {
    await this.send({ type: FrameType.Ping, corr });
    return await this.take((f) => f.type === FrameType.Pong && f.corr === corr, "the Pong");
  }

  /** Closes the daemon's side. Idempotent. */
  close(): void {
    try {
      this.conn.close();
    } catch { /* closed */ }
  }
}

/** A corr counter for the daemon's side (channel-0 requests and data requests alike). */
export function corrCounter(start = 100n): { next(): bigint } {
  let n = start;
  return { next: () => n++ };
}

async function guard<T>(p: Promise<T>, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    return await Promise.race([
      p,
      new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`hang guard: no ${what} within ${GUARD_MS} ms`)),
          GUARD_MS,
        );
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}
