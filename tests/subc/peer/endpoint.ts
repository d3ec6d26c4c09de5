/**
 * A raw subc endpoint for tests: an authenticated connection to the peer (or any daemon) that
 * collects every frame it reads and lets a test claim them one by one. With it a test can script a
 * module (send HELLO, answer route.bind, answer requests frame by frame) or a client (route.open,
 * requests, Cancel, Goodbye) without any session logic of its own, so what the peer does is seen
 * frame for frame.
 *
 * @module
 */
import { connectAndAuthenticate } from "../../../lib/subc/auth.ts";
import { readConnectionFile } from "../../../lib/subc/connection_file.ts";
import {
  decodeControlBody,
  encodeControlBody,
  parseControl,
  parseErrorBody,
  PROTOCOL_VER,
  RouteOpenResponseSchema,
} from "../../../lib/subc/control.ts";
import type { ErrorBody, Manifest, RouteOpen } from "../../../lib/subc/control.ts";
import { DATA_FLAGS, FrameType } from "../../../lib/subc/bus_envelope.ts";
import type { FrameInit, SubcFrame } from "../../../lib/subc/bus_envelope.ts";
import { FramedConn } from "./framed_conn.ts";
import type { FrameDirection } from "./framed_conn.ts";
import { DEFAULT_WAIT_MS } from "./peer.ts";
import type { Peer, WaitOptions } from "./peer.ts";

/** Options of {@link connectEndpoint}. */
export interface EndpointOptions {
  /** The unverified role label of the handshake. @default "client" */
  role?: string;
  /** Called with every frame read or queued; must not throw. */
  onFrame?: (direction: FrameDirection, frame: SubcFrame) => void;
}

/** How an endpoint's read loop ended. */
export interface EndpointEnd {
  /** `eof`: the other side closed; `closed`: this side did; `error`: a read or decode failure. */
  reason: "eof" | "closed" | "error";
  /** The failure, for `error` (a `SubcWireError` for a frame that broke the rules). */
  error?: unknown;
}

/** An Error frame answered a request of an {@link Endpoint} helper. */
export class EndpointError extends Error {
  /** The ErrorBody (its `code` is the one to branch on). */
  readonly body: ErrorBody;
  /** The Error frame. */
  readonly frame: SubcFrame;

  /**
   * @param what What was attempted.
   * @param body The ErrorBody.
   * @param frame The Error frame.
   */
  constructor(what: string, body: ErrorBody, frame: SubcFrame) {
    super(`Cannot ${what}: ${body.code}: ${body.message}`);
    this.name = "EndpointError";
    this.body = body;
    this.frame = frame;
  }
}

/** What {@link Endpoint.openRoute} sends; every field has a default. */
export interface OpenRouteInit {
  /** `target.module_id`. @default "synapse" */
  moduleId?: string;
  /** @default {project_root: "/tmp/subc-peer-project", harness: "subc-peer-test", session: "s1"} */
  identity?: RouteOpen["identity"];
  /** Omitted when unset. */
  consumerIdentity?: RouteOpen["consumer_identity"];
  /** Omitted when unset. */
  consumerCapabilities?: string[];
}

/** The default route.open identity of {@link Endpoint.openRoute}. */
export const TEST_IDENTITY: RouteOpen["identity"] = {
  project_root: "/tmp/subc-peer-project",
  harness: "subc-peer-test",
  session: "s1",
};

/**
 * Connects to a daemon (the peer, or the file of any daemon) and authenticates as a client.
 *
 * @param target The peer, or a connection file path.
 * @param options Role label, frame tap.
 * @returns The endpoint, reading in the background.
 * @throws {SubcWireError} from reading the connection file or the handshake.
 */
export async function connectEndpoint(
  target: Peer | string,
  options: EndpointOptions = {},
): Promise<Endpoint> {
  const path = typeof target === "string" ? target : target.connectionFile;
  const info = await readConnectionFile(path);
  const { conn } = await connectAndAuthenticate(info, {
    ...(options.role === undefined ? {} : { role: options.role }),
  });
  return new Endpoint(conn, options);
}

interface Claim {
  predicate: (frame: SubcFrame) => boolean;
  resolve: (frame: SubcFrame) => void;
  reject: (err: Error) => void;
  timer: ReturnType<typeof setTimeout>;
  what: string;
}

/**
 * One connected endpoint. Frames it reads are kept in arrival order until a test claims them with
 * {@link Endpoint.next}; {@link Endpoint.received} keeps every one. Dispose it to close the socket
 * and await its reader.
 */
export class Endpoint implements AsyncDisposable {
  /** The framed socket. */
  readonly framed: FramedConn;
  /** Every frame read, in order (claimed or not). */
  readonly received: SubcFrame[] = [];
  /** Resolves when the read loop ends (never rejects). */
  readonly ended: Promise<EndpointEnd>;
  readonly #unclaimed: SubcFrame[] = [];
  readonly #claims = new Set<Claim>();
  #end: EndpointEnd | undefined;
  #nextCorr = 1n;

  /**
   * @param conn An authenticated socket.
   * @param options The frame tap.
   */
  constructor(conn: Deno.Conn, options: EndpointOptions = {}) {
    this.framed = new FramedConn(conn, options.onFrame ? { onFrame: options.onFrame } : {});
    this.ended = this.#read();
  }

  /** How the read loop ended, or undefined while it runs. */
  get end(): EndpointEnd | undefined {
    return this.#end;
  }

  /**
   * A fresh corr from this endpoint's counter (1, 2, …; a module starts it at 2 after HELLO).
   *
   * @returns The corr.
   */
  corr(): bigint {
    return this.#nextCorr++;
  }

  /**
   * Queues a frame.
   *
   * @param frame The frame.
   * @returns Whether it was written.
   */
  send(frame: FrameInit): Promise<boolean> {
    return this.framed.send(frame);
  }

  /**
   * Queues bytes verbatim.
   *
   * @param bytes Any bytes.
   * @returns Whether they were written.
   */
  sendRaw(bytes: Uint8Array): Promise<boolean> {
    return this.framed.sendRaw(bytes);
  }

  /**
   * Claims the first frame, read or still to come, that matches `predicate` (frames are claimed
   * once; unmatched ones stay for later claims).
   *
   * @param predicate Which frame. @default any
   * @param options Hang guard and what is awaited.
   * @returns The frame.
   * @throws {Error} when the hang guard expires or the connection ends first.
   */
  next(
    predicate: (frame: SubcFrame) => boolean = () => true,
    options: WaitOptions = {},
  ): Promise<SubcFrame> {
    const at = this.#unclaimed.findIndex(predicate);
    if (at >= 0) return Promise.resolve(this.#unclaimed.splice(at, 1)[0]!);
    const what = options.what ?? "a frame";
    if (this.#end !== undefined) {
      return Promise.reject(
        new Error(`Cannot wait for ${what}: the connection ended (${this.#end.reason})`),
      );
    }
    const timeoutMs = options.timeoutMs ?? DEFAULT_WAIT_MS;
    return new Promise<SubcFrame>((resolve, reject) => {
      const claim: Claim = {
        predicate,
        resolve,
        reject,
        what,
        timer: setTimeout(() => {
          this.#claims.delete(claim);
          reject(new Error(`Timed out after ${timeoutMs} ms waiting for ${what}`));
        }, timeoutMs),
      };
      this.#claims.add(claim);
    });
  }

  /**
   * The unclaimed frames that match `predicate`, left unclaimed.
   *
   * @param predicate Which frames. @default all
   * @returns Them, in arrival order.
   */
  pending(predicate: (frame: SubcFrame) => boolean = () => true): SubcFrame[] {
    return this.#unclaimed.filter(predicate);
  }

  /**
   * Module side: sends HELLO (type 9, channel 0, corr 1, flags 0) and claims the answer
   * (HelloAck or Error with corr 1). The corr counter continues at 2.
   *
   * @param manifest The manifest (sent as is).
   * @param options `controlOps` (default `["health.check"]`; `null` sends `null`),
   *   `launchNonce` (omitted when unset), `protocolVer` (default 2).
   * @returns The answer frame and its JSON body.
   */
  async hello(
    manifest: Manifest | Record<string, unknown>,
    options: { controlOps?: string[] | null; launchNonce?: string; protocolVer?: number } = {},
  ): Promise<{ frame: SubcFrame; body: unknown }> {
    const body = {
      manifest,
      protocol_ver: options.protocolVer ?? PROTOCOL_VER,
      control_ops: options.controlOps === undefined ? ["health.check"] : options.controlOps,
      ...(options.launchNonce === undefined ? {} : { launch_nonce: options.launchNonce }),
    };
    this.#nextCorr = 2n;
    await this.send({ type: FrameType.Hello, corr: 1n, body: encodeControlBody(body) });
    const frame = await this.next(
      (f) =>
        f.channel === 0 && f.corr === 1n &&
        (f.type === FrameType.HelloAck || f.type === FrameType.Error),
      { what: "the answer to HELLO" },
    );
    return { frame, body: decodeControlBody(frame.body).value };
  }

  /**
   * Client side: sends `route.open` on channel 0 and claims its answer.
   *
   * @param init Target and identity.
   * @returns The route's channel and epoch on this connection.
   * @throws {EndpointError} when the daemon (or the module, relayed) answers an Error.
   */
  async openRoute(init: OpenRouteInit = {}): Promise<{ channel: number; epoch: number }> {
    const corr = this.corr();
    const open: RouteOpen = {
      op: "route.open",
      target: { kind: "management_surface", module_id: init.moduleId ?? "synapse" },
      identity: init.identity ?? TEST_IDENTITY,
      ...(init.consumerIdentity === undefined ? {} : { consumer_identity: init.consumerIdentity }),
      ...(init.consumerCapabilities === undefined
        ? {}
        : { consumer_capabilities: init.consumerCapabilities }),
      config: [],
    };
    await this.send({ type: FrameType.Request, corr, body: encodeControlBody(open) });
    const frame = await this.next(
      (f) =>
        f.channel === 0 && f.corr === corr &&
        (f.type === FrameType.Response || f.type === FrameType.Error),
      { what: `the answer to route.open corr ${corr}` },
    );
    if (frame.type === FrameType.Error) {
      throw new EndpointError("open the route", parseErrorBody(frame.body), frame);
    }
    const res = parseControl(RouteOpenResponseSchema, frame.body, "route.open reply");
    return { channel: res.route_channel, epoch: res.route_epoch };
  }

  /**
   * Client side: sends a Request on a route and claims its terminal (Response, Error or
   * StreamEnd with the same channel and corr); StreamData frames before it stay unclaimed.
   *
   * @param route The route's channel and epoch.
   * @param body The request body (JSON-encoded), e.g. `{method, params}`.
   * @param options `corr` (default: the next of the counter), `flags` (default 0x02).
   * @returns The terminal frame.
   */
  async call(
    route: { channel: number; epoch: number },
    body: unknown,
    options: { corr?: bigint; flags?: number } & WaitOptions = {},
  ): Promise<SubcFrame> {
    const corr = options.corr ?? this.corr();
    await this.send({
      type: FrameType.Request,
      channel: route.channel,
      epoch: route.epoch,
      corr,
      flags: options.flags ?? DATA_FLAGS,
      body: new TextEncoder().encode(JSON.stringify(body)),
    });
    return await this.next(
      (f) => f.channel === route.channel && f.corr === corr && isTerminal(f.type),
      { what: `the terminal of corr ${corr}`, ...options },
    );
  }

  /** Closes the socket (idempotent); the read loop then ends with `closed`. */
  close(): void {
    this.framed.close();
  }

  /** Closes and awaits the read loop. */
  async [Symbol.asyncDispose](): Promise<void> {
    this.close();
    await this.ended;
  }

  async #read(): Promise<EndpointEnd> {
    let end: EndpointEnd;
    try {
      for await (const frame of this.framed.frames()) {
        this.received.push(frame);
        this.#deliver(frame);
      }
      end = { reason: this.framed.closed ? "closed" : "eof" };
    } catch (error) {
      end = { reason: "error", error };
    }
    this.#end = end;
    for (const claim of [...this.#claims]) {
      this.#claims.delete(claim);
      clearTimeout(claim.timer);
      claim.reject(
        new Error(`Cannot wait for ${claim.what}: the connection ended (${end.reason})`),
      );
    }
    return end;
  }

  #deliver(frame: SubcFrame): void {
    for (const claim of this.#claims) {
      if (claim.predicate(frame)) {
        this.#claims.delete(claim);
        clearTimeout(claim.timer);
        claim.resolve(frame);
        return;
      }
    }
    this.#unclaimed.push(frame);
  }
}

/**
 * Whether frames of `type` end a request: Response, Error, StreamEnd (subc §3).
 *
 * @param type A frame type.
 */
export function isTerminal(type: number): boolean {
  return type === FrameType.Response || type === FrameType.Error || type === FrameType.StreamEnd;
}

/**
 * The JSON of a frame body (strict UTF-8).
 *
 * @param frame A frame.
 * @returns The parsed body.
 * @throws {SubcWireError} `invalid_control_body` when it is not UTF-8 JSON.
 */
export function jsonBody(frame: SubcFrame): unknown {
  return decodeControlBody(frame.body).value;
}
