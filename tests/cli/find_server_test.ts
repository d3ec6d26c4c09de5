/**
 * CLI commands find a running `ck-synapse serve` by themselves (the address it records beside
 * its singleton lease), with `--url` > `SYNAPSE_URL` > the record > an embedded instance, and
 * ignore a record whose server is dead. Real `serve` processes through the launcher.
 */
import assert from "node:assert/strict";
import { cliIn, isolatedEnv, LAUNCHER, serve } from "./_launcher.ts";
import type { Home } from "./_launcher.ts";
import { SINGLETON_LEASE_NAME } from "../../lib/lease/lease.ts";

function leaseDir(home: Home): string {
  return `${home.env.XDG_DATA_HOME}/cortexkit/leases`;
}

function recordPath(home: Home): string {
  return `${leaseDir(home)}/${SINGLETON_LEASE_NAME.replace(/\.lease$/, "")}.http.json`;
}

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.lstat(path);
    return true;
  } catch {
    return false;
  }
}

async function withHome(fn: (home: Home) => Promise<void>): Promise<void> {
  const home = await isolatedEnv();
  try {
    await fn(home);
  } finally {
    await Deno.remove(home.dir, { recursive: true });
  }
}

/** The `module_generation` a command's `models.list` answer carries. */
function generationOf(stdout: string): number {
  return JSON.parse(stdout).result.module_generation;
}

Deno.test("while serve runs, commands without --url talk to it; the record is 0600 and goes at stop", async () => {
  await withHome(async (home) => {
    const server = await serve(home);
    try {
      const record = recordPath(home);
      const info = await Deno.stat(record);
      assert.equal(info.mode! & 0o777, 0o600);
      const rec = JSON.parse(await Deno.readTextFile(record));
      assert.deepEqual(rec, {
        pid: server.child.pid,
        url: server.url,
        key_file: `${home.env.XDG_DATA_HOME}/cortexkit/synapse/owner.key`,
      });

      // Before this change every one of these failed on the singleton lease.
      const [embedded, listed, called, viaUrl] = await Promise.all([
        cliIn(home, ["embed", "--json", "hello world"]),
        cliIn(home, ["models", "list"]),
        cliIn(home, ["call", "models.list"]),
        cliIn(home, ["call", "models.list", "--url", server.url]),
      ]);
      assert.equal(embedded.code, 0, embedded.stderr);
      assert.match(JSON.parse(embedded.stdout).fingerprint, /^[0-9a-f]{64}$/);
      assert.equal(listed.code, 0, listed.stderr);
      assert.match(listed.stdout, /synapse-tiny-embed +embed +ready/);
      assert.equal(called.code, 0, called.stderr);
      // The same instance answered (one boot, one module_generation), not an embedded one.
      assert.equal(generationOf(called.stdout), generationOf(viaUrl.stdout));
    } finally {
      const { code, stderr } = await server.stop();
      assert.equal(code, 0, stderr);
    }
    assert.equal(await exists(recordPath(home)), false, "the record outlived the server");
    // With the server gone, the command runs embedded again (a later boot of the same store).
    const after = await cliIn(home, ["call", "models.list"]);
    assert.equal(after.code, 0, after.stderr);
  });
});

Deno.test("--url beats SYNAPSE_URL, which beats the recorded address", async () => {
  await withHome(async (home) => {
    const server = await serve(home);
    try {
      const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
      const dead = `http://127.0.0.1:${(l.addr as Deno.NetAddr).port}`;
      l.close();
      const envHome = { ...home, env: { ...home.env, SYNAPSE_URL: dead } };
      const [fromEnv, fromFlag] = await Promise.all([
        cliIn(envHome, ["call", "models.list"]),
        cliIn(envHome, ["call", "models.list", "--url", server.url]),
      ]);
      assert.equal(fromEnv.code, 2, fromEnv.stdout);
      const body = JSON.parse(fromEnv.stdout);
      assert.equal(body.code, "connection_failed");
      assert.equal(body.url, dead);
      assert.match(body.message, /from SYNAPSE_URL/);
      assert.equal(fromFlag.code, 0, fromFlag.stderr);
      assert.ok(Array.isArray(JSON.parse(fromFlag.stdout).result.models));
    } finally {
      await server.stop();
    }
  });
});

Deno.test("a record left by a killed server is ignored: the command runs embedded", async () => {
  await withHome(async (home) => {
    const server = await serve(home);
    server.child.kill("SIGKILL");
    await server.stop();
    // SIGKILL leaves the record; the lease died with the process.
    assert.ok(await exists(recordPath(home)), "the record should survive a SIGKILL");
    const r = await cliIn(home, ["embed", "--json", "hello"]);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    assert.equal(JSON.parse(r.stdout).test_model, true);
  });
});

Deno.test("a record others could have written (mode 0644) is ignored with a warning", async () => {
  await withHome(async (home) => {
    const server = await serve(home);
    try {
      await Deno.chmod(recordPath(home), 0o644);
      const r = await cliIn(home, ["call", "models.list"]);
      // Ignored: the command tries an embedded instance, which the live server's lease refuses.
      assert.equal(r.code, 2, r.stdout);
      assert.match(
        r.stderr,
        /warning: ignoring the server address in .*: its mode is 644, not 600/,
      );
      const body = JSON.parse(r.stdout);
      assert.equal(body.code, "module_not_initialized");
      assert.match(body.message, /holds the singleton lease/);
      assert.doesNotMatch(body.message, /serves http/);
    } finally {
      await server.stop();
    }
  });
});

Deno.test("serve --json prints {url, pid} once bound; a second serve names the first one's address", async () => {
  await withHome(async (home) => {
    const child = new Deno.Command(LAUNCHER, {
      args: ["serve", "--http", "127.0.0.1:0", "--json"],
      env: home.env,
      clearEnv: true,
      cwd: home.dir,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const stderr = new Response(child.stderr).text();
    const lines = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
    try {
      let seen = "";
      while (!seen.includes("\n")) {
        const { done, value } = await lines.read();
        if (done) break;
        seen += value;
      }
      const first = JSON.parse(seen.split("\n")[0]!);
      assert.deepEqual(Object.keys(first).sort(), ["pid", "url"]);
      assert.equal(first.pid, child.pid);
      assert.match(first.url, /^http:\/\/127\.0\.0\.1:\d+$/);
      // The line comes after the record: a script that waits for it can rely on discovery.
      assert.deepEqual(JSON.parse(await Deno.readTextFile(recordPath(home))), {
        ...first,
        key_file: `${home.env.XDG_DATA_HOME}/cortexkit/synapse/owner.key`,
      });
      const second = await cliIn(home, ["serve", "--http", "127.0.0.1:0", "--json"]);
      assert.equal(second.code, 2, second.stderr);
      const body = JSON.parse(second.stdout);
      assert.equal(body.code, "module_not_initialized");
      assert.match(body.message, new RegExp(`pid ${child.pid}\\).* serves ${first.url}`));
    } finally {
      child.kill("SIGTERM");
      await child.status;
      await lines.cancel();
      await stderr;
    }
  });
});
