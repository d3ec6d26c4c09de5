import assert from "node:assert/strict";
import {
  DEFAULT_MAX_FRAME_BYTES,
  encodeFrame,
  FrameDecoder,
  WorkerProtocolError,
} from "../../lib/workers/frame.ts";

function isProtocolError(code: string): (err: unknown) => boolean {
  return function isCode(err: unknown): boolean {
    return err instanceof WorkerProtocolError && err.code === code;
  };
}

Deno.test("encodeFrame() writes a u32 little-endian length then the payload", () => {
  assert.deepEqual(
    encodeFrame(Uint8Array.of(0x7b, 0x7d)),
    Uint8Array.of(0x02, 0x00, 0x00, 0x00, 0x7b, 0x7d),
  );
  assert.deepEqual(encodeFrame(new Uint8Array(0)), Uint8Array.of(0, 0, 0, 0));
  const big = encodeFrame(new Uint8Array(0x010203));
  assert.deepEqual(big.subarray(0, 4), Uint8Array.of(0x03, 0x02, 0x01, 0x00));
  assert.equal(big.byteLength, 4 + 0x010203);
});

Deno.test("encodeFrame() copies a payload that is a view into a larger buffer", () => {
  const backing = Uint8Array.of(9, 9, 1, 2, 3, 9);
  assert.deepEqual(encodeFrame(backing.subarray(2, 5)), Uint8Array.of(3, 0, 0, 0, 1, 2, 3));
});

Deno.test("encodeFrame() rejects a payload over maxFrameBytes", () => {
  assert.throws(
    () => encodeFrame(new Uint8Array(9), { maxFrameBytes: 8 }),
    isProtocolError("frame_too_large"),
  );
  assert.equal(encodeFrame(new Uint8Array(8), { maxFrameBytes: 8 }).byteLength, 12);
});

Deno.test("FrameDecoder decodes a golden frame", () => {
  const decoder = new FrameDecoder();
  assert.deepEqual(decoder.push(Uint8Array.of(0x02, 0x00, 0x00, 0x00, 0x7b, 0x7d)), [
    Uint8Array.of(0x7b, 0x7d),
  ]);
  assert.equal(decoder.pending, 0);
  decoder.end();
});

Deno.test("FrameDecoder round-trips frames of many lengths, including empty", () => {
  const payloads = [0, 1, 3, 4, 5, 255, 256, 65_537].map((n) =>
    Uint8Array.from({ length: n }, (_, i) => (i * 31 + n) & 0xff)
  );
  const decoder = new FrameDecoder();
  const stream = concat(payloads.map((p) => encodeFrame(p)));
  assert.deepEqual(decoder.push(stream), payloads);
  assert.equal(decoder.pending, 0);
});

Deno.test("FrameDecoder decodes a 3-frame stream split at every point", () => {
  const payloads = [Uint8Array.of(1, 2, 3), new Uint8Array(0), Uint8Array.of(4, 5, 6, 7, 8)];
  const stream = concat(payloads.map((p) => encodeFrame(p)));
  for (let cut = 0; cut <= stream.byteLength; cut++) {
    const decoder = new FrameDecoder();
    const got = [...decoder.push(stream.subarray(0, cut)), ...decoder.push(stream.subarray(cut))];
    assert.deepEqual(got, payloads, `cut at ${cut}`);
    assert.equal(decoder.pending, 0);
  }
  for (let a = 0; a <= stream.byteLength; a++) {
    for (let b = a; b <= stream.byteLength; b++) {
      const decoder = new FrameDecoder();
      const got = [
        ...decoder.push(stream.subarray(0, a)),
        ...decoder.push(stream.subarray(a, b)),
        ...decoder.push(stream.subarray(b)),
      ];
      assert.deepEqual(got, payloads, `cuts at ${a}, ${b}`);
    }
  }
});

Deno.test("FrameDecoder decodes a stream fed one byte at a time", () => {
  const payloads = [Uint8Array.of(1, 2, 3), Uint8Array.of(4)];
  const stream = concat(payloads.map((p) => encodeFrame(p)));
  const decoder = new FrameDecoder();
  const got: Uint8Array[] = [];
  for (let i = 0; i < stream.byteLength; i++) {
    got.push(...decoder.push(stream.subarray(i, i + 1)));
    if (i < 3) assert.equal(decoder.pending, i + 1);
  }
  assert.deepEqual(got, payloads);
});

Deno.test("FrameDecoder returns frames that do not alias the caller's chunk", () => {
  const chunk = encodeFrame(Uint8Array.of(1, 2, 3));
  const [frame] = new FrameDecoder().push(chunk);
  chunk.fill(0);
  assert.deepEqual(frame, Uint8Array.of(1, 2, 3));
});

Deno.test("FrameDecoder keeps a truncated frame pending and end() throws truncated", () => {
  const stream = encodeFrame(Uint8Array.of(1, 2, 3, 4));
  for (let cut = 1; cut < stream.byteLength; cut++) {
    const decoder = new FrameDecoder();
    assert.deepEqual(decoder.push(stream.subarray(0, cut)), []);
    assert.equal(decoder.pending, cut);
    assert.throws(() => decoder.end(), isProtocolError("truncated"));
  }
  const empty = new FrameDecoder();
  assert.deepEqual(empty.push(new Uint8Array(0)), []);
  assert.equal(empty.pending, 0);
  empty.end();
});

Deno.test("FrameDecoder rejects an oversize length before allocating the body", () => {
  // 0xFFFFFFFF would be a 4 GiB allocation; the check must fire on the header alone.
  const decoder = new FrameDecoder({ maxFrameBytes: 16 });
  assert.throws(
    () => decoder.push(Uint8Array.of(0xff, 0xff, 0xff, 0xff)),
    (err: unknown) =>
      err instanceof WorkerProtocolError && err.code === "frame_too_large" &&
      /length 4294967295 exceeds max 16/.test(err.message),
  );
  // Failed for good: later pushes and end() rethrow.
  assert.throws(() => decoder.push(Uint8Array.of(0)), isProtocolError("frame_too_large"));
  assert.throws(() => decoder.end(), isProtocolError("frame_too_large"));

  const split = new FrameDecoder({ maxFrameBytes: 16 });
  assert.deepEqual(split.push(Uint8Array.of(17, 0)), []);
  assert.throws(() => split.push(Uint8Array.of(0, 0)), isProtocolError("frame_too_large"));

  const atMax = new FrameDecoder({ maxFrameBytes: 2 });
  assert.deepEqual(atMax.push(Uint8Array.of(2, 0, 0, 0, 7, 8)), [Uint8Array.of(7, 8)]);
});

Deno.test("FrameDecoder rejects over-default lengths without options", () => {
  const decoder = new FrameDecoder();
  assert.equal(decoder.maxFrameBytes, DEFAULT_MAX_FRAME_BYTES);
  const header = new Uint8Array(4);
  new DataView(header.buffer).setUint32(0, DEFAULT_MAX_FRAME_BYTES + 1, true);
  assert.throws(() => decoder.push(header), isProtocolError("frame_too_large"));
});

Deno.test("FrameDecoder.setMaxFrameBytes() applies from the next header", () => {
  const decoder = new FrameDecoder();
  assert.deepEqual(decoder.push(Uint8Array.of(3, 0, 0, 0, 1)), []);
  decoder.setMaxFrameBytes(2);
  assert.equal(decoder.maxFrameBytes, 2);
  assert.deepEqual(decoder.push(Uint8Array.of(2, 3)), [Uint8Array.of(1, 2, 3)]);
  assert.deepEqual(decoder.push(Uint8Array.of(2, 0, 0, 0, 4, 5)), [Uint8Array.of(4, 5)]);
  assert.throws(() => decoder.push(Uint8Array.of(3, 0, 0, 0)), isProtocolError("frame_too_large"));
});

Deno.test("FrameDecoder and encodeFrame() reject invalid maxFrameBytes with RangeError", () => {
  for (const bad of [0, -1, 1.5, NaN, Infinity, 2 ** 32]) {
    assert.throws(() => new FrameDecoder({ maxFrameBytes: bad }), RangeError, String(bad));
    assert.throws(() => new FrameDecoder().setMaxFrameBytes(bad), RangeError, String(bad));
    assert.throws(() => encodeFrame(new Uint8Array(0), { maxFrameBytes: bad }), RangeError);
  }
});

function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.byteLength, 0));
  let offset = 0;
  for (const p of parts) {
    out.set(p, offset);
    offset += p.byteLength;
  }
  return out;
}
