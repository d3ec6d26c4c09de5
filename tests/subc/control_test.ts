import assert from "node:assert/strict";
import {
  CatalogUpdateSchema,
  decodeControlBody,
  encodeControlBody,
  errorBody,
  HealthCheckResponseSchema,
  isCapabilityId,
  MAX_HEALTH_METRICS_BYTES,
  parseControl,
  parseErrorBody,
  parseHello,
  parseHelloAck,
  parseRouteBind,
  RouteOpenResponseSchema,
  RouteOpenSchema,
  RouteStatusSchema,
} from "../../lib/subc/control.ts";
import type { Hello, Manifest } from "../../lib/subc/control.ts";
import { SubcWireError } from "../../lib/subc/errors.ts";
import type { SubcWireReason } from "../../lib/subc/errors.ts";

const frames: { name: string; body_utf8: string }[] = JSON.parse(
  await Deno.readTextFile(new URL("../vectors/subc_wire.json", import.meta.url)),
).frames;

/** A manifest shaped like Synapse's: one management surface. */
const MANIFEST: Manifest = {
  module_id: "synapse",
  module_version: "0.1.0",
  protocol_ver: 2,
  trust_tier: "first_party",
  provides: [{
    role: "management_surface",
    operations: [
      { name: "embed.query", kind: "query" },
      { name: "models.preload", kind: "mutate", description: "Load a model" },
    ],
    config_schema: {},
    observability: [{ name: "status", kind: "snapshot" }],
    identity_scope: ["project"],
    concurrency: "module_managed",
  }],
  consumes: [],
  bindings: {
    storage: { kind: "sqlite", scope: "project", owns_schema: true },
    vault_grants: [],
    identity: { requires: [], optional: ["session"] },
  },
  capabilities: { provides: ["embedding/v1"], requires: [], must_never_reach: [] },
  provenance: { build_git_sha: "0123456789abcdef", wire_crate_version: "0.26.0" },
};

const HELLO: Hello = {
  manifest: MANIFEST,
  protocol_ver: 2,
  control_ops: ["health.check"],
  launch_nonce: "ab".repeat(32),
};

function refused(
  reason: SubcWireReason,
  details: Record<string, unknown> = {},
): (e: unknown) => boolean {
  return (e: unknown) => {
    assert.ok(e instanceof SubcWireError, `expected SubcWireError, got ${e}`);
    assert.equal(e.reason, reason, e.message);
    for (const [k, v] of Object.entries(details)) assert.deepEqual(e.details?.[k], v, e.message);
    return true;
  };
}

/** A deep copy of the HELLO with `edit` applied to its manifest. */
function helloWith(edit: (m: Record<string, unknown>) => void): unknown {
  const hello = structuredClone(HELLO) as unknown as { manifest: Record<string, unknown> };
  edit(hello.manifest);
  return hello;
}

Deno.test("encodeControlBody() writes the compact serde form of the hello_min and response vectors", () => {
  const body = (name: string): string => frames.find((f) => f.name === name)!.body_utf8;
  const helloMin = { manifest: { module_id: "synapse" }, protocol_ver: 2 };
  assert.equal(new TextDecoder().decode(encodeControlBody(helloMin)), body("hello_min"));
  assert.equal(
    new TextDecoder().decode(encodeControlBody({ result: {} })),
    body("response_ch5_ep9_corr42"),
  );
  // hello_min is a frame vector, not a registrable HELLO: its manifest lacks required fields.
  assert.throws(
    () => parseHello(new TextEncoder().encode(body("hello_min"))),
    refused("invalid_control_body", {
      error_code: "invalid_manifest",
      field: "manifest.module_version",
    }),
  );
});

Deno.test("parseHello() takes a Synapse-shaped HELLO and round-trips it with no null anywhere", () => {
  const bytes = encodeControlBody(HELLO);
  const text = new TextDecoder().decode(bytes);
  assert.doesNotMatch(text, /null/);
  assert.deepEqual(parseHello(bytes), HELLO);
  // Optional parts may be absent: no concurrency (module_managed), no launch nonce, no blocks.
  const minimal = structuredClone(HELLO) as Hello;
  delete minimal.launch_nonce;
  delete minimal.manifest.capabilities;
  delete minimal.manifest.provenance;
  delete (minimal.manifest.provides[0] as { concurrency?: string }).concurrency;
  assert.deepEqual(parseHello(minimal), minimal);
  // control_ops null is the legacy baseline, and is allowed.
  assert.equal(parseHello({ ...HELLO, control_ops: null }).control_ops, null);
});

Deno.test("parseHello() answers protocol_ver != 2 with version_unsupported, and a bad HELLO with invalid_hello", () => {
  assert.throws(
    () => parseHello({ ...HELLO, protocol_ver: 1 }),
    refused("invalid_control_body", { error_code: "version_unsupported", protocol_ver: 1 }),
  );
  for (
    const [hello, field] of [
      [{ ...HELLO, control_ops: "health.check" }, "control_ops"],
      [{ ...HELLO, launch_nonce: 7 }, "launch_nonce"],
      [{ protocol_ver: 2 }, "manifest"],
      [[HELLO], "(body)"],
    ] as const
  ) {
    assert.throws(
      () => parseHello(hello),
      refused("invalid_control_body", { error_code: "invalid_hello", field }),
    );
  }
});

Deno.test("the manifest schema: each required field, closed sets and role counts give invalid_manifest naming the field", () => {
  const cases: [(m: Record<string, unknown>) => void, string][] = [];
  for (
    const field of [
      "module_id",
      "module_version",
      "protocol_ver",
      "trust_tier",
      "provides",
      "consumes",
      "bindings",
    ]
  ) {
    cases.push([(m) => delete m[field], field]);
  }
  const role = (m: Record<string, unknown>) => (m.provides as Record<string, unknown>[])[0]!;
  cases.push(
    [(m) => (m.protocol_ver = 1), "protocol_ver"],
    [(m) => (m.trust_tier = "trusted"), "trust_tier"],
    [(m) => (m.provides = [{ role: "oracle" }]), "provides.0.role"],
    [(m) => (m.provides = [role(m), role(m)]), "provides.1"],
    [(m) => delete role(m).config_schema, "provides.0.config_schema"],
    [(m) => delete role(m).observability, "provides.0.observability"],
    [
      (m) => ((role(m).operations as Record<string, unknown>[])[1]!.kind = "read"),
      "provides.0.operations.1.kind",
    ],
    [(m) => (role(m).identity_scope = ["global"]), "provides.0.identity_scope.0"],
    [(m) => (role(m).concurrency = "parallel"), "provides.0.concurrency"],
    [(m) => (m.consumes = [{ role: "llm_client", via: "x" }]), "consumes.0.auth"],
    [
      (m) => ((m.bindings as Record<string, Record<string, unknown>>).storage!.kind = "postgres"),
      "bindings.storage.kind",
    ],
    [(m) => delete (m.bindings as Record<string, unknown>).identity, "bindings.identity"],
    [(m) => (m.ready = "yes"), "ready"],
  );
  for (const [edit, field] of cases) {
    assert.throws(
      () => parseHello(helloWith(edit)),
      refused("invalid_control_body", {
        error_code: "invalid_manifest",
        field: `manifest.${field}`,
      }),
      field,
    );
  }
});

Deno.test("the manifest ignores unknown fields outside capabilities, and takes the fields older daemons required", () => {
  const hello = parseHello(helloWith((m) => {
    m.future = { x: 1 };
    (m.provides as Record<string, unknown>[])[0]!.future = true;
    (m.provenance as Record<string, unknown>).launch_nonce_source = "fd";
    m.scheduled_tasks = [];
    (m.bindings as Record<string, unknown>).config = { source: "subc_mediated", tiers: [] };
  }));
  assert.equal("future" in hello.manifest, false);
  assert.equal("future" in hello.manifest.provides[0]!, false);
  assert.deepEqual(hello.manifest.provenance, MANIFEST.provenance);
  assert.deepEqual(hello.manifest.scheduled_tasks, []);
  // Inside capabilities an unknown key is refused.
  assert.throws(
    () => parseHello(helloWith((m) => ((m.capabilities as Record<string, unknown>).extra = []))),
    refused("invalid_control_body", {
      error_code: "invalid_manifest",
      field: "manifest.capabilities.extra",
    }),
  );
});

Deno.test("isCapabilityId() follows the <name>/v<N> grammar", () => {
  const name64 = "a".repeat(64);
  for (
    const ok of ["a/v1", "embedding/v2", "flow-scopes/v1", "a1-b2-c3/v4294967295", `${name64}/v9`]
  ) {
    assert.equal(isCapabilityId(ok), true, ok);
  }
  for (
    const bad of [
      "A/v1",
      "1a/v1",
      "-a/v1",
      "a-/v1",
      "a--b/v1",
      "a_b/v1",
      "a.b/v1",
      `${name64}a/v1`,
      "a/v0",
      "a/v01",
      "a/v4294967296",
      "a/v",
      "a/1",
      "a/V1",
      "a",
      "",
      "a/v1/",
      " a/v1",
    ]
  ) {
    assert.equal(isCapabilityId(bad), false, bad);
  }
});

Deno.test("capabilities refuse malformed and duplicate ids, naming the list entry", () => {
  const caps = (c: Record<string, unknown>) => helloWith((m) => (m.capabilities = c));
  const base = { provides: [], requires: [], must_never_reach: [] };
  const cases: [Record<string, unknown>, string][] = [
    [{ ...base, provides: ["embedding/v1", "Embedding/v1"] }, "provides.1"],
    [{ ...base, provides: ["embedding/v1", "embedding/v1"] }, "provides.1"],
    [{ ...base, must_never_reach: ["x/v1", "x/v1"] }, "must_never_reach.1"],
    [{ ...base, requires: [{ capability: "x/v1", need: "maybe" }] }, "requires.0.need"],
    [
      {
        ...base,
        requires: [{ capability: "x/v1", need: "required" }, {
          capability: "x/v1",
          need: "optional",
        }],
      },
      "requires.1",
    ],
    [{ ...base, requires: [{ capability: "x/v1", need: "required", why: "" }] }, "requires.0.why"],
    [{ provides: [], requires: [] }, "must_never_reach"],
  ];
  for (const [c, field] of cases) {
    assert.throws(
      () => parseHello(caps(c)),
      refused("invalid_control_body", { field: `manifest.capabilities.${field}` }),
      field,
    );
  }
});

Deno.test("provenance values are 1-128 printable ASCII bytes", () => {
  const prov = (v: string) => helloWith((m) => (m.provenance = { build_git_sha: v }));
  assert.equal(parseHello(prov("x".repeat(128))).manifest.provenance?.build_git_sha?.length, 128);
  assert.equal(parseHello(prov("v 1.0 ~")).manifest.provenance?.build_git_sha, "v 1.0 ~");
  for (const bad of ["", "x".repeat(129), "caf\u00e9", "a\nb", "tab\t", "\u007f"]) {
    assert.throws(
      () => parseHello(prov(bad)),
      refused("invalid_control_body", {
        error_code: "invalid_manifest",
        field: "manifest.provenance.build_git_sha",
      }),
      JSON.stringify(bad),
    );
  }
});

Deno.test("parseHelloAck() requires negotiated_ver 2, reads the storage descriptor and ignores unknown fields", () => {
  const ack = {
    negotiated_ver: 2,
    subc_ops: ["catalog.update", "route.open"],
    subc_capabilities: ["manifest_registration_v1"],
    storage: {
      module_id: "synapse",
      storage_namespace: "default",
      isolation: { kind: "module" },
      backend: { backend: "sqlite", path: "/d/cortexkit/synapse/store.db" },
    },
    machine_id: "m-1",
    future: 1,
  };
  const { future: _, ...expected } = ack;
  assert.deepEqual(parseHelloAck(encodeControlBody(ack)), expected);
  const pg = { backend: "postgres", dsn: "postgres://x", database: "cortexkit_synapse_abc" };
  assert.deepEqual(
    parseHelloAck({ ...ack, storage: { ...ack.storage, backend: pg } }).storage?.backend,
    pg,
  );
  const { storage: _s, machine_id: _m, ...bare } = expected;
  assert.deepEqual(parseHelloAck(bare), bare);

  assert.throws(
    () => parseHelloAck({ ...ack, negotiated_ver: 1 }),
    refused("unsupported_negotiated_version", { negotiated_ver: 1, supported: 2 }),
  );
  assert.throws(
    () => parseHelloAck({ ...bare, subc_ops: undefined }),
    refused("invalid_control_body", { field: "subc_ops" }),
  );
  assert.throws(
    () => parseHelloAck({ ...ack, storage: { ...ack.storage, backend: { backend: "redis" } } }),
    refused("invalid_control_body", { field: "storage.backend.backend" }),
  );
});

Deno.test("parseRouteBind() ignores unknown fields (role_versions, scope, config) and checks the rest", () => {
  const bind = {
    op: "route.bind",
    route_channel: 3,
    epoch: 7,
    target: { kind: "management_surface", module_id: "synapse" },
    identity: { project_root: "/p", harness: "opencode", session: "s1", project_id: "pj-1" },
    principal: { kind: "reserved", module_id: "broca" },
    consumer_capabilities: ["embedding/v1"],
    admission_facts: { flow: null },
    role_versions: { management_surface: 1 },
    scope: { ref: "x" },
    config: [],
  };
  const { role_versions: _r, scope: _s, config: _c, ...expected } = bind;
  assert.deepEqual(parseRouteBind(encodeControlBody(bind)), expected);
  for (const principal of [{ kind: "direct" }, { kind: "unverified" }]) {
    assert.deepEqual(parseRouteBind({ ...bind, principal }).principal, principal);
  }
  const cases: [Record<string, unknown>, string][] = [
    [{ route_channel: 0 }, "route_channel"],
    [{ route_channel: 65536 }, "route_channel"],
    [{ epoch: 2 ** 32 }, "epoch"],
    [{ epoch: -1 }, "epoch"],
    [{ target: { kind: "management_surface" } }, "target.module_id"],
    [{ target: { kind: "robot", module_id: "x" } }, "target.kind"],
    [{ identity: { project_root: "/p", harness: "h" } }, "identity.session"],
    [{ principal: { kind: "reserved" } }, "principal.module_id"],
    [{ op: "route.open" }, "op"],
  ];
  for (const [patch, field] of cases) {
    assert.throws(
      () => parseRouteBind({ ...bind, ...patch }),
      refused("invalid_control_body", { field }),
      field,
    );
  }
});

Deno.test("health.check replies: the three statuses, and metrics of at most 16 KiB", () => {
  for (const status of ["ok", "degraded", "failing"]) {
    assert.equal(
      parseControl(HealthCheckResponseSchema, { op: "health.check", status }, "h").status,
      status,
    );
  }
  // {"k":"xxx…"} is 8 bytes of JSON around the string.
  const atCap = { k: "x".repeat(MAX_HEALTH_METRICS_BYTES - 8) };
  assert.equal(
    new TextEncoder().encode(JSON.stringify(atCap)).byteLength,
    MAX_HEALTH_METRICS_BYTES,
  );
  const reply = { op: "health.check", status: "ok", detail: "warm", metrics: atCap };
  assert.deepEqual(parseControl(HealthCheckResponseSchema, reply, "h"), reply);
  assert.throws(
    () => parseControl(HealthCheckResponseSchema, { ...reply, metrics: { k: atCap.k + "x" } }, "h"),
    refused("invalid_control_body", { field: "metrics" }),
  );
  assert.throws(
    () => parseControl(HealthCheckResponseSchema, { op: "health.check", status: "fine" }, "h"),
    refused("invalid_control_body", { field: "status" }),
  );
});

Deno.test("errorBody() omits an absent detail; parseErrorBody() reads any detail", () => {
  assert.equal(
    new TextDecoder().decode(encodeControlBody(errorBody("route_rejected", "no"))),
    '{"code":"route_rejected","message":"no"}',
  );
  const withDetail = errorBody("module_warming", "wait", { reason: "declared_not_ready" });
  assert.deepEqual(parseErrorBody(encodeControlBody(withDetail)), withDetail);
  assert.throws(
    () => parseErrorBody({ code: "x" }),
    refused("invalid_control_body", { field: "message" }),
  );
});

Deno.test("route.open, its reply, catalog.update and route.status parse in their serde form", () => {
  const open = {
    op: "route.open",
    target: { kind: "management_surface", module_id: "synapse" },
    identity: { project_root: "/p", harness: "subc-call", session: "subc-call-1" },
    consumer_identity: { module_id: "broca", launch_nonce: "cd".repeat(32) },
    config: [],
  };
  assert.deepEqual(parseControl(RouteOpenSchema, encodeControlBody(open), "route.open"), open);
  assert.throws(
    () => parseControl(RouteOpenSchema, { ...open, config: undefined }, "route.open"),
    refused("invalid_control_body", { field: "config" }),
  );
  const reply = { op: "route.open", route_channel: 4, route_epoch: 1 };
  assert.deepEqual(parseControl(RouteOpenResponseSchema, reply, "route.open"), reply);
  const update = {
    op: "catalog.update",
    provides: MANIFEST.provides,
    capabilities: MANIFEST.capabilities,
  };
  assert.deepEqual(parseControl(CatalogUpdateSchema, update, "catalog.update"), update);
  assert.throws(
    () =>
      parseControl(CatalogUpdateSchema, {
        ...update,
        provides: [MANIFEST.provides[0], MANIFEST.provides[0]],
      }, "c"),
    refused("invalid_control_body", { field: "provides.1" }),
  );
  const status = { op: "route.status", route_channel: 4, route_epoch: 1, status: "warm" };
  assert.deepEqual(parseControl(RouteStatusSchema, status, "route.status"), status);
});

Deno.test("decodeControlBody() finds the op, and refuses bytes that are not UTF-8 JSON", () => {
  assert.deepEqual(decodeControlBody(encodeControlBody({ op: "health.check" })), {
    op: "health.check",
    value: { op: "health.check" },
  });
  assert.equal(decodeControlBody(encodeControlBody({ op: 3 })).op, undefined);
  assert.equal(decodeControlBody(encodeControlBody([1])).op, undefined);
  for (
    const bad of [Uint8Array.of(0xff, 0xfe), new TextEncoder().encode("{op:"), new Uint8Array(0)]
  ) {
    assert.throws(
      () => decodeControlBody(bad),
      refused("invalid_control_body", { field: "(body)" }),
    );
  }
});
