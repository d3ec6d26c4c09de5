/**
 * What the remote lane (docs/remote.md) costs and how it scales, against fixed providers on
 * loopback (bench/_fixed_provider.ts: OpenAI-shaped `/v1/embeddings`, deterministic vectors).
 *
 *   deno task bench:remote [--quick] [--item-delay-ms 2] [--job-items 16000] [--parts a,b,c]
 *
 * (a) **Gateway overhead**: one provider in this process (no delay, 384 dims) reached three ways
 * with one short text, one request at a time, in interleaved rounds (the order rotated each
 * round) so machine noise falls on all alike: `direct` (`fetch` POST /v1/embeddings to the
 * provider, answer parsed), `in-process` (a gateway Synapse's `embed.batch` on its remote model,
 * `accept_declared: true`) and `http door` (`fetch` POST /v1/embeddings to the gateway's HTTP
 * door with `x-synapse-accept-declared: true`, answer parsed). Prints p50/p90 of each and the
 * overhead p50 (path p50 − direct p50) against the target ≤ 0.3 ms for the in-process path, then
 * the in-process call stage by stage (the marks of lib/log/stage_marks.ts, a separate block of
 * calls with the sink installed) for one text and for a batch of 16.
 *
 * (b) **Scale-out in simulation**: for N = 1, 2, 4, 8 providers (in a child process of their
 * own, each waiting `--item-delay-ms` (2) ms per input on a timer: time without CPU), one gateway
 * with N providers and N remote models (`remote0` … `remote{N-1}`, `max_concurrency` 8 each),
 * driven by 8×N concurrent clients each sending batches of 16 texts round-robin over the N
 * models; the same load is also sent straight to the providers (`direct`), the two paths
 * alternating in halves (ABBA).
 * Prints items/s, its ratio to N × the 1-provider throughput (target ≥ 0.9), the gateway/direct
 * ratio, this process's CPU (clients, gateway, tokenizer worker) and what each provider saw. This
 * drives the N lanes from 8×N client streams.
 *
 * (c) **One durable job spread over providers** (docs/remote.md "Spreading a job"): for N = 0, 1,
 * 2, 4, 8 a gateway serving the tiny embedder locally (`tiny`) and N remote lanes of kind
 * `synapse` on fixed providers in table mode (bench/_fixed_provider.ts: each reports the local
 * model's fingerprint and answers the local model's own vectors, computed first by a Synapse of
 * its own, waiting `--item-delay-ms` per input on a timer), runs one `embed.batch` job of
 * `--job-items` texts on `tiny` with `jobs.bulk_quantum_tokens` 512. Prints the job's items/s
 * (submit to `done`), the items the providers computed and their rate against N × the N = 1
 * providers' rate (target ≥ 0.9) and against their ceiling (2 quanta in flight per lane:
 * 2000 / delay items/s each), the local lane's share, and whether every page equals the N = 0
 * (local only) job's, vector for vector.
 *
 * `--parts a,b,c` runs only those parts.
 *
 * Ratios of one run; never compare absolute times across runs or machines.
 *
 * @module
 */
import { parseArgs } from "node:util";
import process from "node:process";
import { serveHttp } from "../lib/doors/http/server.ts";
import { nullLog } from "../lib/log/log.ts";
import { setStageSink } from "../lib/log/stage_marks.ts";
import type { Synapse } from "../lib/synapse.ts";
import { MODELS, preload, resultOf, startSynapse } from "../tests/_helpers.ts";
import { CANARY_TEXTS } from "../lib/engines/remote/canary.ts";
import { OFFLOAD_LOOPS_PER_LANE } from "../lib/ops/_durable_job.ts";
import { SanitizedTokenizer } from "../lib/tokenize/tokenizer.ts";
import type { TestSynapse } from "../tests/_helpers.ts";
import { spawnFixedProviders, startFixedProvider } from "./_fixed_provider.ts";

const { values: args } = parseArgs({
  args: Deno.args,
  options: {
    quick: { type: "boolean", default: false },
    "item-delay-ms": { type: "string", default: "2" },
    "job-items": { type: "string" },
    parts: { type: "string", default: "a,b,c" },
  },
  strict: true,
});
const QUICK = args.quick;
/** Part (a): rounds × requests per round per path, the warm-up per path, stage-block calls. */
const ROUNDS = 8;
const PER_ROUND = QUICK ? 15 : 50;
const WARMUP = QUICK ? 20 : 50;
const STAGE_CALLS = QUICK ? 100 : 300;
/** Part (b): provider counts, clients per provider, batches per client, texts per batch. */
const SCALE_NS = [1, 2, 4, 8];
const CLIENTS_PER_PROVIDER = 8;
const BATCHES = QUICK ? 10 : 40;
const BATCH_TEXTS = 16;
const ITEM_DELAY_MS = Number(args["item-delay-ms"]);
if (!(ITEM_DELAY_MS > 0)) throw new Error("--item-delay-ms takes a positive number of ms");
const MAX_CONCURRENCY = 8;
const DIMS = 384;
/** Distinct texts the clients of (b) draw from (the providers' caches hold them all). */
const TEXT_POOL = Array.from(
  { length: 1024 },
  (_, i) => `passage ${i} about remote lanes and the vectors they carry`,
);

const TOKENIZER = `${MODELS}/synapse-tiny-embed/tokenizer.json`;
const TEXT = "a short query about vectors";
const OVERHEAD_TARGET_MS = 0.3;
const PARTS = new Set(args.parts.split(","));
/** Part (c): job size, provider counts, the quantum cap. */
const JOB_ITEMS = Number(args["job-items"] ?? (QUICK ? 6000 : 16000));
const SPREAD_NS = [0, 1, 2, 4, 8];
const JOB_QUANTUM_TOKENS = 512;
const EMBED_DIR = `${MODELS}/synapse-tiny-embed`;
const SCALE_TARGET = 0.9;

function quantile(xs: number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
}

/** A gateway Synapse with one remote embed model per provider base URL, each ready. */
async function gateway(bases: string[], modelIds: string[]): Promise<TestSynapse> {
  const g = await startSynapse({
    remote_providers: bases.map((base_url, i) => ({
      id: `bench${i}`,
      kind: "openai",
      base_url,
      allow_loopback: true,
      max_concurrency: MAX_CONCURRENCY,
    })),
    preload_models: modelIds.map((model_id, i) => ({
      engine: "remote",
      provider: `bench${i}`,
      model: "fixed",
      model_id,
      task: "embed",
      tokenizer_path: TOKENIZER,
    })),
  }, { log: nullLog });
  try {
    for (const id of modelIds) await ready(g.syn, id);
  } catch (e) {
    await g[Symbol.asyncDispose]();
    throw e;
  }
  return g;
}

/** Waits until `model` is ready on `syn`; throws with its row when it failed. */
async function ready(syn: Synapse, model: string): Promise<void> {
  const until = performance.now() + 60_000;
  while (performance.now() < until) {
    const row = resultOf(await syn.call("models.list", {})).models.find((
      m: { model_id: string },
    ) => m.model_id === model);
    if (row !== undefined && row.state === "ready") return;
    if (row !== undefined && row.state !== "loading") {
      throw new Error(`model ${model} did not load: ${JSON.stringify(row).slice(0, 600)}`);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`model ${model} still loading after 60 s`);
}

function row(name: string, xs: number[], direct?: number): string {
  const p50 = quantile(xs, 0.5);
  const cols = `  ${name.padEnd(12)} ${p50.toFixed(3).padStart(8)} ${
    quantile(xs, 0.9).toFixed(3).padStart(8)
  }`;
  return direct === undefined ? cols : `${cols} ${(p50 - direct).toFixed(3).padStart(8)}`;
}

/** POSTs JSON and parses the answer; throws unless it is 200 with `dims`-wide embeddings. */
async function postEmbeddings(
  url: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<void> {
  const res = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
  const j = await res.json();
  if (res.status !== 200 || j?.data?.[0]?.embedding?.length !== DIMS) {
    throw new Error(`${url} answered ${res.status}: ${JSON.stringify(j).slice(0, 400)}`);
  }
}

// ---------------------------------------------------------------------------------------------
// (a) Gateway overhead.
// ---------------------------------------------------------------------------------------------
async function overhead(): Promise<void> {
  const provider = startFixedProvider({ dims: DIMS, itemDelayMs: 0 });
  const g = await gateway([provider.base], ["remote"]);
  const door = serveHttp(g.syn, { log: nullLog });
  const doorBase = `http://127.0.0.1:${door.port}`;
  try {
    type Path = "direct" | "in-process" | "http door";
    const paths: Path[] = ["direct", "in-process", "http door"];
    const embedBatch = async (texts: string[]): Promise<void> => {
      const o = await g.syn.call("embed.batch", { texts, model: "remote", accept_declared: true });
      if (resultOf(o).vectors.length !== texts.length) throw new Error("in-process: vector count");
    };
    const once = (key: Path): Promise<void> =>
      key === "direct"
        ? postEmbeddings(`${provider.base}/v1/embeddings`, { model: "fixed", input: [TEXT] })
        : key === "in-process"
        ? embedBatch([TEXT])
        : postEmbeddings(`${doorBase}/v1/embeddings`, { model: "remote", input: [TEXT] }, {
          "x-synapse-accept-declared": "true",
        });
    for (const key of paths) for (let i = 0; i < WARMUP; i++) await once(key);
    provider.reset();
    const t: Record<Path, number[]> = { direct: [], "in-process": [], "http door": [] };
    for (let r = 0; r < ROUNDS; r++) {
      for (let k = 0; k < paths.length; k++) {
        const key = paths[(r + k) % paths.length]!;
        for (let i = 0; i < PER_ROUND; i++) {
          const t0 = performance.now();
          await once(key);
          t[key].push(performance.now() - t0);
        }
      }
    }
    const n = ROUNDS * PER_ROUND;
    console.log(
      `(a) gateway overhead: ${n} sequential requests per path, one ${TEXT.length}-character text, ${DIMS} dims, provider without delay (${ROUNDS} interleaved rounds of ${PER_ROUND}, ${WARMUP} warm-up each)`,
    );
    console.log(
      `  ${"path".padEnd(12)} ${"p50 ms".padStart(8)} ${"p90 ms".padStart(8)} ${
        "+p50 ms".padStart(8)
      }`,
    );
    const d = quantile(t.direct, 0.5);
    console.log(row("direct", t.direct));
    console.log(row("in-process", t["in-process"], d));
    console.log(row("http door", t["http door"], d));
    const stats = {
      requests: provider.requests(),
      connections: provider.connections(),
      peak: provider.peakInFlight(),
    };
    const inProc = quantile(t["in-process"], 0.5) - d;
    const http = quantile(t["http door"], 0.5) - d;
    console.log(
      `  gateway overhead p50 (in-process embed.batch − direct): ${
        inProc.toFixed(3)
      } ms — target ≤ ${OVERHEAD_TARGET_MS} ms: ${
        inProc <= OVERHEAD_TARGET_MS ? "met" : "NOT met"
      }`,
    );
    console.log(
      `  gateway overhead p50 an HTTP client sees (gateway /v1/embeddings − direct): ${
        http.toFixed(3)
      } ms`,
    );
    console.log(
      `  provider: ${stats.requests} embeddings requests (${
        3 * n
      } expected), ${stats.connections} TCP connections (the bench's fetch and the gateway's pool: 2 when both keep alive), peak ${stats.peak} in flight`,
    );

    // Stage by stage, one text and a batch of 16 (a separate block: the sink costs a little).
    for (const size of [1, BATCH_TEXTS]) {
      const texts = Array.from({ length: size }, (_, i) => `${TEXT} ${i}`);
      const per = new Map<string, number[]>();
      const totals: number[] = [];
      const direct: number[] = [];
      let marks: [string, number][] = [];
      for (let i = 0; i < STAGE_CALLS + 20; i++) {
        let t0 = performance.now();
        await postEmbeddings(`${provider.base}/v1/embeddings`, { model: "fixed", input: texts });
        if (i >= 20) direct.push(performance.now() - t0);
        marks = [];
        setStageSink({ mark: (stage, at) => void marks.push([stage, at]), span: () => {} });
        t0 = performance.now();
        try {
          await embedBatch(texts);
        } finally {
          setStageSink(undefined);
        }
        if (i < 20) continue;
        totals.push(performance.now() - t0);
        let prev = t0;
        const got = new Map<string, number>();
        for (const [stage, at] of marks) {
          got.set(stage, (got.get(stage) ?? 0) + at - prev);
          prev = at;
        }
        for (const [stage, ms] of got) {
          if (!per.has(stage)) per.set(stage, []);
          per.get(stage)!.push(ms);
        }
      }
      const stages = [...per].map(([stage, xs]) => `${stage} ${quantile(xs, 0.5).toFixed(3)}`);
      console.log(
        `  in-process stages p50 ms, ${size} text${
          size === 1 ? "" : "s"
        } (${STAGE_CALLS} calls; collect = the provider request, direct p50 ${
          quantile(direct, 0.5).toFixed(3)
        }): ${stages.join(", ")}; total ${quantile(totals, 0.5).toFixed(3)}`,
      );
    }
  } finally {
    await door.shutdown();
    await g[Symbol.asyncDispose]();
    await provider.close();
  }
}

// ---------------------------------------------------------------------------------------------
// (b) Scale-out in simulation.
// ---------------------------------------------------------------------------------------------
type ScalePath = "direct" | "gateway";

interface ScaleResult {
  items: number;
  batches: number;
  seconds: number;
  refused: Map<string, number>;
  /** Process CPU seconds. */
  cpuSeconds: number;
}

interface ScaleRun {
  n: number;
  paths: Record<ScalePath, ScaleResult>;
  /** Per path, each provider's peak in flight, its requests and the TCP connections they used. */
  providers: Record<ScalePath, { peak: number; requests: number; connections: number }[]>;
}

/**
 * N delayed providers, a gateway over them, and 8×N clients, driven through the gateway and
 * directly (each provider's own `/v1/embeddings`, the same texts and round-robin) in alternating
 * halves: the direct path is what the machine and the providers' timers allow without a gateway.
 */
async function scaleOnce(n: number): Promise<ScaleRun> {
  const providers = await spawnFixedProviders(n, { dims: DIMS, itemDelayMs: ITEM_DELAY_MS });
  const models = providers.bases.map((_, i) => `remote${i}`);
  let g: TestSynapse | undefined;
  try {
    g = await gateway(providers.bases, models);
    const syn = g.syn;
    // Warm-up: every pool text once through each model (fills the providers' caches, so the
    // run costs them no vector computation, and warms the gateway's code paths), then the
    // providers' counters from zero.
    await Promise.all(
      models.flatMap((model) =>
        Array.from({ length: TEXT_POOL.length / 64 }, async (_, k) =>
          resultOf(
            await syn.call("embed.batch", {
              texts: TEXT_POOL.slice(k * 64, k * 64 + 64),
              model,
              accept_declared: true,
            }),
          ))
      ),
    );
    const clients = CLIENTS_PER_PROVIDER * n;
    const seen: ScaleRun["providers"] = {
      direct: models.map(() => ({ peak: 0, requests: 0, connections: 0 })),
      gateway: models.map(() => ({ peak: 0, requests: 0, connections: 0 })),
    };
    const paths = {} as Record<ScalePath, ScaleResult>;
    for (const path of ["direct", "gateway"] as const) {
      paths[path] = { items: 0, batches: 0, seconds: 0, refused: new Map(), cpuSeconds: 0 };
    }
    const drive = async (path: ScalePath, from: number, to: number): Promise<void> => {
      const r = paths[path];
      await providers.reset();
      const cpu0 = process.cpuUsage();
      const t0 = performance.now();
      await Promise.all(
        Array.from({ length: clients }, async (_, c) => {
          for (let b = from; b < to; b++) {
            const at = ((c * BATCHES + b) * BATCH_TEXTS) % TEXT_POOL.length;
            const texts = TEXT_POOL.slice(at, at + BATCH_TEXTS);
            const k = (c + b) % n;
            r.batches++;
            if (path === "direct") {
              await postEmbeddings(`${providers.bases[k]}/v1/embeddings`, {
                model: "fixed",
                input: texts,
              });
              r.items += texts.length;
              continue;
            }
            const o = await syn.call("embed.batch", {
              texts,
              model: models[k]!,
              accept_declared: true,
            });
            if (o.kind === "result") r.items += texts.length;
            else {
              // deno-lint-ignore no-explicit-any
              const body = o.body as any;
              const code = String(body?.result?.error?.code ?? body?.code ?? o.kind);
              r.refused.set(code, (r.refused.get(code) ?? 0) + 1);
            }
          }
        }),
      );
      r.seconds += (performance.now() - t0) / 1000;
      const cpu = process.cpuUsage(cpu0);
      r.cpuSeconds += (cpu.user + cpu.system) / 1e6;
      (await providers.stats()).forEach((st, i) => {
        const x = seen[path][i]!;
        x.peak = Math.max(x.peak, st.peakInFlight);
        x.requests += st.requests;
        x.connections = Math.max(x.connections, st.connections);
      });
    };
    // Halves, ABBA (direct, gateway, gateway, direct), so a slow spell falls on both alike.
    const half = Math.floor(BATCHES / 2);
    await drive("direct", 0, half);
    await drive("gateway", 0, half);
    await drive("gateway", half, BATCHES);
    await drive("direct", half, BATCHES);
    return { n, paths, providers: seen };
  } finally {
    await g?.[Symbol.asyncDispose]();
    await providers.close();
  }
}

async function scaleOut(): Promise<void> {
  const ideal = MAX_CONCURRENCY * 1000 / ITEM_DELAY_MS;
  console.log(
    `(b) scale-out in simulation: N providers (a child process; ${ITEM_DELAY_MS} ms per input on a timer, ${DIMS} dims), one gateway with N remote models (max_concurrency ${MAX_CONCURRENCY} each), ${CLIENTS_PER_PROVIDER}×N concurrent clients × ${BATCHES} batches of ${BATCH_TEXTS} texts, round-robin over the N models; the same load sent directly to the providers (no gateway), the two paths alternating in halves`,
  );
  console.log(
    "  (the N lanes are driven by 8×N separate client streams; one job spread over providers is part (c))",
  );
  console.log(
    `  a provider's own ceiling: ${MAX_CONCURRENCY} requests in flight × ${BATCH_TEXTS} items / ${
      ITEM_DELAY_MS * BATCH_TEXTS
    } ms = ${ideal.toFixed(0)} items/s`,
  );
  console.log(
    `  ${"N".padStart(2)} ${"path".padEnd(7)} ${"clients".padStart(7)} ${"items".padStart(6)} ${
      "s".padStart(6)
    } ${"items/s".padStart(8)} ${"vs N×(N=1)".padStart(10)} ${"vs ceiling".padStart(10)} ${
      "CPU".padStart(5)
    } ${"CPU ms/batch".padStart(12)}  refused`,
  );
  const base: Partial<Record<ScalePath, number>> = {};
  const ratios: [number, number, number][] = [];
  let last: ScaleRun | undefined;
  for (const n of SCALE_NS) {
    const run = await scaleOnce(n);
    last = run;
    const rates = {} as Record<ScalePath, number>;
    for (const path of ["direct", "gateway"] as const) {
      const r = run.paths[path];
      const rate = r.items / r.seconds;
      rates[path] = rate;
      base[path] ??= rate;
      const refused = r.refused.size === 0
        ? "0"
        : [...r.refused].map(([code, k]) => `${k} ${code}`).join(", ");
      console.log(
        `  ${String(n).padStart(2)} ${path.padEnd(7)} ${
          String(CLIENTS_PER_PROVIDER * n).padStart(7)
        } ${String(r.items).padStart(6)} ${r.seconds.toFixed(2).padStart(6)} ${
          rate.toFixed(0).padStart(8)
        } ${(rate / (n * base[path]!)).toFixed(2).padStart(10)} ${
          (rate / (n * ideal)).toFixed(2).padStart(10)
        } ${`${(r.cpuSeconds / r.seconds * 100).toFixed(0)}%`.padStart(5)} ${
          (r.cpuSeconds * 1000 / r.batches).toFixed(2).padStart(12)
        }  ${refused}`,
      );
    }
    ratios.push([n, rates.gateway / (n * base.gateway!), rates.gateway / rates.direct]);
    console.log(
      `  ${String(n).padStart(2)} gateway/direct ${
        (rates.gateway / rates.direct).toFixed(2)
      }; per provider, gateway path peak in flight/requests/TCP connections: ${
        run.providers.gateway.map((x) => `${x.peak}/${x.requests}/${x.connections}`).join(" ")
      }; direct path peak in flight: ${run.providers.direct.map((x) => x.peak).join(" ")}`,
    );
  }
  const worst = ratios.reduce((a, b) => (b[1] < a[1] ? b : a));
  console.log(
    `  scale-out (gateway items/s ÷ N × its N=1 items/s): lowest ${worst[1].toFixed(2)} at N=${
      worst[0]
    } — target ≥ ${SCALE_TARGET}: ${worst[1] >= SCALE_TARGET ? "met" : "NOT met"}`,
  );
  const g = last!.paths.gateway;
  const d = last!.paths.direct;
  const extra = (g.cpuSeconds / g.batches - d.cpuSeconds / d.batches) * 1000;
  console.log(
    `  CPU = this process (clients, and the gateway with its tokenizer worker) over ${navigator.hardwareConcurrency} cores; at N=${
      last!.n
    } the gateway adds ${
      extra.toFixed(2)
    } CPU ms per ${BATCH_TEXTS}-text batch over the direct path, a ceiling of about ${
      (1000 / extra * BATCH_TEXTS).toFixed(0)
    } items/s per core`,
  );
}

/** Texts of the spread job: distinct, a dozen tokens each. */
const JOB_TEXTS = Array.from(
  { length: JOB_ITEMS },
  (_, i) =>
    `passage ${i} of one spread job about ${["lanes", "quanta", "pages"][i % 3]} and vectors`,
);

/**
 * The local model's vectors of the job's and the canary's texts, keyed as a remote lane sends
 * them (its tokenizer's decoding of the tokens, special tokens left out), and its fingerprint.
 */
async function spreadTable(): Promise<{ file: string; fingerprint: string }> {
  const g = await startSynapse({ preload_models: [preload(EMBED_DIR, "tiny")] }, { log: nullLog });
  try {
    await ready(g.syn, "tiny");
    const tok = await SanitizedTokenizer.fromFile(TOKENIZER);
    const texts = [...JOB_TEXTS, ...CANARY_TEXTS];
    const table: Record<string, number[]> = {};
    let fingerprint = "";
    for (let i = 0; i < texts.length; i += 64) {
      const r = resultOf(
        await g.syn.call("embed.batch", { texts: texts.slice(i, i + 64), model: "tiny" }),
      );
      fingerprint = r.fingerprint;
      r.vectors.forEach((v: { vector: number[] }, k: number) => {
        const seq = tok.encode(texts[i + k]!, { maxTokens: 512, truncate: true });
        table[tok.decodeIds(Array.from(seq.ids), true)] = v.vector;
      });
    }
    const file = await Deno.makeTempFile({ prefix: "bench-remote-table-", suffix: ".json" });
    await Deno.writeTextFile(file, JSON.stringify(table));
    return { file, fingerprint };
  } finally {
    await g[Symbol.asyncDispose]();
  }
}

interface SpreadRun {
  n: number;
  seconds: number;
  /** Items each provider computed. */
  remote: number[];
  /** Embeddings requests each provider answered, and its most in flight at once. */
  requests: number[];
  peak: number[];
  misses: number;
  /** The job's vectors by id. */
  vectors: Map<string, number[]>;
  /** Gateway process CPU seconds during the job. */
  cpuSeconds: number;
  /** Seconds from the job's first quantum to its last: the spread phase. */
  spreadSeconds: number;
  /** Seconds from the submission to the first quantum (the job tokenizes its texts first). */
  tokenizeSeconds: number;
}

/** One job of JOB_TEXTS on `tiny` over the local lane and `n` table providers. */
async function spreadOnce(n: number, table: { file: string; fingerprint: string }) {
  const providers = n === 0 ? undefined : await spawnFixedProviders(n, {
    dims: 32,
    itemDelayMs: ITEM_DELAY_MS,
    model: "tiny",
    table: table.file,
    fingerprint: table.fingerprint,
  });
  const bases = providers?.bases ?? [];
  let g: TestSynapse | undefined;
  let timing = false;
  const quantaAt: number[] = [];
  try {
    g = await startSynapse({
      jobs: { bulk_quantum_tokens: JOB_QUANTUM_TOKENS },
      remote_providers: bases.map((base_url, i) => ({
        id: `box${i}`,
        kind: "synapse",
        base_url,
        allow_loopback: true,
        max_concurrency: MAX_CONCURRENCY,
      })),
      preload_models: [
        preload(EMBED_DIR, "tiny"),
        ...bases.map((_, i) => ({
          engine: "remote",
          provider: `box${i}`,
          model: "tiny",
          model_id: `tiny-box${i}`,
          task: "embed",
          tokenizer_path: TOKENIZER,
        })),
      ],
    }, {
      // The job's quantum lines (debug level, docs/remote.md): when its lanes computed.
      log: (_level, target, message) => {
        if (target === "synapse.jobs" && message === "job quantum" && timing) {
          quantaAt.push(performance.now());
        }
      },
    });
    const syn = g.syn;
    await ready(syn, "tiny");
    for (let i = 0; i < n; i++) await ready(syn, `tiny-box${i}`);
    const own = resultOf(await syn.call("embed.batch", { texts: ["x"], model: "tiny" }));
    if (own.fingerprint !== table.fingerprint) {
      throw new Error("the gateway's tiny has another fingerprint than the table's: a bench bug");
    }
    const runJob = async (texts: string[], key: string) => {
      const job = resultOf(
        await syn.call("embed.batch", { texts, model: "tiny", request_key: key }),
      );
      for (;;) {
        const r = resultOf(await syn.call("embed.result", { job_id: job.job_id }));
        if (r.state === "done") return { jobId: job.job_id as string, pages: r.page_count };
        if (r.state !== "queued" && r.state !== "running") {
          throw new Error(`job ${r.state}: ${JSON.stringify(r.error)}`);
        }
        await new Promise((res) => setTimeout(res, 5));
      }
    };
    // Warm-up: a small job over every lane, then the providers' counters from zero.
    await runJob(JOB_TEXTS.slice(0, 600), `warm-${n}`);
    await providers?.reset();
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    timing = true;
    const done = await runJob(JOB_TEXTS, `spread-${n}`);
    timing = false;
    const seconds = (performance.now() - t0) / 1000;
    const cpu = process.cpuUsage(cpu0);
    const stats = (await providers?.stats()) ?? [];
    const vectors = new Map<string, number[]>();
    for (let page = 0; page < done.pages; page++) {
      const r = resultOf(await syn.call("embed.result", { job_id: done.jobId, page }));
      for (const v of r.vectors) vectors.set(v.id, v.vector);
    }
    return {
      n,
      seconds,
      remote: stats.map((st) => st.items),
      requests: stats.map((st) => st.requests),
      peak: stats.map((st) => st.peakInFlight),
      misses: stats.reduce((a, st) => a + st.misses, 0),
      vectors,
      cpuSeconds: (cpu.user + cpu.system) / 1e6,
      // From the first quantum committed to the last (the job tokenizes all its texts first).
      spreadSeconds: (quantaAt[quantaAt.length - 1]! - quantaAt[0]!) / 1000,
      tokenizeSeconds: (quantaAt[0]! - t0) / 1000,
    } satisfies SpreadRun;
  } finally {
    await g?.[Symbol.asyncDispose]();
    await providers?.close();
  }
}

async function spreadJob(): Promise<void> {
  const ceiling = OFFLOAD_LOOPS_PER_LANE * 1000 / ITEM_DELAY_MS;
  console.log(
    `(c) one durable job (${JOB_ITEMS} texts, quantum cap ${JOB_QUANTUM_TOKENS} tokens) on the local tiny embedder, spread over N providers of its fingerprint (a child process, table mode: the local model's own vectors, ${ITEM_DELAY_MS} ms per input on a timer; a lane's ceiling ${OFFLOAD_LOOPS_PER_LANE} quanta in flight = ${
      ceiling.toFixed(0)
    } items/s)`,
  );
  const table = await spreadTable();
  try {
    console.log(
      "  job s: submission to done; tokenize s: to its first quantum; the rates are over the spread phase (first quantum to last)",
    );
    console.log(
      `  ${"N".padStart(2)} ${"job s".padStart(6)} ${"tokenize s".padStart(10)} ${
        "job items/s".padStart(11)
      } ${"remote items".padStart(12)} ${"remote items/s".padStart(14)} ${
        "vs N×(N=1)".padStart(10)
      } ${"vs ceiling".padStart(10)} ${"local items/s".padStart(13)} ${
        "CPU".padStart(5)
      }  identical to N=0`,
    );
    let alone: SpreadRun | undefined;
    let oneRemote: number | undefined;
    const ratios: [number, number][] = [];
    for (const n of SPREAD_NS) {
      const run = await spreadOnce(n, table);
      alone ??= run;
      const remoteItems = run.remote.reduce((a, b) => a + b, 0);
      const remoteRate = remoteItems / run.spreadSeconds;
      if (n === 1) oneRemote = remoteRate;
      let same = run.vectors.size === JOB_ITEMS && run.misses === 0;
      for (const [id, v] of alone.vectors) {
        const w = run.vectors.get(id);
        if (w === undefined || w.length !== v.length || w.some((x, k) => x !== v[k])) same = false;
      }
      const vsN = n === 0 || oneRemote === undefined ? undefined : remoteRate / (n * oneRemote);
      if (vsN !== undefined) ratios.push([n, vsN]);
      console.log(
        `  ${String(n).padStart(2)} ${run.seconds.toFixed(2).padStart(6)} ${
          run.tokenizeSeconds.toFixed(2).padStart(10)
        } ${(JOB_ITEMS / run.seconds).toFixed(0).padStart(11)} ${
          String(remoteItems).padStart(12)
        } ${remoteRate.toFixed(0).padStart(14)} ${
          (vsN === undefined ? "-" : vsN.toFixed(2)).padStart(10)
        } ${(n === 0 ? "-" : (remoteRate / (n * ceiling)).toFixed(2)).padStart(10)} ${
          ((JOB_ITEMS - remoteItems) / run.spreadSeconds).toFixed(0).padStart(13)
        } ${`${(run.cpuSeconds / run.seconds * 100).toFixed(0)}%`.padStart(5)}  ${
          same ? "yes" : `NO (${run.misses} table misses)`
        }${
          n === 0
            ? ""
            : `  per provider items/requests/peak in flight: ${
              run.remote.map((x, i) => `${x}/${run.requests[i]}/${run.peak[i]}`).join(" ")
            }`
        }`,
      );
    }
    const worst = ratios.reduce((a, b) => (b[1] < a[1] ? b : a));
    console.log(
      `  spread-job scale-out (the providers' items/s ÷ N × theirs at N=1): lowest ${
        worst[1].toFixed(2)
      } at N=${worst[0]} — target ≥ ${SCALE_TARGET}: ${
        worst[1] >= SCALE_TARGET ? "met" : "NOT met"
      }`,
    );
  } finally {
    await Deno.remove(table.file);
  }
}

console.log(`bench:remote${QUICK ? " --quick" : ""}`);
if (PARTS.has("a")) {
  await overhead();
  console.log("");
}
if (PARTS.has("b")) {
  await scaleOut();
  console.log("");
}
if (PARTS.has("c")) await spreadJob();
