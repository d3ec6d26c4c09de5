/**
 * The worker handshake of docs/internals.md §7: the module listens on a per-worker socket, spawns
 * the worker with `--socket <path>` and the nonce in `SYNAPSE_WORKER_NONCE` (the reference's
 * `--nonce <16 hex>` would show it in `ps`), and the worker's first frame is HELLO. The module
 * checks it with {@link checkHello} and answers {@link makeAck}; any refusal means close
 * the connection and kill the worker.
 *
 * @module
 */
import { sha256Hex } from "../identity/sha256.ts";
import { checkMaxFrameBytes, DEFAULT_MAX_FRAME_BYTES, WorkerProtocolError } from "./frame.ts";
import type { AckMessage, HelloMessage } from "./messages.ts";

/**
 * Worker protocol version; HELLO's `v` must equal it exactly (docs/internals.md §7
 * "Process and handshake"; 2 in the reference's newest code, though its older docs say 1).
 */
export const WORKER_PROTOCOL_VERSION = 2;

/** Engine names a worker may announce in HELLO (docs/internals.md §7). */
export const KNOWN_WORKER_ENGINES = Object.freeze(
  [
    "llama.cpp-worker",
    "synapse-llama-shim",
    "ane-coreml-worker",
    "owned-metal-decode",
    "owned-cuda",
    "owned-vulkan",
    "ane-direct-worker",
  ] as const,
);

/** One of {@link KNOWN_WORKER_ENGINES}. */
export type KnownWorkerEngine = (typeof KNOWN_WORKER_ENGINES)[number];

/** The owned decode worker's own protocol version, sent in HELLO as `protocol_version`. */
export const DECODE_PROTOCOL_VERSION = 2;

/** Options of {@link checkHello}. */
export interface CheckHelloOptions {
  /** The nonce handed to the worker (16 lowercase hex chars). */
  nonce: string;
  /** The engine the module spawned. */
  expectedEngine: KnownWorkerEngine;
  /**
   * Our largest frame, in bytes.
   * @default {DEFAULT_MAX_FRAME_BYTES} (64 MiB)
   */
  maxFrameBytes?: number;
  /** When set, HELLO's `manifest_digest` must equal it (owned cuda / vulkan / ane-direct). */
  manifestDigest?: string;
  /** When set, HELLO's `kernel_revision` must equal it (owned cuda / vulkan / ane-direct). */
  kernelRevision?: string;
}

/** Outcome of an accepted HELLO. */
export interface HelloAccepted {
  /** Negotiated max frame, in bytes: min(ours, the worker's `max_frame`). */
  maxFrameBytes: number;
}

/**
 * Checks a worker's HELLO (already schema-checked by `decodeFromWorker`) against what the module
 * spawned, in this order: protocol version, nonce, engine.
 *
 * - `v` must equal {@link WORKER_PROTOCOL_VERSION} exactly; `owned-metal-decode` must also send
 *   `protocol_version` = {@link DECODE_PROTOCOL_VERSION};
 * - `nonce` must equal ours (compared in constant time);
 * - `engine.engine` must be in {@link KNOWN_WORKER_ENGINES} and equal `expectedEngine`;
 *   `owned-cuda`, `owned-vulkan` and `ane-direct-worker` must send `manifest_digest` and
 *   `kernel_revision` (equal to the options' values when those are given).
 *
 * @param hello The worker's HELLO.
 * @param options Nonce, expected engine, our max frame and the expected manifest facts.
 * @returns The negotiated max frame size.
 * @throws {WorkerProtocolError} `version_mismatch`, `nonce_mismatch` or `engine_mismatch`.
 * @throws {RangeError} when our `nonce` is not 16 lowercase hex chars or `maxFrameBytes` is out of
 *   range (bugs in the caller).
 *
 * @example Accept a llama worker
 * ```ts
 * import { checkHello } from "./handshake.ts";
 * import assert from "node:assert";
 *
 * const nonce = "0123456789abcdef";
 * const hello = {
 *   type: "HELLO" as const, v: 2, nonce, pid: 42, max_frame: 1024,
 *   engine: { engine: "llama.cpp-worker", version: "b4000" },
 * };
 * assert.deepStrictEqual(
 *   checkHello(hello, { nonce, expectedEngine: "llama.cpp-worker" }),
 *   { maxFrameBytes: 1024 },
 * );
 * ```
 */
export function checkHello(hello: HelloMessage, options: CheckHelloOptions): HelloAccepted {
  if (!NONCE_RE.test(options.nonce)) {
    throw new RangeError(
      `Cannot check HELLO as 'nonce' must be 16 lowercase hex chars: received '${options.nonce}'`,
    );
  }
  const ours = checkMaxFrameBytes(options.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES);

  if (hello.v !== WORKER_PROTOCOL_VERSION) {
    throw new WorkerProtocolError(
      "version_mismatch",
      `Cannot accept worker: protocol version ${hello.v}, expected ${WORKER_PROTOCOL_VERSION}`,
    );
  }
  if (!constantTimeEqual(hello.nonce, options.nonce)) {
    throw new WorkerProtocolError("nonce_mismatch", "Cannot accept worker: nonce mismatch");
  }
  const engine = hello.engine.engine;
  if (!isKnownWorkerEngine(engine)) {
    throw new WorkerProtocolError(
      "engine_mismatch",
      `Cannot accept worker: unknown engine '${clip(engine)}'`,
    );
  }
  if (engine !== options.expectedEngine) {
    throw new WorkerProtocolError(
      "engine_mismatch",
      `Cannot accept worker: engine '${engine}', expected '${options.expectedEngine}'`,
    );
  }
  switch (engine) {
    case "owned-cuda":
    case "owned-vulkan":
    case "ane-direct-worker":
      checkManifestField(engine, "manifest_digest", hello.manifest_digest, options.manifestDigest);
      checkManifestField(engine, "kernel_revision", hello.kernel_revision, options.kernelRevision);
      break;
    case "owned-metal-decode":
      if (hello.protocol_version !== DECODE_PROTOCOL_VERSION) {
        throw new WorkerProtocolError(
          "version_mismatch",
          `Cannot accept worker: decode protocol_version ${hello.protocol_version}, expected ${DECODE_PROTOCOL_VERSION}`,
        );
      }
      break;
    case "llama.cpp-worker":
    case "synapse-llama-shim":
    case "ane-coreml-worker":
      break;
    default:
      throw new Error(`Unhandled worker engine ${String(engine satisfies never)}. This is a bug.`);
  }
  return { maxFrameBytes: Math.min(ours, hello.max_frame) };
}

/**
 * The module's answer to an accepted HELLO.
 *
 * @param maxFrameBytes The negotiated max frame, in bytes (from {@link checkHello}).
 * @returns `{type: "ACK", v: 2, accept: true, max_frame}`.
 * @throws {RangeError} when `maxFrameBytes` is not an integer in 1..2^32-1.
 */
export function makeAck(maxFrameBytes: number): AckMessage {
  return {
    type: "ACK",
    v: WORKER_PROTOCOL_VERSION,
    accept: true,
    max_frame: checkMaxFrameBytes(maxFrameBytes),
  };
}

/** Options of {@link newNonce}. */
export interface NewNonceOptions {
  /**
   * Fills a buffer with random bytes (injectable for tests).
   * @default {crypto.getRandomValues}
   */
  getRandomValues?: (bytes: Uint8Array) => void;
}

/**
 * A fresh handshake nonce, handed to the worker in `SYNAPSE_WORKER_NONCE`.
 *
 * @param options Source of randomness.
 * @returns 16 lowercase hex chars (8 random bytes).
 */
export function newNonce(options: NewNonceOptions = {}): string {
  const bytes = new Uint8Array(8);
  if (options.getRandomValues === undefined) crypto.getRandomValues(bytes);
  else options.getRandomValues(bytes);
  return toHex(bytes);
}

/**
 * The Unix socket a worker connects to: `<runtimeDir>/wk-<hex(sha256(workerId)[0..8])>.sock`
 * (docs/internals.md §7 "Process and handshake"). `[0..8]` is a range over the digest *bytes*
 * (Rust slice syntax, as the reference implementation writes it), so the name holds the first 8
 * bytes = 16 hex chars, the same width as the nonce; a short name keeps the path under the
 * ~104-byte `sun_path` limit.
 *
 * @param runtimeDir Directory for runtime sockets (a trailing `/` is ignored).
 * @param workerId The worker id (also passed as `SYNAPSE_WORKER_ID`), hashed as UTF-8.
 * @returns Absolute or relative socket path, as `runtimeDir` is.
 * @throws {RangeError} when `runtimeDir` is empty.
 *
 * @example
 * ```ts
 * import { workerSocketPath } from "./handshake.ts";
 * import assert from "node:assert";
 *
 * // sha256("abc") = ba7816bf8f01cfea…
 * assert.strictEqual(workerSocketPath("/run/synapse", "abc"), "/run/synapse/wk-ba7816bf8f01cfea.sock");
 * ```
 */
export function workerSocketPath(runtimeDir: string, workerId: string): string {
  if (runtimeDir.length === 0) {
    throw new RangeError("Cannot build worker socket path as 'runtimeDir' is empty");
  }
  return `${runtimeDir.replace(/\/+$/, "")}/wk-${sha256Hex(workerId).slice(0, 16)}.sock`;
}

const NONCE_RE = /^[0-9a-f]{16}$/;

/**
 * Tells whether `name` is one of {@link KNOWN_WORKER_ENGINES}.
 *
 * @param name An engine name from HELLO.
 * @returns True for the six §7 names.
 */
export function isKnownWorkerEngine(name: string): name is KnownWorkerEngine {
  return (KNOWN_WORKER_ENGINES as readonly string[]).includes(name);
}

function checkManifestField(
  engine: KnownWorkerEngine,
  field: "manifest_digest" | "kernel_revision",
  got: string | undefined,
  expected: string | undefined,
): void {
  if (got === undefined || got.length === 0) {
    throw new WorkerProtocolError(
      "engine_mismatch",
      `Cannot accept worker: engine '${engine}' must send '${field}'`,
    );
  }
  if (expected !== undefined && got !== expected) {
    throw new WorkerProtocolError(
      "engine_mismatch",
      `Cannot accept worker: ${field} '${clip(got)}', expected '${expected}'`,
    );
  }
}

/** Compares two strings in time independent of where they differ (lengths are not secret). */
function constantTimeEqual(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

function toHex(bytes: Uint8Array): string {
  let s = "";
  for (const b of bytes) s += b.toString(16).padStart(2, "0");
  return s;
}

function clip(s: string): string {
  return s.length > 64 ? `${s.slice(0, 64)}…` : s;
}
