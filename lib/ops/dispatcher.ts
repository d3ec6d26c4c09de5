/**
 * The one ops dispatcher behind every front door (docs/internals.md §1). It maps a method to its
 * operation and every outcome to one of the three wire shapes (result, semantic error, channel
 * error; docs/errors.md "Shapes"), so no front door holds operation logic.
 *
 * @module
 */
import { SynapseError } from "../contract/errors.ts";
import type { ChannelError, WireError } from "../contract/errors.ts";
import { embedBatch, embedQuery } from "./embed.ts";
import { rerankScore } from "./rerank.ts";
import { embedResult, jobResume } from "./jobs.ts";
import { admissionStatus, modelsList } from "./models.ts";
import { microllmOneshot } from "./microllm.ts";
import { modelInfo } from "./model_info.ts";
import {
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
import { probeReport, probeStart, probeStatus } from "./probe.ts";
import { aliasDeclare, aliasesCheckIndex, aliasRetract } from "./aliases.ts";
import { detokenizeOp, tokenizeOp } from "./tokenize.ts";
import type { CallOptions, OpContext } from "./context.ts";
import { asOperationError } from "./_errors.ts";

/** Outcome of one call, already in its wire shape. */
export type OpOutcome =
  | { kind: "result"; body: { result: unknown } }
  | {
    kind: "semantic";
    body: { result: { module_generation: number; error: WireError } };
    error: SynapseError;
  }
  | { kind: "channel"; body: ChannelError; error: SynapseError };

type Handler = (ctx: OpContext, params: unknown, options: CallOptions) => unknown;

/**
 * Who may call an operation over the HTTP door (field report F39; lib/doors/http/owner_key.ts):
 * `owner` only with the owner's local key (every operation that changes state another caller
 * sees: models loaded, unloaded, downloaded or removed, pins, GC), `open` anyone who can reach
 * the port, unless `http.require_key_for_queries` asks the key for those too. The bus door has
 * its own authentication (the connection file's key; docs/subc.md "Serving as the `synapse`
 * module") and the in-process CLI needs none.
 */
export type OperationAccess = "open" | "owner";

/** One row of {@link OPERATIONS}. */
export interface Operation {
  /** The operation's kind (docs/internals.md §1): `query` or `mutate`. */
  kind: "query" | "mutate";
  /** Who may call it over HTTP ({@link OperationAccess}). */
  access: OperationAccess;
  /** The operation. */
  handler: Handler;
}

/**
 * Operations served by this build, with their kind (docs/internals.md §1). The subc manifest
 * declares exactly these (`lib/doors/bus.ts`), and a flow-scoped route serves only the
 * `query` ones. `access` says who may call each over HTTP ({@link OperationAccess}); every
 * `mutate` is `owner`, and `embed.batch` (whose durable job is the caller's own) is `open`.
 *
 * The inference ops, `models.list`, `models.catalog`, `model.status`, `model.info`, `admission.status`,
 * `probe.status`, `probe.report` and `aliases.check_index` are `query`, as in the reference
 * registry; `model.load`, `model.unload`, `models.download*`, `models.remove`, `cache.*`,
 * `probe.start` (it writes the certification rows every caller's admission reads) and
 * `alias.declare` / `alias.retract` (they change which fingerprints every caller's envelope
 * calls equivalent) are `mutate`. `job.resume` is `query` and `open` as `embed.batch` is: it
 * continues the caller's own job (the job id is the capability that reads and resumes it). `embed.batch` with a `request_key`
 * does write the store (it mints a durable job), but it stays `query`: the job is the durable
 * form of one deterministic computation, keyed by the caller's own key (the same key and texts
 * attach to the same job; different texts are `idempotency_conflict`), and it changes nothing
 * another caller sees — no model, alias, approval or config, which is what `mutate` marks
 * (`model.load`, `cache.*`, `models.download`). Declaring it `mutate` would refuse big batches
 * to flows, which the reference serves them.
 */
export const OPERATIONS: Readonly<Record<string, Operation>> = Object.freeze({
  "embed.query": { kind: "query", access: "open", handler: embedQuery },
  "embed.batch": { kind: "query", access: "open", handler: embedBatch },
  "embed.result": { kind: "query", access: "open", handler: embedResult },
  "job.resume": { kind: "query", access: "open", handler: jobResume },
  "rerank.score": { kind: "query", access: "open", handler: rerankScore },
  "microllm.oneshot": { kind: "query", access: "open", handler: microllmOneshot },
  "models.list": { kind: "query", access: "open", handler: modelsList },
  "admission.status": { kind: "query", access: "open", handler: admissionStatus },
  "model.load": { kind: "mutate", access: "owner", handler: modelLoad },
  "model.status": { kind: "query", access: "open", handler: modelStatusOp },
  "model.info": { kind: "query", access: "open", handler: modelInfo },
  "model.unload": { kind: "mutate", access: "owner", handler: modelUnload },
  "models.catalog": { kind: "query", access: "open", handler: modelsCatalog },
  "models.download": { kind: "mutate", access: "owner", handler: modelsDownload },
  "models.download.cancel": { kind: "mutate", access: "owner", handler: modelsDownloadCancel },
  "models.remove": { kind: "mutate", access: "owner", handler: modelsRemove },
  "cache.pin": { kind: "mutate", access: "owner", handler: cachePin },
  "cache.gc": { kind: "mutate", access: "owner", handler: cacheGc },
  "probe.start": { kind: "mutate", access: "owner", handler: probeStart },
  "probe.status": { kind: "query", access: "open", handler: probeStatus },
  "probe.report": { kind: "query", access: "open", handler: probeReport },
  "aliases.check_index": { kind: "query", access: "open", handler: aliasesCheckIndex },
  "alias.declare": { kind: "mutate", access: "owner", handler: aliasDeclare },
  "alias.retract": { kind: "mutate", access: "owner", handler: aliasRetract },
  "tokenize": { kind: "query", access: "open", handler: tokenizeOp },
  "detokenize": { kind: "query", access: "open", handler: detokenizeOp },
});

/**
 * Runs one method.
 *
 * @param ctx Module context.
 * @param method Contract method name, e.g. `"embed.query"`.
 * @param params Request params (`{}` when absent).
 * @returns The outcome in wire shape; never throws.
 */
export async function dispatch(
  ctx: OpContext,
  method: string,
  params: unknown,
  options: CallOptions = {},
): Promise<OpOutcome> {
  try {
    const op = Object.hasOwn(OPERATIONS, method) ? OPERATIONS[method] : undefined;
    if (!op) {
      // A channel error's body is {code, message}: the message itself names the methods.
      const known = Object.keys(OPERATIONS);
      throw new SynapseError(
        "unknown_method",
        `Cannot call '${method}': unknown method; the methods are ${known.join(", ")}`,
        { details: { method, known } },
      );
    }
    const result = await op.handler(ctx, params ?? {}, options);
    return { kind: "result", body: { result } };
  } catch (err) {
    return outcomeOf(ctx, err, method);
  }
}

/**
 * Wraps an error thrown by an operation into its wire shape. A bug (anything that is not a
 * {@link SynapseError} or an aborted signal) is logged with its stack and answered
 * `internal_error`, permanent.
 */
export function outcomeOf(
  ctx: Pick<OpContext, "moduleGeneration" | "log">,
  err: unknown,
  what = "the request",
): OpOutcome {
  const e = asOperationError(err, ctx, what);
  if (e.channel) return { kind: "channel", body: e.toChannel(), error: e };
  return {
    kind: "semantic",
    body: { result: { module_generation: ctx.moduleGeneration, error: e.toWire() } },
    error: e,
  };
}
