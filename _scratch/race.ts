import { WorkerConnection } from "../lib/workers/host.ts";
import { resolveLlamaWorkerLaunch } from "../lib/engines/llama/launch.ts";
const dir = await Deno.makeTempDir({ dir: "/tmp", prefix: "syn" });
const counts: Record<string, number> = {};
const flag = Deno.args;
const starts = await Promise.all(Array.from({length: 2}, (_, i) => WorkerConnection.start({ engine: "llama.cpp-worker", workerId: "w"+i, runtimeDir: dir, launch: resolveLlamaWorkerLaunch({ extraArgs: flag, env: () => undefined }) })));
for (let round = 0; round < 2; round++) {
await Promise.all(starts.map(async (c) => {
  try {
  if (flag.includes("--test-abort-after")) await c.request({ type: "PING", req_id: 1 }, undefined, 5000); await c.request({ type: "PING", req_id: 2 }, undefined, 5000); } catch (e) { const r = (e as any).details.reason + ":" + /abort/.test((e as any).details.log_tail); counts[r] = (counts[r] ?? 0) + 1; }
  await c.settled();
}));
}
console.log(flag.join(" "), counts);
