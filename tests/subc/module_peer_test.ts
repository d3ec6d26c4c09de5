/**
 * The real `./ck-synapse serve --subc` process against the test peer (tests/subc/_peer.ts), which
 * was written apart from the module from the same reference: the two must interoperate without
 * a protocol violation or a warning on the peer's side, so they cannot agree on a mistake.
 */
import assert from "node:assert/strict";
import { FrameType } from "../../lib/subc/bus_envelope.ts";
import { connectEndpoint, startPeer } from "./_peer.ts";
import type { EndpointError } from "./peer/endpoint.ts";

Deno.test("the real module serves the test peer: registration, route.open → bind, requests, concurrent requests, health, Goodbye", async () => {
  await using peer = await startPeer();
  const child = new Deno.Command(`${import.meta.dirname}/../../ck-synapse`, {
    args: ["serve", ...peer.launchArgs()],
    env: {
      PATH: Deno.env.get("PATH") ?? "/usr/bin:/bin",
      HOME: peer.dataHome,
      XDG_CONFIG_HOME: `${peer.dataHome}/config`,
      ...(Deno.env.get("TMPDIR") ? { TMPDIR: Deno.env.get("TMPDIR")! } : {}),
      ...peer.launchEnv(),
    },
    clearEnv: true,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const output = child.output();
  try {
    const info = await peer.waitModule("synapse").catch(async (err) => {
      child.kill("SIGKILL");
      const out = await output;
      throw new Error(`${err}; module stderr: ${new TextDecoder().decode(out.stderr)}`);
    });
    assert.equal(info.moduleId, "synapse");
    await using client = await connectEndpoint(peer);
    // Until the store is open the module answers binds module_not_initialized (relayed).
    let route: { channel: number; epoch: number } | undefined;
    while (route === undefined) {
      try {
        route = await client.openRoute();
      } catch (err) {
        assert.equal((err as EndpointError).body?.code, "module_not_initialized", String(err));
        await new Promise((r) => setTimeout(r, 20));
      }
    }
    for (let i = 0;; i++) {
      const t = await client.call(route, { method: "embed.query", params: { text: "hello" } });
      assert.equal(t.type, FrameType.Response);
      const body = JSON.parse(new TextDecoder().decode(t.body));
      if (body.result.error?.code === "model_loading") {
        await new Promise((r) => setTimeout(r, 50));
        continue;
      }
      assert.ok(body.result.dims > 0, JSON.stringify(body));
      break;
    }
    const bad = await client.call(route, { method: "nope" });
    assert.equal(bad.type, FrameType.Error);
    assert.equal(JSON.parse(new TextDecoder().decode(bad.body)).code, "unknown_method");
    // A batch of concurrent requests on one route: one terminal each.
    const all = await Promise.all(
      Array.from(
        { length: 40 },
        (_, i) => client.call(route!, { method: "embed.query", params: { text: `t${i}` } }),
      ),
    );
    assert.ok(all.every((f) => f.type === FrameType.Response));
    const health = await peer.healthCheck();
    assert.ok(["ok", "degraded"].includes((health as { status: string }).status));
    await peer.goodbyeModule();
    const out = await output;
    const stderr = new TextDecoder().decode(out.stderr);
    assert.equal(out.code, 0, stderr);
    const stats = peer.stats();
    assert.deepEqual(stats.violations, []);
    assert.deepEqual(stats.warnings, []);
    assert.equal(stats.creditsLeaked, 0);
    assert.equal(stats.terminals, stats.requestsForwarded);
  } finally {
    try {
      child.kill("SIGKILL");
    } catch { /* exited */ }
    await output.catch(() => {});
  }
});
