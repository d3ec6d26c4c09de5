/**
 * A scripted daemon for the consumer's unit tests: a real loopback listener, a real connection
 * file (0600) and the real server handshake, then every frame a client sends goes to the test's
 * `onFrame`, which answers by hand. No routing, no module: each test plays the daemon's part it
 * needs (a route.open refusal, a stale epoch, a Cancel's terminal) and records what the client
 * sent, byte for byte. The full daemon stand-in is the test peer (`_peer.ts`).
 */
import { serverHandshake } from "../../lib/subc/auth.ts";
import { writeConnectionFile } from "../../lib/subc/connection_file.ts";
import type { ConnectionInfo } from "../../lib/subc/connection_file.ts";
import { encodeControlBody } from "../../lib/subc/control.ts";
import {
  CONTROL_FLAGS,
  DATA_FLAGS,
  encodeFrame,
  FLAG_DAEMON_ORIGIN,
  FrameDecoder,
  FrameType,
} from "../../lib/subc/bus_envelope.ts";
import type { FrameInit, SubcFrame } from "../../lib/subc/bus_envelope.ts";

/** One accepted client connection, as the script sees it. */
export interface ScriptedConn {
  /** Connection number, 1, 2, … in accept order. */
  id: number;
  /** Sends a frame to the client. */
  send(frame: FrameInit): Promise<void>;
  /** Closes the connection (the client reads end of stream). */
  close(): void;
}

/** Helpers for the usual answers. */
export interface Reply {
  /** Channel-0 Response to a route.open: `{op, route_channel, route_epoch}`. */
  routeOpened(corr: bigint, channel: number, epoch: number): Promise<void>;
  /** Channel-0 Error `{code, message, detail?}`. */
  controlError(corr: bigint, code: string, detail?: unknown): Promise<void>;
  /** Data Response with a JSON body, on the request's route. */
  json(request: SubcFrame, value: unknown): Promise<void>;
  /** Data Error `{code, message}` on the request's route; `daemon` sets DAEMON_ORIGIN. */
  error(
    request: SubcFrame,
    code: string,
    options?: { daemon?: boolean; detail?: unknown },
  ): Promise<void>;
}

/** A scripted daemon. */
export interface ScriptedDaemon extends AsyncDisposable {
  /** The connection file (pass as `--subc` or `connectionFile`). */
  connectionFile: string;
  /** The temp directory holding it. */
  dir: string;
  /** Its port. */
  port: number;
  /** Every frame received, with its connection id, in order. */
  received: { conn: number; frame: SubcFrame }[];
  /** Connections accepted. */
  connections: ScriptedConn[];
  /** Answer helpers bound to a connection. */
  reply(conn: ScriptedConn): Reply;
  /** Resolves once `predicate` holds over `received` (checked after each frame). */
  until(predicate: () => boolean, what?: string): Promise<void>;
  /** Stops listening and closes every connection. */
  close(): Promise<void>;
}

/** The script: called for every frame a client sends (after the handshake). */
export type OnFrame = (frame: SubcFrame, conn: ScriptedConn, reply: Reply) => void | Promise<void>;

const HANG_GUARD_MS = 60_000;

/**
 * Starts a scripted daemon.
 *
 * @param onFrame What the daemon does with each frame.
 */
export async function startScriptedDaemon(onFrame: OnFrame): Promise<ScriptedDaemon> {
  const dir = await Deno.makeTempDir({ prefix: "subc-scripted-" });
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const info: ConnectionInfo = {
    schema: 1,
    wireVersion: 2,
    endpoints: [{ host: "127.0.0.1", port: listener.addr.port }],
    key: crypto.getRandomValues(new Uint8Array(32)),
    daemonId: crypto.getRandomValues(new Uint8Array(16)),
    pid: Deno.pid,
    daemonVer: "0.0.0-scripted",
  };
  const connectionFile = `${dir}/run/subc-connection.json`;
  await writeConnectionFile(connectionFile, info);
  const received: { conn: number; frame: SubcFrame }[] = [];
  const connections: ScriptedConn[] = [];
  const sockets: Deno.TcpConn[] = [];
  const tasks = new Set<Promise<void>>();
  let waiters: (() => void)[] = [];
  const notify = (): void => {
    const w = waiters;
    waiters = [];
    for (const f of w) f();
  };

  const reply = (conn: ScriptedConn): Reply => ({
    routeOpened: (corr, channel, epoch) =>
      conn.send({
        type: FrameType.Response,
        corr,
        body: encodeControlBody({ op: "route.open", route_channel: channel, route_epoch: epoch }),
      }),
    controlError: (corr, code, detail) =>
      conn.send({
        type: FrameType.Error,
        corr,
        body: encodeControlBody({
          code,
          message: `scripted ${code}`,
          ...(detail === undefined ? {} : { detail }),
        }),
      }),
    json: (req, value) =>
      conn.send({
        type: FrameType.Response,
        flags: DATA_FLAGS,
        channel: req.channel,
        epoch: req.epoch,
        corr: req.corr,
        body: new TextEncoder().encode(JSON.stringify(value)),
      }),
    error: (req, code, options = {}) =>
      conn.send({
        type: FrameType.Error,
        flags: DATA_FLAGS | (options.daemon ? FLAG_DAEMON_ORIGIN : 0),
        channel: req.channel,
        epoch: req.epoch,
        corr: req.corr,
        body: encodeControlBody({
          code,
          message: `scripted ${code}`,
          ...(options.detail === undefined ? {} : { detail: options.detail }),
        }),
      }),
  });

  const serve = async (socket: Deno.TcpConn, id: number): Promise<void> => {
    try {
      await serverHandshake(socket, {
        key: info.key,
        daemonId: info.daemonId,
        daemonVer: info.daemonVer,
      });
    } catch {
      return;
    }
    let chain = Promise.resolve();
    const conn: ScriptedConn = {
      id,
      send(frame: FrameInit): Promise<void> {
        const bytes = encodeFrame({ flags: CONTROL_FLAGS, ...frame });
        chain = chain.then(async () => {
          let at = 0;
          while (at < bytes.byteLength) at += await socket.write(bytes.subarray(at));
        }).catch(() => {});
        return chain;
      },
      close(): void {
        try {
          socket.close();
        } catch { /* closed */ }
      },
    };
    connections.push(conn);
    const decoder = new FrameDecoder();
    const buf = new Uint8Array(64 * 1024);
    try {
      for (;;) {
        const n = await socket.read(buf);
        if (n === null) break;
        for (const frame of decoder.push(buf.subarray(0, n))) {
          received.push({ conn: id, frame });
          await onFrame(frame, conn, reply(conn));
          notify();
        }
      }
    } catch {
      // Closed by the test or the client.
    }
    notify();
  };

  const acceptLoop = (async () => {
    let id = 0;
    try {
      for await (const socket of listener) {
        sockets.push(socket);
        const t = serve(socket, ++id);
        tasks.add(t);
        t.finally(() => tasks.delete(t));
      }
    } catch {
      // Listener closed.
    }
  })();

  let closing: Promise<void> | undefined;
  const daemon: ScriptedDaemon = {
    connectionFile,
    dir,
    port: listener.addr.port,
    received,
    connections,
    reply,
    until(predicate: () => boolean, what = "a condition"): Promise<void> {
      return new Promise((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error(`scripted daemon: timed out waiting for ${what}`)),
          HANG_GUARD_MS,
        );
        const check = (): void => {
          if (predicate()) {
            clearTimeout(timer);
            resolve();
          } else waiters.push(check);
        };
        check();
      });
    },
    close(): Promise<void> {
      closing ??= (async () => {
        try {
          listener.close();
        } catch { /* closed */ }
        for (const s of sockets) {
          try {
            s.close();
          } catch { /* closed */ }
        }
        await acceptLoop;
        await Promise.allSettled([...tasks]);
        await Deno.remove(dir, { recursive: true }).catch(() => {});
      })();
      return closing;
    },
    [Symbol.asyncDispose](): Promise<void> {
      return this.close();
    },
  };
  return daemon;
}

/** The JSON of a frame body. */
export function bodyJson(frame: SubcFrame): unknown {
  return JSON.parse(new TextDecoder().decode(frame.body));
}
