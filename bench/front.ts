/**
 * What the HTTP door's TCP front (lib/doors/http/_front.ts: timeouts, half-close, hang-up detection)
 * costs per request: the same instance served twice in one process, once on loopback TCP
 * (through the front, relayed to `Deno.serve` on a private unix socket) and once on the owner's
 * unix socket door (`Deno.serve` directly), each called over one kept-alive connection with a
 * minimal HTTP/1.1 client, alternating the two paths request by request so machine noise falls
 * on both alike.
 *
 *   deno task bench:front [--quick]
 *
 * Prints p50 and p99 per path and route, the front's added p50 in ms, and for `embed.query` over
 * `/v1/ops/embed.query` and `/v1/embeddings` what the whole HTTP door adds over the same call made
 * in-process (`Synapse.call` plus the JSON of its answer), alternated with the HTTP calls (ratios
 * of one run; never compare absolute times across runs).
 *
 * @module
 */
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import { loadConfig } from "../lib/config/loader.ts";
import { serveHttp } from "../lib/doors/http/server.ts";
import { createSynapse } from "../lib/synapse.ts";

const ROOT = fileURLToPath(new URL("..", import.meta.url)).replace(/\/$/, "");
const MODELS = `${ROOT}/fixtures/models`;

const { values: args } = parseArgs({
  args: Deno.args,
  options: { quick: { type: "boolean", default: false } },
  strict: true,
});
const N = args.quick ? 300 : 2000;

const dir = await Deno.makeTempDir({ prefix: "synapse-bench-front-" });
const env = {
  XDG_DATA_HOME: `${dir}/data`,
  XDG_CONFIG_HOME: `${dir}/config`,
  HOME: dir,
  SYNAPSE_WORKER_RUNTIME_DIR: `${dir}/run`,
  SYNAPSE_CONFIG_JSON: JSON.stringify({
    preload_models: [{
      engine: "ort",
      model_path: `${MODELS}/synapse-tiny-embed/model.onnx`,
      tokenizer_path: `${MODELS}/synapse-tiny-embed/tokenizer.json`,
      config_path: `${MODELS}/synapse-tiny-embed/config.json`,
      model_id: "embed",
    }],
  }),
};
for (const [k, v] of Object.entries(env)) Deno.env.set(k, v);
const { config } = loadConfig({ env, cwd: dir });
const synapse = await createSynapse({ config, env, log: () => {} });
const tcp = serveHttp(synapse, { port: 0 });
await Deno.mkdir(`${dir}/sock`, { mode: 0o700 });
const unixPath = `${dir}/sock/door.sock`;
const unix = serveHttp(synapse, { path: unixPath });

/** One kept-alive HTTP/1.1 connection; `call` sends a request and reads one whole answer. */
class Client {
  #conn: Deno.Conn;
  #buf = new Uint8Array(0);
  #enc = new TextEncoder();
  #dec = new TextDecoder();
  constructor(conn: Deno.Conn) {
    this.#conn = conn;
  }
  async call(method: string, path: string, body?: string): Promise<number> {
    const b = body === undefined ? "" : body;
    const head = `${method} ${path} HTTP/1.1\r\nhost: localhost\r\n` +
      (body === undefined
        ? ""
        : `content-type: application/json\r\ncontent-length: ${this.#enc.encode(b).length}\r\n`) +
      "\r\n";
    await this.#write(this.#enc.encode(head + b));
    // Head, then a Content-Length body (the door answers these routes with a length).
    let end: number;
    while ((end = indexOfCrlfCrlf(this.#buf)) < 0) await this.#fill();
    const headText = this.#dec.decode(this.#buf.subarray(0, end));
    const status = Number(headText.split(" ")[1]);
    const m = headText.match(/content-length:\s*(\d+)/i);
    if (m === null) throw new Error(`no content-length in answer: ${headText}`);
    const total = end + 4 + Number(m[1]);
    while (this.#buf.length < total) await this.#fill();
    this.#buf = this.#buf.slice(total);
    return status;
  }
  async #write(bytes: Uint8Array): Promise<void> {
    let off = 0;
    while (off < bytes.length) off += await this.#conn.write(bytes.subarray(off));
  }
  async #fill(): Promise<void> {
    const chunk = new Uint8Array(64 * 1024);
    const n = await this.#conn.read(chunk);
    if (n === null) throw new Error("connection closed");
    const next = new Uint8Array(this.#buf.length + n);
    next.set(this.#buf);
    next.set(chunk.subarray(0, n), this.#buf.length);
    this.#buf = next;
  }
  close(): void {
    this.#conn.close();
  }
}

function indexOfCrlfCrlf(b: Uint8Array): number {
  for (let i = 0; i + 3 < b.length; i++) {
    if (b[i] === 13 && b[i + 1] === 10 && b[i + 2] === 13 && b[i + 3] === 10) return i;
  }
  return -1;
}

function quantile(xs: number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
}

const viaFront = new Client(await Deno.connect({ hostname: "127.0.0.1", port: tcp.port }));
const direct = new Client(await Deno.connect({ transport: "unix", path: unixPath }));
/** A route: its name, path, body, and the in-process call it maps to (compared when given). */
const routes: Array<[string, string, string | undefined, [string, unknown] | undefined]> = [
  ["GET /health", "/health", undefined, undefined],
  [
    "embed.query",
    "/v1/ops/embed.query",
    JSON.stringify({ text: "a short query about vectors" }),
    ["embed.query", { text: "a short query about vectors" }],
  ],
  [
    "/v1/embeddings",
    "/v1/embeddings",
    JSON.stringify({ input: "a short query about vectors", model: "embed" }),
    ["embed.query", { text: "a short query about vectors" }],
  ],
];
type Path = "front" | "direct" | "in-process";
console.log(`bench:front — ${N} requests per path and route, alternating, one connection each`);
console.log("route          path        p50 ms   p99 ms");
for (const [name, path, body, op] of routes) {
  const method = body === undefined ? "GET" : "POST";
  const t: Record<Path, number[]> = { front: [], direct: [], "in-process": [] };
  const once = async (key: Path): Promise<number> => {
    if (key === "front") return await viaFront.call(method, path, body);
    if (key === "direct") return await direct.call(method, path, body);
    // In-process: Synapse.call and the JSON a door would send, no HTTP.
    const o = await synapse.call(op![0], op![1]);
    JSON.stringify(o.body);
    return o.kind === "result" ? 200 : 500;
  };
  const paths: Path[] = op === undefined ? ["front", "direct"] : ["front", "direct", "in-process"];
  for (let i = 0; i < 50; i++) for (const key of paths) await once(key); // warm-up
  for (let i = 0; i < N; i++) {
    // Rotate which path goes first, so none always follows another.
    for (let k = 0; k < paths.length; k++) {
      const key = paths[(i + k) % paths.length]!;
      const t0 = performance.now();
      const status = await once(key);
      t[key].push(performance.now() - t0);
      if (status !== 200) throw new Error(`${name} on ${key} answered ${status}`);
    }
  }
  for (const key of paths) {
    console.log(
      `${name.padEnd(14)} ${key.padEnd(10)} ${quantile(t[key], 0.5).toFixed(3).padStart(7)}  ${
        quantile(t[key], 0.99).toFixed(3).padStart(7)
      }`,
    );
  }
  const added = quantile(t.front, 0.5) - quantile(t.direct, 0.5);
  console.log(
    `${name.padEnd(14)} front adds ${added.toFixed(3)} ms at p50 (×${
      (quantile(t.front, 0.5) / quantile(t.direct, 0.5)).toFixed(2)
    })`,
  );
  if (op !== undefined) {
    const door = quantile(t.front, 0.5) - quantile(t["in-process"], 0.5);
    console.log(
      `${name.padEnd(14)} HTTP door (TCP front) adds ${
        door.toFixed(3)
      } ms at p50 over the in-process call (×${
        (quantile(t.front, 0.5) / quantile(t["in-process"], 0.5)).toFixed(2)
      })`,
    );
  }
}
viaFront.close();
direct.close();
await tcp.shutdown();
await unix.shutdown();
await synapse.dispose();
await Deno.remove(dir, { recursive: true });
