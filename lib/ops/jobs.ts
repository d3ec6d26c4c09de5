/**
 * Durable embedding jobs (docs/operations.md "Inline or durable job", docs/internals.md §8.2): an
 * `embed.batch` over the inline limits with a `request_key` becomes a job in the store; it runs in
 * bulk quanta on the bulk lane (so interactive work preempts between quanta) and commits its
 * results in pages of at most `jobs.result_page_bytes` while it runs. `embed.result {job_id, page}`
 * reads any committed page in any job state.
 *
 * @module
 */
import { SynapseError, toSynapseError } from "../contract/errors.ts";
import type { WireError } from "../contract/errors.ts";
import { buildEnvelope } from "../contract/envelope.ts";
import { servedCertified } from "../probe/certification.ts";
import type { Envelope } from "../contract/envelope.ts";
import { EmbedResultParams, parseParams } from "../contract/schemas.ts";
import { ORT_ENGINE } from "../engines/ort/ort_lane.ts";
import { requestDigest } from "../identity/request_digest.ts";
import { sha256Hex } from "../identity/sha256.ts";
import type { ReadyModel } from "../models/model.ts";
import type { PromptChoice, PromptDisclosure, PromptSelector } from "../models/prompts.ts";
import { type ServedSpace, servedValues } from "../models/matryoshka.ts";
import { quantumTokensFor, takeQuantum } from "../sched/quantum.ts";
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
import type { RerankJobPage, RerankJobScore } from "./rerank_jobs.ts";
import { asOperationError } from "./_errors.ts";

/**
 * Response of an `embed.batch` that became (or attached to) a job (docs/operations.md
 * "embed.batch").
 */
export interface JobAccepted {
  module_generation: number;
  job_id: string;
  state: JobState;
  request_key: string;
  pages_available: number;
  /** True when the request attached to an existing job with the same key and digest. */
  attached: boolean;
  items_total: number;
  model_id: string;
  fingerprint: string;
}

/** One page of job results as stored. */
interface StoredPage {
  vectors: EmbedVector[];
  real_token_counts: number[];
  truncation_disclosures: TruncationDisclosure[];
  item_errors?: ItemError[];
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
  /** The job's failure, when it failed. */
  error?: WireError;
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
}

/** Items tokenized per slice before the job yields the event loop. */
const TOKENIZE_SLICE = 256;

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

/** What {@link admitDurableJob} mints a job from. */
export interface DurableJobInput {
  requestKey: string;
  /** The request digest the key is bound to. */
  requestDigest: string;
  /** The op that makes the job (`embed.batch`, `rerank.score`). */
  kind: string;
  model: ReadyModel;
  /** A Matryoshka width served (its fingerprint and dims are the job's); absent: the model's. */
  space?: ServedSpace;
  truncate: boolean;
  itemsTotal: number;
  /** Request bytes, held against the byte budget until the job ends. */
  bytes: number;
  /** The answer-level prompt disclosure (embed jobs), stored with the job's params. */
  prompt?: PromptDisclosure;
}

/**
 * Mints (or attaches to) a durable job and, when fresh, starts `run` under one bulk-lane admission
 * for the whole job (its bytes count against the budget until it ends; an attach, a retry, is
 * never counted twice). A refused admission ends the fresh job `failed_transient`, so the same
 * key mints a new job next time instead of attaching to one that never runs. The shared path of
 * every durable job (embed.batch, rerank.score).
 *
 * @throws {SynapseError} `idempotency_conflict`; `invalid_request` for a bad key; `queue_full`.
 */
export function admitDurableJob(
  ctx: OpContext,
  input: DurableJobInput,
  run: (jobId: string) => Promise<void>,
): JobAccepted {
  const jobs = ctx.jobs;
  const ttl = ctx.config.jobs;
  const { job, attached } = jobs.store.admit({
    requestKey: input.requestKey,
    requestDigest: input.requestDigest,
    kind: input.kind,
    moduleGeneration: ctx.moduleGeneration,
    params: {
      model_id: input.model.modelId,
      fingerprint: input.space?.fingerprint ?? input.model.fingerprint,
      ...(input.space === undefined ? {} : { dims: input.space.dims }),
      truncate: input.truncate,
      items_total: input.itemsTotal,
      ...(input.prompt === undefined ? {} : { prompt: input.prompt }),
    },
    itemsTotal: input.itemsTotal,
    tokensTotal: 0,
    ttls: {
      executionMs: ttl.execution_ttl_ms,
      retentionMs: ttl.result_retention_ttl_ms,
      resumeMs: ttl.resume_deadline_ms,
    },
  });
  if (!attached) {
    let permit;
    try {
      permit = input.model.bulk.admit({
        bytes: input.bytes,
        deadlineMs: ttl.execution_ttl_ms,
        maxQueueMs: Number.MAX_SAFE_INTEGER,
      });
    } catch (err) {
      const e = toSynapseError(err, "queue_full");
      jobs.store.finish(job.jobId, "failed_transient", e.toWire());
      throw e;
    }
    const running = run(job.jobId).finally(() => permit.release());
    jobs.running.set(job.jobId, running);
    running.finally(() => jobs.running.delete(job.jobId));
  }
  return {
    module_generation: ctx.moduleGeneration,
    job_id: job.jobId,
    state: job.state,
    request_key: job.requestKey,
    pages_available: job.pageCount,
    attached,
    items_total: job.itemsTotal ?? input.itemsTotal,
    model_id: input.model.modelId,
    fingerprint: input.space?.fingerprint ?? input.model.fingerprint,
  };
}

async function runEmbedJob(
  ctx: OpContext,
  jobId: string,
  req: EmbedJobRequest,
  submittedSha256: string[],
): Promise<void> {
  const store = ctx.jobs.store;
  const pageBytes = ctx.config.jobs.result_page_bytes;
  const lane = req.model.bulk;
  let pageNo = 0;
  // Progress stored with a page counts only items whose results are committed (readable).
  let committedItems = 0;
  let committedTokens = 0;
  let pageTokens = 0;
  let page: StoredPage = emptyPage();
  let pageSize = 0;
  const commit = (): void => {
    if (page.vectors.length === 0 && (page.item_errors?.length ?? 0) === 0) return;
    const itemCount = page.vectors.length + (page.item_errors?.length ?? 0);
    committedItems += itemCount;
    committedTokens += pageTokens;
    pageTokens = 0;
    store.commitPage(jobId, pageNo++, itemCount, JSON.stringify(page), {
      itemsDone: committedItems,
      tokensDone: committedTokens,
    });
    page = emptyPage();
    pageSize = 0;
  };
  const add = (v: EmbedVector, count: number, d: TruncationDisclosure): void => {
    const size = 64 + JSON.stringify(v).length;
    if (pageSize > 0 && pageSize + size > pageBytes) commit();
    page.vectors.push(v);
    page.real_token_counts.push(count);
    pageTokens += count;
    page.truncation_disclosures.push(d);
    pageSize += size;
  };
  try {
    store.markRunning(jobId);
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
            ...(req.prompt === undefined ? {} : { prompt: req.prompt }),
          },
        );
        prepared.push(...r.prepared);
        for (const e of r.errors) if (e) itemErrors.push(e);
      }
    }
    if (itemErrors.length > 0) {
      page.item_errors = [...itemErrors];
      pageSize += JSON.stringify(itemErrors).length;
    }
    // Globally length-sorted, so each quantum's micro-batches pad little.
    const order = [...prepared].sort((a, b) => a.seq.ids.length - b.seq.ids.length);
    const lengths = order.map((p) => p.seq.ids.length);
    let start = 0;
    while (start < order.length) {
      const tps = lane.tokensPerSecond;
      const quantum = tps > 0
        ? quantumTokensFor(tps, { maxTokens: ctx.config.jobs.bulk_quantum_tokens })
        : Math.min(1024, ctx.config.jobs.bulk_quantum_tokens);
      const end = takeQuantum(lengths, start, quantum);
      const slice = order.slice(start, end);
      // One quantum per run: it joins the back of the bulk queue, so interactive work preempts
      // between quanta (docs/internals.md §6).
      const out = await lane.run(
        { kind: "embed", rows: slice.map((x) => x.seq) },
        { label: `${jobId}@${start}` },
      );
      ctx.log("debug", "synapse.jobs", "job quantum", {
        job: jobId,
        from: start,
        rows: slice.length,
        tokens: lengths.slice(start, end).reduce((a, b) => a + b, 0),
        queue_ms: out.queueTimeMs,
        inference_ms: Math.round(out.inferenceMs * 1000) / 1000,
      });
      slice.forEach((x, k) => {
        const row = out.rows[k]!;
        if (row.kind !== "ok") {
          (page.item_errors ??= []).push(rowError(req.model, x, row));
          return;
        }
        const values = req.space === undefined
          ? row.values
          : servedValues(req.model, req.space, row.values);
        const line = vectorLine(req.model, x, values, submittedSha256[x.index]!);
        add(line.vector, line.count, line.disclosure);
      });
      start = end;
    }
    commit();
    store.finish(jobId, "done");
    ctx.log("info", "synapse.jobs", "job done", {
      job: jobId,
      model: req.model.modelId,
      items: req.items.length,
      pages: pageNo,
    });
  } catch (err) {
    endFailedJob(ctx, jobId, err, commit, {
      model: req.model.modelId,
      items: req.items.length,
    });
  }
}

/**
 * Ends a durable job whose run threw: commits the page in hand (what was computed stays
 * readable), then fails the job `failed_transient` or `failed_permanent` by the error's class —
 * except on `disposed` (the instance is shutting down: a stop, or the subc daemon going away),
 * where the job is not failed (a permanent `disposed` would tell its caller never to retry): it
 * stays running in the store, and the next boot fails it `module_restarted`, transient and safe
 * to resubmit with the same key. The shared end of every durable job.
 *
 * @param commit Commits the page in hand (may throw when the store is gone).
 * @param facts Log fields of the job (model, items, op).
 */
export function endFailedJob(
  ctx: OpContext,
  jobId: string,
  err: unknown,
  commit: () => void,
  facts: Record<string, string | number>,
): void {
  const e = asOperationError(err, ctx, `job ${jobId}`);
  try {
    commit();
  } catch { /* the store is gone, or refused: the pages committed before stay */ }
  if (e.code === "disposed") {
    ctx.log("info", "synapse.jobs", "job interrupted by shutdown", { job: jobId });
    return;
  }
  ctx.log(e.errorClass === "transient" ? "warn" : "error", "synapse.jobs", "job failed", {
    job: jobId,
    ...facts,
    outcome: e.code,
  });
  try {
    ctx.jobs.store.finish(
      jobId,
      e.errorClass === "transient" ? "failed_transient" : "failed_permanent",
      e.toWire(),
    );
  } catch { /* the store is gone (disposed): the next boot inherits the job */ }
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
  const params = job.params as {
    model_id?: string;
    fingerprint?: string;
    dims?: number;
    prompt?: PromptDisclosure;
  };
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
      engine: model?.identity ?? ORT_ENGINE,
      moduleGeneration: ctx.moduleGeneration,
      modelId: params.model_id ?? "",
      testModel: model?.testModel ?? false,
      certified: servedCertified(ctx, model),
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
  if (job.error) out.error = job.error;
  if (params.prompt !== undefined) out.prompt = params.prompt;
  return out;
}
