/**
 * Tells the HTTP door when a TCP client has hung up while its request is still being served.
 *
 * `Deno.serve` aborts `request.signal` on a client disconnect only when the whole request fitted
 * in its first 512-byte read (Deno 2.9's HTTP/1.1 path): a hang-up during a request with a larger
 * body is never seen until the answer is written, so a 2,048-input embeddings call kept running
 * every inline chunk for a client long gone (field report F30). On Linux this watch closes the
 * gap from outside the runtime: the door is loopback only, so both ends of every connection are
 * sockets of this host, listed in `/proc/net/tcp` (`tcp6`). A client that closed its socket (or
 * whose process died) leaves an orphan (inode 0: no process holds it; FIN_WAIT2, TIME_WAIT) or no
 * entry at all; a client that only half-closed (shut its write side after sending the body) still
 * holds its socket (inode ≠ 0) and is answered. The watch reads those files every
 * {@link PeerWatchOptions.intervalMs} while some request has been in flight longer than
 * {@link PeerWatchOptions.graceMs}, and aborts that request's signal with an `AbortError`.
 * Elsewhere (no `/proc`, a unix socket door) requests keep `request.signal` alone.
 *
 * @module
 */

/** Options of {@link PeerWatch}. */
export interface PeerWatchOptions {
  /** ms between two looks at the socket tables while requests are watched. @default 250 */
  intervalMs?: number;
  /** A request younger than this many ms is not looked at (most have ended by then). @default 250 */
  graceMs?: number;
  /** Reads a socket table (tests). @default Deno.readTextFile */
  readTable?: (path: string) => Promise<string>;
  /** Monotonic clock, ms. @default performance.now */
  now?: () => number;
}

/** One watched request: dispose it when the request has been answered. */
export interface WatchedRequest extends Disposable {
  /** Aborts when the caller's signal does, or when the client's socket is gone. */
  readonly signal: AbortSignal;
}

interface Entry {
  /** The client's port and the server's port, as `/proc/net/tcp` prints them (4 hex digits). */
  clientPort: string;
  serverPort: string;
  v6: boolean;
  since: number;
  /** Either end of the connection was seen in a table (proof the tables show this connection). */
  seen: boolean;
  ctl: AbortController;
}

const TABLES = { v4: "/proc/net/tcp", v6: "/proc/net/tcp6" } as const;

/** Watches the TCP clients of in-flight requests (module doc). Dispose stops it. */
export class PeerWatch implements Disposable {
  #entries = new Set<Entry>();
  #timer: ReturnType<typeof setTimeout> | undefined;
  #interval: number;
  #grace: number;
  #read: (path: string) => Promise<string>;
  #now: () => number;
  #available: boolean;
  #disposed = false;

  /** @param options Interval, grace, table reader and clock. */
  constructor(options: PeerWatchOptions = {}) {
    this.#interval = options.intervalMs ?? 250;
    this.#grace = options.graceMs ?? 250;
    this.#read = options.readTable ?? ((path) => Deno.readTextFile(path));
    this.#now = options.now ?? (() => performance.now());
    this.#available = options.readTable !== undefined || Deno.build.os === "linux";
  }

  /**
   * Watches one request's client.
   *
   * @param signal The request's own signal (`request.signal`).
   * @param server The door's bound address (a TCP one; anything else is not watched).
   * @param client The client's address (`info.remoteAddr`).
   * @returns The request's signal, aborted by either; dispose it once the request is answered.
   */
  watch(signal: AbortSignal, server: Deno.Addr | undefined, client: Deno.Addr): WatchedRequest {
    if (
      !this.#available || this.#disposed || server?.transport !== "tcp" ||
      client.transport !== "tcp"
    ) {
      return { signal, [Symbol.dispose]: () => {} };
    }
    const entry: Entry = {
      clientPort: hexPort(client.port),
      serverPort: hexPort(server.port),
      v6: client.hostname.includes(":"),
      since: this.#now(),
      seen: false,
      ctl: new AbortController(),
    };
    this.#entries.add(entry);
    this.#schedule();
    return {
      signal: AbortSignal.any([signal, entry.ctl.signal]),
      [Symbol.dispose]: () => void this.#entries.delete(entry),
    };
  }

  /** Stops watching (signals already aborted stay aborted). Idempotent. */
  dispose(): void {
    this.#disposed = true;
    this.#entries.clear();
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  [Symbol.dispose](): void {
    this.dispose();
  }

  #schedule(): void {
    if (this.#timer !== undefined || this.#disposed || this.#entries.size === 0) return;
    this.#timer = setTimeout(() => void this.#tick(), this.#interval);
    Deno.unrefTimer(this.#timer as unknown as number);
  }

  async #tick(): Promise<void> {
    try {
      const now = this.#now();
      const due = [...this.#entries].filter((e) => now - e.since >= this.#grace);
      if (due.length === 0) return;
      const tables = new Map<boolean, Map<string, string>>();
      for (const v6 of new Set(due.map((e) => e.v6))) {
        try {
          tables.set(v6, parseTable(await this.#read(v6 ? TABLES.v6 : TABLES.v4)));
        } catch {
          // No such table here (no /proc, or no IPv6): nothing to watch with.
          if (!v6) this.#available = false;
        }
      }
      for (const e of due) {
        const rows = tables.get(e.v6);
        if (rows === undefined || !this.#entries.has(e)) continue;
        const server = rows.get(`${e.serverPort}>${e.clientPort}`);
        const client = rows.get(`${e.clientPort}>${e.serverPort}`);
        if (client !== undefined && client !== "0") {
          e.seen = true;
          continue;
        }
        if (server !== undefined) e.seen = true;
        if (!e.seen) continue;
        this.#entries.delete(e);
        e.ctl.abort(new DOMException("the client went away", "AbortError"));
      }
    } finally {
      this.#timer = undefined;
      if (!this.#available) this.#entries.clear();
      this.#schedule();
    }
  }
}

function hexPort(port: number): string {
  return port.toString(16).toUpperCase().padStart(4, "0");
}

/**
 * The sockets of `/proc/net/tcp` or `tcp6` (`sl local_address rem_address st tx:rx tr:when
 * retrnsmt uid timeout inode …`, addresses as `HEXADDR:HEXPORT`), keyed `<local port>><remote
 * port>` (hex, as printed), each its inode (`0` for an orphan). One pass, so a tick costs the
 * same for one watched request or thousands.
 */
function parseTable(text: string): Map<string, string> {
  const rows = new Map<string, string>();
  for (const line of text.split("\n").slice(1)) {
    const f = line.trim().split(/\s+/);
    if (f.length < 10) continue;
    const local = f[1]!.slice(f[1]!.lastIndexOf(":") + 1);
    const remote = f[2]!.slice(f[2]!.lastIndexOf(":") + 1);
    const key = `${local}>${remote}`;
    // A live socket wins over an orphan on the same ports (a reused client port).
    if (rows.get(key) === undefined || rows.get(key) === "0") rows.set(key, f[9]!);
  }
  return rows;
}
