/**
 * The response envelope (docs/internals.md §3): identity facts flattened around an operation
 * payload.
 *
 * @module
 */
import type { EngineIdentity } from "../identity/numeric_profile.ts";

/** Envelope fields every inference result carries. */
export interface Envelope {
  /** 64-hex fingerprint of the numeric profile; persist it verbatim beside the vectors. */
  fingerprint: string;
  /** Alias-table epoch (u64). */
  table_epoch: number;
  /** Vector width; 0 for generation, 1 for rerank scores. */
  dims: number;
  /**
   * `engine`: who computed the answer. `certified`: true when the lane is a reference lane or
   * holds a passing certificate for this machine profile and runtime config; false when it was
   * served uncertified (config `certification: "warn"`).
   */
  provenance: {
    engine: EngineIdentity;
    certified: boolean;
    /** Remote lanes (contract §3): the provider, its deployment, and the identity's assurance. */
    remote?: RemoteProvenanceFacts;
  };
  /** Incremented on every boot of the module. */
  module_generation: number;
  /** Fingerprints declared equivalent by live aliases. */
  equivalent_to: string[];
  /** The model that served the request. */
  model_id: string;
  /**
   * The name the request gave when it differs from `model_id`: a config `model_aliases` name
   * that resolved to the model `model_id` names (docs/config.md "Model aliases").
   */
  requested_model?: string;
  /** Present and true when the model is a generated test fixture, not a real model. */
  test_model?: true;
}

/** `provenance.remote` (contract §3). */
export interface RemoteProvenanceFacts {
  provider: string;
  deployment: string;
  assurance: string;
}

/** Inputs of {@link buildEnvelope}. */
export interface EnvelopeFacts {
  fingerprint: string;
  tableEpoch: number;
  dims: number;
  engine: EngineIdentity;
  moduleGeneration: number;
  equivalentTo?: string[];
  modelId: string;
  /** The model name the request gave (`model` / `model_id`), if any. */
  requestedModel?: string | undefined;
  testModel: boolean;
  /** `provenance.certified` (lib/probe/certification.ts `servedCertified`). */
  certified: boolean;
  /** A remote lane's `provenance.remote`. */
  remote?: RemoteProvenanceFacts | undefined;
}

/**
 * Builds the envelope. `build_flags` is omitted when empty (docs/internals.md §3);
 * `requested_model` is present only when the requested name is not the served `model_id`.
 *
 * @returns A fresh object; the caller spreads the op payload into it.
 */
export function buildEnvelope(f: EnvelopeFacts): Envelope {
  const engine: EngineIdentity = { engine: f.engine.engine, version: f.engine.version };
  if (f.engine.build_flags && Object.keys(f.engine.build_flags).length > 0) {
    engine.build_flags = { ...f.engine.build_flags };
  }
  const env: Envelope = {
    fingerprint: f.fingerprint,
    table_epoch: f.tableEpoch,
    dims: f.dims,
    provenance: {
      engine,
      certified: f.certified,
      ...(f.remote === undefined ? {} : { remote: { ...f.remote } }),
    },
    module_generation: f.moduleGeneration,
    equivalent_to: f.equivalentTo ?? [],
    model_id: f.modelId,
  };
  if (f.requestedModel !== undefined && f.requestedModel !== f.modelId) {
    env.requested_model = f.requestedModel;
  }
  if (f.testModel) env.test_model = true;
  return env;
}
