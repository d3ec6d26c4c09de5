import assert from "node:assert/strict";
import { buildHello, buildManifest, declaredOperations } from "../../lib/subc/manifest.ts";
import { parseHello } from "../../lib/subc/control.ts";
import { SubcWireError } from "../../lib/subc/errors.ts";

const OPS = [
  { name: "embed.query", kind: "query" as const },
  { name: "model.load", kind: "mutate" as const },
];

Deno.test("buildManifest() builds what the daemon's manifest schema accepts", () => {
  const manifest = buildManifest({
    moduleId: "synapse",
    moduleVersion: "0.1.0",
    operations: OPS,
    provenance: { store_schema_version: "3" },
  });
  const hello = parseHello(new TextEncoder().encode(JSON.stringify(buildHello(manifest))));
  assert.deepEqual(hello.manifest, manifest);
  assert.deepEqual(hello.control_ops, ["health.check"]);
  assert.equal("launch_nonce" in hello, false);
  assert.deepEqual([...declaredOperations(manifest)], [["embed.query", "query"], [
    "model.load",
    "mutate",
  ]]);
});

Deno.test("buildManifest() refuses a provenance value the daemon would answer invalid_manifest", () => {
  for (const value of ["", "x".repeat(129), "tab\there", "naïve"]) {
    assert.throws(
      () =>
        buildManifest({
          moduleId: "synapse",
          moduleVersion: "0.1.0",
          operations: OPS,
          provenance: { build_git_sha: value },
        }),
      (e) => {
        assert.ok(e instanceof SubcWireError);
        assert.equal(e.reason, "invalid_control_body");
        assert.equal(e.details?.field, "provenance.build_git_sha");
        return true;
      },
      JSON.stringify(value),
    );
  }
});

Deno.test("buildManifest() refuses no operation, or one listed twice", () => {
  assert.throws(
    () => buildManifest({ moduleId: "synapse", moduleVersion: "0", operations: [] }),
    RangeError,
  );
  assert.throws(
    () =>
      buildManifest({
        moduleId: "synapse",
        moduleVersion: "0",
        operations: [OPS[0]!, OPS[0]!],
      }),
    /listed twice/,
  );
});

Deno.test("buildHello() carries the launch nonce when given", () => {
  const manifest = buildManifest({ moduleId: "synapse", moduleVersion: "0", operations: OPS });
  assert.equal(buildHello(manifest, "ab".repeat(32)).launch_nonce, "ab".repeat(32));
});
