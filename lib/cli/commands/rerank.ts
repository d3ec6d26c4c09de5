/**
 * `ck-synapse rerank [--model ID] [--json] [--url URL] --query Q DOC...`: `rerank.score`.
 *
 * @module
 */
import type { RerankResult } from "../../ops/rerank.ts";
import type { OpParams } from "../../ops/op_types.ts";
import {
  noteUncertified,
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

const USAGE =
  `usage: ck-synapse rerank [--model ID] [--json] [ROUTING...] [--url URL | --subc [FILE]]
                         --query Q DOC...

Scores each DOC against the query with a cross-encoder and prints the raw scores (logits) in
input order, with their sigmoid beside them; --json prints the whole result envelope.

  --query Q     the query (required)
  --model ID    model to use (default: the first rerank model)
  --json        print the result (or the error) as JSON
${serverFlagsUsage(14)}

ROUTING (the model chosen by the fingerprint it serves; docs/operations.md "Routing"):
${routingFlagsUsage(26)}

Exit status: 0 scored, 1 refused, 2 channel error, unreachable server, or usage error.`;

/** The `rerank` command. */
export const rerankCommand: Command = {
  name: "rerank",
  describe: "Score documents against a query (raw cross-encoder scores)",
  usage: USAGE,
  run: runRerank,
};

async function runRerank(args: string[], io: CliIO): Promise<number> {
  const { values, positionals } = parseCommandArgs(args, {
    model: { type: "string" },
    query: { type: "string" },
    json: { type: "boolean" },
    url: { type: "string" },
    subc: SUBC_CLIENT_FLAG,
    ...ROUTING_FLAGS,
  });
  if (values.query === undefined) throw new UsageError("Cannot rerank: --query is required");
  if (positionals.length === 0) throw new UsageError("Cannot rerank: give at least one DOC");
  const params: Record<string, unknown> = { query: values.query, candidates: positionals };
  if (values.model !== undefined) params.model = values.model;
  Object.assign(params, routingParams(values));
  return await runOp(values, io, "rerank.score", params as OpParams<"rerank.score">, (r) => {
    // Without a request_key the scores come inline, never as a durable job.
    const res = r as RerankResult;
    io.out(`model        ${res.model_id}${res.test_model ? " (test model)" : ""}`);
    io.out(`fingerprint  ${res.fingerprint}`);
    io.out("scores (raw, input order):");
    res.scores.forEach((s, i) => {
      const sig = res.sigmoid_scores?.[i];
      const doc = positionals[i] ?? "";
      const shown = doc.length > 60 ? `${doc.slice(0, 59)}…` : doc;
      const sigText = sig === undefined ? "" : `  sigmoid ${sig.toFixed(6)}`;
      io.out(
        `  ${i}  ${s.toFixed(6)}${sigText}  ${res.real_token_counts[i] ?? 0} tokens  ${
          JSON.stringify(shown)
        }`,
      );
    });
    noteUncertified(res, io);
  });
}
