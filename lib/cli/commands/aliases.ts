/**
 * `ck-synapse aliases check --index FP --provenance FP... | list` and
 * `ck-synapse alias declare|retract A B [--evidence JSON]`: the alias table (docs/operations.md
 * "alias.declare", "alias.retract", "aliases.check_index"; docs/models.md "Aliases and the table
 * epoch").
 * Human lines by default, the op's result with `--json`.
 *
 * @module
 */
import type { OpParams } from "../../ops/op_types.ts";
import {
  openClient,
  parseCommandArgs,
  printJsonOutcome,
  reportRefusal,
  runOp,
  serverFlagsUsage,
  SUBC_CLIENT_FLAG,
  UsageError,
} from "../_command.ts";
import type { CliIO, Command } from "../_command.ts";
import type { ClientOutcome } from "../client.ts";

const ALIASES_USAGE =
  `usage: ck-synapse aliases check --index FP [--provenance FP]... [--json] [--url URL | --subc [FILE]]
       ck-synapse aliases list [--json] [--url URL | --subc [FILE]]

check   asks whether an index kept under --index FP, holding vectors of the --provenance
        fingerprints, is still one vector space (aliases.check_index): 'valid', or
        'migration_required' naming the retracted pair and the fingerprint to rebuild under.
        Exit 0 valid, 1 migration_required.
list    prints the table epoch and every alias row, retracted ones included (models.list).

  --index FP          the fingerprint the index is kept under (64 hex)
  --provenance FP     a fingerprint of vectors in the index (repeat; may also be a
                      comma-separated list)
  --json              print the op's result as JSON
${serverFlagsUsage(18)}

Exit status: 0 valid (check) or read (list), 1 migration_required or a refusal, 2 channel error,
unreachable server, or usage error.`;

const ALIAS_USAGE =
  `usage: ck-synapse alias declare|retract A B [--evidence JSON] [--json] [--url URL | --subc [FILE]]

declare  makes fingerprints A and B equivalent from now on (alias.declare): both sides' envelopes
         name the other in equivalent_to, and the table epoch moves by one.
retract  ends that equivalence now (alias.retract); the row is kept with its end time, and an
         index mixing A and B then checks 'migration_required'.
Both need config 'alias_admin_enabled': true in the serving instance (owner's key over HTTP).

  --evidence JSON     a JSON object kept on the row (declare) or as its retraction (retract)
  --json              print the op's result as JSON
${serverFlagsUsage(18)}

Exit status: 0 done (or already so: 'unchanged'), 1 refused, 2 channel error, unreachable server,
or usage error.`;

/** `aliases check | list`. */
export const aliasesCommand: Command = {
  name: "aliases",
  describe: "Check an index against the alias table (aliases check), list the alias rows",
  usage: ALIASES_USAGE,
  run: runAliases,
};

/** `alias declare | retract`. */
export const aliasCommand: Command = {
  name: "alias",
  describe: "Declare or retract an alias between two fingerprints (needs alias_admin_enabled)",
  usage: ALIAS_USAGE,
  run: runAlias,
};

async function runAliases(args: string[], io: CliIO): Promise<number> {
  const { values, positionals } = parseCommandArgs(args, {
    index: { type: "string" },
    provenance: { type: "string", multiple: true },
    json: { type: "boolean" },
    url: { type: "string" },
    subc: SUBC_CLIENT_FLAG,
  });
  const [sub, ...rest] = positionals;
  const json = values.json ?? false;
  if (sub !== "check" && sub !== "list") {
    throw new UsageError(
      sub === undefined
        ? "Cannot run 'aliases': give a subcommand (check or list)"
        : `Cannot run 'aliases ${sub}': unknown subcommand (use check or list)`,
    );
  }
  if (rest.length > 0) throw new UsageError(`Cannot run 'aliases ${sub}': unexpected '${rest[0]}'`);
  if (sub === "list") {
    if (values.index !== undefined || values.provenance !== undefined) {
      throw new UsageError("Cannot use --index or --provenance with 'aliases list'");
    }
    const client = await openClient(values, io, "store");
    try {
      const out = await client.call("models.list", {});
      if (out.kind !== "result") return reportRefusal(out, io, json);
      const r = resultOf<{ table_epoch: number; alias_rows: AliasRowView[] }>(out);
      if (json) {
        io.out(JSON.stringify({ table_epoch: r.table_epoch, alias_rows: r.alias_rows }, null, 2));
        return 0;
      }
      io.out(`table epoch  ${r.table_epoch}`);
      if (r.alias_rows.length === 0) io.out("no alias rows");
      for (const row of r.alias_rows) io.out(rowLine(row));
      return 0;
    } finally {
      await client.close();
    }
  }
  if (values.index === undefined || values.index === "") {
    throw new UsageError("Cannot run 'aliases check': give --index FP");
  }
  const provenance = (values.provenance ?? []).flatMap((p) => p.split(",")).filter((p) => p !== "");
  // The rebuild target depends on which models serve: the instance loads them.
  const client = await openClient(values, io);
  try {
    const out = await client.call("aliases.check_index", {
      index_fingerprint: values.index,
      provenance_set: provenance,
    });
    if (out.kind !== "result") return reportRefusal(out, io, json);
    const r = resultOf<CheckView>(out);
    if (json) printJsonOutcome(out, io);
    else if (r.status === "valid") {
      io.out(`valid (table epoch ${r.table_epoch})`);
    } else {
      const p = r.retracted_pair;
      io.out(`migration_required (table epoch ${r.table_epoch})`);
      if (p !== undefined) {
        io.out(
          `  retracted pair  ${p.fingerprint_a} ~ ${p.fingerprint_b} (at ${
            new Date(p.valid_to_ms).toISOString()
          })`,
        );
      }
      for (const f of r.not_equivalent ?? []) {
        io.out(`  not equivalent  ${f} (never aliased with the index's fingerprint, or no longer)`);
      }
      if (r.rebuild_target !== undefined) {
        io.out(
          `  rebuild under   ${r.rebuild_target}${
            r.rebuild_target_served ? "" : " (no loaded model serves it: load one first)"
          }`,
        );
      }
    }
    return r.status === "valid" ? 0 : 1;
  } finally {
    await client.close();
  }
}

async function runAlias(args: string[], io: CliIO): Promise<number> {
  const { values, positionals } = parseCommandArgs(args, {
    evidence: { type: "string" },
    json: { type: "boolean" },
    url: { type: "string" },
    subc: SUBC_CLIENT_FLAG,
  });
  const [sub, a, b, ...rest] = positionals;
  if (sub !== "declare" && sub !== "retract") {
    throw new UsageError(
      sub === undefined
        ? "Cannot run 'alias': give a subcommand (declare or retract)"
        : `Cannot run 'alias ${sub}': unknown subcommand (use declare or retract)`,
    );
  }
  if (a === undefined || b === undefined) {
    throw new UsageError(`Cannot run 'alias ${sub}': give two fingerprints A B`);
  }
  if (rest.length > 0) throw new UsageError(`Cannot run 'alias ${sub}': unexpected '${rest[0]}'`);
  const params: Record<string, unknown> = { left: a, right: b };
  if (values.evidence !== undefined) {
    try {
      params.evidence = JSON.parse(values.evidence);
    } catch {
      throw new UsageError(`Cannot use --evidence: it is not JSON (${values.evidence})`);
    }
  }
  const method = sub === "declare" ? "alias.declare" : "alias.retract";
  return await runOp(values, io, method, params as OpParams<typeof method>, (r) => {
    const done = sub === "declare" ? "declared" : "retracted";
    io.out(
      r.changed
        ? `${done}: ${a} ~ ${b} (table epoch ${r.table_epoch})`
        : `unchanged: ${a} ~ ${b} was already ${
          sub === "declare" ? "active" : "not active"
        } (table epoch ${r.table_epoch})`,
    );
  }, { use: "store" });
}

interface AliasRowView {
  fingerprint_a: string;
  fingerprint_b: string;
  valid_from_ms: number;
  valid_to_ms: number | null;
  evidence: { source: string; [k: string]: unknown };
}

interface CheckView {
  status: "valid" | "migration_required";
  table_epoch: number;
  retracted_pair?: { fingerprint_a: string; fingerprint_b: string; valid_to_ms: number };
  not_equivalent?: string[];
  rebuild_target?: string;
  rebuild_target_served?: boolean;
}

function rowLine(r: AliasRowView): string {
  const from = new Date(r.valid_from_ms).toISOString();
  const to = r.valid_to_ms === null
    ? "active"
    : `retracted ${new Date(r.valid_to_ms).toISOString()}`;
  return `${r.fingerprint_a} ~ ${r.fingerprint_b}  ${r.evidence.source}  from ${from}  ${to}`;
}

function resultOf<T>(o: ClientOutcome): T {
  return (o.body as { result: T }).result;
}
