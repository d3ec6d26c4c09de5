/**
 * The door in Ollama's shape: `POST /api/embed` and `GET /api/tags`. A mapping of params and
 * results around `embed.batch` and `models.list` through the dispatcher, nothing more. Its
 * generation routes (`/api/generate`, `/api/chat`, `/api/show`, `/api/ps`) are
 * lib/doors/http/ollama_generate.ts.
 *
 * Semantics:
 *
 * - `truncate` defaults to **true**, as in Ollama ("truncates the end of each input to fit within
 *   context length"): an over-long input is cut to the model's `max_tokens`, and the cut is
 *   disclosed under `synapse.truncation_disclosures`. `truncate: false` refuses it
 *   (`sequence_too_long`, 422), never cuts it.
 * - The vectors are the model's own (normalised when its config says `normalize`); Ollama's
 *   models normalise theirs, Synapse never rescales a model's vectors.
 * - No `input` (or `""`, or `[]`) is Ollama's warm-up call: the model is resolved and checked as for
 *   an embedding (unknown: 404; loading: 503), and the answer is `{model, embeddings: []}`
 *   (`/api/embeddings` without `prompt`: `{embedding: []}`), as Ollama answers after loading.
 * - `options.num_ctx` (a positive integer) below the model's `max_tokens` is this call's context:
 *   an input over it is cut to `num_ctx` tokens (the default `truncate`), disclosed under
 *   `synapse.truncation_disclosures`, or with `truncate: false` refused (`sequence_too_long`,
 *   naming `input[i]`); at or above the model's limit it changes nothing. Every other option
 *   tunes Ollama's runner or its sampling (threads, GPU layers, temperature …) and means nothing to
 *   an embedding here: accepted, of no effect, each named in `synapse.ignored_options`.
 *   `keep_alive` (how long Ollama keeps a model loaded) is accepted and has no effect — a model
 *   here stays loaded while it is configured — named in `synapse.ignored_fields`.
 * - `model` may be a config `model_aliases` name (matched after `:latest` is dropped): the answer's
 *   `model` is the name sent (without `:latest`), `synapse.model_id` the model that served it.
 * - `dimensions` is the model's width or one of its `matryoshka_dims` (the first `n` values,
 *   L2-normalised again when the model normalises, under a derived fingerprint in
 *   `x-synapse-fingerprint`); any other width is refused naming `dimensions`.
 *
 * Errors are Ollama's `{error}` (plus Synapse's `code`) with the status of the one status table
 * (unknown model: 404, as Ollama).
 *
 * @module
 */
import { z } from "zod";
import { SynapseError } from "../../contract/errors.ts";
import { parseDoorParams, wellFormedName } from "../../contract/schemas.ts";
import type { ModelsListResult } from "../../ops/models.ts";
import { SYNAPSE_VERSION } from "../../version.ts";
import {
  type AdapterAnswer,
  type AdapterIo,
  type AdapterRoute,
  callOp,
  doorMessage,
  doorStatus,
  embedAllOrNothing,
  errorField,
} from "./_adapter.ts";
import { aliasRows, OPENAI_MAX_INPUTS } from "./openai.ts";
import { ollamaDetails, ollamaGenerateRoute } from "./ollama_generate.ts";

/** Most inputs one `POST /api/embed` takes. */
export const OLLAMA_MAX_INPUTS = OPENAI_MAX_INPUTS;

/** `POST /api/embed` request (Ollama's `EmbedRequest`); other fields are refused naming them. */
const OllamaEmbedRequest = z.strictObject({
  model: wellFormedName(),
  input: z.union([z.string(), z.array(z.string())]).nullish(),
  truncate: z.boolean().nullish(),
  keep_alive: z.union([z.string(), z.number()]).nullish(),
  options: z.record(z.string(), z.unknown()).nullish(),
  dimensions: z.number().int().positive().nullish(),
});

/**
 * The route of an Ollama path (`/api/embed`, `/api/tags`, …, and the generation routes of
 * lib/doors/http/ollama_generate.ts), or undefined.
 *
 * @param path The request path.
 */
export function ollamaRoute(path: string): AdapterRoute | undefined {
  if (path === "/api/embed") {
    return { op: "embed.batch", method: "POST", serve: ollamaEmbed, error: ollamaError };
  }
  if (path === "/api/tags") {
    return { op: "models.list", method: "GET", serve: ollamaTags, error: ollamaError };
  }
  if (path === "/api/embeddings") {
    return { op: "embed.batch", method: "POST", serve: ollamaLegacyEmbed, error: ollamaError };
  }
  if (path === "/api/version") {
    return { op: "version", method: "GET", serve: ollamaVersion, error: ollamaError };
  }
  // Generation, show and ps: lib/doors/http/ollama_generate.ts.
  return ollamaGenerateRoute(path);
}

/** `POST /api/embeddings` request (Ollama's legacy `EmbeddingRequest`). */
const OllamaLegacyEmbedRequest = z.strictObject({
  model: wellFormedName(),
  prompt: z.string().nullish(),
  truncate: z.boolean().nullish(),
  keep_alive: z.union([z.string(), z.number()]).nullish(),
  options: z.record(z.string(), z.unknown()).nullish(),
});

/**
 * Serves Ollama's legacy `POST /api/embeddings {model, prompt}` → `{embedding}` (one vector), which
 * older clients still call: the same path as `/api/embed` with one input. No `prompt` (or `""`)
 * is a warm-up: `{embedding: []}` once the model is found serving.
 */
async function ollamaLegacyEmbed(io: AdapterIo): Promise<AdapterAnswer> {
  const p = parseDoorParams("/api/embeddings", OllamaLegacyEmbedRequest, await io.body(), [
    "prompt",
  ]);
  const answer = await ollamaEmbed({
    ...io,
    body: () =>
      Promise.resolve({
        model: p.model,
        input: p.prompt ?? "",
        ...(p.truncate === undefined || p.truncate === null ? {} : { truncate: p.truncate }),
        // Accepted and of no effect: passed on so the answer names them as /api/embed's does.
        ...(p.keep_alive === undefined || p.keep_alive === null
          ? {}
          : { keep_alive: p.keep_alive }),
        ...(p.options === undefined || p.options === null ? {} : { options: p.options }),
      }),
  });
  if (answer.status !== 200) return answer;
  const body = answer.body as { embeddings: number[][]; synapse: unknown };
  return { ...answer, body: { embedding: body.embeddings[0] ?? [], synapse: body.synapse } };
}

/** Serves `GET /api/version`: `{version}` (Synapse's own version; clients use it as a liveness check). */
function ollamaVersion(_io: AdapterIo): Promise<AdapterAnswer> {
  return Promise.resolve({ status: 200, body: { version: SYNAPSE_VERSION, server: "synapse" } });
}

/**
 * Serves `POST /api/embed`: `{model, embeddings, total_duration, load_duration,
 * prompt_eval_count, synapse}` (durations in nanoseconds; `load_duration` is 0, models are loaded
 * before requests). `model` is the name sent (without `:latest`), `synapse.model_id` the model
 * that served it (they differ for a config `model_aliases` name).
 *
 * @param io The request's io.
 * @returns The answer; all or nothing (one refused input refuses the call, naming `input[i]`).
 */
async function ollamaEmbed(io: AdapterIo): Promise<AdapterAnswer> {
  const started = performance.now();
  const p = parseDoorParams("/api/embed", OllamaEmbedRequest, await io.body(), [
    "input",
    "input.*",
  ]);
  const single = typeof p.input === "string";
  // As Ollama: no input, or one empty string, is a warm-up (nothing to embed).
  const texts = typeof p.input === "string" ? (p.input === "" ? [] : [p.input]) : p.input ?? [];
  const { numCtx, ignored: ignoredOptions } = ollamaOptions(p.options);
  if (texts.length > OLLAMA_MAX_INPUTS) {
    throw new SynapseError(
      "invalid_request",
      `Cannot embed ${texts.length} inputs in one call: /api/embed takes at most ${OLLAMA_MAX_INPUTS}; split them over several calls`,
      {
        channel: true,
        details: {
          field: "input",
          reason: "too_many_items",
          items: texts.length,
          max: OLLAMA_MAX_INPUTS,
        },
      },
    );
  }
  // Ollama truncates unless told not to.
  const truncate = p.truncate ?? true;
  // Ollama names models `name:tag` and its clients send `:latest`; Synapse models have no tags,
  // so `:latest` names the model itself (any other tag stays part of the id, and is unknown).
  const model = p.model.endsWith(":latest") ? p.model.slice(0, -":latest".length) : p.model;
  const params = { texts, model, truncate };
  const served = await embedAllOrNothing(io, params, {
    maxInputs: OLLAMA_MAX_INPUTS,
    dimensions: p.dimensions,
    list: "input",
    maxTokens: numCtx,
    allowEmpty: true,
  });
  if ("error" in served) return ollamaErrorOf(withNumCtx(served.error, numCtx), single);
  const res = served.result;
  const synapse: Record<string, unknown> = {
    model_id: res.model_id,
    fingerprint: res.fingerprint,
    dims: res.dims,
    real_token_counts: res.real_token_counts,
    truncation_disclosures: res.truncation_disclosures,
    queue_time_ms: res.queue_time_ms,
    inference_time_ms: res.inference_time_ms,
  };
  if (res.test_model) synapse.test_model = true;
  if (numCtx !== undefined) synapse.num_ctx = numCtx;
  // Ollama's runner settings: accepted (its clients always send them), of no effect here, named.
  if (p.keep_alive !== undefined && p.keep_alive !== null) synapse.ignored_fields = ["keep_alive"];
  if (ignoredOptions.length > 0) synapse.ignored_options = ignoredOptions;
  return {
    status: 200,
    fingerprint: res.fingerprint,
    body: {
      model: res.requested_model ?? res.model_id,
      embeddings: res.vectors.map((v) => v.vector),
      total_duration: Math.round((performance.now() - started) * 1e6),
      load_duration: 0,
      prompt_eval_count: res.real_token_counts.reduce((a, b) => a + b, 0),
      synapse,
    },
  };
}

/**
 * Ollama's `options` of an embedding call: `num_ctx`, honoured as a per-call token cap (see the
 * module docs), and the names of the others, which mean nothing to an embedding here.
 *
 * @throws {SynapseError} channel `invalid_request` `{field: "options.num_ctx"}` for a `num_ctx`
 *   that is not a positive integer.
 */
function ollamaOptions(
  options: Record<string, unknown> | null | undefined,
): { numCtx: number | undefined; ignored: string[] } {
  if (options === undefined || options === null) return { numCtx: undefined, ignored: [] };
  const ignored = Object.keys(options).filter((k) => k !== "num_ctx");
  const n = options.num_ctx;
  if (n === undefined || n === null) return { numCtx: undefined, ignored };
  if (typeof n !== "number" || !Number.isInteger(n) || n < 1) {
    throw new SynapseError(
      "invalid_request",
      `Cannot parse /api/embed: options.num_ctx must be a positive integer (tokens), received ${
        typeof n === "number" ? n : typeof n
      }`,
      { channel: true, details: { field: "options.num_ctx" } },
    );
  }
  return { numCtx: n, ignored };
}

/** A `sequence_too_long` under `options.num_ctx`, its message naming the option. */
function withNumCtx(e: SynapseError, numCtx: number | undefined): SynapseError {
  if (numCtx === undefined || e.code !== "sequence_too_long" || e.details?.max_tokens !== numCtx) {
    return e;
  }
  return new SynapseError(e.code, `${e.message} (this call's options.num_ctx)`, {
    cause: e,
    details: { ...e.details, num_ctx: numCtx },
  });
}

/**
 * Serves `GET /api/tags`: every configured model (every task) as Ollama's local model list
 * `{models: [{name, model, modified_at, size, digest, details}]}`. `name` and `model` are the
 * model id, `digest` its fingerprint, `modified_at` when it was loaded, `size` its file's bytes
 * (0 when unknown); `details.format` is the engine's file format (`onnx`, `gguf`),
 * `details.family` the task, `details.quantization_level` the dtype. Then one entry per config
 * `model_aliases` name whose model is listed: `name` and `model` the alias, the rest its model's,
 * `synapse.alias_of` its model id.
 *
 * @param io The request's io.
 */
async function ollamaTags(io: AdapterIo): Promise<AdapterAnswer> {
  const outcome = await callOp(io, "models.list", {});
  if (outcome.kind !== "result") return ollamaError(outcome.error);
  const list = outcome.body.result as ModelsListResult;
  type Row = readonly [string, ModelsListResult["models"][number], string | undefined];
  const rows: Row[] = [
    ...list.models.map((m): Row => [m.model_id, m, undefined]),
    ...aliasRows(list).map(([alias, m]): Row => [alias, m, m.model_id]),
  ];
  return {
    status: 200,
    body: {
      models: rows.map(([name, m, aliasOf]) => ({
        name,
        model: name,
        modified_at: new Date(m.loaded_at_ms).toISOString(),
        size: m.artifact_bytes ?? 0,
        digest: m.fingerprints[0] ?? "",
        details: ollamaDetails(m),
        synapse: {
          ...(aliasOf === undefined ? {} : { alias_of: aliasOf }),
          task: m.task,
          state: m.state,
          ...(m.dims === undefined ? {} : { dims: m.dims }),
          ...(m.test_model ? { test_model: true } : {}),
        },
      })),
    },
  };
}

/**
 * The Ollama error body `{error, code, field?, retry_after_ms?}` with the status of the one
 * status table.
 *
 * @param e The error.
 */
export function ollamaError(e: SynapseError): AdapterAnswer {
  return ollamaErrorOf(e, false);
}

function ollamaErrorOf(e: SynapseError, single: boolean): AdapterAnswer {
  const field = errorField(e, "input", single);
  return {
    status: doorStatus(e),
    error: e,
    body: {
      error: doorMessage(e),
      code: e.code,
      ...(field === undefined ? {} : { field }),
      ...(e.retryAfterMs === undefined ? {} : { retry_after_ms: e.retryAfterMs }),
    },
  };
}
