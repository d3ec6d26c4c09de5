/**
 * The canary of a remote lane (docs/remote.md "Canary"), against real servers on loopback: the
 * provider swaps the model behind the same name and deployment (an OpenAI-kind provider whose
 * `/v1/models` row does not change), the periodic canary sees the numbers move and the lane
 * refuses `remote_identity_drift`; the baseline survives a restart, so the next boot refuses to
 * load the moved provider under the old fingerprint, and a new `revision` serves it as a new
 * vector space. A Synapse provider whose fingerprint changes is `remote_deployment_changed`.
 */
import assert from "node:assert/strict";
import { MODELS, preload, resultOf, semanticError } from "../../_helpers.ts";
import type { LogSink } from "../../../lib/log/log.ts";
import type { Synapse } from "../../../lib/synapse.ts";
import { FaultProxy } from "./_fault_proxy.ts";
import { bootIn, EMBED, provider, ready } from "./_servers.ts";

const TEXTS = ["the quick brown fox", "canaries watch the numbers"];

/** A second provider serving another model under the same name `tiny` (a silent swap). */
const swapped = () => provider([preload(`${MODELS}/synapse-tiny-embed-f16-perturbed`, "tiny")]);

/** The gateway's config: model `remote` on an OpenAI-kind provider at `base`. */
function gatewayConfig(base: string, entry: Record<string, unknown> = {}) {
  return {
    certification: "warn",
    remote_providers: [{ id: "peer", kind: "openai", base_url: base, allow_loopback: true }],
    preload_models: [{
      engine: "remote",
      provider: "peer",
      model: "tiny",
      model_id: "remote",
      task: "embed",
      tokenizer_path: `${EMBED}/tokenizer.json`,
      ...entry,
    }],
  };
}

/** Error lines of the log, as `target: message`. */
const errors: string[] = [];
const log: LogSink = (level, target, message) => {
  if (level === "error") errors.push(`${target}: ${message}`);
};

/** Boots a Synapse with `config` in the data home under `dir`. */
function boot(dir: string, config: Record<string, unknown>): Promise<Synapse> {
  return bootIn(dir, config, { log });
}

const embed = (syn: Synapse) =>
  syn.call("embed.batch", { texts: TEXTS, model: "remote", accept_declared: true });

Deno.test("the canary sees a model swapped behind the same name and deployment: remote_identity_drift at admission, kept across a restart; a new revision serves it as a new space", async () => {
  await using p = await provider();
  await using other = await swapped();
  const proxy = new FaultProxy(p.base);
  const dir = await Deno.makeTempDir({ prefix: "synapse-canary-" });
  try {
    const config = gatewayConfig(proxy.base, { canary: { interval_ms: 100 } });
    let fingerprint: string;
    {
      const g = await boot(dir, config);
      try {
        const row = await ready(g, "remote");
        assert.equal(row.state, "ready", JSON.stringify(row));
        fingerprint = resultOf(await embed(g)).fingerprint;
        // The provider's deployment row is the same ("tiny", owned by synapse): only the numbers
        // can tell.
        proxy.upstream = other.base;
        let refused;
        for (let i = 0; i < 1500 && refused === undefined; i++) {
          const o = await embed(g);
          if (o.kind !== "result") refused = semanticError(o);
          else await new Promise((r) => setTimeout(r, 20));
        }
        assert.ok(refused !== undefined, "the canary never refused the swapped model");
        assert.equal(refused.code, "remote_identity_drift");
        assert.equal(refused.details.provider, "peer");
        assert.equal(refused.details.metric, "cosine");
        assert.ok(refused.details.measured < 0.9999, JSON.stringify(refused.details));
        const status = resultOf(await g.call("admission.status", {}));
        // deno-lint-ignore no-explicit-any
        const lane = status.lanes.find((l: any) => l.lane === "remote-remote");
        assert.equal(lane.worker.remote.canary.state, "drift");
        // The model's state says it too (/health, models.list).
        // deno-lint-ignore no-explicit-any
        const listed = resultOf(await g.call("models.list", {})).models.find((m: any) =>
          m.model_id === "remote"
        );
        assert.equal(listed.state, "remote_refusing");
        assert.equal(listed.state_reason.reason, "identity_drift");
        assert.equal(listed.state_reason.code, "remote_identity_drift");
        // Logged once, when it halted (not per refused request).
        const halted = errors.filter((l) => l.startsWith("synapse.remote: model 'remote' halted"));
        assert.equal(halted.length, 1, JSON.stringify(errors));
        assert.match(halted[0]!, /remote_identity_drift|other numbers/);
        // Putting the model back does not lift the refusal: the lane's vectors may already mix.
        proxy.upstream = p.base;
        await new Promise((r) => setTimeout(r, 300));
        assert.equal(semanticError(await embed(g)).code, "remote_identity_drift");
      } finally {
        await g.dispose();
      }
    }
    // The baseline is in the store: a restart with the swapped model behind the name refuses to
    // load it under the old fingerprint.
    proxy.upstream = other.base;
    {
      const g = await boot(dir, config);
      try {
        const row = await ready(g, "remote");
        assert.equal(row.state, "failed");
        const e = semanticError(await embed(g));
        assert.equal(e.code, "remote_identity_drift", JSON.stringify(e));
      } finally {
        await g.dispose();
      }
    }
    // A new revision is a new vector space: a new fingerprint and its own baseline.
    {
      const g = await boot(dir, gatewayConfig(proxy.base, { revision: "2026-12-swap" }));
      try {
        assert.equal((await ready(g, "remote")).state, "ready");
        const served = resultOf(await embed(g));
        assert.notEqual(served.fingerprint, fingerprint);
        const direct = resultOf(
          await other.t.syn.call("embed.batch", { texts: TEXTS, model: "tiny" }),
        );
        assert.deepEqual(served.vectors[0].vector, direct.vectors[0].vector);
      } finally {
        await g.dispose();
      }
    }
  } finally {
    await proxy.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("the canary of a Synapse provider whose fingerprint changes behind the name halts the lane remote_deployment_changed", async () => {
  await using p = await provider();
  await using other = await swapped();
  const proxy = new FaultProxy(p.base);
  const dir = await Deno.makeTempDir({ prefix: "synapse-canary-" });
  try {
    const g = await boot(dir, {
      ...gatewayConfig(proxy.base, { canary: { interval_ms: 100 } }),
      remote_providers: [{
        id: "peer",
        kind: "synapse",
        base_url: proxy.base,
        allow_loopback: true,
      }],
    });
    try {
      assert.equal((await ready(g, "remote")).state, "ready");
      resultOf(await embed(g));
      proxy.upstream = other.base;
      let status;
      for (let i = 0; i < 1500; i++) {
        status = resultOf(await g.call("admission.status", {}));
        // deno-lint-ignore no-explicit-any
        const lane = status.lanes.find((l: any) => l.lane === "remote-remote");
        if (lane.worker.remote.canary.state !== "ok") break;
        await new Promise((r) => setTimeout(r, 20));
      }
      const e = semanticError(await embed(g));
      assert.equal(e.code, "remote_deployment_changed");
      proxy.upstream = p.base;
      assert.equal(semanticError(await embed(g)).code, "remote_deployment_changed");
    } finally {
      await g.dispose();
    }
  } finally {
    await proxy.close();
    await Deno.remove(dir, { recursive: true });
  }
});
