/**
 * The test peer's waitModule() wakes on the registration itself: a module that sends nothing
 * after its HELLO (the real module, idle until a route is bound) is seen as registered.
 */
import assert from "node:assert/strict";
import { connectEndpoint, startPeer, testManifest } from "./_peer.ts";

Deno.test("Peer.waitModule() called before HELLO resolves on the registration, with nothing after it", async () => {
  await using peer = await startPeer({ modules: ["m"] });
  const waiting = peer.waitModule("m", { timeoutMs: 20_000 });
  await using module = await connectEndpoint(peer);
  const { frame } = await module.hello(testManifest({ moduleId: "m" }));
  assert.equal(frame.type, 10); // HelloAck
  const info = await waiting; // before the fix: timed out, no event followed the HELLO
  assert.deepEqual([info.moduleId, info.state], ["m", "registered"]);
});
