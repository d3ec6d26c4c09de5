/**
 * The routing constraints of the compat doors (OpenAI embeddings and completions, TEI, Ollama,
 * Cohere/Jina rerank) as request headers — their bodies are the upstream APIs' own, so the
 * native common params (docs/operations.md, "Common params") `target_fingerprint`,
 * `required_fingerprint`, `allow_equivalent`, `required_epoch` and `accept_declared` come as
 * `x-synapse-*` headers and are applied exactly as the params are (docs/operations.md, "Routing by
 * fingerprint"). The fingerprint served is the response's `x-synapse-fingerprint` header.
 *
 * @module
 */
import { SynapseError } from "../../contract/errors.ts";
import { readFingerprint } from "../../contract/schemas.ts";
import type { RoutingParams } from "../../ops/op_types.ts";

/** The routing headers, by the param each one sets. */
export const ROUTING_HEADERS: Readonly<Record<keyof RoutingParams, string>> = Object.freeze({
  target_fingerprint: "x-synapse-target-fingerprint",
  required_fingerprint: "x-synapse-required-fingerprint",
  allow_equivalent: "x-synapse-allow-equivalent",
  required_epoch: "x-synapse-required-epoch",
  accept_declared: "x-synapse-accept-declared",
});

/**
 * The routing constraints a request's headers carry.
 *
 * - `x-synapse-target-fingerprint`, `x-synapse-required-fingerprint`: a fingerprint, 64 hex
 *   characters of either case (read as lowercase; surrounding whitespace is trimmed, as HTTP
 *   does).
 * - `x-synapse-allow-equivalent`, `x-synapse-accept-declared`: `true` or `false` (any case).
 * - `x-synapse-required-epoch`: a non-negative decimal integer (at most 2^53 − 1).
 *
 * @param headers The request's headers.
 * @returns The params the headers set (empty when none is present).
 * @throws {SynapseError} channel `invalid_request` `{field: <header name>, header, reason:
 *   "invalid_header"}` (HTTP 400) for a malformed value.
 */
export function routingFromHeaders(headers: Headers): RoutingParams {
  const out: RoutingParams = {};
  for (const key of ["target_fingerprint", "required_fingerprint"] as const) {
    const v = headers.get(ROUTING_HEADERS[key]);
    if (v === null) continue;
    const fp = readFingerprint(v.trim());
    if (fp === undefined) {
      throw badHeader(ROUTING_HEADERS[key], "must be a fingerprint (64 hex characters)");
    }
    out[key] = fp;
  }
  for (const key of ["allow_equivalent", "accept_declared"] as const) {
    const v = headers.get(ROUTING_HEADERS[key]);
    if (v === null) continue;
    const s = v.trim().toLowerCase();
    if (s !== "true" && s !== "false") {
      throw badHeader(ROUTING_HEADERS[key], `must be true or false, not '${clip(v)}'`);
    }
    out[key] = s === "true";
  }
  const epoch = headers.get(ROUTING_HEADERS.required_epoch);
  if (epoch !== null) {
    const s = epoch.trim();
    const n = Number(s);
    if (!/^\d+$/.test(s) || !Number.isSafeInteger(n)) {
      throw badHeader(
        ROUTING_HEADERS.required_epoch,
        `must be a non-negative integer, not '${clip(epoch)}'`,
      );
    }
    out.required_epoch = n;
  }
  return out;
}

/**
 * Refuses the routing headers on a route that takes the params in its body instead (`POST
 * /v1/ops/<method>`): a header there would otherwise be accepted and ignored.
 *
 * @throws {SynapseError} channel `invalid_request` `{field: <header name>, header, reason:
 *   "use_param", param}` for the first routing header present.
 */
export function refuseRoutingHeaders(headers: Headers): void {
  for (const [param, header] of Object.entries(ROUTING_HEADERS)) {
    if (headers.get(header) === null) continue;
    throw new SynapseError(
      "invalid_request",
      `Cannot read header ${header} on /v1/ops: the native door takes routing constraints as params; send "${param}" in the request body instead`,
      { channel: true, details: { field: header, header, reason: "use_param", param } },
    );
  }
}

function badHeader(header: string, why: string): SynapseError {
  return new SynapseError("invalid_request", `Cannot read header ${header}: it ${why}`, {
    channel: true,
    details: { field: header, header, reason: "invalid_header" },
  });
}

function clip(s: string): string {
  return s.length > 40 ? `${s.slice(0, 40)}…` : s;
}
