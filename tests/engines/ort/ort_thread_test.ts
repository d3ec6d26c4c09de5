import assert from "node:assert/strict";
import { setImmediate } from "node:timers";
import { OrtThread } from "../../../lib/engines/ort/ort_thread.ts";
import { SanitizedTokenizer } from "../../../lib/tokenize/tokenizer.ts";
import { MODELS } from "../../_helpers.ts";
import { callingThreadId } from "../../../ffi/priority.ts";

const dir = `${MODELS}/synapse-tiny-embed`;
const spec = {
  modelRef: "m",
  path: `${dir}/model.onnx`,
  task: "embed" as const,
  pooling: "mean" as const,
  normalize: true,
};

Deno.test("OrtThread: two worker threads with 40 concurrent runs stay correct (stress)", async () => {
  // onnxruntime-node 1.21 aborted with HandleScope errors when several threads ran sessions;
  // this keeps an upgrade from bringing that back (docs/internals.md "§11 Engines and lanes").
  const tok = await SanitizedTokenizer.fromFile(`${dir}/tokenizer.json`);
  using a = new OrtThread({ intraOpThreads: 1 });
  using b = new OrtThread({ intraOpThreads: 1 });
  await Promise.all([a.load(spec), b.load(spec)]);
  const texts = Array.from({ length: 40 }, (_, i) => Array(1 + i * 5).fill("stress").join(" "));
  const seqs = texts.map((t) => tok.encode(t, { maxTokens: 512, truncate: true }));
  const results = await Promise.all(seqs.map((s, i) => (i % 2 ? a : b).run("m", [s])));
  const again = await Promise.all(seqs.map((s, i) => (i % 2 ? b : a).run("m", [s])));
  for (let i = 0; i < 40; i++) {
    assert.equal(results[i]!.dims, 32);
    const x = results[i]!.data, y = again[i]!.data;
    for (let d = 0; d < 32; d++) assert.ok(Math.abs(x[d]! - y[d]!) < 1e-5);
  }
});

Deno.test("OrtThread keeps the main thread free while the worker runs", async () => {
  // onnxruntime-node's run() holds its thread from start to end, so a main thread that ran the
  // engine itself could turn its event loop at most once per run (0 or 1 measured); a free one
  // turns it thousands of times per run here. Counting turns against runs, not milliseconds,
  // keeps the check independent of machine speed and load.
  const tok = await SanitizedTokenizer.fromFile(`${dir}/tokenizer.json`);
  using lane = new OrtThread();
  await lane.load(spec);
  const seq = tok.encode(Array(500).fill("busy").join(" "), { maxTokens: 512, truncate: true });
  const runs = 20;
  const want = 10 * runs;
  let settled = false;
  const burst = Promise.all(Array.from({ length: runs }, () => lane.run("m", [seq, seq, seq, seq])))
    .finally(() => settled = true);
  let turns = 0;
  const reached = await new Promise<boolean>((resolve) => {
    const turn = () => {
      if (settled) resolve(false);
      else if (++turns >= want) resolve(true);
      else setImmediate(turn);
    };
    setImmediate(turn);
  });
  const wasInFlight = lane.inFlight;
  await burst;
  assert.ok(reached, `${turns} event-loop turns during ${runs} engine runs, want >= ${want}`);
  assert.ok(wasInFlight > 0, "the turns must happen while runs are in flight");
});

Deno.test("OrtThread answers artifact_invalid for a file that is not a model, and keeps serving", async () => {
  const tmp = await Deno.makeTempFile({ suffix: ".onnx" });
  await Deno.writeTextFile(tmp, "not a model");
  using lane = new OrtThread();
  await assert.rejects(lane.load({ ...spec, modelRef: "bad", path: tmp }), {
    code: "artifact_invalid",
  });
  await lane.load(spec);
  const tok = await SanitizedTokenizer.fromFile(`${dir}/tokenizer.json`);
  const r = await lane.run("m", [tok.encode("fine", { maxTokens: 512 })]);
  assert.equal(r.dims, 32);
  await assert.rejects(lane.run("nope", [tok.encode("x", { maxTokens: 512 })]), {
    code: "unknown_model",
  });
  await Deno.remove(tmp);
});

Deno.test("OrtThread.dispose() is idempotent and refuses later calls with disposed", async () => {
  const lane = new OrtThread();
  await lane.load(spec);
  lane.dispose();
  lane.dispose();
  assert.equal(lane.disposed, true);
  await assert.rejects(lane.load(spec), { code: "disposed" });
});

Deno.test("OrtThread refuses a model whose output does not fit the task (artifact_invalid)", async () => {
  using lane = new OrtThread({ intraOpThreads: 1 });
  await assert.rejects(
    lane.load({ ...spec, modelRef: "x", path: `${MODELS}/synapse-tiny-rerank/model.onnx` }),
    (e: unknown) => {
      assert.equal((e as { code: string }).code, "artifact_invalid");
      assert.match((e as Error).message, /task 'embed' needs last_hidden_state/);
      return true;
    },
  );
  await assert.rejects(
    lane.load({ ...spec, modelRef: "y", task: "rerank" }),
    { code: "artifact_invalid" },
  );
  await lane.load(spec); // the lane still serves
});

/** Nice value of each thread of this process, by thread id, as `ps` reads them from the kernel. */
async function threadNices(): Promise<Map<number, number>> {
  const out = await new Deno.Command("ps", {
    args: ["-L", "-o", "tid=,nice=", "-p", String(Deno.pid)],
    stdout: "piped",
  }).output();
  assert.ok(out.success, "ps -L failed");
  const nices = new Map<number, number>();
  for (const line of new TextDecoder().decode(out.stdout).split("\n")) {
    const [tid, nice] = line.trim().split(/\s+/);
    if (tid && nice) nices.set(Number(tid), Number(nice));
  }
  return nices;
}

Deno.test({
  name:
    "OrtThread with niceness 10 runs its worker and intra-op threads at nice 10, the main thread at 0",
  ignore: Deno.build.os !== "linux",
  fn: async () => {
    const before = await threadNices();
    // Three intra-op threads: the worker thread runs one share, onnxruntime's pool the other
    // two, so at least three new threads at nice 10 means the pool inherited the value.
    using lane = new OrtThread({ intraOpThreads: 3, allowSpinning: false, niceness: 10 });
    const { niceness } = await lane.load(spec);
    assert.equal(niceness, 10);
    const tok = await SanitizedTokenizer.fromFile(`${dir}/tokenizer.json`);
    const r = await lane.run("m", [tok.encode("lowered", { maxTokens: 512 })]);
    assert.equal(r.dims, 32);
    const after = await threadNices();
    const lowered = [...after].filter(([tid, nice]) => nice === 10 && !before.has(tid));
    assert.ok(
      lowered.length >= lane.intraOpThreads,
      `${lowered.length} new threads at nice 10, want >= ${lane.intraOpThreads}: ${
        JSON.stringify([...after])
      }`,
    );
    const main = callingThreadId()!;
    assert.equal(after.get(main), 0, `the main thread (${main}) must keep nice 0`);
    for (const [tid, nice] of before) {
      if (after.has(tid)) {
        assert.equal(after.get(tid), nice, `thread ${tid} existed before the lane`);
      }
    }
  },
});

/** Runs `step` (each one a request to the lane) until `done()` holds, at most `max` times. */
async function until(done: () => boolean, step: () => Promise<unknown>, max = 200): Promise<void> {
  for (let i = 0; i < max && !done(); i++) await step();
}

Deno.test("OrtThread creates the quiet twin on the first quiet run and releases it when idle", async () => {
  const tok = await SanitizedTokenizer.fromFile(`${dir}/tokenizer.json`);
  const seq = tok.encode("a quiet query", { maxTokens: 512 });
  using lane = new OrtThread({ intraOpThreads: 2, quietTwin: true, quietTwinIdleMs: 0 });
  await lane.load(spec);
  assert.equal(lane.residentSessions, 1, "no twin before the first quiet run");
  const loud = await lane.run("m", [seq]);
  const quiet = await lane.run("m", [seq], { quiet: true });
  assert.equal(lane.residentSessions, 2, "the quiet run created the twin");
  for (let d = 0; d < 32; d++) assert.ok(Math.abs(loud.data[d]! - quiet.data[d]!) < 1e-5);
  // quietTwinIdleMs 0: the release is sent on the next timer turn; the worker answers in order,
  // so a later run's reply sees it.
  await until(
    () => lane.residentSessions === 1,
    async () => {
      await new Promise((r) => setTimeout(r, 0));
      await lane.run("m", [seq]);
    },
  );
  assert.equal(lane.residentSessions, 1, "the idle twin was released");
  const again = await lane.run("m", [seq], { quiet: true });
  assert.equal(lane.residentSessions, 2, "the next quiet run made a new twin");
  for (let d = 0; d < 32; d++) assert.ok(Math.abs(loud.data[d]! - again.data[d]!) < 1e-5);
});

Deno.test("OrtThread with idleUnloadMs unloads idle models and reloads them on the next run", async () => {
  const tok = await SanitizedTokenizer.fromFile(`${dir}/tokenizer.json`);
  const seq = tok.encode("bulk work", { maxTokens: 512 });
  using lane = new OrtThread({ intraOpThreads: 1, allowSpinning: false, idleUnloadMs: 0 });
  lane.register(spec);
  assert.equal(lane.residentSessions, 0);
  const first = await lane.run("m", [seq]);
  assert.equal(lane.residentSessions, 1);
  // The unload is sent on the next timer turn and answered by the worker; wait for its reply.
  await until(() => lane.residentSessions === 0, () => new Promise((r) => setTimeout(r, 0)), 1000);
  assert.equal(lane.residentSessions, 0, "the idle model was unloaded");
  const second = await lane.run("m", [seq]);
  assert.equal(lane.residentSessions, 1, "the run loaded it again");
  for (let d = 0; d < 32; d++) assert.ok(Math.abs(first.data[d]! - second.data[d]!) < 1e-5);
});

Deno.test("OrtThread throws RangeError for a negative or NaN idle time", () => {
  for (const bad of [-1, NaN]) {
    assert.throws(() => new OrtThread({ idleUnloadMs: bad }), RangeError);
    assert.throws(() => new OrtThread({ quietTwinIdleMs: bad }), RangeError);
  }
});

Deno.test("a process that ran an ORT session leaves no empty mat-debug-<pid>.log in its temp dir", async () => {
  const { startSynapse } = await import("../../_helpers.ts");
  await using t = await startSynapse();
  await t.syn.modelsSettled;
  await t.syn.call("embed.query", { text: "leave nothing behind" });
  const tmp = (Deno.env.get("TMPDIR") || "/tmp").replace(/\/+$/, "");
  const leftover = (() => {
    try {
      return Deno.statSync(`${tmp}/mat-debug-${Deno.pid}.log`).size;
    } catch {
      return undefined;
    }
  })();
  // libonnxruntime creates it empty with the process's first session; the lane removes it.
  if (leftover !== undefined) {
    throw new Error(`mat-debug-${Deno.pid}.log is still there (${leftover} bytes)`);
  }
});
