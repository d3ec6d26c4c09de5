/**
 * The control bodies of subc (subc §2–§5): zod schemas, the TypeScript types inferred from them,
 * and the codec between frame bodies and those types.
 *
 * Bodies are UTF-8 JSON in serde form: snake_case names, `op`/`kind`/`role`-tagged, absent
 * optionals **omitted, never `null`** (the one `null` of the protocol is `HELLO.control_ops`,
 * where it means "the legacy baseline"). Build bodies as plain objects of these types and send
 * them with {@link encodeControlBody}; read them with {@link decodeControlBody} and the `parse*`
 * function of the op.
 *
 * Strictness follows the daemon: where it ignores unknown fields (HELLO_ACK, `route.bind`, the
 * manifest outside `capabilities`, `provenance`) the schemas strip them; where it refuses them
 * (`capabilities`) the schema refuses them; closed sets (roles, trust tiers, scopes, kinds) are
 * closed here too.
 *
 * @module
 */
import { z } from "zod";
import { SubcWireError } from "./errors.ts";

/** The protocol version HELLO and the manifest carry; exact (subc §2). */
export const PROTOCOL_VER = 2;
/** Largest `metrics` of a health.check reply, in bytes of its JSON (16 KiB). */
export const MAX_HEALTH_METRICS_BYTES = 16_384;
/** Longest provenance value, in bytes. */
export const MAX_PROVENANCE_VALUE_BYTES = 128;
/** Longest capability name (before `/v<N>`), in bytes. */
export const MAX_CAPABILITY_NAME_BYTES = 64;

/** Any JSON value (what serde's `serde_json::Value` holds). */
export type JsonValue = z.infer<ReturnType<typeof z.json>>;

const u8 = z.number().int().min(0).max(0xff);
const u32 = z.number().int().min(0).max(0xffff_ffff);
/** A route slot: a u16 other than 0 (channel 0 is control). */
const routeChannel = z.number().int().min(1, {
  message: "must be 1-65535 (0 is the control channel)",
})
  .max(0xffff, { message: "must be 1-65535" });

// ---------------------------------------------------------------------------------------------
// Manifest (subc §2 "Manifest schema, exactly")
// ---------------------------------------------------------------------------------------------

/** Identity keys that scope a call. */
export const IdentityScopeSchema = z.enum(["session", "project"]);
/** `session` or `project`. */
export type IdentityScope = z.infer<typeof IdentityScopeSchema>;

/** How the daemon may deliver concurrent calls; sets the route credit window (subc §3). */
export const ConcurrencySchema = z.enum(["serial", "module_managed", "stateless_parallel"]);
/** `serial` (window 1), `module_managed` (32), `stateless_parallel` (1024). */
export type Concurrency = z.infer<typeof ConcurrencySchema>;

/**
 * Whether `id` is a capability id `<name>/v<N>` (subc §2): name 1–64 bytes of lowercase ASCII
 * letters, digits and single hyphens, starting with a letter, not ending with a hyphen; N a
 * decimal from 1 to 2^32−1 without leading zeros.
 *
 * @param id A candidate id.
 * @returns Whether it is well formed.
 *
 * @example
 * ```ts
 * import { isCapabilityId } from "./control.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(isCapabilityId("embedding/v2"), true);
 * assert.equal(isCapabilityId("flow-scopes/v01"), false);
 * ```
 */
export function isCapabilityId(id: string): boolean {
  const m = /^([a-z](?:-?[a-z0-9])*)\/v([1-9][0-9]{0,9})$/.exec(id);
  return m !== null && m[1]!.length <= MAX_CAPABILITY_NAME_BYTES && Number(m[2]) <= 0xffff_ffff;
}

const capabilityId = z.string().refine(isCapabilityId, {
  message: "must be a capability id <name>/v<N> (name: lowercase letters, digits and single " +
    "hyphens, 1-64 bytes, starting with a letter; N: 1 to 4294967295, no leading zeros)",
});

function noDuplicates<T>(key: (item: T) => string) {
  return (list: T[], ctx: z.RefinementCtx): void => {
    const seen = new Set<string>();
    list.forEach((item, i) => {
      const k = key(item);
      if (seen.has(k)) {
        ctx.addIssue({ code: "custom", message: `duplicates '${k}'`, path: [i] });
      }
      seen.add(k);
    });
  };
}

/** One required capability. */
export const CapabilityRequirementSchema = z.strictObject({
  capability: capabilityId,
  need: z.enum(["required", "optional"]),
});

/**
 * `capabilities` (subc §2): the one part of the manifest where the daemon refuses unknown keys;
 * identifiers are {@link isCapabilityId} ids, with no duplicates in a list.
 */
export const CapabilitiesSchema = z.strictObject({
  provides: z.array(capabilityId).superRefine(noDuplicates((s: string) => s)),
  requires: z.array(CapabilityRequirementSchema).superRefine(
    noDuplicates((r: { capability: string }) => r.capability),
  ),
  must_never_reach: z.array(capabilityId).superRefine(noDuplicates((s: string) => s)),
});
/** The `capabilities` block of a manifest or a catalog.update. */
export type Capabilities = z.infer<typeof CapabilitiesSchema>;

const provenanceValue = z.string().regex(/^[\x20-\x7e]{1,128}$/, {
  message: "must be 1-128 printable ASCII bytes",
});

/**
 * `provenance` (subc §2): each value 1–128 printable ASCII bytes (0x20–0x7E); every field
 * optional; unknown fields ignored (the reference keeps newer ones like `launch_nonce_source`).
 */
export const ProvenanceSchema = z.object({
  build_git_sha: provenanceValue.optional(),
  build_lock_digest: provenanceValue.optional(),
  wire_crate_version: provenanceValue.optional(),
  store_schema_version: provenanceValue.optional(),
});
/** Build facts a module reports. */
export type Provenance = z.infer<typeof ProvenanceSchema>;

/** One operation of a management surface. */
export const ManagementOperationSchema = z.object({
  name: z.string(),
  kind: z.enum(["query", "mutate"]),
  description: z.string().optional(),
});
/** `{name, kind: "query"|"mutate", description?}`. */
export type ManagementOperation = z.infer<typeof ManagementOperationSchema>;

/** One observable of a management surface. */
export const ObservabilitySchema = z.object({
  name: z.string(),
  kind: z.enum(["snapshot", "stream"]),
});

/**
 * The `management_surface` role (the one Synapse provides). `config_schema` is any JSON value
 * and required (send `{}` if none); `concurrency` absent means `module_managed`.
 */
export const ManagementSurfaceRoleSchema = z.object({
  role: z.literal("management_surface"),
  operations: z.array(ManagementOperationSchema),
  config_schema: z.json(),
  observability: z.array(ObservabilitySchema),
  identity_scope: z.array(IdentityScopeSchema),
  concurrency: ConcurrencySchema.optional(),
});
/** A management_surface role. */
export type ManagementSurfaceRole = z.infer<typeof ManagementSurfaceRoleSchema>;

/** The `tool_provider` role. */
export const ToolProviderRoleSchema = z.object({
  role: z.literal("tool_provider"),
  tools: z.array(z.object({
    name: z.string(),
    description: z.string().optional(),
    execution_mode: z.enum(["pure", "mutating", "unfenceable"]),
    schema: z.json(),
  })),
  identity_scope: z.array(IdentityScopeSchema),
  concurrency: ConcurrencySchema,
  emits_push: z.boolean(),
  sub_supervises: z.boolean(),
});

/** The `internal_service` role. */
export const InternalServiceRoleSchema = z.object({
  role: z.literal("internal_service"),
  service_id: z.string(),
  transport: z.literal("bulk"),
  agent_facing: z.boolean(),
  operations: z.array(z.string()),
});

/** The `pipeline_stage` role (unroutable; its fields are not captured here and pass through). */
export const PipelineStageRoleSchema = z.looseObject({ role: z.literal("pipeline_stage") });

/** A provider role, tagged by `role`; an unknown role is refused (the set is closed). */
export const ProviderRoleSchema = z.discriminatedUnion("role", [
  ManagementSurfaceRoleSchema,
  ToolProviderRoleSchema,
  InternalServiceRoleSchema,
  PipelineStageRoleSchema,
]);
/** An entry of `provides[]`. */
export type ProviderRole = z.infer<typeof ProviderRoleSchema>;

/** `provides[]`: at most one tool_provider and one management_surface (subc §2). */
export const ProvidesSchema = z.array(ProviderRoleSchema).superRefine((roles, ctx) => {
  for (const role of ["tool_provider", "management_surface"] as const) {
    const at = roles.map((r, i) => (r.role === role ? i : -1)).filter((i) => i >= 0);
    if (at.length > 1) {
      ctx.addIssue({ code: "custom", message: `is a second ${role}; at most one`, path: [at[1]!] });
    }
  }
});

/** A consumer role, tagged by `role`. */
export const ConsumerRoleSchema = z.discriminatedUnion("role", [
  z.object({ role: z.literal("tool_client"), of: z.array(z.string()) }),
  z.object({ role: z.literal("llm_client"), via: z.string(), auth: z.string() }),
  z.object({ role: z.literal("service_client"), of: z.array(z.string()) }),
]);
/** An entry of `consumes[]`. */
export type ConsumerRole = z.infer<typeof ConsumerRoleSchema>;

/** `bindings` (subc §2). `config` is what older daemons required; the newest ignores it. */
export const BindingsSchema = z.object({
  storage: z.object({
    kind: z.literal("sqlite"),
    scope: z.literal("project"),
    owns_schema: z.boolean(),
  }),
  vault_grants: z.array(z.object({ secret: z.string(), reason: z.string() })),
  identity: z.object({
    requires: z.array(IdentityScopeSchema),
    optional: z.array(IdentityScopeSchema),
  }),
  config: z.json().optional(),
});
/** A manifest's bindings. */
export type Bindings = z.infer<typeof BindingsSchema>;

/**
 * The module manifest, exactly as the newest daemon decodes it (subc §2 "Manifest schema,
 * exactly"): a missing required field or a wrong type is `invalid_manifest`; unknown fields are
 * ignored except inside `capabilities`. `scheduled_tasks` is what older daemons required (send
 * `[]` for them); the newest ignores it. `ready` absent means true.
 */
export const ManifestSchema = z.object({
  module_id: z.string(),
  module_version: z.string(),
  protocol_ver: z.literal(PROTOCOL_VER),
  trust_tier: z.enum(["first_party", "reviewed", "untrusted"]),
  provides: ProvidesSchema,
  consumes: z.array(ConsumerRoleSchema),
  bindings: BindingsSchema,
  capabilities: CapabilitiesSchema.optional(),
  provenance: ProvenanceSchema.optional(),
  self_signals: z.array(z.json()).optional(),
  ready: z.boolean().optional(),
  scheduled_tasks: z.array(z.json()).optional(),
});
/** A module manifest. */
export type Manifest = z.infer<typeof ManifestSchema>;

// ---------------------------------------------------------------------------------------------
// HELLO / HELLO_ACK (subc §2)
// ---------------------------------------------------------------------------------------------

/**
 * The HELLO body (module → daemon, type 9, corr 1). `control_ops: null` means the legacy
 * baseline; Synapse sends a list that includes `health.check`. `launch_nonce` is omitted when
 * unset. `protocol_ver` is checked by {@link parseHello} (a value other than 2 is
 * `version_unsupported`, not a shape error).
 */
export const HelloSchema = z.object({
  manifest: ManifestSchema,
  protocol_ver: u8,
  control_ops: z.array(z.string()).nullable().optional(),
  launch_nonce: z.string().optional(),
});
/** A HELLO body. */
export type Hello = z.infer<typeof HelloSchema>;

/** The storage backend of a descriptor (subc §5). */
export const StorageBackendSchema = z.discriminatedUnion("backend", [
  z.object({ backend: z.literal("sqlite"), path: z.string() }),
  z.object({ backend: z.literal("postgres"), dsn: z.string(), database: z.string() }),
]);

/**
 * `HELLO_ACK.storage` (subc §5): advisory; present only when the daemon config has a `storage`
 * section. Paths use forward slashes on every OS.
 */
export const StorageDescriptorSchema = z.object({
  module_id: z.string(),
  storage_namespace: z.string(),
  isolation: z.object({ kind: z.string() }),
  backend: StorageBackendSchema,
});
/** A storage descriptor. */
export type StorageDescriptor = z.infer<typeof StorageDescriptorSchema>;

/**
 * The HELLO_ACK body (daemon → module, type 10, echoes HELLO's corr). Unknown fields are
 * ignored. `negotiated_ver` must be 2 ({@link parseHelloAck} refuses other values).
 */
export const HelloAckSchema = z.object({
  negotiated_ver: u8,
  subc_ops: z.array(z.string()),
  subc_capabilities: z.array(z.string()),
  storage: StorageDescriptorSchema.optional(),
  machine_id: z.string().optional(),
});
/** A HELLO_ACK body. */
export type HelloAck = z.infer<typeof HelloAckSchema>;

// ---------------------------------------------------------------------------------------------
// Channel-0 control (subc §3, §4)
// ---------------------------------------------------------------------------------------------

/** The target of a route, tagged by `kind`. */
export const RouteTargetSchema = z.discriminatedUnion("kind", [
  z.object({ kind: z.literal("management_surface"), module_id: z.string() }),
  z.object({ kind: z.literal("tool_provider"), module_id: z.string() }),
  z.object({ kind: z.literal("internal_service"), module_id: z.string(), service_id: z.string() }),
]);
/** A route target. */
export type RouteTarget = z.infer<typeof RouteTargetSchema>;

/**
 * The identity of a bind. **Unattested**: the caller chose every value; use it for scoping and
 * attribution, never to authorize (authorize on `principal`).
 */
export const BindIdentitySchema = z.object({
  project_root: z.string(),
  harness: z.string(),
  session: z.string(),
  project_id: z.string().optional(),
});
/** A bind identity. */
export type BindIdentity = z.infer<typeof BindIdentitySchema>;

/** Who opened the route, as the daemon attests it (from launch nonces it minted). */
export const PrincipalSchema = z.discriminatedUnion("kind", [
  z.object({ kind: z.literal("reserved"), module_id: z.string() }),
  z.object({ kind: z.literal("direct") }),
  z.object({ kind: z.literal("unverified") }),
]);
/** A principal. */
export type Principal = z.infer<typeof PrincipalSchema>;

/**
 * `route.bind` (daemon → module). Unknown fields (`role_versions`, `scope`, the old `config`)
 * are ignored. Ack with {@link RouteBindAck} within 12 s; then install `route_channel → epoch`.
 */
export const RouteBindSchema = z.object({
  op: z.literal("route.bind"),
  route_channel: routeChannel,
  epoch: u32,
  target: RouteTargetSchema,
  identity: BindIdentitySchema,
  principal: PrincipalSchema.optional(),
  consumer_capabilities: z.array(z.string()).optional(),
  admission_facts: z.record(z.string(), z.json()).optional(),
});
/** A route.bind request. */
export type RouteBind = z.infer<typeof RouteBindSchema>;

/** The ack of a route.bind: a Response body `{"op":"route.bind"}`. */
export const RouteBindAckSchema = z.object({ op: z.literal("route.bind") });
/** A route.bind ack. */
export type RouteBindAck = z.infer<typeof RouteBindAckSchema>;

/** `health.check` request (daemon → module; only if HELLO advertised it). */
export const HealthCheckSchema = z.object({ op: z.literal("health.check") });
/** A health.check request. */
export type HealthCheck = z.infer<typeof HealthCheckSchema>;

/** The health.check reply; `metrics` at most {@link MAX_HEALTH_METRICS_BYTES} of JSON. */
export const HealthCheckResponseSchema = z.object({
  op: z.literal("health.check"),
  status: z.enum(["ok", "degraded", "failing"]),
  detail: z.string().optional(),
  metrics: z.record(z.string(), z.json()).refine(
    (m) => new TextEncoder().encode(JSON.stringify(m)).byteLength <= MAX_HEALTH_METRICS_BYTES,
    { message: `must be at most ${MAX_HEALTH_METRICS_BYTES} bytes of JSON` },
  ).optional(),
});
/** A health.check reply. */
export type HealthCheckResponse = z.infer<typeof HealthCheckResponseSchema>;

/** The body of every Error frame (subc §3). */
export const ErrorBodySchema = z.object({
  code: z.string(),
  message: z.string(),
  detail: z.json().optional(),
});
/** `{code, message, detail?}`. */
export type ErrorBody = z.infer<typeof ErrorBodySchema>;

/**
 * `route.open` (client → daemon, subc §4). `consumer_identity` echoes this process's module id
 * and launch nonce when it has them. Unknown fields are ignored.
 */
export const RouteOpenSchema = z.object({
  op: z.literal("route.open"),
  target: RouteTargetSchema,
  identity: z.object({ project_root: z.string(), harness: z.string(), session: z.string() }),
  consumer_identity: z.object({ module_id: z.string(), launch_nonce: z.string() }).optional(),
  consumer_capabilities: z.array(z.string()).optional(),
  config: z.array(z.json()),
});
/** A route.open request. */
export type RouteOpen = z.infer<typeof RouteOpenSchema>;

/** The route.open reply: the route's slot and epoch. */
export const RouteOpenResponseSchema = z.object({
  op: z.literal("route.open"),
  route_channel: routeChannel,
  route_epoch: u32,
});
/** A route.open reply. */
export type RouteOpenResponse = z.infer<typeof RouteOpenResponseSchema>;

/** `catalog.update` (module → daemon; only if HELLO_ACK's `subc_ops` lists it). */
export const CatalogUpdateSchema = z.object({
  op: z.literal("catalog.update"),
  provides: ProvidesSchema,
  capabilities: CapabilitiesSchema.optional(),
});
/** A catalog.update request. */
export type CatalogUpdate = z.infer<typeof CatalogUpdateSchema>;

/** The catalog.update reply. */
export const CatalogUpdateAckSchema = z.object({ op: z.literal("catalog.update") });

/** `route.status` Push (module → daemon, corr 0); the daemon caches it for `route.poll`. */
export const RouteStatusSchema = z.object({
  op: z.literal("route.status"),
  route_channel: routeChannel,
  route_epoch: u32,
  status: z.string(),
});
/** A route.status push. */
export type RouteStatus = z.infer<typeof RouteStatusSchema>;

// ---------------------------------------------------------------------------------------------
// Codec
// ---------------------------------------------------------------------------------------------

/**
 * Serialises a control body: compact JSON, UTF-8. Optional fields must be left out (or
 * `undefined`, which JSON omits), never `null`.
 *
 * @param body A body of one of the types above.
 * @returns The frame body bytes.
 */
export function encodeControlBody(body: object): Uint8Array {
  return new TextEncoder().encode(JSON.stringify(body));
}

/**
 * Reads a control body: strict UTF-8, then JSON.
 *
 * @param body The frame body.
 * @returns The JSON value and its `op` when it is an object with a string `op`.
 * @throws {SubcWireError} `invalid_control_body` when the bytes are not UTF-8 JSON.
 */
export function decodeControlBody(body: Uint8Array): { op: string | undefined; value: unknown } {
  let value: unknown;
  try {
    value = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(body));
  } catch (err) {
    throw new SubcWireError(
      "invalid_control_body",
      "Cannot read control body: it is not UTF-8 JSON; the peer broke subc §1",
      { details: { field: "(body)" }, cause: err },
    );
  }
  const op = typeof value === "object" && value !== null && !Array.isArray(value) &&
      typeof (value as { op?: unknown }).op === "string"
    ? (value as { op: string }).op
    : undefined;
  return { op, value };
}

/**
 * Parses a control value against a schema.
 *
 * @param schema One of the schemas above.
 * @param value A parsed JSON value, or the raw frame body bytes.
 * @param what What is parsed, for the message (e.g. `"route.bind"`).
 * @returns The parsed value, unknown fields stripped where the schema ignores them.
 * @throws {SubcWireError} `invalid_control_body` naming the first offending field
 *   (`details.field`, e.g. `manifest.provides.0.operations.1.kind`).
 */
export function parseControl<S extends z.ZodType>(
  schema: S,
  value: unknown,
  what: string,
): z.infer<S> {
  const input = value instanceof Uint8Array ? decodeControlBody(value).value : value;
  const res = schema.safeParse(input);
  if (res.success) return res.data;
  throw shapeError(res.error, input, what, {});
}

/**
 * Parses a HELLO body as the daemon does: the envelope of the body, then `protocol_ver`, then
 * the manifest. `details.error_code` is the ErrorBody code the daemon answers with.
 *
 * @param value A parsed JSON value, or the raw frame body bytes.
 * @returns The HELLO.
 * @throws {SubcWireError} `invalid_control_body` with `details.error_code`: `invalid_hello`
 *   (not an object, `control_ops` or `launch_nonce` of the wrong type, no manifest),
 *   `version_unsupported` (`protocol_ver` ≠ 2), `invalid_manifest` (the manifest's shape),
 *   and `details.field`.
 */
export function parseHello(value: unknown): Hello {
  const input = value instanceof Uint8Array ? decodeControlBody(value).value : value;
  const outer = HelloSchema.extend({ manifest: z.json() }).safeParse(input);
  if (!outer.success) {
    throw shapeError(outer.error, input, "HELLO", { error_code: "invalid_hello" });
  }
  if (outer.data.protocol_ver !== PROTOCOL_VER) {
    throw new SubcWireError(
      "invalid_control_body",
      `Cannot accept HELLO: protocol_ver ${outer.data.protocol_ver} is not ${PROTOCOL_VER}`,
      {
        details: {
          field: "protocol_ver",
          error_code: "version_unsupported",
          protocol_ver: outer.data.protocol_ver,
        },
      },
    );
  }
  const manifest = ManifestSchema.safeParse(outer.data.manifest);
  if (!manifest.success) {
    throw shapeError(manifest.error, input, "HELLO", { error_code: "invalid_manifest" }, [
      "manifest",
    ]);
  }
  return { ...outer.data, manifest: manifest.data };
}

/**
 * Parses a HELLO_ACK body and requires `negotiated_ver` 2 (subc §2 "Version is exact").
 *
 * @param value A parsed JSON value, or the raw frame body bytes.
 * @returns The HELLO_ACK, unknown fields stripped.
 * @throws {SubcWireError} `invalid_control_body` (shape), `unsupported_negotiated_version`.
 */
export function parseHelloAck(value: unknown): HelloAck {
  const ack = parseControl(HelloAckSchema, value, "HELLO_ACK");
  if (ack.negotiated_ver !== PROTOCOL_VER) {
    throw new SubcWireError(
      "unsupported_negotiated_version",
      `Cannot register with the subc daemon: it negotiated version ${ack.negotiated_ver}, this ` +
        `module speaks ${PROTOCOL_VER} only; upgrade the daemon or ck-synapse so they match`,
      { details: { negotiated_ver: ack.negotiated_ver, supported: PROTOCOL_VER } },
    );
  }
  return ack;
}

/**
 * Parses a route.bind request (unknown fields ignored).
 *
 * @param value A parsed JSON value, or the raw frame body bytes.
 * @returns The request.
 * @throws {SubcWireError} `invalid_control_body` naming the field.
 */
export function parseRouteBind(value: unknown): RouteBind {
  return parseControl(RouteBindSchema, value, "route.bind");
}

/**
 * Parses the body of an Error frame.
 *
 * @param value A parsed JSON value, or the raw frame body bytes.
 * @returns `{code, message, detail?}`.
 * @throws {SubcWireError} `invalid_control_body` naming the field.
 */
export function parseErrorBody(value: unknown): ErrorBody {
  return parseControl(ErrorBodySchema, value, "Error body");
}

/**
 * Builds an ErrorBody, leaving `detail` out when undefined.
 *
 * @param code A stable snake_case code (`route_rejected`, `module_not_initialized`, …).
 * @param message A human message.
 * @param detail Optional structured facts.
 * @returns The body.
 */
export function errorBody(code: string, message: string, detail?: JsonValue): ErrorBody {
  return detail === undefined ? { code, message } : { code, message, detail };
}

function shapeError(
  error: z.ZodError,
  input: unknown,
  what: string,
  extra: Record<string, unknown>,
  prefix: (string | number)[] = [],
): SubcWireError {
  const issue = error.issues.find((i) => i.code === "unrecognized_keys") ?? error.issues[0]!;
  let path = [...prefix, ...issue.path.map((p) => (typeof p === "symbol" ? String(p) : p))];
  let problem: string;
  if (issue.code === "unrecognized_keys") {
    path = [...path, (issue as { keys: string[] }).keys[0]!];
    problem = "is not a known field";
  } else if (path.length > 0 && valueAt(input, path) === undefined) {
    problem = "is missing";
  } else {
    const text = issue.message.replace(/^Invalid input: /, "");
    problem = /^(must|is|duplicates) /.test(text) ? text : `is invalid: ${lowerFirst(text)}`;
  }
  const field = path.length === 0 ? "(body)" : path.join(".");
  return new SubcWireError(
    "invalid_control_body",
    `Cannot read ${what}: field '${field}' ${problem}; the peer does not speak subc v2 as this ` +
      "build does",
    { details: { field, what, ...extra } },
  );
}

function valueAt(input: unknown, path: (string | number)[]): unknown {
  let at = input;
  for (const key of path) {
    if (typeof at !== "object" || at === null) return undefined;
    at = (at as Record<string | number, unknown>)[key];
  }
  return at;
}

function lowerFirst(text: string): string {
  return text.charAt(0).toLowerCase() + text.slice(1);
}
