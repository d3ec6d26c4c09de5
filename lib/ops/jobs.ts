/**
 * Durable embedding jobs (docs/operations.md "Jobs"): an `embed.batch` over the inline limits
 * with a `request_key` becomes a job in the store; it runs in bulk quanta on the bulk lane (so
 * interactive work preempts between quanta) and commits its results in pages of at most
 * `jobs.result_page_bytes` while it runs (the shared machinery: lib/ops/_durable_job.ts).
 * `embed.result {job_id, page}` reads any committed page of any durable job in any state.
 *
 * @module
 */
import { SynapseError } from "../contract/errors.ts";
import type { WireError } from "../contract/errors.ts";
import { buildEnvelope } from "../contract/envelope.ts";
import { servedCertified } from "../probe/certification.ts";
import type { Envelope } from "../contract/envelope.ts";
import { EmbedResultParams, JobResumeParams, parseParams } from "../contract/schemas.ts";
import { requestDigest } from "../identity/request_digest.ts";
import { sha256Hex } from "../identity/sha256.ts";
import type { ReadyModel } from "../models/model.ts";
import type { PromptChoice, PromptDisclosure, PromptSelector } from "../models/prompts.ts";
import { type ServedSpace, servedValues } from "../models/matryoshka.ts";
import type { JobRow, JobState } from "../store/job_types.ts";
import {
  type EmbedItem,
  type EmbedVector,
  type ItemError,
  type PreparedItem,
  prepareItems,
  rowError,
  type TruncationDisclosure,
  vectorLine,
} from "./_embedding.ts";
import type { OpContext } from "./context.ts";
import {
  admitDurableJob,
  endFailedJob,
  type JobAccepted,
  JobPages,
  runQuanta,
  type StoredJobParams,
  TOKENIZE_SLICE,
} from "./_durable_job.ts";

export type { JobAccepted } from "./_durable_job.ts";

/** One scored candidate of a rerank job page (lib/ops/rerank_jobs.ts). */
export interface RerankJobScore {
  /** Index into the request's `candidates`. */
  index: number;
  /** Raw logit (`score_kind: "raw_logit"`). */
  score: number;
}

/** A stored page of a rerank job (lib/ops/rerank_jobs.ts). */
export interface RerankJobPage {
  scores: RerankJobScore[];
  real_token_counts: number[];
  truncation_disclosures: TruncationDisclosure[];
  item_errors?: ItemError[];
  /** As {@link EmbedResultPage.provenance_set}. */
  provenance_set?: string[];
}

/** The engine of a page whose job recorded none and whose model is not loaded. */
const UNKNOWN_ENGINE = Object.freeze({ engine: "unknown", version: "unknown" });

/** One page of job results as stored. */
interface StoredPage {
  vectors: EmbedVector[];
  real_token_counts: number[];
  truncation_disclosures: TruncationDisclosure[];
  item_errors?: ItemError[];
  /**
   * Present when some of the page's vectors were computed by a lane proven equivalent to the
   * job's model (`allow_equivalent`): the fingerprints they came from, the job's first, sorted
   * after it (docs/remote.md "Spreading a job").
   */
  provenance_set?: string[];
}

/** `embed.result` payload. */
export interface EmbedResultPage extends Envelope {
  job_id: string;
  state: JobState;
  request_key: string;
  /** Pages committed so far. */
  page_count: number;
  /** Pages readable now (equal to `page_count`). */
  pages_available: number;
  /** The page returned (0-based). */
  page: number;
  items_total: number;
  items_done: number;
  vectors: EmbedVector[];
  real_token_counts: number[];
  truncation_disclosures: TruncationDisclosure[];
  item_errors?: ItemError[];
  /**
   * The fingerprints the page's vectors (scores) were computed under, the job's first: present
   * only when a lane proven equivalent computed some of them (`allow_equivalent`).
   */
  provenance_set?: string[];
  /** The job's failure, when it failed; while `paused_needs_reauth`, why it paused. */
  error?: WireError;
  /** While `paused_needs_reauth`: when it paused and the deadline to `job.resume` it (ms). */
  paused_at_ms?: number;
  resume_deadline_ms?: number;
  /** The job's prompt disclosure (as `embed.batch`'s `prompt`), when it had one. */
  prompt?: PromptDisclosure;
  /** The op that made the job: `embed.batch`, or `rerank.score` (whose pages hold `scores`). */
  kind: string;
  /**
   * Rerank jobs: raw logits with their candidate's index, in the job's order (`vectors` is then
   * empty; `real_token_counts` and `truncation_disclosures` align with `scores`).
   */
  scores?: RerankJobScore[];
  score_kind?: "raw_logit";
}

/** Inputs of {@link submitEmbedJob}. */
export interface EmbedJobRequest {
  requestKey: string;
  model: ReadyModel;
  /**
   * The space served (lib/models/matryoshka.ts): a Matryoshka width enters the request digest's
   * constraints (`dimensions`) and the job's params; absent: the model's own space.
   */
  space?: ServedSpace;
  items: EmbedItem[];
  /** Items already tokenized (small over-token batches); otherwise the job tokenizes. */
  prepared?: PreparedItem[];
  /** Item errors found while tokenizing `prepared`. */
  itemErrors?: ItemError[];
  truncate: boolean;
  bytes: number;
  /**
   * The request's prompt selector (`input_type` / `prompt_name`): part of the request digest, so
   * a job with another selector is another job.
   */
  promptSelector?: PromptSelector;
  /** The prompt applied before tokenizing (when the job tokenizes). */
  prompt?: PromptChoice;
  /** The answer-level prompt disclosure, kept with the job for `embed.result`. */
  promptDisclosure?: PromptDisclosure;
  /**
   * The request's `allow_equivalent`: the job may also run on remote lanes proven equivalent to
   * its model (a live probe alias); part of the request digest.
   */
  allowEquivalent?: boolean;
}

/**
 * Mints (or attaches to) the durable job of an over-limit `embed.batch`, and starts it.
 *
 * @throws {SynapseError} `idempotency_conflict` for a key reused with another request;
 *   `invalid_request` for a bad key; `queue_full` over the byte budget.
 */
export function submitEmbedJob(ctx: OpContext, req: EmbedJobRequest): JobAccepted {
  // Hashed once: the digest binds them, and each result line carries its item's hash.
  const submitted = req.items.map((it) => sha256Hex(it.text));
  const digest = requestDigest({
    op: "embed.batch",
    modelId: req.model.modelId,
    constraints: {
      truncate: req.truncate,
      fingerprint: req.space?.fingerprint ?? req.model.fingerprint,
      // Only a cut width: `dimensions` equal to the model's is the same request as none.
      ...(req.space?.truncate === undefined ? {} : { dimensions: req.space.truncate }),
      ...(req.promptSelector?.input_type === undefined
        ? {}
        : { input_type: req.promptSelector.input_type }),
      ...(req.promptSelector?.prompt_name === undefined
        ? {}
        : { prompt_name: req.promptSelector.prompt_name }),
      ...(req.allowEquivalent === true ? { allow_equivalent: true } : {}),
    },
    items: req.items.map((it, i) => ({ id: it.id, contentSha256: submitted[i]! })),
  });
  return admitDurableJob(ctx, {
    requestKey: req.requestKey,
    requestDigest: digest,
    kind: "embed.batch",
    model: req.model,
    ...(req.space?.truncate === undefined ? {} : { space: req.space }),
    truncate: req.truncate,
    itemsTotal: req.items.length,
    bytes: req.bytes,
    ...(req.promptDisclosure === undefined ? {} : { prompt: req.promptDisclosure }),
  }, (jobId) => runEmbedJob(ctx, jobId, req, submitted));
}

async function runEmbedJob(
  ctx: OpContext,
  jobId: string,
  req: EmbedJobRequest,
  submittedSha256: string[],
): Promise<void> {
  const pages = new JobPages<StoredPage>(ctx, jobId, emptyPage, (p) => p.vectors.length);
  try {
    ctx.jobs.store.markRunning(jobId);
    let prepared = req.prepared;
    let itemErrors = req.itemErrors ?? [];
    if (prepared === undefined) {
      // Tokenize in slices on the tokenizer pool, so a 10,000-item job never holds the event
      // loop that interactive requests and /health need, and interactive tokenizing interleaves.
      prepared = [];
      itemErrors = [];
      for (let i = 0; i < req.items.length; i += TOKENIZE_SLICE) {
        const r = await prepareItems(
          ctx.tokenizers,
          req.model,
          req.items.slice(i, i + TOKENIZE_SLICE),
          {
            truncate: req.truncate,
            offset: i,
            prompt: req.prompt,
          },
        );
        prepared.push(...r.prepared);
        for (const e of r.errors) if (e) itemErrors.push(e);
      }
    }
    if (itemErrors.length > 0) {
      const errors = [...itemErrors];
      pages.add(JSON.stringify(errors).length, 0, (p) => void (p.item_errors = errors));
    }
    await runQuanta(
      ctx,
      jobId,
      req.model,
      "embed",
      [...prepared],
      (slice, out, under) => {
        slice.forEach((x, k) => {
          const row = out.rows[k]!;
          if (row.kind !== "ok") {
            // On the page, not against its byte budget (a row error is a few dozen bytes).
            pages.add(0, 0, (p) => void (p.item_errors ??= []).push(rowError(req.model, x, row)));
            return;
          }
          const values = req.space === undefined
            ? row.values
            : servedValues(req.model, req.space, row.values);
          const line = vectorLine(req.model, x, values, submittedSha256[x.index]!);
          pages.add(64 + JSON.stringify(line.vector).length, line.count, (p) => {
            p.vectors.push(line.vector);
            p.real_token_counts.push(line.count);
            p.truncation_disclosures.push(line.disclosure);
            if (under !== undefined) addProvenance(p, req.model.fingerprint, under);
          });
        });
      },
      () => pages.commit(),
      {
        // Spread over remote lanes of this fingerprint only when the texts went bare: a rows'
        // prompt is sent as text, and the provider would apply its own again.
        offload: req.prompt === undefined && (req.promptDisclosure?.applied ?? null) === null,
        equivalent: req.allowEquivalent === true,
      },
    );
    pages.commit();
    ctx.jobs.store.finish(jobId, "done");
    ctx.log("info", "synapse.jobs", "job done", {
      job: jobId,
      model: req.model.modelId,
      items: req.items.length,
      pages: pages.pageCount,
    });
  } catch (err) {
    endFailedJob(ctx, jobId, err, () => pages.commit(), {
      model: req.model.modelId,
      items: req.items.length,
    });
  }
}

/**
 * Adds `under` to a page's `provenance_set` (created as `[own]` on first use; `own` first, the
 * rest sorted).
 */
export function addProvenance(
  page: { provenance_set?: string[] },
  own: string,
  under: string,
): void {
  const set = page.provenance_set ??= [own];
  if (set.includes(under)) return;
  set.push(under);
  set.splice(1, set.length - 1, ...set.slice(1).sort());
}

function emptyPage(): StoredPage {
  return { vectors: [], real_token_counts: [], truncation_disclosures: [] };
}

/**
 * `embed.result {job_id, page?}`: one committed page, readable in any job state, of an
 * `embed.batch` job (vectors) or a `rerank.score` job (`scores`, lib/ops/rerank_jobs.ts).
 *
 * @throws {SynapseError} `invalid_request` for an unknown job or a page not committed (yet).
 */
export function embedResult(ctx: OpContext, rawParams: unknown): EmbedResultPage {
  const p = parseParams("embed.result", EmbedResultParams, rawParams);
  const store = ctx.jobs.store;
  const job: JobRow | undefined = store.get(p.job_id);
  if (!job) {
    throw new SynapseError("invalid_request", `Cannot read results: unknown job '${p.job_id}'`, {
      details: { field: "job_id", job_id: p.job_id },
    });
  }
  const pageNo = p.page ?? 0;
  const stored = store.readPage(job.jobId, pageNo);
  const params = job.params as Partial<StoredJobParams>;
  const model = ctx.registry.list().find((m) => m.modelId === params.model_id)?.ready;
  const rerank = job.kind === "rerank.score";
  let body: StoredPage & Partial<RerankJobPage> = emptyPage();
  if (stored) body = JSON.parse(stored.pageJson) as StoredPage & Partial<RerankJobPage>;
  else if (!(pageNo === 0 && job.pageCount === 0)) {
    throw new SynapseError(
      "invalid_request",
      `Cannot read page ${pageNo} of job '${job.jobId}': ${job.pageCount} page(s) committed`,
      {
        details: { field: "page", page: pageNo, pages_available: job.pageCount, state: job.state },
      },
    );
  }
  const fingerprint = params.fingerprint ?? model?.fingerprint ?? "";
  const out: EmbedResultPage = {
    ...buildEnvelope({
      fingerprint,
      tableEpoch: ctx.tableEpoch(),
      equivalentTo: fingerprint === "" ? [] : ctx.equivalentTo(fingerprint),
      // The model may not be loaded here (a store-only CLI instance): the page's vectors say.
      dims: rerank ? 1 : params.dims ?? model?.dims ?? body.vectors?.[0]?.vector?.length ?? 0,
      // The engine that computed the pages, as the job recorded it; a job from before that
      // record says only what its model's lanes run now, or nothing when it is not loaded.
      engine: params.engine ?? model?.identity ?? UNKNOWN_ENGINE,
      moduleGeneration: ctx.moduleGeneration,
      modelId: params.model_id ?? "",
      testModel: model?.testModel ?? false,
      certified: servedCertified(ctx, model),
      remote: model?.remote,
    }),
    job_id: job.jobId,
    state: job.state,
    request_key: job.requestKey,
    page_count: job.pageCount,
    pages_available: job.pageCount,
    page: pageNo,
    items_total: job.itemsTotal ?? 0,
    items_done: job.itemsDone ?? 0,
    vectors: body.vectors ?? [],
    real_token_counts: body.real_token_counts,
    truncation_disclosures: body.truncation_disclosures,
    kind: job.kind,
  };
  if (rerank) {
    out.scores = body.scores ?? [];
    out.score_kind = "raw_logit";
  }
  if (body.item_errors && body.item_errors.length > 0) out.item_errors = body.item_errors;
  if (body.provenance_set !== undefined) out.provenance_set = body.provenance_set;
  if (job.error) out.error = job.error;
  if (job.state === "paused_needs_reauth") {
    if (job.pausedAtMs !== null) out.paused_at_ms = job.pausedAtMs;
    if (job.resumeDeadlineMs !== null) out.resume_deadline_ms = job.resumeDeadlineMs;
  }
  if (params.prompt !== undefined) out.prompt = params.prompt;
  return out;
}

/** `job.resume` payload. */
export interface JobResumed {
  module_generation: number;
  job_id: string;
  /** The job's state after the call: `running` when resumed, else what it already was. */
  state: JobState;
  /** True when this call woke a paused job; false when it was already queued or running. */
  resumed: boolean;
  pages_available: number;
  items_total: number;
  items_done: number;
}

/**
 * `job.resume {job_id}` (contract §1): continues a durable job paused `paused_needs_reauth`
 * after a remote provider refused its credentials; its run sends the refused quantum again
 * (the provider reads a key file again first). Idempotent: a queued or running job answers
 * `resumed: false`. A job pauses and resumes only in the process that admitted it (its inputs
 * live there); a restart fails a paused job `module_restarted`, and the same request with the
 * same `request_key` runs it again.
 *
 * @throws {SynapseError} `invalid_request` for an unknown job (`details.field: "job_id"`) or a
 *   finished one (`details.reason: "job_not_paused"`, `state`); `needs_reauth_expired` when its
 *   resume deadline passed (the job is then `failed_permanent`).
 */
export function jobResume(ctx: OpContext, rawParams: unknown): JobResumed {
  const p = parseParams("job.resume", JobResumeParams, rawParams);
  const store = ctx.jobs.store;
  let job = store.get(p.job_id);
  if (!job) {
    throw new SynapseError("invalid_request", `Cannot resume: unknown job '${p.job_id}'`, {
      details: { field: "job_id", job_id: p.job_id },
    });
  }
  let resumed = false;
  if (job.state === "paused_needs_reauth") {
    const paused = ctx.jobs.paused.get(job.jobId);
    try {
      job = store.resume(job.jobId);
    } catch (err) {
      if (err instanceof SynapseError && err.code === "needs_reauth_expired") paused?.abandon(err);
      throw err;
    }
    if (paused === undefined) {
      // Paused by a process that is gone (its boot sweep has not run here): nothing can run it.
      const e = new SynapseError(
        "module_restarted",
        `Job ${job.jobId} was paused by an earlier process; submit the same request with the same request_key to run it again`,
      );
      store.finish(job.jobId, "failed_transient", e.toWire());
      throw e;
    }
    paused.resume();
    resumed = true;
  } else if (job.state !== "queued" && job.state !== "running") {
    if (job.error?.code === "needs_reauth_expired") {
      throw new SynapseError("needs_reauth_expired", job.error.message, {
        details: { job_id: job.jobId },
      });
    }
    throw new SynapseError(
      "invalid_request",
      `Cannot resume job '${job.jobId}': it is ${job.state}, not paused_needs_reauth`,
      { details: { job_id: job.jobId, reason: "job_not_paused", state: job.state } },
    );
  }
  ctx.log("info", "synapse.jobs", "job.resume", { job: job.jobId, resumed: String(resumed) });
  return {
    module_generation: ctx.moduleGeneration,
    job_id: job.jobId,
    state: job.state,
    resumed,
    pages_available: job.pageCount,
    items_total: job.itemsTotal ?? 0,
    items_done: job.itemsDone ?? 0,
  };
}
