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
 * - `keep_alive` and `options` tune Ollama's own runner (how long a model stays loaded, context
 *   size, threads, sampling); they are accepted and have no effect — a model here
 *   stays loaded while it is configured, and reads up to its `max_tokens`.
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
import { OPENAI_MAX_INPUTS } from "./openai.ts";
import { ollamaGenerateRoute } from "./ollama_generate.ts";

/** Most inputs one `POST /api/embed` takes. */
export const OLLAMA_MAX_INPUTS = OPENAI_MAX_INPUTS;

/** `POST /api/embed` request (Ollama's `EmbedRequest`); other fields are refused naming them. */
const OllamaEmbedRequest = z.strictObject({
  model: wellFormedName(),
  input: z.union([z.string(), z.array(z.string())]),
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
  prompt: z.string(),
  truncate: z.boolean().nullish(),
  keep_alive: z.union([z.string(), z.number()]).nullish(),
  options: z.record(z.string(), z.unknown()).nullish(),
});

/**
 * Serves Ollama's legacy `POST /api/embeddings {model, prompt}` → `{embedding}` (one vector), which
 * older clients still call: the same path as `/api/embed` with one input.
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
        input: p.prompt,
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
  return { ...answer, body: { embedding: body.embeddings[0], synapse: body.synapse } };
}

/** Serves `GET /api/version`: `{version}` (Synapse's own version; clients use it as a liveness check). */
function ollamaVersion(_io: AdapterIo): Promise<AdapterAnswer> {
  return Promise.resolve({ status: 200, body: { version: SYNAPSE_VERSION, server: "synapse" } });
}

/**
 * Serves `POST /api/embed`: `{model, embeddings, total_duration, load_duration,
 * prompt_eval_count, synapse}` (durations in nanoseconds; `load_duration` is 0, models are loaded
 * before requests).
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
  const texts = typeof p.input === "string" ? [p.input] : p.input;
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
  });
  if ("error" in served) return ollamaErrorOf(served.error, single);
  const res = served.result;
  const synapse: Record<string, unknown> = {
    fingerprint: res.fingerprint,
    dims: res.dims,
    real_token_counts: res.real_token_counts,
    truncation_disclosures: res.truncation_disclosures,
    queue_time_ms: res.queue_time_ms,
    inference_time_ms: res.inference_time_ms,
  };
  if (res.test_model) synapse.test_model = true;
  // Ollama's runner settings: accepted (its clients always send them), of no effect here, named.
  const ignored = (["keep_alive", "options"] as const).filter((k) =>
    p[k] !== undefined && p[k] !== null
  );
  if (ignored.length > 0) synapse.ignored_fields = ignored;
  return {
    status: 200,
    fingerprint: res.fingerprint,
    body: {
      model: res.model_id,
      embeddings: res.vectors.map((v) => v.vector),
      total_duration: Math.round((performance.now() - started) * 1e6),
      load_duration: 0,
      prompt_eval_count: res.real_token_counts.reduce((a, b) => a + b, 0),
      synapse,
    },
  };
}

/**
 * Serves `GET /api/tags`: every configured model (every task) as Ollama's local model list
 * `{models: [{name, model, modified_at, size, digest, details}]}`. `name` and `model` are the
 * model id, `digest` its fingerprint, `modified_at` when it was loaded, `size` its file's bytes
 * (0 when unknown); `details.format` is the engine's file format (`onnx`, `gguf`),
 * `details.family` the task, `details.quantization_level` the dtype.
 *
 * @param io The request's io.
 */
async function ollamaTags(io: AdapterIo): Promise<AdapterAnswer> {
  const outcome = await callOp(io, "models.list", {});
  if (outcome.kind !== "result") return ollamaError(outcome.error);
  const list = outcome.body.result as ModelsListResult;
  return {
    status: 200,
    body: {
      models: list.models.map((m) => ({
        name: m.model_id,
        model: m.model_id,
        modified_at: new Date(m.loaded_at_ms).toISOString(),
        size: m.artifact_bytes ?? 0,
        digest: m.fingerprints[0] ?? "",
        details: {
          parent_model: "",
          format: m.engine === "ort" ? "onnx" : m.engine === "llama" ? "gguf" : m.engine,
          family: m.task,
          families: [m.task],
          parameter_size: "",
          quantization_level: m.dtype,
        },
        synapse: {
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
