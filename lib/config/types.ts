/**
 * The configuration's TypeScript types, inferred from the zod schemas in `schema.ts` so the shape
 * is written once; each field's documentation (meaning, unit, default) is on the schema.
 *
 * @module
 */

import type { z } from "zod";
import type {
  CertificationModeSchema,
  HttpConfigSchema,
  InlineConfigSchema,
  JobsConfigSchema,
  KnobSchema,
  LogConfigSchema,
  ModelAliasesSchema,
  PreloadModelConfigSchema,
  PreloadPoolingSchema,
  PreloadTaskSchema,
  ProbeConfigSchema,
  SynapseConfigSchema,
  TokenizeConfigSchema,
  WorkerConfigSchema,
} from "./schema.ts";

/** Scheduler knob: how much of the machine Synapse may use. */
export type Knob = z.infer<typeof KnobSchema>;

/** Config `certification`: `require` (default) refuses uncertified lanes, `warn` serves them. */
export type CertificationConfig = z.infer<typeof CertificationModeSchema>;

/** Task of a preloaded model. */
export type PreloadTask = z.infer<typeof PreloadTaskSchema>;

/** Pooling of a preloaded embedding model. */
export type PreloadPooling = z.infer<typeof PreloadPoolingSchema>;

/** One `preload_models[]` entry, with defaults applied and the engine name normalized. */
export type PreloadModelConfig = z.infer<typeof PreloadModelConfigSchema>;

/** `model_aliases`: client model name → served model id. */
export type ModelAliases = z.infer<typeof ModelAliasesSchema>;

/** `worker` section. */
export type WorkerConfig = z.infer<typeof WorkerConfigSchema>;

/** `log` section. */
export type LogConfig = z.infer<typeof LogConfigSchema>;

/** `inline` section: limits of inline (non-job) requests and their admission. */
export type InlineConfig = z.infer<typeof InlineConfigSchema>;

/** `http` section: the HTTP front door (`ck-synapse serve --http`). */
export type HttpConfig = z.infer<typeof HttpConfigSchema>;

/** `tokenize` section: the tokenizer worker pool. */
export type TokenizeConfig = z.infer<typeof TokenizeConfigSchema>;

/** `jobs` section. */
export type JobsConfig = z.infer<typeof JobsConfigSchema>;

/** `probe` section: certification thresholds, each in [0, 1]. */
export type ProbeConfig = z.infer<typeof ProbeConfigSchema>;

/** The resolved configuration: every key present, defaults applied. */
export type SynapseConfig = z.infer<typeof SynapseConfigSchema>;
