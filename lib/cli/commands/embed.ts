/**
 * `ck-synapse embed [--model ID] [--json] [--truncate] [--dimensions N] [--input-type
 * query|document | --prompt NAME] [--url URL] TEXT...`: one text is
 * `embed.query`, several are `embed.batch`. `embed --file PATH --request-key KEY` embeds a JSONL
 * file as one `embed.batch`, following the durable job it becomes (see `../_embed_file.ts`).
 *
 * @module
 */
import type { OpParams } from "../../ops/op_types.ts";
import type { ClientOutcome } from "../client.ts";
import {
  noteUncertified,
  parseCommandArgs,
  refusedItems,
  ROUTING_FLAGS,
  routingFlagsUsage,
  routingParams,
  runOp,
  serverFlagsUsage,
  SUBC_CLIENT_FLAG,
  UsageError,
} from "../_command.ts";
import type { CliIO, Command } from "../_command.ts";
import { runEmbedFile } from "../_embed_file.ts";

const USAGE = `usage: ck-synapse embed [--model ID] [--json] [--truncate] [--dimensions N]
                        [--input-type T | --prompt NAME] [ROUTING...] [--url URL | --subc [FILE]]
                        TEXT...
       ck-synapse embed --file PATH --request-key KEY [--model ID] [--truncate] [--dimensions N]
                        [ROUTING...] [--out PATH] [--no-progress] [--json]
                        [--url URL | --subc [FILE]]

Embeds one text (embed.query) or several (embed.batch) and prints the model, fingerprint, dims,
token counts and the first 8 values of each vector; --json prints the whole result envelope.

With --file, embeds a JSONL file (one item a line: {"id": ID, "text": TEXT}, or a bare JSON
string whose id is its 0-based item number) as one embed.batch. Over the inline limits it runs
as a durable job: the command polls it, showing progress on stderr, and when it ends writes one
JSONL line per item, in file order: {"id","vector","content_sha256","submitted_sha256","tokens",
"truncated"}, or {"id","error":{"code","message"}} for a refused item. Re-running the same
command (same key) attaches to the job, or resumes with a fresh one after a restart. Ctrl-C
stops polling (a server keeps running the job) and prints the job id.

  --model ID          model to use (default: the first embed model)
  --truncate          cut over-long texts to the model's limit and disclose it, instead of refusing
  --input-type T      query or document: the model's prompt for that role (its prompt table; no
                      effect on a model without one, and the output says so)
  --prompt NAME       the model's prompt of that name (prompt_name)
  --dimensions N      vector width: the model's own or one of its matryoshka_dims (a derived
                      space with its own fingerprint); another width is refused
  --json              print the result (or the error) as JSON; with --file the lines are JSONL
                      anyway, and --json prints a refusal of the batch as JSON on stdout
ROUTING (the model chosen by the fingerprint it serves; docs/operations.md "Routing"):
${routingFlagsUsage(26)}
${serverFlagsUsage(20)}
  --file PATH         JSONL items to embed as one batch
  --request-key KEY   idempotency key of the batch (required with --file)
  --out PATH          write the result lines to PATH instead of stdout
  --no-progress       no progress display on stderr

Exit status: 0 all embedded, 1 refused (the request, or any item: the same rule as 'call') or
job failed, 2 channel error, unreachable server, or usage error, 130 interrupted (--file).`;

/** Shape of the embed result fields this command prints. */
interface EmbedPrintable {
  model_id: string;
  provenance?: { certified?: boolean };
  test_model?: boolean;
  fingerprint: string;
  dims: number;
  vectors: { id: string; vector: number[] }[];
  real_token_counts: number[];
  prompt?: { requested: string | null; applied: string | null; reason?: string };
  truncation_disclosures: {
    submitted_tokens: number;
    effective_tokens: number;
    truncated: boolean;
  }[];
}

/** The `embed` command. */
export const embedCommand: Command = {
  name: "embed",
  describe: "Embed texts and print the fingerprinted vectors",
  usage: USAGE,
  run: runEmbed,
};

async function runEmbed(args: string[], io: CliIO): Promise<number> {
  const { values, positionals } = parseCommandArgs(args, {
    model: { type: "string" },
    json: { type: "boolean" },
    truncate: { type: "boolean" },
    "input-type": { type: "string" },
    prompt: { type: "string" },
    dimensions: { type: "string" },
    ...ROUTING_FLAGS,
    url: { type: "string" },
    subc: SUBC_CLIENT_FLAG,
    file: { type: "string" },
    "request-key": { type: "string" },
    out: { type: "string" },
    "no-progress": { type: "boolean" },
  });
  for (const flag of ["input-type", "prompt"] as const) {
    if (values[flag] !== undefined && values.file !== undefined) {
      throw new UsageError(`Cannot use --${flag} with --file`);
    }
  }
  const dimensions = dimensionsFlag(values.dimensions);
  const routing = routingParams(values);
  if (values.file !== undefined) {
    if (positionals.length > 0) {
      throw new UsageError(`Cannot embed --file: unexpected TEXT '${positionals[0]}'`);
    }
    const key = values["request-key"];
    if (key === undefined || key === "") {
      throw new UsageError("Cannot embed --file: give a non-empty --request-key KEY");
    }
    return await runEmbedFile({
      file: values.file,
      requestKey: key,
      model: values.model,
      truncate: values.truncate ?? false,
      dimensions,
      routing,
      out: values.out,
      url: values.url,
      subc: values.subc,
      progress: !values["no-progress"],
      json: values.json ?? false,
    }, io);
  }
  for (const flag of ["request-key", "out", "no-progress"] as const) {
    if (values[flag] !== undefined) throw new UsageError(`Cannot use --${flag} without --file`);
  }
  if (positionals.length === 0) throw new UsageError("Cannot embed: give at least one TEXT");
  const common: Record<string, unknown> = { ...routing };
  if (values.model !== undefined) common.model = values.model;
  if (values.truncate) common.truncate = true;
  if (values["input-type"] !== undefined) common.input_type = values["input-type"];
  if (values.prompt !== undefined) common.prompt_name = values.prompt;
  if (dimensions !== undefined) common.dimensions = dimensions;
  const print = (result: unknown, outcome: ClientOutcome): void => {
    const res = result as EmbedPrintable;
    printSummary(res, io);
    noteUncertified(res, io);
    for (const e of refusedItems(outcome)) {
      io.err(`error: item ${e.id}: ${e.error.code}: ${e.error.message}`);
    }
  };
  return positionals.length === 1
    ? await runOp(
      values,
      io,
      "embed.query",
      { ...common, text: positionals[0] } as OpParams<"embed.query">,
      print,
    )
    : await runOp(
      values,
      io,
      "embed.batch",
      { ...common, texts: positionals } as OpParams<"embed.batch">,
      print,
    );
}

/**
 * The `--dimensions` value as a positive integer.
 *
 * @throws {UsageError} for anything else.
 */
function dimensionsFlag(value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!/^[0-9]+$/.test(value) || !Number.isSafeInteger(n) || n < 1) {
    throw new UsageError(`Cannot embed: --dimensions must be a positive integer, got '${value}'`);
  }
  return n;
}

function printSummary(res: EmbedPrintable, io: CliIO): void {
  io.out(`model        ${res.model_id}${res.test_model ? " (test model)" : ""}`);
  io.out(`fingerprint  ${res.fingerprint}`);
  io.out(`dims         ${res.dims}`);
  if (res.prompt !== undefined) {
    const why = res.prompt.reason === undefined ? "" : ` (${res.prompt.reason})`;
    io.out(`prompt       ${res.prompt.applied ?? "none"}${why}`);
  }
  res.vectors.forEach((v, k) => {
    const d = res.truncation_disclosures[k];
    const tokens = res.real_token_counts[k] ?? 0;
    const cut = d?.truncated ? ` (truncated from ${d.submitted_tokens})` : "";
    const head = v.vector.slice(0, 8).map((x) => x.toFixed(6)).join(", ");
    const more = v.vector.length > 8 ? ", …" : "";
    io.out(`item ${v.id}  ${tokens} tokens${cut}  [${head}${more}]`);
  });
}
