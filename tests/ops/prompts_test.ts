/**
 * Prompts inside the fingerprint (issue 19 item 4, field report F35), through the native ops on
 * the real tiny ORT model: a model entry with a prompt table embeds `input_type: "query"` and
 * `"document"` differently under ONE fingerprint; token counts include the prefix; a text that
 * already starts with the prefix is not prefixed twice; truncation cuts the text, never the
 * prefix, and the hashes stay the caller's; changing the table changes the fingerprint; a model
 * without a table answers the selector with a disclosure and identical vectors; the model
 * directory's `config_sentence_transformers.json` is read; a job with another selector is another
 * job.
 */
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { loadConfig } from "../../lib/config/loader.ts";
import { createSynapse, type Synapse } from "../../lib/synapse.ts";
import { MODELS, preload, resultOf, semanticError, startSynapse } from "../_helpers.ts";
import { serveHttp } from "../../lib/doors/http/server.ts";
import { nullLog } from "../../lib/log/log.ts";

const sha = (s: string) => createHash("sha256").update(s).digest("hex");
const TINY = `${MODELS}/synapse-tiny-embed`;
const TABLE = { query: "query: ", passage: "passage: " };

/** A synapse serving the tiny embed model under two ids: with the table and without. */
function withTable(prompts: Record<string, string> = TABLE, extra: Record<string, unknown> = {}) {
  return startSynapse({
    preload_models: [
      preload(TINY, "tiny-prompts", { prompts, ...extra }),
      preload(TINY, "tiny-plain"),
    ],
  });
}

// deno-lint-ignore no-explicit-any
type Any = any;

Deno.test("F35: input_type query and document give different vectors under one fingerprint; counts include the prefix", async () => {
  await using t = await withTable();
  const call = async (params: Record<string, unknown>): Promise<Any> =>
    resultOf(await t.syn.call("embed.query", { model: "tiny-prompts", text: "cats", ...params }));
  const q = await call({ input_type: "query" });
  const d = await call({ input_type: "document" });
  const bare = await call({});
  assert.equal(q.fingerprint, d.fingerprint);
  assert.equal(q.fingerprint, bare.fingerprint);
  assert.notDeepEqual(q.vectors[0].vector, d.vectors[0].vector);
  assert.deepEqual(q.prompt, { requested: "query", selector: "input_type", applied: "query" });
  // `document` falls back to `passage`.
  assert.deepEqual(d.prompt, { requested: "document", selector: "input_type", applied: "passage" });
  assert.deepEqual(bare.prompt, { requested: null, applied: null, reason: "none_requested" });
  // models.list shows the table clients select from.
  const rows: Any[] = resultOf(await t.syn.call("models.list", {})).models;
  assert.deepEqual(rows.find((m) => m.model_id === "tiny-prompts").prompts, { prompts: TABLE });
  assert.equal(rows.find((m) => m.model_id === "tiny-plain").prompts, undefined);
  assert.equal(q.truncation_disclosures[0].prompt_name, "query");
  assert.equal(q.truncation_disclosures[0].prompt_prefix, "applied");
  assert.equal(bare.truncation_disclosures[0].prompt_name, undefined);
  // The prefixed vector and count are those of the text written with the prefix by hand.
  const byHand = await call({ text: "query: cats" });
  assert.deepEqual(q.vectors[0].vector, byHand.vectors[0].vector);
  assert.deepEqual(q.real_token_counts, byHand.real_token_counts);
  assert.ok(q.real_token_counts[0] > bare.real_token_counts[0], "counts include the prefix");
  assert.equal(q.truncation_disclosures[0].submitted_tokens, q.real_token_counts[0]);
  // The hashes are of the caller's own text, not the prefixed one.
  assert.equal(q.vectors[0].submitted_sha256, sha("cats"));
  assert.equal(q.vectors[0].content_sha256, sha("cats"));
  // prompt_name selects by name; embed.batch takes the same selectors.
  const named = await call({ prompt_name: "passage" });
  assert.deepEqual(named.vectors[0].vector, d.vectors[0].vector);
  const batch: Any = resultOf(
    await t.syn.call("embed.batch", {
      model: "tiny-prompts",
      texts: ["cats", "dogs"],
      input_type: "query",
    }),
  );
  assert.deepEqual(batch.vectors[0].vector, q.vectors[0].vector);
  assert.equal(batch.fingerprint, q.fingerprint);
  assert.deepEqual(batch.truncation_disclosures.map((x: Any) => x.prompt_prefix), [
    "applied",
    "applied",
  ]);
});

Deno.test("F35: a text that already starts with the prefix is not prefixed twice", async () => {
  await using t = await withTable();
  const r: Any = resultOf(
    await t.syn.call("embed.batch", {
      model: "tiny-prompts",
      texts: ["query: cats", "cats"],
      input_type: "query",
    }),
  );
  assert.deepEqual(r.vectors[0].vector, r.vectors[1].vector);
  assert.deepEqual(r.real_token_counts[0], r.real_token_counts[1]);
  assert.deepEqual(r.truncation_disclosures.map((x: Any) => x.prompt_prefix), [
    "already_present",
    "applied",
  ]);
  assert.equal(r.vectors[0].submitted_sha256, sha("query: cats"));
  // A text the model cannot read is refused as without a prompt: the prefix does not pass it off.
  const zw = semanticError(
    await t.syn.call("embed.query", {
      model: "tiny-prompts",
      text: "\u200b\u200b",
      input_type: "query",
    }),
  );
  const zwBare = semanticError(
    await t.syn.call("embed.query", { model: "tiny-prompts", text: "\u200b\u200b" }),
  );
  assert.equal(zw.details.reason, "no_tokens");
  assert.equal(zw.details.reason, zwBare.details.reason);
  assert.equal(r.vectors[1].submitted_sha256, sha("cats"));
});

Deno.test("F35: truncation cuts the text, never the prefix; kept_chars and content_sha256 are the caller's", async () => {
  await using t = await withTable(TABLE, { max_tokens: 8 });
  const text = "one two three four five six seven eight nine ten";
  const plain: Any = resultOf(
    await t.syn.call("embed.query", {
      model: "tiny-prompts",
      text: "query: " + text,
      truncate: true,
    }),
  );
  const r: Any = resultOf(
    await t.syn.call("embed.query", {
      model: "tiny-prompts",
      text,
      truncate: true,
      input_type: "query",
    }),
  );
  // The same tokens as the hand-prefixed text: the prefix is kept, the text's tail cut.
  assert.deepEqual(r.vectors[0].vector, plain.vectors[0].vector);
  const disc = r.truncation_disclosures[0];
  assert.equal(disc.truncated, true);
  assert.equal(disc.effective_tokens, 8);
  const plainKept = plain.truncation_disclosures[0].kept_chars;
  assert.equal(disc.kept_chars, plainKept - "query: ".length);
  assert.ok(disc.kept_chars > 0 && disc.kept_chars < text.length);
  assert.equal(r.vectors[0].content_sha256, sha(text.slice(0, disc.kept_chars)));
  assert.equal(r.vectors[0].submitted_sha256, sha(text));
  // A prompt that fills the limit by itself keeps none of the text: refused, not cut.
  await using t2 = await withTable({ query: "a b c d e f g h i j " }, { max_tokens: 8 });
  const err = semanticError(
    await t2.syn.call("embed.query", {
      model: "tiny-prompts",
      text,
      truncate: true,
      input_type: "query",
    }),
  );
  assert.equal(err.code, "sequence_too_long");
  assert.equal(err.details.reason, "prompt_fills_max_tokens");
});

Deno.test("F35: changing the table changes the fingerprint; a model without a table keeps the plain one", async () => {
  const fps: string[] = [];
  for (
    const prompts of [TABLE, { query: "query: ", passage: "passage: " }, { query: "search: " }]
  ) {
    await using t = await withTable(prompts);
    const a: Any = resultOf(await t.syn.call("embed.query", { model: "tiny-prompts", text: "x" }));
    const b: Any = resultOf(await t.syn.call("embed.query", { model: "tiny-plain", text: "x" }));
    fps.push(a.fingerprint, b.fingerprint);
  }
  // Same table → same fingerprint; other table → another; the plain model never changes.
  assert.equal(fps[0], fps[2]);
  assert.notEqual(fps[0], fps[4]);
  assert.equal(fps[1], fps[3]);
  assert.equal(fps[1], fps[5]);
  assert.notEqual(fps[0], fps[1]);
  // A default prompt is part of the table.
  await using t = await withTable(TABLE, { default_prompt_name: "passage" });
  const r: Any = resultOf(await t.syn.call("embed.query", { model: "tiny-prompts", text: "x" }));
  assert.notEqual(r.fingerprint, fps[0]);
  assert.deepEqual(r.prompt, {
    requested: null,
    applied: "passage",
    reason: "default_prompt_name",
  });
});

Deno.test("F35: on a model without a prompt table the selector has no effect, and the answer says so", async () => {
  await using t = await withTable();
  const bare: Any = resultOf(
    await t.syn.call("embed.query", { model: "tiny-plain", text: "cats" }),
  );
  assert.equal(bare.prompt, undefined);
  for (const sel of [{ input_type: "query" }, { input_type: "document" }, { prompt_name: "x" }]) {
    const r: Any = resultOf(
      await t.syn.call("embed.batch", { model: "tiny-plain", texts: ["cats"], ...sel }),
    );
    assert.deepEqual(r.vectors[0].vector, bare.vectors[0].vector);
    assert.equal(r.fingerprint, bare.fingerprint);
    assert.deepEqual(r.real_token_counts, bare.real_token_counts);
    const requested = Object.values(sel)[0];
    assert.deepEqual(r.prompt, {
      requested,
      selector: Object.keys(sel)[0],
      applied: null,
      reason: "no_prompt_table",
    });
    assert.equal(r.truncation_disclosures[0].prompt_name, undefined);
  }
});

Deno.test("F35: an unknown prompt_name on a model with a table is invalid_request naming the known names", async () => {
  await using t = await withTable();
  const err = semanticError(
    await t.syn.call("embed.query", { model: "tiny-prompts", text: "x", prompt_name: "nope" }),
  );
  assert.equal(err.code, "invalid_request");
  assert.equal(err.details.field, "prompt_name");
  assert.deepEqual(err.details.known, ["passage", "query"]);
  assert.match(err.message, /'passage', 'query'/);
  const both = semanticError(
    await t.syn.call("embed.query", {
      model: "tiny-prompts",
      text: "x",
      prompt_name: "query",
      input_type: "query",
    }),
  );
  assert.equal(both.details.reason, "conflicting_selectors");
});

Deno.test("F35: a bad prompt table refuses the boot naming the field", async () => {
  await assert.rejects(
    () => withTable(TABLE, { default_prompt_name: "nope" }),
    (e: Any) => {
      assert.equal(e.code, "invalid_request");
      assert.equal(e.details.field, "preload_models.default_prompt_name");
      assert.equal(e.details.reason, "unknown_default_prompt");
      return true;
    },
  );
  await assert.rejects(
    () => withTable({ query: 7 } as unknown as Record<string, string>),
    /prompts/,
  );
});

Deno.test("F35: the model directory's config_sentence_transformers.json is read", async () => {
  const dir = await Deno.makeTempDir({ prefix: "synapse-st-prompts-" });
  try {
    for (const f of ["model.onnx", "tokenizer.json", "config.json"]) {
      await Deno.copyFile(`${TINY}/${f}`, `${dir}/${f}`);
    }
    await Deno.writeTextFile(
      `${dir}/config_sentence_transformers.json`,
      JSON.stringify({
        __version__: { sentence_transformers: "3.0.0" },
        prompts: { query: "query: ", passage: "passage: " },
        default_prompt_name: null,
        similarity_fn_name: "cosine",
      }),
    );
    await using t = await startSynapse({
      preload_models: [
        preload(dir, "st-dir"),
        preload(TINY, "tiny-prompts", { prompts: TABLE }),
      ],
    });
    const st: Any = resultOf(
      await t.syn.call("embed.query", { model: "st-dir", text: "cats", input_type: "query" }),
    );
    const declared: Any = resultOf(
      await t.syn.call("embed.query", { model: "tiny-prompts", text: "cats", input_type: "query" }),
    );
    assert.deepEqual(st.prompt, { requested: "query", selector: "input_type", applied: "query" });
    assert.deepEqual(st.vectors[0].vector, declared.vectors[0].vector);
    // The same table from the file or the config: the same profile.
    assert.equal(st.fingerprint, declared.fingerprint);
    // An explicit empty table overrides the file: no table, the plain fingerprint.
    await using t2 = await startSynapse({
      preload_models: [
        preload(dir, "st-off", { prompts: {} }),
        preload(TINY, "tiny-plain"),
      ],
    });
    const off: Any = resultOf(
      await t2.syn.call("embed.query", { model: "st-off", text: "cats", input_type: "query" }),
    );
    const plain: Any = resultOf(
      await t2.syn.call("embed.query", { model: "tiny-plain", text: "cats" }),
    );
    assert.equal(off.prompt.reason, "no_prompt_table");
    assert.equal(off.fingerprint, plain.fingerprint);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("F35: a job with another selector is another job; its pages carry the prompt", async () => {
  await using t = await withTable();
  const texts = Array.from({ length: 70 }, (_, i) => `document number ${i}`); // > inline.max_items
  const submit = async (params: Record<string, unknown>): Promise<Any> =>
    resultOf(
      await t.syn.call("embed.batch", {
        model: "tiny-prompts",
        texts,
        request_key: "f35-job",
        ...params,
      }),
    );
  const a = await submit({ input_type: "query" });
  assert.equal(typeof a.job_id, "string");
  // The same key with another selector is another request: refused as a conflict.
  const other = await t.syn.call("embed.batch", {
    model: "tiny-prompts",
    texts,
    request_key: "f35-job",
    input_type: "document",
  });
  assert.equal(semanticError(other).code, "idempotency_conflict");
  const again = await submit({ input_type: "query" });
  assert.equal(again.job_id, a.job_id);
  // Wait for the job, then read its first page.
  let page: Any;
  for (let i = 0; i < 600; i++) {
    page = resultOf(await t.syn.call("embed.result", { job_id: a.job_id }));
    if (page.state === "done") break;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.equal(page.state, "done");
  assert.deepEqual(page.prompt, { requested: "query", selector: "input_type", applied: "query" });
  assert.equal(page.truncation_disclosures[0].prompt_name, "query");
  const inline: Any = resultOf(
    await t.syn.call("embed.query", {
      model: "tiny-prompts",
      text: page.vectors[0].id === "0" ? texts[0] : texts[Number(page.vectors[0].id)],
      input_type: "query",
    }),
  );
  const v = page.vectors[0].vector as number[];
  const w = inline.vectors[0].vector as number[];
  assert.ok(v.every((x, i) => Math.abs(x - w[i]!) < 1e-5), "job vector = inline vector");
  assert.equal(page.vectors[0].submitted_sha256, sha(texts[Number(page.vectors[0].id)]!));
});

Deno.test("F35: model.load takes prompts (or the directory's config_sentence_transformers.json), kept across a restart", async () => {
  const dir = await Deno.makeTempDir({ prefix: "synapse-load-prompts-" });
  const env = { XDG_DATA_HOME: `${dir}/data`, XDG_CONFIG_HOME: `${dir}/config`, HOME: dir };
  const start = async () => {
    const { config } = loadConfig({
      env: { ...env, SYNAPSE_CONFIG_JSON: JSON.stringify({ certification: "warn" }) },
      cwd: dir,
    });
    return await createSynapse({ config, env });
  };
  const load = async (syn: Synapse, params: Record<string, unknown>) => {
    const job: Any = resultOf(await syn.call("model.load", params));
    return await syn.loads.settled(job.job_id);
  };
  const embed = async (syn: Synapse, model: string, params: Record<string, unknown> = {}) =>
    resultOf(await syn.call("embed.query", { model, text: "cats", ...params })) as Any;
  try {
    const st = `${dir}/st-model`;
    await Deno.mkdir(st);
    for (const f of ["model.onnx", "tokenizer.json", "config.json"]) {
      await Deno.copyFile(`${TINY}/${f}`, `${st}/${f}`);
    }
    await Deno.writeTextFile(
      `${st}/config_sentence_transformers.json`,
      JSON.stringify({ prompts: TABLE, default_prompt_name: null }),
    );
    let fp: string;
    {
      const syn = await start();
      try {
        assert.equal((await load(syn, { path: TINY, model_id: "ml-plain" })).state, "ready");
        const done = await load(syn, { path: TINY, model_id: "ml-prompts", prompts: TABLE });
        assert.equal(done.state, "ready", JSON.stringify(done));
        const q = await embed(syn, "ml-prompts", { input_type: "query" });
        const d = await embed(syn, "ml-prompts", { input_type: "document" });
        const plain = await embed(syn, "ml-plain", { input_type: "query" });
        assert.equal(q.fingerprint, d.fingerprint);
        assert.notDeepEqual(q.vectors[0].vector, d.vectors[0].vector);
        assert.notEqual(q.fingerprint, plain.fingerprint);
        assert.equal(plain.prompt.reason, "no_prompt_table");
        fp = q.fingerprint;
        // The directory's config_sentence_transformers.json: the same table, the same profile.
        const stJob: Any = await load(syn, { path: st, model_id: "ml-st" });
        assert.equal(stJob.state, "ready");
        // The job says where the table came from (pull prints it as a note).
        assert.ok(
          stJob.notes.includes(
            'prompt table from config_sentence_transformers.json: query "query: ", passage "passage: "; input_type / prompt_name select a prompt, and the table is part of the fingerprint',
          ),
          JSON.stringify(stJob.notes),
        );
        assert.equal(done.notes, undefined, "a table the caller sent needs no note");
        const fromFile = await embed(syn, "ml-st", { input_type: "query" });
        assert.equal(fromFile.fingerprint, fp);
        assert.deepEqual(fromFile.vectors[0].vector, q.vectors[0].vector);
        // A bad table is refused before any job, naming the field.
        const bad = semanticError(
          await syn.call("model.load", {
            path: TINY,
            model_id: "ml-bad",
            prompts: TABLE,
            default_prompt_name: "nope",
          }),
        );
        assert.equal(bad.code, "invalid_request");
        assert.equal(bad.details.field, "default_prompt_name");
        // A table on a rerank model fails its load, naming prompts.
        const rr = await load(syn, {
          path: `${MODELS}/synapse-tiny-rerank`,
          model_id: "ml-rerank",
          task: "rerank",
          prompts: TABLE,
        });
        assert.equal(rr.state, "failed");
        assert.equal((rr as Any).error.details.field, "prompts");
      } finally {
        await syn.dispose();
      }
    }
    const syn = await start();
    try {
      const q = await embed(syn, "ml-prompts", { input_type: "query" });
      assert.equal(q.fingerprint, fp, "the table is recorded with the load");
      assert.equal(q.prompt.applied, "query");
    } finally {
      await syn.dispose();
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("F35: a GGUF embed model on llama.cpp takes the prompt table the same way", async () => {
  const gen = `${MODELS}/synapse-tiny-llama`;
  const llama = (modelId: string, extra: Record<string, unknown> = {}) => ({
    engine: "llama",
    model_path: gen,
    tokenizer_path: `${gen}/tokenizer.json`,
    task: "embed",
    model_id: modelId,
    pooling: "mean",
    normalize: true,
    max_tokens: 512,
    ...extra,
  });
  await using t = await startSynapse({
    preload_models: [llama("gguf-prompts", { prompts: TABLE }), llama("gguf-plain")],
  });
  const call = async (model: string, params: Record<string, unknown>): Promise<Any> =>
    resultOf(await t.syn.call("embed.query", { model, text: "hello world", ...params }));
  const q = await call("gguf-prompts", { input_type: "query" });
  const d = await call("gguf-prompts", { input_type: "document" });
  const byHand = await call("gguf-prompts", { text: "query: hello world" });
  const plain = await call("gguf-plain", { input_type: "query" });
  assert.equal(q.fingerprint, d.fingerprint);
  assert.notDeepEqual(q.vectors[0].vector, d.vectors[0].vector);
  assert.deepEqual(q.vectors[0].vector, byHand.vectors[0].vector);
  assert.deepEqual(q.real_token_counts, byHand.real_token_counts);
  assert.notEqual(q.fingerprint, plain.fingerprint);
  assert.equal(plain.prompt.reason, "no_prompt_table");
});

Deno.test("F35: tokenize with prompt_name counts the prompted text as embed does; a model without a table says so and applies nothing", async () => {
  await using t = await withTable();
  const tok: Any = resultOf(
    await t.syn.call("tokenize", { model: "tiny-prompts", texts: ["cats"], prompt_name: "query" }),
  );
  assert.deepEqual(tok.prompt, { requested: "query", selector: "prompt_name", applied: "query" });
  const q: Any = resultOf(
    await t.syn.call("embed.query", { model: "tiny-prompts", text: "cats", prompt_name: "query" }),
  );
  assert.equal(tok.items[0].count, q.real_token_counts[0]);
  // The offsets index the prompted text: its pieces spell "query: cats".
  const text = "query: cats";
  const cps = [...text];
  const spelled = tok.items[0].offsets.map(([a, b]: [number, number]) => cps.slice(a, b).join(""))
    .join("");
  assert.equal(spelled.replaceAll(" ", ""), text.replaceAll(" ", ""));
  assert.equal(tok.items[0].tokenized_text, text);
  assert.equal(tok.items[0].prefix_chars, [..."query: "].length);
  // TEI's /tokenize slices the prompted text with them: every token's text is its piece there.
  await using server = serveHttp(t.syn, { log: nullLog });
  const res = await fetch(`http://127.0.0.1:${server.port}/tokenize`, {
    method: "POST",
    body: JSON.stringify({ inputs: "cats", prompt_name: "query", model: "tiny-prompts" }),
  });
  assert.equal(res.status, 200);
  const [tei]: Any = await res.json();
  const enc = new TextEncoder();
  const bytes = enc.encode(text);
  for (const tk of tei) {
    if (tk.special) continue;
    assert.equal(tk.text, new TextDecoder().decode(bytes.subarray(tk.start, tk.stop)));
  }
  assert.equal(
    tei.filter((tk: Any) => !tk.special).map((tk: Any) => tk.text).join("").replaceAll(" ", ""),
    "query:cats",
  );
  const plain: Any = resultOf(
    await t.syn.call("tokenize", { model: "tiny-prompts", texts: ["cats"] }),
  );
  assert.ok(tok.items[0].count > plain.items[0].count);
  assert.deepEqual(plain.prompt, { requested: null, applied: null, reason: "none_requested" });
  // input_type selects as embed does.
  const byRole: Any = resultOf(
    await t.syn.call("tokenize", { model: "tiny-prompts", texts: ["cats"], input_type: "query" }),
  );
  assert.deepEqual(byRole.items[0].ids, tok.items[0].ids);
  // A model without a table: as embed, the selector applies nothing and the answer says so.
  const none: Any = resultOf(
    await t.syn.call("tokenize", { model: "tiny-plain", texts: ["cats"], prompt_name: "query" }),
  );
  assert.deepEqual(none.prompt, {
    requested: "query",
    selector: "prompt_name",
    applied: null,
    reason: "no_prompt_table",
  });
  assert.equal(none.items[0].tokenized_text, undefined);
  const plainEmbed: Any = resultOf(
    await t.syn.call("embed.query", { model: "tiny-plain", text: "cats", prompt_name: "query" }),
  );
  assert.equal(none.items[0].count, plainEmbed.real_token_counts[0]);
  // An unknown name of a model with a table is refused, as embed refuses it.
  const unknown = semanticError(
    await t.syn.call("tokenize", { model: "tiny-prompts", texts: ["cats"], prompt_name: "nope" }),
  );
  assert.equal(unknown.code, "invalid_request");
  assert.equal(unknown.details.reason, "unknown_prompt_name");
});

Deno.test("F35: with default_prompt_name, tokenize without a selector applies the default as embed does: the same count", async () => {
  await using t = await withTable(TABLE, { default_prompt_name: "passage" });
  const tok: Any = resultOf(
    await t.syn.call("tokenize", { model: "tiny-prompts", texts: ["cats"] }),
  );
  const emb: Any = resultOf(
    await t.syn.call("embed.query", { model: "tiny-prompts", text: "cats" }),
  );
  assert.equal(emb.prompt.applied, "passage");
  assert.deepEqual(tok.prompt, emb.prompt);
  assert.equal(tok.items[0].count, emb.real_token_counts[0]);
  assert.equal(tok.items[0].tokenized_text, "passage: cats");
  assert.equal(tok.items[0].prefix_chars, [..."passage: "].length);
  assert.equal(tok.items[0].prompt_prefix, "applied");
  // A text that already starts with the prefix is not prefixed twice, and says so.
  const twice: Any = resultOf(
    await t.syn.call("tokenize", { model: "tiny-prompts", texts: ["passage: cats"] }),
  );
  assert.equal(twice.items[0].prompt_prefix, "already_present");
  assert.equal(twice.items[0].prefix_chars, 0);
  assert.deepEqual(twice.items[0].ids, tok.items[0].ids);
});
