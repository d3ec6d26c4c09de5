/**
 * The one answer to "is this model serving, and if not, why?" and "is the service up?". Every
 * door prints what this module says — `GET /health`, `models.list` (and through it
 * `ck-synapse models list` and `GET /v1/models`) — so no two of them can disagree. Read from
 * cached state only (the registry's entries and each engine's cached health); never an engine
 * call.
 *
 * A model's `state` is what a request for it gets now:
 *
 * | state | a request gets | `state_reason.reason` |
 * |---|---|---|
 * | `ready` | served | — |
 * | `loading` | `model_loading` (transient) | `loading`, or `retrying_after_failure` while a failed load waits for its background retry |
 * | `failed` | the load error (permanent) | `load_failed` |
 * | `failed` | `self_check_failed` (permanent): a catalog model failed its self-check (lib/probe/self_check.ts) | `self_check_failed` |
 * | `quarantined` | `probe_required` (permanent): its worker broke the crash budget | `worker_quarantined` |
 * | `unresponsive` | queued behind work that has run past the request timeout without a pause: likely hung (the timeout will restart the worker) | `worker_busy` |
 * | `not_certified` | `not_certified` (permanent): config `certification: "require"` and the lane needs a certificate it lacks for this machine (lib/probe/certification.ts) | `probe_required`, `certification_stale`, `certification_failed` |
 * | `remote_refusing` | a remote lane's admission refusal (docs/remote.md): `provider_unavailable` while its provider's breaker is open (transient, `details.retry_after_ms`), `remote_identity_drift` / `remote_deployment_changed` once the canary halted it | `breaker_open`, `identity_drift`, `deployment_changed` |
 *
 * In `certification: "warn"` mode such a model stays `ready` (it serves, each answer says
 * `provenance.certified: false`); a stale certificate is then one of the service's degraded
 * reasons (`/health`), so the operator still hears of it.
 *
 * @module
 */
import { selfCheckRefusal } from "../probe/self_check.ts";
import type { ErrorCode } from "../contract/errors.ts";
import type { ModelEntry, ModelTask } from "../models/model.ts";
import {
  blockingReasonOf,
  type CertificationContext,
  certificationOf,
  notCertifiedError,
} from "../probe/certification.ts";
import type { BlockingReason } from "../probe/types.ts";

/** What a request for a model gets now (see the module table). */
export type ModelServingState =
  | "loading"
  | "ready"
  | "failed"
  | "quarantined"
  | "unresponsive"
  | "not_certified"
  | "remote_refusing";

/** Why a model is not `ready`. */
export interface StateReason {
  /**
   * One word: `loading`, `retrying_after_failure`, `load_failed`, `worker_quarantined`,
   * `worker_busy`, or the blocking reason of a `not_certified` model (`probe_required`,
   * `certification_stale`, `certification_failed`).
   */
  reason:
    | "loading"
    | "retrying_after_failure"
    | "load_failed"
    // A catalog model that failed its self-check (lib/probe/self_check.ts).
    | "self_check_failed"
    | "worker_quarantined"
    | "worker_busy"
    // A remote lane refusing at admission: its breaker is open, or the canary halted it.
    | "breaker_open"
    | "identity_drift"
    | "deployment_changed"
    | BlockingReason;
  /** The stable code a request for the model is refused with now; absent when it is queued. */
  code?: ErrorCode;
  /** One line for people, naming the model. */
  message: string;
  /** Facts: `attempt`, `retry_in_ms`, `last_error`, `crashes`, `since_ms`, `busy_ms`, `threshold_ms` … */
  details?: Record<string, unknown>;
}

/** The status of one model, as every door prints it. */
export interface ModelStatus {
  model_id: string;
  task: ModelTask;
  state: ModelServingState;
  /** Present whenever `state` is not `ready`. */
  state_reason?: StateReason;
  /**
   * The worker's admission (`serving_admission`, docs/operations.md "models.list"): `serving`,
   * `not_certified` (require mode, the lane lacks a certificate: `serving_admission_reason {reason:
   * <blocking reason>, probe_command}`), `quarantined`
   * (past its crash budget) or `unresponsive` (busy past the request timeout). Present for
   * worker-backed models, and for any model that is quarantined or unresponsive.
   */
  serving_admission?: "serving" | "quarantined" | "unresponsive" | "not_certified";
  /** The quarantine record `{reason, message, since_ms, crashes}`, or `{reason: "worker_busy", busy_ms, threshold_ms}`. */
  serving_admission_reason?: Record<string, unknown>;
  /** Present and true for generated test fixtures. */
  test_model?: true;
}

/** Overall state of the service. */
export type ServiceState = "ok" | "degraded" | "loading" | "unavailable";

/** The status of the service and of each model. */
export interface ServiceStatus {
  /**
   * `ok`: every model is ready. `degraded`: one is ready, another is not (failed, loading,
   * quarantined, unresponsive, not_certified); or every model that is not ready is
   * `not_certified` (the probe makes it serve); or, in `warn` mode, a ready model serves on a
   * stale certificate. `loading`: none is ready and one is loading. `unavailable`:
   * none is ready or loading, or the instance is shutting down.
   */
  status: ServiceState;
  /** Present unless `ok`: which models are not ready and why, in one line. */
  reason?: string;
  models: ModelStatus[];
}

/**
 * The status of one model: its registry state, refined by its engine's cached health and, given
 * the certification context, by serving admission (`not_certified`).
 *
 * @param m The registry entry.
 * @param now Wall clock in ms (for `retry_in_ms`). @default Date.now()
 * @param certification Module context of serving admission; without it certification is not
 *   judged (a ready model stays `ready`).
 * @returns State, reason and the worker's admission.
 */
export function modelStatus(
  m: ModelEntry,
  now: number = Date.now(),
  certification?: CertificationContext,
): ModelStatus {
  const status: ModelStatus = { model_id: m.modelId, task: m.task, state: m.state };
  if (m.testModel) status.test_model = true;
  if (m.state === "loading") {
    status.state_reason = {
      reason: "loading",
      code: "model_loading",
      message: `Model '${m.modelId}' is loading (attempt ${m.loadAttempts})`,
      details: { attempt: m.loadAttempts },
    };
    return status;
  }
  if (m.state === "failed") {
    const e = m.error;
    if (m.retryAtMs !== undefined) {
      // Answered model_loading while the background retry is due (the registry's resolve()).
      status.state = "loading";
      status.state_reason = {
        reason: "retrying_after_failure",
        code: "model_loading",
        message: `Model '${m.modelId}' failed to load (${
          e?.message ?? "no error recorded"
        }); loading again in the background`,
        details: {
          attempt: m.loadAttempts,
          retry_in_ms: Math.max(0, Math.round(m.retryAtMs - now)),
          ...(e ? { last_error: { code: e.code, message: e.message } } : {}),
        },
      };
      return status;
    }
    status.state_reason = {
      reason: "load_failed",
      ...(e ? { code: e.code } : {}),
      message: e?.message ?? `Model '${m.modelId}' failed to load`,
      ...(e?.details === undefined ? {} : { details: { ...e.details } }),
    };
    return status;
  }
  const refusal = selfCheckRefusal(m.ready);
  if (refusal !== undefined) {
    // Loaded, but its numbers failed the catalog self-check: refused for good.
    status.state = "failed";
    status.state_reason = {
      reason: "self_check_failed",
      code: refusal.code,
      message: refusal.message,
      ...(refusal.details === undefined ? {} : { details: { ...refusal.details } }),
    };
    return status;
  }
  const h = m.ready?.interactive.engine.health();
  if (h === undefined) return status;
  if (h.quarantine !== undefined) {
    const q = h.quarantine;
    status.state = "quarantined";
    status.serving_admission = "quarantined";
    status.serving_admission_reason = { ...q };
    status.state_reason = {
      reason: "worker_quarantined",
      code: "probe_required",
      message: `Model '${m.modelId}' is quarantined: ${
        String(q.message ?? "its worker broke its crash budget")
      }`,
      details: { ...q },
    };
    return status;
  }
  if (h.busyMs > h.busyLimitMs) {
    // Busy past the request timeout without a pause: likely hung (its timeout will restart it).
    const facts = {
      reason: "worker_busy",
      busy_ms: Math.round(h.busyMs),
      threshold_ms: h.busyLimitMs,
    };
    status.state = "unresponsive";
    status.serving_admission = "unresponsive";
    status.serving_admission_reason = facts;
    status.state_reason = {
      reason: "worker_busy",
      message:
        `Model '${m.modelId}' has been busy for ${facts.busy_ms} ms without a pause, past its ${h.busyLimitMs} ms request timeout: its worker may be hung`,
      details: { busy_ms: facts.busy_ms, threshold_ms: h.busyLimitMs },
    };
    return status;
  }
  const refused = m.engine === "remote"
    ? m.ready?.interactive.engine.admissionRefusal?.()
    : undefined;
  if (refused !== undefined) {
    // A remote lane refusing every request now: its provider's breaker is open, or its canary
    // halted it (docs/remote.md).
    status.state = "remote_refusing";
    status.state_reason = {
      reason: refused.code === "remote_identity_drift"
        ? "identity_drift"
        : refused.code === "remote_deployment_changed"
        ? "deployment_changed"
        : "breaker_open",
      code: refused.code,
      message: `Model '${m.modelId}' refuses requests: ${refused.message}`,
      details: {
        ...refused.details,
        ...(refused.retryAfterMs === undefined ? {} : { retry_after_ms: refused.retryAfterMs }),
      },
    };
    return status;
  }
  if (h.worker !== undefined) status.serving_admission = "serving";
  if (certification !== undefined && m.ready !== undefined) {
    refuseUncertified(status, m, certification);
  }
  return status;
}

/** Sets `not_certified` on a ready model that refuses for want of a certificate (require mode). */
function refuseUncertified(status: ModelStatus, m: ModelEntry, ctx: CertificationContext): void {
  if (ctx.config.certification !== "require") return;
  // A remote lane serves whoever accepts its declared identity: not a certification refusal.
  if (m.ready?.remote !== undefined) return;
  let view;
  try {
    view = certificationOf(ctx, m.ready!);
  } catch {
    return; // the rows cannot be read now: a request says so itself (store_failure)
  }
  const reason = blockingReasonOf(view);
  if (reason === undefined) return;
  const refusal = notCertifiedError(ctx, m.modelId, view);
  status.state = "not_certified";
  // What a request gets now: the worker may be up, but the lane admits nothing until certified.
  status.serving_admission = "not_certified";
  status.serving_admission_reason = {
    reason,
    probe_command: (refusal.details as { probe_command?: string } | undefined)?.probe_command,
  };
  status.state_reason = {
    reason,
    code: "not_certified",
    message: refusal.message,
    ...(refusal.details === undefined ? {} : { details: { ...refusal.details } }),
  };
}

/**
 * In `warn` mode: the ready models whose certificate is stale (they serve uncertified), for the
 * service's degraded reasons.
 */
function staleWhileServing(
  models: readonly ModelEntry[],
  ctx: CertificationContext | undefined,
): string[] {
  if (ctx === undefined) return [];
  const out: string[] = [];
  for (const m of models) {
    if (m.state !== "ready" || m.ready === undefined) continue;
    if (ctx.config.certification !== "warn") return [];
    try {
      const view = certificationOf(ctx, m.ready);
      if (view.status !== "certification_stale") continue;
      out.push(
        `'${m.modelId}' certification_stale (${
          (view.stale_facts ?? []).join(", ") || "changed"
        }; serving uncertified)`,
      );
    } catch { /* unreadable rows: nothing to add */ }
  }
  return out;
}

/**
 * The status of the service: each model's {@link modelStatus} and the overall state.
 *
 * A model refused `not_certified` is not ready (so the service is `degraded`); in `warn` mode a
 * model serving on a stale certificate is a degraded reason while it stays `ready`.
 *
 * @param models The registry's entries, in load order.
 * @param options `disposed`: the instance is shutting down; `now`: wall clock in ms;
 *   `certification`: module context of serving admission (absent: not judged).
 * @returns The overall state, why it is not `ok`, and every model's status.
 */
export function serviceStatus(
  models: readonly ModelEntry[],
  options: { disposed?: boolean; now?: number; certification?: CertificationContext } = {},
): ServiceStatus {
  const now = options.now ?? Date.now();
  const rows = models.map((m) => modelStatus(m, now, options.certification));
  const stale = staleWhileServing(models, options.certification);
  const notReady = rows.filter((r) => r.state !== "ready");
  const why = notReady.map((r) => {
    if (r.state === "not_certified") {
      return `'${r.model_id}' not_certified (${r.state_reason?.reason}; run '${
        String(r.state_reason?.details?.probe_command ?? "ck-synapse probe run")
      }')`;
    }
    const code = r.state_reason?.code;
    return `'${r.model_id}' ${r.state}${code === undefined ? "" : ` (${code})`}`;
  });
  let status: ServiceState;
  let reason: string | undefined;
  if (options.disposed) {
    status = "unavailable";
    reason = "the instance is shutting down";
  } else if (rows.length === 0) {
    status = "unavailable";
    reason = "no model is configured";
  } else if (notReady.length === 0 && stale.length === 0) {
    status = "ok";
  } else if (notReady.length === 0) {
    status = "degraded";
    reason = `${stale.length} of ${rows.length} models serve uncertified: ${stale.join(", ")}`;
  } else if (notReady.length < rows.length) {
    status = "degraded";
    reason = `${notReady.length} of ${rows.length} models not ready: ${
      [...why, ...stale].join(", ")
    }`;
  } else if (notReady.every((r) => r.state === "not_certified")) {
    // Up and answering; one command (the probe) makes it serve: not a reason to restart it.
    status = "degraded";
    reason = `no model is ready: ${why.join(", ")}`;
  } else {
    status = rows.some((r) => r.state === "loading") ? "loading" : "unavailable";
    reason = `no model is ready: ${why.join(", ")}`;
  }
  return { status, ...(reason === undefined ? {} : { reason }), models: rows };
}
