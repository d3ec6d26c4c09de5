/**
 * Cancellation over the bus with a real llama.cpp worker (the tiny generated GGUF): Cancel stops
 * a generation within a token and its terminal is Error `cancelled`; the decode slot is free for
 * the next generation; a route Goodbye cancels its work and answers nothing; health.check is
 * answered while a generation runs. The worker's `--test-wait-cancel-after N` hook parks the
 * generation after N tokens until its CANCEL arrives, so nothing waits on a timer.
 */
import assert from "node:assert/strict";
import { FrameType } from "../../lib/subc/bus_envelope.ts";
import { parkedWorker, watchGenerations } from "../_generation.ts";
import { MODELS } from "../_helpers.ts";
import { bodyOf, json } from "./_hand_daemon.ts";
import { registerAndBind, startModule } from "./_module.ts";

const GEN = `${MODELS}/synapse-tiny-llama`;
const CONFIG = {
  preload_models: [{
    engine: "llama",
    model_path: GEN,
    tokenizer_path: `${GEN}/tokenizer.json`,
    task: "generate",
    model_id: "gen",
  }],
};

Deno.test("Cancel stops a microllm generation within a token: terminal Error cancelled, the slot is free; health.check answers meanwhile", async () => {
  const worker = parkedWorker();
  await using m = await startModule({
    config: CONFIG,
    log: worker.log,
    llamaWorkerArgs: ["--test-wait-cancel-after", "2"],
  });
  const syn = await registerAndBind(m, 1, 1);
  await syn.modelsSettled;
  const watch = watchGenerations(syn);
  await m.link.send(m.link.requestFrame(1, 1, 10n, {
    method: "microllm.oneshot",
    params: { prompt: "hello", max_tokens: 400, deadline_ms: 120_000 },
  }));
  await worker.parked;
  // The generation runs (parked in the worker): health is answered from cached state.
  const probe = m.corrs.next();
  await m.link.send({ type: FrameType.Request, corr: probe, body: json({ op: "health.check" }) });
  const health = bodyOf(await m.link.reply(0, probe));
  assert.equal(health.op, "health.check");
  assert.equal(health.metrics.in_flight, 1);
  assert.ok(!m.link.seen.some((f) => f.channel === 1 && f.corr === 10n), "still running");
  await m.link.send({ type: FrameType.Cancel, channel: 1, epoch: 1, corr: 10n });
  const terminal = await m.link.reply(1, 10n);
  assert.equal(terminal.type, FrameType.Error);
  assert.equal(terminal.flags, 0x02);
  assert.equal(terminal.epoch, 1);
  assert.equal(bodyOf(terminal).code, "cancelled");
  const ended = await watch.ended;
  assert.equal(ended.finishReason, "cancelled");
  assert.equal(ended.generatedIds.length, 2, "stopped where it was parked, within a token");
  // The decode slot is free: the next generation starts and runs to its own limit.
  await m.link.send(m.link.requestFrame(1, 1, 11n, {
    method: "microllm.oneshot",
    params: { prompt: "hello", max_tokens: 4, max_queue_ms: 5000 },
  }));
  const next = await m.link.reply(1, 11n);
  assert.equal(next.type, FrameType.Response, JSON.stringify(bodyOf(next)));
  assert.equal(bodyOf(next).result.n_gen, 4);
  assert.equal(bodyOf(next).result.finish_reason, "max_tokens");
  await m.link.ping(m.corrs.next());
  assert.equal(m.link.seen.filter((f) => f.channel === 1 && f.corr === 10n).length, 1);
  assert.equal(syn.admission.bytesInFlight, 0);
});

Deno.test("route Goodbye cancels the route's generation and answers nothing for it", async () => {
  const worker = parkedWorker();
  await using m = await startModule({
    config: CONFIG,
    log: worker.log,
    llamaWorkerArgs: ["--test-wait-cancel-after", "1"],
  });
  const syn = await registerAndBind(m, 3, 1);
  await syn.modelsSettled;
  const watch = watchGenerations(syn);
  await m.link.send(m.link.requestFrame(3, 1, 20n, {
    method: "microllm.oneshot",
    params: { prompt: "hello", max_tokens: 400, deadline_ms: 120_000 },
  }));
  await worker.parked;
  await m.link.send({ type: FrameType.Goodbye, channel: 3, epoch: 1 });
  const ended = await watch.ended;
  assert.equal(ended.finishReason, "cancelled");
  assert.equal(ended.generatedIds.length, 1);
  // Another route gets the slot at once.
  await m.link.bindReady(m.corrs, 4, 1);
  await m.link.send(m.link.requestFrame(4, 1, 21n, {
    method: "microllm.oneshot",
    params: { prompt: "hi", max_tokens: 3, max_queue_ms: 5000 },
  }));
  assert.equal(bodyOf(await m.link.reply(4, 21n)).result.n_gen, 3);
  await m.link.ping(m.corrs.next());
  assert.ok(!m.link.seen.some((f) => f.channel === 3), "nothing was sent on the closed route");
  assert.equal(m.session().stats.inFlight, 0);
});

Deno.test("a drain past its grace cancels the generation in flight; its terminal is Error cancelled before the close", async () => {
  const worker = parkedWorker();
  await using m = await startModule({
    config: CONFIG,
    log: worker.log,
    llamaWorkerArgs: ["--test-wait-cancel-after", "1"],
    session: { drainGraceMs: 50 },
  });
  const syn = await registerAndBind(m, 2, 1);
  await syn.modelsSettled;
  await m.link.send(m.link.requestFrame(2, 1, 30n, {
    method: "microllm.oneshot",
    params: { prompt: "hello", max_tokens: 400, deadline_ms: 120_000 },
  }));
  await worker.parked;
  await m.link.send({ type: FrameType.Goodbye });
  assert.deepEqual(await m.running, { reason: "goodbye" });
  const terminal = m.link.seen.find((f) => f.channel === 2 && f.corr === 30n);
  assert.ok(terminal !== undefined, "answered before the connection closed");
  assert.equal(terminal.type, FrameType.Error);
  assert.equal(bodyOf(terminal).code, "cancelled");
});
