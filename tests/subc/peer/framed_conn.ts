/**
 * A subc frame stream over one authenticated socket, for the test peer and its test endpoints:
 * reads frames with the library's {@link FrameDecoder} (a pull-based iterator, so a consumer that
 * stops pulling stalls the reader, as the daemon's credit window does) and writes frames one at a
 * time, in the order they were queued, never interleaving two frames' bytes.
 *
 * Nothing here knows the protocol beyond the envelope: routing, HELLO and the credit window are the
 * peer's ({@link ./peer.ts}).
 *
 * @module
 */
import { encodeFrame, FrameDecoder } from "../../../lib/subc/bus_envelope.ts";
import type { FrameInit, SubcFrame } from "../../../lib/subc/bus_envelope.ts";

/** Which way a frame went, seen from the owner of the {@link FramedConn}. */
export type FrameDirection = "in" | "out";

/** Options of {@link FramedConn}. */
export interface FramedConnOptions {
  /**
   * Called with every frame read (`"in"`, before the consumer sees it) and every frame queued for
   * writing (`"out"`, in queue order; raw bytes are decoded for this when they parse). For logs
   * and frame taps; must not throw.
   */
  onFrame?: (direction: FrameDirection, frame: SubcFrame) => void;
}

/** Bytes asked of the socket per read. */
const READ_CHUNK_BYTES = 64 * 1024;

/**
 * One socket carrying subc frames (after the handshake). Idempotent {@link FramedConn.close};
 * writes after close resolve `false` instead of throwing.
 */
export class FramedConn {
  /** The socket. */
  readonly conn: Deno.Conn;
  readonly #decoder = new FrameDecoder();
  readonly #onFrame: ((direction: FrameDirection, frame: SubcFrame) => void) | undefined;
  #writing: Promise<unknown> = Promise.resolve();
  #closed = false;

  /**
   * @param conn An authenticated socket; this object owns it from now on.
   * @param options The frame tap.
   */
  constructor(conn: Deno.Conn, options: FramedConnOptions = {}) {
    this.conn = conn;
    this.#onFrame = options.onFrame;
  }

  /** Whether {@link FramedConn.close} ran (or a write failed, which closes too). */
  get closed(): boolean {
    return this.#closed;
  }

  /**
   * Queues one frame. The frame is encoded at once, so a frame that breaks the envelope rules
   * throws here and nothing is queued.
   *
   * @param frame The frame; omitted fields are 0 / empty.
   * @returns Resolves `true` once every byte is written, `false` when the connection closed first
   *   (or the write failed, which closes it).
   * @throws {SubcWireError} from {@link encodeFrame} for a frame a peer would refuse.
   */
  send(frame: FrameInit): Promise<boolean> {
    const bytes = encodeFrame(frame);
    return this.#enqueue(bytes);
  }

  /**
   * Queues bytes verbatim (a fault injector: any bytes, valid frames or not).
   *
   * @param bytes The bytes.
   * @returns As {@link FramedConn.send}.
   */
  sendRaw(bytes: Uint8Array): Promise<boolean> {
    return this.#enqueue(bytes.slice());
  }

  /**
   * The frames read from the socket, in order. Ends at a clean end of stream or when this side
   * closed the connection. Pulling stops reading: a consumer that awaits between frames stalls
   * the socket's reader (and, through TCP flow control, its writer).
   *
   * @returns An async iterator of frames; iterate it once.
   * @throws {SubcWireError} the first envelope rule the stream broke (`truncated_frame` when it
   *   ended inside a frame); the caller closes the connection.
   * @throws {Error} a socket read error other than the one caused by closing it.
   */
  async *frames(): AsyncGenerator<SubcFrame, void, undefined> {
    const buf = new Uint8Array(READ_CHUNK_BYTES);
    while (true) {
      let n: number | null;
      try {
        n = await this.conn.read(buf);
      } catch (err) {
        if (this.#closed) return;
        throw err;
      }
      if (n === null) {
        if (!this.#closed) this.#decoder.end();
        return;
      }
      for (const frame of this.#decoder.push(buf.subarray(0, n))) {
        this.#onFrame?.("in", frame);
        yield frame;
      }
    }
  }

  /** Closes the socket (idempotent). A pending read ends; queued writes resolve `false`. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    try {
      this.conn.close();
    } catch {
      // Already closed by the other side's reset: nothing more to release.
    }
  }

  /** Resolves when every write queued so far has finished or failed. */
  async flushed(): Promise<void> {
    await this.#writing;
  }

  #enqueue(bytes: Uint8Array): Promise<boolean> {
    if (this.#onFrame !== undefined && !this.#closed) {
      // Decode a copy only for the tap; the bytes go out unchanged either way.
      try {
        for (const f of new FrameDecoder().push(bytes)) this.#onFrame("out", f);
      } catch {
        // Not frames (a fault injection): nothing to show.
      }
    }
    const done = this.#writing.then(async () => {
      if (this.#closed) return false;
      try {
        let at = 0;
        while (at < bytes.byteLength) at += await this.conn.write(bytes.subarray(at));
        return true;
      } catch {
        this.close();
        return false;
      }
    });
    this.#writing = done;
    return done;
  }
}
