/**
 * The real `./ck-synapse serve --subc FILE` process against a hand-driven daemon: it registers,
 * opens its store where HELLO_ACK says, serves a route; a daemon that vanishes mid-request makes
 * it exit 2 loudly with the store intact; the daemon's Goodbye makes it exit 0; a second module
 * exits 1 at the singleton lease without connecting.
 */
import assert from "node:assert/strict";
import { nullLog } from "../../lib/log/log.ts";
import { createSynapse } from "../../lib/synapse.ts";
import { FrameType } from "../../lib/subc/bus_envelope.ts";
import { isolatedEnv, LAUNCHER } from "../cli/_launcher.ts";
import type { Home } from "../cli/_launcher.ts";
import { bodyOf, corrCounter, HandDaemon } from "./_hand_daemon.ts";
import type { DaemonLink } from "./_hand_daemon.ts";
import { storageFor } from "./_module.ts";

/** The module process; `done` collects its exit status and output. */
function spawnModule(home: Home, connectionFile: string): Promise<Deno.CommandOutput> {
  return new Deno.Command(LAUNCHER, {
    args: ["serve", "--subc", connectionFile],
    env: home.env,
    clearEnv: true,
    cwd: home.dir,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn().output();
}

/** Registers the module, binds channel 1 and waits until embed.query is served (models loaded). */
async function serveOne(link: DaemonLink, storePath: string): Promise<void> {
  const corrs = corrCounter();
  const { hello } = await link.hello();
  assert.equal(hello.manifest.module_id, "synapse");
  await link.send(link.ackFrame({ storage: storageFor(storePath) }));
  await link.bindReady(corrs, 1, 1);
  for (let corr = 1n;; corr++) {
    await link.send(
      link.requestFrame(1, 1, corr, { method: "embed.query", params: { text: "hello" } }),
    );
    const reply = await link.reply(1, corr);
    assert.equal(reply.type, FrameType.Response);
    const body = bodyOf(reply);
    if (body.result.error?.code === "model_loading") {
      // Not a timing assert: the process loads its models in the background.
      await new Promise((r) => setTimeout(r, 50));
      continue;
    }
    assert.equal(body.result.dims > 0, true, JSON.stringify(body));
    return;
  }
}

Deno.test("ck-synapse serve --subc: a daemon that vanishes mid-request makes it exit 2 loudly; the store opens afterwards", async () => {
  const home = await isolatedEnv();
  await using daemon = await HandDaemon.start(home.dir);
  const storePath = `${home.dir}/data/cortexkit/synapse/store.db`;
  try {
    const done = spawnModule(home, daemon.connectionFile);
    const link = await daemon.accept();
    await serveOne(link, storePath);
    await link.send(
      link.requestFrame(1, 1, 999n, {
        method: "embed.batch",
        params: { items: Array.from({ length: 32 }, (_, i) => `text ${i}`) },
      }),
    );
    link.close();
    const out = await done;
    const stderr = new TextDecoder().decode(out.stderr);
    assert.equal(out.code, 2, stderr);
    assert.match(
      stderr,
      /error: daemon_gone: Cannot serve on the subc bus: the subc daemon went away/,
    );
    assert.match(stderr, /not falling back to standalone/);
    // The store is intact: it opens, one generation later.
    const next = await createSynapse({
      env: home.env,
      storePath,
      leaseRoot: `${home.dir}/data/cortexkit/leases`,
      waitForModels: false,
      log: nullLog,
    });
    try {
      assert.equal(next.moduleGeneration, 2);
    } finally {
      await next.dispose();
    }
  } finally {
    await Deno.remove(home.dir, { recursive: true });
  }
});

Deno.test("ck-synapse serve --subc: the daemon's Goodbye ends it with exit 0; a second module exits 1 at the lease; the fleet log has its lines", async () => {
  // Under the bus a malformed CK_LOG means its default and one warning, not a refusal (subc §6).
  const home = await isolatedEnv({ CK_LOG: "verbose" });
  await using daemon = await HandDaemon.start(home.dir);
  try {
    const done = spawnModule(home, daemon.connectionFile);
    const link = await daemon.accept();
    await serveOne(link, `${home.dir}/data/cortexkit/synapse/store.db`);
    const second = await spawnModule(home, daemon.connectionFile);
    const secondErr = new TextDecoder().decode(second.stderr);
    assert.equal(second.code, 1, secondErr);
    assert.match(secondErr, /singleton lease/);
    assert.equal(daemon.links.length, 1, "the second module never connected");
    await link.send({ type: FrameType.Goodbye });
    const out = await done;
    const stderr = new TextDecoder().decode(out.stderr);
    assert.equal(out.code, 0, stderr);
    assert.match(stderr, /serving on the subc bus as 'synapse'/);
    assert.match(stderr, /the subc daemon said Goodbye: stopped/);
    assert.match(stderr, /CK_LOG 'verbose'/);
    await link.closed;
    const day = new Date().toISOString().slice(0, 10);
    const file = await Deno.readTextFile(
      `${home.dir}/data/cortexkit/synapse/logs/synapse.${day}.log`,
    ).catch(async () => {
      // The run may have crossed midnight UTC: the lines are in one of the two files.
      const [name] = [...Deno.readDirSync(`${home.dir}/data/cortexkit/synapse/logs`)]
        .map((e) => e.name).filter((n) => n.endsWith(".log")).sort().reverse();
      return await Deno.readTextFile(`${home.dir}/data/cortexkit/synapse/logs/${name}`);
    });
    assert.match(file, / INFO {2}synapse\.subc: request op=embed\.query .*outcome=ok channel=1/);
    assert.match(file, / INFO {2}synapse: serving subc=synapse pid=\d+/);
  } finally {
    await Deno.remove(home.dir, { recursive: true });
  }
});

Deno.test("ck-synapse serve --subc beside --http: both doors serve one instance; the daemon's Goodbye stops both", async () => {
  const home = await isolatedEnv();
  await using daemon = await HandDaemon.start(home.dir);
  try {
    const child = new Deno.Command(LAUNCHER, {
      args: ["serve", "--subc", daemon.connectionFile, "--http", "127.0.0.1:0", "--json"],
      env: home.env,
      clearEnv: true,
      cwd: home.dir,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const stderr = new Response(child.stderr).text();
    const lines = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
    const link = await daemon.accept();
    await serveOne(link, `${home.dir}/data/cortexkit/synapse/store.db`);
    // --json: one line once ready, {module_id, pid, url}.
    let text = "";
    while (!text.includes("\n")) {
      const { value, done } = await lines.read();
      if (done) break;
      text += value;
    }
    const ready = JSON.parse(text.split("\n")[0]!);
    assert.equal(ready.module_id, "synapse");
    assert.equal(ready.pid, child.pid);
    const health = await (await fetch(`${ready.url}/health`)).json();
    assert.equal(health.status, "ok", JSON.stringify(health));
    const res = await fetch(`${ready.url}/v1/ops/embed.query`, {
      method: "POST",
      body: JSON.stringify({ text: "hello" }),
    });
    assert.equal(res.status, 200);
    assert.ok((await res.json()).result.dims > 0);
    await link.send({ type: FrameType.Goodbye });
    const status = await child.status;
    assert.equal(status.code, 0, await stderr);
    await lines.cancel();
    await assert.rejects(fetch(`${ready.url}/health`), TypeError, "the HTTP door stopped too");
  } finally {
    await Deno.remove(home.dir, { recursive: true });
  }
});
