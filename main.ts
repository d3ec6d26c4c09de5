/**
 * Entry point of `ck-synapse` (run through the `./ck-synapse` launcher): no logic here, see
 * `lib/cli/main.ts`.
 *
 * @module
 */
import { main } from "./lib/cli/main.ts";

if (import.meta.main) {
  // `ck-synapse worker llama --socket … --nonce …`: this program as the llama worker process
  // (contract.md §7's fallback when no worker binary is installed beside it).
  if (Deno.args[0] === "worker" && Deno.args[1] === "llama") await import("./workers/llama.ts");
  else Deno.exit(await main(Deno.args));
}
