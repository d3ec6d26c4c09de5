import assert from "node:assert/strict";
import { createSynapse } from "../lib/synapse.ts";
import { DEFAULT_CONFIG } from "../lib/config/defaults.ts";
import { SynapseError } from "../lib/contract/errors.ts";

Deno.test("createSynapse() refuses a second instance on the same data home (singleton lease)", async () => {
  const dir = await Deno.makeTempDir();
  const env = { XDG_DATA_HOME: dir, HOME: dir };
  const first = await createSynapse({ config: DEFAULT_CONFIG, env, waitForModels: false });
  await assert.rejects(createSynapse({ config: DEFAULT_CONFIG, env }), (e: unknown) => {
    assert.ok(e instanceof SynapseError);
    assert.equal(e.code, "module_not_initialized");
    assert.match(e.message, /0405529e9b7ef3b5\.lease/);
    return true;
  });
  const gen = first.moduleGeneration;
  await first.modelsSettled;
  await first.dispose();
  const second = await createSynapse({ config: DEFAULT_CONFIG, env, waitForModels: false });
  assert.equal(second.moduleGeneration, gen + 1);
  await second.modelsSettled;
  await second.dispose();
  await Deno.remove(dir, { recursive: true });
});
