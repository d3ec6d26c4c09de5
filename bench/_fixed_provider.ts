/**
 * A minimal OpenAI-embeddings-shaped provider for the remote-lane benchmarks (bench/remote.ts):
 * `Deno.serve` on 127.0.0.1, an ephemeral port —
 *
 * - `GET /v1/models` → `{object: "list", data: [{id, object: "model", owned_by: "bench"}]}`;
 * - `POST /v1/embeddings` `{model, input: string | string[]}` → `{object: "list", data:
 *   [{object: "embedding", index, embedding}], model, usage: {prompt_tokens, total_tokens}}`;
 * - `GET /_bench/stats` → `{requests, peak_in_flight, connections}` and `POST /_bench/reset`
 *   (the counters below, for a provider in another process).
 *
 * Each text's vector is deterministic: a 32-bit FNV-1a hash of the text seeds a xorshift32
 * stream of `dims` values in [-1, 1), L2-normalised ({@link fixedVector}). Each text's embedding
 * is serialised once and cached, and an answer is assembled from those strings, so a repeated
 * text costs the provider almost nothing. `prompt_tokens` counts whitespace-separated words.
 *
 * **Table mode** (`table`, `fingerprint`: the spread-job benchmark): the provider answers as a
 * Synapse serving a model of that fingerprint — `GET /v1/models/{model}` →
 * `{id, object, synapse: {fingerprint, state: "ready", task: "embed", test_model: true}}`, and
 * every embeddings answer carries `x-synapse-fingerprint` — and a text found in the table (text →
 * vector: the local model's own vectors, computed by the benchmark) is answered with its vector;
 * any other text with {@link fixedVector}, counted in `misses`.
 *
 * **Delay mode**: with `itemDelayMs > 0` every embeddings request waits `itemDelayMs × inputs`
 * on a timer (`setTimeout`) before it answers — a simulated model that takes time without taking
 * CPU, so that on a small machine the benchmark measures the gateway and not the provider's
 * compute. The provider counts its embeddings requests, the peak number of them in flight at
 * once (what a gateway's `max_concurrency` lets through) and the TCP connections they came on
 * (distinct client ports: a client that keeps its connections alive opens few).
 *
 * Run as a program it starts providers in a process of their own (so that their HTTP serving
 * does not share the benchmark's thread) and prints `{"bases": [...]}` on one line; it exits
 * when its stdin closes ({@link spawnFixedProviders}):
 *
 *   deno run --allow-net=127.0.0.1 bench/_fixed_provider.ts --count 4 --dims 384 --item-delay-ms 2
 *
 * @module
 */

/** Options of {@link startFixedProvider}. */
export interface FixedProviderOptions {
  /** Width of the vectors answered. */
  dims: number;
  /** ms waited per input of an embeddings request before it answers (a timer). @default 0 */
  itemDelayMs?: number;
  /** The model id served (`/v1/models`); any other `model` is answered 404. @default "fixed" */
  model?: string;
  /** Table mode: a JSON file of `{text: vector}` answered as they are. */
  table?: string;
  /** Table mode: the fingerprint this provider reports as a Synapse provider. */
  fingerprint?: string;
}

/** A provider's counters since its start or its last reset. */
export interface FixedProviderStats {
  /** Embeddings requests answered or in flight. */
  requests: number;
  /** The most embeddings requests in flight at once. */
  peakInFlight: number;
  /** Distinct TCP connections (client ports) embeddings requests came on. */
  connections: number;
  /** Inputs embedded. */
  items: number;
  /** Table mode: inputs not in the table. */
  misses: number;
}

/** A running fixed provider (this process). */
export interface FixedProvider {
  /** `http://127.0.0.1:<port>`, without a trailing slash: the `base_url` of a provider entry. */
  base: string;
  /** The most embeddings requests that were in flight at once since the start (or last reset). */
  peakInFlight(): number;
  /** Embeddings requests answered or in flight since the start (or last reset). */
  requests(): number;
  /** Distinct TCP connections embeddings requests came on since the start (or last reset). */
  connections(): number;
  /** Zeroes the request and connection counts and the peak (requests in flight stay counted). */
  reset(): void;
  /** Stops the server (waits for requests in flight). */
  close(): Promise<void>;
}

/**
 * The deterministic, L2-normalised vector of `text`: a 32-bit FNV-1a hash seeds a xorshift32
 * stream of values in [-1, 1).
 *
 * @param text The input text.
 * @param dims Width.
 * @returns `dims` numbers of unit L2 norm.
 */
export function fixedVector(text: string, dims: number): number[] {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  let s = (h >>> 0) || 1;
  const v = new Array<number>(dims);
  let norm = 0;
  for (let k = 0; k < dims; k++) {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    const x = (s >>> 0) / 2 ** 31 - 1;
    v[k] = x;
    norm += x * x;
  }
  const inv = norm > 0 ? 1 / Math.sqrt(norm) : 0;
  for (let k = 0; k < dims; k++) v[k] = v[k]! * inv;
  return v;
}

/** Most texts whose serialised vectors are kept (a bound, so a long run does not grow without end). */
const CACHE_MAX = 50_000;

/**
 * Starts a fixed provider in this process on 127.0.0.1 (port 0: an ephemeral one).
 *
 * @param options Width, delay mode and model id.
 * @returns The provider: its base URL, its counters and `close`.
 */
export function startFixedProvider(options: FixedProviderOptions): FixedProvider {
  const { dims } = options;
  const itemDelayMs = options.itemDelayMs ?? 0;
  const model = options.model ?? "fixed";
  /** A text's serialised embedding array (`[0.1,…]`). */
  const cache = new Map<string, string>();
  const table = options.table === undefined
    ? undefined
    : new Map(Object.entries(JSON.parse(Deno.readTextFileSync(options.table)) as object));
  const fingerprint = options.fingerprint;
  let inFlight = 0;
  let peak = 0;
  let count = 0;
  let items = 0;
  let misses = 0;
  const ports = new Set<number>();
  const embeddingJson = (text: string): string => {
    let v = cache.get(text);
    if (v === undefined) {
      const row = table?.get(text);
      if (table !== undefined && row === undefined) misses++;
      v = JSON.stringify(row ?? fixedVector(text, dims));
      if (cache.size >= CACHE_MAX) cache.clear();
      cache.set(text, v);
    }
    return v;
  };
  const json = (status: number, body: unknown): Response =>
    new Response(JSON.stringify(body), {
      status,
      headers: { "content-type": "application/json" },
    });
  const error = (status: number, message: string): Response =>
    json(status, { error: { message, type: "invalid_request_error" } });
  const reset = () => {
    count = 0;
    items = 0;
    misses = 0;
    ports.clear();
    peak = inFlight;
  };

  const embeddings = async (req: Request): Promise<Response> => {
    let body: { model?: unknown; input?: unknown };
    try {
      body = await req.json();
    } catch {
      return error(400, "the body is not JSON");
    }
    if (body.model !== model) return error(404, `no model '${String(body.model)}'`);
    const input = typeof body.input === "string" ? [body.input] : body.input;
    if (!Array.isArray(input) || !input.every((t) => typeof t === "string")) {
      return error(400, "input must be a string or a list of strings");
    }
    items += input.length;
    if (itemDelayMs > 0) {
      await new Promise((r) => setTimeout(r, itemDelayMs * input.length));
    }
    let tokens = 0;
    const data = input.map((text: string, index) => {
      tokens += text.split(/\s+/).filter((w) => w !== "").length;
      return `{"object":"embedding","index":${index},"embedding":${embeddingJson(text)}}`;
    });
    const usage = JSON.stringify({ prompt_tokens: tokens, total_tokens: tokens });
    return new Response(
      `{"object":"list","data":[${data.join(",")}],"model":${
        JSON.stringify(model)
      },"usage":${usage}}`,
      {
        headers: {
          "content-type": "application/json",
          ...(fingerprint === undefined ? {} : { "x-synapse-fingerprint": fingerprint }),
        },
      },
    );
  };

  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    async (req, info) => {
      const path = new URL(req.url).pathname;
      if (req.method === "POST" && path === "/v1/embeddings") {
        count++;
        ports.add((info.remoteAddr as Deno.NetAddr).port);
        if (++inFlight > peak) peak = inFlight;
        try {
          return await embeddings(req);
        } finally {
          inFlight--;
        }
      }
      if (req.method === "GET" && path === "/v1/models") {
        return json(200, {
          object: "list",
          data: [{ id: model, object: "model", owned_by: "bench" }],
        });
      }
      if (
        req.method === "GET" && fingerprint !== undefined &&
        path === `/v1/models/${encodeURIComponent(model)}`
      ) {
        return json(200, {
          id: model,
          object: "model",
          synapse: { fingerprint, state: "ready", task: "embed", test_model: true },
        });
      }
      if (req.method === "GET" && path === "/_bench/stats") {
        return json(200, {
          requests: count,
          peak_in_flight: peak,
          connections: ports.size,
          items,
          misses,
        });
      }
      if (req.method === "POST" && path === "/_bench/reset") {
        reset();
        return json(200, {});
      }
      return error(404, `no route ${req.method} ${path}`);
    },
  );
  return {
    base: `http://127.0.0.1:${server.addr.port}`,
    peakInFlight: () => peak,
    requests: () => count,
    connections: () => ports.size,
    reset,
    close: () => server.shutdown(),
  };
}

/** Fixed providers running in a child process ({@link spawnFixedProviders}). */
export interface SpawnedFixedProviders {
  /** Each provider's base URL. */
  bases: string[];
  /** Each provider's counters (`GET /_bench/stats`). */
  stats(): Promise<FixedProviderStats[]>;
  /** Zeroes every provider's counters (`POST /_bench/reset`). */
  reset(): Promise<void>;
  /** Closes the child's stdin, so that it stops its servers and exits; waits for it. */
  close(): Promise<void>;
}

/**
 * Starts `count` fixed providers in a child Deno process of their own (this module run as a
 * program, `--allow-net=127.0.0.1`), so that on a small machine their serving does not run on
 * the benchmark's thread. Needs `--allow-run`.
 *
 * @param count Providers to start.
 * @param options Width, delay mode and model id of each.
 * @returns Their base URLs, counters and `close`.
 */
export async function spawnFixedProviders(
  count: number,
  options: FixedProviderOptions,
): Promise<SpawnedFixedProviders> {
  const args = [
    "run",
    "--allow-net=127.0.0.1",
    ...(options.table === undefined ? [] : [`--allow-read=${options.table}`]),
    new URL(import.meta.url).pathname,
    "--count",
    String(count),
    "--dims",
    String(options.dims),
    "--item-delay-ms",
    String(options.itemDelayMs ?? 0),
    ...(options.model === undefined ? [] : ["--model", options.model]),
    ...(options.table === undefined ? [] : ["--table", options.table]),
    ...(options.fingerprint === undefined ? [] : ["--fingerprint", options.fingerprint]),
  ];
  const child = new Deno.Command(Deno.execPath(), {
    args,
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let line = "";
  while (!line.includes("\n")) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`the fixed-provider process exited: ${await child.status}`);
    line += value;
  }
  reader.releaseLock();
  child.stdout.cancel().catch(() => {});
  const bases = (JSON.parse(line.split("\n")[0]!) as { bases: string[] }).bases;
  const writer = child.stdin.getWriter();
  return {
    bases,
    stats: () =>
      Promise.all(bases.map(async (b) => {
        const s = await (await fetch(`${b}/_bench/stats`)).json();
        return {
          requests: s.requests,
          peakInFlight: s.peak_in_flight,
          connections: s.connections,
          items: s.items,
          misses: s.misses,
        };
      })),
    reset: async () => {
      await Promise.all(
        bases.map(async (b) =>
          void await (await fetch(`${b}/_bench/reset`, { method: "POST" })).body?.cancel()
        ),
      );
    },
    close: async () => {
      await writer.close().catch(() => {});
      await child.status;
    },
  };
}

if (import.meta.main) {
  const flag = (name: string, dflt?: string): string => {
    const i = Deno.args.indexOf(`--${name}`);
    const v = i >= 0 ? Deno.args[i + 1] : dflt;
    if (v === undefined) throw new Error(`--${name} is required`);
    return v;
  };
  const count = Number(flag("count", "1"));
  const dims = Number(flag("dims"));
  const itemDelayMs = Number(flag("item-delay-ms", "0"));
  const model = flag("model", "fixed");
  const table = Deno.args.includes("--table") ? flag("table") : undefined;
  const fingerprint = Deno.args.includes("--fingerprint") ? flag("fingerprint") : undefined;
  const providers = Array.from(
    { length: count },
    () =>
      startFixedProvider({
        dims,
        itemDelayMs,
        model,
        ...(table === undefined ? {} : { table }),
        ...(fingerprint === undefined ? {} : { fingerprint }),
      }),
  );
  console.log(JSON.stringify({ bases: providers.map((p) => p.base) }));
  // Runs until the parent closes stdin.
  for await (const _ of Deno.stdin.readable) { /* nothing is sent */ }
  await Promise.all(providers.map((p) => p.close()));
}
