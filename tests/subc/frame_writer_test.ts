import assert from "node:assert/strict";
import { FrameWriter } from "../../lib/subc/frame_writer.ts";
import { FrameDecoder, FrameType } from "../../lib/subc/bus_envelope.ts";

/** A sink that takes at most `step` bytes per write, each write resolving on a later turn. */
function slowSink(step: number): { written: Uint8Array[]; write(p: Uint8Array): Promise<number> } {
  const written: Uint8Array[] = [];
  return {
    written,
    async write(p: Uint8Array): Promise<number> {
      await Promise.resolve();
      const n = Math.min(step, p.byteLength);
      written.push(p.slice(0, n));
      return n;
    },
  };
}

Deno.test("FrameWriter: frames sent at once from many places leave whole and in order", async () => {
  const sink = slowSink(7);
  const writer = new FrameWriter(sink);
  const bodies = Array.from({ length: 50 }, (_, i) => new TextEncoder().encode("x".repeat(i * 3)));
  await Promise.all(bodies.map(async (body, i) => {
    await Promise.resolve();
    writer.send({ type: FrameType.Response, channel: 1, epoch: 1, corr: BigInt(i), body });
  }));
  await writer.flush();
  assert.equal(writer.queuedBytes, 0);
  const all = new Uint8Array(sink.written.reduce((n, c) => n + c.byteLength, 0));
  let at = 0;
  for (const c of sink.written) {
    all.set(c, at);
    at += c.byteLength;
  }
  const frames = new FrameDecoder().push(all);
  assert.deepEqual(frames.map((f) => f.corr), bodies.map((_, i) => BigInt(i)));
  frames.forEach((f, i) => assert.deepEqual(f.body, bodies[i]));
});

Deno.test("FrameWriter.belowHighWater() waits while the peer does not read, until the queue drains", async () => {
  let release!: () => void;
  const gate = new Promise<void>((r) => release = r);
  const writer = new FrameWriter({
    async write(p: Uint8Array): Promise<number> {
      await gate;
      return p.byteLength;
    },
  }, { highWaterBytes: 1000, lowWaterBytes: 100 });
  for (let i = 0; i < 20; i++) {
    writer.send({ type: FrameType.Push, corr: 0n, body: new Uint8Array(100) });
  }
  assert.ok(writer.queuedBytes > 1000);
  let below = false;
  const waiting = writer.belowHighWater().then(() => below = true);
  await Promise.resolve();
  assert.equal(below, false, "the peer is not reading");
  release();
  await waiting;
  assert.ok(writer.queuedBytes <= 100);
  await writer.flush();
  assert.equal(writer.queuedBytes, 0);
});

Deno.test("FrameWriter: after a failed write, flush resolves and later frames are dropped", async () => {
  const writer = new FrameWriter({
    write(): Promise<number> {
      return Promise.reject(new Deno.errors.BrokenPipe("gone"));
    },
  });
  assert.equal(writer.send({ type: FrameType.Ping, corr: 1n }), true);
  await writer.flush();
  assert.ok(writer.failed instanceof Deno.errors.BrokenPipe);
  assert.equal(writer.closed, true);
  assert.equal(writer.send({ type: FrameType.Ping, corr: 2n }), false);
  assert.equal(writer.queuedBytes, 0);
});

Deno.test("FrameWriter refuses a frame the envelope rules refuse, and bad water marks", () => {
  const writer = new FrameWriter({ write: (p) => Promise.resolve(p.byteLength) });
  assert.throws(
    () => writer.send({ type: FrameType.Ping, corr: 1n, body: new Uint8Array(1) }),
    /must have no body/,
  );
  assert.equal(writer.queuedBytes, 0);
  for (const bad of [{ highWaterBytes: 0 }, { highWaterBytes: 10, lowWaterBytes: 11 }]) {
    assert.throws(() => new FrameWriter({ write: () => Promise.resolve(0) }, bad), RangeError);
  }
});
