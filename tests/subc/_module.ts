/**
 * The real module in this process (`runSubcModule`: the singleton lease, the connection file,
 * the handshake, HELLO, a Synapse instance on a temp store with the generated test models), with
 * a {@link HandDaemon} on the other end of the socket.
 */
import { loadConfig } from "../../lib/config/loader.ts";
import type { LogSink } from "../../lib/log/log.ts";
import { nullLog } from "../../lib/log/log.ts";
import { runSubcModule } from "../../lib/doors/bus.ts";
import type { SubcModuleOptions } from "../../lib/doors/bus.ts";
import type { Synapse } from "../../lib/synapse.ts";
import type { ModuleSession, SessionEnd } from "../../lib/subc/module_session.ts";
import type { LaunchNonce } from "../../lib/subc/launch.ts";
import { corrCounter, HandDaemon } from "./_hand_daemon.ts";
import type { DaemonLink } from "./_hand_daemon.ts";

/** A running module and its hand daemon; disposing stops both and removes the temp dir. */
export interface TestModule extends AsyncDisposable {
  dir: string;
  daemon: HandDaemon;
  /** The module's connection, seen from the daemon (HELLO not read yet). */
  link: DaemonLink;
  /** The module's run: resolves with how it ended, or rejects with why it failed. */
  running: Promise<SessionEnd>;
  /** Resolves with the instance once the module accepts routes. */
  ready: Promise<Synapse>;
  /** Stops the module (drain, Goodbye). */
  stop: AbortController;
  session(): ModuleSession;
  /** The daemon side's corr counter. */
  corrs: { next(): bigint };
  /** The store path the module was told to use (HELLO_ACK's descriptor). */
  storePath: string;
}

/** Options of {@link startModule}. */
export interface StartModuleOptions {
  /** SYNAPSE_CONFIG_JSON of the instance. */
  config?: Record<string, unknown>;
  log?: LogSink;
  llamaWorkerArgs?: string[];
  session?: SubcModuleOptions["session"];
  launchNonce?: LaunchNonce | null;
  /** Extra environment (e.g. SUBC_MODULE_ID). */
  env?: Record<string, string>;
}

/** Starts the module against a fresh hand daemon and accepts its connection. */
export async function startModule(options: StartModuleOptions = {}): Promise<TestModule> {
  const dir = await Deno.makeTempDir({ prefix: "synapse-subc-" });
  const daemon = await HandDaemon.start(dir);
  const env: Record<string, string> = {
    XDG_DATA_HOME: `${dir}/data`,
    XDG_CONFIG_HOME: `${dir}/config`,
    HOME: dir,
    SYNAPSE_CONFIG_JSON: JSON.stringify({ certification: "warn", ...options.config }),
    ...options.env,
  };
  const { config } = loadConfig({ env, cwd: dir });
  const ready = Promise.withResolvers<Synapse>();
  const stop = new AbortController();
  let session: ModuleSession | undefined;
  const running = runSubcModule({
    connectionFile: daemon.connectionFile,
    synapseOptions: {
      config,
      env,
      log: options.log ?? nullLog,
      ...(options.llamaWorkerArgs ? { llamaWorkerArgs: options.llamaWorkerArgs } : {}),
    },
    signal: stop.signal,
    launchNonce: options.launchNonce ?? null,
    onReady: (syn) => ready.resolve(syn),
    onSession: (s) => session = s,
    ...(options.session ? { session: options.session } : {}),
  });
  running.catch(() => {});
  const link = await daemon.accept();
  return {
    dir,
    daemon,
    link,
    running,
    ready: ready.promise,
    stop,
    session: () => session!,
    corrs: corrCounter(),
    storePath: `${dir}/data/cortexkit/synapse/store.db`,
    async [Symbol.asyncDispose]() {
      stop.abort();
      await running.catch(() => {});
      await daemon[Symbol.asyncDispose]();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

/**
 * Reads HELLO, acks it with the storage descriptor of the temp store, waits until the module is
 * ready, and binds `channel` at `epoch`.
 */
export async function registerAndBind(
  m: TestModule,
  channel = 1,
  epoch = 1,
  extra: Record<string, unknown> = {},
): Promise<Synapse> {
  await m.link.hello();
  await m.link.send(m.link.ackFrame({ storage: storageFor(m.storePath) }));
  const syn = await m.ready;
  await m.link.bindReady(m.corrs, channel, epoch, extra);
  return syn;
}

/** A HELLO_ACK storage descriptor for a SQLite store at `path`. */
export function storageFor(path: string): Record<string, unknown> {
  return {
    module_id: "synapse",
    storage_namespace: "default",
    isolation: { kind: "module" },
    backend: { backend: "sqlite", path },
  };
}
