/**
 * A durable job on a remote lane whose provider refuses the credentials mid-job (contract §1
 * `job.resume`, §7 `paused_needs_reauth`; docs/operations.md "job.resume"): the job pauses with
 * its computed pages readable, `job.resume` after the key file is fixed finishes it with exactly
 * the provider's vectors, every id once; not resumed by the deadline it is `needs_reauth_expired`;
 * a restart ends a pause `module_restarted`. Real servers on loopback, a real key file.
 */
import assert from "node:assert/strict";
import { resultOf, semanticError } from "../../_helpers.ts";
import { loadConfig } from "../../../lib/config/loader.ts";
import { createSynapse } from "../../../lib/synapse.ts";
import type { Synapse } from "../../../lib/synapse.ts";
import { FaultProxy } from "./_fault_proxy.ts";
import { gateway, provider } from "./_servers.ts";

const ITEMS = Array.from(
  { length: 60 },
  (_, i) => ({ id: `p${i}`, text: `passage ${i} ${"word ".repeat(i % 5)}` }),
);

/**
 * Small quanta and pages, so the refusal lands mid-job with pages committed before it. (A cap
 * under the 256-token floor of a quantum once failed every job `internal_error`: a regression
 * test too.)
 */
const JOB_CONFIG = {
  inline: { max_items: 8 },
  jobs: { result_page_bytes: 2048, bulk_quantum_tokens: 40 },
};

/** A 0600 key file holding `key`, in a fresh directory. */
async function keyFile(key: string): Promise<{ path: string; dir: string }> {
  const dir = await Deno.makeTempDir({ prefix: "synapse-key-" });
  const path = `${dir}/provider.key`;
  await Deno.writeTextFile(path, `${key}\n`, { mode: 0o600 });
  return { path, dir };
}

/** Polls embed.result until `done(page)`; returns that page. */
// deno-lint-ignore no-explicit-any
async function until(syn: Synapse, jobId: string, done: (page: any) => boolean): Promise<any> {
  for (let i = 0; i < 6000; i++) {
    const page = resultOf(await syn.call("embed.result", { job_id: jobId }));
    if (done(page)) return page;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`job ${jobId} did not reach the awaited state in 2 minutes`);
}

/** Every vector on the job's committed pages. */
async function vectorsOf(syn: Synapse, jobId: string, pageCount: number) {
  const out: { id: string; vector: number[] }[] = [];
  for (let page = 0; page < pageCount; page++) {
    out.push(...resultOf(await syn.call("embed.result", { job_id: jobId, page })).vectors);
  }
  return out;
}

Deno.test("a provider's 401 mid-job pauses the job (pages so far readable); job.resume after the key file is fixed finishes it with the provider's vectors, every id once", async () => {
  await using p = await provider();
  const local = resultOf(await p.t.syn.call("embed.batch", { items: ITEMS, model: "tiny" }));
  const proxy = new FaultProxy(p.base);
  const key = await keyFile("sk-first");
  try {
    proxy.requireKey = "sk-first";
    await using g = await gateway(
      proxy.base,
      { api_key_file: key.path },
      {},
      "synapse",
      JOB_CONFIG,
    );
    // The key is rotated at the provider after the job's third request.
    const start = proxy.seen;
    proxy.onRequest = (n) => {
      if (n === start + 3) proxy.requireKey = "sk-second";
    };
    const job = resultOf(
      await g.syn.call("embed.batch", {
        items: ITEMS,
        model: "remote",
        request_key: "reauth-job",
        accept_declared: true,
      }),
    );
    const paused = await until(
      g.syn,
      job.job_id,
      (x) => x.state !== "queued" && x.state !== "running",
    );
    assert.equal(paused.state, "paused_needs_reauth");
    assert.equal(paused.error.code, "needs_reauth");
    assert.equal(paused.error.details.http_status, 401);
    assert.equal(paused.resume_deadline_ms - paused.paused_at_ms, 86_400_000);
    assert.ok(paused.items_done > 0 && paused.items_done < ITEMS.length, "paused mid-job");
    const before = await vectorsOf(g.syn, job.job_id, paused.page_count);
    assert.equal(
      before.length,
      paused.items_done,
      "the pages computed before the pause are readable",
    );

    // Resumed with the key still refused: it pauses again, later.
    const again = resultOf(await g.syn.call("job.resume", { job_id: job.job_id }));
    assert.equal(again.resumed, true);
    const repaused = await until(
      g.syn,
      job.job_id,
      (x) => x.state === "paused_needs_reauth" && x.paused_at_ms > paused.paused_at_ms,
    );
    assert.equal(repaused.items_done, paused.items_done);

    // The key file is fixed: read again at the next request, no restart.
    await Deno.writeTextFile(key.path, "sk-second\n", { mode: 0o600 });
    const resumed = resultOf(await g.syn.call("job.resume", { job_id: job.job_id }));
    assert.equal(resumed.resumed, true);
    assert.equal(resumed.state, "running");
    const done = await until(
      g.syn,
      job.job_id,
      (x) => x.state !== "queued" && x.state !== "running",
    );
    assert.equal(done.state, "done");
    assert.equal(done.error, undefined);
    const vectors = await vectorsOf(g.syn, job.job_id, done.page_count);
    assert.deepEqual(vectors.map((v) => v.id).sort(), ITEMS.map((x) => x.id).sort());
    const byId = new Map(local.vectors.map((v: { id: string }) => [v.id, v]));
    for (const v of vectors) {
      assert.deepEqual(v.vector, (byId.get(v.id) as { vector: number[] }).vector, v.id);
    }
    assert.equal(proxy.lastAuthorization, "Bearer sk-second");

    // Resuming a finished job, or an unknown one, is the caller's mistake.
    const finished = semanticError(await g.syn.call("job.resume", { job_id: job.job_id }));
    assert.equal(finished.code, "invalid_request");
    assert.equal(finished.details.reason, "job_not_paused");
    assert.equal(finished.details.state, "done");
    const unknown = semanticError(await g.syn.call("job.resume", { job_id: "job_nope" }));
    assert.equal(unknown.code, "invalid_request");
    assert.equal(unknown.details.field, "job_id");
    const text = JSON.stringify(resultOf(await g.syn.call("embed.result", { job_id: job.job_id })));
    assert.ok(!text.includes("sk-first") && !text.includes("sk-second"), "no key in a job page");
  } finally {
    proxy.onRequest = undefined;
    await proxy.close();
    await Deno.remove(key.dir, { recursive: true });
  }
});

Deno.test("a paused job not resumed by jobs.resume_deadline_ms is failed_permanent needs_reauth_expired; a stop while paused ends promptly and the next boot fails the job module_restarted", async () => {
  await using p = await provider();
  const proxy = new FaultProxy(p.base);
  const key = await keyFile("sk-first");
  try {
    proxy.requireKey = "sk-first";
    {
      await using g = await gateway(proxy.base, { api_key_file: key.path }, {}, "synapse", {
        inline: { max_items: 8 },
        jobs: { resume_deadline_ms: 400 },
      });
      proxy.requireKey = "sk-other";
      const job = resultOf(
        await g.syn.call("embed.batch", {
          items: ITEMS,
          model: "remote",
          request_key: "expiring",
          accept_declared: true,
        }),
      );
      const expired = await until(g.syn, job.job_id, (x) => x.state.startsWith("failed"));
      assert.equal(expired.state, "failed_permanent");
      assert.equal(expired.error.code, "needs_reauth_expired");
      const late = semanticError(await g.syn.call("job.resume", { job_id: job.job_id }));
      assert.equal(late.code, "needs_reauth_expired");
    }

    // Paused when the instance stops: dispose does not wait for the pause; the next boot (same
    // data home) fails the job module_restarted, and its key mints a fresh job.
    proxy.requireKey = "sk-first";
    const g = await gateway(proxy.base, { api_key_file: key.path }, {}, "synapse", {
      inline: { max_items: 8 },
    });
    proxy.requireKey = "sk-other";
    try {
      const job = resultOf(
        await g.syn.call("embed.batch", {
          items: ITEMS,
          model: "remote",
          request_key: "paused-at-stop",
          accept_declared: true,
        }),
      );
      await until(g.syn, job.job_id, (x) => x.state === "paused_needs_reauth");
      let guard: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([
        g.syn.dispose(),
        new Promise((_, reject) => {
          guard = setTimeout(() => reject(new Error("dispose waited on a paused job")), 60_000);
        }),
      ]);
      clearTimeout(guard);
      const env = {
        XDG_DATA_HOME: `${g.dir}/data`,
        XDG_CONFIG_HOME: `${g.dir}/config`,
        HOME: g.dir,
        SYNAPSE_CONFIG_JSON: JSON.stringify({ certification: "warn" }),
      };
      const { config } = loadConfig({ env, cwd: g.dir });
      const next = await createSynapse({ config, env });
      try {
        const after = resultOf(await next.call("embed.result", { job_id: job.job_id }));
        assert.equal(after.state, "failed_transient");
        assert.equal(after.error.code, "module_restarted");
        const resume = semanticError(await next.call("job.resume", { job_id: job.job_id }));
        assert.equal(resume.details.reason, "job_not_paused");
      } finally {
        await next.dispose();
      }
    } finally {
      await g[Symbol.asyncDispose]();
    }
  } finally {
    await proxy.close();
    await Deno.remove(key.dir, { recursive: true });
  }
});

Deno.test("a key refused while the model loads fails the model needs_reauth, saying a restart is what brings it back (no request or job.resume can)", async () => {
  await using p = await provider();
  const proxy = new FaultProxy(p.base);
  const key = await keyFile("sk-first");
  try {
    proxy.requireKey = "sk-other";
    await using g = await gateway(proxy.base, { api_key_file: key.path });
    const e = semanticError(
      await g.syn.call("embed.batch", { texts: ["a"], model: "remote", accept_declared: true }),
    );
    assert.equal(e.code, "needs_reauth");
    assert.match(e.message, /Cannot load model 'remote'/);
    assert.match(e.message, /restart the server/);
    assert.doesNotMatch(e.message, /job\.resume/);
    assert.ok(!e.message.includes(key.path), "the key file's path is not in the message");
    assert.equal(e.details.http_status, 401);
  } finally {
    await proxy.close();
    await Deno.remove(key.dir, { recursive: true });
  }
});
