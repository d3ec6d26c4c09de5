/**
 * Event-loop health of the HTTP door under heavy tokenization (field report F21): `/health`
 * latency beside one 50 MiB `embed.query` and beside 16 concurrent 64-item `embed.batch`
 * clients, and how long an `embed.query` with `max_queue_ms: 5` takes to come back under that
 * load (refused or served).
 *
 *   deno task bench:http-load [--quick] [--url http://127.0.0.1:PORT [--pid PID]] [--model ID]
 *
 * Only the public HTTP surface is used, so the numbers compare builds before and after a change
 * inside the server. Without `--url` it starts `./ck-synapse serve --http 127.0.0.1:0` on the
 * MiniLM-shaped encoder (fixtures/bench/minilm-shaped, `./scripts/setup --bench` builds it) with the
 * default config, so the 50 MiB body is under `http.max_body_bytes`, and also prints the
 * server's peak RSS (VmHWM) after each phase (with `--url`, give the server's `--pid` for it).
 *
 * Phases, each with `/health` polled back to back from one client:
 *   idle          nothing else running
 *   50MiB-refuse  one 50 MiB embed.query (sequence_too_long expected)
 *   50MiB-trunc   the same text with truncate: true (one vector expected)
 *   16x64-batch   16 clients each posting 64-item embed.batch calls (passages of up to 40
 *                 words, willing to queue: max_queue_ms 60000) in a loop, plus one
 *                 embed.query {max_queue_ms: 5} every 50 ms (its latency and outcome)
 *
 * @module
 */
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import { buildCorpus } from "./corpus.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url)).replace(/\/$/, "");
const MODEL_DIR = `${ROOT}/fixtures/bench/minilm-shaped`;

const { values: args } = parseArgs({
  args: Deno.args,
  options: {
    quick: { type: "boolean", default: false },
    url: { type: "string" },
    model: { type: "string", default: "minilm-shaped" },
    pid: { type: "string" },
  },
  strict: true,
});
const loadSeconds = args.quick ? 4 : 12;
const idleProbes = args.quick ? 100 : 400;

function percentile(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))] ?? NaN;
}

function maxOf(xs: number[]): number {
  return xs.length === 0 ? NaN : xs.reduce((a, b) => Math.max(a, b), -Infinity);
}

function fmt(ms: number): string {
  return Number.isNaN(ms) ? "-" : ms < 10 ? ms.toFixed(2) : ms.toFixed(0);
}

// ---------- server ----------
let url = args.url ?? "";
let child: Deno.ChildProcess | undefined;
let tmp: string | undefined;
if (url === "") {
  try {
    await Deno.stat(`${MODEL_DIR}/model.onnx`);
  } catch {
    console.error(`missing ${MODEL_DIR}: run ./scripts/setup --bench first`);
    Deno.exit(2);
  }
  tmp = await Deno.makeTempDir({ prefix: "synapse-http-load-" });
  const cfgPath = `${tmp}/synapse.jsonc`;
  await Deno.writeTextFile(
    cfgPath,
    JSON.stringify({
      preload_models: [{
        engine: "ort",
        model_path: `${MODEL_DIR}/model.onnx`,
        tokenizer_path: `${MODEL_DIR}/tokenizer.json`,
        config_path: `${MODEL_DIR}/config.json`,
        model_id: args.model,
      }],
    }),
  );
  child = new Deno.Command(`${ROOT}/ck-synapse`, {
    args: ["serve", "--http", "127.0.0.1:0"],
    env: {
      XDG_DATA_HOME: `${tmp}/data`,
      XDG_CONFIG_HOME: `${tmp}/config`,
      HOME: tmp,
      SYNAPSE_CONFIG_JSON: "",
      SYNAPSE_CONFIG_PATH: cfgPath,
    },
    stdout: "inherit",
    stderr: "piped",
  }).spawn();
  // "listening on …" comes on stderr with the log (one line per request at info): read it, then
  // keep draining so the child never blocks on a full pipe.
  const reader = child.stderr.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  while (!url) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`server exited before listening: ${buf}`);
    buf += value;
    url = buf.match(/listening on (http:\/\/\S+)/)?.[1] ?? "";
  }
  (async () => {
    while (!(await reader.read()).done) { /* drain */ }
  })();
}

/** Peak RSS of the server process in MiB, when it is our child on Linux. */
async function peakRssMiB(): Promise<string> {
  const pid = child?.pid ?? (args.pid === undefined ? undefined : Number(args.pid));
  if (pid === undefined || Deno.build.os !== "linux") return "-";
  try {
    // Deno reads /proc/<pid> only with --allow-all; `cat` needs just --allow-run.
    const out = await new Deno.Command("cat", { args: [`/proc/${pid}/status`] }).output();
    const status = new TextDecoder().decode(out.stdout);
    const kb = Number(status.match(/VmHWM:\s+(\d+)/)?.[1]);
    return Number.isFinite(kb) ? (kb / 1024).toFixed(0) : "-";
  } catch {
    return "-";
  }
}

// deno-lint-ignore no-explicit-any
async function post(method: string, body: string): Promise<{ ms: number; json: any }> {
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/ops/${method}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body,
  });
  const json = await res.json();
  return { ms: performance.now() - t0, json };
}

function outcomeOf(json: { result?: { error?: { code: string } } }): string {
  return json.result?.error?.code ?? (json.result ? "ok" : "channel_error");
}

/** Polls /health back to back until `until` resolves; returns the latencies. */
async function healthDuring(until: Promise<unknown>): Promise<number[]> {
  let done = false;
  until.finally(() => done = true).catch(() => {});
  const lat: number[] = [];
  do {
    const t0 = performance.now();
    const res = await fetch(`${url}/health`);
    await res.body?.cancel();
    lat.push(performance.now() - t0);
  } while (!done);
  return lat;
}

// Wait for the model.
for (let i = 0; i < 600; i++) {
  const { json } = await post("embed.query", JSON.stringify({ text: "warm up" }));
  if (!json.result?.error) break;
  await new Promise((r) => setTimeout(r, 100));
}

const rows: string[][] = [];
function row(phase: string, health: number[], extra: string): void {
  rows.push([
    phase,
    String(health.length),
    fmt(percentile(health, 0.5)),
    fmt(percentile(health, 0.99)),
    fmt(maxOf(health)),
    extra,
  ]);
}

// ---------- idle ----------
{
  const lat: number[] = [];
  for (let i = 0; i < idleProbes; i++) {
    const t0 = performance.now();
    const res = await fetch(`${url}/health`);
    await res.body?.cancel();
    lat.push(performance.now() - t0);
  }
  row("idle", lat, `peak RSS ${await peakRssMiB()} MiB`);
}

// ---------- one 50 MiB embed.query ----------
const corpus = await buildCorpus({ root: ROOT, size: 4000 });
const prose = corpus.join(" ");
const big = prose.repeat(Math.ceil(50 * 2 ** 20 / prose.length)).slice(0, 50 * 2 ** 20);
for (const truncate of [false, true]) {
  const body = JSON.stringify({ text: big, truncate });
  const req = post("embed.query", body);
  const health = await healthDuring(req);
  const { ms, json } = await req;
  row(
    truncate ? "50MiB-trunc" : "50MiB-refuse",
    health,
    `request ${fmt(ms)} ms → ${outcomeOf(json)}; peak RSS ${await peakRssMiB()} MiB`,
  );
}

// ---------- 16 clients × 64-item embed.batch, plus max_queue_ms: 5 probes ----------
{
  const deadline = performance.now() + loadSeconds * 1000;
  let batches = 0;
  const batchLat: number[] = [];
  const batchOutcomes = new Map<string, number>();
  const clients = Array.from({ length: 16 }, async (_, c) => {
    let k = c * 64;
    while (performance.now() < deadline) {
      // Passages of up to 40 words keep a batch under inline.max_tokens (served inline).
      const texts = Array.from(
        { length: 64 },
        () => corpus[k++ % corpus.length]!.split(" ").slice(0, 40).join(" "),
      );
      const { ms, json } = await post(
        "embed.batch",
        JSON.stringify({ texts, truncate: true, max_queue_ms: 60_000, deadline_ms: 120_000 }),
      );
      const outcome = json.result?.item_errors ? "ok_with_item_errors" : outcomeOf(json);
      batchOutcomes.set(outcome, (batchOutcomes.get(outcome) ?? 0) + 1);
      if (json.result?.vectors) {
        batches++;
        batchLat.push(ms);
      }
    }
  });
  const probes: { ms: number; outcome: string }[] = [];
  const prober = (async () => {
    await new Promise((r) => setTimeout(r, 500)); // let the load build up
    while (performance.now() < deadline) {
      const { ms, json } = await post(
        "embed.query",
        JSON.stringify({ text: "is this refused quickly", max_queue_ms: 5 }),
      );
      probes.push({ ms, outcome: outcomeOf(json) });
      await new Promise((r) => setTimeout(r, 50));
    }
  })();
  const all = Promise.all([...clients, prober]);
  const health = await healthDuring(all);
  await all;
  const refused = probes.filter((p) => p.outcome !== "ok");
  const served = probes.filter((p) => p.outcome === "ok");
  const codes = [...new Set(refused.map((p) => p.outcome))].join("/") || "none";
  row(
    "16x64-batch",
    health,
    `${(batches * 64 / loadSeconds).toFixed(0)} items/s, batch p50 ${
      fmt(percentile(batchLat, 0.5))
    } ms (${
      [...batchOutcomes].map(([k, n]) => `${n} ${k}`).join(", ")
    }); peak RSS ${await peakRssMiB()} MiB`,
  );
  rows.push([
    "  max_queue_ms:5",
    String(probes.length),
    fmt(percentile(refused.map((p) => p.ms), 0.5)),
    fmt(percentile(refused.map((p) => p.ms), 0.99)),
    fmt(maxOf(refused.map((p) => p.ms))),
    `${refused.length} refused (${codes}), ${served.length} served (p50 ${
      fmt(percentile(served.map((p) => p.ms), 0.5))
    } ms)`,
  ]);
}

console.log(`\nHTTP door under load (${url})`);
console.log(
  ["phase", "n", "p50 ms", "p99 ms", "max ms", ""].map((h, i) =>
    i === 0 ? h.padEnd(16) : h.padStart(i === 5 ? 2 : 7)
  ).join(" "),
);
for (const r of rows) {
  console.log(
    r.map((c, i) => i === 0 ? c.padEnd(16) : i === 5 ? ` ${c}` : c.padStart(7)).join(" "),
  );
}
console.log("(n: /health probes; the max_queue_ms row: latency of the refused probes)");

if (child !== undefined) {
  child.kill("SIGTERM");
  await child.status;
}
if (tmp !== undefined) await Deno.remove(tmp, { recursive: true });
