/**
 * Embeddings in the shape Cohere's clients send: `POST /v1/embed` and `POST /v2/embed`. A mapping
 * around `embed.batch` through the dispatcher, nothing more: the same model resolution, text
 * checks, admission and error codes as `POST /v1/ops/embed.batch`, all or nothing.
 *
 * Semantics kept, never changed silently:
 *
 * - `input_type` selects the model's prompt (lib/models/prompts.ts; F35): `search_query` → the
 *   prompt `query`; `search_document` → `document`, else `passage`, else none (embedded bare);
 *   `classification` / `clustering` → the prompt of that name when the table has one, else none.
 *   On a model without a prompt table nothing is applied; `synapse.prompt` (and `x-synapse-prompt`)
 *   says what was applied and why. `image` is refused (text only).
 * - `truncate`: `END` (Cohere's default) cuts an over-long text's end and discloses it in
 *   `synapse.truncation_disclosures`; `NONE` refuses it (`sequence_too_long` naming `texts[i]`);
 *   `START` is refused (Synapse cuts only the end).
 * - `embedding_types`: only `float` is served; any other type is refused naming the field.
 *   `output_dimension` must equal the model's width.
 *
 * Answers: v1 `{id, embeddings: number[][], texts, meta, response_type: "embeddings_floats"}`,
 * v2 `{id, embeddings: {float: number[][]}, texts, meta, response_type: "embeddings_by_type"}`,
 * both with Synapse's facts under `synapse`. Errors are `{message, code, field?,
 * retry_after_ms?}` (as the Cohere rerank door's) with the status of the one status table.
 *
 * @module
 */
import { z } from "zod";
import { SynapseError } from "../../contract/errors.ts";
import { parseDoorParams, wellFormedName } from "../../contract/schemas.ts";
import type { PromptSelector } from "../../models/prompts.ts";
import {
  type AdapterAnswer,
  type AdapterIo,
  type AdapterRoute,
  doorStatus,
  embedAllOrNothing,
  errorField,
} from "./_adapter.ts";
import { OPENAI_MAX_INPUTS } from "./openai.ts";

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

/**
 * A Cohere embed request (v1 and v2); unknown fields are refused naming them (`images`, `inputs`:
 * text only here).
 */
const CohereEmbedRequest = z.strictObject({
  model: wellFormedName().optional(),
  texts: z.array(z.string()),
  input_type: CohereInputType.optional(),
  embedding_types: z.array(z.string()).optional(),
  truncate: z.enum(["NONE", "START", "END"]).optional(),
  output_dimension: z.number().int().positive().optional(),
});

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
    error: cohereEmbedError,
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
  ]);
  if (p.texts.length > COHERE_MAX_TEXTS) {
    throw new SynapseError(
      "invalid_request",
      `Cannot embed ${p.texts.length} texts in one call: at most ${COHERE_MAX_TEXTS}; split them over several calls, or run them as one durable job with POST /v1/ops/embed.batch and a request_key`,
      {
        channel: true,
        details: {
          field: "texts",
          reason: "too_many_items",
          items: p.texts.length,
          max: COHERE_MAX_TEXTS,
        },
      },
    );
  }
  const other = (p.embedding_types ?? []).find((t) => t !== "float");
  if (other !== undefined) {
    throw new SynapseError(
      "invalid_request",
      `Cannot serve embedding type '${other}': Synapse serves float embeddings only; ask for ["float"]`,
      { channel: true, details: { field: "embedding_types", reason: "unsupported", type: other } },
    );
  }
  if (p.truncate === "START") {
    throw new SynapseError(
      "invalid_request",
      "Cannot truncate from the START: Synapse cuts an over-long text at its end (END, the default) or refuses it (NONE)",
      { channel: true, details: { field: "truncate", reason: "unsupported" } },
    );
  }
  const prompt = p.input_type === undefined ? undefined : cohereInputTypeSelector(p.input_type);
  const served = await embedAllOrNothing(io, {
    texts: p.texts,
    ...(p.model === undefined ? {} : { model: p.model }),
    ...(p.truncate === "NONE" ? {} : { truncate: true }),
  }, {
    maxInputs: COHERE_MAX_TEXTS,
    dimensions: p.output_dimension,
    list: "texts",
    prompt,
  });
  if ("error" in served) return cohereEmbedError(served.error);
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
  };
  return {
    status: 200,
    fingerprint: res.fingerprint,
    prompt: res.prompt,
    body: {
      id: crypto.randomUUID(),
      embeddings: v2 ? { float: vectors } : vectors,
      texts: p.texts,
      meta: { api_version: { version: v2 ? "2" : "1" }, billed_units: { input_tokens: tokens } },
      response_type: v2 ? "embeddings_by_type" : "embeddings_floats",
      synapse,
    },
  };
}

/**
 * The Cohere error body `{message, code, field?, retry_after_ms?}` (`field` in the door's terms:
 * `texts[3]`, `input_type`, `model`) with the status of the one status table.
 */
function cohereEmbedError(e: SynapseError): AdapterAnswer {
  const field = errorField(e, "texts");
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
