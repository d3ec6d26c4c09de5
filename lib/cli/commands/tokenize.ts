/**
 * `ck-synapse tokenize [--model ID] [--input-type T | --prompt NAME] [--json] [--url URL]
 * TEXT...`: `tokenize`.
 *
 * @module
 */
import type { OpParams } from "../../ops/op_types.ts";
import {
  parseCommandArgs,
  ROUTING_FLAGS,
  routingFlagsUsage,
  routingParams,
  runOp,
  serverFlagsUsage,
  SUBC_CLIENT_FLAG,
  UsageError,
} from "../_command.ts";
import type { CliIO, Command } from "../_command.ts";

const USAGE = `usage: ck-synapse tokenize [--model ID] [--input-type T | --prompt NAME] [--json]
                          [--target-fingerprint FP] [--required-fingerprint FP]
                          [--allow-equivalent] [--accept-declared] [--required-epoch N]
                          [--url URL | --subc [FILE]] TEXT...

Tokenizes each TEXT with the model's own tokenizer (special tokens included, as the embedding
operations count them) and prints, per text, its token count and each token's id, piece and
span [start, end) in Unicode code points of the text; --json prints the whole result. The
model's prompt is put before each text as embed puts it (the one --input-type or --prompt
selects, else the model's default prompt), so the count is the one embed reports; the spans
then index the prompted text, printed first.

  --model ID          model whose tokenizer to use (default: the first embed model)
  --input-type T      query or document: the model's prompt for that role, as embed --input-type
  --prompt NAME       the model's prompt of that name, as embed --prompt
  --json              print the result (or the error) as JSON
${routingFlagsUsage(26)}
${serverFlagsUsage(20)}

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
    "input-type": { type: "string" },
    prompt: { type: "string" },
    ...ROUTING_FLAGS,
    json: { type: "boolean" },
    url: { type: "string" },
    subc: SUBC_CLIENT_FLAG,
  });
  if (positionals.length === 0) throw new UsageError("Cannot tokenize: give at least one TEXT");
  const params: Record<string, unknown> = { texts: positionals, ...routingParams(values) };
  if (values.model !== undefined) params.model = values.model;
  if (values["input-type"] !== undefined) params.input_type = values["input-type"];
  if (values.prompt !== undefined) params.prompt_name = values.prompt;
  return await runOp(values, io, "tokenize", params as OpParams<"tokenize">, (res) => {
    io.out(`model        ${res.model_id}`);
    io.out(`fingerprint  ${res.fingerprint}`);
    io.out(`tokenizer    ${res.sanitized_tokenizer_digest}  (max_tokens ${res.max_tokens})`);
    if (res.prompt !== undefined) {
      const why = res.prompt.reason === undefined ? "" : ` (${res.prompt.reason})`;
      io.out(`prompt       ${res.prompt.applied ?? "none"}${why}`);
    }
    res.items.forEach((item, k) => {
      const over = item.exceeds_max_tokens ? `  (exceeds max_tokens ${res.max_tokens})` : "";
      io.out(`text ${k}: ${item.count} tokens${over}`);
      if (item.tokenized_text !== undefined) {
        io.out(
          `  tokenized ${
            JSON.stringify(item.tokenized_text)
          } (prefix ${item.prefix_chars} code points)`,
        );
      }
      item.ids.forEach((id, i) => {
        const [s, e] = item.offsets[i]!;
        const mark = item.special[i] ? "  special" : "";
        io.out(
          `  ${String(id).padStart(6)}  ${JSON.stringify(item.pieces[i])}  [${s}, ${e})${mark}`,
        );
      });
    });
  });
}
