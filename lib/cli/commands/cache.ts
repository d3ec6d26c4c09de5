/**
 * `ck-synapse cache gc|pin`: `cache.gc` (two-phase garbage collection of the model cache) and
 * `cache.pin` (pin or unpin a blob for a module).
 *
 * @module
 */
import type { OpParams } from "../../ops/op_types.ts";
import {
  parseCommandArgs,
  runOp,
  serverFlagsUsage,
  SUBC_CLIENT_FLAG,
  UsageError,
} from "../_command.ts";
import type { CliIO, Command } from "../_command.ts";
import { formatBytes } from "../_progress.ts";
import { formatTable } from "../_table.ts";

const USAGE =
  `usage: ck-synapse cache gc [--digest D] [--grace-ms N] [--json] [--url URL | --subc [FILE]]
       ck-synapse cache pin DIGEST [--unpin] [--module-id M] [--json] [--url URL | --subc [FILE]]
       ck-synapse cache pin URL --sha256 H [--module-id M] [--json] [--url URL | --subc [FILE]]

The model cache is content-addressed (blobs named sha256:<hex>) and lives at
$CORTEXKIT_MODEL_CACHE, else $SYNAPSE_MODEL_CACHE_DIR, else <data_home>/cortexkit/models.

gc (cache.gc): collects in two phases: a blob is first marked, and deleted by a later gc once
its grace period has passed, unless something pins or uses it by then. With --digest, that
blob; without, the oldest unpinned blobs until the cache is under cache_max_bytes. Prints each
blob's state (deleted, marked, kept and why) and the bytes freed.

pin (cache.pin): pins a blob for a module (default: synapse), so gc never takes it; --unpin
drops that module's pin only (other modules' pins are never touched). With a URL and --sha256,
downloads the file into the cache first.

  --digest D      gc: only this blob (sha256:<hex>)
  --grace-ms N    gc: the grace period between marking and deleting, ms
  --unpin         pin: drop the pin instead
  --module-id M   pin: the module the pin belongs to (default: synapse)
  --sha256 H      pin URL: the file's SHA-256 (an unhashed download is refused)
  --json          print the result (or the error) as JSON
${serverFlagsUsage(16)}

Exit status: 0 result, 1 refused, 2 channel error, unreachable server, or usage error.`;

/** One `cache.gc` row. */
export interface GcPrintable {
  digest: string;
  state: string;
  reason?: string;
  freed_bytes?: number;
}

/** The `cache` command group: `gc`, `pin`. */
export const cacheCommand: Command = {
  name: "cache",
  describe: "Collect (gc) or pin blobs of the model cache",
  usage: USAGE,
  run: runCache,
};

/**
 * The `cache gc` lines: a table of the blobs it looked at, then the bytes freed.
 *
 * @param rows `cache.gc` rows.
 * @param freed Bytes freed in all.
 * @returns The lines.
 */
export function gcLines(rows: readonly GcPrintable[], freed: number): string[] {
  const table = rows.length === 0 ? ["nothing to collect"] : formatTable(
    ["DIGEST", "STATE", "FREED", "REASON"],
    rows.map((r) => [
      r.digest,
      r.state,
      r.freed_bytes === undefined ? "-" : formatBytes(r.freed_bytes),
      r.reason ?? "",
    ]),
  );
  return [...table, `freed ${formatBytes(freed)}`];
}

async function runCache(args: string[], io: CliIO): Promise<number> {
  const { values, positionals } = parseCommandArgs(args, {
    json: { type: "boolean" },
    url: { type: "string" },
    subc: SUBC_CLIENT_FLAG,
    digest: { type: "string" },
    "grace-ms": { type: "string" },
    unpin: { type: "boolean" },
    "module-id": { type: "string" },
    sha256: { type: "string" },
  });
  const [sub, ...extra] = positionals;
  if (sub !== "gc" && sub !== "pin") {
    throw new UsageError(
      sub === undefined
        ? "Cannot run 'cache': give a subcommand (gc or pin)"
        : `Cannot run 'cache ${sub}': unknown subcommand (use 'cache gc' or 'cache pin')`,
    );
  }
  const only = sub === "gc" ? ["unpin", "module-id", "sha256"] : ["digest", "grace-ms"];
  const flag = only.find((f) => values[f as keyof typeof values] !== undefined);
  if (flag !== undefined) throw new UsageError(`Cannot use --${flag} with 'cache ${sub}'`);
  const params: Record<string, unknown> = {};
  if (sub === "gc") {
    if (extra.length > 0) throw new UsageError(`Cannot run 'cache gc': unexpected '${extra[0]}'`);
    if (values.digest !== undefined) params.digest = values.digest;
    if (values["grace-ms"] !== undefined) {
      const g = values["grace-ms"];
      if (!/^\d+$/.test(g) || !Number.isSafeInteger(Number(g))) {
        throw new UsageError(
          `Cannot run 'cache gc': --grace-ms must be a whole number of ms, not '${g}'`,
        );
      }
      params.grace_ms = Number(g);
    }
  } else {
    const [target, ...more] = extra;
    if (target === undefined) {
      throw new UsageError("Cannot pin: give a DIGEST (or a URL with --sha256)");
    }
    if (more.length > 0) throw new UsageError(`Cannot pin: unexpected '${more[0]}'`);
    if (/^https?:\/\//i.test(target)) {
      if (values.sha256 === undefined) {
        throw new UsageError(
          `Cannot pin ${target}: give its SHA-256 with --sha256 H; unpinned downloads are refused`,
        );
      }
      if (values.unpin) throw new UsageError("Cannot use --unpin with a URL: unpin by DIGEST");
      params.source_url = target;
      params.expected_digest = values.sha256;
    } else {
      if (values.sha256 !== undefined) {
        throw new UsageError("Cannot use --sha256 with a DIGEST: it is for a URL");
      }
      params.digest = target;
    }
    if (values["module-id"] !== undefined) params.module_id = values["module-id"];
    if (values.unpin) params.unpin = true;
  }
  if (sub === "gc") {
    return await runOp(values, io, "cache.gc", params as OpParams<"cache.gc">, (result) => {
      const r: { rows: GcPrintable[]; freed_bytes: number } = result;
      for (const line of gcLines(r.rows, r.freed_bytes)) io.out(line);
    }, { use: "store" });
  }
  return await runOp(values, io, "cache.pin", params as OpParams<"cache.pin">, (result) => {
    const r = result;
    // cache.pin's pins are the blob's pin rows, typed unknown[] by the operation.
    const owners = (r.pins as { owner: string }[]).map((p) => p.owner);
    io.out(
      `${values.unpin ? "unpinned" : "pinned"} ${r.digest} (${r.format}, ${formatBytes(r.size)})` +
        `; pins: ${owners.length === 0 ? "none" : owners.join(", ")}`,
    );
  }, { use: "store" });
}
