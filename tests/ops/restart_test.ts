/**
 * A real server process, SIGKILLed in the middle of a durable job, then restarted on the same
 * store (contract.md §8, design.md: module_restarted is transient and safe to retry).
 */
import assert from "node:assert/strict";
import { cosine, MINILM, ROOT } from "../_helpers.ts";

interface Server {
  child: Deno.ChildProcess;
  base: string;
}

async function startServer(env: Record<string, string>): Promise<Server> {
  const child = new Deno.Command(`${ROOT}/ck-synapse`, {
    args: ["serve", "--http", "127.0.0.1:0"],
    env,
    clearEnv: true,
    stdin: "null",
    stdout: "piped",
    stderr: "null",
  }).spawn();
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  while (true) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`server exited before listening: ${buf}`);
    buf += value;
    const m = buf.match(/listening on (http:\/\/\S+)/);
    if (m) {
      (async () => {
        while (!(await reader.read()).done) { /* drain */ }
      })();
      const base = m[1]!;
      // Wait for the model.
      for (let i = 0; i < 300; i++) {
        const h = await fetch(`${base}/health`);
        const body = await h.json();
        if (body.status === "ok") return { child, base };
        await new Promise((r) => setTimeout(r, 50));
      }
      throw new Error("model never became ready");
    }
  }
}

// deno-lint-ignore no-explicit-any
async function call(base: string, method: string, params: unknown): Promise<any> {
  const res = await fetch(`${base}/v1/ops/${method}`, {
    method: "POST",
    body: JSON.stringify(params),
  });
  const body = await res.json();
  if (!body.result) throw new Error(JSON.stringify(body));
  return body.result;
}

// deno-lint-ignore no-explicit-any
async function waitDone(base: string, jobId: string): Promise<any> {
  for (let i = 0; i < 3000; i++) {
    const r = await call(base, "embed.result", { job_id: jobId });
    if (r.error && !r.job_id) throw new Error(JSON.stringify(r));
    if (r.state !== "queued" && r.state !== "running") return r;
    await new Promise((res) => setTimeout(res, 20));
  }
  throw new Error("job did not finish");
}

// deno-lint-ignore no-explicit-any
async function pages(base: string, jobId: string, count: number): Promise<any[]> {
  const out = [];
  for (let p = 0; p < count; p++) {
    out.push(await call(base, "embed.result", { job_id: jobId, page: p }));
  }
  return out;
}

Deno.test("a job killed with SIGKILL is module_restarted after restart; its pages survive; the same key runs once more", async () => {
  const dir = await Deno.makeTempDir({ prefix: "synapse-restart-" });
  const env = {
    PATH: Deno.env.get("PATH") ?? "/usr/bin:/bin",
    HOME: dir,
    XDG_DATA_HOME: `${dir}/data`,
    XDG_CONFIG_HOME: `${dir}/config`,
    SYNAPSE_CONFIG_JSON: JSON.stringify({
      inline: { max_items: 8 },
      jobs: { result_page_bytes: 65536 },
      preload_models: [{
        engine: "ort",
        model_path: MINILM,
        tokenizer_path: `${MINILM}/tokenizer.json`,
        model_id: "minilm",
      }],
    }),
  };
  const items = Array.from({ length: 240 }, (_, i) => ({
    id: `doc-${i}`,
    text: `document ${i} ` + "about the licence terms ".repeat(4 + (i % 9)),
  }));
  let server = await startServer(env);
  try {
    const gen1 = (await call(server.base, "admission.status", {})).module_generation;
    const job = await call(server.base, "embed.batch", { items, request_key: "nightly-index" });
    // Kill once at least two pages are committed and the job is still running.
    let before;
    for (let i = 0; i < 3000; i++) {
      before = await call(server.base, "embed.result", { job_id: job.job_id });
      if (before.page_count >= 2 && before.state === "running") break;
      await new Promise((r) => setTimeout(r, 5));
    }
    assert.equal(before.state, "running", "the job was still running when killed");
    const committed = await pages(server.base, job.job_id, before.page_count);
    server.child.kill("SIGKILL");
    await server.child.status;

    server = await startServer(env);
    const status = await call(server.base, "admission.status", {});
    assert.equal(status.module_generation, gen1 + 1);
    assert.equal(status.jobs_inherited, 1);
    const old = await call(server.base, "embed.result", { job_id: job.job_id });
    assert.equal(old.state, "failed_transient");
    assert.equal(old.error.code, "module_restarted");
    assert.equal(old.error.class, "transient");
    assert.equal(old.error.safe_to_retry_same_request, true);
    assert.ok(old.page_count >= committed.length);
    const after = await pages(server.base, job.job_id, committed.length);
    for (let p = 0; p < committed.length; p++) {
      assert.deepEqual(after[p].vectors, committed[p].vectors, `page ${p} intact`);
    }

    // Same key, same items: exactly one new job, and its results are complete.
    const again = await call(server.base, "embed.batch", { items, request_key: "nightly-index" });
    assert.notEqual(again.job_id, job.job_id);
    assert.equal(again.attached, false);
    const third = await call(server.base, "embed.batch", { items, request_key: "nightly-index" });
    assert.equal(third.job_id, again.job_id);
    assert.equal(third.attached, true);
    const done = await waitDone(server.base, again.job_id);
    assert.equal(done.state, "done");
    const resumed = (await pages(server.base, again.job_id, done.page_count)).flatMap((p) =>
      p.vectors
    );
    assert.equal(resumed.length, items.length);
    // Equal to a clean run of the same items under another key.
    const clean = await call(server.base, "embed.batch", { items, request_key: "clean-run" });
    const cleanDone = await waitDone(server.base, clean.job_id);
    const cleanVectors = new Map(
      (await pages(server.base, clean.job_id, cleanDone.page_count)).flatMap((p) => p.vectors)
        // deno-lint-ignore no-explicit-any
        .map((v: any) => [v.id, v.vector]),
    );
    for (const v of resumed) assert.ok(cosine(v.vector, cleanVectors.get(v.id)!) >= 0.99999);
    // And the pages committed before the kill agree with the clean run too.
    for (const v of committed.flatMap((p) => p.vectors)) {
      assert.ok(cosine(v.vector, cleanVectors.get(v.id)!) >= 0.99999);
    }
  } finally {
    server.child.kill("SIGKILL");
    await server.child.status;
    await Deno.remove(dir, { recursive: true });
  }
});
