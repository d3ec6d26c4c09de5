/**
 * The start timeout (F20, config `worker.start_timeout_ms`): a worker that connects only when
 * told to (`--test-connect-after-file PATH`, a file barrier) starts when the timeout outlasts the
 * wait and fails with `accept_timeout` when it does not. The barrier, not a sleep, decides when
 * the worker connects, so no timer races another.
 */
import assert from "node:assert/strict";
import { DEFAULT_CONFIG } from "../../lib/config/defaults.ts";
import { WORKER_TIMEOUTS, WorkerConnection } from "../../lib/workers/host.ts";
import { DEFAULT_WORKER_START_TIMEOUT_MS } from "../../lib/workers/spawn.ts";
import type { PongMessage } from "../../lib/workers/messages.ts";
import {
  assertCrash,
  assertGroupGone,
  assertNoSocket,
  logLine,
  ping,
  rejection,
  runtimeDir,
  workerOptions,
} from "./_worker_helpers.ts";

Deno.test("WorkerConnection.start() defaults both start phases to worker.start_timeout_ms's default", () => {
  assert.equal(DEFAULT_WORKER_START_TIMEOUT_MS, 60_000);
  assert.equal(WORKER_TIMEOUTS.acceptMs, DEFAULT_WORKER_START_TIMEOUT_MS);
  assert.equal(WORKER_TIMEOUTS.helloMs, DEFAULT_WORKER_START_TIMEOUT_MS);
  assert.equal(DEFAULT_CONFIG.worker.start_timeout_ms, DEFAULT_WORKER_START_TIMEOUT_MS);
});

Deno.test("WorkerConnection.start() waits for a worker that connects late, within the start timeout", async () => {
  await using dir = await runtimeDir();
  const go = `${dir.path}/go`;
  const waiting = logLine(/waiting for .* before connecting/);
  const start = WorkerConnection.start(
    // No timeout given: the default, longer than this wait.
    workerOptions(dir.path, ["--test-connect-after-file", go], { onLogLine: waiting.onLogLine }),
  );
  await waiting.seen; // the worker is up and holds its connect
  await Deno.writeTextFile(go, "");
  const conn = await start;
  try {
    const pong = await conn.request<PongMessage>(ping(1), undefined, 30_000);
    assert.equal(pong.msg.type, "PONG");
  } finally {
    await conn.shutdown();
  }
  assert.equal(conn.exitStatus?.success, true);
});

Deno.test("WorkerConnection.start() fails a worker that connects after the start timeout with accept_timeout and kills its group", async () => {
  await using dir = await runtimeDir();
  const go = `${dir.path}/go`;
  // The barrier is never lifted: the worker cannot connect before the (short) timeout.
  const err = await rejection(WorkerConnection.start(
    workerOptions(dir.path, ["--test-connect-after-file", go, "--test-spawn-child"], {
      acceptTimeoutMs: 300,
    }),
  ));
  const d = assertCrash(err, ["accept_timeout"]);
  assert.match((err as Error).message, /did not connect within 300 ms/);
  assert.equal(d.signal, "SIGKILL");
  await assertGroupGone(d.pid);
  assertNoSocket(dir.path);
});
