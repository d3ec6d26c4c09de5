import assert from "node:assert/strict";
import {
  Admission,
  decodeHeader,
  describeFrame,
  encodeFrame,
  FLAG_DAEMON_ORIGIN,
  FLAG_SUBSCRIPTION,
  flagAdmission,
  flagPriority,
  FrameDecoder,
  FrameType,
  frameTypeName,
  HEADER_BYTES,
  makeFlags,
  MAX_BODY_BYTES,
  parseFlags,
  pongFor,
  Priority,
} from "../../lib/subc/bus_envelope.ts";
import type { SubcFrame } from "../../lib/subc/bus_envelope.ts";
import { SubcWireError } from "../../lib/subc/errors.ts";
import type { SubcWireReason } from "../../lib/subc/errors.ts";

interface FrameVector {
  name: string;
  type: number;
  channel: number;
  epoch: number;
  corr: number;
  flags: number;
  body_utf8: string;
  hex: string;
}

const vectors: { frames: FrameVector[]; must_reject: { why: string; hex: string }[] } = JSON.parse(
  await Deno.readTextFile(new URL("../vectors/subc_wire.json", import.meta.url)),
);

/** The reason each `must_reject` vector must be refused with, keyed by its `why`. */
const REJECT_REASON: Record<string, SubcWireReason> = {
  "ver != 2": "unsupported_version",
  "unknown type 12": "unknown_frame_type",
  "priority bits = 3": "reserved_priority_bits",
  "channel 0 with epoch != 0": "nonzero_epoch_on_control_channel",
  "Ping with non-empty body": "pure_header_frame_with_body",
  "len over 64 MiB": "frame_too_large",
};

const utf8 = new TextEncoder();

function isReason(reason: SubcWireReason): (e: unknown) => boolean {
  return (e: unknown) => {
    assert.ok(e instanceof SubcWireError, `expected SubcWireError, got ${e}`);
    assert.equal(e.reason, reason);
    return true;
  };
}

function frameOf(v: FrameVector): SubcFrame {
  return {
    type: v.type as FrameType,
    flags: v.flags,
    channel: v.channel,
    epoch: v.epoch,
    corr: BigInt(v.corr),
    body: utf8.encode(v.body_utf8),
  };
}

Deno.test("encodeFrame() reproduces every frame vector of subc_wire.json byte for byte", () => {
  assert.ok(vectors.frames.length >= 6);
  for (const v of vectors.frames) {
    assert.equal(encodeFrame(frameOf(v)).toHex(), v.hex, v.name);
  }
});

Deno.test("FrameDecoder decodes every frame vector back to its fields, whole and byte by byte", () => {
  for (const v of vectors.frames) {
    const bytes = Uint8Array.fromHex(v.hex);
    const whole = new FrameDecoder().push(bytes);
    assert.deepEqual(whole, [frameOf(v)], v.name);

    const decoder = new FrameDecoder();
    const frames: SubcFrame[] = [];
    for (let i = 0; i < bytes.byteLength; i++) {
      frames.push(...decoder.push(bytes.subarray(i, i + 1)));
    }
    assert.deepEqual(frames, [frameOf(v)], v.name);
    assert.equal(decoder.pending, 0);
    decoder.end();
  }
});

Deno.test("FrameDecoder decodes all frame vectors concatenated in one chunk, in order", () => {
  const all = vectors.frames.map((v) => Uint8Array.fromHex(v.hex));
  const stream = new Uint8Array(all.reduce((n, b) => n + b.byteLength, 0));
  let at = 0;
  for (const b of all) {
    stream.set(b, at);
    at += b.byteLength;
  }
  assert.deepEqual(new FrameDecoder().push(stream), vectors.frames.map(frameOf));
});

Deno.test("decodeHeader() reads the vectors' headers, including the subscription bit", () => {
  const sub = vectors.frames.find((v) => v.name === "request_subscription_bit")!;
  const header = decodeHeader(Uint8Array.fromHex(sub.hex));
  assert.equal(header.type, FrameType.Request);
  assert.equal(header.flags, 0x82);
  assert.equal(parseFlags(header.flags).subscription, true);
  assert.equal(flagPriority(header.flags), Priority.Interactive);
  assert.equal(header.len, sub.body_utf8.length);
  assert.equal(header.ver, 2);
  assert.equal(header.corr, 5n);
});

Deno.test("every must_reject vector is refused with its reason, by FrameDecoder and decodeHeader", () => {
  assert.equal(vectors.must_reject.length, Object.keys(REJECT_REASON).length);
  for (const v of vectors.must_reject) {
    const reason = REJECT_REASON[v.why];
    assert.ok(reason !== undefined, `no expected reason for must_reject '${v.why}'`);
    const bytes = Uint8Array.fromHex(v.hex);
    const decoder = new FrameDecoder();
    assert.throws(() => decoder.push(bytes), isReason(reason), v.why);
    assert.equal(decoder.failed?.reason, reason);
    assert.equal(decoder.allocatedBodyBytes, 0, v.why);
    assert.throws(() => decodeHeader(bytes), isReason(reason), v.why);
  }
});

Deno.test("FrameDecoder refuses ver != 2 on the 5-byte prefix, before the rest of the header", () => {
  const v = vectors.must_reject.find((r) => r.why === "ver != 2")!;
  const decoder = new FrameDecoder();
  assert.deepEqual(decoder.push(Uint8Array.fromHex(v.hex).subarray(0, 4)), []);
  assert.throws(() => decoder.push(Uint8Array.of(1)), isReason("unsupported_version"));
  assert.deepEqual(decoder.failed?.details, { ver: 1 });
});

Deno.test("FrameDecoder refuses a len over 64 MiB on the prefix, allocating nothing", () => {
  const v = vectors.must_reject.find((r) => r.why === "len over 64 MiB")!;
  const decoder = new FrameDecoder();
  assert.throws(
    () => decoder.push(Uint8Array.fromHex(v.hex).subarray(0, 5)),
    isReason("frame_too_large"),
  );
  assert.deepEqual(decoder.failed?.details, { len: MAX_BODY_BYTES + 1, max: MAX_BODY_BYTES });
  assert.equal(decoder.allocatedBodyBytes, 0);
});

Deno.test("FrameDecoder takes a body of exactly the cap and refuses one byte more", () => {
  const at = encodeFrame({
    type: FrameType.Request,
    channel: 1,
    epoch: 1,
    body: new Uint8Array(64),
  });
  const decoder = new FrameDecoder({ maxBodyBytes: 64 });
  assert.deepEqual(decoder.push(at.subarray(0, HEADER_BYTES)), []);
  assert.equal(decoder.allocatedBodyBytes, 64);
  assert.equal(decoder.push(at.subarray(HEADER_BYTES)).length, 1);
  assert.equal(decoder.allocatedBodyBytes, 0);

  const over = encodeFrame({
    type: FrameType.Request,
    channel: 1,
    epoch: 1,
    body: new Uint8Array(65),
  });
  assert.throws(
    () => new FrameDecoder({ maxBodyBytes: 64 }).push(over),
    isReason("frame_too_large"),
  );
  assert.throws(
    () => encodeFrame({ type: FrameType.Push, body: new Uint8Array(65) }, { maxBodyBytes: 64 }),
    isReason("frame_too_large"),
  );
});

Deno.test("the header rules beyond the vectors: admission 3, SHEDDABLE, pure headers with a body", () => {
  const header = (type: number, flags: number, len = 0, channel = 1, epoch = 1): Uint8Array => {
    const b = new Uint8Array(HEADER_BYTES + len);
    const view = new DataView(b.buffer);
    view.setUint32(0, len, true);
    b[4] = 2;
    b[5] = type;
    b[6] = flags;
    view.setUint16(7, channel, true);
    view.setUint32(9, epoch, true);
    return b;
  };
  const sheddable = makeFlags({ admission: Admission.Sheddable });
  assert.throws(() => decodeHeader(header(0, 0x30)), isReason("reserved_admission_class"));
  for (const type of Object.values(FrameType)) {
    if (type === FrameType.Push || type === FrameType.StreamData) {
      assert.equal(decodeHeader(header(type, sheddable)).flags, sheddable);
    } else {
      assert.throws(
        () => decodeHeader(header(type, sheddable)),
        isReason("sheddable_illegal_frame_type"),
        frameTypeName(type),
      );
    }
  }
  for (const type of [FrameType.Cancel, FrameType.Ping, FrameType.Pong, FrameType.Goodbye]) {
    assert.throws(
      () => new FrameDecoder().push(header(type, 0, 1)),
      isReason("pure_header_frame_with_body"),
      frameTypeName(type),
    );
  }
  // Every other type may carry a body; every flag bit but the invalid values is accepted.
  for (const type of [0, 1, 2, 3, 4, 5, 9, 10]) {
    assert.equal(new FrameDecoder().push(header(type, 0, 2)).length, 1, frameTypeName(type));
  }
  const all = FLAG_SUBSCRIPTION | FLAG_DAEMON_ORIGIN | 0x08 | 0x01 | (2 << 1) | (1 << 4);
  assert.equal(decodeHeader(header(FrameType.Error, all)).flags, all);
  // Boundaries: the largest channel, epoch and corr survive a round trip.
  const max = encodeFrame({ type: 0, channel: 0xffff, epoch: 0xffff_ffff, corr: (1n << 64n) - 1n });
  const [frame] = new FrameDecoder().push(max);
  assert.deepEqual([frame?.channel, frame?.epoch, frame?.corr], [
    0xffff,
    0xffff_ffff,
    (1n << 64n) - 1n,
  ]);
});

Deno.test("encodeFrame() refuses every header a peer would refuse, with the decoder's reason", () => {
  const cases: [Parameters<typeof encodeFrame>[0], SubcWireReason][] = [
    [{ type: 12 as FrameType }, "unknown_frame_type"],
    [{ type: FrameType.Request, flags: 0x06, channel: 1, epoch: 1 }, "reserved_priority_bits"],
    [{ type: FrameType.Request, flags: 0x30, channel: 1, epoch: 1 }, "reserved_admission_class"],
    [
      { type: FrameType.Request, flags: makeFlags({ admission: 2 }), channel: 1, epoch: 1 },
      "sheddable_illegal_frame_type",
    ],
    [{ type: FrameType.Ping, body: Uint8Array.of(1) }, "pure_header_frame_with_body"],
    [{ type: FrameType.Request, channel: 0, epoch: 1 }, "nonzero_epoch_on_control_channel"],
  ];
  for (const [frame, reason] of cases) {
    assert.throws(() => encodeFrame(frame), isReason(reason), reason);
  }
  for (
    const bad of [
      { type: FrameType.Request, channel: 0x1_0000 },
      { type: FrameType.Request, channel: 1, epoch: -1 },
      { type: FrameType.Request, flags: 256 },
      { type: FrameType.Request, corr: 1n << 64n },
      { type: FrameType.Request, corr: -1n },
      { type: 1.5 as FrameType },
    ]
  ) {
    assert.throws(() => encodeFrame(bad), RangeError, JSON.stringify(bad, (_, v) => String(v)));
  }
});

Deno.test("makeFlags() and parseFlags() agree on every valid flag byte", () => {
  let valid = 0;
  for (let b = 0; b < 256; b++) {
    const fields = parseFlags(b);
    if (fields.priority === 3 || fields.admission === 3) {
      assert.throws(() => makeFlags(fields), RangeError);
      continue;
    }
    valid++;
    assert.equal(makeFlags(fields), b);
    assert.equal(flagAdmission(b), fields.admission);
  }
  assert.equal(valid, 16 * 3 * 3); // 4 free bits, 3 priorities, 3 admission classes
  assert.equal(makeFlags(), 0);
  assert.equal(makeFlags({ priority: Priority.Interactive }), 0x02);
});

Deno.test("FrameDecoder stays failed: later pushes and end() rethrow the first error", () => {
  const decoder = new FrameDecoder();
  const bad = Uint8Array.fromHex(vectors.must_reject[0]!.hex);
  let first: unknown;
  try {
    decoder.push(bad);
  } catch (e) {
    first = e;
  }
  assert.ok(first instanceof SubcWireError);
  const ping = encodeFrame({ type: FrameType.Ping, corr: 1n });
  assert.throws(() => decoder.push(ping), (e) => e === first);
  assert.throws(() => decoder.end(), (e) => e === first);
});

Deno.test("FrameDecoder.end() refuses a stream that stops inside a frame", () => {
  const bytes = encodeFrame({
    type: FrameType.Response,
    channel: 2,
    epoch: 3,
    body: utf8.encode("{}"),
  });
  for (const cut of [1, 5, HEADER_BYTES, bytes.byteLength - 1]) {
    const decoder = new FrameDecoder();
    assert.deepEqual(decoder.push(bytes.subarray(0, cut)), []);
    assert.throws(() => decoder.end(), isReason("truncated_frame"), `cut at ${cut}`);
    assert.deepEqual(decoder.failed?.details, { pending: cut });
  }
  new FrameDecoder().end();
});

Deno.test("decoded bodies are copies: reusing the input buffer does not change them", () => {
  const bytes = encodeFrame({
    type: FrameType.Push,
    channel: 1,
    epoch: 1,
    body: Uint8Array.of(7, 8),
  });
  const [frame] = new FrameDecoder().push(bytes);
  bytes.fill(0);
  assert.deepEqual(frame?.body, Uint8Array.of(7, 8));
});

Deno.test("pongFor() echoes the Ping's flags, corr, channel and epoch with no body", () => {
  const ping: SubcFrame = {
    type: FrameType.Ping,
    flags: 0x02,
    channel: 0,
    epoch: 0,
    corr: 77n,
    body: new Uint8Array(0),
  };
  const pong = pongFor(ping);
  assert.deepEqual(pong, { ...ping, type: FrameType.Pong });
  assert.equal(encodeFrame(pong).toHex(), "000000000208020000000000004d00000000000000");
  assert.throws(() => pongFor({ ...ping, type: FrameType.Request }), TypeError);
});

Deno.test("describeFrame() names the frame without its body", () => {
  const v = vectors.frames.find((f) => f.name === "request_subscription_bit")!;
  assert.equal(describeFrame(frameOf(v)), "Request ch=3 ep=1 corr=5 flags=0x82 len=41");
  assert.equal(frameTypeName(12), "type 12");
});
