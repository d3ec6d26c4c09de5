/**
 * The params and result type of every operation the dispatcher serves, by method name: one table
 * that typed clients of every door share with the operations themselves. The params are what the
 * operation's zod schema accepts (its input type); the result is what its handler returns, read
 * from the handler's own signature, so a change to an operation changes its type here and a typed
 * client cannot drift from it.
 *
 * Types only: importing this module loads no operation code.
 *
 * @module
 */
import type { z } from "zod";
import type {
  AdmissionStatusParams,
  CacheGcParams,
  CachePinParams,
  EmbedBatchParams,
  EmbedQueryParams,
  EmbedResultParams,
  JobResumeParams,
  ModelLoadParams,
  ModelsCatalogParams,
  ModelsDownloadCancelParams,
  ModelsDownloadParams,
  ModelsListParams,
  ModelsRemoveParams,
  ModelStatusParams,
  ModelUnloadParams,
  ProbeReportParams,
  ProbeStartParams,
  ProbeStatusParams,
  RerankScoreParams,
} from "../contract/schemas.ts";
import type { probeReport, probeStart, probeStatus } from "./probe.ts";
import type {
  aliasDeclare,
  aliasesCheckIndex,
  AliasPairParams,
  aliasRetract,
  CheckIndexParams,
} from "./aliases.ts";
import type { detokenizeOp, DetokenizeParams, tokenizeOp, TokenizeParams } from "./tokenize.ts";
import type { embedBatch, embedQuery } from "./embed.ts";
import type { embedResult, jobResume } from "./jobs.ts";
import type { microllmOneshot, MicrollmParams } from "./microllm.ts";
import type { admissionStatus, modelsList } from "./models.ts";
import type { modelInfo, ModelInfoParams } from "./model_info.ts";
import type { rerankScore } from "./rerank.ts";
import type {
  cacheGc,
  cachePin,
  modelLoad,
  modelsCatalog,
  modelsDownload,
  modelsDownloadCancel,
  modelsRemove,
  modelStatusOp,
  modelUnload,
} from "./model_ops.ts";

type ResultOf<F extends (...args: never[]) => unknown> = Awaited<ReturnType<F>>;

/**
 * Method → `{params, result}` of every operation (docs/operations.md). `params` is the input
 * type of the method's strict schema (an unknown field is refused `invalid_request`); `result`
 * is the payload inside the wire body `{"result": …}` of a successful call.
 *
 * `embed.batch` answers either vectors inline ({@link EmbedResult}) or, over the inline limits
 * with a `request_key`, a durable job ({@link JobAccepted}): tell them apart by `"job_id" in
 * result`.
 */
export interface SynapseOperations {
  "embed.query": {
    params: z.input<typeof EmbedQueryParams>;
    result: ResultOf<typeof embedQuery>;
  };
  "embed.batch": {
    params: z.input<typeof EmbedBatchParams>;
    result: ResultOf<typeof embedBatch>;
  };
  "embed.result": {
    params: z.input<typeof EmbedResultParams>;
    result: ResultOf<typeof embedResult>;
  };
  "job.resume": {
    params: z.input<typeof JobResumeParams>;
    result: ResultOf<typeof jobResume>;
  };
  "rerank.score": {
    params: z.input<typeof RerankScoreParams>;
    result: ResultOf<typeof rerankScore>;
  };
  "microllm.oneshot": {
    params: MicrollmParams;
    result: ResultOf<typeof microllmOneshot>;
  };
  "models.list": {
    params: z.input<typeof ModelsListParams>;
    result: ResultOf<typeof modelsList>;
  };
  "admission.status": {
    params: z.input<typeof AdmissionStatusParams>;
    result: ResultOf<typeof admissionStatus>;
  };
  "model.load": { params: z.input<typeof ModelLoadParams>; result: ResultOf<typeof modelLoad> };
  "model.status": {
    params: z.input<typeof ModelStatusParams>;
    result: ResultOf<typeof modelStatusOp>;
  };
  "model.info": {
    params: z.input<typeof ModelInfoParams>;
    result: ResultOf<typeof modelInfo>;
  };
  "model.unload": {
    params: z.input<typeof ModelUnloadParams>;
    result: ResultOf<typeof modelUnload>;
  };
  "models.catalog": {
    params: z.input<typeof ModelsCatalogParams>;
    result: ResultOf<typeof modelsCatalog>;
  };
  "models.download": {
    params: z.input<typeof ModelsDownloadParams>;
    result: ResultOf<typeof modelsDownload>;
  };
  "models.download.cancel": {
    params: z.input<typeof ModelsDownloadCancelParams>;
    result: ResultOf<typeof modelsDownloadCancel>;
  };
  "models.remove": {
    params: z.input<typeof ModelsRemoveParams>;
    result: ResultOf<typeof modelsRemove>;
  };
  "cache.pin": { params: z.input<typeof CachePinParams>; result: ResultOf<typeof cachePin> };
  "cache.gc": { params: z.input<typeof CacheGcParams>; result: ResultOf<typeof cacheGc> };
  "probe.start": {
    params: z.input<typeof ProbeStartParams>;
    result: ResultOf<typeof probeStart>;
  };
  "probe.status": {
    params: z.input<typeof ProbeStatusParams>;
    result: ResultOf<typeof probeStatus>;
  };
  "probe.report": {
    params: z.input<typeof ProbeReportParams>;
    result: ResultOf<typeof probeReport>;
  };
  "aliases.check_index": {
    params: z.input<typeof CheckIndexParams>;
    result: ResultOf<typeof aliasesCheckIndex>;
  };
  "alias.declare": {
    params: z.input<typeof AliasPairParams>;
    result: ResultOf<typeof aliasDeclare>;
  };
  "alias.retract": {
    params: z.input<typeof AliasPairParams>;
    result: ResultOf<typeof aliasRetract>;
  };
  "tokenize": {
    params: z.input<typeof TokenizeParams>;
    result: ResultOf<typeof tokenizeOp>;
  };
  "detokenize": {
    params: z.input<typeof DetokenizeParams>;
    result: ResultOf<typeof detokenizeOp>;
  };
}

/** A method the dispatcher serves (`"embed.query"`, …). */
export type SynapseMethod = keyof SynapseOperations;

/** The params of a method. */
export type OpParams<M extends SynapseMethod> = SynapseOperations[M]["params"];

/** The result payload of a method (inside `{"result": …}`). */
export type OpResult<M extends SynapseMethod> = SynapseOperations[M]["result"];

/**
 * The routing params the inference operations take (which model answers, by the fingerprint it
 * serves; docs/operations.md, common params). Doors map their own headers onto them.
 */
export type { RoutingParams } from "./_resolve_model.ts";
