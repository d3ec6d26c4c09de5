/**
 * `ck-synapse call METHOD [PARAMS_JSON] [--url URL]`: any operation, printing the wire body.
 *
 * @module
 */
import { cliExitFor } from "../../http/status_table.ts";
import { SynapseError } from "../../contract/errors.ts";
import { openClient, parseCommandArgs, UsageError } from "../_command.ts";
import type { CliIO, Command } from "../_command.ts";

const USAGE = `usage: ck-synapse call METHOD [PARAMS_JSON] [--url URL]

Calls one operation (e.g. embed.query '{"text":"hello"}') and prints the wire response as JSON:
{"result": …} for a result or a refusal (result.error), {code, message} for a channel error.

  --url URL     call a running server (http://127.0.0.1:PORT) instead of an embedded instance

Exit status: 0 result, 1 semantic error (result.error), 2 channel or usage error.`;

/** The `call` command. */
export const callCommand: Command = {
  name: "call",
  describe: "Call any operation with JSON params and print the wire response",
  usage: USAGE,
  run: runCall,
};

async function runCall(args: string[], io: CliIO): Promise<number> {
  const { values, positionals } = parseCommandArgs(args, { url: { type: "string" } });
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
    client = await openClient(values.url, io);
  } catch (err) {
    if (!(err instanceof SynapseError)) throw err;
    // The wire shape of a channel error, so scripts parse one format whatever failed.
    io.out(JSON.stringify(err.toChannel(), null, 2));
    return cliExitFor("channel");
  }
  try {
    const outcome = await client.call(method, params);
    io.out(JSON.stringify(outcome.body, null, 2));
    return cliExitFor(outcome.kind);
  } finally {
    await client.close();
  }
}
