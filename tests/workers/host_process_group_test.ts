/**
 * Process groups (F20) and generation priority: each worker leads its own process group, every
 * kill reaches the whole group (a helper the worker started dies with it), a worker whose module
 * went away kills its own group, and `--nice N` lowers every thread of the group. The helper is
 * the worker's `--test-spawn-child` hook: a process that shares the worker's stderr, so the end
 * of that pipe is the event that says both are gone.
 */
import assert from "node:assert/strict";
import { encodeFrame, FrameDecoder } from "../../lib/workers/frame.ts";
import { makeAck, newNonce, workerSocketPath } from "../../lib/workers/handshake.ts";
import { WorkerConnection } from "../../lib/workers/host.ts";
import { type LoadedMessage, type TextMessage } from "../../lib/workers/messages.ts";
import { decodeFromWorker, encodeControl, encodeI32LE } from "../../lib/workers/codec.ts";
import { resolveLlamaWorkerLaunch } from "../../lib/engines/llama/launch.ts";
import {
  assertGroupGone,
  assertKilledBy,
  liveGroupPids,
  logLine,
  ping,
  rejection,
  runtimeDir,
  TINY_LLAMA_GGUF,
  workerOptions,
} from "./_worker_helpers.ts";

/** `ps` output for a pid: its process group id and session id. */
async function groupAndSession(pid: number): Promise<{ pgid: number; sid: number }> {
  const out = await new Deno.Command("ps", { args: ["-o", "pgid=,sid=", "-p", String(pid)] })
    .output();
  const [pgid, sid] = new TextDecoder().decode(out.stdout).trim().split(/\s+/).map(Number);
  return { pgid: pgid!, sid: sid! };
}

Deno.test("WorkerConnection.start() spawns the worker as the leader of its own process group and session", async () => {
  await using dir = await runtimeDir();
  const conn = await WorkerConnection.start(workerOptions(dir.path));
  try {
    assert.deepEqual(await groupAndSession(conn.pid), { pgid: conn.pid, sid: conn.pid });
    assert.notEqual((await groupAndSession(Deno.pid)).pgid, conn.pid);
  } finally {
    await conn.shutdown();
  }
  await assertGroupGone(conn.pid);
});

/** The helper's pid, from the worker's `--test-spawn-child` line. */
function helperLine(): { onLogLine: (line: string) => void; pid: Promise<number> } {
  const l = logLine(/test child \d+/);
  return {
    onLogLine: l.onLogLine,
    pid: l.seen.then((s) => Number(/test child (\d+)/.exec(s)![1])),
  };
}

/** Asserts the group of `pgid` holds its leader and `helper` (node-llama-cpp's may be there). */
async function assertMembers(pgid: number, helper: number): Promise<void> {
  const pids = await liveGroupPids(pgid);
  assert.ok(pids.includes(pgid) && pids.includes(helper), `group ${pgid}: ${pids}`);
}

Deno.test("WorkerConnection kills the worker's whole process group when the worker is SIGKILLed mid-request", async () => {
  await using dir = await runtimeDir();
  const hanging = logLine(/hanging/);
  const helper = helperLine();
  const conn = await WorkerConnection.start(
    workerOptions(dir.path, ["--test-spawn-child", "--test-hang-after", "1"], {
      onLogLine: (line) => {
        hanging.onLogLine(line);
        helper.onLogLine(line);
      },
    }),
  );
  await conn.request(ping(1), undefined, 10_000);
  const inFlight = rejection(conn.request(ping(2), undefined, 30_000));
  await hanging.seen;
  await assertMembers(conn.pid, await helper.pid);
  Deno.kill(conn.pid, "SIGKILL"); // the worker alone, as an outside killer (the OOM killer) would
  assertKilledBy(await inFlight, "SIGKILL");
  await assertGroupGone(conn.pid);
  await conn.outputEnded(); // the helper held the worker's stderr: it ends with the group
});

Deno.test("WorkerConnection.shutdown() ends a helper the worker left running", async () => {
  await using dir = await runtimeDir();
  const helper = helperLine();
  const conn = await WorkerConnection.start(
    workerOptions(dir.path, ["--test-spawn-child"], { onLogLine: helper.onLogLine }),
  );
  await assertMembers(conn.pid, await helper.pid);
  await conn.shutdown();
  assert.equal(conn.exitStatus?.success, true, "the worker itself exits 0 on SHUTDOWN");
  await assertGroupGone(conn.pid);
  await conn.outputEnded();
});

Deno.test("a llama worker whose module goes away (EOF) kills its own process group", async () => {
  // The module's part played by hand, so the test can vanish as a SIGKILLed module would: it
  // closes its end of the socket (the kernel does that for a dead process) and kills nothing.
  await using dir = await runtimeDir();
  const path = workerSocketPath(dir.path, "eof-test");
  const listener = Deno.listen({ transport: "unix", path });
  const nonce = newNonce();
  const launch = resolveLlamaWorkerLaunch({ extraArgs: ["--test-spawn-child"], env: () => {} });
  const child = new Deno.Command(launch.command, {
    args: [...launch.args, "--socket", path, "--nonce", nonce],
    stdin: "null",
    stdout: "null",
    stderr: "piped",
    detached: true,
  }).spawn();
  const stderr = new Response(child.stderr).text(); // ends once the worker and helper are gone
  const conn = await listener.accept();
  listener.close();
  const decoder = new FrameDecoder();
  const buf = new Uint8Array(64 * 1024);
  let hello;
  while (hello === undefined) {
    const n = await conn.read(buf);
    assert.ok(n !== null, "the worker sent HELLO");
    hello = decoder.push(buf.subarray(0, n))[0];
  }
  const msg = decodeFromWorker(hello);
  assert.equal(msg.type, "HELLO");
  await conn.write(encodeFrame(encodeControl(makeAck(1 << 20))));
  conn.close();
  const st = await child.status;
  assert.equal(st.signal, "SIGKILL", "the worker killed its group, itself included");
  await assertGroupGone(child.pid);
  const helper = Number(/test child (\d+)/.exec(await stderr)?.[1]);
  assert.ok(helper > 0, "the helper was started before the worker connected");
});

Deno.test("a llama worker started with --nice 5 runs every thread of its group at nice 5", async () => {
  await using dir = await runtimeDir();
  const conn = await WorkerConnection.start(
    workerOptions(dir.path, ["--nice", "5", "--test-spawn-child"]),
  );
  try {
    // Load and generate, so llama.cpp's threads exist too.
    const loaded = await conn.request<LoadedMessage>(
      {
        type: "LOAD",
        req_id: 1,
        artifact_path: TINY_LLAMA_GGUF,
        artifact_digest: "sha256:test",
        format: "gguf",
        runtime_config: { mode: "generate", context_size: 256, threads: 2 },
      },
      undefined,
      120_000,
    );
    const text = await conn.request<TextMessage>(
      { type: "GENERATE", req_id: 2, model_ref: loaded.msg.model_ref, max_tokens: 4 },
      encodeI32LE(Int32Array.of(1, 10, 20)),
      120_000,
    );
    assert.equal(text.msg.n_gen, 4);
    const out = await new Deno.Command("ps", {
      args: ["-L", "-o", "pid=,tid=,nice=", "-g", String(conn.pid)],
    }).output();
    const threads = new TextDecoder().decode(out.stdout).trim().split("\n")
      .map((l) => l.trim().split(/\s+/).map(Number));
    const pids = new Set(threads.map(([pid]) => pid));
    assert.ok(pids.has(conn.pid) && pids.size >= 2, `the worker and its helper: ${[...pids]}`);
    assert.ok(threads.length > 4, `${threads.length} threads`);
    for (const [pid, tid, nice] of threads) assert.equal(nice, 5, `pid ${pid} thread ${tid}`);
  } finally {
    await conn.shutdown();
  }
});

Deno.test("a llama worker that cannot set its nice value says so and exits 2", async () => {
  // Without the host's setsid the worker does not lead a process group: nothing to renice.
  await using dir = await runtimeDir();
  const launch = resolveLlamaWorkerLaunch({ extraArgs: ["--nice", "5"], env: () => {} });
  const out = await new Deno.Command(launch.command, {
    args: [...launch.args, "--socket", `${dir.path}/none.sock`, "--nonce", newNonce()],
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).output();
  assert.equal(out.code, 2);
  assert.match(new TextDecoder().decode(out.stderr), /^llama worker: cannot set nice 5: .*ESRCH/m);
});
