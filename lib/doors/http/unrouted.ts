/**
 * The error body of a request that found no route, or was refused before its route was known
 * (Host/Origin, the owner key): the body of the API its path's prefix belongs to
 * (lib/doors/http/routes.ts `errorShapeFor`), so that the client of that API prints the message
 * — the `ollama` client shows `error`, OpenAI's clients `error.message`, Cohere's the body's
 * `message`, TEI's callers `error`. Every body keeps Synapse's stable `code`.
 *
 * | prefix                        | body                                                       |
 * | ----------------------------- | ---------------------------------------------------------- |
 * | `/v1/ops`, `/v1/ops/…`        | none here: the native `{code, message}` (the server's own) |
 * | `/api/…`                      | Ollama's `{error, code}`                                    |
 * | other `/v1/…`, `/v2/…`        | `{error: {message, type, code, param}, message, code}`     |
 * | any other path                | TEI's `{error, error_type, code}`                           |
 *
 * @module
 */
import type { SynapseError } from "../../contract/errors.ts";
import type { AdapterAnswer } from "./_adapter.ts";
import { ollamaError } from "./ollama.ts";
import { type OpenAiError, openAiError } from "./openai.ts";
import { errorShapeFor } from "./routes.ts";
import { teiError } from "./tei.ts";

/**
 * The answer of an error on a path without a route, in the body of the API of its prefix.
 *
 * @param path The request's path.
 * @param e The error (`unknown_method` from `unknownRoute`, or a refusal before routing).
 * @returns The answer, or undefined for the native door's paths (`/v1/ops…`), whose body the
 *   server makes itself.
 */
export function unroutedError(path: string, e: SynapseError): AdapterAnswer | undefined {
  const shape = errorShapeFor(path);
  switch (shape) {
    case "ops":
      return undefined;
    case "ollama":
      return ollamaError(e);
    case "openai_cohere":
      return openAiCohereError(e);
    case "tei":
      return teiError(e);
    default:
      return void (shape satisfies never);
  }
}

/**
 * A body both OpenAI's and Cohere's clients print: OpenAI's `{error: {message, type, code,
 * param}}` with Cohere's `message` beside it, and Synapse's `code`.
 *
 * @param e The error.
 */
export function openAiCohereError(e: SynapseError): AdapterAnswer {
  const openAi = openAiError(e);
  const body = openAi.body as OpenAiError;
  return {
    status: openAi.status,
    error: e,
    body: { ...body, message: body.error.message, code: e.code },
  };
}
