/**
 * Runs the real launcher (`./ck-synapse`) as a subprocess with an isolated environment: a temp
 * HOME / XDG_DATA_HOME / XDG_CONFIG_HOME, so no test touches the real home.
 */
import assert from "node:assert/strict";
import { ROOT } from "../_helpers.ts";

/** The launcher. */
export const LAUNCHER = `${ROOT}/ck-synapse`;

/** One finished launcher run. */
export interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** A temp home: env for the child and the directory (remove it when done). */
export interface Home {
  env: Record<string, string>;
  dir: string;
}

/**
 * Makes a temp home and the environment that points the launcher at it.
 *
 * @param extraEnv Added to the environment (e.g. SYNAPSE_CONFIG_JSON).
 * @returns The env and the directory.
 */
export async function isolatedEnv(extraEnv: Record<string, string> = {}): Promise<Home> {
  const dir = await Deno.makeTempDir({ prefix: "synapse-cli-test-" });
  const env: Record<string, string> = {
    PATH: Deno.env.get("PATH") ?? "/usr/bin:/bin",
    HOME: dir,
    XDG_DATA_HOME: `${dir}/data`,
    XDG_CONFIG_HOME: `${dir}/config`,
    ...extraEnv,
  };
  const tmp = Deno.env.get("TMPDIR");
  if (tmp !== undefined) env.TMPDIR = tmp;
  return { env, dir };
}

/**
 * Runs the launcher in an existing home.
 *
 * @param home The home (its env and cwd).
 * @param args Arguments after `ck-synapse`.
 * @returns Exit code and output.
 */
export async function cliIn(home: Home, args: string[]): Promise<Run> {
  const out = await new Deno.Command(LAUNCHER, {
    args,
    env: home.env,
    clearEnv: true,
    cwd: home.dir,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const dec = new TextDecoder();
  return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}

/**
 * Runs the launcher in a fresh home, removed afterwards.
 *
 * @param args Arguments after `ck-synapse`.
 * @param extraEnv Added to the environment.
 * @returns Exit code and output.
 */
export async function cli(args: string[], extraEnv: Record<string, string> = {}): Promise<Run> {
  const home = await isolatedEnv(extraEnv);
  try {
    return await cliIn(home, args);
  } finally {
    await Deno.remove(home.dir, { recursive: true });
  }
}

/** A `serve --http 127.0.0.1:0` child whose models are ready. */
export interface Served extends AsyncDisposable {
  url: string;
  child: Deno.ChildProcess;
  /** Sends SIGTERM and resolves with the exit code and stderr. */
  stop(): Promise<{ code: number; stderr: string }>;
}

/** Options of {@link serve}. */
export interface ServeOptions {
  /**
   * What "up" means: `healthy`, `/health` answers ok (every model ready); `loaded`, every model
   * of `models.list` is `ready` or `not_certified` (loaded, refusing for want of a certificate:
   * what a probe test starts from). @default "healthy"
   */
  until?: "healthy" | "loaded";
}

/**
 * Starts `serve --http 127.0.0.1:0` in a home and waits until it is up ({@link ServeOptions}).
 *
 * @param home The home.
 * @param options What to wait for.
 * @returns The server; dispose (or stop) it.
 */
export async function serve(home: Home, options: ServeOptions = {}): Promise<Served> {
  const child = new Deno.Command(LAUNCHER, {
    args: ["serve", "--http", "127.0.0.1:0"],
    env: home.env,
    clearEnv: true,
    cwd: home.dir,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  // "listening on …" comes on stderr, with the log; stdout is kept drained.
  const stdout = new Response(child.stdout).text();
  const lines = child.stderr.pipeThrough(new TextDecoderStream()).getReader();
  let seen = "";
  const rest = async (): Promise<string> => {
    for (;;) {
      const { done, value } = await lines.read();
      if (done) return seen;
      seen += value;
    }
  };
  let stopped: Promise<{ code: number; stderr: string }> | undefined;
  let drained: Promise<string> | undefined;
  const stop = (): Promise<{ code: number; stderr: string }> => {
    stopped ??= (async () => {
      try {
        child.kill("SIGTERM");
      } catch { /* already gone */ }
      const status = await child.status;
      await stdout;
      return { code: status.code, stderr: await (drained ??= rest()) };
    })();
    return stopped;
  };
  try {
    let url: string | undefined;
    const deadline = Date.now() + 300_000; // a hang guard, not a speed limit
    while (url === undefined && Date.now() < deadline) {
      const { done, value } = await lines.read();
      if (done) break;
      seen += value;
      url = /listening on (http:\/\/127\.0\.0\.1:\d+)\n/.exec(seen)?.[1];
    }
    assert.ok(url, `no 'listening on' line; stderr: ${seen}`);
    // Keep reading stderr (the request log) so the child never blocks on a full pipe.
    drained = rest();
    for (;;) {
      if (await isUp(url, options.until ?? "healthy")) break;
      assert.ok(Date.now() < deadline, "models did not become ready");
      await new Promise((r) => setTimeout(r, 50));
    }
    return {
      url,
      child,
      stop,
      async [Symbol.asyncDispose](): Promise<void> {
        await stop();
      },
    };
  } catch (err) {
    await stop();
    throw err;
  }
}

async function isUp(url: string, until: "healthy" | "loaded"): Promise<boolean> {
  if (until === "healthy") {
    const body: { status: string } = await (await fetch(`${url}/health`)).json();
    return body.status === "ok";
  }
  const res = await fetch(`${url}/v1/ops/models.list`, { method: "POST", body: "{}" });
  const body: { result?: { models: { state: string }[] } } = await res.json();
  return body.result?.models.every((m) => m.state === "ready" || m.state === "not_certified") ??
    false;
}
