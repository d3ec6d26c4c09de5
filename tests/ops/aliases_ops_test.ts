/**
 * Issue 19 items 1–2 end to end, with a real store, real onnxruntime and the real HTTP door:
 * `alias.declare` bumps the epoch and the next envelope of the served fingerprint names the
 * equivalent; `alias.retract` flips `aliases.check_index` to `migration_required` naming the pair
 * (also between two calls of one client); the ops refuse without `alias_admin_enabled`; rows and
 * epoch survive a restart; concurrent changes keep the epoch monotonic; `POST /v1/ops/...` serves
 * them (the owner's key for the mutating two).
 */
import assert from "node:assert/strict";
import { loadConfig } from "../../lib/config/loader.ts";
import { nullLog } from "../../lib/log/log.ts";
import { createSynapse, type Synapse } from "../../lib/synapse.ts";
import { serveHttp } from "../../lib/doors/http/server.ts";
import { sha256Hex } from "../../lib/identity/sha256.ts";
import { channelError, MODELS, preload, resultOf, semanticError } from "../_helpers.ts";

const EMBED = "tiny";
const RERANK = "tiny-rerank";
const PRELOADS = [
  preload(`${MODELS}/synapse-tiny-embed`, EMBED),
  preload(`${MODELS}/synapse-tiny-rerank`, RERANK, { task: "rerank" }),
];
const OTHER = sha256Hex("another fingerprint");
const THIRD = sha256Hex("a third fingerprint");

/** One instance over the data home `dir` (a restart is another call with the same dir). */
async function start(dir: string, admin = true): Promise<Synapse> {
  const env = {
    XDG_DATA_HOME: `${dir}/data`,
    XDG_CONFIG_HOME: `${dir}/config`,
    HOME: dir,
    SYNAPSE_CONFIG_JSON: JSON.stringify({
      certification: "warn",
      alias_admin_enabled: admin,
      preload_models: PRELOADS,
    }),
  };
  const { config } = loadConfig({ env, cwd: dir });
  const syn = await createSynapse({ config, env, log: nullLog });
  await syn.modelsSettled;
  for (const m of syn.registry.list()) {
    assert.equal(m.state, "ready", `${m.modelId}: ${m.error?.message}`);
  }
  return syn;
}

async function withDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "synapse-aliases-" });
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

// deno-lint-ignore no-explicit-any
async function query(syn: Synapse): Promise<any> {
  return resultOf(await syn.call("embed.query", { model: EMBED, text: "the river is calm" }));
}

Deno.test("alias.declare → epoch bump → equivalent_to on the next envelope → retract → check_index migration_required", async () => {
  await withDir(async (dir) => {
    const syn = await start(dir);
    try {
      const q0 = await query(syn);
      const fp: string = q0.fingerprint;
      assert.equal(q0.table_epoch, 0);
      assert.deepEqual(q0.equivalent_to, []);
      const list0 = resultOf(await syn.call("models.list", {}));
      assert.equal(list0.table_epoch, 0);
      assert.deepEqual(list0.alias_rows, []);

      const declared = resultOf(
        await syn.call("alias.declare", {
          left: fp,
          right: OTHER,
          evidence: { note: "same weights, other runtime" },
        }),
      );
      assert.equal(declared.changed, true);
      assert.equal(declared.table_epoch, 1);
      assert.equal(declared.module_generation, syn.context.moduleGeneration);

      const q1 = await query(syn);
      assert.equal(q1.fingerprint, fp, "an alias never changes a fingerprint");
      assert.equal(q1.table_epoch, 1);
      assert.deepEqual(q1.equivalent_to, [OTHER]);
      // Another fingerprint served by the module has no equivalents.
      const r = resultOf(
        await syn.call("rerank.score", { model: RERANK, query: "q", candidates: ["a", "b"] }),
      );
      assert.equal(r.table_epoch, 1);
      assert.deepEqual(r.equivalent_to, []);
      assert.deepEqual(syn.context.equivalentTo(OTHER), [fp]);
      assert.deepEqual(syn.context.aliases.equivalentsOf(fp, syn.context.now()), [
        { fingerprint: OTHER, source: "declared" },
      ]);

      // The same declaration again (the other field names, the other order) changes nothing.
      const again = resultOf(
        await syn.call("alias.declare", { fingerprint_a: OTHER, fingerprint_b: fp }),
      );
      assert.deepEqual([again.changed, again.table_epoch], [false, 1]);

      const list1 = resultOf(await syn.call("models.list", {}));
      assert.equal(list1.table_epoch, 1);
      assert.equal(list1.alias_rows.length, 1);
      const [a, b] = [fp, OTHER].sort();
      assert.deepEqual(list1.alias_rows[0], {
        fingerprint_a: a,
        fingerprint_b: b,
        valid_from_ms: list1.alias_rows[0].valid_from_ms,
        valid_to_ms: null,
        evidence: { source: "declared", note: "same weights, other runtime" },
      });

      // One client checks its index, another retracts, the first checks again.
      const before = resultOf(
        await syn.call("aliases.check_index", {
          index_fingerprint: fp,
          provenance_set: [fp, OTHER],
        }),
      );
      assert.deepEqual(before, {
        module_generation: syn.context.moduleGeneration,
        table_epoch: 1,
        status: "valid",
      });
      // A fingerprint never aliased with the index's: another space mixed in.
      const mixed = resultOf(
        await syn.call("aliases.check_index", {
          index_fingerprint: fp,
          provenance_set: [fp, OTHER, THIRD],
        }),
      );
      assert.equal(mixed.status, "migration_required");
      assert.deepEqual(mixed.not_equivalent, [THIRD]);
      assert.equal(mixed.retracted_pair, undefined);
      assert.equal(mixed.rebuild_target, fp);
      const retracted = resultOf(
        await syn.call("alias.retract", {
          left: OTHER,
          right: fp,
          evidence: { why: "engine bug" },
        }),
      );
      assert.deepEqual([retracted.changed, retracted.table_epoch], [true, 2]);
      const after = resultOf(
        await syn.call("aliases.check_index", {
          index_fingerprint: fp,
          provenance_set: [fp, OTHER],
        }),
      );
      assert.equal(after.status, "migration_required");
      assert.equal(after.table_epoch, 2);
      assert.equal(after.retracted_pair.fingerprint_a, a);
      assert.equal(after.retracted_pair.fingerprint_b, b);
      assert.equal(typeof after.retracted_pair.valid_to_ms, "number");
      assert.equal(after.rebuild_target, fp, "the index fingerprint is still served");
      assert.equal(after.rebuild_target_served, true);
      // An index of the other fingerprint alone never mixed the pair.
      const alone = resultOf(
        await syn.call("aliases.check_index", {
          index_fingerprint: OTHER,
          provenance_set: [OTHER],
        }),
      );
      assert.equal(alone.status, "valid");
      // An index kept under OTHER with vectors of fp: nothing serves OTHER.
      const unserved = resultOf(
        await syn.call("aliases.check_index", { index_fingerprint: OTHER, provenance_set: [fp] }),
      );
      assert.equal(unserved.status, "migration_required");
      assert.equal(unserved.rebuild_target, OTHER);
      assert.equal(unserved.rebuild_target_served, false);

      const q2 = await query(syn);
      assert.equal(q2.table_epoch, 2);
      assert.deepEqual(q2.equivalent_to, []);
      const again2 = resultOf(await syn.call("alias.retract", { left: fp, right: OTHER }));
      assert.deepEqual([again2.changed, again2.table_epoch], [false, 2]);
      const rows = resultOf(await syn.call("models.list", {})).alias_rows;
      assert.equal(rows.length, 1, "retraction never deletes");
      assert.equal(typeof rows[0].valid_to_ms, "number");
      assert.deepEqual(rows[0].evidence.retraction, { why: "engine bug" });

      // Declared again: a new row, and the index is valid again.
      assert.equal(
        resultOf(await syn.call("alias.declare", { left: fp, right: OTHER })).table_epoch,
        3,
      );
      assert.equal(resultOf(await syn.call("models.list", {})).alias_rows.length, 2);
      const revived = resultOf(
        await syn.call("aliases.check_index", {
          index_fingerprint: fp,
          provenance_set: [fp, OTHER],
        }),
      );
      assert.equal(revived.status, "valid");
      assert.equal(revived.table_epoch, 3);
    } finally {
      await syn.dispose();
    }
  });
});

Deno.test("alias.declare / alias.retract refuse without alias_admin_enabled; check_index still answers", async () => {
  await withDir(async (dir) => {
    const syn = await start(dir, false);
    try {
      const fp = (await query(syn)).fingerprint;
      for (const method of ["alias.declare", "alias.retract"]) {
        const e = semanticError(await syn.call(method, { left: fp, right: OTHER }));
        assert.equal(e.code, "invalid_request");
        assert.equal(e.class, "permanent");
        assert.equal(e.details.reason, "alias_admin_disabled");
        assert.equal(e.details.config_key, "alias_admin_enabled");
        assert.match(e.message, /alias_admin_enabled is false/);
      }
      assert.equal(syn.context.tableEpoch(), 0);
      const ok = resultOf(
        await syn.call("aliases.check_index", { index_fingerprint: fp, provenance_set: [fp] }),
      );
      assert.equal(ok.status, "valid");
    } finally {
      await syn.dispose();
    }
  });
});

Deno.test("alias ops refuse bad fingerprints naming the field", async () => {
  await withDir(async (dir) => {
    const syn = await start(dir);
    try {
      const fp = (await query(syn)).fingerprint;
      const cases: [string, Record<string, unknown>, string][] = [
        ["alias.declare", { left: fp, right: fp }, "right"],
        ["alias.declare", { fingerprint_a: fp, fingerprint_b: fp }, "fingerprint_b"],
        ["alias.declare", { left: "xyz", right: fp }, "left"],
        ["alias.declare", { left: fp, right: `${OTHER.slice(0, 63)}g` }, "right"],
        ["alias.declare", { left: fp }, "fingerprint_b"],
        ["alias.declare", { left: fp, fingerprint_a: OTHER, right: THIRD }, "fingerprint_a"],
        [
          "alias.declare",
          { left: fp, right: OTHER, evidence: { source: "probe" } },
          "evidence.source",
        ],
        ["alias.declare", { left: fp, right: OTHER, evidence: "x" }, "evidence"],
        ["alias.retract", { left: 7, right: OTHER }, "left"],
        ["alias.declare", { left: fp, right: OTHER, extra: 1 }, "extra"],
        [
          "aliases.check_index",
          { index_fingerprint: "nope", provenance_set: [] },
          "index_fingerprint",
        ],
        [
          "aliases.check_index",
          { index_fingerprint: fp, provenance_set: [fp, "bad"] },
          "provenance_set.1",
        ],
        ["aliases.check_index", { index_fingerprint: fp }, "provenance_set"],
      ];
      for (const [method, params, field] of cases) {
        const o = await syn.call(method, params);
        const body = channelError(o);
        assert.equal(body.code, "invalid_request", `${method} ${JSON.stringify(params)}`);
        assert.ok(
          o.kind === "channel" && (o.error.details as { field?: string })?.field === field,
          `${method} ${JSON.stringify(params)}: ${body.message}`,
        );
      }
      assert.equal(syn.context.tableEpoch(), 0);
    } finally {
      await syn.dispose();
    }
  });
});

Deno.test("alias rows and the table epoch survive a restart; concurrent changes keep the epoch monotonic", async () => {
  await withDir(async (dir) => {
    let fp: string;
    {
      const syn = await start(dir);
      try {
        fp = (await query(syn)).fingerprint;
        // 40 declares and retracts of two pairs, all in flight at once.
        const calls = Array.from(
          { length: 40 },
          (_, i) =>
            syn.call(i % 3 === 0 ? "alias.retract" : "alias.declare", {
              left: fp,
              right: i % 2 === 0 ? OTHER : THIRD,
            }),
        );
        const outs = (await Promise.all(calls)).map(resultOf);
        const changed = outs.filter((o) => o.changed).map((o) => o.table_epoch);
        // Each change got its own epoch, one more than the one before it.
        assert.deepEqual([...changed].sort((x, y) => x - y), changed.map((_, i) => i + 1));
        assert.equal(syn.context.tableEpoch(), changed.length);
        // Make the final state known: OTHER declared, THIRD retracted.
        resultOf(await syn.call("alias.declare", { left: fp, right: OTHER }));
        resultOf(await syn.call("alias.declare", { left: fp, right: THIRD }));
        resultOf(await syn.call("alias.retract", { left: fp, right: THIRD }));
      } finally {
        await syn.dispose();
      }
    }
    const epochBefore = await (async () => {
      const syn = await start(dir);
      try {
        return syn.context.tableEpoch();
      } finally {
        await syn.dispose();
      }
    })();
    const syn = await start(dir);
    try {
      assert.equal(syn.context.tableEpoch(), epochBefore, "a restart does not move the epoch");
      const q = await query(syn);
      assert.equal(q.fingerprint, fp);
      assert.equal(q.table_epoch, epochBefore);
      assert.deepEqual(q.equivalent_to, [OTHER]);
      const check = resultOf(
        await syn.call("aliases.check_index", { index_fingerprint: fp, provenance_set: [THIRD] }),
      );
      assert.equal(check.status, "migration_required");
      assert.deepEqual(
        [check.retracted_pair.fingerprint_a, check.retracted_pair.fingerprint_b],
        [fp, THIRD].sort(),
      );
    } finally {
      await syn.dispose();
    }
  });
});

Deno.test("embed.result pages carry the live equivalents of the job's fingerprint", async () => {
  await withDir(async (dir) => {
    const syn = await start(dir);
    try {
      const fp = (await query(syn)).fingerprint;
      resultOf(await syn.call("alias.declare", { left: fp, right: OTHER }));
      const texts = Array.from({ length: 70 }, (_, i) => `text number ${i}`);
      const job = resultOf(
        await syn.call("embed.batch", { model: EMBED, texts, request_key: "alias-job" }),
      );
      assert.ok(job.job_id, JSON.stringify(job));
      // deno-lint-ignore no-explicit-any
      let page: any;
      for (const until = Date.now() + 120_000; Date.now() < until;) {
        page = resultOf(await syn.call("embed.result", { job_id: job.job_id }));
        if (page.state === "done" || page.state.startsWith("failed")) break;
        await new Promise((r) => setTimeout(r, 25));
      }
      assert.equal(page.state, "done");
      assert.equal(page.fingerprint, fp);
      assert.equal(page.table_epoch, 1);
      assert.deepEqual(page.equivalent_to, [OTHER]);
      resultOf(await syn.call("alias.retract", { left: fp, right: OTHER }));
      const later = resultOf(await syn.call("embed.result", { job_id: job.job_id }));
      assert.equal(later.table_epoch, 2);
      assert.deepEqual(later.equivalent_to, []);
    } finally {
      await syn.dispose();
    }
  });
});

Deno.test("POST /v1/ops/alias.* needs the owner's key; aliases.check_index is open; envelopes over HTTP carry equivalent_to", async () => {
  await withDir(async (dir) => {
    const syn = await start(dir);
    const key = "k".repeat(43);
    const server = serveHttp(syn, { port: 0, ownerKey: key });
    const base = `http://127.0.0.1:${server.port}`;
    // deno-lint-ignore no-explicit-any
    const post = async (method: string, body: unknown, withKey = false): Promise<any> => {
      const res = await fetch(`${base}/v1/ops/${method}`, {
        method: "POST",
        headers: withKey ? { authorization: `Bearer ${key}` } : {},
        body: JSON.stringify(body),
      });
      return { status: res.status, body: await res.json() };
    };
    try {
      const q = await post("embed.query", { model: EMBED, text: "hello" });
      const fp = q.body.result.fingerprint;
      const refused = await post("alias.declare", { left: fp, right: OTHER });
      assert.equal(refused.body.code, "unauthorized", JSON.stringify(refused.body));
      assert.equal(syn.context.tableEpoch(), 0);
      const declared = await post("alias.declare", { left: fp, right: OTHER }, true);
      assert.equal(declared.status, 200, JSON.stringify(declared.body));
      assert.deepEqual(
        [declared.body.result.changed, declared.body.result.table_epoch],
        [true, 1],
      );
      const q1 = await post("embed.query", { model: EMBED, text: "hello" });
      assert.deepEqual(q1.body.result.equivalent_to, [OTHER]);
      assert.equal(q1.body.result.table_epoch, 1);
      const oa = await fetch(`${base}/v1/embeddings`, {
        method: "POST",
        body: JSON.stringify({ model: EMBED, input: ["hello"] }),
      }).then((r) => r.json());
      assert.deepEqual(oa.synapse.equivalent_to, [OTHER]);
      const valid = await post("aliases.check_index", {
        index_fingerprint: fp,
        provenance_set: [fp, OTHER],
      });
      assert.equal(valid.body.result.status, "valid");
      const retracted = await post("alias.retract", { left: fp, right: OTHER }, true);
      assert.equal(retracted.body.result.table_epoch, 2);
      const flipped = await post("aliases.check_index", {
        index_fingerprint: fp,
        provenance_set: [fp, OTHER],
      });
      assert.equal(flipped.body.result.status, "migration_required");
      assert.equal(flipped.body.result.table_epoch, 2);
      assert.equal(flipped.body.result.rebuild_target, fp);
    } finally {
      await server.shutdown();
      await syn.dispose();
    }
  });
});
