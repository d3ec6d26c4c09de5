/**
 * What a Synapse module declares to the subc daemon at HELLO (subc §2): its manifest and the
 * HELLO body around it. Pure functions; the operations come from the caller (the door derives
 * them from the ops dispatcher, so the manifest can never list an operation the module does not
 * serve, nor miss one it does).
 *
 * @module
 */
import { parseControl, PROTOCOL_VER } from "./control.ts";
import type { Hello, ManagementOperation, Manifest, Provenance } from "./control.ts";
import { ManifestSchema } from "./control.ts";

/** The channel-0 operations a Synapse module answers beyond the legacy baseline. */
export const MODULE_CONTROL_OPS: readonly string[] = Object.freeze(["health.check"]);

/** What {@link buildManifest} needs. */
export interface ModuleManifestInput {
  /** The module id (`SUBC_MODULE_ID`, else `synapse`). */
  moduleId: string;
  /** This build's version. */
  moduleVersion: string;
  /** Every operation the module serves, with its kind (`query` or `mutate`). */
  operations: readonly ManagementOperation[];
  /** Build facts; each value 1–128 printable ASCII bytes. Left out when absent. */
  provenance?: Provenance;
}

/**
 * Builds the manifest of a Synapse module: one `management_surface` role listing `operations`
 * (`config_schema: {}`, no observability, no identity scope, concurrency `module_managed`, which
 * gives each route a credit window of 32), no consumer role, a project-scoped SQLite store the
 * module owns the schema of, no vault grant, no identity requirement, and `provenance` when given.
 * The result is checked against the manifest schema the daemon decodes with, so a manifest the
 * daemon would answer `invalid_manifest` is never sent.
 *
 * @param input Module id, version, operations, provenance.
 * @returns The manifest.
 * @throws {SubcWireError} `invalid_control_body` naming the field the daemon would refuse (a
 *   provenance value that is not 1–128 printable ASCII bytes, a kind other than query/mutate).
 * @throws {RangeError} when `operations` is empty or names an operation twice.
 *
 * @example
 * ```ts
 * import { buildManifest } from "./manifest.ts";
 * import assert from "node:assert/strict";
 *
 * const m = buildManifest({
 *   moduleId: "synapse",
 *   moduleVersion: "0.1.0",
 *   operations: [{ name: "embed.query", kind: "query" }],
 * });
 * assert.equal(m.provides[0]?.role, "management_surface");
 * assert.equal(m.bindings.storage.kind, "sqlite");
 * ```
 */
export function buildManifest(input: ModuleManifestInput): Manifest {
  if (input.operations.length === 0) {
    throw new RangeError("Cannot build the manifest as 'operations' is empty");
  }
  const seen = new Set<string>();
  for (const op of input.operations) {
    if (seen.has(op.name)) {
      throw new RangeError(`Cannot build the manifest as operation '${op.name}' is listed twice`);
    }
    seen.add(op.name);
  }
  const manifest: Manifest = {
    module_id: input.moduleId,
    module_version: input.moduleVersion,
    protocol_ver: PROTOCOL_VER,
    trust_tier: "first_party",
    provides: [{
      role: "management_surface",
      operations: input.operations.map((op) => ({ ...op })),
      config_schema: {},
      observability: [],
      identity_scope: [],
      concurrency: "module_managed",
    }],
    consumes: [],
    bindings: {
      storage: { kind: "sqlite", scope: "project", owns_schema: true },
      vault_grants: [],
      identity: { requires: [], optional: [] },
    },
    ...(input.provenance === undefined ? {} : { provenance: { ...input.provenance } }),
  };
  parseControl(ManifestSchema, manifest, "manifest");
  return manifest;
}

/**
 * Builds the HELLO body: the manifest, `protocol_ver` 2, `control_ops` ({@link
 * MODULE_CONTROL_OPS}: `health.check`), and the launch nonce when the daemon gave one (left out
 * otherwise, never `null`).
 *
 * @param manifest From {@link buildManifest}.
 * @param launchNonce 64 lowercase hex digits, or undefined.
 * @returns The HELLO body.
 */
export function buildHello(manifest: Manifest, launchNonce?: string): Hello {
  return {
    manifest,
    protocol_ver: PROTOCOL_VER,
    control_ops: [...MODULE_CONTROL_OPS],
    ...(launchNonce === undefined ? {} : { launch_nonce: launchNonce }),
  };
}

/**
 * The operations a manifest's management surface declares, by name.
 *
 * @param manifest A manifest.
 * @returns Name → kind; empty when the manifest has no management surface.
 */
export function declaredOperations(manifest: Manifest): Map<string, "query" | "mutate"> {
  const out = new Map<string, "query" | "mutate">();
  for (const role of manifest.provides) {
    if (role.role !== "management_surface") continue;
    for (const op of role.operations) out.set(op.name, op.kind);
  }
  return out;
}
