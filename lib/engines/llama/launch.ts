/**
 * Where the worker program of a GGUF lane is (docs/internals.md §7 "Process and handshake"),
 * first match, for the `llama` lane (node-llama-cpp) and the `ffi` lane (the native shim) alike:
 *
 * 1. the preload entry's `worker_bin`, else `SYNAPSE_LLAMA_WORKER_BIN` / `SYNAPSE_FFI_WORKER_BIN`;
 * 2. the sibling executable `ck-synapse-worker-llama` / `ck-synapse-worker-ffi` beside the
 *    `ck-synapse` launcher;
 * 3. the same program with `worker llama` / `worker ffi`: this Deno running `main.ts worker …`,
 *    or, in a `deno compile`d executable, that executable with `worker …`.
 *
 * And where its socket lives: the entry's `worker_runtime_dir`, else `SYNAPSE_WORKER_RUNTIME_DIR`,
 * else `$XDG_RUNTIME_DIR/synapse/workers`, else `<tmp>/synapse-<uid>/workers` (created 0700 by
 * the host). Socket paths must stay under the 108-byte unix limit, so the default avoids long
 * dirs.
 *
 * The `ck-synapse` launcher grants Deno permissions by exact path: the sockets of worker ids
 * `llama-0@PID` … `llama-15@PID` in the default runtime dir (which honours
 * `SYNAPSE_WORKER_RUNTIME_DIR`), and running the default worker or `SYNAPSE_LLAMA_WORKER_BIN`.
 * {@link checkLlamaWorkerPermitted} refuses at boot, naming the fix, what the process was not
 * granted, rather than failing each load with Deno's `NotCapable`.
 *
 * @module
 */
import { fileURLToPath } from "node:url";
import { SynapseError } from "../../contract/errors.ts";
import type { WorkerLaunch } from "../../workers/spawn.ts";
import { workerSocketPath } from "../../workers/handshake.ts";

/** The repository root (where `ck-synapse` and `ck-synapse-worker-llama` live). */
const ROOT = fileURLToPath(new URL("../../..", import.meta.url));

/** Options of {@link resolveLlamaWorkerLaunch}. */
export interface LlamaLaunchOptions {
  /** `worker_bin` of the preload entry. */
  workerBin?: string;
  /** Environment lookup. @default Deno.env.get */
  env?: (name: string) => string | undefined;
  /** Extra arguments (test hooks such as `--test-abort-after 1`). */
  extraArgs?: string[];
  /** Which lane's worker. @default "llama" */
  kind?: "llama" | "ffi";
}

/** The environment variable naming a lane's worker program. */
export function workerBinEnv(kind: "llama" | "ffi"): string {
  return kind === "ffi" ? "SYNAPSE_FFI_WORKER_BIN" : "SYNAPSE_LLAMA_WORKER_BIN";
}

/**
 * Resolves how to start a llama worker.
 *
 * @returns The program and its leading arguments (the host appends `--socket` and puts the nonce in `SYNAPSE_WORKER_NONCE`).
 */
export function resolveLlamaWorkerLaunch(options: LlamaLaunchOptions = {}): WorkerLaunch {
  const env = options.env ?? ((n: string) => Deno.env.get(n));
  const extra = options.extraArgs ?? [];
  const kind = options.kind ?? "llama";
  const explicit = options.workerBin ?? env(workerBinEnv(kind));
  if (explicit !== undefined && explicit !== "") return { command: explicit, args: [...extra] };
  const sibling = `${ROOT}ck-synapse-worker-${kind}`;
  try {
    if (Deno.statSync(sibling).isFile) return { command: sibling, args: [...extra] };
  } catch { /* not in a checkout: fall back to the same program */ }
  // A `deno compile`d ck-synapse (scripts/build --format compile) is its own worker program.
  if (Deno.build.standalone) {
    return { command: Deno.execPath(), args: ["worker", kind, ...extra] };
  }
  return {
    command: Deno.execPath(),
    args: [
      "run",
      "--quiet",
      "--no-check",
      "--allow-all",
      `${ROOT}main.ts`,
      "worker",
      kind,
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
  const explicit = env("SYNAPSE_WORKER_RUNTIME_DIR");
  if (explicit !== undefined && explicit !== "") return explicit;
  const xdg = env("XDG_RUNTIME_DIR");
  if (xdg !== undefined && xdg !== "") return `${xdg.replace(/\/+$/, "")}/synapse/workers`;
  const tmp = (env("TMPDIR") ?? "/tmp").replace(/\/+$/, "") || "/tmp";
  const uid = Deno.uid() ?? 0;
  return `${tmp}/synapse-${uid}/workers`;
}

/** What one llama model's worker needs from the process: its socket and its program. */
export interface LlamaWorkerPlan {
  /** The model it serves (named in refusals). */
  modelId: string;
  /** Worker id (`llama-<slot>@<pid>`): names the socket. */
  workerId: string;
  /** Socket directory. */
  runtimeDir: string;
  /** The program that is spawned. */
  launch: WorkerLaunch;
  /** Whether the runtime dir came from the entry's `worker_runtime_dir`. */
  runtimeDirFromEntry: boolean;
  /** Whether the program came from the entry's `worker_bin`. */
  workerBinFromEntry: boolean;
  /** The lane. @default "llama" */
  kind?: "llama" | "ffi";
}

/**
 * Refuses, at boot, a llama worker this process is not permitted to start: Deno must grant
 * `net` to the worker's exact socket path and `run` to its program (the launcher grants the
 * defaults; see the module doc). A process run with `--allow-all` passes.
 *
 * @throws {SynapseError} `invalid_request` with `details {model_id, field: "worker_runtime_dir" |
 *   "worker_bin", reason: "not_permitted", path}` and the environment variable that fixes it.
 */
export function checkLlamaWorkerPermitted(plan: LlamaWorkerPlan): void {
  const socket = workerSocketPath(plan.runtimeDir, plan.workerId);
  if (Deno.permissions.querySync({ name: "net", host: `unix:${socket}` }).state !== "granted") {
    throw new SynapseError(
      "invalid_request",
      `Cannot start model '${plan.modelId}': this process may not listen on the worker socket '${socket}' (the ck-synapse launcher grants worker sockets in one runtime dir only); ${
        plan.runtimeDirFromEntry
          ? `instead of worker_runtime_dir, set SYNAPSE_WORKER_RUNTIME_DIR=${plan.runtimeDir} for the launcher`
          : `set SYNAPSE_WORKER_RUNTIME_DIR=${plan.runtimeDir} for the launcher`
      }`,
      {
        details: {
          model_id: plan.modelId,
          field: "worker_runtime_dir",
          reason: "not_permitted",
          path: socket,
        },
      },
    );
  }
  const command = plan.launch.command;
  if (Deno.permissions.querySync({ name: "run", command }).state !== "granted") {
    throw new SynapseError(
      "invalid_request",
      `Cannot start model '${plan.modelId}': this process may not run the worker program '${command}'; ${
        plan.workerBinFromEntry ? "instead of worker_bin, set" : "set"
      } ${
        workerBinEnv(plan.kind ?? "llama")
      }=${command} for the ck-synapse launcher, which grants that program`,
      {
        details: {
          model_id: plan.modelId,
          field: "worker_bin",
          reason: "not_permitted",
          path: command,
        },
      },
    );
  }
}
