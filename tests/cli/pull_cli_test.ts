/**
 * `pull`, `ps`, `rm`, `models catalog|unload` and `cache gc|pin` through the real launcher: a
 * local directory pulled into a running server serves at once, `ps` lists it, `rm` removes it;
 * a model file pulled from a loopback HTTP server shows its download progress on a non-terminal
 * stderr and is served again after a restart; an unpinned URL is refused before any call. Every
 * child gets `CORTEXKIT_MODEL_CACHE` in its temp home, so no test writes the real model cache.
 */
import assert from "node:assert/strict";
import { cliIn, type Home, isolatedEnv, serve } from "./_launcher.ts";
import { MODELS } from "../_helpers.ts";

/** A temp home whose model cache is inside it. */
async function cacheHome(): Promise<Home & { cache: string }> {
  const home = await isolatedEnv();
  const cache = `${home.dir}/model-cache`;
  home.env.CORTEXKIT_MODEL_CACHE = cache;
  return { ...home, cache };
}

async function sha256Hex(bytes: Uint8Array): Promise<string> {
  const d = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes as Uint8Array<ArrayBuffer>));
  return [...d].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/** Files served on loopback; `slow` ones trickle out in chunks with a pause between them. */
function serveFiles(
  files: Record<string, { bytes: Uint8Array; slow?: boolean }>,
): AsyncDisposable & { base: string } {
  const ac = new AbortController();
  const server = Deno.serve({
    hostname: "127.0.0.1",
    port: 0,
    signal: ac.signal,
    onListen() {},
  }, (req) => {
    const file = files[new URL(req.url).pathname.slice(1)];
    if (file === undefined) return new Response("not found", { status: 404 });
    const from = Number(/^bytes=(\d+)-$/.exec(req.headers.get("range") ?? "")?.[1] ?? 0);
    const body = file.bytes.subarray(from);
    const headers = {
      "content-length": String(body.length),
      ...(from > 0
        ? { "content-range": `bytes ${from}-${file.bytes.length - 1}/${file.bytes.length}` }
        : {}),
    };
    if (req.method === "HEAD") return new Response(null, { headers });
    const chunk = 256 * 1024;
    let off = 0;
    const stream = new ReadableStream<Uint8Array>({
      async pull(c): Promise<void> {
        if (off >= body.length) return c.close();
        // A pause per chunk makes the download last seconds (a lower bound, whatever the machine),
        // so the 2 s progress lines have time to come.
        if (file.slow) await new Promise((r) => setTimeout(r, 60));
        c.enqueue(body.slice(off, off + chunk));
        off += chunk;
      },
    });
    return new Response(stream, { status: from > 0 ? 206 : 200, headers });
  });
  const addr = server.addr as Deno.NetAddr;
  return {
    base: `http://127.0.0.1:${addr.port}`,
    async [Symbol.asyncDispose](): Promise<void> {
      ac.abort();
      await server.finished;
    },
  };
}

interface PsRowJson {
  model_id: string;
  state: string;
  origin?: string;
  artifact_bytes?: number;
}

Deno.test("pull PATH into a running server: ready at once, ps lists it, embed uses it, rm removes it", async () => {
  const home = await cacheHome();
  try {
    await using _server = await serve(home);
    const dir = `${MODELS}/synapse-tiny-embed`;
    const pulled = await cliIn(home, ["pull", dir, "--model-id", "tiny-pulled"]);
    assert.equal(pulled.code, 0, pulled.stderr);
    assert.match(pulled.stdout, /^ready: tiny-pulled {2}[0-9a-f]{64}\n$/);
    // Which phases a poll sees depends on speed; the first is always drawn.
    assert.match(pulled.stderr, new RegExp(`^resolving ${dir}…\n`));
    // F36: the pull names the task and why.
    assert.match(
      pulled.stderr,
      /\ntask: embed \(an ONNX encoder \(not a sequence classifier\)\)\n/,
    );
    // The blobs went to $CORTEXKIT_MODEL_CACHE.
    assert.ok((await Array.fromAsync(Deno.readDir(home.cache))).length > 0);

    const [ps, psJson, embed] = await Promise.all([
      cliIn(home, ["ps"]),
      cliIn(home, ["ps", "--json"]),
      cliIn(home, ["embed", "--model", "tiny-pulled", "hello"]),
    ]);
    assert.equal(ps.code, 0, ps.stderr);
    assert.match(
      ps.stdout,
      /^MODEL +TASK +ENGINE +STATE +CERTIFIED +SIZE +RSS +LANES +LAST USED +ORIGIN\n/,
    );
    assert.match(
      ps.stdout,
      /\ntiny-pulled +embed +ort +ready +reference +396\.5 KiB +- +\S+ +(never|just now|\d+s ago) +runtime \(test model\)\n/,
    );
    const row = (JSON.parse(psJson.stdout) as { models: PsRowJson[] }).models.find((m) =>
      m.model_id === "tiny-pulled"
    );
    assert.equal(row?.origin, "runtime");
    assert.equal(row?.artifact_bytes, (await Deno.stat(`${dir}/model.onnx`)).size);
    assert.equal(embed.code, 0, embed.stderr);
    assert.match(embed.stdout, /^model +tiny-pulled( \(test model\))?\n/);

    // A model from the config (here the test model) is not removed, and still serves.
    const rmConfig = await cliIn(home, ["rm", "synapse-tiny-embed"]);
    assert.equal(rmConfig.code, 1, rmConfig.stdout);
    assert.match(rmConfig.stderr, /^error: unknown_model: Cannot remove 'synapse-tiny-embed'/);
    const rm = await cliIn(home, ["rm", "tiny-pulled"]);
    assert.equal(rm.code, 0, rm.stderr);
    assert.match(rm.stdout, /^removed tiny-pulled: freed \d/);
    const [after, embedGone] = await Promise.all([
      cliIn(home, ["ps"]),
      cliIn(home, ["embed", "--model", "tiny-pulled", "hello"]),
    ]);
    assert.doesNotMatch(after.stdout, /tiny-pulled/);
    assert.match(after.stdout, /\nsynapse-tiny-embed +embed +ort +ready /);
    assert.equal(embedGone.code, 1);
    assert.match(embedGone.stderr, /^error: unknown_model: /);

    // The catalog and the cache commands answer from the same server.
    const [catalog, installed, gc, pin] = await Promise.all([
      cliIn(home, ["models", "catalog"]),
      cliIn(home, ["models", "catalog", "--installed", "--json"]),
      cliIn(home, ["cache", "gc", "--json"]),
      cliIn(home, ["cache", "pin", `sha256:${"0".repeat(64)}`]),
    ]);
    assert.equal(catalog.code, 0, catalog.stderr);
    assert.match(catalog.stdout, /^ID +TASK +BACKENDS +SIZE +INSTALLED +DEFAULT\n/);
    assert.match(catalog.stdout, /\n\S+ +embed +.* +no +\*\n/);
    assert.equal(installed.code, 0, installed.stderr);
    assert.deepEqual(JSON.parse(installed.stdout).models, []);
    assert.equal(gc.code, 0, gc.stderr);
    assert.ok(Array.isArray(JSON.parse(gc.stdout).rows));
    assert.equal(pin.code, 1, pin.stdout);
    assert.match(
      pin.stderr,
      /^error: unknown_model: Cannot pin sha256:0{64}: it is not in the model cache/,
    );
  } finally {
    await Deno.remove(home.dir, { recursive: true });
  }
});

Deno.test("pull URL without --sha256 is refused before any call, saying why (exit 2)", async () => {
  const home = await cacheHome();
  try {
    const r = await cliIn(home, ["pull", "http://127.0.0.1:9/model.gguf"]);
    assert.equal(r.code, 2);
    assert.equal(r.stdout, "");
    assert.equal(
      r.stderr,
      "ck-synapse: Cannot pull http://127.0.0.1:9/model.gguf: give its SHA-256 with --sha256 H; " +
        "unpinned downloads are refused (a file whose digest is not known cannot be verified); " +
        "run 'ck-synapse pull --help'\n",
    );
    const catalogFlags = await cliIn(home, ["pull", "bge-small-en-v1.5", "--sha256", "ab"]);
    assert.equal(catalogFlags.code, 2);
    assert.match(catalogFlags.stderr, /the catalog pins its files/);
  } finally {
    await Deno.remove(home.dir, { recursive: true });
  }
});

Deno.test("pull URL --sha256 downloads with progress lines on a non-terminal stderr, and serves after a restart", async () => {
  const dir = `${MODELS}/synapse-tiny-llama`;
  const model = await Deno.readFile(`${dir}/model.gguf`);
  const tokenizer = await Deno.readFile(`${dir}/tokenizer.json`);
  const [modelSha, tokSha] = await Promise.all([sha256Hex(model), sha256Hex(tokenizer)]);
  await using files = serveFiles({
    "model.gguf": { bytes: model, slow: true },
    "tokenizer.json": { bytes: tokenizer },
  });
  const home = await cacheHome();
  try {
    const wrong = await cliIn(home, [
      "pull",
      `${files.base}/model.gguf`,
      "--sha256",
      "f".repeat(64),
      "--model-id",
      "tiny-gguf",
    ]);
    assert.equal(wrong.code, 1, wrong.stderr);
    assert.match(wrong.stderr, /\nerror: [a-z_]+: .*\(job \S+ failed\)\n/);

    // No server runs: the command's own embedded instance downloads and loads it.
    const r = await cliIn(home, [
      "pull",
      `${files.base}/model.gguf`,
      "--sha256",
      modelSha,
      "--tokenizer",
      `${files.base}/tokenizer.json`,
      "--tokenizer-sha256",
      tokSha,
      "--model-id",
      "tiny-gguf",
      "--task",
      "generate",
    ]);
    assert.equal(r.code, 0, r.stderr);
    // Under the default certification: "require" the GGUF loads and refuses until probed: the
    // pull ends (never waits for a `ready` that cannot come) and names the probe to run.
    assert.match(r.stdout, /^loaded: tiny-gguf {2}[0-9a-f]{64} {2}\(not certified\)\n$/);
    assert.match(
      r.stderr,
      /\nnote: tiny-gguf needs a certificate on this machine \(probe_required\): .*'ck-synapse probe run --model tiny-gguf'/,
    );
    assert.match(r.stderr, /\ntask: generate \(asked\)\n/);
    assert.match(r.stderr, new RegExp(`downloading ${files.base}/model\\.gguf…\\n`));
    assert.match(
      r.stderr,
      /\nprogress: \d+\.\d MiB \/ \d+\.\d MiB {2}\d+% {2}(\d+\.\d [KMG]iB\/s {2}ETA \d|-- \/s {2}ETA --)/,
    );
    assert.match(r.stderr, /\ndownloaded \d+\.\d MiB in \d+\.\ds \(/);
    assert.ok(!r.stderr.includes("\r") && !r.stderr.includes("\x1b["), "no bar on a non-terminal");

    // The next start loads it again from the cache (recorded in the store).
    const ps = await cliIn(home, ["ps", "--json"]);
    assert.equal(ps.code, 0, ps.stderr);
    const row = (JSON.parse(ps.stdout) as { models: PsRowJson[] }).models.find((m) =>
      m.model_id === "tiny-gguf"
    );
    assert.equal(row?.origin, "runtime");
  } finally {
    await Deno.remove(home.dir, { recursive: true });
  }
});

Deno.test("pull of an id not in the catalog is unknown_model with a hint (exit 1)", async () => {
  const home = await cacheHome();
  try {
    const r = await cliIn(home, ["pull", "no-such-model"]);
    assert.equal(r.code, 1, r.stderr);
    assert.match(
      r.stderr,
      /^error: unknown_model: Cannot download 'no-such-model': it is not in the catalog/,
    );
    assert.match(r.stderr, /\nhint: 'ck-synapse models catalog' lists the catalog ids/);
  } finally {
    await Deno.remove(home.dir, { recursive: true });
  }
});
