/**
 * Local security edges of the worker socket (issue 9.6): the runtime dir is refused when another
 * user could reach it (a symlink, not ours, writable by others, under a parent others can swap),
 * before anything is created in it and before the store opens; the socket is 0600 from its
 * creation; the launch nonce never appears on the worker's command line; worker output reaches
 * the log with its control characters escaped.
 */
import assert from "node:assert/strict";
import { SynapseError } from "../../lib/contract/errors.ts";
import { prepareRuntimeDir } from "../../lib/workers/runtime_dir.ts";
import { listenPrivate, WORKER_NONCE_ENV } from "../../lib/workers/spawn.ts";
import { LogTail } from "../../lib/workers/_log_tail.ts";
import { WorkerConnection } from "../../lib/workers/host.ts";
import { createSynapse } from "../../lib/synapse.ts";
import { loadConfig } from "../../lib/config/loader.ts";
import { runtimeDir, workerOptions } from "./_worker_helpers.ts";
import { MODELS } from "../_helpers.ts";

function refusal(fn: () => unknown): Record<string, unknown> {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof SynapseError, String(err));
    assert.equal(err.code, "invalid_request");
    assert.equal(err.errorClass, "permanent");
    assert.equal(err.details?.field, "worker_runtime_dir");
    return err.details!;
  }
  assert.fail("the runtime dir was accepted");
}

Deno.test("prepareRuntimeDir creates a missing dir 0700 and tightens our own 0755 one", async () => {
  await using dir = await runtimeDir();
  const fresh = `${dir.path}/a/b/workers`;
  assert.equal(prepareRuntimeDir(fresh), fresh);
  for (const p of [`${dir.path}/a`, `${dir.path}/a/b`, fresh]) {
    assert.equal(Deno.statSync(p).mode! & 0o777, 0o700, p);
  }
  const old = `${dir.path}/old`;
  Deno.mkdirSync(old);
  Deno.chmodSync(old, 0o755);
  prepareRuntimeDir(old);
  assert.equal(Deno.statSync(old).mode! & 0o777, 0o700);
});

Deno.test("prepareRuntimeDir refuses a symlink and leaves its target's mode alone", async () => {
  await using dir = await runtimeDir();
  const target = `${dir.path}/target`;
  Deno.mkdirSync(target);
  Deno.chmodSync(target, 0o755);
  Deno.symlinkSync(target, `${dir.path}/link`);
  const d = refusal(() => prepareRuntimeDir(`${dir.path}/link`));
  assert.equal(d.reason, "symlink");
  assert.equal(Deno.statSync(target).mode! & 0o777, 0o755, "the target was not chmod'ed");
});

Deno.test("prepareRuntimeDir refuses a dir writable by others, a file, and a dir of another user", async () => {
  await using dir = await runtimeDir();
  const open = `${dir.path}/open`;
  Deno.mkdirSync(open);
  Deno.chmodSync(open, 0o777);
  assert.equal(refusal(() => prepareRuntimeDir(open)).reason, "writable_by_others");
  assert.equal(Deno.statSync(open).mode! & 0o777, 0o777, "refused, not silently fixed");
  Deno.writeTextFileSync(`${dir.path}/file`, "");
  assert.equal(refusal(() => prepareRuntimeDir(`${dir.path}/file`)).reason, "not_directory");
  // Another user's directory: as root, one handed to `nobody`; otherwise root's own /var.
  let foreign = "/var";
  if (Deno.uid() === 0) {
    foreign = `${dir.path}/theirs`;
    Deno.mkdirSync(foreign, { mode: 0o700 });
    Deno.chownSync(foreign, 65534, 65534);
  }
  const d = refusal(() => prepareRuntimeDir(foreign));
  assert.equal(d.reason, "foreign_owner");
  assert.equal(d.at, foreign);
});

Deno.test("prepareRuntimeDir refuses a dir under a parent others can write without the sticky bit", async () => {
  await using dir = await runtimeDir();
  const shared = `${dir.path}/shared`;
  Deno.mkdirSync(shared);
  Deno.chmodSync(shared, 0o777);
  const d = refusal(() => prepareRuntimeDir(`${shared}/workers`));
  assert.equal(d.reason, "unsafe_parent");
  assert.equal(d.at, shared);
  // With the sticky bit (as /tmp has it) others cannot rename what is ours: accepted.
  Deno.chmodSync(shared, 0o1777);
  prepareRuntimeDir(`${shared}/workers`);
  if (Deno.uid() === 0) {
    // A parent another user owns (they could rename our dir away) is refused too.
    const theirs = `${dir.path}/theirs`;
    Deno.mkdirSync(theirs, { mode: 0o755 });
    Deno.chownSync(theirs, 65534, 65534);
    Deno.mkdirSync(`${theirs}/workers`, { mode: 0o700 });
    const p = refusal(() => prepareRuntimeDir(`${theirs}/workers`));
    assert.equal(p.reason, "unsafe_parent");
    assert.equal(p.at, theirs);
  }
});

Deno.test("boot refuses an unsafe worker_runtime_dir before it takes a lease or creates the store", async () => {
  await using dir = await runtimeDir();
  const target = `${dir.path}/target`;
  Deno.mkdirSync(target, { mode: 0o700 });
  Deno.symlinkSync(target, `${dir.path}/link`);
  const { config } = loadConfig({
    env: {
      SYNAPSE_CONFIG_JSON: JSON.stringify({
        certification: "warn",
        preload_models: [{
          engine: "llama",
          model_path: `${MODELS}/synapse-tiny-llama`,
          tokenizer_path: `${MODELS}/synapse-tiny-llama/tokenizer.json`,
          task: "generate",
          model_id: "gen",
          worker_runtime_dir: `${dir.path}/link`,
        }],
      }),
    },
    cwd: dir.path,
  });
  const storePath = `${dir.path}/store/synapse.sqlite`;
  const err = await createSynapse({ config, storePath }).then(
    () => assert.fail("booted"),
    (e) => e,
  );
  assert.ok(err instanceof SynapseError);
  assert.equal(err.code, "invalid_request");
  assert.equal(err.details?.reason, "symlink");
  assert.equal(await Deno.stat(`${dir.path}/store`).catch(() => null), null, "no store made");
});

Deno.test("listenPrivate creates the socket 0600 even under a permissive umask", async () => {
  await using dir = await runtimeDir();
  const old = Deno.umask(0);
  try {
    using listener = listenPrivate(`${dir.path}/s.sock`);
    assert.equal(Deno.statSync(`${dir.path}/s.sock`).mode! & 0o777, 0o600);
    assert.ok(listener.addr);
  } finally {
    Deno.umask(old);
  }
  assert.equal(Deno.umask(old), old, "the process umask is restored");
});

Deno.test("the launch nonce is not on a worker's command line", async () => {
  await using dir = await runtimeDir();
  const conn = await WorkerConnection.start(workerOptions(dir.path));
  try {
    // What every local user sees in `ps` (Deno refuses to read /proc/PID/* without --allow-all).
    const ps = await new Deno.Command("ps", { args: ["-o", "args=", "-p", String(conn.pid)] })
      .output();
    const cmdline = new TextDecoder().decode(ps.stdout);
    assert.match(cmdline, /llama\.ts/);
    assert.doesNotMatch(cmdline, /--nonce/);
    // The handshake succeeded, so the worker had the nonce: from the environment, which only its
    // user can read.
    const env = await new Deno.Command("cat", { args: [`/proc/${conn.pid}/environ`] }).output();
    const nonce = new RegExp(`${WORKER_NONCE_ENV}=([0-9a-f]{16})`).exec(
      new TextDecoder().decode(env.stdout),
    )?.[1];
    assert.ok(nonce !== undefined, "the nonce is in the worker's environment");
    assert.ok(!cmdline.includes(nonce), "and not on its command line");
    const st = await new Deno.Command("stat", { args: ["-c", "%a", `/proc/${conn.pid}/environ`] })
      .output();
    assert.equal(new TextDecoder().decode(st.stdout).trim(), "400");
  } finally {
    await conn.shutdown();
  }
});

Deno.test("worker output reaches the log with control characters escaped", async () => {
  const tail = new LogTail(4096);
  const lines: string[] = [];
  const bytes = new TextEncoder().encode("ok\tline\nnul\0here\x1b[31mred\rmid\u0085c1\r\nlast");
  tail.pump(ReadableStream.from([bytes]), "stderr", (l) => lines.push(l));
  await tail.ended();
  assert.deepEqual(lines, ["ok\tline", "nul\\x00here\\x1b[31mred\\x0dmid\\x85c1", "last"]);
  assert.equal(tail.text(), lines.join("\n"));
});
