/**
 * The one ops dispatcher behind every front door (design.md: "Three front doors, one
 * dispatcher"). It maps a method to its operation and every outcome to one of the three wire
 * shapes of contract.md §1–2, so no front door holds operation logic.
 *
 * @module
 */
import { SynapseError } from "../contract/errors.ts";
import type { ChannelError, WireError } from "../contract/errors.ts";
import { embedBatch, embedQuery } from "./embed.ts";
import { rerankScore } from "./rerank.ts";
import { embedResult } from "./jobs.ts";
import { admissionStatus, modelsList } from "./models.ts";
import { microllmOneshot } from "./microllm.ts";
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
 * Operations served by this build, with their contract kind (contract §1). The subc manifest
 * declares exactly these (`lib/cli/_subc_door.ts`), and a flow-scoped route serves only the
 * `query` ones.
 *
 * The inference ops, `models.list`, `models.catalog`, `model.status` and `admission.status` are
 * `query`, as in the reference registry; `model.load`, `model.unload`, `models.download*`,
 * `models.remove` and `cache.*` are `mutate`. `embed.batch` with a `request_key`
 * does write the store (it mints a durable job), but it stays `query`: the job is the durable
 * form of one deterministic computation, keyed by the caller's own key (the same key and texts
 * attach to the same job; different texts are `idempotency_conflict`), and it changes nothing
 * another caller sees — no model, alias, approval or config, which is what `mutate` marks
 * (`model.load`, `cache.*`, `models.download`). Declaring it `mutate` would refuse big batches
 * to flows, which the reference serves them.
 */
export const OPERATIONS: Readonly<Record<string, { kind: "query" | "mutate"; handler: Handler }>> =
  Object.freeze({
    "embed.query": { kind: "query", handler: embedQuery },
    "embed.batch": { kind: "query", handler: embedBatch },
    "embed.result": { kind: "query", handler: embedResult },
    "rerank.score": { kind: "query", handler: rerankScore },
    "microllm.oneshot": { kind: "query", handler: microllmOneshot },
    "models.list": { kind: "query", handler: modelsList },
    "admission.status": { kind: "query", handler: admissionStatus },
    "model.load": { kind: "mutate", handler: modelLoad },
    "model.status": { kind: "query", handler: modelStatusOp },
    "model.unload": { kind: "mutate", handler: modelUnload },
    "models.catalog": { kind: "query", handler: modelsCatalog },
    "models.download": { kind: "mutate", handler: modelsDownload },
    "models.download.cancel": { kind: "mutate", handler: modelsDownloadCancel },
    "models.remove": { kind: "mutate", handler: modelsRemove },
    "cache.pin": { kind: "mutate", handler: cachePin },
    "cache.gc": { kind: "mutate", handler: cacheGc },
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
      throw new SynapseError("unknown_method", `Cannot call '${method}': unknown method`, {
        details: { method, known: Object.keys(OPERATIONS) },
      });
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
