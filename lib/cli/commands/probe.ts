/**
 * `ck-synapse probe run [--model ID]... | status JOB | report`: certifies lanes on this machine
 * (docs/operations.md "probe.start" … "probe.report"). `run` starts a `probe.start` job and
 * follows it with `probe.status` until it ends (180 s by default: the reference's probe timeout,
 * sent as the job's `deadline_ms`), printing a line per lane (passed / failed with the checks that
 * failed, value against threshold, and how long it took), then what serves now (`probe.report`).
 * `status` prints one job's lanes; `report` the certification of every loaded lane.
 *
 * @module
 */
import { sleep } from "../../async.ts";
import { cliExitFor } from "../exit_codes.ts";
import {
  openClient,
  parseCommandArgs,
  printJsonOutcome,
  reportRefusal,
  serverFlagsUsage,
  SUBC_CLIENT_FLAG,
  UsageError,
} from "../_command.ts";
import type { CliIO, Command } from "../_command.ts";
import type { ClientOutcome, SynapseClient } from "../client.ts";

/**
 * The reference implementation's probe timeout (180 s for load and probe), ms, granted per lane:
 * a generation lane's 20 × 64 greedy tokens alone can take 100–150 s on a busy 2-core machine, so
 * one budget for a whole multi-lane job would fail honest probes.
 */
export const PROBE_TIMEOUT_MS = 180_000;

const USAGE =
  `usage: ck-synapse probe run [--model ID]... [--deadline-ms N] [--request-key KEY | --again]
                       [--json] [--url URL | --subc [FILE]]
       ck-synapse probe status JOB [--json] [--url URL | --subc [FILE]]
       ck-synapse probe report [--json] [--url URL | --subc [FILE]]

Certifies lanes on this machine. Every lane that is not the reference (ORT f32 on the CPU) needs
a passing probe on this machine profile before it serves (config 'certification': 'require', the
default); 'probe run' measures it: query path against batch path, shape invariance, determinism,
parity with the reference lane where there is one, max-context and max+1, and greedy decoding for
generation lanes, each check against its threshold.

run     starts a probe job (probe.start) of each --model ID, or with none of every loaded model
        that needs a certificate, and follows it: progress on stderr, then one line per lane:
        its status, each failed check (value against threshold) and how long it took, and at
        the end what serves now (probe.report). --json prints {job, report} at the end.
status  prints a probe job's state and lanes (probe.status).
report  prints each loaded lane's certification and serving admission, the certification and
        performance rows of this machine and the knob assignments (probe.report).

  --model ID          probe this model (repeat for several; default: every model that needs it)
  --deadline-ms N     fail the job deadline_exceeded past N ms (default: ${PROBE_TIMEOUT_MS} per lane
                      to probe, the probe timeout)
  --request-key KEY   the job's idempotency key (default: one derived from the models, their
                      profiles and this machine: the same probe attaches to the same job, so
                      a second 'probe run' of unchanged lanes reprints the first one's results)
  --again             probe again although this probe already ran (a fresh request key,
                      probe-again-<time>-<random>); the new rows replace the old ones
  --json              print JSON (and a refusal as JSON)
${serverFlagsUsage(18)}

Exit status: 0 every lane passed (run) or read (status, report), 1 a lane failed its checks, the
job failed, or a refusal, 2 channel error, unreachable server, or usage error.`;

/** The `probe` command group: `run`, `status`, `report`. */
export const probeCommand: Command = {
  name: "probe",
  describe: "Certify lanes on this machine (probe run), show a probe job or the certification",
  usage: USAGE,
  run: runProbe,
};

/** One failed check as `probe.status` lists it. */
export interface FailedCheckView {
  id: string;
  value: number | string | boolean | null;
  threshold: number | string | null;
  comparison?: string;
}

/** One lane of `probe.status`. */
export interface ProbeLaneView {
  model_id: string;
  lane_id: string;
  status: "queued" | "running" | "passed" | "failed" | "skipped";
  step?: string;
  done?: number;
  total?: number;
  failed_checks?: FailedCheckView[];
  checks_lacking?: { id: string; reason: string }[];
  duration_ms?: number;
  query_path?: "enabled" | "disabled";
  /** The lane's shape classes, when it is not shape-invariant (`ShapeClass` of the ops). */
  /** The most rows per engine call the lane serves with, when it was split. */
  shape_cap?: number;
  shape_classes?: {
    id: string;
    shapes: string[];
    served?: boolean;
    parity?: {
      against: string;
      metric: string;
      value: number;
      threshold: number;
      comparison: string;
      passed: boolean;
    };
  }[];
  error?: { code: string; message: string };
}

/** `probe.status` / `probe.start`. */
export interface ProbeJobView {
  job_id: string;
  state: string;
  request_key?: string;
  attached?: boolean;
  lanes: ProbeLaneView[];
  error?: { code: string; message: string };
}

/** One lane of `probe.report`. */
interface ReportLane {
  model_id: string;
  lane_id: string;
  task?: string;
  certification_required: boolean;
  certification_status: string;
  serving_admission: string;
  serving_admission_reason?: string;
  blocking_reason?: string;
  /** What changed since the newest row (`certification_stale`). */
  stale_facts?: string[];
  probe_command?: string;
  /** Remote lanes: `declared` or `proven`. */
  remote_assurance?: string;
}

/** `probe.report`. */
interface ReportView {
  machine_profile_hash: string;
  certification_mode?: string;
  cert_rows: unknown[];
  perf_rows: unknown[];
  knob_assignments: unknown[];
  lanes: ReportLane[];
}

const TERMINAL = new Set(["done", "failed_transient", "failed_permanent"]);

async function runProbe(args: string[], io: CliIO): Promise<number> {
  const { values, positionals } = parseCommandArgs(args, {
    model: { type: "string", multiple: true },
    "deadline-ms": { type: "string" },
    "request-key": { type: "string" },
    again: { type: "boolean" },
    json: { type: "boolean" },
    url: { type: "string" },
    subc: SUBC_CLIENT_FLAG,
  });
  const [sub, ...rest] = positionals;
  const json = values.json ?? false;
  if (sub !== "run" && sub !== "status" && sub !== "report") {
    throw new UsageError(
      sub === undefined
        ? "Cannot run 'probe': give a subcommand (run, status or report)"
        : `Cannot run 'probe ${sub}': unknown subcommand (use run, status or report)`,
    );
  }
  if (sub !== "run") {
    for (const f of ["model", "deadline-ms", "request-key", "again"] as const) {
      if (values[f] !== undefined) {
        throw new UsageError(`Cannot use --${f} with 'probe ${sub}' (it is for 'probe run')`);
      }
    }
  }
  if (sub === "status") {
    const [id, ...extra] = rest;
    if (id === undefined || id === "") {
      throw new UsageError("Cannot run 'probe status': give a JOB id");
    }
    if (extra.length > 0) {
      throw new UsageError(`Cannot run 'probe status': unexpected '${extra[0]}'`);
    }
    const client = await openClient(values, io, "store");
    try {
      return await status(client, id, json, io);
    } finally {
      await client.close();
    }
  }
  if (rest.length > 0) throw new UsageError(`Cannot run 'probe ${sub}': unexpected '${rest[0]}'`);
  let deadlineMs: number | undefined;
  if (values["deadline-ms"] !== undefined) {
    deadlineMs = Number(values["deadline-ms"]);
    if (!Number.isSafeInteger(deadlineMs) || deadlineMs <= 0) {
      throw new UsageError(
        `Cannot use --deadline-ms ${values["deadline-ms"]}: give a positive whole number of ms`,
      );
    }
  }
  if (values.again === true && values["request-key"] !== undefined) {
    throw new UsageError(
      "Cannot use --again with --request-key: --again picks a fresh key itself; give one or the other",
    );
  }
  const requestKey = values.again === true ? againKey() : values["request-key"];
  const client = await openClient(values, io);
  try {
    if (sub === "report") return await report(client, json, io);
    return await runAndFollow(
      client,
      {
        models: values.model ?? [],
        deadlineMs,
        requestKey,
      },
      io,
      { json, progress: json ? "off" : "lines" },
    );
  } finally {
    await client.close();
  }
}

/**
 * A request key no earlier probe used (`--again`): `probe-again-<epoch ms>-<8 random hex>`, so
 * the probe runs again instead of attaching to the job that already ran it.
 */
export function againKey(): string {
  const rand = crypto.getRandomValues(new Uint8Array(4));
  return `probe-again-${Date.now()}-${
    Array.from(rand, (b) => b.toString(16).padStart(2, "0")).join("")
  }`;
}

/** How many lanes a probe of `req.models` runs: those named, else those needing a certificate. */
async function lanesToProbe(client: SynapseClient, req: ProbeRunRequest): Promise<number> {
  if (req.models.length > 0) return req.models.length;
  const rep = await client.call("probe.report", {});
  if (rep.kind !== "result") return 1; // probe.start answers the same failure itself
  const lanes = (rep.body as { result: { lanes?: ReportLane[] } }).result.lanes ?? [];
  return lanes.filter((l) => l.certification_required && l.certification_status !== "certified")
    .length;
}

/** What `probe run` (and `pull --probe`) asks. */
export interface ProbeRunRequest {
  /** Model ids; empty: every loaded model that needs a certificate. */
  models: string[];
  /**
   * The job's deadline, ms from admission. @default {@link PROBE_TIMEOUT_MS} per lane to probe
   * (the models named, else the lanes `probe.report` says need a certificate)
   */
  deadlineMs?: number | undefined;
  requestKey?: string | undefined;
}

/** Options of {@link runAndFollow}. */
export interface FollowProbeOptions {
  /** Print `{job, report}` as JSON at the end instead of lines. @default false */
  json?: boolean;
  /**
   * The command to suggest when the job ran out of time or was cut by a restart.
   * @default "the same 'ck-synapse probe run' again (a longer --deadline-ms if it ran out of time)"
   */
  retryHint?: string;
  /** Progress on stderr while a lane runs: plain lines, or none. @default "lines" */
  progress?: "lines" | "off";
  /** Time between two `probe.status` calls, ms. @default 250 */
  pollMs?: number;
  /** Print what serves now (`probe.report`) at the end. @default true */
  showReport?: boolean;
  /** Print nothing at all, refusals included (the caller reports the outcome). @default false */
  quiet?: boolean;
}

/** How a followed probe ended. */
export interface ProbeRunOutcome {
  /** The exit code: 0 every lane passed, 1 a lane failed or the job failed or refused, 2 channel. */
  code: number;
  /** The job's last status, when it was started. */
  job?: ProbeJobView;
  /** Wall time from `probe.start` to the job's end, ms. */
  wallMs: number;
}

/**
 * Starts a probe job and follows it to its end (see the module documentation), printing its
 * lanes; the exit code says whether every lane passed.
 *
 * @returns The exit code.
 */
export async function runAndFollow(
  client: SynapseClient,
  req: ProbeRunRequest,
  io: CliIO,
  options: FollowProbeOptions = {},
): Promise<number> {
  return (await followProbe(client, req, io, options)).code;
}

/**
 * {@link runAndFollow}, answering the job and its wall time too (`pull --probe` prints it).
 *
 * @returns The exit code, the job's last status and the wall time.
 */
export async function followProbe(
  client: SynapseClient,
  req: ProbeRunRequest,
  io: CliIO,
  options: FollowProbeOptions = {},
): Promise<ProbeRunOutcome> {
  const json = options.json ?? false;
  const quiet = options.quiet ?? false;
  const lines = !json && !quiet && (options.progress ?? "lines") === "lines";
  const say: CliIO = quiet ? { out: () => {}, err: () => {} } : io;
  const pollMs = options.pollMs ?? 250;
  const started = Date.now();
  const params: Record<string, unknown> = {
    deadline_ms: req.deadlineMs ?? PROBE_TIMEOUT_MS * Math.max(1, await lanesToProbe(client, req)),
  };
  if (req.models.length > 0) params.models = req.models;
  if (req.requestKey !== undefined) params.request_key = req.requestKey;
  const first = await client.call("probe.start", params);
  if (first.kind !== "result") {
    return { code: reportRefusal(first, say, json), wallMs: Date.now() - started };
  }
  let job = resultOf<ProbeJobView>(first);
  if (lines) {
    io.err(
      job.lanes.length === 0
        ? `probe job ${job.job_id}: no lane needs a probe`
        : `probe job ${job.job_id}${job.attached ? " (attached to the job of this key)" : ""}: ${
          job.lanes.map((l) => l.lane_id).join(", ")
        }`,
    );
  }
  const printed = new Set<string>();
  let shownStep = "";
  let shownQuarter = -1;
  for (;;) {
    if (lines) {
      for (const lane of job.lanes) {
        const key = `${lane.model_id}\u0000${lane.lane_id}`;
        if (lane.status === "running") {
          // One line when a step starts, then one per quarter of the lane's runs: a log file
          // (stderr not a terminal) gets a handful of lines per lane, not one per poll.
          const step = `${lane.lane_id}: ${lane.step ?? "probing"}`;
          const quarter = lane.done !== undefined && lane.total !== undefined && lane.total > 0
            ? Math.floor((4 * lane.done) / lane.total)
            : -1;
          if (step !== shownStep || quarter > shownQuarter) {
            io.err(`  … ${step}${quarter < 0 ? "" : ` (${lane.done}/${lane.total})`}`);
            shownStep = step;
            shownQuarter = quarter;
          }
        }
        if (isEnded(lane) && !printed.has(key)) {
          printed.add(key);
          for (const l of laneLines(lane)) io.out(l);
        }
      }
    }
    if (TERMINAL.has(job.state)) break;
    await sleep(pollMs);
    const next = await client.call("probe.status", { job_id: job.job_id });
    if (next.kind !== "result") {
      return { code: reportRefusal(next, say, json), job, wallMs: Date.now() - started };
    }
    job = resultOf<ProbeJobView>(next);
  }
  const wallMs = Date.now() - started;
  const laneFailed = job.lanes.some((l) => l.status === "failed");
  const jobFailed = job.state !== "done";
  const code = laneFailed || jobFailed ? cliExitFor("semantic") : cliExitFor("result");
  let rep: ClientOutcome | undefined;
  if (options.showReport ?? true) rep = await client.call("probe.report", {});
  if (quiet) return { code, job, wallMs };
  if (json) {
    io.out(JSON.stringify(
      {
        job,
        report: rep === undefined ? null : rep.kind === "result" ? resultOf(rep) : rep.body,
        wall_ms: wallMs,
      },
      null,
      2,
    ));
    return { code, job, wallMs };
  }
  if (job.error !== undefined) {
    io.err(`error: ${job.error.code}: ${job.error.message} (probe job ${job.job_id} ${job.state})`);
    if (job.error.code === "module_restarted" || job.error.code === "deadline_exceeded") {
      io.err(
        `hint: run ${
          options.retryHint ??
            "the same 'ck-synapse probe run' again (a longer --deadline-ms if it ran out of time)"
        }`,
      );
    }
  }
  io.err(`probe job ${job.job_id} ${job.state} in ${seconds(wallMs)}`);
  if (rep !== undefined && rep.kind === "result") {
    for (const l of servingLines(resultOf<ReportView>(rep))) io.out(l);
  }
  return { code, job, wallMs };
}

function isEnded(lane: ProbeLaneView): boolean {
  return lane.status === "passed" || lane.status === "failed" || lane.status === "skipped";
}

/**
 * The lines of one ended lane: `passed  LANE (MODEL)  12.3s`, then per failed check
 * `  ID: VALUE (needs CMP THRESHOLD)`, each check it lacked, and its error.
 *
 * @param lane The lane as `probe.status` lists it.
 * @returns The lines.
 */
export function laneLines(lane: ProbeLaneView): string[] {
  const took = lane.duration_ms === undefined ? "" : `  ${seconds(lane.duration_ms)}`;
  const who = lane.lane_id === lane.model_id ? lane.lane_id : `${lane.lane_id} (${lane.model_id})`;
  const out = [`${lane.status.padEnd(7)} ${who}${took}`];
  for (const c of lane.failed_checks ?? []) {
    const bar = c.threshold === null ? "" : ` (needs ${c.comparison ?? "vs"} ${c.threshold})`;
    out.push(`  failed check ${c.id}: ${String(c.value)}${bar}`);
  }
  for (const c of lane.checks_lacking ?? []) out.push(`  lacked check ${c.id}: ${c.reason}`);
  if (lane.query_path === "disabled") {
    out.push("  query path disabled: embed.query runs on the batch path (they differed)");
  }
  if (lane.shape_cap !== undefined) {
    out.push(
      `  not shape-invariant: calls capped at ${lane.shape_cap} rows (the shapes that match a row alone)`,
    );
  }
  for (const k of lane.shape_classes ?? []) {
    const p = k.parity;
    const bar = p === undefined
      ? ""
      : `: ${p.metric} ${p.value} against ${p.against} (needs ${p.comparison} ${p.threshold})${
        p.passed ? "" : " MISSED"
      }`;
    out.push(
      `  shape class ${k.id} (${k.shapes.join(", ")})${bar}${k.served ? "" : " (not served)"}`,
    );
  }
  if (lane.error !== undefined) out.push(`  error: ${lane.error.code}: ${lane.error.message}`);
  return out;
}

/**
 * What serves now, one line per lane of `probe.report`: `serves LANE (certified)`, `refuses LANE:
 * certification_stale: run 'ck-synapse probe run --model ID'`.
 *
 * @param r The report.
 * @returns The lines.
 */
export function servingLines(r: ReportView): string[] {
  if (r.lanes.length === 0) return ["no lane is loaded"];
  return r.lanes.map((l) => {
    const what = `${l.lane_id}${l.lane_id === l.model_id ? "" : ` (${l.model_id})`}`;
    switch (l.serving_admission) {
      case "serving":
        return `serves  ${what}: ${l.certification_status}`;
      case "serving_uncertified":
        return `serves  ${what}: uncertified (${
          l.blocking_reason ?? l.certification_status
        }; certification is "warn", answers say certified: false)`;
      default:
        if (l.remote_assurance === "declared") {
          // Not refused outright: it serves whoever accepts its provider's word.
          return `declared ${what}: serves only requests with --accept-declared (${
            l.blocking_reason ?? l.certification_status
          })${l.probe_command === undefined ? "" : `; prove it: '${l.probe_command}'`}`;
        }
        if (l.certification_status === "not_loaded") {
          return `refuses ${what}: not loaded (${l.serving_admission_reason ?? "not ready"})`;
        }
        return `refuses ${what}: ${l.blocking_reason ?? l.certification_status}${
          l.stale_facts === undefined || l.stale_facts.length === 0
            ? ""
            : ` (changed: ${l.stale_facts.join(", ")})`
        }${l.probe_command === undefined ? "" : `; run '${l.probe_command}'`}`;
    }
  });
}

async function status(
  client: SynapseClient,
  id: string,
  json: boolean,
  io: CliIO,
): Promise<number> {
  const outcome = await client.call("probe.status", { job_id: id });
  if (outcome.kind !== "result") return reportRefusal(outcome, io, json);
  const job = resultOf<ProbeJobView>(outcome);
  const bad = job.state === "failed_transient" || job.state === "failed_permanent" ||
    job.lanes.some((l) => l.status === "failed");
  if (json) {
    printJsonOutcome(outcome, io);
  } else {
    io.out(`job     ${job.job_id}`);
    io.out(`state   ${job.state}`);
    if (job.error !== undefined) io.out(`error   ${job.error.code}: ${job.error.message}`);
    for (const lane of job.lanes) {
      if (lane.status === "running" || lane.status === "queued") {
        const where = lane.step === undefined
          ? ""
          : `  ${lane.step}${lane.done !== undefined ? ` ${lane.done}/${lane.total}` : ""}`;
        io.out(`${lane.status.padEnd(7)} ${lane.lane_id}${where}`);
      } else for (const l of laneLines(lane)) io.out(l);
    }
  }
  return bad ? cliExitFor("semantic") : cliExitFor("result");
}

async function report(client: SynapseClient, json: boolean, io: CliIO): Promise<number> {
  const outcome = await client.call("probe.report", {});
  if (outcome.kind !== "result") return reportRefusal(outcome, io, json);
  if (json) return printJsonOutcome(outcome, io);
  const r = resultOf<ReportView>(outcome);
  io.out(`machine profile  ${r.machine_profile_hash}`);
  if (r.certification_mode !== undefined) io.out(`certification    ${r.certification_mode}`);
  io.out(
    `rows here        ${r.cert_rows.length} certification, ${r.perf_rows.length} performance, ${r.knob_assignments.length} knob assignment(s)`,
  );
  for (const l of servingLines(r)) io.out(l);
  return cliExitFor("result");
}

function resultOf<T>(o: ClientOutcome): T {
  return (o.body as { result: T }).result;
}

function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(1)}s`;
}
