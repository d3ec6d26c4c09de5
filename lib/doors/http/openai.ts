/**
 * The OpenAI-shaped door (`POST /v1/embeddings`, `GET /v1/models`, `GET /v1/models/{id}`): a
 * mapping of params and results around the one dispatcher, nothing more. An embeddings request
 * becomes an `embed.batch` call (`texts`, `model`) with the door's call options — up to
 * {@link OPENAI_MAX_INPUTS} inputs served as inline chunks under the same lane admission,
 * `dimensions` served as the model's width or one of its Matryoshka widths (else refused), all or
 * nothing — and the outcome becomes OpenAI's response or error body. Model resolution,
 * the disposed check, text checks and admission all happen below, exactly as for
 * `/v1/ops/embed.batch`.
 *
 * @module
 */
import { z } from "zod";
import { SynapseError } from "../../contract/errors.ts";
import { parseDoorParams, wellFormedName } from "../../contract/schemas.ts";
import type { OpOutcome } from "../../ops/dispatcher.ts";
import type { CallOptions } from "../../ops/context.ts";
import type { EmbedResult } from "../../ops/embed.ts";
import type { ModelsListResult } from "../../ops/models.ts";
import type { PromptDisclosure, PromptSelector } from "../../models/prompts.ts";
import { HttpRefusal } from "../_request_body.ts";
import { httpStatusFor, openAiErrorTypeFor } from "./status_table.ts";
import type { OpenAiErrorType } from "./status_table.ts";

/**
 * Most inputs one `/v1/embeddings` call takes (OpenAI's own limit, and what common clients send
 * per call). More is refused naming `input`; use `embed.batch` with a `request_key` for a job.
 */
export const OPENAI_MAX_INPUTS = 2048;

/** Jina's embedding tasks (`task` of its `/v1/embeddings`). */
const JINA_TASKS = [
  "retrieval.query",
  "retrieval.passage",
  "text-matching",
  "classification",
  "separation",
  "code.query",
  "code.passage",
] as const;

/**
 * The prompt selector of a Jina `task`: `retrieval.query` → `input_type: "query"`,
 * `retrieval.passage` → `input_type: "document"` (the prompt `document`, else `passage`, else
 * bare); any other task → the prompt of that name when the model's table has one, else bare.
 * On a model without a prompt table nothing is applied (`synapse.prompt` says so).
 */
export function jinaTaskSelector(task: (typeof JINA_TASKS)[number]): PromptSelector {
  if (task === "retrieval.query") return { input_type: "query" };
  if (task === "retrieval.passage") return { input_type: "document" };
  return { input_type: task };
}

/**
 * OpenAI embeddings request; unknown fields are refused (field report F16). Caller strings pass
 * the native door's checks: `model` and `user` are well-formed names, and each input text is
 * checked by the embed path itself (empty, lone surrogate …) and refused naming `input[i]`.
 * `user` and `metadata` (F24) are accepted and have no effect, named in `synapse.ignored_fields`;
 * token-id inputs (`number[]`) are refused naming `input`. `task` is Jina's (its embeddings API
 * is this shape): it selects the model's prompt ({@link jinaTaskSelector}).
 */
const OpenAiEmbeddingsRequest = z.strictObject({
  input: z.union([z.string(), z.array(z.string())]),
  model: wellFormedName().min(1).optional(),
  encoding_format: z.enum(["float", "base64"]).optional(),
  dimensions: z.number().int().positive().optional(),
  user: wellFormedName().nullable().optional(),
  metadata: z.record(z.string(), z.string()).nullable().optional(),
  task: z.enum(JINA_TASKS).optional(),
});

/** The embeddings fields accepted without effect, in the order `synapse.ignored_fields` names them. */
const IGNORED_EMBEDDINGS_FIELDS = ["metadata", "user"] as const;

/** An embeddings request mapped onto `embed.batch`. */
export interface EmbeddingsCall {
  /** `embed.batch` params: `{texts, model?}`. */
  params: { texts: string[]; model?: string };
  /** The door's call options: inline chunks, required dims, all or nothing. */
  options: CallOptions;
  /** `input` was a string (errors name `input`, not `input[0]`). */
  single: boolean;
  format: "float" | "base64";
  /** The request's fields accepted without effect (`synapse.ignored_fields`). */
  ignored: string[];
}

/**
 * Maps an OpenAI embeddings body to an `embed.batch` call.
 *
 * @param body The parsed JSON body.
 * @param signal The request's signal.
 * @returns The method's params and call options.
 * @throws {SynapseError} channel `invalid_request` naming the field for a malformed body, and
 *   naming `input` for more than {@link OPENAI_MAX_INPUTS} inputs.
 */
/** The caller's texts: a lone surrogate in one is the operation's to refuse, naming the input (F14). */
const TEXTS = ["input", "input.*"];

export function embeddingsCall(body: unknown, signal?: AbortSignal): EmbeddingsCall {
  const p = parseDoorParams("/v1/embeddings", OpenAiEmbeddingsRequest, body, TEXTS);
  const single = typeof p.input === "string";
  // One path for a string and a one-element list (field report F5).
  const texts = typeof p.input === "string" ? [p.input] : p.input;
  if (texts.length > OPENAI_MAX_INPUTS) {
    throw new SynapseError(
      "invalid_request",
      `Cannot embed ${texts.length} inputs in one call: /v1/embeddings takes at most ${OPENAI_MAX_INPUTS}; split them over several calls, or run them as one durable job with POST /v1/ops/embed.batch and a request_key`,
      {
        channel: true,
        details: {
          field: "input",
          reason: "too_many_items",
          items: texts.length,
          max: OPENAI_MAX_INPUTS,
        },
      },
    );
  }
  return {
    params: { texts, ...(p.model === undefined ? {} : { model: p.model }) },
    options: {
      signal,
      embed: {
        inlineChunksUpTo: OPENAI_MAX_INPUTS,
        allOrNothing: true,
        requiredDims: p.dimensions,
        prompt: p.task === undefined ? undefined : jinaTaskSelector(p.task),
      },
    },
    single,
    format: p.encoding_format ?? "float",
    ignored: IGNORED_EMBEDDINGS_FIELDS.filter((name) => p[name] !== undefined && p[name] !== null),
  };
}

/** The OpenAI error body `{error: {message, type, code, param}}`. */
export interface OpenAiError {
  error: {
    message: string;
    /** {@link openAiErrorTypeFor} of the code (`permission_error` for a refused Host/Origin). */
    type: OpenAiErrorType;
    /** The Synapse stable code. */
    code: string;
    /** The offending field, e.g. `input[2]`, or null. */
    param: string | null;
    retry_after_ms?: number;
  };
}

/** An answer of the OpenAI door: status, body and the error it carries (for headers and logs). */
export interface OpenAiAnswer {
  status: number;
  body: unknown;
  error?: SynapseError;
  /** The fingerprint of the vectors, for `x-synapse-fingerprint`. */
  fingerprint?: string | undefined;
  /** The prompt disclosure, for `x-synapse-prompt`. */
  prompt?: PromptDisclosure | undefined;
}

/**
 * The OpenAI body of an error, its `param` named in OpenAI's terms.
 *
 * @param e The error.
 * @param single The request's `input` was a string.
 */
export function openAiError(e: SynapseError, single = false): OpenAiAnswer {
  const status = e instanceof HttpRefusal ? e.status : httpStatusFor(e.code);
  const field = e.details?.field;
  const type: OpenAiErrorType = e instanceof HttpRefusal && e.status === 403
    ? "permission_error"
    : openAiErrorTypeFor(e.code);
  const body: OpenAiError = {
    error: {
      message: e.message,
      type,
      code: e.code,
      param: typeof field === "string" ? openAiParam(field, single) : null,
    },
  };
  if (e.retryAfterMs !== undefined) body.error.retry_after_ms = e.retryAfterMs;
  return { status, body, error: e };
}

/**
 * A field path in OpenAI's terms: `texts` / `items` (of `embed.batch`) → `input`, `texts.3` and
 * `input.3` → `input[3]` (`input` when the input was one string), `model_id` → `model`.
 */
export function openAiParam(field: string, single: boolean): string {
  const m = /^(?:texts|items|input)(?:\.(\d+))?(?:\..*)?$/.exec(field);
  if (m) return m[1] === undefined || single ? "input" : `input[${m[1]}]`;
  if (field === "model_id") return "model";
  return field;
}

/**
 * Maps the `embed.batch` outcome to OpenAI's answer: the list of embeddings with `usage` (and
 * Synapse's identity facts under `synapse`), or the error. OpenAI clients expect all or nothing:
 * a result with a refused item answers that item's error, naming `input[i]`.
 *
 * @param outcome The dispatcher's outcome.
 * @param call The mapped request.
 */
export function embeddingsAnswer(outcome: OpOutcome, call: EmbeddingsCall): OpenAiAnswer {
  if (outcome.kind !== "result") return openAiError(outcome.error, call.single);
  const res = outcome.body.result as EmbedResult;
  const refused = res.item_errors?.[0];
  if (refused !== undefined) {
    const more = res.item_errors!.length - 1;
    const suffix = more > 0 ? ` (and ${more} more input${more > 1 ? "s" : ""} refused)` : "";
    const e = new SynapseError(refused.error.code, `${refused.error.message}${suffix}`, {
      details: { ...refused.error.details, field: `texts.${refused.index}` },
      ...(refused.error.retry_after_ms === undefined
        ? {}
        : { retryAfterMs: refused.error.retry_after_ms }),
    });
    return openAiError(e, call.single);
  }
  const promptTokens = res.real_token_counts.reduce((a, b) => a + b, 0);
  const synapse: Record<string, unknown> = {
    // The model that served; `model` is the name the request gave (a model alias, docs/config.md).
    model_id: res.model_id,
    fingerprint: res.fingerprint,
    table_epoch: res.table_epoch,
    dims: res.dims,
    provenance: res.provenance,
    module_generation: res.module_generation,
    equivalent_to: res.equivalent_to,
  };
  if (res.test_model) synapse.test_model = true;
  synapse.items = res.vectors.map((v) => ({
    index: Number(v.id),
    content_sha256: v.content_sha256,
    submitted_sha256: v.submitted_sha256,
  }));
  synapse.real_token_counts = res.real_token_counts;
  synapse.truncation_disclosures = res.truncation_disclosures;
  if (res.prompt !== undefined) synapse.prompt = res.prompt;
  synapse.queue_time_ms = res.queue_time_ms;
  synapse.inference_time_ms = res.inference_time_ms;
  if (call.ignored.length > 0) synapse.ignored_fields = call.ignored;
  const body = {
    object: "list",
    data: res.vectors.map((v) => ({
      object: "embedding",
      index: Number(v.id),
      embedding: call.format === "base64" ? float32Base64LE(v.vector) : v.vector,
    })),
    model: res.requested_model ?? res.model_id,
    usage: { prompt_tokens: promptTokens, total_tokens: promptTokens },
    synapse,
  };
  return {
    status: 200,
    body,
    fingerprint: res.fingerprint,
    prompt: res.prompt,
  };
}

/**
 * Maps the `models.list` outcome to OpenAI's model list `{object: "list", data: [{id, object:
 * "model", created, owned_by}]}`; each entry adds Synapse's facts under `synapse` (task, state and
 * why it is not ready, dims, fingerprint). Then one entry per config `model_aliases` name whose
 * model is listed: `id` the alias, `synapse` its model's facts and `alias_of` its model id, so a
 * client that checks the list before calling finds the name it defaults to.
 *
 * @param outcome The dispatcher's `models.list` outcome.
 * @param createdSec `created` of every entry: when this server started, in Unix seconds.
 */
export function modelsAnswer(outcome: OpOutcome, createdSec: number): OpenAiAnswer {
  if (outcome.kind !== "result") return openAiError(outcome.error);
  const res = outcome.body.result as ModelsListResult;
  return {
    status: 200,
    body: {
      object: "list",
      data: [
        ...res.models.map((m) => modelEntry(m.model_id, m, createdSec)),
        ...aliasRows(res).map(([alias, m]) => modelEntry(alias, m, createdSec, m.model_id)),
      ],
    },
  };
}

/**
 * Maps the `models.list` outcome to OpenAI's model object of one id (`GET /v1/models/{id}`):
 * `{id, object: "model", created, owned_by, synapse}`, the entry {@link modelsAnswer} lists for
 * it (a model alias's entry too, `synapse.alias_of` naming its model); an id that is not served is
 * 404 `unknown_model` in OpenAI's error body, its message listing the models served.
 *
 * @param outcome The dispatcher's `models.list` outcome.
 * @param id The model id asked for (decoded from the path).
 * @param createdSec `created`: when this server started, in Unix seconds.
 */
export function modelAnswer(outcome: OpOutcome, id: string, createdSec: number): OpenAiAnswer {
  if (outcome.kind !== "result") return openAiError(outcome.error);
  const res = outcome.body.result as ModelsListResult;
  const row = res.models.find((m) => m.model_id === id);
  const alias = row === undefined ? aliasRows(res).find(([name]) => name === id) : undefined;
  if (alias !== undefined) {
    return { status: 200, body: modelEntry(id, alias[1], createdSec, alias[1].model_id) };
  }
  if (row === undefined) {
    const known = res.models.map((m) => m.model_id);
    return openAiError(
      new SynapseError(
        "unknown_model",
        `Cannot describe model '${id}': it is not served here; the models served are ${
          known.length === 0 ? "none" : known.join(", ")
        } (GET /v1/models lists them)`,
        { details: { field: "model", model_id: id, known } },
      ),
    );
  }
  return { status: 200, body: modelEntry(row.model_id, row, createdSec) };
}

/**
 * One model of OpenAI's model list, Synapse's facts under `synapse`: the model itself, or a model
 * alias (`id` the alias, `aliasOf` its model, named in `synapse.alias_of`).
 */
function modelEntry(
  id: string,
  m: ModelsListResult["models"][number],
  createdSec: number,
  aliasOf?: string,
): unknown {
  return {
    id,
    object: "model",
    created: createdSec,
    owned_by: "synapse",
    synapse: {
      ...(aliasOf === undefined ? {} : { alias_of: aliasOf }),
      task: m.task,
      state: m.state,
      ...(m.state_reason === undefined ? {} : { state_reason: m.state_reason }),
      ...(m.dims === undefined ? {} : { dims: m.dims }),
      ...(m.fingerprints[0] === undefined ? {} : { fingerprint: m.fingerprints[0] }),
      ...(m.test_model ? { test_model: true } : {}),
    },
  };
}

/**
 * The `models.list` model of each `model_aliases` row whose model is listed, in the table's
 * order: `[alias, row]`.
 *
 * @param list The `models.list` result.
 */
export function aliasRows(list: ModelsListResult): [string, ModelsListResult["models"][number]][] {
  const out: [string, ModelsListResult["models"][number]][] = [];
  for (const a of list.model_aliases ?? []) {
    const m = list.models.find((row) => row.model_id === a.model_id);
    if (m !== undefined) out.push([a.model_alias, m]);
  }
  return out;
}

/**
 * Base64 of a vector as little-endian float32 bytes (OpenAI's `encoding_format: "base64"`).
 *
 * @param vector The values.
 * @returns Standard base64 (with padding) of `4 × vector.length` bytes.
 */
export function float32Base64LE(vector: ArrayLike<number>): string {
  const bytes = new Uint8Array(vector.length * 4);
  const view = new DataView(bytes.buffer);
  for (let i = 0; i < vector.length; i++) view.setFloat32(i * 4, vector[i]!, true);
  let binary = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return btoa(binary);
}
