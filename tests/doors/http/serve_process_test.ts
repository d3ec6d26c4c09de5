/**
 * `ck-synapse serve` as a process, as an operator runs it: the port is bound before anything is
 * created in the data home (a port in use fails at once, naming the address, leaving no store);
 * an invalid `CK_LOG` refuses boot; "listening on …" and one line per request go to stderr
 * (`CK_LOG=info`) and to the day file in the fleet format, debug lines appear with
 * `CK_LOG=debug`; stdout stays empty.
 */
import assert from "node:assert/strict";
import { cliIn, isolatedEnv, LAUNCHER } from "../../cli/_launcher.ts";
import { parseLogLine } from "../../../lib/log/line.ts";
import type { Home } from "../../cli/_launcher.ts";

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.stat(path);
    return true;
  } catch {
    return false;
  }
}

/** Every file under `dir`, relative. */
async function filesUnder(dir: string, prefix = ""): Promise<string[]> {
  const out: string[] = [];
  if (!(await exists(dir))) return out;
  for await (const e of Deno.readDir(dir)) {
    if (e.isDirectory) out.push(...await filesUnder(`${dir}/${e.name}`, `${prefix}${e.name}/`));
    else out.push(`${prefix}${e.name}`);
  }
  return out;
}

Deno.test("serve on a port in use fails at once naming the address, before a store exists", async () => {
  using taken = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (taken.addr as Deno.NetAddr).port;
  const home = await isolatedEnv();
  try {
    const r = await cliIn(home, ["serve", "--http", `127.0.0.1:${port}`]);
    assert.equal(r.code, 2, r.stderr);
    assert.match(
      r.stderr,
      new RegExp(`Cannot listen on 127\\.0\\.0\\.1:${port}: the address is already in use`),
    );
    assert.equal(r.stdout, "");
    // Nothing but (at most) the launcher's empty directories in the data home: no store, no lease.
    assert.deepEqual(await filesUnder(`${home.dir}/data`), []);
  } finally {
    await Deno.remove(home.dir, { recursive: true });
  }
});

Deno.test("serve refuses an invalid CK_LOG or CK_LOG_MAX_AGE_DAYS at boot with a clear error", async () => {
  for (
    const [env, message] of [
      [
        { CK_LOG: "verbose" },
        /Cannot use CK_LOG 'verbose': 'verbose' is not a level; use off, error/,
      ],
      [
        { CK_LOG_MAX_AGE_DAYS: "-1" },
        /Cannot use CK_LOG_MAX_AGE_DAYS '-1': not a whole number of days from 0 to 36500/,
      ],
    ] as const
  ) {
    const home = await isolatedEnv(env);
    try {
      const r = await cliIn(home, ["serve", "--http", "127.0.0.1:0"]);
      assert.equal(r.code, 2, r.stderr);
      assert.match(r.stderr, message);
      assert.doesNotMatch(r.stderr, /listening on/);
      // Refused before anything was created: no store, no log file.
      assert.deepEqual(await filesUnder(`${home.dir}/data`), []);
    } finally {
      await Deno.remove(home.dir, { recursive: true });
    }
  }
});

/** A day file the server left in its logs directory. */
interface DayFile {
  name: string;
  mode: number;
  text: string;
}

/**
 * Runs `serve` with `CK_LOG=level`, makes one embed.batch request, stops it; its stderr and the
 * day files it wrote (and the logs directory's mode).
 */
async function serveOnce(
  level: string,
): Promise<{ stderr: string; stdout: string; code: number; files: DayFile[]; dirMode: number }> {
  const home: Home = await isolatedEnv({ CK_LOG: level });
  const child = new Deno.Command(LAUNCHER, {
    args: ["serve", "--http", "127.0.0.1:0"],
    env: home.env,
    clearEnv: true,
    cwd: home.dir,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const stdout = new Response(child.stdout).text();
  const reader = child.stderr.pipeThrough(new TextDecoderStream()).getReader();
  let seen = "";
  const readUntil = async (re: RegExp): Promise<RegExpExecArray> => {
    for (;;) {
      const m = re.exec(seen);
      if (m) return m;
      const { done, value } = await reader.read();
      if (done) throw new Error(`stderr ended without ${re}: ${seen}`);
      seen += value;
    }
  };
  try {
    const url = (await readUntil(/listening on (http:\/\/127\.0\.0\.1:\d+)\n/))[1]!;
    for (const hungAt = Date.now() + 300_000;;) { // a hang guard, not a speed limit
      const body = await (await fetch(`${url}/health`)).json();
      if (body.status === "ok") break;
      assert.ok(Date.now() < hungAt, "models did not become ready");
      await new Promise((r) => setTimeout(r, 50));
    }
    const res = await fetch(`${url}/v1/ops/embed.batch`, {
      method: "POST",
      body: JSON.stringify({ texts: ["first text", "second text"] }),
    });
    assert.equal(res.status, 200);
    await res.body?.cancel();
    if (level !== "warn") await readUntil(/INFO {2}synapse\.http: request method=POST[^\n]*\n/);
  } finally {
    child.kill("SIGTERM");
  }
  const status = await child.status;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    seen += value;
  }
  const logs = `${home.dir}/data/cortexkit/synapse/logs`;
  const files: DayFile[] = [];
  for (const name of await filesUnder(logs)) {
    const st = await Deno.stat(`${logs}/${name}`);
    files.push({ name, mode: st.mode! & 0o777, text: await Deno.readTextFile(`${logs}/${name}`) });
  }
  const dirMode = (await Deno.stat(logs)).mode! & 0o777;
  await Deno.remove(home.dir, { recursive: true });
  return { stderr: seen, stdout: await stdout, code: status.code, files, dirMode };
}

Deno.test("serve with CK_LOG=info logs 'listening on' and one line per request on stderr; debug adds debug lines", async () => {
  const info = await serveOnce("info");
  assert.equal(info.code, 0, info.stderr);
  assert.equal(info.stdout, "");
  assert.match(info.stderr, /^listening on http:\/\/127\.0\.0\.1:\d+$/m);
  const lines = info.stderr.split("\n").filter((l) => / synapse\.http: request /.test(l));
  assert.equal(lines.length, 1, info.stderr);
  assert.match(
    lines[0]!,
    /^\S+Z INFO {2}synapse\.http: request method=POST path=\/v1\/ops\/embed\.batch op=embed\.batch model=synapse-tiny-embed items=2 item_errors=0 tokens=\d+ queue_ms=[\d.]+ inference_ms=[\d.]+ outcome=ok status=200 total_ms=[\d.]+$/,
  );
  assert.ok(!info.stderr.includes("first text"));
  // /health polls are debug lines: not at info.
  assert.doesNotMatch(info.stderr, / DEBUG /);
  // The same lines went to the day file, in the fleet format: one file, 0600, in a 0700 dir.
  assert.equal(info.files.length, 1, JSON.stringify(info.files.map((f) => f.name)));
  const [file] = info.files;
  assert.match(file!.name, /^synapse\.\d{4}-\d{2}-\d{2}\.log$/);
  assert.equal(file!.mode, 0o600);
  assert.equal(info.dirMode, 0o700);
  const written = file!.text.split("\n");
  assert.equal(written.pop(), "", "the file ends with a newline");
  for (const l of written) parseLogLine(l);
  assert.deepEqual(written.filter((l) => / synapse\.http: request /.test(l)), lines);
  const lifecycle = written.filter((l) => / synapse: /.test(l)).map((l) => parseLogLine(l).message);
  assert.deepEqual(lifecycle, ["serving", "shutting down"]);
  const serving = parseLogLine(written.find((l) => / synapse: serving /.test(l))!);
  assert.deepEqual(serving.fields.map(([k]) => k), ["url", "pid", "version", "log_file"]);
  assert.match(serving.fields[3]![1], new RegExp(`/cortexkit/synapse/logs/${file!.name}$`));

  const debug = await serveOnce("debug");
  assert.equal(debug.code, 0, debug.stderr);
  assert.match(
    debug.stderr,
    / DEBUG synapse\.http: request start method=POST path=\/v1\/ops\/embed\.batch/,
  );
  assert.match(debug.stderr, / DEBUG synapse\.http: request method=GET path=\/health /);
  assert.match(debug.stderr, / INFO {2}synapse\.http: request method=POST/);

  // warn: no request lines at all, but the address is still announced.
  const warn = await serveOnce("warn");
  assert.equal(warn.code, 0, warn.stderr);
  assert.match(warn.stderr, /^listening on http:/m);
  assert.doesNotMatch(warn.stderr, /synapse\.http: request/);
});
