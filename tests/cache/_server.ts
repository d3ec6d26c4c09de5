/**
 * A real HTTP/1.1 file server on a loopback TCP socket for the download tests, written on raw
 * `Deno.listen` so a test controls every byte: it can declare a Content-Length and close early
 * (a truncated body), stop sending and keep the connection open (a stalled body), wait on a gate
 * half-way, ignore Range, omit the length, answer a status or a redirect, send an empty body,
 * reset the connection, or answer each request of a path differently in turn (a `seq` route:
 * the faults of F27). One request per connection (`Connection: close`).
 */

/** How a file route answers. */
export interface FileRoute {
  kind: "file";
  bytes: Uint8Array;
  /** Close the connection once the body reaches this absolute byte offset (Content-Length stays full). */
  truncateAt?: number;
  /** Stop sending at this absolute byte offset and keep the connection open until the server closes. */
  stallAt?: number;
  /** Wait for this promise at this absolute byte offset, then send the rest. */
  gate?: { at: number; open: Promise<void> };
  /** Answer every request 200 with the whole file, ignoring Range. */
  ignoreRange?: boolean;
  /** Send no Content-Length: the body ends when the connection closes. */
  noLength?: boolean;
  /** Answer 200 with an empty body (Content-Length: 0). */
  empty?: boolean;
  /** Close the connection after reading the request, answering nothing. */
  reset?: boolean;
}

/** A route: a file, a bare status, or a redirect. */
export type Route =
  | FileRoute
  | { kind: "status"; status: number }
  | { kind: "redirect"; status: number; location: string }
  /** The n-th request of the path gets `answers[n]` (the last one once they run out). */
  | { kind: "seq"; answers: Route[] };

/** One request the server saw. */
export interface SeenRequest {
  path: string;
  range?: string;
}

/** The server; `await using` closes it and every connection. */
export class TestServer implements AsyncDisposable {
  /** `http://127.0.0.1:<port>`. */
  readonly base: string;
  /** Routes by path; change them between attempts. */
  readonly routes: Map<string, Route> = new Map();
  /** Requests in arrival order. */
  readonly requests: SeenRequest[] = [];
  #listener: Deno.TcpListener;
  #conns = new Set<Deno.TcpConn>();
  #handlers = new Set<Promise<void>>();
  #closed: Promise<void>;
  #close!: () => void;
  #accepting: Promise<void>;

  constructor(hostname = "127.0.0.1") {
    this.#listener = Deno.listen({ hostname, port: 0 });
    this.base = `http://${hostname}:${this.#listener.addr.port}`;
    this.#closed = new Promise((resolve) => (this.#close = resolve));
    this.#accepting = this.#accept();
  }

  /** Requests for `path`. */
  requestsFor(path: string): SeenRequest[] {
    return this.requests.filter((r) => r.path === path);
  }

  async #accept(): Promise<void> {
    try {
      for await (const conn of this.#listener) {
        this.#conns.add(conn);
        const h = this.#handle(conn).catch(() => {}).finally(() => {
          this.#conns.delete(conn);
          try {
            conn.close();
          } catch { /* closed by close() */ }
          this.#handlers.delete(h);
        });
        this.#handlers.add(h);
      }
    } catch { /* listener closed */ }
  }

  async #handle(conn: Deno.TcpConn): Promise<void> {
    const head = await readHead(conn);
    if (head === undefined) return;
    const [requestLine, ...lines] = head.split("\r\n");
    const path = requestLine!.split(" ")[1] ?? "/";
    const headers = new Map(
      lines.map((
        l,
      ) => [l.slice(0, l.indexOf(":")).trim().toLowerCase(), l.slice(l.indexOf(":") + 1).trim()]),
    );
    const range = headers.get("range");
    this.requests.push({ path, ...(range === undefined ? {} : { range }) });
    let route = this.routes.get(path);
    if (route?.kind === "seq") {
      const n = this.requestsFor(path).length - 1;
      route = route.answers[Math.min(n, route.answers.length - 1)];
    }
    if (route === undefined) return await respond(conn, 404, {}, new Uint8Array());
    if (route.kind === "status") return await respond(conn, route.status, {}, new Uint8Array());
    if (route.kind === "redirect") {
      return await respond(conn, route.status, { location: route.location }, new Uint8Array());
    }
    if (route.kind === "seq") throw new Error("nested seq routes are not supported");
    if (route.reset) return;
    if (route.empty) return await respond(conn, 200, {}, new Uint8Array());
    const total = route.bytes.length;
    const m = route.ignoreRange ? null : /^bytes=(\d+)-$/.exec(range ?? "");
    const start = m === null ? 0 : Number(m[1]);
    if (m !== null && start >= total) {
      return await respond(conn, 416, { "content-range": `bytes */${total}` }, new Uint8Array());
    }
    const extra: Record<string, string> = m === null
      ? {}
      : { "content-range": `bytes ${start}-${total - 1}/${total}` };
    const status = m === null ? 200 : 206;
    await writeAll(conn, statusHead(status, extra, route.noLength ? undefined : total - start));
    let pos = start;
    const sendTo = async (to: number): Promise<void> => {
      if (to <= pos) return;
      await writeAll(conn, route.bytes.subarray(pos, to));
      pos = to;
    };
    if (route.gate !== undefined && route.gate.at > pos) {
      await sendTo(route.gate.at);
      await Promise.race([route.gate.open, this.#closed]);
    }
    if (route.stallAt !== undefined) {
      await sendTo(route.stallAt);
      await this.#closed;
      return;
    }
    await sendTo(route.truncateAt ?? total);
  }

  /** Stops accepting, closes every connection and waits for the handlers. */
  async close(): Promise<void> {
    this.#close();
    try {
      this.#listener.close();
    } catch { /* already */ }
    for (const c of this.#conns) {
      try {
        c.close();
      } catch { /* already */ }
    }
    await this.#accepting;
    await Promise.all([...this.#handlers]);
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}

function statusHead(
  status: number,
  headers: Record<string, string>,
  length: number | undefined,
): Uint8Array {
  const lines = [
    `HTTP/1.1 ${status} X`,
    "connection: close",
    "content-type: application/octet-stream",
  ];
  if (length !== undefined) lines.push(`content-length: ${length}`);
  for (const [k, v] of Object.entries(headers)) lines.push(`${k}: ${v}`);
  return new TextEncoder().encode(lines.join("\r\n") + "\r\n\r\n");
}

async function respond(
  conn: Deno.TcpConn,
  status: number,
  headers: Record<string, string>,
  body: Uint8Array,
): Promise<void> {
  await writeAll(conn, statusHead(status, headers, body.length));
  await writeAll(conn, body);
}

async function readHead(conn: Deno.TcpConn): Promise<string | undefined> {
  const buf = new Uint8Array(16384);
  let text = "";
  while (!text.includes("\r\n\r\n")) {
    const n = await conn.read(buf);
    if (n === null) return undefined;
    text += new TextDecoder().decode(buf.subarray(0, n));
  }
  return text.slice(0, text.indexOf("\r\n\r\n"));
}

async function writeAll(conn: Deno.TcpConn, bytes: Uint8Array): Promise<void> {
  let off = 0;
  while (off < bytes.length) off += await conn.write(bytes.subarray(off));
}
