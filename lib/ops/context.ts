/**
 * What an operation needs from the running module: models, admission, identity counters and
 * config. One context per Synapse instance; operations are plain functions of it.
 *
 * @module
 */
import type { ModelRegistry } from "../models/model_registry.ts";
import type { Admission } from "../sched/admission.ts";
import type { SynapseConfig } from "../config/config.ts";
import type { JobStore } from "../store/job_store.ts";
import type { LaneScheduler } from "../sched/lane_scheduler.ts";

/** Durable jobs: their store, the bulk lane's scheduler, and the runs in flight. */
export interface JobsContext {
  readonly store: JobStore;
  /** Scheduler of the bulk lane (jobs run there in quanta). */
  readonly scheduler: LaneScheduler;
  /** Job runs in flight in this process, by job id. */
  readonly running: Map<string, Promise<void>>;
}

/** Shared state handed to every operation. */
export interface OpContext {
  readonly config: SynapseConfig;
  readonly registry: ModelRegistry;
  readonly admission: Admission;
  /** Scheduler of the interactive lane. */
  readonly interactive: LaneScheduler;
  readonly jobs: JobsContext;
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
