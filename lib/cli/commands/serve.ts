/**
 * `ck-synapse serve --http 127.0.0.1:PORT`: runs an instance with the HTTP door until SIGINT or
 * SIGTERM, then shuts down cleanly (in-flight requests finish, the instance is disposed). Once
 * bound it records its address beside its singleton lease, so CLI commands in the same data home
 * talk to it by themselves. `--subc FILE` runs it as the module on the subc bus instead
 * (`lib/doors/bus.ts`), with the HTTP door beside it when `--http` is given too.
 *
 * @module
 */
import { HTTP_ROUTES } from "../../doors/http/routes.ts";
import { cliExitFor } from "../exit_codes.ts";
import { parseCommandArgs, UsageError } from "../_command.ts";
import type { CliIO, Command } from "../_command.ts";

const USAGE = `usage: ck-synapse serve --http HOST:PORT|unix:PATH [--json]
       ck-synapse serve --subc CONNECTION_FILE [--http HOST:PORT|unix:PATH] [--json]

Serves the operations over HTTP on a loopback address (127.0.0.1, [::1], localhost), on the
routes listed below. PORT 0 picks a free port. Binds before it starts (a port in use fails at once, naming it),
prints "listening on http://HOST:PORT" on stderr once it serves, and runs until SIGINT or
SIGTERM. It logs one line per request (CK_LOG=info; debug, warn, error, off) to stderr and to
the day file <data home>/cortexkit/synapse/logs/synapse.YYYY-MM-DD.log (UTC days, kept
CK_LOG_MAX_AGE_DAYS=14 days).

Before that line it records its address beside its singleton lease (a 0600 file in the data
home), so other ck-synapse commands of this user and data home talk to it without --url; the
record goes when it stops, and a record whose server died is ignored.

Operations that change the service (model.load/unload, models.download/.cancel, models.remove,
cache.pin, cache.gc) need the owner's key over TCP: made at the first start in
<data home>/cortexkit/synapse/owner.key (0600), sent as "Authorization: Bearer KEY" or
"X-Synapse-Key: KEY"; ck-synapse commands of this user send it themselves. Queries are open
unless the config sets http.require_key_for_queries. unix:PATH serves on a unix socket (0600, in
a directory only you can write), where no key is asked: only you can connect.

  --http HOST:PORT   address to listen on, e.g. 127.0.0.1:8080; unix:/PATH for a unix socket
  --json             print {"url", "pid"} once bound instead of the "listening on" line, and a
                     start failure as {code, message}
  --subc FILE        serve as the synapse module on the subc bus, connecting to the daemon that
                     wrote FILE (alone, or beside --http); runs until the daemon says Goodbye
                     (exit 0), SIGINT/SIGTERM (drain, exit 0) or the daemon goes away (exit 2;
                     never falls back to standalone); exit 1 when another instance holds the
                     singleton lease

Routes:
${routeHelp()}`;

/**
 * The routes `serve --help` lists: one line per route of the HTTP door's table
 * (lib/doors/http/routes.ts), `METHOD PATH  summary`.
 */
export function routeHelp(): string {
  const width = Math.max(...HTTP_ROUTES.map((r) => `${r.method} ${r.path}`.length));
  return HTTP_ROUTES.map((r) => `  ${`${r.method} ${r.path}`.padEnd(width)}  ${r.summary}`)
    .join("\n");
}

/** How long a stopping server lets in-flight requests finish before it stops the engines, ms. */
export const SHUTDOWN_GRACE_MS = 10_000;

/** The `serve` command. */
export const serveCommand: Command = {
  name: "serve",
  describe: "Serve over HTTP on a loopback address, or as a module on the subc bus",
  usage: USAGE,
  run: runServe,
};

/**
 * Splits `HOST:PORT` (`[::1]:PORT` for IPv6).
 *
 * @param value The `--http` value.
 * @returns Hostname (brackets kept for IPv6) and port.
 * @throws {UsageError} when it is not `HOST:PORT` with a port in 0..65535.
 */
export function parseHostPort(value: string): { hostname: string; port: number } {
  if (value.startsWith("unix:")) {
    throw new UsageError(`Cannot use --http '${value}' here: give HOST:PORT`);
  }
  const m = /^(\[[^\]]+\]|[^:\[\]]+):(\d{1,5})$/.exec(value);
  const port = m ? Number(m[2]) : NaN;
  if (!m || port > 65535) {
    throw new UsageError(
      `Cannot use --http '${value}': give HOST:PORT, e.g. 127.0.0.1:8080 (PORT 0 picks a free port)`,
    );
  }
  return { hostname: m[1]!, port };
}

/** Where `--http` asks to listen: a loopback `HOST:PORT`, or a unix socket `unix:PATH`. */
export type HttpListen = { hostname: string; port: number } | { path: string };

/**
 * Parses `--http`: `unix:PATH` (an absolute path) or `HOST:PORT` ({@link parseHostPort}).
 *
 * @throws {UsageError} for anything else.
 */
export function parseListen(value: string): HttpListen {
  if (value.startsWith("unix:")) {
    const path = value.slice("unix:".length);
    if (!path.startsWith("/")) {
      throw new UsageError(
        `Cannot use --http '${value}': give unix:/ABSOLUTE/PATH, e.g. unix:$XDG_RUNTIME_DIR/synapse.sock`,
      );
    }
    return { path };
  }
  return parseHostPort(value);
}

/**
 * The owner key of the data home of a serving instance (made at its first start) and its file.
 *
 * @throws {SynapseError} as `loadOwnerKey` (an untrusted key file).
 */
export async function serveOwnerKey(
  env: import("../../paths.ts").EnvSource | undefined,
): Promise<{ key: string; file: string }> {
  const { loadOwnerKey, ownerKeyPath } = await import("../../doors/http/owner_key.ts");
  const file = ownerKeyPath(env);
  return { key: loadOwnerKey(file), file };
}

async function runServe(args: string[], io: CliIO): Promise<number> {
  const { values, positionals } = parseCommandArgs(args, {
    http: { type: "string" },
    subc: { type: "string" },
    json: { type: "boolean" },
  });
  if (positionals.length > 0) throw new UsageError(`Cannot serve: unexpected '${positionals[0]}'`);
  if (values.subc !== undefined) {
    // The subc door (lib/doors/bus.ts): the module session, with --http beside it if given.
    const http = values.http === undefined ? undefined : parseListen(values.http);
    const { serveSubc } = await import("../_serve_subc.ts");
    return await serveSubc(values.subc, { http, json: values.json }, io);
  }
  if (values.http === undefined) throw new UsageError("Cannot serve: give --http HOST:PORT");
  const listen = parseListen(values.http);
  const [{ createModuleLog, createSynapse, SYNAPSE_VERSION }, { bindHttp }] = await Promise.all([
    import("../../synapse.ts"),
    import("../../doors/http/server.ts"),
  ]);
  // Bind first: an address in use is refused at once, naming it, before a store is opened.
  const server = bindHttp(listen);
  let synapse: Awaited<ReturnType<typeof createSynapse>>;
  // The fleet log: r2 lines to the module's day file and to stderr (a malformed CK_LOG* is
  // refused here; docs/config.md "Environment variables"). A caller's own sink (tests) replaces it.
  let moduleLog: ReturnType<typeof createModuleLog> | undefined;
  try {
    const injected = io.synapseOptions?.log;
    moduleLog = injected === undefined
      ? createModuleLog({
        env: io.synapseOptions?.env,
      })
      : undefined;
    synapse = await createSynapse({
      ...io.synapseOptions,
      ...(moduleLog === undefined ? {} : { log: moduleLog.log }),
      waitForModels: false,
    });
  } catch (err) {
    moduleLog?.dispose();
    await server.shutdown();
    throw err;
  }
  const log = moduleLog?.log ?? io.synapseOptions?.log!;
  // An uncaught error is logged line by line under synapse.panic before the process dies of it.
  const { logPanic } = await import("../../log/log.ts");
  const onError = (e: ErrorEvent): void => logPanic(log, e.error ?? e.message);
  const onRejection = (e: PromiseRejectionEvent): void => logPanic(log, e.reason);
  globalThis.addEventListener("error", onError);
  globalThis.addEventListener("unhandledrejection", onRejection);
  // The instance started: the day file opens now (and prunes), not at the first request.
  moduleLog?.open();
  // A long-running server sweeps expired jobs and pages (docs/internals.md §8.2), and logs
  // perf lines when log.perf_interval_secs asks for them.
  synapse.startSweeper();
  synapse.startPerfSampler();
  const stop = new AbortController();
  const onSignal = (): void => stop.abort();
  let recorded: Promise<boolean> = Promise.resolve(false);
  const signals: Deno.Signal[] = Deno.build.os === "windows" ? ["SIGINT"] : ["SIGINT", "SIGTERM"];
  let owner: { key: string; file: string };
  try {
    // The owner's key (made at the first start), once the instance started.
    owner = await serveOwnerKey(io.synapseOptions?.env);
  } catch (err) {
    await server.shutdown();
    await synapse.dispose();
    moduleLog?.dispose();
    throw err;
  }
  try {
    server.attach(synapse, { ownerKey: owner.key });
    const url = server.url;
    // The line comes once the record is written: whoever waits for it can rely on other
    // commands finding this server. The line goes to stderr, with the log (stdout stays free
    // for output a caller parses); --json prints {url, pid} on stdout.
    recorded = synapse.recordServerAddress(url, owner.file).then(
      () => true,
      (err) => {
        log(
          "warn",
          "synapse",
          `Cannot record the server address beside the lease (${
            (err as Error).message
          }); other commands need --url ${url}`,
        );
        return false;
      },
    ).then((ok) => {
      log("info", "synapse", "serving", {
        url,
        pid: Deno.pid,
        version: SYNAPSE_VERSION,
        ...(moduleLog?.dayFile?.path === undefined ? {} : { log_file: moduleLog.dayFile.path }),
      });
      if (values.json) io.out(JSON.stringify({ url, pid: Deno.pid }));
      else io.err(`listening on ${url}`);
      return ok;
    });
    for (const s of signals) Deno.addSignalListener(s, onSignal);
    io.signal?.addEventListener("abort", onSignal, { once: true });
    if (io.signal?.aborted) stop.abort();
    await Promise.race([
      new Promise<void>((resolve) => stop.signal.addEventListener("abort", () => resolve())),
      server.finished,
    ]);
    // New commands go elsewhere (embedded, once the lease is free) from now on; a record still
    // being written is awaited first, or it would outlive the server.
    await recorded;
    synapse.removeServerAddress();
    log("info", "synapse", "shutting down");
    // In-flight requests get a grace period; then the engines stop (a hung worker is killed and
    // its request answered engine_crashed), so a stop never waits for a 180 s generate timeout.
    const drained = server.shutdown();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const grace = new Promise<"timeout">((r) =>
      timer = setTimeout(() => r("timeout"), SHUTDOWN_GRACE_MS)
    );
    if (await Promise.race([drained.then(() => "drained" as const), grace]) === "timeout") {
      log(
        "warn",
        "synapse",
        `requests still running after ${SHUTDOWN_GRACE_MS} ms: stopping the engines`,
      );
      await synapse.dispose();
    }
    clearTimeout(timer);
    await drained;
    return cliExitFor("result");
  } finally {
    globalThis.removeEventListener("error", onError);
    globalThis.removeEventListener("unhandledrejection", onRejection);
    for (const s of signals) Deno.removeSignalListener(s, onSignal);
    io.signal?.removeEventListener("abort", onSignal);
    await recorded;
    await server.shutdown().catch(() => {});
    await synapse.modelsSettled.catch(() => {});
    await synapse.dispose();
    moduleLog?.dispose();
  }
}
