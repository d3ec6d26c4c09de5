import { WorkerConnection } from "/work/main/lib/workers/host.ts";
import { resolveLlamaWorkerLaunch } from "/work/main/lib/engines/llama/launch.ts";
const dir = await Deno.makeTempDir({ dir: "/tmp", prefix: "syn" });
for (const extra of [[], ["--test-abort-after", "1"]]) {
  const t0 = performance.now();
  const c = await WorkerConnection.start({ engine: "llama.cpp-worker", workerId: "w", runtimeDir: dir, launch: resolveLlamaWorkerLaunch({ extraArgs: extra }) });
  console.log("start ms", performance.now() - t0, c.pid, c.hello);
  console.log(await c.request({ type: "PING", req_id: 1 }, undefined, 5000));
  try { console.log(await c.request({ type: "PING", req_id: 2 }, undefined, 5000)); } catch (e) { console.log("err", e); }
  await c.settled();
  console.log("dead", c.dead?.details);
  await c.shutdown();
}
