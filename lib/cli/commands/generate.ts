/**
 * `ck-synapse generate [--model ID] [--max-tokens N] [--grammar GBNF | --grammar-file F] [--json]
 * [--url URL] PROMPT`: `microllm.oneshot` (greedy).
 *
 * @module
 */
import type { OpParams } from "../../ops/op_types.ts";
import {
  noteUncertified,
  parseCommandArgs,
  runOp,
  serverFlagsUsage,
  SUBC_CLIENT_FLAG,
  UsageError,
} from "../_command.ts";
import type { CliIO, Command } from "../_command.ts";

const USAGE =
  `usage: ck-synapse generate [--model ID] [--max-tokens N] [--grammar GBNF | --grammar-file F]
                           [--json] [--url URL | --subc [FILE]] PROMPT

Generates greedily from PROMPT on a GGUF model (microllm.oneshot) and prints the text, why it
stopped, and the token counts; --json prints the whole result envelope.

  --model ID          model to use (default: the first generate model)
  --max-tokens N      most tokens to generate (default 64; at most microllm_max_tokens)
  --grammar GBNF      constrain the output with a GBNF grammar (needs grammar_enabled)
  --grammar-file F    the grammar, read from a file
  --json              print the result (or the error) as JSON
${serverFlagsUsage(20)}

Exit status: 0 generated, 1 refused, 2 channel error, unreachable server, or usage error.`;

/** The `generate` command. */
export const generateCommand: Command = {
  name: "generate",
  describe: "Generate text greedily from a prompt (microllm.oneshot; GBNF grammars)",
  usage: USAGE,
  run: runGenerate,
};

async function runGenerate(args: string[], io: CliIO): Promise<number> {
  const { values, positionals } = parseCommandArgs(args, {
    model: { type: "string" },
    "max-tokens": { type: "string" },
    grammar: { type: "string" },
    "grammar-file": { type: "string" },
    json: { type: "boolean" },
    url: { type: "string" },
    subc: SUBC_CLIENT_FLAG,
  });
  if (positionals.length !== 1) throw new UsageError("Cannot generate: give exactly one PROMPT");
  const maxTokens = Number(values["max-tokens"] ?? 64);
  if (!Number.isInteger(maxTokens) || maxTokens < 1) {
    throw new UsageError(
      `Cannot generate: --max-tokens must be a positive integer: received '${
        values["max-tokens"]
      }'`,
    );
  }
  if (values.grammar !== undefined && values["grammar-file"] !== undefined) {
    throw new UsageError("Cannot generate: give --grammar or --grammar-file, not both");
  }
  const params: Record<string, unknown> = { prompt: positionals[0], max_tokens: maxTokens };
  if (values.model !== undefined) params.model = values.model;
  if (values.grammar !== undefined) params.grammar = values.grammar;
  if (values["grammar-file"] !== undefined) {
    try {
      params.grammar = await Deno.readTextFile(values["grammar-file"]);
    } catch (err) {
      throw new UsageError(
        `Cannot generate: cannot read --grammar-file ${values["grammar-file"]}: ${
          (err as Error).message
        }`,
      );
    }
  }
  return await runOp(
    values,
    io,
    "microllm.oneshot",
    params as OpParams<"microllm.oneshot">,
    (res) => {
      io.out(res.text);
      io.err(
        `model ${res.model_id}${
          res.test_model ? " (test model)" : ""
        }  fingerprint ${res.fingerprint}  finish ${res.finish_reason}  prompt ${res.n_prompt} tokens  generated ${res.n_gen} tokens`,
      );
      noteUncertified(res, io);
      if (res.text_repair !== undefined) {
        io.err(
          `text repaired to valid UTF-8: ${res.text_repair.dropped_tail_bytes} incomplete tail bytes dropped, ${res.text_repair.replaced_sequences} invalid sequences replaced`,
        );
      }
    },
  );
}
