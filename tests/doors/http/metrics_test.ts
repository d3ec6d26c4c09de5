/**
 * `GET /metrics`: the Prometheus text exposition format, parsed by a real parser
 * (parse-prometheus-text-format, a port of Prometheus' own text parser) and by `promtool check
 * metrics` when it is there (`scripts/setup --tests` unpacks it from Debian's prometheus
 * package), with the naming conventions checked here: `_total` counters, `_seconds` histograms
 * whose buckets end at `+Inf`, `_bytes` sizes, one HELP and one TYPE per family, valid label
 * names. Values move: calls count up by op, door and outcome, durations land on the lane that
 * served them, a refusal shows its reason, a worker's crash and restart are counted.
 */
import assert from "node:assert/strict";
import parsePrometheusTextFormat from "parse-prometheus-text-format";
import { serveHttp } from "../../../lib/doors/http/server.ts";
import { renderMetrics } from "../../../lib/ops/metrics_exposition.ts";
import { CounterFamily, HistogramFamily } from "../../../lib/log/metrics.ts";
import { loadConfig } from "../../../lib/config/loader.ts";
import { createSynapse } from "../../../lib/synapse.ts";
import type { LlamaEngine } from "../../../lib/engines/llama/llama_engine.ts";
import { nullLog } from "../../../lib/log/log.ts";
import { MODELS, resultOf, ROOT, startSynapse } from "../../_helpers.ts";
import type { TestSynapse } from "../../_helpers.ts";

interface Family {
  name: string;
  help: string;
  type: string;
  metrics: { value?: string; labels?: Record<string, string> }[];
}

interface Scrape {
  text: string;
  families: Map<string, Family>;
  /** Every sample line: name, labels, value. */
  samples: { name: string; labels: Record<string, string>; value: number }[];
}

/** Parses with the real parser (which throws on a malformed line) and by line, for the checks. */
function parse(text: string): Scrape {
  const parsed = parsePrometheusTextFormat(text) as Family[];
  const families = new Map<string, Family>();
  for (const f of parsed) {
    // The parser starts a new family whenever the name changes: a second one means the
    // family's lines were not contiguous.
    assert.ok(!families.has(f.name), `family ${f.name} appears twice (lines not grouped)`);
    families.set(f.name, f);
  }
  const samples = [];
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    assert.ok(m, `malformed sample line: ${line}`);
    const labels: Record<string, string> = {};
    for (const p of (m[2] ?? "").matchAll(/([^=,]+)="((?:[^"\\]|\\.)*)"/g)) labels[p[1]!] = p[2]!;
    const value = m[3] === "+Inf" ? Infinity : Number(m[3]);
    assert.ok(!Number.isNaN(value), `value of ${line}`);
    samples.push({ name: m[1]!, labels, value });
  }
  return { text, families, samples };
}

/** The value of the one sample of `name` whose labels include `labels`; 0 when none. */
function value(s: Scrape, name: string, labels: Record<string, string> = {}): number {
  const hits = s.samples.filter((x) =>
    x.name === name && Object.entries(labels).every(([k, v]) => x.labels[k] === v)
  );
  assert.ok(hits.length <= 1, `${name} ${JSON.stringify(labels)} matches ${hits.length} series`);
  return hits[0]?.value ?? 0;
}

/** The conventions every scrape keeps (module doc). */
function checkConventions(s: Scrape): void {
  const help = new Map<string, number>();
  const type = new Map<string, string>();
  for (const line of s.text.split("\n")) {
    const h = /^# HELP (\S+) /.exec(line);
    if (h) help.set(h[1]!, (help.get(h[1]!) ?? 0) + 1);
    const t = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (t) {
      assert.ok(!type.has(t[1]!), `TYPE ${t[1]} twice`);
      type.set(t[1]!, t[2]!);
    }
  }
  for (const [name, n] of help) assert.equal(n, 1, `HELP ${name} ${n} times`);
  assert.deepEqual([...help.keys()].sort(), [...type.keys()].sort(), "a HELP and a TYPE each");
  for (const [name, t] of type) {
    assert.ok(
      name.startsWith("synapse_") || name.startsWith("process_"),
      `${name}: synapse_ prefix`,
    );
    assert.ok(/^[a-z_][a-z0-9_]*$/.test(name), `${name}: a snake_case metric name`);
    assert.ok(!/_(ms|mb|kb|milliseconds|minutes)(_|$)/.test(name), `${name}: base units`);
    if (t === "counter") assert.ok(name.endsWith("_total"), `counter ${name} ends _total`);
    else assert.ok(!name.endsWith("_total"), `${t} ${name} does not end _total`);
    if (t === "histogram") assert.ok(name.endsWith("_seconds"), `histogram ${name}: _seconds`);
    if (/memory|heap|budget/.test(name)) assert.ok(name.endsWith("_bytes"), `${name}: _bytes`);
    assert.ok(["counter", "gauge", "histogram"].includes(t), `${name}: type ${t}`);
    assert.equal(s.families.get(name)?.type, t.toUpperCase(), `${name}: the parser's type`);
  }
  const seen = new Set<string>();
  for (const x of s.samples) {
    const family = [...type.keys()].find((n) =>
      x.name === n ||
      (type.get(n) === "histogram" && [`${n}_bucket`, `${n}_sum`, `${n}_count`].includes(x.name))
    );
    assert.ok(family, `${x.name} belongs to a declared family`);
    for (const k of Object.keys(x.labels)) {
      assert.ok(/^[a-zA-Z_][a-zA-Z0-9_]*$/.test(k) && !k.startsWith("__"), `label name ${k}`);
    }
    const key = `${x.name}${JSON.stringify(Object.entries(x.labels).sort())}`;
    assert.ok(!seen.has(key), `series ${key} twice`);
    seen.add(key);
    if (type.get(family) === "counter") assert.ok(x.value >= 0, `${x.name} ≥ 0`);
  }
  // Histograms: per series, buckets ascend, counts are cumulative, +Inf last and equal to _count.
  for (const [name, t] of type) {
    if (t !== "histogram") continue;
    const series = new Map<string, { le: number; v: number }[]>();
    for (const x of s.samples.filter((x) => x.name === `${name}_bucket`)) {
      const { le, ...rest } = x.labels;
      assert.ok(le !== undefined, `${name}_bucket has le`);
      const key = JSON.stringify(Object.entries(rest).sort());
      series.set(key, [
        ...(series.get(key) ?? []),
        { le: le === "+Inf" ? Infinity : Number(le), v: x.value },
      ]);
    }
    for (const [key, buckets] of series) {
      assert.equal(buckets.at(-1)!.le, Infinity, `${name}${key}: last bucket +Inf`);
      for (let i = 1; i < buckets.length; i++) {
        assert.ok(buckets[i]!.le > buckets[i - 1]!.le, `${name}${key}: le ascends`);
        assert.ok(buckets[i]!.v >= buckets[i - 1]!.v, `${name}${key}: cumulative`);
      }
      const labels = Object.fromEntries(JSON.parse(key) as [string, string][]);
      assert.equal(value(s, `${name}_count`, labels), buckets.at(-1)!.v, `${name}${key}: _count`);
    }
  }
}

/** promtool, when `scripts/setup --tests` could unpack it (or one is on PATH). */
async function promtool(): Promise<string | undefined> {
  for (const p of [`${ROOT}/.cache/promtool/usr/bin/promtool`, "promtool"]) {
    try {
      const out = await new Deno.Command(p, { args: ["--version"], stdout: "null", stderr: "null" })
        .output();
      if (out.success) return p;
    } catch { /* not there */ }
  }
  return undefined;
}

interface Door extends AsyncDisposable {
  t: TestSynapse;
  base: string;
  scrape(): Promise<Scrape>;
}

async function door(overrides: Record<string, unknown> = {}): Promise<Door> {
  const t = await startSynapse(overrides, { log: nullLog });
  const server = serveHttp(t.syn, { log: nullLog });
  const base = `http://127.0.0.1:${server.port}`;
  return {
    t,
    base,
    async scrape() {
      const res = await fetch(`${base}/metrics`);
      const text = await res.text();
      assert.equal(res.status, 200, text);
      assert.equal(res.headers.get("content-type"), "text/plain; version=0.0.4; charset=utf-8");
      return parse(text);
    },
    async [Symbol.asyncDispose]() {
      await server.shutdown();
      await t[Symbol.asyncDispose]();
    },
  };
}

async function post(base: string, path: string, body: unknown): Promise<Response> {
  const res = await fetch(`${base}${path}`, { method: "POST", body: JSON.stringify(body) });
  await res.body?.cancel();
  return res;
}

Deno.test("GET /metrics parses and keeps the conventions; calls, durations, tokens and refusals move", async (t) => {
  // A small byte budget: a refusal on demand.
  await using d = await door({ inline: { byte_budget: 256 } });
  const before = await d.scrape();
  checkConventions(before);
  assert.equal(value(before, "synapse_build_info"), 1);
  assert.ok(value(before, "process_resident_memory_bytes") > 1e6);
  assert.ok(value(before, "process_start_time_seconds") > 1.6e9);
  assert.equal(
    value(before, "synapse_model_state", { model: "synapse-tiny-embed", state: "ready" }),
    1,
  );
  assert.equal(
    value(before, "synapse_model_state", { model: "synapse-tiny-embed", state: "failed" }),
    0,
  );
  assert.equal(value(before, "synapse_model_loads_total", { outcome: "ok" }), 2);
  assert.equal(value(before, "synapse_admission_refusals_total", { reason: "queue_full" }), 0);
  assert.equal(
    value(before, "synapse_lane_queue_depth", { lane: "ort-interactive", class: "interactive" }),
    0,
  );

  // Two embed queries and a rerank over HTTP, one embed query in process, one refusal.
  for (const text of ["first query", "second query"]) {
    assert.equal((await post(d.base, "/v1/ops/embed.query", { text })).status, 200);
  }
  const reranked = await post(d.base, "/v1/ops/rerank.score", {
    query: "what is synapse",
    candidates: ["a local inference service", "a fruit"],
  });
  assert.equal(reranked.status, 200);
  // An API-shaped route is counted as the operation it maps onto, through the same door.
  assert.equal((await post(d.base, "/v1/embeddings", { input: "fourth" })).status, 200);
  const inProcess = resultOf(await d.t.syn.call("embed.query", { text: "third query" }));
  // Bytes held by other work leave too little for the next request: queue_full.
  const held = d.t.syn.admission.admit({
    bytes: 200,
    deadlineMs: 30000,
    maxQueueMs: 5000,
    queueClass: "bulk",
  });
  const refused = await post(d.base, "/v1/ops/embed.query", { text: "y".repeat(100) });
  held.release();
  assert.equal(refused.status, 429);
  assert.equal((await post(d.base, "/v1/ops/no.such", {})).status, 404);

  const after = await d.scrape();
  checkConventions(after);
  const req = (op: string, door: string, outcome: string) =>
    value(after, "synapse_requests_total", { op, door, outcome });
  assert.equal(req("embed.query", "http", "ok"), 2);
  assert.equal(req("embed.query", "embedded", "ok"), 1);
  assert.equal(req("rerank.score", "http", "ok"), 1);
  assert.equal(req("embed.batch", "http", "ok"), 1);
  assert.equal(req("embed.query", "http", "queue_full"), 1);
  // A method the dispatcher does not serve is `unknown`, never the caller's string.
  assert.equal(req("unknown", "http", "unknown_method"), 1);
  assert.ok(!after.text.includes("no.such"));
  assert.equal(value(after, "synapse_admission_refusals_total", { reason: "queue_full" }), 1);

  await t.step("durations land on the lane and class that served them", () => {
    const where = { op: "embed.query", class: "interactive", lane: "ort-interactive" };
    // 3 served, 1 refused at admission on that lane.
    assert.equal(value(after, "synapse_request_duration_seconds_count", where), 4);
    assert.ok(value(after, "synapse_request_duration_seconds_sum", where) > 0);
    assert.equal(value(after, "synapse_request_queue_seconds_count", where), 3);
    assert.equal(
      value(after, "synapse_request_duration_seconds_count", {
        op: "unknown",
        class: "none",
        lane: "none",
      }),
      1,
    );
    assert.equal(
      value(after, "synapse_request_duration_seconds_count", {
        op: "rerank.score",
        lane: "ort-interactive",
      }),
      1,
    );
  });

  await t.step("tokens count what the results say", () => {
    const embedTokens = value(after, "synapse_tokens_total", {
      op: "embed.query",
      model: "synapse-tiny-embed",
    });
    assert.ok(embedTokens >= inProcess.real_token_counts[0] * 3, String(embedTokens));
    assert.ok(
      value(after, "synapse_tokens_total", { op: "rerank.score", model: "synapse-tiny-rerank" }) >
        0,
    );
    assert.ok(
      value(after, "synapse_lane_tokens_per_second", {
        lane: "ort-interactive",
        class: "interactive",
      }) > 0,
    );
  });

  await t.step("the HTTP door counts its answers by status", () => {
    assert.ok(value(after, "synapse_http_responses_total", { code: "200" }) >= 4);
    assert.equal(value(after, "synapse_http_responses_total", { code: "429" }), 1);
    assert.equal(value(after, "synapse_http_responses_total", { code: "404" }), 1);
  });

  await t.step("counters never go down between scrapes", async () => {
    const again = await d.scrape();
    for (const x of before.samples) {
      const fam = [...before.families.values()].find((f) =>
        x.name === f.name || (f.type === "HISTOGRAM" && x.name.startsWith(`${f.name}_`))
      )!;
      if (fam.type !== "COUNTER" && fam.type !== "HISTOGRAM") continue;
      if (fam.type === "HISTOGRAM" && x.name.endsWith("_sum")) continue;
      assert.ok(value(again, x.name, x.labels) >= x.value, `${x.name} went down`);
    }
    // The scrapes themselves are HTTP answers.
    assert.ok(
      value(again, "synapse_http_responses_total", { code: "200" }) >
        value(after, "synapse_http_responses_total", { code: "200" }),
    );
  });

  await t.step("promtool check metrics finds nothing to lint", async () => {
    const tool = await promtool();
    if (tool === undefined) {
      console.warn("promtool not found (scripts/setup --tests unpacks it): step ignored");
      return;
    }
    const child = new Deno.Command(tool, {
      args: ["check", "metrics"],
      stdin: "piped",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const w = child.stdin.getWriter();
    await w.write(new TextEncoder().encode(after.text));
    await w.close();
    const out = await child.output();
    const said = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
    assert.equal(out.code, 0, said);
    assert.equal(said.trim(), "", said);
  });
});

Deno.test("HEAD /metrics answers the headers alone; other methods are 405", async () => {
  await using d = await door();
  const head = await fetch(`${d.base}/metrics`, { method: "HEAD" });
  assert.equal(head.status, 200);
  assert.equal(head.headers.get("content-type"), "text/plain; version=0.0.4; charset=utf-8");
  assert.equal(await head.text(), "");
  // The length of the scrape it stands for, not 0 (the counters move between scrapes).
  assert.ok(Number(head.headers.get("content-length")) > 1000, head.headers.get("content-length")!);
  const posted = await post(d.base, "/metrics", {});
  assert.equal(posted.status, 405);
  assert.equal(posted.headers.get("allow"), "GET");
  // A web page may not read it either: the door's Origin check holds.
  const res = await fetch(`${d.base}/metrics`, { headers: { origin: "https://example.com" } });
  await res.body?.cancel();
  assert.equal(res.status, 403);
});

Deno.test("a llama worker's crash and restart are counted, and its state and memory shown", async () => {
  const dir = await Deno.makeTempDir({ prefix: "synapse-metrics-" });
  const gguf = `${MODELS}/synapse-tiny-llama`;
  const env = {
    XDG_DATA_HOME: `${dir}/data`,
    XDG_CONFIG_HOME: `${dir}/config`,
    HOME: dir,
    SYNAPSE_CONFIG_JSON: JSON.stringify({
      certification: "warn",
      preload_models: [{
        engine: "llama",
        model_path: gguf,
        tokenizer_path: `${gguf}/tokenizer.json`,
        task: "generate",
        model_id: "gen",
        max_tokens: 512,
      }],
    }),
  };
  const { config } = loadConfig({ env, cwd: dir });
  const syn = await createSynapse({ config, env, log: nullLog });
  try {
    const gen = () => syn.call("microllm.oneshot", { prompt: "hello", max_tokens: 2 });
    resultOf(await gen());
    const first = parse(await renderMetrics(syn));
    checkConventions(first);
    assert.equal(value(first, "synapse_worker_crashes_total", { model: "gen" }), 0);
    assert.equal(value(first, "synapse_worker_restarts_total", { model: "gen" }), 0);
    assert.equal(value(first, "synapse_worker_quarantined", { model: "gen" }), 0);
    assert.ok(value(first, "synapse_worker_resident_memory_bytes", { model: "gen" }) > 1e6);
    assert.equal(
      value(first, "synapse_model_state", { model: "gen", engine: "llama", state: "ready" }),
      1,
    );
    assert.ok(value(first, "synapse_tokens_total", { op: "microllm.oneshot", model: "gen" }) > 0);
    assert.equal(
      value(first, "synapse_request_duration_seconds_count", {
        op: "microllm.oneshot",
        class: "decode",
        lane: "llama-gen",
      }),
      1,
    );

    const engine = syn.registry.resolve("gen", "generate").interactive.engine as LlamaEngine;
    engine.worker.killForTest();
    // The death is noticed on the worker's socket; wait for it (hang guard: 60 s).
    const until = Date.now() + 60_000;
    while (engine.health().worker?.total_crashes === 0) {
      assert.ok(Date.now() < until, "the killed worker's crash was never recorded");
      await new Promise((r) => setTimeout(r, 20));
    }
    resultOf(await gen());
    const second = parse(await renderMetrics(syn));
    checkConventions(second);
    assert.equal(value(second, "synapse_worker_crashes_total", { model: "gen" }), 1);
    assert.equal(value(second, "synapse_worker_restarts_total", { model: "gen" }), 1);
  } finally {
    await syn.dispose();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("CounterFamily and HistogramFamily: counters refuse to go down; buckets are cumulative", () => {
  const c = new CounterFamily(["reason"]);
  c.inc({ reason: "queue_full" });
  c.inc({ reason: "queue_full" }, 2);
  assert.deepEqual(c.samples(), [{ labels: { reason: "queue_full" }, value: 3 }]);
  assert.throws(() => c.inc({ reason: "queue_full" }, -1), RangeError);
  assert.throws(() => c.inc({ reason: "queue_full" }, NaN), RangeError);
  const h = new HistogramFamily(["op"], [0.1, 1]);
  h.observe({ op: "a" }, 0.05);
  h.observe({ op: "a" }, 0.1);
  h.observe({ op: "a" }, 0.5);
  h.observe({ op: "a" }, 5);
  h.observe({ op: "a" }, -1);
  const [s] = h.samples();
  assert.deepEqual(s!.cumulative, [2, 3]);
  assert.equal(s!.count, 4);
  assert.ok(Math.abs(s!.sum - 5.65) < 1e-9);
  assert.throws(() => new HistogramFamily([], [1, 1]), RangeError);
});
