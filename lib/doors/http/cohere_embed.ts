/**
 * Embeddings in the shape Cohere's clients send: `POST /v1/embed` and `POST /v2/embed`. A mapping
 * around `embed.batch` through the dispatcher, nothing more: the same model resolution, text
 * checks, admission and error codes as `POST /v1/ops/embed.batch`, all or nothing.
 *
 * Semantics kept, never changed silently:
 *
 * - The texts are `texts`, or v2's `inputs` (`[{content: [{type: "text", text}]}]`: one text
 *   part per input; an image part, or several parts in one input, is refused naming it).
 *   `images` is refused (text only).
 * - `input_type` selects the model's prompt (lib/models/prompts.ts; F35): `search_query` → the
 *   prompt `query`; `search_document` → `document`, else `passage`, else none (embedded bare);
 *   `classification` / `clustering` → the prompt of that name when the table has one, else none.
 *   On a model without a prompt table nothing is applied; `synapse.prompt` (and `x-synapse-prompt`)
 *   says what was applied and why. `image` is refused (text only).
 * - `truncate`: `END` (Cohere's default) cuts an over-long text's end and discloses it in
 *   `synapse.truncation_disclosures`; `NONE` refuses it (`sequence_too_long` naming `texts[i]`);
 *   `START` is refused (Synapse cuts only the end).
 * - `embedding_types`: `float` (the model's vectors) and `base64` (the same vectors as
 *   little-endian float32 bytes, base64-encoded, as Cohere encodes them), each answered under its
 *   key; `int8`, `uint8`, `binary` and `ubinary` are Cohere's own quantisations and are refused
 *   naming the field. `output_dimension` is the model's width or one of its `matryoshka_dims`.
 * - `max_tokens` (v2) at or above the model's own limit changes nothing and is accepted; below it
 *   is refused naming it (Synapse cuts an input only at the model's limit).
 * - `priority` (v2's scheduling hint) is accepted, has no effect, and is named in
 *   `synapse.ignored_fields`.
 *
 * Answers: v1 without `embedding_types` `{id, embeddings: number[][], texts, meta, response_type:
 * "embeddings_floats"}`; v2, and v1 with `embedding_types`, `{id, embeddings: {float?, base64?},
 * texts, meta, response_type: "embeddings_by_type"}`; both with Synapse's facts under `synapse`.
 * Errors are `{message, code, field?, retry_after_ms?}` (as the Cohere rerank door's) with the
 * status of the one status table.
 *
 * @module
 */
import { z } from "zod";
import { SynapseError } from "../../contract/errors.ts";
import { parseDoorParams, wellFormedName } from "../../contract/schemas.ts";
import type { PromptSelector } from "../../models/prompts.ts";
import type { ModelsListResult } from "../../ops/models.ts";
import {
  type AdapterAnswer,
  type AdapterIo,
  type AdapterRoute,
  doorStatus,
  embedAllOrNothing,
  errorField,
} from "./_adapter.ts";
import { float32Base64LE, OPENAI_MAX_INPUTS } from "./openai.ts";

/** Most texts one Cohere embed call takes (Cohere's own limit is 96; Synapse takes more). */
export const COHERE_MAX_TEXTS = OPENAI_MAX_INPUTS;

/** Cohere's embed `input_type`s. */
const CohereInputType = z.enum([
  "search_query",
  "search_document",
  "classification",
  "clustering",
  "image",
]);

/** The embedding types Synapse serves: the model's vectors, as numbers or as float32 bytes. */
const SERVED_TYPES = ["float", "base64"] as const;

/** One part of a v2 `inputs` entry: a text, or an image (refused: text only). */
const CohereContent = z.strictObject({
  type: z.enum(["text", "image_url"]),
  text: z.string().optional(),
  image_url: z.unknown().optional(),
});

/**
 * A Cohere embed request (v1 and v2); unknown fields are refused naming them. `images` is in the
 * schema only to be refused by name (text only here).
 */
const CohereEmbedRequest = z.strictObject({
  model: wellFormedName().optional(),
  texts: z.array(z.string()).optional(),
  inputs: z.array(z.strictObject({ content: z.array(CohereContent) })).optional(),
  images: z.array(z.unknown()).optional(),
  input_type: CohereInputType.optional(),
  embedding_types: z.array(z.string()).optional(),
  truncate: z.enum(["NONE", "START", "END"]).optional(),
  output_dimension: z.number().int().positive().optional(),
  max_tokens: z.number().int().positive().optional(),
  priority: z.number().int().nonnegative().optional(),
});
type CohereEmbedRequest = z.infer<typeof CohereEmbedRequest>;

/**
 * The prompt selector of a Cohere `input_type` (see the module doc).
 *
 * @throws {SynapseError} channel `invalid_request {field: "input_type"}` for `image`.
 */
export function cohereInputTypeSelector(
  inputType: z.infer<typeof CohereInputType>,
): PromptSelector {
  if (inputType === "search_query") return { input_type: "query" };
  if (inputType === "search_document") return { input_type: "document" };
  if (inputType === "image") {
    throw new SynapseError(
      "invalid_request",
      "Cannot embed with input_type 'image': Synapse embeds text only; send texts with search_query, search_document, classification or clustering",
      { channel: true, details: { field: "input_type", reason: "unsupported" } },
    );
  }
  return { input_type: inputType };
}

/**
 * The route of a Cohere embed path, or undefined.
 *
 * @param path The request path.
 * @returns The route of `/v1/embed` or `/v2/embed`.
 */
export function cohereEmbedRoute(path: string): AdapterRoute | undefined {
  if (path !== "/v1/embed" && path !== "/v2/embed") return undefined;
  const v2 = path === "/v2/embed";
  return {
    op: "embed.batch",
    method: "POST",
    serve: (io) => cohereEmbed(io, v2),
    error: (e) => cohereEmbedError(e),
  };
}

/**
 * Serves a Cohere embed request.
 *
 * @param io The request's io.
 * @param v2 The `/v2/embed` shape (embeddings by type).
 * @throws {SynapseError} channel `invalid_request` naming the field for a malformed or refused
 *   field (the route answers it in Cohere's error shape).
 */
async function cohereEmbed(io: AdapterIo, v2: boolean): Promise<AdapterAnswer> {
  const p = parseDoorParams(v2 ? "/v2/embed" : "/v1/embed", CohereEmbedRequest, await io.body(), [
    "texts.*",
    "inputs.*.content.*.text",
  ]);
  const texts = textsOf(p);
  if (texts.length > COHERE_MAX_TEXTS) {
    const field = p.texts === undefined ? "inputs" : "texts";
    throw new SynapseError(
      "invalid_request",
      `Cannot embed ${texts.length} ${field} in one call: at most ${COHERE_MAX_TEXTS}; split them over several calls, or run them as one durable job with POST /v1/ops/embed.batch and a request_key`,
      {
        channel: true,
        details: {
          field,
          reason: "too_many_items",
          items: texts.length,
          max: COHERE_MAX_TEXTS,
        },
      },
    );
  }
  const types = embeddingTypesOf(p.embedding_types);
  if (p.truncate === "START") {
    throw new SynapseError(
      "invalid_request",
      "Cannot truncate from the START: Synapse cuts an over-long text at its end (END, the default) or refuses it (NONE)",
      { channel: true, details: { field: "truncate", reason: "unsupported" } },
    );
  }
  const prompt = p.input_type === undefined ? undefined : cohereInputTypeSelector(p.input_type);
  if (p.max_tokens !== undefined) await checkMaxTokens(io, p.model, p.max_tokens);
  const served = await embedAllOrNothing(io, {
    texts,
    ...(p.model === undefined ? {} : { model: p.model }),
    ...(p.truncate === "NONE" ? {} : { truncate: true }),
  }, {
    maxInputs: COHERE_MAX_TEXTS,
    dimensions: p.output_dimension,
    list: "texts",
    prompt,
  });
  if ("error" in served) return cohereEmbedError(served.error, p.texts === undefined);
  const res = served.result;
  const vectors = res.vectors.map((v) => v.vector);
  const tokens = res.real_token_counts.reduce((a, b) => a + b, 0);
  const synapse: Record<string, unknown> = {
    model_id: res.model_id,
    ...(res.requested_model === undefined ? {} : { requested_model: res.requested_model }),
    fingerprint: res.fingerprint,
    table_epoch: res.table_epoch,
    dims: res.dims,
    provenance: res.provenance,
    module_generation: res.module_generation,
    equivalent_to: res.equivalent_to,
    ...(res.test_model ? { test_model: true } : {}),
    items: res.vectors.map((v) => ({
      index: Number(v.id),
      content_sha256: v.content_sha256,
      submitted_sha256: v.submitted_sha256,
    })),
    real_token_counts: res.real_token_counts,
    truncation_disclosures: res.truncation_disclosures,
    ...(res.prompt === undefined ? {} : { prompt: res.prompt }),
    queue_time_ms: res.queue_time_ms,
    inference_time_ms: res.inference_time_ms,
    // v2's scheduling hint: accepted, of no effect here, named.
    ...(p.priority === undefined ? {} : { ignored_fields: ["priority"] }),
  };
  // v1 answers floats alone unless embedding_types asks for types (then by type, as Cohere).
  const byType = v2 || p.embedding_types !== undefined;
  const embeddings: Record<string, unknown> = {};
  for (const t of types) {
    embeddings[t] = t === "float" ? vectors : vectors.map((v) => float32Base64LE(v));
  }
  return {
    status: 200,
    fingerprint: res.fingerprint,
    prompt: res.prompt,
    body: {
      id: crypto.randomUUID(),
      embeddings: byType ? embeddings : vectors,
      texts,
      meta: { api_version: { version: v2 ? "2" : "1" }, billed_units: { input_tokens: tokens } },
      response_type: byType ? "embeddings_by_type" : "embeddings_floats",
      synapse,
    },
  };
}

/**
 * The texts of a request: `texts`, or one text per v2 `inputs` entry.
 *
 * @throws {SynapseError} channel `invalid_request` naming `images` (text only), `texts` (neither
 *   `texts` nor `inputs`), `inputs` (both), or `inputs[i].content` / `inputs[i].content[j]` for
 *   an entry that is not exactly one text part.
 */
function textsOf(p: CohereEmbedRequest): string[] {
  const refuse = (field: string, reason: string, why: string): never => {
    throw new SynapseError("invalid_request", `Cannot embed: ${why}`, {
      channel: true,
      details: { field, reason },
    });
  };
  if (p.images !== undefined) {
    refuse("images", "unsupported", "Synapse embeds text only; send texts, not images");
  }
  if (p.texts !== undefined && p.inputs !== undefined) {
    refuse("inputs", "conflicting_fields", "send texts or inputs, not both");
  }
  if (p.texts !== undefined) return p.texts;
  if (p.inputs === undefined) refuse("texts", "missing", "send the texts to embed in texts");
  return p.inputs!.map((input, i) => {
    const image = input.content.findIndex((c) => c.type !== "text");
    if (image >= 0) {
      refuse(
        `inputs[${i}].content[${image}]`,
        "unsupported",
        `inputs[${i}].content[${image}] is an image; Synapse embeds text only`,
      );
    }
    const [only, ...more] = input.content;
    if (only === undefined || more.length > 0 || only.text === undefined) {
      refuse(
        `inputs[${i}].content`,
        "unsupported",
        `inputs[${i}].content has ${input.content.length} parts; Synapse embeds one text part per input (send several texts as several inputs)`,
      );
    }
    return only!.text!;
  });
}

/**
 * The embedding types asked for, each once, in the order asked (`["float"]` when none).
 *
 * @throws {SynapseError} channel `invalid_request {field: "embedding_types"}` for an empty list
 *   or a type other than `float` and `base64`.
 */
function embeddingTypesOf(asked: string[] | undefined): (typeof SERVED_TYPES)[number][] {
  if (asked === undefined) return ["float"];
  if (asked.length === 0) {
    throw new SynapseError(
      "invalid_request",
      'Cannot embed with no embedding type: ask for ["float"], ["base64"] or both',
      { channel: true, details: { field: "embedding_types", reason: "empty" } },
    );
  }
  const other = asked.find((t) => !(SERVED_TYPES as readonly string[]).includes(t));
  if (other !== undefined) {
    throw new SynapseError(
      "invalid_request",
      `Cannot serve embedding type '${other}': Synapse serves the model's own vectors, as float or base64 (their float32 bytes); int8, uint8, binary and ubinary are Cohere's quantisations and are not computed here`,
      { channel: true, details: { field: "embedding_types", reason: "unsupported", type: other } },
    );
  }
  return [...new Set(asked)] as (typeof SERVED_TYPES)[number][];
}

/**
 * Refuses a v2 `max_tokens` below the limit of the model the texts would be embedded by (at or
 * above it, it changes nothing: the model's own limit cuts or refuses first).
 *
 * @throws {SynapseError} channel `invalid_request {field: "max_tokens", max_tokens, model_id}`.
 */
async function checkMaxTokens(
  io: AdapterIo,
  model: string | undefined,
  maxTokens: number,
): Promise<void> {
  const { outcome } = await io.backend().call("models.list", {}, { signal: io.signal });
  if (outcome.kind !== "result") throw outcome.error;
  const list = outcome.body.result as ModelsListResult;
  const id = model ?? list.served_by.embed;
  const row = list.models.find((m) => m.model_id === id && m.task === "embed");
  // An unknown model is left to embed.batch, which names it.
  if (row === undefined || maxTokens >= row.max_tokens) return;
  throw new SynapseError(
    "invalid_request",
    `Cannot embed with max_tokens ${maxTokens}: Synapse cuts an input only at the model's own limit (${row.max_tokens} tokens for '${row.model_id}'); leave max_tokens out or send ${row.max_tokens} or more`,
    {
      channel: true,
      details: {
        field: "max_tokens",
        reason: "unsupported",
        max_tokens: row.max_tokens,
        model_id: row.model_id,
      },
    },
  );
}

/**
 * The Cohere error body `{message, code, field?, retry_after_ms?}` (`field` in the door's terms:
 * `texts[3]` — `inputs[3]` when the request sent `inputs` —, `input_type`, `model`) with the
 * status of the one status table.
 */
function cohereEmbedError(e: SynapseError, inputs = false): AdapterAnswer {
  const field = errorField(e, inputs ? "inputs" : "texts");
  return {
    status: doorStatus(e),
    error: e,
    body: {
      message: e.message,
      code: e.code,
      ...(field === undefined ? {} : { field }),
      ...(e.retryAfterMs === undefined ? {} : { retry_after_ms: e.retryAfterMs }),
    },
  };
}
