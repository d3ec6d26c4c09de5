/**
 * The shared contract every {@link Engine} passes (STYLE 16, hono's `common.case.test.ts`): each
 * engine's test file calls {@link runEngineContract} with a factory for a loaded engine and
 * token rows for it: ORT in its Worker thread and llama.cpp in its worker process
 * (`engine_contract_test.ts`), and the in-memory test double the lane tests drive
 * (`fake_engine_test.ts`), so the double behaves as the contract says an engine does.
 */
import assert from "node:assert/strict";
import type { Engine, EngineRow } from "../../lib/engines/engine.ts";
import { SynapseError } from "../../lib/contract/errors.ts";
import { cosine } from "../_helpers.ts";

/** What the contract needs of one engine under test. */
export interface EngineContractCase {
  /** Test name prefix, e.g. `FakeEngine (embed)`. */
  name: string;
  /** A fresh, loaded engine (disposed by the suite). */
  newEngine: () => Promise<Engine>;
  /** Rows of distinct lengths the engine accepts (embed/rerank), or prompts (generate). */
  rows: EngineRow[];
  /** Deno.test sanitizers (node-llama-cpp keeps native handles of its own). */
  sanitize?: boolean;
}

/** Registers the contract tests for one engine. */
export function runEngineContract(c: EngineContractCase): void {
  const test = (name: string, fn: (engine: Engine) => Promise<void>): void => {
    Deno.test({
      name: `${c.name}: ${name}`,
      sanitizeResources: c.sanitize ?? true,
      sanitizeOps: c.sanitize ?? true,
      async fn() {
        const engine = await c.newEngine();
        try {
          await fn(engine);
        } finally {
          await engine.dispose();
        }
      },
    });
  };

  test("states its identity and limits", (engine) => {
    assert.ok(typeof engine.kind === "string" && engine.kind.length > 0);
    assert.ok(engine.identity.engine.length > 0);
    assert.ok(engine.identity.version.length > 0);
    for (const k of ["maxSequenceTokens", "maxMicroBatchTokens", "maxSequences"] as const) {
      assert.ok(Number.isInteger(engine.limits[k]) && engine.limits[k] >= 1, k);
    }
    assert.equal(engine.health().state === "disposed", false);
    assert.equal(engine.inFlight, 0);
    if (engine.task === "embed") assert.ok(engine.dims >= 1);
    else assert.equal(engine.dims, engine.task === "rerank" ? 1 : 0);
    return Promise.resolve();
  });

  test("answers each row, of the width it states, the same alone and in a batch (F4)", async (engine) => {
    if (engine.task === "generate") return await generateBound(engine, c.rows);
    const call = (rows: EngineRow[]) =>
      engine.task === "embed" ? engine.embed(rows) : engine.score(rows);
    const per = Math.min(c.rows.length, engine.limits.maxSequences);
    const batch = await call(c.rows.slice(0, per));
    assert.equal(batch.dims, engine.dims);
    assert.equal(batch.data.length, per * batch.dims);
    assert.equal(batch.nonFinite.length, per);
    assert.ok(batch.runMs >= 0);
    for (let r = 0; r < per; r++) {
      assert.equal(batch.nonFinite[r], 0);
      const alone = await call([c.rows[r]!]);
      const a = alone.data.subarray(0, alone.dims);
      const b = batch.data.subarray(r * batch.dims, (r + 1) * batch.dims);
      if (engine.task === "embed") assert.ok(cosine(a, b) >= 0.99999, `row ${r}`);
      else assert.ok(Math.abs(a[0]! - b[0]!) < 1e-4, `row ${r}: ${a[0]} vs ${b[0]}`);
    }
    assert.equal(engine.inFlight, 0);
  });

  test("refuses work of another task with backend_unavailable and keeps serving", async (engine) => {
    const wrong = engine.task === "generate"
      ? engine.embed([c.rows[0]!])
      : engine.generate({ ids: c.rows[0]!.ids, maxTokens: 1 });
    const err = await wrong.then(() => assert.fail("another task must be refused"), (e) => e);
    assert.ok(err instanceof SynapseError);
    assert.equal(err.code, "backend_unavailable");
    await serveOnce(engine, c.rows);
  });

  test("a call whose signal is already aborted rejects with its reason and runs nothing", async (engine) => {
    const ac = new AbortController();
    const reason = new DOMException("gone", "AbortError");
    ac.abort(reason);
    const call = engine.task === "generate"
      ? engine.generate({ ids: c.rows[0]!.ids, maxTokens: 4 }, { signal: ac.signal })
      : engine.task === "embed"
      ? engine.embed([c.rows[0]!], { signal: ac.signal })
      : engine.score([c.rows[0]!], { signal: ac.signal });
    assert.equal(await call.then(() => "resolved", (e) => e), reason);
    await serveOnce(engine, c.rows);
  });

  test("dispose is idempotent, and a disposed engine refuses with disposed", async (engine) => {
    await serveOnce(engine, c.rows);
    await engine.dispose();
    await engine.dispose();
    assert.equal(engine.health().state, "disposed");
    const err = await serveOnce(engine, c.rows).then(() => undefined, (e) => e);
    assert.ok(err instanceof SynapseError, String(err));
    assert.equal(err.code, "disposed");
  });
}

async function serveOnce(engine: Engine, rows: EngineRow[]): Promise<void> {
  if (engine.task === "generate") {
    const out = await engine.generate({ ids: rows[0]!.ids, maxTokens: 2 });
    assert.ok(out.generatedIds.length <= 2);
  } else if (engine.task === "embed") {
    assert.equal((await engine.embed([rows[0]!])).nonFinite[0], 0);
  } else {
    assert.equal((await engine.score([rows[0]!])).nonFinite[0], 0);
  }
}

/** A generation engine: `maxTokens` bounds every generation, and finish_reason says so (F12). */
async function generateBound(engine: Engine, rows: EngineRow[]): Promise<void> {
  for (const row of rows) {
    for (const maxTokens of [1, 5]) {
      const out = await engine.generate({ ids: row.ids, maxTokens });
      assert.ok(out.generatedIds.length <= maxTokens);
      assert.equal(out.nPrompt, row.ids.length);
      if (out.generatedIds.length === maxTokens) assert.equal(out.finishReason, "max_tokens");
      else assert.equal(out.finishReason, "stop_token");
    }
  }
}
