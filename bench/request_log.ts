/**
 * What the request log costs and what it looks like: `./ck-synapse serve` on the test embedder,
 * once with `CK_LOG=warn` (no request lines) and once with `CK_LOG=info` (one line per request),
 * each answering the same sequential `embed.query` calls over HTTP; prints the latency of each,
 * the difference, and a request-log line as the server wrote it.
 *
 *   deno task bench:request-log [--quick]
 *
 * @module
 */
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("..", import.meta.url)).replace(/\/$/, "");

const { values: args } = parseArgs({
  args: Deno.args,
  options: { quick: { type: "boolean", default: false } },
  strict: true,
});
const requests = args.quick ? 300 : 2000;

function percentile(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))] ?? NaN;
}

interface Run {
  p50: number;
  p99: number;
  mean: number;
  /** Request lines the server wrote, and the last one. */
  lines: number;
  logLine: string | undefined;
}

async function run(level: string): Promise<Run> {
  const tmp = await Deno.makeTempDir({ prefix: "synapse-request-log-" });
  const child = new Deno.Command(`${ROOT}/ck-synapse`, {
    args: ["serve", "--http", "127.0.0.1:0"],
    env: {
      XDG_DATA_HOME: `${tmp}/data`,
      XDG_CONFIG_HOME: `${tmp}/config`,
      HOME: tmp,
      SYNAPSE_CONFIG_JSON: "",
      CK_LOG: level,
    },
    stdout: "inherit",
    stderr: "piped",
  }).spawn();
  const reader = child.stderr.pipeThrough(new TextDecoderStream()).getReader();
  let seen = "";
  let url = "";
  while (!url) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`server exited before listening: ${seen}`);
    seen += value;
    url = /listening on (http:\/\/\S+)/.exec(seen)?.[1] ?? "";
  }
  const drained = (async () => {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      seen += value;
    }
  })();
  try {
    for (const hungAt = Date.now() + 600_000;;) {
      const body = await (await fetch(`${url}/health`)).json();
      if (body.status === "ok") break;
      if (Date.now() > hungAt) throw new Error("model never became ready");
      await new Promise((r) => setTimeout(r, 50));
    }
    const call = async (text: string): Promise<void> => {
      const res = await fetch(`${url}/v1/ops/embed.query`, {
        method: "POST",
        body: JSON.stringify({ text }),
      });
      if (res.status !== 200) throw new Error(`${res.status}: ${await res.text()}`);
      await res.body?.cancel();
    };
    for (let i = 0; i < 50; i++) await call(`warm up ${i}`);
    const ms: number[] = [];
    for (let i = 0; i < requests; i++) {
      const t0 = performance.now();
      await call(`a short query number ${i} about caches`);
      ms.push(performance.now() - t0);
    }
    await drainedAfter(child, drained);
    const lines = seen.split("\n").filter((l) => / synapse\.http: request /.test(l));
    return {
      p50: percentile(ms, 0.5),
      p99: percentile(ms, 0.99),
      mean: ms.reduce((a, b) => a + b, 0) / ms.length,
      lines: lines.length,
      logLine: lines.at(-1),
    };
  } finally {
    try {
      child.kill("SIGTERM");
    } catch { /* already stopped */ }
    await child.status;
    await drained;
    await Deno.remove(tmp, { recursive: true });
  }
}

/** Stops the server and waits until all it wrote to stderr is read. */
async function drainedAfter(child: Deno.ChildProcess, drained: Promise<void>): Promise<void> {
  child.kill("SIGTERM");
  await child.status;
  await drained;
}

const warn = await run("warn");
const info = await run("info");
const f = (x: number) => x.toFixed(3);
console.log(`sequential embed.query over HTTP, ${requests} requests, test embedder`);
console.log(
  `CK_LOG=warn  ${warn.lines} request lines  p50 ${f(warn.p50)} ms  p99 ${f(warn.p99)} ms  mean ${
    f(warn.mean)
  } ms`,
);
console.log(
  `CK_LOG=info  ${info.lines} request lines  p50 ${f(info.p50)} ms  p99 ${f(info.p99)} ms  mean ${
    f(info.mean)
  } ms`,
);
console.log(`request log cost per request (mean): ${f(info.mean - warn.mean)} ms`);
console.log(`a request-log line:\n${info.logLine ?? "(none)"}`);
