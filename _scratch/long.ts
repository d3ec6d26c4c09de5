import { WorkerConnection } from "../lib/workers/host.ts";
import { resolveLlamaWorkerLaunch } from "../lib/engines/llama/launch.ts";
const dir = await Deno.makeTempDir({ dir: "/tmp", prefix: "syn" });
try {
await WorkerConnection.start({ engine: "llama.cpp-worker", workerId: "w", runtimeDir: dir + "/" + "x".repeat(100), launch: resolveLlamaWorkerLaunch({ env: () => undefined }) });
} catch (e) { console.log(e); }
