/**
 * `ck-synapse tokenize [--model ID] [--json] [--url URL] TEXT...`: `tokenize`.
 *
 * @module
 */
import {
  exitCodeOf,
  openClient,
  parseCommandArgs,
  printJsonOutcome,
  reportError,
  serverFlagsUsage,
  SUBC_CLIENT_FLAG,
  UsageError,
} from "../_command.ts";
import type { CliIO, Command } from "../_command.ts";
import type { TokenizeResult } from "../../ops/tokenize.ts";

const USAGE = `usage: ck-synapse tokenize [--model ID] [--json] [--url URL | --subc [FILE]] TEXT...

Tokenizes each TEXT with the model's own tokenizer (special tokens included, as the embedding
operations count them) and prints, per text, its token count and each token's id, piece and
span [start, end) in Unicode code points of the text; --json prints the whole result.

  --model ID    model whose tokenizer to use (default: the first embed model)
  --json        print the result (or the error) as JSON
${serverFlagsUsage(14)}

Exit status: 0 tokenized, 1 refused, 2 channel error, unreachable server, or usage error.`;

/** The `tokenize` command. */
export const tokenizeCommand: Command = {
  name: "tokenize",
  describe: "Tokenize texts with a model's tokenizer (ids, count, pieces, offsets)",
  usage: USAGE,
  run: runTokenize,
};

async function runTokenize(args: string[], io: CliIO): Promise<number> {
  const { values, positionals } = parseCommandArgs(args, {
    model: { type: "string" },
    json: { type: "boolean" },
    url: { type: "string" },
    subc: SUBC_CLIENT_FLAG,
  });
  if (positionals.length === 0) throw new UsageError("Cannot tokenize: give at least one TEXT");
  const params: Record<string, unknown> = { texts: positionals };
  if (values.model !== undefined) params.model = values.model;
  const client = await openClient(values, io);
  try {
    const outcome = await client.call("tokenize", params);
    if (values.json) return printJsonOutcome(outcome, io);
    if (outcome.kind !== "result") return reportError(outcome, io);
    const res = (outcome.body as { result: TokenizeResult }).result;
    io.out(`model        ${res.model_id}`);
    io.out(`fingerprint  ${res.fingerprint}`);
    io.out(`tokenizer    ${res.sanitized_tokenizer_digest}  (max_tokens ${res.max_tokens})`);
    res.items.forEach((item, k) => {
      const over = item.exceeds_max_tokens ? `  (exceeds max_tokens ${res.max_tokens})` : "";
      io.out(`text ${k}: ${item.count} tokens${over}`);
      item.ids.forEach((id, i) => {
        const [s, e] = item.offsets[i]!;
        const mark = item.special[i] ? "  special" : "";
        io.out(
          `  ${String(id).padStart(6)}  ${JSON.stringify(item.pieces[i])}  [${s}, ${e})${mark}`,
        );
      });
    });
    return exitCodeOf(outcome);
  } finally {
    await client.close();
  }
}
