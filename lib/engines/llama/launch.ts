/**
 * Where the llama worker program is (contract.md §7, design.md "worker binaries"), first match:
 *
 * 1. the preload entry's `worker_bin`, else `SYNAPSE_LLAMA_WORKER_BIN`;
 * 2. the sibling executable `ck-synapse-worker-llama` beside the `ck-synapse` launcher;
 * 3. the same program with `worker llama`: this Deno running `main.ts worker llama`.
 *
 * And where its socket lives: the entry's `worker_runtime_dir`, else
 * `$XDG_RUNTIME_DIR/synapse/workers`, else `<tmp>/synapse-<uid>/workers` (created 0700 by the
 * host). Socket paths must stay under the 108-byte unix limit, so the default avoids long dirs.
 *
 * @module
 */
import { fileURLToPath } from "node:url";
import type { WorkerLaunch } from "../../workers/spawn.ts";

/** The repository root (where `ck-synapse` and `ck-synapse-worker-llama` live). */
const ROOT = fileURLToPath(new URL("../../../", import.meta.url));

/** Options of {@link resolveLlamaWorkerLaunch}. */
export interface LlamaLaunchOptions {
  /** `worker_bin` of the preload entry. */
  workerBin?: string;
  /** Environment lookup. @default Deno.env.get */
  env?: (name: string) => string | undefined;
  /** Extra arguments (test hooks such as `--test-abort-after 1`). */
  extraArgs?: string[];
}

/**
 * Resolves how to start a llama worker.
 *
 * @returns The program and its leading arguments (the host appends `--socket` and puts the nonce in `SYNAPSE_WORKER_NONCE`).
 */
export function resolveLlamaWorkerLaunch(options: LlamaLaunchOptions = {}): WorkerLaunch {
  const env = options.env ?? ((n: string) => Deno.env.get(n));
  const extra = options.extraArgs ?? [];
  const explicit = options.workerBin ?? env("SYNAPSE_LLAMA_WORKER_BIN");
  if (explicit !== undefined && explicit !== "") return { command: explicit, args: [...extra] };
  const sibling = `${ROOT}ck-synapse-worker-llama`;
  try {
    if (Deno.statSync(sibling).isFile) return { command: sibling, args: [...extra] };
  } catch { /* not in a checkout: fall back to the same program */ }
  return {
    command: Deno.execPath(),
    args: [
      "run",
      "--quiet",
      "--no-check",
      "--allow-all",
      `${ROOT}main.ts`,
      "worker",
      "llama",
      ...extra,
    ],
  };
}

/**
 * The default socket directory.
 *
 * @param env Environment lookup.
 */
export function defaultWorkerRuntimeDir(
  env: (name: string) => string | undefined = (n) => Deno.env.get(n),
): string {
  const xdg = env("XDG_RUNTIME_DIR");
  if (xdg !== undefined && xdg !== "") return `${xdg.replace(/\/+$/, "")}/synapse/workers`;
  const tmp = (env("TMPDIR") ?? "/tmp").replace(/\/+$/, "") || "/tmp";
  const uid = Deno.uid() ?? 0;
  return `${tmp}/synapse-${uid}/workers`;
}
