import assert from "node:assert/strict";
import { pickNext } from "../../lib/sched/pick_next.ts";
import type { PickOptions, PickState, WorkClass } from "../../lib/sched/pick_next.ts";

const NOW = 1000;

/** Heads enqueued `age` ms before NOW; `undefined` = empty queue. */
function heads(
  ages: Partial<Record<WorkClass, number>>,
): PickState["heads"] {
  const at = (age: number | undefined): number | undefined =>
    age === undefined ? undefined : NOW - age;
  return { control: at(ages.control), interactive: at(ages.interactive), bulk: at(ages.bulk) };
}

interface Row {
  name: string;
  ages: Partial<Record<WorkClass, number>>;
  cycle: number;
  options?: PickOptions;
  /** Expected class and cycle after, or undefined for "nothing to run". */
  want: [WorkClass, number] | undefined;
}

const TABLE: Row[] = [
  { name: "all empty", ages: {}, cycle: 2, want: undefined },
  { name: "control alone", ages: { control: 0 }, cycle: 2, want: ["control", 2] },
  {
    name: "control before an aged bulk head",
    ages: { control: 0, interactive: 900, bulk: 900 },
    cycle: 3,
    want: ["control", 3],
  },
  {
    name: "interactive alone keeps the cycle",
    ages: { interactive: 0 },
    cycle: 2,
    want: [
      "interactive",
      2,
    ],
  },
  { name: "bulk alone starts a new cycle", ages: { bulk: 0 }, cycle: 2, want: ["bulk", 0] },
  { name: "fair turn 0", ages: { interactive: 0, bulk: 0 }, cycle: 0, want: ["interactive", 1] },
  { name: "fair turn 1", ages: { interactive: 0, bulk: 0 }, cycle: 1, want: ["interactive", 2] },
  { name: "fair turn 2", ages: { interactive: 0, bulk: 0 }, cycle: 2, want: ["interactive", 3] },
  { name: "fair turn 3 is bulk", ages: { interactive: 0, bulk: 0 }, cycle: 3, want: ["bulk", 0] },
  {
    name: "bulk head of exactly 250 ms is not aged",
    ages: { interactive: 0, bulk: 250 },
    cycle: 0,
    want: ["interactive", 1],
  },
  {
    name: "bulk head older than 250 ms goes first",
    ages: { interactive: 400, bulk: 251 },
    cycle: 0,
    want: ["bulk", 0],
  },
  {
    name: "cycle out of range wraps",
    ages: { interactive: 0, bulk: 0 },
    cycle: 7,
    want: ["bulk", 0],
  },
  {
    name: "weights 2/2: turn 2 is bulk",
    ages: { interactive: 0, bulk: 0 },
    cycle: 2,
    options: { weights: { interactive: 2, bulk: 2 } },
    want: ["bulk", 3],
  },
  {
    name: "weights 2/2: turn 3 is bulk and wraps",
    ages: { interactive: 0, bulk: 0 },
    cycle: 3,
    options: { weights: { interactive: 2, bulk: 2 } },
    want: ["bulk", 0],
  },
  {
    name: "custom aging 50 ms",
    ages: { interactive: 0, bulk: 60 },
    cycle: 1,
    options: { bulkAgingMs: 50 },
    want: ["bulk", 0],
  },
  {
    name: "aging off",
    ages: { interactive: 0, bulk: 1e9 },
    cycle: 0,
    options: { bulkAgingMs: Infinity },
    want: ["interactive", 1],
  },
];

for (const row of TABLE) {
  Deno.test(`pickNext() table: ${row.name}`, () => {
    const state: PickState = { heads: heads(row.ages), cycle: row.cycle };
    const got = pickNext(state, NOW, row.options);
    if (row.want === undefined) {
      assert.equal(got, undefined);
      return;
    }
    assert.ok(got);
    assert.deepEqual([got.cls, got.state.cycle], row.want);
    assert.deepEqual(got.state.heads, state.heads);
  });
}

Deno.test("pickNext() runs the fair cycle [I, I, I, B] while both classes wait", () => {
  let state: PickState = { heads: heads({ interactive: 0, bulk: 0 }), cycle: 0 };
  const order: WorkClass[] = [];
  for (let i = 0; i < 12; i++) {
    const pick = pickNext(state, NOW);
    assert.ok(pick);
    order.push(pick.cls);
    state = pick.state;
  }
  assert.equal(order.map((c) => c[0]).join(""), "iiibiiibiiib");
});

Deno.test("pickNext() does not mutate its state", () => {
  const state: PickState = Object.freeze({
    heads: Object.freeze(heads({ interactive: 0, bulk: 0 })),
    cycle: 1,
  });
  pickNext(state, NOW);
  assert.equal(state.cycle, 1);
});

Deno.test("pickNext() throws for invalid weights, aging and cycle", () => {
  const state: PickState = { heads: heads({ interactive: 0 }), cycle: 0 };
  for (const w of [0, -1, 1.5, NaN, Infinity]) {
    assert.throws(() => pickNext(state, NOW, { weights: { interactive: w, bulk: 1 } }), RangeError);
    assert.throws(() => pickNext(state, NOW, { weights: { interactive: 3, bulk: w } }), RangeError);
  }
  for (const a of [-1, NaN]) {
    assert.throws(() => pickNext(state, NOW, { bulkAgingMs: a }), RangeError);
  }
  for (const c of [-1, 1.5, NaN]) {
    assert.throws(() => pickNext({ ...state, cycle: c }, NOW), RangeError);
  }
});
