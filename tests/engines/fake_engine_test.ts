/**
 * The shared engine contract (tests/engines/_engine_contract.ts) against the in-memory
 * {@link FakeEngine} the lane tests drive, for each task it can take: the double must behave as
 * the contract says every engine does. Model-free (the `unit` tier).
 */
import { FakeEngine, fakeRow } from "./_fake_engine.ts";
import { runEngineContract } from "./_engine_contract.ts";

/** Rows of distinct lengths, as the contract asks. */
const ROWS = [fakeRow(3, 10), fakeRow(9, 20), fakeRow(5, 30), fakeRow(12, 40)];

runEngineContract({
  name: "FakeEngine (embed)",
  newEngine: () => Promise.resolve(new FakeEngine({ task: "embed" })),
  rows: ROWS,
});

runEngineContract({
  name: "FakeEngine (rerank)",
  newEngine: () => Promise.resolve(new FakeEngine({ task: "rerank" })),
  rows: ROWS,
});

runEngineContract({
  name: "FakeEngine (generate)",
  newEngine: () => Promise.resolve(new FakeEngine({ task: "generate" })),
  rows: ROWS,
});
