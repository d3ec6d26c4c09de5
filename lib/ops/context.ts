/**
 * What an operation needs from the running module: models, admission, identity counters and
 * config. One context per Synapse instance; operations are plain functions of it.
 *
 * @module
 */
import type { ModelRegistry } from "../models/model_registry.ts";
import type { Admission } from "../sched/admission.ts";
import type { SynapseConfig } from "../config/config.ts";

/** Shared state handed to every operation. */
export interface OpContext {
  readonly config: SynapseConfig;
  readonly registry: ModelRegistry;
  readonly admission: Admission;
  /** Incremented at every boot (from the store). */
  readonly moduleGeneration: number;
  /** Alias-table epoch. */
  tableEpoch(): number;
  /** Wall clock in ms. */
  now(): number;
  /** Hash of the machine profile this instance runs on (contract.md §5). */
  readonly machineProfileHash: string;
}

/** Per-call options every operation takes. */
export interface CallOptions {
  /** Aborts the call (client went away). */
  signal?: AbortSignal;
}
