/**
 * The consumer side end to end: SynapseBusClient (and the CLI's `--subc`) → the test peer (the
 * in-test daemon: route.open → route.bind, the 32-credit window, relay) → the REAL module, first
 * in this process (`runSubcModule`), then as the spawned `./ck-synapse serve --subc` process.
 * Every method; an unknown method and an unknown params field; a route that vanished (re-open
 * once and succeed); a module not registered yet (`module_warming`, retried until it works);
 * Cancel of a generation (terminal `cancelled`, the next generation starts).
 */
import assert from "node:assert/strict";
import { SubcCallError, SynapseBusClient, SynapseError } from "../../mod.ts";
import { runSubcModule } from "../../lib/doors/bus.ts";
import { loadConfig } from "../../lib/config/loader.ts";
import type { LogSink } from "../../lib/log/log.ts";
import { nullLog } from "../../lib/log/log.ts";
import type { Synapse } from "../../lib/synapse.ts";
import { SubcConsumer } from "../../lib/subc/consumer.ts";
import { MODELS, preload } from "../_helpers.ts";
import { cliIn, isolatedEnv } from "../cli/_launcher.ts";
import { startPeer } from "./_peer.ts";
import { connectWhenReady } from "./_bus_ready.ts";
import type { Peer } from "./_peer.ts";

const GEN = `${MODELS}/synapse-tiny-llama`;
/** Embed, rerank and generate, with small inline limits so that a 5-item batch is a job. */
const CONFIG = {
  certification: "warn",
  preload_models: [
    preload(`${MODELS}/synapse-tiny-embed`, "embed"),
    preload(`${MODELS}/synapse-tiny-rerank`, "rerank", { task: "rerank" }),
    {
      engine: "llama",
      model_path: GEN,
      tokenizer_path: `${GEN}/tokenizer.json`,
      task: "generate",
      model_id: "gen",
    },
  ],
  inline: { max_items: 4 },
};

/** The real module in this process, registered with `peer`. */
interface InProcessModule extends AsyncDisposable {
  synapse: Synapse;
  dir: string;
}

async function startModule(
  peer: Peer,
  options: { log?: LogSink; llamaWorkerArgs?: string[] } = {},
): Promise<InProcessModule> {
  const dir = await Deno.makeTempDir({ prefix: "synapse-consumer-peer-" });
  const env = {
    XDG_DATA_HOME: `${dir}/data`,
    XDG_CONFIG_HOME: `${dir}/config`,
    HOME: dir,
    CORTEXKIT_LEASE_ROOT: `${dir}/leases`,
    SYNAPSE_CONFIG_JSON: JSON.stringify(CONFIG),
  };
  const { config } = loadConfig({ env, cwd: dir });
  const stop = new AbortController();
  const ready = Promise.withResolvers<Synapse>();
  const running = runSubcModule({
    connectionFile: peer.connectionFile,
    synapseOptions: {
      config,
      env,
      log: options.log ?? nullLog,
      ...(options.llamaWorkerArgs ? { llamaWorkerArgs: options.llamaWorkerArgs } : {}),
    },
    signal: stop.signal,
    launchNonce: null,
    onReady: (syn) => ready.resolve(syn),
  });
  running.catch((err) => ready.reject(err));
  const synapse = await ready.promise;
  await synapse.modelsSettled;
  return {
    synapse,
    dir,
    async [Symbol.asyncDispose]() {
      stop.abort();
      await running.catch(() => {});
      await Deno.remove(dir, { recursive: true });
    },
  };
}

function assertPeerClean(peer: Peer): void {
  const s = peer.stats();
  assert.deepEqual(s.violations, []);
  assert.equal(s.overReleases, 0);
  assert.equal(s.terminals, s.requestsForwarded, "one terminal per forwarded request");
}

Deno.test("SynapseBusClient through the peer to the real module: every method answers as in-process", async () => {
  await using peer = await startPeer();
  await using m = await startModule(peer);
  await using bus = await SynapseBusClient.connect({ connectionFile: peer.connectionFile });

  const q = await bus.embedQuery({ text: "hello world", model: "embed" });
  const local = await m.synapse.call("embed.query", { text: "hello world", model: "embed" });
  assert.equal(local.kind, "result");
  const l = (local.body as { result: typeof q }).result;
  assert.deepEqual(q.vectors, l.vectors, "the same vector on both doors");
  assert.equal(q.fingerprint, l.fingerprint);

  const inline = await bus.embedBatch({ texts: ["a", "b"], model: "embed" });
  assert.ok(!("job_id" in inline) && inline.vectors.length === 2);
  const job = await bus.embedBatch({
    items: ["one", "two", "three", "four", "five"].map((text, i) => ({ id: `i${i}`, text })),
    request_key: "bus-job-1",
    model: "embed",
  });
  assert.ok("job_id" in job, JSON.stringify(job));
  let page = await bus.embedResult({ job_id: job.job_id, page: 0 });
  while (page.state !== "done") {
    assert.ok(!page.state.startsWith("failed"), JSON.stringify(page));
    await new Promise((r) => setTimeout(r, 20)); // polling a durable job, as a client does
    page = await bus.embedResult({ job_id: job.job_id, page: 0 });
  }
  assert.equal(page.items_total, 5);

  const scores = await bus.rerankScore({
    query: "q",
    candidates: ["x", "y", "z"],
    model: "rerank",
  });
  // Inline (three candidates): an envelope, not a job.
  assert.ok(!("job_id" in scores));
  assert.equal(scores.dims, 1);
  const gen = await bus.microllmOneshot({ prompt: "hello", max_tokens: 3, model: "gen" });
  assert.deepEqual([gen.n_gen, gen.finish_reason], [3, "max_tokens"]);
  const models = await bus.modelsList();
  assert.deepEqual(models.models.map((r) => r.model_id).sort(), ["embed", "gen", "rerank"]);
  const admission = await bus.admissionStatus();
  assert.equal(admission.module_generation, m.synapse.moduleGeneration);

  // Calls are counted where every door passes (Synapse.call), told apart by `door` (/metrics).
  const counted = (door: string) =>
    m.synapse.metrics.requests.samples().find((s) =>
      s.labels.op === "embed.query" && s.labels.door === door && s.labels.outcome === "ok"
    )?.value;
  assert.equal(counted("bus"), 1);
  assert.equal(counted("embedded"), 1);

  // One route carried everything; every request got exactly one terminal.
  assert.equal(peer.stats().routesOpened, 1);
  assert.equal(bus.consumer.stats.unmatchedTerminals, 0);
  assertPeerClean(peer);
  const [route] = peer.routes();
  assert.ok([...route!.terminalsByCorr.values()].every((n) => n === 1));
});

Deno.test("through the peer: unknown method → unknown_method, unknown params field → invalid_request, semantic refusal → SynapseError", async () => {
  await using peer = await startPeer();
  await using _m = await startModule(peer);
  await using bus = await SynapseBusClient.connect({ connectionFile: peer.connectionFile });
  await assert.rejects(bus.callWire("embed.nope", {}), (e) => {
    assert.ok(e instanceof SynapseError, String(e));
    assert.deepEqual([e.code, e.channel], ["unknown_method", true]);
    return true;
  });
  await assert.rejects(
    bus.call("embed.query", { text: "x", txt: "y" } as never),
    (e) => e instanceof SynapseError && e.code === "invalid_request" && /txt/.test(e.message),
  );
  await assert.rejects(
    bus.embedQuery({ text: "x", model: "no-such-model" }),
    (e) => e instanceof SynapseError && e.code === "unknown_model" && !e.channel,
  );
  // The raw route shows the Error terminal itself.
  await assert.rejects(
    bus.route.call("embed.nope", {}),
    (e) => e instanceof SubcCallError && e.code === "unknown_method" && e.origin === "module",
  );
  assertPeerClean(peer);
});

Deno.test("through the peer: a route that vanished answers unknown_channel, then stale_route_epoch; each time the client re-opens once and succeeds", async () => {
  await using peer = await startPeer();
  await using _m = await startModule(peer);
  await using consumer = await SubcConsumer.connect({ connectionFile: peer.connectionFile });
  const a = await consumer.openRoute();
  assert.deepEqual([a.channel, a.epoch], [1, 1]);
  assert.ok(await a.call("models.list"));

  // The daemon drops the route without telling the client: its slot is empty → unknown_channel.
  assert.equal(peer.closeRoute(peer.routes()[0]!.id, { goodbyeToClient: false }), true);
  const r1 = await a.call("embed.query", { text: "after unknown_channel", model: "embed" });
  assert.ok((r1 as { result: { vectors: unknown[] } }).result.vectors.length === 1);
  assert.deepEqual([a.channel, a.epoch, consumer.stats.reopens], [1, 2, 1]);
  assert.equal(peer.stats().routeOpenRefusals.unknown_channel ?? 0, 0);

  // Dropped again, and another route takes the slot at a higher epoch → stale_route_epoch.
  peer.closeRoute(peer.routes().find((r) => r.clientEpoch === 2)!.id, { goodbyeToClient: false });
  const b = await consumer.openRoute();
  assert.deepEqual([b.channel, b.epoch], [1, 3]);
  const r2 = await a.call("embed.query", { text: "after stale_route_epoch", model: "embed" });
  assert.ok((r2 as { result: { vectors: unknown[] } }).result.vectors.length === 1);
  assert.deepEqual([a.channel, a.epoch, consumer.stats.reopens], [2, 1, 2]);
  assert.deepEqual(consumer.stats.errorsByCode, { unknown_channel: 1, stale_route_epoch: 1 });
  assertPeerClean(peer);
});

Deno.test("through the peer: a module not registered yet is module_warming, retried until it registers", async () => {
  await using peer = await startPeer();
  const connecting = SynapseBusClient.connect({
    connectionFile: peer.connectionFile,
    openRetryBaseMs: 10,
    openRetryMaxMs: 50,
    openDeadlineMs: 120_000,
  });
  // Handled below; a rejection while startModule runs must not count as unhandled.
  connecting.catch(() => {});
  // Start the module only once the client has been refused twice.
  await peer.until(() => (peer.stats().routeOpenRefusals.module_warming ?? 0) >= 2);
  await using _m = await startModule(peer);
  // A retry that lands after the module registered but before it finished initialising gets
  // the module's own module_not_initialized, which subc §4 makes final for route.open (on a
  // busy machine the window is wide): the caller tries again, as connectWhenReady does.
  let bus: SynapseBusClient;
  try {
    bus = await connecting;
    const refusals = peer.stats().routeOpenRefusals.module_warming!;
    assert.equal(bus.consumer.stats.opensSent, refusals + 1);
  } catch (err) {
    if (!(err instanceof SubcCallError && err.code === "module_not_initialized")) throw err;
    bus = await connectWhenReady({ connectionFile: peer.connectionFile });
  }
  await using _bus = bus;
  assert.ok(peer.stats().routeOpenRefusals.module_warming! >= 2);
  assert.equal((await bus.modelsList()).models.length, 3);
});

/** A log sink that resolves `parked` when the llama worker waits for its CANCEL. */
function parkedWorker(): { log: LogSink; parked: Promise<void> } {
  const { promise, resolve } = Promise.withResolvers<void>();
  return {
    parked: promise,
    log: (_level, _target, message) => {
      if (message.includes("waiting for CANCEL")) resolve();
    },
  };
}

Deno.test("through the peer: cancelling a generation sends Cancel, its terminal is cancelled, and the next generation starts", async () => {
  const worker = parkedWorker();
  await using peer = await startPeer();
  await using m = await startModule(peer, {
    log: worker.log,
    llamaWorkerArgs: ["--test-wait-cancel-after", "2"],
  });
  await using bus = await SynapseBusClient.connect({ connectionFile: peer.connectionFile });
  const ac = new AbortController();
  const generating = bus.microllmOneshot(
    { prompt: "hello", max_tokens: 400, deadline_ms: 120_000, model: "gen" },
    { signal: ac.signal },
  );
  await worker.parked; // the generation runs, parked in the worker after 2 tokens
  ac.abort(new DOMException("user stop", "AbortError"));
  await assert.rejects(generating, (e) => e instanceof DOMException && e.message === "user stop");
  // The terminal came back through the peer: Error cancelled, one per request, credit released.
  assert.deepEqual(bus.consumer.stats.errorsByCode, { cancelled: 1 });
  assert.equal(peer.stats().cancelsRelayed, 1);
  assert.equal(peer.routes()[0]!.creditsInUse, 0);
  // The decode slot is free: the next generation starts and runs to its own limit.
  const next = await bus.microllmOneshot({
    prompt: "hello",
    max_tokens: 4,
    max_queue_ms: 5000,
    model: "gen",
  });
  assert.deepEqual([next.n_gen, next.finish_reason], [4, "max_tokens"]);
  assert.equal(m.synapse.admission.bytesInFlight, 0);
  assertPeerClean(peer);
});

Deno.test("the spawned ./ck-synapse serve --subc process through the peer: the typed client and the CLI's call --subc", async () => {
  await using peer = await startPeer();
  const home = await isolatedEnv({
    ...peer.launchEnv(),
    SYNAPSE_CONFIG_JSON: JSON.stringify(CONFIG),
  });
  const child = new Deno.Command(`${Deno.cwd()}/ck-synapse`, {
    args: ["serve", ...peer.launchArgs()],
    env: home.env,
    clearEnv: true,
    cwd: home.dir,
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  const exited = child.output();
  try {
    // route.open answers module_warming until the process registers: the client retries.
    await using bus = await connectWhenReady({ connectionFile: peer.connectionFile });
    const q = await bus.embedQuery({ text: "from the process", model: "embed" });
    assert.equal(q.vectors.length, 1);
    const one = await bus.rerankScore({ query: "q", candidates: ["a"], model: "rerank" });
    assert.equal("job_id" in one ? 0 : one.dims, 1);
    const gen = await bus.microllmOneshot({ prompt: "hi", max_tokens: 2, model: "gen" });
    assert.equal(gen.n_gen, 2);
    assert.equal((await bus.modelsList()).models.length, 3);
    await assert.rejects(
      bus.callWire("nope"),
      (e) => e instanceof SynapseError && e.code === "unknown_method",
    );

    // The CLI, as another process: authenticate, open a route, call, close.
    const cliHome = await isolatedEnv();
    try {
      const call = await cliIn(cliHome, [
        "call",
        "embed.query",
        '{"text":"from the CLI","model":"embed"}',
        "--subc",
        peer.connectionFile,
      ]);
      assert.equal(call.code, 0, call.stderr);
      const body = JSON.parse(call.stdout);
      assert.equal(body.result.vectors.length, 1);
      assert.equal(body.result.fingerprint, q.fingerprint);
      const unknown = await cliIn(cliHome, ["call", "nope", "--subc", peer.connectionFile]);
      assert.equal(unknown.code, 2);
      assert.equal(JSON.parse(unknown.stdout).code, "unknown_method");
      const models = await cliIn(cliHome, ["models", "list", "--subc", peer.connectionFile]);
      assert.equal(models.code, 0, models.stderr);
      assert.match(models.stdout, /^embed +embed +ready/m);
    } finally {
      await Deno.remove(cliHome.dir, { recursive: true });
    }
    // Each CLI run closed its route with a Goodbye.
    await peer.until(() => peer.routes().length === 1);
    assertPeerClean(peer);
  } finally {
    await peer.goodbyeModule();
    const out = await exited;
    await Deno.remove(home.dir, { recursive: true });
    assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
  }
});
