/**
 * `ck-synapse call METHOD [PARAMS_JSON] [--url URL | --subc [FILE]]`: any operation, printing the
 * wire body.
 *
 * @module
 */
import { cliExitFor } from "../exit_codes.ts";
import { SynapseError } from "../../contract/errors.ts";
import {
  exitCodeOf,
  openClient,
  parseCommandArgs,
  serverFlagsUsage,
  SUBC_CLIENT_FLAG,
  UsageError,
} from "../_command.ts";
import type { CliIO, Command } from "../_command.ts";

/**
 * The methods `call --help` lists, with their params (`?` optional), in the dispatcher's order.
 * A test holds it equal to the dispatcher's operations; it is written out here so that `--help`
 * loads no operation code.
 */
export const CALL_METHODS: readonly (readonly [method: string, params: string])[] = [
  [
    "embed.query",
    "{text, id?, model?, truncate?, dimensions?, target_fingerprint?, required_fingerprint?, deadline_ms?}",
  ],
  [
    "embed.batch",
    "{items: [{id, text} | text] | texts: [text], request_key?, input_type?, prompt_name?, …}",
  ],
  ["embed.result", "{job_id, page?}: a durable job's status and one result page"],
  [
    "job.resume",
    "{job_id}: continue a durable job paused_needs_reauth (a provider refused its key)",
  ],
  ["rerank.score", "{query, candidates: [text], model?, truncate?, …}"],
  [
    "microllm.oneshot",
    "{prompt | messages: [{role, content}], max_tokens, grammar? | response_format?, stop?, model?, …}",
  ],
  ["models.list", "{}: the models, their task, state and fingerprints"],
  ["admission.status", "{}: queues, lanes and serving admission"],
  [
    "model.load",
    "{path | url + expected_digest | repo + revision + files, engine?, task?, model_id?, …}: a load job",
  ],
  ["model.status", "{job_id} | {model_id}: a load or download job, or a model's state"],
  ["model.info", "{model_id, task?, verbose?}: a model's file metadata, chat template, limits"],
  ["model.unload", "{model_id}: stop serving a model (model_in_use while held)"],
  ["models.catalog", "{query?, task?, runnable_here?, installed?}: the pinned catalog"],
  ["models.download", "{catalog_id, request_key?}: download, verify and load a catalog model"],
  ["models.download.cancel", "{job_id}: stop a download (the partial is kept for a resume)"],
  ["models.remove", "{catalog_id}: unload a model and delete its files from the cache"],
  ["cache.pin", "{digest | source_url + expected_digest, module_id?, unpin?}: pin or unpin a blob"],
  ["cache.gc", "{digest?, grace_ms?}: two-phase GC of the model cache"],
  ["probe.start", "{models?, request_key?, deadline_ms?}: certify lanes on this machine, as a job"],
  ["probe.status", "{job_id}: a probe job's state and lanes (progress, failed checks)"],
  ["probe.report", "{}: certification and performance rows, each lane's serving admission"],
  [
    "aliases.check_index",
    "{index_fingerprint, provenance_set: [fp]}: valid, or migration_required naming the pair",
  ],
  [
    "alias.declare",
    "{left|fingerprint_a, right|fingerprint_b, evidence?}: needs alias_admin_enabled",
  ],
  [
    "alias.retract",
    "{left|fingerprint_a, right|fingerprint_b, evidence?}: needs alias_admin_enabled",
  ],
  ["tokenize", "{texts, model?, add_special_tokens?}: ids, count, code-point offsets per text"],
  ["detokenize", "{ids, model?, skip_special_tokens?}: the text of token ids"],
];

const width = Math.max(...CALL_METHODS.map(([m]) => m.length));

const USAGE = `usage: ck-synapse call METHOD [PARAMS_JSON] [--url URL | --subc [FILE]]

Calls one operation (e.g. embed.query '{"text":"hello"}') and prints the wire response as JSON:
{"result": …} for a result or a refusal (result.error), {code, message} for a channel error.
--json is accepted (the output is JSON anyway).

methods:
${CALL_METHODS.map(([m, p]) => `  ${m.padEnd(width)}  ${p}`).join("\n")}
  (… the common params: model, deadline_ms, max_queue_ms, truncate, target_fingerprint,
   required_fingerprint, allow_equivalent, accept_declared, required_epoch)

${serverFlagsUsage(14)}

Exit status: 0 result; 1 semantic error (result.error) or any item refused (result.item_errors,
the same as 'embed'); 2 channel error, unreachable server, or usage error.`;

/** The `call` command. */
export const callCommand: Command = {
  name: "call",
  describe: "Call any operation with JSON params and print the wire response",
  usage: USAGE,
  run: runCall,
};

async function runCall(args: string[], io: CliIO): Promise<number> {
  const { values, positionals } = parseCommandArgs(args, {
    url: { type: "string" },
    subc: SUBC_CLIENT_FLAG,
    json: { type: "boolean" },
  });
  const [method, paramsJson, ...extra] = positionals;
  if (method === undefined) throw new UsageError("Cannot call: give a METHOD");
  if (extra.length > 0) {
    throw new UsageError(`Cannot call ${method}: unexpected argument '${extra[0]}'`);
  }
  let params: unknown = {};
  if (paramsJson !== undefined) {
    try {
      params = JSON.parse(paramsJson);
    } catch (err) {
      throw new UsageError(
        `Cannot parse PARAMS_JSON: ${err instanceof Error ? err.message : String(err)}`,
      );
    }
  }
  let client;
  try {
    client = await openClient(values, io);
  } catch (err) {
    if (!(err instanceof SynapseError)) throw err;
    // The wire shape of a channel error, so scripts parse one format whatever failed.
    io.out(JSON.stringify(err.toChannel(), null, 2));
    return cliExitFor("channel");
  }
  try {
    const outcome = await client.call(method, params);
    io.out(JSON.stringify(outcome.body, null, 2));
    return exitCodeOf(outcome);
  } finally {
    await client.close();
  }
}
