/**
 * Field reports F33 and F34 through the real door: `/v1/chat/completions` with
 * `response_format: {type: "json_schema"}` on the tiny llama fixture (a real llama worker).
 * Schemas written by a real schema library (zod 4's `z.toJSONSchema`, in three targets) compile,
 * and what the model generates under them parses and passes that library's own validation;
 * numbers are finite; integer bounds at the safe-integer range are disclosed; a schema nested
 * 3,000 deep is a 400 naming its path, not a 500.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { z } from "zod";
import { loadConfig } from "../../../lib/config/loader.ts";
import { MAX_SCHEMA_DEPTH } from "../../../lib/grammar/json_schema_gbnf.ts";
import { serveHttp } from "../../../lib/doors/http/server.ts";
import { nullLog } from "../../../lib/log/log.ts";
import { createSynapse } from "../../../lib/synapse.ts";
import { MODELS } from "../../_helpers.ts";

const GEN = `${MODELS}/synapse-tiny-llama`;

async function served() {
  const dir = await Deno.makeTempDir({ prefix: "synapse-schema-" });
  const env = {
    XDG_DATA_HOME: `${dir}/data`,
    XDG_CONFIG_HOME: `${dir}/config`,
    HOME: dir,
    SYNAPSE_CONFIG_JSON: JSON.stringify({
      certification: "warn",
      grammar_enabled: true,
      // Constrained generation of a whole record on a busy test machine can pass 30 s.
      inline: { deadline_ms: 600_000 },
      preload_models: [{
        engine: "llama",
        model_path: GEN,
        tokenizer_path: `${GEN}/tokenizer.json`,
        task: "generate",
        model_id: "gen",
      }],
    }),
  };
  const { config } = loadConfig({ env, cwd: dir });
  const syn = await createSynapse({ config, env, log: nullLog });
  const server = serveHttp(syn, { log: nullLog });
  const base = `http://127.0.0.1:${server.port}`;
  const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused", maxRetries: 0 });
  return {
    base,
    client,
    async [Symbol.asyncDispose]() {
      await server.shutdown();
      await syn.dispose();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

// deno-lint-ignore no-explicit-any
type Any = any;

const Item = z.object({
  label: z.string().max(6).describe("a short label"),
  count: z.number().int().min(0).max(150),
  id: z.int(), // safe-integer bounds (F34)
  score: z.number().min(0).max(1),
  weight: z.number().positive(),
  note: z.string().max(4).nullable(),
  kind: z.enum(["a", "b"]),
  flag: z.boolean().optional(),
}).strict();

const Tree: Any = z.object({
  v: z.number().int().min(-5).max(5),
  get kids() {
    return z.array(Tree).max(1);
  },
});

const Tags = z.object({ tags: z.record(z.string().max(3), z.boolean()) }).strict();

Deno.test("schema-library output compiles through /v1/chat/completions; the answer parses and validates (F33, F34)", async (t) => {
  await using d = await served();
  const chat = async (schema: unknown, maxTokens = 300) =>
    await d.client.chat.completions.create({
      model: "gen",
      messages: [{ role: "user", content: "Give me a record as JSON." }],
      max_tokens: maxTokens,
      response_format: {
        type: "json_schema",
        json_schema: { name: "out", schema: schema as Record<string, unknown>, strict: true },
      },
    });
  const cases: [string, z.ZodType, Record<string, unknown>][] = [
    ["zod draft 2020-12", Item, z.toJSONSchema(Item)],
    ["zod draft-7", Item, z.toJSONSchema(Item, { target: "draft-7" })],
    [
      "zod openapi-3.0 (nullable, boolean exclusiveMinimum)",
      Item,
      z.toJSONSchema(Item, { target: "openapi-3.0" }),
    ],
    ["zod recursive type ($ref '#')", Tree, z.toJSONSchema(Tree)],
    ["zod record (propertyNames, additionalProperties schema)", Tags, z.toJSONSchema(Tags)],
  ];
  for (const [name, type, schema] of cases) {
    await t.step(name, async () => {
      const c = await chat(schema);
      const text = c.choices[0]!.message.content!;
      assert.equal(c.choices[0]!.finish_reason, "stop", text);
      assert.equal((c as Any).synapse.json_complete, true, text);
      const value = JSON.parse(text);
      // The schema library's own validation of what was generated.
      const parsed = type.safeParse(value);
      assert.ok(parsed.success, `${text}: ${JSON.stringify(parsed.error?.issues)}`);
      if (type === Item) {
        // z.int()'s bounds are ±(2^53 − 1): read as no bound, and said so.
        const notes = (c as Any).synapse.schema_notes as { field: string; reason: string }[];
        assert.deepEqual(
          notes.map((n) => [n.field, n.reason]),
          [
            ["response_format.json_schema.schema.properties.id.minimum", "beyond_safe_integer"],
            ["response_format.json_schema.schema.properties.id.maximum", "beyond_safe_integer"],
          ],
        );
      }
    });
  }

  await t.step("{type: number}: the generated number is finite (F33)", async () => {
    const c = await chat(
      { type: "object", properties: { x: { type: "number" } }, required: ["x"] },
      64,
    );
    const text = c.choices[0]!.message.content!;
    assert.equal(c.choices[0]!.finish_reason, "stop", text);
    assert.ok(Number.isFinite(JSON.parse(text).x), text);
  });

  await t.step(
    "the field reports' own schemas: {type: number} (F33), a safe-integer range (F34)",
    async () => {
      const n = await chat({ type: "number" }, 64);
      const nText = n.choices[0]!.message.content!;
      assert.ok(Number.isFinite(JSON.parse(nText)), nText);
      const safe = Number.MAX_SAFE_INTEGER;
      const i = await chat({ type: "integer", minimum: -safe, maximum: safe }, 64);
      const iText = i.choices[0]!.message.content!;
      assert.equal(i.choices[0]!.finish_reason, "stop", iText);
      assert.ok(Number.isSafeInteger(JSON.parse(iText)), iText);
      assert.deepEqual(
        ((i as Any).synapse.schema_notes as { keyword: string }[]).map((x) => x.keyword),
        ["minimum", "maximum"],
      );
    },
  );

  await t.step("a schema nested 3000 deep is a 400 naming its path, not a 500", async () => {
    let schema: unknown = { type: "string" };
    for (let i = 0; i < 3000; i++) {
      schema = { type: "object", properties: { a: schema }, required: ["a"] };
    }
    const res = await fetch(`${d.base}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        model: "gen",
        messages: [{ role: "user", content: "x" }],
        max_tokens: 8,
        response_format: { type: "json_schema", json_schema: { name: "deep", schema } },
      }),
    });
    const body = await res.json();
    assert.equal(res.status, 400, JSON.stringify(body).slice(0, 300));
    assert.equal(body.error.code, "invalid_request");
    assert.match(body.error.param, /^response_format\.json_schema\.schema(\.properties\.a)+$/);
    assert.ok(body.error.message.includes(`${MAX_SCHEMA_DEPTH} levels`), body.error.message);
  });
});
