import { mulberry32 } from "../../scripts/gen_models.ts";
import assert from "node:assert/strict";
import { encodeFrame, FrameDecoder, WorkerProtocolError } from "../../lib/workers/frame.ts";
import {
  type ControlMessage,
  controlSender,
  MODULE_TO_WORKER_TYPES,
  type ModuleToWorkerMessage,
  WORKER_TO_MODULE_TYPES,
  type WorkerToModuleMessage,
} from "../../lib/workers/messages.ts";
import {
  decodeControl,
  decodeF32LE,
  decodeFromModule,
  decodeFromWorker,
  decodeI32LE,
  encodeControl,
  encodeF32LE,
  encodeI32LE,
} from "../../lib/workers/codec.ts";

const utf8 = new TextEncoder();

/** One valid message per module → worker type. */
const MODULE_SAMPLES: ModuleToWorkerMessage[] = [
  { type: "ACK", v: 2, accept: true, max_frame: 67108864 },
  {
    type: "LOAD",
    req_id: 1,
    artifact_path: "/models/minilm.onnx",
    artifact_digest: "ab".repeat(32),
    format: "gguf",
    runtime_config: { n_threads: 4, flash_attention: "disabled", nested: { a: [1, 2] } },
  },
  {
    type: "EMBED_BATCH",
    req_id: 2,
    model_ref: "m0",
    pooling: "mean",
    normalize: true,
    items: [{ id: "a", n_tokens: 3 }, { id: 7, n_tokens: 1 }],
  },
  {
    type: "RERANK",
    req_id: 3,
    model_ref: "m0",
    query_n_tokens: 4,
    candidates: [{ n_tokens: 5 }, { n_tokens: 6 }],
  },
  { type: "RERANK_SEQUENCES", req_id: 4, model_ref: "m0", sequences: [{ n_tokens: 9 }] },
  { type: "GENERATE", req_id: 5, model_ref: "m0", max_tokens: 16, grammar: 'root ::= "yes"' },
  { type: "GENERATE", req_id: 9, model_ref: "m0", max_tokens: 16, stream: true },
  { type: "UNLOAD", req_id: 6, model_ref: "m0" },
  { type: "PING", req_id: 7 },
  { type: "SHUTDOWN" },
  { type: "CANCEL", req_id: 5 },
  { type: "TOKENIZE", req_id: 8, model_ref: "m0", texts: ["hello", "", "<s>日本"] },
];

/** One valid message per worker → module type (two for ERR). */
const WORKER_SAMPLES: WorkerToModuleMessage[] = [
  {
    type: "HELLO",
    v: 2,
    nonce: "0123456789abcdef",
    engine: { engine: "owned-cuda", version: "1.2.0", build_flags: { cuda: "12.4" } },
    pid: 4242,
    max_frame: 1048576,
    manifest_digest: "cd".repeat(32),
    kernel_revision: "k7",
  },
  { type: "LOADED", req_id: 1, model_ref: "m0", dims: 384, cold_load_ms: 812.5, buckets: [128] },
  { type: "VECTORS", req_id: 2, dims: 384, n: 2 },
  { type: "SCORES", req_id: 3, n: 2 },
  {
    type: "TEXT",
    req_id: 5,
    text: "yes",
    n_prompt: 12,
    n_gen: 1,
    finish_reason: "grammar_complete",
    generated_token_ids: [9891],
  },
  { type: "UNLOADED", req_id: 6 },
  { type: "PONG", req_id: 7, rss_mb: 512.25, models_loaded: 1, placement_share: 0.5 },
  { type: "ERR", req_id: 2, code: "oom", msg: "Cannot allocate KV cache" },
  { type: "ERR", code: "unknown_type", msg: "type 'FOO'" },
  { type: "TOKENS", req_id: 8, ids: [[22557], [], [1, 29871, 30325]] },
  { type: "TEXT_PART", req_id: 9, token_ids: [9891, 0, -1] },
];

const ALL_SAMPLES: ControlMessage[] = [...MODULE_SAMPLES, ...WORKER_SAMPLES];

function protocolError(code: string, message?: RegExp): (err: unknown) => boolean {
  return function isCode(err: unknown): boolean {
    return err instanceof WorkerProtocolError && err.code === code &&
      (message === undefined || message.test(err.message));
  };
}

Deno.test("encodeControl() writes compact UTF-8 JSON (golden bytes)", () => {
  const bytes = encodeControl({ type: "PING", req_id: 1 });
  assert.deepEqual(bytes, utf8.encode('{"type":"PING","req_id":1}'));
  assert.deepEqual(
    encodeFrame(encodeControl({ type: "SHUTDOWN" })),
    Uint8Array.of(19, 0, 0, 0, ...utf8.encode('{"type":"SHUTDOWN"}')),
  );
  assert.deepEqual(
    encodeFrame(encodeControl({ type: "CANCEL", req_id: 9 })),
    Uint8Array.of(28, 0, 0, 0, ...utf8.encode('{"type":"CANCEL","req_id":9}')),
  );
});

Deno.test("samples cover every control type exactly", () => {
  assert.deepEqual(
    [...new Set(MODULE_SAMPLES.map((m) => m.type))].sort(),
    [...MODULE_TO_WORKER_TYPES].sort(),
  );
  assert.deepEqual(
    [...new Set(WORKER_SAMPLES.map((m) => m.type))].sort(),
    [...WORKER_TO_MODULE_TYPES].sort(),
  );
  for (const t of MODULE_TO_WORKER_TYPES) assert.equal(controlSender(t), "module");
  for (const t of WORKER_TO_MODULE_TYPES) assert.equal(controlSender(t), "worker");
});

Deno.test("decodeControl() round-trips every message type", () => {
  for (const msg of ALL_SAMPLES) {
    assert.deepEqual(decodeControl(encodeControl(msg)), msg, msg.type);
  }
  for (const msg of MODULE_SAMPLES) assert.deepEqual(decodeFromModule(encodeControl(msg)), msg);
  for (const msg of WORKER_SAMPLES) assert.deepEqual(decodeFromWorker(encodeControl(msg)), msg);
});

Deno.test("TEXT_PART is a worker message with golden bytes; GENERATE takes stream: true", () => {
  const part: WorkerToModuleMessage = { type: "TEXT_PART", req_id: 3, token_ids: [5, 17] };
  assert.deepEqual(
    encodeControl(part),
    utf8.encode('{"type":"TEXT_PART","req_id":3,"token_ids":[5,17]}'),
  );
  assert.deepEqual(decodeFromWorker(encodeControl(part)), part);
  assert.equal(controlSender("TEXT_PART"), "worker");
  assert.ok(WORKER_TO_MODULE_TYPES.includes("TEXT_PART"));
  assert.throws(() => decodeFromModule(encodeControl(part)), protocolError("unknown_type"));
  const gen: ModuleToWorkerMessage = {
    type: "GENERATE",
    req_id: 3,
    model_ref: "m1",
    max_tokens: 4,
    stream: true,
  };
  assert.deepEqual(decodeFromModule(encodeControl(gen)), gen);
});

Deno.test("decodeControl() accepts non-ASCII UTF-8 text", () => {
  const msg: ControlMessage = {
    type: "TEXT",
    req_id: 1,
    text: "héllo ✓ 🚀",
    n_prompt: 1,
    n_gen: 3,
    finish_reason: "stop_token",
  };
  assert.deepEqual(decodeControl(encodeControl(msg)), msg);
});

Deno.test("decodeControl() rejects non-JSON and non-UTF-8 payloads with bad_json", () => {
  for (
    const bytes of [
      new Uint8Array(0),
      utf8.encode("{"),
      utf8.encode('{"type":"PING",}'),
      Uint8Array.of(0x7b, 0xff, 0x7d), // invalid UTF-8
      Uint8Array.of(0xc3), // truncated UTF-8 sequence
    ]
  ) {
    assert.throws(() => decodeControl(bytes), protocolError("bad_json"), String(bytes));
  }
});

Deno.test("decodeControl() rejects non-objects and a missing type with bad_message", () => {
  for (const text of ["[]", "null", "1", '"PING"', "{}", '{"type":7}', '{"type":null}']) {
    assert.throws(() => decodeControl(utf8.encode(text)), protocolError("bad_message"), text);
  }
});

Deno.test("decodeControl() rejects unknown types with unknown_type", () => {
  for (const type of ["FOO", "ping", "", "__proto__", "constructor", "toString", "ADMITTED"]) {
    assert.throws(
      () => decodeControl(utf8.encode(JSON.stringify({ type }))),
      protocolError("unknown_type"),
      type,
    );
  }
});

Deno.test("decodeFromWorker() / decodeFromModule() reject the other side's messages", () => {
  for (const msg of MODULE_SAMPLES) {
    assert.throws(() => decodeFromWorker(encodeControl(msg)), protocolError("unknown_type"));
  }
  for (const msg of WORKER_SAMPLES) {
    assert.throws(() => decodeFromModule(encodeControl(msg)), protocolError("unknown_type"));
  }
});

Deno.test("decodeControl() rejects wrong fields with bad_message naming the field", () => {
  const cases: [Record<string, unknown>, RegExp][] = [
    [{ type: "PING" }, /field 'req_id'/],
    [{ type: "PING", req_id: -1 }, /field 'req_id'/],
    [{ type: "PING", req_id: 1.5 }, /field 'req_id'/],
    [{ type: "PING", req_id: "1" }, /field 'req_id'/],
    [{ type: "PING", req_id: 1, extra: true }, /unknown field 'extra'/],
    [{ type: "SHUTDOWN", req_id: 1 }, /unknown field 'req_id'/],
    [{ type: "CANCEL" }, /field 'req_id'/],
    [{ type: "CANCEL", req_id: -1 }, /field 'req_id'/],
    [{ type: "CANCEL", req_id: 1, model_ref: "m0" }, /unknown field 'model_ref'/],
    [{ type: "TOKENIZE", req_id: 1, model_ref: "m0" }, /field 'texts'/],
    [{ type: "TOKENIZE", req_id: 1, model_ref: "m0", texts: [7] }, /field 'texts\.0'/],
    [{ type: "TOKENIZE", req_id: 1, model_ref: "", texts: [] }, /field 'model_ref'/],
    [{ type: "TOKENS", req_id: 1, ids: [[1.5]] }, /field 'ids\.0\.0'/],
    [{ type: "TOKENS", req_id: 1, ids: [[2 ** 31]] }, /field 'ids\.0\.0'/],
    [{ type: "TOKENS", req_id: 1 }, /field 'ids'/],
    [{ ...MODULE_SAMPLES[2], pooling: "last_token" }, /field 'pooling'/],
    [{ ...MODULE_SAMPLES[2], normalize: 1 }, /field 'normalize'/],
    [
      { ...MODULE_SAMPLES[2], items: [{ id: "a", n_tokens: -3 }] },
      /field 'items\.0\.n_tokens'/,
    ],
    [
      { ...MODULE_SAMPLES[2], items: [{ id: "a", n_tokens: 1, text: "x" }] },
      /unknown field 'text' in 'items\.0'/,
    ],
    [{ ...MODULE_SAMPLES[5], max_tokens: 0 }, /field 'max_tokens'/],
    [{ ...WORKER_SAMPLES[0], v: 256 }, /field 'v'/],
    [{ ...WORKER_SAMPLES[0], max_frame: 0 }, /field 'max_frame'/],
    [{ ...WORKER_SAMPLES[0], max_frame: 2 ** 32 }, /field 'max_frame'/],
    [{ ...WORKER_SAMPLES[0], engine: { engine: "owned-cuda" } }, /field 'engine\.version'/],
    [
      { ...WORKER_SAMPLES[0], engine: { engine: "x", version: "1", build_flags: { a: 1 } } },
      /field 'engine\.build_flags\.a'/,
    ],
    [{ ...WORKER_SAMPLES[4], finish_reason: "length" }, /field 'finish_reason'/],
    [{ ...WORKER_SAMPLES[4], generated_token_ids: [2 ** 31] }, /field 'generated_token_ids\.0'/],
    [{ ...WORKER_SAMPLES[1], cold_load_ms: -1 }, /field 'cold_load_ms'/],
    [{ type: "ERR", code: "", msg: "x" }, /field 'code'/],
    [{ ...MODULE_SAMPLES[5], stream: false }, /field 'stream'/],
    [{ ...MODULE_SAMPLES[5], stream: "yes" }, /field 'stream'/],
    [{ type: "TEXT_PART", req_id: 1 }, /field 'token_ids'/],
    [{ type: "TEXT_PART", token_ids: [1] }, /field 'req_id'/],
    [{ type: "TEXT_PART", req_id: 1, token_ids: [1.5] }, /field 'token_ids\.0'/],
    [{ type: "TEXT_PART", req_id: 1, token_ids: [2 ** 31] }, /field 'token_ids\.0'/],
    [{ type: "TEXT_PART", req_id: 1, token_ids: [1], text: "a" }, /unknown field 'text'/],
  ];
  for (const [value, field] of cases) {
    assert.throws(
      () => decodeControl(utf8.encode(JSON.stringify(value))),
      protocolError("bad_message", field),
      JSON.stringify(value),
    );
  }
  // JSON.parse turns 1e400 into Infinity: still a wrong number, not a crash.
  assert.throws(
    () => decodeControl(utf8.encode('{"type":"PONG","req_id":1,"rss_mb":1e400,"models_loaded":0}')),
    protocolError("bad_message", /field 'rss_mb'/),
  );
});

Deno.test("encodeControl() rejects a malformed message with TypeError", () => {
  assert.throws(() => encodeControl({ type: "PING", req_id: NaN }), TypeError);
  assert.throws(
    () => encodeControl({ type: "VECTORS", req_id: 1, dims: -1, n: 0 }),
    TypeError,
  );
  assert.throws(() => encodeControl({ type: "NOPE" } as unknown as ControlMessage), TypeError);
});

Deno.test("encodeI32LE() / decodeI32LE() golden bytes and round trip", () => {
  const golden = Uint8Array.of(0x01, 0x00, 0x00, 0x00, 0xfe, 0xff, 0xff, 0xff);
  assert.deepEqual(encodeI32LE(Int32Array.of(1, -2)), golden);
  assert.deepEqual(decodeI32LE(golden, 2), Int32Array.of(1, -2));
  assert.deepEqual(
    encodeI32LE(Int32Array.of(0x7fffffff, -0x80000000, 0x01020304)),
    Uint8Array.of(0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0x80, 0x04, 0x03, 0x02, 0x01),
  );
  const ids = Int32Array.from({ length: 1000 }, (_, i) => (i * 2654435761) | 0);
  assert.deepEqual(decodeI32LE(encodeI32LE(ids), ids.length), ids);
  assert.deepEqual(decodeI32LE(new Uint8Array(0), 0), new Int32Array(0));
  assert.deepEqual(decodeI32LE(golden), Int32Array.of(1, -2));
});

Deno.test("encodeF32LE() / decodeF32LE() golden bytes and round trip", () => {
  const golden = Uint8Array.of(0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0);
  assert.deepEqual(encodeF32LE(Float32Array.of(1, -2)), golden);
  assert.deepEqual(decodeF32LE(golden, 2), Float32Array.of(1, -2));
  const special = Float32Array.of(0.5, -0, Infinity, NaN, 1e-45);
  const back = decodeF32LE(encodeF32LE(special), special.length);
  assert.deepEqual(new Uint8Array(back.buffer), new Uint8Array(special.buffer));
});

Deno.test("tensor codecs handle views at odd offsets and never alias", () => {
  const backing = new Uint8Array(13);
  backing.set(Uint8Array.of(0x01, 0x00, 0x00, 0x00, 0xfe, 0xff, 0xff, 0xff), 1);
  const view = backing.subarray(1, 9); // byteOffset 1: not 4-aligned
  const ids = decodeI32LE(view, 2);
  assert.deepEqual(ids, Int32Array.of(1, -2));
  backing.fill(0);
  assert.deepEqual(ids, Int32Array.of(1, -2));

  const floats = new Float32Array(4);
  floats.set([1, 2, 3, 4]);
  assert.deepEqual(
    encodeF32LE(floats.subarray(1, 2)),
    Uint8Array.of(0x00, 0x00, 0x00, 0x40),
  );
  assert.deepEqual(encodeI32LE(Int32Array.of(5, 6, 7).subarray(2)), Uint8Array.of(7, 0, 0, 0));
});

Deno.test("decodeI32LE() / decodeF32LE() reject a length mismatch with bad_message", () => {
  const eight = new Uint8Array(8);
  for (const decode of [decodeI32LE, decodeF32LE]) {
    assert.throws(() => decode(eight, 3), protocolError("bad_message"));
    assert.throws(() => decode(eight, 1), protocolError("bad_message"));
    assert.throws(() => decode(new Uint8Array(7)), protocolError("bad_message"));
    assert.throws(() => decode(new Uint8Array(9), 2), protocolError("bad_message"));
    for (const bad of [-1, 1.5, NaN, Infinity]) {
      assert.throws(() => decode(eight, bad), RangeError, String(bad));
    }
  }
});

// --- fuzz ---------------------------------------------------------------------------------------

const FIELD_NAMES = [
  "type",
  "req_id",
  "v",
  "nonce",
  "engine",
  "pid",
  "max_frame",
  "model_ref",
  "dims",
  "n",
  "items",
  "pooling",
  "normalize",
  "text",
  "finish_reason",
  "generated_token_ids",
  "runtime_config",
  "candidates",
  "sequences",
  "__proto__",
  "constructor",
  "toString",
];

function randomJsonValue(rnd: () => number, depth = 0): unknown {
  const pick = Math.floor(rnd() * (depth > 2 ? 8 : 11));
  switch (pick) {
    case 0:
      return null;
    case 1:
      return rnd() < 0.5;
    case 2:
      return Math.floor(rnd() * 2 ** 33) - 2 ** 32;
    case 3:
      return [0, -0, -1, 1.5, 2 ** 53, 2 ** 31, 1e308, -1e-7][Math.floor(rnd() * 8)];
    case 4:
      return "";
    case 5:
      return ["mean", "cls", "last", "HELLO", "PING", "stop_token", "m0", "héllo"][
        Math.floor(rnd() * 8)
      ];
    case 6:
      return String.fromCharCode(...Array.from({ length: rnd() * 8 }, () => rnd() * 0xffff));
    case 7:
      return Math.floor(rnd() * 10);
    case 8:
      return Array.from({ length: rnd() * 4 }, () => randomJsonValue(rnd, depth + 1));
    case 9:
    case 10: {
      const o: Record<string, unknown> = {};
      for (let i = rnd() * 4; i > 0; i--) {
        o[FIELD_NAMES[Math.floor(rnd() * FIELD_NAMES.length)]!] = randomJsonValue(rnd, depth + 1);
      }
      return o;
    }
  }
  return null;
}

/** Changes one spot of a JSON value in place (or returns a replacement at the root). */
function mutateValue(rnd: () => number, value: unknown, types: readonly string[]): unknown {
  if (typeof value !== "object" || value === null) return randomJsonValue(rnd);
  const container = value as Record<string, unknown>;
  const keys = Object.keys(container);
  const r = rnd();
  if (keys.length > 0 && r < 0.45) {
    const key = keys[Math.floor(rnd() * keys.length)]!;
    const child = container[key];
    if (typeof child === "object" && child !== null && rnd() < 0.5) {
      container[key] = mutateValue(rnd, child, types);
    } else if (key === "type" && rnd() < 0.5) {
      container[key] = types[Math.floor(rnd() * types.length)];
    } else {
      container[key] = randomJsonValue(rnd);
    }
  } else if (keys.length > 0 && r < 0.75) {
    delete container[keys[Math.floor(rnd() * keys.length)]!];
  } else if (Array.isArray(value) && r < 0.9) {
    value.push(randomJsonValue(rnd));
  } else {
    container[FIELD_NAMES[Math.floor(rnd() * FIELD_NAMES.length)]!] = randomJsonValue(rnd);
  }
  return value;
}

function mutateBytes(rnd: () => number, bytes: Uint8Array): Uint8Array {
  const out = [...bytes];
  for (let i = 1 + Math.floor(rnd() * 3); i > 0; i--) {
    const at = Math.floor(rnd() * (out.length + 1));
    const r = rnd();
    if (r < 0.4 && out.length > 0) out[at % out.length] = Math.floor(rnd() * 256);
    else if (r < 0.6) out.splice(at, 1);
    else if (r < 0.8) out.splice(at, 0, Math.floor(rnd() * 256));
    else out.length = at;
  }
  return Uint8Array.from(out);
}

interface FuzzStats {
  frames: number;
  accepted: number;
  protocolErrors: number;
  decoderFailures: number;
}

/**
 * Pushes `frameCount` fuzzed frames through FrameDecoder and `decode` (plus decodeControl and the
 * tensor decoders). Only WorkerProtocolError may escape any of them; anything `decode` accepts
 * must re-encode.
 */
function fuzzSide(
  seed: number,
  frameCount: number,
  samples: readonly ControlMessage[],
  decode: (frame: Uint8Array) => ControlMessage,
): FuzzStats {
  const rnd = mulberry32(seed);
  const types = [...MODULE_TO_WORKER_TYPES, ...WORKER_TO_MODULE_TYPES, "FOO", ""];
  const maxFrameBytes = 4096;
  const stats: FuzzStats = { frames: 0, accepted: 0, protocolErrors: 0, decoderFailures: 0 };

  function expectProtocolError(what: string, fn: () => void): boolean {
    try {
      fn();
      return true;
    } catch (err) {
      if (!(err instanceof WorkerProtocolError)) {
        assert.fail(`${what} threw ${String(err)} (seed ${seed})`);
      }
      stats.protocolErrors++;
      return false;
    }
  }

  for (let made = 0; made < frameCount;) {
    // One stream of up to 50 frames, some valid, some corrupt, maybe a corrupt header.
    const payloads: (Uint8Array | "bad_header")[] = [];
    const originals = new Map<number, ControlMessage>();
    for (let i = 0; i < 50 && made < frameCount; i++, made++) {
      const r = rnd();
      const sample = samples[Math.floor(rnd() * samples.length)]!;
      if (r < 0.1) {
        originals.set(payloads.length, sample);
        payloads.push(encodeControl(sample));
      } else if (r < 0.3) {
        const n = rnd() < 0.9 ? Math.floor(rnd() * 64) : Math.floor(rnd() * maxFrameBytes);
        payloads.push(Uint8Array.from({ length: n }, () => Math.floor(rnd() * 256)));
      } else if (r < 0.45) {
        payloads.push(mutateBytes(rnd, encodeControl(sample)));
      } else if (r < 0.99) {
        let value: unknown = structuredClone(sample);
        for (let k = 1 + Math.floor(rnd() * 3); k > 0; k--) value = mutateValue(rnd, value, types);
        payloads.push(utf8.encode(JSON.stringify(value) ?? "null"));
      } else {
        payloads.push("bad_header");
      }
    }
    const parts = payloads.map((p) => {
      if (p !== "bad_header") return encodeFrame(p, { maxFrameBytes });
      const header = new Uint8Array(4);
      new DataView(header.buffer).setUint32(0, maxFrameBytes + 1 + Math.floor(rnd() * 1e9), true);
      return header;
    });
    const stream = new Uint8Array(parts.reduce((n, p) => n + p.byteLength, 0));
    const ends: number[] = [];
    parts.reduce(
      (
        offset,
        p,
      ) => (stream.set(p, offset), ends.push(offset + p.byteLength), offset + p.byteLength),
      0,
    );

    // Random chunking. A decoder that failed is replaced (as a reconnect would) and decoding
    // resumes just after the bad header; frames earlier in the failing chunk are lost with it.
    let decoder = new FrameDecoder({ maxFrameBytes });
    let index = 0;
    for (let offset = 0; offset < stream.byteLength;) {
      const size = 1 + Math.floor(rnd() * (rnd() < 0.5 ? 16 : 512));
      const chunk = stream.subarray(offset, offset + size);
      const chunkStart = offset;
      offset += size;
      let frames: Uint8Array[] = [];
      if (!expectProtocolError("FrameDecoder.push", () => (frames = decoder.push(chunk)))) {
        stats.decoderFailures++;
        const bad = payloads.findIndex((p, i) => p === "bad_header" && ends[i]! > chunkStart);
        assert.ok(bad >= 0, "decoder failed without a bad header");
        decoder = new FrameDecoder({ maxFrameBytes });
        offset = ends[bad]!;
        index = bad + 1;
        continue;
      }
      for (const frame of frames) {
        stats.frames++;
        const original = originals.get(index++);
        let msg: ControlMessage | undefined;
        if (expectProtocolError("decode", () => (msg = decode(frame)))) {
          stats.accepted++;
          if (original !== undefined) assert.deepEqual(msg, original);
          expectProtocolError("encodeControl", () => void encodeControl(msg!));
        } else {
          assert.equal(original, undefined, "a valid sample was refused");
        }
        expectProtocolError("decodeControl", () => void decodeControl(frame));
        const count = rnd() < 0.5 ? undefined : Math.floor(rnd() * 32);
        expectProtocolError("decodeI32LE", () => void decodeI32LE(frame, count));
        expectProtocolError("decodeF32LE", () => void decodeF32LE(frame, count));
      }
    }
    expectProtocolError("FrameDecoder.end", () => decoder.end());
  }
  return stats;
}

Deno.test("fuzz: 10,000 random frames to each side's decoder; only WorkerProtocolError escapes", () => {
  const moduleSide = fuzzSide(0x5eed_0001, 10_000, WORKER_SAMPLES, decodeFromWorker);
  const workerSide = fuzzSide(0x5eed_0002, 10_000, MODULE_SAMPLES, decodeFromModule);
  for (const stats of [moduleSide, workerSide]) {
    // Enough frames survive framing, and the mix exercises both accept and refuse paths.
    assert.ok(stats.frames > 9000, JSON.stringify(stats));
    assert.ok(stats.accepted > 600, JSON.stringify(stats));
    assert.ok(stats.protocolErrors > 6000, JSON.stringify(stats));
    assert.ok(stats.decoderFailures > 0, JSON.stringify(stats));
  }
});
