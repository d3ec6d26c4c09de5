import assert from "node:assert/strict";
import { pickNext } from "../../lib/sched/pick_next.ts";
import { LaneScheduler } from "../../lib/sched/lane_scheduler.ts";

Deno.test("pickNext runs decode when interactive and bulk are empty, after control", () => {
  const none = undefined;
  assert.equal(
    pickNext({ heads: { control: none, interactive: none, bulk: none, decode: 0 }, cycle: 0 }, 1)
      ?.cls,
    "decode",
  );
  assert.equal(
    pickNext({ heads: { control: 0, interactive: none, bulk: none, decode: 0 }, cycle: 0 }, 1)?.cls,
    "control",
  );
  // Fresh decode waits behind interactive work; aged decode (> 250 ms) goes first.
  assert.equal(
    pickNext({ heads: { control: none, interactive: 0, bulk: none, decode: 0 }, cycle: 0 }, 10)
      ?.cls,
    "interactive",
  );
  assert.equal(
    pickNext({ heads: { control: none, interactive: 300, bulk: none, decode: 0 }, cycle: 0 }, 300)
      ?.cls,
    "decode",
  );
});

Deno.test("LaneScheduler: interactive work submitted with a decode task runs first; both finish", async () => {
  const lane = new LaneScheduler();
  const order: string[] = [];
  let release!: () => void;
  const gate = new Promise<void>((r) => release = r);
  const blocker = lane.submit({ cls: "control", tokens: 0, run: () => gate });
  await new Promise((r) => setTimeout(r, 0)); // the control task is on the slot now
  const d = lane.submit({
    cls: "decode",
    tokens: 64,
    run: () => Promise.resolve(order.push("decode")),
  });
  const i = lane.submit({
    cls: "interactive",
    tokens: 8,
    run: () => Promise.resolve(order.push("interactive")),
  });
  assert.deepEqual(lane.depths(), { control: 0, interactive: 1, bulk: 0, decode: 1 });
  assert.ok(lane.predictedStartDelayMs("decode") > 0);
  release();
  await Promise.all([blocker, d, i]);
  assert.deepEqual(order, ["interactive", "decode"]);
  assert.equal(lane.stats().classes.decode.dispatched, 1);
  lane.dispose();
});
