/**
 * The pure parts of `pull`, `ps`, `rm`, `models catalog` and `cache gc`: byte and rate
 * formatting, the download progress line, what `pull TARGET` calls, the tables, the hints.
 */
import assert from "node:assert/strict";
import {
  formatBytes,
  formatBytesProgress,
  formatRate,
  ProgressReporter,
} from "../../lib/cli/_progress.ts";
import { formatAgo, formatTable } from "../../lib/cli/_table.ts";
import {
  followPull,
  planPull,
  pullFailureHint,
  type PullJob,
  pullReadyLines,
} from "../../lib/cli/commands/pull.ts";
import type { ClientOutcome, SynapseClient } from "../../lib/cli/client.ts";
import type { CliIO } from "../../lib/cli/_command.ts";
import { psTable } from "../../lib/cli/commands/ps.ts";
import { catalogTable } from "../../lib/cli/commands/models.ts";
import { gcLines } from "../../lib/cli/commands/cache.ts";
import { holdersLine } from "../../lib/cli/commands/rm.ts";
import { UsageError } from "../../lib/cli/_command.ts";
import { MODELS } from "../_helpers.ts";

const MIB = 1024 * 1024;
const H = "a".repeat(64);

Deno.test("formatBytes() uses binary units with one decimal, two from a GiB", () => {
  assert.equal(formatBytes(0), "0 B");
  assert.equal(formatBytes(1023), "1023 B");
  assert.equal(formatBytes(1024), "1.0 KiB");
  assert.equal(formatBytes(1536), "1.5 KiB");
  assert.equal(formatBytes(312.4 * MIB), "312.4 MiB");
  assert.equal(formatBytes(1.21 * 1024 * MIB), "1.21 GiB");
  assert.equal(formatBytes(-5), "0 B");
  assert.equal(formatBytes(NaN), "0 B");
  assert.equal(formatRate(21.3 * MIB), "21.3 MiB/s");
});

Deno.test("formatBytesProgress() shows bytes done/total, percent, rate and ETA", () => {
  assert.equal(
    formatBytesProgress({ done: 312.4 * MIB, total: 639.2 * MIB, rate: 21.3 * MIB }, 10),
    "[#####.....]  312.4 MiB / 639.2 MiB  48%  21.3 MiB/s  ETA 16s",
  );
  assert.equal(
    formatBytesProgress({ done: 0, total: 2048 }, 0),
    "0 B / 2.0 KiB  0%  -- /s  ETA --",
  );
  // No total known: no bar, percentage or ETA.
  assert.equal(
    formatBytesProgress({ done: 3 * MIB, total: null, rate: MIB }, 10),
    "3.0 MiB  1.0 MiB/s",
  );
  assert.equal(
    formatBytesProgress({ done: 5, total: 0 }, 4),
    "[####]  5 B / 0 B  100%  -- /s  ETA --",
  );
});

Deno.test("ProgressReporter in bytes lines mode prints a progress line at most every lineEveryMs, and notes", () => {
  let t = 0;
  const lines: string[] = [];
  const p = new ProgressReporter({
    mode: "lines",
    unit: "bytes",
    line: (s) => lines.push(s),
    now: () => t,
    lineEveryMs: 2000,
  });
  p.update(0, 4 * MIB);
  t = 1000;
  p.update(MIB, 4 * MIB); // too soon
  t = 2000;
  p.update(2 * MIB, 4 * MIB);
  p.note("verifying…");
  assert.deepEqual(lines, [
    "progress: 2.0 MiB / 4.0 MiB  50%  1.0 MiB/s  ETA 2s",
    "verifying…",
  ]);
  const off = new ProgressReporter({ mode: "off", line: (s) => lines.push(s) });
  off.update(1, 2);
  off.note("x");
  assert.equal(lines.length, 2);
});

Deno.test("formatAgo() says never, seconds, minutes, hours, days", () => {
  const now = 10_000_000;
  assert.equal(formatAgo(null, now), "never");
  assert.equal(formatAgo(undefined, now), "never");
  assert.equal(formatAgo(now - 400, now), "just now");
  assert.equal(formatAgo(now - 42_000, now), "42s ago");
  assert.equal(formatAgo(now - 150_000, now), "2m ago");
  assert.equal(formatAgo(now - 3 * 3_600_000, now), "3h ago");
  assert.equal(formatAgo(now - 5 * 86_400_000 - 1, now), "5d ago");
  assert.deepEqual(formatTable(["A", "BB"], [["xyz", "1"], ["", "22"]]), [
    "A    BB",
    "xyz  1",
    "     22",
  ]);
});

Deno.test("planPull() maps a catalog id, a URL and a path to their calls", () => {
  assert.deepEqual(planPull("bge-small-en-v1.5", {}, "/"), {
    kind: "catalog",
    method: "models.download",
    params: { catalog_id: "bge-small-en-v1.5" },
  });
  assert.deepEqual(
    planPull("https://h.example/m.gguf", {
      sha256: H,
      tokenizer: "https://h.example/tokenizer.json",
      "tokenizer-sha256": H,
      "model-id": "m",
      engine: "llama",
      task: "generate",
      "no-pin": true,
    }, "/"),
    {
      kind: "url",
      method: "model.load",
      params: {
        url: "https://h.example/m.gguf",
        expected_digest: H,
        files: { tokenizer: { url: "https://h.example/tokenizer.json", sha256: H } },
        model_id: "m",
        engine: "llama",
        task: "generate",
        pin: false,
      },
    },
  );
  // A relative path is made absolute (a server's working directory is not the caller's).
  assert.deepEqual(
    planPull("synapse-tiny-embed/", { config: "synapse-tiny-embed/config.json" }, MODELS),
    {
      kind: "path",
      method: "model.load",
      params: {
        path: `${MODELS}/synapse-tiny-embed`,
        files: { config: `${MODELS}/synapse-tiny-embed/config.json` },
      },
    },
  );
  // A bare name of an existing .gguf file here is a path, not a catalog id.
  assert.equal(planPull("model.gguf", {}, `${MODELS}/synapse-tiny-llama`).kind, "path");
});

Deno.test("planPull() refuses what cannot work before any call, saying why", () => {
  const cases: [string, Parameters<typeof planPull>[1], RegExp][] = [
    ["ftp://h.example/m.gguf", {}, /only http:\/\/ and https:\/\/ URLs can be downloaded/],
    [
      "https://h.example/m.gguf",
      {},
      /give its SHA-256 with --sha256 H; unpinned downloads are refused/,
    ],
    [
      "https://h.example/m.gguf",
      { sha256: H, tokenizer: "https://h.example/t.json" },
      /--tokenizer-sha256/,
    ],
    [
      "https://h.example/m.gguf",
      { sha256: H, config: `${MODELS}/synapse-tiny-embed/config.json` },
      /local --config file/,
    ],
    [
      `${MODELS}/synapse-tiny-embed`,
      { tokenizer: "https://h.example/t.json" },
      /give a local tokenizer file/,
    ],
    [`${MODELS}/synapse-tiny-embed`, { "config-sha256": H }, /--config-sha256 without --config/],
    ["./no-such-dir", {}, /no such file or directory \(a catalog id has no '\/'/],
    ["bge-small-en-v1.5", { sha256: H }, /catalog pins its files; --sha256 is for a URL or a PATH/],
    ["", {}, /empty/],
  ];
  for (const [target, flags, re] of cases) {
    assert.throws(() => planPull(target, flags, MODELS), (e: unknown) => {
      assert.ok(e instanceof UsageError, String(e));
      assert.match(e.message, re);
      return true;
    }, target);
  }
});

Deno.test("psTable() prints certification, size, RSS, lanes, last use and origin; - where unknown", () => {
  const now = 1_000_000;
  assert.deepEqual(
    psTable([
      {
        model_id: "m",
        task: "embed",
        engine: "ort",
        state: "ready",
        certification: { status: "reference" },
        artifact_bytes: 406041,
        lanes: ["ort-interactive", "ort-bulk"],
        last_used_ms: now - 120_000,
        origin: "runtime",
      },
      {
        model_id: "g",
        task: "generate",
        engine: "llama",
        state: "loading",
        worker_rss_bytes: 64 * MIB,
        lanes: [],
        last_used_ms: null,
        origin: "config",
        test_model: true,
      },
    ], now),
    [
      "MODEL  TASK      ENGINE  STATE    CERTIFIED  SIZE       RSS       LANES                     LAST USED  ORIGIN",
      "m      embed     ort     ready    reference  396.5 KiB  -         ort-interactive,ort-bulk  2m ago     runtime",
      "g      generate  llama   loading  -          -          64.0 MiB  -                         never      config (test model)",
    ],
  );
});

Deno.test("catalogTable() shows runnable backends, the reason of the others, size, installed, default", () => {
  assert.deepEqual(
    catalogTable([
      {
        id: "e",
        task: "embed",
        default_for_task: true,
        download_bytes: 90 * MIB,
        install_state: "installed",
        loaded_state: "ready",
        backends: [
          { backend: "ort", runnable: true, reason: null, installed: true },
          { backend: "llama", runnable: false, reason: "unverified_digest", installed: false },
        ],
      },
      {
        id: "g",
        task: "generate",
        default_for_task: false,
        download_bytes: null,
        install_state: "not_installed",
        backends: [],
        no_backend_reason: "no GGUF conversion pinned",
      },
    ]),
    [
      "ID  TASK      BACKENDS                        SIZE      INSTALLED    DEFAULT",
      "e   embed     ort, llama (unverified_digest)  90.0 MiB  yes (ready)  *",
      "g   generate  none (see below)                -         no",
      "",
      "g: no backend: no GGUF conversion pinned",
    ],
  );
});

Deno.test("gcLines() and holdersLine() say what gc did and who holds a model", () => {
  assert.deepEqual(
    gcLines([
      { digest: `sha256:${H}`, state: "deleted", freed_bytes: 2 * MIB },
      { digest: `sha256:${"b".repeat(64)}`, state: "kept", reason: "pinned" },
    ], 2 * MIB),
    [
      `DIGEST${" ".repeat(65)}  STATE    FREED    REASON`,
      `sha256:${H}  deleted  2.0 MiB`,
      `sha256:${"b".repeat(64)}  kept     -        pinned`,
      "freed 2.0 MiB",
    ],
  );
  assert.deepEqual(gcLines([], 0), ["nothing to collect", "freed 0 B"]);
  assert.equal(
    holdersLine({ holders: [{ kind: "request", count: 2 }, { kind: "job", job_id: "job_1" }] }),
    "held by: request (2), job job_1",
  );
  assert.equal(holdersLine({}), undefined);
});

Deno.test("pullFailureHint() points at the fix for each failure", () => {
  assert.match(
    pullFailureHint({ code: "download_failed", details: { reason: "storage_full" } }, "url")!,
    /disk holding the model cache is full.*cache gc/,
  );
  // A download is never capped by cache_max_bytes (only `cache gc` reads it): no hint to raise it.
  assert.doesNotMatch(
    pullFailureHint({ code: "download_failed", details: { reason: "storage_full" } }, "url")!,
    /cache_max_bytes/,
  );
  assert.match(
    pullFailureHint({ code: "download_failed", details: { reason: "network" } }, "url")!,
    /already retried 3 times/,
  );
  // Offline, a catalog pull names the mirror and a local copy; a 404 does not promise a resume.
  assert.match(
    pullFailureHint({ code: "download_failed", details: { reason: "network" } }, "catalog")!,
    /hf_endpoint to a mirror and add it to SYNAPSE_ALLOW_NET.*ck-synapse pull \.\/DIR/,
  );
  assert.doesNotMatch(
    pullFailureHint({ code: "download_failed", details: { reason: "http_status" } }, "url")!,
    /resume/,
  );
  assert.match(
    pullFailureHint({ code: "artifact_invalid" }, "path")!,
    /nothing was loaded; fix what the message names/,
  );
  assert.match(pullFailureHint({ code: "unknown_model" }, "catalog")!, /models catalog/);
  assert.match(
    pullFailureHint({ code: "backend_unavailable", details: { catalog_id: "x" } }, "catalog")!,
    /each backend's reason/,
  );
  assert.equal(pullFailureHint({ code: "backend_unavailable", details: {} }, "url"), undefined);
  assert.match(
    pullFailureHint({ code: "engine_crashed", safe_to_retry_same_request: true }, "url")!,
    /transient/,
  );
  assert.equal(pullFailureHint({ code: "invalid_request" }, "url"), undefined);
});

/**
 * A server script for `followPull`: each `model.status {job_id}` answers the next job state, each
 * `model.status {model_id}` the next model state; calls are recorded.
 */
class ScriptedPullClient implements SynapseClient {
  calls: { method: string; params: unknown }[] = [];
  #jobs: Partial<PullJob>[];
  #models: { state: string; error?: unknown }[];
  onCall?: (method: string) => void;

  constructor(jobs: Partial<PullJob>[], models: { state: string; error?: unknown }[] = []) {
    this.#jobs = jobs;
    this.#models = models;
  }

  call(method: string, params: unknown): Promise<ClientOutcome> {
    this.calls.push({ method, params });
    this.onCall?.(method);
    const p = params as { job_id?: string; model_id?: string };
    let result: unknown;
    if (method === "models.download.cancel") {
      result = { ...JOB, bytes_done: 40, bytes_total: 100, state: "cancelled" };
    } else if (p.job_id !== undefined) {
      result = { ...JOB, ...(this.#jobs.length > 1 ? this.#jobs.shift() : this.#jobs[0]) };
    } else {
      const m = this.#models.length > 1 ? this.#models.shift()! : this.#models[0]!;
      result = {
        model_id: p.model_id,
        fingerprint: "f".repeat(64),
        engine: "ort",
        task: "embed",
        ...m,
      };
    }
    return Promise.resolve({ kind: "result", body: { result } });
  }

  close(): Promise<void> {
    return Promise.resolve();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}

const JOB: PullJob = {
  job_id: "dl_1",
  kind: "models.download",
  state: "queued",
  model_id: "cat-model",
  catalog_id: "cat-model",
  bytes_done: 0,
  bytes_total: 100,
};

function capture(): CliIO & { stdout: string[]; stderr: string[] } {
  const stdout: string[] = [];
  const stderr: string[] = [];
  return { stdout, stderr, out: (l) => stdout.push(l), err: (l) => stderr.push(l) };
}

const CATALOG_PLAN = planPull("cat-model", {}, "/");

Deno.test("followPull() follows a catalog download through committed to the model being ready", async () => {
  const client = new ScriptedPullClient(
    [
      { state: "downloading", bytes_done: 50 },
      { state: "downloading", bytes_done: 100 },
      { state: "verifying", bytes_done: 100 },
      { state: "committed", bytes_done: 100 },
    ],
    [{ state: "loading" }, { state: "ready" }],
  );
  let t = 0;
  const io = capture();
  const code = await followPull(client, CATALOG_PLAN, { ...JOB }, io, {
    pollMs: 1,
    now: () => (t += 500),
  });
  assert.equal(code, 0, io.stderr.join("\n"));
  assert.deepEqual(io.stdout, [`ready: cat-model  ${"f".repeat(64)}`]);
  assert.equal(io.stderr[0], "queued cat-model…");
  assert.equal(io.stderr[1], "downloading cat-model…");
  assert.match(io.stderr.join("\n"), /\ndownloaded 50 B in \d+\.\ds \(/);
  // Then the task it serves, before the ready line.
  assert.deepEqual(io.stderr.slice(-3), ["verifying…", "loading…", "task: embed"]);
  const methods = client.calls.map((c) => `${c.method} ${JSON.stringify(c.params)}`);
  assert.ok(methods.includes(`model.status {"model_id":"cat-model"}`), methods.join("\n"));
});

Deno.test("F36: pullReadyLines() names the task and why, then the job's notes and heals", () => {
  assert.deepEqual(
    pullReadyLines({
      ...JOB,
      state: "ready",
      task: "generate",
      task_reason: "its GGUF architecture 'llama' is a decoder",
      notes: ["loaded as generate though …; pass --task embed to override"],
      healed: [{ file: "model", digest: "sha256:ab", from: "url" }],
    }, { task: "generate" }),
    [
      "task: generate (its GGUF architecture 'llama' is a decoder)",
      "note: loaded as generate though …; pass --task embed to override",
      "note: healed the damaged model blob sha256:ab from its recorded url",
    ],
  );
  assert.deepEqual(
    pullReadyLines({ ...JOB, task: "embed", task_reason: "asked" }, {
      task: "embed",
    }),
    ["task: embed (asked)"],
  );
});

Deno.test("followPull() prints the job's error and a hint for a failed download (exit 1)", async () => {
  const error = {
    code: "download_failed",
    message: "Cannot download model: HTTP 404",
    details: { reason: "http_status", http_status: 404 },
  };
  const client = new ScriptedPullClient([{ state: "failed", error } as Partial<PullJob>]);
  const io = capture();
  const code = await followPull(client, CATALOG_PLAN, { ...JOB }, io, { pollMs: 1 });
  assert.equal(code, 1);
  assert.deepEqual(io.stderr.slice(-2), [
    "error: download_failed: Cannot download model: HTTP 404 (job dl_1 failed)",
    "hint: the server refused the file (see its HTTP status); check the URL (for a catalog model: the hf_endpoint config key and its mirror)",
  ]);
  const json = capture();
  assert.equal(
    await followPull(
      new ScriptedPullClient([{ state: "failed", error } as Partial<PullJob>]),
      CATALOG_PLAN,
      { ...JOB },
      json,
      { json: true, pollMs: 1 },
    ),
    1,
  );
  assert.equal(JSON.parse(json.stdout.join("\n")).job.error.code, "download_failed");
  assert.deepEqual(json.stderr, []);
});

Deno.test("followPull() cancels the download on Ctrl-C and exits 130", async () => {
  const client = new ScriptedPullClient([{ state: "downloading", bytes_done: 40 }]);
  const abort = new AbortController();
  let polls = 0;
  client.onCall = (method) => {
    if (method === "model.status" && ++polls === 3) abort.abort();
  };
  const io = { ...capture(), signal: abort.signal };
  const code = await followPull(client, CATALOG_PLAN, { ...JOB }, io, { pollMs: 1 });
  assert.equal(code, 130);
  assert.deepEqual(client.calls.at(-1), {
    method: "models.download.cancel",
    params: { job_id: "dl_1" },
  });
  assert.match(
    io.stderr.at(-1)!,
    /^interrupted: cancelled job dl_1 \(cancelled, 40 B of 100 B downloaded\); nothing of it is kept/,
  );
});
