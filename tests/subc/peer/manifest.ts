/**
 * A minimal, valid module manifest for scripted modules (subc §2 "Manifest schema, exactly").
 *
 * @module
 */
import type { Concurrency, ManagementOperation, Manifest } from "../../../lib/subc/control.ts";

/** Options of {@link testManifest}. */
export interface TestManifestOptions {
  /** `module_id`. @default "synapse" */
  moduleId?: string;
  /** The management surface's `concurrency`; omitted when unset (the daemon reads module_managed). */
  concurrency?: Concurrency;
  /** The management surface's operations. @default one query op, `echo` */
  operations?: ManagementOperation[];
  /** `ready`; omitted when unset (absent means true). */
  ready?: boolean;
}

/**
 * A manifest with one management_surface role, every required field present and nothing else.
 *
 * @param options Module id, concurrency, operations, ready.
 * @returns The manifest, in serde form (absent optionals omitted).
 */
export function testManifest(options: TestManifestOptions = {}): Manifest {
  return {
    module_id: options.moduleId ?? "synapse",
    module_version: "0.0.0-test",
    protocol_ver: 2,
    trust_tier: "first_party",
    provides: [{
      role: "management_surface",
      operations: options.operations ?? [{ name: "echo", kind: "query" }],
      config_schema: {},
      observability: [],
      identity_scope: ["project"],
      ...(options.concurrency === undefined ? {} : { concurrency: options.concurrency }),
    }],
    consumes: [],
    bindings: {
      storage: { kind: "sqlite", scope: "project", owns_schema: true },
      vault_grants: [],
      identity: { requires: [], optional: [] },
    },
    ...(options.ready === undefined ? {} : { ready: options.ready }),
  };
}
