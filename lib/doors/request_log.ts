/**
 * The request log: one line per request, written by every door (the HTTP door, lib/doors/http/
 * server.ts; the bus door, lib/doors/bus.ts) through {@link logRequest}, so both say the same
 * things in the same words (docs/observability.md, "Request log").
 *
 * The line is message `request` under the door's target (`synapse.http`, `synapse.subc`), its
 * fields in this order:
 *
 * - the door's leading fields (HTTP: `method path`; the bus: none);
 * - `op`: the operation the request ran (`-` when it reached none);
 * - `model items item_errors tokens queue_ms inference_ms`: the call's request facts
 *   (lib/ops/request_facts.ts), `-` for each fact not known (the request never reached an
 *   operation, or the operation has no such fact);
 * - `outcome`: `cancelled` when the caller went away before the answer, else the facts' outcome
 *   (`ok`, the stable error code), else what the door says of a request that reached no
 *   operation (its refusal's code), else `-`;
 * - the door's trailing fields (HTTP: `status`; the bus: `channel corr`);
 * - `total_ms`: the time in the door, ms (three decimals).
 *
 * No text, id, key or header is logged: only counts, times, the model id and codes. Caller
 * strings (the op, the model, the door's own strings) are cut to 200 characters.
 *
 * @example HTTP, as the operator sees it at `CK_LOG=info`
 * ```text
 * … INFO  synapse.http: request method=POST path=/v1/ops/embed.batch op=embed.batch model=synapse-tiny-embed items=3 item_errors=1 tokens=9 queue_ms=0.2 inference_ms=3.1 outcome=ok status=200 total_ms=5.123
 * ```
 *
 * @module
 */
import type { LogFields, LogLevel, LogSink } from "../log/log.ts";
import type { RequestFacts } from "../ops/door_backend.ts";

/** One request, as {@link logRequest} writes it (the module doc gives the line). */
export interface RequestLine {
  /** The door's log target: `synapse.http`, `synapse.subc`. */
  target: string;
  /** @default "info" (the HTTP door logs its probes, `/health` and `/metrics`, at `debug`) */
  level?: LogLevel | undefined;
  /** The door's fields before `op`, in order (HTTP: `method`, `path`). */
  lead?: LogFields | undefined;
  /** The operation it ran, when it got that far. */
  op?: string | undefined;
  /** The call's request facts, when it reached an operation. */
  facts?: RequestFacts | undefined;
  /** The caller went away before the answer: the outcome is `cancelled`, whatever the facts say. */
  cancelled?: boolean | undefined;
  /** The outcome of a request without facts (the door's refusal's code, or `ok`). */
  unreached?: string | undefined;
  /** The door's fields after `outcome`, in order (HTTP: `status`; the bus: `channel`, `corr`). */
  tail?: LogFields | undefined;
  /** Time in the door, ms. */
  totalMs: number;
}

/**
 * Writes the request log line of one request (module doc).
 *
 * @param log Where the line goes.
 * @param line The request.
 */
export function logRequest(log: LogSink, line: RequestLine): void {
  const f = line.facts;
  const dash = (v: string | number | undefined): string | number => v ?? "-";
  const fields: Record<string, string | number | boolean> = {};
  for (const [k, v] of Object.entries(line.lead ?? {})) fields[k] = clipped(v);
  fields.op = clip(line.op ?? "-");
  fields.model = clip(f?.model ?? "-");
  fields.items = dash(f?.items);
  fields.item_errors = dash(f?.item_errors);
  fields.tokens = dash(f?.tokens);
  fields.queue_ms = dash(f?.queue_ms);
  fields.inference_ms = dash(f?.inference_ms);
  fields.outcome = line.cancelled ? "cancelled" : f?.outcome ?? line.unreached ?? "-";
  for (const [k, v] of Object.entries(line.tail ?? {})) fields[k] = clipped(v);
  fields.total_ms = Math.round(line.totalMs * 1000) / 1000;
  log(line.level ?? "info", line.target, "request", fields);
}

/**
 * A caller-supplied string cut to a log-friendly length: 200 characters, then `…`.
 *
 * @param s The string.
 */
export function clip(s: string): string {
  return s.length > 200 ? `${s.slice(0, 200)}…` : s;
}

function clipped(v: string | number | boolean): string | number | boolean {
  return typeof v === "string" ? clip(v) : v;
}
