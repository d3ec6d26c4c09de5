/**
 * Reading a request body as JSON, defensively: a byte cap enforced while the body streams in
 * (hono body-limit), strict UTF-8 decoding, and JSON syntax errors that name their position.
 *
 * @module
 */
import { parse as parseJsonc, type ParseError, printParseErrorCode } from "jsonc-parser";
import { lineColumn } from "../line_column.ts";
import { SynapseError } from "../contract/errors.ts";
import type { JsonBodyParser } from "./_json_body_parser.ts";

/**
 * Largest request body the HTTP door reads when no config says otherwise, in bytes: config
 * `http.max_body_bytes`'s default (64 MiB, the wire door's frame limit).
 */
export const MAX_BODY_BYTES = 64 * 1024 * 1024;

/**
 * An `invalid_request` that answers with a transport status of its own (413 for an oversized
 * body, 405 for a wrong method, 403 for a refused Host or Origin) instead of the table's 400.
 * A channel error by default; the body-size refusal is semantic, so its details (which limit,
 * how large) reach the caller.
 */
export class HttpRefusal extends SynapseError {
  /** HTTP status to answer with. */
  readonly status: number;

  constructor(
    status: number,
    message: string,
    details?: Record<string, unknown>,
    options: { channel?: boolean } = {},
  ) {
    super("invalid_request", message, {
      channel: options.channel ?? true,
      ...(details ? { details } : {}),
    });
    this.name = "HttpRefusal";
    this.status = status;
  }
}

/** Options of {@link readJsonBody}. */
export interface ReadJsonBodyOptions {
  /**
   * Byte cap, checked against Content-Length first and then counted as chunks arrive; reading
   * stops at the first chunk past it.
   *
   * @default {MAX_BODY_BYTES}
   */
  maxBytes?: number;
  /** Value of an empty body. @default {} */
  empty?: unknown;
  /**
   * Decodes and parses large bodies on a worker thread (the door's, see `serveHttp`); without
   * it every body is parsed on the calling thread.
   */
  parser?: JsonBodyParser;
}

/**
 * Reads, decodes and parses a JSON request body.
 *
 * @param req The request.
 * @param options Cap and empty-body value.
 * @returns The parsed JSON value (`options.empty` for an empty or whitespace-only body).
 * @throws {HttpRefusal} 413, semantic `invalid_request` `{field: "body", reason:
 *   "body_too_large", limit: "http.max_body_bytes", max, received_at_least}` when the body
 *   exceeds the cap: its Content-Length, or the bytes streamed so far (nothing more is read).
 * @throws {HttpRefusal} 400, channel `invalid_request` `{field: "body", reason:
 *   "body_incomplete", received_bytes, content_length?}` when the connection ends before the
 *   whole body arrived (a client that half-closes early, an unterminated chunked body).
 * @throws {SynapseError} channel `invalid_request` for a body that is not UTF-8 or not JSON,
 *   the latter naming the position.
 */
export async function readJsonBody(
  req: Request,
  options: ReadJsonBodyOptions = {},
): Promise<unknown> {
  const { bytes, owned } = await readBodyBytes(req, options.maxBytes ?? MAX_BODY_BYTES);
  const parser = options.parser;
  if (parser !== undefined && bytes.byteLength > parser.offloadBytes) {
    const parsed = await parser.parse(owned ? bytes : bytes.slice());
    return parsed.empty ? options.empty ?? {} : parsed.value;
  }
  const parsed = parseJsonBytes(bytes);
  return parsed.empty ? options.empty ?? {} : parsed.value;
}

/**
 * Decodes UTF-8 strictly and parses JSON: the part of {@link readJsonBody} that runs on a
 * worker thread for large bodies.
 *
 * @param bytes The body.
 * @returns The value, or `empty: true` for an empty or whitespace-only body.
 * @throws {SynapseError} channel `invalid_request` for a body that is not UTF-8 or not JSON,
 *   the latter naming the position.
 */
export function parseJsonBytes(bytes: Uint8Array): { empty: boolean; value: unknown } {
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false }).decode(bytes);
  } catch {
    throw new SynapseError("invalid_request", "Cannot read body: body is not valid UTF-8", {
      channel: true,
      details: { field: "body", reason: "invalid_utf8" },
    });
  }
  if (text.trim() === "") return { empty: true, value: undefined };
  try {
    return { empty: false, value: JSON.parse(text) };
  } catch {
    const at = findJsonSyntaxError(text) ?? { position: 0, reason: "invalid JSON" };
    const { line, column } = lineColumn(text, at.position);
    throw new SynapseError(
      "invalid_request",
      `Cannot parse body as JSON: ${at.reason} at position ${at.position} (line ${line} column ${column})`,
      { channel: true, details: { field: "body", reason: "invalid_json", position: at.position } },
    );
  }
}

/** The body's bytes; `owned` when they are a buffer of our own (safe to transfer). */
async function readBodyBytes(
  req: Request,
  maxBytes: number,
): Promise<{ bytes: Uint8Array; owned: boolean }> {
  const declared = req.headers.get("content-length");
  if (declared !== null && Number(declared) > maxBytes) throw tooLarge(Number(declared), maxBytes);
  if (req.body === null) return { bytes: new Uint8Array(0), owned: true };
  const reader = req.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    let chunk: ReadableStreamReadResult<Uint8Array>;
    try {
      chunk = await reader.read();
    } catch (err) {
      throw incomplete(err, total, declared);
    }
    const { done, value } = chunk;
    if (done) break;
    total += value.byteLength;
    if (total > maxBytes) {
      await reader.cancel().catch(() => {});
      throw tooLarge(total, maxBytes);
    }
    chunks.push(value);
  }
  if (chunks.length === 1) return { bytes: chunks[0]!, owned: false };
  const out = new Uint8Array(total);
  let off = 0;
  for (const c of chunks) {
    out.set(c, off);
    off += c.byteLength;
  }
  return { bytes: out, owned: true };
}

/**
 * A body the transport cut short — the client closed its side before the bytes its
 * Content-Length announced, or before the last chunk of a chunked body — is the client's fault,
 * never an encoding failure of ours: 400 `invalid_request`, reason `body_incomplete`.
 */
function incomplete(err: unknown, received: number, declared: string | null): HttpRefusal {
  const expected = declared === null ? undefined : Number(declared);
  const what = expected === undefined || !Number.isFinite(expected)
    ? "before the end of its chunked body"
    : `before the ${expected} bytes its Content-Length announced had arrived`;
  return new HttpRefusal(
    400,
    `Cannot read body: the connection ended ${what}; send the whole body`,
    {
      field: "body",
      reason: "body_incomplete",
      received_bytes: received,
      ...(expected === undefined || !Number.isFinite(expected) ? {} : { content_length: expected }),
      transport_error: err instanceof Error ? err.message : String(err),
    },
  );
}

function tooLarge(bytes: number, maxBytes: number): HttpRefusal {
  return new HttpRefusal(
    413,
    `Cannot read body: at least ${bytes} bytes exceed http.max_body_bytes ${maxBytes}`,
    {
      field: "body",
      reason: "body_too_large",
      limit: "http.max_body_bytes",
      max: maxBytes,
      received_at_least: bytes,
    },
    { channel: false },
  );
}

/** Position (UTF-16 index) and description of the first JSON syntax error. */
export interface JsonSyntaxError {
  position: number;
  reason: string;
}

/**
 * Finds the first syntax error in text `JSON.parse` refused: the position V8's message names
 * (`… in JSON at position N`), the end of the text for `Unexpected end of JSON input`, and
 * otherwise (`Unexpected token 'x', "…" is not valid JSON` names none) the offset of the first
 * error jsonc-parser reports.
 *
 * @param text The body text.
 * @returns The error, or undefined when the text is valid JSON.
 */
export function findJsonSyntaxError(text: string): JsonSyntaxError | undefined {
  let message: string;
  try {
    JSON.parse(text);
    return undefined;
  } catch (err) {
    message = err instanceof Error ? err.message : String(err);
  }
  const found = (reason: string, position: number): JsonSyntaxError => ({
    position,
    reason: position >= text.length
      ? `${reason}, found end of input`
      : `${reason}, found ${describe(text.codePointAt(position)!)}`,
  });
  const v8 = /^(.*?) in JSON at position (\d+)/s.exec(message);
  if (v8) return found(lowerFirst(v8[1]!), Number(v8[2]));
  if (message === "Unexpected end of JSON input") return found("unexpected end", text.length);
  const errors: ParseError[] = [];
  try {
    parseJsonc(text, errors, {
      disallowComments: true,
      allowTrailingComma: false,
      allowEmptyContent: false,
    });
  } catch (err) {
    // jsonc-parser recurses per nesting level; a text nested too deep for it names no position.
    if (!(err instanceof RangeError)) throw err;
  }
  const first = errors[0];
  if (first === undefined) return { position: 0, reason: "invalid JSON" };
  const code = printParseErrorCode(first.error).replace(/(?<=[a-z])(?=[A-Z])/g, " ");
  return found(code.toLowerCase(), first.offset);
}

function lowerFirst(s: string): string {
  return s.slice(0, 1).toLowerCase() + s.slice(1);
}

function describe(codePoint: number): string {
  return codePoint < 0x20 || codePoint === 0x7f || (codePoint >= 0xd800 && codePoint <= 0xdfff)
    ? `U+${codePoint.toString(16).toUpperCase().padStart(4, "0")}`
    : `'${String.fromCodePoint(codePoint)}'`;
}
