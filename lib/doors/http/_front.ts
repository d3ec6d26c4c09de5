/**
 * The TCP front of the HTTP door: it accepts the loopback connections and hands each one, byte for
 * byte, to `Deno.serve` listening on a private unix socket, enforcing what `Deno.serve` has no
 * setting for. Private to `lib/doors/http/`.
 *
 * | timeout | runs while | on expiry |
 * |---|---|---|
 * | `header_timeout_ms` | a request head arrives (from its first byte, or from the connection's start) | `408` and close (close alone when an answer is under way) |
 * | `body_timeout_ms` | a request body arrives: the longest gap between two of its bytes | close (the request is dropped) |
 * | `idle_timeout_ms` | a kept-alive connection waits for its next request, every answer sent | close |
 *
 * Nothing times the answer itself: a request's own `deadline_ms` does. A client that half-closes
 * (`shutdown(SHUT_WR)`) after a whole request is answered, then the connection closes; the
 * backend never sees that half-close (it would drop the connection unanswered).
 *
 * @module
 */
import { FramingError, Http1Framer } from "./_http1_framer.ts";

/** The front's timeouts, ms. */
export interface FrontTimeouts {
  headerMs: number;
  bodyMs: number;
  idleMs: number;
}

/**
 * One request's view of its client (see {@link Front.watch}); dispose it once answered.
 */
export interface WatchedRequest extends Disposable {
  /** Aborts when the request's own signal does, or when the front saw its client go away. */
  readonly signal: AbortSignal;
}

/**
 * The header the front adds to every request head it relays: `<front token>.<connection id>`.
 * The token is random per front, so a value a client sent itself never matches.
 */
export const FRONT_HEADER = "x-synapse-front";

/** A running front. */
export interface Front {
  /** The bound TCP address. */
  readonly addr: Deno.NetAddr;
  /** Open client connections. */
  readonly connections: number;
  /** Sets the unix socket new connections are relayed to. */
  setBackend(path: string): void;
  /** Stops accepting; open connections go on. Idempotent. */
  stopAccepting(): void;
  /** Stops accepting and closes every connection. Idempotent. */
  close(): void;
  /**
   * The signal of a request `Deno.serve` got through this front: aborted when its client hung
   * up, or its connection was closed by a timeout, before every answer was out (`Deno.serve`'s
   * own `request.signal` misses a hang-up once a request is over its first 512-byte read).
   */
  watch(req: Request): WatchedRequest;
}

const ENC = new TextEncoder();
const CONTINUE_100 = ENC.encode("HTTP/1.1 100 Continue\r\n\r\n");
const TIMEOUT_BODY = JSON.stringify({
  code: "invalid_request",
  message: "Request head not received within http.header_timeout_ms",
});
const TIMEOUT_408 = ENC.encode(
  "HTTP/1.1 408 Request Timeout\r\nconnection: close\r\ncontent-type: application/json\r\n" +
    `content-length: ${ENC.encode(TIMEOUT_BODY).length}\r\n\r\n${TIMEOUT_BODY}`,
);

/**
 * Listens on `hostname:port` and relays each connection to the unix socket `backend`.
 *
 * @throws what `Deno.listen` throws (address in use, not permitted).
 */
export function startFront(
  options: { hostname: string; port: number; backend: string; timeouts: FrontTimeouts },
): Front {
  const listener = Deno.listen({ hostname: options.hostname, port: options.port });
  const open = new Map<number, Relay>();
  const token = crypto.randomUUID().replaceAll("-", "");
  let nextId = 0;
  let closed = false;
  let backend = options.backend;
  (async () => {
    while (true) {
      let conn: Deno.TcpConn;
      try {
        conn = await listener.accept();
      } catch {
        if (closed) return;
        continue; // a connection reset before accept: the listener lives on
      }
      const id = nextId++;
      const relay = new Relay(conn, backend, options.timeouts, `${token}.${id}`);
      open.set(id, relay);
      relay.done.finally(() => open.delete(id));
    }
  })();
  return {
    addr: listener.addr,
    setBackend(path: string): void {
      backend = path;
    },
    get connections(): number {
      return open.size;
    },
    stopAccepting(): void {
      if (closed) return;
      closed = true;
      try {
        listener.close();
      } catch { /* closed */ }
    },
    close(): void {
      this.stopAccepting();
      for (const r of open.values()) r.close();
    },
    watch(req: Request): WatchedRequest {
      // Headers join repeated fields with ", "; only the value this front added can match.
      const mine = (req.headers.get(FRONT_HEADER) ?? "").split(",").map((v) => v.trim())
        .find((v) => v.startsWith(`${token}.`));
      if (mine === undefined) return { signal: req.signal, [Symbol.dispose]() {} };
      const relay = open.get(Number(mine.slice(token.length + 1)));
      // Its connection is gone already: so is the client.
      const gone = relay?.gone ?? AbortSignal.abort(goneReason());
      return { signal: AbortSignal.any([req.signal, gone]), [Symbol.dispose]() {} };
    },
  };
}

/** One client connection and its backend connection. */
class Relay {
  readonly done: Promise<void>;
  #client: Deno.TcpConn;
  #backend: Deno.UnixConn | undefined;
  #t: FrontTimeouts;
  #req = new Http1Framer("request");
  #res = new Http1Framer("response");
  /** Requests whose heads went to the backend and whose answers are not all out. */
  #outstanding = 0;
  #clientEnded = false;
  #closed = false;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #served = 0;
  #writes: Promise<unknown> = Promise.resolve();
  #resolve!: () => void;
  #gone = new AbortController();
  /** `\r\n` + the {@link FRONT_HEADER} line, put before the empty line ending each head. */
  #mark: Uint8Array;
  /** Bytes of a head that began in an earlier read, held until it ends. */
  #headBytes: Uint8Array[] = [];

  constructor(client: Deno.TcpConn, backend: string, timeouts: FrontTimeouts, mark: string) {
    this.#client = client;
    this.#mark = ENC.encode(`${FRONT_HEADER}: ${mark}\r\n`);
    this.#t = timeouts;
    this.done = new Promise((r) => this.#resolve = r);
    // A new connection has header_timeout_ms to send its first head.
    this.#arm(timeouts.headerMs, "header");
    void this.#run(backend);
  }

  async #run(path: string): Promise<void> {
    try {
      this.#backend = await Deno.connect({ transport: "unix", path });
    } catch {
      this.close();
      return;
    }
    if (this.#closed) {
      this.close();
      return;
    }
    await Promise.all([this.#up(), this.#down()]);
    this.close();
  }

  /** Client → backend. */
  async #up(): Promise<void> {
    const buf = new Uint8Array(64 * 1024);
    while (!this.#closed) {
      let n: number | null;
      try {
        n = await this.#client.read(buf);
      } catch {
        return this.close();
      }
      if (n === null) {
        this.#clientEnded = true;
        if (!this.#req.atBoundary) {
          // Half a request: the backend hears the end too, and answers what it can.
          this.#clear();
          await this.#backend!.closeWrite().catch(() => {});
        } else if (this.#outstanding === 0) this.close();
        else {
          // Answers are still due: a half-close (shutdown(SHUT_WR)) is answered, then the
          // connection closes; a client that went away entirely must still cancel its request.
          this.#clear();
          await this.#probeGone();
        }
        return;
      }
      const chunk = buf.subarray(0, n);
      let events;
      try {
        events = this.#req.push(chunk);
      } catch (err) {
        if (err instanceof FramingError) return this.close();
        throw err;
      }
      // What goes to the backend: the bytes read, each head marked with this connection.
      const out: Uint8Array[] = [];
      let pos = 0;
      for (const e of events) {
        if (e.kind === "head_start") {
          out.push(chunk.subarray(pos, e.at));
          pos = e.at;
          this.#headBytes = [];
        } else if (e.kind === "head") {
          const head = concat([...this.#headBytes, chunk.subarray(pos, e.end)]);
          this.#headBytes = [];
          // `…\r\n\r\n` → `…\r\n<mark>\r\n`.
          out.push(head.subarray(0, head.length - 2), this.#mark, head.subarray(head.length - 2));
          pos = e.end;
        }
      }
      if (this.#req.inHead) this.#headBytes.push(chunk.slice(pos));
      else out.push(chunk.subarray(pos));
      for (const e of events) {
        if (e.kind === "head_start") {
          // The head timeout runs from its first byte; an idle timer gives way to it.
          if (this.#served > 0 || this.#outstanding > 0) this.#arm(this.#t.headerMs, "header");
        } else if (e.kind === "head") {
          this.#outstanding++;
          this.#res.expect(e.head.method ?? "GET");
          this.#clear();
        } else if (e.kind === "end") {
          this.#clear();
        }
      }
      if (!this.#req.atBoundary && !this.#req.inHead) this.#arm(this.#t.bodyMs, "body");
      try {
        for (const part of out) if (part.length > 0) await writeAll(this.#backend!, part);
      } catch {
        return this.close();
      }
    }
  }

  /** Aborts once this connection closes with answers still due (its client is gone). */
  get gone(): AbortSignal {
    return this.#gone.signal;
  }

  /**
   * After the client's end of stream with an answer due: tells a half-closed client (it still
   * reads) from one that closed (it answers a write with a reset). An interim `100 Continue` is
   * written, which every HTTP/1.1 client skips (RFC 9110 §15.2), and a second one once the reset
   * of a closed peer would be back; when that write fails, the client is gone and the connection
   * closes, so the backend cancels the request as for any hang-up. A client that ends its side
   * while its answer is already streaming is taken as gone: see the loop.
   */
  async #probeGone(): Promise<void> {
    for (let i = 0; i < 2 && !this.#closed; i++) {
      // Only before the answer starts: 1xx may not come inside a response. An answer already
      // streaming cannot be probed without changing its bytes: its client is taken as gone (its
      // request is cancelled, what the backend still sends is relayed), so a hung-up stream
      // waiting on a slow step stops at once rather than at its next write.
      if (!this.#res.atBoundary) {
        if (i === 0) this.#gone.abort(goneReason());
        return;
      }
      try {
        await this.#toClient(CONTINUE_100, () => this.#res.atBoundary && this.#outstanding > 0);
      } catch {
        return this.close();
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** Backend → client. */
  async #down(): Promise<void> {
    const buf = new Uint8Array(64 * 1024);
    while (!this.#closed) {
      let n: number | null;
      try {
        n = await this.#backend!.read(buf);
      } catch {
        return this.close();
      }
      if (n === null) return this.close();
      const chunk = buf.subarray(0, n);
      let ended = 0;
      try {
        for (const e of this.#res.push(chunk)) if (e.kind === "end") ended++;
      } catch {
        ended = 0; // not framing we can follow: relay until either side closes
      }
      // Counted before the write, so a probe (#probeGone) never follows a whole answer.
      this.#outstanding = Math.max(0, this.#outstanding - ended);
      try {
        await this.#toClient(chunk);
      } catch {
        return this.close();
      }
      if (ended > 0) {
        this.#served += ended;
        if (this.#outstanding === 0) {
          if (this.#clientEnded) return this.close();
          if (this.#req.atBoundary) this.#arm(this.#t.idleMs, "idle");
        }
      }
    }
  }

  /** Writes to the client after any write under way; `when` is checked at its turn. */
  #toClient(bytes: Uint8Array, when: () => boolean = () => true): Promise<void> {
    const run = this.#writes.then(() => when() ? writeAll(this.#client, bytes) : undefined);
    this.#writes = run.catch(() => {});
    return run;
  }

  #arm(ms: number, kind: "header" | "body" | "idle"): void {
    this.#clear();
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      if (kind === "header" && this.#outstanding === 0) {
        void this.#toClient(TIMEOUT_408, () => this.#outstanding === 0).catch(() => {})
          .finally(() => this.close());
        return;
      }
      this.close();
    }, ms);
  }

  #clear(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#clear();
    if (this.#outstanding > 0 || this.#headBytes.length > 0 || !this.#req.atBoundary) {
      this.#gone.abort(goneReason());
    }
    try {
      this.#client.close();
    } catch { /* closed */ }
    try {
      this.#backend?.close();
    } catch { /* closed */ }
    this.#resolve();
  }
}

function goneReason(): DOMException {
  return new DOMException("the client went away", "AbortError");
}

function concat(parts: Uint8Array[]): Uint8Array {
  if (parts.length === 1) return parts[0]!;
  const all = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let off = 0;
  for (const p of parts) {
    all.set(p, off);
    off += p.length;
  }
  return all;
}

async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  let off = 0;
  while (off < bytes.length) off += await conn.write(bytes.subarray(off));
}
