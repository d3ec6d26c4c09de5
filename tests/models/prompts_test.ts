/**
 * The pure rules of prompt tables (lib/models/prompts.ts; issue 19 item 4, F35): applying a
 * prefix (never twice), checking a table (typed refusals naming the field), its identity in the
 * numeric profile (`synapse-prompt-table-v1:` + sha256 of its JCS), choosing the prompt of a
 * request, and the catalog's upstream tables.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { SynapseError } from "../../lib/contract/errors.ts";
import { CATALOG, catalogModel, manifestDigest } from "../../lib/models/catalog.ts";
import {
  applyPrompt,
  parsePromptTable,
  PROMPT_TABLE_PREFIX,
  promptProfileField,
  promptTableIdentity,
  readSentenceTransformersPrompts,
  selectPrompt,
} from "../../lib/models/prompts.ts";

const sha = (s: string) => createHash("sha256").update(s).digest("hex");

Deno.test("applyPrompt prefixes once: a text that already starts with the prefix is left alone", () => {
  assert.deepEqual(applyPrompt("cats", "query: "), {
    text: "query: cats",
    prefixChars: 7,
    prefixCodePoints: 7,
    prefix: "applied",
  });
  assert.deepEqual(applyPrompt("query: cats", "query: "), {
    text: "query: cats",
    prefixChars: 0,
    prefixCodePoints: 0,
    prefix: "already_present",
  });
  // Exactly, code unit by code unit: another case or spacing is not the prefix.
  assert.equal(applyPrompt("Query: cats", "query: ").prefix, "applied");
  assert.equal(applyPrompt("query:cats", "query: ").prefix, "applied");
  assert.deepEqual(applyPrompt("cats", ""), {
    text: "cats",
    prefixChars: 0,
    prefixCodePoints: 0,
    prefix: "empty",
  });
  // prefixChars counts UTF-16 code units (offsets into the tokenized text), prefixCodePoints
  // code points (the unit of kept_chars).
  assert.equal(applyPrompt("x", "🔎 ").prefixChars, 3);
  assert.equal(applyPrompt("x", "🔎 ").prefixCodePoints, 2);
});

Deno.test("parsePromptTable checks names, prefixes and the default, naming the field", () => {
  const f = "preload_models.prompts";
  assert.deepEqual(parsePromptTable({ query: "q: " }, undefined, f, "m"), {
    prompts: { query: "q: " },
  });
  assert.deepEqual(parsePromptTable({ query: "q: ", doc: "" }, "doc", f, "m"), {
    prompts: { query: "q: ", doc: "" },
    default_prompt_name: "doc",
  });
  // Absent, or empty with no default (what sentence-transformers writes): no table.
  assert.equal(parsePromptTable(undefined, undefined, f, "m"), undefined);
  assert.equal(parsePromptTable(null, null, f, "m"), undefined);
  assert.equal(parsePromptTable({}, null, f, "m"), undefined);
  const refused = (
    prompts: unknown,
    def: unknown,
    field: string,
    reason: string,
  ) => {
    assert.throws(() => parsePromptTable(prompts, def, f, "m"), (e: unknown) => {
      assert.ok(e instanceof SynapseError);
      assert.equal(e.code, "invalid_request");
      assert.equal(e.details?.field, field);
      assert.equal(e.details?.reason, reason);
      assert.equal(e.details?.model_id, "m");
      assert.ok(e.message.includes(field), e.message);
      return true;
    });
  };
  refused(["q: "], undefined, f, "not_a_table");
  refused("q: ", undefined, f, "not_a_table");
  refused({ query: 7 }, undefined, `${f}.query`, "prefix_not_a_string");
  refused({ "": "x" }, undefined, f, "empty_name");
  refused({ query: "q: " }, "doc", "preload_models.default_prompt_name", "unknown_default_prompt");
  refused({ query: "q: " }, 3, "preload_models.default_prompt_name", "default_not_a_string");
  refused(undefined, "query", "preload_models.default_prompt_name", "default_without_prompts");
  refused({}, "query", "preload_models.default_prompt_name", "unknown_default_prompt");
});

Deno.test("promptTableIdentity: synapse-prompt-table-v1 + sha256(JCS({default_prompt_name?, prompts}))", () => {
  const t = { prompts: { query: "query: ", passage: "passage: " } };
  const id = promptTableIdentity(t);
  assert.equal(
    id,
    PROMPT_TABLE_PREFIX + sha('{"prompts":{"passage":"passage: ","query":"query: "}}'),
  );
  // Key order is irrelevant (JCS sorts); a changed prefix, name or default changes it.
  assert.equal(promptTableIdentity({ prompts: { passage: "passage: ", query: "query: " } }), id);
  assert.notEqual(promptTableIdentity({ prompts: { query: "query:", passage: "passage: " } }), id);
  assert.notEqual(promptTableIdentity({ prompts: { q: "query: ", passage: "passage: " } }), id);
  const withDefault = { ...t, default_prompt_name: "passage" };
  assert.equal(
    promptTableIdentity(withDefault),
    PROMPT_TABLE_PREFIX +
      sha(
        '{"default_prompt_name":"passage","prompts":{"passage":"passage: ","query":"query: "}}',
      ),
  );
  assert.deepEqual(promptProfileField(undefined), {});
  assert.deepEqual(promptProfileField(t), { prompt_template: id });
});

Deno.test("selectPrompt: input_type by role, prompt_name by name, the default, and no table", () => {
  const e5 = { prompts: { query: "query: ", passage: "passage: " } };
  const qwen = { prompts: { query: "Instruct: …\nQuery:", document: "" } };
  const bge = { prompts: { query: "Represent …: " } };
  assert.deepEqual(selectPrompt(e5, { input_type: "query" }, "m"), {
    choice: { name: "query", prefix: "query: " },
    disclosure: { requested: "query", selector: "input_type", applied: "query" },
  });
  // document → document, else passage, else none.
  assert.equal(selectPrompt(e5, { input_type: "document" }, "m").choice?.name, "passage");
  assert.equal(selectPrompt(qwen, { input_type: "document" }, "m").choice?.name, "document");
  assert.deepEqual(selectPrompt(bge, { input_type: "document" }, "m"), {
    disclosure: {
      requested: "document",
      selector: "input_type",
      applied: null,
      reason: "no_prompt_for_input_type",
    },
  });
  // Another role (a compat door's): the prompt of that name, else none.
  assert.equal(
    selectPrompt({ prompts: { clustering: "c: " } }, { input_type: "clustering" }, "m").choice
      ?.prefix,
    "c: ",
  );
  assert.equal(selectPrompt(e5, { input_type: "clustering" }, "m").choice, undefined);
  assert.deepEqual(selectPrompt(e5, { prompt_name: "passage" }, "m").disclosure, {
    requested: "passage",
    selector: "prompt_name",
    applied: "passage",
  });
  assert.deepEqual(selectPrompt(e5, {}, "m"), {
    disclosure: { requested: null, applied: null, reason: "none_requested" },
  });
  assert.deepEqual(selectPrompt({ ...e5, default_prompt_name: "query" }, {}, "m"), {
    choice: { name: "query", prefix: "query: " },
    disclosure: { requested: null, applied: "query", reason: "default_prompt_name" },
  });
  // No table: no choice; a selector is disclosed, none is silent.
  assert.deepEqual(selectPrompt(undefined, {}, "m"), {});
  assert.deepEqual(selectPrompt(undefined, { prompt_name: "query" }, "m"), {
    disclosure: {
      requested: "query",
      selector: "prompt_name",
      applied: null,
      reason: "no_prompt_table",
    },
  });
  assert.throws(() => selectPrompt(e5, { prompt_name: "nope" }, "m"), (e: unknown) => {
    assert.ok(e instanceof SynapseError);
    assert.equal(e.code, "invalid_request");
    assert.deepEqual(e.details?.known, ["passage", "query"]);
    assert.equal(e.details?.reason, "unknown_prompt_name");
    return true;
  });
  assert.throws(
    () => selectPrompt(e5, { prompt_name: "query", input_type: "query" }, "m"),
    /not both/,
  );
});

Deno.test("readSentenceTransformersPrompts reads prompts and default_prompt_name; a missing file is no table", async () => {
  const dir = await Deno.makeTempDir({ prefix: "synapse-st-" });
  try {
    const path = `${dir}/config_sentence_transformers.json`;
    assert.equal(await readSentenceTransformersPrompts(path, "m"), undefined);
    await Deno.writeTextFile(
      path,
      JSON.stringify({ prompts: { query: "q: ", document: "" }, default_prompt_name: null }),
    );
    assert.deepEqual(await readSentenceTransformersPrompts(path, "m"), {
      prompts: { query: "q: ", document: "" },
    });
    await Deno.writeTextFile(path, JSON.stringify({ prompts: {}, default_prompt_name: null }));
    assert.equal(await readSentenceTransformersPrompts(path, "m"), undefined);
    await Deno.writeTextFile(
      path,
      JSON.stringify({ prompts: { q: "q: " }, default_prompt_name: 1 }),
    );
    await assert.rejects(
      () => readSentenceTransformersPrompts(path, "m"),
      (e: unknown) =>
        e instanceof SynapseError &&
        e.details?.field === "config_sentence_transformers.json:default_prompt_name",
    );
    await Deno.writeTextFile(path, "[1]");
    await assert.rejects(
      () => readSentenceTransformersPrompts(path, "m"),
      (e: unknown) => e instanceof SynapseError && e.code === "artifact_invalid",
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("the catalog's asymmetric models carry their upstream prompts, in manifest_digest", () => {
  const bge = catalogModel("bge-small-en-v1.5")!.backends[0]!;
  assert.deepEqual(bge.prompts, {
    prompts: { query: "Represent this sentence for searching relevant passages: " },
  });
  const qwen = catalogModel("qwen3-embedding-0.6b")!.backends[0]!;
  assert.deepEqual(qwen.prompts, {
    prompts: {
      query:
        "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:",
      document: "",
    },
  });
  // Every catalog table is a valid one, on an embed model; the symmetric ones carry none.
  for (const m of CATALOG) {
    for (const b of m.backends) {
      if (b.prompts === undefined) continue;
      assert.equal(m.task, "embed", m.id);
      assert.deepEqual(
        parsePromptTable(b.prompts.prompts, b.prompts.default_prompt_name, "prompts", m.id),
        b.prompts,
      );
    }
  }
  assert.equal(catalogModel("all-minilm-l6-v2")!.backends[0]!.prompts, undefined);
  // The table is part of the manifest digest.
  const m = structuredClone(catalogModel("bge-small-en-v1.5")!);
  const before = manifestDigest(m);
  m.backends[0]!.prompts = { prompts: { query: "other: " } };
  assert.notEqual(manifestDigest(m), before);
});
