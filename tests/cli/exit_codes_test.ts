import assert from "node:assert/strict";
import { CLI_EXIT, cliExitFor } from "../../lib/cli/exit_codes.ts";

Deno.test("cliExitFor() has a row for every outcome kind: 0 result, 1 semantic, 2 channel or usage", () => {
  assert.deepEqual(CLI_EXIT, { result: 0, semantic: 1, channel: 2, usage: 2 });
  assert.equal(cliExitFor("result"), 0);
  assert.equal(cliExitFor("semantic"), 1);
  assert.equal(cliExitFor("channel"), 2);
  assert.equal(cliExitFor("usage"), 2);
});
