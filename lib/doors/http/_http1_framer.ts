/**
 * Where HTTP/1.1 messages begin and end in a byte stream (RFC 9112 §6), without parsing more than
 * that: the head (up to the empty line), then a body framed by `Content-Length`, by chunked
 * transfer coding, or (responses only) by the connection's end. The front layer of the HTTP door
 * (`_front.ts`) uses it to time a request's head and body, and to know when every answer is out.
 * Private to `lib/doors/http/`.
 *
 * @module
 */

/** The head of one message, as far as framing needs it. */
export interface FramedHead {
  /** Request method (`GET`…) or, for a response, undefined. */
  method?: string;
  /** Response status, or undefined for a request. */
  status?: number;
  /** `Content-Length`, when given. */
  contentLength?: number;
  /** True for `Transfer-Encoding: chunked`. */
  chunked: boolean;
}

/** What one {@link Http1Framer.push} saw, in order. */
export type FrameEvent =
  /** A head begins at byte `at` of the pushed bytes. */
  | { kind: "head_start"; at: number }
  /** A head ends just before byte `end` of the pushed bytes (after its empty line's LF). */
  | { kind: "head"; head: FramedHead; end: number }
  | { kind: "end" };

/** Thrown for bytes that are not HTTP/1.1 framing (the connection is then closed). */
export class FramingError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "FramingError";
  }
}

/** Largest head accepted, bytes (the backend refuses far smaller ones; this bounds memory). */
export const MAX_HEAD_BYTES = 1 << 20;

type State =
  | "idle"
  | "head"
  | "body"
  | "chunk_size"
  | "chunk_data"
  | "chunk_crlf"
  | "trailers"
  | "until_close";

/**
 * A streaming framer of one direction of a connection.
 *
 * @example
 * ```ts ignore
 * const f = new Http1Framer("request");
 * f.push(bytes); // → [{kind: "head_start"}, {kind: "head", head}, {kind: "end"}]
 * ```
 */
export class Http1Framer {
  readonly #side: "request" | "response";
  #state: State = "idle";
  #line: number[] = [];
  #head: number[] = [];
  #remaining = 0;
  /** Methods of the requests whose answers this (response) framer waits for, in order. */
  readonly #methods: string[] = [];

  /** @param side `request` (client → server) or `response` (server → client). */
  constructor(side: "request" | "response") {
    this.#side = side;
  }

  /** True between messages (nothing of a next message seen yet). */
  get atBoundary(): boolean {
    return this.#state === "idle";
  }

  /** True while a head is arriving. */
  get inHead(): boolean {
    return this.#state === "head";
  }

  /** True when the message in progress is framed by the connection's end. */
  get untilClose(): boolean {
    return this.#state === "until_close";
  }

  /** Tells a response framer the method of the next request (HEAD answers have no body). */
  expect(method: string): void {
    this.#methods.push(method);
  }

  /**
   * Consumes bytes.
   *
   * @returns The events they complete, in order.
   * @throws {FramingError} for a head over {@link MAX_HEAD_BYTES}, a bad `Content-Length` or chunk
   *   size.
   */
  push(bytes: Uint8Array): FrameEvent[] {
    const events: FrameEvent[] = [];
    let i = 0;
    while (i < bytes.length) {
      switch (this.#state) {
        case "idle":
          // Stray CRLFs between requests are allowed (RFC 9112 §2.2).
          if (this.#side === "request" && (bytes[i] === 0x0d || bytes[i] === 0x0a)) {
            i++;
            break;
          }
          this.#state = "head";
          this.#head = [];
          events.push({ kind: "head_start", at: i });
          break;
        case "head": {
          const b = bytes[i++]!;
          this.#head.push(b);
          if (this.#head.length > MAX_HEAD_BYTES) throw new FramingError("head too large");
          const n = this.#head.length;
          if (
            b === 0x0a && n >= 4 && this.#head[n - 2] === 0x0d && this.#head[n - 3] === 0x0a &&
            this.#head[n - 4] === 0x0d
          ) {
            const head = parseHead(
              new TextDecoder().decode(Uint8Array.from(this.#head)),
              this.#side,
            );
            this.#head = [];
            events.push({ kind: "head", head, end: i });
            this.#afterHead(head, events);
          }
          break;
        }
        case "body": {
          const take = Math.min(this.#remaining, bytes.length - i);
          i += take;
          this.#remaining -= take;
          if (this.#remaining === 0) this.#end(events);
          break;
        }
        case "chunk_size":
        case "trailers": {
          const b = bytes[i++]!;
          this.#line.push(b);
          if (this.#line.length > 8192) throw new FramingError("chunk line too long");
          if (b !== 0x0a) break;
          const line = new TextDecoder().decode(Uint8Array.from(this.#line)).trim();
          this.#line = [];
          if (this.#state === "trailers") {
            if (line === "") this.#end(events);
            break;
          }
          const size = parseInt(line.split(";")[0]!.trim(), 16);
          if (!Number.isSafeInteger(size) || size < 0) throw new FramingError("bad chunk size");
          if (size === 0) this.#state = "trailers";
          else {
            this.#remaining = size;
            this.#state = "chunk_data";
          }
          break;
        }
        case "chunk_data": {
          const take = Math.min(this.#remaining, bytes.length - i);
          i += take;
          this.#remaining -= take;
          if (this.#remaining === 0) {
            this.#state = "chunk_crlf";
            this.#remaining = 2;
          }
          break;
        }
        case "chunk_crlf": {
          i++;
          if (--this.#remaining === 0) this.#state = "chunk_size";
          break;
        }
        case "until_close":
          i = bytes.length;
          break;
      }
    }
    return events;
  }

  #afterHead(head: FramedHead, events: FrameEvent[]): void {
    if (this.#side === "response") {
      const s = head.status ?? 0;
      if (s >= 100 && s < 200 && s !== 101) {
        // An interim answer (100 Continue): the final one is still to come.
        this.#state = "idle";
        return;
      }
      const method = this.#methods.shift();
      if (s === 101) {
        this.#state = "until_close";
        return;
      }
      if (method === "HEAD" || s === 204 || s === 304) return this.#end(events);
    }
    if (head.chunked) {
      this.#state = "chunk_size";
      this.#line = [];
    } else if (head.contentLength !== undefined && head.contentLength > 0) {
      this.#state = "body";
      this.#remaining = head.contentLength;
    } else if (this.#side === "response" && head.contentLength === undefined) {
      this.#state = "until_close";
    } else this.#end(events);
  }

  #end(events: FrameEvent[]): void {
    this.#state = "idle";
    events.push({ kind: "end" });
  }
}

function parseHead(text: string, side: "request" | "response"): FramedHead {
  const lines = text.split("\r\n");
  const first = lines[0] ?? "";
  const head: FramedHead = { chunked: false };
  if (side === "request") head.method = first.split(" ")[0] ?? "";
  else head.status = Number(first.split(" ")[1]);
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(":");
    if (colon <= 0) continue;
    const name = line.slice(0, colon).trim().toLowerCase();
    const value = line.slice(colon + 1).trim();
    if (name === "content-length") {
      const n = Number(value);
      if (!/^\d+$/.test(value) || !Number.isSafeInteger(n)) {
        throw new FramingError("bad content-length");
      }
      head.contentLength = n;
    } else if (name === "transfer-encoding") {
      head.chunked = value.toLowerCase().split(",").map((v) => v.trim()).includes("chunked");
    }
  }
  return head;
}
