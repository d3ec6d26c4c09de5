import assert from "node:assert/strict";
import { fingerprint, machineProfileHash, numericProfileId } from "../mod.ts";

const vectors = JSON.parse(
  await Deno.readTextFile(new URL("./vectors/identity.json", import.meta.url)),
);

Deno.test("mod.ts identity exports reproduce every vector of identity.json from its JSON shapes", () => {
  for (const v of vectors.numeric_profiles) {
    const profile = JSON.parse(v.stable_bytes);
    assert.equal(numericProfileId(profile), v.numeric_profile_id, v.name);
    assert.equal(fingerprint(profile), v.fingerprint, v.name);
  }
  const byName = Object.fromEntries(
    vectors.numeric_profiles.map((
      v: { name: string; stable_bytes: string },
    ) => [v.name, JSON.parse(v.stable_bytes)]),
  );
  assert.equal(fingerprint(byName.interop_metal_embed), vectors.interop_pins.metal_embed);
  assert.equal(fingerprint(byName.interop_metal_rerank), vectors.interop_pins.metal_rerank);
  for (const m of vectors.machine_profiles) {
    assert.equal(machineProfileHash(JSON.parse(m.stable_bytes)), m.hash);
  }
});
