/**
 * `ck-synapse generate [--model ID] [--max-tokens N] [--grammar GBNF | --grammar-file F]
 * [--temperature T] [--top-p P] [--top-k K] [--min-p P] [--seed S] [--repeat-penalty R] [--json]
 * [--url URL] PROMPT`: `microllm.oneshot`, greedy unless `--temperature` is above 0; a sampled
 * call prints the seed it used on stderr (`--json`: the result's `sampling`).
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
                           [--temperature T] [--top-p P] [--top-k K] [--min-p P] [--seed S]
                           [--repeat-penalty R] [--json] [--url URL | --subc [FILE]] PROMPT

Generates from PROMPT on a GGUF model (microllm.oneshot) and prints the text, why it stopped, and
the token counts; --json prints the whole result envelope. Greedy unless --temperature is above 0;
a sampled call prints the seed it used (send it back with --seed to get the same text).

  --model ID          model to use (default: the first generate model)
  --max-tokens N      most tokens to generate (default 64; at most microllm_max_tokens)
  --grammar GBNF      constrain the output with a GBNF grammar (needs grammar_enabled)
  --grammar-file F    the grammar, read from a file
  --temperature T     sample at temperature T (0–2; default 0, greedy)
  --top-p P           keep the most likely tokens up to probability P (0–1; default 1, all)
  --top-k K           keep the K most likely tokens (default 0, all)
  --min-p P           drop tokens below P × the top token's probability (default 0)
  --seed S            the sampler's seed (0–4294967294; default: one picked and printed)
  --repeat-penalty R  llama.cpp's repeat penalty over the last 64 tokens (default 1, off)
  --json              print the result (or the error) as JSON
${serverFlagsUsage(20)}

Exit status: 0 generated, 1 refused, 2 channel error, unreachable server, or usage error.`;

/** The sampling flags and the `microllm.oneshot` params they set. */
const SAMPLING_FLAGS = [
  ["temperature", "temperature"],
  ["top-p", "top_p"],
  ["top-k", "top_k"],
  ["min-p", "min_p"],
  ["seed", "seed"],
  ["repeat-penalty", "repeat_penalty"],
] as const;

/** The `generate` command. */
export const generateCommand: Command = {
  name: "generate",
  describe: "Generate text from a prompt, greedy or sampled (microllm.oneshot; GBNF grammars)",
  usage: USAGE,
  run: runGenerate,
};

async function runGenerate(args: string[], io: CliIO): Promise<number> {
  const { values, positionals } = parseCommandArgs(args, {
    model: { type: "string" },
    "max-tokens": { type: "string" },
    grammar: { type: "string" },
    "grammar-file": { type: "string" },
    ...Object.fromEntries(SAMPLING_FLAGS.map(([flag]) => [flag, { type: "string" as const }])),
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
  for (const [flag, param] of SAMPLING_FLAGS) {
    const raw = (values as Record<string, unknown>)[flag];
    if (typeof raw !== "string") continue;
    const v = raw.trim() === "" ? NaN : Number(raw);
    if (!Number.isFinite(v)) {
      throw new UsageError(`Cannot generate: --${flag} must be a number: received '${raw}'`);
    }
    // The range is microllm.oneshot's to check: it refuses a value out of range by name.
    params[param] = v;
  }
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
      const s = res.sampling;
      if (s.without_effect !== undefined) {
        // A greedy call that sent sampler flags: say they changed nothing.
        io.err(
          `greedy (no --temperature above 0): ${
            s.without_effect.map((k) => `--${k.replaceAll("_", "-")}`).join(", ")
          } had no effect`,
        );
      }
      if (s.mode === "sampled") {
        io.err(
          `sampled  temperature ${s.temperature}  top_p ${s.top_p}  top_k ${s.top_k}  min_p ${s.min_p}  seed ${s.seed}${
            s.seed_source === "service" ? ` (picked; --seed ${s.seed} gives the same text)` : ""
          }`,
        );
      }
      noteUncertified(res, io);
      if (res.text_repair !== undefined) {
        io.err(
          `text repaired to valid UTF-8: ${res.text_repair.dropped_tail_bytes} incomplete tail bytes dropped, ${res.text_repair.replaced_sequences} invalid sequences replaced`,
        );
      }
    },
  );
}
