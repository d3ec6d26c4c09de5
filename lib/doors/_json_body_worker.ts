/**
 * Worker-thread entry of {@link JsonBodyParser}: `parseJsonBytes` on a transferred body.
 *
 * @module
 */
/// <reference lib="deno.worker" />
import { SynapseError } from "../contract/errors.ts";
import { parseJsonBytes } from "./_request_body.ts";
import type { JsonBodyReply } from "./_json_body_parser.ts";

self.onmessage = (ev: MessageEvent<{ id: number; bytes: Uint8Array }>): void => {
  const { id, bytes } = ev.data;
  let reply: JsonBodyReply;
  try {
    const parsed = parseJsonBytes(bytes);
    reply = { id, ok: true, empty: parsed.empty, value: parsed.value };
  } catch (err) {
    const e = err instanceof SynapseError
      ? err
      : new SynapseError("encode_failed", `Cannot read body: ${String(err)}`);
    reply = { id, ok: false, code: e.code, message: e.message, channel: e.channel };
    if (e.details !== undefined) reply.details = e.details;
  }
  try {
    self.postMessage(reply);
  } catch (err) {
    // JSON.parse nests as deep as the text does, the structured clone that carries the value back
    // does not (`[[[[…]]]]` 100 000 deep overflows its stack): this body is refused, the worker
    // and every other parse on it go on.
    if (!(err instanceof RangeError)) throw err;
    self.postMessage(
      {
        id,
        ok: false,
        code: "invalid_request",
        message: "Cannot read body: the JSON nests too deep to be read (flatten it)",
        details: { field: "body", reason: "nested_too_deep" },
        channel: true,
      } satisfies JsonBodyReply,
    );
  }
};
