/**
 * `ck-synapse models list|catalog|unload`: `models.list`, `models.catalog` and `model.unload`.
 *
 * @module
 */
import type { OpParams } from "../../ops/op_types.ts";
import {
  openClient,
  parseCommandArgs,
  printOp,
  serverFlagsUsage,
  SUBC_CLIENT_FLAG,
  UsageError,
} from "../_command.ts";
import type { CliIO, Command } from "../_command.ts";
import type { SynapseClient } from "../client.ts";
import { servedBy } from "../_served_by.ts";
import { formatBytes } from "../_progress.ts";
import { formatTable } from "../_table.ts";
import { reportWithHolders } from "./rm.ts";

const USAGE = `usage: ck-synapse models list [--json] [--url URL | --subc [FILE]]
       ck-synapse models catalog [--task T] [--installed] [--runnable] [--query Q] [--json]
                                 [--url URL | --subc [FILE]]
       ck-synapse models unload ID [--json] [--url URL | --subc [FILE]]

list: the models with their task, state, dims and fingerprint, why a model is not ready (the
same state and reason as GET /health), then which model serves each task when a request names
none (and why none does), then the config's model_aliases (name, model, task); --json prints
the whole models.list result.

catalog: the shipped catalog of real models, each pinned by Hugging Face revision and per-file
SHA-256 (models.catalog): ID, TASK, BACKENDS (each backend, with why it cannot run here), SIZE
(the download), INSTALLED (its files are in the model cache) and DEFAULT (* for the model a
task uses by default). Get one with 'ck-synapse pull ID'.

unload: stops serving a model (model.unload); a model loaded with 'pull' is forgotten across
restarts, and its files stay in the cache until 'ck-synapse rm' or 'cache gc'. A model from the
config's preload_models comes back at the next start.

  --task T      catalog: only models of this task (embed, rerank, generate)
  --installed   catalog: only models whose files are in the cache
  --runnable    catalog: only models with a backend that can run here
  --query Q     catalog: only models whose id, name or description contains Q
  --json        print the result (or the error) as JSON
${serverFlagsUsage(14)}

Exit status: 0 result, 1 refused (unload: model_in_use names what holds it), 2 channel error,
unreachable server, or usage error.`;

interface ModelsPrintable {
  models: {
    model_id: string;
    task: string;
    state: string;
    dims?: number;
    fingerprints: string[];
    test_model?: boolean;
    /** Why the model is not ready (lib/ops/status.ts, the state and reason /health prints). */
    state_reason?: { reason: string; code?: string; message: string };
  }[];
  served_by?: Record<string, string | null>;
  default_test_models?: boolean;
  /** Config `model_aliases` rows (docs/config.md "Model aliases"). */
  model_aliases?: { model_alias: string; model_id: string; task: string | null }[];
}

/** One `models.catalog` row, the fields `models catalog` prints. */
export interface CatalogPrintable {
  id: string;
  task: string;
  default_for_task: boolean;
  download_bytes: number | null;
  download_bytes_exact?: boolean;
  install_state: string;
  loaded_state?: string | null;
  backends: { backend: string; runnable: boolean; reason: string | null; installed: boolean }[];
  no_backend_reason?: string;
}

/** The `models` command group: `list`, `catalog`, `unload`. */
export const modelsCommand: Command = {
  name: "models",
  describe: "List models, browse the catalog, unload a model",
  usage: USAGE,
  run: runModels,
};

async function runModels(args: string[], io: CliIO): Promise<number> {
  const { values, positionals } = parseCommandArgs(args, {
    json: { type: "boolean" },
    url: { type: "string" },
    subc: SUBC_CLIENT_FLAG,
    task: { type: "string" },
    installed: { type: "boolean" },
    runnable: { type: "boolean" },
    query: { type: "string" },
  });
  const [sub = "list", ...extra] = positionals;
  if (sub !== "list" && sub !== "catalog" && sub !== "unload") {
    throw new UsageError(
      `Cannot run 'models ${sub}': unknown subcommand (use 'models list', 'models catalog' or 'models unload ID')`,
    );
  }
  if (sub !== "catalog") {
    const flag = (["task", "installed", "runnable", "query"] as const).find((f) =>
      values[f] !== undefined
    );
    if (flag !== undefined) throw new UsageError(`Cannot use --${flag} with 'models ${sub}'`);
  }
  if (sub === "unload") {
    if (extra.length === 0) throw new UsageError("Cannot unload: give the model ID");
    if (extra.length > 1) throw new UsageError(`Cannot unload: unexpected '${extra[1]}'`);
  } else if (extra.length > 0) {
    throw new UsageError(`Cannot run 'models ${sub}': unexpected '${extra[0]}'`);
  }
  const client = await openClient(values, io);
  try {
    if (sub === "catalog") return await runCatalog(client, values, io);
    if (sub === "unload") return await runUnload(client, extra[0]!, values.json ?? false, io);
    return await runList(client, values.json ?? false, io);
  } finally {
    await client.close();
  }
}

async function runList(client: SynapseClient, json: boolean, io: CliIO): Promise<number> {
  return await printOp(client, json, io, "models.list", {}, (result) => {
    const res: ModelsPrintable = result;
    const rows = res.models.map((m) => [
      m.model_id,
      m.task,
      m.state,
      m.dims === undefined ? "-" : String(m.dims),
      (m.fingerprints[0] ?? "-") + (m.test_model ? "  (test model)" : "") +
      (m.state_reason
        ? `  ${m.state_reason.code ?? m.state_reason.reason}: ${m.state_reason.message}`
        : ""),
    ]);
    for (const line of formatTable(["MODEL", "TASK", "STATE", "DIMS", "FINGERPRINT"], rows)) {
      io.out(line);
    }
    io.out("");
    for (const [task, by] of [["TASK", "SERVED BY"], ...servedBy(res)]) {
      io.out(`${task!.padEnd(8)}  ${by}`);
    }
    const aliases = res.model_aliases ?? [];
    if (aliases.length > 0) {
      io.out("");
      const rows = aliases.map((a) => [a.model_alias, a.model_id, a.task ?? "(not loaded)"]);
      for (const line of formatTable(["MODEL ALIAS", "MODEL", "TASK"], rows)) io.out(line);
    }
  });
}

/**
 * The `models catalog` table, then why each model without a backend has none.
 *
 * @param rows `models.catalog` rows.
 * @returns The lines: a header, one per model, then `ID: no backend: REASON` lines.
 */
export function catalogTable(rows: readonly CatalogPrintable[]): string[] {
  const notes = rows.filter((m) => m.backends.length === 0).map((m) =>
    `${m.id}: no backend: ${m.no_backend_reason ?? "none can run in this build"}`
  );
  return [
    ...formatTable(
      ["ID", "TASK", "BACKENDS", "SIZE", "INSTALLED", "DEFAULT"],
      rows.map((m) => [
        m.id,
        m.task,
        m.backends.length === 0
          ? "none (see below)"
          : m.backends.map((b) =>
            b.runnable ? b.backend : `${b.backend} (${b.reason ?? "not runnable"})`
          )
            .join(", "),
        m.download_bytes === null
          ? "-"
          : `${m.download_bytes_exact === false ? "≥" : ""}${formatBytes(m.download_bytes)}`,
        m.install_state === "installed"
          ? `yes${m.loaded_state ? ` (${m.loaded_state})` : ""}`
          : "no",
        m.default_for_task ? "*" : "",
      ]),
    ),
    ...(notes.length > 0 ? ["", ...notes] : []),
  ];
}

async function runCatalog(
  client: SynapseClient,
  values: {
    json?: boolean | undefined;
    task?: string | undefined;
    installed?: boolean | undefined;
    runnable?: boolean | undefined;
    query?: string | undefined;
  },
  io: CliIO,
): Promise<number> {
  const params: Record<string, unknown> = {};
  if (values.task !== undefined) params.task = values.task;
  if (values.installed) params.installed = true;
  if (values.runnable) params.runnable_here = true;
  if (values.query !== undefined) params.query = values.query;
  return await printOp(
    client,
    values.json ?? false,
    io,
    "models.catalog",
    params as OpParams<"models.catalog">,
    (result) => {
      const rows: CatalogPrintable[] = result.models;
      if (rows.length === 0) io.err("no catalog model matches");
      else for (const line of catalogTable(rows)) io.out(line);
    },
  );
}

async function runUnload(
  client: SynapseClient,
  id: string,
  json: boolean,
  io: CliIO,
): Promise<number> {
  return await printOp(client, json, io, "model.unload", { model_id: id }, (result) => {
    io.out(`unloaded ${result.model_id}`);
  }, reportWithHolders);
}
