/**
 * The door in the shape of Hugging Face's text-embeddings-inference (TEI) router: `POST /embed`,
 * `GET /info`, `POST /rerank` with `texts` (routed here by lib/doors/http/rerank_shapes.ts, which
 * owns `/rerank`) and TEI's root route `POST /`. A mapping of params and results around
 * `embed.batch`, `rerank.score` and `models.list` through the dispatcher, nothing more.
 *
 * `POST /` is what TEI routes there for the kind of model it serves: an embedding model's
 * `/embed`, a reranker's `/rerank`, a classifier's `/predict`. Synapse serves several models, so
 * the body says which: `{query, texts}` is TEI's rerank (the default rerank model, or `model`),
 * `{inputs}` TEI's embed (the default embed model, or `model`). `{inputs}` for a reranker —
 * `model` naming one, or no `model` on an instance that serves a reranker and no embedding model
 * — is TEI's `/predict`, which Synapse does not serve: it is refused naming `inputs`, as are
 * `inputs` given as `[text, text]` pairs (predict's pair form).
 *
 * Semantics kept, never changed silently:
 *
 * - `truncate` defaults to false, as in TEI: an over-long input is refused
 *   (`sequence_too_long`, naming `inputs[i]`), never cut; `truncate: true` cuts the end
 *   (`truncation_direction: "Right"`); `"Left"` is refused.
 * - `normalize` (TEI's default true) is honoured by the model, never by this door: absent, the
 *   vectors are what the model gives (normalised when its config says `normalize`); given and
 *   different from the model's own, it is refused naming `normalize`, since Synapse never
 *   rescales a model's vectors (their fingerprint would no longer say what they are).
 * - `prompt_name` selects a prompt of the model's prompt table (lib/models/prompts.ts; an unknown
 *   name is refused naming the known ones, as TEI does); on a model without a table nothing is
 *   applied, which `x-synapse-prompt: applied=none; reason=no_prompt_table` says (the header
 *   discloses the prompt applied on every answer that has one). `dimensions` is the model's width
 *   or one of its `matryoshka_dims` (the first `n` values, L2-normalised again when the model
 *   normalises, under a derived fingerprint in `x-synapse-fingerprint`); any other width is
 *   refused naming `dimensions`.
 * - Scores: `raw_scores: false` (default) gives the logistic of the raw logit, as TEI does;
 *   `raw_scores: true` the raw logit.
 *
 * Errors are TEI's `{error, error_type}` (plus Synapse's `code`), `error_type` from
 * {@link teiErrorTypeFor}, with the status of the one status table.
 *
 * @module
 */
import { z } from "zod";
import { SynapseError } from "../../contract/errors.ts";
import { parseDoorParams, wellFormedName } from "../../contract/schemas.ts";
import type { ModelRow, ModelsListResult } from "../../ops/models.ts";
import type { RerankResult } from "../../ops/rerank.ts";
import { SYNAPSE_VERSION } from "../../synapse.ts";
import {
  type AdapterAnswer,
  type AdapterIo,
  type AdapterRoute,
  callOp,
  doorMessage,
  doorStatus,
  embedAllOrNothing,
  errorField,
  outcomeError,
  rankOrder,
  RERANK_MAX_DOCUMENTS,
  rerankCall,
} from "./_adapter.ts";
import { OPENAI_MAX_INPUTS } from "./openai.ts";
import { teiErrorTypeFor } from "./status_table.ts";

/** Most inputs one `POST /embed` takes (`max_client_batch_size` of `GET /info`). */
export const TEI_MAX_INPUTS = OPENAI_MAX_INPUTS;

/** TEI's truncation side: only the end (`Right`) is cut here. */
const TruncationDirection = z.enum(["Right", "right", "Left", "left"]);

/**
 * `POST /embed` request (TEI's `EmbedRequest`); unknown fields are refused naming them, and
 * `null` stands for absent (clients send it for unset options). `model` is Synapse's: TEI serves
 * one model, Synapse the default embed model unless `model` names another.
 */
const TeiEmbedRequest = z.strictObject({
  inputs: z.union([z.string(), z.array(z.string())]),
  truncate: z.boolean().nullish(),
  truncation_direction: TruncationDirection.nullish(),
  normalize: z.boolean().nullish(),
  prompt_name: z.string().nullish(),
  dimensions: z.number().int().positive().nullish(),
  model: wellFormedName().nullish(),
});

/** `POST /rerank` request with `texts` (TEI's `RerankRequest`). */
const TeiRerankRequest = z.strictObject({
  query: z.string(),
  texts: z.array(z.string()),
  truncate: z.boolean().nullish(),
  truncation_direction: TruncationDirection.nullish(),
  raw_scores: z.boolean().nullish(),
  return_text: z.boolean().nullish(),
  model: wellFormedName().nullish(),
});

/**
 * The route of a TEI path (`/embed`, `/info`, `/`), or undefined.
 *
 * @param path The request path.
 */
export function teiRoute(path: string): AdapterRoute | undefined {
  if (path === "/embed") {
    return { op: "embed.batch", method: "POST", serve: (io) => teiEmbed(io), error: teiError };
  }
  if (path === "/") {
    // The log's op is embed.batch until the body says rerank (teiRoot sets it).
    return { op: "embed.batch", method: "POST", serve: teiRoot, error: teiError };
  }
  if (path === "/info") {
    return { op: "models.list", method: "GET", serve: teiInfo, error: teiError };
  }
  return undefined;
}

/** Refuses `truncation_direction: "Left"` (only the end is ever cut). */
function checkDirection(direction: string | null | undefined): void {
  if (direction === "Left" || direction === "left") {
    throw new SynapseError(
      "invalid_request",
      'Cannot truncate from the left: Synapse cuts the end of an over-long input; send truncation_direction "Right" or leave it out',
      { channel: true, details: { field: "truncation_direction", reason: "unsupported" } },
    );
  }
}

/**
 * Serves `POST /`, TEI's root route (see the module doc): rerank for `{query, texts}`, embed for
 * `{inputs}`; an embed that is refused because the model it would get is a reranker is TEI's
 * predict, refused as such (looked up only then, so an embed costs what `POST /embed` costs).
 *
 * @param io The request's io.
 * @throws {SynapseError} channel `invalid_request {field: "inputs", reason: "unsupported", route:
 *   "predict"}` for a predict request.
 */
async function teiRoot(io: AdapterIo): Promise<AdapterAnswer> {
  const body = await io.body();
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    return await teiEmbed(io, body);
  }
  if ("query" in body || "texts" in body) {
    io.record.op = "rerank.score";
    return await teiRerank(io, body);
  }
  const inputs = (body as { inputs?: unknown }).inputs;
  if (Array.isArray(inputs) && inputs.some((x) => Array.isArray(x))) {
    throw predictRefusal("as [text, text] pairs");
  }
  let answer: AdapterAnswer;
  try {
    answer = await teiEmbed(io, body);
  } catch (err) {
    if (!(err instanceof SynapseError)) throw err;
    answer = teiError(err);
  }
  if (answer.status < 400) return answer;
  const why = await predictReason(io, (body as { model?: unknown }).model);
  if (why !== undefined) throw predictRefusal(why);
  return answer;
}

/**
 * Why `{inputs}` on `POST /` is TEI's predict, or undefined: `model` names a reranker, or no
 * `model` is given and the instance serves a reranker and no embedding model.
 */
async function predictReason(io: AdapterIo, model: unknown): Promise<string | undefined> {
  if (model !== undefined && model !== null && typeof model !== "string") return undefined;
  const list = await modelsList(io);
  if (typeof model === "string") {
    const row = list.models.find((m) => m.model_id === model);
    return row?.task === "rerank" ? `for reranker '${row.model_id}'` : undefined;
  }
  return list.served_by.embed === null && list.served_by.rerank !== null
    ? `on an instance whose model is a reranker ('${list.served_by.rerank}')`
    : undefined;
}

/** The refusal of TEI's predict on `POST /`. */
function predictRefusal(why: string): SynapseError {
  return new SynapseError(
    "invalid_request",
    `Cannot serve POST / with inputs ${why}: that is TEI's /predict (a classifier's or a reranker's scores), which Synapse does not serve; send {query, texts} to rerank, or {inputs} for an embedding model`,
    { channel: true, details: { field: "inputs", reason: "unsupported", route: "predict" } },
  );
}

/**
 * Serves `POST /embed`: `[[float, …], …]`, one vector per input in input order.
 *
 * @param io The request's io.
 * @param preread The body, when the caller has read it.
 * @returns The vectors, or the error answer (all or nothing: one refused input refuses the call,
 *   naming `inputs[i]`).
 */
async function teiEmbed(io: AdapterIo, preread?: unknown): Promise<AdapterAnswer> {
  const body = preread === undefined ? await io.body() : preread;
  const p = parseDoorParams("/embed", TeiEmbedRequest, body, ["inputs", "inputs.*"]);
  const single = typeof p.inputs === "string";
  const texts = typeof p.inputs === "string" ? [p.inputs] : p.inputs;
  if (texts.length > TEI_MAX_INPUTS) {
    throw new SynapseError(
      "invalid_request",
      `Cannot embed ${texts.length} inputs in one call: /embed takes at most ${TEI_MAX_INPUTS}; split them over several calls, or run them as one durable job with POST /v1/ops/embed.batch and a request_key`,
      {
        channel: true,
        details: {
          field: "inputs",
          reason: "too_many_items",
          items: texts.length,
          max: TEI_MAX_INPUTS,
        },
      },
    );
  }
  checkDirection(p.truncation_direction);
  const model = p.model ?? undefined;
  if (p.normalize !== undefined && p.normalize !== null) {
    await checkNormalize(io, model, p.normalize);
  }
  const params = {
    texts,
    ...(model === undefined ? {} : { model }),
    ...(p.truncate ? { truncate: true } : {}),
  };
  const served = await embedAllOrNothing(io, params, {
    maxInputs: TEI_MAX_INPUTS,
    dimensions: p.dimensions,
    list: "inputs",
    prompt: p.prompt_name === undefined || p.prompt_name === null
      ? undefined
      : { prompt_name: p.prompt_name },
  });
  if ("error" in served) return teiErrorOf(served.error, single);
  const res = served.result;
  return {
    status: 200,
    body: res.vectors.map((v) => v.vector),
    fingerprint: res.fingerprint,
    prompt: res.prompt,
  };
}

/**
 * Refuses a `normalize` that differs from what the model does (Synapse never rescales a model's
 * vectors).
 *
 * @throws {SynapseError} channel `invalid_request` `{field: "normalize", model_id,
 *   model_normalizes}`.
 */
async function checkNormalize(
  io: AdapterIo,
  model: string | undefined,
  normalize: boolean,
): Promise<void> {
  const row = await embedModelRow(io, model);
  // An unknown model is left to embed.batch, which names it.
  if (row === undefined) return;
  const normalizes = row.normalize === true;
  if (normalizes === normalize) return;
  throw new SynapseError(
    "invalid_request",
    normalizes
      ? `Cannot serve normalize: false: model '${row.model_id}' normalises its vectors (its config says normalize) and Synapse never rescales them; leave normalize out, or serve a model whose config does not normalise`
      : `Cannot serve normalize: true: model '${row.model_id}' does not normalise its vectors and Synapse never rescales them; leave normalize out and normalise on your side, or serve a model whose config says normalize`,
    {
      channel: true,
      details: { field: "normalize", model_id: row.model_id, model_normalizes: normalizes },
    },
  );
}

/** The instance's `models.list`, not recorded as the request's call. */
async function modelsList(io: AdapterIo): Promise<ModelsListResult> {
  const { outcome } = await io.backend().call("models.list", {}, { signal: io.signal });
  if (outcome.kind !== "result") throw outcome.error;
  return outcome.body.result as ModelsListResult;
}

/** The `models.list` row of the embed model a request would get (undefined if none). */
async function embedModelRow(
  io: AdapterIo,
  model: string | undefined,
): Promise<ModelRow | undefined> {
  const list = await modelsList(io);
  const named = model ?? list.served_by.embed;
  // A config model_aliases name stands for its model (a real model id wins).
  const id = list.models.some((m) => m.model_id === named)
    ? named
    : list.model_aliases?.find((a) => a.model_alias === named)?.model_id ?? named;
  return list.models.find((m) => m.model_id === id && m.task === "embed");
}

/**
 * Serves `GET /info`: TEI's `Info` of the model `POST /embed` serves by default, plus Synapse's
 * facts under `synapse` (its fingerprint, and the default rerank model).
 *
 * @param io The request's io.
 */
async function teiInfo(io: AdapterIo): Promise<AdapterAnswer> {
  const outcome = await callOp(io, "models.list", {});
  if (outcome.kind !== "result") return teiError(outcome.error);
  const list = outcome.body.result as ModelsListResult;
  const row = list.models.find((m) => m.model_id === list.served_by.embed);
  if (row === undefined) {
    return teiError(
      new SynapseError(
        "unknown_model",
        "Cannot describe the embedding model: no model serves task 'embed'; add one to preload_models",
        { details: { model_id: null, task: "embed" } },
      ),
    );
  }
  return {
    status: 200,
    body: {
      model_id: row.model_id,
      model_sha: null,
      model_dtype: row.dtype,
      model_type: { embedding: { pooling: row.pooling ?? "unknown" } },
      max_concurrent_requests: null,
      max_input_length: row.max_tokens,
      max_batch_tokens: null,
      max_batch_requests: null,
      max_client_batch_size: TEI_MAX_INPUTS,
      auto_truncate: false,
      tokenization_workers: null,
      version: SYNAPSE_VERSION,
      sha: null,
      docker_label: null,
      synapse: {
        state: row.state,
        ...(row.dims === undefined ? {} : { dims: row.dims }),
        normalize: row.normalize === true,
        ...(row.fingerprints[0] === undefined ? {} : { fingerprint: row.fingerprints[0] }),
        rerank_model_id: list.served_by.rerank,
        max_rerank_texts: RERANK_MAX_DOCUMENTS,
        ...(row.test_model ? { test_model: true } : {}),
      },
    },
  };
}

/**
 * Serves `POST /rerank` with `texts`: `[{index, score, text?}]` sorted by score, highest first.
 *
 * @param io The request's io.
 * @param body The parsed body (read by the `/rerank` route to pick the shape).
 * @returns The ranks, or the error answer (TEI's shape).
 */
export async function teiRerank(io: AdapterIo, body: unknown): Promise<AdapterAnswer> {
  try {
    const p = parseDoorParams("/rerank", TeiRerankRequest, body, ["query", "texts.*"]);
    if (p.texts.length > RERANK_MAX_DOCUMENTS) {
      throw new SynapseError(
        "invalid_request",
        `Cannot rerank ${p.texts.length} texts in one call: at most ${RERANK_MAX_DOCUMENTS}; split them over several calls`,
        {
          channel: true,
          details: {
            field: "texts",
            reason: "too_many_items",
            items: p.texts.length,
            max: RERANK_MAX_DOCUMENTS,
          },
        },
      );
    }
    checkDirection(p.truncation_direction);
    const outcome = await rerankCall(io, {
      query: p.query,
      candidates: p.texts,
      ...(p.model === undefined || p.model === null ? {} : { model: p.model }),
      ...(p.truncate ? { truncate: true } : {}),
    });
    const err = outcomeError(outcome, (i) => `texts.${i}`);
    if (err !== undefined || outcome.kind !== "result") return teiErrorOf(err!, false, "texts");
    const res = outcome.body.result as RerankResult;
    const scores = p.raw_scores ? res.scores : res.sigmoid_scores;
    return {
      status: 200,
      fingerprint: res.fingerprint,
      body: rankOrder(res.scores).map((i) => ({
        index: i,
        score: scores[i]!,
        ...(p.return_text ? { text: p.texts[i]! } : {}),
      })),
    };
  } catch (err) {
    if (err instanceof SynapseError) return teiErrorOf(err, false, "texts");
    throw err;
  }
}

/**
 * The TEI error body `{error, error_type, code, field?, retry_after_ms?}` (`error_type` from
 * {@link teiErrorTypeFor}) with the status of the one status table.
 *
 * @param e The error.
 */
export function teiError(e: SynapseError): AdapterAnswer {
  return teiErrorOf(e, false);
}

function teiErrorOf(e: SynapseError, single: boolean, list = "inputs"): AdapterAnswer {
  const field = errorField(e, list, single);
  return {
    status: doorStatus(e),
    error: e,
    body: {
      error: doorMessage(e),
      error_type: teiErrorTypeFor(e.code),
      code: e.code,
      ...(field === undefined ? {} : { field }),
      ...(e.retryAfterMs === undefined ? {} : { retry_after_ms: e.retryAfterMs }),
    },
  };
}
