import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { DEFAULT_MAX_FRAME_BYTES, WorkerProtocolError } from "../../lib/workers/frame.ts";
import {
  checkHello,
  isKnownWorkerEngine,
  KNOWN_WORKER_ENGINES,
  type KnownWorkerEngine,
  makeAck,
  newNonce,
  WORKER_PROTOCOL_VERSION,
  workerSocketPath,
} from "../../lib/workers/handshake.ts";
import { type HelloMessage } from "../../lib/workers/messages.ts";
import { decodeFromModule, encodeControl } from "../../lib/workers/codec.ts";

const NONCE = "0123456789abcdef";

function hello(overrides: Partial<HelloMessage> = {}): HelloMessage {
  return {
    type: "HELLO",
    v: 2,
    nonce: NONCE,
    engine: { engine: "llama.cpp-worker", version: "b4000" },
    pid: 4242,
    max_frame: DEFAULT_MAX_FRAME_BYTES,
    ...overrides,
  };
}

function protocolError(code: string): (err: unknown) => boolean {
  return function isCode(err: unknown): boolean {
    return err instanceof WorkerProtocolError && err.code === code;
  };
}

Deno.test("WORKER_PROTOCOL_VERSION and KNOWN_WORKER_ENGINES follow contract §7 (plus the llama shim)", () => {
  assert.equal(WORKER_PROTOCOL_VERSION, 2);
  assert.deepEqual([...KNOWN_WORKER_ENGINES], [
    "llama.cpp-worker",
    // This implementation's addition (docs/internals.md §7): the FFI worker over the llama shim.
    "synapse-llama-shim",
    "ane-coreml-worker",
    "owned-metal-decode",
    "owned-cuda",
    "owned-vulkan",
    "ane-direct-worker",
  ]);
  assert.ok(Object.isFrozen(KNOWN_WORKER_ENGINES));
  assert.ok(isKnownWorkerEngine("owned-cuda"));
  assert.ok(!isKnownWorkerEngine("llama.cpp"));
});

Deno.test("checkHello() accepts and negotiates the min of both max frames", () => {
  const options = { nonce: NONCE, expectedEngine: "llama.cpp-worker" as const };
  assert.deepEqual(checkHello(hello(), options), { maxFrameBytes: DEFAULT_MAX_FRAME_BYTES });
  assert.deepEqual(checkHello(hello({ max_frame: 1024 }), options), { maxFrameBytes: 1024 });
  assert.deepEqual(
    checkHello(hello({ max_frame: 2 ** 32 - 1 }), { ...options, maxFrameBytes: 4096 }),
    { maxFrameBytes: 4096 },
  );
});

Deno.test("checkHello() refuses any other version with version_mismatch", () => {
  for (const v of [0, 1, 3, 255]) {
    assert.throws(
      () => checkHello(hello({ v }), { nonce: NONCE, expectedEngine: "llama.cpp-worker" }),
      protocolError("version_mismatch"),
      String(v),
    );
  }
});

Deno.test("checkHello() refuses a wrong nonce with nonce_mismatch", () => {
  for (
    const nonce of ["0123456789abcdee", "0123456789ABCDEF", "0123456789abcde", "", NONCE + "0"]
  ) {
    assert.throws(
      () => checkHello(hello({ nonce }), { nonce: NONCE, expectedEngine: "llama.cpp-worker" }),
      protocolError("nonce_mismatch"),
      nonce,
    );
  }
});

Deno.test("checkHello() refuses unknown or unexpected engines with engine_mismatch", () => {
  const unknown = hello({ engine: { engine: "llama.cpp", version: "1" } });
  assert.throws(
    () => checkHello(unknown, { nonce: NONCE, expectedEngine: "llama.cpp-worker" }),
    protocolError("engine_mismatch"),
  );
  assert.throws(
    () => checkHello(hello(), { nonce: NONCE, expectedEngine: "ane-coreml-worker" }),
    protocolError("engine_mismatch"),
  );
});

Deno.test("checkHello() requires manifest_digest and kernel_revision from owned cuda/vulkan/ane-direct", () => {
  const owned: KnownWorkerEngine[] = ["owned-cuda", "owned-vulkan", "ane-direct-worker"];
  for (const engine of owned) {
    const base = { engine: { engine, version: "1.0.0" } };
    const options = { nonce: NONCE, expectedEngine: engine };
    const full = hello({ ...base, manifest_digest: "ab".repeat(32), kernel_revision: "k7" });
    assert.deepEqual(checkHello(full, options), { maxFrameBytes: DEFAULT_MAX_FRAME_BYTES });
    for (
      const partial of [
        hello(base),
        hello({ ...base, manifest_digest: "ab".repeat(32) }),
        hello({ ...base, kernel_revision: "k7" }),
        hello({ ...base, manifest_digest: "", kernel_revision: "k7" }),
      ]
    ) {
      assert.throws(() => checkHello(partial, options), protocolError("engine_mismatch"), engine);
    }
    // Exact values when the module knows them.
    assert.deepEqual(
      checkHello(full, { ...options, manifestDigest: "ab".repeat(32), kernelRevision: "k7" }),
      { maxFrameBytes: DEFAULT_MAX_FRAME_BYTES },
    );
    assert.throws(
      () => checkHello(full, { ...options, manifestDigest: "cd".repeat(32) }),
      protocolError("engine_mismatch"),
    );
    assert.throws(
      () => checkHello(full, { ...options, kernelRevision: "k8" }),
      protocolError("engine_mismatch"),
    );
  }
  // Other engines need neither.
  const coreml = hello({ engine: { engine: "ane-coreml-worker", version: "1" } });
  assert.ok(checkHello(coreml, { nonce: NONCE, expectedEngine: "ane-coreml-worker" }));
});

Deno.test("checkHello() requires protocol_version 2 from owned-metal-decode", () => {
  const base = { engine: { engine: "owned-metal-decode", version: "1" } };
  const options = { nonce: NONCE, expectedEngine: "owned-metal-decode" as const };
  assert.ok(checkHello(hello({ ...base, protocol_version: 2 }), options));
  assert.throws(() => checkHello(hello(base), options), protocolError("version_mismatch"));
  assert.throws(
    () => checkHello(hello({ ...base, protocol_version: 1 }), options),
    protocolError("version_mismatch"),
  );
});

Deno.test("checkHello() throws RangeError for a malformed nonce or max of ours", () => {
  for (const nonce of ["0123456789ABCDEF", "0123", "zz23456789abcdef"]) {
    assert.throws(
      () => checkHello(hello(), { nonce, expectedEngine: "llama.cpp-worker" }),
      RangeError,
    );
  }
  assert.throws(
    () =>
      checkHello(hello(), { nonce: NONCE, expectedEngine: "llama.cpp-worker", maxFrameBytes: 0 }),
    RangeError,
  );
});

Deno.test("makeAck() builds an ACK the worker side decodes", () => {
  const ack = makeAck(4096);
  assert.deepEqual(ack, { type: "ACK", v: 2, accept: true, max_frame: 4096 });
  assert.deepEqual(decodeFromModule(encodeControl(ack)), ack);
  assert.throws(() => makeAck(0), RangeError);
});

Deno.test("newNonce() returns 16 lowercase hex chars from the injected randomness", () => {
  const fixed = newNonce({
    getRandomValues(bytes: Uint8Array): void {
      bytes.set([0x00, 0x01, 0xab, 0xcd, 0xef, 0x10, 0x7f, 0xff]);
    },
  });
  assert.equal(fixed, "0001abcdef107fff");
  const seen = new Set<string>();
  for (let i = 0; i < 32; i++) {
    const nonce = newNonce();
    assert.match(nonce, /^[0-9a-f]{16}$/);
    seen.add(nonce);
  }
  assert.equal(seen.size, 32);
});

Deno.test("workerSocketPath() is <runtime_dir>/wk-<first 8 bytes of sha256(worker_id) in hex>.sock", () => {
  // sha256("abc") = ba7816bf8f01cfea414140de5dae2223…
  assert.equal(workerSocketPath("/run/synapse", "abc"), "/run/synapse/wk-ba7816bf8f01cfea.sock");
  assert.equal(workerSocketPath("/run/synapse/", "abc"), "/run/synapse/wk-ba7816bf8f01cfea.sock");
  assert.equal(workerSocketPath("/", "abc"), "/wk-ba7816bf8f01cfea.sock");
  const id = "llama.cpp-worker:ab12/λ";
  const digest = createHash("sha256").update(id, "utf8").digest("hex");
  assert.equal(workerSocketPath("/tmp/rt", id), `/tmp/rt/wk-${digest.slice(0, 16)}.sock`);
  assert.throws(() => workerSocketPath("", "abc"), RangeError);
});
