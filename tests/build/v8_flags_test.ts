/**
 * The launcher (bash) and the compiled executable (scripts/build.ts) run Synapse with the same V8
 * flags, scripts/v8_flags.ts's V8_FLAGS (field report F37): the launcher spells the string once,
 * on its Deno command line.
 */
import assert from "node:assert/strict";
import { ROOT } from "../_helpers.ts";
import { V8_FLAGS } from "../../scripts/v8_flags.ts";

Deno.test("the ck-synapse launcher passes exactly scripts/v8_flags.ts's V8_FLAGS to Deno", async () => {
  const launcher = await Deno.readTextFile(`${ROOT}/ck-synapse`);
  const passed = [...launcher.matchAll(/^\s*--v8-flags=(\S+)\s*$/gm)].map((m) => m[1]);
  assert.deepEqual(passed, [V8_FLAGS]);
  assert.match(V8_FLAGS, /--max-semi-space-size=2/);
  assert.match(V8_FLAGS, /--optimize-for-size/);
});
