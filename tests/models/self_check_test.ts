/**
 * The catalog self-check (docs/internals.md §10, lib/probe/self_check.ts) through the real instance: a
 * test catalog over the generated tiny models, served by a loopback "Hugging Face", installed
 * with `models.download`. A check that passes is `passed` with its `check_id`, and a restart
 * reuses its row; pinned expected values that are wrong fail it naming the input, and the model
 * then refuses `self_check_failed` and shows failed in the service status; a model whose outputs
 * are not finite fails `non_finite`; another OS build is a new key, so the check runs again; a
 * running check holds the model against `models.remove`; a check past its ceiling fails
 * `timeout`.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { loadConfig } from "../../lib/config/loader.ts";
import { createSynapse, type Synapse, type SynapseOptions } from "../../lib/synapse.ts";
import {
  type CatalogBackend,
  type CatalogModel,
  manifestDigest,
  type SelfCheckExpected,
} from "../../lib/models/catalog.ts";
import { type LogSink, nullLog } from "../../lib/log/log.ts";
import {
  SELF_CHECK_FIXTURE_REVISION,
  SELF_CHECK_INPUTS,
  selfCheckId,
} from "../../lib/probe/self_check.ts";
import { SelfCheckStore } from "../../lib/probe/self_check_store.ts";
import { serveHttp } from "../../lib/doors/http/server.ts";
import { MODELS, resultOf, semanticError } from "../_helpers.ts";

const REV = "0123456789abcdef0123456789abcdef01234567";

function sha256(path: string): string {
  return createHash("sha256").update(Deno.readFileSync(path)).digest("hex");
}

/** A loopback file server holding each model directory at Hugging Face's paths. */
function serveRepos(repos: Record<string, string>) {
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
    const m = new URL(req.url).pathname.match(/^\/([^/]+\/[^/]+)\/resolve\/[0-9a-f]{40}\/(.+)$/);
    const dir = m === null ? undefined : repos[m[1]!];
    if (m === null || dir === undefined) return new Response("not found", { status: 404 });
    try {
      return new Response(await Deno.readFile(`${dir}/${m[2]}`));
    } catch {
      return new Response("not found", { status: 404 });
    }
  });
  return {
    base: `http://127.0.0.1:${server.addr.port}`,
    [Symbol.asyncDispose]: () => server.shutdown(),
  };
}

/** The repositories the tests serve: a tiny model directory each. */
const REPOS = {
  "synapse/tiny-embed": `${MODELS}/synapse-tiny-embed`,
  "synapse/tiny-embed-nan": `${MODELS}/synapse-tiny-embed-nan`,
  "synapse/tiny-rerank": `${MODELS}/synapse-tiny-rerank`,
};

/** A catalog entry over one served repository. */
function entry(
  id: string,
  repo: keyof typeof REPOS,
  extra: { task?: "embed" | "rerank"; expected?: SelfCheckExpected } = {},
): CatalogModel {
  const dir = REPOS[repo];
  const file = (path: string) => ({
    hf_repo: repo,
    revision: REV,
    path,
    sha256: sha256(`${dir}/${path}`),
    size: Deno.statSync(`${dir}/${path}`).size,
    digest_source: "tests/models/self_check_test.ts",
  });
  const task = extra.task ?? "embed";
  const backend: CatalogBackend = {
    backend: "ort",
    files: {
      model: file("model.onnx"),
      tokenizer: file("tokenizer.json"),
      config: file("config.json"),
    },
    pooling: task === "embed" ? "mean" : "cls",
    normalize: task === "embed",
    max_tokens: 128,
    ...(extra.expected === undefined ? {} : { self_check_expected: extra.expected }),
  };
  return {
    id,
    task,
    name: id,
    description: "test",
    default_for_task: false,
    upstream: { hf_repo: repo, revision: REV },
    dims: task === "embed" ? 32 : 1,
    backends: [backend],
  };
}

interface Home extends AsyncDisposable {
  dir: string;
  start(
    catalog: CatalogModel[],
    extra?: { osBuild?: string; options?: Partial<SynapseOptions> },
  ): Promise<Synapse>;
}

/** A data home that outlives one instance (restart tests), downloading from `base`. */
async function home(base: string): Promise<Home> {
  const dir = await Deno.makeTempDir({ prefix: "synapse-selfcheck-" });
  const env = { XDG_DATA_HOME: `${dir}/data`, XDG_CONFIG_HOME: `${dir}/config`, HOME: dir };
  return {
    dir,
    async start(catalog, extra = {}) {
      const full = {
        ...env,
        SYNAPSE_CONFIG_JSON: JSON.stringify({ hf_endpoint: base }),
        ...(extra.osBuild === undefined ? {} : { SYNAPSE_OS_BUILD_OVERRIDE: extra.osBuild }),
      };
      const { config } = loadConfig({ env: full, cwd: dir });
      return await createSynapse({ config, env: full, catalog, ...extra.options });
    },
    async [Symbol.asyncDispose]() {
      await Deno.remove(dir, { recursive: true });
    },
  };
}

/** A log sink keeping the `synapse.probe` lines. */
function probeLog(): { sink: LogSink; lines: string[] } {
  const lines: string[] = [];
  return {
    lines,
    sink: (_level, target, message) => {
      if (target === "synapse.probe") lines.push(message);
    },
  };
}

/** Downloads a catalog model and waits for its job (which ends once its self-check has). */
async function install(syn: Synapse, catalogId: string) {
  const job = resultOf(await syn.call("models.download", { catalog_id: catalogId }));
  const done = await syn.loads.settled(job.job_id);
  assert.equal(done.state, "committed", JSON.stringify(done));
  return done;
}

/** The `self_check` of a catalog model in `models.catalog` and in `models.list`, asserted equal. */
async function selfCheckOf(syn: Synapse, catalogId: string) {
  const cat = resultOf(await syn.call("models.catalog", {})).models.find((
    m: { id: string },
  ) => m.id === catalogId);
  const listed = resultOf(await syn.call("models.list", {})).models.find((
    m: { model_id: string },
  ) => m.model_id === catalogId);
  assert.deepEqual(listed?.self_check, cat.backends[0].self_check);
  return cat.backends[0].self_check;
}

function storeRows(syn: Synapse, catalogId: string) {
  return new SelfCheckStore(syn.store).forLane(catalogId, "ort");
}

Deno.test("self-check: an installed catalog model passes with its check_id; a restart reuses the row and runs nothing", async () => {
  await using srv = serveRepos(REPOS);
  await using h = await home(srv.base);
  const catalog = [entry("tiny-embed", "synapse/tiny-embed")];
  let first: { state: string; check_id: string; checked_at_ms: number; duration_ms: number };
  {
    const log = probeLog();
    const syn = await h.start(catalog, { options: { log: log.sink } });
    try {
      // Before the download: pending, no key.
      assert.deepEqual(await selfCheckOfCatalog(syn, "tiny-embed"), { state: "pending" });
      await install(syn, "tiny-embed");
      first = await selfCheckOf(syn, "tiny-embed");
      assert.equal(first.state, "passed", JSON.stringify(first));
      assert.equal(typeof first.checked_at_ms, "number");
      assert.ok(first.duration_ms >= 0);
      // The key is the contract's facts of the loaded lane.
      const ready = syn.registry.resolve("tiny-embed", "embed");
      assert.equal(
        first.check_id,
        selfCheckId({
          catalog_id: "tiny-embed",
          manifest_digest: manifestDigest(catalog[0]!),
          backend: "ort",
          fingerprint: ready.fingerprint,
          engine: ready.identity,
          os_build: syn.machineProfile.os_build,
          fixture_revision: SELF_CHECK_FIXTURE_REVISION,
        }),
      );
      assert.deepEqual(log.lines, ["self-check of 'tiny-embed-ort' passed"]);
      assert.deepEqual(storeRows(syn, "tiny-embed").map((r) => [r.check_id, r.state]), [
        [first.check_id, "passed"],
      ]);
      resultOf(await syn.call("embed.query", { text: "served", model: "tiny-embed" }));
    } finally {
      await syn.dispose();
    }
  }
  {
    const log = probeLog();
    const syn = await h.start(catalog, { options: { log: log.sink } });
    try {
      const again = await selfCheckOf(syn, "tiny-embed");
      assert.deepEqual(again, first, "the row of the key is reused");
      assert.deepEqual(log.lines, [], "no check ran at this boot");
      assert.equal(storeRows(syn, "tiny-embed").length, 1);
      resultOf(await syn.call("embed.query", { text: "served", model: "tiny-embed" }));
    } finally {
      await syn.dispose();
    }
  }
});

/** `models.catalog` only (the model is not loaded yet, so models.list has no row). */
async function selfCheckOfCatalog(syn: Synapse, catalogId: string) {
  const cat = resultOf(await syn.call("models.catalog", {})).models.find((
    m: { id: string },
  ) => m.id === catalogId);
  return cat.backends[0].self_check;
}

Deno.test("self-check: pinned expected values that match pass; wrong ones fail naming the input, and the model refuses self_check_failed and shows failed", async () => {
  await using srv = serveRepos(REPOS);
  await using h = await home(srv.base);
  // The values input 0 gives on this lane, measured through the lane itself.
  let measured: number[];
  {
    const syn = await h.start([entry("probe-values", "synapse/tiny-embed")]);
    try {
      await install(syn, "probe-values");
      const ready = syn.registry.resolve("probe-values", "embed");
      const seq = ready.tokenizer.encode(SELF_CHECK_INPUTS[0]!, {
        maxTokens: ready.maxTokens,
        truncate: true,
      });
      const res = await ready.interactive.run({
        kind: "embed",
        rows: [{ ids: seq.ids, typeIds: seq.typeIds }],
      });
      const out = res.rows[0]!;
      assert.equal(out.kind, "ok");
      measured = [...(out as { values: Float32Array }).values.slice(0, 4)];
    } finally {
      await syn.dispose();
    }
  }
  const pinned = (values: number[], index = 0): SelfCheckExpected => ({
    fixture_revision: SELF_CHECK_FIXTURE_REVISION,
    tolerance: 1e-4,
    inputs: [{ index, first_values: values }],
  });
  const catalog = [
    entry("pinned-good", "synapse/tiny-embed", { expected: pinned(measured) }),
    entry("pinned-wrong", "synapse/tiny-embed", {
      expected: pinned([measured[0]! + 0.25, ...measured.slice(1)], 3),
    }),
  ];
  const syn = await h.start(catalog);
  try {
    await install(syn, "pinned-good");
    assert.equal((await selfCheckOf(syn, "pinned-good")).state, "passed");
    resultOf(await syn.call("embed.query", { text: "good", model: "pinned-good" }));

    await install(syn, "pinned-wrong");
    const failed = await selfCheckOf(syn, "pinned-wrong");
    assert.equal(failed.state, "failed", JSON.stringify(failed));
    assert.equal(failed.failed_input.index, 3);
    assert.equal(failed.failed_input.reason, "expected_values_mismatch");
    assert.match(failed.failed_input.detail, /value 0 is .*pins/);

    const refused = semanticError(
      await syn.call("embed.query", { text: "bad", model: "pinned-wrong" }),
    );
    assert.equal(refused.code, "self_check_failed");
    assert.equal(refused.class, "permanent");
    assert.deepEqual(
      {
        model_id: refused.details.model_id,
        backend: refused.details.backend,
        check_id: refused.details.check_id,
        reason: refused.details.reason,
      },
      {
        model_id: "pinned-wrong",
        backend: "ort",
        check_id: failed.check_id,
        reason: "expected_values_mismatch",
      },
    );
    assert.match(refused.message, /input 3/);
    // Every inference op resolves there: a batch of documents is refused the same way.
    const batch = semanticError(
      await syn.call("embed.batch", { model: "pinned-wrong", items: [{ id: "a", text: "x" }] }),
    );
    assert.equal(batch.code, "self_check_failed");

    // GET /health and models.list say so; the rest of the service serves on (degraded).
    const server = serveHttp(syn, { log: nullLog });
    try {
      const res = await fetch(`http://127.0.0.1:${server.port}/health`);
      const health = await res.json();
      assert.equal(res.status, 200);
      assert.equal(health.status, "degraded");
      assert.match(health.reason, /'pinned-wrong' failed \(self_check_failed\)/);
      const row = health.models.find((m: { model_id: string }) => m.model_id === "pinned-wrong");
      assert.equal(row.state, "failed");
      assert.equal(row.state_reason.reason, "self_check_failed");
      assert.equal(row.state_reason.code, "self_check_failed");
      assert.equal(row.state_reason.details.check_id, failed.check_id);
      assert.equal(
        health.models.find((m: { model_id: string }) => m.model_id === "pinned-good").state,
        "ready",
      );
      // The HTTP door answers the refusal 424 (status table).
      const http = await fetch(`http://127.0.0.1:${server.port}/v1/ops/embed.query`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ text: "bad", model: "pinned-wrong" }),
      });
      assert.equal(http.status, 424);
      assert.equal((await http.json()).result.error.code, "self_check_failed");
    } finally {
      await server.shutdown();
    }
    const listed = resultOf(await syn.call("models.list", {})).models.find((
      m: { model_id: string },
    ) => m.model_id === "pinned-wrong");
    assert.equal(listed.state, "failed");
    resultOf(await syn.call("embed.query", { text: "good", model: "pinned-good" }));
  } finally {
    await syn.dispose();
  }
  // Permanent for its key: the next boot reads the failed row and refuses at once.
  {
    const log = probeLog();
    const again = await h.start(catalog, { options: { log: log.sink } });
    try {
      assert.deepEqual(log.lines, []);
      assert.equal((await selfCheckOf(again, "pinned-wrong")).state, "failed");
      assert.equal(
        semanticError(await again.call("embed.query", { text: "bad", model: "pinned-wrong" }))
          .code,
        "self_check_failed",
      );
    } finally {
      await again.dispose();
    }
  }
});

Deno.test("self-check: a model whose outputs are not finite fails non_finite on the input that holds the poison token", async () => {
  await using srv = serveRepos(REPOS);
  await using h = await home(srv.base);
  const syn = await h.start([entry("tiny-nan", "synapse/tiny-embed-nan")]);
  try {
    await install(syn, "tiny-nan");
    const failed = await selfCheckOf(syn, "tiny-nan");
    assert.equal(failed.state, "failed", JSON.stringify(failed));
    const poisoned = SELF_CHECK_INPUTS.findIndex((t) => /\bpoison\b/.test(t));
    assert.ok(poisoned > 0);
    assert.deepEqual(
      [failed.failed_input.index, failed.failed_input.reason],
      [poisoned, "non_finite"],
    );
    const refused = semanticError(
      await syn.call("embed.query", { text: "any text", model: "tiny-nan" }),
    );
    assert.equal(refused.code, "self_check_failed");
    assert.equal(refused.details.reason, "non_finite");
  } finally {
    await syn.dispose();
  }
});

Deno.test("self-check: another OS build is a new key, so the check runs again; the old row stays", async () => {
  await using srv = serveRepos(REPOS);
  await using h = await home(srv.base);
  const catalog = [entry("tiny-embed", "synapse/tiny-embed")];
  let firstId: string;
  {
    const syn = await h.start(catalog, { osBuild: "Linux 6.1.0-test-a" });
    try {
      await install(syn, "tiny-embed");
      const sc = await selfCheckOf(syn, "tiny-embed");
      assert.equal(sc.state, "passed");
      firstId = sc.check_id;
    } finally {
      await syn.dispose();
    }
  }
  const log = probeLog();
  const syn = await h.start(catalog, {
    osBuild: "Linux 6.1.0-test-b",
    options: { log: log.sink },
  });
  try {
    assert.equal(syn.machineProfile.os_build, "Linux 6.1.0-test-b");
    const sc = await selfCheckOf(syn, "tiny-embed");
    assert.equal(sc.state, "passed");
    assert.notEqual(sc.check_id, firstId);
    assert.deepEqual(log.lines, ["self-check of 'tiny-embed-ort' passed"], "it ran at boot");
    assert.deepEqual(
      new Set(storeRows(syn, "tiny-embed").map((r) => r.check_id)),
      new Set([firstId, sc.check_id]),
    );
  } finally {
    await syn.dispose();
  }
});

Deno.test("self-check: a rerank lane passes (finite scores, alone and batched in input order)", async () => {
  await using srv = serveRepos(REPOS);
  await using h = await home(srv.base);
  const syn = await h.start([entry("tiny-rerank", "synapse/tiny-rerank", { task: "rerank" })]);
  try {
    await install(syn, "tiny-rerank");
    const sc = await selfCheckOf(syn, "tiny-rerank");
    assert.equal(sc.state, "passed", JSON.stringify(sc));
    resultOf(
      await syn.call("rerank.score", { model: "tiny-rerank", query: "q", candidates: ["a", "b"] }),
    );
  } finally {
    await syn.dispose();
  }
});

Deno.test("self-check: a llama generation lane passes (a greedy generation, non-empty and the same twice)", async () => {
  const dir = `${MODELS}/synapse-tiny-llama`;
  await using srv = serveRepos({ "synapse/tiny-llama": dir });
  await using h = await home(srv.base);
  const gguf = {
    hf_repo: "synapse/tiny-llama",
    revision: REV,
    path: "model.gguf",
    sha256: sha256(`${dir}/model.gguf`),
    size: Deno.statSync(`${dir}/model.gguf`).size,
    digest_source: "tests/models/self_check_test.ts",
  };
  const log = probeLog();
  const syn = await h.start([{
    id: "tiny-gen",
    task: "generate",
    name: "tiny-gen",
    description: "test",
    default_for_task: false,
    upstream: { hf_repo: "synapse/tiny-llama", revision: REV },
    dims: 0,
    backends: [{
      backend: "llama",
      files: { model: gguf },
      pooling: "last_token",
      normalize: false,
      max_tokens: 512,
    }],
  }], {
    // A generation on this machine's shared cores can take seconds: the test holds the lane to
    // what it checks, not to the 2000 ms ceiling (the timeout test below covers that).
    options: { log: log.sink, selfCheckCeilingMs: 600_000 },
  });
  try {
    await install(syn, "tiny-gen");
    const sc = await selfCheckOf(syn, "tiny-gen");
    assert.equal(sc.state, "passed", JSON.stringify(sc) + log.lines.join("\n"));
    assert.deepEqual(log.lines, ["self-check of 'tiny-gen-llama' passed"]);
    // (Serving it is the certification gate's business: a llama lane needs a certificate.)
  } finally {
    await syn.dispose();
  }
});

Deno.test("self-check: while it runs, models.remove is refused with a holder of kind self_check; then it passes", async () => {
  await using srv = serveRepos(REPOS);
  await using h = await home(srv.base);
  const syn = await h.start([entry("tiny-embed", "synapse/tiny-embed")]);
  try {
    // Every slot of the ORT interactive scheduler (shared with the test models), so the check
    // waits in the queue once the model has loaded.
    const lane = syn.registry.resolve(undefined, "embed").interactive;
    const slots = [];
    for (let i = 0; i < syn.config.inline.max_concurrent_workers; i++) {
      slots.push(await lane.reserve());
    }
    const job = resultOf(await syn.call("models.download", { catalog_id: "tiny-embed" }));
    const selfCheck = syn.loads.selfCheck!;
    for (let i = 0; i < 1200 && selfCheck.holders("tiny-embed").length === 0; i++) {
      await new Promise((r) => setTimeout(r, 25));
    }
    const [holder] = selfCheck.holders("tiny-embed");
    assert.equal(holder?.kind, "self_check");
    const inUse = semanticError(await syn.call("models.remove", { catalog_id: "tiny-embed" }));
    assert.equal(inUse.code, "model_in_use");
    assert.equal(inUse.details.catalog_id, "tiny-embed");
    assert.ok(
      inUse.details.holders.some((x: { kind: string; check_id?: string }) =>
        x.kind === "self_check" && x.check_id === holder!.check_id
      ),
      JSON.stringify(inUse.details.holders),
    );
    assert.deepEqual(await selfCheckOf(syn, "tiny-embed"), {
      state: "pending",
      check_id: holder!.check_id,
    });
    for (const s of slots) s.release();
    await syn.loads.settled(job.job_id);
    assert.equal((await selfCheckOf(syn, "tiny-embed")).state, "passed");
    assert.deepEqual(selfCheck.holders("tiny-embed"), []);
    resultOf(await syn.call("models.remove", { catalog_id: "tiny-embed" }));
    // Removed: nothing is loaded, so nothing is known of its lane here.
    assert.deepEqual(await selfCheckOfCatalog(syn, "tiny-embed"), { state: "pending" });
  } finally {
    await syn.dispose();
  }
});

Deno.test("self-check: a check past its ceiling (twice) fails timeout; the next boot runs it again", async () => {
  await using srv = serveRepos(REPOS);
  await using h = await home(srv.base);
  const catalog = [entry("tiny-embed", "synapse/tiny-embed")];
  let checkId: string;
  {
    // A ceiling no engine work fits in (tests only): the first piece of work passes it.
    const log = probeLog();
    const syn = await h.start(catalog, { options: { selfCheckCeilingMs: 0, log: log.sink } });
    try {
      await install(syn, "tiny-embed");
      const sc = await selfCheckOf(syn, "tiny-embed");
      assert.equal(sc.state, "failed");
      assert.deepEqual([sc.failed_input.index, sc.failed_input.reason], [0, "timeout"]);
      checkId = sc.check_id;
      assert.deepEqual(log.lines, [
        "the self-check of 'tiny-embed-ort' ran out of time; once more",
        "self-check of 'tiny-embed-ort' failed on input 0 (timeout)",
      ]);
      assert.equal(
        semanticError(await syn.call("embed.query", { text: "x", model: "tiny-embed" })).details
          .reason,
        "timeout",
      );
    } finally {
      await syn.dispose();
    }
  }
  // A timeout is no fault of the numbers: its row is not reused, the check runs at this boot.
  const syn = await h.start(catalog);
  try {
    const sc = await selfCheckOf(syn, "tiny-embed");
    assert.equal(sc.state, "passed", JSON.stringify(sc));
    assert.equal(sc.check_id, checkId, "the same key");
    assert.deepEqual(storeRows(syn, "tiny-embed").map((r) => r.state), ["passed"]);
    resultOf(await syn.call("embed.query", { text: "x", model: "tiny-embed" }));
  } finally {
    await syn.dispose();
  }
});
