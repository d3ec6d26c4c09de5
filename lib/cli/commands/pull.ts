/**
 * `ck-synapse pull ID|URL|PATH`: gets a model into the model cache and waits until it serves.
 * A catalog id is `models.download` (then the model loads under its catalog id); an http(s) URL
 * is `model.load {url, expected_digest}`; a local file or directory is `model.load {path}`. The
 * job is polled with `model.status {job_id}` and its progress drawn on stderr
 * (`../_progress.ts`): a bar with bytes, rate and ETA on a terminal, plain lines otherwise.
 *
 * @module
 */
import { existsSync } from "node:fs";
import { resolve } from "node:path";
import { cliExitFor, EXIT_INTERRUPTED } from "../exit_codes.ts";
import {
  openClient,
  parseCommandArgs,
  reportRefusal,
  serverFlagsUsage,
  SUBC_CLIENT_FLAG,
  UsageError,
} from "../_command.ts";
import type { CliIO, Command } from "../_command.ts";
import { stopOnInterrupt } from "../_job_results.ts";
import { sleep } from "../../async.ts";
import type { ClientOutcome, SynapseClient } from "../client.ts";
import { formatBytes, formatDuration, formatRate, ProgressReporter } from "../_progress.ts";
import { checkQuant } from "./quantize.ts";

const USAGE =
  `usage: ck-synapse pull ID|URL|PATH [--sha256 H] [--model-id NAME] [--engine ort|llama]
                      [--task embed|rerank|generate] [--tokenizer URL|PATH]
                      [--tokenizer-sha256 H] [--config URL|PATH] [--config-sha256 H]
                      [--quant int8] [--reference-model ID]
                      [--no-pin] [--probe [--probe-deadline-ms N]] [--json]
                      [--url URL | --subc [FILE]]

Gets a model into the model cache, verified, and waits until it serves: at once, with no
restart of a running server, and again after a restart.

  ID    a catalog model ('ck-synapse models catalog'): downloads its pinned files
        (models.download); it then serves under ID
  URL   an http(s) URL of a model file (.onnx or .gguf) with --sha256 (model.load): a download
        without a digest is refused
  PATH  a local model file, or a directory holding model.onnx, model.gguf, onnx/model.onnx or
        one .gguf file, with tokenizer.json and config.json beside it when present (model.load);
        a path has a '/' (write ./NAME for a directory here)

On a terminal a bar shows bytes, rate and ETA, then verifying…, loading… and 'ready: MODEL
FINGERPRINT'; otherwise plain lines, a progress line at most every 2 s. Ctrl-C cancels the
download (the job ends and leaves nothing in the cache's tmp/; the next pull starts over).

  --sha256 H              SHA-256 of the model file (64 hex, 'sha256:' optional): required
                          for a URL, checked for a PATH
  --model-id NAME         serve it under NAME (default: from the file or directory name)
  --engine ort|llama      engine (default: llama for GGUF, ort for ONNX)
  --task T                embed, rerank or generate (default: from the model's metadata)
  --tokenizer URL|PATH    its tokenizer.json (a URL needs --tokenizer-sha256)
  --tokenizer-sha256 H    SHA-256 of the tokenizer URL's file
  --config URL|PATH       its config.json (a URL needs --config-sha256)
  --config-sha256 H       SHA-256 of the config URL's file
  --quant int8            serve the model int8 (its own lane: quant int8, its own fingerprint).
                          A PATH is quantized here ('ck-synapse quantize', into the model
                          cache; --sha256 then checks the fp32 file); an ID takes the upstream
                          int8 file where the catalog pins one, else quantizes the fp32 file
                          once its pull is done. Serves as ID-int8 (or NAME-int8) with
                          reference_model the fp32 model, so 'probe run' checks its parity.
                          Any other value is refused
  --reference-model ID    the model these are the same weights as (model.load
                          reference_model): the probe checks the lane's parity against it
  --no-pin                do not pin its files: 'cache gc' may delete them even while the model
                          serves (it serves from memory; the next start then fails to load it)
  --probe                 once it serves, probe it when it needs a certificate on this machine
                          (every lane but ORT f32 on the CPU does; 'ck-synapse probe run'), and
                          say how long that took. Without it, a model that needs one gets a
                          line saying it refuses until 'ck-synapse probe run --model ID' (or
                          config certification: "warn")
  --probe-deadline-ms N   with --probe: fail the probe deadline_exceeded past N ms (default:
                          180000, the contract's probe timeout; a generation lane on a busy
                          machine may need more)
  --json                  no progress; print {job, model} (and {probe} with --probe): the final
                          job and model.status
${serverFlagsUsage(24)}

Exit status: 0 ready (and with --probe, every probed lane passed), 1 refused or failed (or a
probed lane failed) (the error code, message and a hint on stderr), 2
channel error, unreachable server, or usage error, 130 interrupted.`;

/** The `pull` command. */
export const pullCommand: Command = {
  name: "pull",
  describe: "Get a model (catalog id, pinned URL or local path) and wait until it serves",
  usage: USAGE,
  run: runPull,
};

/** The flags of `pull` that shape its request. */
export interface PullFlags {
  sha256?: string | undefined;
  "model-id"?: string | undefined;
  engine?: string | undefined;
  task?: string | undefined;
  tokenizer?: string | undefined;
  "tokenizer-sha256"?: string | undefined;
  config?: string | undefined;
  "config-sha256"?: string | undefined;
  "no-pin"?: boolean | undefined;
  "reference-model"?: string | undefined;
}

/** The call `pull` makes: a catalog download, or a load from a URL or a local path. */
export interface PullPlan {
  kind: "catalog" | "url" | "path";
  method: "models.download" | "model.load";
  params: Record<string, unknown>;
}

const URL_RE = /^https?:\/\//i;
const LOAD_ONLY_FLAGS = [
  "sha256",
  "model-id",
  "engine",
  "task",
  "tokenizer",
  "tokenizer-sha256",
  "config",
  "config-sha256",
  "no-pin",
  "reference-model",
] as const;

/**
 * Works out what `pull TARGET` calls. A TARGET starting with `http://` or `https://` is a URL; one
 * with a `/`, or that names an existing `.onnx` / `.gguf` file, is a path (made absolute, so a
 * server with another working directory finds it); anything else is a catalog id.
 *
 * @param target The positional argument.
 * @param flags The request flags.
 * @param cwd Directory relative paths are resolved against.
 * @returns The method and its params.
 * @throws {UsageError} for a URL without `--sha256`, a tokenizer or config URL without its
 *   digest, a local tokenizer or config with a URL model (or the reverse), load flags with a
 *   catalog id, or a path that does not exist.
 */
export function planPull(target: string, flags: PullFlags, cwd: string): PullPlan {
  if (target === "") throw new UsageError("Cannot pull: the ID, URL or PATH is empty");
  const isUrl = URL_RE.test(target);
  const isPath = !isUrl &&
    (target.includes("/") || target === "." || target === ".." ||
      (/\.(onnx|gguf)$/i.test(target) && existsSync(resolve(cwd, target))));
  if (!isUrl && /^[a-z][a-z0-9+.-]*:\/\//i.test(target)) {
    throw new UsageError(
      `Cannot pull ${target}: only http:// and https:// URLs can be downloaded (or give a local PATH or a catalog id)`,
    );
  }
  if (!isUrl && !isPath) {
    const extra = LOAD_ONLY_FLAGS.find((f) => flags[f] !== undefined);
    if (extra !== undefined) {
      throw new UsageError(
        `Cannot pull catalog model '${target}' with --${extra}: the catalog pins its files; --${extra} is for a URL or a PATH`,
      );
    }
    return { kind: "catalog", method: "models.download", params: { catalog_id: target } };
  }
  const params: Record<string, unknown> = {};
  if (isUrl) {
    if (flags.sha256 === undefined) {
      throw new UsageError(
        `Cannot pull ${target}: give its SHA-256 with --sha256 H; unpinned downloads are refused (a file whose digest is not known cannot be verified)`,
      );
    }
    params.url = target;
  } else {
    const path = resolve(cwd, target);
    if (!existsSync(path)) {
      throw new UsageError(
        `Cannot pull ${target}: no such file or directory (a catalog id has no '/'; see 'ck-synapse models catalog')`,
      );
    }
    params.path = path;
  }
  if (flags.sha256 !== undefined) params.expected_digest = flags.sha256;
  const files: Record<string, unknown> = {};
  for (const role of ["tokenizer", "config"] as const) {
    const where = flags[role];
    const sha = flags[`${role}-sha256`];
    if (where === undefined) {
      if (sha !== undefined) throw new UsageError(`Cannot use --${role}-sha256 without --${role}`);
      continue;
    }
    if (URL_RE.test(where)) {
      if (!isUrl) {
        throw new UsageError(
          `Cannot pull a local model with --${role} ${where}: give a local ${role} file (a URL goes with a model URL)`,
        );
      }
      if (sha === undefined) {
        throw new UsageError(
          `Cannot pull with --${role} ${where}: give its SHA-256 with --${role}-sha256 H; unpinned downloads are refused`,
        );
      }
      files[role] = { url: where, sha256: sha };
    } else {
      if (isUrl) {
        throw new UsageError(
          `Cannot pull a model URL with a local --${role} file: give the ${role} as a URL with --${role}-sha256 (or pull a local directory)`,
        );
      }
      const path = resolve(cwd, where);
      if (!existsSync(path)) throw new UsageError(`Cannot use --${role} ${where}: no such file`);
      files[role] = sha === undefined ? path : { path, sha256: sha };
    }
  }
  if (Object.keys(files).length > 0) params.files = files;
  if (flags["model-id"] !== undefined) params.model_id = flags["model-id"];
  if (flags.engine !== undefined) params.engine = flags.engine;
  if (flags.task !== undefined) params.task = flags.task;
  if (flags["no-pin"]) params.pin = false;
  if (flags["reference-model"] !== undefined) params.reference_model = flags["reference-model"];
  return { kind: isUrl ? "url" : "path", method: "model.load", params };
}

/** A `model.load` / `models.download` job as `model.status {job_id}` answers it. */
interface JobView {
  job_id: string;
  kind: "model.load" | "models.download";
  state: string;
  model_id: string | null;
  catalog_id?: string;
  bytes_done: number;
  bytes_total: number | null;
  error?: WireErrorLike;
  task?: string;
  task_reason?: string;
  notes?: string[];
  healed?: { file: string; digest: string; from: string }[];
}

/** `model.status {model_id}`. */
interface ModelStatus {
  model_id: string;
  fingerprint: string | null;
  state: string;
  engine: string;
  task: string;
  error?: { reason?: string; code?: string; message?: string; details?: unknown };
}

interface WireErrorLike {
  code: string;
  message: string;
  safe_to_retry_same_request?: boolean;
  details?: Record<string, unknown>;
}

const JOB_ENDED = new Set(["ready", "failed", "committed", "cancelled"]);

async function runPull(args: string[], io: CliIO): Promise<number> {
  const { values, positionals } = parseCommandArgs(args, {
    sha256: { type: "string" },
    "model-id": { type: "string" },
    engine: { type: "string" },
    task: { type: "string" },
    tokenizer: { type: "string" },
    "tokenizer-sha256": { type: "string" },
    config: { type: "string" },
    "config-sha256": { type: "string" },
    "no-pin": { type: "boolean" },
    quant: { type: "string" },
    "reference-model": { type: "string" },
    probe: { type: "boolean" },
    "probe-deadline-ms": { type: "string" },
    json: { type: "boolean" },
    url: { type: "string" },
    subc: SUBC_CLIENT_FLAG,
  });
  const [target, ...extra] = positionals;
  if (target === undefined) {
    throw new UsageError("Cannot pull: give a catalog ID, an http(s) URL or a local PATH");
  }
  if (extra.length > 0) throw new UsageError(`Cannot pull: unexpected '${extra[0]}'`);
  let probeDeadlineMs: number | undefined;
  if (values["probe-deadline-ms"] !== undefined) {
    if (!values.probe) throw new UsageError("Cannot pull: --probe-deadline-ms needs --probe");
    probeDeadlineMs = Number(values["probe-deadline-ms"]);
    if (!Number.isSafeInteger(probeDeadlineMs) || probeDeadlineMs <= 0) {
      throw new UsageError(
        `Cannot use --probe-deadline-ms ${
          values["probe-deadline-ms"]
        }: give a positive whole number of ms`,
      );
    }
  }
  checkQuant(values.quant, `pull ${target}`);
  const json = values.json ?? false;
  let plan: PullPlan;
  // --quant int8: the int8 file is made (or found) before the server is called.
  const staged: string[] = [];
  let fp32First: PullPlan | undefined;
  if (values.quant === "int8") {
    const { planInt8Pull } = await import("./_pull_int8.ts");
    const prepared = await planInt8Pull(target, values, Deno.cwd(), io, json);
    if (typeof prepared === "number") return prepared;
    plan = prepared.plan;
    fp32First = prepared.fp32First;
    if (prepared.staging !== undefined) staged.push(prepared.staging);
  } else {
    plan = planPull(target, values, Deno.cwd());
  }
  const client = await openClient(values, io);
  const progress = json ? "off" : Deno.stderr.isTerminal() ? "bar" : "lines";
  try {
    if (fp32First !== undefined) {
      // A catalog model with no upstream int8 file: its fp32 pull first, then its file quantized.
      const first = await client.call(fp32First.method, fp32First.params);
      if (first.kind !== "result") return refused(first, io, json, fp32First);
      const code = await followPull(
        client,
        fp32First,
        (first.body as { result: JobView }).result,
        io,
        {
          json: false,
          progress: json ? "off" : progress,
        },
      );
      if (code !== 0) return code;
      const { stageCatalogInt8 } = await import("./_pull_int8.ts");
      const staging = await stageCatalogInt8(target, io, json);
      if (typeof staging === "number") return staging;
      plan = staging.plan;
      if (staging.staging !== undefined) staged.push(staging.staging);
    }
    const outcome = await client.call(plan.method, plan.params);
    if (outcome.kind !== "result") return refused(outcome, io, json, plan);
    const job = (outcome.body as { result: JobView }).result;
    return await followPull(client, plan, job, io, {
      json,
      progress,
      afterReady: (modelId) =>
        certifyAfterPull(client, modelId, values.probe ?? false, io, json, probeDeadlineMs),
    });
  } finally {
    await client.close();
    for (const dir of staged) await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}

/** A refusal of the first call: the `error:` line, and a hint for a semantic error. */
function refused(outcome: ClientOutcome, io: CliIO, json: boolean, plan: PullPlan): number {
  const code = reportRefusal(outcome, io, json);
  if (!json && outcome.kind === "semantic") {
    const e = (outcome.body as { result: { error: WireErrorLike } }).result.error;
    const hint = pullFailureHint(e, plan.kind);
    if (hint !== undefined) io.err(hint);
  }
  return code;
}

/**
 * What to tell the user after a failed pull, by error code; undefined when the message says it
 * all.
 *
 * @param e The job's (or the refusal's) error.
 * @param kind What was pulled.
 * @returns One line, or undefined.
 */
export function pullFailureHint(
  e: Pick<WireErrorLike, "code" | "details" | "safe_to_retry_same_request">,
  kind: PullPlan["kind"],
): string | undefined {
  switch (e.code) {
    case "artifact_invalid":
      return "hint: nothing was loaded; fix what the message names (the file, its source or its --sha256) and pull again";
    case "download_failed":
      if (e.details?.reason === "storage_full") {
        return "hint: the disk holding the model cache is full; free space on it ('ck-synapse rm' a model no longer needed, or 'ck-synapse cache gc'), then pull again";
      }
      if (e.details?.reason === "http_status") {
        return "hint: the server refused the file (see its HTTP status); check the URL (for a catalog model: the hf_endpoint config key and its mirror)";
      }
      return kind === "catalog"
        ? "hint: check the network (Hugging Face must be reachable, or set hf_endpoint to a mirror and add it to SYNAPSE_ALLOW_NET), then run the same pull again (the job already retried 3 times); or pull a local copy with 'ck-synapse pull ./DIR'"
        : "hint: check the URL and the network, then run the same pull again (the job already retried 3 times)";
    case "backend_unavailable":
      return e.details?.catalog_id !== undefined
        ? "hint: no backend of this model can run here; 'ck-synapse models catalog' shows each backend's reason"
        : undefined;
    case "unknown_model":
      return kind === "catalog"
        ? "hint: 'ck-synapse models catalog' lists the catalog ids; for a local directory of that name write ./NAME"
        : undefined;
    case "model_in_use":
      return "hint: wait for the requests or jobs that hold it to end, then try again";
    default:
      return e.safe_to_retry_same_request
        ? "hint: the failure is transient; run the same pull again"
        : undefined;
  }
}

/**
 * The stderr lines of a pull that ended ready, before `ready: MODEL FINGERPRINT`: the task and
 * why (`task: generate (its GGUF architecture 'llama' is a decoder)`), each note of the job (a
 * surprising task choice, a default taken over or kept: `note: …`), and each blob the load healed.
 *
 * @param job The ended job.
 * @param s The model's status.
 * @returns The lines.
 */
export function pullReadyLines(job: PullJob, s: Pick<ModelStatus, "task">): string[] {
  const task = job.task ?? s.task;
  const why = job.task_reason === undefined || job.task_reason === "asked"
    ? job.task_reason === "asked" ? " (asked)" : ""
    : ` (${job.task_reason})`;
  return [
    `task: ${task}${why}`,
    ...(job.notes ?? []).map((n) => `note: ${n}`),
    ...(job.healed ?? []).map((h) =>
      `note: healed the damaged ${h.file} blob ${h.digest} from its recorded ${h.from}`
    ),
  ];
}

/** Options of {@link followPull}. */
export interface FollowPullOptions {
  /** Print `{job, model}` as JSON at the end instead of lines. @default false */
  json?: boolean;
  /** How progress is drawn on stderr (`../_progress.ts`); always `off` with `json`. @default "lines" */
  progress?: "bar" | "lines" | "off";
  /** Time between two `model.status` calls, ms. @default 200 */
  pollMs?: number;
  /** Clock of the progress display, ms. @default Date.now */
  now?: () => number;
  /**
   * Runs once the model serves, after the `ready:` line (with `json`, before the JSON, whose
   * fields it may add to): `pull`'s certification step ({@link certifyAfterPull}). Its code
   * replaces the ready exit code when not 0.
   */
  afterReady?: (modelId: string) => Promise<AfterReady>;
}

/** What {@link FollowPullOptions.afterReady} answers. */
export interface AfterReady {
  /** Exit code (0: nothing went wrong). */
  code: number;
  /** Fields added to the `--json` output. */
  json?: Record<string, unknown>;
}

/** One lane of `probe.report` as `pull` reads it. */
interface ReportLane {
  model_id: string;
  lane_id: string;
  certification_required: boolean;
  certification_status: string;
  serving_admission: string;
}

/**
 * The certification step of `pull` (the first-run path; docs/internals.md §12): reads
 * `probe.report` for the model's lanes; a lane that needs a certificate and has none is probed with
 * `--probe` (`probe.start {models: [id]}`, followed to its end, then `probe: passed in 12.3s`), or
 * else gets one line saying it refuses until `ck-synapse probe run --model ID` (or serves
 * uncertified under `certification: "warn"`). A server without `probe.report` (an older build) is
 * left alone.
 *
 * @param client Where to call.
 * @param modelId The model that now serves.
 * @param probe `--probe`.
 * @param io Output.
 * @param json `--json`: nothing printed, the outcome goes into the JSON as `probe`.
 * @param probeDeadlineMs `--probe-deadline-ms`: the probe job's deadline (default: the probe
 *   timeout per lane, as `probe run`).
 * @returns Exit code 0, or the probe's (1 a lane failed, 2 a channel error).
 */
export async function certifyAfterPull(
  client: SynapseClient,
  modelId: string,
  probe: boolean,
  io: CliIO,
  json: boolean,
  probeDeadlineMs?: number,
): Promise<AfterReady> {
  const rep = await client.call("probe.report", {});
  if (rep.kind !== "result") return { code: 0 };
  const report = (rep.body as { result: { certification_mode?: string; lanes?: ReportLane[] } })
    .result;
  const lanes = (report.lanes ?? []).filter((l) => l.model_id === modelId);
  const needs = lanes.filter((l) =>
    l.certification_required && l.certification_status !== "certified"
  );
  if (needs.length === 0) {
    if (probe && !json) {
      io.err(
        lanes.some((l) => l.certification_required)
          ? `probe: ${modelId} is already certified on this machine`
          : `probe: ${modelId} needs no probe (its lane is the reference: ORT f32 on the CPU)`,
      );
    }
    return probe ? { code: 0, json: { probe: null } } : { code: 0 };
  }
  if (!probe) {
    if (!json) {
      const warn = report.certification_mode === "warn";
      io.err(
        warn
          ? `note: ${modelId} is not certified on this machine (${
            needs[0]!.certification_status
          }); it serves because certification is "warn", and its answers say certified: false. Certify it with 'ck-synapse probe run --model ${modelId}'`
          : `note: ${modelId} needs a certificate on this machine (${
            needs[0]!.certification_status
          }): it refuses requests (not_certified) until 'ck-synapse probe run --model ${modelId}' (or set certification: "warn"); 'pull --probe' does it as part of the pull`,
      );
    }
    return { code: 0 };
  }
  const { followProbe } = await import("./probe.ts");
  const req = {
    models: [modelId],
    deadlineMs: probeDeadlineMs,
  };
  const out = await followProbe(client, req, io, {
    progress: json ? "off" : "lines",
    showReport: !json,
    quiet: json,
    retryHint:
      `'ck-synapse probe run --model ${modelId} --deadline-ms N' (N ms; the default is 180000 per lane), or the same pull with --probe-deadline-ms N`,
  });
  if (!json) {
    io.err(
      `probe: ${modelId} ${out.code === 0 ? "certified" : "not certified"}; the probe took ${
        (out.wallMs / 1000).toFixed(1)
      }s`,
    );
  }
  return { code: out.code, json: { probe: { job: out.job ?? null, wall_ms: out.wallMs } } };
}

/** A `model.load` / `models.download` job as its first answer gives it. */
export type PullJob = JobView;

/**
 * Follows a pull's job to its end: polls `model.status {job_id}`, draws its phases and bytes,
 * and after a catalog download is `committed` waits for the model to be ready
 * (`model.status {model_id}`). Ctrl-C (SIGINT, or `io.signal`) sends `models.download.cancel`.
 *
 * @param client Where to call.
 * @param plan What was pulled (for the lines and hints).
 * @param job The job as `model.load` / `models.download` answered it.
 * @param io Output and abort signal.
 * @param options JSON output, progress mode, poll interval.
 * @returns 0 ready; 1 failed or cancelled (the error, and a hint, on stderr); 2 a channel error
 *   while polling; 130 interrupted.
 */
export async function followPull(
  client: SynapseClient,
  plan: PullPlan,
  job: PullJob,
  io: CliIO,
  options: FollowPullOptions = {},
): Promise<number> {
  return await new PullFollower(client, plan, io, options).run(job);
}

/** Follows one pull's job to its end, drawing progress. */
class PullFollower {
  #client: SynapseClient;
  #plan: PullPlan;
  #io: CliIO;
  #json: boolean;
  #progress: ProgressReporter;
  #stop = new AbortController();
  #shown: string | undefined;
  #download: { at: number; done: number } | undefined;
  #pollMs: number;
  #now: () => number;
  #afterReady: FollowPullOptions["afterReady"];

  constructor(client: SynapseClient, plan: PullPlan, io: CliIO, options: FollowPullOptions) {
    this.#client = client;
    this.#plan = plan;
    this.#io = io;
    this.#json = options.json ?? false;
    this.#pollMs = options.pollMs ?? 200;
    this.#now = options.now ?? Date.now;
    this.#afterReady = options.afterReady;
    this.#progress = new ProgressReporter({
      mode: this.#json ? "off" : options.progress ?? "lines",
      unit: "bytes",
      line: io.err,
      now: this.#now,
    });
  }

  async run(first: JobView): Promise<number> {
    try {
      using _interrupt = stopOnInterrupt(this.#io, this.#stop);
      return await this.#follow(first);
    } finally {
      this.#progress.finish();
    }
  }

  async #follow(first: JobView): Promise<number> {
    let job = first;
    for (;;) {
      this.#show(job);
      if (JOB_ENDED.has(job.state)) break;
      if (!(await this.#sleep())) return await this.#interrupted(job);
      const next = await this.#call<JobView>("model.status", { job_id: job.job_id });
      if ("exit" in next) return next.exit;
      job = next.value;
    }
    if (job.state === "failed" || job.state === "cancelled") return this.#failed(job, undefined);
    // A catalog download ends `committed`; the model then loads under its catalog id.
    const modelId = job.model_id ?? job.catalog_id;
    if (modelId === null || modelId === undefined) return this.#failed(job, undefined);
    for (;;) {
      const status = await this.#call<ModelStatus>("model.status", { model_id: modelId });
      if ("exit" in status) {
        // The load may have failed and left no model: the job says why.
        const again = await this.#call<JobView>("model.status", { job_id: job.job_id });
        if (!("exit" in again) && again.value.state === "failed") {
          return this.#failed(again.value, undefined);
        }
        return status.exit;
      }
      const s = status.value;
      // Loaded: ready, or `not_certified` (it refuses until a probe certifies it; the
      // certification step after the `ready:` line says so, or probes it with --probe).
      if (s.state === "ready" || s.state === "not_certified") return await this.#ready(job, s);
      if (s.state === "failed" || s.state === "quarantined") return this.#failed(job, s);
      if (!(await this.#sleep())) return await this.#interrupted(job);
      const again = await this.#call<JobView>("model.status", { job_id: job.job_id });
      if ("exit" in again) return again.exit;
      job = again.value;
      if (job.state === "failed") return this.#failed(job, undefined);
    }
  }

  /** Calls one op; a refusal is printed and becomes the exit code. */
  async #call<T>(method: string, params: unknown): Promise<{ value: T } | { exit: number }> {
    const outcome = await this.#client.call(method, params);
    if (outcome.kind !== "result") {
      return { exit: refused(outcome, this.#io, this.#json, this.#plan) };
    }
    return { value: (outcome.body as { result: T }).result };
  }

  /** Waits one poll interval; false when Ctrl-C came. */
  async #sleep(): Promise<boolean> {
    const signal = this.#stop.signal;
    if (signal.aborted) return false;
    await sleep(this.#pollMs, signal, "resolve");
    return !signal.aborted;
  }

  /** Draws a job's phase and bytes. */
  #show(job: JobView): void {
    const now = this.#now();
    if (job.state === "downloading") {
      if (this.#shown !== "downloading") {
        this.#progress.note(`downloading ${this.#what(job)}…`);
        this.#download = { at: now, done: job.bytes_done };
      }
      this.#shown = job.state;
      this.#progress.update(job.bytes_done, job.bytes_total);
      return;
    }
    if (job.state === this.#shown) return;
    if (this.#shown === "downloading" && this.#download !== undefined) {
      const secs = Math.max(0.001, (now - this.#download.at) / 1000);
      const got = Math.max(0, job.bytes_done - this.#download.done);
      const ended = job.state === "failed" || job.state === "cancelled";
      this.#progress.note(
        `${ended ? `download stopped after` : "downloaded"} ${formatBytes(got)} in ${
          secs < 60 ? `${secs.toFixed(1)}s` : formatDuration(secs)
        } (${formatRate(got / secs)})`,
      );
    }
    this.#shown = job.state;
    const phase: Record<string, string> = {
      resolving: `resolving ${this.#what(job)}…`,
      queued: `queued ${this.#what(job)}…`,
      validating: "validating…",
      verifying: "verifying…",
      loading: "loading…",
      committed: "loading…",
    };
    const line = phase[job.state];
    if (line !== undefined) this.#progress.note(line);
  }

  #what(job: JobView): string {
    const p = this.#plan.params;
    return String(job.catalog_id ?? p.url ?? p.path ?? job.model_id ?? "");
  }

  async #ready(first: JobView, s: ModelStatus): Promise<number> {
    this.#progress.finish();
    // The job's last word (a catalog job's notes come once its model has loaded).
    const last = await this.#client.call("model.status", { job_id: first.job_id });
    const job = last.kind === "result" ? (last.body as { result: JobView }).result : first;
    if (this.#json) {
      const after = await this.#afterReady?.(s.model_id);
      this.#io.out(JSON.stringify({ job, model: s, ...after?.json }, null, 2));
      return after?.code || cliExitFor("result");
    }
    for (const line of pullReadyLines(job, s)) this.#io.err(line);
    // Loaded but refusing until a probe certifies its lane (config certification: "require"):
    // the certification step below says what to run, or probes it with --probe.
    this.#io.out(
      s.state === "not_certified"
        ? `loaded: ${s.model_id}  ${s.fingerprint ?? "-"}  (not certified)`
        : `ready: ${s.model_id}  ${s.fingerprint ?? "-"}`,
    );
    const after = await this.#afterReady?.(s.model_id);
    return after?.code || cliExitFor("result");
  }

  #failed(job: JobView, s: ModelStatus | undefined): number {
    this.#progress.finish();
    if (this.#json) {
      this.#io.out(JSON.stringify({ job, model: s ?? null }, null, 2));
      return cliExitFor("semantic");
    }
    const e: WireErrorLike = job.error ??
      (s?.error?.code !== undefined
        ? { code: s.error.code, message: s.error.message ?? s.state }
        : {
          code: job.state === "cancelled" ? "cancelled" : "unknown",
          message: `job ${job.state}`,
        });
    const what = s === undefined
      ? `job ${job.job_id} ${job.state}`
      : `model ${s.model_id} ${s.state} after job ${job.job_id}`;
    this.#io.err(`error: ${e.code}: ${e.message} (${what})`);
    const hint = pullFailureHint(e, this.#plan.kind);
    if (hint !== undefined) this.#io.err(hint);
    return cliExitFor("semantic");
  }

  /** Ctrl-C: cancels the job (the server keeps no partial download: tmp/ is clean once it ends). */
  async #interrupted(job: JobView): Promise<number> {
    this.#progress.finish();
    const outcome = await this.#client.call("models.download.cancel", { job_id: job.job_id });
    const after = outcome.kind === "result" ? (outcome.body as { result: JobView }).result : job;
    if (this.#json) this.#io.out(JSON.stringify({ job: after, model: null }, null, 2));
    else {
      const got = after.bytes_total === null
        ? formatBytes(after.bytes_done)
        : `${formatBytes(after.bytes_done)} of ${formatBytes(after.bytes_total)}`;
      this.#io.err(
        `interrupted: cancelled job ${job.job_id} (${after.state}, ${got} downloaded); nothing of it is kept, so the same pull starts over`,
      );
      if (outcome.kind !== "result") reportRefusal(outcome, this.#io, false);
    }
    return EXIT_INTERRUPTED;
  }
}
