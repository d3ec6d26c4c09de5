/**
 * `embed.query` over the subc bus against the same call in-process and over HTTP, in one run:
 * requests/s, p50 and p99 for each door, one client at a time and with many in flight, and the
 * ratios (target: bus p50 at most 0.5 ms above in-process, and no worse than HTTP).
 *
 *   deno task bench:subc [--quick] [--tiny] [--requests N] [--concurrency C]
 *
 * The doors:
 *   in-process  `Synapse.call("embed.query", …)` on an instance in this process;
 *   http        `POST /v1/ops/embed.query` to `./ck-synapse serve --subc FILE --http 127.0.0.1:0`
 *               (keep-alive fetch from this process);
 *   bus         `SynapseBusClient.embedQuery` from this process → the test peer (the in-test subc
 *               daemon, tests/subc/_peer.ts, also in this process: route.open, the 32-credit
 *               window, relay) → the same `serve` process, which is the `synapse` module.
 * The http and bus doors reach one process and one model; the in-process instance loads the same
 * model in this process. Doors run one after another (never at once), each phase twice in
 * alternating order, so the two cores are not shared between doors.
 *
 * Model: the MiniLM-shaped encoder (fixtures/bench/minilm-shaped, built by `scripts/setup
 * --bench`), or with `--tiny` the 32-dim test model, whose inference is so short that the numbers
 * are nearly all transport.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import { loadConfig } from "../lib/config/loader.ts";
import { createSynapse } from "../lib/synapse.ts";
import { startPeer } from "../tests/subc/_peer.ts";
import { connectWhenReady } from "../tests/subc/_bus_ready.ts";
import { buildCorpus } from "./corpus.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url)).replace(/\/$/, "");

const { values: args } = parseArgs({
  args: Deno.args,
  options: {
    quick: { type: "boolean", default: false },
    tiny: { type: "boolean", default: false },
    requests: { type: "string" },
    concurrency: { type: "string", default: "32" },
  },
  strict: true,
});
const requests = Number(args.requests ?? (args.quick ? 300 : 2000));
const concurrency = Number(args.concurrency);
const modelDir = args.tiny
  ? `${ROOT}/fixtures/models/synapse-tiny-embed`
  : `${ROOT}/fixtures/bench/minilm-shaped`;
const modelId = args.tiny ? "tiny-embed" : "minilm-shaped";

try {
  await Deno.stat(`${modelDir}/model.onnx`);
} catch {
  console.error(`missing ${modelDir}: run ./scripts/setup --bench first`);
  Deno.exit(2);
}

const tmp = await Deno.makeTempDir({ prefix: "synapse-bench-subc-" });
const cfgPath = `${tmp}/synapse.jsonc`;
await Deno.writeTextFile(
  cfgPath,
  JSON.stringify({
    preload_models: [{
      engine: "ort",
      model_path: `${modelDir}/model.onnx`,
      tokenizer_path: `${modelDir}/tokenizer.json`,
      config_path: `${modelDir}/config.json`,
      model_id: modelId,
    }],
  }),
);

// Short queries of real text, the same sequence for every door.
const corpus = await buildCorpus({ root: ROOT, size: 2000 });
const queries = corpus.map((p) => p.split(" ").slice(0, 12).join(" ")).filter((q) => q !== "");
const queryAt = (i: number): string => queries[i % queries.length]!;

type Door = "in-process" | "http" | "bus";
type Call = (text: string) => Promise<void>;

// ---------- in-process ----------
const inEnv = {
  XDG_DATA_HOME: `${tmp}/in/data`,
  XDG_CONFIG_HOME: `${tmp}/in/config`,
  HOME: `${tmp}/in`,
  SYNAPSE_CONFIG_PATH: cfgPath,
};
const { config } = loadConfig({ env: inEnv, cwd: tmp });
const synapse = await createSynapse({ config, env: inEnv });
await synapse.modelsSettled;

// ---------- the module process, serving the bus and HTTP ----------
const peer = await startPeer({ dataHome: `${tmp}/peer` });
const child = new Deno.Command(`${ROOT}/ck-synapse`, {
  args: ["serve", ...peer.launchArgs(), "--http", "127.0.0.1:0", "--json"],
  env: {
    ...peer.launchEnv(),
    XDG_DATA_HOME: `${tmp}/module/data`,
    XDG_CONFIG_HOME: `${tmp}/module/config`,
    HOME: `${tmp}/module`,
    SYNAPSE_CONFIG_JSON: "",
    SYNAPSE_CONFIG_PATH: cfgPath,
    CK_LOG: "warn",
  },
  stdout: "piped",
  stderr: "inherit",
}).spawn();
const stdout = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
let url = "";
let buf = "";
while (url === "") {
  const { value, done } = await stdout.read();
  if (done) throw new Error(`serve --subc exited before it was ready: ${buf}`);
  buf += value;
  const line = buf.split("\n").find((l) => l.includes('"url"'));
  if (line !== undefined) url = JSON.parse(line).url;
}
(async () => {
  while (!(await stdout.read()).done) { /* drain */ }
})();
// route.open is retried while the module registers and initialises; then its model loads.
const bus = await connectWhenReady({ connectionFile: peer.connectionFile });

const calls: Record<Door, Call> = {
  "in-process": async (text) => {
    const o = await synapse.call("embed.query", { text });
    if (o.kind !== "result") throw new Error(`in-process: ${JSON.stringify(o.body)}`);
  },
  http: async (text) => {
    const res = await fetch(`${url}/v1/ops/embed.query`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ text }),
    });
    const json = await res.json();
    if (json.result?.vectors === undefined) throw new Error(`http: ${JSON.stringify(json)}`);
  },
  bus: async (text) => {
    await bus.embedQuery({ text });
  },
};

// Warm every door.
for (const door of Object.keys(calls) as Door[]) {
  for (let i = 0; i < 200; i++) await calls[door](queryAt(i));
}

interface Sample {
  lat: number[];
  ms: number;
  n: number;
}

/** `n` calls with `c` in flight; per-call latencies and the wall time. */
async function phase(door: Door, n: number, c: number, offset: number): Promise<Sample> {
  const lat: number[] = [];
  let next = 0;
  const t0 = performance.now();
  await Promise.all(Array.from({ length: c }, async () => {
    while (next < n) {
      const i = next++;
      const s = performance.now();
      await calls[door](queryAt(offset + i));
      lat.push(performance.now() - s);
    }
  }));
  return { lat, ms: performance.now() - t0, n };
}

function merge(a: Sample | undefined, b: Sample): Sample {
  return a === undefined ? b : { lat: [...a.lat, ...b.lat], ms: a.ms + b.ms, n: a.n + b.n };
}

function percentile(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))] ?? NaN;
}

const doors: Door[] = ["in-process", "http", "bus"];
const results: Record<string, Record<Door, Sample | undefined>> = {
  "1 client": { "in-process": undefined, http: undefined, bus: undefined },
  [`${concurrency} in flight`]: { "in-process": undefined, http: undefined, bus: undefined },
};
for (const [label, c] of [["1 client", 1], [`${concurrency} in flight`, concurrency]] as const) {
  // Two rounds in alternating order, so drift (thermal, other load) falls on every door.
  for (const order of [doors, doors.toReversed()]) {
    for (const door of order) {
      const half = Math.ceil(requests / 2);
      results[label]![door] = merge(results[label]![door], await phase(door, half, c, half));
    }
  }
}

await bus.close();
const peerStats = peer.stats();
child.kill("SIGTERM");
await child.status;
await peer.close();
await synapse.dispose();
await Deno.remove(tmp, { recursive: true });

// ---------- report ----------
const f = (ms: number): string => ms.toFixed(ms < 10 ? 3 : 1);
console.log(
  `embed.query, model ${modelId}, ${requests} requests per door and mode ` +
    `(${Deno.osRelease()}, ${navigator.hardwareConcurrency} cores)\n`,
);
console.log(
  ["mode", "door", "req/s", "p50 ms", "p99 ms"].map((h, i) => i < 2 ? h.padEnd(14) : h.padStart(9))
    .join(""),
);
const summary: Record<string, Record<Door, { rps: number; p50: number; p99: number }>> = {};
for (const [label, byDoor] of Object.entries(results)) {
  summary[label] = {} as Record<Door, { rps: number; p50: number; p99: number }>;
  for (const door of doors) {
    const s = byDoor[door]!;
    const row = {
      rps: s.n / (s.ms / 1000),
      p50: percentile(s.lat, 0.5),
      p99: percentile(s.lat, 0.99),
    };
    summary[label]![door] = row;
    console.log(
      label.padEnd(14) + door.padEnd(14) + row.rps.toFixed(0).padStart(9) +
        f(row.p50).padStart(9) + f(row.p99).padStart(9),
    );
  }
}
console.log("");
for (const [label, s] of Object.entries(summary)) {
  const overhead = s.bus.p50 - s["in-process"].p50;
  // The overhead target is per call, so it is judged one client at a time; with many in flight
  // latency is queueing, and the ratios say how the doors compare.
  const target = label === "1 client"
    ? ` (target ≤ 0.5: ${overhead <= 0.5 ? "met" : "MISSED"})`
    : "";
  console.log(
    `${label}: bus p50 − in-process p50 = ${f(overhead)} ms${target}; bus/http p50 ${
      (s.bus.p50 / s.http.p50).toFixed(2)
    } (no worse than HTTP: ${s.bus.p50 <= s.http.p50 ? "met" : "MISSED"}), p99 ${
      (s.bus.p99 / s.http.p99).toFixed(2)
    }; req/s bus/http ${(s.bus.rps / s.http.rps).toFixed(2)}, bus/in-process ${
      (s.bus.rps / s["in-process"].rps).toFixed(2)
    }`,
  );
}
console.log(
  `\npeer: ${peerStats.requestsForwarded} requests relayed, ${peerStats.creditWaits} waited for ` +
    `a credit, ${peerStats.creditsLeaked} credits leaked, ${peerStats.violations.length} violations`,
);
