/**
 * Synapse public API: start an instance in-process, call its operations, call the `synapse`
 * module over the subc bus, and compute the identities (numeric profile id, fingerprint,
 * machine-profile hash) exactly as contract.md §4–5 define them.
 *
 * @example Embed in-process
 * ```ts ignore
 * import { createSynapse } from "./mod.ts";
 * await using syn = await createSynapse();
 * const out = await syn.call("embed.query", { text: "hello world" });
 * ```
 *
 * @example Embed over the subc bus (the same params and result types)
 * ```ts ignore
 * import { SynapseBusClient } from "./mod.ts";
 * await using synapse = await SynapseBusClient.connect(); // $SUBC_CONNECTION_FILE, …
 * const { vectors, fingerprint } = await synapse.embedQuery({ text: "hello world" });
 * ```
 *
 * @module
 */
export { createSynapse, defaultModelSources, Synapse, SYNAPSE_VERSION } from "./lib/synapse.ts";
export type { SynapseOptions } from "./lib/synapse.ts";
export {
  fingerprint,
  inputGrammarIdentity,
  numericProfileId,
  numericProfileStableBytes,
} from "./lib/identity/numeric_profile.ts";
export type { EngineIdentity, NumericProfile } from "./lib/identity/numeric_profile.ts";
export {
  machineProfileHash,
  machineProfileStableBytes,
  probeMachineProfile,
  revisionedMachineProfileHash,
} from "./lib/identity/machine_profile.ts";
export type { MachineProfile } from "./lib/identity/machine_profile.ts";
export { ERROR_CODES, SynapseError } from "./lib/contract/errors.ts";
export type { ChannelError, ErrorClass, ErrorCode, WireError } from "./lib/contract/errors.ts";
export type { OpOutcome } from "./lib/ops/dispatcher.ts";
export type { OpParams, OpResult, SynapseMethod, SynapseOperations } from "./lib/ops/op_types.ts";
export { SynapseBusClient } from "./lib/client/synapse_bus_client.ts";
export type { BusCallOptions, SynapseBusClientOptions } from "./lib/client/synapse_bus_client.ts";
export { SubcCallError } from "./lib/subc/consumer.ts";
export type { SubcCallOrigin, SubcCallPhase } from "./lib/subc/consumer.ts";
export { SubcWireError } from "./lib/subc/errors.ts";
export type { SubcWireReason } from "./lib/subc/errors.ts";
export type { EmbedResult, EmbedVector, ItemError, TruncationDisclosure } from "./lib/ops/embed.ts";
export type { RerankResult } from "./lib/ops/rerank.ts";
export type {
  AliasEvidence,
  AliasRow,
  AliasSource,
  CheckIndexResult,
  DeclaredAliasEvidence,
  ProbeAliasEvidence,
  RetractedPair,
} from "./lib/identity/aliases.ts";
export type { AliasChangeResult, CheckIndexOpResult } from "./lib/ops/aliases.ts";
export type { RoutingParams } from "./lib/ops/_resolve_model.ts";
export type { DetokenizeResult, TokenizeItem, TokenizeResult } from "./lib/ops/tokenize.ts";
export type { PromptDisclosure, PromptTable } from "./lib/models/prompts.ts";
export type { EmbedResultPage, JobAccepted } from "./lib/ops/jobs.ts";
export type { MicrollmResult } from "./lib/ops/microllm.ts";
export type { AdmissionStatusResult, ModelsListResult } from "./lib/ops/models.ts";
export type { Envelope } from "./lib/contract/envelope.ts";
export { DEFAULT_CONFIG } from "./lib/config/defaults.ts";
export { loadConfig } from "./lib/config/loader.ts";
export type { SynapseConfig } from "./lib/config/types.ts";
