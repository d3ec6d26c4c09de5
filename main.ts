/**
 * Entry point of `ck-synapse` (run through the `./ck-synapse` launcher): no logic here, see
 * `lib/cli/main.ts`.
 *
 * @module
 */
import { main } from "./lib/cli/main.ts";

if (import.meta.main) Deno.exit(await main(Deno.args));
