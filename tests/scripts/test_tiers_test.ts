/**
 * The test tiers (scripts/test_tiers.ts): every test file has exactly one; the rules put a file
 * that spawns a process (itself or through a test-local helper) in `process`, one that boots a
 * Synapse or reads a generated model in `instance`, and the pure rules in `unit`.
 */
import assert from "node:assert/strict";
import { testFiles, tierOf, TIERS } from "../../scripts/test_tiers.ts";
import { ROOT } from "../_helpers.ts";

Deno.test("every test file has one tier, and the tiers split the suite by cost", async () => {
  const files = await testFiles();
  assert.ok(files.length > 150, `only ${files.length} test files seen: the walk is broken`);
  assert.ok(files.includes("tests/scripts/test_tiers_test.ts"));
  const texts = new Map<string, string>();
  const byTier = new Map<string, string[]>(TIERS.map((t) => [t, []]));
  for (const f of files) byTier.get(await tierOf(f, texts))!.push(f);
  assert.equal([...byTier.values()].reduce((a, l) => a + l.length, 0), files.length);
  for (const t of TIERS) assert.ok(byTier.get(t)!.length > 20, `tier ${t} is nearly empty`);
  // Known members of each tier.
  const tier = (f: string) => tierOf(f, texts);
  assert.equal(await tier("tests/sched/quantum_test.ts"), "unit");
  assert.equal(await tier("tests/identity/numeric_profile_test.ts"), "unit");
  assert.equal(await tier("tests/ops/routing_test.ts"), "instance");
  // Through a test-local helper: tests/cli/_launcher.ts spawns ck-synapse.
  assert.equal(await tier("tests/cli/tokenize_cli_test.ts"), "process");
  // The unit tier names no generated model and no Synapse anywhere in what it reads.
  for (const f of byTier.get("unit")!) {
    const text = texts.get(`${ROOT}/${f}`)!;
    assert.doesNotMatch(text, /startSynapse|createSynapse|fixtures\/|new Deno\.Command\(/, f);
  }
});

Deno.test("a test-local helper that spawns a process makes its importer a process test", async () => {
  const dir = await Deno.makeTempDir({ dir: `${ROOT}/tests`, prefix: ".tier-probe-" });
  try {
    const rel = dir.slice(ROOT.length + 1);
    await Deno.writeTextFile(`${dir}/_spawn.ts`, 'export const c = new Deno.Command("true");\n');
    await Deno.writeTextFile(`${dir}/a_test.ts`, 'import { c } from "./_spawn.ts";\nvoid c;\n');
    await Deno.writeTextFile(`${dir}/b_test.ts`, 'import { MODELS } from "../_helpers.ts";\n');
    await Deno.writeTextFile(`${dir}/c_test.ts`, 'import { resultOf } from "../_helpers.ts";\n');
    const texts = new Map<string, string>();
    assert.equal(await tierOf(`${rel}/a_test.ts`, texts), "process");
    assert.equal(await tierOf(`${rel}/b_test.ts`, texts), "instance");
    // tests/_helpers.ts defines startSynapse, but importing its small functions is still unit.
    assert.equal(await tierOf(`${rel}/c_test.ts`, texts), "unit");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
