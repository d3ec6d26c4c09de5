/**
 * The pure parts of the catalog self-check (lib/probe/self_check.ts): the shipped fixture (eight
 * distinct texts, one holding the poison token of the generated NaN model) and the `check_id`,
 * which every key fact changes and nothing else does; which lanes a check runs on. The check
 * itself runs against real models in tests/models/self_check_test.ts.
 */
import assert from "node:assert/strict";
import {
  SELF_CHECK_CEILING_MS,
  SELF_CHECK_FIXTURE_REVISION,
  SELF_CHECK_INPUTS,
  selfCheckId,
  type SelfCheckKeyFacts,
  type SelfCheckLanes,
  selfCheckLanes,
} from "../../lib/probe/self_check.ts";
import type { Lane } from "../../lib/lanes/lane.ts";
import type { ReadyModel } from "../../lib/models/model.ts";
import { canonicalJson, type JsonValue } from "../../lib/identity/jcs.ts";
import { sha256Hex } from "../../lib/identity/sha256.ts";
import { CATALOG } from "../../lib/models/catalog.ts";

const FACTS: SelfCheckKeyFacts = {
  catalog_id: "all-minilm-l6-v2",
  manifest_digest: "sha256:" + "1".repeat(64),
  backend: "ort",
  fingerprint: "2".repeat(64),
  engine: { engine: "onnxruntime", version: "1.20.0" },
  os_build: "Linux 6.8.0",
};

Deno.test("the self-check fixture: 8 distinct texts, revision 1, a 2000 ms ceiling, one input with the poison token", () => {
  assert.equal(SELF_CHECK_INPUTS.length, 8);
  assert.equal(new Set(SELF_CHECK_INPUTS).size, 8);
  assert.ok(SELF_CHECK_INPUTS.every((t) => t.length > 0));
  assert.equal(SELF_CHECK_FIXTURE_REVISION, 1);
  assert.equal(SELF_CHECK_CEILING_MS, 2000);
  assert.equal(SELF_CHECK_INPUTS.filter((t) => /\bpoison\b/.test(t)).length, 1);
  assert.ok(Object.isFrozen(SELF_CHECK_INPUTS));
  // Pinned values of the shipped catalog, where there are any, are for this fixture revision.
  for (const m of CATALOG) {
    for (const b of m.backends) {
      if (b.self_check_expected === undefined) continue;
      assert.equal(b.self_check_expected.fixture_revision, SELF_CHECK_FIXTURE_REVISION, m.id);
    }
  }
});

Deno.test("selfCheckId() is the JCS-SHA256 of the key facts; each fact changes it", () => {
  const id = selfCheckId(FACTS);
  assert.equal(
    id,
    "sha256:" +
      sha256Hex(
        canonicalJson(
          { ...FACTS, fixture_revision: SELF_CHECK_FIXTURE_REVISION } as unknown as JsonValue,
        ),
      ),
  );
  assert.equal(selfCheckId({ ...FACTS, fixture_revision: SELF_CHECK_FIXTURE_REVISION }), id);
  // Key order does not matter (JCS).
  const reordered = Object.fromEntries(Object.entries(FACTS).reverse()) as SelfCheckKeyFacts;
  assert.equal(selfCheckId(reordered), id);
  const changed: Partial<SelfCheckKeyFacts>[] = [
    { catalog_id: "bge-small-en-v1.5" },
    { manifest_digest: "sha256:" + "3".repeat(64) },
    { backend: "llama" },
    { fingerprint: "4".repeat(64) },
    { engine: { engine: "onnxruntime", version: "1.21.0" } },
    { engine: { engine: "onnxruntime", version: "1.20.0", build_flags: { backend: "cpu" } } },
    { os_build: "Linux 6.9.0" },
    { fixture_revision: SELF_CHECK_FIXTURE_REVISION + 1 },
  ];
  const ids = new Set([id]);
  for (const c of changed) ids.add(selfCheckId({ ...FACTS, ...c }));
  assert.equal(ids.size, changed.length + 1);
});

Deno.test("selfCheckLanes() takes the registry's control lanes when it has them, else the interactive lane", () => {
  const interactive = { name: "interactive" } as unknown as Lane;
  const ready = { modelId: "m", interactive } as unknown as ReadyModel;
  const control = { query: { name: "q" }, batch: { name: "b" } } as unknown as SelfCheckLanes;
  const asked: string[] = [];
  const registry = {
    controlLanes: (id: string) => {
      asked.push(id);
      return control;
    },
  };
  assert.equal(selfCheckLanes(registry, ready), control);
  assert.deepEqual(asked, ["m"]);
  assert.deepEqual(selfCheckLanes({}, ready), { query: interactive, batch: interactive });
  assert.deepEqual(selfCheckLanes(undefined, ready), { query: interactive, batch: interactive });
});
