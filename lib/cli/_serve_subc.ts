/**
 * `ck-synapse serve --subc FILE [--http HOST:PORT]`: the command around the bus door
 * (lib/doors/bus.ts `runSubcModule`): stop signals, the fleet log, the HTTP door beside it, what
 * is printed and the exit code. The door itself only ties the module session to an instance.
 *
 * @module
 */
import type { CliIO } from "./_command.ts";
import { cliExitFor } from "./exit_codes.ts";
import { SHUTDOWN_GRACE_MS } from "./commands/serve.ts";
import { SynapseError } from "../contract/errors.ts";
import { runSubcModule } from "../doors/bus.ts";
import type { BoundHttpServer } from "../doors/http/server.ts";
import { logPanic } from "../log/log.ts";
import { SubcWireError } from "../subc/errors.ts";
import { subcModuleId } from "../subc/launch.ts";
import { createModuleLog } from "../synapse.ts";
import type { SynapseOptions } from "../synapse.ts";
import { SYNAPSE_VERSION } from "../version.ts";

/**
 * `serve --subc FILE [--http HOST:PORT]`: {@link runSubcModule} with SIGINT/SIGTERM as the stop
 * signal, the HTTP door attached once the module is ready, and the outcome printed.
 *
 * @param connectionFile The `--subc` path.
 * @param options `http`: also serve HTTP there; `json`: print `{module_id, pid, url?}` on stdout
 *   once ready, and a failure as `{code, message, details?}`.
 * @param io Output, stop signal and instance options.
 * @returns 0 after the daemon's Goodbye or a stop; 1 when another instance holds the singleton
 *   lease; 2 when the daemon cannot be reached, refuses the module, or goes away.
 */
export async function serveSubc(
  connectionFile: string,
  options: {
    http?: { hostname: string; port: number } | { path: string } | undefined;
    json?: boolean | undefined;
  },
  io: CliIO,
): Promise<number> {
  const stop = new AbortController();
  const onSignal = (): void => stop.abort();
  const signals: Deno.Signal[] = Deno.build.os === "windows" ? ["SIGINT"] : ["SIGINT", "SIGTERM"];
  for (const s of signals) Deno.addSignalListener(s, onSignal);
  io.signal?.addEventListener("abort", onSignal, { once: true });
  if (io.signal?.aborted) stop.abort();
  let server: BoundHttpServer | undefined;
  let owner: { key: string; file: string } | undefined;
  // The fleet log, as `serve --http` writes it (stderr and the day file); under the bus a
  // malformed CK_LOG* warns instead of refusing (subc §6). A caller's own sink (tests) replaces it.
  const injected = io.synapseOptions?.log;
  const moduleLog = injected === undefined
    ? createModuleLog({
      env: io.synapseOptions?.env,
      onInvalid: "warn",
    })
    : undefined;
  const log = moduleLog?.log ?? injected!;
  const synapseOptions: SynapseOptions = { ...io.synapseOptions, log, invalidLogEnv: "warn" };
  // An uncaught error is logged line by line under synapse.panic before the process dies of it.
  const onError = (e: ErrorEvent): void => logPanic(log, e.error ?? e.message);
  const onRejection = (e: PromiseRejectionEvent): void => logPanic(log, e.reason);
  globalThis.addEventListener("error", onError);
  globalThis.addEventListener("unhandledrejection", onRejection);
  try {
    if (options.http !== undefined) {
      const { bindHttp } = await import("../doors/http/server.ts");
      server = bindHttp(options.http);
      void server.finished.then(onSignal, onSignal);
    }
    const moduleId = subcModuleId(io.synapseOptions?.env);
    const end = await runSubcModule({
      connectionFile,
      synapseOptions,
      signal: stop.signal,
      onReady: async (synapse) => {
        // The instance started: the day file opens now (and prunes), not at the first request.
        moduleLog?.open();
        let url: string | undefined;
        if (server !== undefined) {
          const { serveOwnerKey } = await import("./commands/serve.ts");
          owner = await serveOwnerKey(io.synapseOptions?.env);
          server.attach(synapse, { ownerKey: owner.key });
          url = server.url;
          await synapse.recordServerAddress(url, owner?.file).catch((err) =>
            io.err(
              `warning: cannot record the server address beside the lease (${
                (err as Error).message
              }); other commands need --url ${url}`,
            )
          );
        }
        log("info", "synapse", "serving", {
          subc: moduleId,
          ...(url ? { url } : {}),
          pid: Deno.pid,
          version: SYNAPSE_VERSION,
          ...(moduleLog?.dayFile?.path === undefined ? {} : { log_file: moduleLog.dayFile.path }),
        });
        if (options.json) {
          io.out(JSON.stringify({ module_id: moduleId, pid: Deno.pid, ...(url ? { url } : {}) }));
        } else {
          io.err(`serving on the subc bus as '${moduleId}'${url ? `, and on ${url}` : ""}`);
        }
      },
      beforeDispose: async (synapse) => {
        if (server === undefined) return;
        synapse?.removeServerAddress();
        let timer: ReturnType<typeof setTimeout> | undefined;
        await Promise.race([
          server.shutdown(),
          new Promise((r) => timer = setTimeout(r, SHUTDOWN_GRACE_MS)),
        ]);
        clearTimeout(timer);
      },
    });
    io.err(
      end.reason === "goodbye" ? "the subc daemon said Goodbye: stopped" : "stopped (drained)",
    );
    return cliExitFor("result");
  } catch (err) {
    if (!(err instanceof SubcWireError) && !(err instanceof SynapseError)) throw err;
    const code = err instanceof SubcWireError ? err.reason : err.code;
    const details = err.details;
    if (options.json) {
      io.out(JSON.stringify({ code, message: err.message, ...(details ? { details } : {}) }));
    } else io.err(`error: ${code}: ${err.message}`);
    // subc §4: a module whose singleton lease is held exits 1.
    const leaseHeld = err instanceof SynapseError && typeof err.details?.lease === "string";
    return leaseHeld ? 1 : cliExitFor("channel");
  } finally {
    globalThis.removeEventListener("error", onError);
    globalThis.removeEventListener("unhandledrejection", onRejection);
    for (const s of signals) Deno.removeSignalListener(s, onSignal);
    io.signal?.removeEventListener("abort", onSignal);
    await server?.shutdown().catch(() => {});
    moduleLog?.dispose();
  }
}
