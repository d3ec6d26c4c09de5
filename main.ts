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
  // `ck-synapse worker ffi …`: the native-shim worker (workers/ffi.ts), the same way.
  else if (Deno.args[0] === "worker" && Deno.args[1] === "ffi") await import("./workers/ffi.ts");
  else Deno.exit(await main(await launcherArgs()));
}

/**
 * The command's arguments: `Deno.args`, or, when the launcher moved long ones off the command
 * line (`SYNAPSE_ARGS_FD`: a pipe carrying them NUL-separated; see `./ck-synapse`), those.
 */
async function launcherArgs(): Promise<string[]> {
  const fd = Deno.env.get("SYNAPSE_ARGS_FD");
  if (fd === undefined || !/^\d+$/.test(fd)) return Deno.args;
  Deno.env.delete("SYNAPSE_ARGS_FD");
  const bytes = await Deno.readFile(`/dev/fd/${fd}`);
  const text = new TextDecoder().decode(bytes);
  const args = text.split("\0");
  args.pop(); // after the last NUL
  return [...args, ...Deno.args];
}
