/**
 * The last bytes of a worker's stdout and stderr, interleaved by line as they arrive, and the
 * pumps that read them: the log tail a crash report carries (docs/internals.md §7). Private to
 * `lib/workers/`.
 *
 * @module
 */

const tailEncoder = new TextEncoder();
const tailDecoder = new TextDecoder();

/**
 * The last `cap` UTF-8 bytes of a worker's output, whole lines (the oldest line is dropped first;
 * the newest is kept even when it alone is longer than `cap`, and {@link LogTail.text} cuts it).
 */
export class LogTail {
  #cap: number;
  #lines: string[] = [];
  /** UTF-8 bytes of each line, newline included. */
  #sizes: number[] = [];
  #bytes = 0;
  #pumps: Promise<void>[] = [];

  /** @param cap Most UTF-8 bytes {@link LogTail.text} returns. */
  constructor(cap: number) {
    this.#cap = cap;
  }

  /** Appends one line (without its newline), dropping the oldest lines past the cap. */
  add(line: string): void {
    const bytes = tailEncoder.encode(line).byteLength + 1;
    this.#lines.push(line);
    this.#sizes.push(bytes);
    this.#bytes += bytes;
    while (this.#bytes > this.#cap && this.#lines.length > 1) {
      this.#lines.shift();
      this.#bytes -= this.#sizes.shift()!;
    }
  }

  /** The tail, at most `cap` UTF-8 bytes (a character cut at the start is dropped). */
  text(): string {
    const bytes = tailEncoder.encode(this.#lines.join("\n"));
    if (bytes.byteLength <= this.#cap) return tailDecoder.decode(bytes);
    let start = bytes.byteLength - this.#cap;
    while (start < bytes.byteLength && (bytes[start]! & 0xc0) === 0x80) start++;
    return tailDecoder.decode(bytes.subarray(start));
  }

  /**
   * Reads `stream` to its end in the background, line by line (a trailing `\r` is dropped; an
   * unfinished line past 16 Ki UTF-16 code units is taken as a line; control characters are
   * escaped, see {@link escapeControls}), adding each line to the
   * tail and handing it to `onLine` (whose throws are ignored). Never rejects: a broken stream
   * ends the pump.
   */
  pump(
    stream: ReadableStream<Uint8Array>,
    name: "stdout" | "stderr",
    onLine: ((line: string, stream: "stdout" | "stderr") => void) | undefined,
  ): void {
    this.#pumps.push((async () => {
      let partial = "";
      try {
        for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
          const parts = (partial + chunk).split("\n");
          partial = parts.pop()!;
          for (const line of parts) this.#emit(line, name, onLine);
          if (partial.length > 16 * 1024) {
            this.#emit(partial, name, onLine);
            partial = "";
          }
        }
      } catch { /* the stream broke with the process */ }
      if (partial !== "") this.#emit(partial, name, onLine);
    })());
  }

  #emit(
    line: string,
    name: "stdout" | "stderr",
    onLine: ((line: string, stream: "stdout" | "stderr") => void) | undefined,
  ): void {
    const l = escapeControls(line.endsWith("\r") ? line.slice(0, -1) : line);
    this.add(l);
    try {
      onLine?.(l, name);
    } catch { /* a log sink must not break the pump */ }
  }

  /** Resolves when both pumps finished: every writer of the pipes is gone. */
  async ended(): Promise<void> {
    await Promise.all(this.#pumps);
  }

  /** Resolves when both pumps finished, or after `ms`. */
  async settled(ms: number): Promise<void> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      Promise.all(this.#pumps),
      new Promise<void>((r) => timer = setTimeout(r, ms)),
    ]);
    clearTimeout(timer);
  }
}

// C0 controls but tab, DEL, and the C1 controls.
// deno-lint-ignore no-control-regex
const CONTROLS = /[\u0000-\u0008\u000a-\u001f\u007f-\u009f]/g;

/**
 * A worker's output line as it may enter the module's log: control characters (NUL, ESC of a
 * terminal escape sequence, a bare carriage return, C1 controls; tab is kept) become `\xNN`,
 * so a worker cannot forge log lines, hide text or drive the operator's terminal.
 *
 * @param line One line of worker output, without its newline.
 * @returns The line with each control character as `\x` and two lowercase hex digits.
 */
export function escapeControls(line: string): string {
  return line.replace(
    CONTROLS,
    (c) => `\\x${c.charCodeAt(0).toString(16).padStart(2, "0")}`,
  );
}
