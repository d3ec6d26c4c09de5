/**
 * Worker host, supervisor and llama lane against real worker processes (`workers/llama.ts` and
 * its hidden `--test-…` hooks), no mocks: every way a worker can fail the handshake or break the
 * connection afterwards is a typed `engine_crashed` with its `details.reason`, the process is gone
 * afterwards, and the host starts a healthy worker right after (docs/internals.md §7, F13).
 */
import assert from "node:assert/strict";
import { SynapseError } from "../../lib/contract/errors.ts";
import { DEFAULT_CONFIG } from "../../lib/config/defaults.ts";
import type { PreloadModelConfig, SynapseConfig } from "../../lib/config/types.ts";
import { resolveLlamaWorkerLaunch } from "../../lib/engines/llama/launch.ts";
import { LlamaEngine } from "../../lib/engines/llama/llama_engine.ts";
import type { LlamaModelSpec } from "../../lib/engines/llama/llama_engine.ts";
import { serveHttp } from "../../lib/doors/http/server.ts";
import type { MachineProfile } from "../../lib/identity/machine_profile.ts";
import type { LogSink } from "../../lib/log/log.ts";
import { createSynapse } from "../../lib/synapse.ts";
import { LOG_TAIL_BYTES, WorkerConnection, WorkerErrReply } from "../../lib/workers/host.ts";
import type { WorkerStartOptions } from "../../lib/workers/spawn.ts";
import { workerSocketPath } from "../../lib/workers/handshake.ts";
import { encodeI32LE } from "../../lib/workers/codec.ts";
import type { PongMessage } from "../../lib/workers/messages.ts";
import { SupervisedWorker } from "../../lib/workers/supervisor.ts";
import { MODELS, resultOf, semanticError } from "../_helpers.ts";
import {
  assertCrash,
  assertGone,
  assertHealthyStart,
  assertKilledBy,
  assertNoSocket,
  logLine,
  ping as PING,
  rejection,
  runtimeDir,
  workerOptions,
} from "./_worker_helpers.ts";

const LLAMA_DIR = `${MODELS}/synapse-tiny-llama`;
const EMBED_DIR = `${MODELS}/synapse-tiny-embed`;

// ---------------------------------------------------------------------------------------------
// Handshake

const HANDSHAKE_CASES: {
  name: string;
  extra: string[];
  more?: Partial<WorkerStartOptions>;
  reason: string;
  tail?: string;
  /** How the worker ended: killed by the host, or its own exit code. */
  end: { signal: "SIGKILL" } | { exit_code: number };
}[] = [
  {
    name: "a HELLO with the wrong nonce",
    extra: ["--test-wrong-nonce"],
    reason: "nonce_mismatch",
    end: { signal: "SIGKILL" },
  },
  {
    name: "a HELLO of protocol version 1",
    extra: ["--test-protocol-version", "1"],
    reason: "version_mismatch",
    end: { signal: "SIGKILL" },
  },
  {
    name: "a HELLO with an unknown engine name",
    extra: ["--test-engine", "bogus-engine"],
    reason: "engine_mismatch",
    end: { signal: "SIGKILL" },
  },
  {
    name: "a HELLO whose engine version is not the expected one",
    extra: [],
    more: { expectedVersion: "0.0.0" },
    reason: "identity_mismatch",
    end: { signal: "SIGKILL" },
  },
  {
    // The worker connects and says so before the timer can matter: the timeout is the only way
    // this start ends (the hook never sends HELLO).
    name: "a worker that never sends HELLO",
    extra: ["--test-no-hello"],
    more: { helloTimeoutMs: 1_500 },
    reason: "hello_timeout",
    tail: "not sending HELLO",
    end: { signal: "SIGKILL" },
  },
  {
    name: "a worker that exits before connecting",
    extra: ["--test-exit-before-connect"],
    reason: "exited_before_hello",
    tail: "exiting before connecting",
    end: { exit_code: 3 },
  },
];

for (const c of HANDSHAKE_CASES) {
  Deno.test(`WorkerConnection.start() refuses ${c.name} and kills the worker`, async () => {
    await using dir = await runtimeDir();
    const err = await rejection(WorkerConnection.start(workerOptions(dir.path, c.extra, c.more)));
    const d = assertCrash(err, [c.reason]);
    assert.equal(d.worker_id, "host-test");
    if (c.tail !== undefined) {
      assert.match(String(d.log_tail), new RegExp(c.tail), "the log tail holds the worker's words");
    }
    const end = "signal" in c.end ? { signal: d.signal } : { exit_code: d.exit_code };
    assert.deepEqual(end, c.end, "the details say how the worker ended");
    assertGone(d.pid);
    assertNoSocket(dir.path);
    await assertHealthyStart(dir.path);
  });
}

Deno.test("WorkerConnection.start() leaves the socket path to the next worker after one exits before connecting", async () => {
  await using dir = await runtimeDir();
  const path = workerSocketPath(dir.path, "host-test");
  // Deno unlinks a unix socket's path when its listener is dropped, and with an accept pending
  // that happens late: it used to unlink the socket of the next listener on the same path
  // (about one time in two), so the restarted worker could not connect.
  for (let i = 0; i < 8; i++) {
    const err = await rejection(
      WorkerConnection.start(workerOptions(dir.path, ["--test-exit-before-connect"])),
    );
    assertCrash(err, ["exited_before_hello"]);
    const next = Deno.listen({ transport: "unix", path });
    try {
      await new Promise((r) => setTimeout(r, 50));
      assert.ok(Deno.statSync(path).isSocket, `round ${i}: the next socket is still there`);
    } finally {
      next.close();
    }
  }
  await assertHealthyStart(dir.path);
});

Deno.test("WorkerConnection.start() reports a program that cannot be spawned as spawn_failed", async () => {
  await using dir = await runtimeDir();
  const err = await rejection(WorkerConnection.start({
    ...workerOptions(dir.path),
    launch: { command: `${dir.path}/no-such-worker`, args: [] },
  }));
  const d = assertCrash(err, ["spawn_failed"]);
  assert.equal(d.pid, undefined, "nothing was spawned");
  assert.match((err as Error).message, /no-such-worker/);
  assertNoSocket(dir.path);
  await assertHealthyStart(dir.path);
});

Deno.test("WorkerConnection.start() kills a program that never connects (accept_timeout)", async () => {
  await using dir = await runtimeDir();
  const err = await rejection(WorkerConnection.start({
    ...workerOptions(dir.path),
    // `exec`: the pid the host holds is the sleeping program itself.
    launch: { command: "bash", args: ["-c", "echo not a worker >&2; exec sleep 3600", "bash"] },
    acceptTimeoutMs: 1_000,
  }));
  const d = assertCrash(err, ["accept_timeout"]);
  assert.equal(d.signal, "SIGKILL", "the host killed it (a finished sleep exits 0)");
  assert.match(String(d.log_tail), /not a worker/);
  assertGone(d.pid);
  assertNoSocket(dir.path);
  await assertHealthyStart(dir.path);
});

Deno.test("WorkerConnection.start() reports a socket path over the unix limit as spawn_failed", async () => {
  await using dir = await runtimeDir();
  const long = `${dir.path}/${"d".repeat(110)}`;
  const err = await rejection(WorkerConnection.start(workerOptions(long)));
  const d = assertCrash(err, ["spawn_failed"]);
  assert.equal(d.pid, undefined, "nothing was spawned");
  assert.match((err as Error).message, /cannot listen on/);
  await Deno.remove(long); // the directory itself could be made
  await assertHealthyStart(dir.path);
});

// ---------------------------------------------------------------------------------------------
// After the handshake

const BROKEN_FRAME_CASES: { name: string; flag: string; reasons: string[] }[] = [
  { name: "a frame that is not JSON", flag: "--test-garbage-frame", reasons: ["bad_json"] },
  {
    name: "a frame over the negotiated max",
    flag: "--test-oversize-frame",
    reasons: ["frame_too_large"],
  },
  { name: "half a frame, then EOF", flag: "--test-truncated-frame", reasons: ["truncated"] },
];

for (const c of BROKEN_FRAME_CASES) {
  Deno.test(`WorkerConnection.request() answers ${c.name} with engine_crashed and kills the worker`, async () => {
    await using dir = await runtimeDir();
    const conn = await WorkerConnection.start(workerOptions(dir.path, [c.flag]));
    const err = await rejection(conn.request(PING(), undefined, 10_000));
    const d = assertCrash(err, c.reasons);
    assert.equal(d.pid, conn.pid);
    assert.equal(conn.dead, err, "the connection is dead with that error");
    // Every later request gets the same answer at once, without touching the worker.
    assert.equal(await rejection(conn.request(PING(2), undefined, 10_000)), err);
    await conn.settled();
    assert.ok(conn.exitStatus !== undefined, "the process ended");
    assertGone(conn.pid);
    await assertHealthyStart(dir.path);
  });
}

Deno.test("WorkerConnection.request() reports an aborting worker (SIGABRT) with its last words", async () => {
  await using dir = await runtimeDir();
  const conn = await WorkerConnection.start(workerOptions(dir.path, ["--test-abort-after", "1"]));
  const pong = await conn.request(PING(1), undefined, 10_000);
  assert.equal(pong.msg.type, "PONG");
  const err = await rejection(conn.request(PING(2), undefined, 10_000));
  // The error is built once the exit status is in: it names the signal, not a bare EOF.
  const d = assertKilledBy(err, "SIGABRT");
  assert.match((err as Error).message, /signal SIGABRT/);
  assert.match(String(d.log_tail), /abort \(test hook --test-abort-after\)/);
  await conn.settled();
  assert.equal(conn.exitStatus?.signal, "SIGABRT");
  assert.equal(d.log_tail, conn.logTail());
  assertGone(conn.pid);
  await assertHealthyStart(dir.path);
});

Deno.test("WorkerConnection.request() times out a hung worker and kills it", async () => {
  await using dir = await runtimeDir();
  const conn = await WorkerConnection.start(workerOptions(dir.path, ["--test-hang-after", "1"]));
  await conn.request(PING(1), undefined, 10_000);
  const err = await rejection(conn.request(PING(2), undefined, 1_000));
  const d = assertCrash(err, ["timeout"]);
  assert.match((err as Error).message, /did not answer PING within 1000 ms/);
  await conn.settled();
  assert.equal(conn.exitStatus?.signal, "SIGKILL", "the host killed it");
  assert.equal(d.signal, "SIGKILL", "the details say so once the process is gone");
  assert.match(conn.logTail(), /hanging \(test hook/);
  assertGone(conn.pid);
  await assertHealthyStart(dir.path);
});

Deno.test("WorkerConnection.request() answers engine_crashed when the worker is SIGKILLed mid-request", async () => {
  await using dir = await runtimeDir();
  const hanging = logLine(/hanging/);
  const conn = await WorkerConnection.start(
    workerOptions(dir.path, ["--test-hang-after", "1"], { onLogLine: hanging.onLogLine }),
  );
  await conn.request(PING(1), undefined, 10_000);
  const inFlight = rejection(conn.request(PING(2), undefined, 30_000));
  await hanging.seen; // the worker holds the request
  Deno.kill(conn.pid, "SIGKILL");
  // Reason `signal` (not the 30 s request `timeout`), naming the signal.
  assertKilledBy(await inFlight, "SIGKILL");
  await conn.settled();
  assert.equal(conn.exitStatus?.signal, "SIGKILL");
  assertGone(conn.pid);
  await assertHealthyStart(dir.path);
});

Deno.test("WorkerConnection.shutdown() fails the request in flight at once when it kills a hung worker", async () => {
  await using dir = await runtimeDir();
  const hanging = logLine(/hanging/);
  const conn = await WorkerConnection.start(
    workerOptions(dir.path, ["--test-hang-after", "1"], { onLogLine: hanging.onLogLine }),
  );
  await conn.request(PING(1), undefined, 10_000);
  let answered = false;
  const inFlight = rejection(conn.request(PING(2), undefined, 15_000)).finally(() =>
    answered = true
  );
  await hanging.seen;
  await conn.shutdown(300); // SHUTDOWN is never read: killed after the grace period
  // Before the fix the waiter was never woken and sat out its own 15 s timeout; now the kill
  // answers it before shutdown() even waits for the process to exit.
  assert.ok(answered, "the request in flight is answered by the time shutdown() returns");
  const err = await inFlight;
  assert.ok(err instanceof SynapseError);
  assert.equal(err.code, "engine_crashed");
  assert.equal((err.details as { reason: string }).reason, "shutdown");
  assert.equal(conn.exitStatus?.signal, "SIGKILL");
  assertGone(conn.pid);
});

Deno.test("WorkerConnection.request() treats a worker ERR as an answer, not a crash", async () => {
  await using dir = await runtimeDir();
  const conn = await WorkerConnection.start(workerOptions(dir.path));
  try {
    const err = await rejection(conn.request(
      {
        type: "RERANK",
        req_id: 1,
        model_ref: "m1",
        query_n_tokens: 1,
        candidates: [{ n_tokens: 1 }],
      },
      encodeI32LE(Int32Array.of(1, 2)),
      10_000,
    ));
    assert.ok(err instanceof WorkerErrReply, `expected WorkerErrReply, got ${err}`);
    assert.equal(err.workerCode, "unsupported_request");
    assert.equal(conn.dead, undefined);
    const pong = await conn.request<PongMessage>(PING(2), undefined, 10_000);
    assert.equal(pong.msg.req_id, 2);
    assert.equal(conn.dead, undefined, "same connection, same worker");
    assert.equal(conn.exitStatus, undefined);
  } finally {
    await conn.shutdown();
  }
  assertGone(conn.pid);
});

// ---------------------------------------------------------------------------------------------
// Supervision

Deno.test("SupervisedWorker restarts within the crash budget and quarantines the third crash in 60 s", async () => {
  await using dir = await runtimeDir();
  let t = 1_000_000;
  const sw = new SupervisedWorker({
    key: "k",
    now: () => t,
    start: workerOptions(dir.path, ["--test-abort-after", "1"]),
  });
  try {
    const pids: number[] = [];
    for (let i = 1; i <= 3; i++) {
      const conn = await sw.connection();
      const pong = await sw.call(PING(1), undefined, 10_000);
      assert.equal(pong.msg.type, "PONG", `worker ${i} answers`);
      assert.equal(sw.generation, i);
      assert.equal(sw.status().state, "ready");
      pids.push(conn.pid);
      assertKilledBy(await rejection(sw.call(PING(2), undefined, 10_000)), "SIGABRT");
      await conn.settled();
      assertGone(conn.pid);
      const st = sw.status();
      assert.equal(st.recent_crashes, i);
      assert.equal(st.state, i < 3 ? "idle" : "quarantined");
      t += 10_000;
    }
    assert.equal(new Set(pids).size, 3, "each restart is a new process");
    const err = await rejection(sw.call(PING(3), undefined, 10_000));
    assert.ok(err instanceof SynapseError);
    assert.equal(err.code, "probe_required");
    assert.equal(err.errorClass, "permanent");
    const d = err.details as { reason: string; crashes: { at_ms: number; reason: string }[] };
    assert.equal(d.reason, "worker_quarantined");
    assert.deepEqual(d.crashes.map((c) => c.at_ms), [1_000_000, 1_010_000, 1_020_000]);
    assert.equal(sw.generation, 3, "a quarantined key starts no worker");
    const st = sw.status();
    assert.equal(st.state, "quarantined");
    assert.equal(st.quarantine?.reason, "worker_quarantined");
    assert.equal(st.total_crashes, 3);
    t += 3_600_000;
    assert.equal(sw.status().state, "quarantined", "for the host's lifetime");
  } finally {
    await sw.close();
  }
});

Deno.test("SupervisedWorker does not quarantine crashes more than 60 s apart", async () => {
  await using dir = await runtimeDir();
  let t = 0;
  const sw = new SupervisedWorker({
    key: "k",
    now: () => t,
    start: workerOptions(dir.path, ["--test-abort-after", "1"]),
  });
  try {
    for (let i = 1; i <= 3; i++) {
      await sw.call(PING(1), undefined, 10_000);
      assertKilledBy(await rejection(sw.call(PING(2), undefined, 10_000)), "SIGABRT");
      assert.equal(sw.status().recent_crashes, 1);
      t += 60_001;
    }
    const pong = await sw.call(PING(1), undefined, 10_000);
    assert.equal(pong.msg.type, "PONG");
    const st = sw.status();
    assert.equal(st.state, "ready");
    assert.equal(st.generation, 4);
    assert.equal(st.total_crashes, 3);
    assert.equal(st.quarantine, undefined);
  } finally {
    await sw.close();
  }
});

Deno.test("SupervisedWorker counts failed handshakes as crashes", async () => {
  await using dir = await runtimeDir();
  const sw = new SupervisedWorker({
    key: "k",
    start: workerOptions(dir.path, ["--test-wrong-nonce"]),
  });
  try {
    for (let i = 1; i <= 3; i++) {
      const d = assertCrash(await rejection(sw.call(PING(1), undefined, 10_000)), [
        "nonce_mismatch",
      ]);
      assertGone(d.pid);
    }
    const err = await rejection(sw.connection());
    assert.ok(err instanceof SynapseError);
    assert.equal(err.code, "probe_required");
    assert.equal((err.details as { reason: string }).reason, "worker_quarantined");
    assert.equal(sw.status().state, "quarantined");
  } finally {
    await sw.close();
  }
  assertNoSocket(dir.path);
});

// ---------------------------------------------------------------------------------------------
// Llama lane

function generateSpec(): LlamaModelSpec {
  return {
    modelId: "tiny-gen",
    ggufPath: `${LLAMA_DIR}/model.gguf`,
    ggufDigest: `sha256:${"0".repeat(64)}`,
    mode: "generate",
    contextSize: 512,
    threads: 1,
    pooling: "last",
    normalize: false,
  };
}

/** A log sink that keeps every line; `onLine` hears each one after it is kept. */
function captureLog(): {
  log: LogSink;
  lines: { level: string; target: string; message: string; fields?: object }[];
  onLine?: () => void;
} {
  const cap: ReturnType<typeof captureLog> = {
    lines: [],
    log: (level, target, message, fields) => {
      cap.lines.push({ level, target, message, ...(fields ? { fields } : {}) });
      cap.onLine?.();
    },
  };
  return cap;
}

Deno.test("LlamaEngine.generate() survives a worker abort: engine_crashed once, then a new worker reloads the model", async () => {
  await using dir = await runtimeDir();
  const { log } = captureLog();
  const lane = new LlamaEngine(generateSpec(), {
    launch: resolveLlamaWorkerLaunch({ extraArgs: ["--test-abort-after", "2"], env: () => {} }),
    runtimeDir: dir.path,
    log,
  });
  try {
    const ids = Int32Array.of(1, 10, 20, 30, 40);
    const first = await lane.generate({ ids, maxTokens: 8 });
    assert.ok(first.generatedIds.length > 0, "the tiny model generates");
    assert.equal(first.nPrompt, ids.length);
    const pid1 = lane.worker.pid!;
    assert.equal(lane.worker.generation, 1);
    const err = await rejection(lane.generate({ ids, maxTokens: 8 }));
    assertKilledBy(err, "SIGABRT");
    assert.equal(lane.inFlight, 0);
    const again = await lane.generate({ ids, maxTokens: 8 });
    assert.equal(lane.worker.generation, 2, "a fresh worker");
    assert.notEqual(lane.worker.pid, pid1);
    assert.deepEqual(again.generatedIds, first.generatedIds, "same ids, same greedy output");
    assert.equal(again.finishReason, first.finishReason);
    assertGone(pid1);
    assert.equal(lane.status().recent_crashes, 1);
  } finally {
    await lane.dispose();
  }
});

/**
 * Replaces `performance.now` (the clock `LineRateLimiter` reads by default) until disposed; the
 * lane takes no clock of its own for it.
 */
function frozenPerformanceClock(): Disposable & { set(ms: number): void } {
  const real = performance.now;
  let t = 0;
  performance.now = () => t;
  return {
    set(ms: number) {
      t = ms;
    },
    [Symbol.dispose]() {
      performance.now = real;
    },
  };
}

Deno.test("LlamaEngine caps forwarded worker lines per second and reports the dropped count", async () => {
  await using dir = await runtimeDir();
  using clock = frozenPerformanceClock();
  const cap = captureLog();
  // The worker's own lines (the lane's crash line has the same target, at level error).
  const forwarded = () =>
    cap.lines.filter((l) => l.target === "worker.llama.tiny-gen" && l.level === "info");
  const lane = new LlamaEngine(generateSpec(), {
    launch: resolveLlamaWorkerLaunch({
      extraArgs: ["--test-log-burst", "200", "--test-abort-after", "0"],
      env: () => {},
    }),
    runtimeDir: dir.path,
    log: cap.log,
    forwardLinesPerSec: 5,
  });
  try {
    // Worker 1 prints 200 lines, connects, and aborts at its first request: every line it
    // writes passes the limiter within one second of the frozen clock.
    const conn = await lane.worker.connection();
    assertKilledBy(await rejection(lane.load()), "SIGABRT");
    await conn.outputEnded();
    const burst = forwarded();
    assert.deepEqual(
      burst.map((l) => [l.message, l.fields]),
      [0, 1, 2, 3, 4].map((i) => [`llama worker: test log line ${i}`, { stream: "stderr" }]),
      "the first 5 lines of the second, none of the rest",
    );
    // A second later, the next line (worker 2's first) gets through, carrying the count.
    clock.set(1_000);
    const { promise: sixth, resolve } = Promise.withResolvers<void>();
    cap.onLine = () => forwarded().length >= 6 && resolve();
    const conn2 = await lane.worker.connection();
    await sixth;
    const next = forwarded()[5]!;
    assert.equal(next.message, "llama worker: test log line 0");
    const dropped = (next.fields as { dropped?: number }).dropped ?? 0;
    assert.ok(dropped >= 196, `dropped=${dropped}: worker 1's 200 lines and abort message, less 5`);
    assert.notEqual(conn2.pid, conn.pid, "a new worker");
    const crashLine = cap.lines.find((l) => l.level === "error");
    assert.match(String(crashLine?.message), /worker crashed/);
  } finally {
    await lane.dispose();
  }
});

// ---------------------------------------------------------------------------------------------
// F13 end to end

const MACHINE = {
  os_build: "test",
  arch: "x86_64",
  chip_model: "test",
  ram_class: "unknown",
  engine_identities: [],
} as unknown as MachineProfile;

Deno.test("F13: an aborting llama model costs engine_crashed per call, then quarantine; the ORT model keeps serving and /health says degraded", async () => {
  await using dir = await runtimeDir();
  const store = await Deno.makeTempDir({ prefix: "synapse-test-" });
  const cap = captureLog();
  const entries: Partial<PreloadModelConfig>[] = [
    {
      engine: "ort",
      model_path: `${EMBED_DIR}/model.onnx`,
      tokenizer_path: `${EMBED_DIR}/tokenizer.json`,
      config_path: `${EMBED_DIR}/config.json`,
      model_id: "emb",
      task: "embed",
    },
    {
      engine: "llama",
      model_path: LLAMA_DIR,
      tokenizer_path: `${LLAMA_DIR}/tokenizer.json`,
      model_id: "gen",
      task: "generate",
      worker_runtime_dir: dir.path,
    },
  ];
  const config: SynapseConfig = {
    ...structuredClone(DEFAULT_CONFIG),
    certification: "warn",
    preload_models: entries.map((e) => ({
      pooling: "mean",
      normalize: true,
      max_tokens: 512,
      ...e,
    })) as PreloadModelConfig[],
  };
  const syn = await createSynapse({
    config,
    storePath: `${store}/store.db`,
    machineProfile: MACHINE,
    log: cap.log,
    // LOAD is request 1, so every GENERATE aborts the worker.
    // models.list PINGs the worker for its RSS: not a counted request here.
    llamaWorkerArgs: ["--test-abort-after", "1", "--test-ping-uncounted"],
  });
  const server = serveHttp(syn, {});
  try {
    const embed = async () => {
      assert.equal(
        resultOf(await syn.call("embed.query", { model: "emb", text: "serving" })).dims,
        32,
      );
    };
    resultOf(await syn.call("models.list", {}));
    await embed();
    const oneshot = () =>
      syn.call("microllm.oneshot", { model: "gen", prompt: "Hi", max_tokens: 4 });
    for (let i = 1; i <= 3; i++) {
      const e = semanticError(await oneshot());
      assert.equal(e.code, "engine_crashed", `call ${i}: ${JSON.stringify(e)}`);
      assert.equal(e.class, "transient");
      assert.ok(e.retry_after_ms > 0, "a retry hint");
      assert.ok(String(e.details?.log_tail ?? "").length > 0, "the worker's last words");
      await embed();
    }
    const q = semanticError(await oneshot());
    assert.equal(q.code, "probe_required", JSON.stringify(q));
    assert.equal(q.class, "permanent");
    assert.equal(q.details?.reason, "worker_quarantined");
    assert.equal(q.details?.crashes?.length, 3);
    await embed();

    const models = resultOf(await syn.call("models.list", {})).models;
    const gen = models.find((m: { model_id: string }) => m.model_id === "gen");
    assert.equal(gen.serving_admission, "quarantined", JSON.stringify(gen));
    assert.equal(gen.serving_admission_reason.reason, "worker_quarantined");
    assert.equal(gen.worker.total_crashes, 3);
    const lanes = resultOf(await syn.call("admission.status", {})).lanes;
    const llamaLane = lanes.find((l: { engine: string }) => l.engine === "llama");
    assert.equal(llamaLane?.serving_admission, "quarantined", JSON.stringify(lanes));
    assert.equal(llamaLane?.serving_admission_reason.reason, "worker_quarantined");

    const res = await fetch(`http://127.0.0.1:${server.port}/health`);
    const health = await res.json();
    assert.equal(res.status, 200);
    assert.equal(health.status, "degraded");
    const hgen = health.models.find((m: { model_id: string }) => m.model_id === "gen");
    assert.equal(hgen.serving_admission, "quarantined");
    assert.equal(hgen.serving_admission_reason.reason, "worker_quarantined");
    assert.ok(cap.lines.some((l) => l.level === "error" && /worker crashed/.test(l.message)));
  } finally {
    await server.shutdown();
    await syn.dispose();
    await Deno.remove(store, { recursive: true });
  }
});

Deno.test("WorkerConnection.start() keeps the last 8 KiB of the worker's output, in UTF-8 bytes", async () => {
  await using dir = await runtimeDir();
  const err = await rejection(
    WorkerConnection.start(
      workerOptions(dir.path, ["--test-log-burst", "2000", "--test-exit-before-connect"]),
    ),
  );
  const d = assertCrash(err, ["exited_before_hello"]);
  const tail = String(d.log_tail);
  const bytes = new TextEncoder().encode(tail).byteLength;
  assert.ok(bytes <= LOG_TAIL_BYTES && bytes > LOG_TAIL_BYTES - 200, `tail of ${bytes} bytes`);
  assert.match(tail, /exiting before connecting/, "the last line is kept");
  assert.doesNotMatch(tail, /test log line 0\n/, "the first lines are gone");
});
