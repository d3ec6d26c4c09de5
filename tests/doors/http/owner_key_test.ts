/**
 * The loopback door has an owner (field report F39): another local user (`nobody`, uid 65534,
 * run with setpriv when the tests run as root) cannot `model.load` a file only the owner can
 * read, `models.remove` or `cache.gc` over HTTP; queries stay open; the owner's key (0600 in the
 * data home) opens the mutating operations and the CLI sends it by itself; the unix socket door
 * is 0600; the cache is 0700/0600. Real `ck-synapse serve` processes and real sockets.
 */
import assert from "node:assert/strict";
import { MODELS, startSynapse } from "../../_helpers.ts";
import { cliIn, type Home, isolatedEnv, LAUNCHER, serve } from "../../cli/_launcher.ts";
import { OPERATIONS } from "../../../lib/ops/dispatcher.ts";
import {
  keyOfRequest,
  loadOwnerKey,
  newKey,
  ownerKeyPath,
  readOwnerKey,
  sameKey,
} from "../../../lib/doors/http/owner_key.ts";
import { serveHttp } from "../../../lib/doors/http/server.ts";

const NOBODY = 65534;
const isRoot = Deno.build.os !== "windows" && Deno.uid() === 0;

/** The operations that must need the owner's key: everything that changes the service. */
const OWNER_OPS = [
  "model.load",
  "model.unload",
  "models.download",
  "models.download.cancel",
  "models.remove",
  "cache.pin",
  "cache.gc",
  "probe.start",
  "alias.declare",
  "alias.retract",
];

Deno.test("every operation has an access decision, and every mutating one needs the owner's key", () => {
  for (const [name, op] of Object.entries(OPERATIONS)) {
    assert.ok(op.access === "open" || op.access === "owner", `${name}: ${op.access}`);
    if (op.kind === "mutate") assert.equal(op.access, "owner", name);
  }
  assert.deepEqual(
    Object.entries(OPERATIONS).filter(([, op]) => op.access === "owner").map(([n]) => n).sort(),
    [...OWNER_OPS].sort(),
  );
});

Deno.test("sameKey() compares in constant time: equal keys only, any length, none is false", () => {
  const key = newKey();
  assert.match(key, /^[A-Za-z0-9_-]{43}$/);
  assert.notEqual(newKey(), key);
  assert.equal(sameKey(key, key), true);
  assert.equal(sameKey(`${key}`.slice(0), key), true);
  assert.equal(sameKey(key.slice(0, -1), key), false); // a prefix
  assert.equal(sameKey(`${key}x`, key), false); // longer
  assert.equal(sameKey("", key), false);
  assert.equal(sameKey(undefined, key), false);
  assert.equal(sameKey(key.replace(/^./, (c) => (c === "A" ? "B" : "A")), key), false);
});

Deno.test("keyOfRequest() reads Authorization: Bearer and X-Synapse-Key", () => {
  assert.equal(keyOfRequest(new Headers({ authorization: "Bearer abc" })), "abc");
  assert.equal(keyOfRequest(new Headers({ authorization: "bearer  abc " })), "abc");
  assert.equal(keyOfRequest(new Headers({ "x-synapse-key": "abc" })), "abc");
  assert.equal(keyOfRequest(new Headers({ authorization: "Basic abc" })), undefined);
  assert.equal(keyOfRequest(new Headers()), undefined);
});

Deno.test("loadOwnerKey() makes a 0600 key once, keeps it, and refuses a file others may read", async () => {
  const dir = await Deno.makeTempDir({ prefix: "synapse-key-" });
  try {
    const env = { XDG_DATA_HOME: `${dir}/data` };
    const path = ownerKeyPath(env);
    assert.equal(path, `${dir}/data/cortexkit/synapse/owner.key`);
    const key = loadOwnerKey(path);
    assert.equal(loadOwnerKey(path), key);
    assert.equal(readOwnerKey(path), key);
    const st = await Deno.stat(path);
    assert.equal(st.mode! & 0o777, 0o600);
    assert.equal(st.uid, Deno.uid());
    Deno.chmodSync(path, 0o644);
    assert.throws(() => loadOwnerKey(path), (e: Error & { code?: string }) => {
      assert.equal(e.code, "invalid_request");
      assert.match(e.message, /mode is 0644, not 0600/);
      return true;
    });
    assert.equal(readOwnerKey(path), undefined);
    Deno.removeSync(path);
    Deno.symlinkSync(`${dir}/elsewhere`, path);
    assert.throws(() => loadOwnerKey(path), /symbolic link/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

/** Runs curl as `nobody` (setpriv), returning the status and body. */
async function curlAs(
  uid: number,
  args: string[],
): Promise<{ status: number; body: string; code: number; stderr: string }> {
  const cmd = uid === Deno.uid() ? "curl" : "setpriv";
  const pre = uid === Deno.uid()
    ? []
    : [`--reuid=${uid}`, `--regid=${uid}`, "--clear-groups", "curl"];
  const out = await new Deno.Command(cmd, {
    args: [...pre, "-sS", "-o", "-", "-w", "\n%{http_code}", ...args],
    cwd: "/",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout);
  const nl = text.lastIndexOf("\n");
  return {
    status: Number(text.slice(nl + 1)),
    body: text.slice(0, nl),
    code: out.code,
    stderr: new TextDecoder().decode(out.stderr),
  };
}

function postArgs(url: string, body: unknown, headers: string[] = []): string[] {
  return [
    "-X",
    "POST",
    "-H",
    "content-type: application/json",
    ...headers.flatMap((h) => ["-H", h]),
    "--data-binary",
    JSON.stringify(body),
    url,
  ];
}

async function listTree(root: string): Promise<string[]> {
  const out: string[] = [];
  const walk = async (d: string) => {
    let entries: Deno.DirEntry[];
    try {
      entries = await Array.fromAsync(Deno.readDir(d));
    } catch {
      return;
    }
    for (const e of entries) {
      out.push(`${d}/${e.name}`);
      if (e.isDirectory) await walk(`${d}/${e.name}`);
    }
  };
  await walk(root);
  return out.sort();
}

async function cacheHome(): Promise<Home & { cache: string }> {
  const home = await isolatedEnv();
  const cache = `${home.dir}/model-cache`;
  home.env.CORTEXKIT_MODEL_CACHE = cache;
  return { ...home, cache };
}

Deno.test({
  name:
    "F39: another local user cannot load, remove or GC over HTTP; queries stay open; the key opens them",
  ignore: false,
  async fn() {
    if (!isRoot) {
      console.log("skipped the other-user cases: they need root (to run curl as nobody)");
    }
    const home = await cacheHome();
    try {
      await using server = await serve(home);
      const keyFile = `${home.env.XDG_DATA_HOME}/cortexkit/synapse/owner.key`;
      const st = await Deno.stat(keyFile);
      assert.equal(st.mode! & 0o777, 0o600, "the key file is 0600");
      assert.equal(st.uid, Deno.uid(), "the key file is the owner's");
      const key = (await Deno.readTextFile(keyFile)).trim();
      assert.match(key, /^[A-Za-z0-9_-]{43}$/);

      // A model directory only the owner can read.
      const secret = `${home.dir}/private-model`;
      await Deno.mkdir(secret, { mode: 0o700 });
      for (const f of ["model.onnx", "tokenizer.json", "config.json"]) {
        await Deno.copyFile(`${MODELS}/synapse-tiny-embed/${f}`, `${secret}/${f}`);
        await Deno.chmod(`${secret}/${f}`, 0o600);
      }
      const caller = isRoot ? NOBODY : Deno.uid()!;
      const before = await listTree(home.cache);
      const load = { source: "path", path: secret, model_id: "stolen" };
      const ops = `${server.url}/v1/ops`;

      // Without a key: 401 in the native shape, nothing read, nothing in the cache.
      const refused = await curlAs(caller, postArgs(`${ops}/model.load`, load));
      assert.equal(refused.status, 401, refused.body + refused.stderr);
      const body = JSON.parse(refused.body);
      assert.equal(body.code, "unauthorized");
      assert.match(body.message, /Cannot call 'model\.load' over HTTP: .*owner's key/);
      assert.doesNotMatch(refused.body, /[0-9a-f]{64}/, "no digest of the private file");
      // The same answer for a path that does not exist: no existence fact either.
      const missing = await curlAs(
        caller,
        postArgs(`${ops}/model.load`, { ...load, path: `${home.dir}/no-such-dir` }),
      );
      assert.equal(missing.status, 401);
      assert.equal(missing.body, refused.body);
      assert.deepEqual(await listTree(home.cache), before, "nothing entered the cache");

      for (
        const [op, params] of [
          ["models.remove", { catalog_id: "synapse-tiny-embed" }],
          [
            "cache.gc",
            {},
          ],
          ["cache.pin", { digest: `sha256:${"0".repeat(64)}` }],
          ["model.unload", {
            model_id: "synapse-tiny-embed",
          }],
        ] as const
      ) {
        const r = await curlAs(caller, postArgs(`${ops}/${op}`, params));
        assert.equal(r.status, 401, `${op}: ${r.body}`);
        assert.equal(JSON.parse(r.body).code, "unauthorized", op);
      }
      // A wrong key is 401 too, saying so.
      const wrong = await curlAs(
        caller,
        postArgs(`${ops}/cache.gc`, {}, [`authorization: Bearer ${newKey()}`]),
      );
      assert.equal(wrong.status, 401);
      assert.equal(JSON.parse(wrong.body).code, "unauthorized");
      assert.match(JSON.parse(wrong.body).message, /not the owner's/);

      // Queries stay open to everyone.
      const embed = await curlAs(caller, postArgs(`${ops}/embed.query`, { text: "hello" }));
      assert.equal(embed.status, 200, embed.body);
      assert.equal(JSON.parse(embed.body).result.vectors.length, 1);
      const openAi = await curlAs(
        caller,
        postArgs(`${server.url}/v1/embeddings`, { input: "hello", model: "synapse-tiny-embed" }),
      );
      assert.equal(openAi.status, 200, openAi.body);

      // The model still serves: nobody's remove and unload did nothing.
      const models = await (await fetch(`${server.url}/v1/models`)).json();
      assert.ok(models.data.some((m: { id: string }) => m.id === "synapse-tiny-embed"));

      // With the key (sent by whoever holds it, even another uid): served.
      const gc = await curlAs(
        caller,
        postArgs(`${ops}/cache.gc`, {}, [`x-synapse-key: ${key}`]),
      );
      assert.equal(gc.status, 200, gc.body);
      const loaded = await fetch(`${ops}/model.load`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}` },
        body: JSON.stringify({ ...load, model_id: "owned" }),
      });
      assert.equal(loaded.status, 200, await loaded.clone().text());
      await loaded.body?.cancel();
      // The load runs as a job: wait for the model to serve (a hang guard, not a speed limit).
      for (const deadline = Date.now() + 120_000;;) {
        const s = await (await fetch(`${ops}/model.status`, {
          method: "POST",
          body: JSON.stringify({ model_id: "owned" }),
        })).json();
        if (s.result?.state === "ready") break;
        assert.ok(Date.now() < deadline, JSON.stringify(s));
        await new Promise((r) => setTimeout(r, 100));
      }
      // The copy in the cache is private: dirs 0700, files 0600.
      const tree = await listTree(home.cache);
      assert.ok(tree.some((p) => p.includes("/blobs/")), tree.join("\n"));
      for (const p of [home.cache, ...tree]) {
        const info = await Deno.lstat(p);
        const mode = info.mode! & 0o777;
        if (info.isDirectory) assert.equal(mode, 0o700, `${p}: 0${mode.toString(8)}`);
        else if (info.isFile) assert.equal(mode & 0o077, 0, `${p}: 0${mode.toString(8)}`);
      }
      if (isRoot) {
        // And nobody cannot read the cached blob.
        const blob = tree.find((p) => p.includes("/blobs/"))!;
        const cat = await new Deno.Command("setpriv", {
          args: ["--reuid=65534", "--regid=65534", "--clear-groups", "cat", blob],
          stdout: "null",
          stderr: "piped",
        }).output();
        assert.notEqual(cat.code, 0, "nobody read the cached copy");
      }
    } finally {
      await Deno.remove(home.dir, { recursive: true });
    }
  },
});

Deno.test("the CLI sends the owner key to the recorded server (auto-found or the same --url), and to no other", async () => {
  const home = await cacheHome();
  try {
    await using server = await serve(home);
    const auto = await cliIn(home, ["cache", "gc"]);
    assert.equal(auto.code, 0, auto.stderr);
    const same = await cliIn(home, ["cache", "gc", "--url", server.url]);
    assert.equal(same.code, 0, same.stderr);
    // The same port under another name is not the recorded address: no key goes there.
    const other = server.url.replace("127.0.0.1", "localhost");
    const refused = await cliIn(home, ["cache", "gc", "--url", other]);
    assert.equal(refused.code, 2, refused.stdout + refused.stderr);
    assert.match(refused.stdout + refused.stderr, /unauthorized/);
    // Queries need no key wherever they go.
    const embed = await cliIn(home, ["embed", "--url", other, "hello"]);
    assert.equal(embed.code, 0, embed.stderr);
  } finally {
    await Deno.remove(home.dir, { recursive: true });
  }
});

Deno.test("http.require_key_for_queries: every door answers 401 in its own shape without the key", async () => {
  await using t = await startSynapse({ http: { require_key_for_queries: true } });
  const key = newKey();
  await using server = serveHttp(t.syn, { port: 0, ownerKey: key });
  const base = `http://127.0.0.1:${server.port}`;
  const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
    fetch(`${base}${path}`, { method: "POST", headers, body: JSON.stringify(body) });
  const native = await post("/v1/ops/embed.query", { text: "hi" });
  assert.equal(native.status, 401);
  assert.equal(native.headers.get("www-authenticate"), 'Bearer realm="synapse"');
  assert.equal((await native.json()).code, "unauthorized");
  const openAi = await post("/v1/embeddings", { input: "hi" });
  assert.equal(openAi.status, 401);
  const oe = (await openAi.json()).error;
  assert.equal(oe.type, "authentication_error");
  assert.equal(oe.code, "unauthorized");
  const tei = await post("/embed", { inputs: "hi" });
  assert.equal(tei.status, 401);
  const te = await tei.json();
  assert.equal(te.error_type, "Validation");
  assert.match(te.error, /owner's key/);
  const ollama = await post("/api/embed", { input: "hi", model: "synapse-tiny-embed" });
  assert.equal(ollama.status, 401);
  const ol = await ollama.json();
  assert.equal(ol.code, "unauthorized");
  assert.match(ol.error, /owner's key/);
  const cohere = await post("/v1/rerank", { query: "q", documents: ["a"] });
  assert.equal(cohere.status, 401);
  assert.match(JSON.stringify(await cohere.json()), /owner's key/);
  const models = await fetch(`${base}/v1/models`);
  assert.equal(models.status, 401);
  await models.body?.cancel();
  // With the key, each is served.
  const ok = await post("/v1/ops/embed.query", { text: "hi" }, { authorization: `Bearer ${key}` });
  assert.equal(ok.status, 200);
  await ok.body?.cancel();
  const okOpenAi = await post("/v1/embeddings", { input: "hi" }, { "x-synapse-key": key });
  assert.equal(okOpenAi.status, 200);
  await okOpenAi.body?.cancel();
});

Deno.test("a door started without an owner key serves no mutating operation, whatever is sent", async () => {
  await using t = await startSynapse();
  await using server = serveHttp(t.syn, { port: 0 });
  const res = await fetch(`http://127.0.0.1:${server.port}/v1/ops/cache.gc`, {
    method: "POST",
    headers: { authorization: "Bearer anything-at-all-anything-at-all-anything" },
    body: "{}",
  });
  assert.equal(res.status, 401);
  const body = await res.json();
  assert.equal(body.code, "unauthorized");
  assert.match(body.message, /without an owner key/);
  const q = await fetch(`http://127.0.0.1:${server.port}/v1/ops/models.list`, {
    method: "POST",
    body: "{}",
  });
  assert.equal(q.status, 200);
  await q.body?.cancel();
});

Deno.test("serve --http unix:PATH: a 0600 socket nobody else can open; the CLI calls it with --url unix:PATH", async () => {
  const home = await cacheHome();
  const runDir = `${home.dir}/run`;
  await Deno.mkdir(runDir, { mode: 0o700 });
  await Deno.chmod(home.dir, 0o755); // nobody may reach the directory, the socket decides
  await Deno.chmod(runDir, 0o755);
  const sock = `${runDir}/synapse.sock`;
  const child = new Deno.Command(LAUNCHER, {
    args: ["serve", "--http", `unix:${sock}`],
    env: home.env,
    clearEnv: true,
    cwd: home.dir,
    stdin: "null",
    stdout: "null",
    stderr: "piped",
  }).spawn();
  const lines = child.stderr.pipeThrough(new TextDecoderStream()).getReader();
  let seen = "";
  const drain = (async () => {
    for (;;) {
      const { done, value } = await lines.read();
      if (done) return;
      seen += value;
    }
  })();
  try {
    const deadline = Date.now() + 300_000;
    while (!seen.includes(`listening on unix:${sock}`)) {
      assert.ok(Date.now() < deadline, `no listening line: ${seen}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    const st = await Deno.lstat(sock);
    assert.ok(st.isSocket);
    assert.equal(st.mode! & 0o777, 0o600);
    assert.equal(st.uid, Deno.uid());
    const health = await curlAs(Deno.uid()!, ["--unix-socket", sock, "http://localhost/health"]);
    assert.equal(health.code, 0, health.stderr);
    if (isRoot) {
      const denied = await curlAs(NOBODY, ["--unix-socket", sock, "http://localhost/health"]);
      assert.notEqual(denied.code, 0, `nobody connected: ${denied.body}`);
      assert.match(denied.stderr, /Permission denied|Couldn't connect|Failed to connect/i);
    } else {
      console.log("skipped the nobody-cannot-connect case: it needs root");
    }
    // The owner's CLI, by --url and through the serve record: no key needed on the socket.
    const byUrl = await cliIn(home, ["cache", "gc", "--url", `unix:${sock}`]);
    assert.equal(byUrl.code, 0, byUrl.stderr);
    // The test model may still be loading on a busy machine: model_loading is transient, retried
    // as a client does (the deadline only guards against a hang).
    let embed = await cliIn(home, ["embed", "--url", `unix:${sock}`, "hello"]);
    for (const until = Date.now() + 300_000; /model_loading/.test(embed.stderr);) {
      assert.ok(Date.now() < until, `still loading: ${embed.stderr}`);
      await new Promise((r) => setTimeout(r, 250));
      embed = await cliIn(home, ["embed", "--url", `unix:${sock}`, "hello"]);
    }
    assert.equal(embed.code, 0, embed.stderr);
    const record = JSON.parse(
      await Deno.readTextFile(
        `${home.env.XDG_DATA_HOME}/cortexkit/leases/0405529e9b7ef3b5.http.json`,
      ),
    );
    assert.equal(record.url, `unix:${sock}`);
    const found = await cliIn(home, ["cache", "gc"]); // through the serve record
    assert.equal(found.code, 0, found.stderr);
  } finally {
    child.kill("SIGTERM");
    await child.status;
    await drain;
    await Deno.remove(home.dir, { recursive: true });
  }
  assert.ok(!seen.includes("panic"), seen);
});

Deno.test("serve --http unix:PATH refuses a directory others can write", async () => {
  const home = await isolatedEnv();
  try {
    const open = `${home.dir}/open`;
    await Deno.mkdir(open);
    await Deno.chmod(open, 0o777);
    const run = await cliIn(home, ["serve", "--http", `unix:${open}/s.sock`]);
    assert.equal(run.code, 2, run.stderr);
    assert.match(run.stderr, /Cannot listen on unix:.*writable by others/);
  } finally {
    await Deno.remove(home.dir, { recursive: true });
  }
});
