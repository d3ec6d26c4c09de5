/**
 * Workers that must not hold on (issue 17 item 12, F31): a worker that does not answer its
 * CANCEL within the grace is killed then; a worker never outlives its server (parent-death
 * signal); worker slots are reused after unload, so a server that loads its 21st GGUF under the
 * launcher's exact socket grants loads it like its first.
 *
 * Every wait is on an event (a worker's own log line, a state), never on elapsed time; the only
 * time bounds are loose upper bounds of many seconds.
 */
import assert from "node:assert/strict";
import { loadConfig } from "../../lib/config/loader.ts";
import { nullLog } from "../../lib/log/log.ts";
import { createSynapse } from "../../lib/synapse.ts";
import { DEFAULT_CANCEL_GRACE_MS, WorkerConnection } from "../../lib/workers/host.ts";
import { encodeI32LE } from "../../lib/workers/codec.ts";
import type { LoadedMessage, TextMessage } from "../../lib/workers/messages.ts";
import { WorkerSlots } from "../../lib/workers/worker_slots.ts";
import { parkedWorker } from "../_generation.ts";
import { MODELS, resultOf, ROOT, semanticError } from "../_helpers.ts";
import {
  assertCrash,
  logLine,
  rejection,
  runtimeDir,
  TINY_LLAMA_GGUF,
  workerOptions,
} from "./_worker_helpers.ts";

const GEN = `${MODELS}/synapse-tiny-llama`;

/** True while process `pid` exists and is not a zombie. */
function alive(pid: number): boolean {
  // `ps`, not /proc: the suite runs without --allow-all, and Deno asks it for any /proc read.
  const state = ps(["-o", "stat=", "-p", String(pid)]).trim();
  return state !== "" && !state.startsWith("Z");
}

/** `ps` with `args`, its stdout ("" when it matched nothing). */
function ps(args: string[]): string {
  const out = new Deno.Command("ps", { args, stdout: "piped", stderr: "null" }).outputSync();
  return new TextDecoder().decode(out.stdout);
}

/** Waits (at most `ms`, a loose bound) until `pid` is gone; true when it went. */
async function gone(pid: number, ms: number): Promise<boolean> {
  for (const end = Date.now() + ms; Date.now() < end;) {
    if (!alive(pid)) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return !alive(pid);
}

Deno.test("WorkerSlots: lowest free slot first, a released slot is taken again", () => {
  const slots = new WorkerSlots();
  const taken = Array.from({ length: 4 }, () => slots.take());
  assert.deepEqual(taken.map((s) => s.slot), [0, 1, 2, 3]);
  taken[1]!.release();
  taken[1]!.release(); // idempotent
  taken[2]![Symbol.dispose]();
  assert.equal(slots.take().slot, 1);
  assert.equal(slots.take().slot, 2);
  assert.equal(slots.take().slot, 4);
  assert.deepEqual(slots.held, [0, 1, 2, 3, 4]);
  for (let i = 0; i < 100; i++) slots.take().release();
  assert.equal(slots.take().slot, 5, "100 take/release cycles used one slot");
});

Deno.test("WorkerConnection kills a worker that does not answer its CANCEL within the grace (a SIGSTOPped worker)", async () => {
  assert.equal(DEFAULT_CANCEL_GRACE_MS, 5000, "the documented default");
  await using dir = await runtimeDir();
  const held = logLine(/waiting for CANCEL after 3 tokens/);
  const conn = await WorkerConnection.start(
    workerOptions(dir.path, ["--test-wait-cancel-after", "3"], {
      onLogLine: held.onLogLine,
      cancelGraceMs: 2000,
    }),
  );
  try {
    const ref = (await conn.request<LoadedMessage>(
      {
        type: "LOAD",
        req_id: 1,
        artifact_path: TINY_LLAMA_GGUF,
        artifact_digest: "sha256:test",
        format: "gguf",
        runtime_config: { mode: "generate", context_size: 1024, threads: 1 },
      },
      undefined,
      120_000,
    )).msg.model_ref;
    const t0 = performance.now();
    const long = conn.request<TextMessage>(
      { type: "GENERATE", req_id: 2, model_ref: ref, max_tokens: 400 },
      encodeI32LE(Int32Array.of(1, 10, 20, 30, 40)),
      300_000,
    );
    await held.seen;
    Deno.kill(conn.pid, "SIGSTOP"); // it can read no CANCEL now
    await conn.cancel(2);
    const err = await rejection(long);
    const d = assertCrash(err, ["cancel_timeout"]);
    assert.match(String((err as Error).message), /CANCEL/);
    assert.ok(d.worker_id !== undefined);
    // Killed at the grace, not at the request's 300 s timeout (a loose bound: a busy machine).
    assert.ok(performance.now() - t0 < 120_000);
    assert.ok(await gone(conn.pid, 30_000), "the stopped worker was killed");
  } finally {
    conn.kill();
  }
});

Deno.test("microllm.oneshot on a SIGSTOPped worker answers deadline_exceeded once the CANCEL grace passes; the model restarts and serves", async () => {
  const dir = await Deno.makeTempDir({ prefix: "synapse-grace-" });
  const env = {
    XDG_DATA_HOME: `${dir}/data`,
    XDG_CONFIG_HOME: `${dir}/config`,
    HOME: dir,
    SYNAPSE_CONFIG_JSON: JSON.stringify({
      certification: "warn",
      preload_models: [{
        engine: "llama",
        model_path: GEN,
        tokenizer_path: `${GEN}/tokenizer.json`,
        task: "generate",
        model_id: "gen",
      }],
    }),
  };
  const { config } = loadConfig({ env, cwd: dir });
  assert.equal(config.worker.cancel_grace_ms, 5000, "the documented default");
  // The worker parks after 2 tokens of its first GENERATE (the hook), until its CANCEL.
  const worker = parkedWorker();
  const syn = await createSynapse({
    config,
    env,
    log: (level, target, message, fields) => {
      worker.log(level, target, message, fields);
      nullLog(level, target, message, fields);
    },
    llamaWorkerArgs: ["--test-wait-cancel-after", "2"],
  });
  try {
    const engine = syn.registry.resolve("gen", "generate").interactive.engine as unknown as {
      worker: { pid: number | undefined; status(): { generation: number; recent_crashes: number } };
    };
    const call = syn.call("microllm.oneshot", {
      prompt: "hello",
      max_tokens: 400,
      deadline_ms: 3000,
    });
    await worker.parked;
    const pid = engine.worker.pid!;
    Deno.kill(pid, "SIGSTOP");
    const err = semanticError(await call);
    assert.equal(err.code, "deadline_exceeded");
    assert.equal(err.details.reason, "deadline");
    assert.ok(await gone(pid, 60_000), "the stopped worker was killed after the grace");
    assert.equal(engine.worker.status().recent_crashes, 1, "counted as a crash");
    // The next call restarts the worker (within the crash budget) and is served.
    const next = resultOf(await syn.call("microllm.oneshot", { prompt: "hello", max_tokens: 2 }));
    assert.equal(next.n_gen, 2);
    assert.equal(engine.worker.status().generation, 2);
  } finally {
    await syn.dispose();
    await Deno.remove(dir, { recursive: true });
  }
});

interface Server {
  child: Deno.ChildProcess;
  base: string;
}

/** `ck-synapse serve` under the launcher's own permission set (exact socket grants). */
async function serve(dir: string): Promise<Server> {
  const child = new Deno.Command(`${ROOT}/ck-synapse`, {
    args: ["serve", "--http", "127.0.0.1:0"],
    env: {
      PATH: Deno.env.get("PATH") ?? "/usr/bin:/bin",
      HOME: dir,
      XDG_DATA_HOME: `${dir}/data`,
      XDG_CONFIG_HOME: `${dir}/config`,
      TMPDIR: "/tmp",
      SYNAPSE_CONFIG_JSON: JSON.stringify({
        certification: "warn",
        preload_models: [{
          engine: "ort",
          model_path: `${MODELS}/synapse-tiny-embed/model.onnx`,
          tokenizer_path: `${MODELS}/synapse-tiny-embed/tokenizer.json`,
          config_path: `${MODELS}/synapse-tiny-embed/config.json`,
          model_id: "embed",
        }],
      }),
    },
    clearEnv: true,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  void child.stdout.pipeTo(new WritableStream());
  const reader = child.stderr.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  while (true) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`server exited before listening: ${buf}`);
    buf += value;
    const m = buf.match(/listening on (http:\/\/\S+)/);
    if (m) {
      (async () => {
        while (!(await reader.read()).done) { /* drain */ }
      })();
      keyFiles.set(m[1]!, `${dir}/data/cortexkit/synapse/owner.key`);
      return { child, base: m[1]! };
    }
  }
}

/** Each served base URL's owner key file (model.load and model.unload need the key). */
const keyFiles = new Map<string, string>();

// deno-lint-ignore no-explicit-any
async function op(base: string, method: string, params: unknown): Promise<any> {
  const key = (await Deno.readTextFile(keyFiles.get(base)!)).trim();
  const res = await fetch(`${base}/v1/ops/${method}`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}` },
    body: JSON.stringify(params),
  });
  const body = await res.json();
  if (!body.result) throw new Error(`${method}: ${JSON.stringify(body)}`);
  return body.result;
}

// deno-lint-ignore no-explicit-any
async function loadGguf(base: string, modelId: string): Promise<any> {
  const job = await op(base, "model.load", {
    path: TINY_LLAMA_GGUF,
    model_id: modelId,
    task: "generate",
  });
  for (const end = Date.now() + 600_000; Date.now() < end;) {
    const st = await op(base, "model.status", { job_id: job.job_id });
    if (st.state === "ready" || st.state === "failed") return st;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error("load still open after 10 minutes: hung");
}

/** Children of `pid` (from `ps`; we are root, or the children are ours). */
function childrenOf(pid: number): number[] {
  return ps(["-o", "pid=", "--ppid", String(pid)]).split("\n").map((l) => l.trim())
    .filter((l) => l !== "").map(Number);
}

Deno.test("F31: under the launcher's permissions a server loads and unloads a GGUF 21 times and it still serves; killed with -9, its (stopped) worker does not outlive it", async () => {
  const dir = await Deno.makeTempDir({ prefix: "synapse-slots-" });
  const server = await serve(dir);
  try {
    // Past the 16 socket paths the launcher grants: each unload gives its slot back.
    for (let i = 0; i < 21; i++) {
      const st = await loadGguf(server.base, `gen-${i}`);
      assert.equal(st.state, "ready", `load ${i + 1}: ${JSON.stringify(st)}`);
      const out = await op(server.base, "microllm.oneshot", {
        model: `gen-${i}`,
        prompt: "hello",
        max_tokens: 2,
      });
      assert.equal(out.n_gen, 2, `load ${i + 1} generates`);
      if (i < 20) {
        const un = await op(server.base, "model.unload", { model_id: `gen-${i}` });
        assert.equal(un.state, "unloaded");
      }
    }
    // The 21st model's worker, stopped so that it reads no EOF: the parent-death signal is what
    // ends it when the server is SIGKILLed.
    const workers = childrenOf(server.child.pid).filter((p) =>
      ps(["-o", "args=", "-p", String(p)]).includes("llama")
    );
    assert.equal(workers.length, 1, `one llama worker left: ${workers}`);
    const worker = workers[0]!;
    Deno.kill(worker, "SIGSTOP");
    server.child.kill("SIGKILL");
    await server.child.status;
    assert.ok(await gone(worker, 30_000), `worker ${worker} outlived its server`);
  } finally {
    try {
      server.child.kill("SIGKILL");
    } catch { /* already gone */ }
    await server.child.status;
    await Deno.remove(dir, { recursive: true });
  }
});
