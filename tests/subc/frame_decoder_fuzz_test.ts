/**
 * Fuzz of FrameDecoder (issue 10: "100,000 random and mutated frames … without an exception
 * escaping"). Deterministic: a seeded PRNG (mulberry32), seed from SUBC_FUZZ_SEED or the default
 * below, and every failure names the seed and the case number, so it reproduces exactly.
 *
 * For each case, invariants checked after every chunk:
 * - the only thing thrown is a SubcWireError, and the decoder then stays failed with that error;
 * - no body buffer larger than the cap is ever allocated, and no frame has a larger body;
 * - the bytes are accounted for: the frames re-encode to exactly the input bytes they came from
 *   (so the decoder accepted nothing the encoder's rules refuse), and what is left is `pending`;
 * - `end()` refuses exactly when bytes of a frame are pending.
 */
import assert from "node:assert/strict";
import {
  encodeFrame,
  FrameDecoder,
  HEADER_BYTES,
  MAX_BODY_BYTES,
} from "../../lib/subc/bus_envelope.ts";
import type { SubcFrame } from "../../lib/subc/bus_envelope.ts";
import { SubcWireError } from "../../lib/subc/errors.ts";

const CASES = 100_000;
const SEED = Number(Deno.env.get("SUBC_FUZZ_SEED") ?? 0x5eed_10);

const vectors: { frames: { hex: string }[]; must_reject: { hex: string }[] } = JSON.parse(
  await Deno.readTextFile(new URL("../vectors/subc_wire.json", import.meta.url)),
);
const SEEDS = [...vectors.frames, ...vectors.must_reject].map((v) => Uint8Array.fromHex(v.hex));

/** mulberry32: a tiny deterministic PRNG, uniform in [0, 1). */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return function next(): number {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const rand = prng(SEED);
const int = (n: number): number => Math.floor(rand() * n);
const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)]!;
const bytes = (n: number): Uint8Array => Uint8Array.from({ length: n }, () => int(256));

function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.byteLength, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.byteLength;
  }
  return out;
}

/** A frame that follows every rule, with random fields and a body of up to `maxBody` bytes. */
function validFrame(maxBody: number): Uint8Array {
  const type = int(12);
  const pure = type === 6 || type === 7 || type === 8 || type === 11;
  const sheddableOk = type === 2 || type === 3;
  const channel = rand() < 0.3 ? 0 : int(0x1_0000);
  const flags = (int(2)) | (int(3) << 1) | (int(2) << 3) | (int(sheddableOk ? 3 : 2) << 4) |
    (int(2) << 6) | (int(2) << 7);
  return encodeFrame({
    type: type as SubcFrame["type"],
    flags,
    channel,
    epoch: channel === 0 ? 0 : int(0x1_0000_0000),
    corr: BigInt(int(0x1_0000_0000)) << BigInt(int(33)),
    body: pure ? new Uint8Array(0) : bytes(int(Math.min(maxBody, 300) + 1)),
  });
}

/** One input: a mutated vector, a random header, random bytes, or a run of valid frames. */
function makeInput(cap: number): Uint8Array {
  switch (int(6)) {
    case 0: { // a vector with a few bytes flipped or replaced
      const b = pick(SEEDS).slice();
      for (let k = int(4) + 1; k > 0; k--) {
        const i = int(b.byteLength);
        b[i] = rand() < 0.5 ? b[i]! ^ (1 << int(8)) : int(256);
      }
      return b;
    }
    case 1: { // a vector cut short or followed by random bytes
      const b = pick(SEEDS);
      return rand() < 0.5 ? b.subarray(0, int(b.byteLength)) : concat([b, bytes(int(64))]);
    }
    case 2: { // a header with random fields that keeps ver 2 most of the time
      const h = bytes(HEADER_BYTES);
      if (rand() < 0.8) h[4] = 2;
      const len = pick([0, 1, cap, cap + 1, int(cap + 2), int(0x1_0000_0000)]);
      new DataView(h.buffer).setUint32(0, len >>> 0, true);
      return concat([h, bytes(int(Math.min(len, 128) + 1))]);
    }
    case 3: // random bytes of a random length
      return bytes(int(96));
    case 4: // several valid frames back to back
      return concat(Array.from({ length: int(5) + 1 }, () => validFrame(cap)));
    default: { // valid frames with one mutated byte somewhere in the stream
      const b = concat(Array.from({ length: int(4) + 1 }, () => validFrame(cap)));
      b[int(b.byteLength)] = int(256);
      return b;
    }
  }
}

/** Cuts `input` into random chunks (sometimes one byte each, sometimes whole). */
function chunksOf(input: Uint8Array): Uint8Array[] {
  const chunks: Uint8Array[] = [];
  const mode = int(3);
  let at = 0;
  while (at < input.byteLength) {
    const n = mode === 0 ? 1 : mode === 1 ? input.byteLength : int(24) + 1;
    chunks.push(input.subarray(at, at + n));
    at += n;
  }
  return chunks;
}

function runCase(decoder: FrameDecoder, cap: number, input: Uint8Array, where: string): void {
  const frames: SubcFrame[] = [];
  let fed = 0;
  let error: SubcWireError | undefined;
  for (const chunk of chunksOf(input)) {
    try {
      frames.push(...decoder.push(chunk));
    } catch (e) {
      if (!(e instanceof SubcWireError)) {
        throw new Error(`${where}: a non-SubcWireError escaped: ${e}`, { cause: e });
      }
      error = e;
      break;
    }
    fed += chunk.byteLength;
    assert.ok(decoder.allocatedBodyBytes <= cap, `${where}: allocated over the cap`);
    assert.ok(decoder.pending <= HEADER_BYTES + cap, `${where}: pending over a frame`);
  }
  for (const f of frames) assert.ok(f.body.byteLength <= cap, `${where}: a body over the cap`);
  if (error !== undefined) {
    assert.equal(decoder.failed, error, `${where}: failed is not the thrown error`);
    assert.equal(decoder.allocatedBodyBytes, 0, `${where}: a failed decoder holds a body`);
    assert.throws(() => decoder.push(Uint8Array.of(0)), (e) => e === error, where);
    assert.throws(() => decoder.end(), (e) => e === error, where);
    return;
  }
  // Every byte is accounted for: the frames re-encode to the bytes they came from.
  let encoded: Uint8Array;
  try {
    encoded = concat(frames.map((f) => encodeFrame(f, { maxBodyBytes: cap })));
  } catch (e) {
    throw new Error(`${where}: the decoder accepted a frame the encoder refuses: ${e}`);
  }
  assert.equal(encoded.byteLength + decoder.pending, fed, `${where}: bytes lost or invented`);
  assert.deepEqual(encoded, input.subarray(0, encoded.byteLength), `${where}: re-encoding differs`);
  if (decoder.pending > 0) {
    assert.throws(
      () => decoder.end(),
      (e) => e instanceof SubcWireError && e.reason === "truncated_frame",
      where,
    );
  } else {
    decoder.end();
  }
}

Deno.test(`FrameDecoder survives ${CASES} random and mutated frames in random chunks (seed ${SEED})`, () => {
  const outcomes = { ok: 0, refused: 0 };
  for (let i = 0; i < CASES; i++) {
    // A few cases run at the real 64 MiB cap (their lengths sit around it); the rest at small
    // caps, so random lengths exercise both sides of the limit cheaply.
    const real = i % 5000 === 0;
    const cap = real ? MAX_BODY_BYTES : pick([0, 16, 64, 4096]);
    let input = makeInput(cap);
    if (real) {
      input = input.length >= HEADER_BYTES ? input.slice() : validFrame(64);
      input[4] = 2;
      new DataView(input.buffer).setUint32(
        0,
        pick([MAX_BODY_BYTES - 1, MAX_BODY_BYTES, MAX_BODY_BYTES + 1, 0xffff_ffff]),
        true,
      );
    }
    const decoder = new FrameDecoder(real ? {} : { maxBodyBytes: cap });
    runCase(decoder, cap, input, `seed ${SEED} case ${i}`);
    if (decoder.failed === undefined) outcomes.ok++;
    else outcomes.refused++;
  }
  // Both paths were exercised in bulk (a fuzz that only ever refuses proves little).
  assert.ok(outcomes.ok > CASES / 10, `only ${outcomes.ok} cases decoded cleanly`);
  assert.ok(outcomes.refused > CASES / 10, `only ${outcomes.refused} cases were refused`);
});
