/**
 * Helpers of the tests that start real llama workers (`workers/llama.ts` and its hidden
 * `--test-…` hooks): socket directories, start options, crash assertions, process-group checks
 * and waits on the worker's own log lines (events, never elapsed time).
 */
import assert from "node:assert/strict";
import { SynapseError } from "../../lib/contract/errors.ts";
import { resolveLlamaWorkerLaunch } from "../../lib/engines/llama/launch.ts";
import { WorkerConnection } from "../../lib/workers/host.ts";
import type { WorkerStartOptions } from "../../lib/workers/spawn.ts";
import type { PongMessage } from "../../lib/workers/messages.ts";
import { MODELS } from "../_helpers.ts";

/** The tiny generation GGUF. */
export const TINY_LLAMA_GGUF = `${MODELS}/synapse-tiny-llama/model.gguf`;

/** A socket directory short enough for the 108-byte unix path limit, removed on dispose. */
export async function runtimeDir(): Promise<AsyncDisposable & { path: string }> {
  const path = await Deno.makeTempDir({ dir: "/tmp", prefix: "syn" });
  return {
    path,
    async [Symbol.asyncDispose]() {
      await Deno.remove(path, { recursive: true });
    },
  };
}

/** Start options of a real llama worker with `extra` test hooks (env ignored: the sibling bin). */
export function workerOptions(
  dir: string,
  extra: string[] = [],
  more: Partial<WorkerStartOptions> = {},
): WorkerStartOptions {
  return {
    engine: "llama.cpp-worker",
    workerId: "host-test",
    runtimeDir: dir,
    launch: resolveLlamaWorkerLaunch({ extraArgs: extra, env: () => undefined }),
    ...more,
  };
}

/** A PING request. */
export function ping(reqId = 1): { type: "PING"; req_id: number } {
  return { type: "PING", req_id: reqId };
}

/** Asserts `err` is `engine_crashed` (transient, retry hint) with one of `reasons`. */
export function assertCrash(err: unknown, reasons: string[]): Record<string, unknown> {
  assert.ok(err instanceof SynapseError, `expected a SynapseError, got ${err}`);
  assert.equal(err.code, "engine_crashed", err.message);
  assert.equal(err.errorClass, "transient");
  assert.ok((err.retryAfterMs ?? 0) > 0, "engine_crashed carries a retry hint");
  const d = err.details as Record<string, unknown>;
  assert.ok(reasons.includes(String(d.reason)), `reason ${d.reason} ∉ ${reasons}: ${err.message}`);
  assert.equal(typeof d.log_tail, "string");
  return d;
}

/** Asserts `err` is `engine_crashed` for a worker that a signal ended, naming that signal. */
export function assertKilledBy(err: unknown, signal: Deno.Signal): Record<string, unknown> {
  const d = assertCrash(err, ["signal"]);
  assert.equal(d.signal, signal, JSON.stringify({ ...d, log_tail: undefined }));
  assert.equal(d.exit_code, undefined, "a signal, not an exit code");
  return d;
}

/** Rejection of `p`, which must reject. */
export async function rejection(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (err) {
    return err;
  }
  assert.fail("expected a rejection");
}

/**
 * Asserts the process `pid` no longer exists (exited and reaped): signalling it fails with ESRCH.
 * (Reading another process's /proc entry would need --allow-all, which the suite does not grant.)
 */
export function assertGone(pid: unknown): void {
  assert.equal(typeof pid, "number", "the crash names the worker's pid");
  assert.throws(() => Deno.kill(pid as number, "SIGCONT"), `pid ${pid} lives`);
}

/**
 * Live members of process group `pgid`, from `ps` (zombies, which are dead and only wait for a
 * parent to reap them, are left out).
 */
export async function liveGroupMembers(pgid: number): Promise<string[]> {
  const out = await new Deno.Command("ps", {
    args: ["-o", "pid=,stat=,args=", "-g", String(pgid)],
    stdout: "piped",
    stderr: "null",
  }).output();
  return new TextDecoder().decode(out.stdout).split("\n").map((l) => l.trim())
    .filter((l) => l !== "" && !/^\d+\s+Z/.test(l));
}

/** Pids of the live members of group `pgid`. */
export async function liveGroupPids(pgid: number): Promise<number[]> {
  return (await liveGroupMembers(pgid)).map((l) => Number(l.split(/\s+/)[0]));
}

const pidfdLib = Deno.build.os === "linux"
  ? Deno.dlopen("libc.so.6", {
    pidfd_open: { parameters: ["i32", "u32"], result: "i32" },
    poll: { parameters: ["buffer", "u64", "i32"], result: "i32", nonblocking: true },
    close: { parameters: ["i32"], result: "i32" },
  })
  : undefined;

/**
 * Resolves when process `pid` (any process, not only a child of ours) has terminated, or after
 * `boundMs`: Linux `pidfd_open` + `poll`, an event, not a polling loop. A SIGKILLed process dies
 * when the kernel next runs it, a moment after the kill returned.
 */
async function terminated(pid: number, boundMs: number): Promise<void> {
  if (pidfdLib === undefined) return;
  const fd = pidfdLib.symbols.pidfd_open(pid, 0);
  if (fd < 0) return; // no such process: already reaped
  try {
    const pollfd = new Uint8Array(8); // struct pollfd {int fd; short events; short revents;}
    const view = new DataView(pollfd.buffer);
    view.setInt32(0, fd, true);
    view.setInt16(4, 1, true); // POLLIN: readable once the process has terminated
    await pidfdLib.symbols.poll(pollfd, 1n, boundMs);
  } finally {
    pidfdLib.symbols.close(fd);
  }
}

/**
 * Asserts no live process is left in group `pgid`: every member found is given (at most 30 s) to
 * finish dying from the kill already sent, then the group must be empty.
 */
export async function assertGroupGone(pgid: unknown): Promise<void> {
  assert.equal(typeof pgid, "number", "the crash names the worker's pid (its group id)");
  for (const pid of await liveGroupPids(pgid as number)) await terminated(pid, 30_000);
  assert.deepEqual(await liveGroupMembers(pgid as number), [], `group ${pgid} still has processes`);
}

/** Asserts nothing is left in the socket directory (the listener's socket was removed). */
export function assertNoSocket(dir: string): void {
  assert.deepEqual([...Deno.readDirSync(dir)].map((e) => e.name), []);
}

/**
 * Resolves on the first worker log line that matches `pattern`; plug `onLogLine` into the start
 * options.
 */
export function logLine(pattern: RegExp): {
  onLogLine: (line: string) => void;
  seen: Promise<string>;
} {
  const { promise, resolve } = Promise.withResolvers<string>();
  return {
    seen: promise,
    onLogLine: (line) => {
      if (pattern.test(line)) resolve(line);
    },
  };
}

/** The host starts a healthy worker that answers PING, then shuts it down. */
export async function assertHealthyStart(dir: string): Promise<void> {
  const conn = await WorkerConnection.start(workerOptions(dir));
  try {
    const pong = await conn.request<PongMessage>(ping(7), undefined, 10_000);
    assert.equal(pong.msg.type, "PONG");
    assert.equal(pong.msg.req_id, 7);
  } finally {
    await conn.shutdown();
  }
  assert.equal(conn.exitStatus?.success, true, "SHUTDOWN ends the worker with exit code 0");
  assertGone(conn.pid);
  assertNoSocket(dir);
}
